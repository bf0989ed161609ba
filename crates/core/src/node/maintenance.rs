//! The maintenance side of a node: what keeps its redundancy whole in the background (the
//! write-back cache, resync, rebuild, scrub), and the small types it speaks. Kept apart from
//! the request side ([`super::NodeIo`]) so that each node kind reads as two short lists.

use super::fanout::{children_cache_usage, children_destage_aged, flush_children, resync_children};
use super::scrub_findings::{finding_line, ScrubFinding, ScrubFindings};
use super::ArrayNode;
use crate::error::VolumeResult;
use futures::future::BoxFuture;
use futures::FutureExt;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// What a write-back cache holds and may hold.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheUsage {
    /// Bytes written by clients and not yet on the members.
    pub dirty_bytes: u64,
    /// Memory those bytes keep alive (whole allocations of the writers' buffers).
    pub pinned_bytes: u64,
    /// The most `pinned_bytes` may reach.
    pub bound_bytes: u64,
    /// Write-backs that failed so far without a flush waiting on them: the background
    /// flusher's aged destages and evictions (a refused flush is counted by the volume's
    /// `RefusedFlushes`). Their stripes stay cached and are tried again.
    pub failed_destages: u64,
}

impl CacheUsage {
    pub fn plus(self, o: CacheUsage) -> CacheUsage {
        CacheUsage {
            dirty_bytes: self.dirty_bytes + o.dirty_bytes,
            pinned_bytes: self.pinned_bytes + o.pinned_bytes,
            bound_bytes: self.bound_bytes + o.bound_bytes,
            failed_destages: self.failed_destages + o.failed_destages,
        }
    }
}

/// Mirrors compare (and count, and repair) their copies in blocks of this many bytes; a
/// bare leaf counts the bytes it checks in them too.
pub const MIRROR_SCRUB_BLOCK_BYTES: u64 = 64 << 10;

/// Counts of one scrub (shared atomics: nodes bump them as they go).
#[derive(Debug, Default)]
pub struct ScrubStats {
    /// Parity stripes and mirror blocks whose redundancy was compared.
    pub checked: AtomicU64,
    /// Of those, the ones where data and redundancy disagreed.
    pub mismatches: AtomicU64,
    /// Mismatches (and unreadable copies) rewritten.
    pub repaired: AtomicU64,
    /// Chunks or copies that returned a read error.
    pub unreadable: AtomicU64,
    /// Stripes or blocks not checkable, whatever the reason (the two counts below).
    pub skipped: AtomicU64,
    /// Of those, the ones with no redundancy left: so many members under them failed that
    /// nothing is left to compare against (RAID 5 or a two-way mirror with one out, RAID 6
    /// with two).
    pub skipped_no_redundancy: AtomicU64,
    /// Of those, parity stripes whose parity is stale (a write failed beyond tolerance).
    pub skipped_stale: AtomicU64,
    /// What was found where and what was done, per member (bounded).
    pub findings: parking_lot::Mutex<ScrubFindings>,
}

/// What a node's `scrub_range` is asked to do.
pub struct ScrubPass<'a> {
    /// Rewrite what the redundancy proves wrong (else only count).
    pub repair: bool,
    pub stats: &'a ScrubStats,
    /// The volume's name, for the log lines.
    pub volume: &'a str,
    /// A parity group or mirror above reads the members of the range itself: the leaves
    /// below read nothing of their own (false at the root: bare leaves read themselves).
    pub owner_above: bool,
}

/// Why a scrub could not check a stripe or block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SkipReason {
    /// Members under it failed: what is left has nothing to be compared against.
    NoRedundancy,
    /// Its parity is stale: it says nothing about the data.
    StaleParity,
}

impl ScrubPass<'_> {
    /// The pass an owner (a parity group, a mirror) hands its children: their leaves are
    /// read by the owner, not again by themselves.
    pub(crate) fn owned(&self) -> ScrubPass<'_> {
        ScrubPass {
            repair: self.repair,
            stats: self.stats,
            volume: self.volume,
            owner_above: true,
        }
    }

    pub(crate) fn bump(&self, counter: fn(&ScrubStats) -> &AtomicU64, n: u64) {
        counter(self.stats).fetch_add(n, Relaxed);
    }

    /// Counts one stripe or block skipped, with its reason.
    pub(crate) fn skip(&self, why: SkipReason) {
        self.bump(|s| &s.skipped, 1);
        match why {
            SkipReason::NoRedundancy => self.bump(|s| &s.skipped_no_redundancy, 1),
            SkipReason::StaleParity => self.bump(|s| &s.skipped_stale, 1),
        }
    }

    /// Logs and records a finding.
    pub(crate) fn found(&self, f: ScrubFinding) {
        tracing::warn!("{}", finding_line(self.volume, &f));
        self.stats.findings.lock().add(f);
    }
}

/// The maintenance side of a node (see the module docs). Every method's default does the
/// node's children's work and nothing of its own: right for kinds that hold no cache and no
/// redundancy; a kind that owns something overrides the method and still asks its children.
pub trait NodeMaintenance: Send + Sync {
    /// The node's children, in layout order (none for a leaf).
    fn children(&self) -> &[Box<dyn ArrayNode>] {
        &[]
    }

