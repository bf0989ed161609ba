//! Time to serve after a crash, RAID 5 of 4 file members (64 KiB strips, the log on, the
//! default 64 MiB bitmap chunk): the resync before serving (`Array::open`, what every parity
//! volume did before) against the background resync (`Array::open_background`), in one run,
//! rounds alternating A B / B A. Each trial writes a 4 KiB block into every bitmap chunk of
//! the volume (every bit set: the worst case the bitmap leaves) without a flush, drops the
//! array without a clean stop (a crash as far as the records go), and reopens it. Reported:
//! wall time until the open returns (the volume serves), the process's CPU time during it,
//! the latency of a first 4 KiB read and a first 4 KiB write after the open, and for the
//! background the time its pass then took to the end.
//!
//! `cargo run --release -p nbraid-core --example resync_serve [dir] [member MiB] [rounds]`
//! (default /var/tmp, 256, 3).

use futures::executor::block_on;
use nbraid_core::metadata::{Array, ArrayOptions, MemberMeta, METADATA_AREA_BYTES};
use nbraid_core::{Buf, CacheMode, Member, PassControl, PassState, UringFile, VolumeOptions};
use nbraid_layout::{Level, Node, ParityLayout, Region, Shape};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;

fn tree(region: u64) -> Node {
    let shape =
        Shape::new(Level::Raid5, 4, None, 64 << 10, ParityLayout::LeftSymmetric).expect("shape");
    let r = Region {
        start: METADATA_AREA_BYTES,
        len: region,
    };
    shape.build(&[r; 4]).expect("tree")
}

fn opts() -> ArrayOptions {
    ArrayOptions {
        volume: VolumeOptions {
            cache: CacheMode::WriteThrough,
            ..VolumeOptions::default()
        },
        bitmap_chunk_bytes: Some(nbraid_core::metadata::intent::DEFAULT_CHUNK_BYTES),
        ppl: true,
        ..ArrayOptions::default()
    }
}

fn metas(paths: &[PathBuf], region: u64) -> Vec<Arc<MemberMeta>> {
    block_on(futures::future::join_all(paths.iter().map(|p| {
        let f = UringFile::open_with(p, Some(METADATA_AREA_BYTES + region), Default::default())
            .unwrap_or_else(|e| panic!("open {}: {e}", p.display()));
        MemberMeta::load(Arc::new(f) as Arc<dyn Member>)
    })))
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

struct Trial {
    serve: Duration,
    cpu: Duration,
    first_read: Duration,
    first_write: Duration,
    /// The background pass after serving (zero for the resync before serving).
    pass: Duration,
    resynced_mib: u64,
}

/// Dirties every bitmap chunk, "crashes", reopens (`background` or not) and times it.
fn trial(paths: &[PathBuf], region: u64, background: bool, seed: u64) -> Trial {
    let m = metas(paths, region).into_iter().map(Some).collect();
    let (a, _) =
        block_on(Array::open("bench", &tree(region), m, opts(), &|_, _| {})).expect("open");
    let chunk = a.bitmap_chunk_bytes().expect("bitmap");
    let cap = a.volume().capacity();
    let mut at = (seed * 4096) % chunk;
    while at < cap {
        block_on(a.write(at, Buf::zeroed(4096), false)).expect("write");
        at += chunk;
    }
    drop(a); // no clean stop: the records say dirty, every bit set
    let m = metas(paths, region).into_iter().map(Some).collect();
    let (t0, c0) = (Instant::now(), cpu());
    let (a, report) = if background {
        block_on(Array::open_background(
            "bench",
            &tree(region),
            m,
            opts(),
            &|_, _| {},
        ))
    } else {
        block_on(Array::open("bench", &tree(region), m, opts(), &|_, _| {}))
    }
    .expect("reopen");
    let (serve, cpu_used) = (t0.elapsed(), cpu() - c0);
    let probe = (seed * 7 + 3) % (cap / MIB) * MIB;
    let t = Instant::now();
    block_on(a.read(probe, 4096)).expect("read");
    let first_read = t.elapsed();
    let t = Instant::now();
    block_on(a.write(probe + 64 * 4096, Buf::zeroed(4096), false)).expect("write");
    let first_write = t.elapsed();
    let t = Instant::now();
    let state = block_on(a.background_resync(&PassControl::new(0))).expect("pass");
    assert_eq!(state, PassState::Done);
    let pass = if background {
        t.elapsed()
    } else {
        Duration::ZERO
    };
    assert!(
        block_on(a.mark_clean()).expect("clean").is_recorded(),
        "clean at the end"
    );
    Trial {
        serve,
        cpu: cpu_used,
        first_read,
        first_write,
        pass,
        resynced_mib: (report.resynced_bytes + report.background_bytes) / MIB,
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let dir = Path::new(args.get(1).map_or("/var/tmp", String::as_str))
        .join(format!("nbraid-resync-serve-{}", std::process::id()));
    let member_mib: u64 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(256);
    let rounds: u64 = args.get(3).and_then(|a| a.parse().ok()).unwrap_or(3);
    let region = member_mib * MIB;
    std::fs::create_dir_all(&dir).expect("dir");
    let paths: Vec<PathBuf> = (0..4).map(|i| dir.join(format!("d{i}.img"))).collect();
    block_on(Array::create(
        "bench",
        tree(region),
        metas(&paths, region),
        opts(),
        true,
        &|_, _| {},
    ))
    .expect("create");
    println!(
        "RAID 5 of 4 x {member_mib} MiB in {}, every 64 MiB bitmap chunk dirty",
        dir.display()
    );
    let mut serve = [Vec::new(), Vec::new()];
    for round in 0..rounds {
        let order = if round % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        for background in order {
            let t = trial(
                &paths,
                region,
                background,
                round * 2 + u64::from(background),
            );
            println!(
                "round {round} {:<10} serves after {:>8.1} ms (CPU {:>7.1} ms, {} MiB to resync); first read {:.2} ms, first write {:.2} ms; background pass {:.0} ms",
                if background { "background" } else { "before" },
                t.serve.as_secs_f64() * 1e3,
                t.cpu.as_secs_f64() * 1e3,
                t.resynced_mib,
                t.first_read.as_secs_f64() * 1e3,
                t.first_write.as_secs_f64() * 1e3,
                t.pass.as_secs_f64() * 1e3,
            );
            serve[usize::from(background)].push(t.serve.as_secs_f64());
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (before, after) = (median(&mut serve[0]), median(&mut serve[1]));
    println!(
        "median time to serve: before {:.1} ms, background {:.1} ms ({:.0}x sooner)",
        before * 1e3,
        after * 1e3,
        before / after
    );
    let _ = std::fs::remove_dir_all(&dir);
}
