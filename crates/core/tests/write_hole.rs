//! The RAID 5/6 write hole, exactly: a partial-stripe write whose parity write is lost in a
//! crash (the data write reached its member), then a member that was *not* being written is
//! lost before the restart — a dirty degraded start. With the partial-parity log the chunk
//! nobody wrote reads back exactly; without it, it does not (so the test shows the hole).

mod common;

use common::write_hole::{self, create_filled, metas_without, pattern};
use common::{InFlight, Lossy, Yielding, KIB, MIB};
use futures::executor::block_on;
use nbraid_core::metadata::{Array, ArrayOptions, MemberMeta, Probe, METADATA_AREA_BYTES};
use nbraid_core::{CacheMode, Member, MemoryMember, VolumeOptions};
use nbraid_layout::{Level, Node, ParityLayout, Region, Shape};
use std::sync::atomic::Ordering;
use std::sync::Arc;

const REGION: u64 = 2 * MIB;
/// Room before the region for a log outside the metadata area (`write_hole_log_size`).
const LOG_RESERVE: u64 = MIB;
const MEMBER_BYTES: u64 = METADATA_AREA_BYTES + LOG_RESERVE + REGION;
const STRIP: u64 = 64 * KIB;

/// The tree over regions right after the metadata area, or after the log's reserve.
fn tree(level: Level, n: usize, log_outside: bool) -> Node {
    let shape = Shape::new(level, n, None, STRIP, ParityLayout::LeftSymmetric).expect("shape");
    let start = METADATA_AREA_BYTES + if log_outside { LOG_RESERVE } else { 0 };
    let regions = vec![Region { start, len: REGION }; n];
    shape.build(&regions).expect("tree")
}

fn opts(ppl: bool, log_outside: bool) -> ArrayOptions {
    write_hole::opts(ppl, log_outside.then_some(LOG_RESERVE))
}

fn lossy_disks(n: usize) -> Vec<Arc<Lossy>> {
    write_hole::lossy_disks(n, MEMBER_BYTES)
}

/// A child of the written stripe: data chunk `i` (logical order), P or Q.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Role {
    D(usize),
    P,
    Q,
}

/// Which members' writes of the partial write a crash loses (non-FUA writes vanish).
#[derive(Clone, Copy, Debug)]
enum Tear {
    /// P's and Q's: the data landed, parity did not.
    Parity,
    /// P's only (RAID 6: Q landed, P did not).
    P,
    /// Q's only.
    Q,
    /// The data chunk's: parity landed, the data did not.
    Data,
}

/// Writes the whole volume, flushes, then writes 4 KiB into data chunk 0 of stripe 3 with
/// the parity members' writes lost, "crashes" (the array dropped with its records dirty),
/// deletes the members of data chunks `lost` (never written by that write) and reopens.
/// Returns whether every byte of the volume reads back as the writes left it.
fn scenario(level: Level, n: usize, lost: &[usize], ppl: bool) -> bool {
    let lost: Vec<Role> = lost.iter().map(|&i| Role::D(i)).collect();
    scenario_with(level, n, &lost, Tear::Parity, ppl, false, false)
}

