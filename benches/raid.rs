//! Parity benchmark (not a test): RAID 5 and RAID 6 of 4, 8 and 24 memory members beside
//! RAID 0 of the same number of members, all in one run. Sequential 1 MiB writes (through the
//! write-back stripe cache) and full-stripe-multiple writes, sequential 1 MiB reads, random
//! 4 KiB writes (write-through: every write pays its RMW/RCW; and write-back), random 4 KiB
//! reads, and sequential 1 MiB reads with one member failed. Prints MB/s and IOPS, then the
//! issue's ratios:
//! - full-stripe sequential write / (RAID 0 × (N−p)/N)  (target ≥ 0.9)
//! - degraded sequential read / healthy sequential read  (target ≥ 0.8)
//! - random 4 KiB write IOPS (write-through) / RAID 0's  (theory 1/4 for RAID 5, 1/6 for RAID 6)
//!
//! ```sh
//! cargo bench -p nbraid-benches --bench raid        # ~1-2 minutes
//! NBRAID_BENCH_SECS=0.2 NBRAID_BENCH_SAMPLES=7 cargo bench -p nbraid-benches --bench raid
//! NBRAID_BENCH_MEMBERS=4 cargo bench -p nbraid-benches --bench raid   # one member count
//! NBRAID_BENCH_LEVELS=0,5 cargo bench -p nbraid-benches --bench raid   # some levels only
//! NBRAID_BENCH_CELLS=r0x4,r5x4 cargo bench -p nbraid-benches --bench raid  # all built, these run
//! NBRAID_BENCH_WORK="4K wb" cargo bench -p nbraid-benches --bench raid  # workloads named so
//! ```
//!
//! Each cell is measured `samples` times, interleaved across configurations, keeping the
//! median (other work on the machine then hits every configuration alike). Write cells end
//! with a FLUSH, counted in their time (it destages what the cache still holds). A last
//! table pairs the issue's ratios by round: each full-stripe write against the RAID 0 cell
//! of the same round, each degraded read against a healthy read of the same setup run just
//! before it (a second volume over the same members has member 1 failed, so the healthy
//! and the degraded read alternate instead of being measured in separate phases).
//!
//! `NBRAID_BENCH_CLOCK=cpu` divides by the process's CPU time instead of the wall time:
//! memory members make every cell pure CPU work, and on a machine shared with other work
//! CPU time per byte moves much less than wall time (the ratios compare the same cost).
//! ```sh
//! NBRAID_BENCH_CLOCK=cpu NBRAID_BENCH_WORK="seq-read 1M" cargo bench -p nbraid-benches --bench raid
//! ```
//! The members are `MemoryMember::prefaulted` (each one 2 MiB-aligned mapping of huge pages,
//! touched before the run): members of malloc'd chunks made one cell of a run slow for the
//! whole run on this project's VM, depending on the pages they got (docs/benchmarks, issue 36).
//!
//! `NBRAID_BENCH_PAYLOAD=fresh` writes each write's payload just before issuing it (as an NBD
//! payload arrives from the socket, hot in the cache); by default the payload buffers are
//! filled once, so parity generation reads them from memory.

use nbraid_benches::{cpu_seconds, drive, fill, Load};
use nbraid_core::{CacheMode, Member, MemoryMember, Volume, VolumeOptions};
use nbraid_layout::{Geometry, Level, ParityLayout, Region, Shape};
use std::sync::Arc;

const MIB: u64 = 1 << 20;
/// Logical bytes per volume (every configuration moves the same data).
const DATA: u64 = 128 * MIB;
const STRIP: u64 = 64 << 10;

#[derive(Clone, Copy, PartialEq)]
enum Work {
    SeqWrite,
    SeqWriteFull,
    SeqRead,
    RandWriteWt,
    RandWriteWb,
    RandRead,
    SeqReadFull,
    DegradedSeqRead,
    DegradedSeqReadFull,
}

