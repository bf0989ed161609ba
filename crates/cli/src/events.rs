//! `nbraid events [--follow] [--json]`: the daemon's events (see the daemon's
//! `events`) over its control socket: the latest it kept, then with `--follow`
//! each one as it happens, until the daemon stops or the command is interrupted.

use crate::ops::{Client, Target};
use anyhow::{bail, Result};
use clap::Args;
use nbraid_control::Request;
use serde_json::Value;
use std::io::Write;

#[derive(Args)]
pub struct EventsArgs {
    #[command(flatten)]
    target: Target,
    /// Keep printing events as they happen.
    #[arg(long)]
    follow: bool,
    /// One JSON object per line instead of text.
    #[arg(long)]
    json: bool,
}

pub fn run(a: &EventsArgs) -> Result<String> {
    let mut c = Client::connect(&a.target)?;
    let reply = c.call(&Request::Events { follow: a.follow })?;
    let kept = reply["events"].as_array().cloned().unwrap_or_default();
    let lines: String = kept.iter().map(|e| line(e, a.json)).collect();
    if !a.follow {
        return Ok(lines);
    }
    let mut out = std::io::stdout().lock();
    out.write_all(lines.as_bytes())?;
    out.flush()?;
    while let Some(v) = c.next_line()? {
        if let Some(n) = v["lagged"].as_u64() {
            eprintln!("nbraid events: {n} events were missed (this terminal read too slowly)");
            continue;
        }
        out.write_all(line(&v, a.json).as_bytes())?;
        out.flush()?;
    }
    bail!("the daemon closed the connection (stopped?)")
}

/// One event as printed: its JSON, or `TIME EVENT VOLUME [MEMBER]: DETAIL`.
fn line(e: &Value, as_json: bool) -> String {
    if as_json {
        let mut e = e.clone();
        if let Some(o) = e.as_object_mut() {
            o.remove("v");
        }
        return format!("{e}\n");
    }
    let time = e["time_unix_ms"]
        .as_u64()
        .map_or_else(String::new, utc_text);
    let member = e["member"]
        .as_str()
        .map_or_else(String::new, |m| format!(" {m}"));
    format!(
        "{time} {} {}{member}: {}\n",
        e["event"].as_str().unwrap_or("?"),
        e["volume"].as_str().unwrap_or("?"),
        e["detail"].as_str().unwrap_or("")
    )
}

/// `2026-11-27T22:04:05Z` from milliseconds since the epoch (UTC, proleptic Gregorian).
fn utc_text(unix_ms: u64) -> String {
    let secs = unix_ms / 1000;
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    // Days to a civil date (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn times_are_utc_dates() {
        assert_eq!(utc_text(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc_text(1_795_817_045_000), "2026-11-27T22:04:05Z");
        assert_eq!(utc_text(951_782_400_000), "2000-02-29T00:00:00Z");
    }

    #[test]
    fn an_event_reads_as_one_line() {
        let e = json!({"v": 1, "event": "member-failed", "volume": "db", "member": "d1",
                       "detail": "member d1 failed", "time_unix_ms": 0});
        assert_eq!(
            line(&e, false),
            "1970-01-01T00:00:00Z member-failed db d1: member d1 failed\n"
        );
        assert!(!line(&e, true).contains("\"v\""));
    }
}
