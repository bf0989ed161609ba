//! The volume's records on its members, and the one way they are written ([`Records::commit`]).
//!
//! Shared with the member table as its failure recorder (`crate::failure_gate`), so that a
//! member write held back by a failure nobody has recorded yet can record it itself. That
//! happens even when the failure came from the write-back cache's destage, or from a resync
//! with no request waiting.
//!
//! The records also keep the clean point: the clean/dirty flag ([`Records::is_dirty`], read
//! without the lock on the write path) and the write-type requests in flight.
//!
//! Contracts held by types: the records change only under their lock — a commit, and every
//! change made under the lock, takes the lock's guard ([`RecordsGuard`]), which only
//! [`Records::lock`] hands out; the flag goes dirty only for a request counted in flight
//! ([`Counted`]).

use super::failed_entry::record_failed;
use super::member_meta::MemberMeta;
use super::rebuilding::Rebuilding;
use super::superblock::{MAX_ADDED_PATHS, MAX_ADDED_PATH_BYTES};
use super::{MemberEntry, RecordedState, ReplacementCheckpoint, ScrubCheckpoint, Uuid};
use crate::error::{VolumeError, VolumeResult};
use crate::fail_cause::FailCause;
use crate::failure_gate::FailureRecorder;
use crate::node::MemberTable;
use futures::future::{join_all, BoxFuture};
use futures::lock::{Mutex as AsyncMutex, MutexGuard};
use futures::FutureExt;
use parking_lot::RwLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::Arc;

/// The volume's state as its records say it.
#[derive(Clone)]
pub(super) struct Recorded {
    pub(super) events: u64,
    pub(super) clean: bool,
    pub(super) members: Vec<MemberEntry>,
    /// An unfinished scrub (see `scrub.rs`).
    pub(super) scrub: Option<ScrubCheckpoint>,
    /// Members added at run time, by path (see `spare_list.rs`).
    pub(super) added_paths: Vec<String>,
    /// A reshape in progress (see `reshape_run.rs`): each role's record carries its part.
    pub(super) reshape: Option<super::reshape::RecordedReshape>,
    /// The volume's tree (the old one while a reshape runs). Every commit writes it, so a
    /// member that missed the commit recording a finished reshape's new tree gets it from
    /// the next one — never the old tree beside a member list and no reshape record, a
    /// record the next read would refuse (see `reshape_run.rs`).
    pub(super) tree: nbraid_layout::Node,
    /// Checksums being enabled: how far the pass got (see `checksum_fill.rs`).
    pub(super) checksum_fill: Option<super::ChecksumFill>,
    /// Replaces under way and how far each copy got (see `replace_resume.rs`). Every commit
    /// drops the entry of a role whose slot no longer has a replacement.
    pub(super) replacements: Vec<ReplacementCheckpoint>,
    /// The block size the volume is served with, in bytes: every commit records it.
    pub(super) block_size: u32,
}

impl Recorded {
    /// The record a member joining volume `name` (array `array`) in role `role` gets at this
    /// state, with its own areas (bitmap, log, checksums): every shared field as
    /// [`Recorded::write_into`] writes it.
    pub(super) fn for_newcomer(
        &self,
        (array, name): (super::Uuid, &str),
        role: usize,
        (bitmap, ppl, checksums): (
            Option<super::BitmapArea>,
            Option<super::Area>,
            Option<super::Area>,
        ),
    ) -> super::VolumeRecord {
        let mut v = super::VolumeRecord {
            array,
            name: name.to_string(),
            events: 0,
            clean: false,
            role: role as u32,
            members: Vec::new(),
            tree: self.tree.clone(),
            bitmap,
            ppl,
            checksums,
            scrub: None,
            added_paths: Vec::new(),
            reshape: None,
            checksum_fill: None,
            replacements: Vec::new(),
            block_size: None,
        };
        self.clone().write_into(&mut v, role);
        v
    }

    /// Role `role`'s record `v` as a commit writes it: every shared field, the tree among
    /// them, whatever the member's record held before (it may be commits behind).
    fn write_into(self, v: &mut super::VolumeRecord, role: usize) {
        v.events = self.events;
        v.clean = self.clean;
        v.members = self.members;
        v.scrub = self.scrub;
        v.added_paths = self.added_paths;
        v.reshape = self.reshape.as_ref().map(|r| r.record_for(role));
        v.tree = self.tree;
        v.checksum_fill = self.checksum_fill;
        v.replacements = self.replacements;
        v.block_size = Some(self.block_size);
    }
}

