//! A member whose writes start failing partway through a run of whole stripes that settles
//! the log in pieces (`settle_in_pieces.rs`): a data member in the middle of the run, or the
//! member holding the ring the pieces' entries go to, at the second piece's batch (RAID 6:
//! the P ring's member, or both the P and the Q ring's, so no ring takes that piece — the
//! zeroing zeroes it anyway and settles on, the whole-stripe write is written again stripe
//! by stripe). The run ends within tolerance, the array records the member failed, the
//! volume reads degraded as the run left it, and after a crash the dirty start — without the
//! failed member, and (within tolerance) without the member holding the chunks the logged
//! writes did not touch — replays nothing wrong.

mod common;
mod settle;

use common::{KIB, MIB};
use nbraid_core::metadata::Absence;
use nbraid_core::{CacheMode, Member};
use settle::*;
use std::sync::Arc;

/// RAID 5 of 3 with a 32 KiB reserve: ~400 entries a piece, the 1,200 in three.
const RAID5_SMALL_LOG: Geo = Geo {
    log_reserve: 32 * KIB,
    ..RAID5
};

/// The run a member dies in.
#[derive(Clone, Copy, Debug)]
enum Run {
    /// The whole volume zeroed (write-through).
    Zeroing,
    /// The whole volume written in write-back (whole stripes, straight to the members) and
    /// flushed.
    Destage,
}

/// A member of the volume and where its writes start failing.
#[derive(Clone, Copy, Debug)]
enum Dies {
    /// At its second write into its ring: the second piece's batch.
    AtTheSecondBatch(usize),
    /// Partway through the run's writes into its region: in the zeroing, at the second
    /// piece's (one zeroing a piece); in the destage, at a third of the volume's stripes
    /// (one write a stripe; in the second piece, over these geometries).
    Partway(usize),
}

impl Dies {
    fn member(self) -> usize {
        match self {
            Dies::AtTheSecondBatch(m) | Dies::Partway(m) => m,
        }
    }
}

/// The member holding data chunks of the logged stripes their writes did not touch.
fn untouched(geo: &Geo) -> usize {
    let roles = geo.group().roles(geo.written_stripes()[0]);
    *roles.data.last().expect("a data chunk")
}

/// The member holding the Q ring of the logged stripes (RAID 6).
fn q_ring(geo: &Geo) -> usize {
    let roles = geo.group().roles(geo.written_stripes()[0]);
    roles.q.expect("a Q")
}

