//! What per-block checksums cost the engine itself (issue 33), without a kernel in the way:
//! two RAID 5 volumes of six memory members (64 KiB strips), one with checksums and one
//! without, filled alike, then the four cells of `scripts/bench-checksums` — 4 KiB random
//! reads and writes at QD 16, 1 MiB sequential writes and reads at QD 8 — run on one volume
//! then the other, round after round, each cell timed by the process's CPU clock (the bench
//! is one thread: memory members answer inline). Prints per cell the median on/off ratio of
//! I/Os per CPU second and the CPU nanoseconds an I/O took on each, so a change to the
//! checksum path shows as nanoseconds per I/O, not as a ratio lost in the machine's noise.
//!
//! ```sh
//! cargo bench -p nbraid-benches --bench checksum_cost
//! NBRAID_BENCH_ROUNDS=15 NBRAID_BENCH_SECS=0.3 NBRAID_BENCH_WORK=rand-read cargo bench -p nbraid-benches --bench checksum_cost
//! NBRAID_BENCH_SIDE=on perf record … # one volume only (a profile of its path)
//! ```
//!
//! Memory members copy with `memcpy` in this process: the cells' copies are as cheap as a
//! copy gets, so the checksums' share is larger here than on any device.

use nbraid_benches::{cpu_seconds, drive, env_f64, fill, median, spread, Load};
use nbraid_core::checksum::{area_bytes, ChecksumArea, ChecksumSetup};
use nbraid_core::{Member, MemoryMember, Volume, VolumeOptions};
use nbraid_layout::{Geometry, Level, ParityLayout, Region, Shape};
use std::sync::Arc;

const MIB: u64 = 1 << 20;
const STRIP: u64 = 64 << 10;
const MEMBERS: usize = 6;
/// Region bytes per member: 320 MiB of data per volume, past the CPU caches.
const REGION: u64 = 64 * MIB;

struct Cell {
    name: &'static str,
    load: Load,
}

fn cells(span: u64) -> Vec<Cell> {
    let load = |block, depth, sequential, write| Load {
        block,
        depth,
        sequential,
        write,
        span,
        flush_at_end: true,
        fresh_payload: false,
    };
    vec![
        Cell {
            name: "rand-read 4K qd16",
            load: load(4096, 16, false, false),
        },
        Cell {
            name: "rand-write 4K qd16",
            load: load(4096, 16, false, true),
        },
        Cell {
            name: "seq-write 1M qd8",
            load: load(MIB, 8, true, true),
        },
        Cell {
            name: "seq-read 1M qd8",
            load: load(MIB, 8, true, false),
        },
    ]
}

/// A RAID 5 of memory members, each member's checksum area (when `checksums`) after its region.
fn volume(checksums: bool) -> Volume {
    let area = area_bytes(REGION);
    let members: Vec<Arc<dyn Member>> = (0..MEMBERS)
        .map(|i| Arc::new(MemoryMember::new(format!("m{i}"), REGION + area)) as Arc<dyn Member>)
        .collect();
    let shape =
        Shape::new(Level::Raid5, MEMBERS, None, STRIP, ParityLayout::default()).expect("shape");
    let regions = vec![
        Region {
            start: 0,
            len: REGION
        };
        MEMBERS
    ];
    let geometry = Geometry::new(shape, &regions).expect("geometry");
    let areas = (0..MEMBERS)
        .map(|_| {
            Some(ChecksumArea {
                offset_bytes: REGION,
                len_bytes: area,
            })
        })
        .collect();
    let opts = VolumeOptions {
        block_size: 4096,
        members_known_zero: true,
        checksums: checksums.then(|| ChecksumSetup::new("bench", areas, true)),
        ..VolumeOptions::default()
    };
    Volume::new(geometry, members, opts).expect("volume")
}

fn main() {
    let rounds = env_f64("NBRAID_BENCH_ROUNDS", 9.0) as usize;
    let secs = env_f64("NBRAID_BENCH_SECS", 0.25);
    let only = std::env::var("NBRAID_BENCH_WORK").ok();
    let side = std::env::var("NBRAID_BENCH_SIDE").ok();
    let (on, off) = (volume(true), volume(false));
    let span = on.capacity().min(off.capacity());
    for v in [&on, &off] {
        fill(v, span, 0x5a);
    }
    println!(
        "checksum cost in the engine: RAID 5 × {MEMBERS} memory members, {} MiB per volume, {rounds} rounds of {secs} s per cell and volume, CPU clock",
        span / MIB
    );
    println!(
        "{:<20} {:>9} {:>12} {:>12} {:>10}",
        "cell", "on/off", "ns/IO on", "ns/IO off", "rounds"
    );
    for cell in cells(span) {
        if only.as_deref().is_some_and(|w| !cell.name.contains(w)) {
            continue;
        }
        let (mut ratios, mut ns_on, mut ns_off) = (Vec::new(), Vec::new(), Vec::new());
        for round in 0..rounds {
            // Alternate which volume goes first, so a drift in the machine hits both alike.
            let order = if round % 2 == 0 {
                [&on, &off]
            } else {
                [&off, &on]
            };
            let mut ns = [0.0f64; 2];
            for v in order {
                if side
                    .as_deref()
                    .is_some_and(|s| (s == "on") != std::ptr::eq(v, &on))
                {
                    continue;
                }
                let cpu0 = cpu_seconds();
                let (_, ops, _) = drive(v, cell.load, secs);
                let per_io = (cpu_seconds() - cpu0) * 1e9 / ops.max(1) as f64;
                ns[usize::from(std::ptr::eq(v, &off))] = per_io;
            }
            ratios.push(ns[1] / ns[0]);
            ns_on.push(ns[0]);
            ns_off.push(ns[1]);
        }
        let (lo, hi) = spread(&ratios);
        println!(
            "{:<20} {:>9.3} {:>12.0} {:>12.0} {:>4.2}–{:.2}",
            cell.name,
            median(&mut ratios),
            median(&mut ns_on),
            median(&mut ns_off),
            lo,
            hi
        );
    }
}
