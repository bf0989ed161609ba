//! A rebuild whose target fails with no spare to take its role stops at once, saying why:
//! it walked on to its end first (status showed its position moving, the writes went
//! nowhere), and only then said "failed". A rebuild with another role still standing goes
//! on for that role.

mod common;

use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Volume `v` of `level` over `n` members of `size` (d0, d1, ...), spares `spares`, rebuilt at
/// 2 MiB/s: a pass over it takes 12 s or more.
fn config(dir: &Path, level: &str, n: usize, size: &str, spares: &[&str]) -> PathBuf {
    let mut text = daemon_and_members("d", n, size);
    for s in spares {
        text += &format!("[[member]]\nid = \"{s}\"\npath = \"{s}.img\"\nsize = \"{size}\"\n\n");
    }
    let list = |ids: Vec<String>| ids.join(", ");
    let members = list((0..n).map(|i| format!("\"d{i}\"")).collect());
    let spares = list(spares.iter().map(|s| format!("\"{s}\"")).collect());
    let strip = match level {
        "raid1" => "",
        _ => "strip_size = \"64KiB\"\n",
    };
    text += &format!(
        "[[volume]]\nname = \"v\"\nlevel = \"{level}\"\n{strip}checksums = \"off\"\n\
         members = [{members}]\nspares = [{spares}]\nrebuild_rate = \"2MiB\"\n"
    );
    let file = dir.join("arrays.toml");
    std::fs::write(&file, text).unwrap();
    file
}

fn status(cfg: &str) -> Value {
    status_of(cfg, "v")
}

