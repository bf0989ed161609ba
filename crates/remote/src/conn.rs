//! A remote member's connections: used in turn, each dropped when it times out or breaks and
//! re-opened in the background with exponential backoff. A connection that re-opens to an
//! export changed in a way that could lose data or durability (see [`crate::change`]) is not
//! used, and the member's other connections are closed: every request fails, naming the
//! change, until connections re-open to the export as it was. Nor is one whose export is not the member any more (its superblock says another
//! disk, blank or stale: see [`crate::identity`]): every request fails naming what it holds,
//! until a connection finds the member again, or every volume on it has failed it and it is
//! readmitted for the re-add to judge.
//!
//! A connection dropped with writes unanswered (a timeout) may still have them executed by
//! the server later, over whatever was written since: a resync of the member would be
//! overwritten by the stale data. So the member serves nothing until the server has closed
//! that connection after our `NBD_CMD_DISC` (nbdkit, like other servers, closes it only once
//! the requests it holds are done); a server that never does keeps the member out, as said in
//! the log.

use std::future::Future;
use std::io;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use nbraid_core::IdentityCheck;
use nbraid_nbd::client::{Client, ClientError, ConnectOptions, ExportInfo, Uri};
use parking_lot::Mutex;
use tokio::runtime::Handle;
use tokio::sync::Notify;

use crate::change::{export_changes, ExportChange};
use crate::identity::{self, Gate};
use crate::RemoteError;

/// First wait before re-opening a broken connection; it doubles per failed attempt.
const BACKOFF_FIRST: Duration = Duration::from_millis(100);
/// Longest wait between attempts.
const BACKOFF_MAX: Duration = Duration::from_secs(10);

/// The wait before re-opening attempt `attempt` (0 = the first): 100 ms doubling per
/// attempt, at most 10 s.
pub fn backoff(attempt: u32) -> Duration {
    BACKOFF_FIRST
        .saturating_mul(1u32 << attempt.min(16))
        .min(BACKOFF_MAX)
}

/// `fut` polled inside runtime `rt`'s context (its sockets and timers), from any executor.
/// Outside tokio's cooperative budget: under a `block_on` nested in a tokio task (the
/// daemon's assembly) the budget is never refilled, and a spent one would spin forever.
pub(crate) async fn enter<F: Future>(rt: Handle, fut: F) -> F::Output {
    let mut fut = pin!(tokio::task::unconstrained(fut));
    std::future::poll_fn(|cx| {
        let _in = rt.enter();
        fut.as_mut().poll(cx)
    })
    .await
}

/// Opens one connection (TLS when the URI says `nbds`, with its `tls-certificates`).
pub(crate) async fn connect(uri: &Uri) -> Result<Client, ClientError> {
    Client::connect_with(uri, &ConnectOptions::default()).await
}

struct SlotState {
    /// Counts connection changes, so a failure reported against an old one is ignored.
    generation: u64,
    client: Option<Client>,
    /// The client's requests that change the export and have no reply yet.
    writes: Arc<AtomicUsize>,
}

/// One request that changes the export, counted on its connection until it has a reply
/// (or was given up on: then the count is read while it still holds, see `broken`).
struct Unanswered(Arc<AtomicUsize>);

impl Drop for Unanswered {
    fn drop(&mut self) {
        self.0.fetch_sub(1, SeqCst);
    }
}

/// What follows dropping a connection, before its slot re-opens.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum AfterDrop {
    /// Nothing sent on it can still change the export: re-open at once.
    Reopen,
    /// Writes sent on it may still land: serve nothing and re-open nothing until the server
    /// has closed it (after our disconnect).
    AwaitClose,
}

/// See [`AfterDrop`]: a connection already closed by the server, or with no write (write,
/// write-zeroes, trim) unanswered, leaves nothing behind; reads and flushes change nothing.
pub(crate) fn after_drop(closed: bool, writes_unanswered: usize) -> AfterDrop {
    if closed || writes_unanswered == 0 {
        AfterDrop::Reopen
    } else {
        AfterDrop::AwaitClose
    }
}

struct Slot {
    state: Mutex<SlotState>,
    reconnecting: AtomicBool,
}

