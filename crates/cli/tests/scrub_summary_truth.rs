//! `nbraid scrub`'s summary line and its per-member lines count the same bad blocks: a RAID 5
//! (checksums on) with blocks overwritten behind the daemon's back is scrubbed with
//! `--repair`, and the summary says they were found and repaired — it said "3 repaired, 3
//! unreadable" (chunks that did not read at first) beside "1 bad, 1 repaired" per member.

mod common;

use common::blocks::{corrupt, unix_uri};
use common::*;

#[test]
fn the_scrub_summary_counts_the_blocks_its_member_lines_list() {
    let nbdcopy = require("nbdcopy");
    let dir = tempfile::tempdir().unwrap();
    let mut text = daemon_and_members("m", 3, "10MiB");
    text += "[[volume]]\nname = \"r5\"\nlevel = \"raid5\"\nstrip_size = \"64KiB\"\n\
             members = [\"m0\", \"m1\", \"m2\"]\n";
    let file = dir.path().join("arrays.toml");
    std::fs::write(&file, text).unwrap();
    let cfg = file.to_str().unwrap();
    let mut d = Daemon::start(&file);
    let uri = unix_uri(dir.path(), "r5");
    fill_whole(&nbdcopy, dir.path(), &uri, (cfg, "r5"), 0x5ca1);
    // Regions start after 1 MiB of metadata and 1 MiB of checksum reserve.
    let member = |m: usize| dir.path().join(format!("m{m}.img"));
    for (k, (m, block)) in [(1, 5), (1, 1000), (0, 1500)].into_iter().enumerate() {
        corrupt(&member(m), 2 * MIB, block, 0xbad + k as u64);
    }

    let checked = ok(nbraid(&["scrub", "r5", "--config", cfg]), "scrub");
    assert!(
        checked.contains("; 3 bad blocks found, not repaired (a check"),
        "{checked}"
    );
    let fixed = ok(
        nbraid(&["scrub", "r5", "--repair", "--config", cfg]),
        "scrub --repair",
    );
    let summary = fixed.lines().next().unwrap();
    assert!(
        summary.ends_with("; 3 bad blocks found, all repaired"),
        "{fixed}"
    );
    assert!(!summary.contains("unreadable,"), "{fixed}");
    assert!(fixed.contains(": 1 bad, 1 repaired\n"), "{fixed}");
    assert!(fixed.contains(": 2 bad, 2 repaired\n"), "{fixed}");
    let clean = ok(nbraid(&["scrub", "r5", "--config", cfg]), "scrub again");
    assert!(
        clean.trim_end().ends_with("; no bad block found"),
        "{clean}"
    );
    d.stop();
}
