//! A seeded fault-injecting wrapper around any member.
//!
//! - I/O errors on chosen byte ranges (every time, or only the first `n` times: a transient
//!   media error that a rewrite cures), or on every op after `n` more ops (a dying device).
//! - Added latency, uniform in a range, from a timer thread (completion order gets shuffled
//!   under concurrency, which is what the model tests want).
//! - Power loss: with [`Faulty::with_power_loss`], writes are held in a volatile "cache" (per
//!   512-byte sector, newest wins) and reach the inner member only on flush; FUA writes go
//!   straight through. [`Faulty::crash`] drops the cache, keeping a seeded subset of the
//!   unflushed writes — whole writes, or torn at 512-byte granularity — and the inner member
//!   is left exactly as a disk would be after losing power: flushed data plus some of the rest.
//!
//! - Flushes go through a [`FlushGate`], as on a real file member: one at a time, shared by
//!   the callers waiting, and once one has failed (an injected flush error) every later one
//!   fails, whichever volume asks.
//!
//! All randomness comes from one seed, so a failing test replays exactly (given the same
//! order of operations).

use crate::rng::Rng;
use futures::future::BoxFuture;
use futures::FutureExt;
use nbraid_core::timer;
use nbraid_core::{Buf, FlushGate, SharedBuf};
use nbraid_core::{Member, MemberCounters, MemberError, MemberOp, MemberResult};
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::io;
use std::ops::Range;
use std::time::Duration;

const SECTOR: u64 = 512;

/// Which operations a fault applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FaultOps {
    pub read: bool,
    /// Writes, trims and write-zeroes.
    pub write: bool,
    pub flush: bool,
}

impl FaultOps {
    pub const READ: FaultOps = FaultOps {
        read: true,
        write: false,
        flush: false,
    };
    pub const WRITE: FaultOps = FaultOps {
        read: false,
        write: true,
        flush: false,
    };
    pub const FLUSH: FaultOps = FaultOps {
        read: false,
        write: false,
        flush: true,
    };
    pub const ALL: FaultOps = FaultOps {
        read: true,
        write: true,
        flush: true,
    };

    fn covers(self, op: MemberOp) -> bool {
        match op {
            MemberOp::Read => self.read,
            MemberOp::Write | MemberOp::Trim | MemberOp::WriteZeroes => self.write,
            MemberOp::Flush => self.flush,
        }
    }
}

#[derive(Clone, Debug)]
enum Rule {
    /// Ops of `ops` overlapping `range` fail; `times` left (None = forever).
    Range {
        ops: FaultOps,
        range: Range<u64>,
        times: Option<u64>,
    },
    /// After `after` more ops of `ops`, every such op fails.
    After { ops: FaultOps, after: u64 },
    /// The next `times` ops of `ops` fail, wherever they are.
    Next { ops: FaultOps, times: u64 },
    /// Reads overlapping `range` fail until a write covers all of it: a bad sector the disk
    /// remaps when it is rewritten (a pending sector). `None` once written.
    UntilWritten { range: Option<Range<u64>> },
}

struct State {
    rng: Rng,
    rules: Vec<Rule>,
    /// Added latency bounds (inclusive), in microseconds.
    latency_us: (u64, u64),
    /// Unflushed writes by sector: (write sequence number, bytes). Only with power loss.
    cache: BTreeMap<u64, (u64, Box<[u8]>)>,
    seq: u64,
}

/// What a simulated power loss did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CrashReport {
    /// Unflushed sectors that reached the member anyway.
    pub kept_sectors: u64,
    /// Unflushed sectors lost.
    pub lost_sectors: u64,
}

pub struct Faulty<M> {
    inner: M,
    name: String,
    /// Whether writes are held until flush (power-loss simulation).
    power_loss: bool,
    state: Mutex<State>,
    flushes: FlushGate,
    counters: MemberCounters,
}

