//! md's `max_read_errors`: a member that keeps answering read errors the redundancy has to
//! correct is failed once the corrected errors pass the volume's limit, as one returning I/O
//! errors on writes is — "N read errors (limit L)" — and the volume serves on without it.
//! Before, such a member was kept forever: every read of its bad spots cost a reconstruction
//! and the volume never said to replace it. At the limit it is kept; past it a member the
//! volume cannot do without is kept too (marked so); errors nothing could correct and
//! checksum mismatches (their own limit) do not count; limit 0 never fails a member.

mod common;

use common::{faulty_members, level_tree, KIB, MIB};
use futures::executor::block_on;
use nbraid_core::checksum::{area_bytes, ChecksumSetup, BLOCK_BYTES};
use nbraid_core::fail_cause::FailCause;
use nbraid_core::VolumeOptions;
use nbraid_core::{Buf, CacheMode, Member, MemberState, MemoryMember, ReadPolicy, Volume};
use nbraid_layout::{Geometry, Level, Node};
use nbraid_sim::{FaultOps, Faulty};
use std::sync::Arc;

const MEMBER: u64 = MIB;
const STRIP: u64 = 64 * KIB;
/// The volumes' `max_read_errors`.
const LIMIT: u32 = 3;
/// The member offsets of the dying member's bad spot (it reads nothing there, ever; writes
/// land but cure nothing).
const SPOT: std::ops::Range<u64> = 128 * KIB..384 * KIB;

type Disks = Vec<Arc<Faulty<MemoryMember>>>;

fn options(limit: u32) -> VolumeOptions {
    VolumeOptions {
        block_size: 4096,
        members_known_zero: true,
        cache: CacheMode::WriteThrough,
        cache_max_age: None,
        read_policy: ReadPolicy::RoundRobin,
        max_read_errors: limit,
        ..VolumeOptions::default()
    }
}

/// `tree` over `n` fault-injecting members with `max_read_errors = limit`, filled with a
/// pattern (returned).
fn volume(tree: Node, n: usize, limit: u32) -> (Disks, Volume, Vec<u8>) {
    let (disks, dyns) = faulty_members(n, MEMBER, 7, false);
    let v = Volume::new(Geometry::from_tree(tree), dyns, options(limit)).expect("volume");
    let data: Vec<u8> = (0..v.capacity()).map(|i| (i * 7 % 251) as u8).collect();
    block_on(v.write(0, Buf::copy_from(&data), false)).expect("fill");
    (disks, v, data)
}

/// The first volume block with a copy on member `m` inside [`SPOT`].
fn block_on_spot(v: &Volume, m: usize) -> u64 {
    (0..v.capacity())
        .step_by(BLOCK_BYTES as usize)
        .find(|&at| {
            let map = v.geometry().map(at, BLOCK_BYTES).expect("map");
            (map.data.iter()).any(|e| e.member == m && SPOT.contains(&e.offset))
        })
        .expect("a block on the spot")
}

/// Reads block `at` (it must read right) until a read reaches member `m` and fails there,
/// at most twice (round-robin sends one of two reads to each copy of a mirror).
fn meet_error(v: &Volume, data: &[u8], at: u64, m: usize) {
    let before = v.member_health()[m].read_errors;
    for _ in 0..2 {
        let got = block_on(v.read(at, BLOCK_BYTES)).expect("served from the redundancy");
        assert!(got[..] == data[at as usize..(at + BLOCK_BYTES) as usize]);
        if v.member_health()[m].read_errors > before {
            return;
        }
    }
    panic!("no read of block {at} reached member {m}");
}

fn assert_reads_right(v: &Volume, data: &[u8], what: &str) {
    let got = block_on(v.read(0, v.capacity())).expect("the volume reads");
    assert!(got[..] == data[..], "{what}: every byte right");
}

/// RAID 1 ×2, RAID 5 ×3, RAID 6 ×4, RAID 10 ×4, each with one member dying in a spot: at
/// `LIMIT` corrected read errors it serves on; the next one fails it as an I/O-failed
/// member, saying why, and the volume serves every byte from the rest.
#[test]
fn a_member_is_failed_after_one_more_corrected_read_error_than_the_limit() {
    let shapes = [
        (Level::Raid1, 2, 0),
        (Level::Raid5, 3, 1),
        (Level::Raid6, 4, 2),
        (Level::Raid10, 4, 3),
    ];
    for (level, n, m) in shapes {
        let what = format!("{level} ×{n}, member {m}");
        let (disks, v, data) = volume(level_tree(level, n, STRIP, 0, MEMBER), n, LIMIT);
        disks[m].fail_range(FaultOps::READ, SPOT);
        let at = block_on_spot(&v, m);
        for k in 1..=LIMIT {
            meet_error(&v, &data, at, m);
            assert_eq!(v.member_health()[m].corrected_read_errors, k, "{what}");
        }
        assert_eq!(
            v.member_health()[m].state,
            MemberState::Healthy,
            "{what}: at L"
        );
        meet_error(&v, &data, at, m);
        assert_eq!(
            v.member_health()[m].state,
            MemberState::Failed,
            "{what}: L + 1"
        );
        let f = v.member_health()[m].failure.clone().expect("failed");
        assert_eq!(f.cause, FailCause::Errors, "{what}");
        assert_eq!(f.why, format!("{} read errors (limit {LIMIT})", LIMIT + 1));
        assert!(!v.member_health()[m].kept_past_read_limit, "{what}");
        assert!(v.is_available(), "{what}");
        let others = (0..n).filter(|&i| i != m);
        assert!(others.clone().all(|i| !v.member_is_failed(i)), "{what}");
        assert_reads_right(&v, &data, &what);
    }
}

