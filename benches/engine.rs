//! Engine benchmark (not a test): sequential 1 MiB and random 4 KiB reads and writes at queue
//! depths 1, 8 and 32, for RAID 0 and RAID 10 of 2, 4 and 8 members, each beside a single
//! member measured in the same run, over memory members, over files on /dev/shm through
//! io_uring, and over simulated devices (`dev`: one op at a time, 100 µs + 1 GB/s — the backend
//! where striping has device time to overlap). Prints MB/s, IOPS and the ratios to the single
//! member.
//!
//! ```sh
//! cargo bench -p nbraid-benches --bench engine            # everything (~1-2 minutes)
//! cargo bench -p nbraid-benches --bench engine -- shm     # only one backend (mem | shm | dev | disk)
//! NBRAID_BENCH_SECS=0.2 NBRAID_BENCH_SAMPLES=5 cargo bench -p nbraid-benches --bench engine
//! NBRAID_BENCH_DIR=/var/tmp cargo bench ... -- disk      # files on a disk file system
//! ```
//!
//! "RAID 10 of 2" is a 2-way mirror (RAID 10 needs two spans; with two members md's raid10
//! is a mirror too). Volumes hold the same 256 MiB of data whatever the member count, so
//! every configuration moves the same bytes.

use nbraid_benches::{drive, fill, Load, SimDevice};
use nbraid_core::{DirectIo, FileOptions, Member, MemoryMember, UringFile, Volume, VolumeOptions};
use nbraid_layout::{Geometry, Level, Node, ParityLayout, Region, Shape};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

const MIB: u64 = 1 << 20;
const DATA: u64 = 256 * MIB;
const STRIP: u64 = 64 << 10;
/// A simulated device: 100 µs per op plus 1 GB/s of transfer, one op at a time.
const SIM_LATENCY: Duration = Duration::from_micros(100);
const SIM_BYTES_PER_SEC: f64 = 1e9;

#[derive(Clone, Copy, PartialEq)]
enum Backend {
    Mem,
    Shm,
    Disk,
    /// Simulated devices (`SimDevice`): one op at a time, latency plus transfer time.
    Dev,
}

impl Backend {
    fn name(self) -> &'static str {
        match self {
            Backend::Mem => "mem",
            Backend::Shm => "shm",
            Backend::Disk => "disk",
            Backend::Dev => "dev",
        }
    }
}

#[derive(Clone, Copy)]
struct Config {
    name: &'static str,
    level: Option<Level>,
    members: usize,
}

const CONFIGS: [Config; 7] = [
    Config {
        name: "single",
        level: None,
        members: 1,
    },
    Config {
        name: "r0x2",
        level: Some(Level::Raid0),
        members: 2,
    },
    Config {
        name: "r0x4",
        level: Some(Level::Raid0),
        members: 4,
    },
    Config {
        name: "r0x8",
        level: Some(Level::Raid0),
        members: 8,
    },
    Config {
        name: "r10x2",
        level: Some(Level::Raid1),
        members: 2,
    },
    Config {
        name: "r10x4",
        level: Some(Level::Raid10),
        members: 4,
    },
    Config {
        name: "r10x8",
        level: Some(Level::Raid10),
        members: 8,
    },
];

#[derive(Clone, Copy, PartialEq)]
enum Work {
    SeqWrite,
    SeqRead,
    RandWrite,
    RandRead,
}

const WORKS: [(Work, &str, u64); 4] = [
    (Work::SeqWrite, "seq-write 1M", MIB),
    (Work::SeqRead, "seq-read 1M", MIB),
    (Work::RandWrite, "rand-write 4K", 4096),
    (Work::RandRead, "rand-read 4K", 4096),
];
const DEPTHS: [usize; 3] = [1, 8, 32];

struct Setup {
    volume: Volume,
    _dir: Option<tempfile::TempDir>,
}

fn build(backend: Backend, cfg: Config, dir_base: &PathBuf) -> Setup {
    let data_members = match cfg.level {
        None | Some(Level::Raid1) => 1,
        Some(Level::Raid0) => cfg.members,
        Some(_) => cfg.members / 2,
    } as u64;
    let member_len = (DATA / data_members).div_ceil(STRIP) * STRIP;
    let dir = matches!(backend, Backend::Shm | Backend::Disk)
        .then(|| tempfile::tempdir_in(dir_base).expect("temp dir"));
    let members: Vec<Arc<dyn Member>> = (0..cfg.members)
        .map(|i| -> Arc<dyn Member> {
            match &dir {
                None if backend == Backend::Dev => Arc::new(SimDevice::new(
                    format!("dev{i}"),
                    member_len,
                    SIM_LATENCY,
                    SIM_BYTES_PER_SEC,
                )),
                None => Arc::new(MemoryMember::new(format!("mem{i}"), member_len)),
                Some(d) => Arc::new(
                    UringFile::open_with(
                        d.path().join(format!("m{i}.img")),
                        Some(member_len),
                        FileOptions {
                            direct: DirectIo::Auto,
                            engine: None,
                        },
                    )
                    .expect("open member file"),
                ),
            }
        })
        .collect();
    let geometry = match cfg.level {
        None => Geometry::from_tree(Node::member(0, 0, member_len)),
        Some(level) => {
            let spans = level.has_spans().then_some(cfg.members / 2);
            let shape = Shape::new(level, cfg.members, spans, STRIP, ParityLayout::default())
                .expect("shape");
            Geometry::new(
                shape,
                &vec![
                    Region {
                        start: 0,
                        len: member_len
                    };
                    cfg.members
                ],
            )
            .expect("geometry")
        }
    };
    let volume = Volume::new(geometry, members, VolumeOptions::default()).expect("volume");
    Setup { volume, _dir: dir }
}

