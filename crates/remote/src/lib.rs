//! # nbraid-remote: members on remote NBD servers
//!
//! A [`RemoteMember`] is the engine's [`Member`] over `nbraid-nbd`'s async [`Client`]: an
//! array can mirror or stripe across exports that nbdkit, qemu-nbd, nbd-server or another
//! nbraidd serve on other hosts (`nbd://host:port/export`, `nbds://…` with
//! `tls-certificates=DIR`, `nbd+unix:///export?socket=…`).
//!
//! - Many requests in flight: every member operation is one NBD request (or several, split
//!   at the server's maximum payload) on a connection shared by all callers; when the server
//!   offers multi-conn (`NBD_FLAG_CAN_MULTI_CONN`) up to [`RemoteOptions::connections`]
//!   connections are opened and used in turn (a flush on one then covers writes on all).
//! - Block sizes: the server's minimum block must divide the volume's block size (checked at
//!   connect), so every engine request is aligned for it.
//! - FLUSH, FUA (a flush after the write where the server has no FUA), TRIM and
//!   WRITE_ZEROES map onto the member operations. A member's `trim` must read back as zeroes,
//!   which NBD's TRIM does not promise: both `trim` and `write_zeroes` are
//!   `NBD_CMD_WRITE_ZEROES` (trim letting the server punch holes), or written zeroes where the
//!   server has no WRITE_ZEROES.
//! - Failure: a request with no reply within [`RemoteOptions::timeout`], or a connection
//!   reset, fails that request like a local I/O error (the volume decides: degraded within
//!   its tolerance). The connection is dropped and re-opened in the background with
//!   exponential [`backoff`]; meanwhile requests on it fail at once instead of hanging.
//! - A changed export: a connection that re-opens to an export no longer as the member was
//!   opened on it, in a way that could lose data or durability ([`ExportChange`]: another
//!   size, read-only, a write cache where there was none, FUA, WRITE_ZEROES or multi-conn
//!   the member relies on gone), is not used and the others are closed: every request fails
//!   naming the change ([`RemoteError::ExportChanged`]), so the volume fails the member,
//!   until connections re-open to the export as it was.
//!
//! - Another disk: a connection that re-opens to an export whose superblock says it is not
//!   the member (blank, another member's, a stale copy: the engine's
//!   [`nbraid_core::IdentityCheck`], given through [`Member::guard_identity`]) serves nothing:
//!   every request fails naming what it holds ([`RemoteError::NotTheMember`]), so the volumes
//!   fail the member, until a connection finds the member again, or [`Member::readmit`] (every
//!   volume on it failed it) lets the re-add read it and judge.
//!
//! Why a crate of its own: the NBD crate is the protocol (used by the daemon, the CLI's
//! bench and these members) and must not depend on the engine; the engine must not depend
//! on tokio or the network. This crate joins the two, and only the daemon and the CLI use it.
//!
//! The client's sockets and timers belong to the tokio runtime the member was connected in
//! (the caller's, or outside any runtime a small one of this crate's); every operation enters
//! that runtime's context when polled, so member futures also run under
//! `futures::executor::block_on` on other threads, provided the runtime is multi-threaded
//! (its workers drive the sockets).

mod change;
mod conn;
mod identity;

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::FutureExt;
use nbraid_core::{
    Buf, IdentityCheck, Member, MemberCounters, MemberError, MemberOp, MemberResult, SharedBuf,
};
use nbraid_nbd::client::{ClientError, ExportInfo, Uri};
use nbraid_nbd::proto::{
    TFLAG_CAN_MULTI_CONN, TFLAG_SEND_FLUSH, TFLAG_SEND_FUA, TFLAG_SEND_WRITE_ZEROES,
};
use nbraid_nbd::ZeroFlags;
use thiserror::Error;

pub use change::ExportChange;
pub use conn::backoff;
use conn::Connections;

/// How a remote member connects and when it gives up on a request.
#[derive(Clone, Debug)]
pub struct RemoteOptions {
    /// A request with no reply by then fails (and its connection is re-opened).
    pub timeout: Duration,
    /// Connections to open when the server offers multi-conn (one otherwise).
    pub connections: usize,
    /// The volume's block size: the server's minimum block must divide it.
    pub block_size: u32,
}

