//! JBOD: children one after another, split at child boundaries.

use crate::split::Splitter;
use nbraid_layout::{ChildPiece, Concat};

impl Splitter for Concat {
    fn split(&self, offset: u64, len: u64) -> Vec<ChildPiece> {
        Concat::split(self, offset, len)
    }
}
