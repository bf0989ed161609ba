//! Shared helpers for the benches: a queue-depth driver, a prefill and a simulated device for
//! volume benchmarks (`engine.rs`, `raid.rs`), and ISA-L as the parity bench's baseline
//! ([`isal`]).

pub mod isal;

use futures::executor::block_on;
use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use nbraid_core::metadata::Array;
use nbraid_core::{
    Buf, Member, MemberCounters, MemberResult, MemoryMember, SharedBuf, Volume, VolumeResult,
};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// What one benchmark cell does to the volume.
#[derive(Clone, Copy, Debug)]
pub struct Load {
    /// Request size in bytes.
    pub block: u64,
    /// Requests kept in flight.
    pub depth: usize,
    /// Sequential offsets (wrapping) instead of random ones.
    pub sequential: bool,
    pub write: bool,
    /// Offsets stay below this many bytes.
    pub span: u64,
    /// Flush once at the end (so a write-back cache's work is counted).
    pub flush_at_end: bool,
    /// Write each write's payload afresh just before it is issued (counted in the time), as
    /// an NBD payload lands in the buffer from the socket: the engine then meets it in the
    /// cache, not in memory untouched since the cell began.
    pub fresh_payload: bool,
}

/// What [`drive`] runs a load on: a volume, or an array (its requests through the array's
/// stages: the write-intent bitmap).
pub trait Target {
    fn capacity(&self) -> u64;
    fn write(&self, offset: u64, buf: Buf) -> BoxFuture<'_, VolumeResult<Buf>>;
    fn read_into(&self, offset: u64, buf: Buf) -> BoxFuture<'_, VolumeResult<Buf>>;
    fn flush(&self) -> BoxFuture<'_, VolumeResult<()>>;
}

impl Target for Volume {
    fn capacity(&self) -> u64 {
        Volume::capacity(self)
    }
    fn write(&self, offset: u64, buf: Buf) -> BoxFuture<'_, VolumeResult<Buf>> {
        Box::pin(Volume::write(self, offset, buf, false))
    }
    fn read_into(&self, offset: u64, buf: Buf) -> BoxFuture<'_, VolumeResult<Buf>> {
        Box::pin(Volume::read_into(self, offset, buf))
    }
    fn flush(&self) -> BoxFuture<'_, VolumeResult<()>> {
        Box::pin(Volume::flush(self))
    }
}

impl Target for Array {
    fn capacity(&self) -> u64 {
        self.volume().capacity()
    }
    fn write(&self, offset: u64, buf: Buf) -> BoxFuture<'_, VolumeResult<Buf>> {
        Box::pin(Array::write(self, offset, buf, false))
    }
    fn read_into(&self, offset: u64, buf: Buf) -> BoxFuture<'_, VolumeResult<Buf>> {
        Box::pin(Array::read_into(self, offset, buf))
    }
    fn flush(&self) -> BoxFuture<'_, VolumeResult<()>> {
        Box::pin(Array::flush(self))
    }
}

/// Runs `load` on `volume` for about `secs`; returns (bytes, ops, seconds).
pub fn drive(volume: &(impl Target + ?Sized), load: Load, secs: f64) -> (u64, u64, f64) {
    let bs = load.block;
    let cap = volume.capacity().min(load.span) / bs * bs;
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut next_off = 0u64;
    let mut offset = move || {
        if load.sequential {
            let o = next_off;
            next_off = (next_off + bs) % cap;
            o
        } else {
            // xorshift64: cheap and deterministic, so runs are comparable.
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            (rng % (cap / bs)) * bs
        }
    };
    let mut spare: Vec<Buf> = (0..load.depth)
        .map(|i| {
            let mut b = Buf::new(bs as usize);
            b.fill(i as u8 + 1);
            b
        })
        .collect();
    let deadline = Duration::from_secs_f64(secs);
    let start = Instant::now();
    let (mut bytes, mut ops) = (0u64, 0u64);
    block_on(async {
        let mut inflight = FuturesUnordered::new();
        loop {
            while inflight.len() < load.depth && start.elapsed() < deadline {
                let off = offset();
                let mut buf = spare.pop().expect("one buffer per slot");
                if load.write && load.fresh_payload {
                    buf.fill(off as u8 | 1);
                }
                inflight.push(async move {
                    if load.write {
                        volume.write(off, buf).await
                    } else {
                        volume.read_into(off, buf).await
                    }
                });
            }
            match inflight.next().await {
                Some(r) => {
                    spare.push(r.expect("benchmark I/O"));
                    bytes += bs;
                    ops += 1;
                }
                None => break,
            }
        }
        if load.write && load.flush_at_end {
            volume.flush().await.expect("flush");
        }
    });
    (bytes, ops, start.elapsed().as_secs_f64())
}

/// The number in environment variable `name`, or `default`.
pub fn env_f64(name: &str, default: f64) -> f64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// The median of `v` (the upper one of an even count); sorts `v`.
pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The smallest and the largest of `v`.
pub fn spread(v: &[f64]) -> (f64, f64) {
    v.iter()
        .fold((f64::MAX, f64::MIN), |(l, h), &r| (l.min(r), h.max(r)))
}

