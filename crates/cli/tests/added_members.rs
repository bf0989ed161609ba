//! Members added to a running daemon (`nbraid add`, `nbraid replace`) that the config does
//! not name: they serve, and keep serving their roles across restarts (the records keep their
//! paths).

mod common;

use common::*;
use serde_json::Value;
use std::io::{Seek, SeekFrom, Write};

/// mdadm's fail → add spare → rebuild, and replace, through `nbraid` against a served
/// RAID 6: the spare takes the failed member's place and is rebuilt (rate-limited, followed
/// to the end), a healthy member is replaced while it serves, and NBD reads back every byte
/// after each.
#[test]
fn a_spare_rebuilds_a_failed_member_and_replace_swaps_a_healthy_one() {
    let nbdcopy = require("nbdcopy");
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path());
    let cfg = config.to_str().unwrap();
    let (mut d, uri) = serve(&config, "r6");
    let data = fill(&nbdcopy, dir.path(), &uri, 0x2545_f491_4f6c_dd1d);
    ok(nbraid(&["fail", "r6", "d1", "--config", cfg]), "fail");
    let spare = blank_member(dir.path(), "spare.img");
    let said = ok(nbraid(&["add", "r6", &spare, "--config", cfg]), "add");
    assert!(said.contains("rebuilding role 1 (spare)"), "{said}");
    let done: Value = serde_json::from_str(&ok(
        nbraid(&[
            "rebuild", "r6", "--rate", "200MB/s", "--config", cfg, "--json",
        ]),
        "rebuild",
    ))
    .unwrap();
    assert_eq!(done["state"], "done", "{done}");
    let status = |what: &str| -> Value {
        let v: Value = serde_json::from_str(&ok(
            nbraid(&["status", "r6", "--json", "--config", cfg]),
            what,
        ))
        .unwrap();
        v["volumes"][0].clone()
    };
    let v = status("status after the rebuild");
    assert_eq!(v["degraded"], false, "{v}");
    assert_eq!(v["members"][1]["state"], "healthy");
    serves(&v, 1, "spare.img");
    reads_back(&nbdcopy, dir.path(), &uri, &data);

    // A restart finds the spare in its role by the path the records keep: the config still
    // lists d1, and does not name spare.img at all.
    d.stop();
    let (mut d, uri) = serve(&config, "r6");
    let v = status("status after a restart");
    assert_eq!(v["degraded"], false, "{v}");
    serves(&v, 1, "spare.img");
    let notes = v["notes"].to_string();
    assert!(
        notes.contains("member spare (added at run time: /")
            && notes.contains("spare.img) holds role 1"),
        "{v}"
    );
    // It goes by an id, and its note gives the lines to paste into the config.
    assert_eq!(v["members"][1]["id"], "spare", "{v}");
    let note = v["notes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .find(|n| n.contains("added at run time"))
        .unwrap();
    let spare_path = dir.path().join("spare.img");
    assert!(
        note.contains(&format!(
            "[[member]]\nid = \"spare\"\npath = \"{}\"\nand set members = [\"d0\", \"spare\", ",
            spare_path.display()
        )),
        "{note}"
    );
    assert!(notes.contains("member d1 no longer holds a role"), "{v}");
    reads_back(&nbdcopy, dir.path(), &uri, &data);

    // Replace d3 while it serves; the volume never degrades.
    let new = blank_member(dir.path(), "new.img");
    // Given relative to the caller's directory (not the daemon's): made absolute, it is
    // opened there and recorded so.
    assert!(new.ends_with("/new.img"));
    let replace = std::process::Command::new(env!("CARGO_BIN_EXE_nbraid"))
        .current_dir(dir.path())
        .args(["replace", "r6", "d3", "new.img", "--config", cfg])
        .output()
        .unwrap();
    ok(replace, "replace");
    assert_eq!(status("status while replacing")["degraded"], false);
    let done: Value = serde_json::from_str(&ok(
        nbraid(&["rebuild", "r6", "--config", cfg, "--json"]),
        "rebuild (replace)",
    ))
    .unwrap();
    assert_eq!(done["state"], "done", "{done}");
    let v = status("status after the replace");
    assert_eq!(v["degraded"], false, "{v}");
    serves(&v, 3, "new.img");
    reads_back(&nbdcopy, dir.path(), &uri, &data);

    // And the replacement too, beside the spare; `nbraid check` reads the same from the
    // superblocks alone.
    d.stop();
    let checked = ok(nbraid(&["check", cfg]), "check");
    assert!(checked.contains("r6: healthy"), "{checked}");
    let (mut d, uri) = serve(&config, "r6");
    let v = status("status after the second restart");
    assert_eq!(v["degraded"], false, "{v}");
    serves(&v, 1, "spare.img");
    serves(&v, 3, "new.img");
    reads_back(&nbdcopy, dir.path(), &uri, &data);
    let said = ok(
        nbraid(&["rebuild", "r6", "--config", cfg]),
        "rebuild, healthy",
    );
    assert!(said.starts_with("r6: nothing to rebuild: "), "{said}");

    // A removed member leaves the records' list: the next start does not open it.
    ok(
        nbraid(&["fail", "r6", "3", "--config", cfg]),
        "fail the replacement",
    );
    ok(nbraid(&["remove", "r6", "3", "--config", cfg]), "remove it");
    d.stop();
    let (mut d, _) = serve(&config, "r6");
    let v = status("status after the removal and a restart");
    assert_eq!(v["degraded"], true, "{v}");
    assert!(!v.to_string().contains("new.img"), "{v}");
    serves(&v, 1, "spare.img");
    d.stop();

    // The config names the spare later (its own spelling): it is opened once, as the
    // config's spare, and still serves role 1.
    write_config_with(dir.path(), &["spare"], "spares = [\"spare\"]\n");
    let (mut d, uri) = serve(&config, "r6");
    let v = status("status with the spare in the config");
    assert_eq!(v["members"][1]["id"], "spare", "{v}");
    assert!(
        v["notes"]
            .to_string()
            .contains("spare (listed in spares) now holds role 1"),
        "{v}"
    );
    reads_back(&nbdcopy, dir.path(), &uri, &data);
    d.stop();
}

