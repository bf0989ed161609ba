//! The rebuild pass of [`Heal`] (see `heal.rs`; a child for its fields): every role being rebuilt onto a new member
//! or replaced is copied by the engine's online rebuild ([`crate::rebuild`]), checkpointed
//! in the records, and made current — recorded first, then read.

use super::{checksums, newcomer_id, write_role_record, Heal, RebuildReport, Replacing};
use crate::error::VolumeResult;
use crate::member::Member;
use crate::metadata::checksum_area;
use crate::metadata::error::ArrayError;
use crate::metadata::member_meta::MemberMeta;
use crate::metadata::parts::Parts;
use crate::metadata::ranges::checkpoint_every;
use crate::metadata::rebuilding::Claim;
use crate::metadata::records::recordable;
use crate::metadata::{MemberEntry, RecordedState, ReplacementCheckpoint};
use crate::pass::{PassControl, PassState};
use crate::rebuild::REBUILD_WINDOW_BYTES;
use futures::FutureExt;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;

impl Heal {
    /// Rebuilds every role being rebuilt or replaced, resuming at their checkpoints, while
    /// the volume serves; returns when they are all current (or the control cancelled it).
    /// A role that needs rebuilding while it runs (a spare took it, a replace began) stops
    /// the pass at its next window: it starts again over every role, one sweep from the
    /// lowest position, each role (a replacement too) written only from its own position up
    /// ([`crate::rebuild::roles_ahead`]; md restarts its recovery likewise) — at once when
    /// `restart_inside`, else it returns saying so ([`RebuildReport::restart`]) for the
    /// caller to start a new pass. Every role completes at the sweep's end.
    pub(in crate::metadata) async fn rebuild(
        &self,
        p: Parts<'_>,
        ctl: &PassControl,
        restart_inside: bool,
    ) -> Result<RebuildReport, ArrayError> {
        let _one = self.running.lock().await;
        let report = self.rebuild_locked(p, ctl, restart_inside).await;
        self.live.lock().clear();
        report
    }

    async fn rebuild_locked(
        &self,
        p: Parts<'_>,
        ctl: &PassControl,
        restart_inside: bool,
    ) -> Result<RebuildReport, ArrayError> {
        let report = |state, completed| RebuildReport {
            state,
            completed,
            restart: false,
        };
        let mut completed = Vec::new();
        let mut lost = Lost::default();
        loop {
            self.give_up_replacements(p).await?;
            // Taken before the targets: a role that comes between is the pass's next one.
            let started = self.work(p);
            let targets = p.volume.rebuild_targets();
            if targets.is_empty() {
                // A new member that failed on the way (and no spare took its role since), or
                // a replacement given up: the pass did not do what it was for.
                if let Some(why) = lost.still_out(p) {
                    ctl.failed(&why);
                    return Ok(report(PassState::Failed, completed));
                }
                if completed.is_empty() {
                    ctl.nothing_to_do();
                }
                return Ok(report(PassState::Done, completed));
            }
            // The members in the roles now: one put in a role later is not this pass's, nor
            // is a replacement started later (the first given up mid-pass, a second begun).
            *self.live.lock() = started.clone();
            let claim = p.records.rebuilding.claim(&targets);
            let replacing = self.replacing.lock().clone();
            let starts = self.starts(p, &claim, &started);
            ctl.set_position(pass_start(&targets, &starts));
            let state = self
                .rebuild_pass(p, ctl, (&targets, &claim, starts), &started)
                .await?;
            if state == PassState::Cancelled && !ctl.is_cancelled() {
                if change(&started, &self.work(p)) == Change::AllLeft {
                    // Nothing the pass writes stands: it stops here, not at the volume's
                    // end; what failed is said once no role is left to rebuild.
                    lost.add(self.abandon(p, &targets, &claim).await?);
                    continue;
                }
                tracing::info!(
                    "volume `{}`: a role needs rebuilding: the rebuild starts again over every role",
                    p.name()
                );
                if restart_inside {
                    continue;
                }
                let mut r = report(state, completed);
                r.restart = true;
                return Ok(r);
            }
            if state != PassState::Done {
                return Ok(report(state, completed));
            }
            let (done, failed) = self.complete(p, &targets, (&claim, &replacing)).await?;
            completed.extend(done);
            lost.add(failed);
        }
    }