const WORKS: [(Work, &str, usize); 9] = [
    (Work::SeqWrite, "seq-write 1M", 8),
    (Work::SeqWriteFull, "seq-write full", 4),
    (Work::SeqRead, "seq-read 1M", 8),
    (Work::RandWriteWt, "rand-write 4K wt", 16),
    (Work::RandWriteWb, "rand-write 4K wb", 16),
    (Work::RandRead, "rand-read 4K", 16),
    (Work::SeqReadFull, "seq-read full", 4),
    (Work::DegradedSeqRead, "degr. seq-read 1M", 8),
    (Work::DegradedSeqReadFull, "degr. seq-read full", 4),
];

struct Setup {
    name: String,
    level: Level,
    members: usize,
    /// Write-back volume (default options; members freshly zeroed, so in sync).
    wb: Volume,
    /// Write-through volume over the same members.
    wt: Volume,
    /// A volume over the same members with member 1 failed (RAID 0: never used), so a
    /// round measures the healthy and the degraded read back to back.
    degraded: Volume,
    /// Bytes of one full stripe (data only).
    width: u64,
}

fn build(level: Level, n: usize) -> Setup {
    let parity = level.parity();
    let data_members = (n - parity) as u64;
    let member_len = (DATA / data_members).div_ceil(STRIP) * STRIP + STRIP;
    let members: Vec<Arc<dyn Member>> = (0..n)
        .map(|i| {
            Arc::new(MemoryMember::prefaulted(format!("mem{i}"), member_len)) as Arc<dyn Member>
        })
        .collect();
    let shape = Shape::new(level, n, None, STRIP, ParityLayout::default()).expect("shape");
    let regions = vec![
        Region {
            start: 0,
            len: member_len
        };
        n
    ];
    let geometry = Geometry::new(shape, &regions).expect("geometry");
    let width = geometry.full_stripe_width().expect("striped");
    let opts = |cache| VolumeOptions {
        block_size: 4096,
        members_known_zero: true,
        cache,
        ..VolumeOptions::default()
    };
    let wb = Volume::new(
        geometry.clone(),
        members.clone(),
        opts(CacheMode::default()),
    )
    .expect("volume");
    let wt = Volume::new(
        geometry.clone(),
        members.clone(),
        opts(CacheMode::WriteThrough),
    )
    .expect("volume");
    let degraded = Volume::new(geometry, members, opts(CacheMode::default())).expect("volume");
    if level != Level::Raid0 {
        degraded.fail_member(1, "benchmark: degraded read");
    }
    Setup {
        name: format!("{}x{n}", level.name().replace("raid", "r")),
        level,
        members: n,
        wb,
        wt,
        degraded,
        width,
    }
}

/// Runs one cell for about `secs`; returns (bytes, ops, seconds: wall, or CPU with `cpu`).
fn run(s: &Setup, work: Work, qd: usize, secs: f64, cpu: bool) -> (u64, u64, f64) {
    let bs = match work {
        Work::SeqWriteFull | Work::SeqReadFull | Work::DegradedSeqReadFull => {
            s.width * MIB.div_ceil(s.width)
        }
        Work::RandWriteWt | Work::RandWriteWb | Work::RandRead => 4096,
        _ => MIB,
    };
    let v = match work {
        Work::RandWriteWt => &s.wt,
        Work::DegradedSeqRead | Work::DegradedSeqReadFull => &s.degraded,
        _ => &s.wb,
    };
    let load = Load {
        block: bs,
        depth: qd,
        sequential: !matches!(work, Work::RandWriteWt | Work::RandWriteWb | Work::RandRead),
        write: matches!(
            work,
            Work::SeqWrite | Work::SeqWriteFull | Work::RandWriteWt | Work::RandWriteWb
        ),
        span: DATA,
        flush_at_end: true,
        fresh_payload: std::env::var("NBRAID_BENCH_PAYLOAD").is_ok_and(|p| p == "fresh"),
    };
    let cpu0 = cpu_seconds();
    let (bytes, ops, wall) = drive(v, load, secs);
    (bytes, ops, if cpu { cpu_seconds() - cpu0 } else { wall })
}

