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
        let f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(dir.join(format!("{id}.img")))
            .unwrap();
        f.set_len(len_bytes).unwrap();
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

/// The other way: a member file truncated shorter while stopped. The config, sizing the
/// volume by its members, shrinks every region with it, and the start and `nbraid check`
/// refused naming the first member's region (`d0`'s), not the member that shrank. Both name
/// `d1` now, its length and what its records need.
#[test]
fn a_member_truncated_shorter_is_named_by_the_start_and_the_check() {
    let dir = tempfile::tempdir().unwrap();
    grow(dir.path(), 24 * MIB);
    let file = config(dir.path(), None);
    let cfg = file.to_str().unwrap();
    ok(nbraid(&["create", "--config", cfg]), "create");
    let d1 = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.path().join("d1.img"))
        .unwrap();
    d1.set_len(12 * MIB).unwrap();
    let named = "member d1 (d1.img) holds 12 MiB, less than the end of the region its records keep (24 MiB)";
    let o = nbraid(&["check", cfg]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(!o.status.success() && out.contains(named), "{out}");
    let o = Command::new(nbraidd_path())
        .arg("--config")
        .arg(&file)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains(named), "{err}");
}
