//! Receiving a write's payload: every read under the stall timeout and the whole payload
//! under its deadline ([`payload_time_allowed`]), into the server's memory, the export's own
//! buffer, or nowhere (an invalid request's payload is read and dropped).

use std::io;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::time::Instant;

use crate::error::ConnError;
use crate::limits::{payload_time_allowed, Limits};

/// First allocation for a write payload; the buffer grows as the data actually arrives, so a
/// client that claims a long payload and sends little costs little.
const PAYLOAD_FIRST_ALLOC: usize = 1024 * 1024;

/// The clocks of one payload being received: `stall` for each read, and a deadline for the
/// whole (see [`payload_time_allowed`]).
pub(crate) struct PayloadClock {
    stall: Duration,
    deadline: Instant,
    len_bytes: u64,
    allowed: Duration,
    min_bytes_per_s: u64,
}

impl PayloadClock {
    pub(crate) fn start(limits: &Limits, len_bytes: u64) -> Self {
        let allowed = payload_time_allowed(
            len_bytes,
            limits.payload_min_bytes_per_s,
            limits.stall_timeout,
        );
        PayloadClock {
            stall: limits.stall_timeout,
            deadline: Instant::now() + allowed,
            len_bytes,
            allowed,
            min_bytes_per_s: limits.payload_min_bytes_per_s,
        }
    }
}

/// One read of a request's payload: the client has `stall` to send at least a byte, and
/// until the payload's deadline to send all of it.
async fn read_some<F>(read: F, clock: &PayloadClock) -> Result<usize, ConnError>
where
    F: std::future::Future<Output = io::Result<usize>>,
{
    let stalled_at = Instant::now() + clock.stall;
    match tokio::time::timeout_at(stalled_at.min(clock.deadline), read).await {
        Ok(Ok(0)) => Err(ConnError::Io(io::ErrorKind::UnexpectedEof.into())),
        Ok(Ok(n)) => Ok(n),
        Ok(Err(e)) => Err(e.into()),
        Err(_) if clock.deadline < stalled_at => Err(ConnError::PayloadTooSlow {
            len_bytes: clock.len_bytes,
            allowed_ms: clock.allowed.as_millis() as u64,
            min_bytes_per_s: clock.min_bytes_per_s,
        }),
        Err(_) => Err(ConnError::Stalled("a write payload", clock.stall.as_secs())),
    }
}

/// Reads a write payload of `len` (already validated) bytes without zero-filling first.
pub(crate) async fn read_payload<R: AsyncRead + Unpin>(
    r: &mut R,
    len: usize,
    clock: &PayloadClock,
) -> Result<Bytes, ConnError> {
    let mut buf = BytesMut::with_capacity(len.min(PAYLOAD_FIRST_ALLOC));
    while buf.len() < len {
        let remaining = len - buf.len();
        if buf.capacity() == buf.len() {
            buf.reserve(remaining.min(buf.len().max(PAYLOAD_FIRST_ALLOC)));
        }
        let room = (buf.capacity() - buf.len()).min(remaining) as u64;
        read_some((&mut *r).take(room).read_buf(&mut buf), clock).await?;
    }
    Ok(buf.freeze())
}

/// An export's payload buffer that is not the validated length (a bug in the export).
pub(crate) fn wrong_buffer_length() -> ConnError {
    ConnError::Io(io::Error::other(
        "export gave a payload buffer of the wrong length",
    ))
}

/// Fills `buf` (from the export, exactly the validated length) with a write payload.
pub(crate) async fn read_into<R: AsyncRead + Unpin>(
    r: &mut R,
    buf: &mut [u8],
    len: usize,
    clock: &PayloadClock,
) -> Result<(), ConnError> {
    if buf.len() != len {
        return Err(wrong_buffer_length());
    }
    let mut got = 0;
    while got < len {
        got += read_some(r.read(&mut buf[got..]), clock).await?;
    }
    Ok(())
}

/// Reads and drops `len` bytes of an invalid request's payload.
pub(crate) async fn discard<R: AsyncRead + Unpin>(
    r: &mut R,
    mut len: u64,
    clock: &PayloadClock,
) -> Result<(), ConnError> {
    let mut scratch = vec![0u8; 64 * 1024];
    while len > 0 {
        let want = scratch
            .len()
            .min(usize::try_from(len).unwrap_or(usize::MAX));
        len -= read_some(r.read(&mut scratch[..want]), clock).await? as u64;
    }
    Ok(())
}

/// Reads and drops `len` bytes with plain reads (for use with `now_or_never`).
pub(crate) async fn skip<R: AsyncRead + Unpin>(r: &mut R, mut len: u64) -> io::Result<()> {
    let mut scratch = [0u8; 8192];
    while len > 0 {
        let want = scratch
            .len()
            .min(usize::try_from(len).unwrap_or(usize::MAX));
        let n = r.read(&mut scratch[..want]).await?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        len -= n as u64;
    }
    Ok(())
}
