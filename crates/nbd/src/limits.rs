//! What the server lets its clients hold: connections, requests and their memory, and time.
//!
//! Memory is budgeted twice: every request takes its cost (its payload, at least
//! [`REQUEST_COST_MIN`]) from its connection's budget and from the server's, before anything is
//! allocated for it, and gives both back once its reply is on the socket (a write's once its
//! data is in the export: what stays queued then is a 16-byte reply). So the server as a whole
//! never holds more than [`Limits::server_bytes_in_flight`] of requests, and one connection
//! never more than [`Limits::max_bytes_in_flight`] of it — a client that stops reading its
//! replies pins its own share and no more, until [`Limits::stall_timeout`] cuts it off.
//!
//! A write's payload arrives after its budget is taken, at the client's pace. So that slow
//! senders cannot hold the server's memory from the clients whose requests are complete,
//! payloads still arriving may together hold only [`Limits::arriving_bytes`] (three quarters of
//! the server's budget), and each must arrive within [`payload_time_allowed`]: the stall
//! timeout plus its length at [`Limits::payload_min_bytes_per_s`]. A *light* write (below)
//! does not wait for that part: light payloads hold at most the reserve together, so
//! arriving payloads never hold more than three quarters and a sixteenth.
//!
//! Clients that never read their replies hold their share until the stall timeout, and
//! enough of them together would hold the whole server budget: a request of any other client
//! would wait that long. So the budget is shared out fairly ([`crate::server_memory`]): a
//! connection holding part of it takes more only while what stays free is at least twice
//! what it then holds (unless it is alone), and a connection holding nothing takes any
//! request that fits: four such clients leave a third of the budget to the others. And part
//! of the server's budget, [`Limits::reserve_bytes`] (a sixteenth of it, less where the
//! largest request would no longer fit the rest), is kept for *light* requests: those of a
//! connection that holds, this request included, at most [`Limits::light_share_bytes`] of
//! the server's budget (the reserve split evenly over [`Limits::max_connections`]). Other
//! requests wait for the rest; a light one takes whichever it can have first. A connection holds at most its light share of the reserve, so the reserve
//! does not run out while `max_connections` connections hold it: a connection with nothing in
//! flight gets a small request through at once, however much the others hold. (Not quite
//! always: where so many connections are allowed that the share was raised to one minimal
//! request, or while requests of connections already cut off still run in the export, a
//! light request may wait for the reserve as for the rest.)

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{ready, Context, Poll};
use std::time::Duration;

use tokio::io::AsyncWrite;
use tokio::time::{Instant, Sleep};

use super::proto::{CMD_READ, CMD_WRITE, MAX_PAYLOAD};

/// Longest read or write served to a client that negotiated no block size (and so was never
/// told the 32 MiB maximum): nbdkit serves up to this, and the NBD project's own tests send
/// 47 MiB writes. Such a request is carried out in pieces of at most [`MAX_PAYLOAD`], the
/// export's limit; its memory is budgeted whole, as any request's.
pub(crate) const MAX_UNNEGOTIATED_PAYLOAD: u32 = 64 << 20;

/// Every request counts at least this many bytes against the memory budgets: requests without
/// a payload (FLUSH, TRIM, WRITE_ZEROES, ...) still cost a task, buffers and engine state.
pub const REQUEST_COST_MIN: u32 = 4096;

/// The default of [`Limits::spare_worker_min_len`]: through fio's nbd engine (QD 8, one
/// connection, 2 vCPUs) requests of 1 MiB ran 2–12% faster on a spare worker and of 2 MiB
/// 14–30%, but of 512 KiB 7–10% slower and 256 KiB reads 9% slower: below 1 MiB the copy
/// is shorter than the two wake-ups across threads it costs.
pub const DEFAULT_SPARE_WORKER_MIN_LEN: u32 = 1024 * 1024;

/// The default of [`Limits::busy_poll`]: long enough to catch a client on the same machine
/// that sends its next request as soon as it has read a reply (fio's nbd engine at QD 1),
/// short enough that a miss costs little (and misses make spins rarer).
pub const DEFAULT_BUSY_POLL: Duration = Duration::from_micros(30);

