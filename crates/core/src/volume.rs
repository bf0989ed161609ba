//! A volume: a layout [`Geometry`] assembled over members into an engine tree.
//!
//! The volume checks every request once (alignment to its logical block, range, length),
//! hands it to the root node, and keeps the two things that span the tree: member state (in
//! the shared [`MemberTable`]) and flush bookkeeping. Flush is exact: a member is marked dirty
//! when a write to it *completes*, and a flush clears the mark and then `fdatasync`s each
//! marked member. A write that completed before the flush was issued therefore marked its
//! member before the flush looked, and is durable when the flush completes.
//!
//! Reports read the members through [`Volume::member_health`] (one snapshot per member);
//! `volume/tree.rs` checks a layout against the members and builds the engine tree.

use crate::buf::Buf;
use crate::checksum::BLOCK_BYTES;
use crate::error::{VolumeError, VolumeResult};
use crate::member::Member;
use crate::node::{ArrayNode, MemberTable, ScrubPass, ZeroKind};
use crate::part_blocks::PartBlocks;
use crate::pass::{Checkpoint, PassWork};
use crate::raid::{CacheMode, CacheUsage};
use crate::read_policy::ReadPolicy;
use crate::scrub::{scrub_inflight, ScrubControl, ScrubReport, SCRUB_WINDOW_BYTES};
use futures::future::join_all;
use futures::FutureExt;
use nbraid_layout::{FaultTolerance, Geometry, Node};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;
use tree::{build, check_tree, parity_groups};

mod tree;

/// Longest request a volume accepts.
pub const MAX_REQUEST_BYTES: u64 = 32 << 20;

/// How a volume is assembled.
#[derive(Clone, Debug)]
pub struct VolumeOptions {
    /// Logical block size: 512 (default) or 4096. Requests must be aligned to it.
    pub block_size: u64,
    /// How mirrors pick the copy that serves a read.
    pub read_policy: ReadPolicy,
    /// Sequential mirror reads move to another copy after this many bytes (≥ 4 KiB; 2 MiB
    /// default), so long runs spread over copies in large pieces. Each piece one copy skips
    /// costs it a seek and part of a turn: on the simulated HDD, 1 MiB reads at QD 4 from
    /// two copies do 1.44× one disk with 1 MiB pieces, 1.84× with 2 or 4 MiB, 1.44× with 8.
    pub mirror_seq_piece: u64,
    /// Whether every member region holds only zeroes (files just created sparse, RAM; default
    /// false). Parity groups (RAID 5/6/50/60) decide from it whether parity is known to match
    /// data at assembly ([`crate::raid::SyncState::at_assembly`]).
    pub members_known_zero: bool,
    /// Parity groups: write-back stripe cache (default, 32 MiB per volume) or write-through.
    pub cache: CacheMode,
    /// Write-back: a partial stripe waiting longer than this is written by a background
    /// thread (default 1 s; `None`: it waits for a flush, for eviction or to fill up).
    pub cache_max_age: Option<Duration>,
    /// Per-block checksums on the members' checksum areas (`None`: none kept or checked).
    pub checksums: Option<crate::checksum::ChecksumSetup>,
    /// md's `max_read_errors`: a member is failed once the redundancy has corrected more of
    /// its read errors than this (a count halved per hour without one; default 20; 0:
    /// never). A member the volume cannot do without is kept ([`crate::read_errors`]).
    pub max_read_errors: u32,
}

impl Default for VolumeOptions {
    fn default() -> Self {
        VolumeOptions {
            block_size: 512,
            read_policy: ReadPolicy::default(),
            mirror_seq_piece: 2 << 20,
            members_known_zero: false,
            cache: CacheMode::default(),
            cache_max_age: Some(Duration::from_secs(1)),
            checksums: None,
            max_read_errors: crate::read_errors::MAX_READ_ERRORS_DEFAULT,
        }
    }
}

