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
//! reading ([`ArrayNode::readable`]) so a failed member is never read, and a mirror never
//! picks a copy that lost a member under the requested range.

use crate::buf::{Buf, SharedBuf};
use crate::error::{VolumeError, VolumeResult};
use crate::failure_gate::FailureGate;
use crate::member::{Member, MemberResult};
use crate::raid::CacheUsage;
use futures::future::{join_all, BoxFuture};
use futures::FutureExt;
use nbraid_layout::ChildPiece;
use parking_lot::RwLock;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// What a zeroing request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZeroKind {
    /// Discard: the range reads back as zeroes afterwards (members may deallocate it).
    Trim,
    /// Write zeroes: the range reads back as zeroes (members may keep it allocated).
    WriteZeroes,
}

/// One node of the engine tree (`parity` is RAID 5/6, see [`crate::raid`]). Offsets are in the node's own address space.
///
/// Contract: a request lies within `0..capacity()` (the volume checks requests once, at the
/// top); `read` fills the whole buffer or fails, never returning bytes that are not the
/// latest data; `write` fails only when some byte of the range could not be stored on any
/// copy. The parity node ([`crate::raid`]) implements read-modify-write on top of its
/// children's `read` and `write`, asking `readable` which chunks are lost.
pub trait ArrayNode: Send + Sync {
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

    /// Writes back whatever the node itself holds (a parity group's write-back stripe cache),
    /// in this node and below. Members are flushed by the volume afterwards.
    fn flush(&self) -> BoxFuture<'_, VolumeResult<()>> {
        futures::future::ready(Ok(())).boxed()
    }

    /// What write-back caches in this node and below hold (nothing for kinds without one).
    fn cache_usage(&self) -> CacheUsage {
        CacheUsage::default()
    }

    /// Writes back the partial stripes the write-back caches in this node and below have held
    /// for at least `older_than`: what the background flusher thread does every tick
    /// (simulators, which run no threads, drive it themselves). A stripe that fails to write
    /// stays cached (logged; the next FLUSH reports it). Nothing for kinds without a cache.
    fn destage_aged(&self, _older_than: Duration) -> BoxFuture<'_, ()> {
        futures::future::ready(()).boxed()
    }

    /// Recomputes the parity of stripes not known to be in sync, in this node and below
    /// (nothing to do for kinds without parity and without children).
    fn resync(&self) -> BoxFuture<'_, VolumeResult<()>> {
        futures::future::ready(Ok(())).boxed()
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
    /// is written. Each node holds its own range lock exclusively over the range while it
    /// rebuilds it (so user writes cannot land in between); memory is bounded by the range.
    fn rebuild_range(&self, _offset: u64, _len: u64) -> BoxFuture<'_, VolumeResult<()>> {
        futures::future::ready(Ok(())).boxed()
    }

    /// Checks (with `pass.repair`, mends) the redundancy this node and those below own in
    /// `[offset, offset+len)` (see [`crate::scrub`]); nothing for kinds without redundancy.
    fn scrub_range<'a>(
        &'a self,
        offset: u64,
        len: u64,
        pass: &'a crate::scrub::ScrubPass<'a>,
    ) -> BoxFuture<'a, VolumeResult<()>> {
        let _ = (offset, len, pass);
        futures::future::ready(Ok(())).boxed()
    }
}

/// Health of one member as the volume sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemberState {
    Healthy,
    /// Returned a write (or repair, or flush) error: never read again, writes skip it.
    Failed,
}

/// A member and what the volume knows about it.
pub struct MemberSlot {
    /// Swapped when a new member takes a failed one's place (rebuild) or a replacement
    /// takes over (replace).
    member: RwLock<Arc<dyn Member>>,
    /// A member being rebuilt to take this one's place while this one still serves (md's
    /// want_replacement): it takes every write, and is never read.
    replacement: RwLock<Option<Arc<dyn Member>>>,
    /// Whether `replacement` is set (the write path's fast check).
    replacing: AtomicBool,
    /// Set once the member returned an error that leaves its contents stale.
    failed: AtomicBool,
    /// Writes (not FUA) completed on the member so far: each bumps it once it is done.
    writes_done: AtomicU64,
    /// The highest `writes_done` a completed member flush is known to cover. A flush is
    /// needed while it is below `writes_done`; concurrent flushes each flush until it is
    /// not, so none is acknowledged before the writes it must cover are durable.
    writes_durable: AtomicU64,
    /// Read errors this member returned (repaired or not).
    read_errors: AtomicU64,
    /// Stale (it missed writes) and being resynced: written, never read.
    resyncing: AtomicBool,
    /// This volume's own reads and writes of the member's region (a member file shared by
    /// several volumes counts each volume's apart; its own counters count them all).
    region_io: RegionIo,
}