/// Why a commit could not write a member's record: the commit fails the member either way.
#[derive(Debug, thiserror::Error)]
enum RecordWriteError {
    #[error("superblock write failed: {0}")]
    Io(#[from] super::SuperblockIoError),
    /// Its superblock, read again since it took the role (a member back blank and rebuilt
    /// into a Matrix sibling only, restored from an older copy, another array's), says
    /// nothing of this volume: written without the record, it would be trusted in its role
    /// while a restart finds no role of this volume on it.
    #[error("volume `{volume}`: member `{member}` holds no record of this volume (its superblock, read again, has none: back blank, restored from an older copy, or rebuilt into other volumes only); failed in this volume rather than trusted without its record")]
    NoRecord { volume: String, member: String },
}

impl RecordWriteError {
    /// The member's refused write, when that is what failed (not a read, not a missing
    /// record).
    fn member_write(&self) -> Option<&crate::member::MemberError> {
        match self {
            RecordWriteError::Io(super::SuperblockIoError::Member(e))
                if e.op == crate::member::MemberOp::Write =>
            {
                Some(e)
            }
            _ => None,
        }
    }
}

/// A record write that failed on an I/O error fails its member for that error's cause.
impl crate::fail_cause::FailWhy for RecordWriteError {
    fn fail_cause(&self) -> crate::fail_cause::FailCause {
        crate::fail_cause::FailCause::of_error(self)
    }
}

/// The records' lock, held: the proof a caller holds it (a `Recorded` alone may be a copy).
pub(super) type RecordsGuard<'a> = MutexGuard<'a, Recorded>;

/// A write-type request counted in flight (see [`Records::enter`]) until it is dropped.
pub(super) struct Counted<'a>(&'a AtomicU64);

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        let before = self.0.fetch_sub(1, SeqCst);
        assert!(before > 0, "a request leaves only once it was counted");
    }
}

/// Refuses a path the records cannot list: malformed, or one more than `listed` holds.
pub(super) fn recordable(path: &str, listed: &[String]) -> Result<(), String> {
    if path.is_empty() || path.len() > MAX_ADDED_PATH_BYTES || path.contains('\0') {
        return Err(format!(
            "`{path}`: its path cannot be recorded (1 to {MAX_ADDED_PATH_BYTES} bytes, no NUL)"
        ));
    }
    if !listed.iter().any(|p| p == path) && listed.len() >= MAX_ADDED_PATHS {
        return Err(format!(
            "already {MAX_ADDED_PATHS} members added at run time are recorded: remove a spare first"
        ));
    }
    Ok(())
}

/// What [`Records::claim_clean_point`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum CleanClaim {
    /// The records say clean already.
    AlreadyClean,
    /// A write is in flight: the records stay dirty.
    Busy,
    /// The flag says clean from now on; a writer that comes records the volume dirty again.
    Claimed,
}

pub(super) struct Records {
    id: Uuid,
    name: String,
    table: Arc<MemberTable>,
    /// By role: the member's superblock (`None`: lost). Changes when a new member takes a
    /// role (rebuild, replace).
    metas: RwLock<Vec<Option<Arc<MemberMeta>>>>,
    /// Held while the records change; a commit writes them.
    recorded: AsyncMutex<Recorded>,
    /// The records say dirty (a write may be in flight since the last clean point).
    dirty: AtomicBool,
    /// Write-type requests in flight ([`Records::enter`]).
    inflight: AtomicU64,
    /// Some failed role's record says it missed nothing acknowledged (read without the lock
    /// before each acknowledgement of durability: [`Records::before_durable_ack`]).
    unacked_failures: AtomicBool,
    /// One clean point at a time.
    cleaning: AsyncMutex<()>,
    /// Roles being rebuilt into (their records keep up with commits).
    pub(super) rebuilding: Rebuilding,
    /// Set once the members' records were rewritten for a new shape (a reshape's start, new
    /// RAID 1 copies): this array's view of them is stale, and a commit through it would
    /// write the old shape back over the new one. Such commits are refused; the volume is
    /// opened again over the new records.
    retired: AtomicBool,
    /// A read-only start: commits are kept in memory, never written ([`Records::keep_in_memory`]).
    read_only: AtomicBool,
}

