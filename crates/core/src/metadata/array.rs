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
//! request path is `array/requests.rs`; creating and opening are here, their decisions in
//! `create.rs` and `open.rs`.

use super::assemble::{assemble_with, Names};
use super::bitmap::Bitmap;
use super::checksum_area;
use super::checksum_refill::{Refill, RefillControl};
use super::disk_rule::Consent;
use super::error::ArrayError;
use super::fill_control::{FillControl, FillReport};
use super::heal::{roles_wanting_a_member, Heal, RebuildReport};
use super::member_meta::MemberMeta;
use super::open::{plan_roles, RolePlan};
use super::options::{ArrayOptions, OpenReport};
use super::parts::Parts;
use super::ppl_area::PplPlaces;
use super::readd::{Readd, Returning};
use super::records::{Recorded, Records};
use super::resync::BackgroundResync;
use super::{
    Area, Assembly, BitmapArea, Probe, RecordedState, ScrubCheckpoint, Uuid, VolumeRecord,
};
use crate::absent::AbsentMember;
use crate::error::VolumeResult;
use crate::fail_cause::Because;
use crate::failure_gate::FailureRecorder;
use crate::member::Member;
use crate::pass::{PassControl, PassState};
use crate::reshape::ReshapeNode;
use crate::scrub::{ScrubControl, ScrubReport};
use crate::volume::{Volume, VolumeOptions};
use nbraid_layout::{Geometry, Node};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

mod requests;

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

