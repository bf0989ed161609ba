//! A reshape whose member's disk is gone for good goes on once the operator fails it, through
//! the real binaries. RAID 5 3 → 4 is killed mid-copy and one old member's file is gone at
//! the restart: the copy stops and says so, naming `nbraid fail`. `nbraid fail` then records
//! the member failed (it was recorded "rebuilding from 0" before, which still waited for it,
//! and nothing could finish the reshape) and the copy goes on at once; every byte reads
//! back, after a restart too, and a spare rebuilds the role. Needs `nbdcopy` (fails loudly
//! without); `nbraidd` is the one built beside `nbraid`.

mod common;

use common::*;
use std::path::{Path, PathBuf};

/// `arrays.toml`: RAID 5 `db` over the first `members` of d0..d3 (12 MiB files), copying
/// at 2 MiB/s, with `spares`.
fn config(dir: &Path, members: usize, spares: &str) -> PathBuf {
    let mut text = daemon_and_members("d", 5, "12MiB");
    let ids: Vec<String> = (0..members).map(|i| format!("\"d{i}\"")).collect();
    text += &format!(
        "[[volume]]\nname = \"db\"\nlevel = \"raid5\"\nstrip_size = \"64KiB\"\n\
         members = [{}]\nspares = [{spares}]\nrebuild_rate = \"2MiB\"\n",
        ids.join(", ")
    );
    let file = dir.join("arrays.toml");
    std::fs::write(&file, text).unwrap();
    file
}

#[test]
fn a_reshape_goes_on_without_a_gone_member_once_the_operator_fails_it() {
    let nbdcopy = require("nbdcopy");
    let dir = tempfile::tempdir().unwrap();
    let file = config(dir.path(), 3, "");
    let cfg = file.to_str().unwrap();
    ok(nbraid(&["create", cfg]), "create");
    let (mut d, uri) = serve(&file, "db");
    let data = fill_whole(&nbdcopy, dir.path(), &uri, (cfg, "db"), 11);
    config(dir.path(), 4, "");
    ok(nbraid(&["apply", cfg, "--yes"]), "apply --yes");
    wait_until(cfg, "db", "the copy under way", |v| {
        v["reshape"]["position_bytes"].as_u64().unwrap_or(0) > 0
    });
    d.child.kill().unwrap();
    d.child.wait().unwrap();
    // d1's disk is gone for good.
    std::fs::rename(dir.path().join("d1.img"), dir.path().join("d1.gone")).unwrap();

    let (mut d, uri) = serve(&file, "db");
    let v = wait_until(cfg, "db", "the copy stopped for d1", |v| {
        v["reshape"]["state"] == "failed"
    });
    let why = v["reshape"]["error"].to_string();
    assert!(
        why.contains("without role 1") && why.contains("nbraid fail"),
        "{v:#}"
    );
    prefix_reads_back(&nbdcopy, dir.path(), &uri, &data);

    ok(nbraid(&["fail", "db", "d1", "--config", cfg]), "fail d1");
    wait_until(cfg, "db", "the reshape to end without d1", |v| {
        v["reshape"]["state"] == "done" && v["capacity_bytes"].as_u64() == Some(30 * MIB)
    });
    prefix_reads_back(&nbdcopy, dir.path(), &uri, &data);
    d.stop();

    // A restart serves the new shape, d1 still failed; a spare rebuilds its role.
    config(dir.path(), 4, "\"d4\"");
    let (mut d, uri) = serve(&file, "db");
    let v = status_of(cfg, "db");
    assert_eq!(v["capacity_bytes"].as_u64(), Some(30 * MIB), "{v:#}");
    wait_until(cfg, "db", "the spare rebuilt into d1's role", |v| {
        v["members"][1]["id"] == "d4" && v["members"][1]["state"] == "healthy"
    });
    prefix_reads_back(&nbdcopy, dir.path(), &uri, &data);
    d.stop();
}
