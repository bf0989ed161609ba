//! An async NBD client with many requests in flight on one connection.
//!
//! ```no_run
//! use nbraid_nbd::client::Client;
//! # async fn demo() -> Result<(), nbraid_nbd::client::ClientError> {
//! let c = Client::connect("nbd+unix:///vol?socket=/run/nbraid/nbd.sock").await?;
//! c.write(0, vec![7u8; 4096].into()).await?;
//! let (a, b) = tokio::join!(c.read(0, 4096), c.read(4096, 4096)); // both on the wire at once
//! assert_eq!(a?[..], [7u8; 4096][..]);
//! # let _ = b;
//! c.flush().await?;
//! c.disconnect().await;
//! # Ok(()) }
//! ```
//!
//! * fixed-newstyle handshake: `NBD_OPT_STRUCTURED_REPLY`, `NBD_OPT_SET_META_CONTEXT`
//!   (`base:allocation`), `NBD_OPT_GO` with `NBD_INFO_BLOCK_SIZE` (the old `EXPORT_NAME` when
//!   the server knows no `GO`), `NBD_OPT_LIST` ([`list_exports`]);
//! * requests from any number of tasks at once through `&self` ([`Client`] is cheap to clone):
//!   each request gets a handle, one reader task hands replies to their requests in whatever
//!   order the server completes them;
//! * the server's block sizes are honoured: offsets and lengths not multiples of the minimum
//!   block are refused here with [`ClientError::Unaligned`], requests longer than the maximum
//!   payload are split into several sent at once;
//! * requests go out through one writer task, those submitted in the same turn of the runtime
//!   in one vectored write; a request's future may be dropped at any point (once queued the
//!   request is sent and its reply discarded), which never tears the stream;
//! * [`Client::read_into`] receives a read's data straight into the caller's buffer, so a
//!   caller that reuses buffers allocates nothing per read.

mod coverage;
mod error;
mod handshake;
mod reader;
pub mod uri;
mod writer;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::{Bytes, BytesMut};
use futures::future::try_join_all;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::oneshot;

pub use error::{errno_name, reply_name, ClientError};
pub use handshake::{ExportInfo, ExportListing, Negotiation};
pub use uri::{Address, Uri};

use crate::tls::ClientTls;

use crate::export::{Extent, ZeroFlags};
use crate::proto::*;

/// Any byte stream the client can run over (TCP, Unix, TLS, an in-process pipe).
pub trait Stream: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Stream for T {}

type BoxRead = Box<dyn AsyncRead + Send + Unpin>;
type BoxWrite = Box<dyn AsyncWrite + Send + Unpin>;

/// How to connect.
#[derive(Debug, Clone, Default)]
pub struct ConnectOptions {
    pub negotiation: Negotiation,
    /// Upgrade with `NBD_OPT_STARTTLS` before anything else. `nbds` URIs need it, or a
    /// `tls-certificates=DIR` parameter (see [`ClientTls::from_dir`]).
    pub tls: Option<ClientTls>,
}

/// A connection to one export. Clones share the connection.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("info", &self.inner.info)
            .finish()
    }
}

struct Inner {
    info: ExportInfo,
    shared: Arc<Shared>,
    reader: tokio::task::JoinHandle<()>,
    /// Taken by the first [`Client::disconnect`], which waits for it.
    writer: tokio::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
    next_cookie: AtomicU64,
}

/// What a request waits for, known to the reader task.
pub(crate) struct Waiter {
    pub cmd: u16,
    pub offset: u64,
    pub len: u32,
    /// Where a read's `len` bytes go ([`Client::read_into`]); `None`: a new buffer.
    pub dest: Option<BytesMut>,
    pub tx: oneshot::Sender<Result<Reply, ClientError>>,
}

/// A request's successful outcome.
pub(crate) enum Reply {
    Done,
    Data(BytesMut),
    Extents(Vec<Extent>),
}

/// Requests in flight, shared with the reader and writer tasks.
pub(crate) struct Shared {
    pub state: Mutex<Pending>,
    /// The writer has requests to send, or the connection ends.
    pub wake_writer: tokio::sync::Notify,
}

