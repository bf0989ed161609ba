//! A volume that knows itself: the superblock life cycle around a [`Volume`].
//!
//! - [`Array::create`] writes every member's record (a fresh array id, member ids, the tree,
//!   the bitmap area) and brings copies and parity in sync, or trusts zeroed members.
//! - [`Array::open`] assembles by superblock ([`super::assemble()`]: roles by member id, lost, stale
//!   and recorded-failed roles), then resyncs — only the regions the write-intent bitmap
//!   marks when it has one — what an unclean shutdown may have left inconsistent and what
//!   stale members missed, before anything is served.
//! - While serving, every state change bumps the event counter on every current member:
//!   clean → dirty before the first write after a clean point, a member failing (recorded
//!   before any further member write is issued, by whichever write comes next, so a member
//!   that missed writes is never trusted again: `records.rs`, `crate::failure_gate`), and
//!   dirty → clean in [`Array::mark_clean`]
//!   (orderly shutdown or idle). The fast path of a write is two atomic loads and the
//!   bitmap's lock; every metadata loop is O(members).
//!
//! `Array` is a thin composition: each part owns its state and its invariants — the records
//! and their commit (`records.rs`), the write-intent bitmap (`bitmap.rs`), hot spares,
//! rebuild and replace (`heal.rs`, `rebuild.rs`), re-added members (`readd.rs`), the
//! background resync (`resync.rs`) — and is handed the others it acts on as [`Parts`]. The
//! request path is `array/requests.rs`; creating and the open sequence are `array/start.rs`,
//! their decisions in `create.rs` and `open.rs`.

use super::bitmap::Bitmap;
use super::checksum_refill::{Refill, RefillControl};
use super::disk_rule::Consent;
use super::error::ArrayError;
use super::fill_control::{FillControl, FillReport};
use super::heal::{roles_wanting_a_member, Heal, RebuildReport};
use super::member_meta::MemberMeta;
use super::options::{ArrayOptions, OpenReport};
use super::parts::Parts;
use super::ppl_area::PplPlaces;
use super::readd::{Readd, Returning};
use super::records::Records;
use super::resync::BackgroundResync;
use super::{ScrubCheckpoint, Uuid};
use crate::error::VolumeResult;
use crate::pass::{PassControl, PassState};
use crate::reshape::ReshapeNode;
use crate::scrub::{ScrubControl, ScrubReport};
use crate::volume::Volume;
use nbraid_layout::Node;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

mod requests;
mod start;

use start::Mode;

pub struct Array {
    volume: Volume,
    /// The records and their writer, shared with the member table as its failure recorder.
    records: Arc<Records>,
    /// `None`: no bitmap (every unclean start resyncs the whole volume).
    bitmap: Option<Bitmap>,
    /// Where each role keeps the partial-parity log.
    ppl: PplPlaces,
    heal: Heal,
    returning: Returning,
    background: BackgroundResync,
    /// The checksums an unclean start dropped, given back (`checksum_refill.rs`).
    refill: Refill,
    /// The copy's handle while the volume is being reshaped (`reshape_run.rs`).
    reshape: Option<ReshapeNode>,
    /// The reshape's longest window (tests and the simulator use small ones).
    reshape_window_bytes: AtomicU64,
}

/// What [`Array::mark_clean`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CleanMark {
    /// The records say clean: the next start resyncs nothing.
    Recorded,
    /// Not recorded clean: the background resync is not done (the next start resumes it).
    ResyncPending,
    /// Not recorded clean: a write was in flight (the records stay dirty).
    WritesInFlight,
    /// Not recorded clean: the pass giving back the checksums an unclean start dropped is
    /// not done (the next start drops them again and redoes it).
    ChecksumsPending,
}

impl CleanMark {
    pub fn is_recorded(self) -> bool {
        self == CleanMark::Recorded
    }
}

