//! Remote members that come back: a member on an NBD server fails like a disk when the
//! server stops answering (timeout, reset), and its connection is re-opened in the background
//! (`nbraid-remote`). Once the server answers again the member is brought back through the
//! engine ([`Array::readd`], md's re-add with a bitmap): its superblock is read again; if it
//! is the member that left, it is resynced over the regions the write-intent bitmap marks
//! before it is read again ([`Array::resync_returned`], at the volume's `rebuild_rate`); if it
//! came back blank (an `nbdkit memory` export restarted), or its record says it may lack more
//! than the bitmap marks (the volume reshaped, a peer replaced, a start of its own elsewhere),
//! it is rebuilt whole; anything else (another array's records) is left failed and said once.
//! A member of several volumes (Matrix) that came back blank is rebuilt by each of them: the
//! first finds it blank, the others find only records of the volumes sharing it
//! ([`siblings_on`](crate::control::readd)) and write theirs beside.
//!
//! A server may come back as another disk (restarted on a blank file, another member's, a
//! stale copy): the member's connection then serves nothing (`nbraid-remote` checks its
//! superblock first) and says so ([`Member::identity_lost`]). [`settle_lost`] fails it in
//! every volume that still has it — an idle volume would not notice — and, once all have,
//! readmits it ([`Member::readmit`]) for the re-add above to judge what it holds.
//!
//! Only remote members that stopped answering come back by themselves ([`may_return`](crate::control::readd::may_return)): a
//! member that answered with I/O errors (a local disk, or a server replying EIO) or that the
//! operator failed stays out until the operator decides (`nbraid add`, `nbraid replace`).

use crate::control::readd::{is_remote, may_return_now, readd_role};
use crate::control::{ControlVolume, Controls};
use nbraid_core::fail_cause::{Because, FailCause};
use nbraid_core::{Member, MemberState};
use parking_lot::Mutex;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

/// How often failed remote members are asked whether they are back (a superblock read; a
/// member whose connection is down fails it at once).
pub const PROBE_INTERVAL: Duration = Duration::from_secs(1);

fn say(msg: &str) {
    tracing::warn!("{msg}");
}

/// Per volume: the roles being probed now, and those already said to be refused or held
/// out (said once, until the role changes).
#[derive(Default)]
struct Probing {
    busy: Arc<Mutex<HashSet<usize>>>,
    refused: Arc<Mutex<HashSet<usize>>>,
    held: Mutex<HashSet<usize>>,
}

/// The roles of `v` to probe: failed, with a member, on an NBD server, and allowed back by
/// [`may_return_now`] (those that are not are said once, in `held`). Roles that are not
/// probed are forgotten from `refused`.
fn due(v: &ControlVolume, p: &Probing) -> Vec<usize> {
    let array = v.array();
    let vol = array.volume();
    let health = vol.member_health();
    let available = vol.is_available();
    (0..vol.member_count())
        .filter(|&r| {
            let failed = health[r].state == MemberState::Failed && array.has_member(r);
            let remote = is_remote(vol.member(r).name());
            let failure = health[r].failure.as_ref();
            let verdict = (failed && remote).then(|| may_return_now(available, remote, failure));
            if let Some(Err(why)) = &verdict {
                if p.held.lock().insert(r) {
                    say(&format!(
                        "volume {}: remote member {} is not probed: {why}",
                        v.name,
                        v.member_ids()[r]
                    ));
                }
            } else {
                p.held.lock().remove(&r);
            }
            let ok = matches!(verdict, Some(Ok(())));
            if !ok {
                p.refused.lock().remove(&r);
            }
            ok
        })
        .collect()
}

/// Starts `probe(r)` for every role in `due` not being probed already (`busy`), each as a
/// task of its own: a server that accepts and never answers holds only its own member's
/// probe (for the member's timeout), never the others'.
fn start_probes<F, Fut>(due: Vec<usize>, busy: &Arc<Mutex<HashSet<usize>>>, probe: F)
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    for r in due {
        if !busy.lock().insert(r) {
            continue;
        }
        let (fut, busy) = (probe(r), busy.clone());
        tokio::spawn(async move {
            fut.await;
            busy.lock().remove(&r);
        });
    }
}

/// Tries failed remote member `r` of volume `k` once.
async fn probe_member(
    controls: Arc<Controls>,
    k: usize,
    r: usize,
    refused: Arc<Mutex<HashSet<usize>>>,
) {
    if let Err(e) = readd_role(&controls, k, r).await {
        if refused.lock().insert(r) {
            let v = &controls.volumes[k];
            say(&format!(
                "volume {}: remote member {} answers again but stays failed: {e}",
                v.name,
                v.member_ids()[r]
            ));
        }
    }
}

/// What to do with a member whose storage is not the member any more, from whether each of
/// its roles (in every volume on it) has failed it: fail it where it has not (those
/// indices), or, failed everywhere, readmit it for the re-adds.
#[derive(Debug, PartialEq, Eq)]
enum LostStep {
    Fail(Vec<usize>),
    Readmit,
}