impl Default for RemoteOptions {
    fn default() -> Self {
        RemoteOptions {
            timeout: Duration::from_secs(30),
            connections: 4,
            block_size: 4096,
        }
    }
}

/// Why a remote member could not be opened.
#[derive(Debug, Error)]
pub enum RemoteError {
    #[error("{uri}: {source}")]
    Connect {
        uri: String,
        #[source]
        source: ClientError,
    },
    #[error("{uri}: the export has {size} bytes but the member needs {wanted}")]
    TooSmall { uri: String, size: u64, wanted: u64 },
    #[error("{uri}: the export is read-only")]
    ReadOnly { uri: String },
    #[error(
        "{uri}: the server's minimum block of {min_block} bytes does not divide the volume's \
         block size of {block_size} bytes"
    )]
    BlockSize {
        uri: String,
        min_block: u32,
        block_size: u32,
    },
    /// A connection re-opened to an export that is not as the member was opened on it, in a
    /// way that could lose data or durability: the member's requests fail until it is as it
    /// was.
    #[error(
        "{uri}: the export changed since the member was opened: {}; it is not used until it \
         is as it was (replace the member if the change is meant)",
        join(.changes)
    )]
    ExportChanged {
        uri: String,
        changes: Vec<ExportChange>,
    },
    /// A connection re-opened to an export that is not the member (its superblock says so):
    /// the member's requests fail, so the volumes fail it; it is re-added once every volume
    /// on it has.
    #[error(
        "{uri}: the export is not the member any more: it holds {found}; it is not read as \
         the member (failed, and re-added only as the re-add rules allow)"
    )]
    NotTheMember { uri: String, found: String },
}

fn join(changes: &[ExportChange]) -> String {
    let text: Vec<String> = changes.iter().map(ToString::to_string).collect();
    text.join("; ")
}

impl RemoteError {
    /// Whether the server did not answer at all (refused, reset, no reply in time): what
    /// the member holds is unknown, it may come back. An answer that turns the member
    /// down (no such export, too small, TLS required) is not this.
    pub fn is_unreachable(&self) -> bool {
        matches!(
            self,
            RemoteError::Connect {
                source: ClientError::Connect { .. }
                    | ClientError::Io(_)
                    | ClientError::Disconnected(_),
                ..
            }
        )
    }
}

/// What a server says about an export, for `nbraid check`.
#[derive(Clone, Debug)]
pub struct Probe {
    pub size: u64,
    pub min_block: u32,
    pub preferred_block: u32,
    pub max_block: u32,
    pub read_only: bool,
    pub multi_conn: bool,
    pub tls: bool,
}

impl Probe {
    fn of(info: &ExportInfo, tls: bool) -> Probe {
        Probe {
            size: info.size,
            min_block: info.min_block,
            preferred_block: info.preferred_block,
            max_block: info.max_block,
            read_only: info.read_only(),
            multi_conn: info.has(TFLAG_CAN_MULTI_CONN),
            tls,
        }
    }
}

/// Connects to `uri` once and reports the export (blocking; its own runtime, bounded by
/// `timeout`). For `nbraid check`.
pub fn probe(uri: &str, timeout: Duration) -> Result<Probe, RemoteError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| connect_error(uri, ClientError::Io(e)))?;
    rt.block_on(async {
        let parsed = Uri::parse(uri).map_err(|e| connect_error(uri, e))?;
        let c = tokio::time::timeout(timeout, conn::connect(&parsed))
            .await
            .map_err(|_| connect_error(uri, timed_out(timeout)))?
            .map_err(|e| connect_error(uri, e))?;
        let p = Probe::of(c.info(), parsed.tls);
        c.disconnect().await;
        Ok(p)
    })
}

fn connect_error(uri: &str, source: ClientError) -> RemoteError {
    RemoteError::Connect {
        uri: uri.to_string(),
        source,
    }
}

