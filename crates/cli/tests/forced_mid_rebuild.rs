//! A RAID 5 whose spare rebuild was cut short by a second failure: a start refuses, naming
//! the role being rebuilt (with its checkpoint) and the failed one, and
//! `nbraidd --force-assemble` takes the failed member back (both checks say so first, in the
//! start's words); the rebuild goes on and the volume
//! reads what was written. Found by a hunt over remote members (a server killed during a
//! rebuild): the start called the volume "degraded: role 1 failed", went on, and died on its
//! first read; the forced start took nothing back. `nbraidd` is the one built beside `nbraid`.

mod common;

use common::*;
use serde_json::json;
use std::path::Path;

/// RAID 5 `v` over m0..m3 (24 MiB each: 69 MiB) with spare s0, rebuilt at 8 MB/s.
fn config(dir: &Path) -> std::path::PathBuf {
    let text = daemon_and_members("m", 4, "24MiB")
        + "[[member]]\nid = \"s0\"\npath = \"s0.img\"\nsize = \"24MiB\"\n\n"
        + "[[volume]]\nname = \"v\"\nlevel = \"raid5\"\nstrip_size = \"64KiB\"\n"
        + "members = [\"m0\", \"m1\", \"m2\", \"m3\"]\nspares = [\"s0\"]\n"
        + "rebuild_rate = \"8MB\"\n";
    let cfg = dir.join("arrays.toml");
    std::fs::write(&cfg, text).unwrap();
    cfg
}

#[test]
fn a_raid5_failing_twice_mid_rebuild_is_refused_then_assembled_by_force() {
    let nbdcopy = require("nbdcopy");
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let cfg = config.to_str().unwrap();
    let (mut d, uri) = serve(&config, "v");
    let data = fill(&nbdcopy, dir.path(), &uri, 5);
    ok(nbraid(&["fail", "v", "m0", "--config", cfg]), "fail m0");
    wait_until(cfg, "v", "the spare half rebuilt", |v| {
        v["rebuild"]["position_bytes"].as_u64() >= Some(16 * MIB)
    });
    ok(
        nbraid(&["fail", "v", "m1", "--force", "--config", cfg]),
        "fail m1",
    );
    // Past its tolerance, the volume cannot be recorded clean: the daemon says so in its exit.
    assert!(!d.terminate().success());

    // The check says what the start does.
    let check = std::process::Command::new(nbraidd_path())
        .args(["--check", "--config", cfg])
        .output()
        .unwrap();
    let checked = String::from_utf8_lossy(&check.stdout).to_string()
        + &String::from_utf8_lossy(&check.stderr);
    assert!(!checked.contains("serves it degraded"), "{checked}");
    let said = start_refused(&config);
    // Both checks say per role what the start says (they said "roles 0, 1 have no trusted
    // member"): which member, why, and the command that forces it.
    let looked = String::from_utf8_lossy(&nbraid(&["check", cfg]).stdout).to_string();
    for part in [
        "role 0: s0 being rebuilt (current below byte",
        "role 1: m1 recorded failed",
        "--force-assemble v",
    ] {
        assert!(said.contains(part), "the refusal lacks `{part}`: {said}");
        assert!(
            checked.contains(part),
            "nbraidd --check lacks `{part}`: {checked}"
        );
        assert!(
            looked.contains(part),
            "nbraid check lacks `{part}`: {looked}"
        );
    }

    let mut d = Daemon::start_with(&config, &["--force-assemble", "v"]);
    let v = wait_until(cfg, "v", "the rebuild done", |v| {
        v["rebuild"]["state"] == "done" && v["degraded"] == false
    });
    assert_eq!(v["available"], true, "{v:#}");
    assert_eq!(v["rebuild"]["rebuilt_roles"], json!([0]), "{v:#}");
    prefix_reads_back(&nbdcopy, dir.path(), &uri, &data);
    d.stop();
}
