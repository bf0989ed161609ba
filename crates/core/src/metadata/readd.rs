//! A failed member that comes back (md's re-add): a remote member whose server returns after
//! a timeout or a reset, a disk that was unplugged and plugged back.
//!
//! - **Nothing it holds is trusted until it is brought up to date.** `Array::readd` reads the
//!   member's superblock again. If it carries this array's record in the same role under the
//!   id the records name there, was recorded *failed* (not half rebuilt) and the volume has a
//!   write-intent bitmap, the member is put back in its slot *resyncing*: it takes every write
//!   from then on and is read nowhere. The regions the bitmap marks at that moment are what it
//!   may have missed: a region's bit is set before any write to it and is never cleared while
//!   the volume is degraded (`Array::flush`), so every write since the member failed, and every
//!   write in flight when it did, lies in a set region. `Array::resync_returned` rewrites
//!   those regions (the readable copies and the data over the member, parity recomputed) as a
//!   pass — rate-limited, pausable — then flushes, gives the member the current bitmap, makes
//!   it current and commits its role *active*: only the re-adds the pass started with
//!   ([`Back::term`]) whose member still stands in the role — not a spare put there since,
//!   nor the same member re-added again while the pass ran (it skipped windows meanwhile;
//!   the next pass resyncs it over the bitmap as it is then).
//! - **Otherwise it is rebuilt whole** (`Array::rebuild_onto`, then `Array::rebuild`): a
//!   blank member (a `nbdkit memory` export restarted: no superblock and its first MiB zero),
//!   a volume without a bitmap, a member that failed while it was being rebuilt — and one
//!   whose record says the bitmap may not mark all it lacks ([`went_apart`]: the volume was
//!   reshaped since, a peer's role has another member, or it may have been started on its
//!   own elsewhere — split brain, whose writes no bitmap of the array's marks). Its record
//!   is rewritten at the array's events before anything else is written on it (the
//!   newcomer's record, `heal.rs`). A member with
//!   other records (another array, an id the role no longer has), or with data and no
//!   superblock, is refused: it may hold someone else's data (the write rule, `disk_rule.rs`).
//! - **A Matrix member back blank is rebuilt into every volume that had it.** The first
//!   volume to re-add it finds it blank and writes its own record there; the others find
//!   only that record, none of theirs. Told which arrays share the member
//!   (`Array::readd_with_siblings`: the daemon knows its volumes), each rebuilds it whole
//!   into its own role beside them, writing its own record; not told, it refuses, naming
//!   what it found. The volumes re-add a member one at a time (`MemberMeta::one_joining`),
//!   so each takes the member's id from the records written before and places its areas
//!   apart from theirs. Meanwhile a volume that never saw the member fail finds no record of
//!   itself at its next commit and fails the member there (`records.rs`): no volume goes on
//!   trusting a member whose superblock says nothing of it.
//! - **A crash during the resync loses nothing.** The records keep the role *failed* until
//!   the commit at the end (the member's own record is not touched before), so a restart
//!   serves the role degraded and the re-add starts again from the bitmap, which still marks
//!   every region (the volume stayed degraded).
//!
//! [`Returning`] owns the re-added roles and the ranges each has to resync.

use super::disk_rule::{may_write, Allowed, Writer};
use super::error::ArrayError;
use super::heal::Heal;
use super::member_meta::MemberMeta;
use super::parts::Parts;
use super::ranges::{aligned, piece_bytes, slice, total_bytes};
use super::records::{Recorded, RecordsGuard};
use super::{Area, Probe, RecordedState, Superblock, Uuid, VolumeRecord};
use crate::member::Member;
use crate::pass::{PassControl, PassState, PassWork};
use futures::lock::Mutex as AsyncMutex;
use futures::FutureExt;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::Arc;

/// Pieces in flight.
const INFLIGHT: usize = 2;

/// Members re-added and not yet current.
#[derive(Default)]
pub(super) struct Returning {
    /// Per role: the member back in it and the volume ranges it may have missed.
    roles: Mutex<BTreeMap<usize, Back>>,
    /// The last re-add's number ([`Back::term`]).
    last_term: AtomicU64,
    /// One pass at a time.
    running: AsyncMutex<()>,
}