/// Fills the volume of `geo`, fills its P (and Q) ring with replayable entries (P on member
/// 0), has `deaths` happen during `run`, and checks what the run and a dirty start after it
/// leave.
fn dies_partway(geo: &Geo, run: Run, deaths: &[Dies]) {
    let _alone = alone();
    let what = format!("{:?} {run:?}, {deaths:?}", geo.level);
    let members = dying_members(geo);
    let dyns: Vec<Arc<dyn Member>> = (members.iter())
        .map(|m| m.clone() as Arc<dyn Member>)
        .collect();
    let cache = match run {
        Run::Zeroing => CacheMode::WriteThrough,
        Run::Destage => CacheMode::WriteBack { bytes: 64 * MIB },
    };
    let a = Arc::new(create(geo, cache, &dyns));
    let mut image = fill(&a);
    write_one_ring(geo, &a, &mut image);
    let stripes = a.volume().capacity() / geo.group().stripe_width();
    for &d in deaths {
        let m = &members[d.member()];
        match (d, run) {
            (Dies::AtTheSecondBatch(_), _) => m.arm(geo.ring(), 1),
            (Dies::Partway(_), Run::Zeroing) => m.arm(geo.data(), 1),
            (Dies::Partway(_), Run::Destage) => m.arm(geo.data(), stripes / 3),
        }
    }
    let (want, settled, r) = match run {
        Run::Zeroing => {
            let (settled, r) = zero_all(&a);
            (vec![0u8; image.len()], settled, r)
        }
        Run::Destage => write_all(&a),
    };
    r.unwrap_or_else(|e| panic!("{what}: within tolerance the run succeeds: {e}"));
    let mut dead: Vec<usize> = deaths.iter().map(|d| d.member()).collect();
    dead.sort_unstable();
    for (m, member) in members.iter().enumerate() {
        let died = dead.contains(&m);
        assert_eq!(member.died(), died, "{what}: member {m}'s writes failed");
        assert_eq!(
            a.volume().member_is_failed(m),
            died,
            "{what}: member {m} recorded failed"
        );
    }
    // The second piece was settled, whatever became of its batch. A zeroing settles every
    // piece after it too while a ring is left for them; a whole-stripe write whose piece
    // failed is written again stripe by stripe, each stripe logged as its own write decides.
    assert!(settled.rounds >= 2, "{what}: {settled:?}");
    let rings_left = match geo.level.parity() {
        1 => !dead.contains(&0),
        _ => !(dead.contains(&0) && dead.contains(&q_ring(geo))),
    };
    if matches!(run, Run::Zeroing) && rings_left {
        assert!(
            settled.entries >= geo.entries(),
            "{what}: the run settled {} of {} entries ({settled:?})",
            settled.entries,
            geo.entries()
        );
    }
    reads_back(geo, &a, &want).unwrap_or_else(|e| panic!("{what}: read degraded: {e}"));

    drop(
        Arc::try_unwrap(a)
            .ok()
            .expect("the run's thread is done with the array"),
    );
    // Within tolerance, the member whose chunks a wrong replay would rebuild wrong is left
    // out too, and then P's (RAID 6: those chunks are rebuilt from Q, as Q's ring left it).
    let mut without = dead.clone();
    for m in [untouched(geo), 0] {
        if without.len() < geo.level.parity() && !without.contains(&m) {
            without.push(m);
        }
    }
    without.sort_unstable();
    let lost: Vec<usize> = without
        .iter()
        .filter(|m| !dead.contains(m))
        .copied()
        .collect();
    let (a, report) = reopen(geo, cache, &dyns, &lost);
    assert!(
        !report.was_clean && report.absent_roles == without,
        "{what}: {report:?}"
    );
    for &m in &dead {
        assert!(
            matches!(report.roles[m], Err(Absence::Failed { .. })),
            "{what}: member {m} is recorded failed: {report:?}"
        );
    }
    reads_back(geo, &a, &want)
        .unwrap_or_else(|e| panic!("{what}: after a crash, without members {without:?}: {e}"));
}

#[test]
fn raid5_zeroing_when_a_data_member_dies_partway() {
    let geo = RAID5_SMALL_LOG;
    dies_partway(&geo, Run::Zeroing, &[Dies::Partway(untouched(&geo))]);
}

#[test]
fn raid5_zeroing_when_the_ring_member_dies_at_the_second_piece() {
    dies_partway(&RAID5_SMALL_LOG, Run::Zeroing, &[Dies::AtTheSecondBatch(0)]);
}

#[test]
fn raid5_destage_when_a_data_member_dies_partway() {
    let geo = RAID5_SMALL_LOG;
    dies_partway(&geo, Run::Destage, &[Dies::Partway(untouched(&geo))]);
}

#[test]
fn raid5_destage_when_the_ring_member_dies_at_the_second_piece() {
    dies_partway(&RAID5_SMALL_LOG, Run::Destage, &[Dies::AtTheSecondBatch(0)]);
}

#[test]
fn raid6_zeroing_when_a_data_member_dies_partway() {
    dies_partway(&RAID6, Run::Zeroing, &[Dies::Partway(untouched(&RAID6))]);
}

#[test]
fn raid6_zeroing_when_the_p_ring_member_dies_at_the_second_piece() {
    dies_partway(&RAID6, Run::Zeroing, &[Dies::AtTheSecondBatch(0)]);
}

#[test]
fn raid6_zeroing_when_both_ring_members_die_at_the_second_piece() {
    let both = [
        Dies::AtTheSecondBatch(0),
        Dies::AtTheSecondBatch(q_ring(&RAID6)),
    ];
    dies_partway(&RAID6, Run::Zeroing, &both);
}

#[test]
fn raid6_destage_when_a_data_member_dies_partway() {
    dies_partway(&RAID6, Run::Destage, &[Dies::Partway(untouched(&RAID6))]);
}

#[test]
fn raid6_destage_when_the_p_ring_member_dies_at_the_second_piece() {
    dies_partway(&RAID6, Run::Destage, &[Dies::AtTheSecondBatch(0)]);
}

#[test]
fn raid6_destage_when_both_ring_members_die_at_the_second_piece() {
    let both = [
        Dies::AtTheSecondBatch(0),
        Dies::AtTheSecondBatch(q_ring(&RAID6)),
    ];
    dies_partway(&RAID6, Run::Destage, &both);
}
