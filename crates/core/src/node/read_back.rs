//! A repair's rewrite, read back. Rewriting a block that did not read lets a disk remap a
//! bad sector, but a disk out of spare sectors (or a spot that fails again at once) still
//! returns an error after the write went through; md's `fix_read_error` re-reads for the
//! same reason. A repair is counted, and said, only once its bytes read back as written.

use super::NodeIo;
use crate::buf::Buf;

/// What reading back `[at, at+len)` of a child right after rewriting it found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ReadBack {
    /// The bytes written.
    Holds,
    /// A read error (the words of it).
    Unreadable(String),
    /// Other bytes than those written.
    Differs,
}

impl ReadBack {
    pub(crate) fn holds(&self) -> bool {
        matches!(self, ReadBack::Holds)
    }
}

impl std::fmt::Display for ReadBack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadBack::Holds => f.write_str("reads back as written"),
            ReadBack::Unreadable(e) => write!(f, "still does not read after the rewrite ({e})"),
            ReadBack::Differs => f.write_str("reads back other bytes than were rewritten"),
        }
    }
}

/// Reads `written.len()` bytes of `child` at `at` and compares them with `written`.
pub(crate) async fn read_back(child: &dyn NodeIo, at: u64, written: &[u8]) -> ReadBack {
    match child.read(at, Buf::new(written.len())).await {
        Ok(b) if b[..] == *written => ReadBack::Holds,
        Ok(_) => ReadBack::Differs,
        Err(e) => ReadBack::Unreadable(e.to_string()),
    }
}