pub(crate) struct Connections {
    uri_text: String,
    uri: Uri,
    /// As the server described the export at the first connection (unset until one opens).
    info: OnceLock<ExportInfo>,
    /// Set while the export is found changed (see [`Connections::export_changed`]) or not
    /// the member (see [`Connections::not_the_member`]).
    changed: Mutex<Option<Arc<RemoteError>>>,
    /// What a re-opened connection must hold to serve (the member's superblock's check).
    identity: Mutex<Option<Arc<dyn IdentityCheck>>>,
    /// Re-opened connections serve unchecked: the export was found not the member and
    /// every volume on it failed it since (see [`Connections::readmit`]). Cleared when a
    /// serving connection breaks.
    readmitted: AtomicBool,
    /// Wakes the re-opening loops from their backoff (a readmission).
    wake: Arc<Notify>,
    len: u64,
    /// The volume's block size (the server's minimum block must divide it).
    block_size: u32,
    timeout: Duration,
    rt: Handle,
    slots: Vec<Slot>,
    next: AtomicUsize,
    /// Dropped connections whose writes may still land (see [`AfterDrop::AwaitClose`]):
    /// while any, no request is served.
    lingering: AtomicUsize,
    /// Why the last re-opened connection was not used although the server answered (the
    /// export changed, too small, not the member, its TLS certificate refused); cleared when one opens or the server
    /// does not answer at all. For `status`: the member's failure may be an older one.
    refused: Mutex<Option<String>>,
}

/// Errors that say the connection itself is gone or out of step (not a failed request).
fn breaks_connection(e: &ClientError) -> bool {
    matches!(
        e,
        ClientError::Disconnected(_)
            | ClientError::Io(_)
            | ClientError::Protocol(_)
            | ClientError::Connect { .. }
    )
}

/// Whether opening a connection failed after the server answered — it refused our
/// certificate or we refused its, it wants TLS we do not speak, it has no such export, it
/// speaks no NBD — rather than not answering at all: `status` then says the server answers
/// but is not used, and why, instead of the older failure alone.
fn answered_but_refused(e: &ClientError) -> bool {
    matches!(
        e,
        ClientError::TlsHandshake(_)
            | ClientError::TlsRequired
            | ClientError::UnknownExport(_)
            | ClientError::OptionRefused { .. }
            | ClientError::NotNbd(_)
            | ClientError::NotFixedNewstyle
    )
}

/// Whether the server said it is shutting down (`ESHUTDOWN`): it serves nothing more and
/// waits for its clients to leave (nbdkit on SIGTERM), so every connection to it is closed.
fn shuts_down(e: &ClientError) -> bool {
    e.errno() == Some(nbraid_nbd::proto::ESHUTDOWN)
}

/// Where a member's connections come from and what they must serve.
pub(crate) struct Target {
    pub uri_text: String,
    pub uri: Uri,
    pub len: u64,
    pub block_size: u32,
    pub timeout: Duration,
}

impl Connections {
    /// Driven by runtime `rt`, which the clients were opened in; `info` as the first one
    /// found the export, `None` with no client yet (see [`Connections::offline`]). Slots
    /// beyond the clients start closed.
    fn build(
        rt: Handle,
        target: Target,
        info: Option<ExportInfo>,
        clients: Vec<Client>,
        slots: usize,
    ) -> Arc<Connections> {
        let mut clients = clients.into_iter();
        let slots = (0..slots.max(1))
            .map(|_| Slot {
                state: Mutex::new(SlotState {
                    generation: 0,
                    client: clients.next(),
                    writes: Arc::default(),
                }),
                reconnecting: AtomicBool::new(false),
            })
            .collect();
        let cell = OnceLock::new();
        if let Some(info) = info {
            let _ = cell.set(info);
        }
        Arc::new(Connections {
            uri_text: target.uri_text,
            uri: target.uri,
            info: cell,
            changed: Mutex::new(None),
            identity: Mutex::new(None),
            readmitted: AtomicBool::new(false),
            wake: Arc::new(Notify::new()),
            len: target.len,
            block_size: target.block_size,
            timeout: target.timeout,
            rt,
            slots,
            next: AtomicUsize::new(0),
            lingering: AtomicUsize::new(0),
            refused: Mutex::new(None),
        })
    }

    /// Over `clients`, opened in runtime `rt` (the first described the export as `info`).
    pub fn new(
        rt: Handle,
        target: Target,
        info: ExportInfo,
        clients: Vec<Client>,
    ) -> Arc<Connections> {
        let n = clients.len();
        Connections::build(rt, target, Some(info), clients, n)
    }

    /// With no connection yet (the server did not answer): every request fails at once
    /// until the first connection opens in the background (with backoff, checked as at
    /// connect); the others follow when the server offers multi-conn.
    pub fn offline(rt: Handle, target: Target, connections: usize) -> Arc<Connections> {
        let this = Connections::build(rt, target, None, Vec::new(), connections);
        this.slots[0].reconnecting.store(true, Relaxed);
        this.rt.spawn(reopen(Arc::downgrade(&this), 0));
        this
    }