    /// Replacements given up: the replacement failed, or the member it copied did (the slot
    /// dropped it, `MemberTable::fail`: it would miss the writes while the role is failed).
    /// In that case it stands by as a spare and goes into the failed role, rebuilt whole —
    /// what the operator asked of it (md's replacement likewise becomes the recovery's target).
    async fn give_up_replacements(&self, p: Parts<'_>) -> Result<(), ArrayError> {
        let given_up: Vec<(usize, Arc<MemberMeta>)> = {
            let mut replacing = self.replacing.lock();
            let gone = |r: usize| p.volume.table().slot(r).replacement().is_none();
            let given_up = (replacing.iter())
                .filter(|&(&r, _)| gone(r))
                .map(|(&r, x)| (r, x.meta.clone()))
                .collect();
            replacing.retain(|&r, _| !gone(r));
            given_up
        };
        let mut standing_by = false;
        for (r, meta) in given_up {
            // Its member serves (a spare may have taken the role since): nothing to place.
            // A replacement that failed itself is let go where the pass completes.
            if !p.volume.member_is_failed(r) {
                continue;
            }
            tracing::warn!(
                "volume `{}`: role {r}'s member failed while `{}` was replacing it: the replacement is rebuilt into the role instead",
                p.name(),
                meta.member().name()
            );
            // Recorded by path as a spare added at run time: a restart must open it.
            let path = meta.member().name().to_string();
            let mut rec = p.records.lock().await;
            if !rec.added_paths.contains(&path) && recordable(&path, &rec.added_paths).is_ok() {
                rec.added_paths.push(path);
                p.records.commit(&mut rec).await?;
            }
            drop(rec);
            self.spares.lock().push(meta);
            standing_by = true;
        }
        // A spare that cannot be placed stands by; the other roles' rebuild goes on.
        if standing_by {
            if let Err(e) = self.use_spares(p).await {
                tracing::warn!(
                    "volume `{}`: a replacement given up could not take its role: {e}",
                    p.name()
                );
            }
        }
        Ok(())
    }

    /// Roles being rebuilt and the bytes current on their new member, the running pass at
    /// `pass_bytes`: a role it moves (rebuilt onto what it was when the pass started) is at
    /// least there; any other only at its own position (a role not started yet at 0).
    pub(in crate::metadata) fn progress(&self, p: Parts<'_>, pass_bytes: u64) -> Vec<(usize, u64)> {
        let live = self.live.lock().clone();
        let now = self.work(p);
        let moved = |r: usize| (now.iter()).any(|w| w.0 == r && live.contains(w));
        (self.rebuilding(p).into_iter())
            .map(|(r, at)| (r, if moved(r) { at.max(pass_bytes) } else { at }))
            .collect()
    }

    /// What every role to rebuild is rebuilt onto now (see [`Onto`]).
    fn work(&self, p: Parts<'_>) -> Vec<(usize, Onto)> {
        let v = p.volume;
        let targets = v.rebuild_targets().into_iter().map(|r| {
            let onto = match v.table().slot(r).replacement() {
                Some(m) => Onto::replacement(&m),
                None => p.records.rebuilding.term(r).map_or(Onto::Other, Onto::Term),
            };
            (r, onto)
        });
        // A role whose member failed under its replacement: the replacement goes into it.
        let given_up: Vec<(usize, Onto)> = (self.replacing.lock().keys())
            .filter(|&&r| v.table().slot(r).replacement().is_none() && v.member_is_failed(r))
            .map(|&r| (r, Onto::GivenUp))
            .collect();
        targets.chain(given_up).collect()
    }

    /// Where each target is current up to, of those the pass leaves out below: roles
    /// rebuilt onto the member `claim` names, and replacements the pass `started` with.
    fn starts(&self, p: Parts<'_>, claim: &Claim, started: &[(usize, Onto)]) -> Vec<(usize, u64)> {
        let mut starts = p.records.rebuilding.starts(claim);
        let replacing = self.replacing.lock();
        starts.extend(started.iter().filter_map(|&(r, onto)| {
            let x = replacing
                .get(&r)
                .filter(|x| onto == Onto::replacement(x.meta.member()))?;
            Some((r, x.current_below_bytes))
        }));
        starts
    }

    /// The replacements the pass `started` with, still replacing, are current below `pos`
    /// (the pass wrote every window below it; positions never go back).
    fn advance_replacements(&self, started: &[(usize, Onto)], pos: u64) {
        let mut replacing = self.replacing.lock();
        for &(r, onto) in started {
            if let Some(x) =
                (replacing.get_mut(&r)).filter(|x| onto == Onto::replacement(x.meta.member()))
            {
                x.current_below_bytes = x.current_below_bytes.max(pos);
            }
        }
    }