impl std::fmt::Display for CleanMark {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CleanMark::Recorded => "recorded clean",
            CleanMark::ResyncPending => "the background resync is not finished",
            CleanMark::WritesInFlight => "a write was still in flight",
            CleanMark::ChecksumsPending => {
                "the per-block checksums the unclean start dropped are not all computed again"
            }
        })
    }
}

impl Array {
    /// Writes new records for volume `name` over `metas` (leaf `i` of `tree` is `metas[i]`)
    /// and opens it. Regions must start after the metadata area. With `assume_clean`, the
    /// members are trusted to agree (zero-filled); otherwise every copy and parity chunk is
    /// rewritten from the data first (`progress(done, total)` bytes).
    pub async fn create(
        name: &str,
        tree: Node,
        metas: Vec<Arc<MemberMeta>>,
        opts: ArrayOptions,
        assume_clean: bool,
        progress: &(dyn Fn(u64, u64) + Sync),
    ) -> Result<(Array, OpenReport), ArrayError> {
        start::create(name, tree, metas, opts, assume_clean, progress).await
    }

    /// Assembles volume `name` from `metas` (config position `i`; `None`: missing), checking
    /// them against `config_tree` (leaves are config positions), resyncs what needs it, and
    /// returns the array ready to serve.
    pub async fn open(
        name: &str,
        config_tree: &Node,
        metas: Vec<Option<Arc<MemberMeta>>>,
        opts: ArrayOptions,
        progress: &(dyn Fn(u64, u64) + Sync),
    ) -> Result<(Array, OpenReport), ArrayError> {
        start::open(name, config_tree, metas, opts, progress, Mode::Foreground).await
    }

    /// [`Array::open`], but a volume serves at once after an unclean start: what needs
    /// resyncing is left to [`Array::background_resync`] (mirrors resync the pieces reads
    /// touch first, parity groups those writes touch). Volumes with a role being rebuilt, and
    /// parity volumes without a log or with a stale member, resync before serving, as with
    /// `open` (see `resync.rs`).
    pub async fn open_background(
        name: &str,
        config_tree: &Node,
        metas: Vec<Option<Arc<MemberMeta>>>,
        opts: ArrayOptions,
        progress: &(dyn Fn(u64, u64) + Sync),
    ) -> Result<(Array, OpenReport), ArrayError> {
        start::open(name, config_tree, metas, opts, progress, Mode::Background).await
    }

    /// Assembles volume `name` as [`Array::open`] does, but writes nothing to any member,
    /// now or later (md's `--assemble --readonly`): no records, no bitmap, no log replay, no
    /// resync; stale roles stay out; every record the volume would commit while it serves
    /// (a member failing) is kept in memory. An array whose parity may disagree with its
    /// data (an unclean stop) or that is mid-reshape is refused, saying why
    /// (`read_only.rs`). Its members should be opened read-only too
    /// ([`crate::UringFile::open_read_only`]), so a write nothing here foresaw is refused
    /// by the member rather than carried out.
    pub async fn open_read_only(
        name: &str,
        config_tree: &Node,
        metas: Vec<Option<Arc<MemberMeta>>>,
        opts: ArrayOptions,
    ) -> Result<(Array, OpenReport), ArrayError> {
        let no_progress = |_, _| {};
        start::open(name, config_tree, metas, opts, &no_progress, Mode::ReadOnly).await
    }

    /// Whether the volume was opened read-only ([`Array::open_read_only`]): it writes
    /// nothing to its members.
    pub fn is_read_only(&self) -> bool {
        self.records.is_kept_in_memory()
    }

