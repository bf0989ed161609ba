//! Transmission phase: one reader (this task) decodes and validates requests, each valid
//! request runs as its own task, and one writer task sends replies in completion order.
//!
//! Memory is bounded per connection and server-wide (see [`super::limits`]): a request slot
//! and the request's cost in both byte budgets are taken before a write payload is allocated
//! or a read is started, and released once the reply has been handed to the socket (a write's
//! bytes as soon as its data is in the export).

use std::io;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, BufReader};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::export::{errno_for, Export, Extent, PayloadBuf, ReadData, ZeroFlags};
use super::handshake::Negotiated;
use super::limits::{payload_time_allowed, request_cost, Activity, Limits, StallGuard};
use super::proto::*;
use super::replies::{total_len, BytesHeld, Outgoing, Replies, BATCH_REPLIES};
use super::server::{shutdown_signalled, RequestGuard, Shared};
use super::unaligned::{self, is_unaligned};
use super::write_gate::WriteGate;
use super::ConnError;

/// A write whose payload is invalid is discarded and answered with an error when no longer
/// than this; longer ones end the connection (the protocol allows it past 2^25 bytes).
const MAX_DISCARD: u32 = 2 * MAX_PAYLOAD;

/// Requests up to this length get one inline poll before being spawned.
const INLINE_MAX: u32 = 64 * 1024;

/// Longest read or write served to a client that negotiated no block size (and so was never
/// told the 32 MiB maximum): nbdkit serves up to this, and the NBD project's own tests send
/// 47 MiB writes. Such a request is carried out in pieces of at most [`MAX_PAYLOAD`], the
/// export's limit; its memory is budgeted whole, as any request's.
pub(crate) const MAX_UNNEGOTIATED_PAYLOAD: u32 = 64 << 20;

struct Conn {
    export: Arc<dyn Export>,
    /// Where this export's writes meet its unaligned read-modify-writes.
    gate: Arc<WriteGate>,
    size: u64,
    min_block: u64,
    /// Requests need not be aligned to `min_block` (no block size was negotiated).
    byte_granular: bool,
    /// Longest read or write accepted: [`MAX_PAYLOAD`], or for a client that negotiated no
    /// block size up to [`MAX_UNNEGOTIATED_PAYLOAD`] as far as the memory budgets hold it.
    max_payload: u32,
    read_only: bool,
    structured: bool,
    base_allocation: Option<u32>,
}

/// A request header being received; kept across `select!` rounds so that no byte is lost
/// when another branch wins.
struct HeaderReader {
    buf: [u8; REQUEST_HEADER_LEN],
    filled: usize,
    /// When the last bytes of a partial header arrived.
    last_progress: Instant,
}

impl HeaderReader {
    fn new() -> Self {
        HeaderReader {
            buf: [0; REQUEST_HEADER_LEN],
            filled: 0,
            last_progress: Instant::now(),
        }
    }

    /// Reads the rest of a header: `Ok(false)` on a clean end of stream before its first
    /// byte. Cancel-safe: bytes read stay in `buf`.
    async fn read<R: AsyncRead + Unpin>(&mut self, r: &mut R) -> Result<bool, ConnError> {
        while self.filled < REQUEST_HEADER_LEN {
            let n = r.read(&mut self.buf[self.filled..]).await?;
            if n == 0 {
                return if self.filled == 0 {
                    Ok(false)
                } else {
                    Err(ConnError::ShortHeader(self.filled))
                };
            }
            self.filled += n;
            if self.filled < REQUEST_HEADER_LEN {
                self.last_progress = Instant::now();
            }
        }
        Ok(true)
    }

    /// Takes the complete header out, ready for the next one.
    fn take(&mut self) -> [u8; REQUEST_HEADER_LEN] {
        debug_assert_eq!(self.filled, REQUEST_HEADER_LEN);
        self.filled = 0;
        self.buf
    }
}

/// What the reader's clock found when it went off.
enum Clock {
    /// Nothing in flight, no request for `idle_timeout`: close.
    Idle,
    /// Part of a header and then nothing for `stall_timeout`.
    Stalled,
    /// Not yet: look again then.
    Later(Instant),
}

