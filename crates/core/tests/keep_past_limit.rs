//! A member past its bad-block limit (`checksum_error_limit`) that the volume cannot do
//! without is kept: RAID 0, JBOD, the last readable copy of a mirror, a member a degraded
//! RAID 5 needs. Its bad blocks answer errors, every other block reads right, the volume stays
//! available and the member is marked kept for status. (Before, the engine failed it: the
//! whole volume went unavailable over a handful of rotten blocks, a scrub of RAID 0 tripped
//! it too.) A member the volume does without — one half of a healthy mirror — is still failed
//! past the limit, and the other copy serves.

mod common;

use common::{KIB, MIB};
use futures::executor::block_on;
use nbraid_core::checksum::{area_bytes, ChecksumSetup, BLOCK_BYTES};
use nbraid_core::{
    Buf, CacheMode, Member, MemberState, MemoryMember, ReadPolicy, ScrubControl, ScrubState,
    Volume, VolumeOptions,
};
use nbraid_layout::{Geometry, Node, ParityLayout};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Bytes of each member's region (starting at 0, its checksum area after it).
const REGION: u64 = 2 * MIB;
/// The volume's `checksum_error_limit`: a member fails past this many bad blocks.
const LIMIT: u64 = 3;
/// Blocks rotted on one member: more than the limit allows.
const ROTTEN: u64 = 8;
const STRIP: u64 = 64 * KIB;

/// A checksummed volume of `tree` over `n` memory members, filled with random bytes (also
/// returned).
fn build(tree: Node, n: usize) -> (Volume, Vec<Arc<MemoryMember>>, Vec<u8>) {
    let mems: Vec<Arc<MemoryMember>> = (0..n)
        .map(|i| {
            Arc::new(MemoryMember::new(
                format!("m{i}"),
                REGION + area_bytes(REGION),
            ))
        })
        .collect();
    let dyns = mems.iter().map(|m| m.clone() as Arc<dyn Member>).collect();
    let sums = ChecksumSetup::new("t", common::areas_after(REGION, n), true)
        .with_fail_after_errors(Some(LIMIT));
    let opts = VolumeOptions {
        block_size: 4096,
        members_known_zero: true,
        cache: CacheMode::WriteThrough,
        cache_max_age: None,
        read_policy: ReadPolicy::RoundRobin,
        checksums: Some(sums),
        ..VolumeOptions::default()
    };
    let v = Volume::new(Geometry::from_tree(tree), dyns, opts).expect("volume");
    let mut data = vec![0u8; v.capacity() as usize];
    SmallRng::seed_from_u64(n as u64).fill(&mut data[..]);
    block_on(async {
        v.write(0, Buf::copy_from(&data), false).await?;
        v.flush().await
    })
    .expect("fill");
    (v, mems, data)
}

/// The member offsets rotted: [`ROTTEN`] blocks spread over the first MiB.
fn rotten_offsets() -> BTreeSet<u64> {
    (0..ROTTEN)
        .map(|k| k * 128 * KIB + (k % 4) * BLOCK_BYTES)
        .collect()
}

/// Overwrites member `m`'s rotten blocks with other bytes behind the engine's back.
fn rot(mems: &[Arc<MemoryMember>], m: usize) {
    let mut b = vec![0u8; BLOCK_BYTES as usize];
    for at in rotten_offsets() {
        mems[m].peek(at, &mut b);
        b.iter_mut().for_each(|x| *x = !*x);
        mems[m].poke(at, &b);
    }
}

/// Volume blocks that cannot read with member `rotten`'s blocks rotted and the members in
/// `gone` failed: those whose bytes (or, for a gone member's, whose stripe row) lie at a
/// rotten member offset on either. Regions start at 0 alike, so a row is one member offset.
fn expected_bad(v: &Volume, rotten: usize, gone: &[usize]) -> BTreeSet<u64> {
    let offsets = rotten_offsets();
    (0..v.capacity())
        .step_by(BLOCK_BYTES as usize)
        .filter(|&at| {
            let map = v.geometry().map(at, BLOCK_BYTES).expect("map");
            map.data.iter().any(|e| {
                (e.member == rotten || gone.contains(&e.member)) && offsets.contains(&e.offset)
            })
        })
        .collect()
}

/// Reads the whole volume block by block: every block that reads holds what was written;
/// the blocks that fail are returned.
fn read_all(v: &Volume, data: &[u8], what: &str) -> BTreeSet<u64> {
    let mut bad = BTreeSet::new();
    for at in (0..v.capacity()).step_by(BLOCK_BYTES as usize) {
        match block_on(v.read(at, BLOCK_BYTES)) {
            Ok(b) => {
                let want = &data[at as usize..(at + BLOCK_BYTES) as usize];
                assert!(b[..] == *want, "{what}: block at {at} read wrong bytes");
            }
            Err(_) => {
                bad.insert(at);
            }
        }
    }
    bad
}

