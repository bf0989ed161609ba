//! Requests not aligned to the export's block, from clients that negotiated no block size
//! (`NBD_OPT_EXPORT_NAME`, or `NBD_OPT_GO` without `NBD_INFO_BLOCK_SIZE`). The spec says a
//! server SHOULD then support a minimum block size of 1; refusing `GO` with
//! `NBD_REP_ERR_BLOCK_SIZE_REQD` cannot reach `EXPORT_NAME` clients, so this server serves them:
//! reads read the covering blocks and hand out the bytes asked for; writes and zeroing
//! read-modify-write the partial blocks at the edges and pass the aligned middle through; trims
//! drop the partial edges (a trim is a hint).
//!
//! An edge read-modify-write rewrites bytes it was not asked to write, so it must not interleave
//! with another write to the same block (it would put back old bytes over them): it passes the
//! export's [`WriteGate`], which makes every other write lock its blocks while one is in flight
//! and costs aligned writes nothing otherwise.

use std::io;

use crate::export::{Export, Extent, ReadData, ZeroFlags};
use crate::proto::MAX_PAYLOAD;
use crate::write_gate::WriteGate;
use bytes::{Bytes, BytesMut};

/// Whether `[offset, offset+len)` needs the byte-granular path.
pub(crate) fn is_unaligned(bs: u64, offset: u64, len: u32) -> bool {
    (offset | u64::from(len)) & (bs - 1) != 0
}

/// `[offset, offset+len)` split for block size `bs`: partial head block, aligned middle,
/// partial tail block (as block start offsets and the middle range).
struct Split {
    head: Option<u64>,
    middle: (u64, u64),
    tail: Option<u64>,
}

fn split(bs: u64, offset: u64, len: u64) -> Split {
    let end = offset + len;
    let first_full = offset.div_ceil(bs) * bs;
    let last_full = end / bs * bs;
    if first_full > last_full {
        // Inside one block.
        return Split {
            head: Some(offset / bs * bs),
            middle: (offset, 0),
            tail: None,
        };
    }
    Split {
        head: (!offset.is_multiple_of(bs)).then_some(offset / bs * bs),
        middle: (first_full, last_full - first_full),
        tail: (!end.is_multiple_of(bs)).then_some(last_full),
    }
}

impl Split {
    fn edges(&self) -> Vec<u64> {
        self.head.iter().chain(self.tail.iter()).copied().collect()
    }
}

/// Reads `[offset, offset+len)` through the blocks that cover it.
pub(crate) async fn read(e: &dyn Export, bs: u64, offset: u64, len: u32) -> io::Result<ReadData> {
    let start = offset / bs * bs;
    let end = (offset + u64::from(len)).div_ceil(bs) * bs;
    let end = end.min(e.size().max(offset + u64::from(len)));
    let mut parts = Vec::new();
    let mut at = start;
    while at < end {
        let n = (end - at).min(u64::from(MAX_PAYLOAD)) as u32;
        parts.extend(e.read_parts(at, n).await?);
        at += u64::from(n);
    }
    Ok(slice_parts(parts, (offset - start) as usize, len as usize))
}

/// Bytes `[skip, skip+len)` of the concatenation of `parts`, without copying.
fn slice_parts(parts: ReadData, mut skip: usize, mut len: usize) -> ReadData {
    let mut out = Vec::with_capacity(parts.len());
    for p in parts {
        if len == 0 {
            break;
        }
        if skip >= p.len() {
            skip -= p.len();
            continue;
        }
        let n = (p.len() - skip).min(len);
        out.push(p.slice(skip..skip + n));
        skip = 0;
        len -= n;
    }
    out
}

/// Rewrites the block at `block` with `patch(block_bytes)` applied.
async fn rmw(
    e: &dyn Export,
    bs: u64,
    block: u64,
    fua: bool,
    patch: impl FnOnce(&mut [u8]),
) -> io::Result<()> {
    let old = e.read(block, bs as u32).await?;
    if old.len() as u64 != bs {
        return Err(io::Error::other("export returned a short read"));
    }
    let mut buf = BytesMut::from(&old[..]);
    patch(&mut buf);
    e.write(block, buf.freeze(), fua).await
}

