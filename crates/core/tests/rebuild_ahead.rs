//! A rebuild that starts again for a second role (a spare took another failed role while
//! the first was rebuilt or replaced) sweeps once from the lowest position, and the role
//! already ahead is not written again below where it had come: its bytes there are current
//! (it took every write since it joined). It once was: the new pass copied every target from
//! the lowest start, rewriting the first role's range (on big disks, hours and wear); a
//! replacement was copied again from 0. Both roles complete at the sweep's end, and every
//! view of the members reads what was written, writes going on throughout. RAID 6, a
//! three-way RAID 1, RAID 10 and RAID 5 over pairs.

mod common;

use common::arrays::{apply, closed_and_every_view_reads, create, load, Model};
use common::{level_tree, raid5_of_pairs, Counting, KIB, MIB};
use futures::executor::block_on;
use nbraid_core::metadata::{ArrayOptions, MemberMeta, METADATA_AREA_BYTES};
use nbraid_core::{CacheMode, Member, MemoryMember, PassControl, PassState, VolumeOptions};
use nbraid_layout::{Level, Node};
use parking_lot::Mutex;
use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

const REGION: u64 = 8 * MIB;
const MEMBER_BYTES: u64 = METADATA_AREA_BYTES + REGION;
const STRIP: u64 = 64 * KIB;

/// The rebuild's windows: 1 MiB, so each window writes at least 320 KiB to a member (RAID 6
/// of five: 960 KiB, a third per member) in one write.
const WINDOW: u64 = MIB;

/// Client writes are at most 16 blocks (64 KiB): on a member, no more than two chunks.
const CLIENT_BLOCKS_MAX: u64 = 16;

/// A member write at least this long is a rebuild window's (no client write is).
const REBUILD_WRITE_MIN_BYTES: u64 = 256 * KIB;

fn opts() -> ArrayOptions {
    ArrayOptions {
        volume: VolumeOptions {
            // Client writes reach the members as they are sent, never merged by a destage.
            cache: CacheMode::WriteThrough,
            cache_max_age: None,
            ..VolumeOptions::default()
        },
        bitmap_chunk_bytes: Some(256 * KIB),
        bitmap_clear_delay: Duration::ZERO,
        ..ArrayOptions::default()
    }
}

/// How the first role's new member joins.
#[derive(Clone, Copy)]
enum Joins {
    /// Into the role, its member failed.
    Rebuilt,
    /// As the replacement of its member, which goes on serving (`nbraid replace`).
    Replacing,
}

