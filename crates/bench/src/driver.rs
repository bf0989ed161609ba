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

/// Buffers by length, reused across requests. A new buffer is filled with a byte of its
/// own that differs from run to run: a write workload writes new bytes, as a client does —
/// bytes equal to what a volume already holds (a rerun, or the prefill's) would take the
/// checksums' path for rewrites of stored bytes (a repair's), which clients rarely take.
#[derive(Default)]
struct Pool {
    by_len: HashMap<u64, Vec<Buf>>,
    /// Bytes given to the buffers made so far: each new buffer takes the next one.
    fills: FillBytes,
}

/// A byte sequence that starts somewhere new in every run (the clock's nanoseconds).
struct FillBytes(u8);

impl Default for FillBytes {
    fn default() -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        FillBytes(nanos.to_le_bytes()[1])
    }
}

impl Pool {
    fn take(&mut self, len: u64) -> Buf {
        self.by_len
            .get_mut(&len)
            .and_then(Vec::pop)
            .unwrap_or_else(|| {
                // Never 0x5a (the byte older builds wrote) nor 0x00 (a blank member's).
                self.fills.0 = self.fills.0.wrapping_add(0x3b);
                while matches!(self.fills.0, 0x00 | 0x5a) {
                    self.fills.0 = self.fills.0.wrapping_add(0x3b);
                }
                let mut b = Buf::new(len as usize);
                b.fill(self.fills.0);
                b
            })
    }

    fn give(&mut self, b: Buf) {
        self.by_len.entry(b.len() as u64).or_default().push(b);
    }
}

/// The jobs of a cell: their generators, the request each holds back (it overlapped one in
/// flight under `--verify`), how many each has in flight, and the buffers they share.
struct Jobs {
    gens: Vec<Generator>,
    held: Vec<Option<Request>>,
    depth: Vec<usize>,
    issued_bytes: u64,
    verifier: Option<Verifier>,
    pool: Pool,
}

impl Jobs {
    /// One generator per job over its own share of the target's first `span` bytes; refused
    /// when a request size is not whole blocks or a share cannot hold the largest request.
    fn new(target: &dyn Target, cell: &Cell) -> Result<Jobs> {
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
        let gens: Vec<Generator> = (0..jobs)
            .map(|j| {
                Generator::new(
                    &cell.mix,
                    cell.seed.wrapping_add(j.wrapping_mul(0x1000_0000_01b3)),
                    j * per_job,
                    per_job,
                )
            })
            .collect();
        Ok(Jobs {
            held: vec![None; gens.len()],
            depth: vec![0; gens.len()],
            gens,
            issued_bytes: 0,
            verifier: cell.verify.then(Verifier::default),
            pool: Pool::default(),
        })
    }

    /// The next request of job `j` and its buffer (filled for a write under `--verify`);
    /// `None` while the job has `qd` in flight or its request must wait for an overlap.
    fn next(&mut self, j: usize, qd: usize) -> Option<(Request, Buf)> {
        if self.depth[j] >= qd {
            return None;
        }
        let req = self.held[j]
            .take()
            .unwrap_or_else(|| self.gens[j].next_request());
        let mut buf = self.pool.take(req.len);
        if let Some(v) = self.verifier.as_mut() {
            if !v.admit(&req) {
                self.held[j] = Some(req);
                self.pool.give(buf);
                return None;
            }
            if req.write {
                v.fill(&req, &mut buf);
            }
        }
        self.depth[j] += 1;
        self.issued_bytes += req.len;
        Some((req, buf))
    }

    /// Job `j`'s `req` completed with `buf` (checked under `--verify`).
    fn complete(&mut self, j: usize, req: &Request, buf: Buf) -> Result<()> {
        self.depth[j] -= 1;
        if let Some(v) = self.verifier.as_mut() {
            v.complete(req, &buf)?;
        }
        self.pool.give(buf);
        Ok(())
    }
}

/// What a cell's completed requests add up to.
#[derive(Default)]
struct Tally {
    reads: u64,
    writes: u64,
    bytes: u64,
    latency: Histogram,
}

/// Runs `cell` on `target`; `label`/`x` name the point in the result.
pub fn run_cell(target: &dyn Target, cell: &Cell, label: &str, x: f64) -> Result<CellResult> {
    let mut jobs = Jobs::new(target, cell)?;
    let mut tally = Tally::default();
    let cpu0 = cpu_time();
    let start = target.now();
    let mut elapsed = Duration::ZERO;
    let work = async {
        let mut inflight = FuturesUnordered::new();
        loop {
            let stopping = match cell.stop {
                Stop::Time(d) => target.now() - start >= d,
                Stop::Bytes(n) => jobs.issued_bytes >= n,
            };
            if !stopping {
                'jobs: for j in 0..jobs.gens.len() {
                    while let Some((req, buf)) = jobs.next(j, cell.qd) {
                        let t0 = target.now();
                        inflight.push(async move {
                            let r = if req.write {
                                target.write(req.offset, buf).await
                            } else {
                                target.read(req.offset, buf).await
                            };
                            (j, req, t0, r)
                        });
                        if matches!(cell.stop, Stop::Bytes(n) if jobs.issued_bytes >= n) {
                            continue 'jobs;
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
            tally.latency.record(target.now() - t0);
            tally.bytes += req.len;
            if req.write {
                tally.writes += 1;
            } else {
                tally.reads += 1;
            }
            jobs.complete(j, &req, buf)?;
        }
        if tally.writes > 0 {
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
        (tally.reads, tally.writes, tally.bytes),
        elapsed,
        cpu,
        &tally.latency,
    );
    if let Some(v) = jobs.verifier {
        result.verified_sectors = v.read_back(target)?;
    }
    Ok(result)
}
