//! Arrays that know themselves: the mdadm-style scenarios over memory members, each as a
//! test — create and assemble, a member missing, paths swapped, a stale member, a foreign
//! member, a changed geometry, a corrupted primary superblock, a restart after a crash that
//! resyncs only the dirty regions, and a recorded-failed member that stays failed.

mod common;

use common::{KIB, MIB};
use futures::executor::block_on;
use nbraid_core::metadata::{
    Array, ArrayError, ArrayOptions, AssembleError, MemberMeta, METADATA_AREA_BYTES, SLOT_BYTES,
};
use nbraid_core::{Buf, CacheMode, Member, MemoryMember, VolumeOptions};
use nbraid_layout::{Level, Node, ParityLayout, Region, Shape};
use std::sync::Arc;
use std::time::Duration;

const REGION: u64 = 4 * MIB;
const MEMBER_BYTES: u64 = METADATA_AREA_BYTES + REGION;
const CHUNK: u64 = 256 * KIB;

fn tree(level: Level, n: usize, strip: u64) -> Node {
    let shape = Shape::new(level, n, None, strip, ParityLayout::LeftSymmetric).expect("shape");
    let regions = vec![
        Region {
            start: METADATA_AREA_BYTES,
            len: REGION
        };
        n
    ];
    shape.build(&regions).expect("tree")
}

fn disks(n: usize) -> Vec<Arc<MemoryMember>> {
    (0..n)
        .map(|i| Arc::new(MemoryMember::new(format!("disk{i}"), MEMBER_BYTES)))
        .collect()
}

fn opts() -> ArrayOptions {
    ArrayOptions {
        volume: VolumeOptions {
            cache: CacheMode::WriteThrough,
            ..VolumeOptions::default()
        },
        bitmap_chunk_bytes: Some(CHUNK),
        ppl: true,
        // Bits clear at the first flush that covers their writes: the tests see exactly that.
        bitmap_clear_delay: Duration::ZERO,
        ..ArrayOptions::default()
    }
}

fn metas(disks: &[Arc<MemoryMember>], order: &[Option<usize>]) -> Vec<Option<Arc<MemberMeta>>> {
    order
        .iter()
        .map(|o| o.map(|i| block_on(MemberMeta::load(disks[i].clone() as Arc<dyn Member>))))
        .collect()
}

fn all(disks: &[Arc<MemoryMember>]) -> Vec<Option<usize>> {
    (0..disks.len()).map(Some).collect()
}

fn create(level: Level, disks: &[Arc<MemoryMember>], strip: u64) -> Array {
    let m = metas(disks, &all(disks)).into_iter().flatten().collect();
    block_on(Array::create(
        "vol",
        tree(level, disks.len(), strip),
        m,
        opts(),
        true,
        &|_, _| {},
    ))
    .expect("create")
    .0
}

fn open(
    level: Level,
    disks: &[Arc<MemoryMember>],
    order: &[Option<usize>],
    strip: u64,
) -> Result<(Array, nbraid_core::metadata::OpenReport), ArrayError> {
    block_on(Array::open(
        "vol",
        &tree(level, order.len(), strip),
        metas(disks, order),
        opts(),
        &|_, _| {},
    ))
}

fn pattern(seed: u64, len: usize) -> Buf {
    let mut b = Buf::new(len);
    for (i, x) in b.iter_mut().enumerate() {
        *x = (seed as usize * 131 + i * 7 + i / 4096) as u8;
    }
    b
}

fn write(a: &Array, offset: u64, seed: u64, len: usize) {
    block_on(a.write(offset, pattern(seed, len), false)).expect("write");
}

fn check(a: &Array, offset: u64, seed: u64, len: usize) {
    let got = block_on(a.read(offset, len as u64)).expect("read");
    assert!(
        got[..] == pattern(seed, len)[..],
        "bytes at {offset}+{len} differ"
    );
}

