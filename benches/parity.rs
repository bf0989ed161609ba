//! # Parity benches
//!
//! `xor_gen`, `pq_gen`, two-data recovery and the single-chunk RMW update of
//! `nbraid_core::parity` on every path this CPU has, beside ISA-L's same four operations
//! (`isal.rs`: the system's `libisal.so.2`, or the builds `NBRAID_ISAL_LIB` names),
//! `reed-solomon-erasure` (`simd-accel`, C built with `-march=native` through
//! `.cargo/config.toml`) encode and reconstruct of the same k+2 shape, and a single-core memcpy
//! and plain read (sum) of the same bytes as the physical references.
//!
//! ```text
//! cargo bench --bench parity                         # everything (~8 minutes)
//! cargo bench --bench parity -- k8-64K               # one shape
//! cargo bench --bench parity -- pq_gen/avx512-gfni   # one operation on one path
//! cargo bench --bench parity -- --list               # the benchmark ids
//! NBRAID_PARITY_TABLE=1 cargo bench --bench parity    # interleaved table instead (~1 min)
//! NBRAID_PARITY_SHAPES=k8-64K,k8-4K ...              # other shapes (k data chunks × size)
//! # ours against ISA-L, side by side, pinned to one core:
//! NBRAID_PARITY_TABLE=1 NBRAID_PARITY_ROUNDS=200 NBRAID_PARITY_SAMPLE_MS=2 \
//!   taskset -c 1 cargo bench --bench parity -- 'avx2|avx512-gfni|isal|/read/'
//! ```
//!
//! On a shared machine, prefer the table: criterion times one id after another, so load from
//! other processes lands on whichever id runs at the time; the table mode times every id of a
//! shape round-robin, alternating the order every round (`NBRAID_PARITY_ROUNDS` rounds,
//! default 15, of `NBRAID_PARITY_SAMPLE_MS` ms per id, default 20; on a busy machine many
//! short samples fare better) and prints the median and best GB/s (10⁹ bytes/s) of each, then
//! our best path over each ISA-L per op as the median of the per-round ratios, with the load
//! averages when the shape started and ended. A filter still selects what runs; `a|b` selects
//! the ids containing any of the parts (as criterion's regex would).
//!
//! Ids are `<shape>/<op>/<impl>`: shape `k{4,8,22}-{64K,1M}` (k data chunks of that size; "64K"
//! is one stripe kept hot in the caches, "1M" cycles over ≥ 256 MiB of stripes so the data
//! comes from DRAM), op `xor_gen | pq_gen | rec2 | rmw | rse_encode | rse_rec2 | memcpy | read`,
//! impl a [`Path`] name (`scalar`, `ssse3`, `avx2`, `avx512`, `avx512-gfni`), `isal-<version>`
//! or `rse` / `ref`.
//! Throughput is the data bytes processed: k chunks for generation, recovery (k−2 surviving
//! data chunks + P + Q), memcpy and read; one chunk (the chunk being written) for `rmw`, which
//! moves six chunks of memory traffic (reads old, new, P, Q; writes P, Q).
//!
//! Before a path (or an ISA-L) is timed on a shape it is checked against the byte-at-a-time
//! reference on that shape's first stripe (as ZFS's `raidz_test` does): one that disagrees is
//! reported and not benched. Paths the CPU lacks are reported as `skipped: <path> (CPU lacks ...)`.
//! Criterion: 10 samples, 0.5 s warm-up, 2 s measurement per id; results in
//! `target/criterion/<shape>_<op>/<impl>/new/estimates.json`.

use criterion::{BenchmarkId, Criterion, Throughput};
use nbraid_benches::isal::{self, Isal};
use nbraid_core::parity::{reference, Kernels, Path};
use rand::rngs::SmallRng;
use rand::{RngCore, SeedableRng};
use reed_solomon_erasure::galois_8::ReedSolomon;
use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