impl<M: Member> Faulty<M> {
    pub fn new(inner: M, seed: u64) -> Faulty<M> {
        let name = format!("faulty({})", inner.name());
        Faulty {
            inner,
            name,
            power_loss: false,
            state: Mutex::new(State {
                rng: Rng::new(seed),
                rules: Vec::new(),
                latency_us: (0, 0),
                cache: BTreeMap::new(),
                seq: 0,
            }),
            flushes: FlushGate::new(),
            counters: MemberCounters::default(),
        }
    }

    /// Holds writes in a volatile cache until flush, so [`Faulty::crash`] can lose them.
    pub fn with_power_loss(mut self) -> Self {
        self.power_loss = true;
        self
    }

    pub fn inner(&self) -> &M {
        &self.inner
    }

    /// Ops of `ops` overlapping `range` fail, always.
    pub fn fail_range(&self, ops: FaultOps, range: Range<u64>) {
        self.state.lock().rules.push(Rule::Range {
            ops,
            range,
            times: None,
        });
    }

    /// Ops of `ops` overlapping `range` fail the next `times` times (a transient error).
    pub fn fail_range_times(&self, ops: FaultOps, range: Range<u64>, times: u64) {
        self.state.lock().rules.push(Rule::Range {
            ops,
            range,
            times: Some(times),
        });
    }

    /// Reads overlapping `range` fail until a write covers the whole of it (a bad sector the
    /// disk remaps when it is rewritten); then it reads again.
    pub fn fail_reads_until_written(&self, range: Range<u64>) {
        let range = Some(range);
        self.state.lock().rules.push(Rule::UntilWritten { range });
    }

    /// After `after` more ops of `ops`, every such op fails (0 = from now on).
    pub fn fail_after(&self, ops: FaultOps, after: u64) {
        self.state.lock().rules.push(Rule::After { ops, after });
    }

    /// The next `times` ops of `ops` fail (e.g. one flush: a write-back error).
    pub fn fail_next(&self, ops: FaultOps, times: u64) {
        self.state.lock().rules.push(Rule::Next { ops, times });
    }

    /// The device dies: every op fails from now on.
    pub fn kill(&self) {
        self.fail_after(FaultOps::ALL, 0);
    }

    /// Removes the fault rules. A flush failure already seen stays: see [`FlushGate`].
    pub fn clear_faults(&self) {
        self.state.lock().rules.clear();
    }

    /// Adds a latency drawn uniformly from `min..=max` to every op.
    pub fn set_latency(&self, min: Duration, max: Duration) {
        let (a, b) = (min.as_micros() as u64, max.as_micros() as u64);
        self.state.lock().latency_us = (a.min(b), a.max(b));
    }

    /// Unflushed bytes held in the volatile cache.
    pub fn unflushed_bytes(&self) -> u64 {
        self.state.lock().cache.len() as u64 * SECTOR
    }

    /// Simulates power loss: unflushed writes are dropped except a seeded subset, which is
    /// written to the inner member (whole writes, or with `torn` each sector on its own).
    pub async fn crash(&self, torn: bool) -> MemberResult<CrashReport> {
        let (cache, keep_write) = {
            let mut st = self.state.lock();
            let cache = std::mem::take(&mut st.cache);
            // Decide per write (sequence number) up front, so untorn writes stay whole.
            let mut seqs: Vec<u64> = cache.values().map(|v| v.0).collect();
            seqs.sort_unstable();
            seqs.dedup();
            let keep: std::collections::HashSet<u64> =
                seqs.into_iter().filter(|_| st.rng.coin()).collect();
            let per_sector: Vec<bool> = cache.keys().map(|_| st.rng.coin()).collect();
            let kept: Vec<bool> = cache
                .values()
                .zip(per_sector)
                .map(|(v, coin)| if torn { coin } else { keep.contains(&v.0) })
                .collect();
            (cache, kept)
        };
        let mut report = CrashReport::default();
        let mut survivors = Vec::new();
        for ((sector, (_, data)), keep) in cache.into_iter().zip(keep_write) {
            if keep {
                report.kept_sectors += 1;
                survivors.push((sector, data));
            } else {
                report.lost_sectors += 1;
            }
        }
        for (sector, data) in runs(survivors) {
            self.inner
                .write(sector * SECTOR, Buf::copy_from(&data).freeze(), false)
                .await?;
        }
        self.inner.flush().await?;
        Ok(report)
    }

