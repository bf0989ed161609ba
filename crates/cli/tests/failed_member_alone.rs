//! A member the operator failed, found alone at a start, is not served as current. Its own
//! superblock still said it was active (records went only to the members that went on), so
//! a start that found it without the others served its stale bytes as the volume's: the
//! writes acknowledged (and flushed) after it was failed were silently gone. Now the commit
//! that records it failed writes that record onto it too, and the start refuses, naming it
//! and `--force-assemble`.
//! - RAID 1, `nbraid fail` m1, more writes, m0 gone at the next start.
//! - Found by a sweep: m0 and m1 each failed and replaced by `nbraid add`, more writes, the
//!   first replacement gone at the next start: the newest record left (m1's) listed only
//!   the first replacement, so the second, which holds the data, was never opened.

mod common;

use common::{
    daemon_and_members, fill, nbraid, ok, read_out, require, serve, status_of, wait_until,
};
use std::path::{Path, PathBuf};

/// RAID 1 `v` over files m0 and m1 of 40 MiB (created at the first start).
fn config(dir: &Path) -> PathBuf {
    let cfg = dir.join("arrays.toml");
    let text = daemon_and_members("m", 2, "40MiB")
        + "[[volume]]\nname = \"v\"\nlevel = \"raid1\"\nmembers = [\"m0\", \"m1\"]\n";
    std::fs::write(&cfg, text).unwrap();
    cfg
}

/// The start refuses the volume, naming the failed member and the forced assembly.
fn start_is_refused(cfg: &Path, failed: &str) {
    let err = common::start_refused(cfg);
    assert!(err.contains(&format!("{failed} recorded failed")), "{err}");
    assert!(err.contains("--force-assemble v"), "{err}");
}

#[test]
fn a_member_failed_by_the_operator_found_alone_is_not_served() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cfg = config(d);
    let c = cfg.to_str().unwrap();
    let nbdcopy = require("nbdcopy");
    let (mut daemon, uri) = serve(&cfg, "v");
    fill(&nbdcopy, d, &uri, 1);
    ok(nbraid(&["fail", "v", "m1", "--config", c]), "fail m1");
    let new = fill(&nbdcopy, d, &uri, 2);
    daemon.stop();
    std::fs::rename(d.join("m0.img"), d.join("m0.away")).unwrap();
    start_is_refused(&cfg, "m1");
    // With m0 back, the volume serves what was written last.
    std::fs::rename(d.join("m0.away"), d.join("m0.img")).unwrap();
    let (mut daemon, uri) = serve(&cfg, "v");
    let got = read_out(&nbdcopy, d, &uri);
    assert!(got[..new.len()] == new[..], "the latest writes");
    daemon.stop();
}

#[test]
fn a_replaced_member_found_without_its_replacements_is_not_served() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cfg = config(d);
    let c = cfg.to_str().unwrap();
    let nbdcopy = require("nbdcopy");
    let (mut daemon, uri) = serve(&cfg, "v");
    fill(&nbdcopy, d, &uri, 3);
    for (k, m) in ["m0", "m1"].iter().enumerate() {
        ok(nbraid(&["fail", "v", m, "--config", c]), "fail");
        // `add` creates no file: made first, as large as the members.
        let fresh = d.join(format!("fresh{k}.img"));
        std::fs::File::create(&fresh)
            .unwrap()
            .set_len(40 << 20)
            .unwrap();
        ok(
            nbraid(&["add", "v", fresh.to_str().unwrap(), "--config", c]),
            "add",
        );
        wait_until(c, "v", "the rebuild onto the new member", |v| {
            v["state"] == "healthy" && v["rebuild"]["state"] == "done"
        });
    }
    let new = fill(&nbdcopy, d, &uri, 4);
    assert_eq!(status_of(c, "v")["state"], "healthy");
    daemon.stop();
    std::fs::rename(d.join("fresh0.img"), d.join("fresh0.away")).unwrap();
    start_is_refused(&cfg, "m1");
    std::fs::rename(d.join("fresh0.away"), d.join("fresh0.img")).unwrap();
    let (mut daemon, uri) = serve(&cfg, "v");
    let got = read_out(&nbdcopy, d, &uri);
    assert!(got[..new.len()] == new[..], "the latest writes");
    daemon.stop();
}