/// Volume-level counters.
#[derive(Debug, Default)]
struct Counters {
    reads: AtomicU64,
    read_bytes: AtomicU64,
    writes: AtomicU64,
    write_bytes: AtomicU64,
    flushes: AtomicU64,
    trims: AtomicU64,
    zeroes: AtomicU64,
    errors: AtomicU64,
}

/// A copy of the volume's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VolumeCounters {
    pub reads: u64,
    pub read_bytes: u64,
    pub writes: u64,
    pub write_bytes: u64,
    pub flushes: u64,
    pub trims: u64,
    pub write_zeroes: u64,
    /// Requests that returned an error.
    pub errors: u64,
    /// Mirror pieces and parity chunk ranges rewritten after a read error.
    pub repairs: u64,
}

/// A request's range that passed [`Volume::check`] (aligned, inside the volume, not too
/// long): the proof the checked entry points take, so a request is checked once.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CheckedRange {
    offset: u64,
    len: u64,
}

pub struct Volume {
    geometry: Geometry,
    table: Arc<MemberTable>,
    root: Box<dyn ArrayNode>,
    /// Mirror pieces and parity chunk ranges repaired, counted by the nodes of the tree.
    repairs: Arc<AtomicU64>,
    opts: VolumeOptions,
    /// Usable bytes: the layout's capacity rounded down to the logical block.
    capacity: u64,
    counters: Counters,
    /// Flushes that could not write the write-back cache's bytes to the members.
    refused: parking_lot::Mutex<RefusedFlushes>,
}

/// Flushes that could not write back what the write-back cache holds (a parity group
/// beyond its tolerance): those acknowledged writes stay in memory only, read from there.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RefusedFlushes {
    pub count: u64,
    /// The latest one's error.
    pub last_error: Option<String>,
}

impl Volume {
    /// Assembles `geometry` over `members` (index = the layout's member index). Fails with a
    /// clear message if a member is missing or too small, or an option is out of range.
    pub fn new(
        geometry: Geometry,
        members: Vec<Arc<dyn Member>>,
        opts: VolumeOptions,
    ) -> VolumeResult<Volume> {
        Self::with_ppl(geometry, members, opts, None)
    }

    /// [`Volume::new`] with a partial-parity log on the members' `ppl` areas (`metadata::Array`
    /// passes them; without one the RAID 5/6 write hole stays open).
    pub fn with_ppl(
        geometry: Geometry,
        members: Vec<Arc<dyn Member>>,
        opts: VolumeOptions,
        ppl: Option<crate::ppl::PplSetup>,
    ) -> VolumeResult<Volume> {
        if opts.block_size != 512 && opts.block_size != 4096 {
            return Err(VolumeError::Assembly(format!(
                "logical block size {} is not supported (512 or 4096)",
                opts.block_size
            )));
        }
        if opts.mirror_seq_piece < 4096 || !opts.mirror_seq_piece.is_multiple_of(4096) {
            return Err(VolumeError::Assembly(format!(
                "mirror_seq_piece {} must be a positive multiple of 4096",
                opts.mirror_seq_piece
            )));
        }
        let mut problems = Vec::new();
        let mut parity_groups = 0;
        check_tree(geometry.root(), &members, &mut problems, &mut parity_groups);
        if let CacheMode::WriteBack { bytes } = opts.cache {
            if bytes == 0 {
                problems.push("a write-back cache needs a size above 0 bytes".into());
            }
        }
        if !problems.is_empty() {
            return Err(VolumeError::Assembly(problems.join("; ")));
        }
        let table = MemberTable::new(members)
            .with_tree(geometry.root().clone())
            .with_max_read_errors(opts.max_read_errors);
        let table = Arc::new(table);
        let repairs = Arc::new(AtomicU64::new(0));
        // The cache bound is per volume: each parity group gets an equal share.
        let mut node_opts = opts.clone();
        if let CacheMode::WriteBack { bytes } = opts.cache {
            node_opts.cache = CacheMode::WriteBack {
                bytes: bytes / parity_groups.max(1) as u64,
            };
        }
        let ppl = ppl.as_ref();
        let root = build(geometry.root(), &table, &node_opts, (&repairs, ppl), &mut 0);
        let capacity = geometry.capacity() / opts.block_size * opts.block_size;
        Ok(Volume {
            geometry,
            table,
            root,
            repairs,
            opts,
            capacity,
            counters: Counters::default(),
            refused: Default::default(),
        })
    }

