//! `read_only = true` over remote members: an export cannot be opened read-only the way a file
//! can, so every remote member is wrapped in `ReadOnlyMember`, which refuses a write before
//! it is sent. These exports (`nbdkit file`) accept writes, so only that wrapper stands
//! between a read-only start and the member files. Blocks made bad behind the daemon's back
//! (RAID 1: on one copy; RAID 5: a data chunk) are read through: each read corrects them
//! from the redundancy and its repair write is refused, not sent; the member is kept, every
//! read after that still corrects them (before, the refused repair dropped the blocks'
//! checksums, and the second read served the bad bytes unchecked), and the files' bytes are
//! unchanged from start to stop.

mod common;

use common::{fill, nbraid, read_out, require, serve, sha256, status_of};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};

const MIB: u64 = 1 << 20;
const BLOCK: usize = 4096;

/// `nbdkit file` serving `file` (read-write) on `sock`.
fn export(sock: &Path, file: &Path) -> Child {
    common::nbdkit_export(sock, &["file".as_ref(), file.as_os_str()])
}

/// A config of one `level` volume `v` over the exports on `socks`, with `keys`.
fn config(dir: &Path, socks: &[PathBuf], level: &str, name: &str, keys: &str) -> PathBuf {
    let mut text = format!(
        "[daemon]\nlisten = [\"unix:{}\"]\n\n",
        dir.join("nbd.sock").display()
    );
    let mut ids = Vec::new();
    for (i, s) in socks.iter().enumerate() {
        text += &format!(
            "[[member]]\nid = \"m{i}\"\npath = \"nbd+unix:///?socket={}\"\nsize = \"40MiB\"\n\n",
            s.display()
        );
        ids.push(format!("\"m{i}\""));
    }
    text += &format!(
        "[[volume]]\nname = \"v\"\nlevel = \"{level}\"\nmembers = [{}]\n{keys}",
        ids.join(", ")
    );
    let file = dir.join(name);
    std::fs::write(&file, text).unwrap();
    file
}

/// Where the 4 KiB block at volume offset `logical` lies: `nbraid map`'s data extent on
/// member 1 when it has one there (a mirror's second copy), else its first (a parity group's
/// data chunk). (member index, member offset).
fn block_place(cfg: &Path, logical: u64) -> (usize, u64) {
    let data = common::map_extents(cfg, "v", logical);
    let e = (data.iter())
        .find(|e| e["member_index"] == 1)
        .unwrap_or(&data[0]);
    let index = e["member_index"].as_u64().unwrap() as usize;
    (index, e["member_offset"].as_u64().unwrap())
}

/// Overwrites the 4 KiB at `at` of `file` with junk; its old bytes.
fn corrupt(file: &Path, at: u64) -> Vec<u8> {
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(file)
        .unwrap();
    let mut old = vec![0u8; BLOCK];
    f.seek(SeekFrom::Start(at)).unwrap();
    f.read_exact(&mut old).unwrap();
    f.seek(SeekFrom::Start(at)).unwrap();
    f.write_all(&common::seeded_bytes(at | 1, BLOCK as u64))
        .unwrap();
    f.sync_all().unwrap();
    old
}

/// Reads the whole volume at `uri`: the 4 KiB blocks of its first `data.len()` bytes that
/// differ from `data`.
fn wrong_blocks(nbdcopy: &Path, dir: &Path, uri: &str, data: &[u8]) -> Vec<usize> {
    let got = read_out(nbdcopy, dir, uri);
    (0..data.len() / BLOCK)
        .filter(|b| got[b * BLOCK..(b + 1) * BLOCK] != data[b * BLOCK..(b + 1) * BLOCK])
        .collect()
}

/// A read-only start of a `level` volume of `n` members over writable exports, with bad
/// blocks on its members, serves every byte right on every read and sends no write.
fn read_only_over_writable_exports(level: &str, n: usize) {
    let dir = tempfile::tempdir().unwrap();
    let files: Vec<PathBuf> = (0..n)
        .map(|i| dir.path().join(format!("e{i}.img")))
        .collect();
    let socks: Vec<PathBuf> = (0..n)
        .map(|i| dir.path().join(format!("e{i}.sock")))
        .collect();
    for f in &files {
        std::fs::File::create(f).unwrap().set_len(40 * MIB).unwrap();
    }
    let mut kits: Vec<Child> = files
        .iter()
        .zip(&socks)
        .map(|(f, s)| export(s, f))
        .collect();

    let rw = config(dir.path(), &socks, level, "rw.toml", "");
    let (mut d, uri) = serve(&rw, "v");
    let nbdcopy = require("nbdcopy");
    let data = fill(&nbdcopy, dir.path(), &uri, 21);
    d.stop();

    // One block in each MiB written (one chunk of a stripe at most), so a whole read of the
    // volume meets them whatever the read policy.
    for i in 0..32 {
        let logical = i * MIB + 7 * BLOCK as u64;
        let (member, at) = block_place(&rw, logical);
        let old = corrupt(&files[member], at);
        let l = logical as usize;
        assert!(
            old == data[l..l + BLOCK],
            "{level}: the map places block {logical}"
        );
    }
    let before: Vec<String> = files.iter().map(|f| sha256(f)).collect();

    let ro = config(dir.path(), &socks, level, "ro.toml", "read_only = true\n");
    let (mut d, uri) = serve(&ro, "v");
    for pass in 0..3 {
        let wrong = wrong_blocks(&nbdcopy, dir.path(), &uri, &data);
        assert!(
            wrong.is_empty(),
            "{level}: read {pass} served bad blocks {wrong:?}"
        );
    }
    let c = ro.to_str().unwrap();
    let v = status_of(c, "v");
    assert_eq!(v["read_only"], true, "{v:#}");
    assert_eq!(
        v["state"], "healthy",
        "{level}: a refused repair fails no member: {v:#}"
    );
    let met: u64 = (v["members"].as_array().unwrap().iter())
        .map(|m| m["checksum_errors"].as_u64().unwrap_or(0))
        .sum();
    assert!(met > 0, "{level}: the reads met the bad blocks: {v:#}");
    // A client write is refused, and so is a repairing scrub.
    let src = dir.path().join("one.img");
    std::fs::write(&src, vec![5u8; MIB as usize]).unwrap();
    let o = Command::new(&nbdcopy).arg(&src).arg(&uri).output().unwrap();
    assert!(!o.status.success(), "{level}: a client write is refused");
    let o = nbraid(&["scrub", "v", "--repair", "--config", c]);
    assert!(!o.status.success(), "{level}: scrub --repair is refused");
    d.stop();

    let after: Vec<String> = files.iter().map(|f| sha256(f)).collect();
    assert_eq!(after, before, "{level}: not one byte sent to any export");
    for k in &mut kits {
        let _ = k.kill();
        let _ = k.wait();
    }
}

#[test]
fn a_read_only_mirror_over_writable_exports_serves_right_and_sends_no_write() {
    read_only_over_writable_exports("raid1", 2);
}

#[test]
fn a_read_only_raid5_over_writable_exports_serves_right_and_sends_no_write() {
    read_only_over_writable_exports("raid5", 3);
}
