//! A run of whole stripes over more log entries than one batch takes — a zeroing, and a
//! write-back destage of whole stripes — settles the log a piece at a time and writes each
//! piece before settling the next: it ends, and every byte reads back as written. Logged a
//! batch a stripe with every entry held until the run's end, such a run waited forever for
//! ring room only its own end would free. Over RAID 5, RAID 6 (its P and Q rings both fill)
//! and 64 KiB strips (a piece ends between stripes of 16 entries each). After each run the
//! volume is opened again dirty (a crash) without a member holding chunks the logged writes
//! did not touch: what the log replays there leaves every byte as the run wrote it.
//! Members that fail partway through such a run: `settle_in_pieces_failing.rs`.

mod common;
mod settle;

use common::{KIB, MIB};
use nbraid_core::metadata::Array;
use nbraid_core::ppl::codec::{Entry, BATCH_HEADER_BYTES};
use nbraid_core::ppl::LogStats;
use nbraid_core::{CacheMode, Member};
use nbraid_layout::Level;
use settle::*;
use std::sync::Arc;

/// RAID 5 of 3 with 64 KiB strips and the smallest reserve the config takes for them (two
/// of a strip's worth of entries with partial parity: 140 KiB, ~1,790 entries a piece);
/// 250 stripes written in their data chunk 0 whole, 16 entries each: ~111 stripes a piece.
const BIG_STRIP: Geo = Geo {
    level: Level::Raid5,
    members: 3,
    strip: 64 * KIB,
    log_reserve: 140 * KIB,
    region: 48 * MIB,
    written: 250,
    each: 64 * KIB,
};

const WRITE_BACK: CacheMode = CacheMode::WriteBack { bytes: 64 * MIB };

/// The log's counts of a run over `geo`: every entry its writes left settled, in pieces
/// of whole stripes whose entries fit half a ring (at least as many rounds as that takes),
/// each round a batch on the P ring (and the Q ring).
fn settled_in_pieces(geo: &Geo, run: &str, settled: &LogStats) {
    assert!(
        settled.entries >= geo.entries(),
        "{geo:?}: the {run} settled {} of {} entries: not a run the log had to settle ({settled:?})",
        settled.entries,
        geo.entries()
    );
    let k = geo.members - geo.level.parity();
    let half_ring = (geo.log_reserve / 2) as usize - BATCH_HEADER_BYTES;
    let per_stripe = geo.entries() / geo.written;
    let stripes_a_piece = (half_ring / Entry::whole_encoded_len(k)) as u64 / per_stripe;
    let pieces = geo.written.div_ceil(stripes_a_piece);
    assert!(
        pieces >= 2 && settled.rounds >= pieces,
        "{geo:?}: the {run} settled {} entries in {} round(s), not in {pieces} pieces of at most {stripes_a_piece} stripes",
        settled.entries,
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

#[test]
fn zeroing_with_64k_strips_settles_pieces_of_many_stripes() {
    let need = nbraid_layout::log_ring_bytes(&BIG_STRIP.group());
    assert_eq!(
        BIG_STRIP.log_reserve, need,
        "the smallest reserve the config takes"
    );
    zeroing(&BIG_STRIP);
}

#[test]
fn write_back_destage_with_64k_strips_settles_pieces_of_many_stripes() {
    destage(&BIG_STRIP);
}
