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

use cases::{prepare, MAX_K, OPS};
use criterion::{BenchmarkId, Criterion, Throughput};
use filter::plain_filter;
use nbraid_benches::isal::{self, Isal};
use nbraid_core::parity::Path;
use std::sync::Arc;
use std::time::Duration;
use table::{table_shape, Table};

#[path = "parity/cases.rs"]
mod cases;
#[path = "parity/check.rs"]
mod check;
#[path = "parity/data.rs"]
mod data;
#[path = "parity/filter.rs"]
mod filter;
#[path = "parity/table.rs"]
mod table;

pub(crate) const KIB: usize = 1024;
pub(crate) const MIB: usize = 1024 * KIB;
/// The out-of-cache shapes cycle over at least this much data.
pub(crate) const COLD_BYTES: usize = 256 * MIB;

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
