//! A superblock whose checksum is right but whose values are absurd, through the real
//! `nbraidd`: a 16 TiB bitmap (and a recorded member size raised to match) made a dirty
//! start abort allocating it. The member must be named unreadable and its peers serve.

mod common;

use common::Daemon;
use nbraid_core::metadata::{Superblock, SLOT_BYTES};
use std::path::Path;

fn config(dir: &Path) -> std::path::PathBuf {
    let mut text = format!(
        "[daemon]\nlisten = [\"unix:{}\"]\n\n",
        dir.join("nbd.sock").display()
    );
    for i in 0..3 {
        text += &format!("[[member]]\nid = \"d{i}\"\npath = \"d{i}.img\"\nsize = \"9MiB\"\n\n");
    }
    text += "[[volume]]\nname = \"v\"\nlevel = \"raid5\"\nmembers = [\"d0\", \"d1\", \"d2\"]\n";
    let path = dir.join("arrays.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn start(config: &Path) -> Daemon {
    Daemon::start(config, "warn", true, |l| {
        l.starts_with("nbraidd: control socket")
    })
}

/// Both superblock copies of the member file at `path` with `f` applied, re-encoded (their
/// checksums right).
fn rewrite(path: &Path, f: impl Fn(&mut Superblock)) {
    let mut bytes = std::fs::read(path).unwrap();
    for slot in [0, SLOT_BYTES as usize] {
        let mut sb = Superblock::decode(&bytes[slot..]).expect("a superblock copy");
        f(&mut sb);
        let enc = sb.encode().expect("encodes");
        bytes[slot..slot + enc.len()].copy_from_slice(&enc);
    }
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn a_16_tib_bitmap_behind_a_right_checksum_is_an_unreadable_member_not_an_abort() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    start(&config).stop(); // creates the volume
    rewrite(&dir.path().join("d1.img"), |sb| {
        sb.member_bytes = 1 << 50;
        let v = &mut sb.volumes[0];
        v.clean = false; // a dirty start
        v.bitmap.as_mut().expect("a bitmap").area.len = 16 << 40;
    });
    let stderr = start(&config).stop();
    assert!(
        stderr.contains("d1.img") && stderr.contains("bitmap area"),
        "the member and the field are named: {stderr}"
    );
}
