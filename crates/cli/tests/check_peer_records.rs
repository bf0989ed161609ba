//! `nbraid check` and `nbraidd --check` refuse a volume whose members' records disagree on
//! its geometry, naming the members by their config ids as the start does (found by a
//! fuzzing hunt: one member's record, its checksum right, put a peer's region elsewhere;
//! the check said healthy and the start served wrong bytes).

mod common;

use common::{nbraid, nbraidd_path, ok, write_config};
use nbraid_core::metadata::{Superblock, SLOT_BYTES};
use std::path::Path;

/// Both superblock copies of member file `path` with `f` applied to its record, re-encoded
/// (their checksums are right).
fn alter(path: &Path, f: impl Fn(&mut nbraid_core::metadata::VolumeRecord)) {
    let mut bytes = std::fs::read(path).unwrap();
    for slot in [0, SLOT_BYTES as usize] {
        let Ok(mut sb) = Superblock::decode(&bytes[slot..]) else {
            continue;
        };
        f(&mut sb.volumes[0]);
        let enc = sb.encode().expect("encodes");
        bytes[slot..slot + enc.len()].copy_from_slice(&enc);
    }
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn a_check_refuses_records_that_disagree_naming_members_by_id() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(dir.path());
    let cfg = cfg.to_str().unwrap();
    ok(nbraid(&["create", cfg]), "nbraid create");
    ok(nbraid(&["check", cfg]), "check of a healthy array");
    // d1's record says the strip is twice what d0's (the record a start takes) says.
    alter(&dir.path().join("d1.img"), |r| {
        let nbraid_layout::Node::Parity(g) = &r.tree else {
            panic!("a RAID 6 records a parity group")
        };
        let tree = nbraid_layout::Node::parity(
            2 * g.strip(),
            g.parity(),
            g.layout(),
            g.children().to_vec(),
        );
        r.tree = tree.expect("a tree");
    });
    let want = "member d0's record says a strip size of 65536, member d1's 131072";
    let o = nbraid(&["check", cfg]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(!o.status.success(), "nbraid check exited 0:\n{out}");
    assert!(out.contains(want), "{out}");
    let o = std::process::Command::new(nbraidd_path())
        .args(["--config", cfg, "--check", "--log-level", "error"])
        .output()
        .expect("run nbraidd");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "nbraidd --check exited 0");
    assert!(err.contains(want), "{err}");
}
