//! Where events come from: a few times a second each volume's state is read the way the
//! control socket's `status` reads it (member states, the passes' controls: loads of
//! atomics, no I/O) into a [`VolumeSnapshot`], and [`changes`] (a pure function) says what
//! differs from the last one. The engine is not hooked: a member failed by an I/O error, by
//! `nbraid fail` or by a remote server going away is seen the same way.

use crate::control::readd::{is_remote, may_return};
use crate::control::task_slot::TaskSlot;
use crate::control::{ControlVolume, Controls};
use crate::events::{Event, EventBus, EventKind};
use nbraid_core::fail_cause::Failure;
use nbraid_core::{PassControl, PassState};
use std::sync::Arc;
use std::time::Duration;

/// How often volumes are looked at.
pub const POLL_INTERVAL: Duration = Duration::from_millis(250);

/// One role of a volume.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Role {
    /// The id of what serves the role (config id, or the id made from the file name of a
    /// member added at run time).
    pub id: String,
    pub failed: bool,
    /// Read from: neither failed nor being rebuilt or resynced.
    pub current: bool,
    /// On an NBD server (its failure is most likely the server being out of reach).
    pub remote: bool,
    /// Why it failed, while it is failed.
    pub failure: Option<Failure>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Health {
    Optimal,
    /// Some member failed; every byte still readable.
    Degraded,
    /// Beyond tolerance: some data cannot be read.
    Failed,
}

impl Health {
    pub fn name(self) -> &'static str {
        match self {
            Health::Optimal => "optimal",
            Health::Degraded => "degraded",
            Health::Failed => "failed",
        }
    }
}

/// The background passes a volume runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PassKind {
    Rebuild,
    /// The background resync after an unclean start.
    Resync,
    /// The resync of members that came back (re-added).
    Readd,
    Scrub,
    /// The copy into a new shape (`nbraid apply`), then the sync of the space it adds.
    Reshape,
}

impl PassKind {
    pub const ALL: [PassKind; 5] = [
        PassKind::Rebuild,
        PassKind::Resync,
        PassKind::Readd,
        PassKind::Scrub,
        PassKind::Reshape,
    ];

    pub fn name(self) -> &'static str {
        match self {
            PassKind::Rebuild => "rebuild",
            PassKind::Resync => "resync",
            PassKind::Readd => "readd",
            PassKind::Scrub => "scrub",
            PassKind::Reshape => "reshape",
        }
    }

    fn events(self) -> (EventKind, EventKind) {
        match self {
            PassKind::Rebuild => (EventKind::RebuildStarted, EventKind::RebuildFinished),
            PassKind::Resync | PassKind::Readd => {
                (EventKind::ResyncStarted, EventKind::ResyncFinished)
            }
            PassKind::Scrub => (EventKind::ScrubStarted, EventKind::ScrubFinished),
            PassKind::Reshape => (EventKind::ReshapeStarted, EventKind::ReshapeFinished),
        }
    }
}

/// The latest pass of one kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pass {
    /// Tells one pass from the next (the address of its control).
    pub instance: usize,
    pub state: PassState,
    /// The ids of the members it writes (rebuilds and re-add resyncs).
    pub members: Vec<String>,
    pub position_bytes: u64,
    pub total_bytes: u64,
    /// Scrubs: what was compared and found.
    pub checked: u64,
    pub mismatches: u64,
    pub repaired: u64,
    pub unreadable: u64,
}

impl Pass {
    /// Running or paused: not over.
    pub fn in_progress(&self) -> bool {
        matches!(self.state, PassState::Running | PassState::Paused)
    }
}

/// What one look at a volume found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VolumeSnapshot {
    pub roles: Vec<Role>,
    pub health: Health,
    /// By [`PassKind::ALL`]'s order.
    pub passes: [Option<Pass>; 5],
}