#[test]
fn create_then_assemble_reads_back_and_is_clean() {
    let d = disks(4);
    let a = create(Level::Raid5, &d, 64 * KIB);
    write(&a, 0, 1, 256 * 1024);
    write(&a, 3 * MIB, 2, 64 * 1024);
    assert!(block_on(a.mark_clean()).expect("clean").is_recorded());
    let events = block_on(a.events());
    drop(a);
    let (a, report) = open(Level::Raid5, &d, &all(&d), 64 * KIB).expect("open");
    assert!(report.was_clean, "{report:?}");
    assert_eq!(report.resynced_bytes, 0);
    assert!(block_on(a.events()) > events);
    check(&a, 0, 1, 256 * 1024);
    check(&a, 3 * MIB, 2, 64 * 1024);
}

#[test]
fn a_missing_member_assembles_degraded() {
    let d = disks(4);
    let a = create(Level::Raid5, &d, 64 * KIB);
    write(&a, 0, 1, MIB as usize);
    block_on(a.mark_clean()).expect("clean");
    drop(a);
    let (a, report) = open(
        Level::Raid5,
        &d,
        &[Some(0), None, Some(2), Some(3)],
        64 * KIB,
    )
    .expect("open degraded");
    assert_eq!(report.absent_roles, vec![1]);
    assert!(report.warnings.iter().any(|w| w.contains("role 1")));
    assert!(a.volume().is_degraded());
    check(&a, 0, 1, MIB as usize);
    // Beyond tolerance: refused.
    drop(a);
    let e = open(Level::Raid5, &d, &[Some(0), None, None, Some(3)], 64 * KIB)
        .err()
        .expect("refused");
    assert!(
        matches!(
            e,
            ArrayError::Assemble(AssembleError::BeyondTolerance { .. })
        ),
        "{e}"
    );
}

#[test]
fn swapped_paths_take_their_recorded_roles() {
    let d = disks(4);
    let a = create(Level::Raid10, &d, 64 * KIB);
    write(&a, 0, 3, 2 * MIB as usize);
    block_on(a.mark_clean()).expect("clean");
    drop(a);
    let order = [Some(2), Some(0), Some(3), Some(1)];
    let (a, report) = open(Level::Raid10, &d, &order, 64 * KIB).expect("open swapped");
    assert!(report.was_clean);
    check(&a, 0, 3, 2 * MIB as usize);
}

#[test]
fn a_stale_member_is_resynced_before_it_rejoins() {
    let d = disks(4);
    let a = create(Level::Raid5, &d, 64 * KIB);
    write(&a, 0, 1, 512 * 1024);
    block_on(a.mark_clean()).expect("clean");
    drop(a);
    // Member 2 is offline while new data is written.
    let (a, _) = open(
        Level::Raid5,
        &d,
        &[Some(0), Some(1), None, Some(3)],
        64 * KIB,
    )
    .expect("degraded");
    write(&a, 0, 9, 512 * 1024);
    write(&a, 2 * MIB, 8, 64 * 1024);
    block_on(a.mark_clean()).expect("clean");
    drop(a);
    // It comes back: stale, so resynced (only the bitmap's regions), then current.
    let (a, report) = open(Level::Raid5, &d, &all(&d), 64 * KIB).expect("open");
    assert_eq!(report.resynced_roles, vec![2], "{report:?}");
    assert!(report.resynced_bytes == 3 * CHUNK, "{report:?}");
    assert!(!a.volume().is_degraded());
    // Its data is current: lose another member and read through it.
    a.volume().fail_member(0, "test");
    check(&a, 0, 9, 512 * 1024);
    check(&a, 2 * MIB, 8, 64 * 1024);
}