/// Runs one cell for about `secs`; returns (bytes, ops, seconds).
fn run(v: &Volume, work: Work, bs: u64, qd: usize, secs: f64) -> (u64, u64, f64) {
    let load = Load {
        block: bs,
        depth: qd,
        sequential: matches!(work, Work::SeqRead | Work::SeqWrite),
        write: matches!(work, Work::SeqWrite | Work::RandWrite),
        span: DATA,
        flush_at_end: false,
        fresh_payload: false,
    };
    drive(v, load, secs)
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let secs: f64 = std::env::var("NBRAID_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0.05);
    let samples: usize = std::env::var("NBRAID_BENCH_SAMPLES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5)
        .max(1);
    let wanted = |b: Backend| {
        if args.is_empty() {
            b != Backend::Disk
        } else {
            args.iter().any(|a| a == b.name())
        }
    };
    println!(
        "nbraid engine benchmark: median of {samples} interleaved samples of {secs} s per cell, strip {} KiB, {} MiB of data per volume, read policy least-pending",
        STRIP >> 10,
        DATA >> 20
    );
    for backend in [Backend::Mem, Backend::Shm, Backend::Dev, Backend::Disk] {
        if !wanted(backend) {
            continue;
        }
        let base = match backend {
            Backend::Disk => PathBuf::from(
                std::env::var("NBRAID_BENCH_DIR").unwrap_or_else(|_| "/var/tmp".into()),
            ),
            _ => PathBuf::from("/dev/shm"),
        };
        // Every configuration is built up front, and each cell is measured `samples` times,
        // interleaved across configurations, keeping the median: a neighbour's burst of CPU
        // use then hits all configurations alike instead of one.
        let setups: Vec<Setup> = CONFIGS
            .iter()
            .map(|cfg| {
                let s = build(backend, *cfg, &base);
                fill(&s.volume, DATA, 0);
                s
            })
            .collect();
        // results[config][work][depth] = (MB/s, IOPS)
        let mut results =
            vec![vec![vec![(0.0f64, 0.0f64); DEPTHS.len()]; WORKS.len()]; CONFIGS.len()];
        for (wi, (work, _, bs)) in WORKS.iter().enumerate() {
            for (di, &qd) in DEPTHS.iter().enumerate() {
                let mut samples_of: Vec<Vec<(f64, f64)>> = vec![Vec::new(); CONFIGS.len()];
                for _ in 0..samples {
                    for (ci, setup) in setups.iter().enumerate() {
                        let (bytes, ops, t) = run(&setup.volume, *work, *bs, qd, secs);
                        samples_of[ci].push((bytes as f64 / t / 1e6, ops as f64 / t));
                    }
                }
                for (ci, mut v) in samples_of.into_iter().enumerate() {
                    v.sort_by(|a, b| a.0.total_cmp(&b.0));
                    results[ci][wi][di] = v[v.len() / 2];
                }
            }
        }
        drop(setups);
        println!("\n== backend: {} ==", backend.name());
        print!("{:<14} {:>3} ", "workload", "qd");
        for c in CONFIGS {
            print!("{:>9}", c.name);
        }
        println!("   | r0x2/1 r0x4/1 r0x8/1 | r10x2/1 r10x4/1 r10x8/1");
        for (wi, (work, name, _)) in WORKS.iter().enumerate() {
            let seq = matches!(work, Work::SeqRead | Work::SeqWrite);
            for (di, qd) in DEPTHS.iter().enumerate() {
                print!("{name:<14} {qd:>3} ");
                let val = |ci: usize| {
                    let (mbs, iops) = results[ci][wi][di];
                    if seq {
                        mbs
                    } else {
                        iops
                    }
                };
                for ci in 0..CONFIGS.len() {
                    if seq {
                        print!("{:>9.0}", val(ci));
                    } else {
                        print!("{:>8.1}k", val(ci) / 1000.0);
                    }
                }
                let single = val(0).max(1e-9);
                print!("   |");
                for ci in 1..=3 {
                    print!(" {:>6.2}", val(ci) / single);
                }
                print!(" |");
                for ci in 4..=6 {
                    print!(" {:>7.2}", val(ci) / single);
                }
                println!();
            }
        }
        println!("(sequential rows in MB/s, random rows in IOPS; ratios = configuration / single member)");
    }
}