impl Records {
    pub(super) fn new(
        id: Uuid,
        name: &str,
        table: Arc<MemberTable>,
        metas: Vec<Option<Arc<MemberMeta>>>,
        recorded: Recorded,
        dirty: bool,
    ) -> Records {
        assert_eq!(metas.len(), recorded.members.len(), "a record per role");
        let unacked = recorded
            .members
            .iter()
            .any(MemberEntry::missed_nothing_acked);
        Records {
            id,
            name: name.to_string(),
            table,
            metas: RwLock::new(metas),
            recorded: AsyncMutex::new(recorded),
            dirty: AtomicBool::new(dirty),
            inflight: AtomicU64::new(0),
            unacked_failures: AtomicBool::new(unacked),
            cleaning: AsyncMutex::new(()),
            rebuilding: Rebuilding::default(),
            retired: AtomicBool::new(false),
            read_only: AtomicBool::new(false),
        }
    }

    /// From now on no commit writes anything (a read-only start: `read_only.rs`); what it
    /// would record (a member failed, the event counter) stays in memory.
    pub(super) fn keep_in_memory(&self) {
        self.read_only.store(true, SeqCst);
    }

    /// Whether commits are kept in memory ([`Records::keep_in_memory`]).
    pub(super) fn is_kept_in_memory(&self) -> bool {
        self.read_only.load(SeqCst)
    }

    /// From now on every commit is refused ([`Records::retired`]): the members' records are
    /// being rewritten for a new shape outside this array's view.
    pub(super) fn retire(&self) {
        self.retired.store(true, SeqCst);
    }

    pub(super) fn id(&self) -> Uuid {
        self.id
    }

    pub(super) fn name(&self) -> &str {
        &self.name
    }

