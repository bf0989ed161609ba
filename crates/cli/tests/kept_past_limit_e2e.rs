//! A RAID 0 member past its bad-block limit, through the real binaries: filled through NBD,
//! more 4 KiB blocks of one member file overwritten behind the daemon's back than
//! `checksum_error_limit` allows, then `nbraid scrub`. The scrub finds every bad block, the
//! member is not failed (nothing else holds its data), the volume stays available, and
//! `nbraid status` says why the member was kept (`--json`: `kept_past_bad_block_limit`), and
//! so does one `kept-past-bad-block-limit` event.

mod common;

use common::blocks::{corrupt, unix_uri};
use common::*;
use serde_json::Value;

/// Member files of 10 MiB: 1 MiB metadata, 1 MiB checksum reserve, an 8 MiB region.
const REGION_START: u64 = 2 * MIB;
const LIMIT: u64 = 2;
const ROTTEN: u64 = 5;

#[test]
fn a_raid0_member_past_its_bad_block_limit_is_kept_and_said_so() {
    let nbdcopy = require("nbdcopy");
    let dir = tempfile::tempdir().unwrap();
    let mut text = "[daemon]\nlisten = [\"unix:nbd.sock\"]\n\n".to_string();
    for id in ["d0", "d1"] {
        text += &format!("[[member]]\nid = \"{id}\"\npath = \"{id}.img\"\nsize = \"10MiB\"\n\n");
    }
    text += &format!(
        "[[volume]]\nname = \"r0\"\nlevel = \"raid0\"\nstrip_size = \"64KiB\"\nchecksum_error_limit = {LIMIT}\nmembers = [\"d0\", \"d1\"]\n"
    );
    let config = dir.path().join("arrays.toml");
    std::fs::write(&config, text).unwrap();
    let cfg = config.to_str().unwrap();
    let _d = Daemon::start(&config);
    let uri = unix_uri(dir.path(), "r0");
    fill_whole(&nbdcopy, dir.path(), &uri, (cfg, "r0"), 0x7ee9);
    for k in 0..ROTTEN {
        corrupt(&dir.path().join("d1.img"), REGION_START, 3 + 100 * k, k);
    }
    let found: Value = serde_json::from_str(&ok(
        nbraid(&["scrub", "r0", "--config", cfg, "--json"]),
        "scrub",
    ))
    .unwrap();
    assert_eq!(found["unreadable"].as_u64(), Some(ROTTEN), "{found}");
    let st = status_of(cfg, "r0");
    assert_eq!(st["available"], true, "{st}");
    let m = &st["members"][1];
    assert_eq!(m["state"], "healthy", "{st}");
    assert!(m["checksum_errors"].as_u64().unwrap() > LIMIT, "{st}");
    assert_eq!(m["kept_past_bad_block_limit"], true, "{st}");
    assert_eq!(st["members"][0]["kept_past_bad_block_limit"], false, "{st}");
    let shown = ok(nbraid(&["status", "r0", "--config", cfg]), "status");
    assert!(
        shown.contains("past its bad-block limit, kept: it holds the only readable copy"),
        "{shown}"
    );
    // And an event says so once, naming the member (the observer looks four times a second).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let kept = loop {
        let events = ok(nbraid(&["events", "--json", "--config", cfg]), "events");
        let kept: Vec<Value> = (events.lines())
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|e| e["event"] == "kept-past-bad-block-limit")
            .collect();
        if !kept.is_empty() || std::time::Instant::now() > deadline {
            break kept;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!(kept[0]["member"], "d1", "{kept:?}");
}