/// (MB/s, IOPS) of one cell; `results[config][work]`.
type Results = Vec<Vec<(f64, f64)>>;
/// MB/s of every sample of one cell, in the order of the rounds; `rounds[config][work]`.
/// A degraded read's row holds, per round, its ratio to the healthy read measured just
/// before it in the same round (see [`measure`]).
type Rounds = Vec<Vec<Vec<f64>>>;

/// Every workload (those whose name contains `only`, if given) on every setup, `samples`
/// times interleaved across setups, keeping the median by MB/s. Each round of a degraded
/// read also measures the healthy read of the same setup just before it: the two then share
/// the machine's load of the moment (measured in separate phases, a load change between
/// them moved every configuration's ratio alike, by up to ±0.15).
fn measure(
    setups: &[Setup],
    samples: usize,
    secs: f64,
    only: Option<&str>,
    cpu: bool,
) -> (Results, Rounds) {
    let mut results = vec![vec![(0.0f64, 0.0f64); WORKS.len()]; setups.len()];
    let mut rounds: Rounds = vec![vec![Vec::new(); WORKS.len()]; setups.len()];
    for (wi, &(work, name, qd)) in WORKS.iter().enumerate() {
        if only.is_some_and(|w| !name.contains(w)) {
            continue;
        }
        let healthy = match work {
            Work::DegradedSeqRead => Some(Work::SeqRead),
            Work::DegradedSeqReadFull => Some(Work::SeqReadFull),
            _ => None,
        };
        let mut samples_of: Vec<Vec<(f64, f64)>> = vec![Vec::new(); setups.len()];
        let mut paired: Vec<Vec<f64>> = vec![Vec::new(); setups.len()];
        for _ in 0..samples {
            for (ci, s) in setups.iter().enumerate() {
                if healthy.is_some() && s.level == Level::Raid0 || !measured(s) {
                    continue;
                }
                let mbs = |(bytes, _, t): (u64, u64, f64)| bytes as f64 / t / 1e6;
                let before = healthy.map(|h| mbs(run(s, h, qd, secs, cpu)));
                let (bytes, ops, t) = run(s, work, qd, secs, cpu);
                samples_of[ci].push((bytes as f64 / t / 1e6, ops as f64 / t));
                paired[ci].extend(before.map(|h| bytes as f64 / t / 1e6 / h));
            }
        }
        for (ci, mut v) in samples_of.into_iter().enumerate() {
            if v.is_empty() {
                continue;
            }
            rounds[ci][wi] = match healthy {
                Some(_) => std::mem::take(&mut paired[ci]),
                None => v.iter().map(|s| s.0).collect(),
            };
            v.sort_by(|a, b| a.0.total_cmp(&b.0));
            results[ci][wi] = v[v.len() / 2];
        }
    }
    (results, rounds)
}

/// Whether `NBRAID_BENCH_CELLS` (setup names, "r0x4,r5x4") leaves `s` measured: every setup
/// is still built and filled, so a profile of a few cells sees the process as a full run has it.
fn measured(s: &Setup) -> bool {
    std::env::var("NBRAID_BENCH_CELLS").map_or(true, |v| v.split(',').any(|x| x.trim() == s.name))
}

