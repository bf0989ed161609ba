//! The engine's volumes as NBD exports.

use crate::nbd::proto::{MAX_PAYLOAD, STATE_HOLE, STATE_ZERO};
use crate::nbd::{Export, Extent, IncomingWrite, ZeroFlags};
use crate::served::ServedArray;
use crate::zero_map::ZeroMap;
use bytes::Bytes;
use futures::future::BoxFuture;
use nbraid_core::metadata::Array;
use nbraid_core::split::ZERO_WINDOW_BYTES;
use nbraid_core::{Buf, Volume, VolumeError, MAX_REQUEST_BYTES};
use nbraid_layout::Node;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

// Every read and write the server accepts (at most one payload) is one the engine accepts:
// raising the NBD payload limit past the engine's request limit must not compile.
const _: () = assert!(
    MAX_PAYLOAD as u64 <= MAX_REQUEST_BYTES,
    "the NBD payload limit exceeds the engine's request limit"
);

/// Whether zeroing `[offset, offset+len)` of the tree under `node` is fast: no parity group
/// has to read or write data for it (a read-modify-write of a partial stripe), so every member
/// just zeroes its own ranges (fallocate). It follows the engine's own split: a parity group
/// zeroes whole stripes by zeroing its children and writes zeroes over partial ones; mirrors
/// pass the range to every copy; concat and stripe nodes work in windows of
/// [`ZERO_WINDOW_BYTES`] from `offset`, each child's part of a window in one piece. Cost:
/// O(nodes × windows), never O(range / strip).
pub fn zeroing_is_fast(node: &Node, offset: u64, len: u64) -> bool {
    if len == 0 || !has_parity(node) {
        return true;
    }
    match node {
        Node::Member(_) => true,
        Node::Mirror(m) => m.children().iter().all(|c| zeroing_is_fast(c, offset, len)),
        Node::Parity(g) => {
            let width = g.stripe_width();
            if !offset.is_multiple_of(width) || !len.is_multiple_of(width) {
                return false;
            }
            let (first, stripes) = (offset / width, len / width);
            let at = g.chunk_offset(first);
            g.children()
                .iter()
                .all(|c| zeroing_is_fast(c, at, stripes * g.strip()))
        }
        Node::Concat(c) => windows(offset, len).all(|(at, n)| {
            c.split(at, n)
                .iter()
                .all(|p| zeroing_is_fast(&c.children()[p.child], p.offset, p.len))
        }),
        Node::Stripe(s) => {
            let unit = s.unit();
            let row = unit * s.children().len() as u64;
            // Bytes of `[0, x)` that land on child `i`: they sit at `[0, that)` of the child.
            let below =
                |x: u64, i: u64| (x / row) * unit + (x % row).saturating_sub(i * unit).min(unit);
            windows(offset, len).all(|(at, n)| {
                s.children().iter().enumerate().all(|(i, child)| {
                    let (start, end) = (below(at, i as u64), below(at + n, i as u64));
                    zeroing_is_fast(child, start, end - start)
                })
            })
        }
    }
}

/// The windows a concat or stripe node zeroes `[offset, offset+len)` in.
fn windows(offset: u64, len: u64) -> impl Iterator<Item = (u64, u64)> {
    let end = offset + len;
    (offset..end)
        .step_by(ZERO_WINDOW_BYTES as usize)
        .map(move |at| (at, (end - at).min(ZERO_WINDOW_BYTES)))
}

fn has_parity(node: &Node) -> bool {
    matches!(node, Node::Parity(_)) || node.children().iter().any(has_parity)
}

/// What an export serves: an array that knows itself (writes mark its records dirty and its
/// write-intent bits first; an online reshape may swap it: [`ServedArray`]), or a bare
/// engine volume (tests).
pub enum Backing {
    Array(Arc<ServedArray>),
    Volume(Arc<Volume>),
}

impl Backing {
    /// The geometry and size as served to a new connection now.
    fn with_volume<T>(&self, f: impl FnOnce(&Volume) -> T) -> T {
        match self {
            Backing::Array(a) => f(a.get().volume()),
            Backing::Volume(v) => f(v),
        }
    }

    /// Through the array: while its background resync runs, a read of a mirror first
    /// resyncs what it touches, so two reads never see different copies.
    async fn read(&self, offset: u64, len: u64) -> Result<Buf, VolumeError> {
        match self {
            Backing::Array(a) => a.enter().await?.array.read(offset, len).await,
            Backing::Volume(v) => v.read(offset, len).await,
        }
    }

    async fn write(&self, offset: u64, buf: Buf, fua: bool) -> Result<(), VolumeError> {
        match self {
            Backing::Array(a) => (a.enter().await?.array.write(offset, buf, fua).await).map(drop),
            Backing::Volume(v) => v.write(offset, buf, fua).await.map(drop),
        }
    }

