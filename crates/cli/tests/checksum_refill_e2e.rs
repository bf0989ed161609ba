//! The per-block checksums an unclean shutdown dropped, given back by the daemon, through
//! the real binaries: a checksummed RAID 1 filled through NBD and SIGKILLed; the restart
//! starts the refill pass by itself, `nbraid status` shows it (`checksum_refill`: progress
//! and the blocks still without checksums) until it is done; a block written before the
//! crash then rots on one copy and a scrub finds it by its checksum (not only as copies that
//! disagree). An orderly stop after it records the volume clean.

mod common;

use common::blocks::{corrupt, unix_uri};
use common::*;
use serde_json::Value;
use std::time::{Duration, Instant};

const VOLUME: &str = "m";

fn config(dir: &std::path::Path) -> std::path::PathBuf {
    let mut text = "[daemon]\nlisten = [\"unix:nbd.sock\"]\n\n".to_string();
    for i in 0..2 {
        text += &format!("[[member]]\nid = \"m{i}\"\npath = \"m{i}.img\"\nsize = \"24MiB\"\n\n");
    }
    // Checksums on (the default); the refill at 8 MiB/s, so status sees it run.
    text += "[[volume]]\nname = \"m\"\nlevel = \"raid1\"\nmembers = [\"m0\", \"m1\"]\n\
             rebuild_rate = \"8MiB\"\n";
    let file = dir.join("arrays.toml");
    std::fs::write(&file, text).unwrap();
    file
}

/// Polls the volume's status until `done` says so (60 s at most).
fn poll(cfg: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let st = status_of(cfg, VOLUME);
        if done(&st) {
            return st;
        }
        assert!(Instant::now() < deadline, "{what}: {st:#}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Where the volume's byte `at` lies on role `role`'s member file.
fn member_offset(cfg: &str, at: u64, role: u64) -> u64 {
    let v: Value = serde_json::from_str(&ok(
        nbraid(&["map", cfg, VOLUME, &format!("{at}B"), "--json"]),
        "map --json",
    ))
    .unwrap();
    let rows = v["data"].as_array().unwrap();
    let row = rows.iter().find(|r| r["member_index"] == role).unwrap();
    row["member_offset"].as_u64().unwrap()
}

#[test]
fn a_crash_gets_its_checksums_back_and_status_counts_those_missing_meanwhile() {
    let nbdcopy = require("nbdcopy");
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let cfg = config.to_str().unwrap().to_string();
    let (mut d, uri) = serve(&config, VOLUME);
    let data = fill_whole(&nbdcopy, dir.path(), &uri, (&cfg, VOLUME), 0x5eed_0f1e);
    d.child.kill().unwrap();
    d.child.wait().unwrap();

    let mut d = Daemon::start(&config);
    let st = poll(&cfg, "the refill found what was dropped", |st| {
        st["checksum_refill"]["total_bytes"].as_u64().unwrap_or(0) > 0
    });
    assert_eq!(st["metadata"]["clean_at_start"], false, "{st:#}");
    // Tens of MiB at 8 MiB/s, after the background resync: seconds to go.
    let refill = &st["checksum_refill"];
    assert_ne!(refill["state"], "done", "{refill}");
    assert!(refill["unchecked_blocks"].as_u64().unwrap() > 0, "{refill}");
    let text = ok(nbraid(&["status", VOLUME, "--config", &cfg]), "status");
    assert!(
        text.contains("checksum_refill") && text.contains("blocks without checksums"),
        "{text}"
    );
    let st = poll(&cfg, "the refill", |st| {
        st["checksum_refill"]["state"] == "done"
    });
    let refill = &st["checksum_refill"];
    assert_eq!(refill["unchecked_blocks"], 0, "{refill}");
    assert_eq!(refill["skipped_bytes"], 0, "{refill}");
    assert!(refill["filled_blocks"].as_u64().unwrap() > 0, "{refill}");
    reads_back(&nbdcopy, dir.path(), &unix_uri(dir.path(), VOLUME), &data);

    // A block written before the crash rots on the second copy: its checksum finds it.
    let at = data.len() as u64 / 2 / 4096 * 4096;
    let start = member_offset(&cfg, at, 1);
    corrupt(&dir.path().join("m1.img"), start, 0, 77);
    let args = ["scrub", VOLUME, "--repair", "--config", &cfg, "--json"];
    let scrub: Value = serde_json::from_str(&ok(nbraid(&args), "scrub")).unwrap();
    assert_eq!(scrub["state"], "done", "{scrub:#}");
    let st = status_of(&cfg, VOLUME);
    let errors = st["members"][1]["checksum_errors"].as_u64().unwrap();
    assert!(errors >= 1, "found by its checksum: {st:#}");
    reads_back(&nbdcopy, dir.path(), &unix_uri(dir.path(), VOLUME), &data);
    d.stop();
    let mut d = Daemon::start(&config);
    let st = status_of(&cfg, VOLUME);
    assert_eq!(st["metadata"]["clean_at_start"], true, "{st:#}");
    assert!(st["checksum_refill"].is_null(), "{st:#}");
    d.stop();
}
