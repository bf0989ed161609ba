//! What the NBD server serves: the [`Export`] trait, the mapping of I/O errors to NBD error
//! values, and [`MemoryExport`], a sparse in-memory export for tests and benchmarks.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use bytes::Bytes;
use futures::future::{self, BoxFuture};

use super::proto;

/// The data of a read: buffers, in order, whose lengths add up to the length asked for.
/// One buffer is the common case; several let an export hand back pieces it already holds
/// (cache pages, one strip per member) without gathering them into one: the server sends them
/// with a single vectored write.
pub type ReadData = Vec<Bytes>;

/// A write whose payload is received straight into the export's own memory (aligned, pooled):
/// the buffer to fill and the write that follows, one value of the export's own type, handed
/// out by [`Export::incoming_write`]. The export never gets back a buffer of unknown kind.
pub trait IncomingWrite: Send + 'static {
    /// The bytes to fill: exactly the payload's length.
    fn as_mut_slice(&mut self) -> &mut [u8];
    /// Writes the filled buffer at the offset it was made for; with `fua`, completes only
    /// once the data is durable.
    fn write(self: Box<Self>, fua: bool) -> BoxFuture<'static, io::Result<()>>;
}

/// One run of blocks with the same `base:allocation` status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    /// Length in bytes (non-zero).
    pub length: u32,
    /// `proto::STATE_HOLE` and/or `proto::STATE_ZERO`, or 0 (allocated, contents unknown).
    pub flags: u32,
}

/// How `write_zeroes` may do its work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ZeroFlags {
    /// The area may be deallocated (the client did not send `NBD_CMD_FLAG_NO_HOLE`).
    pub may_trim: bool,
    /// Persist before completing (`NBD_CMD_FLAG_FUA`).
    pub fua: bool,
    /// `NBD_CMD_FLAG_FAST_ZERO`: fail at once with [`io::ErrorKind::Unsupported`] (sent to the
    /// client as `NBD_ENOTSUP`) unless zeroing is faster than writing zeroes, and leave the
    /// contents untouched in that case.
    pub fast_only: bool,
}

