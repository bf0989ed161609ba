//! The reply headers of the transmission phase: simple replies, and structured chunks when
//! negotiated (read data, errors with a message, block status).

use std::ops::Deref;

use crate::export::Extent;
use crate::proto::*;

/// Header bytes kept inline: a simple reply (16) and a read's data chunk header (28).
const INLINE_BYTES: usize = 28;

/// A reply's header: inline when short (every request's reply but errors with a message and
/// block status), so a request's reply costs no allocation.
pub(crate) enum ReplyHead {
    Inline { bytes: [u8; INLINE_BYTES], len: u8 },
    Heap(Vec<u8>),
}

impl ReplyHead {
    /// No bytes (a message that only wakes the reply writer).
    pub fn empty() -> ReplyHead {
        ReplyHead::from_slice(&[])
    }

    pub fn from_slice(b: &[u8]) -> ReplyHead {
        if b.len() > INLINE_BYTES {
            return ReplyHead::Heap(b.to_vec());
        }
        let mut bytes = [0; INLINE_BYTES];
        bytes[..b.len()].copy_from_slice(b);
        ReplyHead::Inline {
            bytes,
            len: b.len() as u8,
        }
    }
}

impl From<Vec<u8>> for ReplyHead {
    fn from(v: Vec<u8>) -> ReplyHead {
        ReplyHead::Heap(v)
    }
}

impl Deref for ReplyHead {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            ReplyHead::Inline { bytes, len } => &bytes[..usize::from(*len)],
            ReplyHead::Heap(v) => v,
        }
    }
}

/// The reply to a request that succeeded without data.
pub(crate) fn ok_reply(cookie: u64) -> ReplyHead {
    ReplyHead::from_slice(&simple_reply(0, cookie))
}

/// Reply header of a successful read of `len` bytes (the data follows separately).
pub(crate) fn read_reply(structured: bool, cookie: u64, offset: u64, len: u32) -> ReplyHead {
    if !structured {
        return ok_reply(cookie);
    }
    if len == 0 {
        let none = structured_header(REPLY_FLAG_DONE, REPLY_TYPE_NONE, cookie, 0);
        return ReplyHead::from_slice(&none);
    }
    let chunk = structured_header(REPLY_FLAG_DONE, REPLY_TYPE_OFFSET_DATA, cookie, 8 + len);
    let mut bytes = [0; INLINE_BYTES];
    bytes[..20].copy_from_slice(&chunk);
    bytes[20..28].copy_from_slice(&offset.to_be_bytes());
    ReplyHead::Inline { bytes, len: 28 }
}

/// An error reply: a structured `NBD_REPLY_TYPE_ERROR` chunk with a message when structured
/// replies were negotiated (required for reads), a simple reply otherwise.
pub(crate) fn error_reply(structured: bool, cookie: u64, errno: u32, msg: &str) -> ReplyHead {
    if !structured {
        return ReplyHead::from_slice(&simple_reply(errno, cookie));
    }
    let msg = &msg.as_bytes()[..msg.len().min(MAX_STRING)];
    let mut v = Vec::with_capacity(26 + msg.len());
    v.extend_from_slice(&structured_header(
        REPLY_FLAG_DONE,
        REPLY_TYPE_ERROR,
        cookie,
        6 + msg.len() as u32,
    ));
    v.extend_from_slice(&errno.to_be_bytes());
    v.extend_from_slice(&(msg.len() as u16).to_be_bytes());
    v.extend_from_slice(msg);
    v.into()
}

/// `NBD_REPLY_TYPE_BLOCK_STATUS` chunk: extents are cleaned up so that none is empty, their sum
/// never exceeds `len`, there is at least one, and only one with `req_one`.
pub(crate) fn block_status_reply(
    cookie: u64,
    id: u32,
    len: u32,
    extents: &[Extent],
    req_one: bool,
) -> ReplyHead {
    let mut out: Vec<Extent> = Vec::new();
    let mut left = len;
    for ex in extents {
        if left == 0 || (req_one && !out.is_empty()) {
            break;
        }
        let n = ex.length.min(left);
        if n == 0 {
            continue;
        }
        out.push(Extent {
            length: n,
            flags: ex.flags & (STATE_HOLE | STATE_ZERO),
        });
        left -= n;
    }
    if out.is_empty() {
        out.push(Extent {
            length: len,
            flags: 0,
        });
    }
    let mut v = Vec::with_capacity(24 + 8 * out.len());
    v.extend_from_slice(&structured_header(
        REPLY_FLAG_DONE,
        REPLY_TYPE_BLOCK_STATUS,
        cookie,
        4 + 8 * out.len() as u32,
    ));
    v.extend_from_slice(&id.to_be_bytes());
    for ex in &out {
        v.extend_from_slice(&ex.length.to_be_bytes());
        v.extend_from_slice(&ex.flags.to_be_bytes());
    }
    v.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reply_heads_keep_short_headers_inline_and_long_ones_whole() {
        let ok = ok_reply(7);
        assert!(matches!(ok, ReplyHead::Inline { len: 16, .. }));
        assert_eq!(&ok[..], &simple_reply(0, 7));
        let read = read_reply(true, 9, 4096, 512);
        assert!(matches!(read, ReplyHead::Inline { len: 28, .. }));
        assert_eq!(
            &read[..20],
            &structured_header(REPLY_FLAG_DONE, REPLY_TYPE_OFFSET_DATA, 9, 520)
        );
        assert_eq!(&read[20..], &4096u64.to_be_bytes());
        assert!(ReplyHead::empty().is_empty());
        let long: Vec<u8> = (0..100).collect();
        assert_eq!(&ReplyHead::from_slice(&long)[..], &long[..]);
        let err = error_reply(true, 3, EIO, "input/output error");
        assert_eq!(err.len(), 26 + "input/output error".len());
    }

    #[test]
    fn block_status_reply_is_clamped() {
        let ex = [
            Extent {
                length: 0,
                flags: 1,
            },
            Extent {
                length: 4096,
                flags: 3,
            },
            Extent {
                length: 1 << 30,
                flags: 0xff,
            },
        ];
        let v = block_status_reply(7, 1, 8192, &ex, false);
        // header(20) + id(4) + 2 extents
        assert_eq!(v.len(), 24 + 16);
        assert_eq!(&v[20..24], &1u32.to_be_bytes());
        assert_eq!(&v[24..28], &4096u32.to_be_bytes());
        assert_eq!(&v[28..32], &3u32.to_be_bytes());
        assert_eq!(&v[32..36], &4096u32.to_be_bytes());
        assert_eq!(&v[36..40], &3u32.to_be_bytes());
        let one = block_status_reply(7, 1, 8192, &ex, true);
        assert_eq!(one.len(), 24 + 8);
        let none = block_status_reply(7, 1, 512, &[], false);
        assert_eq!(&none[24..28], &512u32.to_be_bytes());
    }
}