/// Server-wide and per-connection bounds.
///
/// [`Server::with_limits`](super::Server::with_limits) raises values below their minimum to it:
/// at least one connection and one request, a connection's budget of at least one maximal
/// payload (32 MiB), a server budget of at least one connection's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections served at once (in the transmission phase); a client beyond them is
    /// refused during the handshake with `NBD_REP_ERR_POLICY` and a message.
    pub max_connections: usize,
    /// Connections negotiating at once, counted apart from the served ones; a new one beyond
    /// them closes the one negotiating longest (see [`crate::admission`]).
    pub max_handshakes: usize,
    /// Requests of one connection being executed or waiting for their reply to be written.
    pub max_in_flight: usize,
    /// Request memory of one connection (see [`REQUEST_COST_MIN`]).
    pub max_bytes_in_flight: usize,
    /// Request memory of all connections together, shared out fairly among those that
    /// compete for it (of which [`Limits::reserve_bytes`] is kept for connections that hold
    /// little).
    pub server_bytes_in_flight: usize,
    /// A client that has not reached the transmission phase by then is disconnected.
    pub handshake_timeout: Duration,
    /// A connection with nothing in flight that sends no request for this long is closed
    /// (`None`: never; a kernel client with a mounted file system may be silent for hours).
    pub idle_timeout: Option<Duration>,
    /// A client that accepts no byte of its replies, or sends no byte of a request it has
    /// begun, for this long is disconnected, releasing what its requests held.
    pub stall_timeout: Duration,
    /// A write payload must arrive at this rate (after `stall_timeout` of grace, see
    /// [`payload_time_allowed`]), or the connection is closed.
    pub payload_min_bytes_per_s: u64,
    /// How long a connection's reader with nothing in flight spins on its socket for the
    /// next request before sleeping (see [`crate::busy_poll`]); zero: never.
    pub busy_poll: Duration,
    /// Reads and writes at least this long run on a spare I/O worker (one serving no
    /// connection, see [`crate::workers`]) when the server has one, so the connection's own
    /// worker receives the next request meanwhile; `None`: always on the connection's worker.
    pub spare_worker_min_len: Option<u32>,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_connections: 128,
            max_handshakes: 64,
            max_in_flight: 256,
            max_bytes_in_flight: 128 << 20,
            server_bytes_in_flight: 512 << 20,
            handshake_timeout: Duration::from_secs(10),
            idle_timeout: None,
            stall_timeout: Duration::from_secs(60),
            payload_min_bytes_per_s: 256 << 10,
            busy_poll: DEFAULT_BUSY_POLL,
            spare_worker_min_len: Some(DEFAULT_SPARE_WORKER_MIN_LEN),
        }
    }
}

impl Limits {
    /// The limits with every value raised to its minimum (see [`Limits`]).
    pub fn normalized(self) -> Limits {
        let conn = self.max_bytes_in_flight.max(MAX_PAYLOAD as usize);
        Limits {
            max_connections: self.max_connections.max(1),
            max_handshakes: self.max_handshakes.max(1),
            max_in_flight: self.max_in_flight.max(1),
            payload_min_bytes_per_s: self.payload_min_bytes_per_s.max(1),
            max_bytes_in_flight: conn,
            server_bytes_in_flight: self.server_bytes_in_flight.max(conn),
            ..self
        }
    }
}

impl Limits {
    /// How much of the server's budget write payloads still arriving may hold together:
    /// three quarters of it, at least one maximal payload (a server budget of one payload
    /// keeps no reserve).
    pub fn arriving_bytes(&self) -> usize {
        let reserve = self.server_bytes_in_flight / 4;
        (self.server_bytes_in_flight - reserve)
            .max(MAX_PAYLOAD as usize)
            .min(self.server_bytes_in_flight)
    }
}

impl Limits {
    /// The longest read or write a connection may send: [`MAX_PAYLOAD`], or for a client
    /// that negotiated no block size up to [`MAX_UNNEGOTIATED_PAYLOAD`], never more than its
    /// own or the arriving payloads' budget, so that a request can always get its memory.
    pub(crate) fn largest_request_bytes(&self) -> u32 {
        let budget = self.max_bytes_in_flight.min(self.arriving_bytes());
        let budget = u32::try_from(budget).unwrap_or(u32::MAX);
        budget.clamp(MAX_PAYLOAD, MAX_UNNEGOTIATED_PAYLOAD)
    }

    /// The part of the server's budget only light requests may take (see the module's
    /// documentation): a sixteenth of it, but never so much that the largest request no
    /// longer fits the rest (it would wait forever), and none where it would not hold one
    /// request of [`REQUEST_COST_MIN`].
    pub fn reserve_bytes(&self) -> usize {
        let largest = self.largest_request_bytes() as usize;
        let reserve = (self.server_bytes_in_flight / 16)
            .min(self.server_bytes_in_flight.saturating_sub(largest));
        if reserve < REQUEST_COST_MIN as usize {
            0
        } else {
            reserve
        }
    }

