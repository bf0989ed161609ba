//! `nbraid rebuild` while a reshape runs: spares go into no role until the volume is open
//! in its new shape, then the daemon's watcher puts them in and starts the rebuild. The
//! reply said "no spare to take them (`nbraid add` one)" just after a spare was added.

mod common;

use common::*;
use std::path::{Path, PathBuf};

/// `arrays.toml`: RAID 5 `db` over the first `members` of d0..d3 (12 MiB files), moved and
/// rebuilt at 2 MiB/s.
fn config(dir: &Path, members: usize) -> PathBuf {
    let mut text = daemon_and_members("d", 4, "12MiB");
    let ids: Vec<String> = (0..members).map(|i| format!("\"d{i}\"")).collect();
    text += &format!(
        "[[volume]]\nname = \"db\"\nlevel = \"raid5\"\nstrip_size = \"64KiB\"\n\
         members = [{}]\nrebuild_rate = \"2MiB\"\n",
        ids.join(", ")
    );
    let file = dir.join("arrays.toml");
    std::fs::write(&file, text).unwrap();
    file
}

#[test]
fn rebuild_during_a_reshape_says_it_waits_for_the_reshape() {
    let dir = tempfile::tempdir().unwrap();
    let file = config(dir.path(), 3);
    let cfg = file.to_str().unwrap();
    ok(nbraid(&["create", cfg]), "create");
    let (mut d, _uri) = serve(&file, "db");
    config(dir.path(), 4);
    ok(nbraid(&["apply", cfg, "--yes"]), "apply --yes");
    wait_until(cfg, "db", "the reshape to run", |v| {
        v["reshape"]["state"] == "running"
    });
    ok(nbraid(&["fail", "db", "d0", "--config", cfg]), "fail d0");
    let spare = blank_member(dir.path(), "s.img");
    // As large as the members.
    let f = std::fs::OpenOptions::new().write(true).open(&spare);
    f.unwrap().set_len(12 * MIB).unwrap();
    ok(nbraid(&["add", "db", &spare, "--config", cfg]), "add");

    let out = nbraid(&["rebuild", "db", "--config", cfg]);
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!said.contains("no spare"), "{said}");
    assert!(
        said.contains("a reshape is running: the 1 spare(s) standing by go into failed role(s) 0 when it ends, and the rebuild starts then"),
        "{said}"
    );

    let json = ok(
        nbraid(&["rebuild", "db", "--config", cfg, "--json"]),
        "rebuild --json",
    );
    let json: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(json["waits_for_reshape"], true, "{json:#}");
    assert_eq!(
        json["roles_without_a_member"],
        serde_json::json!([0]),
        "{json:#}"
    );

    // What it said happens: once the reshape ends, the spare takes role 0 and is rebuilt.
    wait_until(cfg, "db", "the reshape to end", |v| {
        v["reshape"]["state"] == "done"
    });
    let v = wait_until(cfg, "db", "the rebuild onto the spare", |v| {
        v["members"][0]["id"] == "s" && v["members"][0]["state"] == "healthy"
    });
    assert_eq!(v["state"], "healthy", "{v:#}");
    d.stop();
}
