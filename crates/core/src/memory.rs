//! A member held in memory, for tests and benchmarks. Sparse: 64 KiB chunks are allocated on
//! first write and dropped again when trimmed whole, so large members cost only what is
//! written. Operations complete at once on the calling thread.
//!
//! [`MemoryMember::prefaulted`] (benchmarks) holds every byte in one mapping instead, asked
//! for huge pages and touched up front: on this project's VM, members of malloc'd chunks ran
//! a copy benchmark at 0.3–8 GB/s depending on which pages they got, steadily for the whole
//! run (a model in C: `docs/benchmarks`, issue 36), while such mappings ran 7.3–8.5 GB/s.
//!
//! Members of [`LAZY_MAPPING_MIN_BYTES`] and more keep their bytes in one anonymous mapping
//! instead, advised as huge pages and left untouched: still sparse (the kernel gives memory
//! where bytes are written, 2 MiB at a time, and takes whole trimmed chunks back), and a
//! random 4 KiB copy in or out of a GiB costs a TLB miss on a huge page rather than on a
//! 4 KiB one: 0.75 → 0.52 µs per 4 KiB read from cold memory on this project's VM, 0.95 →
//! 0.65 µs per write.
//!
//! Writes of at least [`STREAM_MIN_BYTES`] go in with non-temporal stores (x86-64): a member
//! of a GiB is mostly out of the caches, and a plain copy first reads every line it is about
//! to overwrite. Measured on this project's VM, 1 MiB into cold 64 KiB chunks: 130 µs plain,
//! 80–90 µs streamed; under a 4 KiB random write the plain copy and the lock release behind
//! it took a fifth of the daemon's CPU.

use crate::buf::{Buf, SharedBuf};
use crate::member::{check_range, Member, MemberCounters, MemberOp, MemberResult};
use futures::future::{self, BoxFuture};
use futures::FutureExt;
use parking_lot::Mutex;

const CHUNK: u64 = 64 << 10;

/// Members at least this long live in a lazily faulted huge-page mapping (see the module).
/// Shorter ones (nearly every test's) keep malloc'd chunks: memory in 64 KiB steps.
const LAZY_MAPPING_MIN_BYTES: u64 = 256 << 20;

/// Pieces of a write at least this long bypass the caches ([`store_streaming`]); shorter ones
/// (superblocks, tests' pokes) are plain copies, likely read again soon.
const STREAM_MIN_BYTES: usize = 4096;

pub struct MemoryMember {
    /// Name in messages.
    name: String,
    /// Bytes offered.
    len: u64,
    /// `chunks[i]` holds bytes `[i*CHUNK, (i+1)*CHUNK)`; `None` reads as zeroes. Empty when
    /// `mapped` holds the bytes.
    chunks: Vec<Mutex<Option<Box<[u8]>>>>,
    /// Every byte in one mapping ([`MemoryMember::prefaulted`], or long members).
    mapped: Option<Mapping>,
    counters: MemberCounters,
}

impl MemoryMember {
    /// A sparse member: zeroes until written, memory only for what is written (chunks, or a
    /// lazily faulted mapping from [`LAZY_MAPPING_MIN_BYTES`] on; chunks where that mapping
    /// cannot be made).
    pub fn new(name: impl Into<String>, len: u64) -> MemoryMember {
        if len >= LAZY_MAPPING_MIN_BYTES {
            if let Some(mapping) = Mapping::new(len, Faults::Lazy) {
                return MemoryMember::chunked(name, 0).with_mapping(len, mapping);
            }
        }
        MemoryMember::chunked(name, len)
    }

    fn chunked(name: impl Into<String>, len: u64) -> MemoryMember {
        let n = len.div_ceil(CHUNK) as usize;
        MemoryMember {
            name: name.into(),
            len,
            chunks: (0..n).map(|_| Mutex::new(None)).collect(),
            mapped: None,
            counters: MemberCounters::default(),
        }
    }

    fn with_mapping(mut self, len: u64, mapping: Mapping) -> MemoryMember {
        self.len = len;
        self.chunks = Vec::new();
        self.mapped = Some(mapping);
        self
    }

