//! The crash simulator (`sim/crash.rs`) with per-block checksums on: power lost at 100 seeded
//! points per level while requests, flushes, member deaths, scrubs and heals run; after the
//! reopen every flushed write reads back, every view of the copies and parity agrees — so no
//! block whose checksum lagged its data at the power loss reads as a checksum error, and no
//! read or scrub "repairs" good bytes into others. RAID 1, 5, 6 and 10, and RAID 5 with its
//! log in a reserve too.

mod common;
mod sim;

use common::KIB;
use nbraid_core::checksum::area_bytes;
use nbraid_core::metadata::METADATA_AREA_BYTES;
use nbraid_layout::{Level, ParityLayout, Region, Shape};
use sim::crash::{run_crash, CrashCase, CrashStats};

const REGION: u64 = 64 * KIB;
const STRIP: u64 = 4 * KIB;
const POINTS: u64 = 100;

fn case(name: &'static str, level: Level, members: usize, log_reserve: u64) -> CrashCase {
    let shape =
        Shape::new(level, members, None, STRIP, ParityLayout::LeftSymmetric).expect("shape");
    let sums = area_bytes(REGION);
    let start = METADATA_AREA_BYTES + sums + log_reserve;
    let regions = vec![Region { start, len: REGION }; members];
    CrashCase {
        name,
        tree: shape.build(&regions).expect("tree"),
        members,
        member_len: start + REGION,
        ppl: true,
        strict: true,
        log_reserve,
        sequential: false,
    }
}

fn crash(case: CrashCase) {
    let points = std::env::var("NBRAID_SIM_SCHEDULES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(POINTS);
    let seeds: Vec<u64> = match std::env::var("NBRAID_SEED") {
        Ok(s) => vec![s.trim().parse().expect("NBRAID_SEED is a u64")],
        Err(_) => (0..points).map(|i| 0x5a5a_0000 + i * 104_729).collect(),
    };
    let mut total = CrashStats::default();
    for seed in seeds {
        match run_crash(&case, seed) {
            Ok(s) => total.add(&s),
            Err(e) => panic!(
                "\n*** crash simulation `{}` (checksums on) broke a rule with seed {seed}: {e}\n*** replay: NBRAID_SEED={seed} cargo test -p nbraid-core --test crash_checksum {}\n",
                case.name, case.name
            ),
        }
    }
    eprintln!("{}: {total:?}", case.name);
}

#[test]
fn raid1_checksums() {
    crash(case("raid1_checksums", Level::Raid1, 2, 0));
}

#[test]
fn raid5_checksums() {
    crash(case("raid5_checksums", Level::Raid5, 3, 0));
}

#[test]
fn raid5_checksums_log_in_reserve() {
    crash(case(
        "raid5_checksums_log_in_reserve",
        Level::Raid5,
        4,
        256 * KIB,
    ));
}

#[test]
fn raid6_checksums() {
    crash(case("raid6_checksums", Level::Raid6, 4, 0));
}

#[test]
fn raid10_checksums() {
    crash(case("raid10_checksums", Level::Raid10, 4, 0));
}