/// RAID 0+1 (a mirror of two stripes) with member 3 failed: member 0's errors are
/// corrected from member 2, but losing member 0 would leave no whole copy (the tree's
/// rule), so past the limit it is kept, marked so, and the volume serves on.
#[test]
fn a_member_the_volume_cannot_do_without_is_kept_past_the_limit() {
    let stripe = |a: usize| {
        let leaves = (a..a + 2).map(|i| Node::member(i, 0, MEMBER)).collect();
        Node::stripe(STRIP, leaves).expect("stripe")
    };
    let tree = Node::mirror(vec![stripe(0), stripe(2)]).expect("mirror");
    let (disks, v, data) = volume(tree, 4, LIMIT);
    v.fail_member(3, "test");
    disks[0].fail_range(FaultOps::READ, SPOT);
    let at = block_on_spot(&v, 0);
    for _ in 0..LIMIT + 3 {
        meet_error(&v, &data, at, 0);
    }
    assert_eq!(v.member_health()[0].corrected_read_errors, LIMIT + 3);
    assert_eq!(v.member_health()[0].state, MemberState::Healthy, "kept");
    assert!(v.member_health()[0].kept_past_read_limit, "marked kept");
    assert!(v.is_available());
    assert_reads_right(&v, &data, "raid 0+1");
}

/// RAID 1 ×2 with member 0 failed: member 1 is the last copy, its read errors are not
/// corrected (the client gets them) and not counted; it is never failed for them.
#[test]
fn the_last_copy_is_kept_and_its_uncorrected_errors_do_not_count() {
    let (disks, v, data) = volume(level_tree(Level::Raid1, 2, STRIP, 0, MEMBER), 2, LIMIT);
    v.fail_member(0, "test");
    disks[1].fail_range(FaultOps::READ, SPOT);
    let at = block_on_spot(&v, 1);
    for _ in 0..2 * LIMIT {
        assert!(
            block_on(v.read(at, BLOCK_BYTES)).is_err(),
            "nothing corrects it"
        );
    }
    assert!(v.member_health()[1].read_errors >= u64::from(2 * LIMIT));
    assert_eq!(v.member_health()[1].corrected_read_errors, 0);
    assert_eq!(v.member_health()[1].state, MemberState::Healthy);
    let other = block_on(v.read(0, BLOCK_BYTES)).expect("the rest serves");
    assert!(other[..] == data[..BLOCK_BYTES as usize]);
}

/// `max_read_errors = 0`: read errors never fail a member (RAID 5, RAID 1).
#[test]
fn limit_zero_never_fails_a_member_for_read_errors() {
    for (level, n, m) in [(Level::Raid5, 3, 1), (Level::Raid1, 2, 0)] {
        let (disks, v, data) = volume(level_tree(level, n, STRIP, 0, MEMBER), n, 0);
        disks[m].fail_range(FaultOps::READ, SPOT);
        let at = block_on_spot(&v, m);
        for _ in 0..3 * 20 {
            meet_error(&v, &data, at, m);
        }
        assert_eq!(v.member_health()[m].corrected_read_errors, 60, "{level}");
        assert_eq!(v.member_health()[m].state, MemberState::Healthy, "{level}");
        assert!(!v.member_health()[m].kept_past_read_limit, "{level}");
    }
}

