//! A remote member's connections: used in turn, each dropped when it times out or breaks and
//! re-opened in the background with exponential backoff.

use std::future::Future;
use std::io;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Weak};
use std::time::Duration;

use nbraid_nbd::client::{Client, ClientError, ConnectOptions, ExportInfo, Uri};
use parking_lot::Mutex;
use tokio::runtime::Handle;

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
}

struct Slot {
    state: Mutex<SlotState>,
    reconnecting: AtomicBool,
}

pub(crate) struct Connections {
    uri_text: String,
    uri: Uri,
    info: ExportInfo,
    len: u64,
    timeout: Duration,
    rt: Handle,
    slots: Vec<Slot>,
    next: AtomicUsize,
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

impl Connections {
    /// Driven by runtime `rt`, which the clients were opened in.
    pub fn new(
        rt: Handle,
        uri_text: &str,
        uri: Uri,
        info: ExportInfo,
        len: u64,
        timeout: Duration,
        clients: Vec<Client>,
    ) -> Arc<Connections> {
        let slots = clients
            .into_iter()
            .map(|c| Slot {
                state: Mutex::new(SlotState {
                    generation: 0,
                    client: Some(c),
                }),
                reconnecting: AtomicBool::new(false),
            })
            .collect();
        Arc::new(Connections {
            uri_text: uri_text.to_string(),
            uri,
            info,
            len,
            timeout,
            rt,
            slots,
            next: AtomicUsize::new(0),
        })
    }

    pub fn info(&self) -> &ExportInfo {
        &self.info
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

    /// Runs `op` on the next open connection, bounded by the timeout. A timeout or a broken
    /// connection drops that connection and starts re-opening it.
    pub fn run<T, F, Fut>(self: &Arc<Self>, op: F) -> impl Future<Output = io::Result<T>> + Send
    where
        T: Send,
        F: FnOnce(Client) -> Fut + Send,
        Fut: Future<Output = Result<T, ClientError>> + Send,
    {
        let this = self.clone();
        async move {
            let Some((i, generation, client)) = this.pick() else {
                return Err(io::Error::new(
                    io::ErrorKind::NotConnected,
                    format!("{}: not connected (re-opening)", this.uri_text),
                ));
            };
            match tokio::time::timeout(this.timeout, op(client)).await {
                Ok(Ok(v)) => Ok(v),
                Ok(Err(e)) => {
                    if breaks_connection(&e) {
                        this.broken(i, generation);
                    }
                    Err(e.into())
                }
                Err(_) => {
                    this.broken(i, generation);
                    Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("{}: no reply within {:?}", this.uri_text, this.timeout),
                    ))
                }
            }
        }
    }

    /// The next open connection, in turn.
    fn pick(self: &Arc<Self>) -> Option<(usize, u64, Client)> {
        let n = self.slots.len();
        let start = self.next.fetch_add(1, Relaxed);
        for k in 0..n {
            let i = (start + k) % n;
            let s = self.slots[i].state.lock();
            match &s.client {
                Some(c) if !c.is_closed() => return Some((i, s.generation, c.clone())),
                Some(_) => {
                    let generation = s.generation;
                    drop(s);
                    self.broken(i, generation);
                }
                None => {}
            }
        }
        None
    }

    /// Drops connection `i` if it is still the one of `generation`, and re-opens it.
    fn broken(self: &Arc<Self>, i: usize, generation: u64) {
        let mut s = self.slots[i].state.lock();
        if s.generation != generation || s.client.is_none() {
            return;
        }
        let old = s.client.take();
        s.generation += 1;
        drop(s);
        tracing::warn!("{}: connection {i} failed; re-opening it", self.uri_text);
        if let Some(c) = old {
            // Bounded: a server that stopped answering may never read the disconnect.
            let limit = self.timeout;
            self.rt.spawn(async move {
                let _ = tokio::time::timeout(limit, c.disconnect()).await;
            });
        }
        if !self.slots[i].reconnecting.swap(true, Relaxed) {
            self.rt.spawn(reopen(Arc::downgrade(self), i));
        }
    }
}

/// Re-opens connection `i` with backoff until it works or the member is gone.
async fn reopen(weak: Weak<Connections>, i: usize) {
    for attempt in 0u32.. {
        tokio::time::sleep(backoff(attempt)).await;
        let Some(this) = weak.upgrade() else { return };
        let why = match tokio::time::timeout(this.timeout, connect(&this.uri)).await {
            Ok(Ok(c)) if c.size() >= this.len && !c.info().read_only() => {
                let mut s = this.slots[i].state.lock();
                s.client = Some(c);
                s.generation += 1;
                this.slots[i].reconnecting.store(false, Relaxed);
                tracing::info!(
                    "{}: connection {i} re-opened after {} attempts",
                    this.uri_text,
                    attempt + 1
                );
                return;
            }
            Ok(Ok(c)) => {
                c.disconnect().await;
                format!(
                    "the export is now {} bytes{} (the member needs {} writable)",
                    c.size(),
                    if c.info().read_only() {
                        ", read-only"
                    } else {
                        ""
                    },
                    this.len
                )
            }
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("no answer within {:?}", this.timeout),
        };
        if attempt < 3 || attempt % 20 == 0 {
            tracing::warn!(
                "{}: re-opening connection {i} failed (attempt {}): {why}; next in {:?}",
                this.uri_text,
                attempt + 1,
                backoff(attempt + 1)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_100ms_to_at_most_10s() {
        let ms: Vec<u128> = (0..10).map(|a| backoff(a).as_millis()).collect();
        assert_eq!(
            ms,
            [100, 200, 400, 800, 1600, 3200, 6400, 10000, 10000, 10000]
        );
        assert_eq!(backoff(u32::MAX), BACKOFF_MAX);
    }
}