#[test]
fn assembly_warnings_name_members_by_the_ids_given() {
    let d = disks(4);
    let a = create(Level::Raid5, &d, 64 * KIB);
    a.volume().fail_member(1, "test");
    write(&a, 0, 1, 512 * 1024);
    block_on(a.mark_clean()).expect("clean");
    drop(a);
    let named = ArrayOptions {
        member_ids: ["d0", "d1", "d2", "d3"].map(String::from).to_vec(),
        ..opts()
    };
    let (_, report) = block_on(Array::open(
        "vol",
        &tree(Level::Raid5, 4, 64 * KIB),
        metas(&d, &all(&d)),
        named,
        &|_, _| {},
    ))
    .expect("open degraded");
    assert!(
        report
            .warnings
            .iter()
            .any(|w| w.contains("role 1: member d1 is recorded failed")),
        "{report:?}"
    );
    // Without ids, by position.
    let (_, report) = open(Level::Raid5, &d, &all(&d), 64 * KIB).expect("open degraded");
    assert!(
        report
            .warnings
            .iter()
            .any(|w| w.contains("role 1: member 1 is recorded failed")),
        "{report:?}"
    );
}

#[test]
fn members_of_two_arrays_are_refused_naming_both_without_a_vote() {
    let d = disks(3);
    let other = disks(3);
    let ours = create(Level::Raid1, &d, 64 * KIB);
    let our_id = ours.id().to_string();
    drop(ours);
    let a = create(Level::Raid1, &other, 64 * KIB);
    let foreign_id = a.id().to_string();
    drop(a);
    // Two of ours and one of theirs, then one of each: neither the majority nor the newer
    // record decides (a disk taken by `--force` holds the newer one); both sides are named.
    for mixed in [
        vec![d[0].clone(), d[1].clone(), other[2].clone()],
        vec![other[2].clone(), d[1].clone()],
    ] {
        let e = open(Level::Raid1, &mixed, &all(&mixed), 64 * KIB)
            .err()
            .expect("refused");
        assert!(
            matches!(
                e,
                ArrayError::Assemble(AssembleError::ArraysDisagree { .. })
            ),
            "{e}"
        );
        let said = e.to_string();
        assert!(said.contains(&foreign_id) && said.contains(&our_id), "{e}");
        assert!(said.contains("nothing was written"), "{e}");
    }
}

#[test]
fn a_changed_geometry_is_refused_with_both_values() {
    let d = disks(4);
    drop(create(Level::Raid5, &d, 64 * KIB));
    let e = open(Level::Raid5, &d, &all(&d), 128 * KIB)
        .err()
        .expect("refused");
    let s = e.to_string();
    assert!(s.contains("131072") && s.contains("65536"), "{s}");
    let e = open(Level::Raid6, &d, &all(&d), 64 * KIB)
        .err()
        .expect("refused");
    assert!(e.to_string().contains("level"), "{e}");
}

#[test]
fn a_corrupted_primary_superblock_is_served_by_the_other_copy() {
    let d = disks(3);
    let a = create(Level::Raid1, &d, 64 * KIB);
    write(&a, 0, 4, 64 * 1024);
    block_on(a.mark_clean()).expect("clean");
    drop(a);
    // Damage both copies' newest on member 1: whichever slot was written last.
    let mut head = [0u8; 32];
    let mut newest = 0;
    let mut best = 0;
    for slot in 0..2 {
        d[1].peek(slot * SLOT_BYTES, &mut head);
        let generation = u64::from_le_bytes(head[24..32].try_into().unwrap());
        if generation >= best {
            best = generation;
            newest = slot;
        }
    }
    d[1].poke(newest * SLOT_BYTES + 100, &[0xff; 8]);
    let (a, report) = open(Level::Raid1, &d, &all(&d), 64 * KIB).expect("open");
    assert!(
        report.warnings.iter().any(|w| w.contains("damaged")),
        "{report:?}"
    );
    check(&a, 0, 4, 64 * 1024);
}