/// Checksum mismatches are counted by `checksum_error_limit`, not here: RAID 1 and RAID 5
/// with checksums and `max_read_errors = 1`, blocks rotted on one member, each served right
/// from the redundancy: the member serves on, no read error counted toward the limit.
#[test]
fn checksum_mismatches_do_not_count_toward_the_read_error_limit() {
    for (level, n, m) in [(Level::Raid1, 2, 0), (Level::Raid5, 3, 1)] {
        let mems: Vec<Arc<MemoryMember>> = (0..n)
            .map(|i| {
                Arc::new(MemoryMember::new(
                    format!("m{i}"),
                    MEMBER + area_bytes(MEMBER),
                ))
            })
            .collect();
        let dyns = mems.iter().map(|d| d.clone() as Arc<dyn Member>).collect();
        let sums = ChecksumSetup::new("t", common::areas_after(MEMBER, n), true);
        let opts = VolumeOptions {
            checksums: Some(sums),
            ..options(1)
        };
        let tree = level_tree(level, n, STRIP, 0, MEMBER);
        let v = Volume::new(Geometry::from_tree(tree), dyns, opts).expect("volume");
        let data: Vec<u8> = (0..v.capacity()).map(|i| (i * 7 % 251) as u8).collect();
        block_on(v.write(0, Buf::copy_from(&data), false)).expect("fill");
        let blocks: Vec<u64> = (0..v.capacity())
            .step_by(BLOCK_BYTES as usize)
            .filter(|&at| {
                let map = v.geometry().map(at, BLOCK_BYTES).expect("map");
                map.data.iter().any(|e| e.member == m)
            })
            .take(4)
            .collect();
        for &at in &blocks {
            let map = v.geometry().map(at, BLOCK_BYTES).expect("map");
            let e = map.data.iter().find(|e| e.member == m).expect("on m");
            mems[m].poke(e.offset, &[0xEE; BLOCK_BYTES as usize]);
            for _ in 0..2 {
                let got = block_on(v.read(at, BLOCK_BYTES)).expect("served right");
                assert!(got[..] == data[at as usize..(at + BLOCK_BYTES) as usize]);
            }
        }
        let sums = v.options().checksums.as_ref().expect("checksums");
        let errors = sums
            .counters(m)
            .expect("counters")
            .errors
            .load(std::sync::atomic::Ordering::Relaxed);
        assert!(errors >= 4, "{level}: the rot was found ({errors})");
        assert_eq!(v.member_health()[m].corrected_read_errors, 0, "{level}");
        assert_eq!(v.member_health()[m].state, MemberState::Healthy, "{level}");
    }
}

/// A scrub's reads count too (md counts every read error of a member, a check's included):
/// RAID 5 ×3 and RAID 6 ×4 with one member dying in a spot of four chunks, `max_read_errors`
/// 3: the scrub rebuilds each of those chunks from parity (one corrected error per stripe)
/// and the fourth fails the member, saying why; the volume reads right without it. Before,
/// a scrub could meet any number of them and the member stayed "healthy".
#[test]
fn a_scrub_s_corrected_read_errors_count_toward_the_limit() {
    for (level, n, m) in [(Level::Raid5, 3, 1), (Level::Raid6, 4, 2)] {
        let what = format!("{level} ×{n}, member {m}");
        let (disks, v, data) = volume(level_tree(level, n, STRIP, 0, MEMBER), n, LIMIT);
        disks[m].fail_range(FaultOps::READ, SPOT);
        let ctl = nbraid_core::ScrubControl::new(false, 0);
        let report = block_on(v.scrub(&ctl)).expect("scrub");
        assert!(
            report.unreadable >= u64::from(LIMIT + 1),
            "{what}: {report:?}"
        );
        let health = &v.member_health()[m];
        assert_eq!(health.state, MemberState::Failed, "{what}: {health:?}");
        let f = health.failure.clone().expect("failed");
        assert_eq!(f.why, format!("{} read errors (limit {LIMIT})", LIMIT + 1));
        assert_reads_right(&v, &data, &what);
    }
}

/// Mirrors too (RAID 1 ×2, RAID 10 ×4): a scrub that rewrites a copy's unreadable blocks
/// from the other copy counts that copy's read error (once per member and range), and
/// scrubs meeting the dying spot again fail the member past the limit.
#[test]
fn a_mirror_scrub_s_corrected_read_errors_count_toward_the_limit() {
    for (level, n, m) in [(Level::Raid1, 2, 0), (Level::Raid10, 4, 3)] {
        let what = format!("{level} ×{n}, member {m}");
        let (disks, v, data) = volume(level_tree(level, n, STRIP, 0, MEMBER), n, LIMIT);
        disks[m].fail_range(FaultOps::READ, SPOT);
        let mut scrubs = 0;
        while v.member_health()[m].state != MemberState::Failed {
            scrubs += 1;
            assert!(scrubs <= LIMIT + 1, "{what}: {:?}", v.member_health()[m]);
            let ctl = nbraid_core::ScrubControl::new(false, 0);
            let report = block_on(v.scrub(&ctl)).expect("scrub");
            assert!(report.unreadable > 0, "{what}: {report:?}");
            assert!(v.member_health()[m].corrected_read_errors > 0, "{what}");
        }
        let f = v.member_health()[m].failure.clone().expect("failed");
        assert_eq!(f.why, format!("{} read errors (limit {LIMIT})", LIMIT + 1));
        assert_reads_right(&v, &data, &what);
    }
}