impl VolumeSnapshot {
    /// What a volume is taken to have been before the first look: every role serving, no
    /// pass, so a volume that starts degraded or resyncing says so at once.
    pub fn baseline(first: &VolumeSnapshot) -> VolumeSnapshot {
        VolumeSnapshot {
            roles: first
                .roles
                .iter()
                .map(|r| Role {
                    failed: false,
                    current: true,
                    failure: None,
                    ..r.clone()
                })
                .collect(),
            health: Health::Optimal,
            passes: Default::default(),
        }
    }

    pub fn pass(&self, kind: PassKind) -> Option<&Pass> {
        self.passes[kind as usize].as_ref()
    }

    fn not_current_ids(&self) -> Vec<&str> {
        self.roles
            .iter()
            .filter(|r| !r.current)
            .map(|r| r.id.as_str())
            .collect()
    }

    fn failed_ids(&self) -> Vec<&str> {
        self.roles
            .iter()
            .filter(|r| r.failed)
            .map(|r| r.id.as_str())
            .collect()
    }
}

/// The events of role `n` failing: why, and whether it comes back by itself (a remote
/// member that stopped answering) or stays failed until the operator brings it back
/// ([`may_return`]).
fn member_failed(volume: &str, n: &Role, out: &mut Vec<Event>) {
    let why = n
        .failure
        .as_ref()
        .map(|f| format!(" ({})", f.why))
        .unwrap_or_default();
    let verdict = may_return(n.remote, n.failure.as_ref());
    let stays = match &verdict {
        Err(why) if n.remote => format!("; {why}"),
        _ => String::new(),
    };
    out.push(
        Event::new(
            EventKind::MemberFailed,
            volume,
            format!(
                "member {} failed{why}: it is no longer read or written{stays}",
                n.id
            ),
        )
        .member(&n.id),
    );
    if n.remote && verdict.is_ok() {
        out.push(
            Event::new(
                EventKind::MemberUnreachable,
                volume,
                format!(
                    "remote member {} is not answering; it is re-added, resynced, once it answers",
                    n.id
                ),
            )
            .member(&n.id),
        );
    }
}

/// What changed on volume `volume` from `prev` to `next`, in the order an operator reads it:
/// members, their passes, then what it means for the volume.
pub fn changes(volume: &str, prev: &VolumeSnapshot, next: &VolumeSnapshot) -> Vec<Event> {
    let mut out = Vec::new();
    for (r, n) in next.roles.iter().enumerate() {
        let Some(p) = prev.roles.get(r) else { continue };
        if p.id != n.id {
            // A spare that took the role between two looks is still being rebuilt: the member
            // it replaced failed in between (a replacement swaps in rebuilt, its old member
            // serving until then).
            if !p.failed && !n.current {
                out.push(
                    Event::new(
                        EventKind::MemberFailed,
                        volume,
                        format!("member {} failed: it is no longer read or written", p.id),
                    )
                    .member(&p.id),
                );
            }
            out.push(
                Event::new(
                    EventKind::SpareActive,
                    volume,
                    format!("{} takes the place of {}", n.id, p.id),
                )
                .member(&n.id),
            );
        } else if !p.failed && n.failed {
            member_failed(volume, n, &mut out);
        } else if p.failed && !n.failed {
            out.push(
                Event::new(
                    EventKind::MemberBack,
                    volume,
                    format!("member {} serves again", n.id),
                )
                .member(&n.id),
            );
        }
    }
    for kind in PassKind::ALL {
        pass_changes(volume, kind, prev.pass(kind), next.pass(kind), &mut out);
    }
    if prev.health != next.health {
        let failed = next.failed_ids();
        let (kind, detail) = match next.health {
            Health::Optimal => (EventKind::VolumeOptimal, "every member serves".to_string()),
            Health::Degraded if failed.is_empty() => (
                EventKind::VolumeDegraded,
                format!(
                    "degraded: {} being rebuilt or resynced; served from the others",
                    next.not_current_ids().join(", ")
                ),
            ),
            Health::Degraded => (
                EventKind::VolumeDegraded,
                format!(
                    "degraded: {} of {} members failed ({}); served from the others",
                    failed.len(),
                    next.roles.len(),
                    failed.join(", ")
                ),
            ),
            Health::Failed => (
                EventKind::VolumeFailed,
                format!(
                    "FAILED: members {} failed, more than the volume tolerates; some data cannot be read",
                    failed.join(", ")
                ),
            ),
        };
        out.push(Event::new(kind, volume, detail));
    }
    out
}

