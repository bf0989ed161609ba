//! What the write-hole log and the write-intent bitmap cost the engine itself (issue 32),
//! without a kernel in the way: two RAID 5 arrays of six memory members (64 KiB strips), one
//! with the partial-parity log in an 8 MiB reserve before the regions and a 64 MiB-chunk
//! bitmap (the defaults of a new array on large members) and one with neither, filled alike;
//! 4 KiB random writes at QD 16 in write-through and in write-back, run on one array then the
//! other, round after round, each timed by the process's CPU clock (one thread: memory
//! members answer inline). Prints per cell the median ratio of I/Os per CPU second (with /
//! without) and the CPU nanoseconds a write took on each, so a change to the log's own path
//! shows as nanoseconds per write rather than a ratio lost in the machine's noise.
//!
//! ```sh
//! cargo bench -p nbraid-benches --bench log_cost
//! NBRAID_BENCH_ROUNDS=15 NBRAID_BENCH_SECS=0.3 NBRAID_BENCH_WORK=wb cargo bench -p nbraid-benches --bench log_cost
//! NBRAID_BENCH_SIDE=log perf record … # the array with the log only (a profile of its path)
//! NBRAID_BENCH_LEVEL=6 cargo bench …   # RAID 6 arrays instead
//! ```
//!
//! Memory members copy with `memcpy` in this process, so the log's share is larger here than
//! on any device (`scripts/bench-wpath` measures the same on files). They also answer
//! inline: every request runs to its end within its first poll, so "QD 16" keeps 16 buffers
//! but no two writes meet in a log round (write-through: a round, one 8 KiB batch, per
//! write — the printed log counts show it). With `NBRAID_BENCH_SIDE` one side is skipped and
//! the ratio column means nothing.
//! The bench's global allocator counts heap allocations: the `allocs/IO` and `B/IO` columns
//! are the allocations (and their bytes) per write on each array, all rounds together — a
//! figure the machine's noise does not move. They include the driver's own (a boxed future
//! and a `FuturesUnordered` task per write), alike on both sides.
//! The bitmap's chunk is 64 MiB, so every bit is set by the prefill: what is measured is its
//! steady state, as in a long run.

use futures::executor::block_on;
use nbraid_benches::{
    allocations, cpu_seconds, drive, env_f64, fill, median, spread, CountingAlloc, Load,
};
use nbraid_core::metadata::{Array, ArrayOptions, MemberMeta, METADATA_AREA_BYTES};
use nbraid_core::{CacheMode, Member, MemoryMember, VolumeOptions};
use nbraid_layout::{Level, ParityLayout, Region, Shape};
use std::sync::Arc;

#[global_allocator]
static ALLOCATOR: CountingAlloc = CountingAlloc;

const MIB: u64 = 1 << 20;
const STRIP: u64 = 64 << 10;
const MEMBERS: usize = 6;
/// Region bytes per member: 320 MiB of data per array, past the CPU caches.
const REGION: u64 = 64 * MIB;
/// The log's reserve before the regions (the default for members past 1 GiB).
const LOG_RESERVE: u64 = 8 * MIB;

/// RAID 5, or RAID 6 with `NBRAID_BENCH_LEVEL=6`.
fn level() -> Level {
    match std::env::var("NBRAID_BENCH_LEVEL").as_deref() {
        Ok("6") => Level::Raid6,
        _ => Level::Raid5,
    }
}

/// A RAID 5 (or 6) array of memory members, with the log and the bitmap (`logged`) or neither.
fn array(logged: bool, cache: CacheMode) -> Array {
    let member_bytes = METADATA_AREA_BYTES + LOG_RESERVE + REGION;
    let metas: Vec<Arc<MemberMeta>> = (0..MEMBERS)
        .map(|i| {
            let m = MemoryMember::prefaulted(format!("m{i}"), member_bytes);
            block_on(MemberMeta::load(Arc::new(m) as Arc<dyn Member>))
        })
        .collect();
    let shape = Shape::new(level(), MEMBERS, None, STRIP, ParityLayout::default()).expect("shape");
    let start = METADATA_AREA_BYTES + LOG_RESERVE;
    let tree = shape
        .build(&[Region { start, len: REGION }; MEMBERS])
        .expect("tree");
    let opts = ArrayOptions {
        volume: VolumeOptions {
            block_size: 4096,
            cache,
            cache_max_age: None,
            ..VolumeOptions::default()
        },
        ppl: logged,
        ppl_area_before_region_bytes: logged.then_some(LOG_RESERVE),
        bitmap_chunk_bytes: logged.then_some(64 * MIB),
        ..ArrayOptions::default()
    };
    block_on(Array::create("bench", tree, metas, opts, true, &|_, _| {}))
        .expect("create")
        .0
}

