//! Background resync after an unclean start (`Array::open_background`): the volume
//! serves at once; a read of a region not yet resynced returns the first copy and leaves
//! every copy equal (md's rule), so two reads never disagree; a crash in the middle of the
//! background pass resumes over the chunks still marked; a member lost during the pass does
//! not stop it. A dirty RAID 5 serves at once too; one without the log resyncs first.

mod common;

use common::{KIB, MIB};
use futures::executor::block_on;
use nbraid_core::metadata::{Array, ArrayOptions, MemberMeta, OpenReport, METADATA_AREA_BYTES};
use nbraid_core::{Buf, CacheMode, Member, MemoryMember, PassControl, PassState, VolumeOptions};
use nbraid_layout::{Level, Node, ParityLayout, Region, Shape};
use std::sync::Arc;
use std::time::Duration;

const REGION: u64 = 16 * MIB;

fn tree(level: Level, n: usize) -> Node {
    let shape = Shape::new(level, n, None, 64 * KIB, ParityLayout::LeftSymmetric).expect("shape");
    let region = Region {
        start: METADATA_AREA_BYTES,
        len: REGION,
    };
    shape.build(&vec![region; n]).expect("tree")
}

fn opts() -> ArrayOptions {
    ArrayOptions {
        volume: VolumeOptions {
            cache: CacheMode::WriteThrough,
            ..VolumeOptions::default()
        },
        bitmap_chunk_bytes: Some(256 * KIB),
        // Resynced chunks' bits go at the next flush (the crash test counts on it).
        bitmap_clear_delay: Duration::ZERO,
        ppl: true,
        ..ArrayOptions::default()
    }
}

fn disks(n: usize) -> Vec<Arc<MemoryMember>> {
    (0..n)
        .map(|i| {
            Arc::new(MemoryMember::new(
                format!("d{i}"),
                METADATA_AREA_BYTES + REGION,
            ))
        })
        .collect()
}

fn metas(disks: &[Arc<MemoryMember>]) -> Vec<Arc<MemberMeta>> {
    disks
        .iter()
        .map(|d| block_on(MemberMeta::load(d.clone() as Arc<dyn Member>)))
        .collect()
}

fn create(level: Level, disks: &[Arc<MemoryMember>]) -> Array {
    let t = tree(level, disks.len());
    block_on(Array::create(
        "vol",
        t,
        metas(disks),
        opts(),
        true,
        &|_, _| {},
    ))
    .expect("create")
    .0
}

fn reopen(level: Level, disks: &[Arc<MemoryMember>]) -> (Array, OpenReport) {
    let m = metas(disks).into_iter().map(Some).collect();
    block_on(Array::open_background(
        "vol",
        &tree(level, disks.len()),
        m,
        opts(),
        &|_, _| {},
    ))
    .expect("open")
}

fn pattern(seed: u64, len: usize) -> Buf {
    let mut b = Buf::new(len);
    for (i, x) in b.iter_mut().enumerate() {
        *x = (seed as usize ^ (i * 13) ^ (i >> 8)) as u8;
    }
    b
}

/// Writes 64 KiB blocks over the whole volume (no flush: every bitmap chunk stays set);
/// returns the bytes.
fn write_all(a: &Array, seed: u64) -> Vec<u8> {
    let mut model = Vec::new();
    let mut at = 0;
    while at < a.volume().capacity() {
        let b = pattern(seed ^ at, 64 * KIB as usize);
        model.extend_from_slice(&b);
        block_on(a.write(at, b, false)).expect("write");
        at += 64 * KIB;
    }
    model
}

fn read_all(a: &Array) -> Vec<u8> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < a.volume().capacity() {
        out.extend_from_slice(&block_on(a.read(at, MIB)).expect("read"));
        at += MIB;
    }
    out
}

fn region_of(d: &MemoryMember) -> Vec<u8> {
    let mut v = vec![0; REGION as usize];
    d.peek(METADATA_AREA_BYTES, &mut v);
    v
}

