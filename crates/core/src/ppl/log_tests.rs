//! The log writer's bookkeeping, driven by hand (memory members complete at once): ring
//! space a slow writer's band must not pin, and writers that wait instead of spinning.

use super::{Blocked, GroupLog, LogFailed, Prepared, Values};
use crate::member::Member;
use crate::memory::MemoryMember;
use crate::node::MemberTable;
use crate::ppl::{min_ring_bytes, parity_groups, PplSetup};
use crate::testutil::SlowMember;
use futures::executor::block_on;
use futures::FutureExt;
use nbraid_layout::{Level, ParityLayout, Region, Shape};
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

const STRIP: u64 = 4096;

/// The log of a 3-member RAID 5 (4 KiB strips) whose rings are as small as allowed: two
/// batches fill one.
fn small_log() -> GroupLog {
    small_log_with_latency(Duration::ZERO)
}

/// [`small_log`] over members that take `latency` for every op.
fn small_log_with_latency(latency: Duration) -> GroupLog {
    log_of(Level::Raid5, 3, latency)
}

/// The log of a `n`-member group of `level` (4 KiB strips), rings as small as allowed.
fn log_of(level: Level, n: usize, latency: Duration) -> GroupLog {
    let members: Vec<Arc<dyn Member>> = (0..n)
        .map(|i| {
            let m = MemoryMember::new(format!("m{i}"), 2 << 20);
            Arc::new(SlowMember::new(m, latency)) as Arc<dyn Member>
        })
        .collect();
    log_over(level, members, 1 << 20, None)
}

/// The log of a 3-member RAID 5 (4 KiB strips) whose rings take `ring_bytes` before the
/// regions, over `members` (3 of them, of 10 MiB).
fn log_with_rings(ring_bytes: u64, members: Vec<Arc<dyn Member>>) -> GroupLog {
    log_over(Level::Raid5, members, 8 << 20, Some(ring_bytes))
}

/// The log of a group of `level` over `members` (4 KiB strips, 1 MiB regions from
/// `region_start`), each ring at the member's start: `ring_bytes` long, or as small as
/// allowed.
fn log_over(
    level: Level,
    members: Vec<Arc<dyn Member>>,
    region_start: u64,
    ring_bytes: Option<u64>,
) -> GroupLog {
    log_over_regions(level, members, (region_start, 1 << 20), ring_bytes)
}

/// [`log_over`] with regions `(start, len)` on each member (the log writes only its rings:
/// the regions may pass the members' ends).
fn log_over_regions(
    level: Level,
    members: Vec<Arc<dyn Member>>,
    (start, len): (u64, u64),
    ring_bytes: Option<u64>,
) -> GroupLog {
    let n = members.len();
    let regions = vec![Region { start, len }; n];
    let root = Shape::new(level, n, None, STRIP, ParityLayout::LeftSymmetric)
        .expect("shape")
        .build(&regions)
        .expect("tree");
    let (group, _) = parity_groups(&root).remove(0);
    let ring = ring_bytes.unwrap_or_else(|| min_ring_bytes(&group));
    let setup = PplSetup {
        life: 1,
        areas: vec![Some((0, ring)); n],
    };
    let table = Arc::new(MemberTable::new(members));
    GroupLog::new(&setup, 0, &group, (0..n).collect(), table).expect("rings large enough")
}

/// The first sector of data chunk 0 written, the rest of the stripe zero.
fn one_sector(log: &GroupLog, stripe: u64) -> Result<Vec<(super::Entry, super::Rings)>, Blocked> {
    let zeros = vec![0u8; STRIP as usize];
    let values = Values::Direct {
        chunks: smallvec::smallvec![&zeros[..], &zeros[..]],
        r0: 0,
    };
    log.prepare(
        stripe,
        &log.layout.roles(stripe),
        &[vec![(0, 512)], vec![]],
        &values,
        false,
    )
}

#[test]
fn a_writer_slow_to_hand_over_its_entries_pins_no_ring_space() {
    let log = small_log();
    // Prepared, not yet handed to the log (a writer preempted between the two).
    let slow = one_sector(&log, 0).ok().expect("nothing live");
    // Others wrap the ring many times meanwhile: each must find room.
    for stripe in 1..40 {
        let entries = one_sector(&log, stripe).ok().expect("nothing live");
        let hold = block_on(log.write(entries)).expect("room in the ring");
        drop(hold);
    }
    let hold = block_on(log.write(slow)).expect("the slow writer's entry fits too");
    drop(hold);
}

