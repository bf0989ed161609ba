//! The engine under the load that hung `raid::raid50_volume_with_every_client` (fio's nbd
//! engine, random writes of 4–64 KiB at depth 32 over 32 MiB), without NBD: the same config
//! (RAID 50 of 2 spans over 6 file members of 40 MiB, 64 KiB strips, write-back cache of
//! 8 MiB, the partial-parity log and per-block checksums by default, the aged destager
//! thread running), 32 writers at once with a flush now and then. A watchdog fails the run
//! when no request ended for a while, with what the volume's parity groups hold and who
//! waits (`Volume::waits`). Short by default; `NBRAID_SOAK=n` runs n times as many rounds
//! (`NBRAID_SEED` picks the first seed). Before the log's `rebase` stopped counting a band
//! written from an entry its writer had not handed over yet, about one run in five hung: a
//! span's log with every writer waiting for room and the only "busy" bands those writers'
//! own, their entries pending.

use nbraid_core::metadata::Array;
use nbraid_core::Buf;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;
const DEPTH: usize = 32;
/// No request ended for this long: hung.
const STALL: Duration = Duration::from_secs(20);

fn soak() -> u64 {
    std::env::var("NBRAID_SOAK")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
        .max(1)
}

fn assemble(dir: &std::path::Path) -> Arc<Array> {
    let mut text = String::new();
    let mut ids = Vec::new();
    for i in 0..6 {
        let path = dir.join(format!("m{i}.img"));
        text += &format!(
            "[[member]]\nid = \"m{i}\"\npath = \"{}\"\nsize = \"40MiB\"\n\n",
            path.display()
        );
        ids.push(format!("\"m{i}\""));
    }
    text += &format!(
        "[[volume]]\nname = \"raid50\"\nlevel = \"raid50\"\nmembers = [{}]\nsize = \"all\"\n\
         spans = 2\nstrip_size = \"64KiB\"\ncache = \"write-back\"\ncache_size = \"8MiB\"\n",
        ids.join(", ")
    );
    let file = dir.join("nbraid.toml");
    std::fs::write(&file, &text).unwrap();
    let config = nbraid_config::parse(&text, &file).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let mut a = nbraid_assembly::assemble::assemble(&config).expect("assembled");
    a.remove(0).array
}

fn state(a: &Array) -> String {
    let v = a.volume();
    let mut out = format!(
        "log (process-wide): {:?}\ncache: {:?}\n{:?}\n",
        nbraid_core::ppl::stats(),
        v.cache_usage(),
        v.counters()
    );
    for (i, c) in v.member_health().iter().map(|h| h.counters).enumerate() {
        out += &format!("member {i}: {c:?}\n");
    }
    out += &v.waits();
    out
}

/// One run: `DEPTH` writers of random 4–64 KiB writes (4 KiB aligned) over the first
/// 32 MiB for `run`, a flush every `flush_every` writes of each writer.
fn one_run(seed: u64, run: Duration) {
    let dir = tempfile::tempdir().unwrap();
    let a = assemble(dir.path());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let ended = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let span = 32 * MIB;
    let tasks: Vec<_> = (0..DEPTH)
        .map(|w| {
            let (a, ended, stop) = (a.clone(), ended.clone(), stop.clone());
            rt.spawn(async move {
                let mut rng = SmallRng::seed_from_u64(seed * 1000 + w as u64);
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    if rng.gen_ratio(1, 64) {
                        a.flush().await.expect("flush");
                    } else {
                        let len = rng.gen_range(1..=16u64) * 4096;
                        let at = rng.gen_range(0..(span - len) / 4096) * 4096;
                        let mut b = Buf::new(len as usize);
                        b.iter_mut()
                            .enumerate()
                            .for_each(|(i, x)| *x = (i as u64 ^ n) as u8);
                        a.write(at, b, false).await.expect("write");
                    }
                    ended.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let start = Instant::now();
    let (mut last, mut since) = (0, Instant::now());
    loop {
        std::thread::sleep(Duration::from_millis(200));
        if start.elapsed() >= run {
            stop.store(true, Ordering::Relaxed);
        }
        if tasks.iter().all(|t| t.is_finished()) {
            break;
        }
        let now = ended.load(Ordering::Relaxed);
        if now != last {
            (last, since) = (now, Instant::now());
        } else if since.elapsed() > STALL {
            panic!(
                "seed {seed}: no request ended for {STALL:?} after {now}; the volume:\n{}",
                state(&a)
            );
        }
    }
    for t in tasks {
        rt.block_on(t).expect("writer");
    }
    rt.block_on(a.flush()).expect("final flush");
}

#[test]
fn raid50_write_back_random_writes_at_depth_32_end() {
    let seed0: u64 = std::env::var("NBRAID_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    for i in 0..soak() {
        one_run(seed0 + i, Duration::from_secs(4));
    }
}