    async fn rebuild_pass(
        &self,
        p: Parts<'_>,
        ctl: &PassControl,
        (targets, claim, starts): (&[usize], &Claim, Vec<(usize, u64)>),
        started: &[(usize, Onto)],
    ) -> Result<PassState, ArrayError> {
        let window = match self.window_bytes.load(SeqCst) {
            0 => REBUILD_WINDOW_BYTES,
            w => w,
        };
        let every = checkpoint_every(p.volume.capacity(), window);
        // A role rebuilt or replaced up to a position before is not written again below it.
        let checkpoint = move |pos: u64| self.checkpoint(p, (targets, claim, started), pos).boxed();
        let stale = move || change(started, &self.work(p)) != Change::None;
        let state = p
            .volume
            .rebuild_pass(
                ctl,
                (window, every),
                starts,
                Box::new(checkpoint),
                Some(Box::new(stale)),
            )
            .await;
        // Progress in memory (a cancelled pass resumes here), whatever the outcome.
        p.records.rebuilding.advance(claim, ctl.position_bytes());
        self.advance_replacements(started, ctl.position_bytes());
        Ok(state?)
    }

    /// After a pass covered the volume: targets still standing become current, recorded
    /// first — those rebuilt onto a new member only when it is the member `claim` names.
    async fn complete(
        &self,
        p: Parts<'_>,
        targets: &[usize],
        (claim, replacing): (&Claim, &BTreeMap<usize, Replacing>),
    ) -> Result<(Vec<usize>, Lost), ArrayError> {
        // What the role is recorded on must hold the pass's bytes: a flush of the new
        // members, not of the volume — under client writes that destages the whole
        // write-back cache first (seconds; none of it is the rebuild's: what is still cached
        // goes to the new member like to every other when it is destaged).
        flush_newcomers(p, targets).await;
        let mut done = Vec::new();
        let mut failed = Lost::default();
        for &r in targets {
            if p.volume.member_is_failed(r) {
                failed.new_members.push((r, self.lose(p, r, claim).await));
                continue;
            }
            // Only the replacement the pass started with, still in its slot, is swapped in.
            let replacement = {
                let mut now = self.replacing.lock();
                let same = |x: &Replacing| {
                    (replacing.get(&r)).is_some_and(|c| Arc::ptr_eq(&c.meta, &x.meta))
                };
                now.get(&r)
                    .is_some_and(same)
                    .then(|| now.remove(&r))
                    .flatten()
                    .map(|x| x.meta)
            };
            let in_slot = |m: &MemberMeta| {
                (p.volume.table().slot(r).replacement())
                    .is_some_and(|s| Arc::ptr_eq(&s, m.member()))
            };
            let ok = match replacement {
                Some(meta) if in_slot(&meta) => swap_in(p, r, meta).await?,
                Some(meta) => {
                    failed.replacements.push(let_go(p, r, &meta).await?);
                    false
                }
                None => activate(p, r, claim).await?,
            };
            if ok {
                done.push(r);
            }
        }
        Ok((done, failed))
    }
}

impl Heal {
    /// The pass stopped with none of its targets standing (each new member failed, each
    /// replacement dropped, no spare in their roles): what was lost, the roles leaving the
    /// rebuilding list. Nothing is made current.
    async fn abandon(
        &self,
        p: Parts<'_>,
        targets: &[usize],
        claim: &Claim,
    ) -> Result<Lost, ArrayError> {
        let mut lost = Lost::default();
        for &r in targets {
            if p.volume.member_is_failed(r) {
                lost.new_members.push((r, self.lose(p, r, claim).await));
                continue;
            }
            // A replacement the slot dropped (it failed): its member keeps the role.
            let dropped = {
                let mut replacing = self.replacing.lock();
                let gone = p.volume.table().slot(r).replacement().is_none();
                gone.then(|| replacing.remove(&r)).flatten().map(|x| x.meta)
            };
            if let Some(meta) = dropped {
                lost.replacements.push(let_go(p, r, &meta).await?);
            }
        }
        Ok(lost)
    }