    /// A volume mid-reshape from `old` to `new` over the same `members` (the leaves of `new`
    /// number them all; `old` leaves out the members being added), every byte below
    /// `position` in the new tree. Both trees keep the options' cache (its bound shared by
    /// the parity groups of both) and are built without a partial-parity log and with parity
    /// not known in sync ([`crate::reshape`]). Returns the volume and the handle that drives
    /// the copy.
    pub fn reshaping(
        old: Geometry,
        new: &Geometry,
        members: Vec<Arc<dyn Member>>,
        mut opts: VolumeOptions,
        position: u64,
    ) -> VolumeResult<(Volume, crate::reshape::ReshapeNode)> {
        let mut problems = Vec::new();
        check_tree(new.root(), &members, &mut problems, &mut 0);
        if !problems.is_empty() {
            return Err(VolumeError::Assembly(problems.join("; ")));
        }
        let layout = nbraid_layout::Reshape::new(old.root().clone(), new.root().clone())
            .map_err(|e| VolumeError::Assembly(format!("reshape: {e}")))?;
        opts.members_known_zero = false;
        // One checksum header and entry cache per member region start across both trees
        // (sized for the longer region), whichever tree asks first.
        let _spanning = (opts.checksums.as_ref())
            .map(|c| c.open_spanning(&[old.root(), new.root()]))
            .unwrap_or_default();
        let mut v = Self::with_ppl(old, members, opts, None)?;
        v.table.add_tree(new.root().clone());
        // The cache bound is per volume: the parity groups of both trees share it.
        let mut node_opts = v.opts.clone();
        if let CacheMode::WriteBack { bytes } = node_opts.cache {
            let groups = parity_groups(v.geometry.root()) + parity_groups(new.root());
            node_opts.cache = CacheMode::WriteBack {
                bytes: (bytes / groups.max(1) as u64).max(1),
            };
        }
        let tree = |n: &Node| build(n, &v.table, &node_opts, (&v.repairs, None), &mut 0);
        let (old_tree, new_tree) = (tree(v.geometry.root()), tree(new.root()));
        let node = crate::reshape::ReshapeNode::new(
            layout,
            old_tree,
            new_tree,
            position,
            v.table.clone(),
        )?;
        v.root = Box::new(node.clone());
        Ok((v, node))
    }

    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// The member table (rebuild installs members in it).
    pub(crate) fn table(&self) -> &MemberTable {
        &self.table
    }

    /// The member table, shared (the volume's records keep it to record failures).
    pub(crate) fn shared_table(&self) -> Arc<MemberTable> {
        self.table.clone()
    }

    /// The root of the engine tree (for passes over the whole tree, like scrub).
    pub(crate) fn root_node(&self) -> &dyn ArrayNode {
        self.root.as_ref()
    }

    pub fn block_size(&self) -> u64 {
        self.opts.block_size
    }

    pub fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    pub fn options(&self) -> &VolumeOptions {
        &self.opts
    }

    /// Declared fault tolerance of the tree (from the layout).
    pub fn fault_tolerance(&self) -> FaultTolerance {
        self.geometry.fault_tolerance()
    }

    pub fn member_count(&self) -> usize {
        self.table.slots().len()
    }

    /// The member serving slot `index` now.
    pub fn member(&self, index: usize) -> Arc<dyn Member> {
        self.table.slot(index).member()
    }

