//! The node for levels without redundancy (JBOD, RAID 0): the layout splits a request into
//! child pieces, which run concurrently. Tolerance is the weakest child's. The levels differ
//! only in how they split ([`Splitter`], implemented in `concat` and `stripe`).

use crate::buf::{Buf, SharedBuf};
use crate::error::VolumeResult;
use crate::node::{
    each_run, first_error, read_pieces, write_pieces, zero_pieces, ArrayNode, NodeIo,
    NodeMaintenance, ScrubPass, ZeroKind,
};
use futures::future::BoxFuture;
use futures::FutureExt;
use nbraid_layout::ChildPiece;

/// How a level without redundancy spreads its address space over its children.
pub trait Splitter: Send + Sync + 'static {
    /// The pieces of `[offset, offset+len)`, each on one child.
    fn split(&self, offset: u64, len: u64) -> Vec<ChildPiece>;
}

/// Most bytes of one TRIM / WRITE_ZEROES a split node splits at once.
pub const ZERO_WINDOW_BYTES: u64 = 64 << 20;

pub struct SplitNode<L: Splitter> {
    /// The layout node that splits ranges.
    layout: L,
    /// Engines of the layout node's children, same order.
    children: Vec<Box<dyn ArrayNode>>,
    capacity: u64,
}

impl<L: Splitter> SplitNode<L> {
    pub fn new(layout: L, children: Vec<Box<dyn ArrayNode>>, capacity: u64) -> Self {
        SplitNode {
            layout,
            children,
            capacity,
        }
    }
}

impl<L: Splitter> NodeIo for SplitNode<L> {
    fn capacity(&self) -> u64 {
        self.capacity
    }

    fn readable(&self, offset: u64, len: u64) -> bool {
        self.layout
            .split(offset, len)
            .iter()
            .all(|p| self.children[p.child].readable(p.offset, p.len))
    }

    fn writable(&self, offset: u64, len: u64) -> bool {
        self.layout
            .split(offset, len)
            .iter()
            .all(|p| self.children[p.child].writable(p.offset, p.len))
    }

    fn read(&self, offset: u64, buf: Buf) -> BoxFuture<'_, VolumeResult<Buf>> {
        async move {
            let pieces = self.layout.split(offset, buf.len() as u64);
            read_pieces(&self.children, &pieces, buf).await
        }
        .boxed()
    }

    fn write(&self, offset: u64, data: SharedBuf, fua: bool) -> BoxFuture<'_, VolumeResult<()>> {
        async move {
            let pieces = self.layout.split(offset, data.len() as u64);
            write_pieces(&self.children, &pieces, offset, data, fua).await
        }
        .boxed()
    }

    /// Zeroes window by window: a window's strips are merged per child (adjacent strips of
    /// one child are one operation), so a request of any size costs memory for one window's
    /// pieces and at most one operation per child in flight.
    fn zero(&self, offset: u64, len: u64, kind: ZeroKind) -> BoxFuture<'_, VolumeResult<()>> {
        async move {
            let end = offset + len;
            let mut at = offset;
            let mut errors = Vec::new();
            while at < end {
                let n = (end - at).min(ZERO_WINDOW_BYTES);
                let pieces = self.layout.split(at, n);
                // Every window is attempted even if one fails: no range is left silently old.
                if let Err(e) = zero_pieces(&self.children, &pieces, kind).await {
                    errors.push(e);
                }
                at += n;
            }
            match first_error(errors) {
                Some(e) => Err(e),
                None => Ok(()),
            }
        }
        .boxed()
    }
}

/// Holds nothing of its own: flush, cache usage, aged destage and resync are the children's
/// (the trait's defaults); range work goes to the pieces of the range.
impl<L: Splitter> NodeMaintenance for SplitNode<L> {
    fn children(&self) -> &[Box<dyn ArrayNode>] {
        &self.children
    }

    fn members_at(&self, offset: u64) -> Vec<(usize, u64)> {
        (self.layout.split(offset, 1).iter())
            .flat_map(|p| self.children[p.child].members_at(p.offset))
            .collect()
    }

    fn resync_range(&self, offset: u64, len: u64) -> BoxFuture<'_, VolumeResult<()>> {
        async move {
            // Pieces one after another: memory stays bounded by the caller's range.
            for p in self.layout.split(offset, len) {
                self.children[p.child].resync_range(p.offset, p.len).await?;
            }
            Ok(())
        }
        .boxed()
    }

    /// Each child rebuilds its pieces of the range (runs on one child merged, concurrently).
    fn rebuild_range<'a>(
        &'a self,
        offset: u64,
        len: u64,
        ahead: &'a [usize],
    ) -> BoxFuture<'a, VolumeResult<()>> {
        async move {
            let pieces = self.layout.split(offset, len);
            each_run(&self.children, &pieces, |c, at, n| {
                c.rebuild_range(at, n, ahead)
            })
            .await
        }
        .boxed()
    }

    /// Each child scrubs its pieces of the range (runs on one child merged).
    fn scrub_range<'a>(
        &'a self,
        offset: u64,
        len: u64,
        pass: &'a ScrubPass<'a>,
    ) -> BoxFuture<'a, VolumeResult<()>> {
        async move {
            let pieces = self.layout.split(offset, len);
            each_run(&self.children, &pieces, |c, at, n| {
                c.scrub_range(at, n, pass)
            })
            .await
        }
        .boxed()
    }
}