fn timed_out(after: Duration) -> ClientError {
    ClientError::Io(io::Error::new(
        io::ErrorKind::TimedOut,
        format!("no answer within {after:?}"),
    ))
}

/// A member on an NBD export. See the crate's documentation.
pub struct RemoteMember {
    name: String,
    len: u64,
    conns: Arc<Connections>,
    counters: MemberCounters,
}

impl RemoteMember {
    /// Connects to `uri` (in the current tokio runtime) for a member of `len` bytes (the
    /// export's size when `None`), checking the export can serve it.
    pub async fn connect(
        uri: &str,
        len: Option<u64>,
        opts: &RemoteOptions,
    ) -> Result<RemoteMember, RemoteError> {
        Self::connect_described(uri, len, opts).await.1
    }

    /// [`RemoteMember::connect`], with what the server said of the export whenever it
    /// answered — also when the export cannot be used (too small, read-only, blocks that do
    /// not fit): `nbraid check` describes each server from the connection it reads the
    /// member on, rather than connecting again to ask.
    pub async fn connect_described(
        uri: &str,
        len: Option<u64>,
        opts: &RemoteOptions,
    ) -> (Option<Probe>, Result<RemoteMember, RemoteError>) {
        let rt = runtime();
        let (uri, opts) = (uri.to_string(), opts.clone());
        conn::enter(rt.clone(), async move {
            let mut described = None;
            let member = Self::connect_in(rt, &uri, len, &opts, &mut described).await;
            (described, member)
        })
        .await
    }

    async fn connect_in(
        rt: tokio::runtime::Handle,
        uri: &str,
        len: Option<u64>,
        opts: &RemoteOptions,
        described: &mut Option<Probe>,
    ) -> Result<RemoteMember, RemoteError> {
        let parsed = Uri::parse(uri).map_err(|e| connect_error(uri, e))?;
        let first = tokio::time::timeout(opts.timeout, conn::connect(&parsed))
            .await
            .map_err(|_| connect_error(uri, timed_out(opts.timeout)))?
            .map_err(|e| connect_error(uri, e))?;
        let info = first.info().clone();
        *described = Some(Probe::of(&info, parsed.tls));
        let len = len.unwrap_or(info.size);
        check_export(uri, &info, len, opts.block_size)?;
        let count = if info.has(TFLAG_CAN_MULTI_CONN) {
            opts.connections.max(1)
        } else {
            1
        };
        let mut clients = vec![first];
        let more = (1..count).map(|_| conn::connect(&parsed));
        for c in futures::future::join_all(more).await {
            // Extra connections are a bonus: serve on those that opened as the first did.
            match c {
                Ok(c) => match change::export_changes(&info, c.info(), count).as_slice() {
                    [] => clients.push(c),
                    changes => {
                        tracing::warn!(
                            "{uri}: an extra connection found the export changed: {}",
                            join(changes)
                        );
                        c.disconnect().await;
                    }
                },
                Err(e) => tracing::warn!("{uri}: an extra connection failed: {e}"),
            }
        }
        let conns = Connections::new(rt, target(uri, parsed, len, opts), info, clients);
        Ok(RemoteMember {
            name: uri.to_string(),
            len,
            conns,
            counters: MemberCounters::default(),
        })
    }

    /// A member of `len` bytes on `uri` whose server does not answer now (see
    /// [`RemoteError::is_unreachable`]): every operation fails at once until a connection
    /// opens in the background (retried with [`backoff`]; the export checked as
    /// [`RemoteMember::connect`] checks it). For a member that must be served degraded and
    /// re-added when it answers. Only a bad URI is refused.
    pub fn offline(uri: &str, len: u64, opts: &RemoteOptions) -> Result<RemoteMember, RemoteError> {
        let parsed = Uri::parse(uri).map_err(|e| connect_error(uri, e))?;
        let rt = runtime();
        let conns = {
            let _in = rt.enter();
            Connections::offline(rt.clone(), target(uri, parsed, len, opts), opts.connections)
        };
        Ok(RemoteMember {
            name: uri.to_string(),
            len,
            conns,
            counters: MemberCounters::default(),
        })
    }

