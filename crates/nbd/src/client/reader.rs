//! The reply reader: one task per connection reads simple replies and structured chunks and
//! hands each request its outcome, in whatever order they arrive.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, BufReader};

use super::coverage::Coverage;
use super::{BoxRead, ClientError, CloseOnUnwind, ExportInfo, Reply, Shared, Waiter};
use crate::export::Extent;
use crate::proto::*;

/// Longest chunk payload that is not read data (error messages, extents).
const MAX_META_CHUNK: u32 = 1 << 20;

/// A structured reply being assembled across its chunks.
struct Partial {
    w: Waiter,
    /// A read's data, zero-filled where holes are (allocated on the first chunk).
    data: Option<BytesMut>,
    /// Bytes of the read its chunks answered: each exactly once, all of them by the end.
    covered: Coverage,
    extents: Vec<Extent>,
    error: Option<(u32, String)>,
    /// A broken reply to this request (the stream itself still in step): the request fails
    /// with it, the connection goes on.
    broken: Option<String>,
}

pub(crate) async fn run(r: BoxRead, shared: Arc<Shared>, info: ExportInfo) {
    let _unwind = CloseOnUnwind(&shared, "reply reader");
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
                    covered: Coverage::default(),
                    extents: Vec::new(),
                    error: None,
                    broken: None,
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

/// What a chunk's header says of its payload: its type and how many bytes follow.
#[derive(Clone, Copy)]
struct ChunkHeader {
    typ: u16,
    len_bytes: u32,
}

impl ChunkHeader {
    /// A chunk the client cannot follow: the stream is out of step, so the connection ends.
    fn bad(self, what: &str) -> ClientError {
        let (typ, len) = (self.typ, self.len_bytes);
        ClientError::Protocol(format!("{what} (chunk type {typ}, {len} bytes)"))
    }
}

/// Reads one chunk's payload into `p`: one reader per chunk type. The server is not trusted:
/// every length and offset it sends is checked before a byte of the payload is used.
async fn chunk<R: AsyncRead + Unpin>(
    r: &mut R,
    info: &ExportInfo,
    p: &mut Partial,
    typ: u16,
    len: u32,
    done: bool,
) -> Result<(), ClientError> {
    let h = ChunkHeader {
        typ,
        len_bytes: len,
    };
    match typ {
        REPLY_TYPE_NONE if len == 0 && done => Ok(()),
        REPLY_TYPE_NONE => Err(h.bad("a NONE chunk must be empty and final")),
        REPLY_TYPE_OFFSET_DATA | REPLY_TYPE_OFFSET_HOLE if p.w.cmd != CMD_READ => {
            Err(h.bad("read data in the reply to another command"))
        }
        REPLY_TYPE_OFFSET_DATA => offset_data(r, p, h).await,
        REPLY_TYPE_OFFSET_HOLE => offset_hole(r, p, h).await,
        REPLY_TYPE_BLOCK_STATUS => block_status(r, info, p, h).await,
        t if t & (1 << 15) != 0 => error_chunk(r, p, h).await,
        // An unknown non-error chunk type: the spec says to skip it.
        _ => skip_unknown(r, h).await,
    }
}

/// OFFSET_DATA: an offset and the bytes there, copied into the read's buffer. A chunk
/// answering bytes already answered is read past and fails the request alone.
async fn offset_data<R: AsyncRead + Unpin>(
    r: &mut R,
    p: &mut Partial,
    h: ChunkHeader,
) -> Result<(), ClientError> {
    if h.len_bytes < 8 {
        return Err(h.bad("short OFFSET_DATA"));
    }
    let at = r.read_u64().await?;
    let n = u64::from(h.len_bytes - 8);
    let (req_off, req_len) = (p.w.offset, u64::from(p.w.len));
    let Some(rel) = place(at, n, req_off, req_len) else {
        return Err(h.bad("OFFSET_DATA outside the range read"));
    };
    if let Err(o) = p.covered.add(rel, rel + n) {
        // Read past, so the stream stays in step; the request fails.
        skip(r, n).await?;
        p.broken.get_or_insert(overlap_message(req_off, o));
        return Ok(());
    }
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

/// OFFSET_HOLE: an offset and a length that read as zeros.
async fn offset_hole<R: AsyncRead + Unpin>(
    r: &mut R,
    p: &mut Partial,
    h: ChunkHeader,
) -> Result<(), ClientError> {
    if h.len_bytes != 12 {
        return Err(h.bad("OFFSET_HOLE of the wrong length"));
    }
    let at = r.read_u64().await?;
    let n = u64::from(r.read_u32().await?);
    let (req_off, req_len) = (p.w.offset, u64::from(p.w.len));
    let Some(rel) = place(at, n, req_off, req_len) else {
        return Err(h.bad("OFFSET_HOLE outside the range read"));
    };
    if let Err(o) = p.covered.add(rel, rel + n) {
        p.broken.get_or_insert(overlap_message(req_off, o));
        return Ok(());
    }
    let buf = p.data.get_or_insert_with(|| whole(&mut p.w, req_len));
    buf[rel as usize..(rel + n) as usize].fill(0);
    Ok(())
}

/// BLOCK_STATUS: a metadata context id and its extents, kept when the context is the
/// `base:allocation` the export agreed on and read past otherwise.
async fn block_status<R: AsyncRead + Unpin>(
    r: &mut R,
    info: &ExportInfo,
    p: &mut Partial,
    h: ChunkHeader,
) -> Result<(), ClientError> {
    if p.w.cmd != CMD_BLOCK_STATUS || !block_status_len_ok(h.len_bytes) {
        return Err(h.bad("bad BLOCK_STATUS chunk"));
    }
    let id = r.read_u32().await?;
    let mut body = vec![0u8; (h.len_bytes - 4) as usize];
    r.read_exact(&mut body).await?;
    if Some(id) == info.base_allocation {
        p.extents.extend(extents(&body));
    }
    Ok(())
}

/// A BLOCK_STATUS payload holds a 4-byte context id and one or more 8-byte extents, and is
/// bounded so a server cannot make the client allocate what it likes.
fn block_status_len_ok(len_bytes: u32) -> bool {
    len_bytes >= 12 && (len_bytes - 4).is_multiple_of(8) && len_bytes <= MAX_META_CHUNK
}

/// The extents of a BLOCK_STATUS body after its context id: (length, flags), 8 bytes each.
fn extents(body: &[u8]) -> impl Iterator<Item = Extent> + '_ {
    body.chunks_exact(8).map(|e| Extent {
        length: u32::from_be_bytes(e[0..4].try_into().expect("4 bytes")),
        flags: u32::from_be_bytes(e[4..8].try_into().expect("4 bytes")),
    })
}

/// An error chunk (ERROR, ERROR_OFFSET or one not known yet): the first error of a request
/// is the one it fails with.
async fn error_chunk<R: AsyncRead + Unpin>(
    r: &mut R,
    p: &mut Partial,
    h: ChunkHeader,
) -> Result<(), ClientError> {
    if !(6..=MAX_META_CHUNK).contains(&h.len_bytes) {
        return Err(h.bad("bad error chunk"));
    }
    let mut body = vec![0u8; h.len_bytes as usize];
    r.read_exact(&mut body).await?;
    let (errno, msg) = error_body(&body).map_err(|what| h.bad(what))?;
    p.error
        .get_or_insert((errno, String::from_utf8_lossy(msg).into_owned()));
    Ok(())
}

/// An error chunk's body (at least 6 bytes): its errno, never 0, and its message, which
/// must lie inside the body (ERROR_OFFSET's offset may follow it).
fn error_body(body: &[u8]) -> Result<(u32, &[u8]), &'static str> {
    let errno = u32::from_be_bytes(body[0..4].try_into().expect("4 bytes"));
    let message_len = u16::from_be_bytes([body[4], body[5]]) as usize;
    let message = body
        .get(6..6 + message_len)
        .ok_or("error message too long")?;
    if errno == 0 {
        return Err("an error chunk with error 0");
    }
    Ok((errno, message))
}

