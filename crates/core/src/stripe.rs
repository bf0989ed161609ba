//! RAID 0: `unit` bytes on each child in turn. A request crossing units is split by the layout
//! and its pieces run concurrently.

use crate::split::Splitter;
use nbraid_layout::{ChildPiece, Stripe};

impl Splitter for Stripe {
    fn split(&self, offset: u64, len: u64) -> Vec<ChildPiece> {
        Stripe::split(self, offset, len)
    }
}