pub(crate) struct Pending {
    pub waiters: HashMap<u64, Waiter>,
    /// Requests not yet handed to the writer.
    pub outbox: Vec<writer::Outgoing>,
    /// The client said goodbye: nothing more is queued.
    pub disconnecting: bool,
    /// Why the connection ended, once it has.
    pub closed: Option<String>,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Ends the connection for every waiting request.
    pub(crate) fn close(&self, why: String) {
        let waiters: Vec<Waiter> = {
            let mut p = self.lock();
            p.closed.get_or_insert(why.clone());
            p.outbox.clear();
            p.waiters.drain().map(|(_, w)| w).collect()
        };
        self.wake_writer.notify_one();
        for w in waiters {
            let _ = w.tx.send(Err(ClientError::Disconnected(why.clone())));
        }
    }
}

/// Ends the connection when the reader or writer task unwinds (a panic: a bug), so that no
/// request waits for ever for a reply nobody will read or a request nobody will send.
/// Requests answered in part hold their own senders, which the unwinding drops: they end too.
pub(crate) struct CloseOnUnwind<'a>(pub &'a Shared, pub &'static str);

impl Drop for CloseOnUnwind<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let why = format!("the client's {} failed on an internal error", self.1);
            self.0.close(why);
        }
    }
}

/// Lists the exports of the server at `uri` (its export part is ignored).
pub async fn list_exports(uri: &str) -> Result<Vec<ExportListing>, ClientError> {
    let uri = Uri::parse(uri)?;
    let mut s = open(&uri).await?;
    handshake::greet(&mut s).await?;
    let mut s = secure(s, &uri, &ConnectOptions::default()).await?;
    handshake::list(&mut s).await
}

/// Runs `NBD_OPT_STARTTLS` and the TLS handshake when the URI or the options ask for TLS.
async fn secure(
    mut s: Box<dyn Stream>,
    uri: &Uri,
    opts: &ConnectOptions,
) -> Result<Box<dyn Stream>, ClientError> {
    let tls = match (&opts.tls, uri.param("tls-certificates")) {
        (Some(t), _) => t.clone(),
        (None, Some(dir)) => ClientTls::from_dir(std::path::Path::new(dir))
            .map_err(|e| ClientError::Tls(e.to_string()))?,
        (None, None) if uri.tls => {
            return Err(ClientError::Tls(
                "an nbds:// URI needs tls-certificates=DIR (or TLS settings)".into(),
            ))
        }
        (None, None) => return Ok(s),
    };
    let host = match (&uri.address, uri.param("tls-hostname")) {
        (_, Some(h)) => h.to_string(),
        (Address::Tcp { host, .. }, None) => host.clone(),
        (Address::Unix(_), None) => "localhost".to_string(),
    };
    handshake::starttls(&mut s).await?;
    let secured = (tls.connect_raw(&host, s).await).map_err(ClientError::TlsHandshake)?;
    Ok(Box::new(secured))
}

async fn open(uri: &Uri) -> Result<Box<dyn Stream>, ClientError> {
    match &uri.address {
        Address::Tcp { host, port } => {
            let s = tokio::net::TcpStream::connect((host.as_str(), *port))
                .await
                .map_err(|source| ClientError::Connect {
                    addr: format!("{host}:{port}"),
                    source,
                })?;
            let _ = s.set_nodelay(true);
            Ok(Box::new(s))
        }
        Address::Unix(path) => {
            let s = tokio::net::UnixStream::connect(path)
                .await
                .map_err(|source| ClientError::Connect {
                    addr: path.display().to_string(),
                    source,
                })?;
            Ok(Box::new(s))
        }
    }
}

impl Client {
    /// Connects to the export `uri` names (see [`Uri`]) with the default negotiation.
    pub async fn connect(uri: &str) -> Result<Client, ClientError> {
        Self::connect_with(&Uri::parse(uri)?, &ConnectOptions::default()).await
    }

    /// Connects with explicit options.
    pub async fn connect_with(uri: &Uri, opts: &ConnectOptions) -> Result<Client, ClientError> {
        let mut s = open(uri).await?;
        let no_zeroes = handshake::greet(&mut s).await?;
        let mut s = secure(s, uri, opts).await?;
        let info = handshake::negotiate(&mut s, &uri.export, no_zeroes, &opts.negotiation).await?;
        let (r, w) = tokio::io::split(s);
        Ok(Self::start(info, Box::new(r), Box::new(w)))
    }

