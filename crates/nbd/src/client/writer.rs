//! The request writer: one task per connection owns the stream's write half and sends what
//! the submitters queued, every request queued since its last turn in one vectored write.
//!
//! A benchmark at depth 32 used to pay a `writev` per request (and the server a wake-up per
//! request); requests submitted in the same turn of the runtime now leave together. A request
//! once queued is as good as sent: dropping its future cannot tear the stream.

use std::io::{self, IoSlice};
use std::sync::Arc;

use bytes::Bytes;
use tokio::io::{AsyncWrite, AsyncWriteExt};

use super::{BoxWrite, CloseOnUnwind, Shared};
use crate::proto::{RequestHeader, CMD_DISC, REQUEST_HEADER_LEN};

/// Slices per vectored write (Linux takes 1024; a batch past this takes several).
const MAX_IOV: usize = 64;

/// `NBD_CMD_DISC`, the last request of a connection.
const DISC: [u8; REQUEST_HEADER_LEN] = RequestHeader {
    flags: 0,
    typ: CMD_DISC,
    cookie: 0,
    offset: 0,
    length: 0,
}
.encode();

/// A request waiting for the writer.
pub(crate) struct Outgoing {
    pub head: [u8; REQUEST_HEADER_LEN],
    pub payload: Option<Bytes>,
}

impl Outgoing {
    /// The request's bytes: slice 0 its header, slice 1 its payload (maybe empty).
    fn part(&self, i: usize) -> &[u8] {
        match i {
            0 => &self.head,
            _ => self.payload.as_deref().unwrap_or_default(),
        }
    }
}

/// Sends queued requests until the connection ends or the client disconnects (then
/// `NBD_CMD_DISC` goes out after everything queued before it, and the stream is shut down).
pub(crate) async fn run(mut w: BoxWrite, shared: Arc<Shared>) {
    let _unwind = CloseOnUnwind(&shared, "request writer");
    // Swapped with the shared queue each turn: both keep their capacity, so a turn
    // allocates nothing.
    let mut batch: Vec<Outgoing> = Vec::new();
    loop {
        shared.wake_writer.notified().await;
        let (disconnecting, closed) = {
            let mut p = shared.lock();
            std::mem::swap(&mut p.outbox, &mut batch);
            (p.disconnecting, p.closed.is_some())
        };
        if !batch.is_empty() {
            let sent = async {
                write_batch(&mut w, &batch).await?;
                w.flush().await
            }
            .await;
            batch.clear();
            if let Err(e) = sent {
                shared.close(format!("sending a request failed: {e}"));
                return;
            }
        }
        if disconnecting {
            let _ = w.write_all(&DISC).await;
            let _ = w.flush().await;
            let _ = w.shutdown().await;
            return;
        }
        if closed {
            return;
        }
    }
}

/// Writes every request of `batch`, header and payload, in as few vectored writes as the
/// stream takes (short writes resume where they stopped).
async fn write_batch<W: AsyncWrite + Unpin + ?Sized>(
    w: &mut W,
    batch: &[Outgoing],
) -> io::Result<()> {
    let parts = batch.len() * 2;
    let part = |k: usize| batch[k / 2].part(k % 2);
    // The next byte to send: part `k`, `done` bytes into it.
    let (mut k, mut done) = (0, 0);
    loop {
        while k < parts && part(k).len() == done {
            k += 1;
            done = 0;
        }
        if k == parts {
            return Ok(());
        }
        let mut iov = [IoSlice::new(&[]); MAX_IOV];
        let mut n_iov = 0;
        let mut j = k;
        while n_iov < MAX_IOV && j < parts {
            let s = if j == k { &part(j)[done..] } else { part(j) };
            if !s.is_empty() {
                iov[n_iov] = IoSlice::new(s);
                n_iov += 1;
            }
            j += 1;
        }
        let mut n = w.write_vectored(&iov[..n_iov]).await?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        while n > 0 {
            let rest = part(k).len() - done;
            if n >= rest {
                n -= rest;
                k += 1;
                done = 0;
            } else {
                done += n;
                n = 0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    /// A pipe that takes a few bytes at a time forces short vectored writes at every point
    /// of headers and payloads, and a batch longer than one write's slices.
    #[tokio::test]
    async fn batches_survive_short_writes() {
        let (mut a, mut b) = tokio::io::duplex(7);
        let mut batch = Vec::new();
        let mut want = Vec::new();
        for i in 0..100usize {
            let head = [i as u8; REQUEST_HEADER_LEN];
            let payload = (i % 3 != 0).then(|| Bytes::from(vec![!(i as u8); i * 5 % 41]));
            want.extend_from_slice(&head);
            want.extend_from_slice(payload.as_deref().unwrap_or_default());
            batch.push(Outgoing { head, payload });
        }
        let (res, got) = tokio::join!(write_batch(&mut a, &batch), async {
            let mut got = vec![0u8; want.len()];
            b.read_exact(&mut got).await.unwrap();
            got
        });
        res.unwrap();
        assert_eq!(got, want);
    }
}
