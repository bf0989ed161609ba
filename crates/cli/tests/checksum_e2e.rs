//! Per-block checksums end to end, through the real binaries: volumes from a config that does
//! not mention checksums (on by default) — RAID 5, two-way RAID 1, RAID 6, RAID 10 and a
//! declared tree (RAID 5 over mirrored pairs) — are filled through NBD (nbdcopy); then 4 KiB
//! blocks of member files are overwritten with random bytes behind the daemon's back, on one
//! member and on two (in different places). The volumes read back exactly through NBD,
//! `nbraid scrub --repair` mends what reads did not reach, a second scrub finds nothing, the
//! member blocks hold their old bytes again, and `nbraid status` (text and `--json`) counts
//! the checksum errors and repairs per member.

mod common;

use common::blocks::{block_of, corrupt, unix_uri};
use common::*;
use serde_json::Value;
use std::path::Path;

/// Member files of 10 MiB: 1 MiB metadata, 1 MiB checksum reserve, an 8 MiB region.
const MEMBER_MIB: u64 = 10;
const REGION_START: u64 = 2 * MIB;
const REGION: u64 = 8 * MIB;
const BLOCK: u64 = 4096;

/// Volumes: (name, level or tree line, members).
const VOLUMES: [(&str, &str, usize); 5] = [
    ("r5", "level = \"raid5\"", 3),
    ("r1", "level = \"raid1\"", 2),
    ("r6", "level = \"raid6\"", 4),
    ("r10", "level = \"raid10\"", 4),
    ("tree", "", 6),
];

fn member_ids(v: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{v}m{i}")).collect()
}

fn config(dir: &Path) -> std::path::PathBuf {
    let mut text = "[daemon]\nlisten = [\"unix:nbd.sock\"]\n\n".to_string();
    for (v, _, n) in VOLUMES {
        for id in member_ids(v, n) {
            text += &format!(
                "[[member]]\nid = \"{id}\"\npath = \"{id}.img\"\nsize = \"{MEMBER_MIB}MiB\"\n\n"
            );
        }
    }
    for (v, level, n) in VOLUMES {
        let ids = member_ids(v, n);
        let quoted: Vec<String> = ids.iter().map(|i| format!("\"{i}\"")).collect();
        text += &format!("[[volume]]\nname = \"{v}\"\n");
        if v != "r1" {
            text += "strip_size = \"64KiB\"\n";
        }
        if level.is_empty() {
            let pair = |a: usize| format!("{{ mirror = [{}, {}] }}", quoted[a], quoted[a + 1]);
            text += &format!(
                "tree = {{ raid5 = [{}, {}, {}] }}\n",
                pair(0),
                pair(2),
                pair(4)
            );
        } else {
            text += &format!("{level}\nmembers = [{}]\n", quoted.join(", "));
        }
        text += "\n";
    }
    let file = dir.join("arrays.toml");
    std::fs::write(&file, text).unwrap();
    file
}

fn scrub(cfg: &str, v: &str, repair: bool) -> Value {
    let mut args = vec!["scrub", v, "--config", cfg, "--json"];
    if repair {
        args.insert(2, "--repair");
    }
    serde_json::from_str(&ok(nbraid(&args), "scrub")).unwrap()
}

#[test]
fn bad_blocks_behind_the_daemons_back_read_back_exactly_and_are_repaired() {
    let nbdcopy = require("nbdcopy");
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let cfg = config.to_str().unwrap();
    let mut d = Daemon::start(&config);
    let mut written = Vec::new();
    for (i, (v, _, _)) in VOLUMES.iter().enumerate() {
        let uri = unix_uri(dir.path(), v);
        written.push(fill_whole(
            &nbdcopy,
            dir.path(),
            &uri,
            (cfg, v),
            0x5eed + i as u64,
        ));
    }
    let blocks = REGION / BLOCK;
    for (i, (v, _, n)) in VOLUMES.iter().enumerate() {
        let ids = member_ids(v, *n);
        let file = |m: usize| dir.path().join(format!("{}.img", ids[m]));
        // Three blocks on member 1 in different stripes; for mirrors and RAID 6 also blocks
        // of member 0 elsewhere (a mirror's other copy, another stripe).
        let mut bad: Vec<(usize, u64, Vec<u8>)> = Vec::new();
        for (k, b) in [3, blocks / 2 + 17, blocks - 1].into_iter().enumerate() {
            bad.push((1, b, corrupt(&file(1), REGION_START, b, 7 + k as u64)));
        }
        for b in [40, blocks / 3] {
            bad.push((0, b, corrupt(&file(0), REGION_START, b, b)));
        }
        reads_back(&nbdcopy, dir.path(), &unix_uri(dir.path(), v), &written[i]);
        let fixed = scrub(cfg, v, true);
        assert_eq!(fixed["state"], "done", "{v}: {fixed}");
        let clean = scrub(cfg, v, false);
        assert_eq!(
            (clean["mismatches"].as_u64(), clean["unreadable"].as_u64()),
            (Some(0), Some(0)),
            "{v}: after the repair nothing is wrong: {clean}"
        );
        for (m, b, old) in &bad {
            assert!(
                block_of(&file(*m), REGION_START, *b) == *old,
                "{v}: member {m} block {b} holds its old bytes again"
            );
        }
        reads_back(&nbdcopy, dir.path(), &unix_uri(dir.path(), v), &written[i]);
        let st = status_of(cfg, v);
        let count = |m: usize, what: &str| st["members"][m][what].as_u64().unwrap();
        for m in [0, 1] {
            assert!(
                count(m, "checksum_errors") >= 2,
                "{v}: member {m} counted its bad blocks: {st}"
            );
            assert_eq!(
                count(m, "checksum_errors"),
                count(m, "checksum_repairs"),
                "{v}: every bad block repaired: {st}"
            );
        }
        assert_eq!(st["state"], "healthy", "{v}: no member failed");
    }
    let table = ok(nbraid(&["status", "--config", cfg]), "status");
    assert!(table.contains("checksum errors"), "{table}");
    d.stop();
}