    /// A member whose bytes all live in one anonymous mapping, asked for transparent huge
    /// pages and touched up front (so it costs `len` bytes at once): for benchmarks, where
    /// chunks malloc'd one by one land on whatever pages the heap has. The same member
    /// otherwise (zeroes until written, the same operations); a sparse one where the mapping
    /// cannot be made.
    pub fn prefaulted(name: impl Into<String>, len: u64) -> MemoryMember {
        match Mapping::new(len, Faults::UpFront) {
            Some(mapping) => MemoryMember::chunked(name, 0).with_mapping(len, mapping),
            None => MemoryMember::new(name, len),
        }
    }

    /// A member of `len` bytes that keeps only its first `kept_bytes`: reads past them are
    /// zeroes, writes past them are refused. Reading a large device's superblocks through
    /// assembly's own reader (which checks them against the member's real size) without
    /// holding the device open or its size in memory.
    pub fn with_prefix(name: impl Into<String>, len: u64, kept_bytes: u64) -> MemoryMember {
        let mut m = MemoryMember::chunked(name, kept_bytes.min(len));
        m.len = len;
        m
    }

    /// The bytes it can hold: `len`, or fewer for [`MemoryMember::with_prefix`].
    fn kept_bytes(&self) -> u64 {
        match &self.mapped {
            Some(m) => m.len as u64,
            None => (self.chunks.len() as u64 * CHUNK).min(self.len),
        }
    }

    /// Copies bytes out without counting an operation (for test assertions).
    pub fn peek(&self, offset: u64, out: &mut [u8]) {
        self.copy_out(offset, out);
    }

    /// Overwrites bytes without counting an operation (tests use it to corrupt a copy).
    pub fn poke(&self, offset: u64, data: &[u8]) {
        self.copy_in(offset, data);
    }

    fn pieces(offset: u64, len: u64) -> impl Iterator<Item = (usize, usize, usize, usize)> {
        // (chunk, offset in chunk, offset in caller's slice, bytes)
        let end = offset + len;
        let mut at = offset;
        std::iter::from_fn(move || {
            if at >= end {
                return None;
            }
            let chunk = (at / CHUNK) as usize;
            let in_chunk = (at % CHUNK) as usize;
            let n = ((CHUNK - in_chunk as u64).min(end - at)) as usize;
            let item = (chunk, in_chunk, (at - offset) as usize, n);
            at += n as u64;
            Some(item)
        })
    }

    fn copy_out(&self, offset: u64, out: &mut [u8]) {
        for (c, ic, io, n) in Self::pieces(offset, out.len() as u64) {
            if let Some(m) = &self.mapped {
                m.copy_out(c, ic, &mut out[io..io + n]);
                continue;
            }
            let Some(chunk) = self.chunks.get(c) else {
                out[io..io + n].fill(0); // past a prefix member's kept bytes
                continue;
            };
            match &*chunk.lock() {
                Some(data) => out[io..io + n].copy_from_slice(&data[ic..ic + n]),
                None => out[io..io + n].fill(0),
            }
        }
    }

    fn copy_in(&self, offset: u64, data: &[u8]) {
        for (c, ic, io, n) in Self::pieces(offset, data.len() as u64) {
            if let Some(m) = &self.mapped {
                m.copy_in(c, ic, &data[io..io + n]);
                continue;
            }
            let mut slot = self.chunks[c].lock();
            let chunk = slot.get_or_insert_with(|| vec![0; CHUNK as usize].into_boxed_slice());
            store_streaming(&mut chunk[ic..ic + n], &data[io..io + n]);
        }
    }

    fn zero(&self, offset: u64, len: u64) {
        for (c, ic, _, n) in Self::pieces(offset, len) {
            if let Some(m) = &self.mapped {
                m.zero(c, ic, n);
                continue;
            }
            let Some(slot) = self.chunks.get(c) else {
                continue; // past a prefix member's kept bytes: zeroes already
            };
            let mut slot = slot.lock();
            if n as u64 == CHUNK {
                *slot = None;
            } else if let Some(chunk) = slot.as_mut() {
                chunk[ic..ic + n].fill(0);
            }
        }
    }
}

impl Member for MemoryMember {
    fn name(&self) -> &str {
        &self.name
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn read(&self, offset: u64, mut buf: Buf) -> BoxFuture<'_, MemberResult<Buf>> {
        let g = self.counters.start(MemberOp::Read, buf.len() as u64);
        let r = check_range(
            &self.name,
            MemberOp::Read,
            offset,
            buf.len() as u64,
            self.len,
        )
        .map(|()| {
            self.copy_out(offset, &mut buf);
            buf
        });
        future::ready(g.finish(r)).boxed()
    }