#[test]
fn restart_after_a_crash_resyncs_only_the_dirty_regions() {
    for level in [Level::Raid1, Level::Raid5, Level::Raid6, Level::Raid10] {
        let n = if level == Level::Raid6 { 5 } else { 4 };
        let d = disks(n);
        let a = create(level, &d, 64 * KIB);
        write(&a, 0, 1, 64 * 1024);
        // The flush makes region 0 durable: its bit is cleared on disk.
        block_on(a.flush()).expect("flush");
        write(&a, CHUNK, 2, 64 * 1024);
        // A crash after a write to region 1: no flush, no clean shutdown.
        drop(a);
        let (a, report) = open(level, &d, &all(&d), 64 * KIB).expect("open");
        assert!(!report.was_clean);
        let capacity = a.volume().capacity();
        assert_eq!(
            report.resynced_bytes, CHUNK,
            "{level:?}: only region 1 is resynced ({capacity} bytes in all)"
        );
        check(&a, 0, 1, 64 * 1024);
        check(&a, CHUNK, 2, 64 * 1024);
        // The resync made the next open clean.
        block_on(a.mark_clean()).expect("clean");
        drop(a);
        let (_, report) = open(level, &d, &all(&d), 64 * KIB).expect("open");
        assert!(report.was_clean && report.resynced_bytes == 0, "{report:?}");
    }
}

#[test]
fn mirrors_that_differ_after_a_crash_agree_after_the_resync() {
    let d = disks(2);
    let a = create(Level::Raid1, &d, 64 * KIB);
    write(&a, 0, 1, 64 * 1024);
    drop(a);
    // The crash left copy 1 with other bytes in the dirty region.
    d[1].poke(METADATA_AREA_BYTES + 4096, &[0xee; 4096]);
    let (a, _) = open(Level::Raid1, &d, &all(&d), 64 * KIB).expect("open");
    drop(a);
    let (mut x, mut y) = (vec![0u8; 64 * 1024], vec![0u8; 64 * 1024]);
    d[0].peek(METADATA_AREA_BYTES, &mut x);
    d[1].peek(METADATA_AREA_BYTES, &mut y);
    assert!(x == y, "copies differ after the resync");
}

#[test]
fn a_recorded_failed_member_stays_failed() {
    let d = disks(3);
    let a = create(Level::Raid1, &d, 64 * KIB);
    a.volume().fail_member(2, "test");
    // The next write records the failure before it is acknowledged.
    write(&a, 0, 5, 4096);
    block_on(a.mark_clean()).expect("clean");
    drop(a);
    let (a, report) = open(Level::Raid1, &d, &all(&d), 64 * KIB).expect("open");
    assert_eq!(report.absent_roles, vec![2], "{report:?}");
    assert!(a.volume().member_is_failed(2));
    check(&a, 0, 5, 4096);
}

#[test]
fn create_syncs_members_that_were_not_zero() {
    let d = disks(3);
    d[2].poke(METADATA_AREA_BYTES, &[0x5a; 8192]);
    let m = metas(&d, &all(&d)).into_iter().flatten().collect();
    let (a, report) = block_on(Array::create(
        "vol",
        tree(Level::Raid5, 3, 64 * KIB),
        m,
        opts(),
        false,
        &|_, _| {},
    ))
    .expect("create");
    assert_eq!(report.resynced_bytes, a.volume().capacity());
    // Parity agrees now: lose member 2 and read what it held.
    let before = block_on(a.read(0, 256 * KIB)).expect("read");
    a.volume().fail_member(2, "test");
    let after = block_on(a.read(0, 256 * KIB)).expect("degraded read");
    assert!(before[..] == after[..]);
    // Creating over members that carry the volume is refused.
    let again = metas(&d, &all(&d)).into_iter().flatten().collect();
    let e = block_on(Array::create(
        "vol",
        tree(Level::Raid5, 3, 64 * KIB),
        again,
        opts(),
        true,
        &|_, _| {},
    ))
    .err()
    .expect("refused");
    assert!(e.to_string().contains("already carries"), "{e}");
}