/// Writes `data` at an unaligned `offset`, the edge blocks read-modify-written under
/// exclusive locks.
pub(crate) async fn write(
    e: &dyn Export,
    gate: &WriteGate,
    bs: u64,
    offset: u64,
    data: Bytes,
    fua: bool,
) -> io::Result<()> {
    let len = data.len() as u64;
    let s = split(bs, offset, len);
    let _pass = gate.read_modify_write(bs, offset, len, &s.edges()).await;
    let patch_from = |block: u64| {
        let data = data.clone();
        move |buf: &mut [u8]| {
            let from = offset.max(block);
            let to = (offset + len).min(block + bs);
            buf[(from - block) as usize..(to - block) as usize]
                .copy_from_slice(&data[(from - offset) as usize..(to - offset) as usize]);
        }
    };
    let head = async {
        match s.head {
            Some(b) => rmw(e, bs, b, fua, patch_from(b)).await,
            None => Ok(()),
        }
    };
    let tail = async {
        match s.tail {
            Some(b) => rmw(e, bs, b, fua, patch_from(b)).await,
            None => Ok(()),
        }
    };
    let middle = async {
        let (m, n) = s.middle;
        if n == 0 {
            return Ok(());
        }
        let at = (m - offset) as usize;
        e.write(m, data.slice(at..at + n as usize), fua).await
    };
    tokio::try_join!(head, middle, tail).map(drop)
}

/// Zeroes an unaligned range: edge blocks read-modify-written, the middle zeroed by the
/// export. Never fast: `fast_only` fails at once when there are edges.
pub(crate) async fn write_zeroes(
    e: &dyn Export,
    gate: &WriteGate,
    bs: u64,
    offset: u64,
    len: u32,
    flags: ZeroFlags,
) -> io::Result<()> {
    let len = u64::from(len);
    let s = split(bs, offset, len);
    if flags.fast_only && (s.head.is_some() || s.tail.is_some()) {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "zeroing part of a block needs a read-modify-write: not fast",
        ));
    }
    let _pass = gate.read_modify_write(bs, offset, len, &s.edges()).await;
    let zero = |block: u64| {
        move |buf: &mut [u8]| {
            let from = offset.max(block);
            let to = (offset + len).min(block + bs);
            buf[(from - block) as usize..(to - block) as usize].fill(0);
        }
    };
    let edges = async {
        for b in s.edges() {
            rmw(e, bs, b, flags.fua, zero(b)).await?;
        }
        Ok::<(), io::Error>(())
    };
    let middle = async {
        let (m, n) = s.middle;
        if n == 0 {
            return Ok(());
        }
        e.write_zeroes(m, n as u32, flags).await
    };
    tokio::try_join!(edges, middle).map(drop)
}

/// Trims the whole blocks inside an unaligned range (the partial edges keep their data).
pub(crate) async fn trim(
    e: &dyn Export,
    gate: &WriteGate,
    bs: u64,
    offset: u64,
    len: u32,
    fua: bool,
) -> io::Result<()> {
    let s = split(bs, offset, u64::from(len));
    let (m, n) = s.middle;
    if n == 0 {
        return if fua { e.flush().await } else { Ok(()) };
    }
    let _pass = gate.whole_blocks(bs, m, n).await;
    e.trim(m, n as u32, fua).await
}

/// The covering blocks of an unaligned range, for cache hints and block status: (start,
/// length, bytes of the first block before `offset`).
pub(crate) fn cover(e: &dyn Export, bs: u64, offset: u64, len: u32) -> (u64, u32, u32) {
    let start = offset / bs * bs;
    let end = (offset + u64::from(len)).div_ceil(bs) * bs;
    let end = end.min(e.size().max(offset + u64::from(len)));
    let max = u64::from(u32::MAX) / bs * bs;
    (
        (start),
        (end - start).min(max) as u32,
        (offset - start) as u32,
    )
}

/// Block status of the covering blocks with the `skip` bytes before the request dropped.
pub(crate) fn skip_extents(extents: Vec<Extent>, mut skip: u32) -> Vec<Extent> {
    let mut out = Vec::with_capacity(extents.len());
    for ex in extents {
        if skip >= ex.length {
            skip -= ex.length;
            continue;
        }
        out.push(Extent {
            length: ex.length - skip,
            flags: ex.flags,
        });
        skip = 0;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits() {
        let s = split(4096, 100, 200);
        assert_eq!((s.head, s.middle.1, s.tail), (Some(0), 0, None));
        let s = split(4096, 100, 8192);
        assert_eq!(
            (s.head, s.middle, s.tail),
            (Some(0), (4096, 4096), Some(8192))
        );
        let s = split(4096, 4096, 5000);
        assert_eq!((s.head, s.middle, s.tail), (None, (4096, 4096), Some(8192)));
        let s = split(4096, 4000, 96);
        assert_eq!((s.head, s.middle.1, s.tail), (Some(0), 0, None));
    }

    #[test]
    fn slicing_parts() {
        let parts = vec![Bytes::from_static(b"abc"), Bytes::from_static(b"defg")];
        let s: Vec<u8> = slice_parts(parts, 2, 3).concat();
        assert_eq!(s, b"cde");
        let ex = vec![
            Extent {
                length: 4096,
                flags: 3,
            },
            Extent {
                length: 4096,
                flags: 0,
            },
        ];
        assert_eq!(
            skip_extents(ex, 4196),
            vec![Extent {
                length: 3996,
                flags: 0
            }]
        );
    }
}
