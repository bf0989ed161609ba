//! A role that needs rebuilding while a rebuild (or replace) runs is rebuilt at once: the
//! running pass stops at its next window and a new one starts over every role, each from
//! its own position. It waited for the whole running pass to end first (a replace of a
//! healthy member held back the rebuild of a lost one), while `status` showed the lost
//! role moving with a pass that did not write it, and no event said it started.

mod common;

use common::*;
use serde_json::Value;
use std::time::{Duration, Instant};

/// Slow enough that a pass over the 32 MiB volume takes about 16 s.
const KEYS: &str = "spares = [\"s0\", \"s1\"]\nrebuild_rate = \"2MiB\"\n";

/// The rebuild's move of role `role` (who held it, who is written, its own progress).
fn move_of(v: &Value, role: u64) -> Option<Value> {
    let moves = v["rebuild"]["moves"].as_array()?;
    moves.iter().find(|m| m["role"] == role).cloned()
}

/// Polls for at most `secs` until `done` holds; the last status, and whether it held.
fn within(cfg: &str, secs: u64, done: impl Fn(&Value) -> bool) -> (Value, bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let v = status_of(cfg, "r6");
        if done(&v) || Instant::now() > deadline {
            let held = done(&v);
            return (v, held);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Whether an event says a rebuild started onto `member`.
/// Whether a `rebuild-started` event names `member`, within 10 s: the service's observer
/// looks on its own schedule, so status can show the rebuild moving before the event is out.
fn rebuild_started_onto(cfg: &str, member: &str) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let events = ok(nbraid(&["events", "--json", "--config", cfg]), "events");
        let said = (events.lines())
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|e| e["event"] == "rebuild-started")
            .any(|e| (e["member"].as_str().unwrap_or("").split(',')).any(|m| m == member));
        if said || std::time::Instant::now() > deadline {
            return said;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// Waits until the running pass is past `bytes`.
fn past(cfg: &str, bytes: u64) {
    wait_for(cfg, "the pass to move", |v| {
        v["rebuild"]["position_bytes"].as_u64().unwrap_or(0) >= bytes
    });
}

/// Waits until every role is current and the rebuild done.
fn all_done(cfg: &str) -> Value {
    wait_for(cfg, "the rebuild to finish", |v| {
        v["rebuild"]["state"] == "done" && v["state"] == "healthy"
    })
}

/// Replace d2 (healthy), then d1 fails: spare s0 takes role 1 and its rebuild starts within
/// a couple of seconds (not once the replace's copy ended), an event says so, and status
/// gives each role its own progress.
#[test]
fn a_lost_role_is_not_held_back_by_a_running_replace() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config_with(dir.path(), &["s0", "s1"], KEYS);
    let cfg = config.to_str().unwrap();
    let mut d = Daemon::start(&config);
    let r = blank_member(dir.path(), "r.img");
    ok(
        nbraid(&["replace", "r6", "d2", &r, "--config", cfg]),
        "replace",
    );
    past(cfg, 4 << 20);
    ok(nbraid(&["fail", "r6", "d1", "--config", cfg]), "fail d1");
    let failed_at = Instant::now();

    // Role 1 is rebuilt onto s0 at once: its own progress moves.
    let (v, moving) = within(cfg, 4, |v| {
        move_of(v, 1)
            .is_some_and(|m| m["to"] == "s0" && m["position_bytes"].as_u64().unwrap_or(0) > 0)
    });
    assert!(moving, "role 1 not rebuilt onto s0 within 4 s: {v:#}");
    assert!(failed_at.elapsed() < Duration::from_secs(5), "{v:#}");
    let replace = move_of(&v, 2).expect("the replace of role 2 goes on");
    assert_eq!(replace["to"], "r", "{v:#}");
    assert!(
        rebuild_started_onto(cfg, "s0"),
        "no rebuild-started onto s0"
    );
    let text = ok(nbraid(&["status", "r6", "--config", cfg]), "status");
    let line = (text.lines())
        .find(|l| l.trim_start().starts_with("rebuild "))
        .unwrap_or_else(|| panic!("no rebuild line: {text}"));
    assert!(
        line.contains("d1 → s0 ") && line.contains("d2 → r "),
        "{line}"
    );
    assert!(line.contains('%'), "{line}");

    let v = all_done(cfg);
    let ids: Vec<&str> = (v["members"].as_array().unwrap().iter())
        .filter_map(|m| m["id"].as_str())
        .collect();
    assert!(ids.contains(&"s0") && ids.contains(&"r"), "{v:#}");
    d.stop();
}

/// The new member of a role being rebuilt fails: the next spare starts at once (the old pass
/// walked to its end first), and is not shown moving before it did.
#[test]
fn a_spare_for_a_failed_rebuild_target_starts_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config_with(dir.path(), &["s0", "s1"], KEYS);
    let cfg = config.to_str().unwrap();
    let mut d = Daemon::start(&config);
    ok(nbraid(&["fail", "r6", "d1", "--config", cfg]), "fail d1");
    past(cfg, 8 << 20);
    ok(nbraid(&["fail", "r6", "s0", "--config", cfg]), "fail s0");
    let (v, moving) = within(cfg, 4, |v| {
        move_of(v, 1)
            .is_some_and(|m| m["to"] == "s1" && m["position_bytes"].as_u64().unwrap_or(0) > 0)
    });
    assert!(moving, "role 1 not rebuilt onto s1 within 4 s: {v:#}");
    // It started from the beginning: it cannot be past what a few seconds at 2 MiB/s write.
    let at = move_of(&v, 1).unwrap()["position_bytes"].as_u64().unwrap();
    assert!(at < 8 << 20, "{v:#}");
    assert!(
        rebuild_started_onto(cfg, "s1"),
        "no rebuild-started onto s1"
    );
    all_done(cfg);
    d.stop();
}
