//! Silent corruption and power loss in one seeded schedule (`sim/corrupt_power.rs`): flipped
//! bytes, misdirected writes and wrong reads on at most the tolerated members per stripe row,
//! while requests run and power is lost at a seeded point; after the reopen every flushed
//! write reads back (in-flight ones old or new), nothing reads as an error, no member is
//! failed, a repair scrub repairs all it names without changing what the volume reads, and a
//! second scrub finds nothing. RAID 1, 5, 6, 10 and RAID 5 over mirrored pairs; strips of
//! 4 KiB, 64 KiB and 1 MiB. `NBRAID_SOAK=N` runs N times the seeds; `NBRAID_SEED` one.

mod common;
mod sim;

use common::{seeds, SeedGuard, KIB, MIB};
use nbraid_core::checksum::area_bytes;
use nbraid_core::metadata::METADATA_AREA_BYTES;
use nbraid_layout::{Level, Node, ParityLayout, Region, Shape};
use sim::corrupt_power::{run_corrupt_power, CorruptPowerCase, CorruptPowerStats};

/// Two checksum groups (2 MiB each) per member: a hot half written, a cold half corrupted.
const REGION: u64 = 4 * MIB;
const SEEDS: u64 = 4;
const STRIPS: [u64; 3] = [4 * KIB, 64 * KIB, MIB];

fn start() -> u64 {
    METADATA_AREA_BYTES + area_bytes(REGION)
}

fn case(
    name: String,
    tree: Node,
    members: usize,
    strip: u64,
    tolerance: usize,
) -> CorruptPowerCase {
    CorruptPowerCase {
        name,
        tree,
        members,
        member_len: start() + REGION,
        region_start: start(),
        region_len: REGION,
        row_bytes: strip,
        tolerance,
    }
}

fn level(level: Level, members: usize, strip: u64, tolerance: usize) -> CorruptPowerCase {
    let shape =
        Shape::new(level, members, None, strip, ParityLayout::LeftSymmetric).expect("shape");
    let regions = vec![
        Region {
            start: start(),
            len: REGION
        };
        members
    ];
    let tree = shape.build(&regions).expect("tree");
    case(
        format!("{level:?} x{members} strip {strip}"),
        tree,
        members,
        strip,
        tolerance,
    )
}

fn run(test: &'static str, cases: Vec<CorruptPowerCase>) {
    let mut total = CorruptPowerStats::default();
    for c in &cases {
        for seed in seeds(&c.name, SEEDS) {
            let _g = SeedGuard { test, seed };
            match run_corrupt_power(c, seed) {
                Ok(s) => total.add(&s),
                Err(e) => panic!("{}, seed {seed}: {e}", c.name),
            }
        }
    }
    eprintln!("{test}: {total:?}");
    assert!(total.corruptions > 0, "{test}: corruption was injected");
    assert!(total.findings > 0, "{test}: the scrubs found some of it");
}

#[test]
fn raid1_corruption_and_power_loss() {
    run(
        "raid1_corruption_and_power_loss",
        STRIPS
            .iter()
            .map(|&s| level(Level::Raid1, 2, s, 1))
            .collect(),
    );
}

#[test]
fn raid5_corruption_and_power_loss() {
    run(
        "raid5_corruption_and_power_loss",
        STRIPS
            .iter()
            .map(|&s| level(Level::Raid5, 4, s, 1))
            .collect(),
    );
}

#[test]
fn raid6_corruption_and_power_loss() {
    run(
        "raid6_corruption_and_power_loss",
        STRIPS
            .iter()
            .map(|&s| level(Level::Raid6, 5, s, 2))
            .collect(),
    );
}

#[test]
fn raid10_corruption_and_power_loss() {
    run(
        "raid10_corruption_and_power_loss",
        STRIPS
            .iter()
            .map(|&s| level(Level::Raid10, 4, s, 1))
            .collect(),
    );
}

#[test]
fn nested_corruption_and_power_loss() {
    let cases = STRIPS
        .iter()
        .map(|&s| {
            let tree = common::raid5_of_pairs(s, start(), REGION);
            case(format!("raid5 of pairs strip {s}"), tree, 6, s, 1)
        })
        .collect();
    run("nested_corruption_and_power_loss", cases);
}