#[test]
fn a_write_to_a_band_in_flight_waits_to_be_woken_instead_of_spinning() {
    let log = small_log();
    let first = one_sector(&log, 7).ok().expect("nothing live");
    // The band's entry is not on its ring yet: no flush settles it; wait.
    let Err(Blocked::Wait(mut woken)) = one_sector(&log, 7) else {
        panic!("a band whose entry is in flight must make the next write wait");
    };
    assert!(woken.try_recv().expect("not cancelled").is_none());
    let hold = block_on(log.write(first)).expect("written");
    drop(hold);
    assert!(
        woken.now_or_never().is_some(),
        "woken once the band's write ended"
    );
    // Memory members count no unflushed writes: the band settles without a flush.
    assert!(one_sector(&log, 7).is_ok());
}

#[test]
fn a_writer_learns_its_entries_are_written_without_a_round_slot() {
    let log = small_log();
    let entries = one_sector(&log, 3).ok().expect("nothing live");
    let mut write = Box::pin(log.write(entries));
    // Other writers' rounds take every slot ...
    let slots = take_every_round_slot(&log);
    assert!(
        write.as_mut().now_or_never().is_none(),
        "queued, not written"
    );
    // ... one of which takes the queued entries: the waiting writer ends while they run.
    assert!(block_on(log.write_round()).is_none());
    let hold = write.as_mut().now_or_never().expect("ended without a slot");
    assert!(hold.is_ok());
    drop(slots);
}

/// Every round slot, as writers writing rounds would hold them.
fn take_every_round_slot(log: &GroupLog) -> Vec<super::rounds::RoundSlot<'_>> {
    (0..super::MAX_ROUNDS_IN_FLIGHT)
        .map(|_| super::rounds::RoundSlot::take(log).expect("a free slot"))
        .collect()
}

#[test]
fn writers_start_rounds_of_their_own_while_slots_are_free() {
    let log = small_log();
    let mut slots = take_every_round_slot(&log);
    slots.pop();
    // One slot free: a writer starts its own round and ends without anyone else's help.
    let entries = one_sector(&log, 4).ok().expect("nothing live");
    let hold = block_on(log.write(entries)).expect("written");
    drop(hold);
    assert!(
        super::rounds::RoundSlot::take(&log).is_some(),
        "its slot was given back"
    );
}

#[test]
fn a_round_dropped_unfinished_fails_the_entries_it_took() {
    // Members slow enough that the round is still writing when it is dropped.
    let log = small_log_with_latency(Duration::from_secs(5));
    let entries = one_sector(&log, 5).ok().expect("nothing live");
    let mut write = Box::pin(log.write(entries));
    let slots = take_every_round_slot(&log);
    assert!(write.as_mut().now_or_never().is_none(), "queued");
    // A round takes the entry, then its future is dropped before its batches are written.
    {
        let mut round = Box::pin(log.write_round());
        assert!(round.as_mut().now_or_never().is_none(), "still writing");
    }
    let r = write
        .as_mut()
        .now_or_never()
        .expect("told, not left waiting");
    assert_eq!(
        r.err(),
        Some(LogFailed::Cancelled),
        "not called a lack of room"
    );
    drop(slots);
    // Nothing of the band is pending: a new write of it is not blocked by the dropped one.
    assert!(one_sector(&log, 5).is_ok());
}

#[test]
fn runs_are_the_stretches_of_set_sectors() {
    let all = |m| super::masks::runs(m).collect::<Vec<_>>();
    assert_eq!(all(0), vec![]);
    assert_eq!(all(0xff), vec![(0, 8)]);
    assert_eq!(all(0b1011_0110), vec![(1, 3), (4, 6), (7, 8)]);
    assert_eq!(all(0b1000_0001), vec![(0, 1), (7, 8)]);
}

#[test]
fn same_chunk_runs_split_stored_runs_where_the_written_chunks_change() {
    let all = |stored, now: &[u8]| super::masks::same_chunk_runs(stored, now).collect::<Vec<_>>();
    assert_eq!(all(0xff, &[0xff, 0]), vec![(0, 8)]);
    assert_eq!(all(0xff, &[0x0f, 0xf0]), vec![(0, 4), (4, 8)]);
    assert_eq!(
        all(0b0110_0110, &[0b0010_0010, 0]),
        vec![(1, 2), (2, 3), (5, 6), (6, 7)]
    );
    assert_eq!(all(0, &[0xff, 0]), vec![]);
}

#[test]
fn a_band_left_unflushed_needs_no_flush_only_where_the_new_entry_covers_its_flux() {
    let ok = |dirty: &[u8], now: &[u8]| super::needs_no_flush(dirty, now, false);
    // A rewrite of the same sectors: nothing unflushed is left unwritten.
    assert!(ok(&[0xff, 0, 0], &[0xff, 0, 0]));
    assert!(ok(&[0x0f, 0, 0], &[0xff, 0, 0]));
    // Sequential writes meeting in a stripe: every other chunk, the one unflushed chunk the
    // only one left unwritten.
    assert!(ok(&[0xff, 0, 0], &[0, 0xff, 0xff]));
    // A whole row over anything: no partial parity at all.
    assert!(ok(&[0xff, 0xff, 0], &[0xff, 0xff, 0xff]));
    // Beside an unflushed chunk with a settled one unwritten: the partial parity would count
    // bytes the media may not hold when the settled chunk is rebuilt from it.
    assert!(!ok(&[0xff, 0, 0], &[0, 0xff, 0]));
    // Two unflushed chunks unwritten, by two writes: one rebuilt from the other's media, which
    // a flush covering only the first write's may leave old.
    assert!(!ok(&[0xff, 0xff, 0], &[0, 0, 0xff]));
    // Dirty sectors the new write does not write: its entry could not describe them.
    assert!(!ok(&[0xff, 0, 0], &[0x0f, 0, 0]));
    assert!(!ok(&[0xf0, 0, 0], &[0, 0x0f, 0x0f]));
}

