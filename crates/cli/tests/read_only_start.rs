//! `read_only = true` is md's read-only assembly: members opened read-only (a device with
//! its ro flag set, a file nobody may write) and not one byte written to any of them from
//! start to stop. Before, the start opened every member read-write — refused on such disks —
//! and wrote records, the bitmap and the log's state to them. Each test writes data, stops,
//! makes every member read-only, starts with `read_only = true`, reads everything back
//! through NBD, and checks every member's bytes (sha256 of the whole device or file)
//! unchanged; then the same with one member missing (degraded).

mod common;

use common::loops::{tool, Loop};
use common::{fill, nbraid, ok, prefix_reads_back, require, serve, sha256, status_of, Daemon};
use std::path::{Path, PathBuf};
use std::process::Command;

fn hashes(paths: &[PathBuf]) -> Vec<String> {
    paths.iter().map(|p| sha256(p)).collect()
}

/// `chattr +i` (or `-i`): a file even root cannot open for writing (mode 0444 alone does
/// not stop root, which the tests run as).
fn immutable(path: &Path, on: bool) {
    let flag = if on { "+i" } else { "-i" };
    ok(
        Command::new(tool("chattr"))
            .arg(flag)
            .arg(path)
            .output()
            .unwrap(),
        "chattr",
    );
}

/// A config (`rw.toml`, or `ro.toml` when `keys` say `read_only`): one volume `v` of `level`
/// over `members` (id, then the path and size lines), with `keys`.
fn config(dir: &Path, members: &[(String, String)], level: &str, keys: &str) -> PathBuf {
    let mut text = format!(
        "[daemon]\nlisten = [\"unix:{}\"]\n\n",
        dir.join("nbd.sock").display()
    );
    for (id, member) in members {
        text += &format!("[[member]]\nid = \"{id}\"\n{member}\n\n");
    }
    let ids: Vec<String> = members.iter().map(|(id, _)| format!("\"{id}\"")).collect();
    let strip = if level == "raid1" {
        ""
    } else {
        "strip_size = \"64KiB\"\n"
    };
    text += &format!(
        "[[volume]]\nname = \"v\"\nlevel = \"{level}\"\n{strip}members = [{}]\n{keys}",
        ids.join(", ")
    );
    // One file per mode: the read-write config stays for the start after the read-only one.
    let name = if keys.contains("read_only") {
        "ro.toml"
    } else {
        "rw.toml"
    };
    let file = dir.join(name);
    std::fs::write(&file, text).unwrap();
    file
}

/// Starts the daemon read-only on `cfg`, reads `data` back through NBD, checks what status
/// says and that the writing commands are refused; stops it.
fn serve_read_only(cfg: &Path, dir: &Path, data: &[u8], degraded: bool) {
    let nbdcopy = require("nbdcopy");
    let (mut d, uri) = serve(cfg, "v");
    prefix_reads_back(&nbdcopy, dir, &uri, data);
    let c = cfg.to_str().unwrap();
    let v = status_of(c, "v");
    assert_eq!(v["read_only"], true, "{v:#}");
    let state = if degraded { "degraded" } else { "healthy" };
    assert_eq!(v["state"], state, "{v:#}");
    let table = ok(nbraid(&["status", "--config", c]), "status");
    assert!(table.contains("read-only (read_only = true)"), "{table}");
    // A scrub that only checks writes nothing: it runs.
    ok(nbraid(&["scrub", "v", "--config", c]), "scrub (check only)");
    for args in [
        vec!["scrub", "v", "--repair"],
        vec!["fail", "v", "m0", "--force"],
        vec!["rebuild", "v"],
    ] {
        let o = nbraid(&[&args[..], &["--config", c]].concat());
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{args:?} is refused");
        assert!(err.contains("read_only = true"), "{args:?}: {err}");
    }
    let v = status_of(c, "v");
    assert_eq!(v["state"], state, "nothing failed: {v:#}");
    prefix_reads_back(&nbdcopy, dir, &uri, data);
    d.stop();
}

/// Three 24 MiB file members d0..d2.img in `dir`: their paths, and their config lines by id.
fn file_members(dir: &Path) -> (Vec<PathBuf>, Vec<(String, String)>) {
    let paths: Vec<PathBuf> = (0..3).map(|i| dir.join(format!("d{i}.img"))).collect();
    let members = (paths.iter().enumerate())
        .map(|(i, p)| {
            let line = format!("path = \"{}\"\nsize = \"24MiB\"", p.display());
            (format!("m{i}"), line)
        })
        .collect();
    (paths, members)
}

/// Writes 32 MiB through a read-write start of `cfg`; the bytes.
fn write_data(cfg: &Path, dir: &Path, seed: u64) -> Vec<u8> {
    let (mut d, uri) = serve(cfg, "v");
    let data = fill(&require("nbdcopy"), dir, &uri, seed);
    d.stop();
    data
}