const KIB: usize = 1024;
const MIB: usize = 1024 * KIB;
/// The out-of-cache shapes cycle over at least this much data.
const COLD_BYTES: usize = 256 * MIB;

/// A buffer aligned to 4 KiB, as the engine's O_DIRECT buffers are.
struct Buf {
    v: Vec<u8>,
    off: usize,
    len: usize,
}

impl Buf {
    fn new(len: usize, rng: &mut SmallRng) -> Buf {
        let mut v = vec![0u8; len + 4096];
        let off = v.as_ptr().align_offset(4096);
        rng.fill_bytes(&mut v[off..off + len]);
        Buf { v, off, len }
    }
    fn get(&self) -> &[u8] {
        &self.v[self.off..self.off + self.len]
    }
    fn get_mut(&mut self) -> &mut [u8] {
        &mut self.v[self.off..self.off + self.len]
    }
}

/// `n` stripes of `k` data chunks with their P and Q (md convention, correct after `new`).
struct Pool {
    k: usize,
    len: usize,
    data: Vec<Vec<Buf>>,
    parity: Vec<[Buf; 2]>,
}

impl Pool {
    fn new(k: usize, len: usize, stripes: usize) -> Pool {
        let mut rng = SmallRng::seed_from_u64(0x5eed + k as u64);
        let data: Vec<Vec<Buf>> = (0..stripes)
            .map(|_| (0..k).map(|_| Buf::new(len, &mut rng)).collect())
            .collect();
        let mut parity: Vec<[Buf; 2]> = (0..stripes)
            .map(|_| [Buf::new(len, &mut rng), Buf::new(len, &mut rng)])
            .collect();
        let kern = Kernels::best();
        for (d, [p, q]) in data.iter().zip(parity.iter_mut()) {
            let refs: Vec<&[u8]> = d.iter().map(Buf::get).collect();
            kern.pq_gen(&refs, p.get_mut(), q.get_mut());
        }
        Pool {
            k,
            len,
            data,
            parity,
        }
    }
}

/// The two lost data slots of the recovery benches.
fn lost(k: usize) -> (usize, usize) {
    (1, k - 2)
}

/// The reference results for stripe 0 of a pool: its P and Q, and P and Q after chunk 0 is
/// replaced by chunk 1's content (the RMW check).
struct Expected {
    p: Vec<u8>,
    q: Vec<u8>,
    rmw_p: Vec<u8>,
    rmw_q: Vec<u8>,
}

fn expected(pool: &Pool) -> Expected {
    let len = pool.len;
    let refs: Vec<&[u8]> = pool.data[0].iter().map(Buf::get).collect();
    let (mut p, mut q) = (vec![0; len], vec![0; len]);
    reference::pq_gen(&refs, &mut p, &mut q);
    let mut new_refs = refs.clone();
    new_refs[0] = refs[1];
    let (mut rmw_p, mut rmw_q) = (vec![0; len], vec![0; len]);
    reference::pq_gen(&new_refs, &mut rmw_p, &mut rmw_q);
    Expected { p, q, rmw_p, rmw_q }
}

/// Check every benched operation of `kern` against the reference on stripe 0 of `pool`.
fn verify(kern: Kernels, pool: &Pool, exp: &Expected) -> Result<(), String> {
    let (k, len) = (pool.k, pool.len);
    let refs: Vec<&[u8]> = pool.data[0].iter().map(Buf::get).collect();
    // Outputs with the pool's alignment, so the streaming stores are exercised as in the bench.
    let mut rng = SmallRng::seed_from_u64(1);
    let (mut p, mut q) = (Buf::new(len, &mut rng), Buf::new(len, &mut rng));
    kern.pq_gen(&refs, p.get_mut(), q.get_mut());
    if p.get() != exp.p || q.get() != exp.q {
        return Err("pq_gen".into());
    }
    kern.xor_gen(&refs, p.get_mut());
    if p.get() != exp.p {
        return Err("xor_gen".into());
    }
    if !kern.check_pq(&refs, &exp.p, &exp.q) {
        return Err("check_pq".into());
    }
    let (a, b) = lost(k);
    let mut holes = refs.clone();
    holes[a] = &[];
    holes[b] = &[];
    kern.recover_two_data_into(&holes, &exp.p, &exp.q, a, b, p.get_mut(), q.get_mut());
    if p.get() != refs[a] || q.get() != refs[b] {
        return Err("recover_two_data".into());
    }
    let (mut up, mut uq) = (exp.p.clone(), exp.q.clone());
    kern.pq_update(&mut up, &mut uq, 0, refs[0], refs[1]);
    if up != exp.rmw_p || uq != exp.rmw_q {
        return Err("pq_update".into());
    }
    Ok(())
}