/// A torn mirror write (copy 1 holds other bytes than copy 0 at a crash): after the
/// restart the volume serves before anything is resynced; reading the block returns copy
/// 0's bytes every time and leaves copy 1 equal; the pass then finishes the rest and the
/// array may be recorded clean again.
#[test]
fn reads_before_the_pass_return_the_first_copy_and_sync_it() {
    for (level, n) in [(Level::Raid1, 2), (Level::Raid10, 4)] {
        let d = disks(n);
        let a = create(level, &d);
        let model = write_all(&a, 7);
        // Volume offset 0 is at the start of members 0 and 1's regions for both levels;
        // volume offset 2 MiB (another resync piece) is on member 1 too, at 2 MiB of RAID
        // 1's region and 1 MiB of RAID 10's (64 KiB units over two pairs).
        d[1].poke(METADATA_AREA_BYTES, &[0xee; 4096]);
        let torn = 2 * MIB;
        let on_member = if level == Level::Raid1 { torn } else { MIB };
        d[1].poke(METADATA_AREA_BYTES + on_member, &[0xee; 4096]);
        drop(a); // a crash: the records say dirty
        let (a, report) = reopen(level, &d);
        assert!(
            !report.was_clean && report.resynced_bytes == 0,
            "{report:?}"
        );
        assert_eq!(report.background_bytes, a.volume().capacity(), "{level:?}");
        assert!(a.background_pending());
        let first = block_on(a.read(0, 4096)).expect("read");
        assert!(first[..] == model[..4096], "{level:?}: copy 0 is the truth");
        for _ in 0..4 {
            assert!(block_on(a.read(0, 4096)).expect("read")[..] == first[..]);
        }
        let mut copy1 = vec![0; 4096];
        d[1].peek(METADATA_AREA_BYTES, &mut copy1);
        assert!(copy1[..] == model[..4096], "the read synced copy 1");
        // The same into a caller's buffer.
        let t = torn as usize;
        for _ in 0..2 {
            let got = block_on(a.read_into(torn, Buf::new(4096))).expect("read_into");
            assert!(got[..] == model[t..t + 4096], "{level:?}: copy 0 again");
        }
        d[1].peek(METADATA_AREA_BYTES + on_member, &mut copy1);
        assert!(copy1[..] == model[t..t + 4096], "read_into synced copy 1");
        assert!(a.background_bytes() < a.volume().capacity());
        assert_eq!(
            block_on(a.mark_clean()).expect("flush"),
            nbraid_core::metadata::CleanMark::ResyncPending,
            "no clean point before the background resync is done"
        );
        let ctl = PassControl::new(0);
        assert_eq!(
            block_on(a.background_resync(&ctl)).expect("pass"),
            PassState::Done
        );
        assert!(!a.background_pending() && a.background_bytes() == 0);
        assert!(read_all(&a) == model);
        assert!(block_on(a.mark_clean()).expect("clean").is_recorded());
        drop(a);
        let (_a, report) = reopen(level, &d);
        assert!(
            report.was_clean && report.background_bytes == 0,
            "{report:?}"
        );
    }
}