    /// Applies latency and fault rules to one op; `Err` when the op must fail.
    async fn gate(&self, op: MemberOp, offset: u64, len: u64) -> MemberResult<()> {
        let (delay, fail) = {
            let mut st = self.state.lock();
            let (lo, hi) = st.latency_us;
            let delay = if hi > 0 {
                lo + st.rng.below(hi - lo + 1)
            } else {
                0
            };
            let mut fail = false;
            for rule in st.rules.iter_mut() {
                match rule {
                    Rule::Range { ops, range, times } => {
                        let overlaps = if op == MemberOp::Flush {
                            false
                        } else {
                            range.start < offset + len.max(1) && offset < range.end
                        };
                        if ops.covers(op) && overlaps && times.is_none_or(|t| t > 0) {
                            fail = true;
                            if let Some(t) = times {
                                *t -= 1;
                            }
                        }
                    }
                    Rule::UntilWritten { range } => match (op, range.as_ref()) {
                        (MemberOp::Read, Some(r)) if r.start < offset + len && offset < r.end => {
                            fail = true;
                        }
                        (MemberOp::Write, Some(r))
                            if offset <= r.start && r.end <= offset + len =>
                        {
                            *range = None;
                        }
                        _ => {}
                    },
                    Rule::Next { ops, times } => {
                        if ops.covers(op) && *times > 0 {
                            fail = true;
                            *times -= 1;
                        }
                    }
                    Rule::After { ops, after } => {
                        if ops.covers(op) {
                            if *after == 0 {
                                fail = true;
                            } else {
                                *after -= 1;
                            }
                        }
                    }
                }
            }
            (delay, fail)
        };
        timer::sleep(Duration::from_micros(delay)).await;
        if fail {
            return Err(MemberError::new(
                &self.name,
                op,
                offset,
                len,
                io::Error::from_raw_os_error(libc::EIO),
            ));
        }
        Ok(())
    }