    /// Writes back whatever the node itself holds (a parity group's write-back stripe cache),
    /// in this node and below. Members are flushed by the volume afterwards.
    fn flush(&self) -> BoxFuture<'_, VolumeResult<()>> {
        flush_children(self.children()).boxed()
    }

    /// Writes back what the node itself holds for `[offset, offset+len)`, in this node and
    /// below (at least that range: the default writes back everything, as [`Self::flush`]).
    /// What a reshape's copy asks of the old tree before it reads a window.
    fn flush_range(&self, offset: u64, len: u64) -> BoxFuture<'_, VolumeResult<()>> {
        let _ = (offset, len);
        self.flush()
    }

    /// What write-back caches in this node and below hold.
    fn cache_usage(&self) -> CacheUsage {
        children_cache_usage(self.children())
    }

    /// What this node and those below hold that a request may be waiting on — a parity
    /// group's stripe locks and log — a line each, for reports of a hang (`Volume::waits`).
    fn waits(&self, out: &mut String) {
        for child in self.children() {
            child.waits(out);
        }
    }

    /// Writes back the partial stripes the write-back caches in this node and below have held
    /// for at least `older_than`: what the background flusher thread does every tick
    /// (simulators, which run no threads, drive it themselves). A stripe that fails to write
    /// stays cached (logged; the next FLUSH reports it).
    fn destage_aged(&self, older_than: Duration) -> BoxFuture<'_, ()> {
        children_destage_aged(self.children(), older_than).boxed()
    }

    /// Recomputes the parity of stripes not known to be in sync, in this node and below
    /// (children one after another: nodes below a parity group may hold parity groups too).
    fn resync(&self) -> BoxFuture<'_, VolumeResult<()>> {
        resync_children(self.children()).boxed()
    }

    /// Makes every copy and every parity chunk under `[offset, offset+len)` agree with the
    /// data as read now (after an unclean shutdown, or onto a stale member): mirrors copy a
    /// readable child over the others, parity groups rewrite whole stripes. Memory is
    /// bounded by the range and one stripe; leaves have nothing to do.
    fn resync_range(&self, _offset: u64, _len: u64) -> BoxFuture<'_, VolumeResult<()>> {
        futures::future::ready(Ok(())).boxed()
    }

    /// Brings what is written but not read under `[offset, offset+len)` up to date: children
    /// being rebuilt (a new member in a failed member's place: written, never read) get
    /// their bytes from the redundancy — mirrors copy a readable copy, parity groups
    /// reconstruct — and a leaf with a replacement copies its member onto it. Nothing else
    /// is written, nor are the members `ahead` (current over the window already: see
    /// [`crate::rebuild::roles_ahead`]; a child is left out when every member being rebuilt
    /// under it is, [`Self::written_by_window`]). Each node holds its own range lock
    /// exclusively over the range while it rebuilds it (so user writes cannot land in
    /// between); memory is bounded by the range.
    fn rebuild_range<'a>(
        &'a self,
        offset: u64,
        len: u64,
        ahead: &'a [usize],
    ) -> BoxFuture<'a, VolumeResult<()>> {
        let _ = (offset, len, ahead);
        futures::future::ready(Ok(())).boxed()
    }

    /// Adds to `out` the members under this node being rebuilt: new members (resyncing, not
    /// failed) and members with a replacement, as [`crate::Volume::rebuild_targets`] counts
    /// them. What a parent asks of a child before it writes it in a rebuild window.
    fn rebuilt_members(&self, out: &mut Vec<usize>) {
        for child in self.children() {
            child.rebuilt_members(out);
        }
    }

    /// Whether a rebuild window that leaves out the members `ahead` writes this node, a
    /// child that takes writes but is not read ([`writes_child`]).
    fn written_by_window(&self, ahead: &[usize]) -> bool {
        let mut rebuilt = Vec::new();
        self.rebuilt_members(&mut rebuilt);
        writes_child(&rebuilt, ahead)
    }

    /// Where byte `offset` of this node lies on the members, as (member index, member
    /// offset): one place for a leaf, every copy's for a mirror, the data chunk's for a
    /// parity group. What a scrub's report names; nothing for a node without members.
    fn members_at(&self, offset: u64) -> Vec<(usize, u64)> {
        let _ = offset;
        Vec::new()
    }

    /// Checks (with `pass.repair`, mends) the redundancy this node and those below own in
    /// `[offset, offset+len)` (see [`crate::scrub`]); split nodes only pass it on, and a
    /// leaf no owner stands over reads itself through its checksums.
    fn scrub_range<'a>(
        &'a self,
        offset: u64,
        len: u64,
        pass: &'a ScrubPass<'a>,
    ) -> BoxFuture<'a, VolumeResult<()>> {
        let _ = (offset, len, pass);
        futures::future::ready(Ok(())).boxed()
    }
}

/// Whether a rebuild window that leaves out the members `ahead`
/// ([`crate::rebuild::roles_ahead`]) writes a child that takes writes but is not read,
/// `rebuilt_below` being the members under it being rebuilt
/// ([`NodeMaintenance::rebuilt_members`]): not when every one of them is ahead. One with any
/// member not ahead is written whole, an ahead member under it included (a repeat write of
/// current bytes: a parent writes a child, not some of its members); one with none (not
/// read for another reason) as it always was.
fn writes_child(rebuilt_below: &[usize], ahead: &[usize]) -> bool {
    rebuilt_below.is_empty() || rebuilt_below.iter().any(|m| !ahead.contains(m))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A child is left out only when every member being rebuilt under it is ahead; a child
    /// with nothing being rebuilt under it is written as before.
    #[test]
    fn a_child_is_left_out_only_when_all_it_rebuilds_is_ahead() {
        assert!(!writes_child(&[1], &[1, 5]));
        assert!(!writes_child(&[1, 5], &[1, 5]));
        assert!(writes_child(&[3], &[1, 5]));
        // A pair with one member ahead, the other new: written whole.
        assert!(writes_child(&[1, 3], &[1]));
        assert!(writes_child(&[], &[1]));
        assert!(writes_child(&[1], &[]));
    }
}
