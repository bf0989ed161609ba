//! Replies of one connection on their way to the socket.
//!
//! A writer task sends replies in completion order, batching whatever is ready into as few
//! writes as possible. Replies that are ready while that task is idle are written by whoever
//! made them, with one non-blocking attempt: the reader writes the replies of the requests it
//! completed inline once it has no more requests buffered (so a burst of requests still gets
//! one write), and a request task writes its own. At queue depth 1 this saves the hop to the
//! writer task (a channel message and a task wake-up per request). Whatever that attempt
//! cannot write (a full socket, an unfinished TLS flush) is left to the writer task, in front
//! of everything else, so a reply's bytes always go out together.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, Mutex, OwnedSemaphorePermit};

use super::export::ReadData;
use super::limits::Activity;
use super::reply_head::ReplyHead;
use super::server_memory::ServerBytes;

/// Payloads up to this size are copied into the batch buffer; larger ones go out with one
/// vectored write together with whatever is buffered.
const COPY_PAYLOAD_MAX: usize = 16 * 1024;
/// The batch buffer is written out once it holds this much. Replies of at most this many
/// bytes in all may be written directly, outside the writer task.
pub(crate) const BATCH_BYTES: usize = 256 * 1024;
/// At most this many replies in one direct write (one `iovec` array).
pub(crate) const BATCH_REPLIES: usize = 64;

/// A request's share of the connection's and the server's memory budgets.
pub(crate) struct BytesHeld {
    pub _conn: OwnedSemaphorePermit,
    pub _server: ServerBytes,
}

/// One reply on its way to the socket, holding the permits of its request.
pub(crate) struct Outgoing {
    pub head: ReplyHead,
    pub payload: ReadData,
    pub _slot: Option<OwnedSemaphorePermit>,
    pub _bytes: Option<BytesHeld>,
}

impl Outgoing {
    /// A reply with no permits and no payload (refusals, wake-ups of the writer).
    pub fn bare(head: ReplyHead) -> Outgoing {
        Outgoing {
            head,
            payload: Vec::new(),
            _slot: None,
            _bytes: None,
        }
    }

    fn parts(&self) -> impl Iterator<Item = &[u8]> {
        std::iter::once(&self.head[..]).chain(self.payload.iter().map(|b| &b[..]))
    }

    fn len(&self) -> usize {
        self.parts().map(<[u8]>::len).sum()
    }
}

pub(crate) fn total_len(data: &ReadData) -> u64 {
    data.iter().map(|b| b.len() as u64).sum()
}

/// The socket's write half and what the direct path left unwritten.
struct Sink<W> {
    w: W,
    /// Replies the direct path wrote only the first `.1` bytes of; they go out first.
    rest: Option<(Vec<Outgoing>, usize)>,
    /// The direct path's last flush did not finish: the writer task finishes it.
    unflushed: bool,
}

/// The sending side, shared by the reader and every request task. The writer task ends
/// once every clone is dropped.
pub(crate) struct Replies<W> {
    sink: Arc<Mutex<Sink<W>>>,
    tx: mpsc::UnboundedSender<Outgoing>,
    activity: Option<Arc<Activity>>,
}

