//! Carrying out one validated request against the export: each command in its own step,
//! long requests of clients without block sizes in export-sized pieces, unaligned ones through
//! [`crate::unaligned`], every write-type request through the export's [`WriteGate`].
//!
//! [`WriteGate`]: crate::write_gate::WriteGate

use std::io;

use bytes::Bytes;

use crate::export::{errno_for, IncomingWrite, ReadData, ZeroFlags};
use crate::proto::*;
use crate::replies::total_len;
use crate::reply_head::{block_status_reply, error_reply, ok_reply, read_reply, ReplyHead};
use crate::request::Conn;
use crate::unaligned::{self, is_unaligned};

/// A write's payload, as received.
pub(crate) enum WriteData {
    None,
    Bytes(Bytes),
    /// In the export's own buffer, from `Export::incoming_write`.
    Own(Box<dyn IncomingWrite>),
}

/// A reply: its header and, for a read, the data.
type Reply = (ReplyHead, ReadData);

/// [`execute`], answering `EIO` if the export panics. A panic is a bug, but it ends only the
/// request's task: without this the client would wait forever for a reply nobody sends
/// (a request that ran inline would take the whole connection down with it instead).
pub(crate) async fn execute_or_fail(c: &Conn, req: RequestHeader, payload: WriteData) -> Reply {
    use futures::FutureExt;
    let run = std::panic::AssertUnwindSafe(execute(c, req, payload));
    match run.catch_unwind().await {
        Ok(reply) => reply,
        Err(panic) => {
            let what = (panic.downcast_ref::<&str>().copied())
                .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
                .unwrap_or("a panic without a message");
            tracing::error!(
                command = req.typ,
                offset = req.offset,
                length = req.length,
                "request failed on an internal error (a bug): {what}"
            );
            let msg = "internal error";
            (error_reply(c.structured, req.cookie, EIO, msg), Vec::new())
        }
    }
}

/// Runs one validated request against the export; returns the reply header and payload.
pub(crate) async fn execute(c: &Conn, req: RequestHeader, payload: WriteData) -> Reply {
    let fua = req.flags & CMD_FLAG_FUA != 0;
    let status = match req.typ {
        CMD_READ => return read(c, &req).await,
        CMD_BLOCK_STATUS => return block_status(c, &req).await,
        CMD_WRITE => write(c, &req, payload, fua).await,
        CMD_FLUSH => c.export.flush().await,
        CMD_TRIM => trim(c, &req, fua).await,
        CMD_WRITE_ZEROES => write_zeroes(c, &req, fua).await,
        CMD_CACHE => cache(c, &req).await,
        _ => unreachable!("validate() rejects unknown commands"),
    };
    match status {
        Ok(()) => (ok_reply(req.cookie), Vec::new()),
        Err(err) => export_error(c, &req, &err),
    }
}

async fn read(c: &Conn, req: &RequestHeader) -> Reply {
    let (off, len) = (req.offset, req.length);
    if len == 0 {
        return (read_reply(c.structured, req.cookie, off, 0), Vec::new());
    }
    match read_range(c, off, len).await {
        Ok(data) if total_len(&data) == len as u64 => {
            (read_reply(c.structured, req.cookie, off, len), data)
        }
        Ok(data) => {
            let got = total_len(&data);
            tracing::error!(
                want = len,
                got,
                "export returned a read of the wrong length"
            );
            let msg = "export returned a short read";
            (error_reply(c.structured, req.cookie, EIO, msg), Vec::new())
        }
        Err(err) => export_error(c, req, &err),
    }
}

async fn write(c: &Conn, req: &RequestHeader, payload: WriteData, fua: bool) -> io::Result<()> {
    match payload {
        WriteData::None => Ok(()),
        WriteData::Bytes(b) if b.is_empty() => Ok(()),
        WriteData::Bytes(b) => write_bytes(c, req.offset, b, fua).await,
        WriteData::Own(incoming) => {
            // Only whole blocks of at most MAX_PAYLOAD come in the export's own buffer.
            let len = u64::from(req.length);
            let _pass = c.gate.whole_blocks(c.min_block, req.offset, len).await;
            incoming.write(fua).await
        }
    }
}

async fn trim(c: &Conn, req: &RequestHeader, fua: bool) -> io::Result<()> {
    let (e, bs, off, len) = (&*c.export, c.min_block, req.offset, req.length);
    if len == 0 {
        return Ok(());
    }
    // Only a connection without negotiated block sizes gets this far with one.
    if is_unaligned(bs, off, len) {
        return unaligned::trim(e, &c.gate, bs, off, len, fua).await;
    }
    let _pass = c.gate.whole_blocks(bs, off, len.into()).await;
    e.trim(off, len, fua).await
}

