//! Runs one cell: `jobs` generators, each keeping `qd` requests in flight on a target until
//! the duration or byte count is reached, timing every request on the target's clock. A cell
//! that wrote ends with a flush, counted in its time (a write-back cache's work is counted).

use super::generator::{Generator, Request};
use super::stats::{cpu_time, CellResult, Histogram};
use super::target::Target;
use super::verify::Verifier;
use super::workload::Entry;
use anyhow::{bail, Context, Result};
use futures::stream::{FuturesUnordered, StreamExt};
use futures::FutureExt;
use nbraid_core::Buf;
use std::collections::HashMap;
use std::time::Duration;

/// When a cell ends.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Stop {
    /// After this much time on the target's clock (virtual for simulated members).
    Time(Duration),
    /// After this many bytes were issued (all jobs together).
    Bytes(u64),
}

#[derive(Clone, Debug)]
pub struct Cell {
    pub mix: Vec<Entry>,
    pub qd: usize,
    pub jobs: usize,
    pub stop: Stop,
    pub seed: u64,
    pub verify: bool,
    /// Bytes of the target the requests stay within (default: all of it).
    pub span: Option<u64>,
}

/// Buffers by length, reused across requests.
#[derive(Default)]
struct Pool(HashMap<u64, Vec<Buf>>);

impl Pool {
    fn take(&mut self, len: u64) -> Buf {
        self.0.get_mut(&len).and_then(Vec::pop).unwrap_or_else(|| {
            let mut b = Buf::new(len as usize);
            b.fill(0x5a);
            b
        })
    }

    fn give(&mut self, b: Buf) {
        self.0.entry(b.len() as u64).or_default().push(b);
    }
}

/// Runs `cell` on `target`; `label`/`x` name the point in the result.
pub fn run_cell(target: &dyn Target, cell: &Cell, label: &str, x: f64) -> Result<CellResult> {
    let block = target.block_bytes();
    if let Some(e) = cell.mix.iter().find(|e| e.size_bytes % block != 0) {
        bail!(
            "{}: requests of {} bytes are not multiples of its {block}-byte logical block (a config volume takes `block_size = 512`)",
            target.name(),
            e.size_bytes
        );
    }
    let span = cell.span.unwrap_or(u64::MAX).min(target.len_bytes());
    let jobs = cell.jobs.max(1) as u64;
    let per_job = span / jobs / block * block;
    let largest = cell.mix.iter().map(|e| e.size_bytes).max().unwrap_or(0);
    if per_job < largest {
        bail!(
            "{}: {span} bytes over {jobs} job(s) leave less than one {largest}-byte request each",
            target.name()
        );
    }
    let mut gens: Vec<Generator> = (0..jobs)
        .map(|j| {
            Generator::new(
                &cell.mix,
                cell.seed.wrapping_add(j.wrapping_mul(0x1000_0000_01b3)),
                j * per_job,
                per_job,
            )
        })
        .collect();
    let mut verifier = cell.verify.then(Verifier::default);
    let mut hist = Histogram::default();
    let (mut reads, mut writes, mut bytes) = (0u64, 0u64, 0u64);
    let mut pool = Pool::default();
    let cpu0 = cpu_time();
    let start = target.now();
    let mut elapsed = Duration::ZERO;
    let work = async {
        let mut inflight = FuturesUnordered::new();
        let mut per_job = vec![0usize; jobs as usize];
        let mut issued_bytes = 0u64;
        // A request drawn but held back (it overlapped one in flight under --verify).
        let mut held: Vec<Option<Request>> = vec![None; jobs as usize];
        loop {
            let stopping = match cell.stop {
                Stop::Time(d) => target.now() - start >= d,
                Stop::Bytes(n) => issued_bytes >= n,
            };
            if !stopping {
                for j in 0..jobs as usize {
                    while per_job[j] < cell.qd {
                        let req = held[j].take().unwrap_or_else(|| gens[j].next_request());
                        let mut buf = pool.take(req.len);
                        if let Some(v) = verifier.as_mut() {
                            if !v.admit(&req) {
                                held[j] = Some(req);
                                pool.give(buf);
                                break;
                            }
                            if req.write {
                                v.fill(&req, &mut buf);
                            }
                        }
                        per_job[j] += 1;
                        issued_bytes += req.len;
                        let t0 = target.now();
                        inflight.push(async move {
                            let r = if req.write {
                                target.write(req.offset, buf).await
                            } else {
                                target.read(req.offset, buf).await
                            };
                            (j, req, t0, r)
                        });
                        if matches!(cell.stop, Stop::Bytes(n) if issued_bytes >= n) {
                            break;
                        }
                    }
                }
            }
            let Some((j, req, t0, r)) = inflight.next().await else {
                break;
            };
            let buf = r.with_context(|| {
                format!(
                    "{} of {} bytes at {}",
                    if req.write { "write" } else { "read" },
                    req.len,
                    req.offset
                )
            })?;
            hist.record(target.now() - t0);
            per_job[j] -= 1;
            bytes += req.len;
            if req.write {
                writes += 1;
            } else {
                reads += 1;
            }
            if let Some(v) = verifier.as_mut() {
                v.complete(&req, &buf)?;
            }
            pool.give(buf);
        }
        if writes > 0 {
            target.flush().await.context("flush at the end")?;
        }
        elapsed = target.now() - start;
        anyhow::Ok(())
    };
    target.block_on(work.boxed_local())?;
    let cpu = cpu_time().saturating_sub(cpu0);
    let mut result = CellResult::new(
        target.name(),
        label,
        x,
        cell.qd,
        cell.jobs,
        (reads, writes, bytes),
        elapsed,
        cpu,
        &hist,
    );
    if let Some(v) = verifier {
        result.verified_sectors = v.read_back(target)?;
    }
    Ok(result)
}
