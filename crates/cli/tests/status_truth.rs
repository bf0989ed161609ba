//! `nbraid status` tells each volume's own story: on members shared by two volumes (Matrix),
//! a volume nobody wrote shows no writes on them (the files' totals stay apart), paths are
//! absolute, the array id is shown, and a rebuild names who it moves into which role.

mod common;

use common::*;
use std::process::Command;

/// r5 and r10 over the same four files, as the quickstart declares them.
fn matrix_config(dir: &std::path::Path) -> std::path::PathBuf {
    let mut text = daemon_and_members("d", 4, "24MiB");
    for (name, level, size) in [("r5", "raid5", "12MiB"), ("r10", "raid10", "all")] {
        text += &format!(
            "[[volume]]\nname = \"{name}\"\nlevel = \"{level}\"\nstrip_size = \"64KiB\"\n\
             members = [\"d0\", \"d1\", \"d2\", \"d3\"]\nsize = \"{size}\"\n\n"
        );
    }
    let file = dir.join("arrays.toml");
    std::fs::write(&file, text).unwrap();
    file
}

#[test]
fn a_matrix_volume_counts_its_own_io_with_absolute_paths_and_its_id() {
    let nbdcopy = require("nbdcopy");
    let dir = tempfile::tempdir().unwrap();
    let config = matrix_config(dir.path());
    let cfg = config.to_str().unwrap();
    let (mut d, uri) = serve(&config, "r5");
    let src = dir.path().join("src.img");
    std::fs::write(&src, seeded_bytes(3, 12 * MIB)).unwrap();
    ok(
        Command::new(&nbdcopy).arg(&src).arg(&uri).output().unwrap(),
        "nbdcopy into r5",
    );
    let r5 = status_of(cfg, "r5");
    let r10 = status_of(cfg, "r10");
    for m in r10["members"].as_array().unwrap() {
        assert_eq!(m["writes"], 0, "r10 was not written: {m:#}");
        assert!(m["file_io"]["writes"].as_u64().unwrap() > 0, "{m:#}");
        let path = m["path"].as_str().unwrap();
        assert!(path.starts_with('/'), "not absolute: {path}");
    }
    let r5_writes: u64 = r5["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["writes"].as_u64().unwrap())
        .sum();
    assert!(r5_writes > 0, "{r5:#}");
    let table = ok(nbraid(&["status", "--config", cfg]), "status");
    let id = r10["metadata"]["array"].as_str().unwrap();
    assert!(table.contains(&format!("  array {id}\n")), "{table}");
    assert!(table.contains("  spares: none\n"), "{table}");
    d.stop();
}

/// A failed member whose role a spare took stays in `status` (md's `(F)`), in the table
/// after the role holders and under `departed` in `--json`, until `nbraid remove` takes it
/// out by its id; then it is gone from both.
#[test]
fn a_failed_member_a_spare_replaced_stays_shown_until_removed() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config_with(dir.path(), &["s0"], "spares = [\"s0\"]\n");
    let cfg = config.to_str().unwrap();
    let mut d = Daemon::start(&config);
    ok(nbraid(&["fail", "r6", "d2", "--config", cfg]), "fail d2");
    let v = wait_for(cfg, "the spare to take role 2 and be rebuilt", |v| {
        v["members"][2]["id"] == "s0" && v["rebuild"]["state"] == "done"
    });
    let departed = v["departed"].as_array().expect("departed in --json");
    assert_eq!(departed.len(), 1, "{v:#}");
    assert_eq!(departed[0]["id"], "d2", "{v:#}");
    assert_eq!(departed[0]["state"], "failed", "{v:#}");
    let path = departed[0]["path"].as_str().unwrap();
    assert!(path.starts_with('/') && path.ends_with("d2.img"), "{path}");

    let table = ok(nbraid(&["status", "r6", "--config", cfg]), "status");
    let holder = table.find("  d5 ").expect("the last role holder");
    let gone = table.find("  d2         failed (F)").expect("d2 shown (F)");
    assert!(holder < gone, "{table}");

    let said = ok(
        nbraid(&["remove", "r6", "d2", "--config", cfg]),
        "remove the departed d2",
    );
    assert!(said.contains("d2") && said.contains("removed"), "{said}");
    let v = volume_status(cfg);
    assert_eq!(v["departed"], serde_json::json!([]), "{v:#}");
    let table = ok(nbraid(&["status", "r6", "--config", cfg]), "status");
    assert!(!table.contains("d2.img"), "{table}");
    d.stop();
}