/// A chunk type this client does not know and that is not an error: read past it.
async fn skip_unknown<R: AsyncRead + Unpin>(r: &mut R, h: ChunkHeader) -> Result<(), ClientError> {
    if h.len_bytes > MAX_PAYLOAD + 8 {
        return Err(h.bad("oversized chunk"));
    }
    tokio::io::copy(
        &mut (&mut *r).take(h.len_bytes.into()),
        &mut tokio::io::sink(),
    )
    .await?;
    Ok(())
}

/// Where a chunk of `n` bytes at `at` lies in a read of `req_len` bytes at `req_off`: its
/// offset within the read, or `None` when it is empty or reaches outside. `at` is whatever
/// the server sent (any 64-bit value): nothing here may overflow.
fn place(at: u64, n: u64, req_off: u64, req_len: u64) -> Option<u64> {
    let rel = at.checked_sub(req_off)?;
    (n > 0 && n <= req_len && rel <= req_len - n).then_some(rel)
}

/// The buffer a read answered in several chunks lands in: the caller's, else a zeroed one.
/// Either way the chunks must cover all of it (their lengths add up to the read's, see `finish`).
fn whole(w: &mut Waiter, len: u64) -> BytesMut {
    w.dest
        .take()
        .unwrap_or_else(|| BytesMut::zeroed(len as usize))
}