fn main() {
    let rounds = env_f64("NBRAID_BENCH_ROUNDS", 9.0) as usize;
    let secs = env_f64("NBRAID_BENCH_SECS", 0.25);
    let only = std::env::var("NBRAID_BENCH_WORK").ok();
    let side = std::env::var("NBRAID_BENCH_SIDE").ok();
    let raid = if level() == Level::Raid6 { 6 } else { 5 };
    println!(
        "log + bitmap cost in the engine: RAID {raid} × {MEMBERS} memory members, {rounds} rounds of {secs} s per cell and array, CPU clock"
    );
    println!(
        "{:<22} {:>9} {:>12} {:>12} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "cell",
        "log/none",
        "ns/IO log",
        "ns/IO none",
        "rounds",
        "allocs log",
        "allocs none",
        "B/IO log",
        "B/IO none"
    );
    let cells = [
        ("rand-write 4K wt qd16", CacheMode::WriteThrough),
        ("rand-write 4K wb qd16", CacheMode::default()),
    ];
    for (name, cache) in cells {
        if only.as_deref().is_some_and(|w| !name.contains(w)) {
            continue;
        }
        let (logged, plain) = (array(true, cache), array(false, cache));
        let span = logged.volume().capacity().min(plain.volume().capacity());
        for a in [&logged, &plain] {
            fill(a, span, 0x5a);
        }
        let load = Load {
            block: 4096,
            depth: 16,
            sequential: false,
            write: true,
            span,
            flush_at_end: true,
            fresh_payload: false,
        };
        let (mut ratios, mut ns_log, mut ns_none) = (Vec::new(), Vec::new(), Vec::new());
        let (mut log_writes, mut log_work) = (0u64, nbraid_core::ppl::LogStats::default());
        // Per side (log, none): writes, allocations and their bytes, all rounds.
        let mut heap = [[0u64; 3]; 2];
        for round in 0..rounds {
            // Alternate which array goes first, so a drift in the machine hits both alike.
            let order = if round % 2 == 0 {
                [&logged, &plain]
            } else {
                [&plain, &logged]
            };
            let mut ns = [0.0f64; 2];
            for a in order {
                let is_plain = std::ptr::eq(a, &plain);
                if side.as_deref().is_some_and(|s| (s == "log") == is_plain) {
                    continue;
                }
                let (cpu0, work0) = (cpu_seconds(), nbraid_core::ppl::stats());
                let heap0 = allocations();
                let (_, ops, _) = drive(a, load, secs);
                ns[usize::from(is_plain)] = (cpu_seconds() - cpu0) * 1e9 / ops.max(1) as f64;
                let heap1 = allocations();
                let side = &mut heap[usize::from(is_plain)];
                side[0] += ops;
                side[1] += heap1.0 - heap0.0;
                side[2] += heap1.1 - heap0.1;
                if !is_plain {
                    log_writes += ops;
                    log_work = log_work.plus(&nbraid_core::ppl::stats().since(&work0));
                }
            }
            ratios.push(ns[1] / ns[0]);
            ns_log.push(ns[0]);
            ns_none.push(ns[1]);
        }
        let (lo, hi) = spread(&ratios);
        let per_io =
            |side: usize, what: usize| heap[side][what] as f64 / heap[side][0].max(1) as f64;
        println!(
            "{:<22} {:>9.3} {:>12.0} {:>12.0} {:>4.2}–{:.2} {:>10.2} {:>10.2} {:>10.0} {:>10.0}",
            name,
            median(&mut ratios),
            median(&mut ns_log),
            median(&mut ns_none),
            lo,
            hi,
            per_io(0, 1),
            per_io(1, 1),
            per_io(0, 2),
            per_io(1, 2)
        );
        // What the log did, per 1,000 writes of the logged array (all rounds).
        let per_k = |n: u64| n as f64 * 1000.0 / log_writes.max(1) as f64;
        println!(
            "  log per 1,000 writes: {:.0} rounds, {:.0} entries, {:.0} KiB of batches, {:.1} member flushes, {:.1} room waits, {:.1} band waits",
            per_k(log_work.rounds),
            per_k(log_work.entries),
            per_k(log_work.batch_bytes) / 1024.0,
            per_k(log_work.member_flushes),
            per_k(log_work.room_waits),
            per_k(log_work.band_waits)
        );
    }
}
