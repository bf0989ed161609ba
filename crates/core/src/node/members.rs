//! The member table: every member's slot (the member, a replacement being rebuilt, failed and
//! stale flags, write and flush counts), shared by the whole tree and by the volume.

use crate::buf::Buf;
use crate::checksum::BLOCK_BYTES;
use crate::fail_cause::{FailCause, FailWhy, Failure};
use crate::failure_gate::FailureGate;
use crate::member::{Member, MemberError, MemberResult};
use crate::read_errors::{ReadErrorCount, Verdict, MAX_READ_ERRORS_DEFAULT};
use nbraid_layout::Node;
use parking_lot::{Mutex, RwLock};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

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
    /// Whether `member` keeps its bytes in memory ([`Member::memory_backed`]), kept beside it
    /// so the log's per-write checks read a flag instead of cloning the member.
    memory_backed: AtomicBool,
    /// A member being rebuilt to take this one's place while this one still serves (md's
    /// want_replacement): it takes every write, and is never read.
    replacement: RwLock<Option<Arc<dyn Member>>>,
    /// Whether `replacement` is set (the write path's fast check).
    replacing: AtomicBool,
    /// Set once the member returned an error that leaves its contents stale.
    failed: AtomicBool,
    /// Why it was failed (the first failure; cleared when a member is installed again).
    failure: Mutex<Option<Failure>>,
    /// Writes (not FUA) completed on the member so far: each bumps it once it is done.
    writes_done: AtomicU64,
    /// The highest `writes_done` a completed member flush is known to cover. A flush is
    /// needed while it is below `writes_done`; concurrent flushes each flush until it is
    /// not, so none is acknowledged before the writes it must cover are durable.
    writes_durable: AtomicU64,
    /// Read errors this member returned (repaired or not).
    read_errors: AtomicU64,
    /// Read errors the redundancy corrected, decayed: what `max_read_errors` is held to
    /// ([`crate::read_errors`]). Reset when a member is installed again.
    corrected_reads: ReadErrorCount,
    /// Past the read-error limit but kept: the volume cannot do without it
    /// ([`MemberTable::read_error_corrected`]). Cleared when a member is installed again.
    kept_past_read_limit: AtomicBool,
    /// Write-type errors (write, trim, write-zeroes, checksum pages) of a member kept through
    /// them ([`MemberTable::fail_for_write_error`]).
    write_errors: AtomicU64,
    /// Stale (it missed writes) and being resynced: written, never read.
    resyncing: AtomicBool,
    /// Past its bad-block limit but kept: the volume cannot do without it
    /// ([`MemberTable::fail_for_bad_blocks`]). Cleared when a member is installed again.
    kept_past_limit: AtomicBool,
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

    fn reset(&self) {
        for n in [
            &self.reads,
            &self.read_bytes,
            &self.writes,
            &self.write_bytes,
        ] {
            n.store(0, Ordering::Relaxed);
        }
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

    /// Counts a read of `len_bytes` of this volume's region of the member.
    pub(super) fn count_read(&self, len_bytes: u64) {
        self.region_io.read(len_bytes);
    }

    /// Counts a write of `len_bytes` of this volume's region of the member.
    pub(super) fn count_write(&self, len_bytes: u64) {
        self.region_io.write(len_bytes);
    }

    /// Counts a read error the member returned.
    pub(super) fn count_read_error(&self) {
        self.read_errors.fetch_add(1, Ordering::Relaxed);
    }

    /// The member serving this slot now.
    pub fn member(&self) -> Arc<dyn Member> {
        self.member.read().clone()
    }

    /// Whether the member serving this slot now keeps its bytes in memory.
    pub fn memory_backed(&self) -> bool {
        self.memory_backed.load(Ordering::Acquire)
    }

    /// A new member took the slot (installed, or a replacement took over): what the slot
    /// counted was its predecessor's. Its errors, its marks past a limit and its I/O start
    /// from zero — a replacement inheriting a flaky disk's corrected read errors would be
    /// failed early under `max_read_errors`, and status would show the old disk's errors on it.
    fn count_anew(&self) {
        self.read_errors.store(0, Ordering::Relaxed);
        self.write_errors.store(0, Ordering::Relaxed);
        self.corrected_reads.reset();
        self.kept_past_read_limit.store(false, Ordering::Relaxed);
        self.kept_past_limit.store(false, Ordering::Relaxed);
        self.region_io.reset();
    }

    /// Puts `member` in this slot, returning the one it held.
    fn put(&self, member: Arc<dyn Member>) -> Arc<dyn Member> {
        let mut held = self.member.write();
        self.memory_backed
            .store(member.memory_backed(), Ordering::Release);
        std::mem::replace(&mut *held, member)
    }

    /// Whether `m` is the member in this slot now (none swapped in since it was taken).
    pub fn holds(&self, m: &Arc<dyn Member>) -> bool {
        Arc::ptr_eq(&self.member.read(), m)
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

    /// Why the member is failed, while it is.
    pub fn failure(&self) -> Option<Failure> {
        if !self.is_failed() {
            return None;
        }
        self.failure.lock().clone()
    }

    pub fn read_errors(&self) -> u64 {
        self.read_errors.load(Ordering::Relaxed)
    }

    /// Write-type errors of a member kept through them (the volume cannot do without it).
    pub fn write_errors(&self) -> u64 {
        self.write_errors.load(Ordering::Relaxed)
    }

    /// Whether the member returned more bad blocks than allowed and was kept, as it holds
    /// the only readable copy of some data (its bad blocks answer errors, the rest serves).
    pub fn kept_past_limit(&self) -> bool {
        self.kept_past_limit.load(Ordering::Relaxed)
    }

    /// Read errors the redundancy corrected, as the limit counts them now (decayed).
    pub fn corrected_read_errors(&self) -> u32 {
        self.corrected_reads.at(Instant::now())
    }

    /// Whether the member passed the read-error limit and was kept, as the volume cannot do
    /// without it.
    pub fn kept_past_read_limit(&self) -> bool {
        self.kept_past_read_limit.load(Ordering::Relaxed)
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
    /// The volume's layouts, which say what it can do without: one, or a reshape's old and
    /// new (none: tables outside a volume, whose members fail past their bad-block limit).
    trees: RwLock<Vec<Node>>,
    /// Held while deciding a fail past a limit (bad blocks, read errors) or for a write
    /// error, so two members at once cannot both be judged spare (each with the other
    /// still there).
    bad_block_fails: Mutex<()>,
    /// `max_read_errors`: corrected read errors a member may return (decayed) before it is
    /// failed; 0: never.
    max_read_errors: u32,
}

impl MemberTable {
    pub fn new(members: Vec<Arc<dyn Member>>) -> MemberTable {
        MemberTable {
            slots: members
                .into_iter()
                .map(|member| MemberSlot {
                    memory_backed: AtomicBool::new(member.memory_backed()),
                    member: RwLock::new(member),
                    replacement: RwLock::new(None),
                    replacing: AtomicBool::new(false),
                    failed: AtomicBool::new(false),
                    failure: Mutex::new(None),
                    writes_done: AtomicU64::new(0),
                    writes_durable: AtomicU64::new(0),
                    read_errors: AtomicU64::new(0),
                    corrected_reads: ReadErrorCount::default(),
                    kept_past_read_limit: AtomicBool::new(false),
                    resyncing: AtomicBool::new(false),
                    kept_past_limit: AtomicBool::new(false),
                    write_errors: AtomicU64::new(0),
                    region_io: RegionIo::default(),
                })
                .collect(),
            failed: AtomicUsize::new(0),
            resyncing: AtomicUsize::new(0),
            gate: FailureGate::default(),
            trees: RwLock::new(Vec::new()),
            bad_block_fails: Mutex::new(()),
            max_read_errors: MAX_READ_ERRORS_DEFAULT,
        }
    }

    /// The table with `limit` as its `max_read_errors` (0: read errors never fail a member).
    pub fn with_max_read_errors(mut self, limit: u32) -> MemberTable {
        self.max_read_errors = limit;
        self
    }

    /// The table of a volume laid out as `tree` (members by its indices).
    pub fn with_tree(self, tree: Node) -> MemberTable {
        self.add_tree(tree);
        self
    }

    /// Another layout the volume's data lies in too (a reshape's new one).
    pub fn add_tree(&self, tree: Node) {
        self.trees.write().push(tree);
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
        slot.put(member);
        slot.count_anew();
        *slot.failure.lock() = None;
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
        slot.put(member)
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
        let old = slot.put(new);
        slot.count_anew();
        Some(old)
    }

    /// Marks member `index` failed (once), logging why and keeping its cause. A replacement being rebuilt beside
    /// it is dropped: it copied the failed member and takes no write of a failed slot, so
    /// swapped in later it would lack what was written meanwhile (the healing above may put
    /// it back in the role as a new member, rebuilt whole).
    pub fn fail(&self, index: usize, why: &dyn FailWhy) {
        let slot = &self.slots[index];
        let mut failure = slot.failure.lock();
        if !slot.failed.swap(true, Ordering::AcqRel) {
            *failure = Some(Failure {
                cause: why.fail_cause(),
                why: why.to_string(),
            });
            drop(failure);
            self.failed.fetch_add(1, Ordering::AcqRel);
            self.gate.failed();
            tracing::error!(
                "member {index} (`{}`) marked failed: {why}",
                slot.member().name()
            );
            slot.drop_replacement(&"the member it replaces failed");
        } else if why.fail_cause() == FailCause::Operator {
            // The operator's word outranks the first cause: it stays out until brought back.
            let was = failure.replace(Failure {
                cause: FailCause::Operator,
                why: why.to_string(),
            });
            // Recorded too (the records keep the cause): a restart must not let it back.
            if was.is_none_or(|f| f.cause != FailCause::Operator) {
                self.gate.failed();
            }
        }
    }
}

impl MemberTable {
    /// Fails member `index` for returning more bad blocks than allowed, unless the volume
    /// cannot do without it ([`Node::may_lose`], members failed or not current counted as
    /// lost): then it is kept — its bad blocks keep answering errors, every other block
    /// serves — and marked so for `status`. Whether it was failed.
    pub(crate) fn fail_for_bad_blocks(&self, index: usize, why: &dyn FailWhy) -> bool {
        let kept = &self.slots[index].kept_past_limit;
        self.fail_past_limit(index, why, kept, "bad-block")
    }

    /// Counts a read error of member `index` that the redundancy corrected (its bytes were
    /// served from another copy or rebuilt). Past `max_read_errors` (decayed: see
    /// [`crate::read_errors`]) the member is failed as one returning I/O errors is, with
    /// "N read errors (limit L)" as the reason, unless the volume cannot do without it: then
    /// it is kept and marked so for `status`. Whether it was failed.
    pub(crate) fn read_error_corrected(&self, index: usize) -> bool {
        let Some(slot) = self.slots.get(index) else {
            return false;
        };
        if !slot.is_current() {
            return false; // Failed (or stale) meanwhile: nothing left to judge.
        }
        let limit = self.max_read_errors;
        let (count, verdict) = slot.corrected_reads.note(Instant::now(), limit);
        if verdict == Verdict::Keep {
            return false;
        }
        let why = format!("{count} read errors (limit {limit})");
        self.fail_past_limit(index, &why, &slot.kept_past_read_limit, "read-error")
    }

    /// Fails member `index` past a limit (`what` names it), unless the volume cannot do
    /// without it ([`Node::may_lose`], members failed or not current counted as lost): then
    /// it is kept, `kept` set and said once. Whether it was failed.
    fn fail_past_limit(
        &self,
        index: usize,
        why: &dyn FailWhy,
        kept: &AtomicBool,
        what: &str,
    ) -> bool {
        let _one_at_a_time = self.bad_block_fails.lock();
        let lost = |m: usize| self.slots.get(m).is_none_or(|s| !s.is_current());
        if self.trees.read().iter().all(|t| t.may_lose(index, &lost)) {
            self.fail(index, why);
            return true;
        }
        if !kept.swap(true, Ordering::Relaxed) {
            tracing::error!(
                "member {index} (`{}`) kept though past its {what} limit: it holds the only readable copy of some data ({why})",
                self.slots[index].member().name()
            );
        }
        false
    }

    /// Whether the volume can do without every member of `members` at once (members failed
    /// or not current counted as gone already), in every tree it has.
    pub(crate) fn may_lose_all(&self, members: &[usize]) -> bool {
        let lost = |m: usize| self.slots.get(m).is_none_or(|s| !s.is_current());
        let gone = |m: usize| members.contains(&m) || lost(m);
        self.trees.read().iter().all(|t| t.survives(&gone))
    }

    /// Whether a write error could leave member `index` serving: the volume cannot do
    /// without it and no parity is derived from it (RAID 0, concat, the last copy of a
    /// mirror). Under a parity group it must go whatever that costs: its peers' parity
    /// would be stale against it.
    pub(crate) fn may_keep_through_write_error(&self, index: usize) -> bool {
        let lost = |m: usize| self.slots.get(m).is_none_or(|s| !s.is_current());
        let trees = self.trees.read();
        trees.iter().any(|t| !t.may_lose(index, &lost))
            && !trees.iter().any(|t| t.under_parity(index))
    }

    /// Fails member `index` for a failed write (or trim, write-zeroes, checksum page write):
    /// its contents there are stale. Unless it [may be kept](Self::may_keep_through_write_error)
    /// and `still_reads` (a bad spot or a full file system, not a dead disk): then, as md's
    /// RAID 0 does, the write answers an error and the member keeps serving everything else
    /// — one bad sector no longer takes the whole volume away. Whether it was failed.
    pub(crate) fn fail_for_write_error(
        &self,
        index: usize,
        why: &dyn FailWhy,
        still_reads: bool,
    ) -> bool {
        let _one_at_a_time = self.bad_block_fails.lock();
        if !(still_reads && self.may_keep_through_write_error(index)) {
            self.fail(index, why);
            return true;
        }
        let slot = &self.slots[index];
        if slot.write_errors.fetch_add(1, Ordering::Relaxed) == 0 {
            tracing::error!(
                "member {index} (`{}`) kept after a write error: the volume cannot do without it and it still reads ({why}); that write answered an error",
                slot.member().name()
            );
        }
        false
    }

    /// [`Self::fail_for_write_error`] for write error `e` of member `index`, the member
    /// probed first when it may be kept ([`Self::still_reads`]). Every write-type op goes
    /// through here — data, superblock, write-intent bitmap —: a member the volume cannot do
    /// without that refuses writes but reads (an SSD gone read-only) was failed by the first
    /// superblock write after its data write was kept, and the volume with it. Whether it
    /// was failed.
    /// `why` names the write (a superblock's, the bitmap's) as the failure's words.
    pub(crate) async fn failed_write(
        &self,
        index: usize,
        e: &MemberError,
        why: &(dyn FailWhy + Sync),
    ) -> bool {
        if e.is_read_only_refusal() {
            // A read-only volume's member refused a repair nothing should have asked of it:
            // the disk is as it was, and failing it would degrade a volume that is being
            // read off (md's read-only arrays do not rewrite either).
            return false;
        }
        let still_reads = self.may_keep_through_write_error(index)
            && self.still_reads(index, e.offset, e.len).await;
        self.fail_for_write_error(index, why, still_reads)
    }

    /// Whether member `index` answers a read away from `[offset, offset+len)`, the write
    /// that failed: a write error on a disk that still reads is a bad spot (or a full file
    /// system under a file member, or a device gone read-only); on one that reads nothing, a
    /// dead disk.
    async fn still_reads(&self, index: usize, offset: u64, len: u64) -> bool {
        let m = self.slots[index].member();
        for at in probe_places(m.len(), offset, len) {
            if m.read(at, Buf::new(BLOCK_BYTES as usize)).await.is_ok() {
                return true;
            }
        }
        false
    }
}

/// Where [`MemberTable::still_reads`] probes a member of `member_len` bytes whose write of
/// `[offset, offset+len)` failed: its first block (a superblock under metadata) and its
/// last, those the failed write does not cover — a probe of the bad spot itself would take a
/// bad sector for a dead disk.
fn probe_places(member_len: u64, offset: u64, len: u64) -> Vec<u64> {
    let last = (member_len / BLOCK_BYTES).saturating_sub(1) * BLOCK_BYTES;
    let mut places = vec![0, last];
    places.dedup();
    places.retain(|&at| at + BLOCK_BYTES <= member_len);
    places.retain(|&at| at + BLOCK_BYTES <= offset || offset.saturating_add(len) <= at);
    places
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::MemoryMember;

    /// The first and last blocks, but for those the failed write covered.
    #[test]
    fn a_probe_never_reads_where_the_write_failed() {
        let mib = 1 << 20;
        assert_eq!(probe_places(mib, 8192, 4096), vec![0, mib - 4096]);
        assert_eq!(probe_places(mib, 0, 4096), vec![mib - 4096]);
        assert_eq!(probe_places(mib, mib - 8192, 8192), vec![0]);
        assert_eq!(probe_places(mib, 0, mib), Vec::<u64>::new());
        assert_eq!(probe_places(4096, 8192, 4096), vec![0]);
        assert_eq!(probe_places(100, 0, 0), Vec::<u64>::new());
    }
    use crate::testutil::SlowMember;
    use std::time::Duration;

    fn memory(name: &str) -> Arc<dyn Member> {
        Arc::new(MemoryMember::new(name, 1 << 20))
    }

    fn not_memory(name: &str) -> Arc<dyn Member> {
        Arc::new(SlowMember::new(
            MemoryMember::new(name, 1 << 20),
            Duration::ZERO,
        ))
    }

    #[test]
    fn a_slot_says_whether_its_member_of_the_moment_keeps_its_bytes_in_memory() {
        // Through the `Arc` (the trait in scope picks `Arc`'s impl, which must forward).
        assert!(memory("m").memory_backed());
        let table = MemberTable::new(vec![memory("a"), not_memory("b")]);
        assert!(table.slot(0).memory_backed());
        assert!(!table.slot(1).memory_backed());
        // A member installed in a failed slot, and a replacement taking over: the flag follows.
        table.fail(1, &"test");
        table.install(1, memory("c"));
        assert!(table.slot(1).memory_backed());
        table.set_replacement(0, not_memory("d"));
        assert!(
            table.slot(0).memory_backed(),
            "a replacement is not the member yet"
        );
        table.finish_replacement(0).expect("a replacement");
        assert!(!table.slot(0).memory_backed());
    }

    #[test]
    fn a_slot_keeps_why_it_failed_until_a_member_is_installed() {
        use crate::fail_cause::{Because, FailCause};
        let table = MemberTable::new(vec![memory("a"), memory("b")]);
        assert_eq!(table.slot(0).failure(), None);
        table.fail(0, &"write error");
        let f = table.slot(0).failure().unwrap();
        assert_eq!(
            (f.cause, f.why.as_str()),
            (FailCause::Errors, "write error")
        );
        // A later failure keeps the first cause; the operator's word replaces it.
        table.fail(0, &Because(FailCause::Unanswered, "timeout"));
        assert_eq!(table.slot(0).failure().unwrap().cause, FailCause::Errors);
        table.fail(0, &Because(FailCause::Operator, "nbraid fail"));
        assert_eq!(table.slot(0).failure().unwrap().cause, FailCause::Operator);
        table.install(0, memory("c"));
        assert_eq!(table.slot(0).failure(), None);
    }

    /// A mirror's first member past its limit is failed; its last readable copy is kept
    /// (and said so) until another copy is current again.
    #[test]
    fn bad_blocks_fail_only_what_the_volume_does_without() {
        let pair = (0..2).map(|i| Node::member(i, 0, 1 << 20)).collect();
        let tree = Node::mirror(pair).unwrap();
        let table = MemberTable::new(vec![memory("a"), memory("b")]).with_tree(tree);
        assert!(table.fail_for_bad_blocks(0, &"bad blocks"));
        assert!(table.slot(0).is_failed());
        assert!(!table.fail_for_bad_blocks(1, &"bad blocks"));
        assert!(!table.slot(1).is_failed() && table.slot(1).kept_past_limit());
        // A new member being rebuilt is not current yet: still the only copy.
        table.install(0, memory("c"));
        assert!(!table.fail_for_bad_blocks(1, &"bad blocks"));
        table.set_resyncing(0, false);
        assert!(table.fail_for_bad_blocks(1, &"bad blocks"));
        assert!(table.slot(1).is_failed());
        // Without a tree (a table outside a volume): failed as before.
        let bare = MemberTable::new(vec![memory("a")]);
        assert!(bare.fail_for_bad_blocks(0, &"bad blocks"));
    }

    /// Corrected read errors fail a member at the limit's next one, saying how many; a
    /// member the volume cannot do without is kept and marked; a new member starts afresh.
    #[test]
    fn corrected_read_errors_fail_past_the_limit_only_what_the_volume_does_without() {
        let pair = (0..2).map(|i| Node::member(i, 0, 1 << 20)).collect();
        let tree = Node::mirror(pair).unwrap();
        let table = MemberTable::new(vec![memory("a"), memory("b")])
            .with_tree(tree)
            .with_max_read_errors(2);
        assert!(!table.read_error_corrected(0));
        assert!(!table.read_error_corrected(0));
        assert_eq!(table.slot(0).corrected_read_errors(), 2);
        assert!(table.read_error_corrected(0), "the third fails it");
        let f = table.slot(0).failure().unwrap();
        assert_eq!(
            (f.cause, f.why.as_str()),
            (FailCause::Errors, "3 read errors (limit 2)")
        );
        // A failed member counts no more; the last copy is kept past the limit.
        assert!(!table.read_error_corrected(0));
        for _ in 0..3 {
            assert!(!table.read_error_corrected(1));
        }
        assert!(!table.slot(1).is_failed() && table.slot(1).kept_past_read_limit());
        assert!(!table.slot(1).kept_past_limit(), "not the bad-block mark");
        table.install(0, memory("c"));
        assert_eq!(table.slot(0).corrected_read_errors(), 0);
        // 0: never.
        let never = MemberTable::new(vec![memory("a")]).with_max_read_errors(0);
        assert!((0..100).all(|_| !never.read_error_corrected(0)));
    }

    /// What a slot counted belongs to the member that was in it: a member installed in a
    /// failed slot, and a replacement taking over, start from zero (errors, the read-error
    /// limit's count, the marks past a limit, the volume's I/O to it).
    #[test]
    fn a_new_member_in_a_slot_counts_from_zero() {
        let pair = (0..2).map(|i| Node::member(i, 0, 1 << 20)).collect();
        let tree = Node::mirror(pair).unwrap();
        let table = MemberTable::new(vec![memory("a"), memory("b")])
            .with_tree(tree)
            .with_max_read_errors(5);
        let counted = |t: &MemberTable, i: usize| {
            let h = t.slot(i).health();
            (
                h.read_errors,
                h.write_errors,
                h.corrected_read_errors,
                h.region_io,
            )
        };
        let zero = (0, 0, 0, RegionIoSnapshot::default());
        for i in 0..2 {
            let slot = table.slot(i);
            slot.count_read_error();
            slot.count_read(4096);
            slot.count_write(4096);
            assert!(!table.read_error_corrected(i));
            slot.write_errors.fetch_add(1, Ordering::Relaxed);
            assert_ne!(counted(&table, i), zero);
        }
        // Replaced while serving: the replacement's counts start at zero.
        table.set_replacement(0, memory("new"));
        assert_ne!(
            counted(&table, 0),
            zero,
            "a replacement is not the member yet"
        );
        table.finish_replacement(0).expect("a replacement");
        assert_eq!(counted(&table, 0), zero);
        // Failed, and a member installed in its place.
        table.fail(1, &"test");
        table.install(1, memory("c"));
        assert_eq!(counted(&table, 1), zero);
    }
}
