//! A request as it arrives: its header read across `select!` rounds without losing a byte,
//! and checked against the export and what the connection negotiated before anything is
//! allocated for it.

use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::time::Instant;

use crate::error::ConnError;
use crate::export::Export;
use crate::handshake::Negotiated;
use crate::limits::Limits;
use crate::proto::*;
use crate::shared::ExportEntry;
use crate::unaligned::is_unaligned;
use crate::write_gate::WriteGate;

/// A write whose payload is invalid is discarded and answered with an error when no longer
/// than this; longer ones end the connection (the protocol allows it past 2^25 bytes).
pub(crate) const MAX_DISCARD: u32 = 2 * MAX_PAYLOAD;

/// What one connection serves and what it negotiated: all a request needs.
pub(crate) struct Conn {
    pub export: Arc<dyn Export>,
    /// Where this export's writes meet its unaligned read-modify-writes.
    pub gate: Arc<WriteGate>,
    pub size: u64,
    pub min_block: u64,
    /// Requests need not be aligned to `min_block` (no block size was negotiated).
    pub byte_granular: bool,
    /// Longest read or write accepted: [`MAX_PAYLOAD`], or for a client that negotiated no
    /// block size up to [`crate::limits::MAX_UNNEGOTIATED_PAYLOAD`] as far as the memory budgets hold it.
    pub max_payload: u32,
    pub read_only: bool,
    pub structured: bool,
    pub base_allocation: Option<u32>,
}

impl Conn {
    pub fn new(entry: &ExportEntry, neg: &Negotiated, limits: &Limits) -> Conn {
        Conn {
            export: entry.export.clone(),
            gate: entry.gate.clone(),
            size: entry.export.size(),
            min_block: entry.export.min_block().into(),
            byte_granular: neg.byte_granular,
            max_payload: max_payload(limits, neg.byte_granular),
            read_only: entry.export.read_only(),
            structured: neg.structured,
            base_allocation: neg.base_allocation,
        }
    }
}

/// A request header being received; kept across `select!` rounds so that no byte is lost
/// when another branch wins.
pub(crate) struct HeaderReader {
    buf: [u8; REQUEST_HEADER_LEN],
    pub filled: usize,
    /// When the last bytes of a partial header arrived.
    pub last_progress: Instant,
}

impl HeaderReader {
    pub fn new() -> Self {
        HeaderReader {
            buf: [0; REQUEST_HEADER_LEN],
            filled: 0,
            last_progress: Instant::now(),
        }
    }

    /// Reads the rest of a header: `Ok(false)` on a clean end of stream before its first
    /// byte. Cancel-safe: bytes read stay in `buf`.
    pub async fn read<R: AsyncRead + Unpin>(&mut self, r: &mut R) -> Result<bool, ConnError> {
        while self.filled < REQUEST_HEADER_LEN {
            let n = r.read(&mut self.buf[self.filled..]).await?;
            if n == 0 {
                return if self.filled == 0 {
                    Ok(false)
                } else {
                    Err(ConnError::ShortHeader(self.filled))
                };
            }
            self.filled += n;
            if self.filled < REQUEST_HEADER_LEN {
                self.last_progress = Instant::now();
            }
        }
        Ok(true)
    }

    /// Takes the complete header out, ready for the next one.
    pub fn take(&mut self) -> [u8; REQUEST_HEADER_LEN] {
        debug_assert_eq!(self.filled, REQUEST_HEADER_LEN);
        self.filled = 0;
        self.buf
    }
}

/// Checks a request against the export and the negotiated state, before anything is allocated
/// for it. Returns the NBD error and a message for the client.
pub(crate) fn validate(c: &Conn, req: &RequestHeader) -> Result<(), (u32, &'static str)> {
    let allowed = match req.typ {
        CMD_READ if c.structured => CMD_FLAG_FUA | CMD_FLAG_DF,
        CMD_READ | CMD_WRITE | CMD_TRIM | CMD_FLUSH | CMD_CACHE => CMD_FLAG_FUA,
        CMD_WRITE_ZEROES => CMD_FLAG_FUA | CMD_FLAG_NO_HOLE | CMD_FLAG_FAST_ZERO,
        CMD_BLOCK_STATUS => CMD_FLAG_FUA | CMD_FLAG_REQ_ONE,
        _ => return Err((EINVAL, "unknown command")),
    };
    if req.flags & !allowed != 0 {
        return Err((EINVAL, "command flag not valid for this command"));
    }
    let writes = matches!(req.typ, CMD_WRITE | CMD_TRIM | CMD_WRITE_ZEROES);
    if writes && c.read_only {
        return Err((EPERM, "export is read-only"));
    }
    match req.typ {
        CMD_FLUSH => {
            if req.offset != 0 || req.length != 0 {
                return Err((EINVAL, "flush offset and length must be zero"));
            }
            return Ok(());
        }
        CMD_BLOCK_STATUS => {
            if c.base_allocation.is_none() {
                return Err((EINVAL, "no metadata context was negotiated"));
            }
            if req.length == 0 {
                return Err((EINVAL, "block status of zero bytes"));
            }
        }
        CMD_READ | CMD_WRITE if req.length > c.max_payload => {
            return Err((EINVAL, "request longer than the maximum payload"));
        }
        _ => {}
    }
    match req.offset.checked_add(req.length.into()) {
        Some(end) if end <= c.size => {}
        _ if matches!(req.typ, CMD_WRITE | CMD_WRITE_ZEROES) => {
            return Err((ENOSPC, "request past the end of the export"))
        }
        _ => return Err((EINVAL, "request past the end of the export")),
    }
    // min_block is a power of two (checked by Server::new).
    if !c.byte_granular && is_unaligned(c.min_block, req.offset, req.length) {
        return Err((EINVAL, "request not aligned to the minimum block size"));
    }
    Ok(())
}

/// The longest read or write a connection may send (see [`Limits::largest_request_bytes`]).
fn max_payload(limits: &Limits, byte_granular: bool) -> u32 {
    if !byte_granular {
        return MAX_PAYLOAD;
    }
    limits.largest_request_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::MAX_UNNEGOTIATED_PAYLOAD;

    #[test]
    fn only_clients_without_block_sizes_may_send_more_than_32_mib_within_their_budget() {
        let l = Limits::default().normalized();
        assert_eq!(max_payload(&l, false), MAX_PAYLOAD);
        assert_eq!(max_payload(&l, true), MAX_UNNEGOTIATED_PAYLOAD);
        let tight = Limits {
            max_bytes_in_flight: 40 << 20,
            ..l
        };
        assert_eq!(max_payload(&tight, true), 40 << 20);
        let least = Limits {
            max_bytes_in_flight: 0,
            server_bytes_in_flight: 0,
            ..l
        }
        .normalized();
        assert_eq!(max_payload(&least, true), MAX_PAYLOAD);
    }
}
