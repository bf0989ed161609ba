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
        .map_or_else(String::new, |ms| nbraid_nbd::utc_text((ms / 1000) as i64));
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