/// A block device the server exports. The daemon implements it for the engine's volumes.
///
/// The server validates every request before calling these methods: `offset + len` never
/// exceeds [`Export::size`], offsets and lengths are multiples of [`Export::min_block`], read and
/// write lengths never exceed [`proto::MAX_PAYLOAD`], and no write-type method is called on a
/// [`read-only`](Export::read_only) export. Many calls run concurrently, from one connection or
/// several; overlapping concurrent requests have no defined order (as in NBD).
///
/// Buffers are [`Bytes`]: a write hands the export the payload exactly as it came off the socket
/// (no copy), and a read may return any owners (`Bytes::from_owner`, e.g. aligned cache pages,
/// several of them as [`ReadData`]) that the server sends without copying.
///
/// Errors are `io::Error`s, mapped by [`errno_for`]: `EPERM`/`EACCES`/`EROFS` or
/// `PermissionDenied` → `NBD_EPERM`; `ENOSPC`/`EDQUOT`/`EFBIG` → `NBD_ENOSPC`; `EINVAL` or
/// `InvalidInput` → `NBD_EINVAL`; `EOPNOTSUPP` or `Unsupported` → `NBD_ENOTSUP`; anything else
/// → `NBD_EIO`.
pub trait Export: Send + Sync + 'static {
    /// Size in bytes; a multiple of `min_block` is expected.
    fn size(&self) -> u64;
    /// Smallest addressable unit: a power of two, at most 65536 (typically 512 or 4096).
    fn min_block(&self) -> u32 {
        512
    }
    /// Size of efficient I/O (the full-stripe width). Need not be a power of two: the server
    /// advertises the next power of two, at least `max(min_block, 512)` and at most
    /// [`proto::MAX_PAYLOAD`].
    fn preferred_block(&self) -> u32 {
        4096
    }
    /// Refuse writes, trims and zeroing (answered `NBD_EPERM` by the server).
    fn read_only(&self) -> bool {
        false
    }
    /// Human-readable description (`NBD_INFO_DESCRIPTION`); empty for none.
    fn description(&self) -> String {
        String::new()
    }
    /// Whether flushes and FUA writes are visible to every connection once completed
    /// (advertised as `NBD_FLAG_CAN_MULTI_CONN`).
    fn can_multi_conn(&self) -> bool {
        true
    }
    /// Whether the export behaves like a rotational disk (`NBD_FLAG_ROTATIONAL`).
    fn rotational(&self) -> bool {
        false
    }
    /// Reads `len` bytes at `offset`; the buffer returned must be exactly `len` bytes long.
    fn read(&self, offset: u64, len: u32) -> BoxFuture<'_, io::Result<Bytes>>;
    /// Like [`Export::read`], but the data may come back in several buffers (see [`ReadData`])
    /// whose lengths add up to `len`. The server calls this one; the default wraps `read`.
    fn read_parts(&self, offset: u64, len: u32) -> BoxFuture<'_, io::Result<ReadData>> {
        let read = self.read(offset, len);
        Box::pin(async move { read.await.map(|b| vec![b]) })
    }
    /// Writes `data` at `offset`; with `fua`, completes only once the data is durable.
    fn write(&self, offset: u64, data: Bytes, fua: bool) -> BoxFuture<'_, io::Result<()>>;
    /// Where a validated write of `len` bytes at `offset` (at most [`proto::MAX_PAYLOAD`],
    /// whole blocks) receives its payload when the export wants it in its own memory; the
    /// server fills it and calls [`IncomingWrite::write`]. `None` (the default) lets the server
    /// pick its own buffer and call [`Export::write`].
    fn incoming_write(self: Arc<Self>, offset: u64, len: usize) -> Option<Box<dyn IncomingWrite>> {
        let _ = (offset, len);
        None
    }
    /// Makes every completed write durable.
    fn flush(&self) -> BoxFuture<'_, io::Result<()>>;
    /// Hint that `[offset, offset+len)` is no longer needed; contents afterwards are undefined.
    fn trim(&self, offset: u64, len: u32, fua: bool) -> BoxFuture<'_, io::Result<()>> {
        let _ = (offset, len, fua);
        Box::pin(future::ready(Ok(())))
    }
    /// Makes `[offset, offset+len)` read back as zeroes.
    fn write_zeroes(
        &self,
        offset: u64,
        len: u32,
        flags: ZeroFlags,
    ) -> BoxFuture<'_, io::Result<()>>;
    /// Hint that `[offset, offset+len)` will be read soon.
    fn cache(&self, offset: u64, len: u32) -> BoxFuture<'_, io::Result<()>> {
        let _ = (offset, len);
        Box::pin(future::ready(Ok(())))
    }
    /// Whether [`Export::block_status`] knows anything (holes, zeroes). Only then is the
    /// `base:allocation` context offered, sparing clients useless round trips.
    fn can_block_status(&self) -> bool {
        false
    }
    /// Allocation status of `[offset, offset+len)` for `base:allocation`, starting at `offset`;
    /// may describe less than `len` but at least one non-empty extent, and never more than
    /// `len`. The default says "allocated, contents unknown" for the whole range, which is
    /// always correct.
    fn block_status(&self, offset: u64, len: u32) -> BoxFuture<'_, io::Result<Vec<Extent>>> {
        let _ = offset;
        Box::pin(future::ready(Ok(vec![Extent {
            length: len,
            flags: 0,
        }])))
    }
}

/// Maps an I/O error from an export to the NBD error value sent to the client.
pub fn errno_for(e: &io::Error) -> u32 {
    if let Some(raw) = e.raw_os_error() {
        return match raw {
            libc::EPERM | libc::EACCES | libc::EROFS => proto::EPERM,
            libc::ENOSPC | libc::EDQUOT | libc::EFBIG => proto::ENOSPC,
            libc::EINVAL => proto::EINVAL,
            libc::EOPNOTSUPP => proto::ENOTSUP,
            libc::EOVERFLOW => proto::EOVERFLOW,
            libc::ESHUTDOWN => proto::ESHUTDOWN,
            libc::ENOMEM => proto::ENOMEM,
            _ => proto::EIO,
        };
    }
    match e.kind() {
        io::ErrorKind::PermissionDenied => proto::EPERM,
        io::ErrorKind::InvalidInput => proto::EINVAL,
        io::ErrorKind::Unsupported => proto::ENOTSUP,
        io::ErrorKind::OutOfMemory => proto::ENOMEM,
        _ => proto::EIO,
    }
}

/// One shard of a [`MemoryExport`]: `None` until first written (reads as zeroes).
type Shard = RwLock<Option<Box<[u8]>>>;

