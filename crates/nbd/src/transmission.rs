//! Transmission phase: one reader (this task) decodes and validates requests, each valid
//! request runs as its own task, and one writer task sends replies in completion order.
//!
//! Memory is bounded per connection and server-wide (see [`crate::limits`]): a request slot
//! and the request's cost in both byte budgets are taken before a write payload is allocated
//! or a read is started, and released once the reply has been handed to the socket (a write's
//! bytes as soon as its data is in the export). A light request (its connection holds little)
//! may take the server's share from the reserve when the rest is held.
//!
//! One request's way through the reader, in [`Session::take`]: a slot, validation (a bad one
//! is answered at once), its memory, its payload, then [`Session::dispatch`] runs it inline,
//! as a task, or (a long read or write) as a task on a spare worker ([`crate::workers`]).

use std::io;
use std::pin::Pin;
use std::sync::Arc;

use tokio::io::{AsyncBufRead, AsyncRead, AsyncWrite, BufReader};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};

use crate::busy_poll::BusyPoll;
use crate::error::ConnError;
use crate::execute::{execute_or_fail, WriteData};
use crate::handshake::Negotiated;
use crate::limits::{is_light, request_cost, Activity, Limits, StallGuard};
use crate::payload::{discard, read_into, read_payload, skip, wrong_buffer_length, PayloadClock};
use crate::proto::*;
use crate::replies::{BytesHeld, Outgoing, Replies, BATCH_REPLIES};
use crate::reply_head::error_reply;
use crate::request::{validate, Conn, HeaderReader, MAX_DISCARD};
use crate::server_memory::ServerBytes;
use crate::shared::{shutdown_signalled, RequestGuard, Shared};
use crate::unaligned::is_unaligned;

/// Requests up to this length get one inline poll before being spawned; writes of any length
/// do (see [`Session::dispatch`]).
const INLINE_MAX: u32 = 64 * 1024;

/// What the reader's clock found when it went off.
#[derive(Debug, PartialEq, Eq)]
enum Clock {
    /// Nothing in flight, no request for `idle_timeout`: close.
    Idle,
    /// Part of a header and then nothing for `stall_timeout`.
    Stalled,
    /// Not yet: look again then.
    Later(Instant),
}

/// What the reader's clock makes of `now`: a partial header stalls after `stall_timeout`
/// without progress; with an idle timeout, a connection with nothing in flight and no request
/// since `last_request` is idle after it.
fn clock_verdict(
    now: Instant,
    limits: &Limits,
    header_since: Option<Instant>,
    in_flight: bool,
    last_request: Option<Instant>,
) -> Clock {
    if let Some(progress) = header_since {
        let due = progress + limits.stall_timeout;
        return if now >= due {
            Clock::Stalled
        } else {
            Clock::Later(due)
        };
    }
    match (limits.idle_timeout, last_request) {
        // Requests or replies in flight: not idle; look again later.
        (Some(idle), Some(_)) if in_flight => Clock::Later(now + idle),
        (Some(idle), Some(last)) => {
            let due = last + idle;
            if now >= due {
                Clock::Idle
            } else {
                Clock::Later(due)
            }
        }
        _ => Clock::Later(now + limits.stall_timeout),
    }
}

/// Why the reader stopped.
enum Stop {
    /// The client disconnected, broke the protocol, stalled or idled, or its replies'
    /// writer is gone.
    Ended(Result<(), ConnError>),
    /// The server is shutting down: refuse what the client already sent.
    Shutdown,
}

/// One connection's reader: the request stream, the connection's budgets, and the replies
/// completed inline that wait to go out together.
struct Session<R, W> {
    shared: Arc<Shared>,
    conn: Arc<Conn>,
    /// Normalized by the server: every value at least its minimum.
    limits: Limits,
    r: BufReader<BusyPoll<R>>,
    hdr: HeaderReader,
    /// Goes off at least every idle (or stall) timeout to look for idleness or a stalled
    /// header; it is reset only then, never per request.
    clock: Pin<Box<Sleep>>,
    /// Requests of this connection in flight (`limits.max_in_flight`).
    slots: Arc<Semaphore>,
    /// Request memory of this connection (`limits.max_bytes_in_flight`).
    budget: Arc<Semaphore>,
    activity: Option<Arc<Activity>>,
    tx: Arc<Replies<StallGuard<W>>>,
    /// Replies of requests completed inline, written together once no more requests are
    /// buffered (or before anything that may wait).
    ready: Vec<Outgoing>,
}