/// Reads and writes a volume sent to one member's region, by count and bytes.
#[derive(Debug, Default)]
struct RegionIo {
    reads: AtomicU64,
    read_bytes: AtomicU64,
    writes: AtomicU64,
    write_bytes: AtomicU64,
}

/// A copy of [`RegionIo`] at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RegionIoSnapshot {
    pub reads: u64,
    pub read_bytes: u64,
    pub writes: u64,
    pub write_bytes: u64,
}

impl RegionIo {
    fn read(&self, len_bytes: u64) {
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.read_bytes.fetch_add(len_bytes, Ordering::Relaxed);
    }

    fn write(&self, len_bytes: u64) {
        self.writes.fetch_add(1, Ordering::Relaxed);
        self.write_bytes.fetch_add(len_bytes, Ordering::Relaxed);
    }

    fn snapshot(&self) -> RegionIoSnapshot {
        RegionIoSnapshot {
            reads: self.reads.load(Ordering::Relaxed),
            read_bytes: self.read_bytes.load(Ordering::Relaxed),
            writes: self.writes.load(Ordering::Relaxed),
            write_bytes: self.write_bytes.load(Ordering::Relaxed),
        }
    }
}

impl MemberSlot {
    /// This volume's reads and writes of the member's region so far.
    pub fn region_io(&self) -> RegionIoSnapshot {
        self.region_io.snapshot()
    }

    /// The member serving this slot now.
    pub fn member(&self) -> Arc<dyn Member> {
        self.member.read().clone()
    }

    /// The member being rebuilt to replace this one, if any.
    pub fn replacement(&self) -> Option<Arc<dyn Member>> {
        if !self.replacing.load(Ordering::Acquire) {
            return None;
        }
        self.replacement.read().clone()
    }

    /// Drops the replacement (it failed, or the replace was given up).
    pub fn drop_replacement(&self, why: &dyn std::fmt::Display) {
        if let Some(r) = self.replacement.write().take() {
            self.replacing.store(false, Ordering::Release);
            tracing::error!("replacement `{}` dropped: {why}", r.name());
        }
    }

    /// Flushes the member and its replacement (a replacement that fails is dropped).
    pub(crate) async fn flush(&self) -> MemberResult<()> {
        if let Some(r) = self.replacement() {
            if let Err(e) = r.flush().await {
                self.drop_replacement(&e);
            }
        }
        self.member().flush().await
    }

    pub fn is_failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    pub fn read_errors(&self) -> u64 {
        self.read_errors.load(Ordering::Relaxed)
    }

    /// Stale and being resynced: takes writes, is never read.
    pub fn is_resyncing(&self) -> bool {
        self.resyncing.load(Ordering::Acquire)
    }

    /// Neither failed nor resyncing: holds current data.
    pub fn is_current(&self) -> bool {
        !self.is_failed() && !self.is_resyncing()
    }

    /// The write count a flush started now must make durable, or `None` when every
    /// completed write is already known durable.
    pub(crate) fn flush_target(&self) -> Option<u64> {
        let done = self.writes_done.load(Ordering::Acquire);
        (self.writes_durable.load(Ordering::Acquire) < done).then_some(done)
    }

    /// Records that a member flush started after `target` writes had completed succeeded.
    pub(crate) fn flushed(&self, target: u64) {
        self.writes_durable.fetch_max(target, Ordering::AcqRel);
    }

    /// Non-FUA writes completed so far, and how many of them a completed flush covers (the
    /// partial-parity log retires an entry once its stripe's writes are all durable).
    pub(crate) fn write_counts(&self) -> (u64, u64) {
        (
            self.writes_done.load(Ordering::Acquire),
            self.writes_durable.load(Ordering::Acquire),
        )
    }

    pub(crate) fn mark_dirty(&self) {
        self.writes_done.fetch_add(1, Ordering::AcqRel);
    }
}