    /// The export as the first connection found it (`None`: none has opened yet).
    pub fn info(&self) -> Option<&ExportInfo> {
        self.info.get()
    }

    /// Whether the server sets transmission flag `flag` (false before any connection).
    pub fn has(&self, flag: u16) -> bool {
        self.info().is_some_and(|i| i.has(flag))
    }

    pub fn uri(&self) -> &Uri {
        &self.uri
    }

    pub fn open(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| {
                s.state
                    .lock()
                    .client
                    .as_ref()
                    .is_some_and(|c| !c.is_closed())
            })
            .count()
    }

    /// `fut` polled inside the member's runtime, from whatever executor polls it.
    pub fn enter<F>(&self, fut: F) -> impl Future<Output = F::Output> + Send + 'static
    where
        F: Future + Send + 'static,
    {
        enter(self.rt.clone(), fut)
    }

    /// Runs `op`, which changes nothing on the export (a read, a flush), on the next open
    /// connection, bounded by the timeout. A timeout or a broken connection drops that
    /// connection and starts re-opening it.
    pub fn run<T, F, Fut>(self: &Arc<Self>, op: F) -> impl Future<Output = io::Result<T>> + Send
    where
        T: Send,
        F: FnOnce(Client) -> Fut + Send,
        Fut: Future<Output = Result<T, ClientError>> + Send,
    {
        self.run_as(false, op)
    }

    /// As [`Self::run`], for `op` that changes the export (a write, write-zeroes, trim): if
    /// it gets no reply, its connection must be closed by the server before the member
    /// serves again (see [`AfterDrop`]).
    pub fn run_write<T, F, Fut>(
        self: &Arc<Self>,
        op: F,
    ) -> impl Future<Output = io::Result<T>> + Send
    where
        T: Send,
        F: FnOnce(Client) -> Fut + Send,
        Fut: Future<Output = Result<T, ClientError>> + Send,
    {
        self.run_as(true, op)
    }

    fn run_as<T, F, Fut>(
        self: &Arc<Self>,
        writes: bool,
        op: F,
    ) -> impl Future<Output = io::Result<T>> + Send
    where
        T: Send,
        F: FnOnce(Client) -> Fut + Send,
        Fut: Future<Output = Result<T, ClientError>> + Send,
    {
        let this = self.clone();
        async move {
            let changed = this.changed.lock().clone();
            if let Some(e) = changed {
                // The export is not as it was (changed, or another disk): not the member's
                // media failing, so the member's failure is the kind that may come back by
                // itself once the export is as it was or the re-add rules accept it.
                return Err(io::Error::new(io::ErrorKind::NotConnected, e));
            }
            if this.lingering.load(SeqCst) > 0 {
                return Err(io::Error::new(
                    io::ErrorKind::NotConnected,
                    format!(
                        "{}: not served until the server closes a dropped connection whose \
                         writes may still land",
                        this.uri_text
                    ),
                ));
            }
            let Some((i, generation, client, _unanswered)) = this.pick(writes) else {
                return Err(io::Error::new(
                    io::ErrorKind::NotConnected,
                    format!("{}: not connected (re-opening)", this.uri_text),
                ));
            };
            // `_unanswered` lives until after `broken` below: a request given up on is
            // still counted when its connection is dropped.
            match tokio::time::timeout(this.timeout, op(client)).await {
                Ok(Ok(v)) => Ok(v),
                Ok(Err(e)) => {
                    if shuts_down(&e) {
                        this.break_all(&e.to_string());
                        // The server is going away, not failing the request on its media:
                        // the member stopped answering, and comes back with its server.
                        return Err(io::Error::new(io::ErrorKind::NotConnected, e));
                    }
                    if breaks_connection(&e) {
                        this.broken(i, generation, &e.to_string());
                    }
                    Err(e.into())
                }
                Err(_) => {
                    let why = format!("no reply within {:?}", this.timeout);
                    this.broken(i, generation, &why);
                    Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("{}: no reply within {:?}", this.uri_text, this.timeout),
                    ))
                }
            }
        }
    }

    /// The next open connection, in turn; with a write (`writes`) counted on it.
    fn pick(self: &Arc<Self>, writes: bool) -> Option<(usize, u64, Client, Option<Unanswered>)> {
        let n = self.slots.len();
        let start = self.next.fetch_add(1, Relaxed);
        for k in 0..n {
            let i = (start + k) % n;
            let s = self.slots[i].state.lock();
            match &s.client {
                Some(c) if !c.is_closed() => {
                    // Under the slot's lock: `broken` reads the count under it too.
                    let counted = writes.then(|| {
                        s.writes.fetch_add(1, SeqCst);
                        Unanswered(s.writes.clone())
                    });
                    return Some((i, s.generation, c.clone(), counted));
                }
                Some(_) => {
                    let generation = s.generation;
                    drop(s);
                    self.broken(i, generation, "the connection closed");
                }
                None => {}
            }
        }
        None
    }

    /// Drops connection `i` (failed: `why`) if it is still the one of `generation`, and
    /// re-opens it: at once, or once the server has closed it (see [`AfterDrop`]).
    fn broken(self: &Arc<Self>, i: usize, generation: u64, why: &str) {
        let mut s = self.slots[i].state.lock();
        if s.generation != generation {
            return;
        }
        let Some(old) = s.client.take() else { return };
        s.generation += 1;
        let unanswered = s.writes.load(SeqCst);
        let then = after_drop(old.is_closed(), unanswered);
        if then == AfterDrop::AwaitClose {
            // Before the slot's lock is let go: no request is served from here on.
            self.lingering.fetch_add(1, SeqCst);
        }
        drop(s);
        // The server may come back as another disk: check the next connections again.
        self.readmitted.store(false, Relaxed);
        let reopening = !self.slots[i].reconnecting.swap(true, Relaxed);
        match then {
            AfterDrop::Reopen => {
                tracing::warn!(
                    "{}: connection {i} failed ({why}); re-opening it",
                    self.uri_text
                );
                // Bounded: a server that stopped answering may never read the disconnect.
                let limit = self.timeout;
                self.rt.spawn(async move {
                    let _ = tokio::time::timeout(limit, old.disconnect()).await;
                });
                if reopening {
                    self.rt.spawn(reopen(Arc::downgrade(self), i));
                }
            }
            AfterDrop::AwaitClose => {
                tracing::warn!(
                    "{}: connection {i} failed ({why}) with {unanswered} writes unanswered; \
                     the member is not served until the server has closed it",
                    self.uri_text
                );
                let (weak, limit) = (Arc::downgrade(self), self.timeout);
                self.rt.spawn(async move {
                    await_close(&weak, i, old, limit).await;
                    if let Some(this) = weak.upgrade() {
                        this.lingering.fetch_sub(1, SeqCst);
                        if reopening {
                            this.rt.spawn(reopen(weak, i));
                        }
                    }
                });
            }
        }
    }

    /// What about the export as `now` could lose data or durability, compared with the
    /// export as the member was opened on it (nothing before the first connection).
    fn changes(&self, now: &ExportInfo) -> Vec<ExportChange> {
        match self.info() {
            Some(was) => export_changes(was, now, self.slots.len()),
            None => Vec::new(),
        }
    }

    /// A connection found the export changed (`changes`): no request is served until
    /// connections re-open to the export as it was, so the member fails (the array marks it
    /// failed, and re-adds it once it answers again); the other connections, whose flags
    /// may be as stale, are closed and re-opened too. Returns why, for the re-opening's log.
    fn export_changed(self: &Arc<Self>, changes: Vec<ExportChange>) -> String {
        self.refuse(RemoteError::ExportChanged {
            uri: self.uri_text.clone(),
            changes,
        })
    }

    /// A connection found the export holds not the member but `found` (another disk, blank,
    /// a stale copy): as [`Self::export_changed`], every request fails naming it.
    fn not_the_member(self: &Arc<Self>, found: String) -> String {
        self.refuse(RemoteError::NotTheMember {
            uri: self.uri_text.clone(),
            found,
        })
    }

    /// No request is served, failing with `e`, and every connection is re-opened (checked).
    fn refuse(self: &Arc<Self>, e: RemoteError) -> String {
        let e = Arc::new(e);
        let why = e.to_string();
        // Every connection re-opening finds the change: say it once.
        if self.changed.lock().replace(e).is_none() {
            tracing::error!("{why}");
        }
        self.break_all("the export is not as the member");
        why
    }

    /// Drops every connection (`why`) and re-opens them (see [`Self::broken`]).
    fn break_all(self: &Arc<Self>, why: &str) {
        for (i, slot) in self.slots.iter().enumerate() {
            let generation = slot.state.lock().generation;
            self.broken(i, generation, why);
        }
    }
}