    fn aligned(&self, op: MemberOp, offset: u64, len: u64) -> MemberResult<()> {
        if !offset.is_multiple_of(SECTOR) || !len.is_multiple_of(SECTOR) {
            return Err(MemberError::new(
                &self.name,
                op,
                offset,
                len,
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "power-loss simulation needs 512-byte aligned ops",
                ),
            ));
        }
        Ok(())
    }

    /// Drops cached sectors of `[offset, offset+len)` (newer data is going to the member).
    fn uncache(&self, offset: u64, len: u64) {
        let mut st = self.state.lock();
        let first = offset / SECTOR;
        let last = (offset + len).div_ceil(SECTOR);
        let keys: Vec<u64> = st.cache.range(first..last).map(|(k, _)| *k).collect();
        for k in keys {
            st.cache.remove(&k);
        }
    }

    async fn do_read(&self, offset: u64, buf: Buf) -> MemberResult<Buf> {
        self.gate(MemberOp::Read, offset, buf.len() as u64).await?;
        let mut buf = self.inner.read(offset, buf).await?;
        if self.power_loss {
            let st = self.state.lock();
            let first = offset / SECTOR;
            let last = (offset + buf.len() as u64).div_ceil(SECTOR);
            for (&sector, (_, data)) in st.cache.range(first..last) {
                // Sector-aligned reads only ever see whole sectors; clip anyway.
                let s = (sector * SECTOR).max(offset);
                let e = ((sector + 1) * SECTOR).min(offset + buf.len() as u64);
                let from = (s - sector * SECTOR) as usize;
                buf[(s - offset) as usize..(e - offset) as usize]
                    .copy_from_slice(&data[from..from + (e - s) as usize]);
            }
        }
        Ok(buf)
    }

    async fn do_write(&self, offset: u64, data: SharedBuf, fua: bool) -> MemberResult<()> {
        let len = data.len() as u64;
        self.gate(MemberOp::Write, offset, len).await?;
        if !self.power_loss {
            return self.inner.write(offset, data, fua).await;
        }
        self.aligned(MemberOp::Write, offset, len)?;
        if offset + len > self.inner.len() {
            // Let the inner member report the range error.
            return self.inner.write(offset, data, fua).await;
        }
        if fua {
            self.uncache(offset, len);
            return self.inner.write(offset, data, true).await;
        }
        let mut st = self.state.lock();
        st.seq += 1;
        let seq = st.seq;
        for (i, chunk) in data.chunks(SECTOR as usize).enumerate() {
            st.cache.insert(
                offset / SECTOR + i as u64,
                (seq, chunk.to_vec().into_boxed_slice()),
            );
        }
        Ok(())
    }

    async fn do_flush(&self) -> MemberResult<()> {
        self.flushes.flush(&self.name, || self.flush_now()).await
    }

    /// One flush of the device (under the flush gate).
    async fn flush_now(&self) -> MemberResult<()> {
        self.gate(MemberOp::Flush, 0, 0).await?;
        if self.power_loss {
            let snapshot: Vec<(u64, u64, Box<[u8]>)> = {
                let st = self.state.lock();
                st.cache
                    .iter()
                    .map(|(&k, (seq, d))| (k, *seq, d.clone()))
                    .collect()
            };
            let seqs: Vec<(u64, u64)> = snapshot.iter().map(|(k, s, _)| (*k, *s)).collect();
            let sectors = snapshot.into_iter().map(|(k, _, d)| (k, d)).collect();
            for (sector, data) in runs(sectors) {
                self.inner
                    .write(sector * SECTOR, Buf::copy_from(&data).freeze(), false)
                    .await?;
            }
            self.inner.flush().await?;
            let mut st = self.state.lock();
            for (k, seq) in seqs {
                if st.cache.get(&k).is_some_and(|v| v.0 == seq) {
                    st.cache.remove(&k);
                }
            }
            return Ok(());
        }
        self.inner.flush().await
    }

    async fn do_zero(&self, op: MemberOp, offset: u64, len: u64) -> MemberResult<()> {
        self.gate(op, offset, len).await?;
        if self.power_loss {
            self.aligned(op, offset, len)?;
            self.uncache(offset, len);
        }
        match op {
            MemberOp::Trim => self.inner.trim(offset, len).await,
            _ => self.inner.write_zeroes(offset, len).await,
        }
    }
}

/// Joins sorted sectors into contiguous runs: (first sector, bytes).
fn runs(sectors: Vec<(u64, Box<[u8]>)>) -> Vec<(u64, Vec<u8>)> {
    let mut out: Vec<(u64, Vec<u8>)> = Vec::new();
    for (sector, data) in sectors {
        match out.last_mut() {
            Some((first, bytes)) if *first + bytes.len() as u64 / SECTOR == sector => {
                bytes.extend_from_slice(&data);
            }
            _ => out.push((sector, data.into_vec())),
        }
    }
    out
}

impl<M: Member> Member for Faulty<M> {
    fn name(&self) -> &str {
        &self.name
    }

    fn len(&self) -> u64 {
        self.inner.len()
    }