#[test]
fn chunks_one_write_left_unflushed_may_all_be_left_unwritten() {
    let ok = |dirty: &[u8], now: &[u8]| super::needs_no_flush(dirty, now, true);
    // Sequential writes of two chunks meeting in a stripe of three: guaranteed together,
    // each is rebuilt from the partial parity and the other's media.
    assert!(ok(&[0xff, 0xff, 0], &[0, 0, 0xff]));
    // In the sectors the earlier write wrote; a settled chunk left unwritten beside them
    // still needs the flush.
    assert!(ok(&[0x0f, 0x0f, 0, 0], &[0, 0, 0xff, 0xff]));
    assert!(!ok(&[0xff, 0, 0, 0], &[0, 0, 0xff, 0xff]));
    assert!(!ok(&[0x0f, 0x0f, 0, 0], &[0, 0, 0xff, 0]));
}

/// A RAID 5 of 4 (three data chunks, one 4 KiB band per strip) whose band 0 of stripe 0 was
/// written (chunk 0, whole band) and is done but not known durable: every member counts a
/// completed write no flush covers yet.
fn log_with_unflushed_chunk_0() -> GroupLog {
    unflushed_chunk_0_of(Level::Raid5, 4)
}

/// [`log_with_unflushed_chunk_0`] for a group of `level` over `n` members with three data
/// chunks.
fn unflushed_chunk_0_of(level: Level, n: usize) -> GroupLog {
    let log = log_of(level, n, Duration::ZERO);
    let c = vec![1u8; STRIP as usize];
    let values = same_bytes(&c);
    let entries = log
        .prepare(
            0,
            &log.layout.roles(0),
            &[vec![(0, STRIP)], vec![], vec![]],
            &values,
            false,
        )
        .ok()
        .expect("nothing live");
    written_unflushed(&log, entries);
    log
}

/// Writes `entries`' band and leaves it done but not known durable: every member counts a
/// completed write no flush covers yet.
fn written_unflushed(log: &GroupLog, entries: Vec<(super::Entry, super::Rings)>) {
    let hold = block_on(log.write(entries)).expect("written");
    for m in 0..log.members.len() {
        log.table.slot(m).mark_dirty();
    }
    drop(hold);
}

/// The values of a reconstruct-write of the 3-data-chunk stripe whose chunks all hold `c`.
fn same_bytes(c: &[u8]) -> Values<'_> {
    Values::Direct {
        chunks: smallvec::smallvec![c, c, c],
        r0: 0,
    }
}

/// Chunk 0 as the earlier write of [`unflushed_chunk_0_of`] left it (the values a
/// reconstruct-write of the rest of the band reads).
const CHUNK_0: u8 = 7;

/// Chunks 1 and 2 of band 0 of stripe 0 written beside the unflushed chunk 0: logged without a
/// flush, one entry marking them written. Returns it.
fn rest_of_band_0(log: &GroupLog) -> super::Entry {
    let (c0, c1, c2) = (
        vec![CHUNK_0; STRIP as usize],
        vec![1u8; STRIP as usize],
        vec![2; STRIP as usize],
    );
    let values = Values::Direct {
        chunks: smallvec::smallvec![&c0[..], &c1[..], &c2[..]],
        r0: 0,
    };
    let whole = vec![(0, STRIP)];
    let mut entries = log
        .prepare(
            0,
            &log.layout.roles(0),
            &[vec![], whole.clone(), whole],
            &values,
            false,
        )
        .ok()
        .expect("chunks 1 and 2 beside the unflushed chunk 0 need no flush");
    assert_eq!(entries.len(), 1);
    let e = entries.remove(0).0;
    assert_eq!(e.masks, vec![0, 0xff, 0xff]);
    e
}

#[test]
fn sequential_writes_meeting_in_a_band_are_logged_without_a_flush() {
    let e = rest_of_band_0(&log_with_unflushed_chunk_0());
    // The partial parity is chunk 0 as the earlier write left it.
    assert_eq!(e.pp.as_deref(), Some(&[CHUNK_0; STRIP as usize][..]));
}

