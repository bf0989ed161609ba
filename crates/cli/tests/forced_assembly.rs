//! Past tolerance there is a way back (mdadm --assemble --force): a RAID 6 that lost a third
//! member after two were failed refuses to start naming each role and why, and
//! `nbraidd --force-assemble` takes the freshest failed member back, says so, and serves what
//! was written; later starts need no flag. `nbraidd` is the one built beside `nbraid`.

mod common;

use common::*;
use std::process::Command;

#[test]
fn a_raid6_past_tolerance_is_refused_with_each_role_then_assembled_by_force() {
    let nbdcopy = require("nbdcopy");
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path());
    let cfg = config.to_str().unwrap();
    let (mut d, uri) = serve(&config, "r6");
    let data = fill(&nbdcopy, dir.path(), &uri, 7);
    ok(nbraid(&["fail", "r6", "d1", "--config", cfg]), "fail d1");
    ok(nbraid(&["fail", "r6", "d2", "--config", cfg]), "fail d2");
    d.stop();
    // A third member is lost while the daemon is down.
    std::fs::remove_file(dir.path().join("d3.img")).unwrap();

    let refused = Command::new(nbraidd_path())
        .arg("--config")
        .arg(&config)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "started past tolerance: {said}");
    for part in [
        "role 1: d1 recorded failed",
        "role 2: d2 recorded failed",
        "role 3: no member carries it",
        "d3",
        "--force-assemble r6",
    ] {
        assert!(said.contains(part), "the refusal lacks `{part}`: {said}");
    }

    // d2 failed last: the freshest, taken back; the volume serves degraded by roles 1 and 3.
    let mut d = Daemon::start_with(&config, &["--force-assemble", "r6"]);
    let v = volume_status(cfg);
    let notes = v["notes"].to_string();
    assert!(
        notes.contains("assembled by force: d2 took role 2 back"),
        "{v:#}"
    );
    assert_eq!(v["available"], true, "{v:#}");
    let states: Vec<&str> = v["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["state"].as_str().unwrap())
        .collect();
    assert_eq!(states[2], "healthy", "{v:#}");
    reads_back(&nbdcopy, dir.path(), &uri, &data);
    d.stop();

    // The records now trust d2: an ordinary start serves without the flag.
    let (mut d, uri) = serve(&config, "r6");
    reads_back(&nbdcopy, dir.path(), &uri, &data);
    d.stop();
}

/// Three members of a RAID 6 out one after another with nothing acknowledged durable between
/// (no client flush: as when remote members drop together under writers), then the daemon
/// dies: `--force-assemble` takes all three back as current — not only the freshest, which
/// would leave the others to be rebuilt from stripes the failure tore — says so in the
/// notes, and every byte written before reads back.
#[test]
fn raid6_members_that_failed_together_all_come_back_current() {
    let nbdcopy = require("nbdcopy");
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path());
    let cfg = config.to_str().unwrap();
    let (d, uri) = serve(&config, "r6");
    let data = fill(&nbdcopy, dir.path(), &uri, 11);
    ok(nbraid(&["fail", "r6", "d1", "--config", cfg]), "fail d1");
    ok(nbraid(&["fail", "r6", "d2", "--config", cfg]), "fail d2");
    ok(
        nbraid(&["fail", "r6", "d3", "--force", "--config", cfg]),
        "fail d3",
    );
    // `nbraid fail` answers before its commit is written (a task of the daemon's records it):
    // give the commits time before the kill.
    std::thread::sleep(std::time::Duration::from_secs(1));
    drop(d); // killed: no orderly stop

    let mut d = Daemon::start_with(&config, &["--force-assemble", "r6"]);
    let v = volume_status(cfg);
    let notes = v["notes"].to_string();
    for id in 1..=3 {
        let back = format!("assembled by force: d{id} took role {id} back as current");
        assert!(notes.contains(&back), "{back} missing: {v:#}");
    }
    assert!(
        notes.contains("no write was acknowledged durable after it failed"),
        "{v:#}"
    );
    let states: Vec<&str> = v["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["state"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["healthy"; 6], "{v:#}");
    reads_back(&nbdcopy, dir.path(), &uri, &data);
    d.stop();
}
