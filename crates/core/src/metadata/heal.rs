//! Healing an `Array`: hot spares, rebuild onto a new member, replace — the engine's
//! online rebuild ([`crate::rebuild`]) with its progress in the superblocks.
//!
//! - `Array::rebuild_onto` puts a new member (a spare, or a failed member that came back:
//!   nothing it holds is trusted) in a failed role: its superblock gets the volume's record,
//!   the records name it in the role as *rebuilding* (checkpoint 0), and from then on it takes
//!   every write and every commit. `Array::use_spares` does it for every failed role while
//!   spares (`Array::add_spare`) last.
//! - `Array::rebuild` runs the pass. Every `checkpoint_bytes` (about a sixteenth of the
//!   volume, at most 1 GiB) the new members are flushed and the position is committed as
//!   their checkpoint; reopening the array resumes there (the write-intent bitmap covers
//!   user writes below it that were not flushed at a crash: it is never cleared while a
//!   role is rebuilding, and an unclean open resyncs its regions onto the rebuilding member
//!   too). When the pass has covered the volume, the new members are flushed (not the
//!   volume: its write-back cache is not the rebuild's), the new member's bitmap gets the
//!   current one, its role is committed *active* — and only then is it read.
//! - Which node a failed role is rebuilt from, and whether any can, is one rule
//!   ([`crate::rebuild::rebuild_source`]): spares go only where it finds one, and a
//!   `replace` of a failed role (which puts the new member in the role, as `rebuild_onto`)
//!   is refused where it finds none.
//! - `Array::replace` rebuilds a replacement beside a member that keeps serving (md's
//!   want_replacement): only its path is recorded at the start (as a spare added at run
//!   time); when the pass completes the replacement gets the role's record and the records
//!   name it (committed to it and every current member), and the slot switches to it. The
//!   old member's superblock is left as it was: assembly ignores a member whose id the
//!   records no longer name in its role (wipe it to reuse it). A restart before the commit
//!   loses the copy, not data: the old member still holds everything and the replacement's
//!   record, if any, names an id the records do not; the start opens the recorded path as a
//!   spare standing by. A replace is therefore not checkpointed; it is asked again. If the
//!   member being replaced fails first, the slot drops the replacement (a failed role takes
//!   no write, so it would lack what is written meanwhile) and the pass puts it in the role
//!   as a new member, rebuilt whole (`heal/rebuild.rs`).
//! - A pass works for the members in its roles when it starts ([`super::rebuilding::Claim`]):
//!   a member put in a role while it runs (the first failed, a spare took the role) is not
//!   advanced, checkpointed or made current by it; the next pass rebuilds it from the start.
//!
//! [`Heal`] owns the spares, the replacements under way and the pass's settings; the
//! positions of roles being rebuilt are the records' ([`super::rebuilding::Rebuilding`]: every
//! commit reaches them). The pass itself is in `heal/rebuild.rs`.

use super::areas::free_area_avoiding;
use super::checksum_area;
use super::disk_rule::{may_write, Allowed, Consent, Refused, Writer};
use super::error::ArrayError;
use super::member_meta::MemberMeta;
use super::parts::Parts;
use super::records::{recordable, Recorded};
use super::{
    Area, BitmapArea, MemberEntry, Probe, RecordedState, ReplacementCheckpoint, Uuid, VolumeRecord,
};
use crate::buf::Buf;
use crate::error::VolumeResult;
use crate::pass::PassState;
use crate::rebuild::rebuild_source;
use futures::lock::Mutex as AsyncMutex;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::Arc;

mod rebuild;