    /// The records, to change (then [`Records::commit`]) or read consistently.
    pub(super) async fn lock(&self) -> RecordsGuard<'_> {
        self.recorded.lock().await
    }

    /// Role `r`'s member and superblock (`None`: lost, removed, or no such role).
    pub(super) fn meta(&self, r: usize) -> Option<Arc<MemberMeta>> {
        self.metas.read().get(r).cloned().flatten()
    }

    /// Every role's member, by role.
    pub(super) fn metas(&self) -> Vec<Option<Arc<MemberMeta>>> {
        self.metas.read().clone()
    }

    /// A new member (or none) stands in role `r`; the records' lock is held (`_held`).
    pub(super) fn set_meta(&self, _held: &RecordsGuard, r: usize, meta: Option<Arc<MemberMeta>>) {
        self.metas.write()[r] = meta;
    }

    fn is_failed(&self, r: usize) -> bool {
        self.table.slot(r).is_failed()
    }

    fn is_current(&self, r: usize) -> bool {
        self.table.slot(r).is_current()
    }

    fn fail(&self, r: usize, why: &dyn crate::fail_cause::FailWhy) {
        self.table.fail(r, &why);
    }

    /// Whether the records say dirty (read without the lock: the write path's fast check).
    pub(super) fn is_dirty(&self) -> bool {
        self.dirty.load(SeqCst)
    }

    /// Counts a write-type request in flight, before it looks at the flag
    /// ([`Records::ensure_dirty`] takes the count as the proof).
    pub(super) fn enter(&self) -> Counted<'_> {
        self.inflight.fetch_add(1, SeqCst);
        Counted(&self.inflight)
    }

    /// Records the volume dirty (committed) unless it is already, for a request counted in
    /// flight; checked again under the lock so one writer commits.
    pub(super) async fn ensure_dirty(&self, _counted: &Counted<'_>) -> VolumeResult<()> {
        if self.is_dirty() {
            return Ok(());
        }
        let mut rec = self.recorded.lock().await;
        if !self.is_dirty() {
            self.mark_dirty(&mut rec).await?;
        }
        Ok(())
    }

    /// Commits the records dirty, then sets the flag: a writer that sees it set knows the
    /// disk says dirty.
    pub(super) async fn mark_dirty(&self, rec: &mut RecordsGuard<'_>) -> VolumeResult<()> {
        rec.clean = false;
        self.commit(rec).await?;
        self.dirty.store(true, SeqCst);
        Ok(())
    }

    /// Commits the records clean, then clears the flag (open, create: nothing is in flight).
    pub(super) async fn mark_clean(&self, rec: &mut RecordsGuard<'_>) -> VolumeResult<()> {
        rec.clean = true;
        self.commit(rec).await?;
        self.dirty.store(false, SeqCst);
        Ok(())
    }

    /// One clean point at a time: held from before [`Records::claim_clean_point`] to the end.
    pub(super) async fn one_clean_point(&self) -> MutexGuard<'_, ()> {
        self.cleaning.lock().await
    }

    /// The first half of a clean point (see `Array::mark_clean`): with the lock held, the flag
    /// goes clean unless a write is in flight. A writer counts itself in flight before it
    /// looks at the flag ([`Records::enter`]), so once the flag is clean and nothing is in
    /// flight, every new writer records the volume dirty again (under the lock) before it
    /// writes.
    pub(super) fn claim_clean_point(&self, _held: &RecordsGuard) -> CleanClaim {
        if !self.is_dirty() {
            return CleanClaim::AlreadyClean;
        }
        self.dirty.store(false, SeqCst);
        if self.inflight.load(SeqCst) > 0 {
            self.dirty.store(true, SeqCst);
            return CleanClaim::Busy;
        }
        CleanClaim::Claimed
    }

    /// A claimed clean point could not be recorded: the flag says dirty again.
    pub(super) fn unclaim_clean_point(&self, _held: &RecordsGuard) {
        self.dirty.store(true, SeqCst);
    }

    /// Takes `path` out of the members added at run time (`spare_list.rs`), committed;
    /// whether it was listed.
    pub(super) async fn forget_added_path(&self, path: &str) -> VolumeResult<bool> {
        let mut rec = self.lock().await;
        let before = rec.added_paths.len();
        rec.added_paths.retain(|p| p != path);
        if rec.added_paths.len() == before {
            return Ok(false);
        }
        self.commit(&mut rec).await?;
        Ok(true)
    }

    /// Writes the recorded state (plus every member failed since) to every current member,
    /// bumping the event counter. A member that cannot take it is failed and the state
    /// written again, so the records always name every failed member.
    pub(super) async fn commit(&self, rec: &mut RecordsGuard<'_>) -> VolumeResult<()> {
        if self.retired.load(SeqCst) {
            return Err(VolumeError::Assembly(format!(
                "volume `{}`: its records were rewritten for a new shape; nothing more is recorded through the old one (open the volume again)",
                self.name
            )));
        }
        let gate = self.table.failure_gate();
        if self.read_only.load(SeqCst) {
            // Nothing is written to a read-only volume's members: the failures are known
            // here, and a request waiting for them to be recorded may go on.
            gate.recorded_up_to(gate.generation());
            return Ok(());
        }
        loop {
            let metas = self.metas.read().clone();
            assert_eq!(metas.len(), rec.members.len(), "a record per role");
            let generation = gate.generation();
            let newly_failed = self.note_failed(rec, &metas);
            // A replacement dropped (it failed, or the member it copied did) has missed
            // writes since: its checkpoint must not outlive it.
            let table = &self.table;
            let replacing = |r: usize| {
                table
                    .slots()
                    .get(r)
                    .is_some_and(|s| s.replacement().is_some())
            };
            rec.replacements.retain(|x| replacing(x.role as usize));
            // Only a failed role keeps the mark (one taken back or re-added drops it).
            for m in rec.members.iter_mut().filter(|m| !m.missed_nothing_acked()) {
                m.unacked_since_failed = false;
            }
            let unacked = rec.members.iter().any(MemberEntry::missed_nothing_acked);
            // Raised before the write: an acknowledgement racing the commit clears it again.
            if unacked {
                self.unacked_failures.store(true, SeqCst);
            }
            rec.events += 1;
            let targets = self.commit_targets(&metas);
            let marks = newly_failed
                .into_iter()
                .filter(|&r| self.marks_itself_failed(r));
            let (results, _) = futures::join!(
                join_all(targets.iter().map(|&r| {
                    let meta = metas[r].as_ref().expect("targets stand in their role");
                    self.write_record(r, meta, rec)
                })),
                join_all(marks.map(|r| self.mark_failed_on_itself(r, &metas, rec)))
            );
            let mut first = None;
            for (&r, res) in targets.iter().zip(results) {
                if let Err(e) = res {
                    match e.member_write() {
                        // Kept when the volume cannot do without it and it reads: its
                        // records lag by this commit (a restart takes it back by force).
                        Some(w) => _ = self.table.failed_write(r, w, &e).await,
                        None => self.fail(r, &e),
                    }
                    first.get_or_insert((r, e));
                }
            }
            // A member failed meanwhile: written again, so the records name it.
            if gate.generation() != generation {
                continue;
            }
            gate.recorded_up_to(generation);
            return match first {
                Some((r, e)) if targets.len() == 1 => Err(VolumeError::Unavailable {
                    // The last copy refused its record but may still read: the way to its
                    // data is a start that writes nothing.
                    reason: match e.member_write() {
                        Some(_) => format!(
                            "member {r}: {e}; it is the only member that could take the \
                             records: to read the volume without writing to it, start it \
                             with read_only = true"
                        ),
                        None => format!("member {r}: {e}"),
                    },
                }),
                _ if targets.is_empty() => Err(VolumeError::Unavailable {
                    reason: "no member can take the superblock".into(),
                }),
                _ => Ok(()),
            };
        }
    }

    /// Whether member `r`, just failed, is also given the record that says so, on its own
    /// superblock: when the operator failed it or it answered with errors (it likely still
    /// takes a superblock write), not when it stopped answering. Otherwise its own record
    /// still says it is current, and a start that finds it alone — the members that went
    /// on without it missing — would serve its stale bytes as the volume's.
    fn marks_itself_failed(&self, r: usize) -> bool {
        (self.table.slot(r).failure())
            .is_some_and(|f| matches!(f.cause, FailCause::Operator | FailCause::Errors))
    }

    /// Best effort: writes `rec` (which records member `r` failed) onto `r` itself. A
    /// member that refuses it is failed already; what it costs is said.
    async fn mark_failed_on_itself(
        &self,
        r: usize,
        metas: &[Option<Arc<MemberMeta>>],
        rec: &Recorded,
    ) {
        let Some(meta) = metas[r].as_ref() else {
            return;
        };
        if let Err(e) = self.write_record(r, meta, rec).await {
            tracing::warn!(
                "volume `{}`: member {r} (`{}`) failed and could not be marked so on its own superblock ({e}): should it be found alone at a start, its stale bytes would look current",
                self.name,
                meta.member().name()
            );
        }
    }

    /// Members failed since the last commit are recorded failed, with why
    /// ([`record_failed`]: one missing rebuilds from 0 unless the operator failed it).
    /// Returns the roles this call recorded failed that were active until then.
    fn note_failed(&self, rec: &mut Recorded, metas: &[Option<Arc<MemberMeta>>]) -> Vec<usize> {
        let mut newly = Vec::new();
        for (r, m) in rec.members.iter_mut().enumerate() {
            if !self.is_failed(r) {
                if m.state != RecordedState::Failed {
                    m.failed_cause = None;
                }
                continue;
            }
            let cause = self.table.slot(r).failure().map(|f| f.cause);
            if record_failed(m, metas[r].is_some(), cause) {
                newly.push(r);
            }
        }
        newly
    }

    /// Current members, and members being rebuilt into their role (their records must keep
    /// up; they say the role is rebuilding, so none is trusted early).
    fn commit_targets(&self, metas: &[Option<Arc<MemberMeta>>]) -> Vec<usize> {
        (0..metas.len())
            .filter(|&r| {
                metas[r].is_some()
                    && (self.is_current(r) || (!self.is_failed(r) && self.rebuilding.contains(r)))
            })
            .collect()
    }

    /// Writes `rec` into `meta`'s record of this volume (role `role`). A member whose
    /// superblock holds no such record is not written: the commit fails it (see
    /// [`RecordWriteError::NoRecord`]). Every path that puts a member in a role writes its
    /// record first (create, `heal.rs`'s newcomers and replacements, a re-add, which found it).
    async fn write_record(
        &self,
        role: usize,
        meta: &MemberMeta,
        rec: &Recorded,
    ) -> Result<(), RecordWriteError> {
        let (id, name) = (self.id, self.name.as_str());
        let rec = rec.clone();
        let written = meta
            .update_if(move |sb| {
                let mine = sb
                    .volumes
                    .iter_mut()
                    .find(|v| v.array == id && v.name == name);
                mine.map(|v| rec.write_into(v, role)).is_some()
            })
            .await?;
        if !written {
            return Err(RecordWriteError::NoRecord {
                volume: self.name.clone(),
                member: meta.member().name().to_string(),
            });
        }
        Ok(())
    }

    /// Before a write is acknowledged durable (a flush, a FUA write; failures under it are
    /// recorded already): failed roles whose records say they missed nothing acknowledged
    /// lose that mark, committed first — from this acknowledgement on they miss what the
    /// array promised, and a forced assembly must not take them back as current. One commit
    /// after each failure; nothing otherwise.
    pub(super) async fn before_durable_ack(&self) -> VolumeResult<()> {
        if !self.unacked_failures.load(SeqCst) {
            return Ok(());
        }
        let mut rec = self.recorded.lock().await;
        if !rec.members.iter().any(MemberEntry::missed_nothing_acked) {
            self.unacked_failures.store(false, SeqCst);
            return Ok(());
        }
        for m in rec.members.iter_mut() {
            m.unacked_since_failed = false;
        }
        self.commit(&mut rec).await?;
        // A failure recorded meanwhile (by this commit) keeps the flag raised.
        if !rec.members.iter().any(MemberEntry::missed_nothing_acked) {
            self.unacked_failures.store(false, SeqCst);
        }
        Ok(())
    }

    /// Records members failed since the last commit (before any further member write, and
    /// before a request that may have seen them fail is acknowledged).
    pub(super) async fn record_failures(&self) -> VolumeResult<()> {
        let gate = self.table.failure_gate();
        if !gate.unrecorded() {
            return Ok(());
        }
        let mut rec = self.recorded.lock().await;
        if gate.unrecorded() {
            self.commit(&mut rec).await?;
        }
        Ok(())
    }
}

