//! The durability simulator over every level (see `sim/mod.rs`): seeded schedules of
//! concurrent overlapping requests, out-of-order member completions, member faults within
//! tolerance and a crash at a random point. A failure prints its seed; `NBRAID_SEED=<n>`
//! replays it exactly (`NBRAID_SIM_TRACE=1` beside it prints the plan and every answer);
//! `NBRAID_SOAK=1` runs 100× more schedules.

mod common;
mod sim;

use common::{named, KIB};
use nbraid_layout::{Geometry, Level, Node, ParityLayout};
use sim::run::{run, Case, Stats};

/// Member region of every case: 16 strips of 4 KiB (small, so requests collide).
const MEMBER_LEN: u64 = 64 * KIB;
const STRIP: u64 = 4 * KIB;

fn case(name: &'static str, level: Level, members: usize, spans: Option<usize>) -> Case {
    Case {
        name,
        geometry: named(level, members, spans, STRIP, MEMBER_LEN),
        members,
        member_len: MEMBER_LEN,
    }
}

fn leaf(i: usize) -> Node {
    Node::member(i, 0, MEMBER_LEN)
}

/// Schedules per case by default (×100 with `NBRAID_SOAK`; exactly `NBRAID_SIM_SCHEDULES`
/// when set).
fn schedules(default: u64) -> u64 {
    if let Some(n) = std::env::var("NBRAID_SIM_SCHEDULES")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        return n;
    }
    if std::env::var_os("NBRAID_SOAK").is_some() {
        default * 100
    } else {
        default
    }
}

fn simulate(case: Case, default: u64) {
    let seeds: Vec<u64> = match std::env::var("NBRAID_SEED") {
        Ok(s) => vec![s.trim().parse().expect("NBRAID_SEED is a u64")],
        Err(_) => {
            let base = case.name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
            });
            (0..schedules(default))
                .map(|i| base.wrapping_add(i * 7919))
                .collect()
        }
    };
    let mut total = Stats::default();
    for seed in seeds {
        match run(&case, seed) {
            Ok(s) => total.add(&s),
            Err(e) => panic!(
                "\n*** simulation `{}` broke a rule with seed {seed}: {e}\n*** replay: NBRAID_SEED={seed} cargo test -p nbraid-core --test simulate {}\n",
                case.name,
                test_name(case.name)
            ),
        }
    }
    eprintln!("{}: {total:?}", case.name);
    assert!(total.sectors_checked > 0, "nothing was checked");
}

fn test_name(case: &str) -> String {
    case.replace([' ', '-'], "_")
}

const PER_CASE: u64 = 1500;

#[test]
fn jbod() {
    simulate(case("jbod", Level::Jbod, 3, None), PER_CASE);
}

#[test]
fn raid0() {
    simulate(case("raid0", Level::Raid0, 3, None), PER_CASE);
}

#[test]
fn raid1() {
    simulate(case("raid1", Level::Raid1, 3, None), PER_CASE);
}

#[test]
fn raid5() {
    simulate(case("raid5", Level::Raid5, 4, None), PER_CASE);
}

#[test]
fn raid6() {
    simulate(case("raid6", Level::Raid6, 5, None), PER_CASE);
}

#[test]
fn raid10() {
    simulate(case("raid10", Level::Raid10, 4, None), PER_CASE);
}

#[test]
fn raid50() {
    simulate(case("raid50", Level::Raid50, 6, Some(2)), PER_CASE);
}

#[test]
fn raid60() {
    simulate(case("raid60", Level::Raid60, 8, Some(2)), PER_CASE);
}

#[test]
fn parity_over_mirrors() {
    let tree = Node::parity(
        STRIP,
        1,
        ParityLayout::LeftSymmetric,
        (0..3)
            .map(|m| Node::mirror(vec![leaf(2 * m), leaf(2 * m + 1)]).expect("mirror"))
            .collect(),
    )
    .expect("parity");
    simulate(
        Case {
            name: "parity_over_mirrors",
            geometry: Geometry::from_tree(tree),
            members: 6,
            member_len: MEMBER_LEN,
        },
        PER_CASE,
    );
}

/// A seed replays exactly: the same schedule, the same requests, the same outcome.
#[test]
fn a_seed_replays_exactly() {
    let c = case("raid6 replay", Level::Raid6, 5, None);
    for seed in 0..40 {
        let a = run(&c, seed).expect("schedule passes");
        let b = run(&c, seed).expect("schedule passes");
        assert_eq!(a, b, "seed {seed} ran differently twice");
    }
}