    /// Every member's health (state, failure, error counts, I/O), by member index: one
    /// snapshot per member, read in one walk of the member table.
    pub fn member_health(&self) -> Vec<crate::node::MemberHealth> {
        self.table.health()
    }

    /// Marks member `index` failed (mdadm's `--fail`, or a member missing at assembly: pass
    /// any placeholder member of the right size and fail it at once). It is never read or
    /// written again; redundancy serves its data. Unknown indices are ignored.
    pub fn fail_member<W: crate::fail_cause::FailWhy + ?Sized>(&self, index: usize, why: &W) {
        if index < self.table.slots().len() {
            self.table.fail(index, &why);
        }
    }

    /// Records write error `e` of member `index` on metadata outside the tree (its
    /// superblock, the write-intent bitmap) as a data write's is
    /// ([`crate::node::MemberTable::failed_write`]): a member the volume cannot do without
    /// that still reads is kept. Whether it was failed.
    pub(crate) async fn failed_write(
        &self,
        index: usize,
        e: &crate::member::MemberError,
        why: &(dyn crate::fail_cause::FailWhy + Sync),
    ) -> bool {
        self.table.failed_write(index, e, why).await
    }

    /// Marks member `index` stale (`on`: written but never read, while it is resynced) or
    /// current again.
    pub fn set_resyncing(&self, index: usize, on: bool) {
        if index < self.table.slots().len() {
            self.table.set_resyncing(index, on);
        }
    }

    /// Whether member `index` is neither failed nor resyncing.
    pub fn member_is_current(&self, index: usize) -> bool {
        self.table.slot(index).is_current()
    }

    /// Whether member `index` has been marked failed.
    pub fn member_is_failed(&self, index: usize) -> bool {
        self.table.slot(index).is_failed()
    }

    /// Members marked failed so far (O(1): the superblocks compare it with what they record).
    pub fn failed_count(&self) -> usize {
        self.table.failed_count()
    }

    /// Member failures so far, never going back (a member put in a failed slot does not
    /// undo one): a watcher comparing two looks sees every failure between them, also one
    /// that came after a spare filled the slot of another.
    pub fn failures_so_far(&self) -> u64 {
        self.table.failure_gate().generation()
    }

    /// Whether every byte is still readable with the members that are failed: a property of
    /// the tree and the failed set, O(members) whatever the capacity.
    pub fn is_available(&self) -> bool {
        let slots = self.table.slots();
        !self.table.any_failed()
            || self
                .geometry
                .root()
                .survives(&|m| slots.get(m).is_none_or(|s| !s.is_current()))
    }

    /// Why the volume has lost data (members failed beyond its tolerance), or `None`.
    fn data_lost(&self) -> Option<VolumeError> {
        if self.is_available() {
            return None;
        }
        let failed: Vec<String> = self
            .table
            .slots()
            .iter()
            .enumerate()
            .filter(|(_, s)| s.is_failed())
            .map(|(i, s)| format!("{i} (`{}`)", s.member().name()))
            .collect();
        Some(VolumeError::Unavailable {
            reason: format!(
                "members {} have failed, more than the volume tolerates: data written to them is lost",
                failed.join(", ")
            ),
        })
    }

    /// What the volume's write-back stripe caches hold, and their bound.
    pub fn cache_usage(&self) -> CacheUsage {
        self.root.cache_usage()
    }

    /// The flushes that could not write back the write-back cache's bytes so far.
    pub fn refused_flushes(&self) -> RefusedFlushes {
        self.refused.lock().clone()
    }

    /// What the volume's parity groups hold that a request may wait on (stripe locks, logs):
    /// the state a hang leaves behind.
    pub fn waits(&self) -> String {
        let mut out = String::new();
        self.root.waits(&mut out);
        out
    }

    /// Writes back the cached partial stripes that have waited at least `older_than` (what
    /// the background flusher does for `cache_max_age`; simulators, which run no threads,
    /// set `cache_max_age: None` and call this as their flusher).
    pub async fn destage_aged(&self, older_than: Duration) {
        self.root.destage_aged(older_than).await
    }