/// A member put back in its role to be resynced.
struct Back {
    /// Each re-add's own: a pass makes current only the re-adds it started with — not one
    /// that failed again and was re-added while it ran (it skipped windows meanwhile).
    term: u64,
    /// The member put back: a spare put in the role since is not resynced by this.
    member: Arc<dyn Member>,
    /// Aligned to full stripes, merged.
    ranges: Vec<(u64, u64)>,
}

impl Back {
    /// Whether it still stands in role `r`, waiting for its resync.
    fn stands(&self, p: Parts<'_>, r: usize) -> bool {
        p.volume.table().slot(r).holds(&self.member)
            && !p.volume.member_is_failed(r)
            && !p.records.rebuilding.contains(r)
    }
}

/// What [`super::Array::readd`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Readd {
    /// Back as it left: written from now on, read once the re-added members' resync has
    /// rewritten the `bytes` of the volume the bitmap marks.
    Resync { bytes: u64 },
    /// Put in its role to be rebuilt whole by the rebuild (blank, or no bitmap to say what
    /// it missed).
    Rebuild,
    /// Its superblock cannot be read (not back yet): nothing was done.
    Unreachable(String),
}

/// A failed role's member that came back carrying a superblock (`sb`, read again into
/// `fresh`); `otherwise`: its disk was found not as last written while it was away.
struct Returned<'a> {
    role: usize,
    /// The member's name, for people.
    name: &'a str,
    sb: &'a Superblock,
    fresh: Arc<MemberMeta>,
    otherwise: Option<String>,
}

/// How a member back with its own record returns.
#[derive(Debug, PartialEq, Eq)]
enum Comeback {
    /// Put back resyncing over the bitmap, kept in this area of the member.
    Resync(Area),
    /// Rebuilt whole; with why when its record says the bitmap may not mark all it lacks.
    RebuildWhole(Option<String>),
}

/// Whether a member back with its own record is resynced: only with a bitmap (`bitmap`) it
/// keeps a copy of (`area`), recorded failed (not half rebuilt: `state`), and nothing
/// saying it went apart from the array while away (`apart`).
fn comeback(
    bitmap: bool,
    area: Option<Area>,
    state: RecordedState,
    apart: Option<String>,
) -> Comeback {
    match (bitmap, area, state, apart) {
        (true, Some(area), RecordedState::Failed, None) => Comeback::Resync(area),
        (.., apart) => Comeback::RebuildWhole(apart),
    }
}

/// Role `role`'s member, as the records hold it: refused unless the role exists, has
/// failed and has a member.
fn failed_role(p: Parts<'_>, role: usize) -> Result<Arc<MemberMeta>, ArrayError> {
    let v = p.volume;
    if role >= v.member_count() {
        return Err(refuse_readd(p, role, "no such member"));
    }
    if !v.member_is_failed(role) {
        return Err(refuse_readd(p, role, "it has not failed"));
    }
    (p.records.meta(role))
        .ok_or_else(|| refuse_readd(p, role, "the role has no member (missing or removed)"))
}

fn refuse_readd(p: Parts<'_>, role: usize, detail: impl std::fmt::Display) -> ArrayError {
    p.refuse(format!("member {role} cannot be re-added: {detail}"))
}

