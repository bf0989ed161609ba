//! Per-block checksums given back after an unclean shutdown. The start drops the entries of
//! every page group written in the run before the crash (they may lag their data); the pass
//! `Array::refill_checksums` covers exactly those groups again from the members' bytes once
//! the resync is done. Without it those blocks read unchecked until rewritten: a block that
//! rots there is served rotten (what these tests found before the pass existed).

mod common;

use common::arrays::{create_first, open_every};
use common::{KIB, MIB};
use futures::executor::block_on;
use nbraid_core::checksum::BLOCK_BYTES;
use nbraid_core::metadata::{Array, ArrayOptions, CleanMark, RefillControl, METADATA_AREA_BYTES};
use nbraid_core::{Buf, CacheMode, MemoryMember, PassRate, PassState, VolumeOptions};
use nbraid_layout::{Level, Node};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// 4 page groups of 2 MiB per region.
const REGION: u64 = 8 * MIB;
const RESERVE: u64 = MIB;
const START: u64 = METADATA_AREA_BYTES + RESERVE;
const STRIP: u64 = 64 * KIB;

type Disks = Vec<Arc<MemoryMember>>;

fn opts() -> ArrayOptions {
    ArrayOptions {
        volume: VolumeOptions {
            cache: CacheMode::WriteThrough,
            read_policy: nbraid_core::ReadPolicy::RoundRobin,
            ..VolumeOptions::default()
        },
        bitmap_chunk_bytes: Some(256 * KIB),
        // A flush clears the bits of what it covered: the start after a crash resyncs only
        // what was written since (not what the checksums dropped).
        bitmap_clear_delay: Duration::ZERO,
        checksum_area_before_region_bytes: Some(RESERVE),
        ..ArrayOptions::default()
    }
}

fn errors(a: &Array) -> u64 {
    let setup = a.volume().options().checksums.as_ref().expect("checksums");
    (0..a.volume().member_count())
        .filter_map(|i| setup.counters(i))
        .map(|c| c.errors.load(Ordering::Relaxed))
        .sum()
}

fn pattern(seed: u8, len: u64) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed ^ (i / 4096) as u8)
        .collect()
}

fn disks(n: usize) -> Disks {
    (0..n)
        .map(|i| Arc::new(MemoryMember::new(format!("d{i}"), START + REGION)))
        .collect()
}

/// The pass run to its end at full speed; its control.
fn refill(a: &Array) -> RefillControl {
    let ctl = RefillControl::with_rate(PassRate::default());
    let state = block_on(a.refill_checksums(&ctl)).expect("refill");
    assert_eq!(state, PassState::Done);
    ctl
}

/// Reads the whole volume `passes` times (a mirror's reads reach each copy) and compares.
fn reads_back(a: &Array, want: &[u8], what: &str) {
    for pass in 0..4 {
        let back = block_on(a.read(0, a.volume().capacity())).expect("read");
        if let Some(at) = back.iter().zip(want).position(|(x, y)| x != y) {
            panic!("{what}: pass {pass}: byte {at} is not what was written");
        }
    }
}

/// Rots the first block of each of member `m`'s first `strips` strips.
fn rot(disks: &Disks, m: usize, strips: u64) {
    for k in 0..strips {
        disks[m].poke(START + k * STRIP, &vec![0xa5; BLOCK_BYTES as usize]);
    }
}

