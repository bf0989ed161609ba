//! The engine tree: one [`ArrayNode`] per node of the layout tree, one module per node kind
//! (`concat`, `stripe`, `mirror`, and `raid` for parity groups: RAID 5/6 and the spans of
//! RAID 50/60).
//!
//! Each node serves its own address space (`0..capacity`), exactly as the layout defines it:
//! it splits a request with its layout node's splitter and hands the pieces to its children,
//! so level code only ever sees ranges of its own. Leaves ([`LeafNode`]) are member regions:
//! they add the region start, call the member, count errors and mark members failed, and
//! hold every write back while a member failure is not recorded yet ([`crate::failure_gate`]).
//!
//! Member state lives in one [`MemberTable`] shared by the whole tree (and by the volume):
//! whether a member has failed, whether it holds writes not yet flushed. Nodes ask it before
//! reading ([`NodeIo::readable`]) so a failed member is never read, and a mirror never
//! picks a copy that lost a member under the requested range.
//!
//! # Two traits
//! A node does two jobs, so it implements two traits: [`NodeIo`] serves requests (read,
//! write, zero, and the questions a parent asks before planning: readable, writable,
//! intact) and [`NodeMaintenance`] keeps the redundancy whole in the background (the
//! write-back cache, resync, rebuild, scrub). [`ArrayNode`] is both, the type of a child.
//! Maintenance that concerns only the children (flush, cache usage, aged destage, resync)
//! fans out by default through [`NodeMaintenance::children`]; the fan-out and the choice
//! of the error to report are written once, in `fanout`.
//!
//! # Files
//! `mod.rs` (the traits), `maintenance.rs` (the maintenance trait and the small types it
//! speaks: [`CacheUsage`], [`ScrubPass`]), `members.rs` (the [`MemberTable`]), `health.rs` (what
//! reports read of each member: [`MemberHealth`], one snapshot per member), `leaf.rs`
//! ([`LeafNode`]; `leaf/scrub.rs`: a bare leaf's scrub), `fanout.rs` (requests and
//! maintenance spread over children), `scrub_findings.rs` (what a scrub found where: the
//! report's bounded list). This module imports nothing from the node kinds (`split`,
//! `mirror`, `raid`): they build on it.

mod fanout;
mod health;
mod leaf;
mod maintenance;
mod members;
mod read_back;
pub mod scrub_findings;

pub(crate) use fanout::{
    all_ok, children_cache_usage, children_destage_aged, collect_bufs, each_run, first_error,
    flush_children, read_pieces, read_runs, resync_children, write_pieces, zero_pieces,
};
pub use health::MemberHealth;
pub use leaf::LeafNode;
pub use maintenance::{
    CacheUsage, NodeMaintenance, ScrubPass, ScrubStats, SkipReason, MIRROR_SCRUB_BLOCK_BYTES,
};
pub use members::{MemberSlot, MemberState, MemberTable, RegionIoSnapshot};
pub(crate) use read_back::{read_back, ReadBack};

use crate::buf::{Buf, SharedBuf};
use crate::error::VolumeResult;
use futures::future::{join_all, BoxFuture};
use futures::FutureExt;

/// What a zeroing request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZeroKind {
    /// Discard: the range reads back as zeroes afterwards (members may deallocate it).
    Trim,
    /// Write zeroes: the range reads back as zeroes (members may keep it allocated).
    WriteZeroes,
}

/// A node of the engine tree: it serves requests and keeps its redundancy (the two traits
/// every node kind implements; see the module docs).
pub trait ArrayNode: NodeIo + NodeMaintenance {}

impl<T: NodeIo + NodeMaintenance + ?Sized> ArrayNode for T {}

/// The request side of a node of the engine tree. Offsets are in the node's own address
/// space.
///
/// Contract: a request lies within `0..capacity()` (the volume checks requests once, at the
/// top); `read` fills the whole buffer or fails, never returning bytes that are not the
/// latest data; `write` fails only when some byte of the range could not be stored on any
/// copy. The parity node ([`crate::raid`]) implements read-modify-write on top of its
/// children's `read` and `write`, asking `readable` which chunks are lost.
pub trait NodeIo: Send + Sync {
    fn capacity(&self) -> u64;
    /// Whether every byte of `[offset, offset+len)` can be read with the members as they are.
    fn readable(&self, offset: u64, len: u64) -> bool;
    /// Whether `[offset, offset+len)` takes writes: like `readable`, except that a member being
    /// resynced (stale, not read) still takes them.
    fn writable(&self, offset: u64, len: u64) -> bool {
        self.readable(offset, len)
    }
    /// Whether `[offset, offset+len)` reads without rebuilding anything from parity: every
    /// member under it that a read would use is there (a mirror: some copy is intact).
    /// Parity rebuilt from a stripe a crash tore gives bytes nobody wrote, so a resync
    /// prefers intact sources.
    fn intact(&self, offset: u64, len: u64) -> bool {
        self.readable(offset, len)
    }
    fn read(&self, offset: u64, buf: Buf) -> BoxFuture<'_, VolumeResult<Buf>>;
    fn write(&self, offset: u64, data: SharedBuf, fua: bool) -> BoxFuture<'_, VolumeResult<()>>;
    fn zero(&self, offset: u64, len: u64, kind: ZeroKind) -> BoxFuture<'_, VolumeResult<()>>;
    /// Reads consecutive bytes from `offset` into `bufs`, in order. Nodes that can serve the
    /// whole run with one member operation (leaves, mirrors of leaves) override this; the
    /// default reads each buffer on its own.
    fn read_vectored(&self, offset: u64, bufs: Vec<Buf>) -> BoxFuture<'_, VolumeResult<Vec<Buf>>> {
        let futs: Vec<_> = bufs
            .into_iter()
            .scan(offset, |at, b| {
                let o = *at;
                *at += b.len() as u64;
                Some(self.read(o, b))
            })
            .collect();
        async move { collect_bufs(join_all(futs).await) }.boxed()
    }

    /// Writes `data` pieces to consecutive bytes from `offset` (see `read_vectored`).
    fn write_vectored(
        &self,
        offset: u64,
        data: Vec<SharedBuf>,
        fua: bool,
    ) -> BoxFuture<'_, VolumeResult<()>> {
        let futs: Vec<_> = data
            .into_iter()
            .scan(offset, |at, d| {
                let o = *at;
                *at += d.len() as u64;
                Some(self.write(o, d, fua))
            })
            .collect();
        async move { all_ok(join_all(futs).await) }.boxed()
    }

    /// Marks failed the members under `[offset, offset+len)` that could not be read there (a
    /// mirror: every copy, since a mirror's read fails only when each did): a parity group
    /// whose write had to give up its redundancy because of such a read error says so on
    /// disk this way, where an in-memory note would be forgotten at the next start. Kinds
    /// a parity group does not stand over keep the default: nothing.
    fn fail_unreadable(&self, _offset: u64, _len: u64, _why: &str) {}

    /// Whether `bytes`, rebuilt from the redundancy for `[offset, offset+len)` of this node,
    /// match the per-block checksums kept there ([`crate::checksum`]), or, where they do not,
    /// equal the bytes the node holds (its entries are the ones wrong): a parity group checks
    /// what it rebuilt before returning it. Nodes that keep none (and cannot check) say yes.
    fn verify_rebuilt<'a>(&'a self, _offset: u64, _bytes: &'a [u8]) -> BoxFuture<'a, bool> {
        futures::future::ready(true).boxed()
    }
}