impl Returning {
    /// Brings failed role `role`'s own member back (see the module): resynced over the
    /// bitmap's regions when it can be, else rebuilt whole (through `heal`); refused when it
    /// carries other records.
    pub(super) async fn readd(
        &self,
        p: Parts<'_>,
        heal: &Heal,
        role: usize,
        siblings: &[Uuid],
    ) -> Result<Readd, ArrayError> {
        let old = failed_role(p, role)?;
        // The records say the role failed before anything else happens to it.
        p.records.record_failures().await?;
        // The member's other volumes (Matrix) wait: a member back blank gets one id and
        // areas apart, each volume placing its own beside the records written before.
        let _one = old.one_joining().await;
        let name = old.member().name().to_string();
        // Read again, its records' state shared with the other volumes on it (Matrix). A
        // member that comes back without a superblock is written only if blank (the rule).
        let fresh = match old.try_reread().await {
            Ok(fresh) => fresh,
            Err(why) => return Ok(Readd::Unreachable(why)),
        };
        // Told once per volume, whatever this re-add does.
        let otherwise = old.found_otherwise(p.name());
        let sb = match fresh.probe() {
            Probe::Superblock(sb, _) => sb.clone(),
            _ => {
                tracing::warn!(
                    "volume `{}`: member {role} (`{name}`) came back blank: rebuilding it whole",
                    p.name(),
                );
                heal.rebuild_onto(p, role, fresh).await?;
                return Ok(Readd::Rebuild);
            }
        };
        if !carries_ours(p, &sb) && beside_siblings(p, &fresh, siblings) {
            tracing::warn!(
                "volume `{}`: member {role} (`{name}`) came back with records of the volumes sharing it only, none of this one (it came back blank and they rebuilt it first): rebuilding it whole beside them",
                p.name(),
            );
            heal.install_newcomer(p, role, fresh).await?;
            return Ok(Readd::Rebuild);
        }
        let back = Returned {
            role,
            name: &name,
            sb: &sb,
            fresh,
            otherwise,
        };
        self.readd_own(p, heal, back).await
    }

    /// A member back with its superblock, not only its siblings' records: resynced when its
    /// own record says the bitmap marks all it lacks, else rebuilt whole; refused when it is
    /// not the member the records name in its role.
    async fn readd_own(
        &self,
        p: Parts<'_>,
        heal: &Heal,
        back: Returned<'_>,
    ) -> Result<Readd, ArrayError> {
        let role = back.role;
        let rec = p.records.lock().await;
        // Looked at again under the lock: a spare may have taken the role meanwhile.
        if !p.volume.member_is_failed(role) {
            return Err(refuse_readd(p, role, "it has not failed"));
        }
        let theirs = own_record(p, role, back.name, back.sb, &rec)?;
        // Found not as last written while away (a stale copy): it lacks writes from before
        // it left, which no bitmap marks.
        let apart = went_apart(&rec, theirs).or_else(|| {
            (back.otherwise).map(|found| {
                format!("its disk was found not as last written while it was away ({found})")
            })
        });
        let area = bitmap_area_of(p, role, theirs);
        match comeback(p.bitmap.is_some(), area, rec.members[role].state, apart) {
            Comeback::Resync(area) => self.put_back(p, &rec, role, back.fresh, Some(area)),
            Comeback::RebuildWhole(apart) => {
                if let Some(why) = apart {
                    tracing::warn!(
                        "volume `{}`: member {role} (`{}`) is back, but {why}: what the bitmap marks may not be all it lacks, so it is rebuilt whole (whatever was written on it since it left is overwritten)",
                        p.name(),
                        back.name
                    );
                }
                drop(rec);
                heal.rebuild_onto(p, role, back.fresh).await?;
                Ok(Readd::Rebuild)
            }
        }
    }

    /// The member is back in its slot, resyncing: written from now on, and the regions the
    /// bitmap marks are what it has to resync. The records' lock is held (`held`).
    fn put_back(
        &self,
        p: Parts<'_>,
        held: &RecordsGuard<'_>,
        role: usize,
        fresh: Arc<MemberMeta>,
        area: Option<Area>,
    ) -> Result<Readd, ArrayError> {
        let (v, bitmap) = (
            p.volume,
            p.bitmap.expect("a re-add resyncs over the bitmap"),
        );
        bitmap.set_area(role, area);
        let fresh_member = fresh.member().clone();
        v.install_member(role, fresh_member.clone())?;
        p.records.set_meta(held, role, Some(fresh));
        // After the install: a write that planned without the member has its bit set already.
        let capacity = v.capacity();
        let set = bitmap.intent().set_ranges(capacity);
        let ranges = aligned(&set, p.stripe_bytes(), capacity);
        let bytes = total_bytes(&ranges);
        let back = Back {
            term: self.last_term.fetch_add(1, SeqCst) + 1,
            member: fresh_member,
            ranges,
        };
        self.roles.lock().insert(role, back);
        tracing::warn!(
            "volume `{}`: member {role} (`{}`) is back: resyncing the {bytes} bytes the bitmap marks before it is read",
            p.name(),
            v.member(role).name()
        );
        Ok(Readd::Resync { bytes })
    }