/// `nbraid rebuild` right after `nbraid fail` places the spare itself (before the watcher
/// looks): the member it pushes out is departed all the same — shown, and removable by id.
#[test]
fn a_member_pushed_out_by_nbraid_rebuild_is_shown_departed_and_removable() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config_with(dir.path(), &["s0"], "spares = [\"s0\"]\n");
    let cfg = config.to_str().unwrap();
    let mut d = Daemon::start(&config);
    // On one connection, so the rebuild comes well within the watcher's interval.
    let replies = exchange(
        &d.control,
        &[
            br#"{"v":1,"op":"fail","volume":"r6","member":"d1"}"#,
            br#"{"v":1,"op":"rebuild","volume":"r6"}"#,
        ],
    );
    for r in &replies {
        assert_eq!(r["ok"], true, "{r}");
    }
    let v = wait_for(cfg, "the spare to take role 1 and be rebuilt", |v| {
        v["members"][1]["id"] == "s0" && v["rebuild"]["state"] == "done"
    });
    let departed = v["departed"].as_array().expect("departed in --json");
    assert_eq!(departed.len(), 1, "{v:#}");
    assert_eq!(departed[0]["id"], "d1", "{v:#}");
    let said = ok(
        nbraid(&["remove", "r6", "d1", "--config", cfg]),
        "remove the departed d1",
    );
    assert!(said.contains("d1") && said.contains("removed"), "{said}");
    assert_eq!(volume_status(cfg)["departed"], serde_json::json!([]));
    d.stop();
}

/// `status --json` notes are the ones `check` gives for the state the volume is in now: a
/// spare that took a role after the start yields the "update the config" note at once, the
/// same `check` and the next start give.
#[test]
fn status_notes_follow_a_spare_that_took_a_role_after_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config_with(dir.path(), &["s0"], "spares = [\"s0\"]\n");
    let cfg = config.to_str().unwrap();
    let mut d = Daemon::start(&config);
    assert_eq!(volume_status(cfg)["notes"], serde_json::json!([]));
    ok(nbraid(&["fail", "r6", "d2", "--config", cfg]), "fail d2");
    let v = wait_for(cfg, "the spare to take role 2 and be rebuilt", |v| {
        v["members"][2]["id"] == "s0" && v["rebuild"]["state"] == "done"
    });
    let live: Vec<String> = serde_json::from_value(v["notes"].clone()).unwrap();
    let update = r#"member s0 (listed in spares) now holds role 2; update the config: members = ["d0", "d1", "s0", "d3", "d4", "d5"]"#;
    assert!(live.iter().any(|n| n == update), "{live:#?}");
    assert!(
        live.iter()
            .any(|n| n.starts_with("member d2 no longer holds a role in volume r6")),
        "{live:#?}"
    );
    d.stop();

    let check = ok(nbraid(&["check", cfg]), "check");
    for n in &live {
        assert!(check.contains(&format!("note: {n}")), "{n}\n{check}");
    }
    let mut d = Daemon::start(&config);
    assert_eq!(volume_status(cfg)["notes"], v["notes"], "the next start");
    d.stop();
}

/// A file added at run time that the config already declares (by a relative path, outside
/// the volume) and that took a role: `status` names it by the config's id and says which
/// `members` line to set — it used to offer a `[[member]]` with that same id to paste.
#[test]
fn a_role_holder_the_config_declares_is_named_as_the_config_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config_with(dir.path(), &["d6"], "");
    let cfg = config.to_str().unwrap();
    let mut d = Daemon::start(&config);
    let spare = dir.path().join("d6.img");
    let spare = spare.to_str().unwrap();
    ok(nbraid(&["add", "r6", spare, "--config", cfg]), "add d6.img");
    ok(nbraid(&["fail", "r6", "d2", "--config", cfg]), "fail d2");
    let v = wait_for(cfg, "d6 to take role 2 and be rebuilt", |v| {
        v["members"][2]["id"] == "d6" && v["rebuild"]["state"] == "done"
    });
    let says = format!(
        "member d6 holds role 2; its file {spare} is the config's member d6 (path = \"d6.img\"), which volume r6 does not list"
    );
    let line = r#"set members = ["d0", "d1", "d6", "d3", "d4", "d5"] (no [[member]] to add)"#;
    let table = ok(nbraid(&["status", "r6", "--config", cfg]), "status");
    assert!(table.contains(&says), "{says}\n{table}");
    assert!(table.contains(line), "{line}\n{table}");
    assert!(!table.contains("id = \"d6\""), "{table}");
    let notes: Vec<String> = serde_json::from_value(volume_status(cfg)["notes"].clone()).unwrap();
    assert!(
        notes.iter().any(|n| n.contains(&says) && n.contains(line)),
        "{notes:#?} ({v:#})"
    );
    d.stop();
}

/// A member file swapped for a blank one while stopped: the start takes it as a spare and
/// says so, then rebuilds its role onto it — and `status` stops saying it stands by (the
/// start's note was shown for the daemon's whole life).
#[test]
fn a_blank_member_rebuilt_into_its_role_is_no_longer_said_to_stand_by() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config_with(dir.path(), &[], "");
    let cfg = config.to_str().unwrap();
    let mut d = Daemon::start(&config);
    d.stop();
    let d2 = dir.path().join("d2.img");
    let len = std::fs::metadata(&d2).unwrap().len();
    std::fs::remove_file(&d2).unwrap();
    std::fs::File::create(&d2).unwrap().set_len(len).unwrap();
    let mut d = Daemon::start(&config);
    let said = "member d2 is blank and holds no role: it stands by as a spare";
    let v = wait_for(cfg, "d2 rebuilt into role 2", |v| {
        v["members"][2]["id"] == "d2"
            && v["rebuild"]["state"] == "done"
            && !v["degraded"].as_bool().unwrap_or(true)
    });
    let notes = v["notes"].to_string();
    assert!(!notes.contains(said), "{v:#}");
    d.stop();
}