#[test]
fn raid6_sequential_writes_meeting_in_a_band_log_both_partials_of_the_unflushed_chunk() {
    let log = unflushed_chunk_0_of(Level::Raid6, 5);
    let e = rest_of_band_0(&log);
    // P and Q of the stripe with chunk 0 as the earlier write left it and the rest zero.
    let (zero, c0) = (vec![0u8; STRIP as usize], vec![CHUNK_0; STRIP as usize]);
    let mut by_slot: Vec<&[u8]> = vec![&zero[..]; 3];
    by_slot[log.layout.roles(0).q_slot[0]] = &c0[..];
    let (mut p, mut q) = (zero.clone(), zero.clone());
    crate::parity::pq_gen(&by_slot, &mut p, &mut q);
    assert_eq!(e.pp.as_deref(), Some(&p[..]));
    assert_eq!(e.pq.as_deref(), Some(&q[..]));
}

#[test]
fn the_rest_of_a_stripe_one_write_began_with_two_chunks_is_logged_without_a_flush() {
    let log = log_of(Level::Raid5, 4, Duration::ZERO);
    let (c0, c1, c2) = (
        vec![5u8; STRIP as usize],
        vec![6u8; STRIP as usize],
        vec![7u8; STRIP as usize],
    );
    let values = Values::Direct {
        chunks: smallvec::smallvec![&c0[..], &c1[..], &c2[..]],
        r0: 0,
    };
    let whole = vec![(0, STRIP)];
    let write = |w: [bool; 3]| {
        let ranges: Vec<Vec<(u64, u64)>> = w
            .iter()
            .map(|&on| if on { whole.clone() } else { vec![] })
            .collect();
        log.prepare(0, &log.layout.roles(0), &ranges, &values, false)
    };
    let first = write([true, true, false]).ok().expect("nothing live");
    written_unflushed(&log, first);
    let second = write([false, false, true])
        .ok()
        .expect("chunks 0 and 1, one write's, need no flush");
    let e = &second[0].0;
    let both: Vec<u8> = c0.iter().zip(&c1).map(|(a, b)| a ^ b).collect();
    assert_eq!(e.pp.as_deref(), Some(&both[..]));
    let hold = block_on(log.write(second)).expect("written");
    drop(hold);
    // Now two writes left the band unflushed: chunk 1 (the first's) and chunk 2 (the
    // second's) unwritten by a rewrite of chunk 0 need the flush.
    let Err(Blocked::Flush) = write([true, false, false]) else {
        panic!("two writes' chunks left unwritten: flush first");
    };
}

#[test]
fn a_fua_write_to_a_band_left_unflushed_flushes_first() {
    // Durable when done while the earlier write may not be: rebuilt from its parity, a lost
    // chunk of this write would count the earlier chunk's bytes the media may not hold.
    let log = log_with_unflushed_chunk_0();
    let c = vec![1u8; STRIP as usize];
    let values = same_bytes(&c);
    let whole = vec![(0, STRIP)];
    let Err(Blocked::Flush) = log.prepare(
        0,
        &log.layout.roles(0),
        &[vec![], whole.clone(), whole],
        &values,
        true,
    ) else {
        panic!("a FUA write must not skip the flush");
    };
}

#[test]
fn a_write_beside_an_unflushed_chunk_with_a_settled_one_unwritten_flushes_first() {
    let log = log_with_unflushed_chunk_0();
    let c = vec![1u8; STRIP as usize];
    let values = same_bytes(&c);
    let Err(Blocked::Flush) = log.prepare(
        0,
        &log.layout.roles(0),
        &[vec![], vec![(0, STRIP)], vec![]],
        &values,
        false,
    ) else {
        panic!("chunk 2 is settled and unwritten: the members must be flushed first");
    };
    // A flush settles the band: then it is logged as any other.
    block_on(log.flush_members());
    assert!(log
        .prepare(
            0,
            &log.layout.roles(0),
            &[vec![], vec![(0, STRIP)], vec![]],
            &values,
            false
        )
        .is_ok());
}

#[test]
fn a_whole_row_written_over_an_unflushed_band_still_supersedes_its_entry() {
    let log = log_with_unflushed_chunk_0();
    let c = vec![1u8; STRIP as usize];
    let values = same_bytes(&c);
    let whole = vec![(0, STRIP)];
    let entries = log
        .prepare(
            0,
            &log.layout.roles(0),
            &[whole.clone(), whole.clone(), whole],
            &values,
            false,
        )
        .ok()
        .expect("a whole row needs no flush");
    // Without a new entry, a crash would replay the earlier one over the new bytes.
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].0.masks, vec![0xff; 3]);
}

