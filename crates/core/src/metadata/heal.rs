//! Healing an [`Array`]: hot spares, rebuild onto a new member, replace — the engine's
//! online rebuild ([`crate::rebuild`]) with its progress in the superblocks.
//!
//! - [`Array::rebuild_onto`] puts a new member (a spare, or a failed member that came back:
//!   nothing it holds is trusted) in a failed role: its superblock gets the volume's record,
//!   the records name it in the role as *rebuilding* (checkpoint 0), and from then on it takes
//!   every write and every commit. [`Array::use_spares`] does it for every failed role while
//!   spares ([`Array::add_spare`]) last.
//! - [`Array::rebuild`] runs the pass. Every `checkpoint_bytes` (about a sixteenth of the
//!   volume, at most 1 GiB) the new members are flushed and the position is committed as
//!   their checkpoint; reopening the array resumes there (the write-intent bitmap covers
//!   user writes below it that were not flushed at a crash: it is never cleared while a
//!   role is rebuilding, and an unclean open resyncs its regions onto the rebuilding member
//!   too). When the pass has covered the volume, the new members are flushed (not the
//!   volume: its write-back cache is not the rebuild's), the new member's bitmap gets the
//!   current one, its role is committed *active* — and only then is it read.
//! - [`Array::replace`] rebuilds a replacement beside a member that keeps serving (md's
//!   want_replacement): nothing is recorded until the pass completes; then the replacement
//!   gets the role's record and the records name it (committed to it and every current
//!   member), and the slot switches to it. The old member's superblock is left as it was:
//!   assembly ignores a member whose id the records no longer name in its role (wipe it to
//!   reuse it). A restart before the commit loses the replace, not data: the old member still
//!   holds everything and the replacement's record, if any, names an id the records do not.
//!   A replace is therefore not checkpointed; it starts again.

use super::array::{free_area_avoiding, Array, ArrayError};
use super::disk_rule::{may_write, Allowed, Consent, Refused, Writer};
use super::member_meta::MemberMeta;
use super::records::Recorded;
use super::{Area, BitmapArea, MemberEntry, Probe, RecordedState, Uuid, VolumeRecord};
use crate::buf::Buf;
use crate::error::VolumeResult;
use crate::pass::{PassControl, PassState};
use crate::rebuild::REBUILD_WINDOW_BYTES;
use futures::lock::Mutex as AsyncMutex;
use futures::FutureExt;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::Arc;

/// Checkpoints are at most this far apart.
const MAX_CHECKPOINT_BYTES: u64 = 1 << 30;

/// How far apart a pass over `capacity` in windows of `window` bytes records its position:
/// about a sixteenth of the volume, at least a window, at most [`MAX_CHECKPOINT_BYTES`].
pub(super) fn checkpoint_every(capacity: u64, window: u64) -> u64 {
    (capacity / 16).clamp(window, MAX_CHECKPOINT_BYTES.max(window))
}

#[derive(Default)]
pub(super) struct Heal {
    spares: Mutex<Vec<Arc<MemberMeta>>>,
    /// Per role being rebuilt onto a new member: bytes of the volume current on it.
    rebuilding: Mutex<BTreeMap<usize, u64>>,
    /// Per role being replaced: the replacement.
    replacing: Mutex<BTreeMap<usize, Arc<MemberMeta>>>,
    /// One pass at a time.
    running: AsyncMutex<()>,
    /// Rebuild window (0: [`REBUILD_WINDOW_BYTES`]).
    window_bytes: AtomicU64,
}

impl Heal {
    /// Whether role `r`'s member is being rebuilt into it (its records keep up with commits).
    pub(super) fn is_rebuilding(&self, r: usize) -> bool {
        self.rebuilding.lock().contains_key(&r)
    }

    /// Role `r` lost its member: nothing is rebuilt or replaced into it any more.
    pub(super) fn forget(&self, r: usize) {
        self.rebuilding.lock().remove(&r);
        self.replacing.lock().remove(&r);
    }

    /// Resumes rebuilding role `r` from `checkpoint_bytes` (at open).
    pub(super) fn resume(&self, r: usize, checkpoint_bytes: u64) {
        self.rebuilding.lock().insert(r, checkpoint_bytes);
    }
}