/// Check ISA-L's four benched operations against the reference on stripe 0 of `pool`.
fn verify_isal(isal: &Isal, pool: &Pool, exp: &Expected) -> Result<(), String> {
    let (k, len) = (pool.k, pool.len);
    let refs: Vec<&[u8]> = pool.data[0].iter().map(Buf::get).collect();
    let mut rng = SmallRng::seed_from_u64(1);
    let (mut p, mut q) = (Buf::new(len, &mut rng), Buf::new(len, &mut rng));
    isal.pq_gen(&refs, p.get_mut(), q.get_mut());
    if p.get() != exp.p || q.get() != exp.q {
        return Err("pq_gen".into());
    }
    isal.xor_gen(&refs, p.get_mut());
    if p.get() != exp.p {
        return Err("xor_gen".into());
    }
    let (a, b) = lost(k);
    let tables = isal.recovery_tables(k, a, b);
    let survivors = isal_survivors(&refs, a, b, &exp.p, &exp.q);
    isal.recover_two(&tables, &survivors[..k], p.get_mut(), q.get_mut());
    if p.get() != refs[a] || q.get() != refs[b] {
        return Err("recovery (ec_encode_data)".into());
    }
    let (mut up, mut uq) = (exp.p.clone(), exp.q.clone());
    let tables = isal.update_tables(k);
    isal.pq_update(&tables, 0, &mut up, &mut uq, refs[0], refs[1]);
    if up != exp.rmw_p || uq != exp.rmw_q {
        return Err("RMW (ec_encode_data_update)".into());
    }
    Ok(())
}

/// The k survivors of a two-data loss in ISA-L's recovery order: data slots but `a` and `b`,
/// then P, then Q.
fn isal_survivors<'a>(
    data: &[&'a [u8]],
    a: usize,
    b: usize,
    p: &'a [u8],
    q: &'a [u8],
) -> [&'a [u8]; MAX_K] {
    let mut v: [&[u8]; MAX_K] = [&[]; MAX_K];
    let present = data
        .iter()
        .enumerate()
        .filter(|&(i, _)| i != a && i != b)
        .map(|(_, d)| *d)
        .chain([p, q]);
    for (slot, d) in v.iter_mut().zip(present) {
        *slot = d;
    }
    v
}

/// Plain read of the bytes: a sum of 64-bit words, as wide as the CPU allows.
fn read_sum(chunks: &[&[u8]]) -> u64 {
    chunks.iter().fold(0u64, |acc, c| acc.wrapping_add(sum(c)))
}

fn sum(b: &[u8]) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx512f") {
        // SAFETY: AVX-512F was just detected.
        return unsafe { sum_avx512(b) };
    }
    let words = b.chunks_exact(8);
    let tail = words.remainder().iter().map(|&x| x as u64).sum::<u64>();
    // Plain u64 adds, which the compiler vectorises for the build's target.
    words.fold(tail, |acc, w| {
        acc.wrapping_add(u64::from_ne_bytes(w.try_into().expect("8 bytes")))
    })
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn sum_avx512(b: &[u8]) -> u64 {
    use std::arch::x86_64::*;
    let mut acc = [_mm512_setzero_si512(); 4];
    let blocks = b.chunks_exact(256);
    let tail = blocks.remainder();
    for blk in blocks {
        for (i, a) in acc.iter_mut().enumerate() {
            // SAFETY: `blk` is 256 bytes long, so [64 i, 64 i + 64) is in bounds.
            let v = unsafe { _mm512_loadu_si512(blk.as_ptr().add(64 * i).cast()) };
            *a = _mm512_add_epi64(*a, v);
        }
    }
    let s = _mm512_add_epi64(
        _mm512_add_epi64(acc[0], acc[1]),
        _mm512_add_epi64(acc[2], acc[3]),
    );
    let mut t = _mm512_reduce_add_epi64(s) as u64;
    for &x in tail {
        t = t.wrapping_add(x as u64);
    }
    t
}