    /// Whether some member is failed (but possibly still within tolerance).
    pub fn is_degraded(&self) -> bool {
        self.table.any_failed()
    }

    pub fn counters(&self) -> VolumeCounters {
        let c = &self.counters;
        VolumeCounters {
            reads: c.reads.load(Relaxed),
            read_bytes: c.read_bytes.load(Relaxed),
            writes: c.writes.load(Relaxed),
            write_bytes: c.write_bytes.load(Relaxed),
            flushes: c.flushes.load(Relaxed),
            trims: c.trims.load(Relaxed),
            write_zeroes: c.zeroes.load(Relaxed),
            errors: c.errors.load(Relaxed),
            repairs: self.repairs.load(Relaxed),
        }
    }

    pub(crate) fn check(
        &self,
        op: &'static str,
        offset: u64,
        len: u64,
    ) -> VolumeResult<CheckedRange> {
        if len > MAX_REQUEST_BYTES {
            return Err(VolumeError::TooLong {
                op,
                offset,
                len,
                max: MAX_REQUEST_BYTES,
            });
        }
        self.check_bounds(op, offset, len)
    }

    /// [`Self::check`] without the per-request length limit: for the engine's own work,
    /// whose unit (a full stripe) may be longer than any request.
    fn check_bounds(&self, op: &'static str, offset: u64, len: u64) -> VolumeResult<CheckedRange> {
        let block = self.opts.block_size;
        if !offset.is_multiple_of(block) || !len.is_multiple_of(block) {
            return Err(VolumeError::Misaligned {
                op,
                offset,
                len,
                block,
            });
        }
        if offset
            .checked_add(len)
            .is_none_or(|end| end > self.capacity)
        {
            return Err(VolumeError::OutOfRange {
                op,
                offset,
                len,
                capacity: self.capacity,
            });
        }
        Ok(CheckedRange { offset, len })
    }

    fn count<T>(&self, r: VolumeResult<T>) -> VolumeResult<T> {
        if r.is_err() {
            self.counters.errors.fetch_add(1, Relaxed);
        }
        r
    }

    /// Reads `len` bytes at `offset`.
    pub async fn read(&self, offset: u64, len: u64) -> VolumeResult<Buf> {
        self.check("read", offset, len)?;
        self.read_into(offset, Buf::new(len as usize)).await
    }

    /// Reads `buf.len()` bytes at `offset` into `buf` (reuse a buffer).
    pub async fn read_into(&self, offset: u64, buf: Buf) -> VolumeResult<Buf> {
        let len = buf.len() as u64;
        self.check("read", offset, len)?;
        if len == 0 {
            return Ok(buf);
        }
        let r = self.root.read(offset, buf).await;
        if r.is_ok() {
            self.counters.reads.fetch_add(1, Relaxed);
            self.counters.read_bytes.fetch_add(len, Relaxed);
        }
        self.count(r)
    }

    /// Writes `buf` at `offset`; with `fua`, the bytes are durable on every copy when this
    /// completes. Hands a buffer of the same length back for reuse (its contents are
    /// unspecified: a parity write-back cache may keep the original's bytes without copying,
    /// and then a fresh buffer comes back).
    pub async fn write(&self, offset: u64, buf: Buf, fua: bool) -> VolumeResult<Buf> {
        let range = self.check("write", offset, buf.len() as u64)?;
        self.write_checked(range, buf, fua).await
    }

    /// [`Volume::write`] of a range already checked (the array checks before its stages, so a
    /// request is checked once).
    pub(crate) async fn write_checked(
        &self,
        range: CheckedRange,
        buf: Buf,
        fua: bool,
    ) -> VolumeResult<Buf> {
        let (offset, len) = (range.offset, range.len);
        assert_eq!(len, buf.len() as u64, "the buffer is the range checked");
        if len == 0 {
            return Ok(buf);
        }
        let data = buf.freeze();
        let r = (self
            .part_blocks()
            .write(&*self.root, offset, data.clone(), fua))
        .await;
        if r.is_ok() {
            self.counters.writes.fetch_add(1, Relaxed);
            self.counters.write_bytes.fetch_add(len, Relaxed);
        }
        self.count(r)?;
        Ok(data.into_reusable())
    }