/// `level` over `n` members: filled and flushed, then power lost (no clean shutdown); the
/// restart drops the entries of every group written and the pass gives them back; a block
/// written before the crash then rots on member 0 — found by its checksum and served right,
/// in this run and after a clean restart.
fn rotten_after_a_crash_is_found(level: Level, n: usize) {
    let what = format!("{level:?} ×{n}");
    let tree: Node = common::level_tree(level, n, STRIP, START, REGION);
    let disks = disks(n);
    let a = create_first(&tree, &disks, opts(), true).expect("create");
    let data = pattern(1, a.volume().capacity());
    block_on(async {
        a.write(0, Buf::copy_from(&data), false).await?;
        a.flush().await
    })
    .expect("write, flush");
    drop(a); // power lost
    let (a, report) = open_every(&tree, &disks, opts()).expect("open");
    assert!(!report.was_clean, "{what}");
    assert!(a.checksums_to_refill(), "{what}: entries were dropped");
    let ctl = refill(&a);
    rot(&disks, 0, 4);
    reads_back(&a, &data, &what);
    assert!(errors(&a) >= 1, "{what}: the rotten blocks were found");
    let r = ctl.report();
    assert!(r.filled_blocks > 0, "{what}: {r:?}");
    assert_eq!(
        (r.unchecked_blocks, r.skipped_bytes),
        (0, 0),
        "{what}: {r:?}"
    );
    // The entries given back are durable: a clean restart trusts them.
    assert!(block_on(a.mark_clean()).expect("clean").is_recorded());
    drop(a);
    rot(&disks, 0, 8);
    let (a, report) = open_every(&tree, &disks, opts()).expect("open");
    assert!(report.was_clean, "{what}");
    reads_back(&a, &data, &what);
    assert!(errors(&a) >= 1, "{what}: after a clean restart too");
}

#[test]
fn raid1_blocks_written_before_a_crash_get_their_checksums_back() {
    rotten_after_a_crash_is_found(Level::Raid1, 2);
}

#[test]
fn raid5_blocks_written_before_a_crash_get_their_checksums_back() {
    rotten_after_a_crash_is_found(Level::Raid5, 4);
}

/// A RAID 1 whose pass is cut: it covered its first window when the power goes (or the
/// volume is stopped: it is not recorded clean). The next start is unclean, drops the same
/// groups again and the pass covers them all.
fn cut_pass_is_redone(stop_cleanly: bool) {
    let tree: Node = common::level_tree(Level::Raid1, 2, STRIP, START, REGION);
    let disks = disks(2);
    let a = create_first(&tree, &disks, opts(), true).expect("create");
    let data = pattern(2, a.volume().capacity());
    block_on(a.write(0, Buf::copy_from(&data), false)).expect("write");
    drop(a); // power lost
    let (a, report) = open_every(&tree, &disks, opts()).expect("open");
    assert!(!report.was_clean);
    // 1 MiB/s: the first window goes at once, then the pass waits about a second.
    let ctl = RefillControl::with_rate(PassRate {
        limit_bytes_per_s: MIB,
        adaptive: false,
    });
    block_on(async {
        let pass = a.refill_checksums(&ctl);
        let cut = nbraid_core::timer::sleep(Duration::from_millis(300));
        futures::pin_mut!(pass);
        futures::future::select(pass, Box::pin(cut)).await;
    });
    let r = ctl.report();
    assert!(
        r.position_bytes > 0 && r.position_bytes < r.total_bytes,
        "cut mid-way: {r:?}"
    );
    if stop_cleanly {
        let mark = block_on(a.mark_clean()).expect("mark clean");
        assert_eq!(mark, CleanMark::ChecksumsPending);
    }
    drop(a);
    let (a, report) = open_every(&tree, &disks, opts()).expect("open");
    assert!(
        !report.was_clean,
        "the records stayed dirty while the pass ran"
    );
    let ctl = refill(&a);
    assert_eq!(ctl.report().unchecked_blocks, 0);
    // Past the first window of each member, where the cut pass had not been.
    for k in [0, 40, 100] {
        disks[1].poke(START + k * STRIP, &vec![0x5a; BLOCK_BYTES as usize]);
    }
    reads_back(&a, &data, "redone");
    assert!(errors(&a) >= 3, "every rotten block found: {}", errors(&a));
    assert!(block_on(a.mark_clean()).expect("clean").is_recorded());
}

#[test]
fn a_pass_cut_by_a_crash_is_redone_at_the_next_start() {
    cut_pass_is_redone(false);
}

#[test]
fn a_pass_cut_by_a_stop_is_redone_at_the_next_start() {
    cut_pass_is_redone(true);
}