/// What a rebuild did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RebuildReport {
    /// `Done`, or where it stopped (cancelled).
    pub state: PassState,
    /// Roles now current on their new member (rebuilt) or on their replacement (replaced).
    pub completed: Vec<usize>,
}

impl Array {
    pub(super) fn refuse(&self, detail: String) -> ArrayError {
        ArrayError::Metadata {
            volume: self.name().to_string(),
            detail,
        }
    }

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
        self.check_disk(&meta, consent)?;
        self.check_newcomer(&meta, None)?;
        self.heal.spares.lock().push(meta);
        Ok(())
    }

    /// Spares not used yet.
    pub fn spare_count(&self) -> usize {
        self.heal.spares.lock().len()
    }

    /// The spares not used yet, in the order they were added.
    pub fn spares(&self) -> Vec<Arc<MemberMeta>> {
        self.heal.spares.lock().clone()
    }

    /// Drops spare `meta` (by identity); whether it was one.
    pub fn remove_spare(&self, meta: &Arc<MemberMeta>) -> bool {
        let mut s = self.heal.spares.lock();
        let before = s.len();
        s.retain(|m| !Arc::ptr_eq(m, meta));
        s.len() != before
    }

    /// Failed roles (a spare would help; a new member that failed while being rebuilt
    /// leaves its role failed again).
    pub fn roles_wanting_a_member(&self) -> Vec<usize> {
        let v = self.volume();
        (0..v.member_count())
            .filter(|&r| v.member_is_failed(r))
            .collect()
    }

    /// Puts spares in failed roles, the most endangered first, each the smallest spare that
    /// fits ([`super::assign_spares`]); returns the roles that got one. [`Array::rebuild`]
    /// then rebuilds them. Call it whenever a member failed or a spare came.
    pub async fn use_spares(&self) -> Result<Vec<usize>, ArrayError> {
        let chosen: Vec<(usize, Arc<MemberMeta>)> = {
            let mut spares = self.heal.spares.lock();
            let sizes: Vec<u64> = spares.iter().map(|m| m.member().len()).collect();
            let v = self.volume();
            let choices = super::assign_spares(
                v.geometry().root(),
                &|r| !v.member_is_current(r),
                &self.roles_wanting_a_member(),
                &sizes,
            );
            let picked: Vec<(usize, Arc<MemberMeta>)> = choices
                .iter()
                .map(|c| (c.role, spares[c.spare].clone()))
                .collect();
            spares.retain(|m| !picked.iter().any(|(_, p)| Arc::ptr_eq(m, p)));
            picked
        };
        let mut used = Vec::new();
        for (r, spare) in chosen {
            // Spares passed the write rule when they were added.
            self.install_newcomer(r, spare).await?;
            used.push(r);
        }
        Ok(used)
    }

    /// Roles being rebuilt and the bytes current on their new member so far; roles being
    /// replaced (position 0: not recorded).
    pub fn rebuilding(&self) -> Vec<(usize, u64)> {
        let mut v: Vec<(usize, u64)> = self
            .heal
            .rebuilding
            .lock()
            .iter()
            .map(|(&r, &b)| (r, b))
            .collect();
        v.extend(self.heal.replacing.lock().keys().map(|&r| (r, 0)));
        v
    }

    /// Rebuild windows of about `bytes` (tests and the simulator use small ones).
    pub fn set_rebuild_window_bytes(&self, bytes: u64) {
        self.heal.window_bytes.store(bytes, SeqCst);
    }

    /// The write rule's verdict (`disk_rule.rs`) on this array writing onto `meta`.
    fn disk_verdict(&self, meta: &MemberMeta, consent: &Consent) -> Result<Allowed, Refused> {
        let writer = Writer {
            array: Some(self.id()),
            siblings: consent.siblings.clone(),
        };
        may_write(&meta.contents(), &writer, consent.force)
    }

    /// Whether the write rule lets this array write onto `meta` (`disk_rule.rs`); a forced
    /// write is logged with what it overrides.
    pub(super) fn check_disk(
        &self,
        meta: &MemberMeta,
        consent: &Consent,
    ) -> Result<(), ArrayError> {
        match self.disk_verdict(meta, consent) {
            Ok(Allowed::Forced(why)) => {
                tracing::warn!(
                    "volume `{}`: writing onto `{}` as forced (--force), although {why}",
                    self.name(),
                    meta.member().name()
                );
                Ok(())
            }
            Ok(_) => Ok(()),
            Err(why) => Err(self.refuse(format!(
                "`{}` {why}{}",
                meta.member().name(),
                why.force_advice()
            ))),
        }
    }

    /// Takes the records of other arrays off `meta` when the operator forced this array onto
    /// it (`--force` over another array's member): that array must find its member gone, not
    /// assemble over bytes this array rebuilt. Call it once every other check has passed.
    pub(super) async fn drop_forced_records(
        &self,
        meta: &MemberMeta,
        consent: &Consent,
    ) -> Result<(), ArrayError> {
        let Ok(Allowed::Forced(Refused::Foreign(foreign))) = self.disk_verdict(meta, consent)
        else {
            return Ok(());
        };
        let gone: Vec<Uuid> = foreign.iter().map(|r| r.array).collect();
        meta.update(|sb| sb.volumes.retain(|v| !gone.contains(&v.array)))
            .await
            .map_err(|e| self.refuse(e.to_string()))?;
        tracing::warn!(
            "volume `{}`: `{}`: records of another array taken off as forced ({})",
            self.name(),
            meta.member().name(),
            foreign
                .iter()
                .map(|r| r.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
        Ok(())
    }

    /// Whether `meta` can join (as a spare, or in role `role`, whose old member it may be).
    fn check_newcomer(&self, meta: &MemberMeta, role: Option<usize>) -> Result<(), ArrayError> {
        if let Probe::Unreadable(e) | Probe::Unreachable(e) = meta.probe() {
            return Err(self.refuse(format!(
                "`{}`: {e}; refusing to overwrite it",
                meta.member().name()
            )));
        }
        let need = (0..self.volume().member_count())
            .map(|r| self.volume().member_end(r))
            .max()
            .unwrap_or(0);
        if meta.member().len() < need {
            return Err(self.refuse(format!(
                "`{}` has {} bytes; a member of this volume needs {need}",
                meta.member().name(),
                meta.member().len()
            )));
        }
        let metas = self.records.metas.read();
        if metas
            .iter()
            .enumerate()
            .filter(|&(r, _)| Some(r) != role)
            .filter_map(|(_, m)| m.as_ref())
            .any(|m| Arc::ptr_eq(m.member(), meta.member()))
        {
            return Err(self.refuse(format!(
                "`{}` already serves this volume",
                meta.member().name()
            )));
        }
        Ok(())
    }

    /// The id `meta` plays `role` under: its own, unless another role has it.
    async fn newcomer_id(
        &self,
        role: usize,
        meta: &MemberMeta,
        rec: &Recorded,
    ) -> Result<Uuid, ArrayError> {
        let own = meta.sb.lock().await.as_ref().map(|sb| sb.member);
        match own {
            Some(u) if rec.members[role].uuid == u || !rec.members.iter().any(|m| m.uuid == u) => {
                Ok(u)
            }
            _ => Uuid::random().map_err(|e| self.refuse(format!("random id: {e}"))),
        }
    }

    /// Writes `rec` as `meta`'s record of `role` (replacing any old record of this volume
    /// there; `rec` names `meta`'s id in the role), with a fresh bitmap area holding
    /// `bitmap` (zeroes when `None`). Returns the bitmap area.
    async fn write_role_record(
        &self,
        role: usize,
        meta: &MemberMeta,
        rec: &Recorded,
        bitmap: Option<Vec<u8>>,
    ) -> Result<Option<Area>, ArrayError> {
        let uuid = rec.members[role].uuid;
        let held = meta.sb.lock().await.clone();
        let mut others = held.clone();
        if let Some(sb) = others.as_mut() {
            sb.volumes.retain(|v| v.name != self.name());
        }
        // The role's partial-parity log stays where the engine writes it.
        let ppl = self.ppl_areas.get(role).copied().flatten();
        if let Some(a) = ppl {
            let taken = others.as_ref().is_some_and(|sb| {
                sb.volumes.iter().any(|v| {
                    [v.bitmap.map(|b| b.area), v.ppl, v.checksums]
                        .into_iter()
                        .flatten()
                        .any(|u| u.offset < a.offset + a.len && a.offset < u.offset + u.len)
                })
            });
            if taken {
                return Err(self.refuse(format!(
                    "`{}`: the partial-parity log's place (bytes {}..{}) is taken in its metadata area",
                    meta.member().name(),
                    a.offset,
                    a.offset + a.len
                )));
            }
            super::ppl_area::clear(meta.member().as_ref(), a)
                .await
                .map_err(|e| self.refuse(e.to_string()))?;
        }
        let template = self.bitmap_areas.read().iter().flatten().next().copied();
        let bitmap_area = match (template, &self.intent) {
            (Some(t), Some(intent)) => {
                let offset = free_area_avoiding(others.as_ref(), t.len, ppl.as_slice())
                    .ok_or_else(|| {
                        self.refuse(format!(
                            "`{}`: no room for a {}-byte bitmap in the metadata area",
                            meta.member().name(),
                            t.len
                        ))
                    })?;
                let mut b = Buf::zeroed(t.len as usize);
                if let Some(image) = &bitmap {
                    b.copy_from_slice(image);
                }
                meta.member()
                    .write(offset, b.freeze(), true)
                    .await
                    .map_err(|e| self.refuse(e.to_string()))?;
                Some(BitmapArea {
                    area: Area { offset, len: t.len },
                    chunk_bytes: intent.chunk_bytes(),
                })
            }
            _ => None,
        };
        let record = VolumeRecord {
            array: self.id(),
            name: self.name().to_string(),
            events: rec.events,
            clean: rec.clean,
            role: role as u32,
            members: rec.members.clone(),
            tree: self.volume().geometry().root().clone(),
            bitmap: bitmap_area,
            ppl,
            checksums: None,
            scrub: rec.scrub,
            added_paths: rec.added_paths.clone(),
        };
        let name = self.name().to_string();
        meta.update(move |sb| {
            sb.member = uuid;
            sb.volumes.retain(|v| v.name != name);
            sb.volumes.push(record);
        })
        .await
        .map_err(|e| self.refuse(e.to_string()))?;
        Ok(bitmap_area.map(|b| b.area))
    }

    /// Puts `meta` in failed role `role` to be rebuilt by [`Array::rebuild`] (it takes writes
    /// at once and is read once the rebuild completes), if the write rule lets it be written.
    pub async fn rebuild_onto(&self, role: usize, meta: Arc<MemberMeta>) -> Result<(), ArrayError> {
        self.check_disk(&meta, &Consent::default())?;
        self.install_newcomer(role, meta).await
    }

    /// [`Array::rebuild_onto`] for a disk the write rule has passed already.
    pub(super) async fn install_newcomer(
        &self,
        role: usize,
        meta: Arc<MemberMeta>,
    ) -> Result<(), ArrayError> {
        if role >= self.volume().member_count() || !self.volume().member_is_failed(role) {
            return Err(self.refuse(format!(
                "role {role} has not failed: replace its member instead"
            )));
        }
        self.check_newcomer(&meta, Some(role))?;
        let mut rec = self.records.recorded.lock().await;
        // Its own record says *rebuilding* from the first write: a later commit torn on it
        // must not leave a record that looks like a member that merely missed writes.
        let mut next = Recorded {
            events: rec.events,
            clean: rec.clean,
            members: rec.members.clone(),
            scrub: rec.scrub,
            added_paths: rec.added_paths.clone(),
        };
        // A spare added at run time stays listed: it holds the role now, and a restart must
        // open it again (`spare_list.rs`). The failed member it rebuilds over leaves the list
        // if it was added at run time: a restart must not take it for a spare.
        let failed = self.volume().member(role).name().to_string();
        if failed != meta.member().name() {
            next.added_paths.retain(|p| *p != failed);
        }
        next.members[role] = MemberEntry {
            uuid: self.newcomer_id(role, &meta, &rec).await?,
            state: RecordedState::Rebuilding {
                checkpoint_bytes: 0,
            },
        };
        let area = self.write_role_record(role, &meta, &next, None).await?;
        self.volume().install_member(role, meta.member().clone())?;
        self.records.metas.write()[role] = Some(meta);
        self.bitmap_areas.write()[role] = area;
        self.heal.resume(role, 0);
        rec.members[role] = next.members[role];
        rec.added_paths = next.added_paths;
        self.commit(&mut rec).await?;
        tracing::info!("volume `{}`: rebuilding role {role}", self.name());
        Ok(())
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
        self.check_disk(&meta, consent)?;
        self.check_newcomer(&meta, None)?;
        // Its path is recorded when it takes the role: refused now if it could not be.
        let listed = self.records.recorded.lock().await.added_paths.clone();
        self.check_recordable(meta.member().name(), &listed)?;
        self.drop_forced_records(&meta, consent).await?;
        self.volume()
            .start_replacement(role, meta.member().clone())?;
        self.heal.replacing.lock().insert(role, meta);
        Ok(())
    }

    /// Rebuilds every role being rebuilt or replaced, resuming at their checkpoints, while
    /// the volume serves; returns when they are all current (or the control cancelled it).
    /// Roles added while it runs are rebuilt by a second pass before it returns.
    pub async fn rebuild(&self, ctl: &PassControl) -> Result<RebuildReport, ArrayError> {
        let _one = self.heal.running.lock().await;
        let mut completed = Vec::new();
        loop {
            let targets = self.volume().rebuild_targets();
            // Replacements that failed are given up.
            self.heal
                .replacing
                .lock()
                .retain(|r, _| self.volume().table().slot(*r).replacement().is_some());
            if targets.is_empty() {
                if completed.is_empty() {
                    ctl.nothing_to_do();
                }
                return Ok(RebuildReport {
                    state: PassState::Done,
                    completed,
                });
            }
            let start = {
                let rb = self.heal.rebuilding.lock();
                targets
                    .iter()
                    .map(|r| rb.get(r).copied().unwrap_or(0))
                    .min()
                    .unwrap_or(0)
            };
            ctl.set_position(start);
            let state = self.rebuild_pass(ctl, &targets).await?;
            if state != PassState::Done {
                return Ok(RebuildReport { state, completed });
            }
            completed.extend(self.complete(&targets).await?);
        }
    }

    async fn rebuild_pass(
        &self,
        ctl: &PassControl,
        targets: &[usize],
    ) -> Result<PassState, ArrayError> {
        let capacity = self.volume().capacity();
        let window = match self.heal.window_bytes.load(SeqCst) {
            0 => REBUILD_WINDOW_BYTES,
            w => w,
        };
        let every = checkpoint_every(capacity, window);
        let checkpoint = move |pos: u64| self.checkpoint(targets, pos).boxed();
        let state = self
            .volume()
            .rebuild_pass(ctl, window, every, Box::new(checkpoint))
            .await;
        // Progress in memory (a cancelled pass resumes here), whatever the outcome.
        self.advance(targets, ctl.position_bytes());
        Ok(state?)
    }

    /// Records that the bytes below `pos` are current on `targets`' new members (in memory).
    fn advance(&self, targets: &[usize], pos: u64) {
        let mut rb = self.heal.rebuilding.lock();
        for r in targets {
            if let Some(b) = rb.get_mut(r) {
                *b = (*b).max(pos);
            }
        }
    }

    /// Makes the rebuilt bytes durable on the new members and records `pos` as their
    /// checkpoint.
    async fn checkpoint(&self, targets: &[usize], pos: u64) -> VolumeResult<()> {
        self.advance(targets, pos);
        let roles = self.flush_newcomers(targets).await;
        let mut rec = self.records.recorded.lock().await;
        for &r in &roles {
            if let RecordedState::Rebuilding { checkpoint_bytes } = &mut rec.members[r].state {
                *checkpoint_bytes = (*checkpoint_bytes).max(pos);
            }
        }
        self.commit(&mut rec).await
    }

    /// Flushes what `targets` are being rebuilt onto (new members, replacements); one that
    /// fails is failed (a replacement given up). Returns the roles rebuilding onto a new
    /// member that still stand.
    async fn flush_newcomers(&self, targets: &[usize]) -> Vec<usize> {
        let v = self.volume();
        let flushes = targets.iter().map(|&r| async move {
            if let Some(m) = v.table().slot(r).replacement() {
                if let Err(e) = m.flush().await {
                    v.table().slot(r).drop_replacement(&e);
                }
                return None;
            }
            if !self.heal.is_rebuilding(r) || v.member_is_failed(r) {
                return None;
            }
            if let Err(e) = v.member(r).flush().await {
                v.fail_member(r, &e.to_string());
                return None;
            }
            Some(r)
        });
        futures::future::join_all(flushes)
            .await
            .into_iter()
            .flatten()
            .collect()
    }

    /// After a pass covered the volume: targets still standing become current, recorded first.
    async fn complete(&self, targets: &[usize]) -> Result<Vec<usize>, ArrayError> {
        // What the role is recorded on must hold the pass's bytes: a flush of the new
        // members, not of the volume — under client writes that destages the whole
        // write-back cache first (seconds; none of it is the rebuild's: what is still cached
        // goes to the new member like to every other when it is destaged).
        self.flush_newcomers(targets).await;
        let mut done = Vec::new();
        for &r in targets {
            if self.volume().member_is_failed(r) {
                continue;
            }
            let replacement = self.heal.replacing.lock().remove(&r);
            let ok = match replacement {
                Some(meta) => self.swap_in(r, meta).await?,
                None => self.activate(r).await?,
            };
            if ok {
                done.push(r);
            }
        }
        Ok(done)
    }

    /// A rebuilt new member: its bitmap catches up, its role is committed active, then it
    /// is read.
    async fn activate(&self, r: usize) -> Result<bool, ArrayError> {
        if !self.heal.is_rebuilding(r) {
            return Ok(false);
        }
        // The records' lock before the bitmap writer's, as everywhere.
        let mut rec = self.records.recorded.lock().await;
        self.catch_up_bitmap(r).await;
        if self.volume().member_is_failed(r) {
            self.heal.rebuilding.lock().remove(&r);
            self.commit(&mut rec).await?;
            return Ok(false);
        }
        rec.members[r].state = RecordedState::Active;
        self.commit(&mut rec).await?;
        self.heal.rebuilding.lock().remove(&r);
        self.volume().complete_rebuild(r);
        tracing::info!("volume `{}`: role {r} rebuilt", self.name());
        Ok(true)
    }

    /// A rebuilt replacement takes role `r`: recorded (on it and every current member),
    /// then swapped in.
    async fn swap_in(&self, r: usize, meta: Arc<MemberMeta>) -> Result<bool, ArrayError> {
        if self.volume().table().slot(r).replacement().is_none() {
            return Ok(false);
        }
        let mut rec = self.records.recorded.lock().await;
        let _bitmap = self.bitmap_write.lock().await;
        let image = self.intent.as_ref().map(|i| i.on_disk_image());
        let mut next = Recorded {
            events: rec.events,
            clean: rec.clean,
            members: rec.members.clone(),
            scrub: rec.scrub,
            added_paths: rec.added_paths.clone(),
        };
        next.members[r] = MemberEntry {
            uuid: self.newcomer_id(r, &meta, &rec).await?,
            state: RecordedState::Active,
        };
        // A restart opens the replacement by its recorded path (the config names the member
        // it replaced, if any); the replaced member is no longer one.
        let old = self.volume().member(r).name().to_string();
        next.added_paths.retain(|p| *p != old);
        let path = meta.member().name().to_string();
        if !next.added_paths.contains(&path) {
            match self.check_recordable(&path, &next.added_paths) {
                Ok(()) => next.added_paths.push(path),
                // `replace` checked it; spares added since filled the list.
                Err(e) => tracing::warn!(
                    "volume `{}`: role {r}'s replacement is not recorded ({e}): name it in the config, or a restart will not find it",
                    self.name()
                ),
            }
        }
        let area = self.write_role_record(r, &meta, &next, image).await?;
        rec.members[r] = next.members[r];
        rec.added_paths = next.added_paths.clone();
        self.records.metas.write()[r] = Some(meta);
        self.bitmap_areas.write()[r] = area;
        // Both members take every write until the swap: whichever the records name holds
        // everything.
        self.commit(&mut rec).await?;
        self.volume().complete_rebuild(r);
        tracing::info!("volume `{}`: role {r} replaced", self.name());
        Ok(true)
    }
}