fn pass_changes(
    volume: &str,
    kind: PassKind,
    prev: Option<&Pass>,
    next: Option<&Pass>,
    out: &mut Vec<Event>,
) {
    let Some(n) = next else { return };
    let (started, finished) = kind.events();
    let new_instance = prev.is_none_or(|p| p.instance != n.instance);
    let was_running = !new_instance && prev.is_some_and(Pass::in_progress);
    // A pass seen for the first time was started, even if it is over already; one over
    // that runs again (a cancelled pass resumed) starts again.
    let begun = (new_instance && n.state != PassState::Idle)
        || (!new_instance && !was_running && n.in_progress());
    if begun {
        let on = match n.members.is_empty() {
            true => String::new(),
            false => format!(" onto {}", n.members.join(", ")),
        };
        let mut e = Event::new(
            started,
            volume,
            format!("{} started{on} ({} bytes)", kind.name(), n.total_bytes),
        );
        if !n.members.is_empty() {
            e = e.member(&n.members.join(","));
        }
        out.push(e);
    }
    let ended = !n.in_progress() && n.state != PassState::Idle && (begun || was_running);
    if !ended {
        return;
    }
    let mut detail = format!(
        "{} {} at {} of {} bytes",
        kind.name(),
        n.state.name(),
        n.position_bytes,
        n.total_bytes
    );
    if kind == PassKind::Scrub {
        detail += &format!(
            ": {} checked, {} mismatches, {} repaired, {} unreadable",
            n.checked, n.mismatches, n.repaired, n.unreadable
        );
    }
    let mut e = Event::new(finished, volume, detail).result(n.state.name());
    if !n.members.is_empty() {
        e = e.member(&n.members.join(","));
    }
    out.push(e);
    // Blocks a checksum caught count as unreadable, not as mismatches: both are bad blocks.
    let bad = n.mismatches + n.unreadable;
    if kind == PassKind::Scrub && bad > 0 {
        out.push(Event::new(
            EventKind::MismatchesFound,
            volume,
            format!(
                "the scrub found {bad} bad ({} mismatches, {} unreadable or failing their checksums; {} repaired)",
                n.mismatches, n.unreadable, n.repaired
            ),
        ));
    }
}