/// Three copies, the third torn everywhere: a pass cancelled half-way under writes, a crash,
/// the restart resumes over less than the whole volume; during the second pass copy 0 is
/// lost and the pass goes on from copy 1. Every acknowledged write reads back and the
/// remaining copies agree.
#[test]
fn a_crash_mid_pass_resumes_and_a_lost_member_does_not_stop_it() {
    let d = disks(3);
    let a = create(Level::Raid1, &d);
    let mut model = write_all(&a, 11);
    d[2].poke(METADATA_AREA_BYTES, &vec![0x5a; REGION as usize]);
    drop(a);
    let (a, report) = reopen(Level::Raid1, &d);
    let cap = a.volume().capacity();
    assert_eq!(report.background_bytes, cap);
    // Slow enough to be cancelled half-way, with writes going on.
    let ctl = PassControl::new(cap * 2);
    let writes = async {
        for k in 0..16u64 {
            let at = (k * 37 % 256) * 64 * KIB;
            let b = pattern(0xabc + k, 64 * KIB as usize);
            model[at as usize..(at + 64 * KIB) as usize].copy_from_slice(&b);
            a.write(at, b, false).await.expect("write");
            nbraid_core::timer::sleep(Duration::from_millis(2)).await;
        }
    };
    let cancel = async {
        while ctl.position_bytes() < cap / 2 {
            nbraid_core::timer::sleep(Duration::from_millis(1)).await;
        }
        ctl.cancel();
    };
    let (r, (), ()) = block_on(futures::future::join3(
        a.background_resync(&ctl),
        writes,
        cancel,
    ));
    assert_eq!(r.expect("pass"), PassState::Cancelled);
    block_on(a.flush()).expect("flush");
    drop(a); // a crash in the middle of the pass
    let (a, report) = reopen(Level::Raid1, &d);
    assert!(
        report.background_bytes > 0 && report.background_bytes < cap,
        "resumes over what is left: {report:?}"
    );
    let ctl = PassControl::new(cap * 2);
    let lose = async {
        while ctl.position_bytes() < report.background_bytes / 4 {
            nbraid_core::timer::sleep(Duration::from_millis(1)).await;
        }
        a.volume().fail_member(0, "test: pulled during the resync");
    };
    let (r, ()) = block_on(futures::future::join(a.background_resync(&ctl), lose));
    assert_eq!(r.expect("pass"), PassState::Done);
    assert!(!a.background_pending());
    assert!(read_all(&a) == model, "every acknowledged write reads back");
    assert!(
        region_of(&d[1]) == region_of(&d[2]),
        "the copies left agree"
    );
}

/// A dirty RAID 5 serves at once: reads before the pass return the data (read straight from
/// the data chunks, parity unused); a write into a stripe whose parity is wrong (as a torn
/// full-row write leaves it) resyncs that stripe first, so a member lost afterwards rebuilds
/// exact bytes; the pass then ends, parity agrees everywhere and the records go clean.
#[test]
fn a_dirty_raid5_serves_before_its_resync_and_ends_clean() {
    let d = disks(4);
    let a = create(Level::Raid5, &d);
    let mut model = write_all(&a, 3);
    drop(a); // unclean: every bitmap chunk set
             // Stripe 0's parity (left-symmetric: on member 3) is junk.
    d[3].poke(METADATA_AREA_BYTES, &vec![0xa5; 64 * KIB as usize]);
    let (a, report) = reopen(Level::Raid5, &d);
    let cap = a.volume().capacity();
    assert!(
        report.resynced_bytes == 0 && report.background_bytes == cap,
        "serves before resyncing: {report:?}"
    );
    assert!(a.background_pending());
    assert!(read_all(&a) == model, "reads before the pass");
    assert_eq!(a.background_bytes(), cap, "reads resync nothing");
    // A 4 KiB write into stripe 0's first chunk, then member 1 (stripe 0's second chunk) lost.
    let b = pattern(77, 4 * KIB as usize);
    model[..4 * KIB as usize].copy_from_slice(&b);
    block_on(a.write(0, b, false)).expect("write before the pass");
    assert!(a.background_pending() && a.background_bytes() < cap);
    a.volume().fail_member(1, "test: lost before the pass");
    assert!(
        block_on(a.read(0, 192 * KIB)).expect("degraded read")[..] == model[..192 * KIB as usize],
        "the written stripe was resynced before the write: no junk parity rebuilt"
    );
    let ctl = PassControl::new(0);
    assert_eq!(
        block_on(a.background_resync(&ctl)).expect("pass"),
        PassState::Done
    );
    assert!(!a.background_pending());
    assert!(read_all(&a) == model, "every write reads back degraded");
    assert!(block_on(a.mark_clean()).expect("clean").is_recorded());
    drop(a);
    // Healthy again (member 1's bytes are intact): clean, nothing to resync, parity agrees.
    let (a, report) = reopen(Level::Raid5, &d);
    assert!(report.background_bytes == 0 && report.resynced_bytes == 0);
    for lost in 0..4 {
        let v = nbraid_core::Volume::new(
            a.volume().geometry().clone(),
            d.iter().map(|m| m.clone() as Arc<dyn Member>).collect(),
            VolumeOptions {
                members_known_zero: true,
                cache: CacheMode::WriteThrough,
                ..VolumeOptions::default()
            },
        )
        .expect("view");
        v.fail_member(lost, "view");
        let mut out = Vec::new();
        let mut at = 0;
        while at < cap {
            out.extend_from_slice(&block_on(v.read(at, MIB)).expect("view read"));
            at += MIB;
        }
        assert!(out == model, "parity agrees without member {lost}");
    }
}