    /// The export as the server described it at the first connection (`None`: none has
    /// opened yet).
    pub fn probe(&self) -> Option<Probe> {
        Some(Probe::of(self.conns.info()?, self.conns.uri().tls))
    }

    /// Connections open now (the others are being re-opened).
    pub fn connections_open(&self) -> usize {
        self.conns.open()
    }

    fn err(&self, op: MemberOp, offset: u64, len: u64) -> impl FnOnce(io::Error) -> MemberError {
        let name = self.name.clone();
        move |e| MemberError::new(&name, op, offset, len, e)
    }

    /// Runs a zeroing of `[offset, offset+len)`: `NBD_CMD_WRITE_ZEROES`, or written zeroes.
    fn zero(&self, op: MemberOp, offset: u64, len: u64) -> BoxFuture<'_, MemberResult<()>> {
        let g = self.counters.start(op, len);
        let conns = self.conns.clone();
        let native = conns.has(TFLAG_SEND_WRITE_ZEROES);
        let how = ZeroFlags {
            may_trim: op == MemberOp::Trim,
            fua: false,
            fast_only: false,
        };
        let fut = async move {
            if native {
                return conns
                    .run_write(move |c| async move { c.write_zeroes(offset, len, how).await })
                    .await;
            }
            const CHUNK: u64 = 1 << 20;
            let zeroes = Bytes::from(vec![0u8; CHUNK.min(len) as usize]);
            let mut at = offset;
            while at < offset + len {
                let n = CHUNK.min(offset + len - at) as usize;
                let data = zeroes.slice(..n);
                conns
                    .run_write(move |c| async move { c.write(at, data).await })
                    .await?;
                at += n as u64;
            }
            Ok(())
        };
        let fut = self.conns.enter(fut);
        let err = self.err(op, offset, len);
        async move { g.finish(fut.await.map_err(err)) }.boxed()
    }
}

/// What a member's connections serve: `len` bytes of the export at `uri`.
fn target(uri: &str, parsed: Uri, len: u64, opts: &RemoteOptions) -> conn::Target {
    conn::Target {
        uri_text: uri.to_string(),
        uri: parsed,
        len,
        block_size: opts.block_size,
        timeout: opts.timeout,
    }
}

/// The caller's tokio runtime, or (outside one: `nbraid create`, tools) a runtime of this
/// crate's, kept for the life of the process.
fn runtime() -> tokio::runtime::Handle {
    static OWN: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    tokio::runtime::Handle::try_current().unwrap_or_else(|_| {
        OWN.get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("nbraid-remote")
                .enable_all()
                .build()
                .expect("starting the remote members' runtime")
        })
        .handle()
        .clone()
    })
}

/// Whether an export can hold a member of `len` bytes for volumes of `block_size` blocks.
pub(crate) fn check_export(
    uri: &str,
    info: &ExportInfo,
    len: u64,
    block_size: u32,
) -> Result<(), RemoteError> {
    if info.size < len {
        return Err(RemoteError::TooSmall {
            uri: uri.to_string(),
            size: info.size,
            wanted: len,
        });
    }
    if info.read_only() {
        return Err(RemoteError::ReadOnly {
            uri: uri.to_string(),
        });
    }
    if info.min_block == 0 || !block_size.is_multiple_of(info.min_block) {
        return Err(RemoteError::BlockSize {
            uri: uri.to_string(),
            min_block: info.min_block,
            block_size,
        });
    }
    Ok(())
}

/// Lets a write's buffer go out as `Bytes` without a copy.
struct Owned(SharedBuf);

impl AsRef<[u8]> for Owned {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl Member for RemoteMember {
    fn name(&self) -> &str {
        &self.name
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn read(&self, offset: u64, mut buf: Buf) -> BoxFuture<'_, MemberResult<Buf>> {
        let len = buf.len();
        let g = self.counters.start(MemberOp::Read, len as u64);
        let fut = self.conns.enter(
            self.conns
                .run(move |c| async move { c.read(offset, len).await }),
        );
        let err = self.err(MemberOp::Read, offset, len as u64);
        async move {
            let r = fut.await.map(|data| {
                buf.copy_from_slice(&data);
                buf
            });
            g.finish(r.map_err(err))
        }
        .boxed()
    }