/// [`scenario`] with any members lost (`lost`; the written chunk 0 among them or not) and
/// any tear. The 4 KiB being written must read back, sector by sector, as before or as
/// written; every other byte exactly. With `then_lose_one`, once that holds, one more data
/// member not being written is failed (within tolerance) and everything read again: the
/// parity the restart left must rebuild it too. The log sits in a reserve before the region
/// with `log_outside`, else in the metadata area.
fn scenario_with(
    level: Level,
    n: usize,
    lost: &[Role],
    tear: Tear,
    ppl: bool,
    then_lose_one: bool,
    log_outside: bool,
) -> bool {
    let disks = lossy_disks(n);
    let metas = |skip: &[usize]| metas_without(&disks, skip);
    let t = tree(level, n, log_outside);
    let (a, capacity) = create_filled(&t, &disks, opts(ppl, log_outside));
    let mut image = pattern(1, capacity as usize).to_vec();

    let (g, _) = nbraid_core::ppl::parity_groups(&t).remove(0);
    let stripe = 3u64;
    let roles = g.roles(stripe);
    let width = g.stripe_width();
    let member = |r: Role| match r {
        Role::D(i) => Some(roles.data[i]),
        Role::P => Some(roles.p),
        Role::Q => roles.q,
    };
    let torn: Vec<Role> = match tear {
        Tear::Parity => vec![Role::P, Role::Q],
        Tear::P => vec![Role::P],
        Tear::Q => vec![Role::Q],
        Tear::Data => vec![Role::D(0)],
    };
    for m in torn.into_iter().filter_map(member) {
        disks[m].lose.store(true, Ordering::SeqCst);
    }
    // 4 KiB into data chunk 0, 8 KiB in (a read-modify-write).
    let at = (stripe * width + 8 * KIB) as usize;
    let old = image[at..at + 4096].to_vec();
    let new = pattern(9, 4096);
    image[at..at + 4096].copy_from_slice(&new);
    block_on(a.write(at as u64, new, false)).expect("partial write");
    drop(a); // power lost: the torn members' writes never reached them

    let mut lost_members: Vec<usize> = lost.iter().filter_map(|&r| member(r)).collect();
    lost_members.sort_unstable();
    for d in &disks {
        d.lose.store(false, Ordering::SeqCst);
    }
    // Without the log such a start is refused unless forced (`dirty_degraded.rs`): forced
    // here, to show what it would serve.
    let open = |force_assembly: bool| {
        let o = ArrayOptions {
            force_assembly,
            ..opts(ppl, log_outside)
        };
        block_on(Array::open("vol", &t, metas(&lost_members), o, &|_, _| {}))
    };
    if !ppl && !lost_members.is_empty() {
        let refused = open(false).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(refused.contains("not shut down clean"), "{refused}");
    }
    let (a, report) = open(!ppl).expect("a dirty degraded array starts");
    assert!(
        !report.was_clean && report.absent_roles == lost_members,
        "{report:?}"
    );
    if ppl {
        // Where the log lives: right before the region, or inside the metadata area.
        let m = metas(&lost_members)
            .into_iter()
            .flatten()
            .next()
            .expect("a member");
        let Probe::Superblock(sb, _) = m.probe() else {
            panic!("no superblock")
        };
        let area = sb.volumes[0].ppl.expect("a log area");
        let region_start = METADATA_AREA_BYTES + if log_outside { LOG_RESERVE } else { 0 };
        if log_outside {
            assert_eq!(
                (area.offset, area.len),
                (region_start - LOG_RESERVE, LOG_RESERVE)
            );
        } else {
            assert!(area.offset + area.len <= METADATA_AREA_BYTES, "{area:?}");
        }
    }
    let rings_lost = lost.contains(&Role::P) && (roles.q.is_none() || lost.contains(&Role::Q));
    if ppl && !rings_lost {
        assert_eq!(report.ppl.entries, 1, "{report:?}");
    }
    let reads_back = |a: &Array| {
        let got = block_on(a.read(0, capacity)).expect("read back");
        let sectors_ok = (0..4096).step_by(512).all(|s| {
            let g = &got[at + s..at + s + 512];
            g == &old[s..s + 512] || g == &image[at + s..at + s + 512]
        });
        got[..at] == image[..at] && got[at + 4096..] == image[at + 4096..] && sectors_ok
    };
    if !reads_back(&a) {
        return false;
    }
    let tolerance = 1 + usize::from(roles.q.is_some());
    if then_lose_one && lost.len() < tolerance {
        let next = (1..roles.data.len()).find(|&i| !lost.contains(&Role::D(i)));
        if let Some(i) = next {
            a.volume()
                .fail_member(roles.data[i], "the test loses one more member");
            return reads_back(&a);
        }
    }
    true
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

/// Every loss RAID 6 tolerates after a crash in the middle of a partial-stripe write, with
/// every tear (the P ring carries only the partial P, the Q ring only the partial Q): the
/// bytes nobody was writing read back exactly, and, where tolerance is left, still do after
/// one more member is lost.
#[test]
fn raid6_every_tolerated_loss_after_a_torn_write_keeps_the_unwritten_data() {
    use Role::{D, P, Q};
    let losses: [&[Role]; 12] = [
        &[],
        &[P],
        &[Q],
        &[D(1)],
        &[D(0)],
        &[D(1), P],
        &[D(1), Q],
        &[D(0), P],
        &[D(0), Q],
        &[D(1), D(3)],
        &[D(0), D(2)],
        &[P, Q],
    ];
    for lost in losses {
        for tear in [Tear::Parity, Tear::P, Tear::Q, Tear::Data] {
            assert!(
                scenario_with(Level::Raid6, 6, lost, tear, true, true, false),
                "lost {lost:?}, torn {tear:?}"
            );
        }
    }
}

/// RAID 5's tolerated losses, every tear, then one more loss where tolerance is left.
#[test]
fn raid5_every_tolerated_loss_after_a_torn_write_keeps_the_unwritten_data() {
    use Role::{D, P};
    for lost in [&[][..], &[P], &[D(1)], &[D(0)]] {
        for tear in [Tear::Parity, Tear::Data] {
            assert!(
                scenario_with(Level::Raid5, 4, lost, tear, true, true, false),
                "lost {lost:?}, torn {tear:?}"
            );
        }
    }
}

/// A log in the reserve before the region (`write_hole_log_size`) closes the hole the same
/// way: every loss RAID 5 and RAID 6 tolerate after the torn write.
#[test]
fn a_log_before_the_region_keeps_the_unwritten_data_too() {
    use Role::{D, P, Q};
    for lost in [&[][..], &[P], &[D(1)], &[D(0)]] {
        assert!(
            scenario_with(Level::Raid5, 4, lost, Tear::Parity, true, true, true),
            "RAID 5, lost {lost:?}"
        );
    }
    for lost in [&[D(1), D(2)][..], &[P, D(1)], &[Q, D(1)]] {
        assert!(
            scenario_with(Level::Raid6, 6, lost, Tear::Parity, true, false, true),
            "RAID 6, lost {lost:?}"
        );
    }
}

/// The reserve must hold the log's smallest ring and stay out of the metadata area.
#[test]
fn a_log_reserve_that_is_too_small_or_reaches_the_metadata_area_is_refused() {
    let disks = || -> Vec<Arc<MemberMeta>> {
        (0..4)
            .map(|i| {
                let m = MemoryMember::new(format!("disk{i}"), MEMBER_BYTES);
                block_on(MemberMeta::load(Arc::new(m) as Arc<dyn Member>))
            })
            .collect()
    };
    let create = |t: Node, reserve: u64| {
        let o = ArrayOptions {
            ppl_area_before_region_bytes: Some(reserve),
            ..opts(true, false)
        };
        block_on(Array::create("vol", t, disks(), o, true, &|_, _| {}))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    };
    let small = create(tree(Level::Raid5, 4, true), 64 * KIB);
    assert!(small.contains("needs at least"), "{small}");
    let reaches = create(tree(Level::Raid5, 4, false), LOG_RESERVE);
    assert!(reaches.contains("metadata area"), "{reaches}");
}

/// A new array of four in-memory members over `t` (of [`MEMBER_BYTES`]), write-back with a
/// `cache_bytes` bound (no aging: only evictions and flushes destage), with the log when
/// `ppl`; members that yield before each operation (counted in `yielding`) when given.
fn write_back_array(
    t: Node,
    cache_bytes: u64,
    ppl: bool,
    yielding: Option<&Arc<InFlight>>,
) -> Array {
    write_back_array_of(t, (MEMBER_BYTES, 0), cache_bytes, ppl, yielding)
}

/// [`write_back_array`] over members of `member_bytes`, the log in a reserve of
/// `log_reserve` bytes before the regions (0: in the metadata area).
fn write_back_array_of(
    t: Node,
    (member_bytes, log_reserve): (u64, u64),
    cache_bytes: u64,
    ppl: bool,
    yielding: Option<&Arc<InFlight>>,
) -> Array {
    let metas: Vec<Arc<MemberMeta>> = (0..4)
        .map(|i| {
            let inner = MemoryMember::new(format!("disk{i}"), member_bytes);
            let m: Arc<dyn Member> = match yielding {
                Some(in_flight) => Arc::new(Yielding {
                    inner,
                    in_flight: in_flight.clone(),
                }),
                None => Arc::new(inner),
            };
            block_on(MemberMeta::load(m))
        })
        .collect();
    let o = ArrayOptions {
        volume: VolumeOptions {
            cache: CacheMode::WriteBack { bytes: cache_bytes },
            cache_max_age: None,
            ..VolumeOptions::default()
        },
        ppl_area_before_region_bytes: (log_reserve > 0).then_some(log_reserve),
        ..opts(ppl, false)
    };
    block_on(Array::create("vol", t, metas, o, true, &|_, _| {}))
        .expect("create")
        .0
}

/// An eviction in a logged group destages several least recently used stripes at once (their
/// entries share the log's rounds); without the log, one.
#[test]
fn eviction_with_the_log_destages_a_batch_of_stripes() {
    let dirty_after_one_eviction = |ppl: bool| {
        // The least bound there is: one full stripe (48 blocks).
        let a = write_back_array(tree(Level::Raid5, 4, false), 3 * STRIP, ppl, None);
        let width = 3 * STRIP;
        // Two blocks in each of 24 stripes fill the cache; one more block evicts.
        for s in 0..24u64 {
            for at in [0, STRIP] {
                block_on(a.write(s * width + at, pattern(s, 4096), false)).expect("write");
            }
        }
        assert_eq!(a.volume().cache_usage().dirty_bytes, 3 * STRIP);
        block_on(a.write(24 * width, pattern(24, 4096), false)).expect("write");
        a.volume().cache_usage().dirty_bytes / 4096
    };
    // Room for the block: one stripe of two blocks out, or four.
    assert_eq!(dirty_after_one_eviction(false), 48 - 2 + 1);
    assert_eq!(dirty_after_one_eviction(true), 48 - 8 + 1);
}

/// A flush drains more cached stripes than a drain destages at once, each a read-modify-write
/// logged first, over members that answer later (so destages overlap and park on the log
/// together): every stripe lands, the cache empties, a scrub finds the parity of every
/// stripe in step with its data — and no more destages ran at once than the drain's width
/// for stripes that wide (each reads two members, then writes two): 256 over 4 KiB strips
/// (its most), 16 over 256 KiB ones (16 MiB of stripes).
#[test]
fn a_drain_of_more_stripes_than_it_destages_at_once_writes_them_all() {
    drain_more_stripes_than_at_once(4 * KIB, REGION, 256);
    drain_more_stripes_than_at_once(256 * KIB, 16 * MIB, 16);
}

/// [`a_drain_of_more_stripes_than_it_destages_at_once_writes_them_all`] for RAID 5 over four
/// members of `region` bytes striped `strip` wide, where a drain destages `width` at once.
fn drain_more_stripes_than_at_once(strip: u64, region: u64, width: usize) {
    let shape =
        Shape::new(Level::Raid5, 4, None, strip, ParityLayout::LeftSymmetric).expect("shape");
    let regions = [Region {
        start: METADATA_AREA_BYTES,
        len: region,
    }; 4];
    let in_flight = Arc::new(InFlight::default());
    let a = write_back_array_of(
        shape.build(&regions).expect("tree"),
        (METADATA_AREA_BYTES + region, 0),
        8 * MIB,
        true,
        Some(&in_flight),
    );
    let data_bytes = 3 * strip;
    let stripes = region / strip;
    assert!(
        stripes >= 2 * width as u64,
        "more stripes than a drain destages at once"
    );
    // One block of each stripe, in the middle chunk: a read-modify-write each.
    for s in 0..stripes {
        block_on(a.write(s * data_bytes + strip, pattern(s, 4096), false)).expect("write");
    }
    assert_eq!(a.volume().cache_usage().dirty_bytes, stripes * 4096);
    in_flight.most.store(0, Ordering::SeqCst);
    block_on(a.flush()).expect("flush");
    assert_eq!(a.volume().cache_usage().dirty_bytes, 0);
    let most = in_flight.most.load(Ordering::SeqCst);
    // All of them at once would read two blocks each at once; the log's ring writes add a
    // few.
    assert!(
        most > 2 && most <= 2 * width + 8,
        "{most} member operations at once, {strip}-byte strips"
    );
    for s in 0..stripes {
        let got = block_on(a.read(s * data_bytes + strip, 4096)).expect("read");
        assert!(got[..] == pattern(s, 4096)[..], "stripe {s}");
    }
    let report = block_on(a.scrub(&nbraid_core::ScrubControl::new(false, 0))).expect("scrub");
    assert_eq!((report.mismatches, report.unreadable), (0, 0), "{report:?}");
    assert!(report.checked > 0, "{report:?}");
}

/// A stripe write whose rows lie far apart is carried out as separate runs of rows: two
/// cached 4 KiB writes a strip apart in a 1 MiB-strip stripe (chunk 0's first block, chunk
/// 1's last), and an 8 KiB write across the boundary of chunks 1 and 2, each move a few
/// blocks over the members — a plan over their hull of rows would read and write up to a
/// MiB of parity. The bytes land, a scrub finds the parity in step.
#[test]
fn rows_far_apart_in_a_wide_strip_are_written_as_separate_runs() {
    let strip = MIB;
    let region = 2 * MIB;
    let shape =
        Shape::new(Level::Raid5, 4, None, strip, ParityLayout::LeftSymmetric).expect("shape");
    // The log of a 1 MiB strip's entries does not fit the metadata area: a reserve.
    let reserve = 4 * MIB;
    let start = METADATA_AREA_BYTES + reserve;
    let regions = [Region { start, len: region }; 4];
    let tree = shape.build(&regions).expect("tree");
    let a = write_back_array_of(tree, (start + region, reserve), 8 * MIB, true, None);
    let moved = |a: &Array| -> u64 {
        (a.volume().member_health().iter().map(|h| h.counters))
            .map(|c| c.read_bytes + c.write_bytes)
            .sum()
    };
    let splits = nbraid_core::raid::split_stripe_writes();
    // Cached, then drained together: one stripe write of two far rows.
    let last_of_chunk_1 = 2 * strip - 4096;
    block_on(a.write(0, pattern(1, 4096), false)).expect("write");
    block_on(a.write(last_of_chunk_1, pattern(2, 4096), false)).expect("write");
    let before = moved(&a);
    block_on(a.flush()).expect("flush");
    let drained = moved(&a) - before;
    // Across chunks 1 and 2 (the cache takes it; the flush writes it).
    let before = moved(&a);
    block_on(a.write(2 * strip - 4096, pattern(3, 8192), false)).expect("write");
    block_on(a.flush()).expect("flush");
    let straddled = moved(&a) - before;
    // Each 4 KiB block: its old data and P read, new data and P written, a log entry of a
    // few blocks — tens of KiB where the hull's rows are a MiB.
    for (what, bytes) in [
        ("two far blocks", drained),
        ("across a boundary", straddled),
    ] {
        assert!(bytes <= 128 * KIB, "{what}: {bytes} bytes moved");
    }
    assert!(nbraid_core::raid::split_stripe_writes() >= splits + 2);
    let got = block_on(a.read(0, 4096)).expect("read");
    assert!(got[..] == pattern(1, 4096)[..]);
    let got = block_on(a.read(2 * strip - 4096, 8192)).expect("read");
    assert!(got[..] == pattern(3, 8192)[..]);
    let report = block_on(a.scrub(&nbraid_core::ScrubControl::new(false, 0))).expect("scrub");
    assert_eq!((report.mismatches, report.unreadable), (0, 0), "{report:?}");
}

/// A mirror of two RAID 5 groups after a crash tore a partial write in copy 0 (its parity
/// write lost) and copy 0 then lost the member being written: copy 0 can only rebuild that
/// chunk from the torn parity (bytes nobody wrote — what the write hole allows for a lost
/// member's bytes being written), copy 1 holds them as written. The resync at the reopen
/// copies the intact copy over the degraded one, never the other way round.
#[test]
fn a_mirror_of_raid5s_resyncs_from_the_intact_copy() {
    torn_mirror_of_raid5s(false);
}

/// As [`a_mirror_of_raid5s_resyncs_from_the_intact_copy`] with copy 1 lost a member too
/// (the one under chunk 1 of the torn stripe): no copy is intact over the stripe, and the
/// resync takes each chunk from a copy that holds it on a member — copy 1's chunk 0, copy
/// 0's chunk 1 — never copy 0's chunk 0 rebuilt from its torn parity.
#[test]
fn a_mirror_of_raid5s_both_degraded_resyncs_each_chunk_from_where_it_is_intact() {
    torn_mirror_of_raid5s(true);
}

/// A torn partial write in stripe 3 of copy 0 (chunk 1's write lost), then copy 0 loses
/// chunk 0's member — and copy 1 chunk 1's member if `copy1_degraded` — and reopens dirty.
fn torn_mirror_of_raid5s(copy1_degraded: bool) {
    let disks = lossy_disks(6);
    let metas = |skip: &[usize]| metas_without(&disks, skip);
    let t = common::mirror_of_raid5s(STRIP, METADATA_AREA_BYTES, REGION);
    let (a, capacity) = create_filled(&t, &disks, opts(true, false));
    // Stripe 3 of copy 0 (members 0..3): a write across its data chunks 0 and 1 whose
    // chunk 1 write is lost (P and chunk 0 land), then chunk 0's member is lost: rebuilding
    // it from that parity mixes old and new bytes of chunk 1 into the rows both carry.
    let (g, _) = nbraid_core::ppl::parity_groups(&t).remove(0);
    let stripe = 3u64;
    let roles = g.roles(stripe);
    disks[roles.data[1]].lose.store(true, Ordering::SeqCst);
    // Rows 8..64 KiB of chunk 0 and 0..16 KiB of chunk 1: rows 8..16 KiB carry both.
    let at = stripe * g.stripe_width() + 8 * KIB;
    let len = (STRIP + 8 * KIB) as usize;
    let old = pattern(1, capacity as usize)[at as usize..at as usize + len].to_vec();
    let new = pattern(9, len).to_vec();
    block_on(a.write(at, pattern(9, len), false)).expect("partial write");
    drop(a);
    disks[roles.data[1]].lose.store(false, Ordering::SeqCst);
    let lost = roles.data[0];
    let skip = if copy1_degraded {
        vec![lost, roles.data[1] + 3]
    } else {
        vec![lost]
    };
    let (a, report) = block_on(Array::open(
        "vol",
        &t,
        metas(&skip),
        opts(true, false),
        &|_, _| {},
    ))
    .expect("a dirty degraded mirror of RAID 5s starts");
    assert!(!report.was_clean, "{report:?}");
    // Whichever copy a read picks, each sector is as before or as written.
    for _ in 0..4 {
        let got = block_on(a.read(at, len as u64)).expect("read");
        for s in (0..len).step_by(512) {
            let g = &got[s..s + 512];
            assert!(
                g == &old[s..s + 512] || g == &new[s..s + 512],
                "sector {} of the torn write reads bytes nobody wrote",
                s / 512
            );
        }
    }
}

/// Whole stripes written straight over a stripe the log still holds an entry for (write-back,
/// `raid/whole.rs`): the entry is settled first, so a crash right after does not replay the
/// old partial parity over the new data. Checked by reopening dirty without each data
/// member of that stripe in turn (RAID 6: and without P): every byte reads back as written.
#[test]
fn whole_stripes_written_straight_settle_what_the_log_would_replay_over_them() {
    for (level, n) in [(Level::Raid5, 4), (Level::Raid6, 5)] {
        let k = n - level.parity();
        for lost_data in 0..k {
            let disks = lossy_disks(n);
            let t = tree(level, n, false);
            let o = ArrayOptions {
                volume: VolumeOptions {
                    cache: CacheMode::WriteBack { bytes: 4 * MIB },
                    cache_max_age: None,
                    ..VolumeOptions::default()
                },
                ..opts(true, false)
            };
            let (a, capacity) = create_filled(&t, &disks, o.clone());
            let mut image = pattern(1, capacity as usize).to_vec();
            let (g, _) = nbraid_core::ppl::parity_groups(&t).remove(0);
            let width = g.stripe_width();
            // 4 KiB into stripe 3, destaged by the flush with a log entry (a read-modify-write).
            let at = (3 * width + 8 * KIB) as usize;
            let small = pattern(7, 4096);
            image[at..at + 4096].copy_from_slice(&small);
            block_on(a.write(at as u64, small, false)).expect("partial write");
            block_on(a.flush()).expect("flush");
            // Stripes 2..5 whole, straight to the members.
            let whole_at = (2 * width) as usize;
            let whole = pattern(8, 3 * width as usize);
            image[whole_at..whole_at + whole.len()].copy_from_slice(&whole);
            let before = a
                .volume()
                .member_health()
                .iter()
                .map(|h| h.counters)
                .collect::<Vec<_>>();
            block_on(a.write(whole_at as u64, whole, false)).expect("whole stripes");
            block_on(a.flush()).expect("flush");
            let reads: u64 = (a
                .volume()
                .member_health()
                .iter()
                .map(|h| h.counters)
                .zip(&before))
            .map(|(x, y)| x.reads - y.reads)
            .sum();
            assert_eq!(reads, 0, "{level}: whole stripes read nothing");
            drop(a); // power lost with the records dirty
                     // The reopen misses a data member of stripe 3 (RAID 6: and P), so what the log
                     // replays there stays: no resync recomputes that parity from the data.
            let roles = g.roles(3);
            let mut lost = vec![roles.data[lost_data]];
            lost.extend(roles.q.map(|_| roles.p));
            lost.sort_unstable();
            let metas = metas_without(&disks, &lost);
            let (a, report) = block_on(Array::open("vol", &t, metas, o.clone(), &|_, _| {}))
                .expect("a dirty degraded array starts");
            assert_eq!(report.absent_roles, lost, "{report:?}");
            let got = block_on(a.read(0, capacity)).expect("read back");
            assert!(
                got[..] == image[..],
                "{level} x{n}: data chunk {lost_data} of the stripe lost after the reopen"
            );
        }
    }
}