fn checksum_errors(v: &Volume, m: usize) -> u64 {
    let sums = v.options().checksums.as_ref().expect("checksums");
    sums.counters(m)
        .expect("counters")
        .errors
        .load(Ordering::Relaxed)
}

/// Member `m` is past its limit, not failed, marked kept; the volume is available.
fn assert_kept(v: &Volume, m: usize, what: &str) {
    assert!(checksum_errors(v, m) > LIMIT, "{what}: past the limit");
    assert_eq!(
        v.member_health()[m].state,
        MemberState::Healthy,
        "{what}: not failed"
    );
    assert!(v.member_health()[m].kept_past_limit, "{what}: marked kept");
    assert!(v.is_available(), "{what}: the volume stays available");
}

fn leaves(n: usize) -> Vec<Node> {
    (0..n).map(|i| Node::member(i, 0, REGION)).collect()
}

/// RAID 0 ×2, JBOD ×2, RAID 1 ×2 with member 0 failed, RAID 5 ×3 with member 0 failed: the
/// member with the rot (1) is the only source of some data. Read twice: the second pass
/// finds the same, the member still serving.
#[test]
fn a_member_nothing_can_do_without_is_kept_past_its_bad_block_limit() {
    let raid5 = || Node::parity(STRIP, 1, ParityLayout::LeftSymmetric, leaves(3)).unwrap();
    let shapes: [(&str, Node, usize, &[usize]); 4] = [
        ("raid0", Node::stripe(STRIP, leaves(2)).unwrap(), 2, &[]),
        ("jbod", Node::concat(leaves(2)).unwrap(), 2, &[]),
        ("raid1 degraded", Node::mirror(leaves(2)).unwrap(), 2, &[0]),
        ("raid5 degraded", raid5(), 3, &[0]),
    ];
    for (what, tree, n, gone) in shapes {
        let (v, mems, data) = build(tree, n);
        for &g in gone {
            v.fail_member(g, "test");
        }
        rot(&mems, 1);
        let want = expected_bad(&v, 1, gone);
        assert!(want.len() as u64 >= ROTTEN, "{what}: {want:?}");
        for pass in 0..2 {
            let bad = read_all(&v, &data, what);
            assert_eq!(
                bad, want,
                "{what}: pass {pass}: only the rotten blocks fail"
            );
        }
        assert_kept(&v, 1, what);
    }
}

/// A healthy RAID 1 ×2 does without either half: the rotten member fails past the limit,
/// every read is served right by the other copy.
#[test]
fn a_mirror_half_the_volume_does_without_still_fails_past_the_limit() {
    let (v, mems, data) = build(Node::mirror(leaves(2)).unwrap(), 2);
    rot(&mems, 0);
    // Each rotten block twice in a row: round-robin sends one of the two reads to member 0.
    for at in rotten_offsets() {
        for _ in 0..2 {
            let b = block_on(v.read(at, BLOCK_BYTES)).expect("the other copy serves");
            assert!(b[..] == data[at as usize..(at + BLOCK_BYTES) as usize]);
        }
    }
    assert!(checksum_errors(&v, 0) > LIMIT, "past the limit");
    assert_eq!(v.member_health()[0].state, MemberState::Failed, "failed");
    assert!(!v.member_health()[0].kept_past_limit);
    assert!(v.is_available());
    assert!(read_all(&v, &data, "raid1").is_empty(), "all from member 1");
}

/// A scrub of RAID 0 with more rotten blocks than the limit finds every one of them and
/// leaves the member serving (before, it failed the member a few blocks in, and the scrub
/// skipped the rest as having no redundancy).
#[test]
fn a_raid0_scrub_past_the_limit_finds_every_bad_block_and_keeps_serving() {
    let (v, mems, data) = build(Node::stripe(STRIP, leaves(2)).unwrap(), 2);
    rot(&mems, 1);
    let ctl = ScrubControl::new(false, 0);
    let r = block_on(v.scrub(&ctl)).expect("scrub");
    assert_eq!(r.state, ScrubState::Done);
    let found = ctl.findings();
    let mine = found.by_member.get(&1).expect("member 1's findings");
    assert_eq!(mine.total, ROTTEN, "{found:?}");
    assert_eq!((r.unreadable, r.skipped), (ROTTEN, 0), "{r:?}");
    assert_kept(&v, 1, "raid0 scrub");
    assert_eq!(read_all(&v, &data, "raid0 scrub"), expected_bad(&v, 1, &[]));
}
