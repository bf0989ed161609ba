//! The server's bounds in `[daemon]`: connections, request memory, timeouts. Each has a safe
//! default; a bad value is reported at its place with what would be valid.

use super::error::{ErrorKind, Problem};
use super::raw::{RawDaemon, RawSize};
use super::size::{format_size_exact, no_unit, parse_size, SIZE_UNITS_HELP};
use serde_spanned::Spanned;
use std::time::Duration;

/// Most connections `max_connections` may allow.
pub const MAX_CONNECTIONS_MAX: u64 = 65536;

/// Least request memory, of the server or of one connection: one maximal NBD payload (32 MiB;
/// the daemon asserts at compile time that this is its NBD payload limit).
pub const IN_FLIGHT_MEMORY_MIN: u64 = 32 << 20;

/// The server's bounds as `[daemon]` sets them, the defaults for what it leaves out. Plain
/// values: the daemon hands them to its NBD server (whose `Limits` has the same defaults; a
/// daemon test keeps the two equal).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerLimits {
    /// Connections served at once (past their handshake); a client beyond them is refused.
    pub max_connections: usize,
    /// Connections negotiating at once, apart from the served ones; a new one beyond them
    /// closes the one negotiating longest.
    pub max_handshakes: usize,
    /// `in_flight_memory`: request memory of all connections together.
    pub in_flight_bytes: u64,
    /// `in_flight_memory_per_connection`: request memory of one connection.
    pub in_flight_bytes_per_connection: u64,
    /// A client that has not reached the transmission phase by then is disconnected.
    pub handshake_timeout: Duration,
    /// An idle connection is closed after this long (`None`: never).
    pub idle_timeout: Option<Duration>,
    /// A client that moves no byte of a reply or request for this long is disconnected.
    pub stall_timeout: Duration,
    /// `payload_min_bytes_per_s`: a write payload must arrive within `stall_timeout` plus its
    /// length at this rate.
    pub payload_min_bytes_per_s: u64,
}

impl Default for ServerLimits {
    fn default() -> Self {
        ServerLimits {
            max_connections: 128,
            max_handshakes: 64,
            in_flight_bytes: 512 << 20,
            in_flight_bytes_per_connection: 128 << 20,
            handshake_timeout: Duration::from_secs(10),
            idle_timeout: None,
            stall_timeout: Duration::from_secs(60),
            payload_min_bytes_per_s: 256 << 10,
        }
    }
}

/// Most connections `max_handshakes` may allow.
pub const MAX_HANDSHAKES_MAX: u64 = 65536;

/// Least and most of `payload_min_bytes_per_s`.
pub const PAYLOAD_MIN_RATE_RANGE: (u64, u64) = (1 << 10, 1 << 30);

/// Most request memory the server may be given.
pub const IN_FLIGHT_MEMORY_MAX: u64 = 1 << 40;

/// What duration fields accept, for error messages.
pub const DURATION_HELP: &str =
    "write a number with a unit: ms, s, min (or m), h, d, e.g. \"30s\", \"10min\", \"1.5h\"";

/// Parses a duration such as `"30s"`, `"10min"`, `"1.5h"`, `"500ms"` (whole milliseconds).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let num_end = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(num_end);
    if num.is_empty() {
        return Err(format!("\"{text}\" is not a duration; {DURATION_HELP}"));
    }
    let unit_ms: u64 = match unit.trim_start().to_ascii_lowercase().as_str() {
        "ms" => 1,
        "s" | "sec" | "secs" => 1000,
        "m" | "min" | "mins" => 60_000,
        "h" | "hour" | "hours" => 3_600_000,
        "d" | "day" | "days" => 86_400_000,
        "" => return Err(format!("\"{text}\" has no unit; {DURATION_HELP}")),
        u => {
            return Err(format!(
                "\"{text}\" has an unknown unit \"{u}\"; {DURATION_HELP}"
            ))
        }
    };
    let (int_part, frac_part) = num.split_once('.').unwrap_or((num, ""));
    let digits = format!("{int_part}{frac_part}");
    if int_part.is_empty() || frac_part.contains('.') || digits.len() > 18 {
        return Err(format!("\"{text}\" is not a duration; {DURATION_HELP}"));
    }
    let digits: u128 = digits
        .parse()
        .map_err(|_| format!("\"{text}\" is not a duration; {DURATION_HELP}"))?;
    let scale = 10u128.pow(frac_part.len() as u32);
    let ms = digits * u128::from(unit_ms);
    if !ms.is_multiple_of(scale) {
        return Err(format!("\"{text}\" is not a whole number of milliseconds"));
    }
    let ms = u64::try_from(ms / scale).map_err(|_| format!("\"{text}\" is too long"))?;
    Ok(Duration::from_millis(ms))
}