/// How [`Array::open_with`] opens: resyncing before it serves, resyncing in the background
/// where it may, or writing nothing at all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Foreground,
    Background,
    ReadOnly,
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
        let id = super::create::write_records(name, &tree, &metas, &opts, assume_clean).await?;
        // `checksums = "enable"` on a volume that is new: its regions were placed as without
        // checksums, so they get the areas and the pass an existing volume gets, now rather
        // than at the next open.
        if opts.enable_checksums && opts.checksum_area_before_region_bytes.is_none() {
            let roles: Vec<(usize, Arc<MemberMeta>)> = metas.iter().cloned().enumerate().collect();
            checksum_area::enable_at_create(name, &roles).await?;
        }
        let metas: Vec<Option<Arc<MemberMeta>>> = metas.into_iter().map(Some).collect();
        let array = Array::build(name, id, tree, &metas, opts, !assume_clean, None).await?;
        let mut report = OpenReport {
            was_clean: assume_clean,
            roles: (0..array.volume.member_count()).map(Ok).collect(),
            ..OpenReport::default()
        };
        if !assume_clean {
            report.resynced_bytes = array
                .resync(&[(0, array.volume.capacity())], progress)
                .await?;
        }
        array.settle().await?;
        Ok((array, report))
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
        Array::open_with(name, config_tree, metas, opts, progress, Mode::Foreground).await
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
        Array::open_with(name, config_tree, metas, opts, progress, Mode::Background).await
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
        Array::open_with(name, config_tree, metas, opts, &no_progress, Mode::ReadOnly).await
    }

    /// Whether the volume was opened read-only ([`Array::open_read_only`]): it writes
    /// nothing to its members.
    pub fn is_read_only(&self) -> bool {
        self.records.is_kept_in_memory()
    }

    /// [`Array::open`]; with [`Mode::Background`], a resync the volume may serve before is
    /// left to [`Array::background_resync`]; with [`Mode::ReadOnly`], nothing is written.
    async fn open_with(
        name: &str,
        config_tree: &Node,
        metas: Vec<Option<Arc<MemberMeta>>>,
        opts: ArrayOptions,
        progress: &(dyn Fn(u64, u64) + Sync),
        mode: Mode,
    ) -> Result<(Array, OpenReport), ArrayError> {
        let probes: Vec<Probe> = metas
            .iter()
            .map(|m| m.as_ref().map_or(Probe::Missing, |m| m.probe().clone()))
            .collect();
        let names = Names(&opts.member_ids);
        let asm = assemble_with(name, config_tree, &probes, opts.force_assembly, &names)?;
        let mut roles = plan_roles(&asm, &metas);
        let read_only = mode == Mode::ReadOnly;
        if read_only {
            if opts.enable_checksums {
                roles.warnings.push(
                    "checksums = \"enable\" is not carried out: read_only = true writes nothing"
                        .into(),
                );
            }
        } else {
            let enable = opts.enable_checksums;
            checksum_area::enable_at_open(name, enable, &asm, &roles.by_role).await?;
        }
        let tree = asm.tree.clone();
        let built = Array::build(
            name,
            asm.array,
            tree,
            &roles.by_role,
            opts,
            !(read_only && asm.clean),
            Some(asm.newest_role),
        );
        let mut array = built.await?;
        if read_only {
            array.keep_in_memory(&asm)?;
        }
        let rebuilding_roles = array.take_roles(&asm, &roles).await;
        // The write hole: replay the partial-parity log before the resync and before serving
        // (read-only: only a clean array starts, whose log has nothing to replay).
        let ppl = match array.ppl.setup() {
            Some(p) if !read_only => {
                crate::ppl::recover(&array.volume, &p.areas, p.life, !asm.clean).await?
            }
            _ => Default::default(),
        };
        array.adopt_assembly(&asm).await;
        if let Some(node) = &array.reshape {
            super::reshape_run::restore(array.parts(), node).await?;
        }
        for w in &roles.warnings {
            tracing::warn!("volume `{name}`: {w}");
        }
        let mut report = OpenReport {
            ppl,
            warnings: roles.warnings,
            was_clean: asm.clean,
            resynced_roles: roles.stale.clone(),
            absent_roles: roles.absent,
            resynced_bytes: 0,
            background_bytes: 0,
            roles: asm.roles.clone(),
            rebuilding_roles,
            forced: asm.forced.clone(),
        };
        if read_only {
            // The stale roles stay resyncing: neither read nor (nothing writes) written.
            return Ok((array, report));
        }
        let stale = roles.stale;
        let rebuilding = !report.rebuilding_roles.is_empty();
        let background = mode == Mode::Background;
        let resync =
            (array.resync_at_open(asm.clean, &stale, rebuilding, background, progress)).await?;
        match resync {
            Resynced::Background => {
                report.background_bytes = array.background_bytes();
                return Ok((array, report));
            }
            Resynced::Foreground(bytes) => report.resynced_bytes = bytes,
        }
        let mut rec = array.records.lock().await;
        for &r in &stale {
            array.volume.set_resyncing(r, false);
            rec.members[r].state = RecordedState::Active;
        }
        drop(rec);
        array.settle().await?;
        Ok((array, report))
    }

    /// After an unclean start or with stale roles: resyncs what the bitmap marks (the whole
    /// volume without one) before serving, or leaves it to the background when `background`
    /// and the volume may serve first (`resync.rs`).
    async fn resync_at_open(
        &self,
        clean: bool,
        stale: &[usize],
        rebuilding: bool,
        background: bool,
        progress: &(dyn Fn(u64, u64) + Sync),
    ) -> Result<Resynced, ArrayError> {
        if clean && stale.is_empty() {
            return Ok(Resynced::Foreground(0));
        }
        let capacity = self.volume.capacity();
        let ranges = match &self.bitmap {
            Some(b) => b.intent().set_ranges(capacity),
            None => vec![(0, capacity)],
        };
        let p = self.parts();
        if background && self.background.start(p, &ranges, stale, rebuilding).await? {
            return Ok(Resynced::Background);
        }
        Ok(Resynced::Foreground(self.resync(&ranges, progress).await?))
    }

    /// A read-only start: refused where it cannot serve right without writing
    /// (`read_only.rs`); else the records and the bitmap are kept in memory from now on.
    fn keep_in_memory(&mut self, asm: &Assembly) -> Result<(), ArrayError> {
        let capacity = self.volume.capacity();
        let unsynced_bytes = match &self.bitmap {
            Some(b) => super::ranges::total_bytes(&b.intent().set_ranges(capacity)),
            None => capacity,
        };
        let found = super::read_only::Found {
            clean: asm.clean,
            unsynced_bytes,
            has_parity: !crate::ppl::parity_groups(self.volume.geometry().root()).is_empty(),
            reshaping: self.reshape.is_some(),
        };
        if let Some(why) = super::read_only::refusal(self.name(), found) {
            return Err(ArrayError::ReadOnly(why));
        }
        self.records.keep_in_memory();
        if let Some(b) = &mut self.bitmap {
            b.keep_in_memory();
        }
        Ok(())
    }

    /// The slots as the role plan says: absent roles failed, stale ones resyncing, new
    /// members being rebuilt written but not read (the rebuild resumes online). Returns the
    /// roles being rebuilt and their checkpoints.
    async fn take_roles(&self, asm: &Assembly, roles: &RolePlan) -> Vec<(usize, u64)> {
        let recorded = self.records.lock().await.members.clone();
        for &r in &roles.absent {
            let (cause, why) = super::open::absent_cause(recorded.get(r));
            self.volume.fail_member(r, &Because(cause, &why));
        }
        // Settled below (they were not there to miss anything since the records were written).
        let gate = self.volume.table().failure_gate();
        gate.recorded_up_to(gate.generation());
        for &r in &roles.stale {
            self.volume.set_resyncing(r, true);
        }
        let mut rebuilding = Vec::new();
        for &(r, checkpoint) in &asm.rebuilding {
            if self.volume.member_is_failed(r) {
                continue;
            }
            self.volume.set_resyncing(r, true);
            self.records.rebuilding.resume(r, checkpoint);
            rebuilding.push((r, checkpoint));
        }
        rebuilding
    }

    /// The records take assembly's event counter, and trust the roles a forced assembly took
    /// back (the next commit records them current).
    async fn adopt_assembly(&self, asm: &Assembly) {
        let mut rec = self.records.lock().await;
        rec.events = asm.events;
        for f in &asm.forced {
            rec.members[f.role].state = RecordedState::Active;
        }
    }

    /// The engine volume over members in recorded roles (absent roles get stand-ins), with
    /// its records, bitmap and log places; the volume's state is role `newest_role`'s record
    /// (assembly's choice; `None` at create, where every record is the one just written).
    async fn build(
        name: &str,
        id: Uuid,
        tree: Node,
        by_role: &[Option<Arc<MemberMeta>>],
        opts: ArrayOptions,
        dirty: bool,
        newest_role: Option<usize>,
    ) -> Result<Array, ArrayError> {
        let bad = |detail: String| ArrayError::Metadata {
            volume: name.to_string(),
            detail,
        };
        let mut records = Vec::with_capacity(by_role.len());
        for m in by_role {
            records.push(match m {
                Some(m) => m.record(name).await,
                None => None,
            });
        }
        let newest = match newest_role {
            Some(r) => records.get(r).cloned().flatten(),
            None => records.iter().flatten().next().cloned(),
        };
        let newest = newest.ok_or_else(|| {
            bad(format!("role {newest_role:?}'s record, the one its records say it starts from, is not on the member placed in that role (its record names another member there)"))
        })?;
        // Mid-reshape neither tree is logged; the bitmap's resync covers both (`crate::reshape`).
        let logged = opts.ppl && newest.reshape.is_none();
        let ppl = PplPlaces::new(name, &tree, &records, newest.events, logged);
        // Parity is trusted: whatever may disagree (the bitmap's regions, stale members) is
        // resynced before anything is served, so the volume starts as in sync as zeroed members.
        let checksums = checksum_area::setup(name, &tree, &records, &newest)
            .map(|s| s.with_fail_after_errors(opts.checksum_errors_to_fail));
        let vopts = VolumeOptions {
            members_known_zero: true,
            checksums,
            ..opts.volume
        };
        let (volume, reshape) = match &newest.reshape {
            None => {
                let members = members_by_role(&tree, by_role);
                let setup = ppl.setup().cloned();
                let v = Volume::with_ppl(Geometry::from_tree(tree), members, vopts, setup)?;
                (v, None)
            }
            Some(r) => {
                let members = members_by_role(&r.new_tree, by_role);
                let new = Geometry::from_tree(r.new_tree.clone());
                let old = Geometry::from_tree(tree);
                let (v, node) = Volume::reshaping(old, &new, members, vopts, r.position_bytes)?;
                (v, Some(node))
            }
        };
        let bitmap = match newest.bitmap {
            None => None,
            Some(b) => {
                // A member whose bitmap has another chunk (one that missed the commit of a
                // reshape growing it) is neither read nor written: its bits mean other regions.
                let same_chunk = |x: &BitmapArea| x.chunk_bytes == b.chunk_bytes;
                let areas: Vec<Option<Area>> = (records.iter())
                    .map(|r| {
                        r.as_ref()
                            .and_then(|r| r.bitmap.filter(same_chunk).map(|b| b.area))
                    })
                    .collect();
                let loaded = Bitmap::load(&volume, b, areas, opts.bitmap_clear_delay);
                Some(loaded.await.map_err(bad)?)
            }
        };
        let mut recorded = recorded_as(&newest);
        recorded.checksum_fill = checksum_area::fill_of(&records);
        recorded.reshape = (newest.reshape.as_ref())
            .map(|r| super::reshape::RecordedReshape::from_records(r, &records));
        let records = Arc::new(Records::new(
            id,
            name,
            volume.shared_table(),
            by_role.to_vec(),
            recorded,
            dirty,
        ));
        // From here on a member failure is recorded before any further member write.
        let recorder: Arc<dyn FailureRecorder> = records.clone();
        (volume.table().failure_gate()).install(Arc::downgrade(&recorder));
        Ok(Array {
            volume,
            records,
            bitmap,
            ppl,
            heal: Heal::default(),
            returning: Returning::default(),
            background: BackgroundResync::default(),
            refill: Refill::default(),
            reshape,
            reshape_window_bytes: AtomicU64::new(super::reshape_run::MAX_WINDOW_BYTES),
        })
    }

    /// Rewrites copies and parity over `ranges`, piece by piece (whole full stripes, about
    /// 1 MiB each: memory stays bounded whatever the ranges). Returns the bytes covered.
    async fn resync(
        &self,
        ranges: &[(u64, u64)],
        progress: &(dyn Fn(u64, u64) + Sync),
    ) -> Result<u64, ArrayError> {
        let capacity = self.volume.capacity();
        let (width, piece) = self.parts().resync_piece();
        let total = super::ranges::total_bytes(ranges);
        let mut done = 0;
        for &(a, b) in ranges {
            let mut at = a / width * width;
            let end = b.div_ceil(width).saturating_mul(width).min(capacity);
            while at < end {
                let n = piece.min(end - at);
                self.volume.resync_range(at, n).await?;
                at += n;
                done += n;
                progress(done.min(total), total);
            }
        }
        self.volume.flush().await?;
        Ok(total)
    }

    /// After open or create: every current member records the volume clean, with what
    /// failed recorded; the bitmap is cleared when no role is missing (else it keeps what
    /// the missing members will need).
    async fn settle(&self) -> VolumeResult<()> {
        self.volume.flush().await?;
        if let Some(b) = &self.bitmap {
            let i = b.intent();
            if !self.volume.is_degraded() {
                i.flushed(i.flush_started(), Duration::ZERO);
            }
            b.write(&self.volume).await?;
        }
        let mut rec = self.records.lock().await;
        self.records.mark_clean(&mut rec).await
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

/// Where opening left the resync.
enum Resynced {
    /// Before serving: these bytes.
    Foreground(u64),
    /// Left to [`Array::background_resync`].
    Background,
}

/// The engine's members by role: the member standing there, or a stand-in as long as the
/// role's regions for a role none stands in.
fn members_by_role(tree: &Node, by_role: &[Option<Arc<MemberMeta>>]) -> Vec<Arc<dyn Member>> {
    let mut ends = vec![0u64; by_role.len()];
    tree.visit_members(&mut |m| ends[m.index] = ends[m.index].max(m.start + m.len));
    by_role
        .iter()
        .enumerate()
        .map(|(r, m)| match m {
            Some(m) => m.member.clone(),
            None => Arc::new(AbsentMember::new(format!("role {r} (missing)"), ends[r]))
                as Arc<dyn Member>,
        })
        .collect()
}

/// The records as the newest record says them.
fn recorded_as(newest: &VolumeRecord) -> Recorded {
    Recorded {
        events: newest.events,
        clean: newest.clean,
        members: newest.members.clone(),
        scrub: newest.scrub,
        added_paths: newest.added_paths.clone(),
        reshape: None,
        tree: newest.tree.clone(),
        checksum_fill: newest.checksum_fill,
    }
}