/// The members of one volume, shared by every node of its tree.
pub struct MemberTable {
    slots: Vec<MemberSlot>,
    /// Number of slots marked failed (0 with `resyncing` 0 = fast path: everything is readable).
    failed: AtomicUsize,
    /// Number of slots resyncing.
    resyncing: AtomicUsize,
    /// Holds member writes back while a failure is not recorded yet.
    gate: FailureGate,
}

impl MemberTable {
    pub fn new(members: Vec<Arc<dyn Member>>) -> MemberTable {
        MemberTable {
            slots: members
                .into_iter()
                .map(|member| MemberSlot {
                    member: RwLock::new(member),
                    replacement: RwLock::new(None),
                    replacing: AtomicBool::new(false),
                    failed: AtomicBool::new(false),
                    writes_done: AtomicU64::new(0),
                    writes_durable: AtomicU64::new(0),
                    read_errors: AtomicU64::new(0),
                    resyncing: AtomicBool::new(false),
                    region_io: RegionIo::default(),
                })
                .collect(),
            failed: AtomicUsize::new(0),
            resyncing: AtomicUsize::new(0),
            gate: FailureGate::default(),
        }
    }

    pub fn slots(&self) -> &[MemberSlot] {
        &self.slots
    }

    pub fn slot(&self, index: usize) -> &MemberSlot {
        &self.slots[index]
    }

    /// Whether some member is failed or resyncing (not every member can be read).
    pub fn any_failed(&self) -> bool {
        self.failed.load(Ordering::Acquire) > 0 || self.resyncing.load(Ordering::Acquire) > 0
    }

    /// Members marked failed so far.
    pub fn failed_count(&self) -> usize {
        self.failed.load(Ordering::Acquire)
    }

    /// Failures counted and recorded: member writes wait on it.
    pub fn failure_gate(&self) -> &FailureGate {
        &self.gate
    }