    /// The volume's rule for writes and zeroings of part of a 4 KiB checksum block.
    fn part_blocks(&self) -> PartBlocks {
        PartBlocks {
            on: self.opts.checksums.is_some() && self.opts.block_size < BLOCK_BYTES,
            capacity_bytes: self.capacity,
        }
    }

    /// Makes every write that completed before this call durable on its members.
    pub async fn flush(&self) -> VolumeResult<()> {
        let r = self.flush_inner().await;
        if r.is_ok() {
            self.counters.flushes.fetch_add(1, Relaxed);
        }
        self.count(r)
    }

    async fn flush_inner(&self) -> VolumeResult<()> {
        // Write back what nodes hold (parity stripe caches). If some of it cannot be written
        // (beyond tolerance), the members are still flushed, so everything that did reach
        // them is durable; the error is reported.
        let drained = self.root.flush().await;
        let slots = self.table.slots();
        // Targets are taken before any member flush starts: each flush then covers every
        // write that completed before this call.
        let todo: Vec<(usize, u64)> = (0..slots.len())
            .filter(|&i| !slots[i].is_failed())
            .filter_map(|i| slots[i].flush_target().map(|t| (i, t)))
            .collect();
        let results = join_all(todo.iter().map(|&(i, _)| slots[i].flush())).await;
        let mut first = None;
        for (&(i, target), r) in todo.iter().zip(results) {
            if r.is_ok() {
                slots[i].flushed(target);
            }
            if let Err(e) = r {
                // Writes may be lost on this member: it cannot be trusted any more.
                self.table.fail(i, &e);
                first.get_or_insert(VolumeError::Member {
                    member: i,
                    source: e,
                });
            }
        }
        if let Err(e) = drained {
            // Counted only while cached bytes are left: the drain is what failed, not a
            // leaf's bookkeeping.
            if self.cache_usage().dirty_bytes > 0 {
                let mut refused = self.refused.lock();
                refused.count += 1;
                refused.last_error = Some(e.to_string());
            }
            return Err(e);
        }
        // A flush promises that every acknowledged write is durable: never while some of them
        // are on members lost beyond tolerance (whether they failed now or earlier).
        if let Some(lost) = self.data_lost() {
            return Err(first.unwrap_or(lost));
        }
        // Otherwise every byte still has a durable copy: the flush did its job.
        Ok(())
    }

    /// Recomputes the parity of every stripe not known to be in sync (after assembling members
    /// not known to be zero: [`crate::raid::SyncState::Unknown`]); afterwards partial writes
    /// may use read-modify-write.
    pub async fn resync(&self) -> VolumeResult<()> {
        let r = self.root.resync().await;
        self.count(r)
    }

    /// Makes the copies and parity under `[offset, offset+len)` agree with the data as read
    /// now (see [`crate::node::NodeMaintenance::resync_range`]). Not bound by the request
    /// limit: the resync's piece is at least one full stripe, which may be longer (a RAID 5
    /// of four members with 16 MiB strips: 48 MiB).
    pub async fn resync_range(&self, offset: u64, len: u64) -> VolumeResult<()> {
        self.check_bounds("resync", offset, len)?;
        let r = self.root.resync_range(offset, len).await;
        self.count(r)
    }

    /// Discards `[offset, offset+len)`; it reads back as zeroes.
    pub async fn trim(&self, offset: u64, len: u64) -> VolumeResult<()> {
        self.zero("trim", offset, len, ZeroKind::Trim, false).await
    }

