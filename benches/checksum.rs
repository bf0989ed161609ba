//! # Checksum benches
//!
//! The per-block checksum pass of issue 33 (CRC-32C of each 4 KiB block seeded with its
//! block number, as `nbraid_core::checksum` computes it) beside a memory copy of the same
//! bytes, the pass it must keep up with. "hot" is 1 MiB kept in the caches; "cold" cycles
//! over 512 MiB so the bytes come from DRAM, as a client's 1 MiB writes at queue depth 8 do.
//! "numbered-blocks" is the same sums as a checked member read computes them
//! (`crc32c::numbered_blocks`: the path chosen once, two blocks folded side by side); the
//! bench refuses to run if its values differ from a `Crc` fed each block.
//!
//! ```text
//! cargo bench --bench checksum
//! ```
//!
//! Timed by the thread's CPU clock, not the wall: steady while other work shares the machine
//! (a descheduled thread's time is not counted; the caches it shares still are).

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use nbraid_core::crc32c::Crc;
use std::hint::black_box;
use std::time::Duration;

const BLOCK_BYTES: usize = 4096;
const SLICE_BYTES: usize = 1 << 20;

/// One checksum per 4 KiB block of `bytes`, seeded with the block's number.
fn block_sums(first_block: u64, bytes: &[u8], out: &mut Vec<u32>) {
    out.clear();
    for (i, block) in bytes.chunks_exact(BLOCK_BYTES).enumerate() {
        let mut crc = Crc::new();
        crc.update(&(first_block + i as u64).to_le_bytes());
        crc.update(block);
        out.push(crc.finish());
    }
}

/// This thread's CPU time.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the call to fill.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "CLOCK_THREAD_CPUTIME_ID is always there on Linux");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// `iters` runs of `f`, timed by the thread's CPU clock.
fn cpu_timed(iters: u64, mut f: impl FnMut()) -> Duration {
    let start = thread_cpu();
    for _ in 0..iters {
        f();
    }
    thread_cpu() - start
}

fn pattern(len: usize) -> Vec<u8> {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    for (name, total) in [("hot", SLICE_BYTES), ("cold", 512 << 20)] {
        let src = pattern(total);
        let mut dst = vec![0u8; SLICE_BYTES];
        let mut sums = Vec::with_capacity(SLICE_BYTES / BLOCK_BYTES);
        let mut g = c.benchmark_group(format!("checksum-{name}"));
        g.throughput(Throughput::Bytes(SLICE_BYTES as u64));
        let mut paired = Vec::new();
        block_sums(0, &src[..SLICE_BYTES], &mut sums);
        nbraid_core::crc32c::numbered_blocks(0, &src[..SLICE_BYTES], BLOCK_BYTES, &mut paired);
        assert_eq!(
            paired, sums,
            "numbered_blocks disagrees with a Crc per block: not benchmarked"
        );
        let mut at = 0usize;
        g.bench_function("crc32c-4k-blocks", |b| {
            b.iter_custom(|iters| {
                cpu_timed(iters, || {
                    block_sums(at as u64, &src[at..at + SLICE_BYTES], &mut sums);
                    at = (at + SLICE_BYTES) % total;
                    black_box(&sums);
                })
            })
        });
        // What a checked read runs: the path chosen once, blocks folded two at a time.
        g.bench_function("numbered-blocks", |b| {
            b.iter_custom(|iters| {
                cpu_timed(iters, || {
                    paired.clear();
                    nbraid_core::crc32c::numbered_blocks(
                        at as u64,
                        &src[at..at + SLICE_BYTES],
                        BLOCK_BYTES,
                        &mut paired,
                    );
                    at = (at + SLICE_BYTES) % total;
                    black_box(&paired);
                })
            })
        });
        g.bench_function("memcpy", |b| {
            b.iter_custom(|iters| {
                cpu_timed(iters, || {
                    dst.copy_from_slice(&src[at..at + SLICE_BYTES]);
                    at = (at + SLICE_BYTES) % total;
                    black_box(&dst);
                })
            })
        });
        g.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20);
    targets = bench
}
criterion_main!(benches);
