//! What the write-intent bitmap costs and what it saves, ours against ourselves in one run:
//!
//! 1. 4 KiB random writes (queue depth 32) on a RAID 5 of 4 file members, 5 rounds, the order
//!    rotated each round:
//!    the bare volume, the array without a bitmap, the array with the default bitmap; also
//!    with a FLUSH every 256 writes (bits are cleared and set again).
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

fn opts(bitmap: bool) -> ArrayOptions {
    ArrayOptions {
        volume: VolumeOptions::default(),
        bitmap_chunk_bytes: bitmap.then_some(nbraid_core::metadata::intent::DEFAULT_CHUNK_BYTES),
        ppl: true,
    }
}

fn create(paths: &[PathBuf], bitmap: bool) -> Array {
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

fn open(paths: &[PathBuf], bitmap: bool) -> (Array, Duration, u64) {
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

/// 4 KiB random writes at queue depth 32 over `span` bytes for `secs`; a FLUSH every
/// `flush_every` writes (0: never). Returns writes per second.
fn randwrite(t: &Target, span: u64, secs: f64, flush_every: u64, seed: u64) -> f64 {
    let mut x = seed | 1;
    let blocks = span / 4096;
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let start = Instant::now();
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
    done as f64 / start.elapsed().as_secs_f64()
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
    let a_with = create(&with, true);
    let a_without = create(&without, false);
    let capacity = a_with.volume().capacity();
    // The bare volume: no superblocks, no bitmap.
    let bare_files = files(&dir, "bare");
    let bare = Volume::new(
        Geometry::from_tree(tree()),
        open_members(&bare_files),
        VolumeOptions::default(),
    )
    .expect("volume");

    let mut rows = Vec::new();
    for (flush_every, name) in [
        (0u64, "4k randwrite qd32"),
        (256, "4k randwrite qd32, flush/256"),
    ] {
        let mut sums = [0.0f64; 3];
        let targets = [
            Target::Volume(&bare),
            Target::Array(&a_without),
            Target::Array(&a_with),
        ];
        for r in 0..ROUNDS {
            // The order rotates each round, so drifting load hits every target alike.
            for k in 0..3 {
                let i = (k + r as usize) % 3;
                sums[i] += randwrite(&targets[i], capacity, secs, flush_every, 0x9e37 + r);
            }
        }
        let r = ROUNDS as f64;
        rows.push((name, sums[0] / r, sums[1] / r, sums[2] / r));
    }
    block_on(bare.flush()).expect("flush");
    drop(bare);

    // Everything flushed; then a crash during writes to 2 regions (128 MiB of the volume)
    // after the last flush, and a reopen.
    for a in [&a_with, &a_without] {
        block_on(a.flush()).expect("flush");
        let _ = randwrite(&Target::Array(a), 128 * MIB, 1.0, 0, 7);
    }
    drop(a_with);
    drop(a_without);
    let (a, t_bitmap, bytes_bitmap) = open(&with, true);
    drop(a);
    let (a, t_full, bytes_full) = open(&without, false);
    drop(a);
    let _ = std::fs::remove_dir_all(&dir);

    // The bitmap's own work on a write whose bit is set: begin + end, no I/O.
    let intent = nbraid_core::metadata::intent::Intent::new(capacity, 64 * MIB, vec![0xff; 4096]);
    let n = 1_000_000u64;
    let t = Instant::now();
    for i in 0..n {
        let (h, _) = intent.begin((i * 7919 * 4096) % capacity, 4096);
        intent.end(h);
    }
    let intent_ns = t.elapsed().as_nanos() as f64 / n as f64;

    if json {
        let cost: Vec<String> = rows
            .iter()
            .map(|(name, v, n, b)| {
                format!(
                    "{{\"workload\":\"{name}\",\"volume_iops\":{v:.0},\"array_no_bitmap_iops\":{n:.0},\"array_bitmap_iops\":{b:.0},\"bitmap_vs_volume\":{:.4}}}",
                    b / v
                )
            })
            .collect();
        println!(
            "{{\"capacity_bytes\":{capacity},\"intent_ns_per_write\":{intent_ns:.1},\"cost\":[{}],\"resync\":{{\"bitmap_secs\":{:.3},\"bitmap_bytes\":{bytes_bitmap},\"full_secs\":{:.3},\"full_bytes\":{bytes_full}}}}}",
            cost.join(","),
            t_bitmap.as_secs_f64(),
            t_full.as_secs_f64()
        );
        return;
    }
    println!(
        "RAID 5 of {MEMBERS} file members in {}, {} MiB volume, {secs} s rounds ×{ROUNDS}, order rotated",
        dir.display(),
        capacity / MIB
    );
    println!(
        "{:<32} {:>12} {:>14} {:>12} {:>10}",
        "workload", "volume", "no bitmap", "bitmap", "bitmap/vol"
    );
    for (name, v, n, b) in &rows {
        println!("{name:<32} {v:>12.0} {n:>14.0} {b:>12.0} {:>10.3}", b / v);
    }
    println!("bitmap bookkeeping per write whose bit is set (no I/O): {intent_ns:.0} ns");
    println!(
        "resync after a crash: bitmap {:.3} s ({} MiB), full {:.3} s ({} MiB): {:.1}× faster",
        t_bitmap.as_secs_f64(),
        bytes_bitmap / MIB,
        t_full.as_secs_f64(),
        bytes_full / MIB,
        t_full.as_secs_f64() / t_bitmap.as_secs_f64()
    );
}
