//! A restart mid-reshape where the old shape kept a write-hole log reserve before its regions
//! and the new shape keeps none, through the real binaries. The records put the added
//! member's region behind the reserve its peers have (the reshape's start placed it there);
//! the restart read the regions to pin from the records' old tree, which has no added
//! member, so the config placed that one as a new volume's — with no reserve — and every
//! start, `nbraid check` and even the old config were refused ("the config says member
//! region 2097152+…, the superblocks record 5242880+…", naming no member). Now the regions
//! are pinned from the tree the reshape moves into: the restart comes up, the reshape goes
//! on, every byte reads back. Needs `nbdcopy` (fails loudly without).

mod common;

use common::*;
use std::path::{Path, PathBuf};

/// `arrays.toml`: members `(id, size)`, volume `db` of `level` over `members` with `strip`.
fn config(dir: &Path, files: &[(&str, &str)], level: &str, members: usize, strip: &str) -> PathBuf {
    let mut text = "[daemon]\nlisten = [\"unix:nbd.sock\"]\n\n".to_string();
    for (id, size) in files {
        text += &format!("[[member]]\nid = \"{id}\"\npath = \"{id}.img\"\nsize = \"{size}\"\n\n");
    }
    let ids: Vec<String> = (0..members).map(|i| format!("\"d{i}\"")).collect();
    text += &format!(
        "[[volume]]\nname = \"db\"\nlevel = \"{level}\"\nstrip_size = \"{strip}\"\n\
         members = [{}]\nrebuild_rate = \"16MiB\"\n",
        ids.join(", ")
    );
    let file = dir.join("arrays.toml");
    std::fs::write(&file, text).unwrap();
    file
}

/// A move: the member files, the old shape and the new one (level, members, strip).
struct Move<'a> {
    files: &'a [(&'a str, &'a str)],
    old: (&'a str, usize, &'a str),
    new: (&'a str, usize, &'a str),
    /// Stop the daemon with SIGKILL (else SIGTERM, a clean stop).
    kill: bool,
}

/// Fills `db` in the old shape, starts the move online, stops the daemon once the copy has
/// begun; `nbraid check` and the restart must take the records' regions, and the reshape
/// must end with every byte as written — again after a restart in the new shape alone.
fn stop_mid_reshape_and_restart(m: Move) {
    let nbdcopy = require("nbdcopy");
    let dir = tempfile::tempdir().unwrap();
    let (level, n, strip) = m.old;
    let file = config(dir.path(), m.files, level, n, strip);
    let cfg = file.to_str().unwrap();
    let (mut d, uri) = serve(&file, "db");
    let data = fill_whole(&nbdcopy, dir.path(), &uri, (cfg, "db"), 5);

    let (level, n, strip) = m.new;
    config(dir.path(), m.files, level, n, strip);
    ok(nbraid(&["apply", cfg, "--yes"]), "apply --yes");
    wait_until(cfg, "db", "the copy to begin", |v| {
        v["reshape"]["position_bytes"].as_u64().unwrap_or(0) > 0
    });
    match m.kill {
        true => {
            d.child.kill().unwrap();
            d.child.wait().unwrap();
        }
        false => d.stop(),
    }
    let check = ok(nbraid(&["check", cfg]), "nbraid check mid-reshape");
    assert!(!check.contains("refused"), "nbraid check: {check}");
    // With no daemon, `apply --yes` reads the records itself: the move is under way already.
    ok(
        nbraid(&["apply", cfg, "--yes"]),
        "apply --yes with the daemon stopped",
    );

    let (mut d, uri) = serve(&file, "db");
    let v = status_of(cfg, "db");
    assert!(!v["reshape"].is_null(), "the reshape goes on: {v:#}");
    wait_until(cfg, "db", "the reshape to end", |v| {
        v["reshape"]["state"] == "done"
    });
    prefix_reads_back(&nbdcopy, dir.path(), &uri, &data);
    d.stop();
    let (mut d, uri) = serve(&file, "db");
    prefix_reads_back(&nbdcopy, dir.path(), &uri, &data);
    d.stop();
}

/// The README's advice for RAID 5 → 6: the added member 4 MiB larger than the others; the
/// old shape logs (1 MiB strips: a reserve), RAID 6 of 1 MiB strips on five members finds no
/// room for its ring on the old members.
#[test]
fn raid5_to_raid6_with_a_larger_added_member_restarts_mid_reshape() {
    let files = [
        ("d0", "40MiB"),
        ("d1", "40MiB"),
        ("d2", "40MiB"),
        ("d3", "40MiB"),
        ("d4", "45MiB"),
    ];
    stop_mid_reshape_and_restart(Move {
        files: &files,
        old: ("raid5", 4, "1MiB"),
        new: ("raid6", 5, "1MiB"),
        kill: false,
    });
}

/// RAID 6 growing by two members and to 2 MiB strips, killed mid-copy.
#[test]
fn raid6_growing_to_larger_strips_restarts_mid_reshape_after_a_kill() {
    let files = [
        ("d0", "64MiB"),
        ("d1", "64MiB"),
        ("d2", "64MiB"),
        ("d3", "64MiB"),
        ("d4", "64MiB"),
        ("d5", "64MiB"),
    ];
    stop_mid_reshape_and_restart(Move {
        files: &files,
        old: ("raid6", 4, "512KiB"),
        new: ("raid6", 6, "2MiB"),
        kill: true,
    });
}