#[test]
fn a_band_logged_again_without_a_flush_does_not_wait_for_ring_space_its_own_entries_hold() {
    let log = small_log();
    let dirty_all = |log: &GroupLog| (0..3).for_each(|m| log.table.slot(m).mark_dirty());
    // The band's first write: its entry is on the ring, its member writes still going ...
    let entries = one_sector(&log, 0).ok().expect("nothing live");
    let first = block_on(log.write(entries)).expect("room in the ring");
    // ... while writes to stripes with the same P member fill that ring up to it: the tail
    // keeps every batch from the band's entry on, whatever flushes settle meanwhile.
    for stripe in [3, 6, 9, 12] {
        let entries = one_sector(&log, stripe).ok().expect("nothing live");
        let hold = block_on(log.write(entries)).expect("room in the ring");
        dirty_all(&log);
        drop(hold);
    }
    // The band's write ends, not flushed; a rewrite needs no flush — but its entry finds the
    // ring full of batches kept for the band's own earlier entry.
    dirty_all(&log);
    drop(first);
    let entries = one_sector(&log, 0).ok().expect("a rewrite needs no flush");
    let write = log.write(entries).now_or_never();
    let hold = write.expect("written after a flush, not waiting on itself");
    assert!(hold.is_ok());
}

/// A rewrite's entry that `prepare` made but its writer has not handed to `write` yet
/// (between stage 3 and stage 4 of a stripe write, where another thread's round may run) is
/// not "taken by a round": a flush that rebases its band meanwhile must not count the band
/// for the tail from that entry. It did, and the band then pinned every batch written after
/// the entry while it looked busy (its write "in flight"): the other writers waited for room
/// it would free, and its own entry, once handed over, waited for room too — a deadlock
/// (`raid::raid50_volume_with_every_client`, fio at depth 32 over a write-back cache).
#[test]
fn a_band_rebased_before_its_writer_hands_over_its_entry_pins_no_ring_space() {
    let log = small_log();
    let dirty_all = |log: &GroupLog| (0..3).for_each(|m| log.table.slot(m).mark_dirty());
    // The band's write ends, not flushed.
    let entries = one_sector(&log, 0).ok().expect("nothing live");
    let hold = block_on(log.write(entries)).expect("room in the ring");
    dirty_all(&log);
    drop(hold);
    // Its rewrite needs no flush: prepared (the band stale), not handed over yet ...
    let rewrite = one_sector(&log, 0).ok().expect("a rewrite needs no flush");
    // ... while writes to stripes with the same P member fill the ring and flush (rebasing
    // the band) to make room.
    for stripe in (3..=60).step_by(3) {
        let entries = one_sector(&log, stripe).ok().expect("nothing live");
        let write = log.write(entries).now_or_never();
        let hold = write.unwrap_or_else(|| {
            panic!("stripe {stripe}: waits for room a band whose entry is not written holds")
        });
        assert!(hold.is_ok());
        dirty_all(&log);
    }
    let write = log.write(rewrite).now_or_never();
    let hold = write.expect("the rewrite is written, not waiting for room");
    assert!(hold.is_ok());
}

/// A round that finds no room while a done band pins the tail, and another writer that in
/// the meantime (between the round letting go of the lock and deciding what to do about it)
/// sees a flush of the members complete and retires that band: the round must still find
/// the room that frees. It decided from a second look at the state, found nothing to flush
/// and nothing in flight, and failed the pending entries — a flush on a healthy RAID 50
/// answered "the partial-parity log had no room for an entry"
/// (`daemon/tests/hang_raid50_writeback.rs`, 32 writers over a write-back cache).
#[test]
fn a_round_finding_no_room_while_another_writer_retires_the_band_pinning_it_still_writes() {
    let log = small_log();
    let dirty_all = |log: &GroupLog| (0..3).for_each(|m| log.table.slot(m).mark_dirty());
    // Band 0's entry pins the tail while writes to stripes with the same P member fill
    // that ring ...
    let entries = one_sector(&log, 0).ok().expect("nothing live");
    let first = block_on(log.write(entries)).expect("room in the ring");
    for stripe in [3, 6, 9, 12] {
        let entries = one_sector(&log, stripe).ok().expect("nothing live");
        let hold = block_on(log.write(entries)).expect("room in the ring");
        dirty_all(&log);
        drop(hold);
    }
    // ... then its write ends, not flushed: done, and a flush would settle it.
    dirty_all(&log);
    drop(first);
    let other: Rc<RefCell<Option<Prepared>>> = Rc::default();
    let theirs = Rc::clone(&other);
    super::rounds::gap::once(move |log, took| {
        assert!(!took, "the ring is full up to band 0's entry");
        // Another writer's flush of the members completes, and its next write retires every
        // band that flush settled (band 0 among them) on the way to logging its own.
        for m in 0..3 {
            let slot = log.table.slot(m);
            if let Some(target) = slot.flush_target() {
                slot.flushed(target);
            }
        }
        let entries = one_sector(log, 0)
            .ok()
            .expect("band 0 settled by the flush");
        *theirs.borrow_mut() = Some(entries);
    });
    let entries = one_sector(&log, 15).ok().expect("nothing live");
    let hold = block_on(log.write(entries));
    assert_eq!(
        hold.err(),
        None,
        "written once band 0 no longer pins the ring"
    );
    let theirs = other.borrow_mut().take().expect("the other writer ran");
    assert!(block_on(log.write(theirs)).is_ok());
}

