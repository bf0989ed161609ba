//! Every command names, for each role, the member the superblocks say holds it — by the
//! records' identities, not by a config position or a stale member's old role — and the
//! file it is in: `map` (whose FILE at MEMBER OFFSET holds the export's bytes), `status`
//! and `check`. A RAID 5 of four files whose d1 was rebuilt onto new1.img, added at run
//! time after a degraded restart.

mod common;

use common::*;
use serde_json::Value;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::Command;

/// A RAID 5 `v` of d0..d3 (9 MiB files, 64 KiB strips), served on a Unix socket.
fn write_raid5(dir: &Path) -> PathBuf {
    let mut text = daemon_and_members("d", 4, "9MiB");
    text += "[[volume]]\nname = \"v\"\nlevel = \"raid5\"\nstrip_size = \"64KiB\"\nchecksums = \"off\"\nmembers = [\"d0\", \"d1\", \"d2\", \"d3\"]\n";
    let file = dir.join("c.toml");
    std::fs::write(&file, text).unwrap();
    file
}

/// The volume's bytes, read through NBD.
fn export_bytes(nbdcopy: &Path, dir: &Path, uri: &str) -> Vec<u8> {
    let out = dir.join("out.img");
    let _ = std::fs::remove_file(&out);
    ok(
        Command::new(nbdcopy).arg(uri).arg(&out).output().unwrap(),
        "nbdcopy out of the volume",
    );
    std::fs::read(&out).unwrap()
}

/// `nbraid map` of `len` bytes at `at`, as JSON.
fn map_json(cfg: &str, at: u64, len: u64) -> Value {
    let out = ok(
        nbraid(&[
            "map",
            cfg,
            "v",
            &format!("{at}B"),
            &format!("{len}B"),
            "--json",
        ]),
        "map",
    );
    serde_json::from_str(&out).unwrap()
}

/// The served volume after: seeded bytes written, d1 failed, a restart (d1 recorded failed
/// at start), new1.img added and rebuilt into role 1. The daemon, the NBD URI and the bytes.
fn rebuilt_onto_new1(nbdcopy: &Path, dir: &Path) -> (Daemon, String, Vec<u8>) {
    let config = write_raid5(dir);
    let cfg = config.to_str().unwrap();
    let (mut d, uri) = serve(&config, "v");
    let data = fill_whole(nbdcopy, dir, &uri, (cfg, "v"), 0x9e37_79b9_7f4a_7c15);
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

/// After the rebuild, reading `map`'s FILE at its MEMBER OFFSET gives the export's bytes for
/// every extent of the volume: the added member's FILE is its file (`…/new1.img`), not its
/// id.
#[test]
fn map_s_files_at_map_s_offsets_hold_the_export_s_bytes_after_a_rebuild() {
    let nbdcopy = require("nbdcopy");
    let dir = tempfile::tempdir().unwrap();
    let (_d, uri, data) = rebuilt_onto_new1(&nbdcopy, dir.path());
    let cfg = dir.path().join("c.toml");
    let cfg = cfg.to_str().unwrap();
    assert_eq!(export_bytes(&nbdcopy, dir.path(), &uri), data);
    let map = map_json(cfg, 0, data.len() as u64);
    let mut seen_new1 = false;
    for e in map["data"].as_array().unwrap() {
        let path = e["member_path"].as_str().unwrap();
        seen_new1 |= e["member"] == "new1";
        let file = dir.path().join(path);
        let mut f = std::fs::File::open(&file)
            .unwrap_or_else(|err| panic!("map names {path} ({e}): {err}"));
        let (logical, len) = (e["logical"].as_u64().unwrap(), e["len"].as_u64().unwrap());
        let mut got = vec![0; len as usize];
        f.seek(SeekFrom::Start(e["member_offset"].as_u64().unwrap()))
            .unwrap();
        f.read_exact(&mut got).unwrap();
        assert!(
            got == data[logical as usize..(logical + len) as usize],
            "{path} at the offset map gives does not hold the export's bytes: {e}"
        );
    }
    assert!(seen_new1, "role 1's extents are new1's: {map:#}");
}

/// Then d2.img is lost and the daemon restarts: role 2's member is d2 (missing from
/// d2.img) in `map`, `status` and `check` — not d1, the stale former role-1 member the
/// config lists first — and every `members = [...]` line offered agrees.
#[test]
fn a_lost_role_is_named_by_its_own_missing_member_in_map_status_and_check() {
    let nbdcopy = require("nbdcopy");
    let dir = tempfile::tempdir().unwrap();
    let (mut d, _uri, _data) = rebuilt_onto_new1(&nbdcopy, dir.path());
    let config = dir.path().join("c.toml");
    let cfg = config.to_str().unwrap();
    d.stop();
    std::fs::remove_file(dir.path().join("d2.img")).unwrap();
    let line = r#"members = ["d0", "new1", "d2", "d3"]"#;

    // Offline, from the superblocks alone.
    let checked = ok(nbraid(&["check", cfg]), "check");
    assert!(
        checked.contains("v: degraded: role 2 lost (d2: d2.img)"),
        "{checked}"
    );
    assert!(checked.contains(line), "{checked}");
    assert!(!checked.contains(r#""d1", "d3"]"#), "{checked}");
    assert!(
        checked.contains("member d1 no longer holds a role"),
        "{checked}"
    );

    let (_d, _uri) = serve(&config, "v");
    // Strips rotate over the roles: each role's extents somewhere in the first 1 MiB.
    let map = map_json(cfg, 0, MIB);
    let rows: Vec<&Value> = (map["data"].as_array().unwrap().iter())
        .chain(map["parity"].as_array().unwrap())
        .collect();
    for (role, id, file) in [(1, "new1", "/new1.img"), (2, "d2", "d2.img")] {
        let row = (rows.iter())
            .find(|r| r["member_index"] == role)
            .unwrap_or_else(|| panic!("no extent on role {role}: {map:#}"));
        assert_eq!(row["member"], id, "{row}");
        let path = row["member_path"].as_str().unwrap();
        assert!(path.ends_with(file), "role {role}'s file: {row}");
    }
    let text = ok(nbraid(&["map", cfg, "v", "128KiB", "4KiB"]), "map");
    assert!(
        text.contains("note: role 2's member d2 (d2.img) is missing"),
        "{text}"
    );

    let v = status_of(cfg, "v");
    let m = &v["members"][2];
    assert_eq!(
        (&m["id"], &m["state"]),
        (&"d2".into(), &"missing".into()),
        "{v:#}"
    );
    let path = m["path"].as_str().unwrap();
    assert!(
        path.ends_with("/d2.img"),
        "the file it is missing from: {v:#}"
    );
    let notes = v["notes"].to_string();
    assert!(notes.contains(&line.replace('"', "\\\"")), "{v:#}");
    assert!(notes.contains("member d1 no longer holds a role"), "{v:#}");
}
