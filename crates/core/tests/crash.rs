//! Power-loss points with on-disk metadata (see `sim/crash.rs`): at least 200 seeded crashes
//! per level during mixed writes, each reopened by superblock with the bitmap's resync, some
//! with a member deleted first, some with a member pulled and a spare rebuilt into its role
//! (power lost mid-rebuild, the rebuild resumed from its checkpoint after the reopen), some
//! with a healthy member replaced by the spare; also over declared trees (RAID 5 over
//! mirrored pairs; a mirror of RAID 5 groups). A failure prints its seed; `NBRAID_SEED=<n>` replays it;
//! `NBRAID_SOAK=1` runs 100× more; `NBRAID_SIM_SCHEDULES` sets the count.

mod common;
mod sim;

use common::KIB;
use nbraid_core::metadata::METADATA_AREA_BYTES;
use nbraid_layout::{Level, Node, ParityLayout, Region, Shape};
use sim::crash::{run_crash, CrashCase, CrashStats};

const REGION: u64 = 64 * KIB;
const STRIP: u64 = 4 * KIB;
const POINTS: u64 = 200;

fn case(name: &'static str, level: Level, members: usize, spans: Option<usize>) -> CrashCase {
    case_with_reserve(name, level, members, spans, 0)
}

/// [`case`] with the log in a reserve of `log_reserve` bytes before the regions (0: in the
/// metadata area).
fn case_with_reserve(
    name: &'static str,
    level: Level,
    members: usize,
    spans: Option<usize>,
    log_reserve: u64,
) -> CrashCase {
    let shape =
        Shape::new(level, members, spans, STRIP, ParityLayout::LeftSymmetric).expect("shape");
    case_over(name, shape, (REGION, log_reserve))
}

/// [`case`] over strips of 128 KiB (regions of 2 MiB): a stripe write whose rows lie 64 KiB
/// or more apart (a request across a chunk boundary, a cache's sparse writes) is carried out
/// as separate runs of rows, each logged on its own.
fn wide_case(name: &'static str, level: Level, members: usize) -> CrashCase {
    let shape =
        Shape::new(level, members, None, 128 * KIB, ParityLayout::LeftSymmetric).expect("shape");
    case_over(name, shape, (2048 * KIB, 0))
}

/// A logged case over `shape`'s members, each a region of `region` bytes after the metadata
/// area and a log reserve of `log_reserve` bytes (0: the log in the metadata area).
fn case_over(name: &'static str, shape: Shape, (region, log_reserve): (u64, u64)) -> CrashCase {
    let start = METADATA_AREA_BYTES + log_reserve;
    let regions = vec![Region { start, len: region }; shape.members];
    CrashCase {
        name,
        tree: shape.build(&regions).expect("tree"),
        members: shape.members,
        member_len: start + region,
        ppl: true,
        strict: true,
        log_reserve,
        sequential: false,
    }
}

fn points() -> u64 {
    if let Some(n) = std::env::var("NBRAID_SIM_SCHEDULES")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        return n;
    }
    if std::env::var_os("NBRAID_SOAK").is_some() {
        POINTS * 100
    } else {
        POINTS
    }
}