proptest::proptest! {
    #![proptest_config(proptest::test_runner::Config::with_cases(64))]

    /// The partial parity of an entry's stored sectors is the parity of the chunks not
    /// written there (P: XOR; Q: md's syndrome, written chunks as zero), whether computed
    /// from the new bytes (reconstruct-write) or from the parity and the written chunks' bytes
    /// (read-modify-write), all before the write or all after it, into reused buffers whatever
    /// they held — against a
    /// sector-by-sector reference.
    #[test]
    fn partial_parity_is_the_parity_of_the_unwritten_chunks(
        raid6 in proptest::bool::ANY,
        stripe in 0u64..12,
        masks in proptest::collection::vec(proptest::num::u8::ANY, 4),
        seed in proptest::num::u64::ANY,
    ) {
        let (level, n) = if raid6 { (Level::Raid6, 6) } else { (Level::Raid5, 5) };
        let log = log_of(level, n, Duration::ZERO);
        let k = log.k;
        let now: Vec<u8> = masks.iter().cycle().take(k).copied().collect();
        let covered = now.iter().fold(0, |a, m| a | m);
        let full = now.iter().fold(0xff, |a, m| a & m);
        let stored = covered & !full;
        let mut x = seed | 1;
        let mut bytes = |len: usize| -> Vec<u8> {
            (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect()
        };
        let band = STRIP as usize;
        let olds: Vec<Vec<u8>> = (0..k).map(|_| bytes(band)).collect();
        let news: Vec<Vec<u8>> = (0..k)
            .map(|i| {
                let fresh = bytes(band);
                (0..band)
                    .map(|b| if now[i] >> (b / 512) & 1 == 1 { fresh[b] } else { olds[i][b] })
                    .collect()
            })
            .collect();
        let slot = &log.layout.roles(stripe).q_slot;
        fn by_slot<'a>(slot: &[usize], chunks: &'a [Vec<u8>]) -> Vec<&'a [u8]> {
            let mut v = vec![&chunks[0][..]; chunks.len()];
            for (i, c) in chunks.iter().enumerate() {
                v[slot[i]] = &c[..];
            }
            v
        }
        let (mut p, mut q) = (vec![0u8; band], vec![0u8; band]);
        crate::parity::pq_gen(&by_slot(slot, &olds), &mut p, &mut q);
        // Reference: per stored sector, the parity of the chunks not written there.
        let (mut want_p, mut want_q) = (Vec::new(), Vec::new());
        for s in (0..8).filter(|s| stored >> s & 1 == 1) {
            let r = s * 512..(s + 1) * 512;
            let kept: Vec<Vec<u8>> = (0..k)
                .map(|i| if now[i] >> s & 1 == 1 { vec![0; 512] } else { olds[i][r.clone()].to_vec() })
                .collect();
            let (mut sp, mut sq) = (vec![0u8; 512], vec![0u8; 512]);
            crate::parity::pq_gen(&by_slot(slot, &kept), &mut sp, &mut sq);
            want_p.extend(sp);
            want_q.extend(sq);
        }
        // Before the values that borrow them: a SmallVec, unlike a Vec, needs its borrows to
        // outlive it.
        let (mut new_p, mut new_q) = (vec![0u8; band], vec![0u8; band]);
        crate::parity::pq_gen(&by_slot(slot, &news), &mut new_p, &mut new_q);
        let direct = Values::Direct { chunks: news.iter().map(|c| &c[..]).collect(), r0: 0 };
        let before = Values::Delta {
            chunks: (0..k).map(|i| (now[i] != 0).then(|| (0, &olds[i][..]))).collect(),
            p: &p,
            q: raid6.then_some(&q[..]),
            r0: 0,
        };
        let after = Values::Delta {
            chunks: (0..k).map(|i| (now[i] != 0).then(|| (0, &news[i][..]))).collect(),
            p: &new_p,
            q: raid6.then_some(&new_q[..]),
            r0: 0,
        };
        for values in [direct, before, after] {
            // Reused buffers: stale bytes, any length.
            let bufs = (vec![0xa5; 777], raid6.then(|| vec![0x5a; 4096]));
            let (pp, pq) = super::partials(slot, 0, stored, &now, &values, bufs);
            proptest::prop_assert_eq!(&pp, &want_p);
            proptest::prop_assert_eq!(pq.as_ref(), raid6.then_some(&want_q));
        }
    }
}