/// Without the partial-parity log a torn partial-stripe write leaves parity wrong under data
/// nobody was writing: such a volume still resyncs before serving.
#[test]
fn parity_volumes_without_the_log_resync_before_serving() {
    let d = disks(4);
    let o = ArrayOptions {
        ppl: false,
        ..opts()
    };
    let t = tree(Level::Raid5, 4);
    let a = block_on(Array::create(
        "vol",
        t.clone(),
        metas(&d),
        o.clone(),
        true,
        &|_, _| {},
    ))
    .expect("create")
    .0;
    let model = write_all(&a, 3);
    drop(a);
    let m = metas(&d).into_iter().map(Some).collect();
    let (a, report) = block_on(Array::open_background("vol", &t, m, o, &|_, _| {})).expect("open");
    assert!(
        report.resynced_bytes > 0 && report.background_bytes == 0,
        "{report:?}"
    );
    assert!(!a.background_pending());
    assert!(read_all(&a) == model);
}

// Found by a review of the rebuild fix.

/// A stale member of a mirror being resynced in the background fails mid-pass and a spare
/// takes its role (the daemon's watcher): the background pass's end must not make the spare
/// current before its rebuild.
#[test]
fn a_spare_put_in_a_stale_role_mid_background_resync_is_not_made_current_by_it() {
    let d = disks(3);
    let a = create(Level::Raid1, &d);
    let mut old = vec![0u8; (METADATA_AREA_BYTES + REGION) as usize];
    d[2].peek(0, &mut old);
    let _ = write_all(&a, 3);
    block_on(a.mark_clean()).expect("clean");
    let model = write_all(&a, 5);
    drop(a); // a crash, dirty
    d[2].poke(0, &old); // d2 missed all that: stale
    let (a, report) = reopen(Level::Raid1, &d);
    assert!(a.background_pending(), "{report:?}");
    assert!(!a.volume().member_is_current(2), "d2 not stale: {report:?}");
    let spare = Arc::new(MemoryMember::new("spare", METADATA_AREA_BYTES + REGION));
    a.add_spare(metas(std::slice::from_ref(&spare)).remove(0))
        .expect("spare");
    let total = a.background_bytes();
    let ctl = PassControl::new(total * 2);
    let swap = async {
        while ctl.position_bytes() == 0 {
            nbraid_core::timer::sleep(Duration::from_millis(1)).await;
        }
        a.volume().fail_member(2, "test: the stale member dies");
        assert_eq!(a.use_spares().await.expect("use"), vec![2]);
    };
    let (r, ()) = block_on(futures::future::join(a.background_resync(&ctl), swap));
    assert_eq!(r.expect("pass"), PassState::Done);
    assert!(
        !a.volume().member_is_current(2),
        "the spare made current by the resync"
    );
    assert_eq!(a.rebuilding(), vec![(2, 0)]);
    let done = block_on(a.rebuild(&PassControl::new(0))).expect("rebuild");
    assert_eq!(done.completed, vec![2]);
    a.volume().fail_member(0, "test");
    a.volume().fail_member(1, "test");
    assert!(read_all(&a) == model, "from the spare rebuilt");
}