impl<W: AsyncWrite + Unpin + Send + 'static> Replies<W> {
    /// The sender, and the writer task's future (to be spawned).
    pub fn new(
        w: W,
        activity: Option<Arc<Activity>>,
    ) -> (
        Arc<Self>,
        impl std::future::Future<Output = io::Result<()>> + Send,
    ) {
        let sink = Arc::new(Mutex::new(Sink {
            w,
            rest: None,
            unflushed: false,
        }));
        let (tx, rx) = mpsc::unbounded_channel();
        let writer = write_loop(sink.clone(), rx, activity.clone());
        let replies = Arc::new(Replies { sink, tx, activity });
        (replies, writer)
    }

    /// Sends `msg`: directly when the writer task is idle and `msg` is small, else through it.
    pub fn send(&self, msg: Outgoing) {
        let mut one = vec![msg];
        self.send_all(&mut one);
    }

    /// Sends (and drains) `msgs`: with one direct write when the writer task is idle and they
    /// are small, else through it.
    pub fn send_all(&self, msgs: &mut Vec<Outgoing>) {
        let small = msgs.len() <= BATCH_REPLIES
            && msgs.iter().map(Outgoing::len).sum::<usize>() <= BATCH_BYTES;
        if small {
            if let Ok(mut sink) = self.sink.try_lock() {
                let left = try_write(&mut sink, msgs);
                drop(sink);
                if left {
                    // Wakes the writer task to finish; carries no bytes of its own.
                    let _ = self.tx.send(Outgoing::bare(ReplyHead::empty()));
                }
                if msgs.is_empty() {
                    if let Some(a) = &self.activity {
                        a.touch();
                    }
                    return;
                }
            }
        }
        for m in msgs.drain(..) {
            let _ = self.tx.send(m);
        }
    }

    /// Completes once the writer task has ended (the connection's replies can go nowhere).
    pub async fn closed(&self) {
        self.tx.closed().await
    }

    /// Whether the writer task has ended ([`Replies::closed`] without waiting).
    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }
}

/// One non-blocking attempt at writing `msgs` and flushing. Drains `msgs` unless nothing
/// could be written (they are then the caller's to queue); returns whether the writer task
/// has something left to finish (the rest of the replies, or a flush).
fn try_write<W: AsyncWrite + Unpin>(sink: &mut Sink<W>, msgs: &mut Vec<Outgoing>) -> bool {
    if sink.rest.is_some() || sink.unflushed {
        // The writer task has work of its own first: queue behind it.
        return false;
    }
    let mut cx = Context::from_waker(Waker::noop());
    let total: usize = msgs.iter().map(Outgoing::len).sum();
    let mut done = 0;
    while done < total {
        let iov = slices_from(msgs, done);
        match Pin::new(&mut sink.w).poll_write_vectored(&mut cx, &iov) {
            Poll::Ready(Ok(n)) if n > 0 => done += n,
            // Broken, or no room: the writer task takes it from here (and meets the error).
            _ => break,
        }
    }
    if done == 0 && total > 0 {
        return false;
    }
    if done < total {
        sink.rest = Some((std::mem::take(msgs), done));
        return true;
    }
    // Written: the replies' permits are released here.
    msgs.clear();
    match Pin::new(&mut sink.w).poll_flush(&mut cx) {
        Poll::Ready(Ok(())) => false,
        _ => {
            sink.unflushed = true;
            true
        }
    }
}

/// The bytes of `msgs` from `skip` on, as slices for a vectored write (at most `IOV_MAX`).
fn slices_from(msgs: &[Outgoing], mut skip: usize) -> Vec<io::IoSlice<'_>> {
    const IOV_MAX: usize = 1024;
    let mut out = Vec::new();
    for p in msgs.iter().flat_map(Outgoing::parts) {
        if out.len() == IOV_MAX {
            break;
        }
        if skip >= p.len() {
            skip -= p.len();
            continue;
        }
        out.push(io::IoSlice::new(&p[skip..]));
        skip = 0;
    }
    out
}

/// Writes replies as they come: whatever is ready is batched into as few writes as possible,
/// then flushed. Holds the sink only while writing.
async fn write_loop<W: AsyncWrite + Unpin>(
    sink: Arc<Mutex<Sink<W>>>,
    mut rx: mpsc::UnboundedReceiver<Outgoing>,
    activity: Option<Arc<Activity>>,
) -> io::Result<()> {
    let mut buf: Vec<u8> = Vec::with_capacity(BATCH_BYTES + COPY_PAYLOAD_MAX + 64);
    while let Some(first) = rx.recv().await {
        let mut guard = sink.lock().await;
        let sink = &mut *guard;
        if let Some((msgs, done)) = sink.rest.take() {
            let mut skip = done;
            for p in msgs.iter().flat_map(Outgoing::parts) {
                if skip < p.len() {
                    sink.w.write_all(&p[skip..]).await?;
                }
                skip = skip.saturating_sub(p.len());
            }
        }
        sink.unflushed = false;
        let w = &mut sink.w;
        let mut next = Some(first);
        while let Some(msg) = next.take().or_else(|| rx.try_recv().ok()) {
            buf.extend_from_slice(&msg.head);
            if total_len(&msg.payload) <= COPY_PAYLOAD_MAX as u64 {
                for part in &msg.payload {
                    buf.extend_from_slice(part);
                }
                if buf.len() >= BATCH_BYTES {
                    w.write_all(&buf).await?;
                    buf.clear();
                }
            } else {
                write_slices(w, &buf, &msg.payload).await?;
                buf.clear();
            }
            // `msg` (and its permits) is released here, once its bytes are written or queued.
        }
        if !buf.is_empty() {
            w.write_all(&buf).await?;
            buf.clear();
        }
        w.flush().await?;
        drop(guard);
        if let Some(a) = &activity {
            a.touch();
        }
    }
    sink.lock().await.w.shutdown().await
}