async fn write_zeroes(c: &Conn, req: &RequestHeader, fua: bool) -> io::Result<()> {
    let (e, bs, off, len) = (&*c.export, c.min_block, req.offset, req.length);
    if len == 0 {
        return Ok(());
    }
    let flags = ZeroFlags {
        may_trim: req.flags & CMD_FLAG_NO_HOLE == 0,
        fua,
        fast_only: req.flags & CMD_FLAG_FAST_ZERO != 0,
    };
    if is_unaligned(bs, off, len) {
        return unaligned::write_zeroes(e, &c.gate, bs, off, len, flags).await;
    }
    let _pass = c.gate.whole_blocks(bs, off, len.into()).await;
    e.write_zeroes(off, len, flags).await
}

async fn cache(c: &Conn, req: &RequestHeader) -> io::Result<()> {
    if req.length == 0 {
        return Ok(());
    }
    let e = &*c.export;
    let (start, n, _) = unaligned::cover(e, c.min_block, req.offset, req.length);
    e.cache(start, n).await
}

async fn block_status(c: &Conn, req: &RequestHeader) -> Reply {
    let e = &*c.export;
    let (start, n, skip) = unaligned::cover(e, c.min_block, req.offset, req.length);
    match e.block_status(start, n).await {
        Ok(extents) => {
            let extents = unaligned::skip_extents(extents, skip);
            let id = c.base_allocation.unwrap_or(0);
            let one = req.flags & CMD_FLAG_REQ_ONE != 0;
            let head = block_status_reply(req.cookie, id, req.length, &extents, one);
            (head, Vec::new())
        }
        Err(err) => export_error(c, req, &err),
    }
}

/// `[offset, offset+len)` cut in the pieces the export takes: at most [`MAX_PAYLOAD`] each.
fn pieces(offset: u64, len: u32) -> impl Iterator<Item = (u64, u32)> {
    let step = u64::from(MAX_PAYLOAD);
    let end = offset + u64::from(len);
    (offset..end)
        .step_by(step as usize)
        .map(move |at| (at, (end - at).min(step) as u32))
}

/// Reads a request's range, piece by piece, each through the blocks covering it.
async fn read_range(c: &Conn, offset: u64, len: u32) -> io::Result<ReadData> {
    let (e, bs) = (&*c.export, c.min_block);
    let mut data = ReadData::new();
    for (at, n) in pieces(offset, len) {
        let mut part = if is_unaligned(bs, at, n) {
            unaligned::read(e, bs, at, n).await?
        } else {
            e.read_parts(at, n).await?
        };
        data.append(&mut part);
    }
    Ok(data)
}

/// Writes a received payload, piece by piece; the first error ends it.
async fn write_bytes(c: &Conn, offset: u64, data: Bytes, fua: bool) -> io::Result<()> {
    let (e, bs) = (&*c.export, c.min_block);
    for (at, n) in pieces(offset, data.len() as u32) {
        let from = (at - offset) as usize;
        let piece = data.slice(from..from + n as usize);
        if is_unaligned(bs, at, n) {
            unaligned::write(e, &c.gate, bs, at, piece, fua).await?;
        } else {
            let _pass = c.gate.whole_blocks(bs, at, n.into()).await;
            e.write(at, piece, fua).await?;
        }
    }
    Ok(())
}

fn export_error(c: &Conn, req: &RequestHeader, err: &io::Error) -> Reply {
    let errno = errno_for(err);
    tracing::debug!(
        cmd = command_name(req.typ),
        offset = req.offset,
        len = req.length,
        "export error: {err}"
    );
    let msg = match errno {
        EPERM => "operation not permitted",
        ENOSPC => "no space left",
        EINVAL => "invalid argument",
        ENOTSUP => "operation not supported",
        _ => "input/output error",
    };
    (
        error_reply(c.structured, req.cookie, errno, msg),
        Vec::new(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_requests_are_cut_in_export_sized_pieces() {
        let big = u64::from(MAX_PAYLOAD);
        assert_eq!(pieces(7, 100).collect::<Vec<_>>(), [(7, 100)]);
        assert_eq!(
            pieces(512, 47 << 20).collect::<Vec<_>>(),
            [(512, MAX_PAYLOAD), (512 + big, (47 << 20) - MAX_PAYLOAD)]
        );
        assert_eq!(pieces(0, 2 * MAX_PAYLOAD).count(), 2);
        assert_eq!(pieces(0, 0).count(), 0);
    }
}