fn crash(case: CrashCase) {
    let seeds: Vec<u64> = match std::env::var("NBRAID_SEED") {
        Ok(s) => vec![s.trim().parse().expect("NBRAID_SEED is a u64")],
        Err(_) => (0..points()).map(|i| 0x5eed_0000 + i * 104_729).collect(),
    };
    let mut total = CrashStats::default();
    let joined_before = nbraid_core::raid::joined_writes();
    let split_before = nbraid_core::raid::split_stripe_writes();
    for seed in seeds {
        match run_crash(&case, seed) {
            Ok(s) => total.add(&s),
            Err(e) => panic!(
                "\n*** crash simulation `{}` broke a rule with seed {seed}: {e}\n*** replay: NBRAID_SEED={seed} cargo test -p nbraid-core --test crash {}\n",
                case.name, case.name
            ),
        }
    }
    eprintln!(
        "{}: {total:?}; log so far (all tests of this process): {:?}; joined writes: {}",
        case.name,
        nbraid_core::ppl::stats(),
        nbraid_core::raid::joined_writes()
    );
    assert!(total.sectors_checked > 0 && total.reopened_dirty > 0);
    // Process-wide (other tests add to it): a floor, that the simulator reaches joining.
    assert!(
        !case.sequential || total.runs < 50 || nbraid_core::raid::joined_writes() > joined_before,
        "a sequential writer's write-through writes were joined into others (`raid/join.rs`)"
    );
    assert!(
        total.runs < 50
            || (total.rebuilds_completed > 0
                && total.rebuilds_resumed > 0
                && total.replaced_at_reopen > 0),
        "some schedules rebuild a spare, some resume it from a checkpoint after the crash, some replace a member"
    );
    assert!(
        total.runs < 50
            || !matches!(case.name, "raid1" | "raid10" | "raid5" | "raid6" | "raid50")
            || (total.background_resyncs > 0
                && total.background_crashes > 0
                && total.background_member_deaths > 0
                && total.background_requests > 0),
        "some schedules resync in the background with requests going on, some lose power or a member during it"
    );
    assert!(
        total.runs < 50 || (total.scrub_crashes > 0 && total.scrubs_resumed > 0),
        "some schedules lose power during a scrub and resume it from its checkpoint"
    );
    assert!(
        !case.name.ends_with("-wide")
            || total.runs < 50
            || nbraid_core::raid::split_stripe_writes() > split_before,
        "some stripe writes were carried out as separate runs of rows"
    );
    assert!(
        total.resynced_bytes < total.full_resync_bytes,
        "the bitmap resynced no less than full resyncs would"
    );
    // A parity group over mirrors is not logged (`raid5_of_mirrors`): nothing to replay.
    if case.ppl && !nbraid_core::ppl::parity_groups(&case.tree).is_empty() {
        assert!(
            total.runs < 50
                || (total.sectors_write_hole_checked > 0 && total.ppl_entries_replayed > 0),
            "the write-hole check was exercised: sectors rebuilt from torn stripes, log entries replayed"
        );
    }
}

#[test]
fn raid1() {
    crash(case("raid1", Level::Raid1, 3, None));
}

#[test]
fn raid5() {
    crash(case("raid5", Level::Raid5, 4, None));
}

#[test]
fn raid6() {
    crash(case("raid6", Level::Raid6, 5, None));
}

/// RAID 5 and 6 over strips wide enough that stripe writes split into runs of rows. (The
/// split count is process-wide: run alone, each case shows its own splits.)
#[test]
fn raid5_over_wide_strips() {
    crash(wide_case("raid5-wide", Level::Raid5, 4));
}

#[test]
fn raid6_over_wide_strips() {
    crash(wide_case("raid6-wide", Level::Raid6, 5));
}

/// The log in a reserve before the regions (`write_hole_log_size`), small enough (32 KiB:
/// a few 4 KiB-strip entries) that its ring wraps and fills again and again.
#[test]
fn raid6_with_the_log_before_the_region() {
    crash(case_with_reserve(
        "raid6-log-reserve",
        Level::Raid6,
        5,
        None,
        32 * KIB,
    ));
}

/// RAID 5 and 6 with a sequential writer among the random requests: its writes meet in
/// stripes, left unflushed by the one before (the log's writes without a flush first:
/// `needs_no_flush`).
#[test]
fn raid5_with_a_sequential_writer() {
    crash(CrashCase {
        sequential: true,
        ..case("raid5-sequential", Level::Raid5, 4, None)
    });
}

#[test]
fn raid6_with_a_sequential_writer() {
    crash(CrashCase {
        sequential: true,
        ..case("raid6-sequential", Level::Raid6, 6, None)
    });
}

#[test]
fn raid10() {
    crash(case("raid10", Level::Raid10, 4, None));
}

#[test]
fn raid60() {
    crash(case("raid60", Level::Raid60, 8, Some(2)));
}

