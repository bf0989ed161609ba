//! The RAID 5/6 write hole, exactly: a partial-stripe write whose parity write is lost in a
//! crash (the data write reached its member), then a member that was *not* being written is
//! lost before the restart — a dirty degraded start. With the partial-parity log the chunk
//! nobody wrote reads back exactly; without it, it does not (so the test shows the hole).

mod common;

use common::{KIB, MIB};
use futures::executor::block_on;
use futures::future::BoxFuture;
use futures::FutureExt;
use nbraid_core::metadata::{Array, ArrayOptions, MemberMeta, METADATA_AREA_BYTES};
use nbraid_core::{
    Buf, CacheMode, Member, MemberCounters, MemberResult, MemoryMember, SharedBuf, VolumeOptions,
};
use nbraid_layout::{Level, Node, ParityLayout, Region, Shape};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

const REGION: u64 = 2 * MIB;
const MEMBER_BYTES: u64 = METADATA_AREA_BYTES + REGION;
const STRIP: u64 = 64 * KIB;

/// A member whose non-FUA writes vanish while `lose` is set: what a power loss does to
/// writes still in the drive's volatile cache (FUA writes — the log — are durable).
struct Lossy {
    inner: MemoryMember,
    lose: AtomicBool,
}

impl Member for Lossy {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn read(&self, offset: u64, buf: Buf) -> BoxFuture<'_, MemberResult<Buf>> {
        self.inner.read(offset, buf)
    }
    fn write(&self, offset: u64, data: SharedBuf, fua: bool) -> BoxFuture<'_, MemberResult<()>> {
        if self.lose.load(Ordering::SeqCst) && !fua {
            return async { Ok(()) }.boxed();
        }
        self.inner.write(offset, data, fua)
    }
    fn flush(&self) -> BoxFuture<'_, MemberResult<()>> {
        self.inner.flush()
    }
    fn trim(&self, offset: u64, len: u64) -> BoxFuture<'_, MemberResult<()>> {
        self.inner.trim(offset, len)
    }
    fn write_zeroes(&self, offset: u64, len: u64) -> BoxFuture<'_, MemberResult<()>> {
        self.inner.write_zeroes(offset, len)
    }
    fn counters(&self) -> &MemberCounters {
        self.inner.counters()
    }
}

fn tree(level: Level, n: usize) -> Node {
    let shape = Shape::new(level, n, None, STRIP, ParityLayout::LeftSymmetric).expect("shape");
    let regions = vec![
        Region {
            start: METADATA_AREA_BYTES,
            len: REGION
        };
        n
    ];
    shape.build(&regions).expect("tree")
}

fn opts(ppl: bool) -> ArrayOptions {
    ArrayOptions {
        volume: VolumeOptions {
            cache: CacheMode::WriteThrough,
            ..VolumeOptions::default()
        },
        bitmap_chunk_bytes: Some(256 * KIB),
        ppl,
        ..ArrayOptions::default()
    }
}

fn pattern(seed: u64, len: usize) -> Buf {
    let mut b = Buf::new(len);
    for (i, x) in b.iter_mut().enumerate() {
        *x = (seed as usize * 131 + i * 7 + i / 4096) as u8;
    }
    b
}

/// Writes the whole volume, flushes, then writes 4 KiB into data chunk 0 of stripe 3 with
/// the parity members' writes lost, "crashes" (the array dropped with its records dirty),
/// deletes the members of data chunks `lost` (never written by that write) and reopens.
/// Returns whether every byte of the volume reads back as the writes left it.
fn scenario(level: Level, n: usize, lost: &[usize], ppl: bool) -> bool {
    let disks: Vec<Arc<Lossy>> = (0..n)
        .map(|i| {
            Arc::new(Lossy {
                inner: MemoryMember::new(format!("disk{i}"), MEMBER_BYTES),
                lose: AtomicBool::new(false),
            })
        })
        .collect();
    let metas = |skip: &[usize]| -> Vec<Option<Arc<MemberMeta>>> {
        disks
            .iter()
            .enumerate()
            .map(|(i, d)| {
                (!skip.contains(&i))
                    .then(|| block_on(MemberMeta::load(d.clone() as Arc<dyn Member>)))
            })
            .collect()
    };
    let t = tree(level, n);
    let a = block_on(Array::create(
        "vol",
        t.clone(),
        metas(&[]).into_iter().flatten().collect(),
        opts(ppl),
        true,
        &|_, _| {},
    ))
    .expect("create")
    .0;
    let capacity = a.volume().capacity();
    let mut image = pattern(1, capacity as usize).to_vec();
    block_on(a.write(0, pattern(1, capacity as usize), false)).expect("fill");
    block_on(a.flush()).expect("flush");

    let (g, _) = nbraid_core::ppl::parity_groups(&t).remove(0);
    let stripe = 3u64;
    let roles = g.roles(stripe);
    let width = g.stripe_width();
    for c in std::iter::once(roles.p).chain(roles.q) {
        disks[c].lose.store(true, Ordering::SeqCst);
    }
    // 4 KiB into data chunk 0, 8 KiB in (a read-modify-write).
    let at = stripe * width + 8 * KIB;
    let new = pattern(9, 4096);
    image[at as usize..at as usize + 4096].copy_from_slice(&new);
    block_on(a.write(at, new, false)).expect("partial write");
    drop(a); // power lost: the parity write never reached its member

    let mut lost_members: Vec<usize> = lost.iter().map(|&i| roles.data[i]).collect();
    lost_members.sort_unstable();
    for d in &disks {
        d.lose.store(false, Ordering::SeqCst);
    }
    let (a, report) = block_on(Array::open(
        "vol",
        &t,
        metas(&lost_members),
        opts(ppl),
        &|_, _| {},
    ))
    .expect("a dirty degraded array starts");
    assert!(
        !report.was_clean && report.absent_roles == lost_members,
        "{report:?}"
    );
    if ppl {
        assert_eq!(report.ppl.entries, 1, "{report:?}");
    }
    let got = block_on(a.read(0, capacity)).expect("read back");
    got[..] == image[..]
}

#[test]
fn raid5_dirty_degraded_start_rebuilds_the_unwritten_chunk_exactly() {
    assert!(scenario(Level::Raid5, 4, &[1], true));
    assert!(scenario(Level::Raid5, 4, &[2], true));
    // Six members: the write is a read-modify-write (the partial parity from the old P).
    assert!(scenario(Level::Raid5, 6, &[3], true));
}

#[test]
fn raid6_dirty_degraded_start_rebuilds_two_unwritten_chunks_exactly() {
    assert!(scenario(Level::Raid6, 6, &[1], true));
    assert!(scenario(Level::Raid6, 6, &[1, 3], true));
}

#[test]
fn without_the_log_the_same_crash_corrupts_the_unwritten_chunk() {
    assert!(!scenario(Level::Raid5, 4, &[1], false));
    assert!(!scenario(Level::Raid6, 6, &[1, 3], false));
}
