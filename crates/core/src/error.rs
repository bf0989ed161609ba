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
    /// A reason made from another unavailability's text says its words once.
    #[error("data unavailable: {}", once(reason))]
    Unavailable { reason: String },
    /// A member returned an I/O error and no redundancy could hide it.
    #[error("member {member}: {source}")]
    Member {
        member: usize,
        #[source]
        source: MemberError,
    },
    /// A rebuild found volume bytes no redundancy can give back (every copy unreadable, or
    /// more of a stripe than its parity): `ranges` of the volume, `cause` the first error.
    #[error("the volume's bytes at {} cannot be rebuilt: no copy or parity of them can be read ({cause}); writing them again (a client write of these bytes, from a backup) lets the rebuild get past them", ranges_text(ranges))]
    Unrebuildable {
        ranges: Vec<std::ops::Range<u64>>,
        cause: Box<VolumeError>,
    },
    #[error("cannot assemble the volume: {0}")]
    Assembly(String),
    /// An operation on a serving volume refused (a member to install, replace or take out
    /// that does not fit): the reason alone — it is no assembly.
    #[error("{0}")]
    Refused(String),
    #[error("not supported yet: {0}")]
    Unsupported(String),
}

/// Ranges shown at most in [`VolumeError::Unrebuildable`]'s text (the rest counted).
const RANGES_SHOWN: usize = 8;

/// `ranges` as `offset+len` in bytes, comma-separated, the first [`RANGES_SHOWN`] and a
/// count of the rest; the bytes in all when there are several.
fn ranges_text(ranges: &[std::ops::Range<u64>]) -> String {
    let shown: Vec<String> = (ranges.iter().take(RANGES_SHOWN))
        .map(|r| format!("{}+{}", r.start, r.end - r.start))
        .collect();
    let bytes: u64 = ranges.iter().map(|r| r.end - r.start).sum();
    let more = ranges.len().saturating_sub(RANGES_SHOWN);
    match (ranges.len(), more) {
        (0 | 1, _) => shown.join(""),
        (_, 0) => format!("{} ({bytes} bytes in all)", shown.join(", ")),
        _ => format!(
            "{} and {more} more ranges ({bytes} bytes in all)",
            shown.join(", ")
        ),
    }
}

/// How [`VolumeError::Unavailable`] begins (its `#[error]` above says the same words).
const UNAVAILABLE: &str = "data unavailable: ";

/// `reason` without the words [`VolumeError::Unavailable`] says before it: a wrapper that
/// adds its own words to an unavailability's text (a parity read naming the last member
/// error) said "data unavailable: data unavailable: ...".
fn once(reason: &str) -> &str {
    let mut r = reason;
    while let Some(rest) = r.strip_prefix(UNAVAILABLE) {
        r = rest;
    }
    r
}

impl VolumeError {
    /// Whether this is a member's I/O error (as opposed to a member already marked failed).
    pub fn is_member_io(&self) -> bool {
        matches!(self, VolumeError::Member { .. })
    }

    /// A read-only volume's member refused a write before it reached the storage
    /// ([`crate::member::MemberError::is_read_only_refusal`]): expected of every repair there,
    /// so said at debug level, not warned about at each read of a bad block.
    pub fn is_read_only_refusal(&self) -> bool {
        matches!(self, VolumeError::Member { source, .. } if source.is_read_only_refusal())
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
            VolumeError::Unrebuildable { ranges, cause } => VolumeError::Unrebuildable {
                ranges: ranges.clone(),
                cause: Box::new(cause.duplicate()),
            },
            VolumeError::Assembly(s) => VolumeError::Assembly(s.clone()),
            VolumeError::Refused(s) => VolumeError::Refused(s.clone()),
            VolumeError::Unsupported(s) => VolumeError::Unsupported(s.clone()),
        }
    }
}

pub type VolumeResult<T> = Result<T, VolumeError>;

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by an events hunt: a parity read beyond tolerance wraps its own unavailability
    /// with the last member error and said "data unavailable: data unavailable: read: ...".
    #[test]
    fn an_unavailability_wrapping_another_says_so_once() {
        let inner = VolumeError::Unavailable {
            reason: "read: stripe 3 has lost children [0, 1]".into(),
        };
        let outer = VolumeError::Unavailable {
            reason: format!("{inner} (last member error: member 1: EIO)"),
        };
        assert_eq!(
            outer.to_string(),
            "data unavailable: read: stripe 3 has lost children [0, 1] (last member error: member 1: EIO)"
        );
        assert_eq!(
            inner.to_string(),
            "data unavailable: read: stripe 3 has lost children [0, 1]"
        );
        assert_eq!(outer.duplicate().to_string(), outer.to_string());
    }

    /// Unrebuildable bytes are named as `offset+len`: one range alone, several with their
    /// sum, past eight counted; a duplicate says the same.
    #[test]
    fn unrebuildable_bytes_are_named_by_offset_and_length() {
        let cause = || {
            Box::new(VolumeError::Unavailable {
                reason: "read".into(),
            })
        };
        let one = VolumeError::Unrebuildable {
            ranges: std::iter::once(4096..8192).collect(),
            cause: cause(),
        };
        assert!(one
            .to_string()
            .starts_with("the volume's bytes at 4096+4096 cannot be rebuilt: "));
        assert_eq!(one.duplicate().to_string(), one.to_string());
        let two = VolumeError::Unrebuildable {
            ranges: vec![0..4096, 65536..131072],
            cause: cause(),
        };
        assert!(two
            .to_string()
            .contains("at 0+4096, 65536+65536 (69632 bytes in all) cannot"));
        let many = VolumeError::Unrebuildable {
            ranges: (0..10).map(|i| i * 8192..i * 8192 + 4096).collect(),
            cause: cause(),
        };
        assert!(many
            .to_string()
            .contains("57344+4096 and 2 more ranges (40960 bytes in all) cannot"));
    }
}