    fn write(&self, offset: u64, data: SharedBuf, _fua: bool) -> BoxFuture<'_, MemberResult<()>> {
        let g = self.counters.start(MemberOp::Write, data.len() as u64);
        let r = check_range(
            &self.name,
            MemberOp::Write,
            offset,
            data.len() as u64,
            self.kept_bytes(),
        )
        .map(|()| self.copy_in(offset, &data));
        future::ready(g.finish(r)).boxed()
    }

    fn flush(&self) -> BoxFuture<'_, MemberResult<()>> {
        let g = self.counters.start(MemberOp::Flush, 0);
        future::ready(g.finish(Ok(()))).boxed()
    }

    fn memory_backed(&self) -> bool {
        true
    }

    fn trim(&self, offset: u64, len: u64) -> BoxFuture<'_, MemberResult<()>> {
        let g = self.counters.start(MemberOp::Trim, len);
        let r = check_range(&self.name, MemberOp::Trim, offset, len, self.len)
            .map(|()| self.zero(offset, len));
        future::ready(g.finish(r)).boxed()
    }

    fn write_zeroes(&self, offset: u64, len: u64) -> BoxFuture<'_, MemberResult<()>> {
        let g = self.counters.start(MemberOp::WriteZeroes, len);
        let r = check_range(&self.name, MemberOp::WriteZeroes, offset, len, self.len)
            .map(|()| self.zero(offset, len));
        future::ready(g.finish(r)).boxed()
    }

    fn counters(&self) -> &MemberCounters {
        &self.counters
    }

    fn read_vectored(
        &self,
        offset: u64,
        mut bufs: Vec<Buf>,
    ) -> BoxFuture<'_, MemberResult<Vec<Buf>>> {
        let len: u64 = bufs.iter().map(|b| b.len() as u64).sum();
        let g = self.counters.start(MemberOp::Read, len);
        let r = check_range(&self.name, MemberOp::Read, offset, len, self.len).map(|()| {
            let mut at = offset;
            for b in bufs.iter_mut() {
                self.copy_out(at, b);
                at += b.len() as u64;
            }
            bufs
        });
        future::ready(g.finish(r)).boxed()
    }

    fn write_vectored(
        &self,
        offset: u64,
        data: Vec<SharedBuf>,
        _fua: bool,
    ) -> BoxFuture<'_, MemberResult<()>> {
        let len: u64 = data.iter().map(|d| d.len() as u64).sum();
        let g = self.counters.start(MemberOp::Write, len);
        let r =
            check_range(&self.name, MemberOp::Write, offset, len, self.kept_bytes()).map(|()| {
                let mut at = offset;
                for d in &data {
                    self.copy_in(at, d);
                    at += d.len() as u64;
                }
            });
        future::ready(g.finish(r)).boxed()
    }
}

/// Copies `src` into `dst` (of the same length): with non-temporal stores when it is at least
/// [`STREAM_MIN_BYTES`] on x86-64, so the copy writes whole lines without reading them first
/// and leaves the caches to the request path; a plain copy otherwise.
fn store_streaming(dst: &mut [u8], src: &[u8]) {
    assert_eq!(dst.len(), src.len(), "a copy between slices of one length");
    #[cfg(target_arch = "x86_64")]
    if dst.len() >= STREAM_MIN_BYTES {
        stream_x86_64(dst, src);
        return;
    }
    dst.copy_from_slice(src);
}

