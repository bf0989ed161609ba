//! The reply headers of the transmission phase: simple replies, and structured chunks when
//! negotiated (read data, errors with a message, block status).

use crate::export::Extent;
use crate::proto::*;

/// Reply header of a successful read of `len` bytes (the data follows separately).
pub(crate) fn read_reply(structured: bool, cookie: u64, offset: u64, len: u32) -> Vec<u8> {
    if !structured {
        return simple_reply(0, cookie).to_vec();
    }
    if len == 0 {
        return structured_header(REPLY_FLAG_DONE, REPLY_TYPE_NONE, cookie, 0).to_vec();
    }
    let mut v = Vec::with_capacity(28);
    v.extend_from_slice(&structured_header(
        REPLY_FLAG_DONE,
        REPLY_TYPE_OFFSET_DATA,
        cookie,
        8 + len,
    ));
    v.extend_from_slice(&offset.to_be_bytes());
    v
}

/// An error reply: a structured `NBD_REPLY_TYPE_ERROR` chunk with a message when structured
/// replies were negotiated (required for reads), a simple reply otherwise.
pub(crate) fn error_reply(structured: bool, cookie: u64, errno: u32, msg: &str) -> Vec<u8> {
    if !structured {
        return simple_reply(errno, cookie).to_vec();
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
    v
}

/// `NBD_REPLY_TYPE_BLOCK_STATUS` chunk: extents are cleaned up so that none is empty, their sum
/// never exceeds `len`, there is at least one, and only one with `req_one`.
pub(crate) fn block_status_reply(
    cookie: u64,
    id: u32,
    len: u32,
    extents: &[Extent],
    req_one: bool,
) -> Vec<u8> {
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
    v
}

#[cfg(test)]
mod tests {
    use super::*;

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
