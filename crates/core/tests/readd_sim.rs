//! The re-add of a returning member in the deterministic crash simulator (see
//! `sim/readd.rs`): a member goes away, writes go on, it answers again and is re-added and
//! resynced over the bitmap while requests go on; some schedules kill another member or take
//! the returning one away again during the resync, and every schedule ends in a power loss
//! (before, during or after the resync) and a reopen, after which it is re-added again if it
//! is not current. A failure prints its seed; `NBRAID_SEED=<n>` replays it; `NBRAID_SOAK=1`
//! runs 100× more; `NBRAID_SIM_SCHEDULES` sets the count.

mod common;
mod sim;

use common::KIB;
use nbraid_core::metadata::METADATA_AREA_BYTES;
use nbraid_layout::{Level, ParityLayout, Region, Shape};
use sim::crash::CrashCase;
use sim::readd::{run_readd, ReaddStats};

const REGION: u64 = 64 * KIB;
const STRIP: u64 = 4 * KIB;
const SCHEDULES: u64 = 100;

fn case(name: &'static str, level: Level, members: usize) -> CrashCase {
    let shape =
        Shape::new(level, members, None, STRIP, ParityLayout::LeftSymmetric).expect("shape");
    let region = Region {
        start: METADATA_AREA_BYTES,
        len: REGION,
    };
    CrashCase {
        name,
        tree: shape.build(&vec![region; members]).expect("tree"),
        members,
        member_len: METADATA_AREA_BYTES + REGION,
        ppl: true,
        strict: true,
        log_reserve: 0,
        sequential: false,
    }
}

fn schedules() -> u64 {
    if let Some(n) = std::env::var("NBRAID_SIM_SCHEDULES")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        return n;
    }
    if std::env::var_os("NBRAID_SOAK").is_some() {
        SCHEDULES * 100
    } else {
        SCHEDULES
    }
}

fn simulate(case: CrashCase) {
    let seeds: Vec<u64> = match std::env::var("NBRAID_SEED") {
        Ok(s) => vec![s.trim().parse().expect("NBRAID_SEED is a u64")],
        Err(_) => (0..schedules())
            .map(|i| 0x7ead_0000 + i * 104_729)
            .collect(),
    };
    let mut total = ReaddStats::default();
    for seed in seeds {
        match run_readd(&case, seed) {
            Ok(s) => total.add(&s),
            Err(e) => panic!(
                "\n*** re-add simulation `{}` broke a rule with seed {seed}: {e}\n*** replay: NBRAID_SEED={seed} cargo test -p nbraid-core --test readd_sim {}\n",
                case.name, case.name
            ),
        }
    }
    eprintln!("{}: {total:?}", case.name);
    assert!(total.sectors_checked > 0 && total.rejoined == total.runs);
    assert!(
        total.runs < 50
            || (total.resyncs > 0
                && total.crashes_before_current > 0
                && total.crashes_after_current > 0
                && total.went_away_again > 0),
        "some schedules resync, lose power before and after the member is current, take it away again: {total:?}"
    );
}

#[test]
fn raid1() {
    simulate(case("raid1", Level::Raid1, 3));
}

#[test]
fn raid5() {
    simulate(case("raid5", Level::Raid5, 4));
}

#[test]
fn raid6() {
    simulate(case("raid6", Level::Raid6, 5));
}

#[test]
fn raid10() {
    simulate(case("raid10", Level::Raid10, 4));
}
