//! Request latency per volume and operation, for `/metrics`
//! (`nbraid_volume_request_duration_seconds`). [`Timed`] wraps a volume's NBD export and
//! times each request from the call to its completion; the time lands in fixed buckets of
//! relaxed atomics (one add for the bucket, one for the sum: no lock, no allocation of its
//! own), so the I/O path pays two clock reads and two uncontended-in-the-common-case adds.
//! Counts are kept per bucket and made cumulative only when scraped.

use crate::nbd::{Export, Extent, IncomingWrite, ReadData, ZeroFlags};
use bytes::Bytes;
use futures::future::BoxFuture;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;

/// Upper bounds of the buckets in nanoseconds (`le`); one more bucket holds the rest (+Inf).
/// From a fast in-memory read to a disk stalled for seconds.
pub const BOUNDS_NS: [u64; 16] = [
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
    10_000_000_000,
];

/// The operations timed (`op` label).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Read,
    Write,
    Flush,
    Trim,
    WriteZeroes,
}

impl Op {
    pub const ALL: [Op; 5] = [Op::Read, Op::Write, Op::Flush, Op::Trim, Op::WriteZeroes];

    pub fn name(self) -> &'static str {
        match self {
            Op::Read => "read",
            Op::Write => "write",
            Op::Flush => "flush",
            Op::Trim => "trim",
            Op::WriteZeroes => "write_zeroes",
        }
    }
}

/// The bucket a duration of `ns` falls in: the first whose bound is not below it.
pub fn bucket_of(ns: u64) -> usize {
    BOUNDS_NS.partition_point(|&bound| bound < ns)
}

/// One operation's histogram.
#[derive(Default)]
struct Histogram {
    /// Requests per bucket (not cumulative); the last is +Inf.
    counts: [AtomicU64; BOUNDS_NS.len() + 1],
    sum_ns: AtomicU64,
}

/// A histogram as scraped: cumulative counts by [`BOUNDS_NS`], then +Inf (the count).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reading {
    pub cumulative: [u64; BOUNDS_NS.len() + 1],
    pub sum_ns: u64,
}

impl Reading {
    pub fn count(&self) -> u64 {
        self.cumulative[BOUNDS_NS.len()]
    }
}

impl Histogram {
    fn record(&self, ns: u64) {
        self.counts[bucket_of(ns)].fetch_add(1, Relaxed);
        self.sum_ns.fetch_add(ns, Relaxed);
    }

    fn read(&self) -> Reading {
        let mut cumulative = [0u64; BOUNDS_NS.len() + 1];
        let mut total = 0u64;
        for (c, n) in cumulative.iter_mut().zip(&self.counts) {
            total += n.load(Relaxed);
            *c = total;
        }
        Reading {
            cumulative,
            sum_ns: self.sum_ns.load(Relaxed),
        }
    }
}

/// One volume's histograms, by [`Op::ALL`]'s order.
#[derive(Default)]
pub struct VolumeLatency {
    ops: [Histogram; 5],
}

impl VolumeLatency {
    pub fn record(&self, op: Op, since: Instant) {
        let ns = u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.ops[op as usize].record(ns);
    }

    pub fn read(&self, op: Op) -> Reading {
        self.ops[op as usize].read()
    }
}

/// Exports by volume name, as the NBD server takes them.
pub type NamedExports = Vec<(String, Arc<dyn Export>)>;

/// Every served volume's latency, by name.
#[derive(Default)]
pub struct Latencies {
    volumes: Vec<(String, Arc<VolumeLatency>)>,
}

impl Latencies {
    /// `exports` wrapped in [`Timed`], and the latencies they record into.
    pub fn wrap(exports: NamedExports) -> (NamedExports, Self) {
        let mut volumes = Vec::new();
        let timed = exports
            .into_iter()
            .map(|(name, inner)| {
                let latency = Arc::new(VolumeLatency::default());
                volumes.push((name.clone(), latency.clone()));
                (name, Arc::new(Timed { inner, latency }) as Arc<dyn Export>)
            })
            .collect();
        (timed, Latencies { volumes })
    }

    pub fn volume(&self, name: &str) -> Option<&VolumeLatency> {
        self.volumes
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, l)| l.as_ref())
    }
}

/// An export whose requests are timed into a [`VolumeLatency`]; everything else is the
/// inner export's, method for method.
pub struct Timed {
    inner: Arc<dyn Export>,
    latency: Arc<VolumeLatency>,
}

impl Timed {
    fn timed<'a, T: Send + 'a>(
        &'a self,
        op: Op,
        start: Instant,
        f: BoxFuture<'a, io::Result<T>>,
    ) -> BoxFuture<'a, io::Result<T>> {
        Box::pin(async move {
            let out = f.await;
            self.latency.record(op, start);
            out
        })
    }
}

