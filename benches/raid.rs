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
//! NBRAID_BENCH_WORK="4K wb" cargo bench -p nbraid-benches --bench raid  # workloads named so
//! ```
//!
//! Each cell is measured `samples` times, interleaved across configurations, keeping the
//! median (other work on the machine then hits every configuration alike). Write cells end
//! with a FLUSH, counted in their time (it destages what the cache still holds).
//!
//! `NBRAID_BENCH_CLOCK=cpu` divides by the process's CPU time instead of the wall time:
//! memory members make every cell pure CPU work, and on a machine shared with other work
//! CPU time per byte moves much less than wall time (the ratios compare the same cost).
//! ```sh
//! NBRAID_BENCH_CLOCK=cpu NBRAID_BENCH_WORK="seq-read 1M" cargo bench -p nbraid-benches --bench raid
//! ```
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
    /// Bytes of one full stripe (data only).
    width: u64,
}

fn build(level: Level, n: usize) -> Setup {
    let parity = level.parity();
    let data_members = (n - parity) as u64;
    let member_len = (DATA / data_members).div_ceil(STRIP) * STRIP + STRIP;
    let members: Vec<Arc<dyn Member>> = (0..n)
        .map(|i| Arc::new(MemoryMember::new(format!("mem{i}"), member_len)) as Arc<dyn Member>)
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
    let wt = Volume::new(geometry, members, opts(CacheMode::WriteThrough)).expect("volume");
    Setup {
        name: format!("{}x{n}", level.name().replace("raid", "r")),
        level,
        members: n,
        wb,
        wt,
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

/// Every workload (those whose name contains `only`, if given) on every setup, `samples`
/// times interleaved across setups, keeping the median by MB/s.
fn measure(setups: &[Setup], samples: usize, secs: f64, only: Option<&str>, cpu: bool) -> Results {
    let mut results = vec![vec![(0.0f64, 0.0f64); WORKS.len()]; setups.len()];
    for (wi, &(work, name, qd)) in WORKS.iter().enumerate() {
        if only.is_some_and(|w| !name.contains(w)) {
            continue;
        }
        let degraded = matches!(work, Work::DegradedSeqRead | Work::DegradedSeqReadFull);
        if work == Work::DegradedSeqRead {
            for s in setups {
                if s.level != Level::Raid0 {
                    s.wb.fail_member(1, "benchmark: degraded read");
                }
            }
        }
        let mut samples_of: Vec<Vec<(f64, f64)>> = vec![Vec::new(); setups.len()];
        for _ in 0..samples {
            for (ci, s) in setups.iter().enumerate() {
                if degraded && s.level == Level::Raid0 {
                    continue;
                }
                let (bytes, ops, t) = run(s, work, qd, secs, cpu);
                samples_of[ci].push((bytes as f64 / t / 1e6, ops as f64 / t));
            }
        }
        for (ci, mut v) in samples_of.into_iter().enumerate() {
            if v.is_empty() {
                continue;
            }
            v.sort_by(|a, b| a.0.total_cmp(&b.0));
            results[ci][wi] = v[v.len() / 2];
        }
    }
    results
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
        let r0 = &results[ci - if s.level == Level::Raid5 { 1 } else { 2 }];
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
    let mut setups = Vec::new();
    for &n in &counts {
        for level in [Level::Raid0, Level::Raid5, Level::Raid6] {
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
    let results = measure(&setups, samples, secs, only.as_deref(), cpu);
    print_results(&setups, &results);
    print_ratios(&setups, &results);
}
