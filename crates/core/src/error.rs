//! Errors a volume reports. Every message names what was asked and where.

use crate::member::MemberError;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum VolumeError {
    #[error("{op} at offset {offset}, length {len}: not aligned to the volume's {block}-byte logical block")]
    Misaligned {
        op: &'static str,
        offset: u64,
        len: u64,
        block: u64,
    },
    #[error("{op} at offset {offset}, length {len}: outside the volume of {capacity} bytes")]
    OutOfRange {
        op: &'static str,
        offset: u64,
        len: u64,
        capacity: u64,
    },
    #[error("{op} at offset {offset}: length {len} exceeds the {max}-byte limit per request")]
    TooLong {
        op: &'static str,
        offset: u64,
        len: u64,
        max: u64,
    },
    /// The data is beyond the volume's fault tolerance: no copy of it can be read or written.
    #[error("data unavailable: {reason}")]
    Unavailable { reason: String },
    /// A member returned an I/O error and no redundancy could hide it.
    #[error("member {member}: {source}")]
    Member {
        member: usize,
        #[source]
        source: MemberError,
    },
    #[error("cannot assemble the volume: {0}")]
    Assembly(String),
    #[error("not supported yet: {0}")]
    Unsupported(String),
}

impl VolumeError {
    /// Whether this is a member's I/O error (as opposed to a member already marked failed).
    pub fn is_member_io(&self) -> bool {
        matches!(self, VolumeError::Member { .. })
    }
}

pub type VolumeResult<T> = Result<T, VolumeError>;