/// The issue's ratios round by round: a full-stripe write against the RAID 0 of the same
/// round (measured back to back with it), a degraded read against the healthy read just
/// before it. The median (and range) of those ratios moves less between runs than the ratio
/// of the medians, which pairs cells measured up to a phase apart.
fn print_paired(setups: &[Setup], rounds: &Rounds) {
    let col = |w: Work| WORKS.iter().position(|x| x.0 == w).expect("work");
    println!("\nratios paired by round: median (min–max)");
    println!(
        "{:<8} {:>24} {:>24} {:>24}",
        "config", "seq-write full / ideal", "degraded 1M / 1M", "degraded full / full"
    );
    let cell = |mut ratios: Vec<f64>| {
        if ratios.is_empty() {
            return "-".to_string();
        }
        ratios.sort_by(f64::total_cmp);
        let (lo, mid, hi) = (
            ratios[0],
            ratios[ratios.len() / 2],
            ratios[ratios.len() - 1],
        );
        format!("{mid:.2} ({lo:.2}–{hi:.2})")
    };
    for (ci, s) in setups.iter().enumerate() {
        if s.level == Level::Raid0 {
            continue;
        }
        let Some(r0) = raid0_of(setups, s).map(|r| &rounds[r][col(Work::SeqWriteFull)]) else {
            continue;
        };
        let keep = (s.members - s.level.parity()) as f64 / s.members as f64;
        let full: Vec<f64> = rounds[ci][col(Work::SeqWriteFull)]
            .iter()
            .zip(r0)
            .map(|(r, r0)| r / (r0 * keep))
            .collect();
        println!(
            "{:<8} {:>24} {:>24} {:>24}",
            s.name,
            cell(full),
            cell(rounds[ci][col(Work::DegradedSeqRead)].clone()),
            cell(rounds[ci][col(Work::DegradedSeqReadFull)].clone()),
        );
    }
}

/// The index of the RAID 0 setup of `s`'s member count, if it is measured.
fn raid0_of(setups: &[Setup], s: &Setup) -> Option<usize> {
    setups
        .iter()
        .position(|r| r.level == Level::Raid0 && r.members == s.members)
}

/// The table: a row per workload, a column per setup.
fn print_results(setups: &[Setup], results: &Results) {
    print!("\n{:<18} {:>3} ", "workload", "qd");
    for s in setups {
        print!("{:>9}", s.name);
    }
    println!();
    for (wi, &(work, name, qd)) in WORKS.iter().enumerate() {
        let seq = !matches!(work, Work::RandWriteWt | Work::RandWriteWb | Work::RandRead);
        print!("{name:<18} {qd:>3} ");
        for r in results {
            let (mbs, iops) = r[wi];
            if mbs == 0.0 {
                print!("{:>9}", "-");
            } else if seq {
                print!("{mbs:>9.0}");
            } else {
                print!("{:>8.1}k", iops / 1000.0);
            }
        }
        println!();
    }
    println!("(sequential rows in MB/s, random rows in IOPS; \"full\" = requests of whole stripes, the smallest multiple of the stripe ≥ 1 MiB; degraded = member 1 failed)");
}

/// The issue's ratios of each parity setup against its RAID 0 of the same member count.
fn print_ratios(setups: &[Setup], results: &Results) {
    println!("\nratios (targets: full-stripe write ≥ 0.9 of RAID 0 × (N−p)/N; degraded read ≥ 0.8 of healthy; random write theory 1/4 RAID 5, 1/6 RAID 6)");
    println!(
        "{:<8} {:>22} {:>22} {:>18} {:>20} {:>18}",
        "config",
        "seq-write full / ideal",
        "seq-write 1M / ideal",
        "degraded 1M / 1M",
        "degraded full / full",
        "rand-write wt / r0"
    );
    let col = |w: Work| WORKS.iter().position(|x| x.0 == w).expect("work");
    for (ci, s) in setups.iter().enumerate() {
        if s.level == Level::Raid0 {
            continue;
        }
        let Some(r0) = raid0_of(setups, s).map(|r| &results[r]) else {
            continue;
        };
        let r = &results[ci];
        let p = s.level.parity() as f64;
        let n = s.members as f64;
        let ideal = |w: Work| r0[col(w)].0 * (n - p) / n;
        println!(
            "{:<8} {:>22.2} {:>22.2} {:>18.2} {:>20.2} {:>18.3}",
            s.name,
            r[col(Work::SeqWriteFull)].0 / ideal(Work::SeqWriteFull),
            r[col(Work::SeqWrite)].0 / ideal(Work::SeqWrite),
            r[col(Work::DegradedSeqRead)].0 / r[col(Work::SeqRead)].0,
            r[col(Work::DegradedSeqReadFull)].0 / r[col(Work::SeqReadFull)].0,
            r[col(Work::RandWriteWt)].1 / r0[col(Work::RandWriteWt)].1,
        );
    }
}

