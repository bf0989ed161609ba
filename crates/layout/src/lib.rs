//! # nbraid-layout: where every byte of a volume lives
//!
//! A volume is a tree ([`Node`]): leaves are regions of members; inner nodes concatenate
//! (JBOD), stripe (RAID 0), mirror (RAID 1, n-way) or protect with one or two parity chunks per
//! stripe (RAID 5/6, with md's four rotations). The named levels are small trees: RAID 10 is a
//! stripe over mirrors, RAID 50/60 a stripe over parity groups ("spans"), and any other nesting
//! is a tree too.
//!
//! The crate is pure: no I/O, no threads, no config text. It answers what the engine, the CLI
//! and the tests ask of a geometry: capacity, the member extents behind a logical range (with
//! their role and stripe), the members and P/Q holders of a stripe, the full-stripe width and how
//! many member losses the tree survives. Everything is deterministic and cheap, so it is
//! property-tested against a brute-force model.
//!
//! A volume being reshaped is two trees and a position ([`Reshape`]): which tree holds each
//! byte, and which copy windows need md's critical-section backup, decided purely.
//!
//! Beside the geometry it defines a volume's two named options, [`ReadPolicy`] and
//! [`CacheMode`], once for the config that parses them and the engine that acts on them.

mod error;
mod geometry;
mod in_place;
mod level;
mod map;
mod node;
mod options;
mod reshape;
mod rotation;
mod write_hole_log;

pub use error::LayoutError;
pub use geometry::{FaultTolerance, Geometry};
pub use in_place::grows_in_place;
pub use level::{Level, Region, Shape, STRIP_DEFAULT, STRIP_MAX, STRIP_MIN};
pub use map::{map, Extent, Mapping, StripeId};
pub use node::{ChildPiece, Concat, MemberRegion, Mirror, Node, ParityGroup, ParityPiece, Stripe};
pub use options::{CacheMode, ReadPolicy};
pub use reshape::{MemberRange, Reshape, Routed, Side, Window, WindowRule};
pub use rotation::{ParityLayout, PerDisk, Role, StripeRoles};
pub use write_hole_log::{
    is_logged, log_reserve_bytes, log_ring_bytes, volume_log_ring_bytes, LOG_BAND_BYTES,
    LOG_BATCH_HEADER_BYTES, LOG_BLOCK_BYTES, LOG_ENTRY_HEADER_BYTES,
    LOG_IN_METADATA_AREA_MAX_BYTES,
};