    /// Role `r`'s new member failed: what happened; the role is no longer being rebuilt
    /// unless a member was put in it since (under the records' lock, which that holds).
    async fn lose(&self, p: Parts<'_>, r: usize, claim: &Claim) -> String {
        let _rec = p.records.lock().await;
        if p.records.rebuilding.holds(claim, r) {
            p.records.rebuilding.remove(r);
        }
        failed_newcomer(p, r)
    }
}

/// Where a pass over `targets` starts: the lowest of their starts (0 for one not listed).
fn pass_start(targets: &[usize], starts: &[(usize, u64)]) -> u64 {
    let start = |r: usize| (starts.iter()).find(|s| s.0 == r).map_or(0, |s| s.1);
    targets.iter().map(|&r| start(r)).min().unwrap_or(0)
}

/// What a role is rebuilt onto.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Onto {
    /// A new member, in its term ([`crate::metadata::rebuilding::Rebuilding::resume`]).
    Term(u64),
    /// A replacement, by identity.
    Replacement(usize),
    /// A member resyncing that is neither (nothing to restart for).
    Other,
    /// A replacement whose member failed: it is to go into the role.
    GivenUp,
}

/// What changed for a pass that started with the roles and members `started`, the roles
/// to rebuild being `now`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Change {
    /// Its work stands, or some of it left (a target failed) and the rest goes on.
    None,
    /// Some role is rebuilt onto a member the pass did not write from its start (a spare
    /// took a role, a replace began, a new member replaced one that failed): left to the
    /// end of the pass, that role waited a whole pass for nothing. The pass starts again.
    Restart,
    /// Every role it started with left (its targets failed) and none came: walking on
    /// writes nowhere. The pass stops.
    AllLeft,
}

impl Onto {
    /// Replacement `m`, by identity.
    fn replacement(m: &Arc<dyn Member>) -> Onto {
        Onto::Replacement(Arc::as_ptr(m) as *const () as usize)
    }
}

fn change(started: &[(usize, Onto)], now: &[(usize, Onto)]) -> Change {
    if now.iter().any(|w| !started.contains(w)) {
        Change::Restart
    } else if !started.is_empty() && !started.iter().any(|w| now.contains(w)) {
        Change::AllLeft
    } else {
        Change::None
    }
}

/// What failed on the way, of one completion or of a whole run ([`Heal::rebuild`]): roles
/// whose new member failed (with what happened), replacements given up.
#[derive(Default)]
struct Lost {
    new_members: Vec<(usize, String)>,
    replacements: Vec<String>,
}

impl Lost {
    fn add(&mut self, f: Lost) {
        self.new_members.extend(f.new_members);
        self.replacements.extend(f.replacements);
    }

    /// Why the run failed, if it did: replacements given up, and roles whose new member
    /// failed that are still failed (not those a spare took since and the run rebuilt).
    fn still_out(&self, p: Parts<'_>) -> Option<String> {
        let roles = (self.new_members.iter())
            .filter(|(r, _)| p.volume.member_is_failed(*r))
            .map(|(_, why)| why.clone());
        let all: Vec<String> = roles.chain(self.replacements.iter().cloned()).collect();
        (!all.is_empty()).then(|| all.join("; "))
    }
}

/// What happened to role `r`'s new member, which failed while being rebuilt.
fn failed_newcomer(p: Parts<'_>, r: usize) -> String {
    let name = p.volume.member(r).name().to_string();
    let why =
        (p.volume.table().slot(r).failure()).map_or_else(String::new, |f| format!(": {}", f.why));
    format!("role {r}'s new member `{name}` failed{why}")
}

/// A replacement that failed while role `r`'s member still serves: its path leaves the
/// records' list (the replace recorded it when it started), or the next start would open
/// the disk that just failed as a spare and rebuild onto it when a member fails.
/// Returns what happened, for the pass's report.
async fn let_go(p: Parts<'_>, r: usize, meta: &MemberMeta) -> Result<String, ArrayError> {
    let path = meta.member().name();
    let listed = p.records.forget_added_path(path).await?;
    let what = format!("the replacement `{path}` of role {r} failed; its member keeps the role");
    tracing::warn!(
        "volume `{}`: {what}{}",
        p.name(),
        match listed {
            true => " and the path is no longer recorded (replace again to retry)",
            false => "",
        }
    );
    Ok(what)
}

