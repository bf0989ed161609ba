//! What waits for a reshape runs once it ends, through the real binaries: a member that fails
//! mid-reshape takes the hot spare as soon as the volume is opened in its new shape (the
//! daemon's watcher looked only at the failed count, which the reopen does not change, so the
//! spare stood by until the next restart). Needs `nbdcopy` (fails loudly without); `nbraidd`
//! is the one built beside `nbraid`.

mod common;

use common::*;
use std::path::{Path, PathBuf};

/// `arrays.toml`: RAID 5 `db` over the first `members` of d0..d3 (12 MiB files), spare `d4`.
fn config(dir: &Path, members: usize) -> PathBuf {
    let mut text = daemon_and_members("d", 5, "12MiB");
    let ids: Vec<String> = (0..members).map(|i| format!("\"d{i}\"")).collect();
    text += &format!(
        "[[volume]]\nname = \"db\"\nlevel = \"raid5\"\nstrip_size = \"64KiB\"\n\
         members = [{}]\nspares = [\"d4\"]\nrebuild_rate = \"4MiB\"\n",
        ids.join(", ")
    );
    let file = dir.join("arrays.toml");
    std::fs::write(&file, text).unwrap();
    file
}

#[test]
fn a_member_failed_mid_reshape_takes_the_spare_once_the_reshape_ends() {
    let nbdcopy = require("nbdcopy");
    let dir = tempfile::tempdir().unwrap();
    let file = config(dir.path(), 3);
    let cfg = file.to_str().unwrap();
    ok(nbraid(&["create", cfg]), "create");
    let (mut d, uri) = serve(&file, "db");
    let data = fill_whole(&nbdcopy, dir.path(), &uri, (cfg, "db"), 7);

    config(dir.path(), 4);
    ok(nbraid(&["apply", cfg, "--yes"]), "apply --yes");
    std::thread::sleep(std::time::Duration::from_secs(1));
    ok(nbraid(&["fail", "db", "d0", "--config", cfg]), "fail d0");
    wait_until(cfg, "db", "the reshape to end", |v| {
        v["reshape"]["state"] == "done" && v["capacity_bytes"].as_u64() == Some(30 * MIB)
    });
    wait_until(cfg, "db", "the spare to take d0's role", |v| {
        v["spares"] == serde_json::json!([]) && v["members"][0]["id"] == "d4"
    });
    wait_until(cfg, "db", "the rebuild onto the spare", |v| {
        v["members"][0]["state"] == "healthy"
    });
    prefix_reads_back(&nbdcopy, dir.path(), &uri, &data);
    d.stop();
}