    /// Runs the handshake for `export` over an already-connected stream.
    pub async fn handshake<S: Stream>(
        mut s: S,
        export: &str,
        opts: &ConnectOptions,
    ) -> Result<Client, ClientError> {
        let no_zeroes = handshake::greet(&mut s).await?;
        let info = handshake::negotiate(&mut s, export, no_zeroes, &opts.negotiation).await?;
        let (r, w) = tokio::io::split(s);
        Ok(Self::start(info, Box::new(r), Box::new(w)))
    }

    fn start(info: ExportInfo, r: BoxRead, w: BoxWrite) -> Client {
        let shared = Arc::new(Shared {
            state: Mutex::new(Pending {
                waiters: HashMap::new(),
                outbox: Vec::new(),
                disconnecting: false,
                closed: None,
            }),
            wake_writer: tokio::sync::Notify::new(),
        });
        let reader = tokio::spawn(reader::run(r, shared.clone(), info.clone()));
        let writer = tokio::spawn(writer::run(w, shared.clone()));
        Client {
            inner: Arc::new(Inner {
                info,
                shared,
                reader,
                writer: tokio::sync::Mutex::new(Some(writer)),
                next_cookie: AtomicU64::new(1),
            }),
        }
    }

    /// What the handshake told about the export.
    pub fn info(&self) -> &ExportInfo {
        &self.inner.info
    }

    /// Whether the connection has ended (reset or closed by either side): every request
    /// from now on fails.
    pub fn is_closed(&self) -> bool {
        let closed = self
            .inner
            .shared
            .state
            .lock()
            .map_or(true, |s| s.closed.is_some());
        closed || self.inner.reader.is_finished()
    }

    /// The export's size in bytes.
    pub fn size(&self) -> u64 {
        self.inner.info.size
    }

    /// Reads `len` bytes at `offset`.
    pub async fn read(&self, offset: u64, len: usize) -> Result<Bytes, ClientError> {
        self.check("READ", offset, len as u64)?;
        if len == 0 {
            return Ok(Bytes::new());
        }
        if len as u64 <= self.step(self.inner.info.max_block) {
            return Ok(self.read_one(offset, len as u32, None).await?.freeze());
        }
        Ok(self
            .read_into(offset, BytesMut::zeroed(len))
            .await?
            .freeze())
    }

    /// Reads `buf.len()` bytes at `offset` into `buf` and hands it back. The reply's data is
    /// received straight into it, so a caller that reuses its buffers allocates nothing per
    /// read (as fio's nbd engine does).
    pub async fn read_into(&self, offset: u64, mut buf: BytesMut) -> Result<BytesMut, ClientError> {
        let len = buf.len();
        self.check("READ", offset, len as u64)?;
        if len == 0 {
            return Ok(buf);
        }
        let max = self.inner.info.max_block;
        if len as u64 <= self.step(max) {
            return self.read_one(offset, len as u32, Some(buf)).await;
        }
        // Each piece into its own part of `buf`; the parts join again without a copy.
        let parts: Vec<(u64, BytesMut)> = self
            .pieces(offset, len as u64, max)
            .into_iter()
            .map(|(o, n)| (o, buf.split_to(n as usize)))
            .collect();
        let parts = try_join_all(
            parts
                .into_iter()
                .map(|(o, p)| self.read_one(o, p.len() as u32, Some(p))),
        )
        .await?;
        let mut parts = parts.into_iter();
        let mut out = parts.next().unwrap_or_default();
        for p in parts {
            out.unsplit(p);
        }
        Ok(out)
    }

    async fn read_one(
        &self,
        offset: u64,
        len: u32,
        dest: Option<BytesMut>,
    ) -> Result<BytesMut, ClientError> {
        match self.submit(CMD_READ, 0, offset, len, None, dest).await? {
            Reply::Data(b) => Ok(b),
            _ => Err(ClientError::Protocol(
                "a read completed without data".into(),
            )),
        }
    }

    /// Writes `data` at `offset`.
    pub async fn write(&self, offset: u64, data: Bytes) -> Result<(), ClientError> {
        self.write_flags(offset, data, false).await
    }

    /// Writes `data` at `offset` and completes once it is durable (`NBD_CMD_FLAG_FUA`).
    pub async fn write_fua(&self, offset: u64, data: Bytes) -> Result<(), ClientError> {
        self.write_flags(offset, data, true).await
    }