    /// What the components act on.
    fn parts(&self) -> Parts<'_> {
        Parts {
            volume: &self.volume,
            records: &self.records,
            bitmap: self.bitmap.as_ref(),
            ppl: &self.ppl,
        }
    }

    pub fn volume(&self) -> &Volume {
        &self.volume
    }

    pub fn name(&self) -> &str {
        self.records.name()
    }

    pub fn id(&self) -> Uuid {
        self.records.id()
    }

    /// The event counter as last recorded.
    pub async fn events(&self) -> u64 {
        self.records.lock().await.events
    }

    /// Bitmap updates written since open (each a FUA write on every current member): what
    /// the write-intent bitmap costs in member writes.
    pub fn bitmap_writes(&self) -> u64 {
        self.bitmap.as_ref().map_or(0, Bitmap::writes)
    }

    /// Whether the partial-parity log closes the write hole of every parity group now
    /// (`None`: no parity group, no write hole). `false` where the log is off, some member
    /// has no ring large enough (a volume from before the log, a reshape into stripes whose
    /// ring did not fit), a group lies over mirrors, or a reshape runs.
    pub fn write_hole_logged(&self) -> Option<bool> {
        let root = self.volume.geometry().root();
        if crate::ppl::parity_groups(root).is_empty() {
            return None;
        }
        let logged =
            self.reshape.is_none() && super::resync::every_group_logged(root, self.ppl.setup());
        Some(logged)
    }

    /// Bytes of the volume per write-intent bit, if the volume has a bitmap.
    pub fn bitmap_chunk_bytes(&self) -> Option<u64> {
        self.bitmap.as_ref().map(|b| b.intent().chunk_bytes())
    }

    /// Whether the records say dirty (a write since the last clean point).
    pub fn is_dirty(&self) -> bool {
        self.records.is_dirty()
    }

    /// Records members failed since the last commit, before a request that may have seen
    /// them fail is acknowledged (also after an operator fails one). Member writes wait for
    /// it too (`crate::failure_gate`).
    pub async fn record_failures(&self) -> VolumeResult<()> {
        self.records.record_failures().await
    }

    // Healing (`heal.rs`, `rebuild.rs`).

    /// Keeps `meta` as a hot spare (in memory: the config names spares at every start), if
    /// the write rule lets it be written (`disk_rule.rs`; no `--force`).
    pub fn add_spare(&self, meta: Arc<MemberMeta>) -> Result<(), ArrayError> {
        self.add_spare_with(meta, &Consent::default())
    }

    /// [`Array::add_spare`] with the operator's consent (`--force`, Matrix siblings).
    pub fn add_spare_with(
        &self,
        meta: Arc<MemberMeta>,
        consent: &Consent,
    ) -> Result<(), ArrayError> {
        self.heal.add_spare(self.parts(), meta, consent)
    }

    /// Spares not used yet.
    pub fn spare_count(&self) -> usize {
        self.heal.spare_count()
    }

    /// The spares not used yet, in the order they were added.
    pub fn spares(&self) -> Vec<Arc<MemberMeta>> {
        self.heal.spares()
    }

    /// Drops spare `meta` (by identity); whether it was one.
    pub fn remove_spare(&self, meta: &Arc<MemberMeta>) -> bool {
        self.heal.remove_spare(meta)
    }

    /// Failed roles (a spare would help; a new member that failed while being rebuilt
    /// leaves its role failed again).
    pub fn roles_wanting_a_member(&self) -> Vec<usize> {
        roles_wanting_a_member(self.parts())
    }

    /// Puts spares in failed roles, the most endangered first, each the smallest spare that
    /// fits ([`super::assign_spares`]); returns the roles that got one. [`Array::rebuild`]
    /// then rebuilds them. Call it whenever a member failed or a spare came.
    pub async fn use_spares(&self) -> Result<Vec<usize>, ArrayError> {
        if self.reshape.is_some() {
            return Ok(Vec::new()); // they stand by until the reshape is done and reopened
        }
        self.heal.use_spares(self.parts()).await
    }

    /// Roles being rebuilt and the bytes current on their new member so far; roles being
    /// replaced (position 0: not recorded).
    pub fn rebuilding(&self) -> Vec<(usize, u64)> {
        self.heal.rebuilding(self.parts())
    }

    /// Rebuild windows of about `bytes` (tests and the simulator use small ones).
    pub fn set_rebuild_window_bytes(&self, bytes: u64) {
        self.heal.set_window_bytes(bytes);
    }

    /// Puts `meta` in failed role `role` to be rebuilt by [`Array::rebuild`] (it takes writes
    /// at once and is read once the rebuild completes), if the write rule lets it be written.
    pub async fn rebuild_onto(&self, role: usize, meta: Arc<MemberMeta>) -> Result<(), ArrayError> {
        self.not_reshaping("rebuild onto a member")?;
        self.heal.rebuild_onto(self.parts(), role, meta).await
    }

    /// Starts replacing role `role`'s member (current) by `meta`; [`Array::rebuild`] copies
    /// it and swaps them when done.
    pub async fn replace(&self, role: usize, meta: Arc<MemberMeta>) -> Result<(), ArrayError> {
        self.replace_with(role, meta, &Consent::default()).await
    }

    /// [`Array::replace`] with the operator's consent (`--force`, Matrix siblings).
    pub async fn replace_with(
        &self,
        role: usize,
        meta: Arc<MemberMeta>,
        consent: &Consent,
    ) -> Result<(), ArrayError> {
        self.not_reshaping("replace a member")?;
        self.heal.replace(self.parts(), role, meta, consent).await
    }

    /// Rebuilds every role being rebuilt or replaced, resuming at their checkpoints, while
    /// the volume serves; returns when they are all current (or the control cancelled it).
    /// A role that needs rebuilding while it runs starts the pass again at once over every
    /// role, each from its own position.
    pub async fn rebuild(&self, ctl: &PassControl) -> Result<RebuildReport, ArrayError> {
        self.not_reshaping("rebuild")?;
        self.heal.rebuild(self.parts(), ctl, true).await
    }

    /// [`Array::rebuild`], but a role that needs rebuilding while it runs stops it (at its
    /// next window, `Cancelled`) with [`RebuildReport::restart`]: the caller starts a new
    /// pass at once, which its watchers see start.
    pub async fn rebuild_or_restart(&self, ctl: &PassControl) -> Result<RebuildReport, ArrayError> {
        self.not_reshaping("rebuild")?;
        self.heal.rebuild(self.parts(), ctl, false).await
    }

    /// Roles being rebuilt and the bytes current on each, the running rebuild at
    /// `pass_bytes`: a role it has not started on (it starts again for it) shows its own.
    pub fn rebuild_progress(&self, pass_bytes: u64) -> Vec<(usize, u64)> {
        self.heal.progress(self.parts(), pass_bytes)
    }

    // Re-added members (`readd.rs`).

    /// Brings failed role `role`'s own member back: resynced over the bitmap's regions when
    /// it can be, else rebuilt whole; refused when it carries other records. Call
    /// [`Array::resync_returned`] (or [`Array::rebuild`]) next.
    pub async fn readd(&self, role: usize) -> Result<Readd, ArrayError> {
        self.readd_with_siblings(role, &[]).await
    }

    /// [`Array::readd`] of a member this volume shares with the arrays `siblings` (Matrix):
    /// one that carries only their records (it came back blank and a sibling rebuilt it
    /// first) is rebuilt whole into this volume's role beside them.
    pub async fn readd_with_siblings(
        &self,
        role: usize,
        siblings: &[Uuid],
    ) -> Result<Readd, ArrayError> {
        self.not_reshaping("re-add a member")?;
        (self.returning)
            .readd(self.parts(), &self.heal, role, siblings)
            .await
    }

    /// Roles re-added and not current yet, with the bytes each has to resync.
    pub fn returning(&self) -> Vec<(usize, u64)> {
        self.returning.returning()
    }

    /// Resyncs every re-added member over its regions while the volume serves, and makes
    /// those still standing current (recorded first).
    pub async fn resync_returned(&self, ctl: &PassControl) -> Result<PassState, ArrayError> {
        self.returning.resync_returned(self.parts(), ctl).await
    }

    // The background resync (`resync.rs`).

    /// Bytes still to resync in the background (0: none pending).
    pub fn background_bytes(&self) -> u64 {
        self.background.bytes()
    }

    /// Whether a background resync is pending (the records stay dirty until it is done).
    pub fn background_pending(&self) -> bool {
        self.background.pending()
    }

    /// Runs the background resync to the end (or until the control cancels it), while the
    /// volume serves; then stale members are recorded active and the records may go clean
    /// again. Nothing pending: done at once.
    pub async fn background_resync(&self, ctl: &PassControl) -> Result<PassState, ArrayError> {
        self.background.run(self.parts(), ctl).await
    }

    // Reshape (`reshape_run.rs`).

    /// Starts reshaping the volume into `new_tree` (leaves number the roles, `added` taking
    /// the roles after the old ones): writes every member's records; then this array must
    /// serve nothing and write nothing again (its records no longer say the volume's shape):
    /// drop it, open the volume again with `new_tree` as the config (a running daemon does
    /// so without a restart), then run [`Array::reshape`]. The volume must be quiet (nothing
    /// in flight) and every role current. Every added member passes
    /// the disk write rule first (`disk_rule.rs`, as `nbraid add` does): blank, or this
    /// array's, or what `consent` allows — never a disk full of someone's data unasked.
    pub async fn start_reshape(
        &self,
        new_tree: Node,
        added: Vec<Arc<MemberMeta>>,
        consent: &Consent,
    ) -> Result<(), ArrayError> {
        for meta in &added {
            super::heal::check_disk(self.parts(), meta, consent)?;
        }
        super::reshape_run::start(self.parts(), new_tree, added).await
    }

    /// Adds the members of `added` to this RAID 1 as new copies (`new_tree`: the mirror with
    /// them after the old ones), each recorded rebuilding from 0 (`mirror_copies.rs`); the
    /// disk write rule is checked on each first. The volume must be quiet and recorded clean;
    /// open it again afterwards (the open resumes the rebuilds).
    pub async fn add_copies(
        &self,
        new_tree: Node,
        added: Vec<Arc<MemberMeta>>,
        consent: &Consent,
    ) -> Result<(), ArrayError> {
        self.not_reshaping("add copies")?;
        for meta in &added {
            super::heal::check_disk(self.parts(), meta, consent)?;
        }
        super::mirror_copies::start(self.parts(), new_tree, added).await
    }

    /// Reshape windows of at most `bytes` (at least one unit of the reshape).
    pub fn set_reshape_window_bytes(&self, bytes: u64) {
        self.reshape_window_bytes.store(bytes, Relaxed);
    }

    /// Refuses `what` while the volume is being reshaped (or was, until it is opened again):
    /// the rebuild and resync passes walk one tree, and a reshape serves two.
    fn not_reshaping(&self, what: &str) -> Result<(), ArrayError> {
        match &self.reshape {
            None => Ok(()),
            Some(_) => Err(self.parts().refuse(format!(
                "cannot {what} during a reshape (it serves two shapes; this walks one): run it once the reshape is done and the volume is open in its new shape (nbraidd reopens it itself)"
            ))),
        }
    }

    /// Where the reshape is: (bytes in the new shape, the volume's bytes), while one runs.
    pub fn reshape_progress(&self) -> Option<(u64, u64)> {
        (self.reshape.as_ref()).map(|n| (n.position(), n.layout().capacity()))
    }

    /// Bytes the reshape pass walks in all (the copy, then the space the new shape adds),
    /// while one runs: its progress is a share of these from before the pass starts.
    pub fn reshape_pass_bytes(&self) -> Option<u64> {
        self.reshape.as_ref().map(|n| n.pass_bytes())
    }

    /// Runs the reshape from its recorded position (the control started there,
    /// [`PassControl::resume_at`]) while the volume serves, checkpointing every window in
    /// the records; at the end the records say the new tree and no reshape (the next open
    /// serves it alone, with its full size). No reshape: done at once.
    pub async fn reshape(&self, ctl: &PassControl) -> Result<PassState, ArrayError> {
        match &self.reshape {
            None => Ok(PassState::Done),
            Some(node) => {
                let max = self.reshape_window_bytes.load(Relaxed);
                super::reshape_run::run(self.parts(), node, ctl, max).await
            }
        }
    }

    // Members by role, removal (`remove.rs`), added paths (`spare_list.rs`), scrub.

    /// Whether a member stands in role `role` (false: missing at assembly, or removed).
    pub fn has_member(&self, role: usize) -> bool {
        self.records.meta(role).is_some()
    }

    /// The member (and superblock) standing in role `role`: shared by every volume on the
    /// member file, so a volume that takes the file too writes through the same one.
    pub fn member_meta(&self, role: usize) -> Option<Arc<MemberMeta>> {
        self.records.meta(role)
    }

    /// Takes failed role `role`'s member out of the array (see `remove.rs`); returns its name.
    pub async fn remove_member(&self, role: usize) -> Result<String, ArrayError> {
        super::remove::remove_member(self.parts(), &self.heal, role).await
    }

    /// Keeps `meta` as a hot spare ([`Array::add_spare`]) and records its path, so a
    /// restart still knows it.
    /// `consent`: the operator's `--force` and the disk's Matrix siblings (the write rule,
    /// `disk_rule.rs`).
    pub async fn add_recorded_spare(
        &self,
        meta: Arc<MemberMeta>,
        consent: &Consent,
    ) -> Result<(), ArrayError> {
        super::spare_list::add_recorded_spare(self.parts(), &self.heal, meta, consent).await
    }

    /// Members added at run time, as recorded (paths): spares and members in roles.
    pub async fn added_paths(&self) -> Vec<String> {
        self.records.lock().await.added_paths.clone()
    }

    /// Takes `path` out of the recorded paths; whether it was there.
    pub async fn forget_added_path(&self, path: &str) -> Result<bool, ArrayError> {
        Ok(self.records.forget_added_path(path).await?)
    }

    /// Where the pass computing the checksums of a volume that enabled them stopped
    /// (`None`: none to run: checksums kept from create, or the pass is done).
    pub async fn checksum_fill_checkpoint(&self) -> Option<u64> {
        let fill = self.records.lock().await.checksum_fill;
        fill.map(|f| f.position_bytes)
    }

    /// Runs the pass that computes the checksums of a volume that enabled them, from its
    /// checkpoint (`checksum_fill.rs`); waits for a reshape to finish first.
    pub async fn fill_checksums(&self, ctl: &FillControl) -> Result<FillReport, ArrayError> {
        self.not_reshaping("compute the per-block checksums")?;
        super::checksum_fill::fill(self.parts(), ctl).await
    }

    /// Whether this open dropped per-block checksums (an unclean start) that
    /// [`Array::refill_checksums`] gives back.
    pub fn checksums_to_refill(&self) -> bool {
        Refill::wanted(self.parts())
    }

    /// Gives back the per-block checksums the unclean start dropped, once the resync is done
    /// (`checksum_refill.rs`); the records stay dirty until it is done. Nothing dropped:
    /// done at once.
    pub async fn refill_checksums(&self, ctl: &RefillControl) -> Result<PassState, ArrayError> {
        self.not_reshaping("compute the dropped per-block checksums again")?;
        (self.refill).run(self.parts(), &self.background, ctl).await
    }

    /// The unfinished scrub the records name, if any.
    pub async fn scrub_checkpoint(&self) -> Option<ScrubCheckpoint> {
        self.records.lock().await.scrub
    }

    /// Scrubs the volume from the control's position (see `scrub.rs`), recording its
    /// progress; returns the final report. Refused during a reshape: a scrub walks one tree,
    /// and would have checked nothing.
    pub async fn scrub(&self, ctl: &ScrubControl) -> Result<ScrubReport, ArrayError> {
        self.not_reshaping("scrub")?;
        super::scrub::scrub(self.parts(), ctl).await
    }
}
