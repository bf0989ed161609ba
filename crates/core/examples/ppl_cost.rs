//! What the partial-parity log costs: the same array with the log and without it
//! (`ArrayOptions::ppl`), on file members, in one run, rounds alternating A B A B (the order
//! flips each round so drifting load hits both alike). For RAID 5 (4 members) and RAID 6 (6),
//! 64 KiB strips: 4 KiB random writes at queue depth 32 with the write-back cache (the
//! default) and write-through (every write a partial-stripe write: the log's worst case), and
//! 1 MiB sequential writes at queue depth 4, and 128 KiB sequential writes write-through at
//! queue depth 8 (smaller than a stripe: joined when they queue on one). Reported per
//! workload: IOPS and the process's CPU time (user + system) per write, with the log /
//! without.
//!
//! `cargo run --release -p nbraid-core --example ppl_cost [dir] [seconds per round] [rounds]`
//! (default /var/tmp, 2 s, 4); `NBRAID_PPL_ONLY="raid5 4k"` runs only the workloads whose
//! level and name contain it; `NBRAID_PPL_SIDE=on` (or `off`) runs only that side (for
//! profiling one of them); `NBRAID_PPL_LOG_MIB=8` puts the log in an 8 MiB reserve before
//! the regions (config `write_hole_log_size`) instead of 512 KiB in the metadata area.
//! Member files are written out in full first, as a block device would be
//! (`NBRAID_PPL_SPARSE=1` leaves them sparse).

use futures::executor::block_on;
use futures::stream::{FuturesUnordered, StreamExt};
use nbraid_core::metadata::{Array, ArrayOptions, MemberMeta, METADATA_AREA_BYTES};
use nbraid_core::{Buf, CacheMode, Member, UringFile, VolumeOptions};
use nbraid_layout::{Level, Node, ParityLayout, Region, Shape};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;
const REGION: u64 = 128 * MIB;

/// Bytes of the log's reserve before the regions (`NBRAID_PPL_LOG_MIB`; 0: none).
fn log_reserve() -> u64 {
    std::env::var("NBRAID_PPL_LOG_MIB")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0)
        * MIB
}

fn tree(level: Level, members: usize) -> Node {
    let shape =
        Shape::new(level, members, None, 64 << 10, ParityLayout::LeftSymmetric).expect("shape");
    let r = Region {
        start: METADATA_AREA_BYTES + log_reserve(),
        len: REGION,
    };
    shape.build(&vec![r; members]).expect("tree")
}

fn create(
    dir: &Path,
    tag: &str,
    level: Level,
    members: usize,
    ppl: bool,
    cache: CacheMode,
) -> Array {
    let metas = block_on(futures::future::join_all((0..members).map(|i| {
        let p = dir.join(format!("{tag}-{i}.img"));
        if preallocate() {
            write_out(&p, METADATA_AREA_BYTES + log_reserve() + REGION);
        }
        let f = UringFile::open_with(
            &p,
            Some(METADATA_AREA_BYTES + log_reserve() + REGION),
            Default::default(),
        )
        .unwrap_or_else(|e| panic!("open {}: {e}", p.display()));
        MemberMeta::load(Arc::new(f) as Arc<dyn Member>)
    })));
    let opts = ArrayOptions {
        volume: VolumeOptions {
            cache,
            ..VolumeOptions::default()
        },
        bitmap_chunk_bytes: Some(nbraid_core::metadata::intent::DEFAULT_CHUNK_BYTES),
        ppl,
        ppl_area_before_region_bytes: (log_reserve() > 0).then(log_reserve),
        ..ArrayOptions::default()
    };
    block_on(Array::create(
        "bench",
        tree(level, members),
        metas,
        opts,
        true,
        &|_, _| {},
    ))
    .expect("create")
    .0
}

/// Whether member files are written out in full before the runs (`NBRAID_PPL_SPARSE=1`:
/// left sparse). A block device has no blocks to allocate; a sparse file's first writes to
/// a place allocate extents (journalled, and every later flush commits them), which costs
/// both sides a noisy amount unrelated to the log.
fn preallocate() -> bool {
    std::env::var_os("NBRAID_PPL_SPARSE").is_none()
}