#[test]
fn a_dirty_degraded_array_starts_and_serves_flushed_data() {
    for level in [Level::Raid1, Level::Raid5, Level::Raid6] {
        let n = if level == Level::Raid6 { 5 } else { 4 };
        let d = disks(n);
        let a = create(level, &d, 64 * KIB);
        write(&a, 0, 6, 512 * 1024);
        write(&a, 2 * MIB, 7, 192 * 1024);
        block_on(a.flush()).expect("flush");
        // A crash (no clean shutdown), and a member gone before the restart.
        drop(a);
        let mut order = all(&d);
        order[1] = None;
        let (a, report) = open(level, &d, &order, 64 * KIB).expect("a dirty degraded start");
        assert!(
            !report.was_clean && report.absent_roles == vec![1],
            "{level:?}: {report:?}"
        );
        check(&a, 0, 6, 512 * 1024);
        check(&a, 2 * MIB, 7, 192 * 1024);
        // The member returns: recorded rebuilding, so it is resynced before it is read.
        write(&a, 0, 8, 64 * 1024);
        block_on(a.mark_clean()).expect("clean");
        drop(a);
        let (a, report) = open(level, &d, &all(&d), 64 * KIB).expect("open");
        assert_eq!(report.resynced_roles, vec![1], "{level:?}: {report:?}");
        a.volume().fail_member(0, "test");
        check(&a, 0, 8, 64 * 1024);
        check(&a, 2 * MIB, 7, 192 * 1024);
    }
}

#[test]
fn regions_in_use_keep_their_bits_across_flushes_with_a_clear_delay() {
    let run = |delay: Duration| {
        let d = disks(4);
        let m = metas(&d, &all(&d)).into_iter().flatten().collect();
        let opts = ArrayOptions {
            bitmap_clear_delay: delay,
            ..opts()
        };
        let tree = tree(Level::Raid5, 4, 64 * KIB);
        let (a, _) = block_on(Array::create("vol", tree, m, opts, true, &|_, _| {})).unwrap();
        let before = a.bitmap_writes();
        // A database's pattern: a write, a commit (FLUSH), again, in two regions.
        for i in 0..20u64 {
            write(&a, (i % 2) * CHUNK + i * 4096, i, 4096);
            block_on(a.flush()).unwrap();
        }
        let updates = a.bitmap_writes() - before;
        // A clean shutdown clears every bit whatever the delay.
        assert!(block_on(a.mark_clean()).unwrap().is_recorded());
        drop(a);
        let (a, report) = open(Level::Raid5, &d, &all(&d), 64 * KIB).unwrap();
        assert!(report.was_clean && report.resynced_bytes == 0);
        check(&a, 19 * 4096 + CHUNK, 19, 4096);
        updates
    };
    // Cleared at every flush, set again by the next write: two bitmap writes per commit.
    assert!(run(Duration::ZERO) >= 38, "eager clearing");
    // Set once per region, kept while the regions are in use.
    assert_eq!(run(Duration::from_secs(3600)), 2, "delayed clearing");
}

/// A write still in flight keeps the records dirty: `mark_clean` says so (and records
/// nothing), then records the volume clean once the write is done.
#[test]
fn a_write_in_flight_keeps_the_volume_dirty_until_it_is_done() {
    use futures::FutureExt;
    use nbraid_core::metadata::CleanMark;
    use nbraid_sim::Faulty;
    let d: Vec<Arc<Faulty<MemoryMember>>> = (0..3)
        .map(|i| {
            let m = MemoryMember::new(format!("disk{i}"), MEMBER_BYTES);
            Arc::new(Faulty::new(m, i as u64))
        })
        .collect();
    let m = d
        .iter()
        .map(|x| block_on(MemberMeta::load(x.clone() as Arc<dyn Member>)))
        .collect();
    let tree = tree(Level::Raid5, 3, 64 * KIB);
    let create = Array::create("vol", tree, m, opts(), true, &|_, _| {});
    let a = block_on(create).expect("create").0;
    // The records are dirty from this write on; the next write to the place finds them so.
    write(&a, 0, 1, 4096);
    let slow = Duration::from_millis(300);
    d.iter().for_each(|x| x.set_latency(slow, slow));
    let mut second = Box::pin(a.write(0, pattern(2, 4096), false));
    assert!(second.as_mut().now_or_never().is_none(), "in flight");
    assert_eq!(
        block_on(a.mark_clean()).expect("mark"),
        CleanMark::WritesInFlight
    );
    block_on(second).expect("the write");
    d.iter()
        .for_each(|x| x.set_latency(Duration::ZERO, Duration::ZERO));
    assert_eq!(block_on(a.mark_clean()).expect("mark"), CleanMark::Recorded);
    check(&a, 0, 2, 4096);
}