/// Serves requests until the client disconnects, breaks the protocol, stalls, idles past the
/// idle timeout, or the server shuts down; then waits for requests in flight and their
/// replies.
pub(crate) async fn serve<R, W>(
    shared: &Arc<Shared>,
    neg: Negotiated,
    mut r: BufReader<R>,
    w: W,
    shutdown: &mut watch::Receiver<bool>,
) -> Result<(), ConnError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let entry = &shared.exports[neg.export];
    let conn = Arc::new(Conn {
        export: entry.export.clone(),
        gate: entry.gate.clone(),
        size: entry.export.size(),
        min_block: entry.export.min_block().into(),
        byte_granular: neg.byte_granular,
        max_payload: max_payload(&shared.limits, neg.byte_granular),
        read_only: entry.export.read_only(),
        structured: neg.structured,
        base_allocation: neg.base_allocation,
    });
    // Normalized by the server: every value at least its minimum.
    let limits = shared.limits;
    let slots = Arc::new(Semaphore::new(limits.max_in_flight));
    let budget = Arc::new(Semaphore::new(limits.max_bytes_in_flight));
    let activity = limits.idle_timeout.map(|_| Arc::new(Activity::new()));
    let w = StallGuard::new(w, limits.stall_timeout);
    let (tx, write_loop) = Replies::new(w, activity.clone());
    // Aborted with this future if the connection is cut off at shutdown.
    let mut writer = AbortOnDrop(tokio::spawn(write_loop));

    let mut hdr = HeaderReader::new();
    // Goes off at least every idle (or stall) timeout to look for idleness or a stalled header;
    // it is reset only then, never per request.
    let first_wait = limits.idle_timeout.unwrap_or(limits.stall_timeout);
    let mut clock = Box::pin(tokio::time::sleep(first_wait));
    let mut stopping = false;
    // Replies of requests completed inline, written together once no more requests are
    // buffered (or before anything that may wait).
    let mut ready: Vec<Outgoing> = Vec::new();
    let result = loop {
        if !ready.is_empty()
            && (r.buffer().len() < REQUEST_HEADER_LEN || ready.len() >= BATCH_REPLIES)
        {
            tx.send_all(&mut ready);
        }
        let got = tokio::select! {
            biased;
            _ = shutdown_signalled(shutdown) => {
                stopping = true;
                break Ok(());
            }
            _ = tx.closed() => break Ok(()),
            res = hdr.read(&mut r) => res,
            _ = clock.as_mut() => {
                let now = Instant::now();
                let verdict = if hdr.filled > 0 {
                    let due = hdr.last_progress + limits.stall_timeout;
                    if now >= due { Clock::Stalled } else { Clock::Later(due) }
                } else if let (Some(idle), Some(act)) = (limits.idle_timeout, &activity) {
                    if slots.available_permits() < limits.max_in_flight {
                        // Requests or replies in flight: not idle; look again later.
                        Clock::Later(now + idle)
                    } else {
                        let due = act.last() + idle;
                        if now >= due { Clock::Idle } else { Clock::Later(due) }
                    }
                } else {
                    Clock::Later(now + limits.stall_timeout)
                };
                match verdict {
                    Clock::Idle => {
                        tracing::info!("closing a connection idle for {:?}", limits.idle_timeout.unwrap_or_default());
                        break Ok(());
                    }
                    Clock::Stalled => {
                        break Err(ConnError::Stalled("a request header", limits.stall_timeout.as_secs()));
                    }
                    Clock::Later(at) => {
                        clock.as_mut().reset(at);
                        continue;
                    }
                }
            }
        };
        match got {
            Ok(true) => {}
            Ok(false) => break Ok(()),
            Err(e) => break Err(e),
        }
        if let Some(a) = &activity {
            a.touch();
        }
        let raw = hdr.take();
        let Some(req) = RequestHeader::parse(&raw) else {
            let magic = u32::from_be_bytes([raw[0], raw[1], raw[2], raw[3]]);
            break Err(ConnError::BadRequestMagic(magic));
        };
        if req.typ == CMD_DISC {
            break Ok(());
        }
        let Some(slot) = acquire(&slots, 1, &tx, &mut ready).await else {
            break Ok(());
        };

        if let Err((errno, msg)) = validate(&conn, &req) {
            if req.typ == CMD_WRITE {
                if req.length > MAX_DISCARD {
                    break Err(ConnError::PayloadTooLong(req.length));
                }
                tx.send_all(&mut ready);
                let clock = PayloadClock::start(&limits, req.length.into());
                if let Err(e) = discard(&mut r, req.length.into(), &clock).await {
                    break Err(e);
                }
            }
            tracing::debug!(cmd = command_name(req.typ), errno, msg, "rejected request");
            ready.push(Outgoing {
                head: error_reply(conn.structured, req.cookie, errno, msg),
                payload: Vec::new(),
                _slot: Some(slot),
                _bytes: None,
            });
            continue;
        }

        // The connection's share first, then the server's: a connection waits for the server
        // budget with at most its own share held.
        let cost = request_cost(req.typ, req.length);
        let Some(conn_bytes) = acquire(&budget, cost, &tx, &mut ready).await else {
            break Ok(());
        };
        // A payload still to arrive holds the server's budget at the client's pace: only the
        // part of it set aside for arriving payloads (see `Limits::arriving_bytes`).
        let arriving = if req.typ == CMD_WRITE && req.length > 0 {
            match acquire(&shared.arriving, cost, &tx, &mut ready).await {
                Some(p) => Some(p),
                None => break Ok(()),
            }
        } else {
            None
        };
        let Some(server_bytes) = acquire(&shared.budget, cost, &tx, &mut ready).await else {
            break Ok(());
        };
        let bytes = BytesHeld {
            _conn: conn_bytes,
            _server: server_bytes,
        };
        let payload = if req.typ == CMD_WRITE && req.length > 0 {
            // The length is validated (at most MAX_PAYLOAD) and its budget taken.
            let len = req.length as usize;
            let clock = PayloadClock::start(&limits, len as u64);
            if r.buffer().len() < len {
                // Reading the payload may wait for the client: replies go out first.
                tx.send_all(&mut ready);
            }
            // An unaligned write is patched into whole blocks later, a longer one than the
            // export takes is cut in pieces: plain bytes for them.
            let own = if is_unaligned(conn.min_block, req.offset, req.length)
                || req.length > MAX_PAYLOAD
            {
                None
            } else {
                conn.export.payload_buffer(len)
            };
            let got = match own {
                Some(mut buf) => read_into(&mut r, buf.as_mut_slice(), len, &clock)
                    .await
                    .map(|()| WriteData::Own(buf)),
                None => read_payload(&mut r, len, &clock)
                    .await
                    .map(WriteData::Bytes),
            };
            drop(arriving);
            match got {
                Ok(p) => p,
                Err(e) => break Err(e),
            }
        } else {
            WriteData::None
        };

        let small = req.length <= INLINE_MAX;
        let conn = conn.clone();
        // Counts the request server-wide until it is done in the export (shutdown flushes
        // only after every request has finished).
        let started = RequestGuard::new(shared);
        let mut task = Box::pin(async move {
            let (head, payload) = execute(&conn, req, payload).await;
            drop(started);
            // Only a read's reply carries its data; other requests' memory is free now.
            let bytes = (!payload.is_empty()).then_some(bytes);
            Outgoing {
                head,
                payload,
                _slot: Some(slot),
                _bytes: bytes,
            }
        });
        // A small request whose export answers at once (memory, cache hit) completes here;
        // anything still pending after one poll runs as its own task, so a slow request never
        // holds up the ones behind it.
        if small {
            if let std::task::Poll::Ready(out) = futures::poll!(task.as_mut()) {
                ready.push(out);
                continue;
            }
        }
        let tx = tx.clone();
        tokio::spawn(async move { tx.send(task.await) });
    };
    tx.send_all(&mut ready);

    if stopping {
        refuse_pending(&mut r, &mut hdr, &tx, conn.structured).await;
    }
    // The writer ends once every request task has sent its reply and dropped its sender.
    drop(tx);
    match (&mut writer.0).await {
        Ok(Ok(())) => result,
        Ok(Err(e)) if e.kind() == io::ErrorKind::TimedOut => Err(ConnError::Io(e)),
        Ok(Err(e)) => {
            tracing::debug!("writing replies failed: {e}");
            result
        }
        Err(e) => {
            tracing::warn!("reply writer failed: {e}");
            result
        }
    }
}