    /// Marks member `index` stale (resyncing: written, not read) or current again.
    pub fn set_resyncing(&self, index: usize, on: bool) {
        let slot = &self.slots[index];
        if slot.resyncing.swap(on, Ordering::AcqRel) != on {
            if on {
                self.resyncing.fetch_add(1, Ordering::AcqRel);
            } else {
                self.resyncing.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }

    /// Puts `member` in failed slot `index`, stale (written, not read) until it is rebuilt.
    /// Writes that planned without the slot (it was failed) are done before any rebuild of
    /// their range starts: both hold the node's range lock.
    pub fn install(&self, index: usize, member: Arc<dyn Member>) {
        let slot = &self.slots[index];
        assert!(
            slot.is_failed(),
            "a member is installed in a failed slot only"
        );
        self.set_resyncing(index, true);
        *slot.member.write() = member;
        slot.read_errors.store(0, Ordering::Relaxed);
        if slot.failed.swap(false, Ordering::AcqRel) {
            self.failed.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Puts `member` (a placeholder) in failed slot `index` instead of its failed member,
    /// which is returned; the slot stays failed (the member was removed).
    pub fn detach(&self, index: usize, member: Arc<dyn Member>) -> Arc<dyn Member> {
        let slot = &self.slots[index];
        assert!(slot.is_failed(), "only a failed member is detached");
        self.set_resyncing(index, false);
        std::mem::replace(&mut *slot.member.write(), member)
    }

    /// Starts rebuilding `member` as slot `index`'s replacement: it takes every write from
    /// now on.
    pub fn set_replacement(&self, index: usize, member: Arc<dyn Member>) {
        let slot = &self.slots[index];
        *slot.replacement.write() = Some(member);
        slot.replacing.store(true, Ordering::Release);
    }

    /// The replacement takes the slot's place (the old member is returned); `None` when there
    /// is no replacement (it failed and was dropped).
    pub fn finish_replacement(&self, index: usize) -> Option<Arc<dyn Member>> {
        let slot = &self.slots[index];
        let mut rep = slot.replacement.write();
        let new = rep.take()?;
        slot.replacing.store(false, Ordering::Release);
        let old = std::mem::replace(&mut *slot.member.write(), new);
        Some(old)
    }

    /// Marks member `index` failed (once), logging why.
    pub fn fail(&self, index: usize, why: &dyn std::fmt::Display) {
        let slot = &self.slots[index];
        if !slot.failed.swap(true, Ordering::AcqRel) {
            self.failed.fetch_add(1, Ordering::AcqRel);
            self.gate.failed();
            tracing::error!(
                "member {index} (`{}`) marked failed: {why}",
                slot.member().name()
            );
        }
    }
}

/// A member region: the leaf of the tree.
pub struct LeafNode {
    /// Index into the member table.
    index: usize,
    /// Byte on the member where this region begins.
    start: u64,
    /// Bytes in the region.
    len: u64,
    table: Arc<MemberTable>,
}

impl LeafNode {
    pub fn new(index: usize, start: u64, len: u64, table: Arc<MemberTable>) -> LeafNode {
        LeafNode {
            index,
            start,
            len,
            table,
        }
    }

    fn slot(&self) -> &MemberSlot {
        self.table.slot(self.index)
    }

    fn unavailable(&self, offset: u64, len: u64) -> VolumeError {
        VolumeError::Unavailable {
            reason: format!(
                "member {} (`{}`) has failed; it held bytes {}..{} of the request",
                self.index,
                self.slot().member().name(),
                self.start + offset,
                self.start + offset + len
            ),
        }
    }

    /// Records a read error. A read error alone does not fail the member (md's choice): a
    /// mirror repairs the bytes, and only a failed repair write fails the member.
    fn read_error(&self, e: crate::member::MemberError) -> VolumeError {
        self.slot().read_errors.fetch_add(1, Ordering::Relaxed);
        tracing::warn!("{e}");
        VolumeError::Member {
            member: self.index,
            source: e,
        }
    }

    /// Waits for the replacement's copy of a write; a replacement that fails it is dropped
    /// (the member it was to replace still serves).
    async fn replacement_done(&self, copy: Option<BoxFuture<'_, MemberResult<()>>>) {
        if let Some(Err(e)) = match copy {
            Some(f) => Some(f.await),
            None => None,
        } {
            self.slot().drop_replacement(&e);
        }
    }

    /// Records a failed write-type op: the member's contents are now stale.
    fn failed_write(&self, e: crate::member::MemberError) -> VolumeError {
        self.table.fail(self.index, &e);
        VolumeError::Member {
            member: self.index,
            source: e,
        }
    }
}

impl ArrayNode for LeafNode {
    fn capacity(&self) -> u64 {
        self.len
    }

    fn readable(&self, _offset: u64, _len: u64) -> bool {
        self.slot().is_current()
    }

    fn writable(&self, _offset: u64, _len: u64) -> bool {
        !self.slot().is_failed()
    }

    fn fail_unreadable(&self, _offset: u64, _len: u64, why: &str) {
        self.table.fail(self.index, &why);
    }

    fn read(&self, offset: u64, buf: Buf) -> BoxFuture<'_, VolumeResult<Buf>> {
        async move {
            let slot = self.slot();
            if !slot.is_current() {
                return Err(self.unavailable(offset, buf.len() as u64));
            }
            slot.region_io.read(buf.len() as u64);
            slot.member()
                .read(self.start + offset, buf)
                .await
                .map_err(|e| self.read_error(e))
        }
        .boxed()
    }

    fn write(&self, offset: u64, data: SharedBuf, fua: bool) -> BoxFuture<'_, VolumeResult<()>> {
        async move {
            self.table.gate.wait_recorded().await?;
            let slot = self.slot();
            if slot.is_failed() {
                return Err(self.unavailable(offset, data.len() as u64));
            }
            let at = self.start + offset;
            slot.region_io.write(data.len() as u64);
            let rep = slot.replacement();
            let copy = rep.as_ref().map(|r| r.write(at, data.clone(), fua));
            let r = slot.member().write(at, data, fua).await;
            self.replacement_done(copy).await;
            r.map_err(|e| self.failed_write(e))?;
            if !fua {
                slot.mark_dirty();
            }
            Ok(())
        }
        .boxed()
    }

    fn read_vectored(&self, offset: u64, bufs: Vec<Buf>) -> BoxFuture<'_, VolumeResult<Vec<Buf>>> {
        async move {
            let slot = self.slot();
            if !slot.is_current() {
                let len = bufs.iter().map(|b| b.len() as u64).sum();
                return Err(self.unavailable(offset, len));
            }
            slot.region_io
                .read(bufs.iter().map(|b| b.len() as u64).sum());
            slot.member()
                .read_vectored(self.start + offset, bufs)
                .await
                .map_err(|e| self.read_error(e))
        }
        .boxed()
    }

    fn write_vectored(
        &self,
        offset: u64,
        data: Vec<SharedBuf>,
        fua: bool,
    ) -> BoxFuture<'_, VolumeResult<()>> {
        async move {
            self.table.gate.wait_recorded().await?;
            let slot = self.slot();
            if slot.is_failed() {
                let len = data.iter().map(|d| d.len() as u64).sum();
                return Err(self.unavailable(offset, len));
            }
            let at = self.start + offset;
            slot.region_io
                .write(data.iter().map(|d| d.len() as u64).sum());
            let rep = slot.replacement();
            let copy = rep
                .as_ref()
                .map(|r| r.write_vectored(at, data.clone(), fua));
            let r = slot.member().write_vectored(at, data, fua).await;
            self.replacement_done(copy).await;
            r.map_err(|e| self.failed_write(e))?;
            if !fua {
                slot.mark_dirty();
            }
            Ok(())
        }
        .boxed()
    }