    /// Writes zeroes over `[offset, offset+len)`; with `fua`, durable when this completes.
    pub async fn write_zeroes(&self, offset: u64, len: u64, fua: bool) -> VolumeResult<()> {
        self.zero("write-zeroes", offset, len, ZeroKind::WriteZeroes, fua)
            .await
    }

    async fn zero(
        &self,
        op: &'static str,
        offset: u64,
        len: u64,
        kind: ZeroKind,
        fua: bool,
    ) -> VolumeResult<()> {
        // Zeroing carries no data, so it is not bound by the per-request data limit.
        if !offset.is_multiple_of(self.opts.block_size) || !len.is_multiple_of(self.opts.block_size)
        {
            return Err(VolumeError::Misaligned {
                op,
                offset,
                len,
                block: self.opts.block_size,
            });
        }
        if offset
            .checked_add(len)
            .is_none_or(|end| end > self.capacity)
        {
            return Err(VolumeError::OutOfRange {
                op,
                offset,
                len,
                capacity: self.capacity,
            });
        }
        if len == 0 {
            return Ok(());
        }
        let mut r = (self.part_blocks().zero(&*self.root, offset, len, kind, fua)).await;
        if r.is_ok() && fua {
            r = self.flush_inner().await;
        }
        if r.is_ok() {
            match kind {
                ZeroKind::Trim => self.counters.trims.fetch_add(1, Relaxed),
                ZeroKind::WriteZeroes => self.counters.zeroes.fetch_add(1, Relaxed),
            };
        }
        self.count(r)
    }
}

/// The partial-parity log's dirty start reads and writes the members through this.
impl crate::ppl::LogHost for Volume {
    fn member_is_current(&self, index: usize) -> bool {
        Volume::member_is_current(self, index)
    }

    fn member(&self, index: usize) -> Arc<dyn Member> {
        Volume::member(self, index)
    }

    fn root(&self) -> &Node {
        self.geometry().root()
    }

    fn fail_member(&self, index: usize, why: &str) {
        Volume::fail_member(self, index, why)
    }
}

/// Scrub: the pass over the whole volume (see [`crate::scrub`]).
impl Volume {
    /// Scrubs the volume from the control's position to the end, one window at a time (see
    /// the module docs), honouring its rate limit, pause and cancel. Returns the final
    /// report; a cancelled scrub resumes when called again with the same control.
    pub async fn scrub(&self, ctl: &ScrubControl) -> VolumeResult<ScrubReport> {
        self.scrub_pass(ctl, 0, Box::new(|_| futures::future::ready(Ok(())).boxed()))
            .await
    }

    /// [`Volume::scrub`], calling `checkpoint(position)` every `checkpoint_bytes` (0: never)
    /// with no window in flight, everything below `position` scrubbed.
    pub(crate) async fn scrub_pass<'a>(
        &'a self,
        ctl: &'a ScrubControl,
        checkpoint_bytes: u64,
        mut checkpoint: Checkpoint<'a>,
    ) -> VolumeResult<ScrubReport> {
        let root = self.root_node();
        let pass = ScrubPass {
            repair: ctl.repair(),
            stats: &ctl.stats,
            volume: ctl.volume(),
            owner_above: false,
        };
        let pass = &pass;
        let member_bytes = (0..self.member_count()).map(|i| self.member_end(i)).sum();
        crate::pass::run(
            &ctl.pass,
            PassWork {
                total_bytes: root.capacity(),
                window_bytes: SCRUB_WINDOW_BYTES,
                inflight: scrub_inflight(SCRUB_WINDOW_BYTES, member_bytes, root.capacity()),
                window: Box::new(move |at, len| root.scrub_range(at, len, pass)),
                checkpoint_bytes,
                // Shortened to the pass's own lifetime (it borrows `pass`).
                checkpoint: Box::new(move |pos| checkpoint(pos)),
                activity: Some(Box::new(move || self.client_ops())),
                stale: None,
            },
        )
        .await?;
        Ok(ctl.report())
    }
}
