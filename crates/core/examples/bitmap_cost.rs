//! What the write-intent bitmap costs and what it saves, ours against ourselves in one run:
//!
//! 1. 4 KiB random writes (queue depth 32) on a RAID 5 of 4 file members, 5 rounds, the order
//!    rotated each round: the bare volume, the array without a bitmap, the array with the
//!    default bitmap clearing at the first flush after a write (no clear delay) and with the
//!    default clear delay; also with a FLUSH every 256 writes and every 16 writes (where bits
//!    are cleared and set again). Writes per second and the process's CPU time per write.
//! 2. Resync after a crash: writes into 2 regions after the last flush, no clean shutdown,
//!    reopen — with the
//!    bitmap (only the set regions) against without (the whole volume).
//!
//! `cargo run --release -p nbraid-core --example bitmap_cost [dir] [seconds per round]`
//! (default /var/tmp, 3 s). Prints a table; `--json` anywhere prints JSON instead.

use futures::executor::block_on;
use futures::stream::{FuturesUnordered, StreamExt};
use nbraid_core::metadata::{Array, ArrayOptions, MemberMeta, METADATA_AREA_BYTES};
use nbraid_core::{Buf, Member, UringFile, Volume, VolumeOptions};
use nbraid_layout::{Geometry, Level, Node, ParityLayout, Region, Shape};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;
const REGION: u64 = 256 * MIB;
const MEMBERS: usize = 4;
const QD: usize = 32;
const ROUNDS: u64 = 5;

fn tree() -> Node {
    let shape = Shape::new(
        Level::Raid5,
        MEMBERS,
        None,
        64 << 10,
        ParityLayout::LeftSymmetric,
    )
    .expect("shape");
    let r = Region {
        start: METADATA_AREA_BYTES,
        len: REGION,
    };
    shape.build(&[r; MEMBERS]).expect("tree")
}

fn files(dir: &Path, tag: &str) -> Vec<PathBuf> {
    (0..MEMBERS)
        .map(|i| {
            dir.join(format!(
                "nbraid-bitmap-{}-{tag}-{i}.img",
                std::process::id()
            ))
        })
        .collect()
}

fn open_members(paths: &[PathBuf]) -> Vec<Arc<dyn Member>> {
    paths
        .iter()
        .map(|p| {
            // A dropped array's background destage may hold its members for a moment.
            let mut tries = 0;
            loop {
                match UringFile::open_with(
                    p,
                    Some(METADATA_AREA_BYTES + REGION),
                    Default::default(),
                ) {
                    Ok(f) => break Arc::new(f) as Arc<dyn Member>,
                    Err(e) if tries < 50 => {
                        tries += 1;
                        let _ = e;
                        std::thread::sleep(Duration::from_millis(100));
                    }
                    Err(e) => panic!("open {}: {e}", p.display()),
                }
            }
        })
        .collect()
}

/// The bitmap: none, or the default chunk with this clear delay.
type Bitmap = Option<Duration>;

fn opts(bitmap: Bitmap) -> ArrayOptions {
    ArrayOptions {
        volume: VolumeOptions::default(),
        bitmap_chunk_bytes: bitmap
            .is_some()
            .then_some(nbraid_core::metadata::intent::DEFAULT_CHUNK_BYTES),
        bitmap_clear_delay: bitmap.unwrap_or_default(),
        ppl: true,
        ..ArrayOptions::default()
    }
}

fn create(paths: &[PathBuf], bitmap: Bitmap) -> Array {
    let metas = block_on(futures::future::join_all(
        open_members(paths).into_iter().map(MemberMeta::load),
    ));
    block_on(Array::create(
        "bench",
        tree(),
        metas,
        opts(bitmap),
        true,
        &|_, _| {},
    ))
    .expect("create")
    .0
}

fn open(paths: &[PathBuf], bitmap: Bitmap) -> (Array, Duration, u64) {
    let metas = block_on(futures::future::join_all(
        open_members(paths).into_iter().map(MemberMeta::load),
    ));
    let t = Instant::now();
    let (a, report) = block_on(Array::open(
        "bench",
        &tree(),
        metas.into_iter().map(Some).collect(),
        opts(bitmap),
        &|_, _| {},
    ))
    .expect("open");
    (a, t.elapsed(), report.resynced_bytes)
}