#[derive(Default)]
pub(super) struct Heal {
    spares: Mutex<Vec<Arc<MemberMeta>>>,
    /// Per role being replaced: the replacement, and how far it is current.
    replacing: Mutex<BTreeMap<usize, Replacing>>,
    /// One pass at a time.
    running: AsyncMutex<()>,
    /// What the running pass started with (`heal/rebuild.rs`): a role whose work is still
    /// that is being moved by it; any other waits for the pass to start again.
    live: Mutex<Vec<(usize, rebuild::Onto)>>,
    /// Spares go into roles one caller at a time (the daemon's watcher, `nbraid rebuild`):
    /// a spare is off the list before its role records it, so a second caller that did not
    /// wait would find neither a spare nor a role rebuilding and say "nothing to rebuild".
    placing: AsyncMutex<()>,
    /// Rebuild window (0: [`crate::rebuild::REBUILD_WINDOW_BYTES`]).
    window_bytes: AtomicU64,
}

/// A replacement copying a role's member; the records keep its checkpoint
/// ([`super::ReplacementCheckpoint`]).
#[derive(Clone)]
struct Replacing {
    meta: Arc<MemberMeta>,
    /// Its id, as its own record names it in the role.
    id: Uuid,
    /// The volume's bytes below this are current on it: a pass wrote them, and it took
    /// every write since it joined. A pass started again for another role leaves it out
    /// below ([`crate::rebuild::roles_ahead`]), as a rebuilding role below its checkpoint.
    current_below_bytes: u64,
}

/// Whether a newcomer took a failed role.
enum Placed {
    /// In the role, rebuilding (recorded).
    InRole,
    /// The role had not failed (any more): nothing was written.
    RoleTaken,
}

/// What a rebuild did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RebuildReport {
    /// `Done`, or where it stopped (cancelled).
    pub state: PassState,
    /// Roles now current on their new member (rebuilt) or on their replacement (replaced).
    pub completed: Vec<usize>,
    /// Stopped (`Cancelled`, not by its control) because a role needs rebuilding that the
    /// pass did not write from its start: the caller starts a new pass over every role at once.
    pub restart: bool,
}

impl Heal {
    /// Role `r` lost its member: nothing is rebuilt or replaced into it any more.
    pub(super) fn forget(&self, p: Parts<'_>, r: usize) {
        p.records.rebuilding.remove(r);
        self.replacing.lock().remove(&r);
    }

    /// Rebuild windows of about `bytes` (0: [`crate::rebuild::REBUILD_WINDOW_BYTES`]).
    pub(super) fn set_window_bytes(&self, bytes: u64) {
        self.window_bytes.store(bytes, SeqCst);
    }

    /// Keeps `meta` as a hot spare (in memory), if the write rule lets it be written.
    pub(super) fn add_spare(
        &self,
        p: Parts<'_>,
        meta: Arc<MemberMeta>,
        consent: &Consent,
    ) -> Result<(), ArrayError> {
        check_spare(p, &meta, consent)?;
        self.spares.lock().push(meta);
        Ok(())
    }

    /// The spares not used yet, in the order they were added.
    pub(super) fn spares(&self) -> Vec<Arc<MemberMeta>> {
        self.spares.lock().clone()
    }

    pub(super) fn spare_count(&self) -> usize {
        self.spares.lock().len()
    }

    /// Drops spare `meta` (by identity); whether it was one.
    pub(super) fn remove_spare(&self, meta: &Arc<MemberMeta>) -> bool {
        let mut s = self.spares.lock();
        let before = s.len();
        s.retain(|m| !Arc::ptr_eq(m, meta));
        s.len() != before
    }

