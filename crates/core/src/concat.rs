//! JBOD: children one after another. No redundancy: tolerance is the weakest child's.

use crate::buf::{Buf, SharedBuf};
use crate::error::VolumeResult;
use crate::node::{flush_children, read_pieces, write_pieces, zero_pieces, ArrayNode, ZeroKind};
use futures::future::BoxFuture;
use futures::FutureExt;
use nbraid_layout::Concat;

pub struct ConcatNode {
    /// The layout node: splits ranges at child boundaries.
    layout: Concat,
    /// Engines of `layout.children()`, same order.
    children: Vec<Box<dyn ArrayNode>>,
    capacity: u64,
}

impl ConcatNode {
    pub fn new(layout: Concat, children: Vec<Box<dyn ArrayNode>>, capacity: u64) -> Self {
        debug_assert_eq!(layout.children().len(), children.len());
        ConcatNode {
            layout,
            children,
            capacity,
        }
    }
}

impl ArrayNode for ConcatNode {
    fn kind(&self) -> &'static str {
        "concat"
    }

    fn capacity(&self) -> u64 {
        self.capacity
    }

    fn losses_to_fail(&self) -> usize {
        self.children
            .iter()
            .map(|c| c.losses_to_fail())
            .min()
            .unwrap_or(1)
    }

    fn readable(&self, offset: u64, len: u64) -> bool {
        self.layout
            .split(offset, len)
            .iter()
            .all(|p| self.children[p.child].readable(p.offset, p.len))
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

    fn zero(&self, offset: u64, len: u64, kind: ZeroKind) -> BoxFuture<'_, VolumeResult<()>> {
        async move {
            let pieces = self.layout.split(offset, len);
            zero_pieces(&self.children, &pieces, kind).await
        }
        .boxed()
    }

    fn flush(&self) -> BoxFuture<'_, VolumeResult<()>> {
        flush_children(&self.children).boxed()
    }

    fn resync(&self) -> BoxFuture<'_, VolumeResult<()>> {
        crate::raid::all_children_resync(&self.children).boxed()
    }
}
