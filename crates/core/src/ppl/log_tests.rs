//! The log writer's bookkeeping, driven by hand (memory members complete at once): ring
//! space a slow writer's band must not pin, and writers that wait instead of spinning.

use super::{Blocked, GroupLog, Values};
use crate::member::Member;
use crate::memory::MemoryMember;
use crate::node::MemberTable;
use crate::ppl::{min_ring_bytes, parity_groups, PplSetup};
use futures::executor::block_on;
use futures::FutureExt;
use nbraid_layout::{Level, ParityLayout, Region, Shape};
use std::sync::Arc;

const STRIP: u64 = 4096;

/// The log of a 3-member RAID 5 (4 KiB strips) whose rings are as small as allowed: two
/// batches fill one.
fn small_log() -> GroupLog {
    let regions = vec![
        Region {
            start: 1 << 20,
            len: 1 << 20
        };
        3
    ];
    let root = Shape::new(Level::Raid5, 3, None, STRIP, ParityLayout::LeftSymmetric)
        .expect("shape")
        .build(&regions)
        .expect("tree");
    let (group, _) = parity_groups(&root).remove(0);
    let ring = min_ring_bytes(&group);
    let members: Vec<Arc<dyn Member>> = (0..3)
        .map(|i| Arc::new(MemoryMember::new(format!("m{i}"), 2 << 20)) as Arc<dyn Member>)
        .collect();
    let setup = PplSetup {
        life: 1,
        areas: vec![Some((0, ring)); 3],
    };
    GroupLog::new(
        &setup,
        0,
        &group,
        vec![0, 1, 2],
        Arc::new(MemberTable::new(members)),
    )
    .expect("rings large enough")
}

/// The first sector of data chunk 0 written, the rest of the stripe zero.
fn one_sector(log: &GroupLog, stripe: u64) -> Result<Vec<(super::Entry, Vec<usize>)>, Blocked> {
    let zeros = vec![0u8; STRIP as usize];
    let values = Values::Direct {
        chunks: vec![&zeros[..], &zeros[..]],
        r0: 0,
    };
    log.prepare(stripe, &[vec![(0, 512)], vec![]], &values)
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
fn a_writer_learns_its_entries_are_written_without_the_writer_lock() {
    let log = small_log();
    let entries = one_sector(&log, 3).ok().expect("nothing live");
    let mut write = Box::pin(log.write(entries));
    // Another writer leads a round (holds the writer lock) ...
    let leader = log.writer.try_lock().expect("free");
    assert!(
        write.as_mut().now_or_never().is_none(),
        "queued, not written"
    );
    // ... which takes the queued entries: the waiting writer ends while the lock is held.
    assert!(block_on(log.write_round()).is_none());
    let hold = write
        .as_mut()
        .now_or_never()
        .expect("ended without the lock");
    assert!(hold.is_ok());
    drop(leader);
}
