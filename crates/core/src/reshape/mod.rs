//! A volume being reshaped: the engine's side of `nbraid_layout::Reshape`.
//!
//! [`ReshapeNode`] is the root of a volume whose bytes are moving from one tree to another:
//! it holds both engine trees, built over the same members (`old` holds the bytes at and
//! above the position, `new` those below it), and the position. Every request takes its byte
//! range shared in the window lock, then goes to the tree its position says — a request
//! straddling the position is cut in two. The copy (`copy.rs`) takes its window exclusive, so
//! a request never meets a half-copied window: one inside it waits, one elsewhere goes on.
//! Because a request holds its range until it completes, the copier never reads a range a
//! write is still changing, and no request sees the position move under it.
//!
//! A window's copy is: save the member rows the new tree's writes will overwrite while old
//! bytes still live there (only when the layout's rule says `Backup`; the saver makes them
//! durable and records them before returning), read the window from the old tree, write it
//! into the new tree (parity computed there), flush, move the position, checkpoint it. A
//! power loss anywhere leaves either the old bytes of the window in place (a `Direct` window:
//! the copy is redone from the old tree) or their rows in the backup (written back over the
//! members with [`ReshapeNode::restore`], then the copy is redone).
//!
//! The superblock checkpoint and backup behind the hooks are `metadata/reshape_run.rs`'s.
//!
//! # Clients first
//! Both trees keep the volume's write-back stripe cache (its bound shared by the parity
//! groups of both). The old tree's cache is the one that could hurt the copy: a stripe it
//! destaged after its window was copied would write old-tree rows over rows the new tree has
//! taken. So the copier, holding the window, first writes back what the old tree caches for
//! it (`flush_range`); no request can cache more there while the window is held, and after
//! the position moves none goes to the old tree. The copy reads through the cache anyway.
//! Making a window durable flushes the members (and the leaves' checksums), not the caches:
//! what clients wrote is theirs to flush, as on a healthy volume.
//!
//! The node counts client requests (started, in flight). While clients do I/O the copy takes
//! windows of at most 1 MiB (a request meeting the window waits for its copy) and reads and
//! writes them in pieces of about 256 KiB (a member serves a client after one piece's share,
//! not a window's); idle, its windows start at 1 MiB and double up to the pass's (an HDD
//! streams long ones), in pieces of up to 8 MiB. A client arriving while a long idle window
//! is in flight still waits for that one window.
//! `tests/reshape_speed.rs` measures both (`docs/benchmarks/README.md`, "Online reshape").
//!
//! # The write hole
//! Neither tree is logged (the partial-parity log's places are the old tree's). What protects
//! a partial-stripe write cut by a power loss is md's other answer, the write-intent bitmap:
//! the bits are logical ranges, the same in both trees, and the open's resync (a reshaping
//! volume is unlogged, so it resyncs before serving, after the backup is written back) walks
//! them through [`ReshapeNode`]'s `resync_range`, which sends each piece to the tree its
//! position says. As on any unlogged array, a member lost in the same crash leaves the rows
//! being written unprotected.

mod copy;
mod grown;

pub use copy::{MemberRows, ReshapeHooks};

use crate::buf::{Buf, SharedBuf};
use crate::error::{VolumeError, VolumeResult};
use crate::node::{ArrayNode, NodeIo, NodeMaintenance, ZeroKind};
use crate::range_lock::RangeLock;
use futures::future::{try_join_all, BoxFuture};
use futures::FutureExt;
use nbraid_layout::{Reshape, Routed, Side};
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::Arc;

/// The root of a volume mid-reshape (see the module docs). Cheap to clone: the volume keeps
/// one as its root and one to drive the copy.
#[derive(Clone)]
pub struct ReshapeNode(Arc<State>);

