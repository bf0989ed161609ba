//! The server: its exports, accepting connections and admitting them within the bounds,
//! and graceful shutdown.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::task::{AbortHandle, JoinHandle};

use super::accept_backoff::AcceptBackoff;
use super::admission::HandshakeSlot;
use super::busy_poll::BusyPoll;
use super::connection::{run_connection, run_tls_connection};
use super::handshake;
use super::limits::Limits;
use super::listener::{accept_one, widen_send_buffer, Accepted, Listener};
use super::log_every::{refusal_line, with_unsaid};
use super::proto::{MAX_PAYLOAD, MAX_STRING};
use super::shared::{shutdown_signalled, too_many_connections, ExportEntry, Shared};
use super::workers::{Placed, Workers};
use crate::error::{ConnError, ServerError};
use crate::export::Export;
use crate::tls::{ServerTls, TlsMode};
use crate::write_gate::WriteGate;

/// Refused connections being told so at once; beyond this many, a connection over the limit
/// is closed without a word (a flood must not cost more than the connections it floods).
const MAX_REFUSING: usize = 16;

/// Longest a refused client may take to hear why.
const REFUSAL_TIMEOUT: Duration = Duration::from_secs(10);

/// The preferred block size advertised for an export: the export's preferred size rounded up
/// to a power of two, at least `max(min_block, 512)` and at most the maximum payload, as
/// `NBD_INFO_BLOCK_SIZE` requires.
pub fn advertised_preferred(min_block: u32, preferred: u32) -> u32 {
    let floor = min_block.max(512);
    preferred
        .max(floor)
        .checked_next_power_of_two()
        .unwrap_or(MAX_PAYLOAD)
        .min(MAX_PAYLOAD)
}

/// An NBD server over a fixed set of exports. Cheap to clone; all clones share the exports,
/// the connections and the shutdown state.
#[derive(Clone)]
pub struct Server {
    shared: Arc<Shared>,
}

impl fmt::Debug for Server {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Server")
            .field("exports", &self.export_names().collect::<Vec<_>>())
            .finish()
    }
}

/// Counts a connection from accept until its task ends (or is aborted).
struct ConnGuard {
    shared: Arc<Shared>,
    id: u64,
}

impl ConnGuard {
    /// Counts a new connection.
    fn new(shared: &Arc<Shared>) -> Self {
        shared.connections.send_modify(|n| *n += 1);
        ConnGuard {
            shared: shared.clone(),
            id: shared.next_id.fetch_add(1, Ordering::Relaxed),
        }
    }
}

/// Counts a refusal in progress until dropped.
struct RefusalGuard(Arc<Shared>);