enum Target<'a> {
    Volume(&'a Volume),
    Array(&'a Array),
}

/// CPU time of the whole process so far (every thread: the caller, the io_uring engine
/// threads, the cache's destage), from /proc/self/stat's utime + stime.
fn process_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
    // The command name may hold spaces: the fields that follow start after its ')'.
    let after = &stat[stat.rfind(')').expect("stat format") + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks: u64 = f[11].parse::<u64>().expect("utime") + f[12].parse::<u64>().expect("stime");
    // SAFETY: sysconf only reads a configuration value.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Duration::from_nanos(ticks * 1_000_000_000 / hz)
}

/// 4 KiB random writes at queue depth 32 over `span` bytes for `secs`; a FLUSH every
/// `flush_every` writes (0: never). Returns writes per second, CPU µs per write and writes.
fn randwrite(t: &Target, span: u64, secs: f64, flush_every: u64, seed: u64) -> (f64, f64, u64) {
    let mut x = seed | 1;
    let blocks = span / 4096;
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let start = Instant::now();
    let cpu_start = process_cpu();
    let mut done = 0u64;
    block_on(async {
        // Writes and flushes share one set of futures in flight, so a flush (which may wait
        // for stripes that writes in flight hold) never stops those writes being polled.
        let mut inflight = FuturesUnordered::new();
        let mut spare: Vec<Buf> = (0..QD).map(|_| Buf::zeroed(4096)).collect();
        let mut issued = 0u64;
        loop {
            while inflight.len() < QD && !spare.is_empty() && Instant::now() < deadline {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let off = (x % blocks) * 4096;
                let b = spare.pop().expect("a spare buffer");
                issued += 1;
                let flush = flush_every > 0 && issued.is_multiple_of(flush_every);
                inflight.push(async move {
                    let w = match t {
                        Target::Volume(v) => v.write(off, b, false).await,
                        Target::Array(a) => a.write(off, b, false).await,
                    }
                    .expect("write");
                    if flush {
                        match t {
                            Target::Volume(v) => v.flush().await,
                            Target::Array(a) => a.flush().await,
                        }
                        .expect("flush");
                    }
                    w
                });
            }
            match inflight.next().await {
                Some(b) => {
                    spare.push(b);
                    done += 1;
                }
                None => break,
            }
        }
    });
    let cpu_us = (process_cpu() - cpu_start).as_secs_f64() * 1e6 / done.max(1) as f64;
    (done as f64 / start.elapsed().as_secs_f64(), cpu_us, done)
}

/// One workload's figures: per target (bare volume, array without bitmap, bitmap cleared
/// eagerly, bitmap with the default delay) writes/s and CPU µs per write, and bitmap updates
/// per 1000 writes (eager, delayed).
struct Row {
    name: &'static str,
    iops: [f64; 4],
    cpu_us: [f64; 4],
    updates_per_k: [f64; 2],
}

/// The four targets, `ROUNDS` rounds each in rotated order, for one workload.
fn cost_row(
    name: &'static str,
    flush_every: u64,
    bare: &Volume,
    arrays: [&Array; 3],
    capacity: u64,
    secs: f64,
) -> Row {
    let [a_without, a_with, a_delayed] = arrays;
    let targets = [
        Target::Volume(bare),
        Target::Array(a_without),
        Target::Array(a_with),
        Target::Array(a_delayed),
    ];
    let mut iops = [0.0f64; 4];
    let mut cpu = [0.0f64; 4];
    let mut writes = [0u64; 4];
    let bitmap_writes_before = [a_with.bitmap_writes(), a_delayed.bitmap_writes()];
    for r in 0..ROUNDS {
        // The order rotates each round, so drifting load hits every target alike.
        for k in 0..targets.len() {
            let i = (k + r as usize) % targets.len();
            let (w, c, n) = randwrite(&targets[i], capacity, secs, flush_every, 0x9e37 + r);
            iops[i] += w;
            cpu[i] += c;
            writes[i] += n;
        }
    }
    let r = ROUNDS as f64;
    let updates_per_k = [
        (a_with.bitmap_writes() - bitmap_writes_before[0]) as f64 * 1000.0
            / writes[2].max(1) as f64,
        (a_delayed.bitmap_writes() - bitmap_writes_before[1]) as f64 * 1000.0
            / writes[3].max(1) as f64,
    ];
    Row {
        name,
        iops: iops.map(|v| v / r),
        cpu_us: cpu.map(|v| v / r),
        updates_per_k,
    }
}

/// Resync after a crash, with the bitmap and without: time and bytes each.
struct Resync {
    bitmap: Duration,
    bitmap_bytes: u64,
    full: Duration,
    full_bytes: u64,
}

/// Everything flushed; then a crash during writes to 2 regions (128 MiB of the volume) after
/// the last flush, and a reopen of each array.
fn resync_after_crash(
    a_with: Array,
    with: &[PathBuf],
    a_without: Array,
    without: &[PathBuf],
) -> Resync {
    for a in [&a_with, &a_without] {
        block_on(a.flush()).expect("flush");
        let _ = randwrite(&Target::Array(a), 128 * MIB, 1.0, 0, 7);
    }
    drop(a_with);
    drop(a_without);
    let (a, bitmap, bitmap_bytes) = open(with, Some(Duration::ZERO));
    drop(a);
    let (a, full, full_bytes) = open(without, None);
    drop(a);
    Resync {
        bitmap,
        bitmap_bytes,
        full,
        full_bytes,
    }
}

/// The bitmap's own work on a write whose bit is set: begin + end, no I/O (ns per write).
fn intent_ns_per_write(capacity: u64) -> f64 {
    let intent = nbraid_core::metadata::intent::Intent::new(capacity, 64 * MIB, vec![0xff; 4096])
        .expect("a bitmap that fits");
    let n = 1_000_000u64;
    let t = Instant::now();
    for i in 0..n {
        let (h, _) = intent.begin((i * 7919 * 4096) % capacity, 4096);
        intent.end(h);
    }
    t.elapsed().as_nanos() as f64 / n as f64
}

fn print_json(rows: &[Row], capacity: u64, intent_ns: f64, resync: &Resync) {
    let cost: Vec<String> = rows
        .iter()
        .map(|Row { name, iops: w, cpu_us: c, updates_per_k: k }| {
            format!(
                "{{\"workload\":\"{name}\",\"volume_iops\":{:.0},\"array_no_bitmap_iops\":{:.0},\"array_bitmap_no_delay_iops\":{:.0},\"array_bitmap_iops\":{:.0},\"cpu_us_per_write\":[{:.2},{:.2},{:.2},{:.2}],\"bitmap_vs_no_bitmap_cpu\":{:.4},\"bitmap_updates_per_1000_writes\":{{\"no_delay\":{:.2},\"delay\":{:.2}}}}}",
                w[0], w[1], w[2], w[3], c[0], c[1], c[2], c[3], c[3] / c[1], k[0], k[1]
            )
        })
        .collect();
    println!(
        "{{\"capacity_bytes\":{capacity},\"intent_ns_per_write\":{intent_ns:.1},\"cost\":[{}],\"resync\":{{\"bitmap_secs\":{:.3},\"bitmap_bytes\":{},\"full_secs\":{:.3},\"full_bytes\":{}}}}}",
        cost.join(","),
        resync.bitmap.as_secs_f64(),
        resync.bitmap_bytes,
        resync.full.as_secs_f64(),
        resync.full_bytes,
    );
}

fn print_table(rows: &[Row], intent_ns: f64, resync: &Resync) {
    println!("writes/s (CPU µs per write); the bitmap with the default clear delay against the array without one:");
    println!(
        "{:<30} {:>15} {:>15} {:>15} {:>15} {:>7} {:>7} {:>13}",
        "workload", "volume", "no bitmap", "bitmap, eager", "bitmap", "iops", "cpu", "upd/1k e, d"
    );
    for Row {
        name,
        iops: w,
        cpu_us: c,
        updates_per_k: k,
    } in rows
    {
        let cell = |i: usize| format!("{:.0} ({:.1})", w[i], c[i]);
        println!(
            "{name:<30} {:>15} {:>15} {:>15} {:>15} {:>7.3} {:>7.3} {:>6.1},{:>6.1}",
            cell(0),
            cell(1),
            cell(2),
            cell(3),
            w[3] / w[1],
            c[3] / c[1],
            k[0],
            k[1]
        );
    }
    println!("bitmap bookkeeping per write whose bit is set (no I/O): {intent_ns:.0} ns");
    println!(
        "resync after a crash: bitmap {:.3} s ({} MiB), full {:.3} s ({} MiB): {:.1}× faster",
        resync.bitmap.as_secs_f64(),
        resync.bitmap_bytes / MIB,
        resync.full.as_secs_f64(),
        resync.full_bytes / MIB,
        resync.full.as_secs_f64() / resync.bitmap.as_secs_f64()
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let json = args.iter().any(|a| a == "--json");
    let rest: Vec<&String> = args.iter().filter(|a| *a != "--json").collect();
    let dir = PathBuf::from(rest.first().map_or("/var/tmp", |s| s.as_str()))
        .join(format!("nbraid-bitmap-cost-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("bench directory");
    let secs: f64 = rest.get(1).and_then(|s| s.parse().ok()).unwrap_or(3.0);

    let with = files(&dir, "with");
    let without = files(&dir, "without");
    let delayed = files(&dir, "delayed");
    let a_with = create(&with, Some(Duration::ZERO));
    let a_without = create(&without, None);
    let a_delayed = create(
        &delayed,
        Some(nbraid_core::metadata::intent::DEFAULT_CLEAR_DELAY),
    );
    let capacity = a_with.volume().capacity();
    // The bare volume: no superblocks, no bitmap.
    let bare_files = files(&dir, "bare");
    let bare = Volume::new(
        Geometry::from_tree(tree()),
        open_members(&bare_files),
        VolumeOptions::default(),
    )
    .expect("volume");

    let rows: Vec<Row> = [
        (0u64, "4k randwrite qd32"),
        (256, "4k randwrite qd32, flush/256"),
        (16, "4k randwrite qd32, flush/16"),
    ]
    .into_iter()
    .map(|(flush_every, name)| {
        let arrays = [&a_without, &a_with, &a_delayed];
        cost_row(name, flush_every, &bare, arrays, capacity, secs)
    })
    .collect();
    block_on(bare.flush()).expect("flush");
    drop(bare);
    drop(a_delayed);
    let resync = resync_after_crash(a_with, &with, a_without, &without);
    let _ = std::fs::remove_dir_all(&dir);
    let intent_ns = intent_ns_per_write(capacity);

    if json {
        print_json(&rows, capacity, intent_ns, &resync);
        return;
    }
    println!(
        "RAID 5 of {MEMBERS} file members in {}, {} MiB volume, {secs} s rounds ×{ROUNDS}, order rotated",
        dir.display(),
        capacity / MIB
    );
    print_table(&rows, intent_ns, &resync);
}