/// Only the groups the crash dropped are covered: a group never written keeps "no
/// checksum" (a block rotting there reads as it is, unchecked), one written before the last
/// clean start keeps its entries (trusted, not dropped, not recomputed).
#[test]
fn only_the_dropped_groups_are_covered() {
    let tree: Node = common::level_tree(Level::Raid1, 2, STRIP, START, REGION);
    let disks = disks(2);
    let a = create_first(&tree, &disks, opts(), true).expect("create");
    let old = pattern(3, 256 * KIB);
    let old_at = 7 * MIB; // group 3
    block_on(a.write(old_at, Buf::copy_from(&old), false)).expect("write");
    assert!(block_on(a.mark_clean()).expect("clean").is_recorded());
    drop(a);
    let (a, report) = open_every(&tree, &disks, opts()).expect("open");
    assert!(report.was_clean);
    let new = pattern(4, MIB);
    block_on(a.write(0, Buf::copy_from(&new), false)).expect("write"); // group 0
    drop(a); // power lost
    let (a, _) = open_every(&tree, &disks, opts()).expect("open");
    let ctl = refill(&a);
    let r = ctl.report();
    let group_blocks = 2 * MIB / BLOCK_BYTES;
    assert_eq!(r.total_bytes, 2 * 2 * MIB, "group 0 of each member: {r:?}");
    // The open's resync wrote some of them (with their entries) on the second copy.
    assert!(
        (group_blocks..=2 * group_blocks).contains(&r.filled_blocks),
        "{r:?}"
    );
    // Group 2 was never written: no checksum, so its rot reads unchecked.
    let never = 5 * MIB;
    let junk = vec![0x3c; BLOCK_BYTES as usize];
    for d in &disks {
        d.poke(START + never, &junk);
    }
    let back = block_on(a.read(never, BLOCK_BYTES)).expect("read");
    assert_eq!(
        &back[..],
        &junk[..],
        "no entry was made for a group not dropped"
    );
    // Group 3's entries were kept: its rot is found.
    disks[0].poke(START + old_at, &vec![0x11; BLOCK_BYTES as usize]);
    let mut want = vec![0; a.volume().capacity() as usize];
    want[..MIB as usize].copy_from_slice(&new);
    want[old_at as usize..old_at as usize + old.len()].copy_from_slice(&old);
    want[never as usize..(never + BLOCK_BYTES) as usize].copy_from_slice(&junk);
    reads_back(&a, &want, "groups kept");
    assert!(errors(&a) >= 1, "the kept entry found the rot");
}

/// After an unclean start served at once (`open_background`), the pass waits for the
/// background resync before it covers anything.
#[test]
fn the_pass_waits_for_the_background_resync() {
    let tree: Node = common::level_tree(Level::Raid1, 2, STRIP, START, REGION);
    let disks = disks(2);
    let a = create_first(&tree, &disks, opts(), true).expect("create");
    let data = pattern(5, 2 * MIB);
    block_on(a.write(0, Buf::copy_from(&data), false)).expect("write");
    drop(a); // power lost
    let metas = common::arrays::metas(&disks)
        .into_iter()
        .map(Some)
        .collect();
    let opened = Array::open_background("vol", &tree, metas, opts(), &|_, _| {});
    let (a, _) = block_on(opened).expect("open");
    assert!(a.background_pending());
    let ctl = RefillControl::with_rate(PassRate::default());
    block_on(async {
        let pass = a.refill_checksums(&ctl);
        futures::pin_mut!(pass);
        assert!(futures::poll!(&mut pass).is_pending());
        nbraid_core::timer::sleep(Duration::from_millis(100)).await;
        assert!(futures::poll!(&mut pass).is_pending());
        let r = ctl.report();
        assert!(r.waiting_for_resync && r.position_bytes == 0, "{r:?}");
        assert!(r.total_bytes > 0, "the dropped groups are known: {r:?}");
        let resync = nbraid_core::PassControl::new(0);
        let state = a.background_resync(&resync).await.expect("resync");
        assert_eq!(state, PassState::Done);
        assert_eq!(pass.await.expect("refill"), PassState::Done);
    });
    assert!(!ctl.report().waiting_for_resync);
    rot(&disks, 0, 4);
    let mut want = vec![0; a.volume().capacity() as usize];
    want[..data.len()].copy_from_slice(&data);
    reads_back(&a, &want, "after the background resync");
    assert!(errors(&a) >= 1);
}
