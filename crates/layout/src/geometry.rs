//! A built volume: its shape (when it came from a named level) and its tree.

use crate::{map, LayoutError, Level, Mapping, Node, Region, Shape};
use serde::Serialize;

/// How many member losses a volume survives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct FaultTolerance {
    /// Losses survived whichever members fail.
    pub worst: usize,
    /// Losses survived when they fall on the best members (e.g. one per mirror).
    pub best: usize,
}

/// A volume's geometry: the tree plus the facts people and the engine ask about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Geometry {
    shape: Option<Shape>,
    root: Node,
}

impl Geometry {
    /// A named level over one region per member.
    pub fn new(shape: Shape, regions: &[Region]) -> Result<Geometry, LayoutError> {
        let root = shape.build(regions)?;
        Ok(Geometry {
            shape: Some(shape),
            root,
        })
    }

    /// Any tree (general nesting).
    pub fn from_tree(root: Node) -> Geometry {
        Geometry { shape: None, root }
    }

    pub fn shape(&self) -> Option<&Shape> {
        self.shape.as_ref()
    }

    pub fn level(&self) -> Option<Level> {
        self.shape.as_ref().map(|s| s.level)
    }

    pub fn root(&self) -> &Node {
        &self.root
    }

    /// Logical bytes the volume offers.
    pub fn capacity(&self) -> u64 {
        self.root.capacity()
    }

    pub fn member_count(&self) -> usize {
        self.root.member_count()
    }

    pub fn data_members(&self) -> usize {
        self.root.data_members()
    }

    /// Logical bytes of one full stripe across the whole volume.
    pub fn full_stripe_width(&self) -> Option<u64> {
        self.root.full_stripe_width()
    }

    pub fn fault_tolerance(&self) -> FaultTolerance {
        FaultTolerance {
            worst: self.root.losses_to_fail().saturating_sub(1),
            best: self.root.most_losses_survived(),
        }
    }

    /// Whether all data stays readable with these members (volume member indices) lost.
    pub fn survives(&self, failed: &[usize]) -> bool {
        self.root.survives(&|m| failed.contains(&m))
    }

    /// Whether lost member `member` can be rebuilt with these members (it among them) lost
    /// ([`Node::rebuilds`]).
    pub fn rebuilds(&self, member: usize, failed: &[usize]) -> bool {
        self.root.rebuilds(member, &|m| failed.contains(&m))
    }

    /// Member extents behind `[offset, offset+len)`.
    pub fn map(&self, offset: u64, len: u64) -> Result<Mapping, LayoutError> {
        map(&self.root, offset, len)
    }
}