    async fn flush(&self) -> Result<(), VolumeError> {
        match self {
            Backing::Array(a) => a.enter().await?.array.flush().await,
            Backing::Volume(v) => v.flush().await,
        }
    }

    async fn trim(&self, offset: u64, len: u64) -> Result<(), VolumeError> {
        match self {
            Backing::Array(a) => a.enter().await?.array.trim(offset, len).await,
            Backing::Volume(v) => v.trim(offset, len).await,
        }
    }

    async fn write_zeroes(&self, offset: u64, len: u64, fua: bool) -> Result<(), VolumeError> {
        match self {
            Backing::Array(a) => {
                let entered = a.enter().await?;
                entered.array.write_zeroes(offset, len, fua).await
            }
            Backing::Volume(v) => v.write_zeroes(offset, len, fua).await,
        }
    }
}

/// Serves one volume.
pub struct VolumeExport {
    backing: Backing,
    read_only: bool,
    description: String,
    /// Trimmed and zeroed ranges, for `base:allocation`.
    zeroes: ZeroMap,
    /// Write-type requests begun (the daemon's clean-on-idle timer watches it).
    writes_begun: AtomicU64,
}

impl VolumeExport {
    pub fn new(volume: Arc<Volume>, read_only: bool, description: String) -> VolumeExport {
        VolumeExport::with_backing(Backing::Volume(volume), read_only, description)
    }

    /// Serves `array` as it is (no online reshape will swap it).
    pub fn array(array: Arc<Array>, read_only: bool, description: String) -> VolumeExport {
        let served = Arc::new(ServedArray::new(array, Default::default()));
        VolumeExport::served(served, read_only, description)
    }

    /// Serves whatever array `served` holds at each request.
    pub fn served(served: Arc<ServedArray>, read_only: bool, description: String) -> VolumeExport {
        VolumeExport::with_backing(Backing::Array(served), read_only, description)
    }

    fn with_backing(backing: Backing, read_only: bool, description: String) -> VolumeExport {
        VolumeExport {
            backing,
            read_only,
            description,
            zeroes: ZeroMap::default(),
            writes_begun: AtomicU64::new(0),
        }
    }

    /// Write-type requests (write, trim, zeroes) begun since start.
    pub fn writes_begun(&self) -> u64 {
        self.writes_begun.load(Ordering::Relaxed)
    }

    fn begin(&self) {
        self.writes_begun.fetch_add(1, Ordering::Relaxed);
    }
}

/// Lets a read's aligned buffer go out on the socket without a copy.
struct BufOwner(Buf);

impl AsRef<[u8]> for BufOwner {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

/// A write's payload, received straight into the aligned buffer the engine writes from.
struct IncomingVolumeWrite {
    export: Arc<VolumeExport>,
    offset: u64,
    buf: Buf,
}

impl IncomingWrite for IncomingVolumeWrite {
    fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.buf
    }
    fn write(self: Box<Self>, fua: bool) -> BoxFuture<'static, io::Result<()>> {
        let IncomingVolumeWrite {
            export,
            offset,
            buf,
        } = *self;
        Box::pin(async move { export.write_buf(offset, buf, fua).await })
    }
}

impl VolumeExport {
    /// Every write ends here: counted, its range out of the zero map, then the engine.
    async fn write_buf(&self, offset: u64, buf: Buf, fua: bool) -> io::Result<()> {
        self.begin();
        let _w = self.zeroes.begin_write(offset, buf.len() as u64);
        self.backing.write(offset, buf, fua).await.map_err(to_io)
    }
}

/// The preferred block size to advertise for a volume whose full stripe is `width` bytes.
/// NBD requires a power of two (the server rounds anything else up: 256 KiB for RAID 5 of
/// three members' 192 KiB, so every preferred-sized request straddled two stripes). The
/// largest power of two dividing the full stripe is the whole stripe when that is a power of
/// two (full-stripe writes: no read-modify-write) and otherwise still keeps aligned requests
/// inside one stripe (64 KiB for 3 × 64 KiB). 4 KiB for volumes without a stripe (mirrors,
/// JBOD); at most 32 MiB, the largest request the server takes.
pub fn preferred_block_bytes(full_stripe_width: Option<u64>) -> u32 {
    const LARGEST: u64 = 32 << 20;
    match full_stripe_width {
        Some(w) if w > 0 => (1u64 << w.trailing_zeros()).min(LARGEST) as u32,
        _ => 4096,
    }
}

/// Engine errors as the `io::Error`s the NBD layer maps to protocol errors.
fn to_io(e: VolumeError) -> io::Error {
    let kind = match &e {
        VolumeError::Misaligned { .. } | VolumeError::TooLong { .. } => io::ErrorKind::InvalidInput,
        VolumeError::OutOfRange { .. } => io::ErrorKind::InvalidInput,
        _ => io::ErrorKind::Other,
    };
    io::Error::new(kind, e)
}

