//! A run of whole stripes over more log entries than one batch takes — a zeroing, and a
//! write-back destage of whole stripes — settles the log a piece at a time and writes each
//! piece before settling the next: it ends, and every byte reads back as written. Logged a
//! batch a stripe with every entry held until the run's end, such a run waited forever for
//! ring room only its own end would free. Over RAID 5 and RAID 6 (its P and Q rings both
//! fill). After each run the volume is opened again dirty (a crash) without a member holding
//! chunks the logged writes did not touch: what the log replays there leaves every byte as
//! the run wrote it.

mod common;
mod settle;

use common::MIB;
use nbraid_core::metadata::Array;
use nbraid_core::ppl::LogStats;
use nbraid_core::{CacheMode, Member};
use settle::*;
use std::sync::Arc;

const WRITE_BACK: CacheMode = CacheMode::WriteBack { bytes: 64 * MIB };

/// The log's counts of a run over `geo`: every entry its writes left settled, in more than
/// one round, each round a batch on the P ring (and the Q ring).
fn settled_in_pieces(geo: &Geo, run: &str, settled: &LogStats) {
    assert!(
        settled.entries >= geo.entries(),
        "{geo:?}: the {run} settled {} of {} entries: not a run the log had to settle ({settled:?})",
        settled.entries,
        geo.entries()
    );
    assert!(
        settled.rounds >= 2,
        "{geo:?}: the {run} settled its entries in {} round(s), not in pieces",
        settled.rounds
    );
    let rings = geo.level.parity() as u64;
    assert_eq!(
        settled.batches,
        rings * settled.rounds,
        "{geo:?}: each piece of the {run} goes to the P ring (and the Q ring): {settled:?}"
    );
}

/// Drops `a` with its records dirty (a crash) and opens the volume again from `members`
/// but one holding data chunks of the logged stripes their writes did not touch — the
/// chunks a replay of their old partial parity over the new bytes would rebuild wrong (no
/// resync rewrites the parity of a degraded start) — and reads it whole.
fn after_a_crash(
    geo: &Geo,
    cache: CacheMode,
    a: Arc<Array>,
    members: &[Arc<dyn Member>],
    want: &[u8],
) {
    drop(
        Arc::try_unwrap(a)
            .ok()
            .expect("the run's thread is done with the array"),
    );
    let roles = geo.group().roles(geo.written_stripes()[0]);
    let untouched = *roles.data.last().expect("a data chunk");
    let (a, report) = reopen(geo, cache, members, &[untouched]);
    assert!(
        !report.was_clean && report.absent_roles == [untouched],
        "{report:?}"
    );
    reads_back(geo, &a, want)
        .unwrap_or_else(|e| panic!("{geo:?} after a crash, without member {untouched}: {e}"));
}

/// Zeroes the whole volume of `geo` over a ring full of replayable entries.
fn zeroing(geo: &Geo) {
    let _alone = alone();
    let members = memory_members(geo);
    let a = Arc::new(create(geo, CacheMode::WriteThrough, &members));
    let mut image = fill(&a);
    write_one_ring(geo, &a, &mut image);
    let (settled, r) = zero_all(&a);
    r.expect("zeroed");
    settled_in_pieces(geo, "zeroing", &settled);
    let zeroes = vec![0u8; image.len()];
    reads_back(geo, &a, &zeroes).unwrap_or_else(|e| panic!("{geo:?}: every byte zero: {e}"));
    after_a_crash(geo, CacheMode::WriteThrough, a, &members, &zeroes);
}

/// Writes the whole volume of `geo` in write-back (whole stripes, straight to the members)
/// and flushes it, over a ring full of replayable entries.
fn destage(geo: &Geo) {
    let _alone = alone();
    let members = memory_members(geo);
    let a = Arc::new(create(geo, WRITE_BACK, &members));
    let mut image = fill(&a);
    write_one_ring(geo, &a, &mut image);
    let (want, settled, r) = write_all(&a);
    r.expect("written and destaged");
    settled_in_pieces(geo, "destage", &settled);
    reads_back(geo, &a, &want).unwrap_or_else(|e| panic!("{geo:?}: every byte as written: {e}"));
    after_a_crash(geo, WRITE_BACK, a, &members, &want);
}

#[test]
fn zeroing_a_volume_over_a_ring_full_of_replayable_entries_ends() {
    zeroing(&RAID5);
}

#[test]
fn a_write_back_destage_of_whole_stripes_over_a_ring_full_of_replayable_entries_ends() {
    destage(&RAID5);
}

#[test]
fn raid6_zeroing_over_full_p_and_q_rings_ends() {
    zeroing(&RAID6);
}

#[test]
fn raid6_write_back_destage_over_full_p_and_q_rings_ends() {
    destage(&RAID6);
}
