//! `NBRAID_PARITY_TABLE=1`: every case of a shape timed round-robin instead of criterion's
//! one id after another, so load from other processes hits all of them alike.

use crate::cases::{prepare, Case, Extra, OPS};
use crate::data::Pool;
use nbraid_benches::isal::Isal;
use nbraid_core::parity::Path;
use std::sync::Arc;

/// The system load averages (1, 5, 15 min) as `/proc/loadavg` has them.
pub(crate) fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// A number from the environment, or `default`.
pub(crate) fn env_num(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// What the table mode prints: one row per case, and per op our best path against each ISA-L.
#[derive(Default)]
pub(crate) struct Table {
    pub(crate) rows: Vec<(String, String)>,
    pub(crate) ratios: Vec<String>,
}

/// `NBRAID_PARITY_TABLE=1`: instead of criterion, time every case of a shape round-robin
/// (`NBRAID_PARITY_ROUNDS` rounds, default 15, of ~20 ms per case, so load from other processes
/// hits all of them alike) and print the median and best GB/s (10⁹ bytes/s) as a markdown
/// table; then, per op, our best path over each ISA-L as the median of the per-round ratios,
/// with the load averages at the start and end of the shape.
pub(crate) fn table_shape(
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