    /// Puts spares in failed roles, the most endangered first, each the smallest spare that
    /// fits ([`super::assign_spares`]); returns the roles that got one.
    pub(super) async fn use_spares(&self, p: Parts<'_>) -> Result<Vec<usize>, ArrayError> {
        if p.records.is_kept_in_memory() {
            // A read-only volume takes no spare: taking one writes it.
            return Ok(Vec::new());
        }
        let _one_caller = self.placing.lock().await;
        let chosen: Vec<(usize, Arc<MemberMeta>)> = {
            let mut spares = self.spares.lock();
            let sizes: Vec<u64> = spares.iter().map(|m| m.member().len()).collect();
            let v = p.volume;
            let choices = super::assign_spares(
                v.geometry().root(),
                &|r| !v.member_is_current(r),
                &roles_wanting_a_member(p),
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
        let mut left = chosen.into_iter();
        while let Some((r, spare)) = left.next() {
            // Spares passed the write rule when they were added.
            match self.place_newcomer(p, r, spare.clone()).await {
                Ok(Placed::InRole) => used.push(r),
                // A member came back into the role meanwhile (re-add): nothing was written,
                // the spare stands by again.
                Ok(Placed::RoleTaken) => self.spares.lock().push(spare),
                Err(e) => {
                    // The spares not tried yet stand by again; this one's state is unknown.
                    self.spares.lock().extend(left.map(|(_, s)| s));
                    return Err(e);
                }
            }
        }
        Ok(used)
    }

    /// Roles being rebuilt and the bytes current on their new member so far; roles being
    /// replaced and the bytes current on their replacement.
    pub(super) fn rebuilding(&self, p: Parts<'_>) -> Vec<(usize, u64)> {
        let mut v = p.records.rebuilding.snapshot();
        v.extend((self.replacing.lock().iter()).map(|(&r, x)| (r, x.current_below_bytes)));
        v
    }

    /// Puts `meta` in failed role `role` to be rebuilt, if the write rule lets it be written.
    pub(super) async fn rebuild_onto(
        &self,
        p: Parts<'_>,
        role: usize,
        meta: Arc<MemberMeta>,
    ) -> Result<(), ArrayError> {
        check_disk(p, &meta, &Consent::default())?;
        self.install_newcomer(p, role, meta).await
    }

    /// Puts `meta` (a disk the write rule has passed) in failed role `role`, rebuilding.
    pub(super) async fn install_newcomer(
        &self,
        p: Parts<'_>,
        role: usize,
        meta: Arc<MemberMeta>,
    ) -> Result<(), ArrayError> {
        match self.place_newcomer(p, role, meta).await? {
            Placed::InRole => Ok(()),
            Placed::RoleTaken => Err(p.refuse(format!(
                "role {role} has not failed: replace its member instead"
            ))),
        }
    }

    /// [`Heal::install_newcomer`], saying [`Placed::RoleTaken`] (nothing written) when the
    /// role has not failed — looked at again under the records' lock, which a returning
    /// member's re-add holds while it takes the role back.
    async fn place_newcomer(
        &self,
        p: Parts<'_>,
        role: usize,
        meta: Arc<MemberMeta>,
    ) -> Result<Placed, ArrayError> {
        let failed = || role < p.volume.member_count() && p.volume.member_is_failed(role);
        if !failed() {
            return Ok(Placed::RoleTaken);
        }
        check_newcomer(p, &meta, Some(role))?;
        let mut rec = p.records.lock().await;
        if !failed() {
            return Ok(Placed::RoleTaken);
        }
        // Its own record says *rebuilding* from the first write: a later commit torn on it
        // must not leave a record that looks like a member that merely missed writes.
        let mut next = rec.clone();
        // A spare added at run time stays listed: it holds the role now, and a restart must
        // open it again (`spare_list.rs`). The failed member it rebuilds over leaves the list
        // if it was added at run time: a restart must not take it for a spare.
        let failed = p.volume.member(role).name().to_string();
        if failed != meta.member().name() {
            next.added_paths.retain(|p| *p != failed);
        }
        next.members[role] = MemberEntry {
            uuid: newcomer_id(p, role, &meta, &rec).await?,
            state: RecordedState::Rebuilding {
                checkpoint_bytes: 0,
            },
            unacked_since_failed: false,
            failed_cause: None,
        };
        let area = write_role_record(p, role, &meta, &next, (None, true)).await?;
        // Its area was cleared: the role's checksums start blank with it.
        let install = || p.volume.install_member(role, meta.member().clone());
        checksum_area::install_blank(checksums(p), role, install).await?;
        p.records.set_meta(&rec, role, Some(meta));
        if let Some(b) = p.bitmap {
            b.set_area(role, area);
        }
        p.records.rebuilding.resume(role, 0);
        rec.members[role] = next.members[role];
        rec.added_paths = next.added_paths;
        p.records.commit(&mut rec).await?;
        tracing::info!("volume `{}`: rebuilding role {role}", p.name());
        Ok(Placed::InRole)
    }

    /// Starts replacing role `role`'s member (current) by `meta`; the rebuild copies it and
    /// swaps them when done. A failed role's member has nothing to copy: `meta` goes into
    /// the role and is rebuilt whole, from the node that can rebuild it.
    pub(super) async fn replace(
        &self,
        p: Parts<'_>,
        role: usize,
        meta: Arc<MemberMeta>,
        consent: &Consent,
    ) -> Result<(), ArrayError> {
        check_disk(p, &meta, consent)?;
        check_newcomer(p, &meta, None)?;
        super::cloned::refuse_a_copy(p, &meta)?;
        // Its path is recorded when it takes the role: refused now if it could not be.
        let listed = p.records.lock().await.added_paths.clone();
        recordable(meta.member().name(), &listed).map_err(|e| p.refuse(e))?;
        if role < p.volume.member_count() && p.volume.member_is_failed(role) {
            return self.replace_failed(p, role, meta, consent).await;
        }
        // Every refusal before the other arrays' records are taken off the disk: a refused
        // replace must leave it as it was.
        p.volume.check_replacement(role, meta.member().as_ref())?;
        drop_forced_records(p, &meta, consent).await?;
        // Recorded by path, and carrying this array's record, before the copy starts: a
        // restart before the swap opens it and finds it this array's (standing by as a spare)
        // whatever the copy wrote into its first MiB meanwhile (the write-hole log).
        let path = meta.member().name().to_string();
        let (listed, id) = record_replacement(p, role, &meta).await?;
        if let Err(e) = p.volume.start_replacement(role, meta.member().clone()) {
            if listed {
                p.records.forget_added_path(&path).await?;
            }
            return Err(e.into());
        }
        let replacing = Replacing {
            meta,
            id,
            current_below_bytes: 0,
        };
        self.replacing.lock().insert(role, replacing);
        // Named in the records from now on: a restart goes on with the copy (from 0 until
        // the first checkpoint; `replace_resume.rs`).
        let mut rec = p.records.lock().await;
        rec.replacements.retain(|x| x.role as usize != role);
        rec.replacements.push(ReplacementCheckpoint {
            role: role as u32,
            member: id,
            checkpoint_bytes: 0,
        });
        p.records.commit(&mut rec).await?;
        Ok(())
    }

    /// A replace the records say was under way at the last shutdown goes on: `meta` (the
    /// replacement, its id `id`) copies role `role`'s member again, current below
    /// `current_below_bytes` (`replace_resume.rs` decides what it may trust). Nothing
    /// written to the volume since the start may have missed it.
    pub(super) fn resume_replacement(
        &self,
        p: Parts<'_>,
        role: usize,
        (meta, id): (Arc<MemberMeta>, Uuid),
        current_below_bytes: u64,
    ) -> VolumeResult<()> {
        p.volume.check_replacement(role, meta.member().as_ref())?;
        p.volume.start_replacement(role, meta.member().clone())?;
        let replacing = Replacing {
            meta,
            id,
            current_below_bytes,
        };
        self.replacing.lock().insert(role, replacing);
        Ok(())
    }
}

/// Writes onto `meta`, about to replace role `role`'s member, this array's record naming it
/// in the role (rebuilding), then lists its path in the records (committed); whether the
/// path was not listed yet. The copy writes into the replacement's first MiB (the role's
/// write-hole log lives there on small members): without the record first, a restart found
/// it neither blank nor this array's, and refused it as a spare. The commit after the record
/// always runs, so the members' records are newer than the replacement's: assembly ignores
/// it in the role (its id is not the one recorded there) and keeps it as a spare. Returns
/// whether the path was not listed yet, and the replacement's id.
async fn record_replacement(
    p: Parts<'_>,
    role: usize,
    meta: &MemberMeta,
) -> Result<(bool, Uuid), ArrayError> {
    let path = meta.member().name().to_string();
    let mut rec = p.records.lock().await;
    let listed = !rec.added_paths.contains(&path);
    let mut next = rec.clone();
    if listed {
        recordable(&path, &rec.added_paths).map_err(|e| p.refuse(e))?;
        next.added_paths.push(path);
    }
    next.members[role] = MemberEntry {
        uuid: joining_id(p, meta, &rec.members).await?,
        state: RecordedState::Rebuilding {
            checkpoint_bytes: 0,
        },
        unacked_since_failed: false,
        failed_cause: None,
    };
    write_role_record(p, role, meta, &next, (None, true)).await?;
    // Both superblock copies: no commit writes to it before the swap, and a blank second
    // copy is reported damaged at a start.
    meta.update(|_| {})
        .await
        .map_err(|e| p.refuse(e.to_string()))?;
    rec.added_paths = next.added_paths;
    p.records.commit(&mut rec).await?;
    Ok((listed, next.members[role].uuid))
}

impl Heal {
    /// `replace` of failed role `role`: `meta` goes into it, rebuilding — refused when no
    /// node can rebuild the role now (the rule spares follow).
    async fn replace_failed(
        &self,
        p: Parts<'_>,
        role: usize,
        meta: Arc<MemberMeta>,
        consent: &Consent,
    ) -> Result<(), ArrayError> {
        let v = p.volume;
        let lost: Vec<usize> = (0..v.member_count())
            .filter(|&r| !v.member_is_current(r))
            .collect();
        if rebuild_source(v.geometry().root(), role, &|r| lost.contains(&r)).is_none() {
            return Err(p.refuse(format!(
                "role {role} cannot be rebuilt with roles {lost:?} not current: no node above it holds its bytes and takes writes (a parity group beyond its tolerance lies between)"
            )));
        }
        drop_forced_records(p, &meta, consent).await?;
        // Recorded by path, as a spare added at run time: a restart must open it (unless it
        // is the failed member's own path, which the config names).
        let path = meta.member().name().to_string();
        let mut rec = p.records.lock().await;
        if path != v.member(role).name() && !rec.added_paths.contains(&path) {
            rec.added_paths.push(path);
            p.records.commit(&mut rec).await?;
        }
        drop(rec);
        let _one_caller = self.placing.lock().await;
        self.install_newcomer(p, role, meta).await
    }
}

/// Failed roles (a spare would help; a new member that failed while being rebuilt leaves its
/// role failed again).
pub(super) fn roles_wanting_a_member(p: Parts<'_>) -> Vec<usize> {
    let v = p.volume;
    (0..v.member_count())
        .filter(|&r| v.member_is_failed(r))
        .collect()
}

/// The write rule's verdict (`disk_rule.rs`) on this array writing onto `meta`.
fn disk_verdict(p: Parts<'_>, meta: &MemberMeta, consent: &Consent) -> Result<Allowed, Refused> {
    let writer = Writer {
        array: Some(p.id()),
        siblings: consent.siblings.clone(),
    };
    may_write(&meta.contents(), &writer, consent.force)
}

/// Whether the write rule lets this array write onto `meta` (`disk_rule.rs`); a forced
/// write is logged with what it overrides.
pub(super) fn check_disk(
    p: Parts<'_>,
    meta: &MemberMeta,
    consent: &Consent,
) -> Result<(), ArrayError> {
    match disk_verdict(p, meta, consent) {
        Ok(Allowed::Forced(why)) => {
            tracing::warn!(
                "volume `{}`: writing onto `{}` as forced (--force), although {why}",
                p.name(),
                meta.member().name()
            );
            Ok(())
        }
        Ok(_) => Ok(()),
        Err(why) => Err(p.refuse(format!(
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
    p: Parts<'_>,
    meta: &MemberMeta,
    consent: &Consent,
) -> Result<(), ArrayError> {
    let Ok(Allowed::Forced(Refused::Foreign(foreign))) = disk_verdict(p, meta, consent) else {
        return Ok(());
    };
    let gone: Vec<Uuid> = foreign.iter().map(|r| r.array).collect();
    meta.update(|sb| sb.volumes.retain(|v| !gone.contains(&v.array)))
        .await
        .map_err(|e| p.refuse(e.to_string()))?;
    tracing::warn!(
        "volume `{}`: `{}`: records of another array taken off as forced ({})",
        p.name(),
        meta.member().name(),
        foreign
            .iter()
            .map(|r| r.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(())
}

/// Whether `meta` may be kept as a spare: the write rule lets this array write onto it and
/// it can join ([`check_newcomer`]).
pub(super) fn check_spare(
    p: Parts<'_>,
    meta: &MemberMeta,
    consent: &Consent,
) -> Result<(), ArrayError> {
    // As the config refuses `spares` there: nothing could ever be rebuilt onto it, and
    // taking it (and saying so) would promise a cover the volume does not have.
    if p.volume.fault_tolerance().best == 0 {
        return Err(p.refuse(format!(
            "`{}`: spares do not apply to a volume with no redundancy (nothing can be rebuilt onto a spare)",
            meta.member().name()
        )));
    }
    check_disk(p, meta, consent)?;
    check_newcomer(p, meta, None)?;
    super::cloned::refuse_a_copy(p, meta)
}

/// Whether `meta` can join (as a spare, or in role `role`, whose old member it may be).
fn check_newcomer(p: Parts<'_>, meta: &MemberMeta, role: Option<usize>) -> Result<(), ArrayError> {
    if let Probe::Unreadable(e) | Probe::Unreachable(e) = meta.probe() {
        return Err(p.refuse(format!(
            "`{}`: {e}; refusing to overwrite it",
            meta.member().name()
        )));
    }
    let need = (0..p.volume.member_count())
        .map(|r| p.volume.member_end(r))
        .max()
        .unwrap_or(0);
    if meta.member().len() < need {
        return Err(p.refuse(format!(
            "`{}` has {} bytes; a member of this volume needs {need}",
            meta.member().name(),
            meta.member().len()
        )));
    }
    let serves = p
        .records
        .metas()
        .iter()
        .enumerate()
        .filter(|&(r, _)| Some(r) != role)
        .filter_map(|(_, m)| m.as_ref())
        .any(|m| Arc::ptr_eq(m.member(), meta.member()));
    if serves {
        return Err(p.refuse(format!(
            "`{}` already serves this volume",
            meta.member().name()
        )));
    }
    Ok(())
}

/// The id `meta` plays `role` under: its own, unless another role has it.
async fn newcomer_id(
    p: Parts<'_>,
    role: usize,
    meta: &MemberMeta,
    rec: &Recorded,
) -> Result<Uuid, ArrayError> {
    let own = meta.sb.lock().await.as_ref().map(|sb| sb.member);
    match own {
        Some(u) if rec.members[role].uuid == u => Ok(u),
        _ => joining_id(p, meta, &rec.members).await,
    }
}

/// The id a disk joining the volume in a new role takes (a reshape's added member, a new
/// RAID 1 copy): its own where it has one no role of `members` goes by — a Matrix disk keeps
/// one id for every volume on it, and a random id for the second volume joined on it made
/// the first volume's records name an id the disk no longer carries (the role lost at the
/// next start) — else a new one.
pub(super) async fn joining_id(
    p: Parts<'_>,
    meta: &MemberMeta,
    members: &[MemberEntry],
) -> Result<Uuid, ArrayError> {
    let own = meta.sb.lock().await.as_ref().map(|sb| sb.member);
    match own {
        Some(u) if !members.iter().any(|m| m.uuid == u) => Ok(u),
        _ => Uuid::random().map_err(|e| p.refuse(format!("random id: {e}"))),
    }
}

/// The volume's checksum setup (`None`: it keeps none).
fn checksums(p: Parts<'_>) -> Option<&crate::checksum::ChecksumSetup> {
    p.volume.options().checksums.as_ref()
}

/// Writes `rec` as `meta`'s record of `role` (replacing any old record of this volume
/// there; `rec` names `meta`'s id in the role), with a fresh bitmap area holding `bitmap`
/// (zeroes when `None`) and the role's checksum area (cleared when `blank_checksums`; a
/// replacement's was copied). Returns the bitmap area.
async fn write_role_record(
    p: Parts<'_>,
    role: usize,
    meta: &MemberMeta,
    rec: &Recorded,
    (bitmap, blank_checksums): (Option<Vec<u8>>, bool),
) -> Result<Option<Area>, ArrayError> {
    let uuid = rec.members[role].uuid;
    let mut others = meta.sb.lock().await.clone();
    if let Some(sb) = others.as_mut() {
        sb.volumes.retain(|v| v.name != p.name());
    }
    let ppl = place_role_log(p, role, meta, others.as_ref()).await?;
    let bitmap_area = place_role_bitmap(p, meta, others.as_ref(), ppl, bitmap).await?;
    let member = meta.member().as_ref();
    let checksums =
        checksum_area::for_newcomer(checksums(p), role, member, others.as_ref(), blank_checksums)
            .await
            .map_err(|e| p.refuse(e))?;
    let record = VolumeRecord {
        array: p.id(),
        name: p.name().to_string(),
        events: rec.events,
        clean: rec.clean,
        role: role as u32,
        members: rec.members.clone(),
        tree: p.volume.geometry().root().clone(),
        bitmap: bitmap_area,
        ppl,
        checksums,
        scrub: rec.scrub,
        added_paths: rec.added_paths.clone(),
        reshape: None, // assembly refuses a volume mid-reshape: a running array has none
        checksum_fill: rec.checksum_fill,
        replacements: rec.replacements.clone(),
        block_size: Some(rec.block_size),
    };
    let name = p.name().to_string();
    meta.update(move |sb| {
        sb.member = uuid;
        sb.volumes.retain(|v| v.name != name);
        sb.volumes.push(record);
    })
    .await
    .map_err(|e| p.refuse(e.to_string()))?;
    Ok(bitmap_area.map(|b| b.area))
}

/// The role's partial-parity log stays where the engine writes it: refused if another
/// volume's record on `meta` (`others`) took that place, else cleared there.
async fn place_role_log(
    p: Parts<'_>,
    role: usize,
    meta: &MemberMeta,
    others: Option<&super::Superblock>,
) -> Result<Option<Area>, ArrayError> {
    let Some(a) = p.ppl.area(role) else {
        return Ok(None);
    };
    if super::areas::overlaps_recorded(others, a) {
        return Err(p.refuse(format!(
            "`{}`: the partial-parity log's place (bytes {}..{}) is taken in its metadata area",
            meta.member().name(),
            a.offset,
            a.offset + a.len
        )));
    }
    super::ppl_area::clear(meta.member().as_ref(), a)
        .await
        .map_err(|e| p.refuse(e.to_string()))?;
    Ok(Some(a))
}

/// A fresh bitmap area on `meta` beside `others`' areas and the log's, holding `image`
/// (zeroes when `None`); `None` when the volume has no bitmap.
async fn place_role_bitmap(
    p: Parts<'_>,
    meta: &MemberMeta,
    others: Option<&super::Superblock>,
    ppl: Option<Area>,
    image: Option<Vec<u8>>,
) -> Result<Option<BitmapArea>, ArrayError> {
    let (Some(bitmap), Some(len)) = (p.bitmap, p.bitmap.and_then(|b| b.area_bytes())) else {
        return Ok(None);
    };
    let offset = free_area_avoiding(others, len, ppl.as_slice()).ok_or_else(|| {
        p.refuse(format!(
            "`{}`: no room for a {len}-byte bitmap in the metadata area",
            meta.member().name()
        ))
    })?;
    let mut b = Buf::zeroed(len as usize);
    if let Some(image) = &image {
        b.copy_from_slice(image);
    }
    meta.member()
        .write(offset, b.freeze(), true)
        .await
        .map_err(|e| p.refuse(e.to_string()))?;
    Ok(Some(BitmapArea {
        area: Area { offset, len },
        chunk_bytes: bitmap.intent().chunk_bytes(),
    }))
}