    async fn write_flags(&self, offset: u64, data: Bytes, fua: bool) -> Result<(), ClientError> {
        self.check("WRITE", offset, data.len() as u64)?;
        self.writable()?;
        let flags = self.fua_flag(fua)?;
        if data.is_empty() {
            return Ok(());
        }
        let max = self.inner.info.max_block;
        if data.len() as u64 <= self.step(max) {
            let len = data.len() as u32;
            return self
                .submit(CMD_WRITE, flags, offset, len, Some(data), None)
                .await
                .map(drop);
        }
        let pieces = self.pieces(offset, data.len() as u64, max);
        try_join_all(pieces.iter().map(|&(o, n)| {
            let at = (o - offset) as usize;
            let part = data.slice(at..at + n as usize);
            self.submit(CMD_WRITE, flags, o, n, Some(part), None)
        }))
        .await?;
        Ok(())
    }

    /// Makes every completed write durable.
    pub async fn flush(&self) -> Result<(), ClientError> {
        if !self.inner.info.has(TFLAG_SEND_FLUSH) {
            return Err(ClientError::Unsupported("FLUSH"));
        }
        self.submit(CMD_FLUSH, 0, 0, 0, None, None).await.map(drop)
    }

    /// Tells the server `[offset, offset+len)` is no longer needed.
    pub async fn trim(&self, offset: u64, len: u64) -> Result<(), ClientError> {
        self.check("TRIM", offset, len)?;
        self.writable()?;
        if !self.inner.info.has(TFLAG_SEND_TRIM) {
            return Err(ClientError::Unsupported("TRIM"));
        }
        self.ranged(CMD_TRIM, 0, offset, len).await
    }

    /// Makes `[offset, offset+len)` read back as zeroes.
    pub async fn write_zeroes(
        &self,
        offset: u64,
        len: u64,
        how: ZeroFlags,
    ) -> Result<(), ClientError> {
        self.check("WRITE_ZEROES", offset, len)?;
        self.writable()?;
        if !self.inner.info.has(TFLAG_SEND_WRITE_ZEROES) {
            return Err(ClientError::Unsupported("WRITE_ZEROES"));
        }
        let mut flags = self.fua_flag(how.fua)?;
        if !how.may_trim {
            flags |= CMD_FLAG_NO_HOLE;
        }
        if how.fast_only {
            if !self.inner.info.has(TFLAG_SEND_FAST_ZERO) {
                return Err(ClientError::Unsupported("FAST_ZERO"));
            }
            flags |= CMD_FLAG_FAST_ZERO;
        }
        self.ranged(CMD_WRITE_ZEROES, flags, offset, len).await
    }

    /// Hints that `[offset, offset+len)` will be read soon.
    pub async fn cache(&self, offset: u64, len: u64) -> Result<(), ClientError> {
        self.check("CACHE", offset, len)?;
        if !self.inner.info.has(TFLAG_SEND_CACHE) {
            return Err(ClientError::Unsupported("CACHE"));
        }
        self.ranged(CMD_CACHE, 0, offset, len).await
    }

    /// `base:allocation` status from `offset`: extents covering at least one block and at
    /// most `len` bytes (the server may describe less than asked).
    pub async fn block_status(&self, offset: u64, len: u64) -> Result<Vec<Extent>, ClientError> {
        self.check("BLOCK_STATUS", offset, len)?;
        if self.inner.info.base_allocation.is_none() {
            return Err(ClientError::Unsupported("base:allocation"));
        }
        let len = len.min(self.max_length()) as u32;
        if len == 0 {
            return Ok(Vec::new());
        }
        match self
            .submit(CMD_BLOCK_STATUS, 0, offset, len, None, None)
            .await?
        {
            Reply::Extents(e) => Ok(e),
            _ => Err(ClientError::Protocol(
                "block status completed without extents".into(),
            )),
        }
    }

    /// Sends `NBD_CMD_DISC` once the requests already sent are on the wire, and closes the
    /// connection. Requests still waiting for replies get them if the server sends them.
    pub async fn disconnect(&self) {
        let mut writer = self.inner.writer.lock().await;
        if let Some(task) = writer.take() {
            self.inner.shared.lock().disconnecting = true;
            self.inner.shared.wake_writer.notify_one();
            let _ = task.await;
        }
    }

