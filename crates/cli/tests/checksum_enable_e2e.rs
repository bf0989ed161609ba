//! Enabling per-block checksums on volumes created without them, through the real binaries:
//! a RAID 5 and a two-way RAID 1 created with `checksums = "off"` are filled through NBD
//! (nbdcopy) and the daemon stopped. The default config (checksums on) is refused by
//! `nbraid check` with the way out; `checksums = "enable"` is described by `check` (where
//! the areas go); the daemon started with it computes the checksums in the background
//! (`nbraid status --json`: `checksum_fill`) and, once done, 4 KiB blocks of member files
//! overwritten behind its back read back exactly, `nbraid scrub --repair` mends the rest, the
//! members hold their old bytes again and status counts every bad block repaired. A restart
//! after that starts no pass.

mod common;

use common::blocks::{block_of, corrupt, unix_uri};
use common::*;
use serde_json::Value;
use std::path::Path;
use std::time::{Duration, Instant};

/// Member files of 9 MiB: 1 MiB metadata and an 8 MiB region (the checksum area of a
/// volume enabling them goes into the metadata area: no room after the region).
const MEMBER_MIB: u64 = 9;
const REGION_START: u64 = MIB;
const REGION: u64 = 8 * MIB;
const BLOCK: u64 = 4096;

const VOLUMES: [(&str, &str, usize); 2] = [("r5", "raid5", 3), ("r1", "raid1", 2)];

fn member_ids(v: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{v}m{i}")).collect()
}

/// The config with `checksums_line` in every volume's table (empty: the default).
fn config(dir: &Path, checksums_line: &str) -> std::path::PathBuf {
    let mut text = "[daemon]\nlisten = [\"unix:nbd.sock\"]\n\n".to_string();
    for (v, _, n) in VOLUMES {
        for id in member_ids(v, n) {
            text += &format!(
                "[[member]]\nid = \"{id}\"\npath = \"{id}.img\"\nsize = \"{MEMBER_MIB}MiB\"\n\n"
            );
        }
    }
    for (v, level, n) in VOLUMES {
        let quoted: Vec<String> = member_ids(v, n)
            .iter()
            .map(|i| format!("\"{i}\""))
            .collect();
        text += &format!(
            "[[volume]]\nname = \"{v}\"\nlevel = \"{level}\"\nmembers = [{}]\n{checksums_line}\n",
            quoted.join(", ")
        );
        if level == "raid5" {
            text += "strip_size = \"64KiB\"\n";
        }
        text += "\n";
    }
    let file = dir.join("arrays.toml");
    std::fs::write(&file, text).unwrap();
    file
}

/// Polls volume `v`'s status until its checksum pass is done (60 s at most).
fn wait_for_fill(cfg: &str, v: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let st = status_of(cfg, v);
        if st["checksum_fill"]["state"] == "done" {
            return st;
        }
        assert!(Instant::now() < deadline, "{v}: checksum pass: {st:#}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn check(cfg: &str) -> std::process::Output {
    nbraid(&["check", cfg])
}

#[test]
fn a_volume_created_without_checksums_enables_them_and_then_finds_bad_blocks() {
    let nbdcopy = require("nbdcopy");
    let dir = tempfile::tempdir().unwrap();
    let off = config(dir.path(), "checksums = \"off\"");
    let cfg = off.to_str().unwrap().to_string();
    let mut d = Daemon::start(&off);
    let mut written = Vec::new();
    for (i, (v, _, _)) in VOLUMES.iter().enumerate() {
        let uri = unix_uri(dir.path(), v);
        let seed = 0xe4ab1e + i as u64;
        written.push(fill_whole(&nbdcopy, dir.path(), &uri, (&cfg, v), seed));
    }
    d.stop();

    // The default (on) moves the regions: refused, with the way out.
    config(dir.path(), "");
    let refused = check(&cfg);
    assert!(!refused.status.success());
    let text = String::from_utf8_lossy(&refused.stdout).to_string()
        + &String::from_utf8_lossy(&refused.stderr);
    assert!(
        text.contains("checksums = \\\"enable\\\"") || text.contains("checksums = \"enable\""),
        "{text}"
    );

    // "enable": check says what the start does; the start computes them.
    config(dir.path(), "checksums = \"enable\"");
    let said = ok(check(&cfg), "check");
    assert!(
        said.contains("the next start gives the volume per-block checksums"),
        "{said}"
    );
    let mut d = Daemon::start(&off);
    let blocks = REGION / BLOCK;
    for (i, (v, _, n)) in VOLUMES.iter().enumerate() {
        let st = wait_for_fill(&cfg, v);
        let fill = &st["checksum_fill"];
        assert_eq!(fill["position_bytes"], fill["total_bytes"], "{v}: {fill}");
        assert!(fill["filled_blocks"].as_u64().unwrap() > 0, "{v}: {fill}");
        assert_eq!(fill["skipped_bytes"], 0, "{v}: {fill}");
        reads_back(&nbdcopy, dir.path(), &unix_uri(dir.path(), v), &written[i]);
        let ids = member_ids(v, *n);
        let file = |m: usize| dir.path().join(format!("{}.img", ids[m]));
        // Blocks written only before checksums existed: on member 1 in several stripes,
        // on member 0 elsewhere.
        let mut bad = Vec::new();
        for (k, b) in [3, blocks / 2 + 17, blocks - 1].into_iter().enumerate() {
            bad.push((1, b, corrupt(&file(1), REGION_START, b, 11 + k as u64)));
        }
        bad.push((0, 40, corrupt(&file(0), REGION_START, 40, 40)));
        reads_back(&nbdcopy, dir.path(), &unix_uri(dir.path(), v), &written[i]);
        let args = ["scrub", v, "--repair", "--config", &cfg, "--json"];
        let fixed: Value = serde_json::from_str(&ok(nbraid(&args), "scrub")).unwrap();
        assert_eq!(fixed["state"], "done", "{v}: {fixed}");
        for (m, b, old) in &bad {
            assert!(
                block_of(&file(*m), REGION_START, *b) == *old,
                "{v}: member {m} block {b} holds its old bytes again"
            );
        }
        let st = status_of(&cfg, v);
        let count = |m: usize, what: &str| st["members"][m][what].as_u64().unwrap();
        for m in [0, 1] {
            assert!(count(m, "checksum_errors") >= 1, "{v}: member {m}: {st}");
            assert_eq!(
                count(m, "checksum_errors"),
                count(m, "checksum_repairs"),
                "{v}: every bad block repaired: {st}"
            );
        }
        assert_eq!(st["state"], "healthy", "{v}");
    }
    d.stop();
    // Done is recorded: a restart starts no pass, and the checksums stay.
    let mut d = Daemon::start(&off);
    for (i, (v, _, _)) in VOLUMES.iter().enumerate() {
        assert!(status_of(&cfg, v)["checksum_fill"].is_null(), "{v}");
        reads_back(&nbdcopy, dir.path(), &unix_uri(dir.path(), v), &written[i]);
    }
    d.stop();
}