    fn write(&self, offset: u64, data: SharedBuf, fua: bool) -> BoxFuture<'_, MemberResult<()>> {
        let len = data.len() as u64;
        let g = self.counters.start(MemberOp::Write, len);
        let conns = self.conns.clone();
        let data = Bytes::from_owner(Owned(data));
        let native_fua = conns.has(TFLAG_SEND_FUA);
        let fut = async move {
            if fua && native_fua {
                return conns
                    .run_write(move |c| async move { c.write_fua(offset, data).await })
                    .await;
            }
            conns
                .run_write(move |c| async move { c.write(offset, data).await })
                .await?;
            if fua {
                flush(&conns).await?;
            }
            Ok(())
        };
        let fut = self.conns.enter(fut);
        let err = self.err(MemberOp::Write, offset, len);
        async move { g.finish(fut.await.map_err(err)) }.boxed()
    }

    fn flush(&self) -> BoxFuture<'_, MemberResult<()>> {
        let g = self.counters.start(MemberOp::Flush, 0);
        let conns = self.conns.clone();
        let fut = self.conns.enter(async move { flush(&conns).await });
        let err = self.err(MemberOp::Flush, 0, 0);
        async move { g.finish(fut.await.map_err(err)) }.boxed()
    }

    fn trim(&self, offset: u64, len: u64) -> BoxFuture<'_, MemberResult<()>> {
        self.zero(MemberOp::Trim, offset, len)
    }

    fn write_zeroes(&self, offset: u64, len: u64) -> BoxFuture<'_, MemberResult<()>> {
        self.zero(MemberOp::WriteZeroes, offset, len)
    }

    fn counters(&self) -> &MemberCounters {
        &self.counters
    }

    fn guard_identity(&self, check: Arc<dyn IdentityCheck>) {
        self.conns.guard_identity(check);
    }

    fn identity_lost(&self) -> Option<String> {
        self.conns.identity_lost()
    }

    fn readmit(&self) {
        self.conns.readmit();
    }

    fn refused_now(&self) -> Option<String> {
        self.conns.refused_now()
    }
}

/// `NBD_CMD_FLUSH` where the server has a cache to flush (without `SEND_FLUSH` a completed
/// write is already durable).
fn flush(conns: &Arc<Connections>) -> impl Future<Output = io::Result<()>> + Send + 'static {
    let conns = conns.clone();
    async move {
        // Before any connection the request below fails (not connected).
        if conns.info().is_some_and(|i| !i.has(TFLAG_SEND_FLUSH)) {
            return Ok(());
        }
        conns.run(|c| async move { c.flush().await }).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(size: u64, min_block: u32, flags: u16) -> ExportInfo {
        ExportInfo {
            name: "e".into(),
            description: String::new(),
            size,
            flags,
            min_block,
            preferred_block: 4096,
            max_block: 32 << 20,
            structured: true,
            base_allocation: None,
            block_size_negotiated: true,
        }
    }

    #[test]
    fn an_export_must_be_large_enough_writable_and_block_compatible() {
        let ok = info(1 << 30, 512, 0);
        assert!(check_export("u", &ok, 1 << 30, 4096).is_ok());
        assert!(matches!(
            check_export("u", &ok, (1 << 30) + 1, 4096),
            Err(RemoteError::TooSmall { .. })
        ));
        let ro = info(1 << 30, 512, nbraid_nbd::proto::TFLAG_READ_ONLY);
        assert!(matches!(
            check_export("u", &ro, 1 << 20, 4096),
            Err(RemoteError::ReadOnly { .. })
        ));
        let big_block = info(1 << 30, 65536, 0);
        let e = check_export("nbd://h/e", &big_block, 1 << 20, 4096).unwrap_err();
        assert!(e.to_string().contains("65536"), "{e}");
        assert!(check_export("u", &info(1 << 30, 1, 0), 1 << 20, 512).is_ok());
    }
}