/// CPU seconds this process has used (every thread): with memory members a cell's work is
/// all CPU, and its CPU time is disturbed less than its wall time by other work on the
/// machine.
pub fn cpu_seconds() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call's duration.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_PROCESS_CPUTIME_ID)");
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// The system allocator, counting the heap allocations made through it and their bytes (a
/// `realloc` counts as one, of its new size): a bench that installs it as its
/// `#[global_allocator]` reads [`allocations`] around a cell to print allocations per I/O, a
/// figure the machine's noise does not move.
pub struct CountingAlloc;

static ALLOCS: AtomicU64 = AtomicU64::new(0);
static ALLOC_BYTES: AtomicU64 = AtomicU64::new(0);

fn counted(bytes: usize) {
    ALLOCS.fetch_add(1, Relaxed);
    ALLOC_BYTES.fetch_add(bytes as u64, Relaxed);
}

// SAFETY: every call is forwarded unchanged to the system allocator, whose contract is the
// same; the counting touches only atomics, never the heap.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        counted(layout.size());
        // SAFETY: the caller's contract for `alloc` is passed on unchanged.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        counted(layout.size());
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from the system allocator with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        counted(new_size);
        // SAFETY: `ptr` came from the system allocator with this layout.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Heap allocations and their bytes since the process began, as counted by [`CountingAlloc`]
/// (both zero when it is not the global allocator). Every thread's are counted.
pub fn allocations() -> (u64, u64) {
    (ALLOCS.load(Relaxed), ALLOC_BYTES.load(Relaxed))
}

/// Writes `byte` over the first `span` bytes of `volume` and flushes, so reads hit real data.
pub fn fill(volume: &(impl Target + ?Sized), span: u64, byte: u8) {
    let cap = volume.capacity().min(span);
    let chunk = 8 << 20;
    let mut at = 0;
    while at < cap {
        let n = chunk.min(cap - at);
        let mut b = Buf::new(n as usize);
        b.fill(byte);
        block_on(volume.write(at, b)).expect("prefill");
        at += n;
    }
    block_on(volume.flush()).expect("flush");
}

/// A simulated device for benchmarks: one operation at a time, each taking `latency` plus its
/// bytes at `bytes_per_sec` (a vectored operation is one operation) — so a single member
/// saturates whatever the queue depth, and striping over N of them can show N×. Memory members,
/// which finish at memory speed, cannot: there is no device time to overlap.
pub struct SimDevice {
    inner: MemoryMember,
    busy: futures::lock::Mutex<()>,
    latency: Duration,
    bytes_per_sec: f64,
}

impl SimDevice {
    pub fn new(name: String, len: u64, latency: Duration, bytes_per_sec: f64) -> SimDevice {
        SimDevice {
            inner: MemoryMember::new(name, len),
            busy: futures::lock::Mutex::new(()),
            latency,
            bytes_per_sec,
        }
    }

    /// Holds the device for one operation of `bytes`.
    async fn serve(&self, bytes: usize) -> futures::lock::MutexGuard<'_, ()> {
        let held = self.busy.lock().await;
        let transfer = Duration::from_secs_f64(bytes as f64 / self.bytes_per_sec);
        nbraid_core::timer::sleep(self.latency + transfer).await;
        held
    }
}

impl Member for SimDevice {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn len(&self) -> u64 {
        self.inner.len()
    }

    fn read(&self, offset: u64, buf: Buf) -> BoxFuture<'_, MemberResult<Buf>> {
        Box::pin(async move {
            let _held = self.serve(buf.len()).await;
            self.inner.read(offset, buf).await
        })
    }

    fn write(&self, offset: u64, data: SharedBuf, fua: bool) -> BoxFuture<'_, MemberResult<()>> {
        Box::pin(async move {
            let _held = self.serve(data.len()).await;
            self.inner.write(offset, data, fua).await
        })
    }

    fn read_vectored(&self, offset: u64, bufs: Vec<Buf>) -> BoxFuture<'_, MemberResult<Vec<Buf>>> {
        Box::pin(async move {
            let _held = self.serve(bufs.iter().map(|b| b.len()).sum()).await;
            self.inner.read_vectored(offset, bufs).await
        })
    }

    fn write_vectored(
        &self,
        offset: u64,
        data: Vec<SharedBuf>,
        fua: bool,
    ) -> BoxFuture<'_, MemberResult<()>> {
        Box::pin(async move {
            let _held = self.serve(data.iter().map(|d| d.len()).sum()).await;
            self.inner.write_vectored(offset, data, fua).await
        })
    }

    fn flush(&self) -> BoxFuture<'_, MemberResult<()>> {
        self.inner.flush()
    }

    fn trim(&self, offset: u64, len: u64) -> BoxFuture<'_, MemberResult<()>> {
        self.inner.trim(offset, len)
    }

    fn write_zeroes(&self, offset: u64, len: u64) -> BoxFuture<'_, MemberResult<()>> {
        self.inner.write_zeroes(offset, len)
    }

    fn counters(&self) -> &MemberCounters {
        self.inner.counters()
    }
}