/// [`store_streaming`]'s streamed copy: the bytes up to `dst`'s first 16-byte boundary and
/// after its last whole 64 bytes plainly, 64 bytes at a time in between (four unaligned
/// loads, four streaming stores), then a fence, so the stores are visible before the chunk's
/// lock is released.
#[cfg(target_arch = "x86_64")]
fn stream_x86_64(dst: &mut [u8], src: &[u8]) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
    const STEP: usize = 64;
    let head = dst.as_ptr().align_offset(16).min(dst.len());
    dst[..head].copy_from_slice(&src[..head]);
    let body = (dst.len() - head) / STEP * STEP;
    let (d, s) = (
        dst[head..head + body].as_mut_ptr(),
        src[head..head + body].as_ptr(),
    );
    for at in (0..body).step_by(STEP) {
        // SAFETY: `at + STEP <= body`: every load reads inside `src[head..head + body]` and
        // every store writes inside `dst[head..head + body]`, which starts 16-byte aligned
        // (`head`), as `_mm_stream_si128` needs; SSE2 is part of x86-64.
        unsafe {
            let (s, d) = (s.add(at).cast::<__m128i>(), d.add(at).cast::<__m128i>());
            let (a, b) = (_mm_loadu_si128(s), _mm_loadu_si128(s.add(1)));
            let (c, e) = (_mm_loadu_si128(s.add(2)), _mm_loadu_si128(s.add(3)));
            _mm_stream_si128(d, a);
            _mm_stream_si128(d.add(1), b);
            _mm_stream_si128(d.add(2), c);
            _mm_stream_si128(d.add(3), e);
        }
    }
    dst[head + body..].copy_from_slice(&src[head + body..]);
    // SAFETY: a fence, no memory operand; SSE is part of x86-64.
    unsafe { _mm_sfence() };
}

/// One anonymous mapping holding a member's bytes, each `CHUNK` of it guarded by its own lock
/// (as the sparse chunks are): concurrent operations on one chunk take turns.
struct Mapping {
    /// The member's first byte: the mapping's first huge-page boundary.
    base: std::ptr::NonNull<u8>,
    /// The member's bytes.
    len: usize,
    /// The whole mapping (from before `base` to past `len`), for unmapping.
    mapped: (*mut libc::c_void, usize),
    locks: Vec<Mutex<()>>,
    faults: Faults,
}

/// When a mapping's pages are faulted in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Faults {
    /// All at once when it is made (benchmarks: no fault while measured).
    UpFront,
    /// Where first written (sparse); whole trimmed chunks are given back.
    Lazy,
}

/// Bytes of an x86-64 transparent huge page: the mapping's bytes start on such a boundary
/// and span whole ones, or its ends stay small pages (measured: a 6 MiB member mapped
/// unaligned ran its copies far slower than aligned ones).
const HUGE_PAGE: usize = 2 << 20;

