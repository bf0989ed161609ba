//! Records of one volume that disagree on its geometry are refused, naming the members.
//!
//! Found by a fuzzing hunt: one member's superblock (its checksum made right again) put a
//! peer's region 1 MiB further than the peer's own record did. The start took the lowest
//! role's record and never compared it with its peers': it logged nothing, served the peer's
//! chunks from the wrong offset (wrong bytes) and wrote an acknowledged write there (lost once
//! the record was put right); with checksums on, the healthy peer was failed. The config
//! could not catch it: the daemon places existing volumes' regions where the records put
//! them. Now every record the newest trusts must say the same tree (and a record one event
//! older its own region), or the volume is refused before a byte is read.
//!
//! Each case: RAID 5 over four memory members, a pattern written and recorded clean, one
//! member's superblock (both copies) altered and re-encoded, the volume opened again: refused
//! with both members named — never served with wrong bytes.

mod common;

use common::arrays::{create, write_clean};
use common::{level_tree, MIB};
use futures::executor::block_on;
use nbraid_core::metadata::{Array, ArrayOptions, MemberMeta, Superblock, SLOT_BYTES};
use nbraid_core::{Member, MemoryMember};
use nbraid_layout::{Level, Node, ParityLayout, Region, Shape};
use std::sync::Arc;

const STRIP: u64 = 16 << 10;
const START: u64 = MIB;
const REGION: u64 = MIB;
/// Room past the region: a record may move it 1 MiB on and still fit the member.
const MEMBER_BYTES: u64 = START + 3 * MIB;

fn opts() -> ArrayOptions {
    ArrayOptions {
        member_ids: (0..4).map(|i| format!("d{i}")).collect(),
        ..ArrayOptions::default()
    }
}

fn tree(strip: u64) -> Node {
    level_tree(Level::Raid5, 4, strip, START, REGION)
}

/// Each member's bytes after a pattern was written and the array recorded clean, and the
/// pattern.
fn written() -> (Vec<Vec<u8>>, Vec<u8>) {
    let disks: Vec<Arc<MemoryMember>> = (0..4)
        .map(|i| Arc::new(MemoryMember::new(format!("d{i}"), MEMBER_BYTES)))
        .collect();
    let a = create(&tree(STRIP), &disks, opts());
    let capacity = a.volume().capacity() as usize;
    let image: Vec<u8> = (0..capacity).map(|i| (i * 7 + i / 4096) as u8).collect();
    write_clean(&a, &image).expect("written");
    drop(a);
    let members = (disks.iter())
        .map(|d| {
            let mut b = vec![0u8; MEMBER_BYTES as usize];
            d.peek(0, &mut b);
            b
        })
        .collect();
    (members, image)
}

/// Both superblock copies of a member's `bytes` with `f` applied to its record, re-encoded
/// (their checksums are right).
fn alter(bytes: &mut [u8], f: impl Fn(&mut nbraid_core::metadata::VolumeRecord)) {
    for slot in [0, SLOT_BYTES as usize] {
        let Ok(mut sb) = Superblock::decode(&bytes[slot..]) else {
            continue;
        };
        f(&mut sb.volumes[0]);
        let enc = sb.encode().expect("encodes");
        bytes[slot..slot + enc.len()].copy_from_slice(&enc);
    }
}

/// The volume opened over `members` with `config`: its bytes, or the refusal.
fn open(config: &Node, members: &[Vec<u8>]) -> Result<Vec<u8>, String> {
    let metas = (members.iter().enumerate())
        .map(|(i, b)| {
            let d = MemoryMember::new(format!("d{i}"), b.len() as u64);
            d.poke(0, b);
            Some(block_on(MemberMeta::load(Arc::new(d) as Arc<dyn Member>)))
        })
        .collect();
    let (a, _) = block_on(Array::open("vol", config, metas, opts(), &|_, _| {}))
        .map_err(|e| e.to_string())?;
    let got = block_on(a.read(0, a.volume().capacity())).map_err(|e| e.to_string())?;
    Ok(got.to_vec())
}

/// Refused, the message holding every one of `words`; served is a failure, saying whether
/// the bytes were right.
fn refused(config: &Node, members: &[Vec<u8>], image: &[u8], words: &[&str]) {
    match open(config, members) {
        Ok(got) => panic!(
            "served ({})",
            if got == image {
                "bytes as written"
            } else {
                "WRONG bytes"
            }
        ),
        Err(e) => {
            for w in words {
                assert!(e.contains(w), "`{w}` missing from: {e}");
            }
        }
    }
}

/// The hunt's case: d0's record (the one a start takes: lowest role) puts role 1's region
/// 1 MiB on; d1's own record, and its bytes, are where they were. The config places regions
/// where the newest record does (as the daemon's does), so only the peers can tell.
#[test]
fn a_peer_region_moved_in_the_newest_record_is_refused_naming_both_members() {
    let (mut members, image) = written();
    alter(&mut members[0], |r| r.tree = moved(1, START + MIB));
    refused(
        &moved(1, START + MIB),
        &members,
        &image,
        &[
            "vol",
            "member d0",
            "member d1",
            "role 1's region",
            "2 MiB",
            "1 MiB",
        ],
    );
    // Put right, the volume serves every byte as written.
    assert_eq!(open(&tree(STRIP), &written_back(members)).ok(), Some(image));
}

/// A peer's record with another strip size: refused although the newest record matches the
/// config.
#[test]
fn a_peer_strip_size_that_differs_is_refused() {
    let (mut members, image) = written();
    alter(&mut members[2], |r| r.tree = tree(2 * STRIP));
    refused(
        &tree(STRIP),
        &members,
        &image,
        &["member d0", "member d2", "strip size", "16384", "32768"],
    );
}

/// A member one event behind (a commit torn on it: still read as current) whose own record
/// places its own region elsewhere is not read at the newest tree's place silently.
#[test]
fn a_member_one_event_behind_whose_own_region_moved_is_refused() {
    let (mut members, image) = written();
    alter(&mut members[3], |r| {
        r.events -= 1;
        r.tree = moved(3, START + MIB);
    });
    refused(
        &tree(STRIP),
        &members,
        &image,
        &["member d0", "member d3", "role 3's region", "own record"],
    );
}

/// The volume's tree with role `role`'s region starting at `start`.
fn moved(role: usize, start: u64) -> Node {
    let mut regions = vec![
        Region {
            start: START,
            len: REGION
        };
        4
    ];
    regions[role].start = start;
    Shape::new(Level::Raid5, 4, None, STRIP, ParityLayout::default())
        .expect("shape")
        .build(&regions)
        .expect("tree")
}

/// `members` with d0's record put back to the tree its peers record.
fn written_back(mut members: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    alter(&mut members[0], |r| r.tree = tree(STRIP));
    members
}