/// Bytes per shard of a [`MemoryExport`]; shards are allocated on first write.
const SHARD: u64 = 64 * 1024;

/// A sparse in-memory export: 64 KiB shards, each behind its own lock and allocated on first
/// write; trimmed or zeroed whole shards are freed again. For tests and benchmarks.
pub struct MemoryExport {
    size: u64,
    min_block: u32,
    preferred: u32,
    read_only: bool,
    description: String,
    shards: Box<[Shard]>,
    flushes: AtomicU64,
}

impl std::fmt::Debug for MemoryExport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryExport")
            .field("size", &self.size)
            .field("min_block", &self.min_block)
            .field("preferred", &self.preferred)
            .field("read_only", &self.read_only)
            .finish()
    }
}

impl MemoryExport {
    /// A writable, all-zero export of `size` bytes with 512-byte blocks.
    pub fn new(size: u64) -> Self {
        let n = size.div_ceil(SHARD) as usize;
        Self {
            size,
            min_block: 512,
            preferred: 4096,
            read_only: false,
            description: String::new(),
            shards: (0..n).map(|_| RwLock::new(None)).collect(),
            flushes: AtomicU64::new(0),
        }
    }

    /// Sets the minimum and preferred block sizes it reports.
    pub fn with_block_sizes(mut self, min_block: u32, preferred: u32) -> Self {
        self.min_block = min_block;
        self.preferred = preferred;
        self
    }

    /// Makes the export read-only.
    pub fn with_read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        self
    }

    /// Sets the description.
    pub fn with_description(mut self, description: impl Into<String>) -> Self {
        self.description = description.into();
        self
    }

    /// Copies `data` in at `offset` directly (test setup; ignores `read_only`).
    /// Panics if the range is outside the export.
    pub fn fill(&self, offset: u64, data: &[u8]) {
        assert!(
            offset + data.len() as u64 <= self.size,
            "fill outside the export"
        );
        self.write_at(offset, data);
    }

    /// Copies `len` bytes at `offset` out directly (test checks).
    /// Panics if the range is outside the export.
    pub fn contents(&self, offset: u64, len: usize) -> Vec<u8> {
        assert!(offset + len as u64 <= self.size, "read outside the export");
        let mut v = vec![0u8; len];
        self.read_at(offset, &mut v);
        v
    }

    /// How many flushes the export has seen.
    pub fn flush_count(&self) -> u64 {
        self.flushes.load(Ordering::Relaxed)
    }

    /// Bytes of memory the allocated shards hold.
    pub fn allocated_bytes(&self) -> u64 {
        self.shards
            .iter()
            .filter(|s| s.read().unwrap_or_else(|p| p.into_inner()).is_some())
            .count() as u64
            * SHARD
    }

    fn shard_len(&self, idx: usize) -> usize {
        let start = idx as u64 * SHARD;
        (self.size - start).min(SHARD) as usize
    }

    /// Visits `[offset, offset+len)` shard by shard: (shard index, offset in shard, range in
    /// the caller's buffer).
    fn pieces(
        offset: u64,
        len: u64,
    ) -> impl Iterator<Item = (usize, usize, std::ops::Range<usize>)> {
        let end = offset + len;
        let mut pos = offset;
        std::iter::from_fn(move || {
            if pos >= end {
                return None;
            }
            let idx = pos / SHARD;
            let in_shard = pos % SHARD;
            let n = (SHARD - in_shard).min(end - pos);
            let buf_start = (pos - offset) as usize;
            pos += n;
            Some((
                idx as usize,
                in_shard as usize,
                buf_start..buf_start + n as usize,
            ))
        })
    }

    fn read_at(&self, offset: u64, out: &mut [u8]) {
        for (idx, at, range) in Self::pieces(offset, out.len() as u64) {
            let guard = self.shards[idx].read().unwrap_or_else(|p| p.into_inner());
            match guard.as_deref() {
                Some(shard) => out[range.clone()].copy_from_slice(&shard[at..at + range.len()]),
                None => out[range].fill(0),
            }
        }
    }

    fn write_at(&self, offset: u64, data: &[u8]) {
        for (idx, at, range) in Self::pieces(offset, data.len() as u64) {
            let shard_len = self.shard_len(idx);
            let mut guard = self.shards[idx].write().unwrap_or_else(|p| p.into_inner());
            let shard = guard.get_or_insert_with(|| vec![0u8; shard_len].into_boxed_slice());
            shard[at..at + range.len()].copy_from_slice(&data[range]);
        }
    }

    fn zero_at(&self, offset: u64, len: u64, may_free: bool) {
        for (idx, at, range) in Self::pieces(offset, len) {
            let shard_len = self.shard_len(idx);
            let mut guard = self.shards[idx].write().unwrap_or_else(|p| p.into_inner());
            if may_free && at == 0 && range.len() == shard_len {
                *guard = None;
            } else if let Some(shard) = guard.as_deref_mut() {
                shard[at..at + range.len()].fill(0);
            }
        }
    }

    fn check(&self, offset: u64, len: u64, write: bool) -> io::Result<()> {
        if write && self.read_only {
            return Err(io::Error::from_raw_os_error(libc::EROFS));
        }
        match offset.checked_add(len) {
            Some(end) if end <= self.size => Ok(()),
            _ => Err(io::Error::from_raw_os_error(if write {
                libc::ENOSPC
            } else {
                libc::EINVAL
            })),
        }
    }
}