/// Takes `n` permits, or `None` once the reply writer is gone (the connection is ending, and
/// what its queued replies held has been released).
/// Replies in `ready` (holding permits themselves) are sent before waiting.
async fn acquire<W: AsyncWrite + Unpin + Send + 'static>(
    sem: &Arc<Semaphore>,
    n: u32,
    tx: &Replies<W>,
    ready: &mut Vec<Outgoing>,
) -> Option<OwnedSemaphorePermit> {
    // Never barges: permits go to queued waiters before they count as available.
    if let Ok(p) = sem.clone().try_acquire_many_owned(n) {
        return Some(p);
    }
    tx.send_all(ready);
    tokio::select! {
        biased;
        p = sem.clone().acquire_many_owned(n) => Some(p.expect("semaphore never closed")),
        _ = tx.closed() => None,
    }
}

/// At shutdown, answers `NBD_ESHUTDOWN` to the requests the client has already sent (whatever
/// can be read without waiting), so it sees them fail rather than vanish.
async fn refuse_pending<R: AsyncRead + Unpin, W: AsyncWrite + Unpin + Send + 'static>(
    r: &mut R,
    hdr: &mut HeaderReader,
    tx: &Replies<W>,
    structured: bool,
) {
    use futures::FutureExt;
    // Bounded: a few dozen bytes per refusal.
    const MAX_REFUSED: usize = 1024;
    for _ in 0..MAX_REFUSED {
        if !matches!(hdr.read(r).now_or_never(), Some(Ok(true))) {
            return;
        }
        let Some(req) = RequestHeader::parse(&hdr.take()) else {
            return;
        };
        if req.typ == CMD_DISC {
            return;
        }
        if req.typ == CMD_WRITE
            && (req.length > MAX_DISCARD
                || !matches!(skip(r, req.length.into()).now_or_never(), Some(Ok(()))))
        {
            return;
        }
        tx.send(Outgoing::bare(error_reply(
            structured,
            req.cookie,
            ESHUTDOWN,
            "server is shutting down",
        )));
    }
}

