//! A RAID 6 repair locates wrong chunks row by row, as md checks a stripe page by page,
//! through the real binaries. With checksums off only the P and Q syndromes can say which
//! chunk is wrong. Two data chunks of one stripe (64 KiB strips), on two members, are each
//! made wrong in a different 4 KiB row behind the daemon's back: the stripe's syndromes as a
//! whole name no single chunk, but each row names its own. `nbraid scrub --repair` rebuilds
//! both blocks, the volume reads back what was written, the member files hold their old
//! bytes again and a second scrub finds nothing. (Before, the stripe that no single chunk
//! explained had its P and Q regenerated from the wrong data: both blocks stayed wrong for
//! good, and the next scrub found the stripe consistent.)

mod common;

use common::blocks::{block_of, corrupt};
use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// 64 KiB strips: stripe 0's data chunk 0 holds volume bytes 0 … 64 KiB, chunk 1 the next
/// 64 KiB.
const STRIP: u64 = 64 << 10;
const BLOCK: u64 = 4096;

/// The member file and the block (of the whole file, 4 KiB units) behind volume byte
/// `logical`, by `nbraid map`.
fn place(cfg: &Path, logical: u64) -> (PathBuf, u64, String) {
    let e = &map_extents(cfg, "r6", logical)[0];
    let file = cfg.with_file_name(e["member_path"].as_str().unwrap());
    let at = e["member_offset"].as_u64().unwrap();
    assert_eq!(at % BLOCK, 0, "a whole block");
    (file, at / BLOCK, e["member"].as_str().unwrap().to_string())
}

fn scrub(cfg: &str, repair: bool) -> Value {
    let mut args = vec!["scrub", "r6", "--config", cfg, "--json"];
    if repair {
        args.insert(2, "--repair");
    }
    serde_json::from_str(&ok(nbraid(&args), "scrub")).unwrap()
}

#[test]
fn raid6_repair_locates_chunks_wrong_in_different_rows_of_one_stripe() {
    let nbdcopy = require("nbdcopy");
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path());
    let cfg = config.to_str().unwrap();
    let (mut d, uri) = serve(&config, "r6");
    let data = fill(&nbdcopy, dir.path(), &uri, 61);
    d.stop();

    // Row 2 of data chunk 0 and row 9 of data chunk 1, both in stripe 0.
    let a = place(&config, 2 * BLOCK);
    let b = place(&config, STRIP + 9 * BLOCK);
    assert_ne!(a.2, b.2, "two members");
    let old_a = corrupt(&a.0, 0, a.1, 7);
    let old_b = corrupt(&b.0, 0, b.1, 8);

    let (mut d, uri) = serve(&config, "r6");
    let check = scrub(cfg, false);
    assert_eq!(check["mismatches"], 1, "one stripe is wrong: {check}");
    let fixed = scrub(cfg, true);
    assert_eq!(fixed["state"], "done", "{fixed}");
    let named: Vec<(String, String)> = (fixed["findings"].as_array().unwrap().iter())
        .flat_map(|m| {
            let id = m["id"].as_str().unwrap().to_string();
            (m["first"].as_array().unwrap().iter())
                .map(move |f| (id.clone(), f["action"].as_str().unwrap().to_string()))
        })
        .collect();
    let rebuilt = "rebuilt from the syndromes".to_string();
    assert_eq!(
        named,
        vec![(a.2.clone(), rebuilt.clone()), (b.2.clone(), rebuilt)],
        "each wrong chunk is named and rebuilt, parity is left alone: {fixed}"
    );
    reads_back(&nbdcopy, dir.path(), &uri, &data);
    let clean = scrub(cfg, false);
    assert_eq!(clean["mismatches"], 0, "after the repair: {clean}");
    d.stop();
    assert!(
        block_of(&a.0, 0, a.1) == old_a,
        "{} holds its old bytes",
        a.2
    );
    assert!(
        block_of(&b.0, 0, b.1) == old_b,
        "{} holds its old bytes",
        b.2
    );
}
