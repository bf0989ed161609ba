//! The reply reader: one task per connection reads simple replies and structured chunks and
//! hands each request its outcome, in whatever order they arrive.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, BufReader};

use super::{BoxRead, ClientError, ExportInfo, Reply, Shared, Waiter};
use crate::export::Extent;
use crate::proto::*;

/// Longest chunk payload that is not read data (error messages, extents).
const MAX_META_CHUNK: u32 = 1 << 20;

/// A structured reply being assembled across its chunks.
struct Partial {
    w: Waiter,
    /// A read's data, zero-filled where holes are (allocated on the first chunk).
    data: Option<BytesMut>,
    covered: u64,
    extents: Vec<Extent>,
    error: Option<(u32, String)>,
}

pub(crate) async fn run(r: BoxRead, shared: Arc<Shared>, info: ExportInfo) {
    let mut r = BufReader::with_capacity(256 * 1024, r);
    let mut partial: HashMap<u64, Partial> = HashMap::new();
    let why = loop {
        match one_reply(&mut r, &shared, &info, &mut partial).await {
            Ok(()) => {}
            Err(e) => break e,
        }
    };
    let why = match why {
        ClientError::Io(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            "the server closed the connection".to_string()
        }
        e => e.to_string(),
    };
    for (_, p) in partial.drain() {
        let _ = p.w.tx.send(Err(ClientError::Disconnected(why.clone())));
    }
    shared.close(why);
}

fn take_waiter(shared: &Shared, cookie: u64) -> Result<Waiter, ClientError> {
    shared
        .lock()
        .waiters
        .remove(&cookie)
        .ok_or_else(|| ClientError::Protocol(format!("reply to unknown handle {cookie:#x}")))
}

fn server_error(w: &Waiter, errno: u32, message: String) -> ClientError {
    ClientError::Server {
        cmd: command_name(w.cmd),
        offset: w.offset,
        len: u64::from(w.len),
        errno,
        message,
    }
}

/// Reads a read's `len` bytes into the caller's buffer `dest` (`len` long), or else into a
/// fresh one without zero-filling it first.
async fn read_data<R: AsyncRead + Unpin>(
    r: &mut R,
    dest: Option<BytesMut>,
    len: usize,
) -> std::io::Result<BytesMut> {
    if let Some(mut buf) = dest {
        debug_assert_eq!(buf.len(), len);
        r.read_exact(&mut buf).await?;
        return Ok(buf);
    }
    let mut buf = BytesMut::with_capacity(len);
    while buf.len() < len {
        let room = (len - buf.len()) as u64;
        if (&mut *r).take(room).read_buf(&mut buf).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
    }
    Ok(buf)
}

async fn one_reply<R: AsyncRead + Unpin>(
    r: &mut R,
    shared: &Shared,
    info: &ExportInfo,
    partial: &mut HashMap<u64, Partial>,
) -> Result<(), ClientError> {
    let magic = r.read_u32().await?;
    match magic {
        SIMPLE_REPLY_MAGIC => {
            let errno = r.read_u32().await?;
            let cookie = r.read_u64().await?;
            let mut w = take_waiter(shared, cookie)?;
            let out = if errno != 0 {
                Err(server_error(&w, errno, String::new()))
            } else if w.cmd == CMD_READ {
                if info.structured {
                    return Err(ClientError::Protocol(
                        "a simple reply with data to a read after structured replies were agreed"
                            .into(),
                    ));
                }
                Ok(Reply::Data(
                    read_data(r, w.dest.take(), w.len as usize).await?,
                ))
            } else if w.cmd == CMD_BLOCK_STATUS {
                return Err(ClientError::Protocol(
                    "a simple reply to block status".into(),
                ));
            } else {
                Ok(Reply::Done)
            };
            let _ = w.tx.send(out);
            Ok(())
        }
        STRUCTURED_REPLY_MAGIC => {
            let flags = r.read_u16().await?;
            let typ = r.read_u16().await?;
            let cookie = r.read_u64().await?;
            let len = r.read_u32().await?;
            let mut p = match partial.remove(&cookie) {
                Some(p) => p,
                None => Partial {
                    w: take_waiter(shared, cookie)?,
                    data: None,
                    covered: 0,
                    extents: Vec::new(),
                    error: None,
                },
            };
            let done = flags & REPLY_FLAG_DONE != 0;
            chunk(r, info, &mut p, typ, len, done).await?;
            if done {
                let out = finish(&mut p)?;
                let _ = p.w.tx.send(out);
            } else {
                partial.insert(cookie, p);
            }
            Ok(())
        }
        m => Err(ClientError::Protocol(format!("reply magic {m:#x}"))),
    }
}