fn main() {
    let secs: f64 = std::env::var("NBRAID_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0.1);
    let samples: usize = std::env::var("NBRAID_BENCH_SAMPLES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5)
        .max(1);
    println!(
        "nbraid parity benchmark: memory members, median of {samples} interleaved samples of {secs} s per cell, strip {} KiB, {} MiB of data per volume, write-back cache {} MiB",
        STRIP >> 10,
        DATA >> 20,
        match CacheMode::default() {
            CacheMode::WriteBack { bytes } => bytes >> 20,
            CacheMode::WriteThrough => 0,
        }
    );
    // NBRAID_BENCH_MEMBERS=8 limits the run to one member count (for profiling).
    let counts: Vec<usize> = match std::env::var("NBRAID_BENCH_MEMBERS") {
        Ok(v) => v.split(',').filter_map(|x| x.trim().parse().ok()).collect(),
        Err(_) => vec![4, 8, 24],
    };
    // NBRAID_BENCH_WORK="4K wb" runs only the workloads whose name contains it (profiling).
    let only = std::env::var("NBRAID_BENCH_WORK").ok();
    // NBRAID_BENCH_LEVELS=0,5 limits the run to those levels (profiling one of them).
    let levels: Vec<Level> = match std::env::var("NBRAID_BENCH_LEVELS") {
        Ok(v) => [(0, Level::Raid0), (5, Level::Raid5), (6, Level::Raid6)]
            .into_iter()
            .filter(|(n, _)| v.split(',').any(|x| x.trim().parse() == Ok(*n)))
            .map(|(_, l)| l)
            .collect(),
        Err(_) => vec![Level::Raid0, Level::Raid5, Level::Raid6],
    };
    let mut setups = Vec::new();
    for &n in &counts {
        for &level in &levels {
            let s = build(level, n);
            fill(&s.wb, DATA, 0x5a);
            setups.push(s);
        }
    }
    let cpu = std::env::var("NBRAID_BENCH_CLOCK").is_ok_and(|c| c == "cpu");
    if cpu {
        println!(
            "rates per CPU second of the process (NBRAID_BENCH_CLOCK=cpu), not per wall second"
        );
    }
    let (results, rounds) = measure(&setups, samples, secs, only.as_deref(), cpu);
    print_results(&setups, &results);
    print_ratios(&setups, &results);
    print_paired(&setups, &rounds);
    if std::env::var("NBRAID_BENCH_ROUNDS").is_ok() {
        print_rounds(&setups, &rounds);
    }
}

/// Every round's MB/s (a degraded read's row: its ratio to the healthy read before it), in
/// the order of the rounds: `NBRAID_BENCH_ROUNDS=1`, to see which cell of a ratio moved.
fn print_rounds(setups: &[Setup], rounds: &Rounds) {
    println!("\nrounds");
    for (ci, s) in setups.iter().enumerate() {
        for (wi, &(_, name, _)) in WORKS.iter().enumerate() {
            let r = &rounds[ci][wi];
            if !r.is_empty() {
                let cells: Vec<String> = r.iter().map(|x| format!("{x:.2}")).collect();
                println!("{:<8} {name:<20} {}", s.name, cells.join(" "));
            }
        }
    }
}