/// Reads and drops `len` bytes with plain reads (for use with `now_or_never`).
async fn skip<R: AsyncRead + Unpin>(r: &mut R, mut len: u64) -> io::Result<()> {
    let mut scratch = [0u8; 8192];
    while len > 0 {
        let want = scratch
            .len()
            .min(usize::try_from(len).unwrap_or(usize::MAX));
        let n = r.read(&mut scratch[..want]).await?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        len -= n as u64;
    }
    Ok(())
}

struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Checks a request against the export and the negotiated state, before anything is allocated
/// for it. Returns the NBD error and a message for the client.
fn validate(c: &Conn, req: &RequestHeader) -> Result<(), (u32, &'static str)> {
    let allowed = match req.typ {
        CMD_READ if c.structured => CMD_FLAG_FUA | CMD_FLAG_DF,
        CMD_READ | CMD_WRITE | CMD_TRIM | CMD_FLUSH | CMD_CACHE => CMD_FLAG_FUA,
        CMD_WRITE_ZEROES => CMD_FLAG_FUA | CMD_FLAG_NO_HOLE | CMD_FLAG_FAST_ZERO,
        CMD_BLOCK_STATUS => CMD_FLAG_FUA | CMD_FLAG_REQ_ONE,
        _ => return Err((EINVAL, "unknown command")),
    };
    if req.flags & !allowed != 0 {
        return Err((EINVAL, "command flag not valid for this command"));
    }
    let writes = matches!(req.typ, CMD_WRITE | CMD_TRIM | CMD_WRITE_ZEROES);
    if writes && c.read_only {
        return Err((EPERM, "export is read-only"));
    }
    match req.typ {
        CMD_FLUSH => {
            if req.offset != 0 || req.length != 0 {
                return Err((EINVAL, "flush offset and length must be zero"));
            }
            return Ok(());
        }
        CMD_BLOCK_STATUS => {
            if c.base_allocation.is_none() {
                return Err((EINVAL, "no metadata context was negotiated"));
            }
            if req.length == 0 {
                return Err((EINVAL, "block status of zero bytes"));
            }
        }
        CMD_READ | CMD_WRITE if req.length > c.max_payload => {
            return Err((EINVAL, "request longer than the maximum payload"));
        }
        _ => {}
    }
    match req.offset.checked_add(req.length.into()) {
        Some(end) if end <= c.size => {}
        _ if matches!(req.typ, CMD_WRITE | CMD_WRITE_ZEROES) => {
            return Err((ENOSPC, "request past the end of the export"))
        }
        _ => return Err((EINVAL, "request past the end of the export")),
    }
    // min_block is a power of two (checked by Server::new).
    if !c.byte_granular && is_unaligned(c.min_block, req.offset, req.length) {
        return Err((EINVAL, "request not aligned to the minimum block size"));
    }
    Ok(())
}

