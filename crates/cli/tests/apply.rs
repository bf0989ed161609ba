//! `nbraid apply` and `nbraid check` against a config that declares another shape than the
//! superblocks record: the plan per volume (what changes, bytes moved, time at the rate,
//! redundancy during the move) or the refusal with its reason. `nbraidd` is the one built
//! beside `nbraid` (`cargo build --bin nbraidd`).

mod common;

use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// `arrays.toml` with volume `db`, RAID 5 (or `level`) over the first `members` of d0..d4
/// (9 MiB files: 1 MiB of metadata, 1 MiB of block checksums, a 7 MiB region), rebuild at
/// 4 MiB/s, its control socket beside it.
fn config(dir: &Path, level: &str, members: usize) -> PathBuf {
    let mut text = daemon_and_members("d", 5, "9MiB");
    let ids: Vec<String> = (0..members).map(|i| format!("\"d{i}\"")).collect();
    text += &format!(
        "[[volume]]\nname = \"db\"\nlevel = \"{level}\"\nstrip_size = \"64KiB\"\n\
         members = [{}]\nrebuild_rate = \"4MiB\"\n",
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

#[test]
fn check_shows_the_plan_offline_when_the_config_differs_from_the_records() {
    let dir = tempfile::tempdir().unwrap();
    let file = config(dir.path(), "raid5", 3);
    let cfg = file.to_str().unwrap();
    ok(nbraid(&["create", cfg]), "create");
    config(dir.path(), "raid5", 4);
    let (success, out, err) = run(&["check", cfg]);
    assert!(!success, "the daemon would refuse to start on it: {out}");
    assert!(err.contains("nbraidd would refuse to start"), "{err}");
    for says in [
        "reshape plan",
        "volume db: raid5 of 3 members, strip 64 KiB → raid5 of 4 members, strip 64 KiB",
        "~ members 3 → 4",
        "~ size 14 MiB → 21 MiB",
        "restripe online",
        "14 MiB walked, 18.66 MiB written to members, 4 s at 4 MiB/s",
        "redundancy: survives 1 member loss during the move, 1 member loss after",
    ] {
        assert!(out.contains(says), "{says:?} missing from:\n{out}");
    }
    let (_, out, _) = run(&["check", cfg, "--json"]);
    let v: Value = serde_json::from_str(&out).unwrap();
    let plan = &v["superblocks"][0]["reshape"];
    assert_eq!(plan["action"], "online", "{plan}");
    assert_eq!(plan["kind"], "restripe", "{plan}");
    assert_eq!(plan["walked_bytes"], 14 * MIB, "{plan}");
    assert_eq!(plan["from"]["level"], "raid5", "{plan}");
    assert_eq!(plan["to"]["members"], 4, "{plan}");

    // Fewer members: refused, with the reason.
    config(dir.path(), "raid0", 2);
    let (_, out, _) = run(&["check", cfg]);
    assert!(
        out.contains("refused: the config names 2 members where the records have 3"),
        "{out}"
    );
}

#[test]
fn apply_plans_against_the_running_daemon_and_starts_nothing_it_cannot_do() {
    let dir = tempfile::tempdir().unwrap();
    let file = config(dir.path(), "raid5", 3);
    let cfg = file.to_str().unwrap();
    let (success, _, err) = run(&["apply", cfg]);
    assert!(!success, "no daemon: apply refuses");
    assert!(err.contains("is nbraidd running on this config?"), "{err}");

    let mut daemon = Daemon::start(&file);
    let out = ok(nbraid(&["apply", cfg]), "apply (unchanged)");
    assert_eq!(
        out,
        "volume db: unchanged (raid5 of 3 members, strip 64 KiB)\n"
    );

    // RAID 5 of three → RAID 6 of five: the plan, and how to start it.
    config(dir.path(), "raid6", 5);
    let out = ok(nbraid(&["apply", cfg]), "apply");
    for says in [
        "volume db: raid5 of 3 members, strip 64 KiB → raid6 of 5 members, strip 64 KiB",
        "~ members 3 → 5",
        "~ level raid5 → raid6",
        "~ size 14 MiB → 21 MiB",
        "redundancy: survives 1 member loss during the move, 2 member losses after",
        "--yes` starts the moves above",
    ] {
        assert!(out.contains(says), "{says:?} missing from:\n{out}");
    }
    let v: Value = serde_json::from_str(&ok(nbraid(&["apply", cfg, "--json"]), "--json")).unwrap();
    let plan = &v["volumes"][0];
    assert_eq!(
        (&plan["volume"], &plan["action"], &plan["served"]),
        (
            &Value::from("db"),
            &Value::from("online"),
            &Value::from(true)
        ),
        "{v}"
    );
    assert_eq!(plan["tolerance_during"], 1, "{plan}");
    assert_eq!(plan["tolerance_after"], 2, "{plan}");
    assert_eq!(plan["seconds_at_rate"], 4, "{plan}");
    assert_eq!(v["started"], false);

    // --yes against a running daemon starts the move online, unless the daemon refuses it:
    // here a scrub runs, and the refusal names it (the plan printed all the same).
    let scrub = br#"{"v":1,"op":"scrub","volume":"db","rate_bytes_per_s":1048576}"#;
    let replies = exchange(&daemon.control, &[scrub]);
    assert_eq!(replies[0]["ok"], true, "{}", replies[0]);
    let (success, out, err) = run(&["apply", cfg, "--yes"]);
    assert!(!success, "{out}");
    assert!(out.contains("raid6 of 5 members"), "{out}");
    assert!(
        err.contains("volume db: not started") && err.contains("a scrub is running"),
        "{err}"
    );
    let replies = exchange(
        &daemon.control,
        &[br#"{"v":1,"op":"cancel","volume":"db"}"#],
    );
    assert_eq!(replies[0]["ok"], true, "{}", replies[0]);

    // RAID 5 → RAID 0 is refused online, with the reason.
    config(dir.path(), "raid0", 3);
    let out = ok(nbraid(&["apply", cfg]), "apply (refused)");
    assert!(
        out.contains("refused: raid5 → raid0 lowers the redundancy from 1 to 0"),
        "{out}"
    );
    // The daemon served on, untouched.
    config(dir.path(), "raid5", 3);
    let out = ok(nbraid(&["apply", cfg]), "apply (unchanged again)");
    assert!(out.contains("unchanged"), "{out}");
    daemon.stop();
}