/// A member that fails under a write no request waits for (the write-back cache's destage,
/// a resync: engine writes below the array) is recorded failed before the next member write
/// is issued, not when the next request ends. A power loss after writes that skipped it must
/// not leave it trusted at the next assembly (md: no stripe is written while a superblock
/// update is pending).
#[test]
fn a_member_failed_under_an_unawaited_write_is_recorded_before_the_next_write() {
    use nbraid_core::metadata::Absence;
    use nbraid_sim::{FaultOps, Faulty};
    let strip = 64 * KIB;
    let d: Vec<Arc<Faulty<MemoryMember>>> = (0..3)
        .map(|i| {
            let m = MemoryMember::new(format!("disk{i}"), MEMBER_BYTES);
            Arc::new(Faulty::new(m, i as u64))
        })
        .collect();
    let load = || -> Vec<Option<Arc<MemberMeta>>> {
        d.iter()
            .map(|x| Some(block_on(MemberMeta::load(x.clone() as Arc<dyn Member>))))
            .collect()
    };
    let m = load().into_iter().flatten().collect();
    let create = Array::create(
        "vol",
        tree(Level::Raid5, 3, strip),
        m,
        opts(),
        true,
        &|_, _| {},
    );
    let a = block_on(create).expect("create").0;
    // Stripe 0: data on members 0 and 1, parity on 2. Member 1's chunk takes no writes.
    d[1].fail_range(
        FaultOps::WRITE,
        METADATA_AREA_BYTES..METADATA_AREA_BYTES + strip,
    );
    block_on(a.volume().write(strip, pattern(1, 4096), false)).expect("degraded write");
    assert!(a.volume().member_is_failed(1));
    // Stripe 1, skipping member 1: held back until the records name it failed.
    block_on(a.volume().write(2 * strip, pattern(2, 4096), false)).expect("write");
    // Power loss: nothing else runs.
    drop(a);
    let t = tree(Level::Raid5, 3, strip);
    let opened = Array::open("vol", &t, load(), opts(), &|_, _| {});
    let (a, report) = block_on(opened).expect("open");
    assert!(
        matches!(report.roles[1], Err(Absence::Failed { .. })),
        "member 1 missed writes and must not be trusted: {report:?}"
    );
    check(&a, 2 * strip, 2, 4096);
}

#[test]
fn create_refuses_records_that_would_not_read_back_and_writes_nothing() {
    // A concatenation whose second member holds 0 bytes: the tree encodes, but no reader
    // accepts a region of 0 bytes, so the array would be created once and never assembled.
    let d = disks(2);
    let tree = Node::concat(vec![
        Node::member(0, METADATA_AREA_BYTES, REGION),
        Node::member(1, METADATA_AREA_BYTES + REGION, 0),
    ])
    .expect("tree");
    let m = metas(&d, &all(&d)).into_iter().flatten().collect();
    let e = block_on(Array::create("vol", tree, m, opts(), true, &|_, _| {}))
        .err()
        .expect("refused");
    let msg = e.to_string();
    assert!(msg.contains("vol"), "{msg}");
    assert!(msg.contains("would not read back"), "{msg}");
    assert!(msg.contains("member 1 region"), "{msg}");
    assert!(msg.contains("nothing was written"), "{msg}");
    for disk in &d {
        let head = block_on(disk.read(0, Buf::new(METADATA_AREA_BYTES as usize))).expect("read");
        assert!(head.iter().all(|&b| b == 0), "{} was written", disk.name());
    }
}