/// Serves requests until the client disconnects, breaks the protocol, stalls, idles past the
/// idle timeout, or the server shuts down; then waits for requests in flight and their
/// replies.
pub(crate) async fn serve<R, W>(
    shared: &Arc<Shared>,
    neg: Negotiated,
    r: BufReader<BusyPoll<R>>,
    w: W,
    shutdown: &mut watch::Receiver<bool>,
) -> Result<(), ConnError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let limits = shared.limits;
    let activity = limits.idle_timeout.map(|_| Arc::new(Activity::new()));
    let (tx, write_loop) = Replies::new(StallGuard::new(w, limits.stall_timeout), activity.clone());
    // Aborted with this future if the connection is cut off at shutdown.
    let mut writer = AbortOnDrop(tokio::spawn(write_loop));
    let first_wait = limits.idle_timeout.unwrap_or(limits.stall_timeout);
    let mut s = Session {
        conn: Arc::new(Conn::new(&shared.exports[neg.export], &neg, &limits)),
        shared: shared.clone(),
        limits,
        r,
        hdr: HeaderReader::new(),
        clock: Box::pin(tokio::time::sleep(first_wait)),
        slots: Arc::new(Semaphore::new(limits.max_in_flight)),
        budget: Arc::new(Semaphore::new(limits.max_bytes_in_flight)),
        activity,
        tx,
        ready: Vec::new(),
    };
    let stop = loop {
        s.send_ready_unless_more_buffered();
        let idle = s.ready.is_empty() && s.nothing_in_flight();
        s.r.get_mut().set_idle(idle);
        let next = s.next_request(shutdown).await;
        s.r.get_mut().set_idle(false);
        let req = match next {
            Ok(req) => req,
            Err(stop) => break stop,
        };
        if let Err(stop) = s.take(req).await {
            break stop;
        }
    };
    let result = s.finish(stop).await;
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