/// The positional filter given on the command line, if it is a plain substring (criterion
/// treats it as a regex; with regex syntax in it we cannot tell, so nothing is skipped).
fn plain_filter() -> Option<String> {
    let mut args = std::env::args().skip(1);
    let mut filter = None;
    while let Some(a) = args.next() {
        if a == "--bench" || a == "--test" || a == "--list" || a == "--exact" {
            continue;
        }
        if a.starts_with("--") {
            // Options with a value.
            if matches!(
                a.as_str(),
                "--save-baseline"
                    | "--baseline"
                    | "--load-baseline"
                    | "--sample-size"
                    | "--warm-up-time"
                    | "--measurement-time"
                    | "--profile-time"
                    | "--color"
                    | "--output-format"
                    | "--plotting-backend"
                    | "--noise-threshold"
                    | "--confidence-level"
                    | "--significance-level"
                    | "--nresamples"
            ) {
                args.next();
            }
            continue;
        }
        filter = Some(a);
    }
    filter.filter(|f| !f.chars().any(|c| "^$.*+?()[]{}\\".contains(c)))
}

/// Whether `id` matches the filter: a substring, or `a|b|…` for any of several (the same
/// meaning the regex has for criterion).
fn wanted(filter: &Option<String>, id: &str) -> bool {
    filter
        .as_ref()
        .is_none_or(|f| f.split('|').any(|alt| id.contains(alt)))
}

/// The most data chunks a benched stripe has (stack arrays of chunk views, no allocation in
/// the timed loop).
const MAX_K: usize = 32;

/// Shared views of one stripe's data chunks.
fn views(data: &[Buf]) -> [&[u8]; MAX_K] {
    let mut v: [&[u8]; MAX_K] = [&[]; MAX_K];
    for (slot, b) in v.iter_mut().zip(data) {
        *slot = b.get();
    }
    v
}

/// Processes stripe `s` of the pool once.
type RunFn = Box<dyn Fn(&mut Pool, &mut Extra, usize)>;

/// One benchmarked operation.
struct Case {
    op: &'static str,
    imp: String,
    bytes: u64,
    run: RunFn,
}

/// What some cases need besides the pool: the memcpy destinations and the rse codec.
struct Extra {
    dst: Vec<Vec<Buf>>,
    rs: ReedSolomon,
}