impl FailureRecorder for Records {
    fn record(&self) -> BoxFuture<'_, VolumeResult<()>> {
        self.record_failures().boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::member::Member;
    use crate::memory::MemoryMember;
    use crate::metadata::{read_superblock, Found, Superblock};
    use futures::executor::block_on;
    use nbraid_layout::{Level, Node, ParityLayout, Region, Shape};

    /// RAID 0 over `members`, each region the member's second MiB.
    fn tree(members: usize) -> Node {
        let region = Region {
            start: 1 << 20,
            len: 1 << 20,
        };
        let shape = Shape::new(
            Level::Raid0,
            members,
            None,
            16 << 10,
            ParityLayout::default(),
        );
        shape.unwrap().build(&vec![region; members]).unwrap()
    }

    /// `n` members' entries, active, ids 1, 2, …
    fn entries(n: u8) -> Vec<MemberEntry> {
        (0..n)
            .map(|i| MemberEntry {
                uuid: Uuid([i + 1; 16]),
                state: RecordedState::Active,
                unacked_since_failed: false,
                failed_cause: None,
            })
            .collect()
    }

    /// A member that missed the commit recording a finished reshape (the power cut
    /// mid-commit) still holds the old tree and the reshape record: the next commit writes
    /// it whole, the new tree and no reshape, and the superblock reads back. (Before, the
    /// tree was written only by the commit that changed it: the old tree beside the grown
    /// member list and no reshape was written instead, a record the next read refused.)
    #[test]
    fn a_commit_brings_a_member_that_missed_the_end_of_a_reshape_to_the_new_tree() {
        use crate::metadata::reshape::ReshapeRecord;
        use crate::metadata::VolumeRecord;
        let members = entries(3);
        let behind = VolumeRecord {
            array: Uuid([9; 16]),
            name: "vol".into(),
            events: 7,
            clean: true,
            role: 1,
            members: members.clone(),
            tree: tree(2),
            bitmap: None,
            ppl: None,
            checksums: None,
            scrub: None,
            added_paths: Vec::new(),
            reshape: Some(ReshapeRecord {
                new_tree: tree(3),
                position_bytes: tree(2).capacity(),
                backup_area: None,
                backup_window: None,
            }),
            checksum_fill: None,
            replacements: Vec::new(),
            block_size: None,
        };
        let recorded = Recorded {
            events: 9,
            clean: true,
            members,
            scrub: None,
            added_paths: Vec::new(),
            reshape: None,
            tree: tree(3),
            checksum_fill: None,
            replacements: Vec::new(),
            block_size: 512,
        };
        let mut v = behind.clone();
        recorded.write_into(&mut v, 1);
        assert_eq!((v.events, &v.tree, &v.reshape), (9, &tree(3), &None));
        let sb = Superblock {
            generation: 1,
            member: Uuid([2; 16]),
            member_bytes: 4 << 20,
            volumes: vec![v],
        };
        let bytes = sb.encode().expect("a whole record encodes");
        assert_eq!(Superblock::decode(&bytes).expect("and reads back"), sb);
    }

