//! TRIM and WRITE_ZEROES of any size cost bounded member operations: adjacent strips of one
//! member become one operation (b4fc526 issued one per strip: a 4 GiB TRIM on RAID 10 was
//! 65,536 concurrent fallocates). A member that refuses trims gets zeroes written instead.

mod common;

use common::{named, KIB, MIB};
use futures::executor::block_on;
use futures::future::BoxFuture;
use futures::FutureExt;
use nbraid_core::{
    Buf, CacheMode, Member, MemberError, MemberOp, MemberResult, MemoryMember, Volume,
    VolumeOptions,
};
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

/// A member without discard: every trim answers an error, all else works.
struct RefusesTrim {
    inner: MemoryMember,
}

impl Member for RefusesTrim {
    fn trim(&self, offset: u64, len: u64) -> BoxFuture<'_, MemberResult<()>> {
        let e = std::io::Error::from_raw_os_error(libc::EOPNOTSUPP);
        let e = MemberError::new(self.name(), MemberOp::Trim, offset, len, e);
        async move { Err(e) }.boxed()
    }
    common::pass_through!(inner; name len read write flush write_zeroes counters);
}

/// A refused trim fails no member (it said nothing of the disk's health): the range is
/// zeroed instead, on every level, and reads back as zeroes.
#[test]
fn a_member_refusing_trims_gets_zeroes_and_is_not_failed() {
    for (level, n) in [
        (Level::Raid1, 2),
        (Level::Raid5, 4),
        (Level::Raid6, 5),
        (Level::Raid10, 4),
        (Level::Raid0, 2),
    ] {
        let mems: Vec<Arc<dyn Member>> = (0..n)
            .map(|i| {
                Arc::new(RefusesTrim {
                    inner: MemoryMember::new(format!("mem{i}"), 4 * MIB),
                }) as Arc<dyn Member>
            })
            .collect();
        let g = named(level, n, None, 64 * KIB, 4 * MIB);
        let v = Volume::new(g, mems, VolumeOptions::default()).expect("volume");
        let len = v.capacity();
        block_on(v.write(0, Buf::copy_from(&vec![0x5a; len as usize]), false)).expect("fill");
        block_on(v.trim(256 * KIB, MIB)).expect("trim");
        assert!(
            (0..n).all(|i| !v.member_is_failed(i)),
            "{level:?}: a refused trim failed a member"
        );
        let got = block_on(v.read(0, len)).expect("read");
        let zeroed = 256 * KIB as usize..(256 * KIB + MIB) as usize;
        assert!(got[zeroed.clone()].iter().all(|&b| b == 0), "{level:?}");
        assert!(got[..zeroed.start].iter().all(|&b| b == 0x5a), "{level:?}");
        assert!(got[zeroed.end..].iter().all(|&b| b == 0x5a), "{level:?}");
    }
}