impl Export for Timed {
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn min_block(&self) -> u32 {
        self.inner.min_block()
    }
    fn preferred_block(&self) -> u32 {
        self.inner.preferred_block()
    }
    fn read_only(&self) -> bool {
        self.inner.read_only()
    }
    fn description(&self) -> String {
        self.inner.description()
    }
    fn can_multi_conn(&self) -> bool {
        self.inner.can_multi_conn()
    }
    fn rotational(&self) -> bool {
        self.inner.rotational()
    }
    fn read(&self, offset: u64, len: u32) -> BoxFuture<'_, io::Result<Bytes>> {
        let start = Instant::now();
        self.timed(Op::Read, start, self.inner.read(offset, len))
    }
    fn read_parts(&self, offset: u64, len: u32) -> BoxFuture<'_, io::Result<ReadData>> {
        let start = Instant::now();
        self.timed(Op::Read, start, self.inner.read_parts(offset, len))
    }
    fn write(&self, offset: u64, data: Bytes, fua: bool) -> BoxFuture<'_, io::Result<()>> {
        let start = Instant::now();
        self.timed(Op::Write, start, self.inner.write(offset, data, fua))
    }
    fn incoming_write(self: Arc<Self>, offset: u64, len: usize) -> Option<Box<dyn IncomingWrite>> {
        let inner = self.inner.clone().incoming_write(offset, len)?;
        Some(Box::new(TimedWrite {
            inner,
            latency: self.latency.clone(),
        }))
    }
    fn flush(&self) -> BoxFuture<'_, io::Result<()>> {
        let start = Instant::now();
        self.timed(Op::Flush, start, self.inner.flush())
    }
    fn trim(&self, offset: u64, len: u32, fua: bool) -> BoxFuture<'_, io::Result<()>> {
        let start = Instant::now();
        self.timed(Op::Trim, start, self.inner.trim(offset, len, fua))
    }
    fn write_zeroes(
        &self,
        offset: u64,
        len: u32,
        flags: ZeroFlags,
    ) -> BoxFuture<'_, io::Result<()>> {
        let start = Instant::now();
        let f = self.inner.write_zeroes(offset, len, flags);
        self.timed(Op::WriteZeroes, start, f)
    }
    fn cache(&self, offset: u64, len: u32) -> BoxFuture<'_, io::Result<()>> {
        self.inner.cache(offset, len)
    }
    fn can_block_status(&self) -> bool {
        self.inner.can_block_status()
    }
    fn block_status(&self, offset: u64, len: u32) -> BoxFuture<'_, io::Result<Vec<Extent>>> {
        self.inner.block_status(offset, len)
    }
}

/// A write received into the inner export's memory, timed from the payload's arrival to its
/// completion (as [`Timed::write`] is).
struct TimedWrite {
    inner: Box<dyn IncomingWrite>,
    latency: Arc<VolumeLatency>,
}

impl IncomingWrite for TimedWrite {
    fn as_mut_slice(&mut self) -> &mut [u8] {
        self.inner.as_mut_slice()
    }

    fn write(self: Box<Self>, fua: bool) -> BoxFuture<'static, io::Result<()>> {
        let start = Instant::now();
        let TimedWrite { inner, latency } = *self;
        let f = inner.write(fua);
        Box::pin(async move {
            let out = f.await;
            latency.record(Op::Write, start);
            out
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nbd::MemoryExport;

    #[test]
    fn a_duration_lands_in_the_first_bucket_not_below_it() {
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(50_000), 0);
        assert_eq!(bucket_of(50_001), 1);
        assert_eq!(bucket_of(1_000_000), 4);
        assert_eq!(bucket_of(10_000_000_000), BOUNDS_NS.len() - 1);
        assert_eq!(bucket_of(u64::MAX), BOUNDS_NS.len());
        assert!(BOUNDS_NS.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn readings_are_cumulative_and_count_every_request() {
        let h = Histogram::default();
        for ns in [10_000, 60_000, 60_000, 20_000_000_000] {
            h.record(ns);
        }
        let r = h.read();
        assert_eq!(r.cumulative[0], 1);
        assert_eq!(r.cumulative[1], 3);
        assert_eq!(r.cumulative[BOUNDS_NS.len() - 1], 3);
        assert_eq!(r.count(), 4);
        assert_eq!(r.sum_ns, 20_000_130_000);
    }

    #[test]
    fn timed_exports_answer_as_the_inner_one_and_count_by_op() {
        let inner: Arc<dyn Export> = Arc::new(MemoryExport::new(1 << 20));
        let (timed, latencies) = Latencies::wrap(vec![("v".into(), inner)]);
        let export = &timed[0].1;
        futures::executor::block_on(async {
            export
                .write(4096, Bytes::from(vec![7u8; 4096]), false)
                .await
                .unwrap();
            let back = export.read(4096, 4096).await.unwrap();
            assert_eq!(&back[..], &[7u8; 4096][..]);
            export.flush().await.unwrap();
        });
        let l = latencies.volume("v").unwrap();
        assert_eq!(l.read(Op::Write).count(), 1);
        assert_eq!(l.read(Op::Read).count(), 1);
        assert_eq!(l.read(Op::Flush).count(), 1);
        assert_eq!(l.read(Op::Trim).count(), 0);
        assert_eq!(export.size(), 1 << 20);
    }
}
