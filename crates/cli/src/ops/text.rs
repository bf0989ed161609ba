//! Sizes and counts as every command prints them (`nbraid check` too: one formatter).

use serde_json::Value;

/// Sizes as every command prints them (`nbraid check` too): one formatter.
pub(super) fn bytes(n: u64) -> String {
    nbraid_config::format_size(n)
}

/// A count of the status reply as text ("-" where the daemon sent none). A JSON value's own
/// `Display` ignores widths, which left the table's columns unaligned.
pub(super) fn count(v: &Value) -> String {
    v.as_u64().map_or_else(|| "-".into(), |n| n.to_string())
}

/// Seconds since the Unix epoch as "2026-12-05 23:42:39 UTC": whole years, then whole
/// months, counted off the days.
pub(super) fn utc(unix_s: u64) -> String {
    let leap = |y: u64| (y.is_multiple_of(4) && !y.is_multiple_of(100)) || y.is_multiple_of(400);
    let (mut days, secs) = (unix_s / 86_400, unix_s % 86_400);
    let mut year = 1970;
    while days >= 365 + u64::from(leap(year)) {
        days -= 365 + u64::from(leap(year));
        year += 1;
    }
    let feb = 28 + u64::from(leap(year));
    let lengths = [31, feb, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    let mut month = 1;
    for len in lengths {
        if days < len {
            break;
        }
        days -= len;
        month += 1;
    }
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    format!("{year}-{month:02}-{:02} {h:02}:{m:02}:{s:02} UTC", days + 1)
}

/// "42s", "5 min", "2 h".
pub(super) fn ago_text(s: u64) -> String {
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{} min", s / 60),
        _ => format!("{} h", s / 3600),
    }
}

/// How far a pass is, "37%"; at a position but with no total yet (a resumed pass before its
/// run sets it), the bytes done: a share of 0 bytes read as millions of percent.
pub(super) fn share_text(position: Option<&Value>, total: Option<&Value>) -> String {
    let at = position.and_then(Value::as_u64).unwrap_or(0);
    match total.and_then(Value::as_u64).unwrap_or(0) {
        0 if at > 0 => format!("at {}", bytes(at)),
        total => format!("{:.0}%", at as f64 * 100.0 / total.max(1) as f64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_dates_are_civil() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc(1_798_846_959), "2027-01-01 23:42:39 UTC");
        assert_eq!(utc(1_798_761_599), "2026-12-31 23:59:59 UTC");
    }
}