/// ISA-L's cases for one shape, beside ours (see `isal.rs` for how each is done with ISA-L).
fn isal_cases(k: usize, len: usize, isal: &Arc<Isal>, v: &mut Vec<Case>) {
    let data_bytes = (k * len) as u64;
    let (a, b) = lost(k);
    let imp = isal.label();
    let lib = isal.clone();
    v.push(Case {
        op: "xor_gen",
        imp: imp.clone(),
        bytes: data_bytes,
        run: Box::new(move |pool, _, s| {
            let refs = views(&pool.data[s]);
            lib.xor_gen(&refs[..k], pool.parity[s][0].get_mut());
        }),
    });
    let lib = isal.clone();
    v.push(Case {
        op: "pq_gen",
        imp: imp.clone(),
        bytes: data_bytes,
        run: Box::new(move |pool, _, s| {
            let refs = views(&pool.data[s]);
            let [p, q] = &mut pool.parity[s];
            lib.pq_gen(&refs[..k], p.get_mut(), q.get_mut());
        }),
    });
    // In place, as ours: the lost slots are overwritten with what they held.
    let lib = isal.clone();
    let tables = isal.recovery_tables(k, a, b);
    v.push(Case {
        op: "rec2",
        imp: imp.clone(),
        bytes: data_bytes,
        run: Box::new(move |pool, _, s| {
            let (data, [p, q]) = (&mut pool.data[s], &pool.parity[s]);
            let mut outs: [&mut [u8]; 2] = [&mut [], &mut []];
            let mut refs: [&[u8]; MAX_K] = [&[]; MAX_K];
            for (i, d) in data.iter_mut().enumerate() {
                if i == a {
                    outs[0] = d.get_mut();
                } else if i == b {
                    outs[1] = d.get_mut();
                } else {
                    refs[i] = d.get();
                }
            }
            let surv = isal_survivors(&refs[..k], a, b, p.get(), q.get());
            let [out_a, out_b] = outs;
            lib.recover_two(&tables, &surv[..k], out_a, out_b);
        }),
    });
    let lib = isal.clone();
    let tables = isal.update_tables(k);
    v.push(Case {
        op: "rmw",
        imp,
        bytes: len as u64,
        run: Box::new(move |pool, _, s| {
            let (data, [p, q]) = (&pool.data[s], &mut pool.parity[s]);
            lib.pq_update(
                &tables,
                0,
                p.get_mut(),
                q.get_mut(),
                data[0].get(),
                data[1].get(),
            );
        }),
    });
}

fn cases(k: usize, len: usize, kernels: &[Kernels], isals: &[Arc<Isal>]) -> Vec<Case> {
    let data_bytes = (k * len) as u64;
    let (a, b) = lost(k);
    let mut v: Vec<Case> = Vec::new();
    for isal in isals {
        isal_cases(k, len, isal, &mut v);
    }
    for &kern in kernels {
        v.push(Case {
            op: "xor_gen",
            imp: kern.path().to_string(),
            bytes: data_bytes,
            run: Box::new(move |pool, _, s| {
                let refs = views(&pool.data[s]);
                kern.xor_gen(&refs[..k], pool.parity[s][0].get_mut());
            }),
        });
    }
    for &kern in kernels {
        v.push(Case {
            op: "pq_gen",
            imp: kern.path().to_string(),
            bytes: data_bytes,
            run: Box::new(move |pool, _, s| {
                let refs = views(&pool.data[s]);
                let [p, q] = &mut pool.parity[s];
                kern.pq_gen(&refs[..k], p.get_mut(), q.get_mut());
            }),
        });
    }
    // Two lost data chunks rebuilt in place (the recovered bytes equal the old ones, so the
    // stripes stay consistent from one iteration to the next).
    for &kern in kernels {
        v.push(Case {
            op: "rec2",
            imp: kern.path().to_string(),
            bytes: data_bytes,
            run: Box::new(move |pool, _, s| {
                let mut muts: [&mut [u8]; MAX_K] = std::array::from_fn(|_| &mut [][..]);
                for (slot, buf) in muts.iter_mut().zip(pool.data[s].iter_mut()) {
                    *slot = buf.get_mut();
                }
                let [p, q] = &pool.parity[s];
                kern.recover_two_data(&mut muts[..k], p.get(), q.get(), a, b);
            }),
        });
    }
    // Single-chunk read-modify-write: slot 0 goes from data[0] to data[1]'s content (the
    // parity toggles between two states; timing does not depend on the values).
    for &kern in kernels {
        v.push(Case {
            op: "rmw",
            imp: kern.path().to_string(),
            bytes: len as u64,
            run: Box::new(move |pool, _, s| {
                let (data, parity) = (&pool.data[s], &mut pool.parity[s]);
                let [p, q] = parity;
                kern.pq_update(p.get_mut(), q.get_mut(), 0, data[0].get(), data[1].get());
            }),
        });
    }
    // The baseline: reed-solomon-erasure k+2 (its parity rows are not md's Q: speed only).
    v.push(Case {
        op: "rse_encode",
        imp: "rse".into(),
        bytes: data_bytes,
        run: Box::new(move |pool, x, s| {
            let refs = views(&pool.data[s]);
            let [p, q] = &mut pool.parity[s];
            x.rs.encode_sep(&refs[..k], &mut [p.get_mut(), q.get_mut()])
                .expect("rse encode");
        }),
    });
    v.push(Case {
        op: "rse_rec2",
        imp: "rse".into(),
        bytes: data_bytes,
        run: Box::new(move |pool, x, s| {
            let mut shards: [(&mut [u8], bool); MAX_K + 2] =
                std::array::from_fn(|_| (&mut [][..], true));
            let (data, parity) = (&mut pool.data[s], &mut pool.parity[s]);
            for (j, (slot, buf)) in shards
                .iter_mut()
                .zip(data.iter_mut().chain(parity.iter_mut()))
                .enumerate()
            {
                *slot = (buf.get_mut(), j != a && j != b);
            }
            x.rs.reconstruct_data(&mut shards[..k + 2])
                .expect("rse reconstruct");
        }),
    });
    // Physical references: copy the stripe's bytes (to destinations that cycle like the
    // source, ≥ 64 MiB when cold), and read them.
    v.push(Case {
        op: "memcpy",
        imp: "ref".into(),
        bytes: data_bytes,
        run: Box::new(move |pool, x, s| {
            let d = s % x.dst.len();
            for (to, from) in x.dst[d].iter_mut().zip(&pool.data[s]) {
                to.get_mut().copy_from_slice(from.get());
            }
            black_box(&mut x.dst[d]);
        }),
    });
    v.push(Case {
        op: "read",
        imp: "ref".into(),
        bytes: data_bytes,
        run: Box::new(move |pool, _, s| {
            let refs = views(&pool.data[s]);
            black_box(read_sum(&refs[..k]));
        }),
    });
    v
}