impl Connections {
    /// The check every re-opened connection passes before serving.
    pub fn guard_identity(&self, check: Arc<dyn IdentityCheck>) {
        *self.identity.lock() = Some(check);
    }

    /// Why the server's export is not used, while the last connection that opened to it
    /// was turned down (see the field).
    pub fn refused_now(&self) -> Option<String> {
        self.refused.lock().clone()
    }

    /// What the export holds instead of the member, while a connection found so.
    pub fn identity_lost(&self) -> Option<String> {
        match self.changed.lock().as_deref() {
            Some(e @ RemoteError::NotTheMember { .. }) => Some(e.to_string()),
            _ => None,
        }
    }

    /// Serves the export found not the member as it is (every volume on the member failed
    /// it: only a re-add reads it, and judges what it holds). Nothing otherwise.
    pub fn readmit(&self) {
        let mut changed = self.changed.lock();
        if !matches!(changed.as_deref(), Some(RemoteError::NotTheMember { .. })) {
            return;
        }
        *changed = None;
        self.readmitted.store(true, Relaxed);
        drop(changed);
        tracing::warn!(
            "{}: served again as it is, for the re-add to judge what it holds",
            self.uri_text
        );
        self.wake.notify_waiters();
    }

    /// Whether re-opened connection `c` may serve: the identity check (see
    /// [`crate::identity`]). `Err`: why not, for the re-opening's log.
    async fn admit(self: &Arc<Self>, c: &Client) -> Result<(), String> {
        let readmitted = self.readmitted.load(Relaxed);
        let check = self.identity.lock().clone();
        let verdict = match (readmitted, check) {
            (false, Some(check)) => {
                Some(identity::verify(&*check, &self.uri_text, self.len, c, self.timeout).await)
            }
            _ => None,
        };
        match identity::gate(readmitted, verdict) {
            Gate::Serve => Ok(()),
            Gate::Retry(why) => Err(why),
            Gate::NotTheMember(found) => Err(self.not_the_member(found)),
        }
    }