impl<R, W> Session<R, W>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    /// Sends the inline replies once no whole request header is buffered (or many wait).
    fn send_ready_unless_more_buffered(&mut self) {
        if !self.ready.is_empty()
            && (self.r.buffer().len() < REQUEST_HEADER_LEN || self.ready.len() >= BATCH_REPLIES)
        {
            self.tx.send_all(&mut self.ready);
        }
    }

    /// No request of this connection runs or waits for its reply to be written.
    fn nothing_in_flight(&self) -> bool {
        self.slots.available_permits() == self.limits.max_in_flight
    }

    /// The next request header (not `NBD_CMD_DISC`), watching shutdown, the replies' writer
    /// and the clock meanwhile.
    async fn next_request(
        &mut self,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Result<RequestHeader, Stop> {
        if let Some(quick) = self.buffered_header(shutdown) {
            return quick;
        }
        loop {
            let got = tokio::select! {
                biased;
                _ = shutdown_signalled(shutdown) => return Err(Stop::Shutdown),
                _ = self.tx.closed() => return Err(Stop::Ended(Ok(()))),
                res = self.hdr.read(&mut self.r) => res,
                _ = self.clock.as_mut() => {
                    self.clock_went_off()?;
                    continue;
                }
            };
            match got {
                Ok(true) => {}
                Ok(false) => return Err(Stop::Ended(Ok(()))),
                Err(e) => return Err(Stop::Ended(Err(e))),
            }
            let raw = self.hdr.take();
            return self.parse_header(raw);
        }
    }

    /// The next header without the select above, when it is whole in the reader's buffer
    /// (the requests of a burst after the first): the same checks in the same order, none
    /// of the futures. `None`: the select decides.
    fn buffered_header(
        &mut self,
        shutdown: &watch::Receiver<bool>,
    ) -> Option<Result<RequestHeader, Stop>> {
        let buffered = self.r.buffer();
        if self.hdr.filled > 0 || buffered.len() < REQUEST_HEADER_LEN {
            return None;
        }
        if *shutdown.borrow() {
            return Some(Err(Stop::Shutdown));
        }
        if self.tx.is_closed() {
            return Some(Err(Stop::Ended(Ok(()))));
        }
        let mut raw = [0; REQUEST_HEADER_LEN];
        raw.copy_from_slice(&buffered[..REQUEST_HEADER_LEN]);
        Pin::new(&mut self.r).consume(REQUEST_HEADER_LEN);
        Some(self.parse_header(raw))
    }

    /// A whole header read: the request, unless it is a disconnect or broken.
    fn parse_header(&mut self, raw: [u8; REQUEST_HEADER_LEN]) -> Result<RequestHeader, Stop> {
        if let Some(a) = &self.activity {
            a.touch();
        }
        let Some(req) = RequestHeader::parse(&raw) else {
            let magic = u32::from_be_bytes([raw[0], raw[1], raw[2], raw[3]]);
            return Err(Stop::Ended(Err(ConnError::BadRequestMagic(magic))));
        };
        if req.typ == CMD_DISC {
            return Err(Stop::Ended(Ok(())));
        }
        Ok(req)
    }

    /// Ends the connection when the clock finds it idle or stalled; sets it again otherwise.
    fn clock_went_off(&mut self) -> Result<(), Stop> {
        let limits = &self.limits;
        let header_since = (self.hdr.filled > 0).then_some(self.hdr.last_progress);
        let in_flight = !self.nothing_in_flight();
        let last_request = self.activity.as_ref().map(|a| a.last());
        match clock_verdict(
            Instant::now(),
            limits,
            header_since,
            in_flight,
            last_request,
        ) {
            Clock::Idle => {
                let idle = limits.idle_timeout.unwrap_or_default();
                tracing::info!("closing a connection idle for {idle:?}");
                Err(Stop::Ended(Ok(())))
            }
            Clock::Stalled => Err(Stop::Ended(Err(ConnError::Stalled(
                "a request header",
                limits.stall_timeout.as_secs(),
            )))),
            Clock::Later(at) => {
                self.clock.as_mut().reset(at);
                Ok(())
            }
        }
    }

    /// Takes one request in: a slot, validation, its memory, its payload; then runs it.
    async fn take(&mut self, req: RequestHeader) -> Result<(), Stop> {
        let slot = acquire(&self.slots, 1, &self.tx, &mut self.ready).await?;
        if let Err((errno, msg)) = validate(&self.conn, &req) {
            return self.reject(req, slot, errno, msg).await;
        }
        let bytes = self.reserve_memory(&req).await?;
        let payload = if req.typ == CMD_WRITE && req.length > 0 {
            let payload = self.receive_payload(&req).await;
            drop(bytes.arriving);
            payload.map_err(|e| Stop::Ended(Err(e)))?
        } else {
            WriteData::None
        };
        self.dispatch(req, payload, slot, bytes.held).await;
        Ok(())
    }

    /// Answers an invalid request with its error, after reading and dropping its payload.
    async fn reject(
        &mut self,
        req: RequestHeader,
        slot: OwnedSemaphorePermit,
        errno: u32,
        msg: &'static str,
    ) -> Result<(), Stop> {
        if req.typ == CMD_WRITE {
            if req.length > MAX_DISCARD {
                return Err(Stop::Ended(Err(ConnError::PayloadTooLong(req.length))));
            }
            self.tx.send_all(&mut self.ready);
            let clock = PayloadClock::start(&self.limits, req.length.into());
            if let Err(e) = discard(&mut self.r, req.length.into(), &clock).await {
                return Err(Stop::Ended(Err(e)));
            }
        }
        tracing::debug!(cmd = command_name(req.typ), errno, msg, "rejected request");
        self.ready.push(Outgoing {
            head: error_reply(self.conn.structured, req.cookie, errno, msg),
            payload: Vec::new(),
            _slot: Some(slot),
            _bytes: None,
        });
        Ok(())
    }

    /// The request's memory: the connection's share first, then the server's, so a
    /// connection waits for the server budget with at most its own share held. A payload
    /// still to arrive holds the server's budget at the client's pace: only the part of it
    /// set aside for arriving payloads (see `Limits::arriving_bytes`).
    async fn reserve_memory(&mut self, req: &RequestHeader) -> Result<Reserved, Stop> {
        let cost = request_cost(req.typ, req.length);
        let conn_bytes = acquire(&self.budget, cost, &self.tx, &mut self.ready).await?;
        // Every other byte this connection holds of its budget it holds of the server's too:
        // this reader takes one request's memory at a time.
        let taken = self
            .limits
            .max_bytes_in_flight
            .saturating_sub(self.budget.available_permits());
        let held = taken.saturating_sub(cost as usize);
        let light = is_light(held, cost, self.limits.light_share_bytes());
        // A payload already in the reader's buffer arrives without waiting for the client.
        // A light one is bounded by its connection's light share, so light payloads still
        // arriving hold at most the reserve together: slow senders holding the whole
        // arriving budget must not hold up a small write whose payload is a packet behind.
        let buffered = self.r.buffer().len() >= req.length as usize;
        let arriving = if req.typ == CMD_WRITE && req.length > 0 && !buffered && !light {
            Some(acquire(&self.shared.arriving, cost, &self.tx, &mut self.ready).await?)
        } else {
            None
        };
        let server_bytes = self.server_bytes(cost, light).await?;
        Ok(Reserved {
            held: BytesHeld {
                _conn: conn_bytes,
                _server: server_bytes,
            },
            arriving,
        })
    }

    /// `cost` bytes of the server's budget, as [`crate::server_memory`] shares it out among
    /// the connections: of its general part, or for a light request (see [`crate::limits`])
    /// of the reserve, once this connection may take them.
    async fn server_bytes(&mut self, cost: u32, light: bool) -> Result<ServerBytes, Stop> {
        let memory = self.shared.memory.clone();
        // Every byte of this connection's budget but this request's is held of the server's
        // too; looked at anew whenever it asks again, as its replies go out meanwhile.
        let (budget, max) = (&self.budget, self.limits.max_bytes_in_flight);
        let held = move || {
            max.saturating_sub(budget.available_permits())
                .saturating_sub(cost as usize)
        };
        if let Some(got) = memory.try_take(held(), cost, light) {
            return Ok(got);
        }
        self.tx.send_all(&mut self.ready);
        tokio::select! {
            biased;
            got = memory.take(held, cost, light) => Ok(got),
            _ = self.tx.closed() => Err(Stop::Ended(Ok(()))),
        }
    }

    /// Reads a write's payload (its length validated, its memory taken): into the export's
    /// own buffer when it offers one, else into plain bytes (always for an unaligned write,
    /// patched into whole blocks later, and one longer than the export takes, cut in pieces).
    async fn receive_payload(&mut self, req: &RequestHeader) -> Result<WriteData, ConnError> {
        let len = req.length as usize;
        let buffered = self.r.buffer().len() >= len;
        if !buffered {
            // Reading the payload may wait for the client: replies go out first.
            self.tx.send_all(&mut self.ready);
        }
        let conn = &self.conn;
        let own =
            if is_unaligned(conn.min_block, req.offset, req.length) || req.length > MAX_PAYLOAD {
                None
            } else {
                conn.export.clone().incoming_write(req.offset, len)
            };
        match own {
            Some(mut incoming) if buffered => {
                // All there: copied out of the buffer, no clock and no read to set up.
                let to = incoming.as_mut_slice();
                if to.len() != len {
                    return Err(wrong_buffer_length());
                }
                to.copy_from_slice(&self.r.buffer()[..len]);
                Pin::new(&mut self.r).consume(len);
                Ok(WriteData::Own(incoming))
            }
            Some(mut incoming) => {
                let clock = PayloadClock::start(&self.limits, len as u64);
                read_into(&mut self.r, incoming.as_mut_slice(), len, &clock).await?;
                Ok(WriteData::Own(incoming))
            }
            None => {
                let clock = PayloadClock::start(&self.limits, len as u64);
                Ok(WriteData::Bytes(
                    read_payload(&mut self.r, len, &clock).await?,
                ))
            }
        }
    }

    /// Runs a request. A small one, or a write, whose export answers at once (memory, cache
    /// hit) completes here; anything still pending after one poll runs as its own task, so a
    /// slow request never holds up the ones behind it.
    ///
    /// A long write is polled here too: its payload has just arrived in this core's cache,
    /// and handing it to another worker cost a wake-up of that worker, its sleep after, and
    /// the payload's trip between caches (1 MiB writes at QD 8 into a memory member:
    /// 225 → 165 µs of CPU per write). What the export does before its first wait (parity,
    /// checksums) then delays the next request's receipt by as long.
    async fn dispatch(
        &mut self,
        req: RequestHeader,
        payload: WriteData,
        slot: OwnedSemaphorePermit,
        bytes: BytesHeld,
    ) {
        let conn = self.conn.clone();
        // Counts the request server-wide until it is done in the export (shutdown flushes
        // only after every request has finished).
        let started = RequestGuard::new(&self.shared);
        let mut task = Box::pin(async move {
            let (head, payload) = execute_or_fail(&conn, req, payload).await;
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
        if let Some(spare) = self.spare_worker_for(&req) {
            let tx = self.tx.clone();
            spare.spawn(async move { tx.send(task.await) });
            return;
        }
        let inline = req.typ == CMD_WRITE || req.length <= INLINE_MAX;
        if inline {
            if let std::task::Poll::Ready(out) = futures::poll!(task.as_mut()) {
                self.ready.push(out);
                return;
            }
        }
        let tx = self.tx.clone();
        tokio::spawn(async move { tx.send(task.await) });
        if !inline && !on_current_thread_runtime() {
            // A long read (or trim) should run on another worker while this one reads the
            // next request. Tokio keeps the newest task in a slot no other worker takes and wakes
            // an idle worker only once a second task queues behind it: queue a no-op, so the
            // long one moves where an idle worker finds it. (A current-thread runtime has no
            // other worker to move it to.)
            tokio::spawn(async {});
        }
    }

    /// Where `req` should run instead of here: a long read or write, when a worker serving no
    /// connection can copy its data while this one receives the next request.
    fn spare_worker_for(&self, req: &RequestHeader) -> Option<&tokio::runtime::Handle> {
        let min_len = self.shared.limits.spare_worker_min_len?;
        let long = matches!(req.typ, CMD_READ | CMD_WRITE) && req.length >= min_len;
        if !long {
            return None;
        }
        self.shared.workers.get()?.spare()
    }

    /// Sends what is ready, refuses the requests already sent at shutdown, and lets the
    /// writer end once every request task has sent its reply.
    async fn finish(mut self, stop: Stop) -> Result<(), ConnError> {
        self.tx.send_all(&mut self.ready);
        let result = match stop {
            Stop::Ended(result) => result,
            Stop::Shutdown => {
                refuse_pending(&mut self.r, &mut self.hdr, &self.tx, self.conn.structured).await;
                Ok(())
            }
        };
        // The writer ends once every request task has sent its reply and dropped its sender.
        drop(self.tx);
        result
    }
}

/// Takes `n` permits, or stops once the reply writer is gone (the connection is ending, and
/// what its queued replies held has been released). Inline replies in `ready` (holding
/// permits themselves) are sent before waiting.
async fn acquire<W: AsyncWrite + Unpin + Send + 'static>(
    sem: &Arc<Semaphore>,
    n: u32,
    tx: &Replies<W>,
    ready: &mut Vec<Outgoing>,
) -> Result<OwnedSemaphorePermit, Stop> {
    // Never barges: permits go to queued waiters before they count as available.
    if let Ok(p) = sem.clone().try_acquire_many_owned(n) {
        return Ok(p);
    }
    tx.send_all(ready);
    tokio::select! {
        biased;
        p = sem.clone().acquire_many_owned(n) => Ok(p.expect("semaphore never closed")),
        _ = tx.closed() => Err(Stop::Ended(Ok(()))),
    }
}

/// A request's memory: held until its reply is sent, and while its payload arrives.
struct Reserved {
    held: BytesHeld,
    arriving: Option<OwnedSemaphorePermit>,
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

struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Whether this task runs on a current-thread runtime (a connection on an I/O worker).
fn on_current_thread_runtime() -> bool {
    tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::CurrentThread)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn the_clock_finds_stalled_headers_and_idle_connections() {
        let limits = Limits {
            idle_timeout: Some(Duration::from_secs(30)),
            stall_timeout: Duration::from_secs(10),
            ..Limits::default()
        };
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        // A partial header: stalled 10 s after its last progress, whatever else holds.
        assert_eq!(
            clock_verdict(at(5), &limits, Some(t0), true, Some(t0)),
            Clock::Later(at(10))
        );
        assert_eq!(
            clock_verdict(at(10), &limits, Some(t0), false, Some(t0)),
            Clock::Stalled
        );
        // Requests in flight: never idle.
        assert_eq!(
            clock_verdict(at(100), &limits, None, true, Some(t0)),
            Clock::Later(at(130))
        );
        // Nothing in flight: idle 30 s after the last request.
        assert_eq!(
            clock_verdict(at(20), &limits, None, false, Some(t0)),
            Clock::Later(at(30))
        );
        assert_eq!(
            clock_verdict(at(30), &limits, None, false, Some(t0)),
            Clock::Idle
        );
        // No idle timeout: only stalls are looked for.
        let no_idle = Limits {
            idle_timeout: None,
            ..limits
        };
        assert_eq!(
            clock_verdict(at(100), &no_idle, None, false, None),
            Clock::Later(at(110))
        );
    }
}
