//! `nbraid apply` says what `--yes` will do, through the real binaries: a new shape whose
//! members have no room for the write-hole log is said to run without it (text and JSON, in
//! `nbraid check`'s words) and it does; a move whose backup has no room is refused in the plan
//! with the start's own reason, and `--yes` exits non-zero; an offline `--yes` does not drop a
//! scrub a restart interrupted. `nbraidd` is the one built beside `nbraid`.

mod common;

use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// `arrays.toml`: volume `v` of `level` over the first `members` of d0..d7 (`size` files),
/// strip `strip`.
fn config(dir: &Path, level: &str, members: usize, strip: &str, size: &str) -> PathBuf {
    let mut text = daemon_and_members("d", 8, size);
    let ids: Vec<String> = (0..members).map(|i| format!("\"d{i}\"")).collect();
    text += &format!(
        "[[volume]]\nname = \"v\"\nlevel = \"{level}\"\nstrip_size = \"{strip}\"\n\
         members = [{}]\nchecksums = \"off\"\n",
        ids.join(", ")
    );
    let file = dir.join("arrays.toml");
    std::fs::write(&file, text).unwrap();
    file
}

fn run(args: &[&str]) -> (bool, String, String) {
    let o = nbraid(args);
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn plan_json(cfg: &str) -> Value {
    let out = ok(nbraid(&["apply", cfg, "--json"]), "apply --json");
    serde_json::from_str::<Value>(&out).unwrap()["volumes"][0].clone()
}

#[test]
fn a_plan_says_when_the_new_shape_gets_no_write_hole_log() {
    let dir = tempfile::tempdir().unwrap();
    let file = config(dir.path(), "raid6", 6, "64KiB", "16MiB");
    let cfg = file.to_str().unwrap();
    ok(nbraid(&["create", cfg]), "create");
    let mut d = Daemon::start(&file);

    // More members at the same strip: the log's ring still fits, nothing to say.
    config(dir.path(), "raid6", 7, "64KiB", "16MiB");
    let out = ok(nbraid(&["apply", cfg]), "apply (7 members)");
    assert!(out.contains("restripe online"), "{out}");
    assert!(!out.contains("write hole"), "{out}");
    assert_eq!(plan_json(cfg)["write_hole_note"], Value::Null);

    // 64 KiB → 256 KiB: RAID 6's ring of 256 KiB strips is larger than the metadata area.
    config(dir.path(), "raid6", 6, "256KiB", "16MiB");
    let out = ok(nbraid(&["apply", cfg]), "apply (256 KiB)");
    for says in [
        "restripe online",
        "write hole: none of the new shape's 1 parity group(s) gets a write-hole log",
        "metadata area has no such room left",
    ] {
        assert!(out.contains(says), "{says:?} missing from:\n{out}");
    }
    let plan = plan_json(cfg);
    assert_eq!(plan["action"], "online", "{plan:#}");
    assert_eq!(
        plan["unlogged_parity_groups"],
        serde_json::json!(["raid6:256KiB(d0 d1 d2 d3 d4 d5)"]),
        "{plan:#}"
    );
    let note = plan["write_hole_note"].as_str().unwrap_or_default();
    assert!(note.contains("gets a write-hole log"), "{plan:#}");

    // What the plan said is what happens.
    let out = ok(nbraid(&["apply", cfg, "--yes"]), "apply --yes");
    assert!(out.contains("started online"), "{out}");
    let v = wait_until(cfg, "v", "the reshape to 256 KiB", |v| {
        v["reshape"]["state"] == "done"
    });
    assert_eq!(v["metadata"]["write_hole_logged"], false, "{v:#}");
    d.stop();
}

#[test]
fn a_plan_refuses_what_the_start_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let file = config(dir.path(), "raid10", 4, "4KiB", "16MiB");
    let cfg = file.to_str().unwrap();
    ok(nbraid(&["create", cfg]), "create");
    let mut d = Daemon::start(&file);

    // 4 KiB → 1 MiB: a window backs up more than a metadata area holds, and no member is
    // added to hold it: the start refuses, so the plan does.
    config(dir.path(), "raid10", 4, "1MiB", "16MiB");
    let why = "refused: a window of this reshape backs up";
    let (success, out, _) = run(&["apply", cfg]);
    assert!(success, "a plan is printed: {out}");
    assert!(out.contains(why), "{out}");
    assert!(!out.contains("restripe online"), "{out}");
    assert!(!out.contains("--yes` starts"), "{out}");
    let plan = plan_json(cfg);
    assert_eq!(plan["action"], "refused", "{plan:#}");
    assert!(
        (plan["reason"].as_str().unwrap_or_default()).contains("choose a smaller strip"),
        "{plan:#}"
    );
    let (success, out, err) = run(&["apply", cfg, "--yes"]);
    assert!(!success, "--yes fails on a refused move: {out}");
    assert!(out.contains(why), "{out}");
    assert!(
        err.contains("volume v: not started: a window of this reshape backs up"),
        "{err}"
    );
    let v = status_of(cfg, "v");
    assert!(v["reshape"].is_null(), "nothing started: {v:#}");
    d.stop();

    // Offline, the same plan and the same refusal.
    let (success, out, err) = run(&["apply", cfg, "--yes"]);
    assert!(!success && out.contains(why), "{out}");
    assert!(err.contains("not started"), "{err}");
}