/// Reads past `n` bytes of a chunk that cannot be used.
async fn skip<R: AsyncRead + Unpin>(r: &mut R, n: u64) -> std::io::Result<()> {
    let copied = tokio::io::copy(&mut (&mut *r).take(n), &mut tokio::io::sink()).await?;
    if copied < n {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    Ok(())
}

fn overlap_message(req_off: u64, o: super::coverage::Overlap) -> String {
    format!(
        "the server answered bytes {}..{} of a read twice (overlapping data or hole chunks)",
        req_off + o.start,
        req_off + o.end
    )
}

/// The outcome of a request whose final chunk has arrived: a broken reply fails the request
/// alone (the connection is still in step).
fn finish(p: &mut Partial) -> Result<Result<Reply, ClientError>, ClientError> {
    if let Some(why) = p.broken.take() {
        return Ok(Err(ClientError::Protocol(why)));
    }
    if let Some((errno, msg)) = p.error.take() {
        return Ok(Err(server_error(&p.w, errno, msg)));
    }
    Ok(Ok(match p.w.cmd {
        CMD_READ => {
            let len = u64::from(p.w.len);
            if !p.covered.is_whole(len) {
                return Ok(Err(ClientError::Protocol(format!(
                    "a read of {len} bytes at {} answered with {} bytes of data and holes, \
                     not every byte once",
                    p.w.offset,
                    p.covered.answered_bytes()
                ))));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::Pending;
    use tokio::sync::oneshot;

    fn chunk_bytes(out: &mut Vec<u8>, flags: u16, typ: u16, cookie: u64, body: &[u8]) {
        out.extend_from_slice(&STRUCTURED_REPLY_MAGIC.to_be_bytes());
        out.extend_from_slice(&flags.to_be_bytes());
        out.extend_from_slice(&typ.to_be_bytes());
        out.extend_from_slice(&cookie.to_be_bytes());
        out.extend_from_slice(&(body.len() as u32).to_be_bytes());
        out.extend_from_slice(body);
    }

    fn data(at: u64, bytes: &[u8]) -> Vec<u8> {
        [&at.to_be_bytes()[..], bytes].concat()
    }

    fn hole(at: u64, len: u32) -> Vec<u8> {
        [&at.to_be_bytes()[..], &len.to_be_bytes()[..]].concat()
    }

    fn shared() -> Arc<Shared> {
        Arc::new(Shared {
            state: std::sync::Mutex::new(Pending {
                waiters: HashMap::new(),
                outbox: Vec::new(),
                disconnecting: false,
                closed: None,
            }),
            wake_writer: tokio::sync::Notify::new(),
        })
    }

    /// A read of 8 bytes at 100.
    fn waiter(tx: oneshot::Sender<Result<Reply, ClientError>>) -> Waiter {
        Waiter {
            cmd: CMD_READ,
            offset: 100,
            len: 8,
            dest: None,
            tx,
        }
    }

    /// Replies to reads of 8 bytes at 100 with cookies 1, 2, ...; returns each outcome.
    async fn answer(stream: Vec<u8>, reads: u64) -> Vec<Result<Reply, ClientError>> {
        let shared = shared();
        let mut rxs = Vec::new();
        for cookie in 1..=reads {
            let (tx, rx) = oneshot::channel();
            shared.lock().waiters.insert(cookie, waiter(tx));
            rxs.push(rx);
        }
        let info = ExportInfo {
            name: String::new(),
            description: String::new(),
            size: 1 << 20,
            flags: 0,
            min_block: 1,
            preferred_block: 4096,
            max_block: MAX_PAYLOAD,
            structured: true,
            base_allocation: None,
            block_size_negotiated: false,
        };
        run(Box::new(std::io::Cursor::new(stream)), shared, info).await;
        let mut out = Vec::new();
        for rx in rxs {
            out.push(rx.await.expect("every request answered"));
        }
        out
    }

    #[test]
    fn a_reader_that_panics_ends_every_waiting_request() {
        let shared = shared();
        let (tx, mut rx) = oneshot::channel();
        shared.lock().waiters.insert(1, waiter(tx));
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _unwind = CloseOnUnwind(&shared, "reply reader");
            panic!("a bug in the reader");
        }));
        assert!(unwound.is_err());
        assert!(matches!(
            rx.try_recv(),
            Ok(Err(ClientError::Disconnected(_)))
        ));
        assert!(shared.lock().closed.is_some());
    }

    #[test]
    fn a_chunk_is_placed_only_wholly_inside_its_read_wherever_the_server_puts_it() {
        let (off, len) = (1 << 20, 8192);
        assert_eq!(place(off, len, off, len), Some(0));
        assert_eq!(place(off + 4096, 4096, off, len), Some(4096));
        assert_eq!(place(off + 4096, 4097, off, len), None);
        assert_eq!(place(off - 1, 1, off, len), None);
        assert_eq!(place(off, 0, off, len), None);
        assert_eq!(place(off, len + 1, off, len), None);
        // Offsets near the top of the 64-bit space: no overflow, no wrap back inside.
        assert_eq!(place(u64::MAX, 1, off, len), None);
        assert_eq!(place(u64::MAX - 100, u64::from(u32::MAX), off, len), None);
        assert_eq!(place(u64::MAX - 8191, 8192, u64::MAX - 8191, len), Some(0));
    }

    #[tokio::test]
    async fn overlapping_or_missing_chunks_fail_their_read_and_only_it() {
        let done = REPLY_FLAG_DONE;
        let mut s = Vec::new();
        // Read 1: 100..104 and 102..106: lengths add up to 8, bytes 106..108 never sent.
        chunk_bytes(&mut s, 0, REPLY_TYPE_OFFSET_DATA, 1, &data(100, b"abcd"));
        chunk_bytes(&mut s, done, REPLY_TYPE_OFFSET_DATA, 1, &data(102, b"wxyz"));
        // Read 2: a hole over data already sent.
        chunk_bytes(
            &mut s,
            0,
            REPLY_TYPE_OFFSET_DATA,
            2,
            &data(100, b"12345678"),
        );
        chunk_bytes(&mut s, done, REPLY_TYPE_OFFSET_HOLE, 2, &hole(104, 4));
        // Read 3: half the bytes, then done.
        chunk_bytes(&mut s, done, REPLY_TYPE_OFFSET_DATA, 3, &data(104, b"efgh"));
        // Read 4: a hole and data, out of order, each byte once: fine.
        chunk_bytes(&mut s, 0, REPLY_TYPE_OFFSET_DATA, 4, &data(104, b"WXYZ"));
        chunk_bytes(&mut s, done, REPLY_TYPE_OFFSET_HOLE, 4, &hole(100, 4));
        let out = answer(s, 4).await;
        for (i, says) in [(0, "102..104"), (1, "104..108"), (2, "4 bytes")] {
            match &out[i] {
                Err(ClientError::Protocol(m)) => assert!(m.contains(says), "read {}: {m}", i + 1),
                Err(e) => panic!("read {}: {e}", i + 1),
                Ok(_) => panic!("read {} taken as data", i + 1),
            }
        }
        match &out[3] {
            Ok(Reply::Data(d)) => assert_eq!(&d[..], b"\0\0\0\0WXYZ"),
            Err(e) => panic!("read 4: {e}"),
            Ok(_) => panic!("read 4: not data"),
        }
    }
    #[test]
    fn an_error_body_needs_a_nonzero_errno_and_a_message_inside_it() {
        let body = |errno: u32, message_len: u16, rest: &[u8]| {
            [
                &errno.to_be_bytes()[..],
                &message_len.to_be_bytes()[..],
                rest,
            ]
            .concat()
        };
        assert_eq!(error_body(&body(5, 2, b"no")), Ok((5, &b"no"[..])));
        // ERROR_OFFSET: the offset follows the message.
        assert_eq!(error_body(&body(5, 0, &[0; 8])), Ok((5, &b""[..])));
        assert_eq!(
            error_body(&body(5, 3, b"no")),
            Err("error message too long")
        );
        assert_eq!(
            error_body(&body(0, 0, b"")),
            Err("an error chunk with error 0")
        );
    }

    #[test]
    fn a_block_status_payload_is_an_id_and_whole_extents_within_the_bound() {
        assert!(block_status_len_ok(12));
        assert!(block_status_len_ok(4 + 8 * 3));
        for len in [0, 4, 8, 11, 13, 16] {
            assert!(!block_status_len_ok(len), "{len}");
        }
        assert!(block_status_len_ok(MAX_META_CHUNK - 4));
        assert!(!block_status_len_ok(MAX_META_CHUNK + 4));
        let body = [[0, 0, 2, 0, 0, 0, 0, 1], [0, 0, 0, 9, 0, 0, 0, 2]].concat();
        let got: Vec<(u32, u32)> = extents(&body).map(|e| (e.length, e.flags)).collect();
        assert_eq!(got, [(512, 1), (9, 2)]);
    }
}
