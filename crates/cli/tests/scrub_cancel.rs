//! A running scrub is the operator's to steer from the command line: `nbraid scrub --rate`
//! re-rates it (as `rebuild --rate` re-rates a rebuild) and follows it, a scrub of the other
//! kind is refused naming `nbraid cancel`, and `nbraid cancel` stops it for good (a restart
//! does not resume it). Before, a slow scrub could only be stopped by a raw control request:
//! every refusal said "cancel it first" and no command did. `nbraidd` is the one built beside
//! `nbraid`.

mod common;

use common::*;
use serde_json::Value;

const MIB: u64 = 1 << 20;

/// Starts a scrub at 1 MiB/s through the control socket and waits until it moved.
fn slow_scrub(d: &Daemon, cfg: &str) {
    let scrub = br#"{"v":1,"op":"scrub","volume":"v","rate_bytes_per_s":1048576}"#;
    let replies = exchange(&d.control, &[scrub]);
    assert_eq!(replies[0]["ok"], true, "{}", replies[0]);
    wait_until(cfg, "v", "the scrub to move", |v| {
        v["scrub"]["position_bytes"].as_u64().unwrap_or(0) > 0
    });
}

#[test]
fn a_running_scrub_is_re_rated_refused_for_the_other_kind_and_cancelled() {
    let dir = tempfile::tempdir().unwrap();
    let file = raid5_of_three(dir.path(), "24MiB");
    let cfg = file.to_str().unwrap();
    ok(nbraid(&["create", cfg]), "create");
    let mut d = Daemon::start(&file);

    // Re-rated and followed to its end: the same scrub, not a second one.
    slow_scrub(&d, cfg);
    let o = nbraid(&["scrub", "v", "--rate", "200MiB", "--json", "--config", cfg]);
    let out = ok(o, "scrub --rate on a running scrub");
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["state"], "done", "{report:#}");
    assert_eq!(report["rate_limit_bytes_per_s"], 200 * MIB, "{report:#}");

    // The other kind: refused, naming the way.
    slow_scrub(&d, cfg);
    let o = nbraid(&["scrub", "v", "--repair", "--config", cfg]);
    assert!(!o.status.success(), "a repair started beside a check");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("already being checked (no repair)") && err.contains("nbraid cancel v"),
        "{err}"
    );
    // Without --rate a running scrub is followed at its own rate (not lifted to unlimited).
    let v = status_of(cfg, "v");
    assert_eq!(v["scrub"]["rate_limit_bytes_per_s"], MIB, "{v:#}");

    // Cancelled: it stops, and a restart does not bring it back.
    let said = ok(nbraid(&["cancel", "v", "--config", cfg]), "cancel");
    assert!(said.contains("scrub of v cancelled at "), "{said}");
    assert!(said.contains("a restart does not resume it"), "{said}");
    let v = wait_until(cfg, "v", "the scrub to stop", |v| {
        v["scrub"]["state"] == "cancelled"
    });
    let stopped_at = v["scrub"]["position_bytes"].as_u64().unwrap();
    assert!(
        stopped_at < v["scrub"]["total_bytes"].as_u64().unwrap(),
        "{v:#}"
    );
    d.stop();
    let mut d = Daemon::start(&file);
    std::thread::sleep(std::time::Duration::from_millis(500));
    let v = status_of(cfg, "v");
    assert!(v["scrub"].is_null(), "a cancelled scrub resumed: {v:#}");
    // Nothing to cancel now: said so.
    let o = nbraid(&["cancel", "v", "--config", cfg]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("has no scrub or re-add resync"), "{err}");
    d.stop();
}