    /// How much of the server's budget a connection may hold, a request included, for that
    /// request to be light: the reserve split evenly over `max_connections`, at least
    /// [`REQUEST_COST_MIN`]; zero without a reserve.
    pub fn light_share_bytes(&self) -> usize {
        match self.reserve_bytes() {
            0 => 0,
            reserve => (reserve / self.max_connections.max(1)).max(REQUEST_COST_MIN as usize),
        }
    }
}

/// Whether a request costing `cost_bytes`, of a connection already holding `held_bytes` of
/// the server's budget, is light: it may take the reserve. Then the connection holds at most
/// `light_share_bytes` while it holds any of the reserve, so the connections together never
/// need more of it than the reserve holds.
pub(crate) fn is_light(held_bytes: usize, cost_bytes: u32, light_share_bytes: usize) -> bool {
    held_bytes.saturating_add(cost_bytes as usize) <= light_share_bytes
}

/// How long a write payload of `len_bytes` may take to arrive: `grace` (the stall timeout)
/// plus its length at `min_bytes_per_s`. A client trickling a byte now and then to keep a
/// large payload's budget is closed after this, whatever its pace.
pub fn payload_time_allowed(len_bytes: u64, min_bytes_per_s: u64, grace: Duration) -> Duration {
    let at_rate_ms = len_bytes.saturating_mul(1000) / min_bytes_per_s.max(1);
    grace.saturating_add(Duration::from_millis(at_rate_ms))
}

/// What a request costs in the memory budgets.
pub(crate) fn request_cost(typ: u16, length: u32) -> u32 {
    match typ {
        CMD_READ | CMD_WRITE => length.max(REQUEST_COST_MIN),
        _ => REQUEST_COST_MIN,
    }
}

/// When a connection last did something, for the idle clock: milliseconds since its start.
pub(crate) struct Activity {
    start: Instant,
    last_ms: AtomicU64,
}

impl Activity {
    pub fn new() -> Self {
        Activity {
            start: Instant::now(),
            last_ms: AtomicU64::new(0),
        }
    }

    /// Records activity now.
    pub fn touch(&self) {
        let ms = self.start.elapsed().as_millis() as u64;
        self.last_ms.fetch_max(ms, Ordering::Relaxed);
    }

    /// When activity was last recorded.
    pub fn last(&self) -> Instant {
        self.start + Duration::from_millis(self.last_ms.load(Ordering::Relaxed))
    }
}

/// A writer that fails with `TimedOut` once the peer has accepted no byte for `limit`: a
/// client that stops reading its replies is cut off instead of holding its requests' memory
/// forever.
pub(crate) struct StallGuard<W> {
    inner: W,
    limit: Duration,
    /// Armed while the inner writer is blocked; reset (not reallocated) when armed again.
    timer: Pin<Box<Sleep>>,
    armed: bool,
}

impl<W> StallGuard<W> {
    pub fn new(inner: W, limit: Duration) -> Self {
        StallGuard {
            inner,
            limit,
            timer: Box::pin(tokio::time::sleep(limit)),
            armed: false,
        }
    }

    /// Called when the inner writer is pending: starts the clock if it is not running and
    /// fails once it has run out.
    fn blocked<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        if !self.armed {
            self.armed = true;
            self.timer.as_mut().reset(Instant::now() + self.limit);
        }
        ready!(self.timer.as_mut().poll(cx));
        Poll::Ready(Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!(
                "the client accepted no reply bytes for {} s",
                self.limit.as_secs()
            ),
        )))
    }

    fn progress<T>(&mut self, r: Poll<io::Result<T>>, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        match r {
            Poll::Pending => self.blocked(cx),
            Poll::Ready(r) => {
                self.armed = false;
                Poll::Ready(r)
            }
        }
    }
}