/// Reads one chunk's payload into `p`.
async fn chunk<R: AsyncRead + Unpin>(
    r: &mut R,
    info: &ExportInfo,
    p: &mut Partial,
    typ: u16,
    len: u32,
    done: bool,
) -> Result<(), ClientError> {
    let bad = |what: &str| ClientError::Protocol(format!("{what} (chunk type {typ}, {len} bytes)"));
    let (req_off, req_len) = (p.w.offset, u64::from(p.w.len));
    match typ {
        REPLY_TYPE_NONE if len == 0 && done => Ok(()),
        REPLY_TYPE_NONE => Err(bad("a NONE chunk must be empty and final")),
        REPLY_TYPE_OFFSET_DATA | REPLY_TYPE_OFFSET_HOLE if p.w.cmd != CMD_READ => {
            Err(bad("read data in the reply to another command"))
        }
        REPLY_TYPE_OFFSET_DATA => {
            if len < 8 {
                return Err(bad("short OFFSET_DATA"));
            }
            let at = r.read_u64().await?;
            let n = u64::from(len - 8);
            let rel = at.checked_sub(req_off).filter(|rel| rel + n <= req_len);
            let Some(rel) = rel.filter(|_| n > 0) else {
                return Err(bad("OFFSET_DATA outside the range read"));
            };
            p.covered += n;
            if p.data.is_none() && rel == 0 && n == req_len {
                // The common case: the whole read in one chunk, read straight into place.
                p.data = Some(read_data(r, p.w.dest.take(), n as usize).await?);
            } else {
                let buf = p.data.get_or_insert_with(|| whole(&mut p.w, req_len));
                r.read_exact(&mut buf[rel as usize..(rel + n) as usize])
                    .await?;
            }
            Ok(())
        }
        REPLY_TYPE_OFFSET_HOLE => {
            if len != 12 {
                return Err(bad("OFFSET_HOLE of the wrong length"));
            }
            let at = r.read_u64().await?;
            let n = u64::from(r.read_u32().await?);
            let rel = at.checked_sub(req_off).filter(|rel| rel + n <= req_len);
            let Some(rel) = rel.filter(|_| n > 0) else {
                return Err(bad("OFFSET_HOLE outside the range read"));
            };
            p.covered += n;
            let buf = p.data.get_or_insert_with(|| whole(&mut p.w, req_len));
            buf[rel as usize..(rel + n) as usize].fill(0);
            Ok(())
        }
        REPLY_TYPE_BLOCK_STATUS => {
            if p.w.cmd != CMD_BLOCK_STATUS
                || len < 12
                || !(len - 4).is_multiple_of(8)
                || len > MAX_META_CHUNK
            {
                return Err(bad("bad BLOCK_STATUS chunk"));
            }
            let id = r.read_u32().await?;
            let mut body = vec![0u8; (len - 4) as usize];
            r.read_exact(&mut body).await?;
            if Some(id) == info.base_allocation {
                for e in body.chunks_exact(8) {
                    p.extents.push(Extent {
                        length: u32::from_be_bytes(e[0..4].try_into().expect("4 bytes")),
                        flags: u32::from_be_bytes(e[4..8].try_into().expect("4 bytes")),
                    });
                }
            }
            Ok(())
        }
        t if t & (1 << 15) != 0 => {
            if !(6..=MAX_META_CHUNK).contains(&len) {
                return Err(bad("bad error chunk"));
            }
            let mut body = vec![0u8; len as usize];
            r.read_exact(&mut body).await?;
            let errno = u32::from_be_bytes(body[0..4].try_into().expect("4 bytes"));
            let mlen = u16::from_be_bytes([body[4], body[5]]) as usize;
            let msg = body
                .get(6..6 + mlen)
                .ok_or_else(|| bad("error message too long"))?;
            if errno == 0 {
                return Err(bad("an error chunk with error 0"));
            }
            p.error
                .get_or_insert((errno, String::from_utf8_lossy(msg).into_owned()));
            Ok(())
        }
        _ => {
            // An unknown non-error chunk type: the spec says to skip it.
            if len > MAX_PAYLOAD + 8 {
                return Err(bad("oversized chunk"));
            }
            tokio::io::copy(&mut (&mut *r).take(len.into()), &mut tokio::io::sink()).await?;
            Ok(())
        }
    }
}

/// The buffer a read answered in several chunks lands in: the caller's, else a zeroed one.
/// Either way the chunks must cover all of it (their lengths add up to the read's, see `finish`).
fn whole(w: &mut Waiter, len: u64) -> BytesMut {
    w.dest
        .take()
        .unwrap_or_else(|| BytesMut::zeroed(len as usize))
}

/// The outcome of a request whose final chunk has arrived.
fn finish(p: &mut Partial) -> Result<Result<Reply, ClientError>, ClientError> {
    if let Some((errno, msg)) = p.error.take() {
        return Ok(Err(server_error(&p.w, errno, msg)));
    }
    Ok(Ok(match p.w.cmd {
        CMD_READ => {
            if p.covered != u64::from(p.w.len) {
                return Err(ClientError::Protocol(format!(
                    "a read of {} bytes answered with {} bytes of data and holes",
                    p.w.len, p.covered
                )));
            }
            Reply::Data(p.data.take().unwrap_or_default())
        }
        CMD_BLOCK_STATUS => {
            if p.extents.is_empty() {
                return Err(ClientError::Protocol("block status without extents".into()));
            }
            Reply::Extents(std::mem::take(&mut p.extents))
        }
        _ => Reply::Done,
    }))
}