impl Heal {
    /// Makes the rebuilt bytes durable on the new members and replacements and records
    /// `pos` as their checkpoint — on the members `claim` names and the replacements the
    /// pass `started` with, not on one put in a role since.
    async fn checkpoint(
        &self,
        p: Parts<'_>,
        (targets, claim, started): (&[usize], &Claim, &[(usize, Onto)]),
        pos: u64,
    ) -> VolumeResult<()> {
        p.records.rebuilding.advance(claim, pos);
        self.advance_replacements(started, pos);
        let roles = flush_newcomers(p, targets).await;
        let mut rec = p.records.lock().await;
        // Under the records' lock, which a member put in a role holds while it takes it.
        for &r in roles
            .iter()
            .filter(|&&r| p.records.rebuilding.holds(claim, r))
        {
            if let RecordedState::Rebuilding { checkpoint_bytes } = &mut rec.members[r].state {
                *checkpoint_bytes = (*checkpoint_bytes).max(pos);
            }
        }
        // Flushed, and still in their slots (one whose flush failed was dropped).
        for x in self.replacement_checkpoints(p, started) {
            rec.replacements.retain(|y| y.role != x.role);
            rec.replacements.push(x);
        }
        p.records.commit(&mut rec).await
    }

    /// The replacements the pass `started` with that are still in their slots, each with
    /// where it is current up to.
    fn replacement_checkpoints(
        &self,
        p: Parts<'_>,
        started: &[(usize, Onto)],
    ) -> Vec<ReplacementCheckpoint> {
        let replacing = self.replacing.lock();
        let in_slot = |r: usize| {
            p.volume
                .table()
                .slot(r)
                .replacement()
                .map(|m| Onto::replacement(&m))
        };
        (started.iter())
            .filter_map(|&(r, onto)| {
                let x = replacing.get(&r)?;
                let same = onto == Onto::replacement(x.meta.member()) && in_slot(r) == Some(onto);
                same.then_some(ReplacementCheckpoint {
                    role: r as u32,
                    member: x.id,
                    checkpoint_bytes: x.current_below_bytes,
                })
            })
            .collect()
    }
}