/// Reads `v`'s state now.
pub fn snapshot(v: &ControlVolume) -> VolumeSnapshot {
    let array = v.array();
    let vol = array.volume();
    let ids = v.member_ids();
    let roles = ids
        .iter()
        .enumerate()
        .map(|(r, id)| Role {
            id: id.clone(),
            failed: vol.member_is_failed(r),
            current: vol.member_is_current(r),
            remote: is_remote(vol.member(r).name()),
            failure: vol.member_failure(r),
        })
        .collect();
    // A role being rebuilt (a spare that took it) is not redundancy yet: degraded until done.
    let health = if !vol.is_available() {
        Health::Failed
    } else if vol.is_degraded() || (0..vol.member_count()).any(|r| !vol.member_is_current(r)) {
        Health::Degraded
    } else {
        Health::Optimal
    };
    let role_ids = |roles: Vec<(usize, u64)>| -> Vec<String> {
        roles
            .iter()
            .filter_map(|(r, _)| ids.get(*r).cloned())
            .collect()
    };
    let pass_of =
        |c: &Arc<nbraid_core::PassControl>, state: PassState, members: Vec<String>| Pass {
            instance: Arc::as_ptr(c) as usize,
            state,
            members,
            position_bytes: c.position_bytes(),
            total_bytes: c.total_bytes(),
            checked: 0,
            mismatches: 0,
            repaired: 0,
            unreadable: 0,
        };
    let rebuild = v.rebuild_pass().map(|(c, state)| {
        let members = role_ids(v.array().rebuilding());
        pass_of(&c, state, members)
    });
    let seen = |slot: &TaskSlot<PassControl>, c: &PassControl| slot.state().unwrap_or(c.state());
    let resync = (v.resync.latest()).map(|c| pass_of(&c, seen(&v.resync, &c), Vec::new()));
    let readd = v.readd.latest().map(|c| {
        let members = role_ids(v.array().returning());
        pass_of(&c, seen(&v.readd, &c), members)
    });
    let scrub = v.scrub_pass().map(|c| {
        let r = c.report();
        Pass {
            instance: Arc::as_ptr(&c) as usize,
            state: r.state,
            members: Vec::new(),
            position_bytes: r.position_bytes,
            total_bytes: r.total_bytes,
            checked: r.checked,
            mismatches: r.mismatches,
            repaired: r.repaired,
            unreadable: r.unreadable,
        }
    });
    let reshape = v.reshape_pass().map(|c| {
        let mut p = pass_of(&c, seen(&v.reshape, &c), Vec::new());
        if let Some((position, total)) = v.array().reshape_progress() {
            // Before the pass's first window its control counts nothing yet.
            p.position_bytes = p.position_bytes.max(position);
            p.total_bytes = p.total_bytes.max(total);
        }
        p
    });
    VolumeSnapshot {
        roles,
        health,
        passes: [rebuild, resync, readd, scrub, reshape],
    }
}

/// The one-line summary systemd shows (`STATUS=`): each volume's health and what runs.
pub fn summary(names: &[&str], snaps: &[VolumeSnapshot]) -> String {
    let parts: Vec<String> = names
        .iter()
        .zip(snaps)
        .map(|(name, s)| {
            let mut part = format!("{name} {}", s.health.name());
            let failed = s.failed_ids();
            if !failed.is_empty() {
                part += &format!(" ({} failed)", failed.join(", "));
            }
            for kind in PassKind::ALL {
                if s.pass(kind).is_some_and(Pass::in_progress) {
                    part += &format!(", {}", kind.name());
                }
            }
            part
        })
        .collect();
    format!("serving {}: {}", names.len(), parts.join("; "))
}

/// [`summary`] of every volume now.
pub fn summary_of(controls: &Controls) -> String {
    let names: Vec<&str> = controls.volumes.iter().map(|v| v.name.as_str()).collect();
    let snaps: Vec<_> = controls.volumes.iter().map(snapshot).collect();
    summary(&names, &snaps)
}