    /// Copies the member's bytes onto its replacement (the parent holds the range's lock).
    fn rebuild_range(&self, offset: u64, len: u64) -> BoxFuture<'_, VolumeResult<()>> {
        async move {
            let slot = self.slot();
            let Some(rep) = slot.replacement() else {
                return Ok(());
            };
            if !slot.is_current() {
                return Err(self.unavailable(offset, len));
            }
            let at = self.start + offset;
            let bytes = slot
                .member()
                .read(at, Buf::new(len as usize))
                .await
                .map_err(|e| self.read_error(e))?;
            match rep.write(at, bytes.freeze(), false).await {
                // The next flush of the slot must reach the replacement too.
                Ok(()) => slot.mark_dirty(),
                Err(e) => slot.drop_replacement(&e),
            }
            Ok(())
        }
        .boxed()
    }

    fn zero(&self, offset: u64, len: u64, kind: ZeroKind) -> BoxFuture<'_, VolumeResult<()>> {
        async move {
            self.table.gate.wait_recorded().await?;
            let slot = self.slot();
            if slot.is_failed() {
                return Err(self.unavailable(offset, len));
            }
            let at = self.start + offset;
            let op = |m: Arc<dyn Member>| {
                async move {
                    match kind {
                        ZeroKind::Trim => m.trim(at, len).await,
                        ZeroKind::WriteZeroes => m.write_zeroes(at, len).await,
                    }
                }
                .boxed()
            };
            let copy = slot.replacement().map(op);
            let r = op(slot.member()).await;
            self.replacement_done(copy).await;
            r.map_err(|e| self.failed_write(e))?;
            slot.mark_dirty();
            Ok(())
        }
        .boxed()
    }
}

/// The first error of a set of results (member I/O errors first: they say the most).
pub(crate) fn first_error(errors: Vec<VolumeError>) -> Option<VolumeError> {
    let mut errors = errors;
    let pos = errors
        .iter()
        .position(VolumeError::is_member_io)
        .unwrap_or(0);
    (!errors.is_empty()).then(|| errors.swap_remove(pos))
}

/// Collects buffers in order, or the most telling error.
pub(crate) fn collect_bufs(results: Vec<VolumeResult<Buf>>) -> VolumeResult<Vec<Buf>> {
    let mut ok = Vec::with_capacity(results.len());
    let mut errors = Vec::new();
    for r in results {
        match r {
            Ok(b) => ok.push(b),
            Err(e) => errors.push(e),
        }
    }
    match first_error(errors) {
        Some(e) => Err(e),
        None => Ok(ok),
    }
}

/// Groups pieces into runs that are contiguous on one child: `(child, child offset, piece
/// indices)`. A stripe request covering several rows puts each child's units side by side on
/// that child, so each child gets one vectored operation instead of one per unit.
pub(crate) fn child_runs(children: usize, pieces: &[ChildPiece]) -> Vec<(usize, u64, Vec<usize>)> {
    let mut runs: Vec<(usize, u64, Vec<usize>)> = Vec::new();
    // Per child: its latest run and where that run ends on the child.
    let mut open: Vec<Option<(usize, u64)>> = vec![None; children];
    for (i, p) in pieces.iter().enumerate() {
        match open[p.child] {
            Some((r, end)) if end == p.offset => runs[r].2.push(i),
            _ => {
                runs.push((p.child, p.offset, vec![i]));
                open[p.child] = Some((runs.len() - 1, p.offset));
            }
        }
        if let Some((_, end)) = open[p.child].as_mut() {
            *end = p.offset + p.len;
        }
    }
    runs
}