fn lost_step(failed: &[bool]) -> LostStep {
    let left: Vec<usize> = (0..failed.len()).filter(|&i| !failed[i]).collect();
    match left.is_empty() {
        true => LostStep::Readmit,
        false => LostStep::Fail(left),
    }
}

/// A member whose storage is not the member (`why`), and its roles: (volume, role).
type Lost = (Arc<dyn Member>, String, Vec<(usize, usize)>);

/// The members of any volume whose storage is not the member any more, with their roles.
fn lost_members(controls: &Controls) -> Vec<Lost> {
    let mut lost: Vec<Lost> = Vec::new();
    for (k, v) in controls.volumes.iter().enumerate() {
        let array = v.array();
        let vol = array.volume();
        for r in (0..vol.member_count()).filter(|&r| array.has_member(r)) {
            let m = vol.member(r);
            let Some(why) = m.identity_lost() else {
                continue;
            };
            let same = |o: &Arc<dyn Member>| Arc::ptr_eq(o, &m) || o.name() == m.name();
            match lost.iter_mut().find(|(o, _, _)| same(o)) {
                Some((_, _, roles)) => roles.push((k, r)),
                None => lost.push((m, why, vec![(k, r)])),
            }
        }
    }
    lost
}

/// Fails, in every volume that still has it, each member whose storage is not the member
/// any more (its requests fail anyway, but an idle volume would not see one); readmits
/// those every volume has failed, so the re-adds read them and judge what they hold.
pub fn settle_lost(controls: &Controls) {
    for (member, why, roles) in lost_members(controls) {
        let failed: Vec<bool> = (roles.iter())
            .map(|&(k, r)| controls.volumes[k].array().volume().member_is_failed(r))
            .collect();
        let which = match lost_step(&failed) {
            LostStep::Readmit => {
                member.readmit();
                continue;
            }
            LostStep::Fail(which) => which,
        };
        for i in which {
            let (k, r) = roles[i];
            let v = &controls.volumes[k];
            say(&format!(
                "volume {}: remote member {} fails: {why}",
                v.name,
                v.member_ids()[r]
            ));
            let array = v.array();
            // Not an I/O error of the disk: the server came back with another one. Like a
            // lost connection it may come back by itself, for the re-add rules to judge.
            array
                .volume()
                .fail_member(r, &Because(FailCause::Unanswered, &why));
            // Into the superblocks now: a restart keeps it failed.
            tokio::spawn(async move {
                if let Err(e) = array.record_failures().await {
                    tracing::error!("recording a failed member of {}: {e}", array.name());
                }
            });
        }
    }
}

/// Watches every volume's failed remote members, every [`PROBE_INTERVAL`], each member's
/// probe on its own (see [`start_probes`]).
pub async fn watch(controls: Arc<Controls>) {
    let probing: Vec<Probing> = controls
        .volumes
        .iter()
        .map(|_| Probing::default())
        .collect();
    loop {
        settle_lost(&controls);
        for (k, (v, p)) in controls.volumes.iter().zip(&probing).enumerate() {
            // A read-only volume takes nothing back: a member re-added is written.
            if v.array().volume().failed_count() == 0 || v.array().is_read_only() {
                p.refused.lock().clear();
                p.held.lock().clear();
                continue;
            }
            let refused = p.refused.clone();
            let controls = controls.clone();
            start_probes(due(v, p), &p.busy, move |r| {
                probe_member(controls.clone(), k, r, refused.clone())
            });
        }
        tokio::time::sleep(PROBE_INTERVAL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lost_member_is_failed_everywhere_before_it_is_readmitted() {
        assert_eq!(lost_step(&[false]), LostStep::Fail(vec![0]));
        // Matrix: failed by the busy volume, not yet by the idle one.
        assert_eq!(lost_step(&[true, false]), LostStep::Fail(vec![1]));
        assert_eq!(lost_step(&[false, false]), LostStep::Fail(vec![0, 1]));
        assert_eq!(lost_step(&[true, true]), LostStep::Readmit);
        assert_eq!(lost_step(&[true]), LostStep::Readmit);
    }

    #[tokio::test]
    async fn a_member_whose_server_never_answers_does_not_hold_the_others_probes() {
        use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
        let busy = Arc::new(Mutex::new(HashSet::new()));
        let started: Arc<[AtomicUsize; 2]> = Arc::new(Default::default());
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        for round in 0..2 {
            let (started, tx) = (started.clone(), tx.clone());
            start_probes(vec![0, 1], &busy, move |r| {
                started[r].fetch_add(1, SeqCst);
                let tx = tx.clone();
                async move {
                    if r == 0 {
                        // A stopped server: no reply, ever.
                        futures::future::pending::<()>().await;
                    }
                    tx.send(r).unwrap();
                }
            });
            // Member 1's probe ends while member 0's hangs.
            assert_eq!(rx.recv().await, Some(1), "round {round}");
            tokio::task::yield_now().await;
            while busy.lock().contains(&1) {
                tokio::task::yield_now().await;
            }
        }
        // The hanging probe is not started again while it runs; the other is, every round.
        assert_eq!(started[0].load(SeqCst), 1);
        assert_eq!(started[1].load(SeqCst), 2);
        assert!(busy.lock().contains(&0));
    }
}