impl Export for VolumeExport {
    fn size(&self) -> u64 {
        self.backing.with_volume(|v| v.capacity())
    }

    fn min_block(&self) -> u32 {
        self.backing.with_volume(|v| v.block_size() as u32)
    }

    fn preferred_block(&self) -> u32 {
        (self.backing).with_volume(|v| preferred_block_bytes(v.geometry().full_stripe_width()))
    }

    fn read_only(&self) -> bool {
        self.read_only
    }

    fn description(&self) -> String {
        self.description.clone()
    }

    fn read(&self, offset: u64, len: u32) -> BoxFuture<'_, io::Result<Bytes>> {
        Box::pin(async move {
            let buf = self
                .backing
                .read(offset, u64::from(len))
                .await
                .map_err(to_io)?;
            Ok(Bytes::from_owner(BufOwner(buf)))
        })
    }

    fn write(&self, offset: u64, data: Bytes, fua: bool) -> BoxFuture<'_, io::Result<()>> {
        // Member I/O wants aligned buffers (O_DIRECT); the socket's payload is not.
        let buf = Buf::copy_from(&data);
        drop(data);
        Box::pin(self.write_buf(offset, buf, fua))
    }

    fn incoming_write(self: Arc<Self>, offset: u64, len: usize) -> Option<Box<dyn IncomingWrite>> {
        // `len` is a validated write length (at most `MAX_PAYLOAD`); pooled memory, with
        // stale contents that the payload overwrites.
        Some(Box::new(IncomingVolumeWrite {
            export: self,
            offset,
            buf: Buf::new(len),
        }))
    }

    fn flush(&self) -> BoxFuture<'_, io::Result<()>> {
        Box::pin(async move { self.backing.flush().await.map_err(to_io) })
    }

    fn trim(&self, offset: u64, len: u32, fua: bool) -> BoxFuture<'_, io::Result<()>> {
        Box::pin(async move {
            self.begin();
            let token = self.zeroes.begin_zeroing();
            self.backing
                .trim(offset, u64::from(len))
                .await
                .map_err(to_io)?;
            // Trimmed space reads back as zeroes (Volume::trim).
            let hz = STATE_HOLE | STATE_ZERO;
            self.zeroes.zeroed(token, offset, u64::from(len), hz);
            if fua {
                self.backing.flush().await.map_err(to_io)?;
            }
            Ok(())
        })
    }

    fn write_zeroes(
        &self,
        offset: u64,
        len: u32,
        flags: ZeroFlags,
    ) -> BoxFuture<'_, io::Result<()>> {
        let len = u64::from(len);
        let fast = |v: &Volume| zeroing_is_fast(v.geometry().root(), offset, len);
        if flags.fast_only && !self.backing.with_volume(fast) {
            // NBD_CMD_FLAG_FAST_ZERO: fail at once, before touching anything, when zeroing
            // would cost parity reads and writes (no faster than writing zeroes).
            let e = io::Error::new(
                io::ErrorKind::Unsupported,
                "zeroing this range would read and rewrite parity: not fast",
            );
            return Box::pin(futures::future::ready(Err(e)));
        }
        Box::pin(async move {
            self.begin();
            let token = self.zeroes.begin_zeroing();
            self.backing
                .write_zeroes(offset, len, flags.fua)
                .await
                .map_err(to_io)?;
            let state = if flags.may_trim {
                STATE_HOLE | STATE_ZERO
            } else {
                STATE_ZERO
            };
            self.zeroes.zeroed(token, offset, len, state);
            Ok(())
        })
    }

    fn can_block_status(&self) -> bool {
        true
    }

    /// From what this daemon has trimmed and zeroed since it started ([`ZeroMap`]); data
    /// elsewhere. Costs per extent.
    fn block_status(&self, offset: u64, len: u32) -> BoxFuture<'_, io::Result<Vec<Extent>>> {
        Box::pin(futures::future::ready(Ok(self.zeroes.extents(offset, len))))
    }
}

#[cfg(test)]
mod tests {
    use super::preferred_block_bytes;

    #[test]
    fn the_preferred_block_is_the_largest_power_of_two_dividing_the_full_stripe() {
        let kib = |k: u64| Some(k << 10);
        assert_eq!(preferred_block_bytes(kib(192)), 64 << 10); // RAID 5 of 3, 64 KiB strips
        assert_eq!(preferred_block_bytes(kib(256)), 256 << 10); // RAID 5 of 5
        assert_eq!(preferred_block_bytes(kib(320)), 64 << 10); // RAID 6 of 7
        assert_eq!(preferred_block_bytes(kib(64 << 10)), 32 << 20);
        assert_eq!(preferred_block_bytes(None), 4096);
    }
}