/// Where each ring's head stands after `writes` one-sector stripe writes, each logged and
/// ended before the next (so bands settle as they go: memory members need no flush).
fn heads_after(log: &GroupLog, writes: u64) -> Vec<u64> {
    for stripe in 0..writes {
        let entries = one_sector(log, stripe % 200).ok().expect("nothing live");
        drop(block_on(log.write(entries)).expect("room in the ring"));
    }
    let st = log.state.lock();
    st.rings.iter().flatten().map(|r| r.head).collect()
}

#[test]
fn on_memory_members_the_log_cycles_through_a_window_of_its_ring() {
    let ring = 4 << 20;
    let window = super::ring::MEMORY_RING_WINDOW_BYTES;
    assert!(ring > 2 * window);
    let memory = |i: usize| MemoryMember::new(format!("m{i}"), 10 << 20);
    // Each write logs one 4 KiB batch on its stripe's P ring: 1,500 of them write 2 MiB to
    // each of the three rings, more than twice the window.
    let members = (0..3).map(|i| Arc::new(memory(i)) as Arc<dyn Member>);
    let log = log_with_rings(ring, members.collect());
    let heads = heads_after(&log, 1500);
    assert!(heads.iter().all(|&h| h <= window), "heads {heads:?}");
    // The same members behind a wrapper that does not say they are memory: the whole ring.
    let wrapped = (0..3)
        .map(|i| Arc::new(SlowMember::new(memory(i), Duration::ZERO)) as Arc<dyn Member>)
        .collect();
    let log = log_with_rings(ring, wrapped);
    let heads = heads_after(&log, 1500);
    assert!(heads.iter().any(|&h| h > window), "heads {heads:?}");
}

#[test]
fn settling_a_long_run_of_stripes_never_waits_on_its_own_entries() {
    // Rings as small as allowed, regions of 4 MiB: 1,024 stripes of 4 KiB.
    let members = (0..3)
        .map(|i| Arc::new(MemoryMember::new(format!("m{i}"), 2 << 20)) as Arc<dyn Member>)
        .collect();
    let log = log_over_regions(Level::Raid5, members, (1 << 20, 4 << 20), None);
    // Every stripe of one P ring (3 members: every third stripe), each written once: their
    // bands settled but still replayable, so a whole-stripe write over them logs entries.
    let stripes: Vec<u64> = (0..341).map(|i| i * 3).collect();
    for &s in &stripes {
        let entries = one_sector(&log, s).ok().expect("nothing live");
        drop(block_on(log.write(entries)).expect("written"));
    }
    // Their entries (40 bytes each) pass half a ring: settled a piece at a time, each piece's hold dropped
    // (its member writes done) before the next. One ticket a stripe, all held to the end,
    // filled the ring with the run's own batches and waited for itself.
    let (mut at, mut pieces) = (0, 0);
    while at < 1023 {
        let settled = (log.settle_whole(at, 1023).now_or_never())
            .expect("a piece never waits on the run's own entries");
        assert!(settled.hold.is_ok(), "logged");
        assert!(settled.end > at, "each piece settles at least one stripe");
        at = settled.end;
        pieces += 1;
    }
    assert!(pieces > 1, "341 stripes' entries do not fit one round here");
    // Every band was settled: nothing blocks a new write to any of them.
    for &s in &stripes {
        assert!(one_sector(&log, s).is_ok(), "stripe {s} left live");
    }
}

#[test]
fn a_run_with_nothing_to_settle_is_one_piece() {
    let log = small_log();
    let settled = (log.settle_whole(0, 1 << 20).now_or_never()).expect("nothing to wait for");
    assert!(settled.hold.is_ok(), "nothing to log");
    assert_eq!(settled.end, 1 << 20);
}

/// A log of `level` over `n` members (two data chunks a stripe) and 1,024 stripes of 4 KiB,
/// rings as small as allowed.
fn wide_log(level: Level, n: usize) -> GroupLog {
    let members = (0..n)
        .map(|i| Arc::new(MemoryMember::new(format!("m{i}"), 2 << 20)) as Arc<dyn Member>)
        .collect();
    log_over_regions(level, members, (1 << 20, 4 << 20), None)
}

/// Every chunk of stripe `stripe`'s only band written whole.
fn whole_band(log: &GroupLog, stripe: u64) -> Vec<(super::Entry, super::Rings)> {
    let zeros = vec![0u8; STRIP as usize];
    let values = Values::Direct {
        chunks: smallvec::smallvec![&zeros[..], &zeros[..]],
        r0: 0,
    };
    let all = vec![(0, STRIP); 2];
    log.prepare(
        stripe,
        &log.layout.roles(stripe),
        &[all.clone(), all],
        &values,
        false,
    )
    .ok()
    .expect("nothing live")
}

/// The stripes of `log` whose entries go to child `c`'s ring (its P or Q).
fn stripes_logged_on(log: &GroupLog, c: usize) -> impl Iterator<Item = u64> + '_ {
    (0..1024).filter(move |&s| {
        let roles = log.layout.roles(s);
        roles.p == c || roles.q == Some(c)
    })
}