/// The guard that the write-hole check is real: without the partial-parity log, some crash
/// followed by a lost member rebuilds bytes nobody wrote, and the same check catches it.
#[test]
fn raid5_without_the_log_is_caught_in_the_write_hole() {
    let case = CrashCase {
        ppl: false,
        ..case("raid5-no-ppl", Level::Raid5, 4, None)
    };
    let caught = (0..points())
        .map(|i| 0x5eed_0000 + i * 104_729)
        .find_map(|seed| run_crash(&case, seed).err());
    let e = caught.expect("no seed showed the write hole without the log: the check is not real");
    assert!(e.contains("after the crash"), "caught something else: {e}");
    // Not the refusal of the dirty degraded start (its words say "after the crash" too):
    // the reopen forces it, to read what it serves.
    assert!(
        !e.contains("not shut down clean"),
        "refused, not caught: {e}"
    );
}

#[test]
fn raid50() {
    crash(case("raid50", Level::Raid50, 6, Some(2)));
}

/// A declared tree: `tree` over `members` leaves, each a region after the metadata area.
fn declared(
    name: &'static str,
    members: usize,
    tree: impl Fn(&dyn Fn(usize) -> Node) -> Node,
) -> CrashCase {
    let leaf = |i: usize| Node::member(i, METADATA_AREA_BYTES, REGION);
    CrashCase {
        name,
        tree: tree(&leaf),
        members,
        member_len: METADATA_AREA_BYTES + REGION,
        ppl: true,
        strict: true,
        log_reserve: 0,
        sequential: false,
    }
}

/// A mirror of two RAID 5 groups (a declared tree; each group logged): it resyncs before
/// serving after an unclean stop.
fn mirror_of_raid5s_case() -> CrashCase {
    declared("mirror-of-raid5s", 6, |leaf| {
        let group = |first: usize| {
            let members = (first..first + 3).map(leaf).collect();
            Node::parity(STRIP, 1, ParityLayout::LeftSymmetric, members).expect("parity")
        };
        Node::mirror(vec![group(0), group(3)]).expect("mirror")
    })
}

/// RAID 5 over mirrored pairs (a declared tree). A parity group over mirrors is not logged
/// (docs/FORMAT.md): its write hole opens only when both copies of a pair are lost after a
/// crash, so write-hole sectors are counted here, not checked; everything else is.
fn raid5_of_mirrors_case() -> CrashCase {
    let case = declared("raid5-of-mirrors", 6, |leaf| {
        let pairs = (0..3)
            .map(|m| Node::mirror(vec![leaf(2 * m), leaf(2 * m + 1)]).expect("mirror"))
            .collect();
        Node::parity(STRIP, 1, ParityLayout::LeftSymmetric, pairs).expect("parity")
    });
    CrashCase {
        ppl: false,
        strict: false,
        ..case
    }
}

/// 1000 schedules pass. The six seeds that failed at 1000 before (1624846868, 1625684700,
/// 1636052871, 1672708021, 1682447818, 1685066043) found two engine bugs: a failed write's
/// older cached bytes coming back over it (`raid.rs::a_write_a_parity_group_fails_…`), and
/// a read error that cost a degraded stripe its redundancy noted only in memory
/// (`raid.rs::a_read_error_that_costs_a_degraded_stripe_its_redundancy_fails_the_member`).
#[test]
fn mirror_of_raid5s() {
    crash(mirror_of_raid5s_case());
}

#[test]
fn raid5_of_mirrors() {
    crash(raid5_of_mirrors_case());
}

/// Runs the schedules of both declared trees (`NBRAID_SIM_SCHEDULES`, default 200) and
/// prints every failing seed with a short reason, instead of stopping at the first.
#[test]
#[ignore = "a survey: prints failing seeds"]
fn declared_survey() {
    let mut failed = 0;
    for case in [mirror_of_raid5s_case(), raid5_of_mirrors_case()] {
        let mut bad = 0;
        for i in 0..points() {
            let seed = 0x5eed_0000 + i * 104_729;
            if let Err(e) = run_crash(&case, seed) {
                bad += 1;
                let short: String = e.chars().take(150).collect();
                eprintln!("{} {seed}: {short} ...", case.name);
            }
        }
        eprintln!("{}: {bad} of {} failed", case.name, points());
        failed += bad;
    }
    assert_eq!(failed, 0, "some schedules failed (listed above)");
}