/// Polls for at most `secs` until `done` holds; the last status, and whether it held.
fn within(cfg: &str, secs: u64, done: impl Fn(&Value) -> bool) -> (Value, bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let v = status(cfg);
        if done(&v) || Instant::now() > deadline {
            let held = done(&v);
            return (v, held);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The rebuild's move of role `role`, if it lists one.
fn move_of(v: &Value, role: u64) -> Option<Value> {
    let moves = v["rebuild"]["moves"].as_array()?;
    moves.iter().find(|m| m["role"] == role).cloned()
}

fn position(v: &Value) -> u64 {
    v["rebuild"]["position_bytes"].as_u64().unwrap_or(0)
}

/// The `rebuild-finished` events so far (waits up to 10 s for one: the observer looks on
/// its own schedule).
fn rebuild_finished(cfg: &str) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let events = ok(nbraid(&["events", "--json", "--config", cfg]), "events");
        let found: Vec<Value> = (events.lines())
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|e| e["event"] == "rebuild-finished")
            .collect();
        if !found.is_empty() || Instant::now() > deadline {
            return found;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// d1 fails, spare s0 takes role 1 and is being rebuilt; then s0 fails too, with no spare
/// left: the rebuild stops within a few seconds, failed, naming s0, and never says the role
/// rebuilt; the event says so too.
fn target_fails_with_no_spare(level: &str, n: usize, size: &str) {
    let dir = tempfile::tempdir().unwrap();
    let file = config(dir.path(), level, n, size, &["s0"]);
    let cfg = file.to_str().unwrap();
    let mut d = Daemon::start(&file);
    ok(nbraid(&["fail", "v", "d1", "--config", cfg]), "fail d1");
    let (v, moving) = within(cfg, 20, |v| {
        move_of(v, 1).is_some_and(|m| m["to"] == "s0") && position(v) >= 4 * MIB
    });
    assert!(moving, "{level}: the rebuild onto s0 never moved: {v:#}");
    ok(nbraid(&["fail", "v", "s0", "--config", cfg]), "fail s0");

    let (v, stopped) = within(cfg, 6, |v| v["rebuild"]["state"] == "failed");
    assert!(
        stopped,
        "{level}: still walking after its target failed: {v:#}"
    );
    let error = v["rebuild"]["error"].as_str().unwrap_or("");
    assert!(error.contains("s0") && error.contains("failed"), "{v:#}");
    let at = position(&v);
    assert!(at < v["rebuild"]["total_bytes"].as_u64().unwrap(), "{v:#}");
    std::thread::sleep(Duration::from_secs(2));
    let later = status(cfg);
    assert_eq!(position(&later), at, "{level}: it moved on: {later:#}");
    assert_eq!(later["rebuild"]["state"], "failed", "{later:#}");
    assert_eq!(later["members"][1]["state"], "failed", "{later:#}");
    assert_eq!(later["rebuild"]["rebuilt_roles"], serde_json::json!([]));

    let finished = rebuild_finished(cfg);
    let e = finished.last().expect("a rebuild-finished event");
    assert_eq!(e["result"], "failed", "{finished:#?}");
    let detail = e["detail"].as_str().unwrap_or("");
    assert!(detail.contains("s0") && detail.contains("failed"), "{e:#}");

    // Nothing is rebuilding: `nbraid rebuild` says the role waits for a member, not "done".
    let said = ok(nbraid(&["rebuild", "v", "--config", cfg]), "rebuild");
    assert!(
        said.contains("role(s) 1 failed with no spare"),
        "{level}: {said}"
    );
    d.stop();
}

#[test]
fn raid1_rebuild_stops_when_its_target_fails() {
    target_fails_with_no_spare("raid1", 2, "33MiB");
}

#[test]
fn raid5_rebuild_stops_when_its_target_fails() {
    target_fails_with_no_spare("raid5", 4, "9MiB");
}

#[test]
fn raid6_rebuild_stops_when_its_target_fails() {
    target_fails_with_no_spare("raid6", 6, "9MiB");
}

/// RAID 6 rebuilding roles 1 (onto s0) and 3 (onto s1); s0 fails: role 3's copy goes on to
/// its end and is made current; role 1 is not said rebuilt, and the run says why it failed.
#[test]
fn raid6_rebuild_goes_on_for_the_role_whose_target_stands() {
    let dir = tempfile::tempdir().unwrap();
    let file = config(dir.path(), "raid6", 6, "9MiB", &["s0", "s1"]);
    let cfg = file.to_str().unwrap();
    let mut d = Daemon::start(&file);
    ok(nbraid(&["fail", "v", "d1", "--config", cfg]), "fail d1");
    ok(nbraid(&["fail", "v", "d3", "--config", cfg]), "fail d3");
    let (v, moving) = within(cfg, 20, |v| {
        let on = |r, to| move_of(v, r).is_some_and(|m| m["to"] == to);
        on(1, "s0") && on(3, "s1") && position(v) >= 4 * MIB
    });
    assert!(moving, "the rebuild of roles 1 and 3 never moved: {v:#}");
    ok(nbraid(&["fail", "v", "s0", "--config", cfg]), "fail s0");
    let role3 = |v: &Value| move_of(v, 3).map_or(0, |m| m["position_bytes"].as_u64().unwrap());
    let before = role3(&status(cfg));
    let (v, on) = within(cfg, 8, |v| role3(v) > before + 4 * MIB);
    assert!(on, "role 3's copy stopped: {v:#}");
    let v = wait_until(cfg, "v", "the rebuild to end", |v| {
        !matches!(v["rebuild"]["state"].as_str(), Some("running" | "paused"))
    });
    assert_eq!(v["members"][3]["id"], "s1", "{v:#}");
    assert_eq!(v["members"][3]["state"], "healthy", "{v:#}");
    assert_eq!(v["members"][1]["state"], "failed", "{v:#}");
    assert_eq!(
        v["rebuild"]["rebuilt_roles"],
        serde_json::json!([3]),
        "{v:#}"
    );
    let error = v["rebuild"]["error"].as_str().unwrap_or("");
    assert!(error.contains("s0"), "{v:#}");
    d.stop();
}
