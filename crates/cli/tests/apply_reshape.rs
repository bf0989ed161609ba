//! A reshape through the real binaries: a RAID 5 of three members serving data grows to four
//! with `nbraid apply --yes` (no daemon running: it writes the records that start the move;
//! the next `nbraidd` copies on while serving), then moves to RAID 6 with a fifth member and
//! is SIGKILLed mid-way; after the restart the reshape finishes, every byte reads back, the
//! size grew, and two failed members are survived. Needs `nbdcopy` (fails loudly without);
//! `nbraidd` is the one built beside `nbraid` (`cargo build --bin nbraidd`).

mod common;

use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// `arrays.toml`: volume `db` of `level` over the first `members` of d0..d4 (9 MiB files: 1 MiB
/// of metadata, 1 MiB of block checksums, a 7 MiB region),
/// strip 64 KiB, reshaped at `rate`.
fn config(dir: &Path, level: &str, members: usize, rate: &str) -> PathBuf {
    let mut text = "[daemon]\nlisten = [\"unix:nbd.sock\"]\n\n".to_string();
    for i in 0..5 {
        text += &format!("[[member]]\nid = \"d{i}\"\npath = \"d{i}.img\"\nsize = \"9MiB\"\n\n");
    }
    let ids: Vec<String> = (0..members).map(|i| format!("\"d{i}\"")).collect();
    text += &format!(
        "[[volume]]\nname = \"db\"\nlevel = \"{level}\"\nstrip_size = \"64KiB\"\n\
         members = [{}]\nrebuild_rate = \"{rate}\"\n",
        ids.join(", ")
    );
    let file = dir.join("arrays.toml");
    std::fs::write(&file, text).unwrap();
    file
}

fn copy(nbdcopy: &Path, from: &Path, to: &str) {
    ok(
        Command::new(nbdcopy).arg(from).arg(to).output().unwrap(),
        "nbdcopy into the volume",
    );
}

/// Polls `status` until `done` holds (60 s at most).
fn wait(cfg: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let v = status_of(cfg, "db");
        if done(&v) {
            return v;
        }
        assert!(Instant::now() < deadline, "waiting for {what}: {v:#}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn reshape_done(v: &Value) -> bool {
    v["reshape"]["state"] == "done"
}

#[test]
fn raid5_grows_then_moves_to_raid6_through_a_sigkill() {
    let nbdcopy = require("nbdcopy");
    let dir = tempfile::tempdir().unwrap();
    let file = config(dir.path(), "raid5", 3, "64MiB");
    let cfg = file.to_str().unwrap();
    ok(nbraid(&["create", cfg]), "create");

    let (mut d, uri) = serve(&file, "db");
    let cap = status_of(cfg, "db")["capacity_bytes"].as_u64().unwrap();
    assert_eq!(cap, 14 * MIB);
    let data = seeded_bytes(5, cap);
    let src = dir.path().join("src.img");
    std::fs::write(&src, &data).unwrap();
    copy(&nbdcopy, &src, &uri);
    d.stop();

    // RAID 5 of 3 → 4.
    config(dir.path(), "raid5", 4, "64MiB");
    let out = ok(nbraid(&["apply", cfg, "--yes"]), "apply --yes");
    assert!(out.contains("~ members 3 → 4"), "{out}");
    assert!(out.contains("started"), "{out}");
    let (mut d, uri) = serve(&file, "db");
    wait(cfg, "the reshape to 4 members", reshape_done);
    reads_back(&nbdcopy, dir.path(), &uri, &data);
    d.stop();
    let (mut d, uri) = serve(&file, "db");
    let v = status_of(cfg, "db");
    assert_eq!(
        v["capacity_bytes"].as_u64(),
        Some(21 * MIB),
        "the size grew"
    );
    assert!(v["reshape"].is_null(), "no reshape left: {v:#}");
    let mut data = data;
    data.extend(seeded_bytes(6, 7 * MIB));
    std::fs::write(&src, &data).unwrap();
    copy(&nbdcopy, &src, &uri);
    d.stop();

    // RAID 5 of 4 → RAID 6 of 5, slowly enough to be killed mid-way.
    config(dir.path(), "raid6", 5, "2MiB");
    let out = ok(nbraid(&["apply", cfg, "--yes"]), "apply --yes to raid6");
    assert!(out.contains("started"), "{out}");
    let (mut d, _) = serve(&file, "db");
    wait(cfg, "the reshape to move", |v| {
        v["reshape"]["position_bytes"].as_u64().unwrap_or(0) > 0
    });
    d.child.kill().unwrap(); // SIGKILL
    d.child.wait().unwrap();
    config(dir.path(), "raid6", 5, "64MiB");
    let (mut d, uri) = serve(&file, "db");
    let v = status_of(cfg, "db");
    assert!(!v["reshape"].is_null(), "the restart carries on: {v:#}");
    wait(cfg, "the reshape to RAID 6", reshape_done);
    reads_back(&nbdcopy, dir.path(), &uri, &data);
    d.stop();

    let (mut d, uri) = serve(&file, "db");
    let v = status_of(cfg, "db");
    assert_eq!(v["level"], "raid6", "{v:#}");
    assert_eq!(v["capacity_bytes"].as_u64(), Some(21 * MIB));
    ok(nbraid(&["fail", "db", "d1", "--config", cfg]), "fail d1");
    ok(nbraid(&["fail", "db", "d3", "--config", cfg]), "fail d3");
    reads_back(&nbdcopy, dir.path(), &uri, &data);
    d.stop();
}