    /// Roles re-added and not current yet, with the bytes each has to resync.
    pub(super) fn returning(&self) -> Vec<(usize, u64)> {
        self.roles
            .lock()
            .iter()
            .map(|(&r, back)| (r, total_bytes(&back.ranges)))
            .collect()
    }

    /// Resyncs every re-added member over its regions while the volume serves, and makes
    /// those still standing current (recorded first). Members re-added meanwhile get a second
    /// pass before it returns; a member that fails again is dropped (a later re-add starts
    /// over).
    pub(super) async fn resync_returned(
        &self,
        p: Parts<'_>,
        ctl: &PassControl,
    ) -> Result<PassState, ArrayError> {
        let _one = self.running.lock().await;
        let mut first = true;
        // Roles whose returning member failed again during a pass, with what happened.
        let mut lost: Vec<(usize, String)> = Vec::new();
        loop {
            // The re-adds this pass works for (role, term), and the ranges they missed.
            let (terms, all) = {
                let mut map = self.roles.lock();
                map.retain(|&r, back| back.stands(p, r));
                let terms: Vec<(usize, u64)> = map.iter().map(|(&r, b)| (r, b.term)).collect();
                let all: Vec<(u64, u64)> = map.values().flat_map(|b| b.ranges.clone()).collect();
                (terms, all)
            };
            if terms.is_empty() {
                // A member that failed on the way and was not re-added since: the pass did
                // not do what it was for (as a rebuild whose new member failed says).
                if let Some(why) = still_out(p, &lost) {
                    ctl.failed(&why);
                    return Ok(PassState::Failed);
                }
                if first {
                    ctl.nothing_to_do();
                }
                return Ok(PassState::Done);
            }
            first = false;
            let targets: Vec<usize> = terms.iter().map(|&(r, _)| r).collect();
            let plan = aligned(&all, 1, p.volume.capacity());
            let state = resync_pass(p, ctl, &plan, &targets).await?;
            if state != PassState::Done {
                return Ok(state);
            }
            p.volume.flush().await?;
            for (r, term) in terms {
                if !self.rejoin(p, r, term).await? && p.volume.member_is_failed(r) {
                    lost.retain(|&(l, _)| l != r);
                    lost.push((r, failed_returning(p, r)));
                }
            }
        }
    }

    /// Re-added role `r`, resynced and flushed by a pass that started with its re-add
    /// `term`: its bitmap catches up, it becomes current and its role is committed active.
    /// Whether it did (not failed again, re-added again or given a spare meanwhile).
    async fn rejoin(&self, p: Parts<'_>, r: usize, term: u64) -> Result<bool, ArrayError> {
        // Under the records' lock, which a re-add and a spare taking the role hold.
        let mut rec = p.records.lock().await;
        let pending = {
            let mut map = self.roles.lock();
            let ours = map
                .get(&r)
                .is_some_and(|b| b.term == term && b.stands(p, r));
            ours && map.remove(&r).is_some()
        };
        if !pending {
            return Ok(false);
        }
        if let Some(b) = p.bitmap {
            b.catch_up(p.volume, &rec, r).await;
        }
        if p.volume.member_is_failed(r) {
            p.records.commit(&mut rec).await?;
            return Ok(false);
        }
        p.volume.set_resyncing(r, false);
        rec.members[r].state = RecordedState::Active;
        p.records.commit(&mut rec).await?;
        tracing::warn!(
            "volume `{}`: member {r} (`{}`) resynced: current again",
            p.name(),
            p.volume.member(r).name()
        );
        Ok(true)
    }
}

/// Whether superblock `sb` carries a record of this array.
fn carries_ours(p: Parts<'_>, sb: &Superblock) -> bool {
    (sb.volumes.iter()).any(|r| r.array == p.id() && r.name == p.name())
}

/// Whether the write rule lets this array write onto `fresh` beside the records it carries,
/// those of `siblings` only (the arrays sharing the member with this one: Matrix).
fn beside_siblings(p: Parts<'_>, fresh: &MemberMeta, siblings: &[Uuid]) -> bool {
    let writer = Writer {
        array: Some(p.id()),
        siblings: siblings.to_vec(),
    };
    may_write(&fresh.contents(), &writer, false) == Ok(Allowed::BesideSiblings)
}

