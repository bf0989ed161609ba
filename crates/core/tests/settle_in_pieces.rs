//! A run of whole stripes over more log entries than one batch takes — a zeroing, and a
//! write-back destage of whole stripes — settles the log a piece at a time and writes each
//! piece before settling the next: it ends, and every byte reads back as written. Logged a
//! batch a stripe with every entry held until the run's end, such a run waited forever for
//! ring room only its own end would free.

mod common;

use common::{KIB, MIB};
use futures::executor::block_on;
use nbraid_core::metadata::{Array, ArrayOptions, MemberMeta, METADATA_AREA_BYTES};
use nbraid_core::{Buf, CacheMode, Member, MemoryMember, VolumeOptions};
use nbraid_layout::{Level, Node, ParityLayout, Region, Shape};
use std::sync::Arc;
use std::time::Duration;

/// 4 KiB strips: one 4 KiB band a stripe, one log entry a stripe a write touches.
const STRIP: u64 = 4 * KIB;
/// The log's reserve before the region: a 64 KiB ring per member, half of which (one round's
/// batch) takes ~800 entries without partial parity (40 bytes each).
const LOG_RESERVE: u64 = 64 * KIB;
const REGION: u64 = 16 * MIB;
const MEMBERS: usize = 3;
/// Stripes written once each before the run, all with their P on one member: more entries to
/// settle than one round takes.
const WRITTEN: u64 = 1200;

fn tree() -> Node {
    let shape = Shape::new(
        Level::Raid5,
        MEMBERS,
        None,
        STRIP,
        ParityLayout::LeftSymmetric,
    )
    .expect("shape");
    let start = METADATA_AREA_BYTES + LOG_RESERVE;
    let regions = vec![Region { start, len: REGION }; MEMBERS];
    shape.build(&regions).expect("tree")
}

/// A RAID 5 volume with the log in its reserve, created over fresh memory members.
fn create(cache: CacheMode) -> Array {
    let metas = (0..MEMBERS)
        .map(|i| {
            let m = MemoryMember::new(
                format!("disk{i}"),
                METADATA_AREA_BYTES + LOG_RESERVE + REGION,
            );
            block_on(MemberMeta::load(Arc::new(m) as Arc<dyn Member>))
        })
        .collect();
    let o = ArrayOptions {
        ppl_area_before_region_bytes: Some(LOG_RESERVE),
        volume: VolumeOptions {
            cache,
            cache_max_age: None,
            ..VolumeOptions::default()
        },
        ppl: true,
        ..ArrayOptions::default()
    };
    block_on(Array::create("vol", tree(), metas, o, true, &|_, _| {}))
        .expect("create")
        .0
}

fn pattern(seed: u64, len: usize) -> Buf {
    let mut b = Buf::new(len);
    for (i, x) in b.iter_mut().enumerate() {
        *x = (seed as usize * 131 + i * 7 + i / 4096) as u8;
    }
    b
}

/// One sector into data chunk 0 of `WRITTEN` stripes whose P is on member 0 (a
/// read-modify-write, logged), flushed: each stripe's band settled, its entry still one a
/// ring may replay (the other members' rings took no batch, so the log's floor stays low).
/// Returns the volume's bytes as written.
fn write_one_ring(a: &Array) -> Vec<u8> {
    let (g, _) = nbraid_core::ppl::parity_groups(&tree()).remove(0);
    let capacity = a.volume().capacity();
    let mut image = vec![0u8; capacity as usize];
    let stripes = (0..).filter(|&s| g.roles(s).p == 0).take(WRITTEN as usize);
    for (i, s) in stripes.enumerate() {
        let at = s * g.stripe_width(); // data chunk 0 comes first in the stripe
        let data = pattern(i as u64 + 2, 512);
        image[at as usize..at as usize + 512].copy_from_slice(&data);
        block_on(a.write(at, data, false)).expect("one sector");
    }
    block_on(a.flush()).expect("flush");
    image
}

/// Held by each test while it runs: the log's counters are the process's, and each test
/// checks what its own run settled.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn alone() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs `f` on its own thread; fails the test if it has not ended within a minute (a hang).
fn within_a_minute<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("{what} did not end within a minute: a hang"))
}

#[test]
fn zeroing_a_volume_over_a_ring_full_of_replayable_entries_ends() {
    let _alone = alone();
    let a = Arc::new(create(CacheMode::WriteThrough));
    let image = write_one_ring(&a);
    assert!(image.iter().any(|&b| b != 0));
    let capacity = a.volume().capacity();
    let before = nbraid_core::ppl::stats();
    let zeroing = a.clone();
    within_a_minute("zeroing the whole volume", move || {
        block_on(zeroing.write_zeroes(0, capacity, false)).expect("zeroed")
    });
    let settled = nbraid_core::ppl::stats().since(&before).entries;
    assert!(
        settled >= WRITTEN,
        "the zeroing settled {settled} entries: the run was not one the log had to settle"
    );
    let got = block_on(a.read(0, capacity)).expect("read back");
    assert!(got.iter().all(|&b| b == 0), "every byte zero");
}

#[test]
fn a_write_back_destage_of_whole_stripes_over_a_ring_full_of_replayable_entries_ends() {
    let _alone = alone();
    let a = Arc::new(create(CacheMode::WriteBack { bytes: 64 * MIB }));
    write_one_ring(&a);
    let capacity = a.volume().capacity();
    let whole = pattern(99, capacity as usize);
    let want = whole.to_vec();
    let before = nbraid_core::ppl::stats();
    let writer = a.clone();
    within_a_minute("writing the whole volume and flushing it", move || {
        block_on(writer.write(0, whole, false)).expect("written");
        block_on(writer.flush()).expect("destaged");
    });
    let settled = nbraid_core::ppl::stats().since(&before).entries;
    assert!(
        settled >= WRITTEN,
        "the destage settled {settled} entries: not a run the log had to settle"
    );
    let got = block_on(a.read(0, capacity)).expect("read back");
    assert!(got[..] == want[..], "every byte as written");
}