/// Writes `head` then every part of `parts` with vectored writes.
pub(crate) async fn write_slices<W: AsyncWrite + Unpin>(
    w: &mut W,
    head: &[u8],
    parts: &[Bytes],
) -> io::Result<()> {
    const MAX_IOV: usize = 64;
    let mut slices: Vec<&[u8]> = std::iter::once(head)
        .chain(parts.iter().map(|b| &b[..]))
        .filter(|s| !s.is_empty())
        .collect();
    let mut first = 0;
    while first < slices.len() {
        let iov: Vec<io::IoSlice<'_>> = slices[first..]
            .iter()
            .take(MAX_IOV)
            .map(|s| io::IoSlice::new(s))
            .collect();
        let mut n = w.write_vectored(&iov).await?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        while n > 0 {
            let len = slices[first].len();
            if n >= len {
                n -= len;
                first += 1;
            } else {
                slices[first] = &slices[first][n..];
                n = 0;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    #[tokio::test]
    async fn write_slices_handles_short_writes() {
        // A pipe whose reader takes small bites forces partial vectored writes.
        let (mut a, mut b) = tokio::io::duplex(7);
        let head: Vec<u8> = (0..100u8).collect();
        let parts = [
            Bytes::from((100..150u8).collect::<Vec<_>>()),
            Bytes::new(),
            Bytes::from((150..=255u8).collect::<Vec<_>>()),
        ];
        let (res, got) = tokio::join!(write_slices(&mut a, &head, &parts), async {
            let mut got = vec![0u8; 256];
            b.read_exact(&mut got).await.unwrap();
            got
        });
        res.unwrap();
        assert_eq!(got, (0..=255u8).collect::<Vec<_>>());
    }

    /// Replies sent directly into a pipe too small for them, mixed with queued ones, arrive
    /// whole and none is lost: the direct path's leftovers go out before anything else.
    #[tokio::test]
    async fn direct_and_queued_replies_never_interleave() {
        let (a, mut b) = tokio::io::duplex(100);
        let (replies, writer) = Replies::new(a, None);
        let writer = tokio::spawn(writer);
        const N: usize = 200;
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            b.read_to_end(&mut got).await.unwrap();
            got
        });
        for i in 0..N {
            // Every reply is its index repeated over a length that varies around the pipe's.
            let len = 1 + (i * 37) % 300;
            let head = vec![i as u8; len.min(20)];
            let payload = vec![Bytes::from(vec![i as u8; len - head.len()])];
            replies.send(Outgoing {
                head: head.into(),
                payload,
                _slot: None,
                _bytes: None,
            });
            if i % 7 == 0 {
                tokio::task::yield_now().await;
            }
        }
        drop(replies);
        writer.await.unwrap().unwrap();
        let got = reader.await.unwrap();
        // Runs of one value: each reply whole, every reply there once.
        let mut seen = [false; N];
        let mut at = 0;
        while at < got.len() {
            let v = got[at] as usize;
            let len = 1 + (v * 37) % 300;
            assert!(
                got[at..at + len].iter().all(|&x| x as usize == v),
                "reply {v} torn at {at}"
            );
            assert!(!seen[v], "reply {v} twice");
            seen[v] = true;
            at += len;
        }
        assert!(seen.iter().all(|&s| s), "a reply was lost");
    }
}