/// Flushes what `targets` are being rebuilt onto (new members, replacements); one that
/// fails is failed (a replacement given up). Returns the roles rebuilding onto a new
/// member that still stand.
async fn flush_newcomers(p: Parts<'_>, targets: &[usize]) -> Vec<usize> {
    let v = p.volume;
    let flushes = targets.iter().map(|&r| async move {
        if let Some(m) = v.table().slot(r).replacement() {
            if let Err(e) = m.flush().await {
                v.table().slot(r).drop_replacement(&e);
            }
            return None;
        }
        if !p.records.rebuilding.contains(r) || v.member_is_failed(r) {
            return None;
        }
        if let Err(e) = v.member(r).flush().await {
            v.fail_member(r, &e);
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

/// A rebuilt new member — the one `claim` names — : its bitmap catches up, its role is
/// committed active, then it is read.
async fn activate(p: Parts<'_>, r: usize, claim: &Claim) -> Result<bool, ArrayError> {
    // The records' lock before the bitmap writer's, as everywhere; a member put in the role
    // holds it while it takes it.
    let mut rec = p.records.lock().await;
    if !p.records.rebuilding.holds(claim, r) {
        return Ok(false);
    }
    if let Some(b) = p.bitmap {
        b.catch_up(p.volume, &rec, r).await;
    }
    if p.volume.member_is_failed(r) {
        p.records.rebuilding.remove(r);
        p.records.commit(&mut rec).await?;
        return Ok(false);
    }
    rec.members[r].state = RecordedState::Active;
    p.records.commit(&mut rec).await?;
    p.records.rebuilding.remove(r);
    p.volume.complete_rebuild(r);
    tracing::info!("volume `{}`: role {r} rebuilt", p.name());
    Ok(true)
}

/// A rebuilt replacement takes role `r`: recorded (on it and every current member), then
/// swapped in.
async fn swap_in(p: Parts<'_>, r: usize, meta: Arc<MemberMeta>) -> Result<bool, ArrayError> {
    if p.volume.table().slot(r).replacement().is_none() {
        return Ok(false);
    }
    // Its data is its member's, so are its entries: copied while the volume serves.
    let (serving, new) = (p.volume.member(r), meta.member().clone());
    // Dropped on an error before the swap: the copy is abandoned.
    let copy = checksum_area::copy_to_replacement(checksums(p), r, &*serving, &*new).await;
    let mut rec = p.records.lock().await;
    // The bitmap writer stays held until the swap: the replacement misses no update.
    let (_bitmap, image) = match p.bitmap {
        Some(b) => {
            let (g, image) = b.image_locked(&rec).await;
            (Some(g), Some(image))
        }
        None => (None, None),
    };
    let mut next = rec.clone();
    // The copy is done: nothing is left to resume.
    next.replacements.retain(|x| x.role as usize != r);
    next.members[r] = MemberEntry {
        uuid: newcomer_id(p, r, &meta, &rec).await?,
        state: RecordedState::Active,
        unacked_since_failed: false,
        failed_cause: None,
    };
    // A restart opens the replacement by its recorded path (the config names the member
    // it replaced, if any); the replaced member is no longer one.
    let old = p.volume.member(r).name().to_string();
    next.added_paths.retain(|p| *p != old);
    let path = meta.member().name().to_string();
    if !next.added_paths.contains(&path) {
        match recordable(&path, &next.added_paths) {
            Ok(()) => next.added_paths.push(path),
            // `replace` checked it; spares added since filled the list.
            Err(e) => tracing::warn!(
                "volume `{}`: role {r}'s replacement is not recorded (volume `{}`: {e}): name it in the config, or a restart will not find it",
                p.name(),
                p.name()
            ),
        }
    }
    let area = write_role_record(p, r, &meta, &next, (image, !copy.copied())).await?;
    rec.members[r] = next.members[r];
    rec.replacements = next.replacements.clone();
    rec.added_paths = next.added_paths.clone();
    p.records.set_meta(&rec, r, Some(meta));
    if let Some(b) = p.bitmap {
        b.set_area(r, area);
    }
    // Both members take every write until the swap: whichever the records name holds
    // everything.
    p.records.commit(&mut rec).await?;
    let swap = || p.volume.complete_rebuild(r);
    checksum_area::swap_in_replacement(checksums(p), r, (&*serving, &*new), copy, swap).await;
    tracing::info!("volume `{}`: role {r} replaced", p.name());
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_role_given_new_work_restarts_the_pass_and_one_that_left_does_not() {
        let must_restart =
            |s: &[(usize, Onto)], n: &[(usize, Onto)]| change(s, n) == Change::Restart;
        let started = [(1, Onto::Term(3)), (2, Onto::Replacement(77))];
        assert!(!must_restart(&started, &started));
        // Failed: nothing new.
        assert!(!must_restart(&started, &started[..1]));
        assert!(!must_restart(&started, &[]));
        // A spare took a failed role while a replace ran.
        let spare = [started[0], started[1], (0, Onto::Term(4))];
        assert!(must_restart(&started, &spare));
        // The new member of role 1 failed and a spare took the role: a new term.
        assert!(must_restart(&started, &[(1, Onto::Term(5)), started[1]]));
        // Another replacement of role 2, or its member failed under it.
        assert!(must_restart(
            &started,
            &[started[0], (2, Onto::Replacement(78))]
        ));
        assert!(must_restart(&started, &[started[0], (2, Onto::GivenUp)]));
        // A replace began while a role was rebuilt.
        assert!(must_restart(&started[..1], &started));
    }

    /// A pass starts at the lowest start of its targets; one with no start starts at 0.
    #[test]
    fn a_pass_starts_at_its_lowest_target() {
        assert_eq!(pass_start(&[1, 3], &[(1, 64), (3, 32)]), 32);
        assert_eq!(pass_start(&[1, 3], &[(1, 64)]), 0, "3 has not started");
        assert_eq!(
            pass_start(&[1], &[(1, 64), (3, 32)]),
            64,
            "3 is not a target"
        );
        assert_eq!(pass_start(&[], &[]), 0);
    }

    /// Every target left and none came: the pass stops (it walked on to its end, writing
    /// nowhere). One target left and another stands: it goes on for that one.
    #[test]
    fn a_pass_whose_every_target_left_stops_and_one_with_a_target_left_goes_on() {
        let started = [(1, Onto::Term(3)), (3, Onto::Term(4))];
        assert_eq!(change(&started, &[]), Change::AllLeft);
        assert_eq!(change(&started[..1], &[]), Change::AllLeft);
        assert_eq!(change(&started, &started[1..]), Change::None);
        assert_eq!(change(&started, &started), Change::None);
        // Left, and a spare took the role: a new term, a new pass.
        assert_eq!(
            change(&started[..1], &[(1, Onto::Term(5))]),
            Change::Restart
        );
        // A pass with nothing to do from its start has nothing that left.
        assert_eq!(change(&[], &[]), Change::None);
    }
}