const OPS: [&str; 8] = [
    "xor_gen",
    "pq_gen",
    "rec2",
    "rmw",
    "rse_encode",
    "rse_rec2",
    "memcpy",
    "read",
];

/// Set up one shape, check the paths, and return what to run (`None` when the filter
/// excludes the whole shape).
fn prepare(
    filter: &Option<String>,
    isals: &[Arc<Isal>],
    k: usize,
    len: usize,
) -> Option<(String, Pool, Extra, Vec<Case>)> {
    assert!(k <= MAX_K);
    let shape = if len >= MIB {
        format!("k{k}-{}M", len / MIB)
    } else {
        format!("k{k}-{}K", len / KIB)
    };
    let impls: Vec<String> = Path::ALL
        .iter()
        .map(|p| p.name().to_string())
        .chain(["rse".into(), "ref".into()])
        .chain(isals.iter().map(|i| i.label()))
        .collect();
    if !OPS.iter().any(|op| {
        impls
            .iter()
            .any(|i| wanted(filter, &format!("{shape}/{op}/{i}")))
    }) {
        return None;
    }
    let hot = len < MIB;
    let stripes = if hot { 1 } else { COLD_BYTES.div_ceil(k * len) };
    let pool = Pool::new(k, len, stripes);

    // raidz_test's rule: only paths that agree with the reference are timed.
    let exp = expected(&pool);
    let mut kernels = Vec::new();
    for path in Path::ALL {
        match Kernels::new(path) {
            None => println!(
                "skipped: {path} ({})",
                path.unavailable_reason().unwrap_or_default()
            ),
            Some(kern) => match verify(kern, &pool, &exp) {
                Ok(()) => kernels.push(kern),
                Err(op) => println!(
                    "REFUSED: {path} disagrees with the reference on {shape} ({op}); not benched"
                ),
            },
        }
    }
    let mut checked_isals = Vec::new();
    for isal in isals {
        match verify_isal(isal, &pool, &exp) {
            Ok(()) => checked_isals.push(isal.clone()),
            Err(op) => println!(
                "REFUSED: {} ({}) disagrees with the reference on {shape} ({op}); not benched",
                isal.label(),
                isal.lib
            ),
        }
    }
    let dst_stripes = if hot { 1 } else { (64 * MIB).div_ceil(k * len) };
    let mut rng = SmallRng::seed_from_u64(2);
    let extra = Extra {
        dst: (0..dst_stripes)
            .map(|_| (0..k).map(|_| Buf::new(len, &mut rng)).collect())
            .collect(),
        rs: ReedSolomon::new(k, 2).expect("reed-solomon-erasure codec"),
    };
    let cases = cases(k, len, &kernels, &checked_isals)
        .into_iter()
        .filter(|c| wanted(filter, &format!("{shape}/{}/{}", c.op, c.imp)))
        .collect();
    Some((shape, pool, extra, cases))
}

