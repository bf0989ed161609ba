//! What the commands say of each role's member. A RAID 5 of four files whose d1 was rebuilt
//! onto new1.img, added at run time after a degraded restart.

mod common;

use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A RAID 5 `v` of d0..d3 (9 MiB files, 64 KiB strips), served on a Unix socket.
fn write_raid5(dir: &Path) -> PathBuf {
    let mut text = "[daemon]\nlisten = [\"unix:nbd.sock\"]\n\n".to_string();
    for i in 0..4 {
        text += &format!("[[member]]\nid = \"d{i}\"\npath = \"d{i}.img\"\nsize = \"9MiB\"\n\n");
    }
    text += "[[volume]]\nname = \"v\"\nlevel = \"raid5\"\nstrip_size = \"64KiB\"\nchecksums = \"off\"\nmembers = [\"d0\", \"d1\", \"d2\", \"d3\"]\n";
    let file = dir.join("c.toml");
    std::fs::write(&file, text).unwrap();
    file
}

/// The served volume after: seeded bytes written, d1 failed, a restart (d1 recorded failed
/// at start), new1.img added and rebuilt into role 1. The daemon, the NBD URI and the bytes.
fn rebuilt_onto_new1(nbdcopy: &Path, dir: &Path) -> (Daemon, String, Vec<u8>) {
    let config = write_raid5(dir);
    let cfg = config.to_str().unwrap();
    let (mut d, uri) = serve(&config, "v");
    let capacity = status_of(cfg, "v")["capacity_bytes"].as_u64().unwrap();
    let data = seeded_bytes(0x9e37_79b9_7f4a_7c15, capacity);
    let src = dir.join("src.img");
    std::fs::write(&src, &data).unwrap();
    ok(
        Command::new(nbdcopy).arg(&src).arg(&uri).output().unwrap(),
        "nbdcopy into the volume",
    );
    ok(nbraid(&["fail", "v", "d1", "--config", cfg]), "fail");
    d.stop();
    let (d, uri) = serve(&config, "v");
    let new1 = blank_member(dir, "new1.img");
    let said = ok(nbraid(&["add", "v", &new1, "--config", cfg]), "add");
    assert!(said.contains("rebuilding role 1 (new1)"), "{said}");
    let done: Value = serde_json::from_str(&ok(
        nbraid(&[
            "rebuild", "v", "--rate", "200MB/s", "--config", cfg, "--json",
        ]),
        "rebuild",
    ))
    .unwrap();
    assert_eq!(done["state"], "done", "{done}");
    wait_until(cfg, "v", "the rebuilt role to be current", |v| {
        v["members"][1]["state"] == "healthy"
    });
    (d, uri, data)
}

/// After the rebuild, the text status says the rebuilt role is healthy — the JSON's
/// state — not the start's "recorded failed".
#[test]
fn a_role_recorded_failed_at_start_and_rebuilt_since_reads_healthy() {
    let nbdcopy = require("nbdcopy");
    let dir = tempfile::tempdir().unwrap();
    let (_d, _uri, _data) = rebuilt_onto_new1(&nbdcopy, dir.path());
    let cfg = dir.path().join("c.toml");
    let cfg = cfg.to_str().unwrap();
    let v = status_of(cfg, "v");
    assert_eq!(v["state"], "healthy", "{v:#}");
    assert_eq!(v["members"][1]["at_start"], "failed", "{v:#}");
    let text = ok(nbraid(&["status", "v", "--config", cfg]), "status");
    let line = (text.lines())
        .find(|l| l.starts_with("  new1 "))
        .unwrap_or_else(|| panic!("no line for new1:\n{text}"));
    assert!(
        line.starts_with("  new1       healthy "),
        "the state now, not the start's:\n{text}"
    );
}