    /// Connection `i` re-opened as `c`. The first connection of a member that started
    /// offline tells the export, and opens the other slots when the server offers multi-conn.
    fn opened(self: &Arc<Self>, i: usize, c: Client) {
        let first = self.info.set(c.info().clone()).is_ok();
        if self.changed.lock().take().is_some() {
            tracing::warn!("{}: the export is as it was again", self.uri_text);
        }
        *self.refused.lock() = None;
        let mut s = self.slots[i].state.lock();
        s.client = Some(c);
        s.writes = Arc::default();
        s.generation += 1;
        self.slots[i].reconnecting.store(false, Relaxed);
        drop(s);
        if first && self.has(nbraid_nbd::proto::TFLAG_CAN_MULTI_CONN) {
            for k in (0..self.slots.len()).filter(|&k| k != i) {
                if !self.slots[k].reconnecting.swap(true, Relaxed) {
                    self.rt.spawn(reopen(Arc::downgrade(self), k));
                }
            }
        }
    }
}

/// Disconnects `old` (connection `i`, dropped with writes unanswered) and waits until the
/// server has closed it: then nothing sent on it can land any more. A server that has not
/// closed it within `limit` is said in the log (the member stays out meanwhile). Returns
/// early once the member is gone.
async fn await_close(weak: &Weak<Connections>, i: usize, old: Client, limit: Duration) {
    const POLL: Duration = Duration::from_millis(50);
    let started = tokio::time::Instant::now();
    // Bounded: a server that stopped reading may never take the disconnect.
    let _ = tokio::time::timeout(limit, old.disconnect()).await;
    let mut said = false;
    while !old.is_closed() {
        let Some(uri) = weak.upgrade().map(|c| c.uri_text.clone()) else {
            return;
        };
        if !said && started.elapsed() >= limit {
            said = true;
            tracing::error!(
                "{uri}: the server has not closed connection {i} (dropped with writes \
                 unanswered) after {limit:?}: they may still land, so the member is not \
                 served until it does"
            );
        }
        tokio::time::sleep(POLL).await;
    }
    if let Some(this) = weak.upgrade() {
        tracing::info!(
            "{}: the server closed connection {i}: nothing sent on it can land any more; \
             re-opening it",
            this.uri_text
        );
    }
}