impl Export for MemoryExport {
    fn size(&self) -> u64 {
        self.size
    }
    fn min_block(&self) -> u32 {
        self.min_block
    }
    fn preferred_block(&self) -> u32 {
        self.preferred
    }
    fn read_only(&self) -> bool {
        self.read_only
    }
    fn description(&self) -> String {
        self.description.clone()
    }
    fn can_block_status(&self) -> bool {
        true
    }

    fn read(&self, offset: u64, len: u32) -> BoxFuture<'_, io::Result<Bytes>> {
        let r = self.check(offset, len.into(), false).map(|()| {
            // Built piece by piece: no zero-fill of the whole buffer first.
            let mut v = Vec::with_capacity(len as usize);
            for (idx, at, range) in Self::pieces(offset, len.into()) {
                let guard = self.shards[idx].read().unwrap_or_else(|p| p.into_inner());
                match guard.as_deref() {
                    Some(shard) => v.extend_from_slice(&shard[at..at + range.len()]),
                    None => v.resize(v.len() + range.len(), 0),
                }
            }
            Bytes::from(v)
        });
        Box::pin(future::ready(r))
    }

    fn write(&self, offset: u64, data: Bytes, _fua: bool) -> BoxFuture<'_, io::Result<()>> {
        let r = self
            .check(offset, data.len() as u64, true)
            .map(|()| self.write_at(offset, &data));
        Box::pin(future::ready(r))
    }

    fn flush(&self) -> BoxFuture<'_, io::Result<()>> {
        self.flushes.fetch_add(1, Ordering::Relaxed);
        Box::pin(future::ready(Ok(())))
    }

    fn trim(&self, offset: u64, len: u32, _fua: bool) -> BoxFuture<'_, io::Result<()>> {
        let r = self
            .check(offset, len.into(), true)
            .map(|()| self.zero_at(offset, len.into(), true));
        Box::pin(future::ready(r))
    }

    fn write_zeroes(
        &self,
        offset: u64,
        len: u32,
        flags: ZeroFlags,
    ) -> BoxFuture<'_, io::Result<()>> {
        // Zeroing memory is always at least as fast as writing zeroes, so FAST_ZERO succeeds.
        let r = self
            .check(offset, len.into(), true)
            .map(|()| self.zero_at(offset, len.into(), flags.may_trim));
        Box::pin(future::ready(r))
    }

    fn block_status(&self, offset: u64, len: u32) -> BoxFuture<'_, io::Result<Vec<Extent>>> {
        const MAX_EXTENTS: usize = 1024;
        let r = self.check(offset, len.into(), false).map(|()| {
            let mut out: Vec<Extent> = Vec::new();
            for (idx, _at, range) in Self::pieces(offset, len.into()) {
                let allocated = self.shards[idx]
                    .read()
                    .unwrap_or_else(|p| p.into_inner())
                    .is_some();
                let flags = if allocated {
                    0
                } else {
                    proto::STATE_HOLE | proto::STATE_ZERO
                };
                let n = range.len() as u32;
                if let Some(last) = out.last_mut().filter(|l| l.flags == flags) {
                    last.length += n;
                } else if out.len() == MAX_EXTENTS {
                    break;
                } else {
                    out.push(Extent { length: n, flags });
                }
            }
            out
        });
        Box::pin(future::ready(r))
    }
}