/// Looks at every volume each [`POLL_INTERVAL`], publishes what changed on `bus`, and hands
/// the summary to `status` whenever it changes (first at once).
pub async fn watch(controls: Arc<Controls>, bus: Arc<EventBus>, status: impl Fn(&str)) {
    let names: Vec<&str> = controls.volumes.iter().map(|v| v.name.as_str()).collect();
    let mut last: Vec<VolumeSnapshot> = controls
        .volumes
        .iter()
        .map(|v| VolumeSnapshot::baseline(&snapshot(v)))
        .collect();
    let mut last_summary = String::new();
    loop {
        let now: Vec<VolumeSnapshot> = controls.volumes.iter().map(snapshot).collect();
        for ((name, prev), next) in names.iter().zip(&last).zip(&now) {
            for e in changes(name, prev, next) {
                bus.publish(e);
            }
        }
        let line = summary(&names, &now);
        if line != last_summary {
            status(&line);
            last_summary = line;
        }
        last = now;
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nbraid_core::fail_cause::FailCause;

    fn vol(failed: &[bool]) -> VolumeSnapshot {
        let roles: Vec<Role> = failed
            .iter()
            .enumerate()
            .map(|(i, &f)| Role {
                id: format!("d{i}"),
                failed: f,
                current: !f,
                remote: false,
                failure: f.then(|| Failure {
                    cause: FailCause::Unanswered,
                    why: "no reply within 5s".into(),
                }),
            })
            .collect();
        let health = match failed.iter().filter(|f| **f).count() {
            0 => Health::Optimal,
            1 => Health::Degraded,
            _ => Health::Failed,
        };
        VolumeSnapshot {
            roles,
            health,
            passes: Default::default(),
        }
    }

    fn pass(instance: usize, state: PassState) -> Pass {
        Pass {
            instance,
            state,
            members: vec!["s0".into()],
            position_bytes: 0,
            total_bytes: 100,
            checked: 0,
            mismatches: 0,
            repaired: 0,
            unreadable: 0,
        }
    }

    fn kinds(events: &[Event]) -> Vec<&'static str> {
        events.iter().map(|e| e.kind.name()).collect()
    }

    #[test]
    fn a_failed_member_is_named_by_id_and_degrades_the_volume_once() {
        let before = vol(&[false, false, false]);
        let after = vol(&[false, true, false]);
        let e = changes("db", &before, &after);
        assert_eq!(kinds(&e), ["member-failed", "volume-degraded"]);
        assert_eq!(e[0].member.as_deref(), Some("d1"));
        assert!(e[1].detail.contains("d1"), "{}", e[1].detail);
        assert!(changes("db", &after, &after).is_empty());
    }

    #[test]
    fn a_volume_that_starts_degraded_says_so_at_the_first_look() {
        let first = vol(&[true, false]);
        let e = changes("db", &VolumeSnapshot::baseline(&first), &first);
        assert_eq!(kinds(&e), ["member-failed", "volume-degraded"]);
    }

    #[test]
    fn a_reshape_starting_pausing_and_ending_are_events() {
        let before = vol(&[false, false, false]);
        let mut running = before.clone();
        let mut p = pass(3, PassState::Running);
        p.members.clear();
        running.passes[PassKind::Reshape as usize] = Some(p.clone());
        let e = changes("db", &before, &running);
        assert_eq!(kinds(&e), ["reshape-started"]);
        assert!(e[0].detail.contains("reshape started"), "{}", e[0].detail);
        let mut done = running.clone();
        p.state = PassState::Done;
        p.position_bytes = p.total_bytes;
        done.passes[PassKind::Reshape as usize] = Some(p);
        let e = changes("db", &running, &done);
        assert_eq!(kinds(&e), ["reshape-finished"]);
        assert_eq!(e[0].result.as_deref(), Some("done"));
        assert!(changes("db", &done, &done).is_empty());
        assert!(summary(&["db"], std::slice::from_ref(&running)).contains("reshape"));
    }

    #[test]
    fn a_spare_taking_a_role_and_its_rebuild_are_events() {
        let before = vol(&[false, true]);
        let mut after = vol(&[false, false]);
        after.roles[1].id = "s0".into();
        after.roles[1].current = false;
        after.health = Health::Degraded;
        after.passes[PassKind::Rebuild as usize] = Some(pass(1, PassState::Running));
        let e = changes("db", &before, &after);
        assert_eq!(kinds(&e), ["spare-active", "rebuild-started"]);
        assert_eq!(e[0].member.as_deref(), Some("s0"));
        let mut done = after.clone();
        done.roles[1].current = true;
        done.health = Health::Optimal;
        done.passes[PassKind::Rebuild as usize] = Some(pass(1, PassState::Done));
        let e = changes("db", &after, &done);
        assert_eq!(kinds(&e), ["rebuild-finished", "volume-optimal"]);
        assert_eq!(e[0].result.as_deref(), Some("done"));
        assert!(changes("db", &done, &done).is_empty());
    }

    #[test]
    fn a_member_that_failed_and_was_taken_over_between_two_looks_is_still_said_to_fail() {
        let before = vol(&[false, false]);
        let mut after = vol(&[false, false]);
        after.roles[1].id = "s0".into();
        after.roles[1].current = false;
        after.health = Health::Degraded;
        let e = changes("db", &before, &after);
        assert_eq!(
            kinds(&e),
            ["member-failed", "spare-active", "volume-degraded"]
        );
        assert_eq!(e[0].member.as_deref(), Some("d1"));
        // A replacement swaps in rebuilt: its old member did not fail.
        let mut replaced = vol(&[false, false]);
        replaced.roles[1].id = "new".into();
        assert_eq!(kinds(&changes("db", &before, &replaced)), ["spare-active"]);
    }

    #[test]
    fn a_pass_over_between_two_looks_is_started_and_finished() {
        let before = vol(&[false]);
        let mut after = before.clone();
        let mut scrub = pass(7, PassState::Done);
        scrub.mismatches = 3;
        after.passes[PassKind::Scrub as usize] = Some(scrub);
        let e = changes("db", &before, &after);
        assert_eq!(
            kinds(&e),
            ["scrub-started", "scrub-finished", "mismatches-found"]
        );
        // The next pass at the same address (the old one freed) is still a new one.
        let mut again = after.clone();
        again.passes[PassKind::Scrub as usize] = Some(pass(7, PassState::Running));
        assert_eq!(kinds(&changes("db", &after, &again)), ["scrub-started"]);
    }

    /// Found by a service hunt: blocks the checksums caught count as unreadable, not as
    /// mismatches, and raised no alarm (three rotten blocks found and repaired: no
    /// `mismatches-found`, status "0 bad", the metrics at 0).
    #[test]
    fn blocks_a_checksum_caught_raise_the_alarm_too() {
        let before = vol(&[false]);
        let mut after = before.clone();
        let mut scrub = pass(7, PassState::Done);
        (scrub.unreadable, scrub.repaired) = (3, 3);
        after.passes[PassKind::Scrub as usize] = Some(scrub);
        let e = changes("db", &before, &after);
        assert_eq!(
            kinds(&e),
            ["scrub-started", "scrub-finished", "mismatches-found"]
        );
        assert!(e[2].detail.contains("found 3 bad"), "{}", e[2].detail);
    }

    #[test]
    fn a_remote_member_failing_is_unreachable_and_coming_back_is_said() {
        let mut before = vol(&[false, false]);
        before.roles[0].remote = true;
        let mut after = vol(&[true, false]);
        after.roles[0].remote = true;
        let e = changes("db", &before, &after);
        assert_eq!(
            kinds(&e),
            ["member-failed", "member-unreachable", "volume-degraded"]
        );
        assert_eq!(
            kinds(&changes("db", &after, &before)),
            ["member-back", "volume-optimal"]
        );
    }

    #[test]
    fn a_remote_member_that_answered_with_errors_is_said_to_stay_failed() {
        let mut before = vol(&[false, false]);
        before.roles[0].remote = true;
        let mut after = vol(&[true, false]);
        after.roles[0].remote = true;
        after.roles[0].failure = Some(Failure {
            cause: FailCause::Errors,
            why: "write failed: Input/output error".into(),
        });
        let e = changes("db", &before, &after);
        assert_eq!(kinds(&e), ["member-failed", "volume-degraded"]);
        let said = &e[0].detail;
        assert!(said.contains("Input/output error"), "{said}");
        assert!(said.contains("stays failed until the operator"), "{said}");
    }

    #[test]
    fn the_summary_names_failed_members_and_running_passes() {
        let mut s = vol(&[false, true]);
        s.passes[PassKind::Rebuild as usize] = Some(pass(1, PassState::Running));
        assert_eq!(
            summary(&["db"], &[s]),
            "serving 1: db degraded (d1 failed), rebuild"
        );
    }
}