#[test]
fn a_failed_members_ring_holds_no_band_retired() {
    for (level, n) in [(Level::Raid5, 3), (Level::Raid6, 4)] {
        let log = wide_log(level, n);
        log.table.fail(n - 1, &"unplugged");
        // A degraded array writing band after band: each settles (the rounds flush the
        // members) and is forgotten once the live rings' tails pass it — not kept for the
        // failed ring, whose tail stands still (memory grew with every band written while
        // degraded).
        for stripe in 0..1024 {
            let entries = one_sector(&log, stripe).ok().expect("nothing live");
            drop(block_on(log.write(entries)).expect("written"));
        }
        let st = log.state.lock();
        assert!(
            st.retired.len() < 128,
            "{level:?}: {} bands retired of 1,024 written",
            st.retired.len()
        );
    }
}

#[test]
fn a_ring_back_from_a_failure_is_logged_over_until_a_batch_masks_its_older_entries() {
    for (level, n) in [(Level::Raid5, 3), (Level::Raid6, 4)] {
        let log = wide_log(level, n);
        let gone = n - 1;
        let on_gone: Vec<u64> = stripes_logged_on(&log, gone).take(2).collect();
        // An entry on the member's ring, then the member fails and the others write on.
        let entries = one_sector(&log, on_gone[0]).ok().expect("nothing live");
        drop(block_on(log.write(entries)).expect("written"));
        let member = log.table.slot(gone).member();
        log.table.fail(gone, &"unplugged");
        let others: Vec<u64> = (0..1024)
            .filter(|s| !on_gone.contains(s))
            .take(600)
            .collect();
        for &stripe in &others {
            let entries = one_sector(&log, stripe).ok().expect("nothing live");
            drop(block_on(log.write(entries)).expect("written"));
        }
        // Back (re-added): its ring still holds that entry. A write replacing the band
        // whole must be logged, or the old entry stays the newest the ring replays over it.
        log.table.install(gone, member);
        let entries = whole_band(&log, on_gone[0]);
        assert!(
            !entries.is_empty(),
            "{level:?}: logged over the ring's older entry"
        );
        drop(block_on(log.write(entries)).expect("written"));
        // That batch's tail masks every older entry of the ring: whole bands go unlogged.
        assert!(
            whole_band(&log, on_gone[1]).is_empty(),
            "{level:?}: nothing to protect"
        );
    }
}

#[test]
fn a_run_of_whole_stripes_logs_a_band_for_a_ring_back_from_a_failure() {
    for (level, n) in [(Level::Raid5, 3), (Level::Raid6, 4)] {
        let log = wide_log(level, n);
        let member = log.table.slot(1).member();
        log.table.fail(1, &"unplugged");
        for stripe in 0..10 {
            let entries = one_sector(&log, stripe).ok().expect("nothing live");
            drop(block_on(log.write(entries)).expect("written"));
        }
        log.table.install(1, member);
        // Stripes never written: nothing known to settle, but member 1's ring gets a batch
        // before the run's member writes.
        let (entries, end) = log.prepare_whole(600, 700).ok().expect("nothing live");
        assert_eq!(end, 700);
        let first_on_1 = stripes_logged_on(&log, 1).find(|&s| s >= 600);
        let keys: Vec<(u64, u32)> = entries.iter().map(|(e, _)| (e.stripe, e.band)).collect();
        assert_eq!(keys, vec![(first_on_1.expect("one"), 0)], "{level:?}");
    }
}

#[test]
fn a_ring_that_gets_no_batch_holds_no_other_rings_bands_retired() {
    for (level, n) in [(Level::Raid5, 3), (Level::Raid6, 4)] {
        // 16,384 stripes (the regions may pass the members' ends: the log writes its rings).
        let members = (0..n)
            .map(|i| Arc::new(MemoryMember::new(format!("m{i}"), 2 << 20)) as Arc<dyn Member>)
            .collect();
        let log = log_over_regions(level, members, (1 << 20, 64 << 20), None);
        // Only the stripes whose entries go to child 0's ring are written: the others get
        // no batch and their tails stand still.
        let mine: Vec<u64> = (0..16384)
            .filter(|&s| {
                let r = log.layout.roles(s);
                r.p == 0 && r.q.is_none_or(|q| q == 1)
            })
            .collect();
        assert!(mine.len() > 1100, "{}", mine.len());
        // The trim waits for more bands than this test writes: lowered for it.
        log.state.lock().retired.set_cap(1000);
        for &stripe in &mine[..1100] {
            let entries = one_sector(&log, stripe).ok().expect("nothing live");
            drop(block_on(log.write(entries)).expect("written"));
        }
        let st = log.state.lock();
        assert!(
            st.retired.len() < 200,
            "{level:?}: {} bands retired of 1,100 written",
            st.retired.len(),
        );
    }
}
