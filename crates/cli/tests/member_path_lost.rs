//! A member file deleted while the daemon serves it (`rm d1.img`) stays healthy to the
//! engine — it writes the open, deleted file — but is gone at the next start: `status` says
//! so, and an event once, without failing it (found by a hunt: it showed healthy and
//! scrubbed clean). A path renamed away, or made to name another file, is said too, and
//! putting the file back clears it. The way out status gives, `nbraid replace` onto a new
//! file, leaves a volume that starts whole.

mod common;

use common::*;
use serde_json::Value;
use std::path::Path;
use std::time::{Duration, Instant};

/// Member `role`'s `path_problem` in `status --json` (null while its path names its file).
fn path_problem(cfg: &str, role: usize) -> Value {
    volume_status(cfg)["members"][role]["path_problem"].clone()
}

/// The `member-path-lost` events so far, once `want` of them came (10 s at most).
fn path_events(cfg: &str, want: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let events = ok(nbraid(&["events", "--json", "--config", cfg]), "events");
        let lost: Vec<Value> = (events.lines())
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|e| e["event"] == "member-path-lost")
            .collect();
        if lost.len() >= want || Instant::now() > deadline {
            return lost;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_member_file_deleted_while_served_is_said_and_replace_is_the_way_out() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path());
    let cfg = config.to_str().unwrap();
    let mut daemon = Daemon::start(&config);
    assert_eq!(path_problem(cfg, 1), Value::Null, "all is well at start");

    std::fs::remove_file(dir.path().join("d1.img")).unwrap();
    let v = volume_status(cfg);
    let m = &v["members"][1];
    assert_eq!(m["state"], "healthy", "not failed: its data is good: {v:#}");
    assert_eq!(m["path_problem"]["problem"], "deleted", "{v:#}");
    let shown = ok(nbraid(&["status", "r6", "--config", cfg]), "status");
    assert!(
        shown.contains("was deleted while it serves")
            && shown.contains("nbraid replace r6 d1 NEWFILE"),
        "{shown}"
    );
    let events = path_events(cfg, 1);
    assert_eq!(events.len(), 1, "told once: {events:?}");
    assert_eq!(events[0]["member"], "d1", "{events:?}");

    // The way out it gives: a replace onto a new file, and the next start finds it whole.
    let new = blank_member(dir.path(), "new.img");
    ok(
        nbraid(&["replace", "r6", "d1", &new, "--config", cfg]),
        "replace",
    );
    wait_for(cfg, "the swap", |v| {
        let path = v["members"][1]["path"].as_str().unwrap_or_default();
        path.ends_with("new.img")
    });
    assert_eq!(path_problem(cfg, 1), Value::Null);
    daemon.stop();
    let mut daemon = Daemon::start(&config);
    let v = volume_status(cfg);
    assert_eq!(v["degraded"], false, "{v:#}");
    assert!(
        (v["members"][1]["path"].as_str().unwrap()).ends_with("new.img"),
        "{v:#}"
    );
    daemon.stop();
}

#[test]
fn a_member_path_moved_away_or_naming_another_file_is_said_until_put_back() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path());
    let cfg = config.to_str().unwrap();
    let mut daemon = Daemon::start(&config);
    let at = |name: &str| dir.path().join(name);
    let mv = |from: &Path, to: &Path| std::fs::rename(from, to).unwrap();

    mv(&at("d2.img"), &at("d2.moved"));
    assert_eq!(path_problem(cfg, 2)["problem"], "gone");
    mv(&at("d2.moved"), &at("d2.img"));
    assert_eq!(path_problem(cfg, 2), Value::Null, "put back");

    mv(&at("d3.img"), &at("d3.old"));
    std::fs::write(at("d3.img"), vec![0u8; 4096]).unwrap();
    let problem = path_problem(cfg, 3);
    assert_eq!(problem["problem"], "replaced", "{problem}");
    let message = problem["message"].as_str().unwrap();
    assert!(message.contains("names another file now"), "{message}");
    mv(&at("d3.old"), &at("d3.img"));
    assert_eq!(path_problem(cfg, 3), Value::Null, "put back");

    let v = volume_status(cfg);
    assert_eq!(v["degraded"], false, "nothing was failed: {v:#}");
    daemon.stop();
}
