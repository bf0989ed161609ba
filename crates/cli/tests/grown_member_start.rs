//! Member files that grew while nbraidd was stopped (a LUN resized, a file truncated larger):
//! under a config that does not pin their size the next start serves the recorded size and
//! says once which member grew and by how much; `nbraid apply` grows the volume into it. A
//! config that pins the larger size asks for the growth: the start refuses it naming
//! `nbraid apply --yes`, which records the grow for the next start. `nbraidd` is the one
//! built beside `nbraid`.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;

/// `arrays.toml`: a RAID 1 `v` over `d0.img` and `d1.img`, their size the files' own unless
/// `size` pins it.
fn config(dir: &Path, size: Option<&str>) -> PathBuf {
    let mut text = "[daemon]\nlisten = [\"unix:nbd.sock\"]\n".to_string();
    for id in ["d0", "d1"] {
        text += &format!("[[member]]\nid = \"{id}\"\npath = \"{id}.img\"\n");
        if let Some(s) = size {
            text += &format!("size = \"{s}\"\n");
        }
    }
    text += "[[volume]]\nname = \"v\"\nlevel = \"raid1\"\nmembers = [\"d0\", \"d1\"]\n";
    let file = dir.join("arrays.toml");
    std::fs::write(&file, text).unwrap();
    file
}

fn grow(dir: &Path, len_bytes: u64) {
    for id in ["d0", "d1"] {
        set_len(dir, id, len_bytes);
    }
}

#[test]
fn members_grown_under_an_unpinned_config_start_as_recorded_and_apply_grows_them() {
    let dir = tempfile::tempdir().unwrap();
    grow(dir.path(), 24 * MIB);
    let file = config(dir.path(), None);
    let cfg = file.to_str().unwrap();
    ok(nbraid(&["create", "--config", cfg]), "create");
    let recorded = 22 * MIB;
    grow(dir.path(), 32 * MIB);

    // The start serves the recorded size and names each member that grew, once.
    let mut d = Daemon::start(&file);
    let v = status_of(cfg, "v");
    assert_eq!(v["capacity_bytes"], recorded, "{v}");
    let notes: Vec<&str> = (v["notes"].as_array().unwrap().iter())
        .filter_map(|n| n.as_str())
        .filter(|n| n.contains("grew"))
        .collect();
    assert_eq!(notes.len(), 2, "{v}");
    for (n, id) in notes.iter().zip(["d0", "d1"]) {
        assert!(
            n.contains(&format!("member {id} ({id}.img) grew 8 MiB")),
            "{n}"
        );
        assert!(n.contains("`nbraid apply"), "{n}");
    }
    let plan = ok(nbraid(&["apply", cfg]), "apply");
    assert!(plan.contains("grow online"), "{plan}");
    d.stop();

    // A config that pins the grown size asks for the growth: refused, naming the way.
    let file = config(dir.path(), Some("32MiB"));
    let out = Command::new(nbraidd_path())
        .args(["--config", cfg])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("the region grew 8388608 bytes"), "{err}");
    assert!(err.contains("`nbraid apply --yes`"), "{err}");
    ok(nbraid(&["apply", cfg, "--yes"]), "apply --yes (offline)");
    let mut d = Daemon::start(&file);
    wait_until(cfg, "v", "the grow", |v| v["capacity_bytes"] == 30 * MIB);
    d.stop();
}

/// `arrays.toml` in `dir`: RAID 5 `v` over d0..d2 and RAID 1 `w` over e0, e1, files of
/// 24 MiB each sized by their paths (no `size`).
fn raid5_and_mirror(dir: &Path) -> PathBuf {
    let mut text = "[daemon]\nlisten = [\"unix:nbd.sock\"]\n".to_string();
    for id in ["d0", "d1", "d2", "e0", "e1"] {
        set_len(dir, id, 24 * MIB);
        text += &format!("[[member]]\nid = \"{id}\"\npath = \"{id}.img\"\n");
    }
    text += "[[volume]]\nname = \"v\"\nlevel = \"raid5\"\nmembers = [\"d0\", \"d1\", \"d2\"]\n";
    text += "[[volume]]\nname = \"w\"\nlevel = \"raid1\"\nmembers = [\"e0\", \"e1\"]\n";
    let file = dir.join("arrays.toml");
    std::fs::write(&file, text).unwrap();
    file
}