    fn read(&self, offset: u64, buf: Buf) -> BoxFuture<'_, MemberResult<Buf>> {
        async move {
            let g = self.counters.start(MemberOp::Read, buf.len() as u64);
            g.finish(self.do_read(offset, buf).await)
        }
        .boxed()
    }

    fn write(&self, offset: u64, data: SharedBuf, fua: bool) -> BoxFuture<'_, MemberResult<()>> {
        async move {
            let g = self.counters.start(MemberOp::Write, data.len() as u64);
            g.finish(self.do_write(offset, data, fua).await)
        }
        .boxed()
    }

    fn flush(&self) -> BoxFuture<'_, MemberResult<()>> {
        async move {
            let g = self.counters.start(MemberOp::Flush, 0);
            g.finish(self.do_flush().await)
        }
        .boxed()
    }

    fn trim(&self, offset: u64, len: u64) -> BoxFuture<'_, MemberResult<()>> {
        async move {
            let g = self.counters.start(MemberOp::Trim, len);
            g.finish(self.do_zero(MemberOp::Trim, offset, len).await)
        }
        .boxed()
    }

    fn write_zeroes(&self, offset: u64, len: u64) -> BoxFuture<'_, MemberResult<()>> {
        async move {
            let g = self.counters.start(MemberOp::WriteZeroes, len);
            g.finish(self.do_zero(MemberOp::WriteZeroes, offset, len).await)
        }
        .boxed()
    }

    fn counters(&self) -> &MemberCounters {
        &self.counters
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::executor::block_on;
    use nbraid_core::MemoryMember;

    fn read(m: &impl Member, off: u64, len: usize) -> Vec<u8> {
        block_on(m.read(off, Buf::new(len))).unwrap().to_vec()
    }

    fn write(m: &impl Member, off: u64, byte: u8, len: usize, fua: bool) {
        block_on(m.write(off, Buf::copy_from(&vec![byte; len]).freeze(), fua)).unwrap();
    }

    #[test]
    fn errors_on_ranges_after_n_and_transient() {
        let f = Faulty::new(MemoryMember::new("m", 1 << 20), 1);
        f.fail_range(FaultOps::READ, 4096..8192);
        assert!(block_on(f.read(0, Buf::new(4096))).is_ok());
        let e = block_on(f.read(4096 + 512, Buf::new(512))).unwrap_err();
        assert!(e.to_string().contains("faulty(m)"), "{e}");
        write(&f, 4096, 1, 4096, false); // writes unaffected
        f.clear_faults();
        f.fail_range_times(FaultOps::READ, 0..512, 1);
        assert!(block_on(f.read(0, Buf::new(512))).is_err());
        assert!(block_on(f.read(0, Buf::new(512))).is_ok());
        f.fail_after(FaultOps::WRITE, 2);
        write(&f, 0, 1, 512, false);
        write(&f, 0, 1, 512, false);
        assert!(block_on(f.write(0, Buf::zeroed(512).freeze(), false)).is_err());
        assert!(block_on(f.read(0, Buf::new(512))).is_ok());
    }

    #[test]
    fn power_loss_keeps_flushed_and_fua_loses_or_keeps_the_rest() {
        for seed in 0..20 {
            let f = Faulty::new(MemoryMember::new("m", 1 << 20), seed).with_power_loss();
            write(&f, 0, 1, 4096, false);
            block_on(f.flush()).unwrap();
            write(&f, 8192, 2, 4096, true); // FUA
            write(&f, 0, 3, 4096, false); // unflushed overwrite of flushed data
            write(&f, 16384, 4, 4096, false);
            assert_eq!(read(&f, 0, 4096), vec![3; 4096], "cache is read through");
            assert_eq!(f.unflushed_bytes(), 8192);
            let r = block_on(f.crash(seed % 2 == 0)).unwrap();
            assert_eq!(r.kept_sectors + r.lost_sectors, 16);
            assert_eq!(read(&f, 8192, 4096), vec![2; 4096]);
            for (sector, b) in read(&f, 0, 4096)
                .chunks(512)
                .zip(read(&f, 16384, 4096).chunks(512))
            {
                assert!(sector.iter().all(|&x| x == 1) || sector.iter().all(|&x| x == 3));
                assert!(b.iter().all(|&x| x == 0) || b.iter().all(|&x| x == 4));
            }
            assert_eq!(f.unflushed_bytes(), 0);
        }
    }
}