    /// Trim, zeroing and cache requests of any length: pieces the 32-bit length field holds.
    async fn ranged(&self, cmd: u16, flags: u16, offset: u64, len: u64) -> Result<(), ClientError> {
        if len == 0 {
            return Ok(());
        }
        let max = self.max_length() as u32;
        let pieces = self.pieces(offset, len, max);
        try_join_all(
            pieces
                .iter()
                .map(|&(o, n)| self.submit(cmd, flags, o, n, None, None)),
        )
        .await?;
        Ok(())
    }

    /// The alignment requests keep to: the server's minimum block once negotiated (a server
    /// SHOULD serve any alignment to a client that did not negotiate block sizes).
    fn align(&self) -> u64 {
        let info = &self.inner.info;
        if info.block_size_negotiated {
            u64::from(info.min_block)
        } else {
            1
        }
    }

    /// The longest length field that keeps to the minimum block.
    fn max_length(&self) -> u64 {
        let min = self.align();
        u64::from(u32::MAX) / min * min
    }

    /// The longest piece of a request whose length field may hold `max`: `max` rounded down
    /// to the minimum block.
    fn step(&self, max: u32) -> u64 {
        let min = self.align();
        (u64::from(max) / min * min).max(min)
    }

    /// `[offset, offset+len)` in pieces of at most `max` bytes (rounded down to the minimum
    /// block), each starting where the previous ended.
    fn pieces(&self, offset: u64, len: u64, max: u32) -> Vec<(u64, u32)> {
        let step = self.step(max);
        let mut v = Vec::with_capacity(len.div_ceil(step) as usize);
        let mut at = offset;
        while at < offset + len {
            let n = step.min(offset + len - at);
            v.push((at, n as u32));
            at += n;
        }
        v
    }

    fn check(&self, cmd: &'static str, offset: u64, len: u64) -> Result<(), ClientError> {
        let info = &self.inner.info;
        match offset.checked_add(len) {
            Some(end) if end <= info.size => {}
            _ => {
                return Err(ClientError::OutOfRange {
                    cmd,
                    offset,
                    len,
                    size: info.size,
                })
            }
        }
        let min = self.align();
        if !offset.is_multiple_of(min) || !len.is_multiple_of(min) {
            return Err(ClientError::Unaligned {
                cmd,
                offset,
                len,
                min_block: info.min_block,
            });
        }
        Ok(())
    }

    fn writable(&self) -> Result<(), ClientError> {
        if self.inner.info.read_only() {
            return Err(ClientError::ReadOnly);
        }
        Ok(())
    }

    fn fua_flag(&self, fua: bool) -> Result<u16, ClientError> {
        match fua {
            false => Ok(0),
            true if self.inner.info.has(TFLAG_SEND_FUA) => Ok(CMD_FLAG_FUA),
            true => Err(ClientError::Unsupported("FUA")),
        }
    }

    /// Sends one request and waits for its reply.
    async fn submit(
        &self,
        cmd: u16,
        flags: u16,
        offset: u64,
        len: u32,
        payload: Option<Bytes>,
        dest: Option<BytesMut>,
    ) -> Result<Reply, ClientError> {
        let inner = &*self.inner;
        let cookie = inner.next_cookie.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        let head = RequestHeader {
            flags,
            typ: cmd,
            cookie,
            offset,
            length: len,
        }
        .encode();
        let first = {
            let mut p = inner.shared.lock();
            if let Some(why) = &p.closed {
                return Err(ClientError::Disconnected(why.clone()));
            }
            if p.disconnecting {
                return Err(ClientError::Disconnected(
                    "disconnected by the client".into(),
                ));
            }
            // Registered as it is queued: the reply may come back as soon as it is sent.
            let w = Waiter {
                cmd,
                offset,
                len,
                dest,
                tx,
            };
            p.waiters.insert(cookie, w);
            p.outbox.push(writer::Outgoing { head, payload });
            p.outbox.len() == 1
        };
        // Requests queued after this one in the same turn go out in the same write.
        if first {
            inner.shared.wake_writer.notify_one();
        }
        match rx.await {
            Ok(r) => r,
            Err(_) => Err(ClientError::Disconnected("the reply reader ended".into())),
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.reader.abort();
        // The writer says goodbye properly (`NBD_CMD_DISC`) if its runtime still runs.
        self.shared.lock().disconnecting = true;
        self.shared.close("the client was dropped".into());
    }
}