/// Writes `len` zero bytes to `path` (creating it) and syncs it.
fn write_out(path: &Path, len: u64) {
    use std::io::Write;
    let mut f = std::fs::File::create(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let zeros = vec![0u8; 4 << 20];
    let mut left = len;
    while left > 0 {
        let n = left.min(zeros.len() as u64) as usize;
        f.write_all(&zeros[..n]).expect("write out a member");
        left -= n as u64;
    }
    f.sync_all().expect("sync a member");
}

/// The process's CPU time so far (user + system, every thread).
fn cpu() -> Duration {
    // SAFETY: getrusage writes into the zeroed struct we own.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to an rusage; RUSAGE_SELF is always valid.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// The process's context switches so far (voluntary + involuntary, every thread).
fn switches() -> u64 {
    // SAFETY: getrusage writes into the zeroed struct we own.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to an rusage; RUSAGE_SELF is always valid.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    (ru.ru_nvcsw + ru.ru_nivcsw) as u64
}

/// The process's (read_bytes, write_bytes) so far, from /proc/self/io.
fn io_bytes() -> (u64, u64) {
    let io = std::fs::read_to_string("/proc/self/io").unwrap_or_default();
    let field = |name: &str| {
        io.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    (field("read_bytes:"), field("write_bytes:"))
}

/// `bs`-byte writes at queue depth `qd` for `secs` (random offsets, or sequential from
/// `*seq_at`), then a flush. Returns (writes per second, CPU µs per write, writes).
fn run(
    a: &Array,
    bs: u64,
    qd: usize,
    random: bool,
    secs: f64,
    seq_at: &mut u64,
    seed: u64,
) -> (f64, f64, u64) {
    let capacity = a.volume().capacity();
    let blocks = capacity / bs;
    let mut x = seed | 1;
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let (t0, c0, io0, sw0) = (Instant::now(), cpu(), io_bytes(), switches());
    let mut done = 0u64;
    block_on(async {
        let mut inflight = FuturesUnordered::new();
        let mut spare: Vec<Buf> = (0..qd).map(|_| Buf::zeroed(bs as usize)).collect();
        loop {
            while inflight.len() < qd && !spare.is_empty() && Instant::now() < deadline {
                let off = if random {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    (x % blocks) * bs
                } else {
                    let o = *seq_at;
                    *seq_at = (o + bs) % (blocks * bs);
                    o
                };
                let b = spare.pop().expect("a spare buffer");
                inflight.push(async move { a.write(off, b, false).await.expect("write") });
            }
            match inflight.next().await {
                Some(b) => {
                    spare.push(b);
                    done += 1;
                }
                None => break,
            }
        }
        a.flush().await.expect("flush");
    });
    let (wall, c) = (t0.elapsed().as_secs_f64(), (cpu() - c0).as_secs_f64());
    if std::env::var("NBRAID_PPL_IO").is_ok() {
        let (r, w) = io_bytes();
        eprintln!(
            "{done} writes; member KiB per write: read {:.1}, written {:.1}; context switches per write {:.2}",
            (r - io0.0) as f64 / 1024.0 / done as f64,
            (w - io0.1) as f64 / 1024.0 / done as f64,
            (switches() - sw0) as f64 / done as f64
        );
    }
    (done as f64 / wall, c * 1e6 / done.max(1) as f64, done)
}

/// One workload of the comparison.
struct Work {
    name: &'static str,
    bs: u64,
    qd: usize,
    random: bool,
    cache: CacheMode,
}

fn workloads() -> [Work; 4] {
    let wb = CacheMode::default();
    let work = |name, bs, qd, random, cache| Work {
        name,
        bs,
        qd,
        random,
        cache,
    };
    [
        work("4k randwrite qd32 wb", 4096, 32, true, wb),
        work(
            "4k randwrite qd32 wt",
            4096,
            32,
            true,
            CacheMode::WriteThrough,
        ),
        work("1M seqwrite qd4 wb", MIB, 4, false, wb),
        // Sequential writes smaller than a stripe (192 KiB on RAID 5, 256 KiB on RAID 6),
        // which write-through joins into full stripes when they queue on one.
        work(
            "128k seqwrite qd8 wt",
            128 << 10,
            8,
            false,
            CacheMode::WriteThrough,
        ),
    ]
}

/// One level's array, how the comparison runs, and on which side (`NBRAID_PPL_SIDE`).
struct Setup<'a> {
    dir: &'a Path,
    level: Level,
    members: usize,
    name: &'static str,
    secs: f64,
    rounds: u64,
    side: Option<&'a str>,
}

/// What the rounds with the log (on) and without (off) measured.
#[derive(Default)]
struct Comparison {
    /// Summed IOPS and CPU µs per write, with the log and without.
    sum_on: (f64, f64),
    sum_off: (f64, f64),
    /// Per round, IOPS with the log / without (the pair ran back to back).
    pair_ratios: Vec<f64>,
    /// The log's own counts over the runs with it.
    log: nbraid_core::ppl::LogStats,
    writes_on: u64,
    /// Stripe pieces another write carried (write-through joining) over those runs.
    joined_on: u64,
}

/// `w` on arrays with and without the log, alternating which goes first each round.
fn compare(s: &Setup, w: &Work) -> Comparison {
    let name = s.name;
    let on = create(
        s.dir,
        &format!("{name}-on"),
        s.level,
        s.members,
        true,
        w.cache,
    );
    let off = create(
        s.dir,
        &format!("{name}-off"),
        s.level,
        s.members,
        false,
        w.cache,
    );
    let mut c = Comparison::default();
    let (mut at_on, mut at_off) = (0u64, 0u64);
    for r in 0..s.rounds {
        let mut pair = (0.0, 0.0);
        let order: [bool; 2] = if r % 2 == 0 {
            [true, false]
        } else {
            [false, true]
        };
        for with in order {
            if s.side.is_some_and(|side| (side == "on") != with) {
                continue;
            }
            let (a, at) = if with {
                (&on, &mut at_on)
            } else {
                (&off, &mut at_off)
            };
            let before = nbraid_core::ppl::stats();
            let joined_before = nbraid_core::raid::joined_writes();
            let (iops, us, done) = run(a, w.bs, w.qd, w.random, s.secs, at, 0x9e37 + r);
            if with {
                c.log = c.log.plus(&nbraid_core::ppl::stats().since(&before));
                c.writes_on += done;
                c.joined_on += nbraid_core::raid::joined_writes() - joined_before;
            }
            let sum = if with { &mut c.sum_on } else { &mut c.sum_off };
            sum.0 += iops;
            sum.1 += us;
            if with {
                pair.0 = iops;
            } else {
                pair.1 = iops;
            }
        }
        if pair.1 > 0.0 {
            c.pair_ratios.push(pair.0 / pair.1);
        }
    }
    c.pair_ratios.sort_by(f64::total_cmp);
    drop(on);
    drop(off);
    std::thread::sleep(Duration::from_millis(300)); // background destage lets go
    for i in 0..s.members {
        for t in ["on", "off"] {
            let _ = std::fs::remove_file(s.dir.join(format!("{name}-{t}-{i}.img")));
        }
    }
    c
}

fn print_comparison(name: &str, work: &str, rounds: u64, c: &Comparison) {
    let median = c
        .pair_ratios
        .get(c.pair_ratios.len() / 2)
        .copied()
        .unwrap_or(0.0);
    let n = rounds as f64;
    let (i_on, c_on, i_off, c_off) = (
        c.sum_on.0 / n,
        c.sum_on.1 / n,
        c.sum_off.0 / n,
        c.sum_off.1 / n,
    );
    println!(
        "{name:<8} {work:<26} {i_on:>10.0} {i_off:>10.0} {:>7.3} {c_on:>11.1} {c_off:>11.1} {:>7.3}",
        i_on / i_off,
        c_on / c_off
    );
    let log = &c.log;
    let per_k = |n: u64| n as f64 * 1000.0 / c.writes_on.max(1) as f64;
    println!(
        "{:<8} median of the rounds' ratios {median:.3} (lowest {:.3}, highest {:.3}); log: {:.1} entries/round, per 1000 writes: {:.0} batches, {:.0} KiB, {:.1} member flushes ({:.1} for a band), {:.1} band rewrites without one, {:.1} band waits, {:.1} room waits; {:.0} stripe pieces joined",
        "",
        c.pair_ratios.first().copied().unwrap_or(0.0),
        c.pair_ratios.last().copied().unwrap_or(0.0),
        log.entries as f64 / log.rounds.max(1) as f64,
        per_k(log.batches),
        per_k(log.batch_bytes) / 1024.0,
        per_k(log.member_flushes),
        per_k(log.band_flushes),
        per_k(log.band_rewrites),
        per_k(log.band_waits),
        per_k(log.room_waits),
        per_k(c.joined_on),
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let dir = PathBuf::from(args.first().map_or("/var/tmp", |s| s.as_str()))
        .join(format!("nbraid-ppl-cost-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("bench directory");
    let secs: f64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(2.0);
    let rounds: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(4);
    println!(
        "{} s rounds ×{rounds}, with the log (A) and without (B) alternating; {} (members: {} MiB regions)",
        secs,
        dir.display(),
        REGION / MIB
    );
    println!(
        "{:<8} {:<26} {:>10} {:>10} {:>7} {:>11} {:>11} {:>7}",
        "level", "workload", "IOPS log", "IOPS off", "ratio", "CPU µs log", "CPU µs off", "ratio"
    );
    // Only the workloads whose "level workload" contains this (e.g. "raid5 4k randwrite").
    let only = std::env::var("NBRAID_PPL_ONLY").ok();
    let side = std::env::var("NBRAID_PPL_SIDE").ok();
    for (level, members, name) in [(Level::Raid5, 4, "raid5"), (Level::Raid6, 6, "raid6")] {
        let setup = Setup {
            dir: &dir,
            level,
            members,
            name,
            secs,
            rounds,
            side: side.as_deref(),
        };
        for w in workloads() {
            if !only
                .as_ref()
                .is_none_or(|o| format!("{name} {}", w.name).contains(o.as_str()))
            {
                continue;
            }
            let c = compare(&setup, &w);
            print_comparison(name, w.name, rounds, &c);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