/// `add` and `replace` of a file that does not exist (a typo, or one the config does not
/// declare) are refused, naming it, and create nothing — mdadm --add never creates a device;
/// the same files made first are taken (`add_creates_nothing.rs` has the other names).
#[test]
fn add_and_replace_of_a_missing_undeclared_file_create_nothing() {
    let nbdcopy = require("nbdcopy");
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path());
    let cfg = config.to_str().unwrap();
    let (mut d, uri) = serve(&config, "r6");
    let data = fill(&nbdcopy, dir.path(), &uri, 0x243f_6a88_85a3_08d3);
    ok(nbraid(&["fail", "r6", "d1", "--config", cfg]), "fail");
    let spare = dir.path().join("new-spare.img");
    let spare_arg = spare.to_str().unwrap();
    let refused = nbraid(&["add", "r6", spare_arg, "--config", cfg]);
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{said}");
    assert!(
        said.contains(&format!("`{spare_arg}` does not exist")),
        "{said}"
    );
    assert!(!spare.exists(), "nothing created");
    let next = dir.path().join("new-d4.img");
    let next_arg = next.to_str().unwrap();
    let refused = nbraid(&["replace", "r6", "d4", next_arg, "--config", cfg]);
    assert!(!refused.status.success());
    assert!(!next.exists(), "nothing created");
    let v = volume_status(cfg);
    assert_eq!(v["members"][1]["state"], "failed", "{v:#}");
    assert_eq!(v["spares"], serde_json::json!([]), "{v:#}");

    blank_member(dir.path(), "new-spare.img");
    blank_member(dir.path(), "new-d4.img");
    let said = ok(nbraid(&["add", "r6", spare_arg, "--config", cfg]), "add");
    assert!(said.contains("rebuilding role 1"), "{said}");
    ok(
        nbraid(&["replace", "r6", "d4", next_arg, "--config", cfg]),
        "replace",
    );
    wait_for(cfg, "the rebuilds", |v| {
        v["members"]
            .as_array()
            .is_some_and(|m| m.iter().all(|m| m["state"] == "healthy"))
            && v["rebuild"]["state"] == "done"
    });
    reads_back(&nbdcopy, dir.path(), &uri, &data);
    d.stop();
}

/// Every config member replaced, one after the other, by files the config does not name
/// (md's "migrate to new disks"): no config member carries the newest record any more, so
/// a restart follows the lists of the members it opens by path until it has them all.
#[test]
fn a_volume_moved_whole_onto_new_files_restarts_on_them() {
    let nbdcopy = require("nbdcopy");
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path());
    let cfg = config.to_str().unwrap();
    let (mut d, uri) = serve(&config, "r6");
    let data = fill(&nbdcopy, dir.path(), &uri, 0x9e37_79b9_7f4a_7c15);
    for i in 0..6 {
        let new = blank_member(dir.path(), &format!("n{i}.img"));
        ok(
            nbraid(&["replace", "r6", &format!("d{i}"), &new, "--config", cfg]),
            "replace",
        );
        ok(nbraid(&["rebuild", "r6", "--config", cfg]), "rebuild");
    }
    d.stop();
    let (mut d, uri) = serve(&config, "r6");
    let v = status_of(cfg, "r6");
    assert_eq!(v["degraded"], false, "{v}");
    for i in 0..6 {
        serves(&v, i, &format!("n{i}.img"));
    }
    reads_back(&nbdcopy, dir.path(), &uri, &data);
    d.stop();
}

