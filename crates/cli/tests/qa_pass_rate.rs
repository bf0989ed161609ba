//! A rate-limited pass answers its operator at once: `nbraid cancel`, `nbraid scrub --rate`
//! and `nbraid rebuild --rate` take effect within moments, not after the wait the old limit
//! set for the window just done. Before, a pass slept one window's time at its limit in one
//! piece (4 MiB at 64 KiB/s: a minute; at 4 KiB/s: 17 minutes): a cancelled scrub said
//! "cancelled" and went on "running", refusing a new scrub with "cancel it first", and a
//! rebuild re-rated from 64 KiB/s to 1 GiB/s left the volume degraded for that minute.
//! `nbraidd` is the one built beside `nbraid`.

mod common;

use common::*;
use std::time::{Duration, Instant};

/// Under the minute a 4 MiB window at 64 KiB/s waits: what "at once" may take on a busy
/// machine.
const PROMPT: Duration = Duration::from_secs(20);

/// Sends one control request and asserts it was taken.
fn request(d: &Daemon, line: &str) {
    let replies = exchange(&d.control, &[line.as_bytes()]);
    assert_eq!(replies[0]["ok"], true, "{line}: {}", replies[0]);
}

/// Waits until volume v's `pass` moved past its first window (it is then waiting out the
/// limit).
fn moved(cfg: &str, pass: &str) {
    wait_until(cfg, "v", "the pass to move", |v| {
        v[pass]["position_bytes"].as_u64().unwrap_or(0) > 0
    });
}

#[test]
fn a_slow_scrub_is_cancelled_and_re_rated_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let file = raid5_of_three(dir.path(), "24MiB");
    let cfg = file.to_str().unwrap();
    ok(nbraid(&["create", cfg]), "create");
    let d = Daemon::start(&file);
    let slow = r#"{"v":1,"op":"scrub","volume":"v","rate_bytes_per_s":65536}"#;

    request(&d, slow);
    moved(cfg, "scrub");
    ok(nbraid(&["cancel", "v", "--config", cfg]), "cancel");
    let asked = Instant::now();
    loop {
        let v = status_of(cfg, "v");
        if v["scrub"]["state"] != "running" {
            break;
        }
        assert!(
            asked.elapsed() < PROMPT,
            "a cancelled scrub still runs {:?} later: {:#}",
            asked.elapsed(),
            v["scrub"]
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // A new scrub is taken: the cancelled one is over, not "already being scrubbed".
    request(&d, slow);
    moved(cfg, "scrub");
    let asked = Instant::now();
    let o = nbraid(&["scrub", "v", "--rate", "1GiB", "--json", "--config", cfg]);
    let report: serde_json::Value = serde_json::from_str(&ok(o, "scrub --rate")).unwrap();
    assert_eq!(report["state"], "done", "{report:#}");
    assert!(
        asked.elapsed() < PROMPT,
        "a scrub re-rated to 1 GiB/s took {:?} to end",
        asked.elapsed()
    );
}

#[test]
fn a_slow_rebuild_re_rated_ends_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let file = raid5_of_three(dir.path(), "24MiB");
    let cfg = file.to_str().unwrap();
    ok(nbraid(&["create", cfg]), "create");
    let d = Daemon::start(&file);
    ok(nbraid(&["fail", "v", "d1", "--config", cfg]), "fail");
    // Paused, so the rebuild the spare starts waits at its start for the slow rate.
    ok(nbraid(&["pause", "v", "--config", cfg]), "pause");
    let spare = dir.path().join("spare.img");
    std::fs::File::create(&spare)
        .unwrap()
        .set_len(24 * MIB)
        .unwrap();
    ok(
        nbraid(&["add", "v", spare.to_str().unwrap(), "--config", cfg]),
        "add",
    );
    request(
        &d,
        r#"{"v":1,"op":"rebuild","volume":"v","rate_bytes_per_s":65536}"#,
    );
    ok(nbraid(&["resume", "v", "--config", cfg]), "resume");
    moved(cfg, "rebuild");
    let asked = Instant::now();
    let o = nbraid(&["rebuild", "v", "--rate", "1GiB", "--config", cfg]);
    ok(o, "rebuild --rate");
    assert!(
        asked.elapsed() < PROMPT,
        "a rebuild re-rated to 1 GiB/s took {:?} to end",
        asked.elapsed()
    );
    let v = status_of(cfg, "v");
    assert_eq!(v["degraded"], false, "{v:#}");
}
