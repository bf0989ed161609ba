//! A reshape planned at `rebuild_rate = "adaptive"` says so — `nbraid check` from the config,
//! `nbraid apply` from the running daemon's rate, in text and JSON. It said "at full speed (no
//! rebuild_rate set)": a rate is set, and it yields to clients' I/O. Through the real binaries.

mod common;

use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// `arrays.toml`: RAID 5 volume `v` over the first `members` of d0..d3 (32 MiB files),
/// rebuilt at the adaptive rate.
fn config(dir: &Path, members: usize) -> PathBuf {
    let mut text = daemon_and_members("d", 4, "32MiB");
    let ids: Vec<String> = (0..members).map(|i| format!("\"d{i}\"")).collect();
    text += &format!(
        "[[volume]]\nname = \"v\"\nlevel = \"raid5\"\nmembers = [{}]\nchecksums = \"off\"\n\
         rebuild_rate = \"adaptive\"\n",
        ids.join(", ")
    );
    let file = dir.join("arrays.toml");
    std::fs::write(&file, text).unwrap();
    file
}

fn says_adaptive(out: &str) {
    assert!(!out.contains("full speed (no rebuild_rate set)"), "{out}");
    assert!(
        out.contains("at the adaptive rate (rebuild_rate = \"adaptive\")"),
        "{out}"
    );
}

#[test]
fn a_reshape_at_the_adaptive_rate_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let file = config(dir.path(), 3);
    let cfg = file.to_str().unwrap();
    ok(nbraid(&["create", cfg]), "create");
    config(dir.path(), 4);
    // `check` exits non-zero (the config's shape is not the records'), and prints the plan.
    let checked = nbraid(&["check", cfg]);
    says_adaptive(&String::from_utf8_lossy(&checked.stdout));

    config(dir.path(), 3);
    let mut d = Daemon::start(&file);
    config(dir.path(), 4);
    says_adaptive(&ok(nbraid(&["apply", cfg]), "apply"));
    let out = ok(nbraid(&["apply", cfg, "--json"]), "apply --json");
    let plan = serde_json::from_str::<Value>(&out).unwrap()["volumes"][0].clone();
    assert_eq!(plan["action"], "online", "{plan:#}");
    assert_eq!(plan["adaptive"], true, "{plan:#}");
    assert_eq!(plan["seconds_at_rate"], Value::Null, "{plan:#}");
    d.stop();
}