// SAFETY: the mapping is owned (unmapped only on drop), and its bytes are read or written only
// under the lock of the chunk they lie in.
unsafe impl Send for Mapping {}
// SAFETY: as above: every access to the bytes holds its chunk's lock.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// `len` bytes of zeroes, mapped and advised as huge pages, touched if `faults` says so;
    /// `None` if the mapping fails (or `len` is 0 or beyond the address space).
    fn new(len: u64, faults: Faults) -> Option<Mapping> {
        let len = usize::try_from(len).ok().filter(|&l| l > 0)?;
        let span = len.checked_next_multiple_of(HUGE_PAGE)?;
        let map_len = span.checked_add(HUGE_PAGE)?;
        // SAFETY: a fresh private anonymous mapping: no file, no existing memory involved.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return None;
        }
        let skip = (p as usize).next_multiple_of(HUGE_PAGE) - p as usize;
        // SAFETY: `skip < HUGE_PAGE` and `skip + span <= map_len`: inside the mapping.
        let first = unsafe { p.cast::<u8>().add(skip) };
        let base = std::ptr::NonNull::new(first)?;
        // Huge pages where the kernel gives them (advice: failure leaves small pages).
        // SAFETY: `span` bytes from `first` lie in the mapping just made.
        unsafe { libc::madvise(first.cast(), span, libc::MADV_HUGEPAGE) };
        if faults == Faults::UpFront {
            // Touch every page now, so no fault (nor page choice) happens while measured.
            // SAFETY: `len` bytes from `base` are in the mapping, writable, not yet shared.
            unsafe { std::ptr::write_bytes(base.as_ptr(), 0, len) };
        }
        let chunks = (len as u64).div_ceil(CHUNK) as usize;
        Some(Mapping {
            base,
            len,
            mapped: (p, map_len),
            locks: (0..chunks).map(|_| Mutex::new(())).collect(),
            faults,
        })
    }

    /// Where byte `in_chunk` of chunk `c` is, for `n` bytes (within the mapping).
    fn at(&self, c: usize, in_chunk: usize, n: usize) -> *mut u8 {
        let start = c * CHUNK as usize + in_chunk;
        assert!(start + n <= self.len, "a piece inside the mapping");
        // SAFETY: `start + n <= len`: the offset stays inside the mapping.
        unsafe { self.base.as_ptr().add(start) }
    }

    fn copy_out(&self, c: usize, in_chunk: usize, out: &mut [u8]) {
        let _held = self.locks[c].lock();
        let from = self.at(c, in_chunk, out.len());
        // SAFETY: `from` has `out.len()` bytes inside the mapping (`at`), guarded by the lock
        // held; `out` is a distinct caller's buffer.
        unsafe { std::ptr::copy_nonoverlapping(from, out.as_mut_ptr(), out.len()) };
    }

    fn copy_in(&self, c: usize, in_chunk: usize, data: &[u8]) {
        let _held = self.locks[c].lock();
        let to = self.at(c, in_chunk, data.len());
        // SAFETY: as in `copy_out`, the other way: `to` has `data.len()` bytes inside the
        // mapping, guarded by the lock held, and nothing else refers to them meanwhile.
        let dst = unsafe { std::slice::from_raw_parts_mut(to, data.len()) };
        store_streaming(dst, data);
    }

    fn zero(&self, c: usize, in_chunk: usize, n: usize) {
        let _held = self.locks[c].lock();
        let to = self.at(c, in_chunk, n);
        if self.faults == Faults::Lazy && n as u64 == CHUNK {
            // A whole chunk (64 KiB from a 2 MiB boundary: whole pages): given back to the
            // kernel, it reads as zeroes again, as a sparse member's dropped chunk does.
            // SAFETY: `n` bytes from `to` are inside the mapping, guarded by the lock held;
            // private anonymous memory: zero-filled on the next touch.
            let r = unsafe { libc::madvise(to.cast(), n, libc::MADV_DONTNEED) };
            if r == 0 {
                return;
            }
        }
        // SAFETY: `n` bytes from `to` are inside the mapping, guarded by the lock held.
        unsafe { std::ptr::write_bytes(to, 0, n) };
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, with its length; nothing borrows it any more.
        unsafe { libc::munmap(self.mapped.0, self.mapped.1) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::executor::block_on;

    #[test]
    fn write_read_trim_across_chunks() {
        write_read_trim(MemoryMember::new("m", 4 * CHUNK));
    }

    /// A member in one mapping behaves as a sparse one (its length not a whole chunk too).
    #[test]
    fn a_prefaulted_member_reads_writes_and_trims_as_a_sparse_one() {
        let m = MemoryMember::prefaulted("m", 4 * CHUNK);
        assert!(m.mapped.is_some(), "mapped");
        write_read_trim(m);
        let odd = MemoryMember::prefaulted("odd", 3 * CHUNK + 4096);
        let data = vec![7u8; CHUNK as usize + 4096];
        block_on(odd.write(2 * CHUNK, Buf::copy_from(&data).freeze(), false)).unwrap();
        let back = block_on(odd.read(2 * CHUNK - 512, Buf::new(data.len() + 512))).unwrap();
        assert!(back[..512].iter().all(|&b| b == 0));
        assert_eq!(&back[512..], &data[..]);
        let past = block_on(odd.write(3 * CHUNK, Buf::zeroed(8192).freeze(), false));
        assert!(past.is_err(), "a write past the end is refused");
    }

    fn write_read_trim(m: MemoryMember) {
        let data: Vec<u8> = (0..3 * CHUNK as usize).map(|i| (i % 251) as u8).collect();
        block_on(m.write(1000, Buf::copy_from(&data).freeze(), false)).unwrap();
        let back = block_on(m.read(1000, Buf::new(data.len()))).unwrap();
        assert_eq!(&back[..], &data[..]);
        block_on(m.trim(512, 2 * CHUNK)).unwrap();
        let back = block_on(m.read(0, Buf::new(4 * CHUNK as usize))).unwrap();
        assert!(back[..512 + 2 * CHUNK as usize].iter().all(|&b| b == 0));
        let tail = 512 + 2 * CHUNK as usize;
        assert_eq!(&back[tail..1000 + data.len()], &data[tail - 1000..]);
        let err = block_on(m.read(4 * CHUNK - 512, Buf::new(1024))).unwrap_err();
        assert!(err.to_string().contains("past the member"), "{err}");
        let c = m.counters().snapshot();
        assert_eq!(
            (c.reads, c.writes, c.trims, c.errors, c.in_flight),
            (2, 1, 1, 1, 0)
        );
    }

    /// A member of 256 MiB or more lives in a lazy mapping and behaves as a sparse one:
    /// zeroes where never written, what was written where it was, zeroes again where trimmed.
    #[test]
    fn a_long_member_is_a_lazy_mapping_and_as_sparse() {
        let len = LAZY_MAPPING_MIN_BYTES + CHUNK / 2;
        let m = MemoryMember::new("long", len);
        let faults = m.mapped.as_ref().map(|m| m.faults);
        assert_eq!(faults, Some(Faults::Lazy));
        let at = 100 * CHUNK + 1000;
        let data: Vec<u8> = (0..3 * CHUNK as usize)
            .map(|i| (i % 251) as u8 + 1)
            .collect();
        block_on(m.write(at, Buf::copy_from(&data).freeze(), false)).unwrap();
        let back = block_on(m.read(at - 1000, Buf::new(data.len() + 2000))).unwrap();
        assert!(back[..1000]
            .iter()
            .chain(&back[1000 + data.len()..])
            .all(|&b| b == 0));
        assert_eq!(&back[1000..1000 + data.len()], &data[..]);
        block_on(m.trim(101 * CHUNK, CHUNK + 512)).unwrap();
        let back = block_on(m.read(100 * CHUNK, Buf::new(4 * CHUNK as usize))).unwrap();
        let (trimmed, kept) = (
            CHUNK as usize..2 * CHUNK as usize + 512,
            1000..CHUNK as usize,
        );
        assert!(back[trimmed.clone()].iter().all(|&b| b == 0));
        assert_eq!(&back[kept.clone()], &data[..kept.len()]);
        assert_eq!(back[trimmed.end], data[trimmed.end - 1000]);
        let tail = block_on(m.read(len - 4096, Buf::new(4096))).unwrap();
        assert!(tail.iter().all(|&b| b == 0));
        let past = block_on(m.write(len - 512, Buf::zeroed(1024).freeze(), false));
        assert!(past.is_err(), "a write past the end is refused");
    }

    /// The streamed copy lands every byte, whatever the alignment of either side and however
    /// its length splits into head, 64-byte steps and tail; nothing around it is touched.
    #[test]
    fn streamed_copies_land_every_byte_and_nothing_else() {
        let src: Vec<u8> = (0..70_000u32).map(|i| (i * 7 % 251) as u8 + 1).collect();
        for len in [0, 1, 63, 4095, 4096, 4097, 4096 + 63, 65_536] {
            for dst_at in [0, 1, 8, 15, 16, 17] {
                for src_at in [0, 3] {
                    let mut dst = vec![0u8; len + 64];
                    let from = &src[src_at..src_at + len];
                    store_streaming(&mut dst[dst_at..dst_at + len], from);
                    assert_eq!(
                        &dst[dst_at..dst_at + len],
                        from,
                        "{len} at {dst_at}/{src_at}"
                    );
                    assert!(dst[..dst_at]
                        .iter()
                        .chain(&dst[dst_at + len..])
                        .all(|&b| b == 0));
                }
            }
        }
    }

    /// A member as long as a large device that keeps only its first bytes: reads past them
    /// are zeroes, writes past them refused, its length the device's.
    #[test]
    fn a_prefix_member_is_long_and_holds_only_its_first_bytes() {
        let len_bytes = 1u64 << 44; // 16 TiB: no chunk table that size is made
        let m = MemoryMember::with_prefix("big", len_bytes, 2 * CHUNK);
        assert_eq!(m.len(), len_bytes);
        m.poke(10, b"superblock");
        let back = block_on(m.read(0, Buf::new(CHUNK as usize))).unwrap();
        assert_eq!(&back[10..20], b"superblock");
        let far = block_on(m.read(len_bytes - 4096, Buf::new(4096))).unwrap();
        assert!(far.iter().all(|&b| b == 0));
        let past = block_on(m.write(3 * CHUNK, Buf::copy_from(&[1; 512]).freeze(), false));
        assert!(past.is_err(), "a write past the kept bytes is refused");
        block_on(m.trim(0, 4 * CHUNK)).unwrap();
    }
}