/// A duration for people, as the config would write it: `30s`, `10min`, `1500ms`.
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    for (unit, n) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("min", 60_000),
        ("s", 1000),
    ] {
        if ms >= n && ms.is_multiple_of(n) {
            return format!("{}{unit}", ms / n);
        }
    }
    format!("{ms}ms")
}

/// The limits `[daemon]` sets, the defaults ([`ServerLimits::default`]) for what it leaves out.
/// Fields are checked in the order the section documents them; the first bad one is reported.
pub(super) fn resolve(raw: Option<&RawDaemon>) -> Result<ServerLimits, Problem> {
    let defaults = ServerLimits::default();
    let Some(raw) = raw else {
        return Ok(defaults);
    };
    let day = Duration::from_secs(86_400);
    let second = Duration::from_secs(1);
    let max_connections = count(
        raw.max_connections.as_ref(),
        ("max_connections", MAX_CONNECTIONS_MAX),
        defaults.max_connections,
    )?;
    let max_handshakes = count(
        raw.max_handshakes.as_ref(),
        ("max_handshakes", MAX_HANDSHAKES_MAX),
        defaults.max_handshakes,
    )?;
    let payload_min_bytes_per_s = (raw.payload_min_bytes_per_s.as_ref())
        .map_or(Ok(defaults.payload_min_bytes_per_s), payload_rate)?;
    let (in_flight_bytes, in_flight_bytes_per_connection) = in_flight(raw, &defaults)?;
    let handshake_timeout = (raw.handshake_timeout.as_ref())
        .map_or(Ok(defaults.handshake_timeout), |v| {
            duration(v, "handshake_timeout", second, day / 24)
        })?;
    let stall_timeout = (raw.stall_timeout.as_ref()).map_or(Ok(defaults.stall_timeout), |v| {
        duration(v, "stall_timeout", second, day)
    })?;
    let idle_timeout = (raw.idle_timeout.as_ref()).map_or(Ok(defaults.idle_timeout), |v| {
        match is_off(v.get_ref()) {
            true => Ok(None),
            false => duration(v, "idle_timeout", second, 365 * day).map(Some),
        }
    })?;
    Ok(ServerLimits {
        max_connections,
        max_handshakes,
        in_flight_bytes,
        in_flight_bytes_per_connection,
        handshake_timeout,
        idle_timeout,
        stall_timeout,
        payload_min_bytes_per_s,
    })
}

/// A count of connections (`field`, at most `max`): from 1 to `max`, `default` when left out.
fn count(
    v: Option<&Spanned<i64>>,
    (field, max): (&str, u64),
    default: usize,
) -> Result<usize, Problem> {
    let Some(v) = v else {
        return Ok(default);
    };
    let n = *v.get_ref();
    match u64::try_from(n) {
        Ok(ok) if (1..=max).contains(&ok) => Ok(n as usize),
        _ => Err(problem(
            v,
            format!("{field} {n} is not valid; give 1 to {max} (default {default})"),
        )),
    }
}

/// Whether a timeout that may be turned off is: `"off"`, in any case.
fn is_off(v: &RawSize) -> bool {
    matches!(v, RawSize::Text(t) if t.trim().eq_ignore_ascii_case("off"))
}

