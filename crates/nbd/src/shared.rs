//! What every connection of a server shares: the exports, the bounds, the server-wide
//! budgets and counters, and the shutdown signal. The server owns it; the handshake and the
//! transmission phase read it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use tokio::sync::{watch, Notify, Semaphore};
use tokio::task::AbortHandle;

use crate::admission::Admission;
use crate::export::Export;
use crate::limits::Limits;
use crate::log_every::LogEvery;
use crate::server_memory::ServerMemory;
use crate::workers::Workers;
use crate::write_gate::WriteGate;

/// At most one log line of connections ended in their handshake (and one of refusals) per
/// this long.
const FLOOD_LOG_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

pub(crate) struct ExportEntry {
    pub name: String,
    pub export: Arc<dyn Export>,
    /// Preferred block size as advertised (a power of two).
    pub preferred: u32,
    /// Passed by every write-type request (see [`crate::write_gate`]).
    pub gate: Arc<WriteGate>,
}

pub(crate) struct Shared {
    pub exports: Vec<ExportEntry>,
    /// Normalized (every value at least its minimum).
    pub limits: Limits,
    /// Request memory of all connections together (`limits.server_bytes_in_flight`), shared
    /// out fairly, with a reserve for light requests.
    pub memory: Arc<ServerMemory>,
    /// The part of `budget` write payloads may hold while they are still arriving
    /// ([`Limits::arriving_bytes`]): the rest stays for requests that are complete, so slow
    /// senders cannot starve everyone else.
    pub arriving: Arc<Semaphore>,
    /// Places of negotiating and of served connections.
    pub admission: Arc<Admission>,
    pub shutdown: watch::Sender<bool>,
    /// Connections counted from accept until their task ends (negotiating or served; their
    /// places are counted by `admission`).
    pub connections: watch::Sender<usize>,
    /// Abort handles of running connection tasks, by connection id.
    pub tasks: Mutex<HashMap<u64, AbortHandle>>,
    pub next_id: AtomicU64,
    /// Requests started in an export and not finished, of every connection (also of
    /// connections already cut off).
    pub requests: AtomicUsize,
    /// Woken when `requests` drops to zero.
    pub requests_done: Notify,
    /// Refusals running now (at most `MAX_REFUSING`).
    pub refusing: AtomicUsize,
    /// Where connections run, when not on the accepting runtime.
    pub workers: OnceLock<Workers>,
    /// Connections ended in their handshake (a scanner, a wrong CA, a wrong export name):
    /// a client failing one after another is one log line, then a count per period, not a
    /// line each.
    pub handshake_failures: Mutex<LogEvery>,
    /// Connections refused over `max_connections`, likewise.
    pub refusals: Mutex<LogEvery>,
}

impl Shared {
    /// The state of a server over `exports` with `limits` (normalized).
    pub fn new(exports: Vec<ExportEntry>, limits: Limits) -> Self {
        Shared {
            exports,
            limits,
            memory: ServerMemory::new(&limits),
            arriving: Arc::new(Semaphore::new(limits.arriving_bytes())),
            admission: Admission::new(limits.max_connections, limits.max_handshakes),
            shutdown: watch::channel(false).0,
            connections: watch::channel(0).0,
            tasks: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            requests: AtomicUsize::new(0),
            requests_done: Notify::new(),
            refusing: AtomicUsize::new(0),
            workers: OnceLock::new(),
            handshake_failures: Mutex::new(LogEvery::new(FLOOD_LOG_EVERY)),
            refusals: Mutex::new(LogEvery::new(FLOOD_LOG_EVERY)),
        }
    }

    /// Export index for a client-supplied name; the empty name means the first export.
    pub fn lookup(&self, name: &[u8]) -> Option<usize> {
        if let Some(i) = self.exports.iter().position(|e| e.name.as_bytes() == name) {
            return Some(i);
        }
        (name.is_empty() && !self.exports.is_empty()).then_some(0)
    }
}

/// Resolves once the server is shutting down (or gone).
pub(crate) async fn shutdown_signalled(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}

/// What a client beyond `max_connections` is told.
pub(crate) fn too_many_connections(shared: &Shared) -> String {
    let max = shared.limits.max_connections;
    format!(
        "nbraidd: too many connections: at most {max} are served at once \
         ([daemon] max_connections); try again later"
    )
}

/// Counts one request as running in an export, server-wide, until dropped.
pub(crate) struct RequestGuard {
    shared: Arc<Shared>,
}

impl RequestGuard {
    pub fn new(shared: &Arc<Shared>) -> Self {
        shared.requests.fetch_add(1, Ordering::AcqRel);
        RequestGuard {
            shared: shared.clone(),
        }
    }
}

impl Drop for RequestGuard {
    fn drop(&mut self) {
        if self.shared.requests.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.shared.requests_done.notify_waiters();
        }
    }
}
