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

    /// The same error for a second caller (one write's result answers several requests);
    /// an I/O error keeps its kind and message.
    pub fn duplicate(&self) -> VolumeError {
        match self {
            VolumeError::Misaligned {
                op,
                offset,
                len,
                block,
            } => VolumeError::Misaligned {
                op,
                offset: *offset,
                len: *len,
                block: *block,
            },
            VolumeError::OutOfRange {
                op,
                offset,
                len,
                capacity,
            } => VolumeError::OutOfRange {
                op,
                offset: *offset,
                len: *len,
                capacity: *capacity,
            },
            VolumeError::TooLong {
                op,
                offset,
                len,
                max,
            } => VolumeError::TooLong {
                op,
                offset: *offset,
                len: *len,
                max: *max,
            },
            VolumeError::Unavailable { reason } => VolumeError::Unavailable {
                reason: reason.clone(),
            },
            VolumeError::Member { member, source } => VolumeError::Member {
                member: *member,
                source: MemberError {
                    source: std::io::Error::new(source.source.kind(), source.source.to_string()),
                    member: source.member.clone(),
                    ..*source
                },
            },
            VolumeError::Assembly(s) => VolumeError::Assembly(s.clone()),
            VolumeError::Unsupported(s) => VolumeError::Unsupported(s.clone()),
        }
    }
}

pub type VolumeResult<T> = Result<T, VolumeError>;