/// Role `ahead` is being rebuilt onto a new member (or replaced by it); half-way, role
/// `second` fails and a new member takes it, so the pass starts again. From then on, no
/// rebuild window writes `ahead`'s new member below where it had come.
fn ahead_role_is_not_written_again(
    what: &str,
    tree: Node,
    (ahead, joins): (usize, Joins),
    second: usize,
) {
    let n = tree.member_count();
    let disks: Vec<Arc<MemoryMember>> = (0..n)
        .map(|i| Arc::new(MemoryMember::new(format!("d{i}"), MEMBER_BYTES)))
        .collect();
    let a = create(&tree, &disks, opts());
    a.set_rebuild_window_bytes(WINDOW);
    let cap = a.volume().capacity();
    let model = RefCell::new(Model::zeroed(&a, 11));
    let first_writes = model.borrow_mut().writes(200, CLIENT_BLOCKS_MAX);
    block_on(apply(&a, first_writes));

    let first = Arc::new(Counting::new("first", MEMBER_BYTES));
    match joins {
        Joins::Rebuilt => {
            a.volume().fail_member(ahead, "test: the first member dies");
            block_on(a.rebuild_onto(ahead, load(first.clone()))).expect("rebuild onto");
        }
        Joins::Replacing => block_on(a.replace(ahead, load(first.clone()))).expect("replace"),
    }
    let late = Arc::new(MemoryMember::new("late", MEMBER_BYTES));

    // Slow enough to put the second member in half-way: the pass sleeps to keep the rate.
    let ctl = PassControl::new(cap * 4);
    let finished = AtomicBool::new(false);
    // Where the first role had come when the pass started again, and how many writes its
    // member had taken by then.
    let restart: Mutex<Option<(u64, usize)>> = Mutex::new(None);
    let rebuild = async {
        let r = a.rebuild(&ctl).await;
        finished.store(true, Ordering::SeqCst);
        r
    };
    let second_fails = async {
        // (Never past the pass's end: a hung test says less than a failed one.)
        while ctl.position_bytes() < cap / 2 && !finished.load(Ordering::SeqCst) {
            nbraid_core::timer::sleep(Duration::from_millis(1)).await;
        }
        let before = ctl.position_bytes();
        a.volume().fail_member(second, "test: a second member dies");
        let late_meta = MemberMeta::load(late.clone() as Arc<dyn Member>).await;
        a.rebuild_onto(second, late_meta).await.expect("second");
        // The new pass starts lower: the old one stopped, its position kept for the role.
        while ctl.position_bytes() >= before && !finished.load(Ordering::SeqCst) {
            nbraid_core::timer::sleep(Duration::from_micros(200)).await;
        }
        let at = (a.rebuilding().into_iter())
            .find(|&(r, _)| r == ahead)
            .map(|(_, at)| at)
            .expect("the first role is still being rebuilt");
        *restart.lock() = Some((at, first.writes.lock().len()));
    };
    let clients = async {
        while !finished.load(Ordering::SeqCst) {
            let w = model.borrow_mut().writes(1, CLIENT_BLOCKS_MAX);
            apply(&a, w).await;
            nbraid_core::timer::sleep(Duration::from_millis(1)).await;
        }
    };
    let (r, (), ()) = block_on(futures::future::join3(rebuild, second_fails, clients));
    let r = r.expect("rebuild");
    assert_eq!(r.state, PassState::Done, "{what}: {r:?}");
    let mut completed = r.completed.clone();
    completed.sort_unstable();
    let mut want = vec![ahead, second];
    want.sort_unstable();
    assert_eq!(completed, want, "{what}: both roles complete at the end");

    let (at, mark) = restart.lock().expect("the pass started again");
    assert!(
        at >= cap / 4,
        "{what}: the first role had come to {at} of {cap}"
    );
    // The first member's bytes of volume position `at`.
    let below = METADATA_AREA_BYTES + at / (cap / REGION);
    let since: Vec<(u64, u64)> = first.writes.lock()[mark..]
        .iter()
        .copied()
        // (A replacement's checksum area is copied into its metadata area at the swap.)
        .filter(|&(o, len)| len >= REBUILD_WRITE_MIN_BYTES && o >= METADATA_AREA_BYTES)
        .collect();
    assert!(
        since.iter().any(|&(o, _)| o >= below),
        "{what}: no rebuild write seen above member byte {below}: {since:?}"
    );
    let again: Vec<(u64, u64)> = since.into_iter().filter(|&(o, _)| o < below).collect();
    assert!(
        again.is_empty(),
        "{what}: the first role, current below volume byte {at} (member byte {below}), was written again there by the new pass: {} windows, first {:?}",
        again.len(),
        again.first()
    );

    let model = model.into_inner();
    let put: Vec<(usize, Arc<dyn Member>)> = vec![(ahead, first), (second, late)];
    closed_and_every_view_reads(a, (&tree, &disks), put, &model.bytes, what);
}

fn level(level: Level, n: usize) -> Node {
    level_tree(level, n, STRIP, METADATA_AREA_BYTES, REGION)
}

#[test]
fn raid6_does_not_rewrite_a_role_ahead_when_a_spare_takes_another() {
    ahead_role_is_not_written_again(
        "RAID 6 of 5",
        level(Level::Raid6, 5),
        (1, Joins::Rebuilt),
        3,
    );
}

#[test]
fn raid1_three_way_does_not_rewrite_a_copy_ahead() {
    ahead_role_is_not_written_again(
        "RAID 1 of 3",
        level(Level::Raid1, 3),
        (1, Joins::Rebuilt),
        2,
    );
}

#[test]
fn raid10_does_not_rewrite_a_role_ahead() {
    ahead_role_is_not_written_again(
        "RAID 10 of 4",
        level(Level::Raid10, 4),
        (1, Joins::Rebuilt),
        3,
    );
}

/// Nested: the pair of the role ahead is read (its other copy is current), and the pair
/// leaves the copy ahead out; the new member is in another pair.
#[test]
fn raid5_of_pairs_does_not_rewrite_a_copy_ahead() {
    let tree = raid5_of_pairs(STRIP, METADATA_AREA_BYTES, REGION);
    ahead_role_is_not_written_again("RAID 5 of pairs", tree, (1, Joins::Rebuilt), 4);
}

/// A replacement half-way when another role fails: the new pass leaves it out below where it
/// had come (it takes every write, like a rebuilding member), and it swaps in at the end.
#[test]
fn raid6_does_not_recopy_a_replacement_ahead() {
    let tree = level(Level::Raid6, 5);
    ahead_role_is_not_written_again("RAID 6 of 5, replacing", tree, (1, Joins::Replacing), 3);
}

#[test]
fn raid1_three_way_does_not_recopy_a_replacement_ahead() {
    let tree = level(Level::Raid1, 3);
    ahead_role_is_not_written_again("RAID 1 of 3, replacing", tree, (1, Joins::Replacing), 2);
}

#[test]
fn raid5_of_pairs_does_not_recopy_a_replacement_ahead() {
    let tree = raid5_of_pairs(STRIP, METADATA_AREA_BYTES, REGION);
    ahead_role_is_not_written_again("RAID 5 of pairs, replacing", tree, (1, Joins::Replacing), 4);
}