/// Reads pieces (in logical order, covering `buf`) from children concurrently and joins them.
pub(crate) async fn read_pieces(
    children: &[Box<dyn ArrayNode>],
    pieces: &[ChildPiece],
    buf: Buf,
) -> VolumeResult<Buf> {
    if let [p] = pieces {
        return children[p.child].read(p.offset, buf).await;
    }
    let lens: Vec<usize> = pieces.iter().map(|p| p.len as usize).collect();
    let mut bufs: Vec<Option<Buf>> = buf.split_lengths(&lens).into_iter().map(Some).collect();
    let runs = child_runs(children.len(), pieces);
    let futs = runs.iter().map(|(child, offset, idx)| {
        let mut mine: Vec<Buf> = idx.iter().map(|&i| bufs[i].take().expect("once")).collect();
        async move {
            if mine.len() == 1 {
                let b = mine.pop().expect("one");
                children[*child].read(*offset, b).await.map(|b| vec![b])
            } else {
                children[*child].read_vectored(*offset, mine).await
            }
        }
    });
    let results = join_all(futs).await;
    let mut errors = Vec::new();
    for ((_, _, idx), r) in runs.iter().zip(results) {
        match r {
            Ok(got) => {
                for (&i, b) in idx.iter().zip(got) {
                    bufs[i] = Some(b);
                }
            }
            Err(e) => errors.push(e),
        }
    }
    if let Some(e) = first_error(errors) {
        return Err(e);
    }
    Ok(Buf::join(
        bufs.into_iter().map(|b| b.expect("filled")).collect(),
    ))
}

/// Writes pieces (slices of `data`, which starts at `base` in the parent's address space).
pub(crate) async fn write_pieces(
    children: &[Box<dyn ArrayNode>],
    pieces: &[ChildPiece],
    base: u64,
    data: SharedBuf,
    fua: bool,
) -> VolumeResult<()> {
    if let [p] = pieces {
        return children[p.child].write(p.offset, data, fua).await;
    }
    let runs = child_runs(children.len(), pieces);
    let results = join_all(runs.iter().map(|(child, offset, idx)| {
        let mut mine: Vec<SharedBuf> = idx
            .iter()
            .map(|&i| {
                let at = (pieces[i].logical - base) as usize;
                data.slice(at..at + pieces[i].len as usize)
            })
            .collect();
        if mine.len() == 1 {
            children[*child].write(*offset, mine.pop().expect("one"), fua)
        } else {
            children[*child].write_vectored(*offset, mine, fua)
        }
    }))
    .await;
    all_ok(results)
}

/// Zeroes pieces, one operation per run of pieces contiguous on one child.
pub(crate) async fn zero_pieces(
    children: &[Box<dyn ArrayNode>],
    pieces: &[ChildPiece],
    kind: ZeroKind,
) -> VolumeResult<()> {
    let runs = child_runs(children.len(), pieces);
    let results = join_all(runs.iter().map(|(child, offset, idx)| {
        let len = idx.iter().map(|&i| pieces[i].len).sum();
        children[*child].zero(*offset, len, kind)
    }))
    .await;
    all_ok(results)
}

pub(crate) fn all_ok(results: Vec<VolumeResult<()>>) -> VolumeResult<()> {
    match first_error(results.into_iter().filter_map(Result::err).collect()) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// The children's caches together.
pub(crate) fn children_cache_usage(children: &[Box<dyn ArrayNode>]) -> CacheUsage {
    children
        .iter()
        .fold(CacheUsage::default(), |u, c| u.plus(c.cache_usage()))
}

pub(crate) async fn flush_children(children: &[Box<dyn ArrayNode>]) -> VolumeResult<()> {
    all_ok(join_all(children.iter().map(|c| c.flush())).await)
}

/// [`ArrayNode::destage_aged`] on every child, at once.
pub(crate) async fn children_destage_aged(children: &[Box<dyn ArrayNode>], older_than: Duration) {
    join_all(children.iter().map(|c| c.destage_aged(older_than))).await;
}