    /// Member `m`'s superblock as on the disk.
    fn on_disk(m: &dyn Member) -> Superblock {
        match block_on(read_superblock(m)).expect("readable") {
            Found::Superblock(sb, _) => sb,
            Found::Blank => panic!("`{}` is blank", m.name()),
        }
    }

    /// Volume "vol" over `n` members whose superblocks hold its record, except those in
    /// `without`, which hold only another volume's (a member read again since: rebuilt into
    /// a Matrix sibling only, restored, another array's). Returns the records and members.
    fn volume_without(n: u8, without: &[usize]) -> (Records, Vec<Arc<dyn Member>>) {
        let members: Vec<Arc<dyn Member>> = (0..n)
            .map(|i| Arc::new(MemoryMember::new(format!("m{i}"), 4 << 20)) as Arc<dyn Member>)
            .collect();
        let recorded = Recorded {
            events: 3,
            clean: true,
            members: entries(n),
            scrub: None,
            added_paths: Vec::new(),
            reshape: None,
            tree: tree(n.into()),
            checksum_fill: None,
            replacements: Vec::new(),
            block_size: 512,
        };
        let mut metas = Vec::new();
        for (r, m) in members.iter().enumerate() {
            let meta = block_on(MemberMeta::load(m.clone()));
            let array = match without.contains(&r) {
                true => (Uuid([8; 16]), "sibling"),
                false => (Uuid([9; 16]), "vol"),
            };
            let record = recorded.for_newcomer(array, r, (None, None, None));
            block_on(meta.join(recorded.members[r].uuid, record)).expect("join");
            metas.push(Some(meta));
        }
        let table = Arc::new(MemberTable::new(members.clone()));
        let records = Records::new(Uuid([9; 16]), "vol", table, metas, recorded, false);
        (records, members)
    }