#[test]
fn a_mirror_on_read_only_devices_starts_read_only_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let devs: Vec<Loop> = (0..2)
        .map(|i| Loop::attach(&dir.path().join(format!("b{i}.img")), 48 << 20))
        .collect();
    let members: Vec<(String, String)> = (devs.iter().enumerate())
        .map(|(i, d)| (format!("m{i}"), format!("path = \"{}\"", d.path())))
        .collect();
    // Checksums on (the default).
    let rw = config(dir.path(), &members, "raid1", "");
    let data = write_data(&rw, dir.path(), 11);
    let paths: Vec<PathBuf> = devs.iter().map(|d| d.path.clone()).collect();
    let before = hashes(&paths);

    for d in &devs {
        d.set_read_only(true);
    }
    // Read-write, a device whose ro flag is set cannot be opened.
    let o = Command::new(common::nbraidd_path())
        .args(["--config", rw.to_str().unwrap(), "--log-level", "error"])
        .output()
        .unwrap();
    assert!(
        !o.status.success(),
        "a read-write start on read-only devices is refused"
    );

    let ro = config(dir.path(), &members, "raid1", "read_only = true\n");
    serve_read_only(&ro, dir.path(), &data, false);
    assert_eq!(hashes(&paths), before, "not one byte written");

    // One copy missing: the other serves it all.
    let gone = dir.path().join("gone.img");
    let one = vec![
        members[0].clone(),
        (
            "m1".into(),
            format!("path = \"{}\"\nsize = \"48MiB\"", gone.display()),
        ),
    ];
    let ro = config(dir.path(), &one, "raid1", "read_only = true\n");
    serve_read_only(&ro, dir.path(), &data, true);
    assert!(!gone.exists(), "a missing member is not created");
    assert_eq!(hashes(&paths), before, "not one byte written (degraded)");
    for d in &devs {
        d.set_read_only(false);
    }
}

#[test]
fn a_raid5_on_files_nobody_may_write_starts_read_only_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, members) = file_members(dir.path());
    // The write-hole log and checksums on (the defaults).
    let rw = config(dir.path(), &members, "raid5", "");
    let data = write_data(&rw, dir.path(), 12);
    let before = hashes(&paths);
    for p in &paths {
        let mut perm = std::fs::metadata(p).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o444);
        std::fs::set_permissions(p, perm).unwrap();
        immutable(p, true);
    }
    let cleanup = Immutable(paths.clone());

    let ro = config(dir.path(), &members, "raid5", "read_only = true\n");
    serve_read_only(&ro, dir.path(), &data, false);
    assert_eq!(hashes(&paths), before, "not one byte written");

    // One member missing: its chunks are reconstructed from parity (the array is clean).
    let mut one = members.clone();
    one[1].1 = format!(
        "path = \"{}\"\nsize = \"24MiB\"",
        dir.path().join("gone.img").display()
    );
    let ro = config(dir.path(), &one, "raid5", "read_only = true\n");
    serve_read_only(&ro, dir.path(), &data, true);
    assert_eq!(hashes(&paths), before, "not one byte written (degraded)");
    drop(cleanup);
}

/// An unclean RAID 5 (its parity may disagree with its data where the bitmap marks) is
/// refused read-only, saying why, and nothing is written by the refused start.
#[test]
fn an_unclean_raid5_is_refused_read_only_saying_why() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, members) = file_members(dir.path());
    let rw = config(dir.path(), &members, "raid5", "");
    let (mut d, uri) = serve(&rw, "v");
    fill(&require("nbdcopy"), dir.path(), &uri, 13);
    // Killed: the records stay dirty, the bitmap's bits set.
    d.child.kill().unwrap();
    d.child.wait().unwrap();
    drop(d);
    let before = hashes(&paths);

    let ro = config(dir.path(), &members, "raid5", "read_only = true\n");
    let o = Command::new(common::nbraidd_path())
        .args(["--config", ro.to_str().unwrap(), "--log-level", "error"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "refused: {err}");
    assert!(err.contains("was not shut down cleanly"), "{err}");
    assert!(err.contains("read_only = true"), "{err}");
    assert_eq!(hashes(&paths), before, "the refused start wrote nothing");
    // Read-write it resyncs and serves; once the resync (and the checksums' refill) is done
    // it stops clean, and read-only then starts.
    let mut d = Daemon::start(&rw);
    let done = |p: &serde_json::Value| p.is_null() || p["state"] == "done";
    common::wait_until(rw.to_str().unwrap(), "v", "the resync", |v| {
        done(&v["resync"]) && done(&v["checksum_refill"])
    });
    d.stop();
    let mut d = Daemon::start(&ro);
    d.stop();
}

/// `nbraid apply --yes` with no daemon running writes the records of the move it starts:
/// refused on a read-only volume, naming `read_only`, writing nothing. Before, it started
/// the reshape (records written).
#[test]
fn an_offline_apply_is_refused_on_a_read_only_volume() {
    let dir = tempfile::tempdir().unwrap();
    let paths: Vec<PathBuf> = (0..4)
        .map(|i| dir.path().join(format!("d{i}.img")))
        .collect();
    let members: Vec<(String, String)> = (paths.iter().enumerate())
        .map(|(i, p)| {
            let line = format!("path = \"{}\"\nsize = \"24MiB\"", p.display());
            (format!("m{i}"), line)
        })
        .collect();
    let rw = config(dir.path(), &members[..3], "raid5", "");
    write_data(&rw, dir.path(), 14);
    std::fs::File::create(&paths[3])
        .and_then(|f| f.set_len(24 << 20))
        .unwrap();
    let before = hashes(&paths);
    // A fourth member: a restripe, offline.
    let ro = config(dir.path(), &members, "raid5", "read_only = true\n");
    let o = nbraid(&["apply", ro.to_str().unwrap(), "--yes"]);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(!o.status.success(), "refused: {text}");
    assert!(text.contains("has read_only = true"), "{text}");
    assert_eq!(hashes(&paths), before, "not one byte written");
}

/// Makes the files writable again when dropped (a failed test leaves none immutable).
struct Immutable(Vec<PathBuf>);

impl Drop for Immutable {
    fn drop(&mut self) {
        for p in &self.0 {
            immutable(p, false);
        }
    }
}
