//! Costs that must not grow with what they should not: the stripe cache stays within its bound
//! in pinned memory even when destaging fails, and availability is a property of the tree and
//! the failed set, not a walk over the capacity.

mod common;

use common::{named, KIB, MIB};
use futures::executor::block_on;
use futures::future::BoxFuture;
use futures::FutureExt;
use nbraid_core::{
    Buf, CacheMode, Member, MemberResult, MemoryMember, SharedBuf, Volume, VolumeOptions,
};
use nbraid_layout::Level;
use nbraid_sim::Faulty;
use std::sync::Arc;

const TIB: u64 = 1 << 40;

fn write_back(bytes: u64) -> VolumeOptions {
    VolumeOptions {
        cache: CacheMode::WriteBack { bytes },
        cache_max_age: None,
        ..VolumeOptions::default()
    }
}

/// A few KiB cached out of a 32 MiB request must not pin the request's buffer (b4fc526 kept
/// a view of the whole writer's buffer, outside the bound).
#[test]
fn cached_slice_does_not_pin_the_writers_buffer() {
    let mems: Vec<Arc<dyn Member>> = (0..4)
        .map(|i| Arc::new(MemoryMember::new(format!("m{i}"), 64 * MIB)) as Arc<dyn Member>)
        .collect();
    let g = named(Level::Raid5, 4, None, 64 * KIB, 64 * MIB);
    let v = Volume::new(g, mems, write_back(4 * MIB)).expect("volume");
    // 32 MiB - 4 KiB from a stripe boundary: whole stripes go to the members, the 188 KiB
    // tail of the last stripe is cached.
    let len = 32 * MIB - 4 * KIB;
    block_on(v.write(0, Buf::zeroed(len as usize), false)).expect("write");
    let u = v.cache_usage();
    assert!(u.dirty_bytes > 0, "the partial stripe is cached: {u:?}");
    assert!(u.pinned_bytes <= u.bound_bytes, "{u:?}");
    assert!(u.pinned_bytes < 2 * MIB, "a 188 KiB tail pins {u:?}");
}

/// RAID 50 with one span lost beyond tolerance: destaging that span can never succeed. The
/// cache must not keep acknowledging writes it cannot land (b4fc526 grew without bound).
#[test]
fn cache_stays_bounded_when_destaging_fails() {
    let faulty: Vec<Arc<Faulty<MemoryMember>>> = (0..6)
        .map(|i| {
            Arc::new(Faulty::new(
                MemoryMember::new(format!("m{i}"), 16 * MIB),
                i as u64,
            ))
        })
        .collect();
    let mems = faulty
        .iter()
        .map(|f| f.clone() as Arc<dyn Member>)
        .collect();
    let g = named(Level::Raid50, 6, Some(2), 4 * KIB, 16 * MIB);
    let bound = 64 * KIB;
    let v = Volume::new(g, mems, write_back(bound)).expect("volume");
    // Members 0 and 1 are in the first span: two losses of a RAID 5 span.
    faulty[0].kill();
    faulty[1].kill();
    let mut acknowledged = 0u64;
    let mut failed = 0u64;
    // 4 KiB writes over the whole first megabytes: partial stripes of both spans.
    for i in 0..512u64 {
        match block_on(v.write(i * 8 * KIB, Buf::zeroed(4096), false)) {
            Ok(_) => acknowledged += 1,
            Err(_) => failed += 1,
        }
        let u = v.cache_usage();
        assert!(u.pinned_bytes <= u.bound_bytes, "after write {i}: {u:?}");
    }
    assert!(
        failed > 0,
        "writes the cache cannot land must fail, not pile up"
    );
    assert!(acknowledged > 0, "the healthy span still takes writes");
    assert!(
        block_on(v.flush()).is_err(),
        "the lost span's data cannot be flushed"
    );
}

/// Availability on an 8 TiB RAID 10 with 64 KiB strips: b4fc526 split the whole capacity
/// into ~128 million pieces to answer it (out of memory, or seconds inside a FLUSH).
#[test]
fn availability_is_computed_from_the_tree() {
    let member_len = 4 * TIB;
    let mems: Vec<Arc<dyn Member>> = (0..4)
        .map(|i| {
            Arc::new(Sized(format!("m{i}"), member_len, Default::default())) as Arc<dyn Member>
        })
        .collect();
    let g = named(Level::Raid10, 4, None, 64 * KIB, member_len);
    let v = Volume::new(g, mems, VolumeOptions::default()).expect("volume");
    assert!(v.is_available());
    v.fail_member(0, "test");
    assert!(v.is_available(), "one copy of each mirror is left");
    v.fail_member(2, "test");
    assert!(v.is_available(), "one member lost in each mirror");
    block_on(v.flush()).expect("a flush of a degraded but complete volume succeeds");
    v.fail_member(1, "test");
    assert!(!v.is_available(), "the first mirror has lost both copies");
    let e = block_on(v.flush()).expect_err("data is lost");
    assert!(
        e.to_string().contains("more than the volume tolerates"),
        "{e}"
    );
}

/// A member of any size that stores nothing (nothing here reads or writes it).
struct Sized(String, u64, nbraid_core::MemberCounters);

impl Member for Sized {
    fn name(&self) -> &str {
        &self.0
    }
    fn len(&self) -> u64 {
        self.1
    }
    fn read(&self, _: u64, buf: Buf) -> BoxFuture<'_, MemberResult<Buf>> {
        futures::future::ready(Ok(buf)).boxed()
    }
    fn write(&self, _: u64, _: SharedBuf, _: bool) -> BoxFuture<'_, MemberResult<()>> {
        futures::future::ready(Ok(())).boxed()
    }
    fn flush(&self) -> BoxFuture<'_, MemberResult<()>> {
        futures::future::ready(Ok(())).boxed()
    }
    fn trim(&self, _: u64, _: u64) -> BoxFuture<'_, MemberResult<()>> {
        futures::future::ready(Ok(())).boxed()
    }
    fn write_zeroes(&self, _: u64, _: u64) -> BoxFuture<'_, MemberResult<()>> {
        futures::future::ready(Ok(())).boxed()
    }
    fn counters(&self) -> &nbraid_core::MemberCounters {
        &self.2
    }
}