#[test]
fn an_offline_apply_keeps_a_scrub_a_restart_interrupted() {
    let dir = tempfile::tempdir().unwrap();
    let file = config(dir.path(), "raid5", 3, "64KiB", "16MiB");
    let cfg = file.to_str().unwrap();
    ok(nbraid(&["create", cfg]), "create");
    let mut d = Daemon::start(&file);
    let scrub = br#"{"v":1,"op":"scrub","volume":"v","rate_bytes_per_s":1048576}"#;
    let replies = exchange(&d.control, &[scrub]);
    assert_eq!(replies[0]["ok"], true, "{}", replies[0]);
    let v = wait_until(cfg, "v", "the scrub to move", |v| {
        v["scrub"]["position_bytes"].as_u64().unwrap_or(0) > 0
    });
    // The operator's scrub, not a second one the start queued behind it by taking the
    // checkpoint it had just recorded for one a restart left (that one ran unlimited and
    // finished before the stop).
    assert_eq!(v["scrub"]["rate_limit_bytes_per_s"], 1048576, "{v:#}");
    d.stop(); // the records keep the scrub's checkpoint

    config(dir.path(), "raid5", 4, "64KiB", "16MiB");
    let (success, out, err) = run(&["apply", cfg, "--yes"]);
    assert!(!success, "the reshape would drop the scrub: {out}");
    assert!(out.contains("~ members 3 → 4"), "{out}");
    assert!(
        err.contains("volume v: not started: its records name a scrub a restart interrupted"),
        "{err}"
    );

    // Nothing was written: the daemon starts on the old shape and resumes the scrub.
    config(dir.path(), "raid5", 3, "64KiB", "16MiB");
    let mut d = Daemon::start(&file);
    let v = status_of(cfg, "v");
    assert!(v["reshape"].is_null(), "{v:#}");
    assert!(
        v["scrub"]["state"] == "running" || v["scrub"]["state"] == "done",
        "the scrub resumed at its checkpoint: {v:#}"
    );
    d.stop();
}

/// A volume renamed in the config: its members carry the old name, and the plan, `check`
/// and `apply --yes` say so — once (the plan printed "refused: refused:"), with the way
/// back (write the old name back) rather than only `nbraid create --force` over its data.
#[test]
fn a_renamed_volume_is_refused_with_its_recorded_name() {
    let dir = tempfile::tempdir().unwrap();
    let file = config(dir.path(), "raid5", 3, "64KiB", "16MiB");
    let cfg = file.to_str().unwrap();
    ok(nbraid(&["create", cfg]), "create");
    let mut d = Daemon::start(&file);
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, text.replace("name = \"v\"", "name = \"w\"")).unwrap();
    let way_back = "every member carries volume `v` of array";
    let (_, out, _) = run(&["apply", cfg]);
    assert!(
        out.contains(way_back) && out.contains("write name = \"v\" back"),
        "{out}"
    );
    assert!(!out.contains("refused: refused"), "{out}");
    let (good, out, err) = run(&["check", cfg]);
    assert!(!good && out.contains(way_back), "{out}{err}");
    let (good, _, err) = run(&["apply", cfg, "--yes"]);
    assert!(!good && err.contains(way_back), "{err}");
    d.stop();
}