/// The record of this array that the member that came back (`name`, superblock `sb`)
/// carries in `role` under the id the records name there. Refused when it is not that
/// member.
fn own_record<'a>(
    p: Parts<'_>,
    role: usize,
    name: &str,
    sb: &'a Superblock,
    rec: &Recorded,
) -> Result<&'a VolumeRecord, ArrayError> {
    let Some(record) = sb
        .volumes
        .iter()
        .find(|r| r.array == p.id() && r.name == p.name())
    else {
        let seen: Vec<String> = (sb.volumes.iter())
            .map(|r| format!("volume `{}` of array {}", r.name, r.array))
            .collect();
        return Err(refuse_readd(
            p,
            role,
            format!(
                "`{name}` carries no record of this array, only {}: another array's, or reused — wipe its first MiB and add it to rebuild onto it (unless those are volumes sharing the member with this one: they rebuilt it first, and a re-add naming them puts it beside them)",
                seen.join(", ")
            ),
        ));
    };
    if sb.member != rec.members[role].uuid || record.role as usize != role {
        return Err(refuse_readd(
            p,
            role,
            format!(
                "`{name}` is not the member the records name in role {role} (it was given another member since)"
            ),
        ));
    }
    Ok(record)
}

/// Why the array's bitmap may not mark all that the member whose record is `theirs` lacks,
/// if it may not; `rec` is the array's, its failure committed. A set-out member gets no
/// commit of the array's after the one recording its failure (`Records::commit` writes
/// current and rebuilding members, and that record onto an active member that failed, so a
/// start that finds it alone does not take it as current), so its record says what it saw
/// when it left — unless something else wrote it since:
/// - **it was being rebuilt** (its own record has its role rebuilding): it holds the volume
///   only below its last checkpoint, and the bitmap marks none of the rest;
/// - **a start of its own elsewhere** (split brain): its events reach the array's, or its
///   record sets out a member the array kept ([`super::ran_apart_from`]) — writes there
///   are in no bitmap of the array's;
/// - **another member in a role** than the array's: the role was given a member since, by
///   the array (a replacement, a spare) or by a start elsewhere, which may then have run
///   whole and cleared its bits;
/// - **another shape**: a reshape or new copies since rewrote the volume without it.
///
/// A member that only left while a peer was out, and the peer came back first, answers
/// too: the cases cannot be told apart, and a rebuild is right for every one of them.
fn went_apart(rec: &Recorded, theirs: &VolumeRecord) -> Option<String> {
    let at = theirs.events;
    let own = theirs.role as usize;
    let own_state = theirs.members.get(own).map(|m| m.state);
    // The record its failure left on it (`Records::commit`): the array's at that event.
    let marked_failed = own_state == Some(RecordedState::Failed);
    if at > rec.events || (at == rec.events && !marked_failed) {
        return Some(format!(
            "its record is at event {at} where the array is at {}: it may have been started on its own while away (split brain)",
            rec.events
        ));
    }
    if !matches!(
        own_state,
        Some(RecordedState::Active | RecordedState::Failed)
    ) {
        return Some(format!(
            "its own record (event {at}) has its role {own_state:?}: it left before it was rebuilt whole"
        ));
    }
    if theirs.tree != rec.tree || theirs.reshape.is_some() {
        return Some(format!(
            "its record (event {at}) is of another shape: the volume was reshaped or given copies since it left"
        ));
    }
    let replaced = (theirs.members.iter().zip(&rec.members).enumerate())
        .find(|&(r, (seen, now))| r != own && seen.uuid != now.uuid);
    if let Some((r, _)) = replaced {
        return Some(format!(
            "its record (event {at}) names another member in role {r}: the role was given a member since it left, here or by a start of its own elsewhere"
        ));
    }
    let peer = super::ran_apart_from(&rec.members, theirs)?;
    Some(format!(
        "its record (event {at}) has role {peer} out where the array holds it active: it may have been started on its own while away (split brain), or it left while role {peer} was out"
    ))
}

