//! The scrub report names what was repaired where, through the real binaries: RAID 5, a
//! two-way RAID 1 and RAID 6 from a default config (checksums on) are filled through NBD, 4
//! KiB blocks of member files are overwritten with random bytes behind the daemon's back
//! (nothing reads them before the scrub), and:
//! - `nbraid scrub` (a check) lists each bad block by member and member offset, as a checksum
//!   mismatch, not repaired;
//! - `nbraid scrub --repair --json` lists the same blocks, rebuilt from parity (RAID 6 with
//!   its syndromes agreeing) or repaired from the other copy; the member files hold their
//!   old bytes again, and a second scrub finds nothing;
//! - the text of `nbraid scrub --follow` and `nbraid status` (and `status --json`) say the
//!   same.

mod common;

use common::blocks::{block_of, corrupt};
use common::*;
use serde_json::Value;
use std::path::Path;

/// Member files of 10 MiB: 1 MiB metadata, 1 MiB checksum reserve, an 8 MiB region.
const MEMBER_MIB: u64 = 10;
const REGION_START: u64 = 2 * MIB;
const REGION: u64 = 8 * MIB;
const BLOCK: u64 = 4096;

/// Volumes: (name, level, members, what a repair of a bad block is called).
const VOLUMES: [(&str, &str, usize, &str); 3] = [
    ("r5", "raid5", 3, "rebuilt from parity"),
    ("r1", "raid1", 2, "repaired from another copy"),
    ("r6", "raid6", 4, "rebuilt from parity"),
];

fn member_ids(v: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{v}m{i}")).collect()
}

fn config(dir: &Path) -> std::path::PathBuf {
    let mut text = "[daemon]\nlisten = [\"unix:nbd.sock\"]\n\n".to_string();
    for (v, _, n, _) in VOLUMES {
        for id in member_ids(v, n) {
            text += &format!(
                "[[member]]\nid = \"{id}\"\npath = \"{id}.img\"\nsize = \"{MEMBER_MIB}MiB\"\n\n"
            );
        }
    }
    for (v, level, n, _) in VOLUMES {
        let quoted: Vec<String> = member_ids(v, n)
            .iter()
            .map(|i| format!("\"{i}\""))
            .collect();
        text += &format!(
            "[[volume]]\nname = \"{v}\"\nlevel = \"{level}\"\nmembers = [{}]\n",
            quoted.join(", ")
        );
        if level != "raid1" {
            text += "strip_size = \"64KiB\"\n";
        }
        text += "\n";
    }
    let file = dir.join("arrays.toml");
    std::fs::write(&file, text).unwrap();
    file
}

fn scrub_json(cfg: &str, v: &str, repair: bool) -> Value {
    let mut args = vec!["scrub", v, "--config", cfg, "--json"];
    if repair {
        args.insert(2, "--repair");
    }
    serde_json::from_str(&ok(nbraid(&args), "scrub")).unwrap()
}

/// The findings of a scrub report as (member index, member offset, found, action, cross
/// check), sorted.
fn findings(report: &Value) -> Vec<(u64, u64, String, String, Option<String>)> {
    let mut out = Vec::new();
    for m in report["findings"].as_array().expect("findings") {
        for f in m["first"].as_array().expect("first") {
            out.push((
                m["index"].as_u64().unwrap(),
                f["member_offset_bytes"].as_u64().unwrap(),
                f["found"].as_str().unwrap().to_string(),
                f["action"].as_str().unwrap().to_string(),
                f["cross_check"].as_str().map(str::to_string),
            ));
        }
    }
    out.sort();
    out
}

#[test]
fn the_scrub_report_names_member_offset_and_repair_of_every_bad_block() {
    let nbdcopy = require("nbdcopy");
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let cfg = config.to_str().unwrap();
    let mut d = Daemon::start(&config);
    let uri = |v: &str| {
        format!(
            "nbd+unix:///{v}?socket={}",
            dir.path().join("nbd.sock").display()
        )
    };
    for (i, (v, _, _, _)) in VOLUMES.iter().enumerate() {
        fill_whole(&nbdcopy, dir.path(), &uri(v), (cfg, v), 0x5c0b + i as u64);
    }
    let blocks = REGION / BLOCK;
    for (v, _, n, repair) in VOLUMES {
        let ids = member_ids(v, n);
        let file = |m: usize| dir.path().join(format!("{}.img", ids[m]));
        // Two blocks on member 1 and one on member 0, in different stripes (rows).
        let bad: Vec<(usize, u64)> = vec![(1, 5), (1, blocks / 2 + 3), (0, blocks - 2)];
        let olds: Vec<Vec<u8>> = (bad.iter().enumerate())
            .map(|(k, &(m, b))| corrupt(&file(m), REGION_START, b, 0xbad0 + k as u64))
            .collect();
        let want = |action: &str| {
            let cross = (v == "r6").then(|| "checksum and syndrome agree".to_string());
            let mut w: Vec<_> = (bad.iter())
                .map(|&(m, b)| {
                    (
                        m as u64,
                        REGION_START + b * BLOCK,
                        "checksum mismatch".to_string(),
                        action.to_string(),
                        cross.clone(),
                    )
                })
                .collect();
            w.sort();
            w
        };
        let checked = scrub_json(cfg, v, false);
        assert_eq!(checked["state"], "done", "{v}: {checked}");
        assert_eq!(
            findings(&checked),
            want("not repaired (check only)"),
            "{v}: a check names every bad block: {checked:#}"
        );
        let fixed = scrub_json(cfg, v, true);
        assert_eq!(
            findings(&fixed),
            want(repair),
            "{v}: a repair names every bad block and what it did: {fixed:#}"
        );
        assert_eq!(fixed["findings_total"], 3, "{v}: {fixed}");
        assert_eq!(fixed["findings_not_listed"], 0, "{v}: {fixed}");
        for (&(m, b), old) in bad.iter().zip(&olds) {
            assert!(
                block_of(&file(m), REGION_START, b) == *old,
                "{v}: member {m} block {b} repaired"
            );
        }
        // What `scrub --follow` prints of the finished scrub, and `status`.
        let text = ok(
            nbraid(&["scrub", v, "--follow", "--config", cfg]),
            "scrub --follow",
        );
        for &(m, b) in &bad {
            let line = format!(
                "member offset {} (+4096): checksum mismatch; {repair}",
                REGION_START + b * BLOCK
            );
            assert!(text.contains(&line), "{v}: `{line}` in:\n{text}");
            assert!(
                text.contains(&format!("  {} (member {m}, ", ids[m])),
                "{text}"
            );
        }
        let st = status_of(cfg, v);
        assert_eq!(findings(&st["scrub"]), want(repair), "{v}: status --json");
        let table = ok(nbraid(&["status", v, "--config", cfg]), "status");
        let line = format!(
            "scrub found: {} 1 bad (1 repaired), {} 2 bad (2 repaired)",
            ids[0], ids[1]
        );
        assert!(table.contains(&line), "{v}: `{line}` in:\n{table}");
        let clean = scrub_json(cfg, v, false);
        assert_eq!(
            (
                clean["findings_total"].as_u64(),
                clean["mismatches"].as_u64()
            ),
            (Some(0), Some(0)),
            "{v}: after the repair nothing is found: {clean}"
        );
    }
    d.stop();
}