    /// A member whose superblock holds no record of the volume is failed by the commit,
    /// written nothing, and recorded failed on the others, its failure saying why; with no
    /// member holding the record the commit fails. (Before, the commit skipped its record silently and
    /// succeeded: the member stayed current, its superblock saying nothing of the volume.)
    #[test]
    fn a_commit_fails_a_member_that_holds_no_record_of_the_volume() {
        let (records, members) = volume_without(2, &[1]);
        let before = on_disk(&*members[1]);
        let mut rec = block_on(records.lock());
        block_on(records.commit(&mut rec)).expect("member 0 takes the commit");
        assert!(records.is_failed(1), "kept without its record");
        assert!(records.is_current(0));
        assert_eq!(on_disk(&*members[1]), before, "written anyway");
        let ours = on_disk(&*members[0]).volumes.remove(0);
        assert_eq!(ours.events, rec.events);
        assert_eq!(ours.members[1].state, RecordedState::Failed);

        // Why, as the member's failure is logged.
        let meta = records.meta(1).expect("still in its role");
        let e = block_on(records.write_record(1, &meta, &rec)).expect_err("no record");
        let said = e.to_string();
        assert!(said.contains("holds no record of this volume"), "{said}");
        assert!(
            said.contains("volume `vol`") && said.contains("`m1`"),
            "{said}"
        );
        drop(rec);

        // No member holds it: nothing takes the commit.
        let (records, _) = volume_without(2, &[0, 1]);
        let mut rec = block_on(records.lock());
        block_on(records.commit(&mut rec)).expect_err("no member takes it");
        assert!(records.is_failed(0) && records.is_failed(1));
    }

    #[test]
    fn recordable_paths() {
        assert!(recordable("/dev/sdb", &[]).is_ok());
        assert!(recordable("", &[]).is_err());
        assert!(recordable("a\0b", &[]).is_err());
        let full: Vec<String> = (0..MAX_ADDED_PATHS).map(|i| format!("/d{i}")).collect();
        assert!(recordable("/new", &full).is_err());
        assert!(recordable("/d3", &full).is_ok(), "listed already");
    }
}
