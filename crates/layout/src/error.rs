use crate::Level;
use thiserror::Error;

/// Why a shape or geometry cannot be built. Messages name what is wrong and what would be valid.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum LayoutError {
    #[error("{level} needs at least {min} members, got {got}")]
    TooFewMembers {
        level: Level,
        min: usize,
        got: usize,
    },
    #[error("{members} members cannot be divided into {spans} spans: spans must be at least 2 and divide the member count evenly")]
    SpansDontDivide { members: usize, spans: usize },
    #[error("{level} with {spans} spans needs at least {min} members per span, got {per_span}")]
    SpanTooSmall {
        level: Level,
        spans: usize,
        min: usize,
        per_span: usize,
    },
    #[error("{level} takes no `spans` (only raid10, raid50 and raid60 are striped over spans); got spans = {spans}")]
    SpansNotAllowed { level: Level, spans: usize },
    #[error("strip size {0} bytes is not a power of two between 4 KiB and 16 MiB")]
    BadStripSize(u64),
    #[error("expected a region for each of the {expected} members, got {got}")]
    RegionCount { expected: usize, got: usize },
    #[error("member {member}'s region of {len} bytes is smaller than one strip ({strip} bytes)")]
    RegionTooSmall { member: usize, len: u64, strip: u64 },
    #[error("a {kind} node needs at least {min} children, got {got}")]
    BadNode {
        kind: &'static str,
        min: usize,
        got: usize,
    },
    #[error("range {offset}+{len} lies outside the volume of {capacity} bytes")]
    OutOfRange {
        offset: u64,
        len: u64,
        capacity: u64,
    },
    #[error("a reshape from {old} to {new} bytes would shrink the volume")]
    ReshapeShrinks { old: u64, new: u64 },
    #[error("no reshape between these trees: {detail}")]
    ReshapeUnit { detail: String },
    #[error("reshape position {position} is neither a multiple of {unit} bytes (whole stripes of both trees) nor the end of the volume ({capacity} bytes)")]
    ReshapePosition {
        position: u64,
        unit: u64,
        capacity: u64,
    },
}
