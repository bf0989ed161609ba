//! TRIM and WRITE_ZEROES of any size cost bounded member operations: adjacent strips of one
//! member become one operation (b4fc526 issued one per strip: a 4 GiB TRIM on RAID 10 was
//! 65,536 concurrent fallocates).

mod common;

use common::{named, KIB, MIB};
use futures::executor::block_on;
use nbraid_core::{CacheMode, Member, MemoryMember, Volume, VolumeOptions};
use nbraid_layout::Level;
use std::sync::Arc;

fn volume(level: Level, members: usize, member_len: u64) -> (Volume, Vec<Arc<MemoryMember>>) {
    let mems: Vec<Arc<MemoryMember>> = (0..members)
        .map(|i| Arc::new(MemoryMember::new(format!("mem{i}"), member_len)))
        .collect();
    let dyns = mems.iter().map(|m| m.clone() as Arc<dyn Member>).collect();
    let g = named(level, members, None, 4 * KIB, member_len);
    let opts = VolumeOptions {
        cache: CacheMode::WriteThrough,
        ..VolumeOptions::default()
    };
    (Volume::new(g, dyns, opts).expect("volume"), mems)
}

fn trims(mems: &[Arc<MemoryMember>]) -> Vec<u64> {
    mems.iter().map(|m| m.counters().snapshot().trims).collect()
}

#[test]
fn whole_volume_trim_is_one_operation_per_member() {
    for (level, n) in [
        (Level::Raid0, 4),
        (Level::Raid10, 4),
        (Level::Jbod, 3),
        (Level::Raid5, 4),
        (Level::Raid6, 5),
    ] {
        let (v, mems) = volume(level, n, 16 * MIB);
        block_on(v.trim(0, v.capacity())).expect("trim");
        block_on(v.write_zeroes(0, v.capacity(), false)).expect("write zeroes");
        for (i, t) in trims(&mems).into_iter().enumerate() {
            assert_eq!(
                t, 2,
                "{level:?}: member {i} got {t} zeroing operations for two whole-volume requests"
            );
        }
    }
}

#[test]
fn large_trim_works_in_bounded_windows() {
    // 4 × 96 MiB RAID 0 with 4 KiB strips: 98,304 strips; the old code issued one operation
    // per strip at once. Now: one per member per 64 MiB window.
    let (v, mems) = volume(Level::Raid0, 4, 96 * MIB);
    let cap = v.capacity();
    let windows = cap.div_ceil(nbraid_core::split::ZERO_WINDOW_BYTES);
    block_on(v.trim(0, cap)).expect("trim");
    for (i, t) in trims(&mems).into_iter().enumerate() {
        assert!(
            t <= windows,
            "member {i}: {t} operations for {windows} windows"
        );
    }
}