struct State {
    layout: Reshape,
    /// `children[0]` the old tree, `children[1]` the new one (the maintenance fan-out's
    /// order: both are flushed).
    children: [Box<dyn ArrayNode>; 2],
    /// Bytes below it are in the new tree; only the copier moves it, holding the window.
    position: AtomicU64,
    /// Requests hold their byte range shared; the copier holds its window exclusive.
    window: RangeLock,
    /// The members under both trees, for the critical-section backup's raw rows.
    members: Arc<crate::node::MemberTable>,
    /// Client requests seen, for the copy's pace.
    clients: Clients,
    /// The last window's length (0 before the first), for the copy's pace.
    last_window_bytes: AtomicU64,
}

/// Client requests started and in flight, and how many had started when the copier last
/// looked: whether clients are doing I/O (the copy then takes short windows and pieces,
/// `copy::window_len`, `copy::piece_len`).
#[derive(Default)]
struct Clients {
    started: AtomicU64,
    inflight: AtomicU64,
    seen: AtomicU64,
}

/// A client request in flight (counted until dropped).
struct InFlight<'a>(&'a Clients);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.inflight.fetch_sub(1, SeqCst);
    }
}

impl Clients {
    fn arrived(&self) -> InFlight<'_> {
        self.started.fetch_add(1, SeqCst);
        self.inflight.fetch_add(1, SeqCst);
        InFlight(self)
    }

    /// Whether a client request is in flight or started since the last call (the copier's
    /// alone).
    fn busy(&self) -> bool {
        let now = self.started.load(SeqCst);
        let started = self.seen.swap(now, SeqCst) != now;
        started || self.inflight.load(SeqCst) > 0
    }
}

impl ReshapeNode {
    /// A reshape at `position` (a position of `layout`) over the two engine trees.
    pub(crate) fn new(
        layout: Reshape,
        old: Box<dyn ArrayNode>,
        new: Box<dyn ArrayNode>,
        position: u64,
        members: Arc<crate::node::MemberTable>,
    ) -> VolumeResult<ReshapeNode> {
        if !layout.is_position(position) {
            return Err(VolumeError::Assembly(format!(
                "reshape position {position} is not on whole stripes of both trees (multiples of {} bytes up to {})",
                layout.unit(),
                layout.capacity()
            )));
        }
        assert_eq!(
            old.capacity(),
            layout.old().capacity(),
            "old tree as laid out"
        );
        assert_eq!(
            new.capacity(),
            layout.new_tree().capacity(),
            "new tree as laid out"
        );
        Ok(ReshapeNode(Arc::new(State {
            layout,
            children: [old, new],
            position: AtomicU64::new(position),
            window: RangeLock::default(),
            members,
            clients: Clients::default(),
            last_window_bytes: AtomicU64::new(0),
        })))
    }

    /// Every byte below it is in the new tree.
    pub fn position(&self) -> u64 {
        self.0.position.load(SeqCst)
    }

    pub fn layout(&self) -> &Reshape {
        &self.0.layout
    }

    /// Bytes the whole reshape pass walks: the copy, then the space the new shape adds
    /// ([`ReshapeNode::run_pass`]'s total, known before it runs).
    pub fn pass_bytes(&self) -> u64 {
        self.0.layout.capacity() + grown::Grown::of(&self.0.layout).bytes()
    }

    fn tree(&self, side: Side) -> &dyn ArrayNode {
        match side {
            Side::Old => self.0.children[0].as_ref(),
            Side::New => self.0.children[1].as_ref(),
        }
    }

    /// `[offset, offset+len)` by tree at the current position (callers hold the range).
    fn route(&self, offset: u64, len: u64) -> Vec<Routed> {
        self.0
            .layout
            .route(self.position(), offset, len)
            .expect("the volume checked the request and the position is the layout's")
    }

    /// Whether `f` holds for every piece of the range.
    fn all(&self, offset: u64, len: u64, f: impl Fn(&dyn ArrayNode, u64, u64) -> bool) -> bool {
        self.route(offset, len)
            .iter()
            .all(|r| f(self.tree(r.side), r.offset, r.len))
    }
}