fn bench_shape(
    c: &mut Criterion,
    filter: &Option<String>,
    isals: &[Arc<Isal>],
    k: usize,
    len: usize,
) {
    let Some((shape, mut pool, mut extra, cases)) = prepare(filter, isals, k, len) else {
        return;
    };
    let n = pool.data.len();
    for op in OPS {
        let mut g = c.benchmark_group(format!("{shape}/{op}"));
        for case in cases.iter().filter(|c| c.op == op) {
            g.throughput(Throughput::Bytes(case.bytes));
            let mut i = 0;
            g.bench_function(BenchmarkId::from_parameter(&case.imp), |bch| {
                bch.iter(|| {
                    (case.run)(&mut pool, &mut extra, i % n);
                    i += 1;
                })
            });
        }
        g.finish();
    }
}

/// The system load averages (1, 5, 15 min) as `/proc/loadavg` has them.
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// A number from the environment, or `default`.
fn env_num(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// What the table mode prints: one row per case, and per op our best path against each ISA-L.
#[derive(Default)]
struct Table {
    rows: Vec<(String, String)>,
    ratios: Vec<String>,
}

/// `NBRAID_PARITY_TABLE=1`: instead of criterion, time every case of a shape round-robin
/// (`NBRAID_PARITY_ROUNDS` rounds, default 15, of ~20 ms per case, so load from other processes
/// hits all of them alike) and print the median and best GB/s (10⁹ bytes/s) as a markdown
/// table; then, per op, our best path over each ISA-L as the median of the per-round ratios,
/// with the load averages at the start and end of the shape.
fn table_shape(
    filter: &Option<String>,
    isals: &[Arc<Isal>],
    k: usize,
    len: usize,
    out: &mut Table,
) {
    let Some((shape, mut pool, mut extra, cases)) = prepare(filter, isals, k, len) else {
        return;
    };
    let load_start = loadavg();
    let n = pool.data.len();
    let mut next = 0usize;
    let mut run = |case: &Case, iters: usize, pool: &mut Pool, extra: &mut Extra| {
        let t = std::time::Instant::now();
        for _ in 0..iters {
            (case.run)(pool, extra, next % n);
            next += 1;
        }
        t.elapsed().as_secs_f64()
    };
    let sample_secs = env_num("NBRAID_PARITY_SAMPLE_MS", 20) as f64 / 1e3;
    let iters: Vec<usize> = cases
        .iter()
        .map(|c| {
            run(c, 2, &mut pool, &mut extra);
            let t = run(c, 3, &mut pool, &mut extra) / 3.0;
            ((sample_secs / t) as usize).max(1)
        })
        .collect();
    let rounds = env_num("NBRAID_PARITY_ROUNDS", 15).max(1);
    let mut samples = vec![Vec::new(); cases.len()];
    for r in 0..rounds {
        // Alternate the order, so no case always runs right after the same other one.
        let order: Vec<usize> = if r % 2 == 0 {
            (0..cases.len()).collect()
        } else {
            (0..cases.len()).rev().collect()
        };
        for i in order {
            let t = run(&cases[i], iters[i], &mut pool, &mut extra);
            samples[i].push(cases[i].bytes as f64 * iters[i] as f64 / t / 1e9);
        }
    }
    let load = format!("{load_start} → {}", loadavg());
    for (c, s) in cases.iter().zip(&samples) {
        let best = s.iter().copied().fold(0.0, f64::max);
        let line = format!("{:.1} ({best:.1})", median(s.clone()));
        println!("{shape}/{}/{}: {line} GB/s", c.op, c.imp);
        out.rows.push((format!("{shape}/{}/{}", c.op, c.imp), line));
    }
    let ours = Path::best().name();
    for op in OPS {
        let Some(o) = cases.iter().position(|c| c.op == op && c.imp == ours) else {
            continue;
        };
        for isal in isals {
            let Some(i) = cases
                .iter()
                .position(|c| c.op == op && c.imp == isal.label())
            else {
                continue;
            };
            let ratio = median(
                samples[o]
                    .iter()
                    .zip(&samples[i])
                    .map(|(a, b)| a / b)
                    .collect(),
            );
            out.ratios.push(format!(
                "| {shape} | {op} | {:.1} | {} {:.1} | **{ratio:.2}** | {load} |",
                median(samples[o].clone()),
                isal.label(),
                median(samples[i].clone()),
            ));
        }
    }
}

/// A shape id as the bench names them (`k8-64K`, `k22-1M`): (k, chunk bytes).
fn parse_shape(id: &str) -> (usize, usize) {
    let bad =
        || -> ! { panic!("NBRAID_PARITY_SHAPES: {id:?} is not a shape like k8-64K or k4-1M") };
    let Some((k, size)) = id.trim().strip_prefix('k').and_then(|r| r.split_once('-')) else {
        bad()
    };
    let (num, unit) = size.split_at(size.len().saturating_sub(1));
    let mult = match unit {
        "K" => KIB,
        "M" => MIB,
        _ => bad(),
    };
    match (k.parse::<usize>(), num.parse::<usize>()) {
        (Ok(k), Ok(n)) if (2..=MAX_K).contains(&k) && n > 0 => (k, n * mult),
        _ => bad(),
    }
}

fn main() {
    let shapes = match std::env::var("NBRAID_PARITY_SHAPES") {
        Ok(list) => list.split(',').map(parse_shape).collect(),
        Err(_) => vec![
            (8, 64 * KIB),
            (8, MIB),
            (4, 64 * KIB),
            (4, MIB),
            (22, 64 * KIB),
            (22, MIB),
        ],
    };
    let filter = plain_filter();
    println!("parity paths: best = {}", Path::best());
    let mut isals = Vec::new();
    for lib in isal::lib_names() {
        match Isal::load(&lib) {
            Ok(i) => {
                println!("baseline: ISA-L {} from {lib}", i.version);
                isals.push(Arc::new(i));
            }
            Err(e) => println!("skipped: ISA-L baseline ({e})"),
        }
    }
    if std::env::var_os("NBRAID_PARITY_TABLE").is_some() {
        let mut t = Table::default();
        for (k, len) in shapes {
            table_shape(&filter, &isals, k, len, &mut t);
        }
        println!("\n| shape/op/impl | GB/s median (best) of interleaved samples |\n|---|---:|");
        for (id, v) in t.rows {
            println!("| {id} | {v} |");
        }
        if !t.ratios.is_empty() {
            println!(
                "\n| shape | op | ours ({}) GB/s | ISA-L GB/s | ours / ISA-L (median of per-round ratios) | load 1/5/15 min (start → end) |\n|---|---|---:|---:|---:|---|",
                Path::best()
            );
            for r in t.ratios {
                println!("{r}");
            }
        }
        return;
    }
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(10)
        .without_plots()
        .configure_from_args();
    for (k, len) in shapes {
        bench_shape(&mut c, &filter, &isals, k, len);
    }
    c.final_summary();
}