/// Member file `{id}.img` in `dir` made `len_bytes` long (created if missing).
fn set_len(dir: &Path, id: &str, len_bytes: u64) {
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(dir.join(format!("{id}.img")))
        .unwrap();
    f.set_len(len_bytes).unwrap();
}

/// What the start, the check and status say of d1 truncated to 12 MiB.
const D1_SHORT: &str =
    "member d1 (d1.img) holds 12 MiB, less than the end of the region its records keep (24 MiB)";

/// The other way: a member file truncated shorter while stopped. The config, sizing the
/// volume by its members, shrank every region with it, and the start refused every volume
/// of the config (first naming `d0`'s region, then `d1`). Now the short member is left out
/// as a missing one is: its volume starts degraded (the other volume as if nothing
/// happened), the member is never written, the check and status say why, and the operator
/// brings it back with `nbraid remove` and `nbraid add` once it has its length again.
#[test]
fn a_member_truncated_shorter_is_left_out_and_its_volume_starts_degraded() {
    let nbdcopy = require("nbdcopy");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let file = raid5_and_mirror(d);
    let cfg = file.to_str().unwrap();
    ok(nbraid(&["create", "--config", cfg]), "create");
    let (mut daemon, uri) = serve(&file, "v");
    let data = seeded_bytes(7, 8 * MIB);
    copy_in(&nbdcopy, d, &uri, &data);
    daemon.stop();
    set_len(d, "d1", 12 * MIB);
    let d1 = d.join("d1.img");
    let before = sha256(&d1);

    let checked = ok(
        nbraid(&["check", cfg]),
        "check (a degraded start is no refusal)",
    );
    assert!(
        checked.contains("SHORT: holds 12 MiB, left out"),
        "{checked}"
    );
    assert!(
        checked.contains("v: degraded: role 1 unusable (d1: d1.img)"),
        "{checked}"
    );
    assert!(checked.contains(&format!("note: {D1_SHORT}")), "{checked}");
    assert!(checked.contains("w: healthy"), "{checked}");
    // The config's shape is the records' (it said "role 1 has no member in the config").
    assert!(!checked.contains("reshape plan"), "{checked}");

    let (mut daemon, uri) = serve(&file, "v");
    let v = status_of(cfg, "v");
    assert!(v["state"].as_str().unwrap().starts_with("degraded"), "{v}");
    let said = v["notes"].to_string();
    assert!(said.contains(D1_SHORT), "{v}");
    assert_eq!(status_of(cfg, "w")["state"], "healthy");
    prefix_reads_back(&nbdcopy, d, &uri, &data);
    // Never written: what the truncate left, byte for byte.
    assert_eq!(std::fs::metadata(&d1).unwrap().len(), 12 * MIB);
    assert_eq!(sha256(&d1), before);

    // Its length back, the operator takes it back: rebuilt, served whole.
    set_len(d, "d1", 24 * MIB);
    ok(nbraid(&["remove", "--config", cfg, "v", "d1"]), "remove");
    ok(
        nbraid(&["add", "--config", cfg, "v", d1.to_str().unwrap()]),
        "add",
    );
    wait_until(cfg, "v", "the rebuild", |v| v["state"] == "healthy");
    prefix_reads_back(&nbdcopy, d, &uri, &data);
    daemon.stop();
}