/// A spare added at run time that failed in its role and was rebuilt over leaves the
/// records' list: a restart does not take the failed file for a spare.
#[test]
fn a_failed_added_member_rebuilt_over_is_not_a_spare_after_a_restart() {
    let nbdcopy = require("nbdcopy");
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path());
    let cfg = config.to_str().unwrap();
    let (mut d, uri) = serve(&config, "r6");
    let data = fill(&nbdcopy, dir.path(), &uri, 0x6a09_e667_f3bc_c908);
    for (i, name) in ["s1.img", "s2.img"].into_iter().enumerate() {
        ok(nbraid(&["fail", "r6", "1", "--config", cfg]), "fail role 1");
        let spare = blank_member(dir.path(), name);
        ok(nbraid(&["add", "r6", &spare, "--config", cfg]), "add");
        ok(nbraid(&["rebuild", "r6", "--config", cfg]), "rebuild");
        let v = wait_for(cfg, &format!("round {i}'s rebuild"), |v| {
            v["degraded"] == false
        });
        serves(&v, 1, name);
    }
    d.stop();
    let (mut d, uri) = serve(&config, "r6");
    let v = status_of(cfg, "r6");
    serves(&v, 1, "s2.img");
    assert_eq!(v["spares"], serde_json::json!([]), "{v}");
    assert!(!v.to_string().contains("s1.img"), "{v}");
    reads_back(&nbdcopy, dir.path(), &uri, &data);

    // A recorded spare whose file is gone is said at start, and `nbraid remove` forgets it.
    let s3 = blank_member(dir.path(), "s3.img");
    ok(nbraid(&["add", "r6", &s3, "--config", cfg]), "add s3");
    d.stop();
    std::fs::remove_file(&s3).unwrap();
    let (mut d, _) = serve(&config, "r6");
    let notes = status_of(cfg, "r6")["notes"].to_string();
    assert!(
        notes.contains("s3.img (added at run time, recorded) cannot be opened"),
        "{notes}"
    );
    let said = ok(nbraid(&["remove", "r6", &s3, "--config", cfg]), "remove s3");
    assert!(said.contains("is no longer recorded"), "{said}");
    d.stop();
    let (mut d, _) = serve(&config, "r6");
    assert!(!status_of(cfg, "r6").to_string().contains("s3.img"));
    d.stop();
}

/// `remove` by the path of a member added at run time that now serves a role: it goes by an
/// id (its file's stem), not its path, yet the path names it — refused as any active
/// member's removal is, and still recorded, so a restart comes up healthy on it.
#[test]
fn remove_by_path_of_an_active_added_member_is_refused_and_keeps_it_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path());
    let cfg = config.to_str().unwrap();
    let (mut d, _uri) = serve(&config, "r6");
    ok(nbraid(&["fail", "r6", "d1", "--config", cfg]), "fail");
    let spare = blank_member(dir.path(), "spare.img");
    ok(nbraid(&["add", "r6", &spare, "--config", cfg]), "add");
    let v = wait_for(cfg, "the rebuild onto the spare", |v| {
        v["degraded"] == false
    });
    serves(&v, 1, "spare.img");

    let o = nbraid(&["remove", "r6", &spare, "--config", cfg]);
    let said = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success(),
        "removing an active member by path: {said}"
    );
    assert!(said.contains("r6") && said.contains("active"), "{said}");
    let v = status_of(cfg, "r6");
    assert_eq!(v["degraded"], false, "{v}");
    serves(&v, 1, "spare.img");

    d.stop();
    let (mut d, _) = serve(&config, "r6");
    let v = status_of(cfg, "r6");
    assert_eq!(
        v["degraded"], false,
        "the restart found the added member: {v}"
    );
    serves(&v, 1, "spare.img");
    d.stop();
}

/// A file `add` or `replace` offers that the disk rule refuses (it holds data) is let go at
/// once: no lock of the daemon's is left on it, so the operator can use it elsewhere.
#[test]
fn a_refused_add_or_replace_leaves_the_file_unlocked() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path());
    let cfg = config.to_str().unwrap();
    let (mut d, _uri) = serve(&config, "r6");
    let used = blank_member(dir.path(), "used.img");
    // Data where a blank disk has none (past the first 4 KiB).
    let mut f = std::fs::OpenOptions::new().write(true).open(&used).unwrap();
    f.seek(SeekFrom::Start(4096)).unwrap();
    f.write_all(&[0xa5; 4096]).unwrap();
    drop(f);

    let o = nbraid(&["add", "r6", &used, "--config", cfg]);
    let said = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && said.contains("is not blank"),
        "add: {said}"
    );
    assert!(lock_is_free(&used), "the refused add left used.img locked");

    ok(nbraid(&["fail", "r6", "d2", "--config", cfg]), "fail d2");
    let o = nbraid(&["replace", "r6", "d3", &used, "--config", cfg]);
    let said = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && said.contains("is not blank"),
        "replace: {said}"
    );
    assert!(
        lock_is_free(&used),
        "the refused replace left used.img locked"
    );
    d.stop();
}

/// Whether an exclusive `flock` on `path` is free (nobody, the daemon included, holds one).
fn lock_is_free(path: &str) -> bool {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open(path).unwrap();
    // SAFETY: flock(2) on a descriptor this function owns; released when `f` closes.
    unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

/// `v` (a volume's status) has role `role` served by the file named `file`.
fn serves(v: &Value, role: usize, file: &str) {
    let path = v["members"][role]["path"].as_str().unwrap_or("");
    assert!(
        path.ends_with(&format!("/{file}")),
        "role {role} not on {file}: {v}"
    );
}