impl NodeIo for ReshapeNode {
    fn capacity(&self) -> u64 {
        self.0.layout.capacity()
    }

    fn readable(&self, offset: u64, len: u64) -> bool {
        self.all(offset, len, |t, o, l| t.readable(o, l))
    }

    fn writable(&self, offset: u64, len: u64) -> bool {
        self.all(offset, len, |t, o, l| t.writable(o, l))
    }

    fn intact(&self, offset: u64, len: u64) -> bool {
        self.all(offset, len, |t, o, l| t.intact(o, l))
    }

    fn read(&self, offset: u64, buf: Buf) -> BoxFuture<'_, VolumeResult<Buf>> {
        async move {
            let len = buf.len() as u64;
            let _client = self.0.clients.arrived();
            let _held = self.0.window.lock(offset, len.max(1), false).await;
            let pieces = self.route(offset, len);
            let lens: Vec<usize> = pieces.iter().map(|r| r.len as usize).collect();
            let bufs = if lens.is_empty() {
                vec![buf]
            } else {
                buf.split_lengths(&lens)
            };
            let reads = pieces
                .iter()
                .zip(bufs)
                .map(|(r, b)| self.tree(r.side).read(r.offset, b));
            Ok(Buf::join(try_join_all(reads).await?))
        }
        .boxed()
    }

    fn write(&self, offset: u64, data: SharedBuf, fua: bool) -> BoxFuture<'_, VolumeResult<()>> {
        async move {
            let len = data.len() as u64;
            let _client = self.0.clients.arrived();
            let _held = self.0.window.lock(offset, len.max(1), false).await;
            let writes = self.route(offset, len).into_iter().map(|r| {
                let at = (r.offset - offset) as usize;
                let piece = data.slice(at..at + r.len as usize);
                self.tree(r.side).write(r.offset, piece, fua)
            });
            try_join_all(writes).await.map(|_| ())
        }
        .boxed()
    }

    fn zero(&self, offset: u64, len: u64, kind: ZeroKind) -> BoxFuture<'_, VolumeResult<()>> {
        async move {
            let _client = self.0.clients.arrived();
            let _held = self.0.window.lock(offset, len.max(1), false).await;
            let zeroes = self
                .route(offset, len)
                .into_iter()
                .map(|r| self.tree(r.side).zero(r.offset, r.len, kind));
            try_join_all(zeroes).await.map(|_| ())
        }
        .boxed()
    }
}

/// Flush and the cache fan out to both trees (the defaults). A whole-tree resync, rebuild or
/// scrub of either tree would walk bytes the other one holds, so none runs while a reshape
/// does: the whole-tree resync is a no-op here and rebuild and scrub keep their no-op
/// defaults. A ranged resync (the bitmap's regions after a crash) goes to each tree by the
/// position.
impl NodeMaintenance for ReshapeNode {
    fn children(&self) -> &[Box<dyn ArrayNode>] {
        &self.0.children
    }

    fn resync(&self) -> BoxFuture<'_, VolumeResult<()>> {
        futures::future::ready(Ok(())).boxed()
    }

    /// Each piece by its tree, the range held exclusive over whole units (the trees resync
    /// whole stripes, and a unit is whole stripes of both): neither the copy nor a write
    /// moves bytes under it.
    fn resync_range(&self, offset: u64, len: u64) -> BoxFuture<'_, VolumeResult<()>> {
        async move {
            if len == 0 {
                return Ok(());
            }
            let unit = self.0.layout.unit();
            let start = offset / unit * unit;
            let end = (offset + len).div_ceil(unit) * unit;
            let _held = self.0.window.lock(start, end - start, true).await;
            for r in self.route(offset, len) {
                self.tree(r.side).resync_range(r.offset, r.len).await?;
            }
            Ok(())
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests;