/// Re-opens connection `i` with backoff until it works or the member is gone.
async fn reopen(weak: Weak<Connections>, i: usize) {
    let Some(wake) = weak.upgrade().map(|c| c.wake.clone()) else {
        return;
    };
    let mut last_why: Option<String> = None;
    for attempt in 0u32.. {
        tokio::select! {
            _ = tokio::time::sleep(backoff(attempt)) => {}
            _ = wake.notified() => {}
        }
        let Some(this) = weak.upgrade() else { return };
        let why = match tokio::time::timeout(this.timeout, connect(&this.uri)).await {
            Ok(Ok(c)) => {
                let changes = this.changes(c.info());
                let checked = if changes.is_empty() {
                    crate::check_export(&this.uri_text, c.info(), this.len, this.block_size)
                        .map_err(|e| e.to_string())
                } else {
                    Err(this.export_changed(changes))
                };
                // Nothing is served on it before the member is found there.
                let checked = match checked {
                    Ok(()) => this.admit(&c).await,
                    Err(why) => Err(why),
                };
                match checked {
                    Ok(()) => {
                        this.opened(i, c);
                        tracing::info!(
                            "{}: connection {i} re-opened after {} attempts",
                            this.uri_text,
                            attempt + 1
                        );
                        return;
                    }
                    Err(why) => {
                        c.disconnect().await;
                        *this.refused.lock() = Some(why.clone());
                        why
                    }
                }
            }
            Ok(Err(e)) => {
                let why = e.to_string();
                *this.refused.lock() = answered_but_refused(&e).then(|| why.clone());
                why
            }
            Err(_) => {
                *this.refused.lock() = None;
                format!("no answer within {:?}", this.timeout)
            }
        };
        // A new reason is said at once (a server back with a certificate refused after
        // minutes away); the same one again only now and then.
        let new_reason = last_why.as_deref() != Some(why.as_str());
        if attempt < 3 || attempt % 20 == 0 || new_reason {
            tracing::warn!(
                "{}: re-opening connection {i} failed (attempt {}): {why}; next in {:?}",
                this.uri_text,
                attempt + 1,
                backoff(attempt + 1)
            );
        }
        last_why = Some(why);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_that_answers_and_refuses_is_told_from_one_that_does_not_answer() {
        let refused = [
            ClientError::TlsHandshake("invalid peer certificate: UnknownIssuer".into()),
            ClientError::TlsRequired,
            ClientError::UnknownExport("v".into()),
            ClientError::NotNbd("HTTP/1.1".into()),
        ];
        for e in &refused {
            assert!(answered_but_refused(e), "{e}");
        }
        let silent = [
            ClientError::Connect {
                addr: "127.0.0.1:1".into(),
                source: io::Error::from(io::ErrorKind::ConnectionRefused),
            },
            ClientError::Io(io::Error::from(io::ErrorKind::UnexpectedEof)),
            // Our own certificates' folder unreadable: the server was not asked.
            ClientError::Tls("reading ca-cert.pem: No such file".into()),
        ];
        for e in &silent {
            assert!(!answered_but_refused(e), "{e}");
        }
    }

    #[test]
    fn backoff_doubles_from_100ms_to_at_most_10s() {
        let ms: Vec<u128> = (0..10).map(|a| backoff(a).as_millis()).collect();
        assert_eq!(
            ms,
            [100, 200, 400, 800, 1600, 3200, 6400, 10000, 10000, 10000]
        );
        assert_eq!(backoff(u32::MAX), BACKOFF_MAX);
    }

    #[test]
    fn a_dropped_connection_with_writes_unanswered_must_be_closed_by_the_server_first() {
        assert_eq!(after_drop(false, 1), AfterDrop::AwaitClose);
        assert_eq!(after_drop(false, 7), AfterDrop::AwaitClose);
        // Reads and flushes only: nothing can land late.
        assert_eq!(after_drop(false, 0), AfterDrop::Reopen);
        // The server closed it already: whatever it held is done.
        assert_eq!(after_drop(true, 3), AfterDrop::Reopen);
    }

    #[test]
    fn a_shutting_down_server_closes_every_connection() {
        let server = |errno| ClientError::Server {
            cmd: "NBD_CMD_WRITE",
            offset: 0,
            len: 4096,
            errno,
            message: String::new(),
        };
        assert!(shuts_down(&server(nbraid_nbd::proto::ESHUTDOWN)));
        // A failed request leaves the connection as it was.
        assert!(!shuts_down(&server(nbraid_nbd::proto::EIO)));
        assert!(!breaks_connection(&server(nbraid_nbd::proto::EIO)));
        assert!(breaks_connection(&ClientError::Disconnected("eof".into())));
    }
}