/// `in_flight_memory` and `in_flight_memory_per_connection` (the defaults for those left
/// out): one connection's share may not exceed the whole.
fn in_flight(raw: &RawDaemon, defaults: &ServerLimits) -> Result<(u64, u64), Problem> {
    let total = match &raw.in_flight_memory {
        Some(v) => Some((memory(v, "in_flight_memory")?, v)),
        None => None,
    };
    let per_conn = match &raw.in_flight_memory_per_connection {
        Some(v) => Some((memory(v, "in_flight_memory_per_connection")?, v)),
        None => None,
    };
    let total_bytes = total.map_or(defaults.in_flight_bytes, |(b, _)| b);
    let per_conn_bytes = per_conn.map_or(defaults.in_flight_bytes_per_connection, |(b, _)| b);
    if per_conn_bytes <= total_bytes {
        return Ok((total_bytes, per_conn_bytes));
    }
    let shown = |b: u64| format!("\"{}\"", format_size_exact(b));
    // Reported at the share when it is set, else at the whole that is less than the default.
    let (at, default) = match (per_conn, total) {
        (Some((_, v)), _) => (v, ""),
        (None, Some((_, v))) => (v, " (the default)"),
        (None, None) => unreachable!("the defaults are consistent"),
    };
    let (per, tot) = (shown(per_conn_bytes), shown(total_bytes));
    Err(problem(
        at,
        format!(
            "in_flight_memory_per_connection {per}{default} is more than \
             in_flight_memory {tot}: one connection's share cannot exceed the whole; \
             give in_flight_memory at least {per}, or a smaller share"
        ),
    ))
}

fn problem<T>(v: &Spanned<T>, message: String) -> Problem {
    Problem::new(v.span(), ErrorKind::Limit, format!("daemon: {message}"))
}

/// A request-memory field: a size from 32 MiB to 1 TiB.
fn memory(v: &Spanned<RawSize>, field: &str) -> Result<u64, Problem> {
    let bytes = match v.get_ref() {
        RawSize::Int(i) if *i <= 0 => None,
        RawSize::Int(i) => return Err(problem(v, format!("{field} {}", no_unit(*i)))),
        RawSize::Text(t) => Some(parse_size(t).map_err(|e| {
            Problem::new(v.span(), ErrorKind::Size, format!("daemon: {field} {e}"))
        })?),
    };
    match bytes {
        Some(b) if (IN_FLIGHT_MEMORY_MIN..=IN_FLIGHT_MEMORY_MAX).contains(&b) => Ok(b),
        _ => Err(problem(
            v,
            format!(
                "{field} {} is out of range; give \"32MiB\" (one maximal NBD request) to \
                 \"1TiB\"; {SIZE_UNITS_HELP}",
                v.get_ref().shown()
            ),
        )),
    }
}

/// `payload_min_bytes_per_s`: a size (per second) from 1 KiB to 1 GiB.
fn payload_rate(v: &Spanned<RawSize>) -> Result<u64, Problem> {
    let field = "payload_min_bytes_per_s";
    let bytes = match v.get_ref() {
        RawSize::Int(i) => u64::try_from(*i).ok(),
        RawSize::Text(t) => Some(parse_size(t).map_err(|e| {
            Problem::new(v.span(), ErrorKind::Size, format!("daemon: {field} {e}"))
        })?),
    };
    let (min, max) = PAYLOAD_MIN_RATE_RANGE;
    match bytes {
        Some(b) if (min..=max).contains(&b) => Ok(b),
        _ => Err(problem(
            v,
            format!(
                "{field} {} is out of range; give \"1KiB\" to \"1GiB\" (bytes a second); \
                 {SIZE_UNITS_HELP}",
                v.get_ref().shown()
            ),
        )),
    }
}