/// A write's payload, as received.
enum WriteData {
    None,
    Bytes(Bytes),
    /// In a buffer from `Export::payload_buffer`.
    Own(Box<dyn PayloadBuf>),
}

/// Runs one validated request against the export; returns the reply header and payload.
async fn execute(c: &Conn, req: RequestHeader, payload: WriteData) -> (Vec<u8>, ReadData) {
    let e = &*c.export;
    let fua = req.flags & CMD_FLAG_FUA != 0;
    let (off, len) = (req.offset, req.length);
    let bs = c.min_block;
    // Only a connection without negotiated block sizes gets this far with one.
    let unaligned = is_unaligned(bs, off, len);
    let done = |res: io::Result<()>| match res {
        Ok(()) => (simple_reply(0, req.cookie).to_vec(), Vec::new()),
        Err(err) => export_error(c, &req, &err),
    };
    match req.typ {
        CMD_READ => {
            if len == 0 {
                return (read_reply(c, req.cookie, off, 0), Vec::new());
            }
            match read_range(c, off, len).await {
                Ok(data) if total_len(&data) == len as u64 => {
                    (read_reply(c, req.cookie, off, len), data)
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
                Err(err) => export_error(c, &req, &err),
            }
        }
        CMD_WRITE => match payload {
            WriteData::None => done(Ok(())),
            WriteData::Bytes(b) if b.is_empty() => done(Ok(())),
            WriteData::Bytes(b) => done(write_bytes(c, off, b, fua).await),
            WriteData::Own(buf) => {
                let _pass = c.gate.whole_blocks(bs, off, len.into()).await;
                done(e.write_payload(off, buf, fua).await)
            }
        },
        CMD_FLUSH => done(e.flush().await),
        CMD_TRIM => {
            if len == 0 {
                return done(Ok(()));
            }
            if unaligned {
                return done(unaligned::trim(e, &c.gate, bs, off, len, fua).await);
            }
            let _pass = c.gate.whole_blocks(bs, off, len.into()).await;
            done(e.trim(off, len, fua).await)
        }
        CMD_WRITE_ZEROES => {
            if len == 0 {
                return done(Ok(()));
            }
            let flags = ZeroFlags {
                may_trim: req.flags & CMD_FLAG_NO_HOLE == 0,
                fua,
                fast_only: req.flags & CMD_FLAG_FAST_ZERO != 0,
            };
            if unaligned {
                return done(unaligned::write_zeroes(e, &c.gate, bs, off, len, flags).await);
            }
            let _pass = c.gate.whole_blocks(bs, off, len.into()).await;
            done(e.write_zeroes(off, len, flags).await)
        }
        CMD_CACHE => {
            if len == 0 {
                return done(Ok(()));
            }
            let (start, n, _) = unaligned::cover(e, bs, off, len);
            done(e.cache(start, n).await)
        }
        CMD_BLOCK_STATUS => {
            let (start, n, skip) = unaligned::cover(e, bs, off, len);
            match e.block_status(start, n).await {
                Ok(extents) => {
                    let extents = unaligned::skip_extents(extents, skip);
                    let id = c.base_allocation.unwrap_or(0);
                    let one = req.flags & CMD_FLAG_REQ_ONE != 0;
                    (
                        block_status_reply(req.cookie, id, len, &extents, one),
                        Vec::new(),
                    )
                }
                Err(err) => export_error(c, &req, &err),
            }
        }
        _ => unreachable!("validate() rejects unknown commands"),
    }
}

/// The longest read or write a connection may send (see [`MAX_UNNEGOTIATED_PAYLOAD`]): never
/// more than its own or the arriving payloads' budget, so that a request can always get its
/// memory.
fn max_payload(limits: &Limits, byte_granular: bool) -> u32 {
    if !byte_granular {
        return MAX_PAYLOAD;
    }
    let budget = limits.max_bytes_in_flight.min(limits.arriving_bytes());
    let budget = u32::try_from(budget).unwrap_or(u32::MAX);
    budget.clamp(MAX_PAYLOAD, MAX_UNNEGOTIATED_PAYLOAD)
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

fn export_error(c: &Conn, req: &RequestHeader, err: &io::Error) -> (Vec<u8>, ReadData) {
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

/// Reply header of a successful read of `len` bytes (the data follows separately).
fn read_reply(c: &Conn, cookie: u64, offset: u64, len: u32) -> Vec<u8> {
    if !c.structured {
        return simple_reply(0, cookie).to_vec();
    }
    if len == 0 {
        return structured_header(REPLY_FLAG_DONE, REPLY_TYPE_NONE, cookie, 0).to_vec();
    }
    let mut v = Vec::with_capacity(28);
    v.extend_from_slice(&structured_header(
        REPLY_FLAG_DONE,
        REPLY_TYPE_OFFSET_DATA,
        cookie,
        8 + len,
    ));
    v.extend_from_slice(&offset.to_be_bytes());
    v
}

/// An error reply: a structured `NBD_REPLY_TYPE_ERROR` chunk with a message when structured
/// replies were negotiated (required for reads), a simple reply otherwise.
fn error_reply(structured: bool, cookie: u64, errno: u32, msg: &str) -> Vec<u8> {
    if !structured {
        return simple_reply(errno, cookie).to_vec();
    }
    let msg = &msg.as_bytes()[..msg.len().min(MAX_STRING)];
    let mut v = Vec::with_capacity(26 + msg.len());
    v.extend_from_slice(&structured_header(
        REPLY_FLAG_DONE,
        REPLY_TYPE_ERROR,
        cookie,
        6 + msg.len() as u32,
    ));
    v.extend_from_slice(&errno.to_be_bytes());
    v.extend_from_slice(&(msg.len() as u16).to_be_bytes());
    v.extend_from_slice(msg);
    v
}

/// `NBD_REPLY_TYPE_BLOCK_STATUS` chunk: extents are cleaned up so that none is empty, their sum
/// never exceeds `len`, there is at least one, and only one with `req_one`.
fn block_status_reply(
    cookie: u64,
    id: u32,
    len: u32,
    extents: &[Extent],
    req_one: bool,
) -> Vec<u8> {
    let mut out: Vec<Extent> = Vec::new();
    let mut left = len;
    for ex in extents {
        if left == 0 || (req_one && !out.is_empty()) {
            break;
        }
        let n = ex.length.min(left);
        if n == 0 {
            continue;
        }
        out.push(Extent {
            length: n,
            flags: ex.flags & (STATE_HOLE | STATE_ZERO),
        });
        left -= n;
    }
    if out.is_empty() {
        out.push(Extent {
            length: len,
            flags: 0,
        });
    }
    let mut v = Vec::with_capacity(24 + 8 * out.len());
    v.extend_from_slice(&structured_header(
        REPLY_FLAG_DONE,
        REPLY_TYPE_BLOCK_STATUS,
        cookie,
        4 + 8 * out.len() as u32,
    ));
    v.extend_from_slice(&id.to_be_bytes());
    for ex in &out {
        v.extend_from_slice(&ex.length.to_be_bytes());
        v.extend_from_slice(&ex.flags.to_be_bytes());
    }
    v
}

/// First allocation for a write payload; the buffer grows as the data actually arrives, so a
/// client that claims a long payload and sends little costs little.
const PAYLOAD_FIRST_ALLOC: usize = 1024 * 1024;

/// The clocks of one payload being received: `stall` for each read, and a deadline for the
/// whole (see [`payload_time_allowed`]).
struct PayloadClock {
    stall: Duration,
    deadline: Instant,
    len_bytes: u64,
    allowed: Duration,
    min_bytes_per_s: u64,
}

impl PayloadClock {
    fn start(limits: &Limits, len_bytes: u64) -> Self {
        let allowed = payload_time_allowed(
            len_bytes,
            limits.payload_min_bytes_per_s,
            limits.stall_timeout,
        );
        PayloadClock {
            stall: limits.stall_timeout,
            deadline: Instant::now() + allowed,
            len_bytes,
            allowed,
            min_bytes_per_s: limits.payload_min_bytes_per_s,
        }
    }
}

/// One read of a request's payload: the client has `stall` to send at least a byte, and
/// until the payload's deadline to send all of it.
async fn read_some<F>(read: F, clock: &PayloadClock) -> Result<usize, ConnError>
where
    F: std::future::Future<Output = io::Result<usize>>,
{
    let stalled_at = Instant::now() + clock.stall;
    match tokio::time::timeout_at(stalled_at.min(clock.deadline), read).await {
        Ok(Ok(0)) => Err(ConnError::Io(io::ErrorKind::UnexpectedEof.into())),
        Ok(Ok(n)) => Ok(n),
        Ok(Err(e)) => Err(e.into()),
        Err(_) if clock.deadline < stalled_at => Err(ConnError::PayloadTooSlow {
            len_bytes: clock.len_bytes,
            allowed_ms: clock.allowed.as_millis() as u64,
            min_bytes_per_s: clock.min_bytes_per_s,
        }),
        Err(_) => Err(ConnError::Stalled("a write payload", clock.stall.as_secs())),
    }
}

/// Reads a write payload of `len` (already validated) bytes without zero-filling first.
async fn read_payload<R: AsyncRead + Unpin>(
    r: &mut R,
    len: usize,
    clock: &PayloadClock,
) -> Result<Bytes, ConnError> {
    let mut buf = BytesMut::with_capacity(len.min(PAYLOAD_FIRST_ALLOC));
    while buf.len() < len {
        let remaining = len - buf.len();
        if buf.capacity() == buf.len() {
            buf.reserve(remaining.min(buf.len().max(PAYLOAD_FIRST_ALLOC)));
        }
        let room = (buf.capacity() - buf.len()).min(remaining) as u64;
        read_some((&mut *r).take(room).read_buf(&mut buf), clock).await?;
    }
    Ok(buf.freeze())
}

/// Fills `buf` (from the export, exactly the validated length) with a write payload.
async fn read_into<R: AsyncRead + Unpin>(
    r: &mut R,
    buf: &mut [u8],
    len: usize,
    clock: &PayloadClock,
) -> Result<(), ConnError> {
    if buf.len() != len {
        return Err(ConnError::Io(io::Error::other(
            "export gave a payload buffer of the wrong length",
        )));
    }
    let mut got = 0;
    while got < len {
        got += read_some(r.read(&mut buf[got..]), clock).await?;
    }
    Ok(())
}

/// Reads and drops `len` bytes of an invalid request's payload.
async fn discard<R: AsyncRead + Unpin>(
    r: &mut R,
    mut len: u64,
    clock: &PayloadClock,
) -> Result<(), ConnError> {
    let mut scratch = vec![0u8; 64 * 1024];
    while len > 0 {
        let want = scratch
            .len()
            .min(usize::try_from(len).unwrap_or(usize::MAX));
        len -= read_some(r.read(&mut scratch[..want]), clock).await? as u64;
    }
    Ok(())
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

    #[test]
    fn only_clients_without_block_sizes_may_send_more_than_32_mib_within_their_budget() {
        let l = Limits::default().normalized();
        assert_eq!(max_payload(&l, false), MAX_PAYLOAD);
        assert_eq!(max_payload(&l, true), MAX_UNNEGOTIATED_PAYLOAD);
        let tight = Limits {
            max_bytes_in_flight: 40 << 20,
            ..l
        };
        assert_eq!(max_payload(&tight, true), 40 << 20);
        let least = Limits {
            max_bytes_in_flight: 0,
            server_bytes_in_flight: 0,
            ..l
        }
        .normalized();
        assert_eq!(max_payload(&least, true), MAX_PAYLOAD);
    }

    #[test]
    fn block_status_reply_is_clamped() {
        let ex = [
            Extent {
                length: 0,
                flags: 1,
            },
            Extent {
                length: 4096,
                flags: 3,
            },
            Extent {
                length: 1 << 30,
                flags: 0xff,
            },
        ];
        let v = block_status_reply(7, 1, 8192, &ex, false);
        // header(20) + id(4) + 2 extents
        assert_eq!(v.len(), 24 + 16);
        assert_eq!(&v[20..24], &1u32.to_be_bytes());
        assert_eq!(&v[24..28], &4096u32.to_be_bytes());
        assert_eq!(&v[28..32], &3u32.to_be_bytes());
        assert_eq!(&v[32..36], &4096u32.to_be_bytes());
        assert_eq!(&v[36..40], &3u32.to_be_bytes());
        let one = block_status_reply(7, 1, 8192, &ex, true);
        assert_eq!(one.len(), 24 + 8);
        let none = block_status_reply(7, 1, 512, &[], false);
        assert_eq!(&none[24..28], &512u32.to_be_bytes());
    }
}
