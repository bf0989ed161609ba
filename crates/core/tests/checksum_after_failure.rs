//! Per-block checksums after a member failed: the failed member's record froze dirty (it
//! failed with writes since the last clean point) and stays so, since a failed member is
//! never written again. A clean shutdown of the others must still open clean — every entry
//! trusted — at every later start: a rotten block on a surviving member is found by its
//! checksum and served from redundancy. (Counting the frozen record once made every open
//! unclean: the others' entries were distrusted and blanked, and the rotten block was served.)

mod common;

use common::arrays::{create_first, open_every};
use common::{KIB, MIB};
use futures::executor::block_on;
use nbraid_core::checksum::BLOCK_BYTES;
use nbraid_core::metadata::{Array, ArrayOptions, METADATA_AREA_BYTES};
use nbraid_core::{Buf, CacheMode, MemoryMember, VolumeOptions};
use nbraid_layout::{Level, Node};
use std::sync::atomic::Ordering;
use std::sync::Arc;

const REGION: u64 = 2 * MIB;
const RESERVE: u64 = MIB;
const START: u64 = METADATA_AREA_BYTES + RESERVE;

fn opts() -> ArrayOptions {
    ArrayOptions {
        volume: VolumeOptions {
            cache: CacheMode::WriteThrough,
            read_policy: nbraid_core::ReadPolicy::RoundRobin,
            ..VolumeOptions::default()
        },
        bitmap_chunk_bytes: Some(256 * KIB),
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

/// `level` over `n` members: written, member `failed` failed by the operator, written
/// again, shut down cleanly; then `restarts` clean restarts; then a block of member `rotten`
/// rots (its first block of each of its first strips) and the whole volume is read.
fn run(level: Level, n: usize, failed: usize, rotten: usize, restarts: usize) {
    let what = format!("{level:?} ×{n}, member {failed} failed, {rotten} rotten");
    let strip = 64 * KIB;
    let tree: Node = common::level_tree(level, n, strip, START, REGION);
    let disks: Vec<Arc<MemoryMember>> = (0..n)
        .map(|i| Arc::new(MemoryMember::new(format!("d{i}"), START + REGION)))
        .collect();
    let a = create_first(&tree, &disks, opts(), true).expect("create");
    let first = pattern(1, a.volume().capacity());
    block_on(a.write(0, Buf::copy_from(&first), false)).expect("write");
    // Failed with writes since the last clean point: its record stays dirty for good.
    a.volume().fail_member(failed, "test");
    let data = pattern(2, a.volume().capacity());
    block_on(async {
        a.write(0, Buf::copy_from(&data), false).await?;
        a.flush().await?;
        a.mark_clean().await.map(|_| ())
    })
    .expect("write, flush, clean");
    drop(a);
    for _ in 0..restarts {
        let (a, report) = open_every(&tree, &disks, opts()).expect("open");
        assert!(report.was_clean, "{what}: {report:?}");
        block_on(a.mark_clean()).expect("clean");
    }
    for k in 0..4 {
        let at = START + k * strip;
        disks[rotten].poke(at, &vec![0xa5; BLOCK_BYTES as usize]);
    }
    let (a, _) = open_every(&tree, &disks, opts()).expect("open");
    assert!(
        (a.volume().options().checksums.as_ref()).is_some_and(|s| s.opened_clean()),
        "{what}: the others shut down cleanly: every entry trusted"
    );
    for pass in 0..4 {
        let back = block_on(a.read(0, a.volume().capacity())).expect("read");
        if let Some(at) = back.iter().zip(&data).position(|(x, y)| x != y) {
            panic!("{what}: pass {pass}: byte {at} is not what was written");
        }
    }
    assert!(errors(&a) >= 1, "{what}: the rotten blocks were found");
}

#[test]
fn a_failed_members_dirty_record_leaves_the_others_checksums_trusted() {
    run(Level::Raid1, 3, 1, 0, 1);
    run(Level::Raid1, 3, 0, 2, 3);
    run(Level::Raid6, 5, 1, 0, 1);
    run(Level::Raid10, 4, 1, 2, 2);
}