impl<W: AsyncWrite + Unpin> AsyncWrite for StallGuard<W> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let r = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.progress(r, cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let r = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.progress(r, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let r = Pin::new(&mut this.inner).poll_flush(cx);
        this.progress(r, cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let r = Pin::new(&mut this.inner).poll_shutdown(cx);
        this.progress(r, cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    const BIG: usize = MAX_PAYLOAD as usize;

    #[test]
    fn limits_are_raised_to_their_minimums() {
        let l = Limits {
            max_connections: 0,
            max_in_flight: 0,
            max_bytes_in_flight: 1,
            server_bytes_in_flight: 1,
            ..Limits::default()
        }
        .normalized();
        assert_eq!(l.max_connections, 1);
        assert_eq!(l.max_in_flight, 1);
        assert_eq!(l.max_bytes_in_flight, MAX_PAYLOAD as usize);
        assert_eq!(l.server_bytes_in_flight, MAX_PAYLOAD as usize);
        assert_eq!(Limits::default().normalized(), Limits::default());
    }

    #[test]
    fn payloads_get_their_length_at_the_minimum_rate_plus_the_grace() {
        let grace = Duration::from_secs(60);
        assert_eq!(payload_time_allowed(0, 1, grace), grace);
        assert_eq!(
            payload_time_allowed(32 << 20, 256 << 10, grace),
            Duration::from_secs(60 + 128)
        );
        assert_eq!(
            payload_time_allowed(1 << 20, 1 << 20, Duration::from_millis(500)),
            Duration::from_millis(1500)
        );
        assert!(payload_time_allowed(u64::MAX, 1, grace) > Duration::from_secs(1 << 40));
    }

    #[test]
    fn arriving_payloads_leave_a_quarter_of_the_budget_to_complete_requests() {
        let l = Limits::default();
        assert_eq!(l.arriving_bytes(), 384 << 20);
        let small = Limits {
            server_bytes_in_flight: MAX_PAYLOAD as usize,
            ..l
        };
        assert_eq!(small.arriving_bytes(), MAX_PAYLOAD as usize);
    }

    #[test]
    fn the_reserve_is_a_sixteenth_split_over_the_connections() {
        let l = Limits::default();
        assert_eq!(l.reserve_bytes(), 32 << 20);
        assert_eq!(l.light_share_bytes(), 256 << 10);
        // The largest request (32 MiB here) must still fit the rest.
        let tight = Limits {
            max_bytes_in_flight: BIG,
            server_bytes_in_flight: BIG + (1 << 20),
            ..l
        };
        assert_eq!(tight.reserve_bytes(), 1 << 20);
        assert_eq!(tight.light_share_bytes(), (1 << 20) / 128);
        // One payload's budget keeps no reserve, and no request is light.
        let least = Limits {
            max_bytes_in_flight: 0,
            server_bytes_in_flight: 0,
            ..l
        }
        .normalized();
        assert_eq!(least.reserve_bytes(), 0);
        assert_eq!(least.light_share_bytes(), 0);
        assert!(!is_light(0, REQUEST_COST_MIN, least.light_share_bytes()));
        // Many connections: each may still hold one minimal request of the reserve.
        let many = Limits {
            max_connections: 1 << 20,
            ..l
        };
        assert_eq!(many.light_share_bytes(), REQUEST_COST_MIN as usize);
    }

    #[test]
    fn a_request_is_light_while_its_connection_holds_at_most_its_share() {
        let share = 256 << 10;
        assert!(is_light(0, 4096, share));
        assert!(is_light(0, 256 << 10, share));
        assert!(is_light(252 << 10, 4096, share));
        assert!(!is_light(252 << 10, 8192, share));
        assert!(!is_light(0, BIG as u32, share));
        assert!(!is_light(usize::MAX, 4096, share));
        assert!(!is_light(0, 4096, 0));
    }

    #[test]
    fn payload_free_requests_cost_the_minimum() {
        use super::super::proto::*;
        assert_eq!(request_cost(CMD_READ, 1 << 20), 1 << 20);
        assert_eq!(request_cost(CMD_WRITE, 512), REQUEST_COST_MIN);
        for typ in [CMD_TRIM, CMD_WRITE_ZEROES, CMD_FLUSH, CMD_CACHE] {
            assert_eq!(request_cost(typ, u32::MAX), REQUEST_COST_MIN);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_writer_nobody_reads_times_out_and_a_slow_reader_does_not() {
        // Nobody reads: the pipe fills, then the guard gives up after the limit.
        let (a, _b) = tokio::io::duplex(64);
        let mut w = StallGuard::new(a, Duration::from_secs(5));
        let err = w.write_all(&[0u8; 1024]).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);

        // A reader that takes a byte every 4 s (under the limit) gets everything.
        let (a, mut b) = tokio::io::duplex(1);
        let mut w = StallGuard::new(a, Duration::from_secs(5));
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            let mut one = [0u8; 1];
            while b.read_exact(&mut one).await.is_ok() {
                got.push(one[0]);
                tokio::time::sleep(Duration::from_secs(4)).await;
            }
            got
        });
        w.write_all(&[1, 2, 3, 4, 5]).await.unwrap();
        w.shutdown().await.unwrap();
        drop(w);
        assert_eq!(reader.await.unwrap(), vec![1, 2, 3, 4, 5]);
    }
}