impl Drop for RefusalGuard {
    fn drop(&mut self) {
        self.0.refusing.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Drop for ConnGuard {
    fn drop(&mut self) {
        lock(&self.shared.tasks).remove(&self.id);
        self.shared.connections.send_modify(|n| *n -= 1);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Server {
    /// A server for `exports` (name, export); the first export is also the default one (empty
    /// name). Names must be unique and at most 4096 bytes; minimum block sizes must be powers
    /// of two up to 65536.
    pub fn new(exports: Vec<(String, Arc<dyn Export>)>) -> Result<Self, ServerError> {
        Self::with_limits(exports, Limits::default())
    }

    /// Like [`Server::new`] with explicit limits (raised to their minimums, see [`Limits`]).
    pub fn with_limits(
        exports: Vec<(String, Arc<dyn Export>)>,
        limits: Limits,
    ) -> Result<Self, ServerError> {
        let mut entries: Vec<ExportEntry> = Vec::with_capacity(exports.len());
        for (name, export) in exports {
            if name.len() > MAX_STRING {
                return Err(ServerError::NameTooLong(name));
            }
            if entries.iter().any(|e| e.name == name) {
                return Err(ServerError::DuplicateName(name));
            }
            let min = export.min_block();
            if !min.is_power_of_two() || min > 65536 {
                return Err(ServerError::BadMinBlock { name, min });
            }
            let preferred = advertised_preferred(min, export.preferred_block());
            entries.push(ExportEntry {
                name,
                export,
                preferred,
                gate: Arc::new(WriteGate::new()),
            });
        }
        let limits = limits.normalized();
        Ok(Self {
            shared: Arc::new(Shared::new(entries, limits)),
        })
    }

    /// Names of the exports, in order.
    pub fn export_names(&self) -> impl Iterator<Item = &str> {
        self.shared.exports.iter().map(|e| e.name.as_str())
    }

    /// Binds `path` and serves it until shutdown.
    pub async fn serve_unix(&self, path: impl AsRef<Path>) -> Result<(), ServerError> {
        let l = Listener::bind_unix(path)?;
        self.serve(l).await;
        Ok(())
    }

    /// Binds `addr` and serves it until shutdown.
    pub async fn serve_tcp(&self, addr: SocketAddr) -> Result<(), ServerError> {
        let l = Listener::bind_tcp(addr).await?;
        self.serve(l).await;
        Ok(())
    }

    /// Accepts connections on `listener` until [`Server::shutdown`] begins; each connection
    /// runs as its own task. A Unix socket file is removed when the loop ends.
    pub async fn serve(&self, listener: Listener) {
        self.serve_with_tls(listener, ServerTls::off()).await
    }

    /// Like [`Server::serve`], with `tls` on this listener (see [`TlsMode`]).
    pub async fn serve_with_tls(&self, listener: Listener, tls: ServerTls) {
        let mut stop = self.shared.shutdown.subscribe();
        let mut backoff = AcceptBackoff::new();
        loop {
            let accepted = tokio::select! {
                biased;
                _ = shutdown_signalled(&mut stop) => break,
                a = accept_one(&listener) => a,
            };
            match accepted {
                Ok(a) => {
                    backoff.succeeded();
                    self.place(a, tls.clone())
                }
                // EMFILE, ECONNABORTED and the like: pause (longer while it lasts), carry on.
                Err(e) => {
                    let pause = backoff.pause_after(&listener, &e);
                    tokio::select! {
                        biased;
                        _ = shutdown_signalled(&mut stop) => break,
                        () = pause => {}
                    }
                }
            }
        }
        if let Listener::Unix { path, .. } = &listener {
            let _ = std::fs::remove_file(path);
        }
    }

    /// Serves connections on `runtimes` from now on, dealt out in turn (each connection and
    /// the tasks it spawns stay on one), instead of on the runtime that accepts them; none:
    /// the accepting runtime. Set before serving; later calls are ignored.
    pub fn run_connections_on(&self, runtimes: Vec<tokio::runtime::Handle>) {
        if self.shared.workers.set(Workers::new(runtimes)).is_err() {
            tracing::warn!("the server's connection runtimes were set already: kept");
        }
    }

    /// Serves an accepted connection as its own task, on the next of the
    /// [`run_connections_on`](Self::run_connections_on) runtimes when there are some.
    /// Admitted (counted) here, before it moves: a shutdown that begins meanwhile waits for it.
    fn place(&self, accepted: Accepted, tls: ServerTls) {
        let Some((guard, handshake)) = self.admit() else {
            match accepted {
                Accepted::Unix(s) => drop(self.refuse_split(s)),
                Accepted::Tcp(s) => drop(self.refuse_split(s)),
            }
            return;
        };
        let server = self.clone();
        let Some(placed) = self.shared.workers.get().and_then(Workers::next) else {
            self.track(guard, None, async move {
                server.run_accepted(accepted, tls, handshake).await
            });
            return;
        };
        match accepted.into_moving() {
            Ok(moving) => {
                let Placed { runtime, counted } = placed;
                self.track(guard, Some(&runtime), async move {
                    let _counted = counted;
                    let accepted = moving.into_accepted()?;
                    server.run_accepted(accepted, tls, handshake).await
                });
            }
            Err(e) => tracing::warn!("handing a connection to its runtime failed: {e}"),
        }
    }

    /// Refuses a connection that came whole (see [`Server::refuse`]).
    fn refuse_split<S>(&self, s: S) -> JoinHandle<Result<(), ConnError>>
    where
        S: AsyncRead + AsyncWrite + Send + 'static,
    {
        let (r, w) = tokio::io::split(s);
        self.refuse(r, w)
    }

    /// Serves an admitted connection on the current runtime, with TLS when `tls` asks.
    async fn run_accepted(
        &self,
        accepted: Accepted,
        tls: ServerTls,
        handshake: HandshakeSlot,
    ) -> Result<(), ConnError> {
        let shared = &self.shared;
        let busy_poll = shared.limits.busy_poll;
        match accepted {
            Accepted::Unix(s) if tls.mode != TlsMode::Off => {
                run_tls_connection(shared, s, tls, handshake).await
            }
            Accepted::Tcp(s) if tls.mode != TlsMode::Off => {
                let _ = s.set_nodelay(true);
                run_tls_connection(shared, s, tls, handshake).await
            }
            Accepted::Unix(s) => {
                let fd = s.as_raw_fd();
                widen_send_buffer(fd);
                let (r, w) = s.into_split();
                let r = BusyPoll::socket(r, fd, busy_poll);
                run_connection(shared, r, w, handshake).await
            }
            Accepted::Tcp(s) => {
                let _ = s.set_nodelay(true);
                let fd = s.as_raw_fd();
                widen_send_buffer(fd);
                let (r, w) = s.into_split();
                let r = BusyPoll::socket(r, fd, busy_poll);
                run_connection(shared, r, w, handshake).await
            }
        }
    }

    /// Serves one already-connected stream (any transport) as its own task; beyond
    /// `max_connections` the task only tells the client it is refused.
    pub fn spawn_connection<S>(&self, stream: S) -> JoinHandle<Result<(), ConnError>>
    where
        S: AsyncRead + AsyncWrite + Send + 'static,
    {
        let (r, w) = tokio::io::split(stream);
        self.spawn_halves(r, w)
    }

    /// Serves a connection's halves (no busy-polling: no socket to poll).
    fn spawn_halves<R, W>(&self, r: R, w: W) -> JoinHandle<Result<(), ConnError>>
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let Some((guard, handshake)) = self.admit() else {
            return self.refuse(r, w);
        };
        let r = BusyPoll::off(r);
        let shared = self.shared.clone();
        self.track(guard, None, async move {
            run_connection(&shared, r, w, handshake).await
        })
    }

    /// Counts a new connection and gives it a negotiating place, closing the connection
    /// negotiating longest if `max_handshakes` are; `None` when every serving place is taken
    /// (the client is refused at once).
    fn admit(&self) -> Option<(ConnGuard, HandshakeSlot)> {
        if self.shared.admission.serving_full() {
            return None;
        }
        let guard = ConnGuard::new(&self.shared);
        let (slot, evicted) = self.shared.admission.begin_handshake(guard.id);
        if let Some(old) = evicted {
            let handle = lock(&self.shared.tasks).get(&old).cloned();
            if let Some(h) = handle {
                let max = self.shared.limits.max_handshakes;
                tracing::info!(
                    "closing the connection negotiating longest: {max} were negotiating \
                     ([daemon] max_handshakes)"
                );
                h.abort();
            }
        }
        Some((guard, slot))
    }

    /// Runs a connection's task on `runtime` (none: the current one), counted by `guard`
    /// and abortable at shutdown.
    fn track<F>(
        &self,
        guard: ConnGuard,
        runtime: Option<&tokio::runtime::Handle>,
        conn: F,
    ) -> JoinHandle<Result<(), ConnError>>
    where
        F: std::future::Future<Output = Result<(), ConnError>> + Send + 'static,
    {
        let id = guard.id;
        let shared = self.shared.clone();
        let task = async move {
            let res = conn.await;
            match &res {
                Ok(()) => tracing::debug!("connection closed"),
                // Refusals say so when they are made.
                Err(ConnError::Refused(_)) => {}
                Err(e) if e.ended_in_handshake() => {
                    let due = lock(&shared.handshake_failures).offer(std::time::Instant::now());
                    if let Some(unsaid) = due {
                        tracing::info!("{}", with_unsaid(e, unsaid));
                    }
                }
                Err(e) => tracing::info!("connection ended: {e}"),
            }
            drop(guard);
            res
        };
        // Spawned under the lock: a task on another thread that ends at once waits here to
        // remove its entry, so none is left behind.
        let mut tasks = lock(&self.shared.tasks);
        let handle = match runtime {
            Some(rt) => rt.spawn(task),
            None => tokio::spawn(task),
        };
        // The guard removes the entry under this same lock, and only before the task counts
        // as finished: checking and inserting under the lock never leaves a stale entry.
        if !handle.is_finished() {
            tasks.insert(id, handle.abort_handle());
        }
        drop(tasks);
        handle
    }

    /// Tells a client over the connection limit why it cannot be served, the way the NBD
    /// protocol lets a server say no: every option it sends is answered `NBD_REP_ERR_POLICY`
    /// with a message (an `NBD_OPT_EXPORT_NAME`, which cannot be answered with an error, ends
    /// the connection). Cheap: no buffers, bounded in time and in number.
    fn refuse<R, W>(&self, mut r: R, mut w: W) -> JoinHandle<Result<(), ConnError>>
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let max = self.shared.limits.max_connections;
        let why = too_many_connections(&self.shared);
        let due = lock(&self.shared.refusals).offer(std::time::Instant::now());
        if let Some(unsaid) = due {
            tracing::info!("{}", refusal_line(max, unsaid));
        }
        let refusing = self.shared.refusing.fetch_add(1, Ordering::AcqRel);
        let guard = RefusalGuard(self.shared.clone());
        let timeout = self.shared.limits.handshake_timeout.min(REFUSAL_TIMEOUT);
        tokio::spawn(async move {
            let _guard = guard;
            if refusing < MAX_REFUSING {
                let refusal = handshake::refuse(&mut r, &mut w, &why);
                if let Ok(Err(e)) = tokio::time::timeout(timeout, refusal).await {
                    tracing::debug!("refusing a connection: {e}");
                }
                let _ = w.shutdown().await;
            }
            Err(ConnError::Refused(why))
        })
    }

    /// Requests running in the exports now, of every connection.
    pub fn requests_in_flight(&self) -> usize {
        self.shared.requests.load(Ordering::Acquire)
    }

    /// Resolves once no request runs in any export.
    async fn requests_finished(&self) {
        loop {
            let done = self.shared.requests_done.notified();
            tokio::pin!(done);
            done.as_mut().enable();
            if self.requests_in_flight() == 0 {
                return;
            }
            done.await;
        }
    }

    /// Whether shutdown has begun.
    pub fn is_shutting_down(&self) -> bool {
        *self.shared.shutdown.borrow()
    }

    /// Connections currently open.
    pub fn connections(&self) -> usize {
        *self.shared.connections.borrow()
    }

    /// Graceful shutdown: stop accepting, let every connection finish the requests it has
    /// read (their replies are sent) and close, wait until no request runs in any export, then
    /// flush every export. Returns the first flush error, after trying them all. Safe to call
    /// more than once.
    pub async fn shutdown(&self) -> io::Result<()> {
        self.shared.shutdown.send_replace(true);
        let mut conns = self.shared.connections.subscribe();
        let _ = conns.wait_for(|n| *n == 0).await;
        self.requests_finished().await;
        self.flush_all().await
    }

    /// Like [`Server::shutdown`], but connections still open after `grace` (a client that
    /// neither reads its replies nor finishes a payload) are cut off. Requests they had
    /// already started still run to completion in the export, and the flush waits for them
    /// (for another `grace` at most: after that it flushes anyway and reports an error, as
    /// writes may still be landing).
    pub async fn shutdown_with_grace(&self, grace: Duration) -> io::Result<()> {
        self.shared.shutdown.send_replace(true);
        let mut conns = self.shared.connections.subscribe();
        if tokio::time::timeout(grace, conns.wait_for(|n| *n == 0))
            .await
            .is_err()
        {
            let stuck: Vec<AbortHandle> = lock(&self.shared.tasks).values().cloned().collect();
            tracing::warn!("cutting off {} connection(s) at shutdown", stuck.len());
            for h in stuck {
                h.abort();
            }
            let _ = conns.wait_for(|n| *n == 0).await;
        }
        let finished = tokio::time::timeout(grace, self.requests_finished())
            .await
            .is_ok();
        let flushed = self.flush_all().await;
        if !finished {
            let n = self.requests_in_flight();
            tracing::error!("{n} request(s) still running in the exports after the grace period");
            flushed?;
            return Err(io::Error::other(format!(
                "{n} request(s) still running in the exports after {} s; flushed without them",
                grace.as_secs()
            )));
        }
        flushed
    }

    async fn flush_all(&self) -> io::Result<()> {
        let mut first = None;
        for e in &self.shared.exports {
            if let Err(err) = e.export.flush().await {
                tracing::error!("flushing export {:?} failed: {err}", e.name);
                first.get_or_insert(err);
            }
        }
        first.map_or(Ok(()), Err)
    }
}