/// A duration field from `min` to `max`.
fn duration(
    v: &Spanned<RawSize>,
    field: &str,
    min: Duration,
    max: Duration,
) -> Result<Duration, Problem> {
    let range = format!("from {} to {}", format_duration(min), format_duration(max));
    let d = match v.get_ref() {
        RawSize::Int(i) => {
            return Err(problem(
                v,
                format!("{field} {i} has no unit; write \"{i}s\" for seconds; {DURATION_HELP}"),
            ))
        }
        RawSize::Text(t) => {
            parse_duration(t).map_err(|e| problem(v, format!("{field} {e}; give {range}")))?
        }
    };
    if d < min || d > max {
        return Err(problem(
            v,
            format!(
                "{field} {} is out of range; give {range}",
                v.get_ref().shown()
            ),
        ));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units() {
        let s = Duration::from_secs;
        assert_eq!(parse_duration("30s"), Ok(s(30)));
        assert_eq!(parse_duration("30 s"), Ok(s(30)));
        assert_eq!(parse_duration("10min"), Ok(s(600)));
        assert_eq!(parse_duration("10m"), Ok(s(600)));
        assert_eq!(parse_duration("1.5h"), Ok(s(5400)));
        assert_eq!(parse_duration("2d"), Ok(s(172_800)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("1.5S"), Ok(Duration::from_millis(1500)));
        for bad in ["30", "s", "", "1.2.3s", "-1s", "5 fortnights", "0.5ms"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        assert!(parse_duration("30").unwrap_err().contains("no unit"));
    }

    #[test]
    fn handshakes_and_the_payload_rate_are_read_and_checked() {
        let raw: super::super::raw::RawConfig =
            toml::from_str("[daemon]\nmax_handshakes = 4\npayload_min_bytes_per_s = \"1MiB\"\n")
                .unwrap();
        let l = resolve(raw.daemon.as_ref().map(|d| d.get_ref()))
            .unwrap_or_else(|e| panic!("{}", e.message));
        assert_eq!((l.max_handshakes, l.payload_min_bytes_per_s), (4, 1 << 20));
        for bad in ["max_handshakes = 0", "payload_min_bytes_per_s = \"10B\""] {
            let raw: super::super::raw::RawConfig =
                toml::from_str(&format!("[daemon]\n{bad}\n")).unwrap();
            let Err(e) = resolve(raw.daemon.as_ref().map(|d| d.get_ref())) else {
                panic!("{bad} accepted");
            };
            let field = bad.split(' ').next().unwrap();
            assert!(e.message.contains(field), "{}", e.message);
        }
    }

    #[test]
    fn durations_print_as_the_config_writes_them() {
        for text in ["30s", "10min", "2h", "1d", "1500ms"] {
            let d = parse_duration(text).unwrap();
            assert_eq!(format_duration(d), text);
        }
    }

    fn limits(daemon: &str) -> Result<ServerLimits, String> {
        let raw: super::super::raw::RawConfig =
            toml::from_str(&format!("[daemon]\n{daemon}\n")).unwrap();
        resolve(raw.daemon.as_ref().map(|d| d.get_ref())).map_err(|e| e.message)
    }

    #[test]
    fn counts_take_one_to_their_most_and_say_the_default() {
        assert_eq!(
            limits("max_connections = 1").map(|l| l.max_connections),
            Ok(1)
        );
        assert_eq!(
            limits("max_connections = 65536").map(|l| l.max_connections),
            Ok(65536)
        );
        for bad in [
            "max_connections = 0",
            "max_connections = -3",
            "max_connections = 65537",
        ] {
            let e = limits(bad).unwrap_err();
            assert!(e.contains("give 1 to 65536 (default 128)"), "{e}");
        }
        assert_eq!(limits("").map(|l| l.max_handshakes), Ok(64));
    }

    #[test]
    fn a_share_larger_than_the_whole_is_reported_where_it_was_set() {
        let e = limits("in_flight_memory = \"64MiB\"").unwrap_err();
        assert!(e.contains("\"128MiB\" (the default) is more than"), "{e}");
        let e = limits("in_flight_memory_per_connection = \"1GiB\"").unwrap_err();
        assert!(
            e.contains("\"1GiB\" is more than in_flight_memory \"512MiB\""),
            "{e}"
        );
        let both = "in_flight_memory = \"64MiB\"\nin_flight_memory_per_connection = \"64MiB\"";
        let l = limits(both).unwrap();
        assert_eq!(
            (l.in_flight_bytes, l.in_flight_bytes_per_connection),
            (64 << 20, 64 << 20)
        );
    }

    #[test]
    fn only_the_idle_timeout_turns_off() {
        assert!(is_off(&RawSize::Text(" OFF ".into())));
        assert!(!is_off(&RawSize::Text("30s".into())));
        assert_eq!(
            limits("idle_timeout = \"off\"").map(|l| l.idle_timeout),
            Ok(None)
        );
        let ten_min = Some(Duration::from_secs(600));
        assert_eq!(
            limits("idle_timeout = \"10min\"").map(|l| l.idle_timeout),
            Ok(ten_min)
        );
        assert!(limits("stall_timeout = \"off\"").is_err());
    }
}