/// Where the re-added member keeps its bitmap (its own record `theirs`): as recorded by
/// role, or (a member unreachable at open had no record read then) as its own record says.
fn bitmap_area_of(p: Parts<'_>, role: usize, theirs: &VolumeRecord) -> Option<Area> {
    p.bitmap.and_then(|b| {
        b.area(role).or_else(|| {
            let area = theirs
                .bitmap
                .filter(|t| t.chunk_bytes == b.intent().chunk_bytes())?
                .area;
            (Some(area.len) == b.area_bytes()).then_some(area)
        })
    })
}

/// Why a resync whose returning members in `lost` failed on the way failed, if it did: those
/// still failed and not re-added again since (one re-added is the next pass's).
fn still_out(p: Parts<'_>, lost: &[(usize, String)]) -> Option<String> {
    let out: Vec<&str> = (lost.iter())
        .filter(|(r, _)| p.volume.member_is_failed(*r))
        .map(|(_, why)| why.as_str())
        .collect();
    (!out.is_empty()).then(|| out.join("; "))
}

/// What happened to role `r`'s returning member, which failed again while being resynced.
fn failed_returning(p: Parts<'_>, r: usize) -> String {
    let name = p.volume.member(r).name().to_string();
    let why =
        (p.volume.table().slot(r).failure()).map_or_else(String::new, |f| format!(": {}", f.why));
    format!("its target `{name}` (role {r}, re-added) failed{why}: it was not made current")
}

/// One pass over `plan` (merged ranges) rewriting what `targets` missed; its windows are
/// skipped once they have all failed again (one may be re-added meanwhile: the caller runs a
/// pass for it, and says the pass failed if none was).
async fn resync_pass(
    p: Parts<'_>,
    ctl: &PassControl,
    plan: &[(u64, u64)],
    targets: &[usize],
) -> Result<PassState, ArrayError> {
    let window = move |at: u64, len: u64| {
        let real = slice(plan, at, len);
        async move {
            // Writes nowhere: the caller says the pass failed unless one is re-added.
            if all_failed(p, targets) {
                return Ok(());
            }
            for (a, b) in real {
                p.volume.resync_range(a, b - a).await?;
            }
            Ok(())
        }
        .boxed()
    };
    ctl.set_position(0);
    let state = crate::pass::run(
        ctl,
        PassWork {
            total_bytes: total_bytes(plan),
            window_bytes: piece_bytes(p.stripe_bytes()),
            inflight: INFLIGHT,
            window: Box::new(window),
            checkpoint_bytes: 0,
            checkpoint: Box::new(|_| futures::future::ready(Ok(())).boxed()),
            activity: Some(Box::new(|| p.volume.client_ops())),
            stale: None,
        },
    )
    .await?;
    Ok(state)
}

/// Whether every member a resync writes has failed again.
fn all_failed(p: Parts<'_>, targets: &[usize]) -> bool {
    targets.iter().all(|&r| p.volume.member_is_failed(r))
}

#[cfg(test)]
mod tests {
    use super::*;

    const AREA: Area = Area {
        offset: 4096,
        len: 8192,
    };

    /// Resynced only with a bitmap it keeps a copy of, recorded failed and not apart; any
    /// other member back is rebuilt whole, and only a record gone apart says why.
    #[test]
    fn only_a_failed_member_with_the_bitmap_and_nothing_apart_is_resynced() {
        use RecordedState::{Active, Failed, Rebuilding};
        let apart = || Some("split brain".to_string());
        assert_eq!(
            comeback(true, Some(AREA), Failed, None),
            Comeback::Resync(AREA)
        );
        let whole = |why| Comeback::RebuildWhole(why);
        assert_eq!(comeback(false, Some(AREA), Failed, None), whole(None));
        assert_eq!(comeback(true, None, Failed, None), whole(None));
        assert_eq!(comeback(true, Some(AREA), Active, None), whole(None));
        let half = Rebuilding {
            checkpoint_bytes: 1 << 20,
        };
        assert_eq!(comeback(true, Some(AREA), half, None), whole(None));
        assert_eq!(comeback(true, Some(AREA), Failed, apart()), whole(apart()));
        assert_eq!(comeback(false, None, Failed, apart()), whole(apart()));
    }
}