/// Past its tolerance the volume is refused, naming each short member and why — not as
/// missing or without a record; `nbraid check` says the same.
#[test]
fn members_truncated_past_tolerance_refuse_the_volume_naming_them() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let file = raid5_and_mirror(d);
    let cfg = file.to_str().unwrap();
    ok(nbraid(&["create", "--config", cfg]), "create");
    set_len(d, "d1", 12 * MIB);
    set_len(d, "d2", 12 * MIB);
    let d2_short = D1_SHORT.replace("d1", "d2");
    let refused = start_refused(&file);
    for part in ["left out: ", D1_SHORT, &d2_short] {
        assert!(refused.contains(part), "{part}: {refused}");
    }
    assert!(!refused.contains("carrying no record"), "{refused}");
    let o = nbraid(&["check", cfg]);
    let checked = String::from_utf8_lossy(&o.stdout);
    assert!(!o.status.success(), "{checked}");
    assert!(
        checked.contains("v: refused") && checked.contains(&d2_short),
        "{checked}"
    );
    assert!(checked.contains("w: healthy"), "{checked}");
}

/// A member with a `size` its file no longer holds: the config alone refused it — and with it
/// every volume — as a typo ("an existing member must be at least its size"). A member its
/// volume's records keep bytes on is short, left out as above; one no record needs (nothing
/// created yet) is still refused.
#[test]
fn a_member_holding_less_than_its_size_is_short_once_records_keep_it() {
    let dir = tempfile::tempdir().unwrap();
    grow(dir.path(), 24 * MIB);
    let file = config(dir.path(), Some("24MiB"));
    let cfg = file.to_str().unwrap();
    set_len(dir.path(), "d1", 12 * MIB);
    let o = nbraid(&["check", cfg]);
    let typo = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{typo}");
    assert!(
        typo.contains("an existing member must be at least its size"),
        "{typo}"
    );

    set_len(dir.path(), "d1", 24 * MIB);
    ok(nbraid(&["create", "--config", cfg]), "create");
    set_len(dir.path(), "d1", 12 * MIB);
    let checked = ok(nbraid(&["check", cfg]), "check");
    let named = "member d1 (d1.img) holds 12 MiB, less than its size in the config (24 MiB)";
    assert!(checked.contains(named), "{checked}");
    assert!(
        checked.contains("v: degraded: role 1 unusable (d1: d1.img)"),
        "{checked}"
    );
    assert!(!checked.contains("reshape plan"), "{checked}");
}

/// A spare that took a role, truncated while stopped: its record reads past its end, and the
/// config refused it — and every volume — as a spare smaller than the members. It is short
/// now, left out as a member is: the volume starts degraded, saying why.
#[test]
fn a_spare_that_took_a_role_and_was_truncated_is_left_out() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    grow(d, 24 * MIB);
    set_len(d, "s0", 24 * MIB);
    let file = config(d, None);
    let mut text = std::fs::read_to_string(&file).unwrap();
    text = text.replace(
        "[[volume]]",
        "[[member]]\nid = \"s0\"\npath = \"s0.img\"\n[[volume]]",
    );
    text += "spares = [\"s0\"]\n";
    std::fs::write(&file, text).unwrap();
    let cfg = file.to_str().unwrap();
    ok(nbraid(&["create", "--config", cfg]), "create");
    let mut daemon = Daemon::start(&file);
    ok(nbraid(&["fail", "--config", cfg, "v", "d1"]), "fail d1");
    wait_until(cfg, "v", "the rebuild onto s0", |v| v["state"] == "healthy");
    daemon.stop();
    set_len(d, "s0", 10 * MIB);

    let named = "member s0 (s0.img) holds 10 MiB, less than the end of the region its records keep (24 MiB)";
    let checked = ok(nbraid(&["check", cfg]), "check");
    assert!(checked.contains(named), "{checked}");
    let mut daemon = Daemon::start(&file);
    let v = status_of(cfg, "v");
    assert!(v["state"].as_str().unwrap().starts_with("degraded"), "{v}");
    assert!(v["notes"].to_string().contains(named), "{v}");
    daemon.stop();
    assert_eq!(std::fs::metadata(d.join("s0.img")).unwrap().len(), 10 * MIB);
}
