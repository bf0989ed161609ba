//! Where events come from: a few times a second each volume's state is read the way the
//! control socket's `status` reads it (member states, the passes' controls: loads of
//! atomics, no I/O but a `stat` of each file member's path: `control::member_path`) into a [`VolumeSnapshot`], and [`changes`] (a pure function) says what
//! differs from the last one. The engine is not hooked: a member failed by an I/O error, by
//! `nbraid fail` or by a remote server going away is seen the same way.

use crate::control::absolute_path;
use crate::control::member_path::{member_path_problem, PathProblem};
use crate::control::readd::{is_remote, may_return};
use crate::control::task_slot::Run;
use crate::control::{ControlVolume, Controls};
use crate::events::{Event, EventBus, EventKind};
use nbraid_core::fail_cause::Failure;
use nbraid_core::metadata::Array;
use nbraid_core::{MemberState, PassControl, PassState, RefusedFlushes, ScrubControl, Volume};
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
    /// Why its server, answering again, is not used (its TLS certificate refused, the
    /// export too small...), while it is failed; `None` while it does not answer.
    pub refused_now: Option<String>,
    /// Write errors it answered and was kept through (the volume cannot do without it).
    pub write_errors_kept: u64,
    /// Past its bad-block limit, kept: the only readable copy of some data.
    pub kept_past_limit: bool,
    /// A file member whose path no longer names its open file, and that path.
    pub path_problem: Option<(PathProblem, String)>,
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

/// One run of a pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pass {
    /// Tells one run from every other (the run's id, [`Run::id`]: a control's address may
    /// be reused, and a resumed pass runs its control again).
    pub instance: u64,
    pub state: PassState,
    /// The ids of the members it writes (rebuilds and re-add resyncs).
    pub members: Vec<String>,
    /// Of `members`, the replacements (a replace's copy), each with the id of the member it
    /// replaces (which keeps its role until the copy is done).
    pub replacing: Vec<(String, String)>,
    pub position_bytes: u64,
    pub total_bytes: u64,
    /// Scrubs: what was compared and found.
    pub checked: u64,
    pub mismatches: u64,
    pub repaired: u64,
    pub unreadable: u64,
    /// Why it stopped, once it failed (rebuilds: its target failed, say).
    pub error: Option<String>,
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
    /// By [`PassKind::ALL`]'s order: the recent runs of each kind, oldest first — every
    /// run since the last look, however short.
    pub passes: [Vec<Pass>; 5],
    /// Flushes that could not write the write-back cache's bytes to the members.
    pub refused_flushes: RefusedFlushes,
    /// Acknowledged writes in the write-back cache, not on the members yet.
    pub cached_dirty_bytes: u64,
    /// Write-backs of that cache that failed with no flush waiting (the background
    /// flusher's, evictions'): told even when no client flushes.
    pub failed_destages: u64,
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
                    refused_now: None,
                    write_errors_kept: 0,
                    kept_past_limit: false,
                    path_problem: None,
                    ..r.clone()
                })
                .collect(),
            health: Health::Optimal,
            passes: Default::default(),
            refused_flushes: RefusedFlushes::default(),
            cached_dirty_bytes: 0,
            failed_destages: 0,
        }
    }

    /// The latest run of `kind`.
    pub fn pass(&self, kind: PassKind) -> Option<&Pass> {
        self.passes[kind as usize].last()
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
    let verdict = may_return(n.remote, n.failure.as_ref());
    let stays = match &verdict {
        Err(why) if n.remote => format!("; {why}"),
        _ => String::new(),
    };
    // The rule's sentence may give the reason itself ("it answered with I/O errors
    // (...)"): said once.
    let why = (n.failure.as_ref())
        .filter(|f| !stays.contains(&f.why))
        .map(|f| format!(" ({})", f.why))
        .unwrap_or_default();
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
        let detail = match &n.refused_now {
            Some(refused) => answers_refused(&n.id, refused),
            None => format!(
                "remote member {} is not answering; it is re-added, resynced, once it answers",
                n.id
            ),
        };
        out.push(Event::new(EventKind::MemberUnreachable, volume, detail).member(&n.id));
    }
}

/// What a failed remote member whose server answers but is not used is told as (status says
/// the same): "not answering" hid a TLS certificate refused at every handshake.
fn answers_refused(id: &str, refused: &str) -> String {
    format!(
        "remote member {id}: its server answers again but is not used: {refused}; it is re-added, resynced, once that is put right"
    )
}

/// The event of failed remote member `n` (the same as `p`) whose server answers again but
/// is refused (a TLS certificate not ours...): when that becomes known, or its reason changes.
fn member_refused(volume: &str, p: &Role, n: &Role, out: &mut Vec<Event>) {
    let Some(refused) = n.refused_now.as_deref() else {
        return;
    };
    if !(p.failed && n.failed && n.remote) || p.refused_now.as_deref() == Some(refused) {
        return;
    }
    out.push(
        Event::new(
            EventKind::MemberUnreachable,
            volume,
            answers_refused(&n.id, refused),
        )
        .member(&n.id),
    );
}

/// Whether a count that went from `before` to `now` is told: at its first, and each time it
/// reaches the next power of two. A member failing every write would otherwise be told at
/// every look, pushing the other events out of the kept ones and running the hook four
/// times a second. A count that went down started again (the volume was opened again).
fn count_told(before: u64, now: u64) -> bool {
    now > before && (before == 0 || now.ilog2() > before.ilog2())
}

/// The events of member `n` (the same as `p`, serving) being kept where the engine would
/// fail a member it could do without: through write errors, past its bad-block limit.
fn member_kept(volume: &str, p: &Role, n: &Role, out: &mut Vec<Event>) {
    let id = &n.id;
    if count_told(p.write_errors_kept, n.write_errors_kept) {
        let count = n.write_errors_kept;
        out.push(
            Event::new(
                EventKind::WriteErrorsKept,
                volume,
                format!(
                    "member {id} answered write errors ({count} so far) and is kept: the volume cannot do without it while it reads; those writes answered errors to their clients"
                ),
            )
            .member(id)
            .count(count),
        );
    }
    if !p.kept_past_limit && n.kept_past_limit {
        out.push(
            Event::new(
                EventKind::KeptPastBadBlockLimit,
                volume,
                format!(
                    "member {id} is past its bad-block limit and is kept: it holds the only readable copy of some data (its bad blocks answer read errors)"
                ),
            )
            .member(id),
        );
    }
}

/// The event of the write-back cache's bytes refused by the members: a flush could not
/// write them back, so acknowledged writes are in memory only. Without a flush (a client
/// that never flushes), the background flusher's failures tell it instead.
fn destage_refused(
    volume: &str,
    prev: &VolumeSnapshot,
    next: &VolumeSnapshot,
    out: &mut Vec<Event>,
) {
    let (before, now) = (&prev.refused_flushes, &next.refused_flushes);
    if !count_told(before.count, now.count) {
        background_destage_failed(volume, prev, next, out);
        return;
    }
    let why = (now.last_error.as_deref())
        .map(|e| format!(" ({e})"))
        .unwrap_or_default();
    out.push(
        Event::new(
            EventKind::DestageFailed,
            volume,
            format!(
                "the write-back cache could not write its cached writes to the members{why}: {} bytes of acknowledged writes are held in memory only (reads see them; a stop drops them); flushes refused so far: {}",
                next.cached_dirty_bytes, now.count
            ),
        )
        .count(now.count),
    );
}

/// `destage-failed` from the background write-backs (aged stripes, evictions) that failed
/// while no flush was refused: the count is theirs, told at the first and each power of two
/// (as the daemon's log says them, with the error).
fn background_destage_failed(
    volume: &str,
    prev: &VolumeSnapshot,
    next: &VolumeSnapshot,
    out: &mut Vec<Event>,
) {
    let (before, now) = (prev.failed_destages, next.failed_destages);
    if !count_told(before, now) {
        return;
    }
    out.push(
        Event::new(
            EventKind::DestageFailed,
            volume,
            format!(
                "the write-back cache's background write-back to the members failed ({now} times so far; the daemon's log has the error): the cache holds {} bytes of acknowledged writes not yet written to them, and tries again",
                next.cached_dirty_bytes
            ),
        )
        .count(now),
    );
}

/// What changed on volume `volume` from `prev` to `next`, in the order an operator reads it:
/// members, their passes, then what it means for the volume.
pub fn changes(volume: &str, prev: &VolumeSnapshot, next: &VolumeSnapshot) -> Vec<Event> {
    let mut out = Vec::new();
    for (r, n) in next.roles.iter().enumerate() {
        if let Some(p) = prev.roles.get(r) {
            role_changes(volume, p, n, &mut out);
        }
    }
    destage_refused(volume, prev, next, &mut out);
    for kind in PassKind::ALL {
        let (before, now) = (&prev.passes[kind as usize], &next.passes[kind as usize]);
        for n in now {
            let p = before.iter().find(|p| p.instance == n.instance);
            pass_changes(volume, kind, p, n, &mut out);
        }
    }
    if prev.health != next.health {
        out.push(health_changed(volume, next));
    }
    out
}

/// What changed in one role from `p` to `n`: who holds it, whether it serves, what its
/// member kept or refused.
fn role_changes(volume: &str, p: &Role, n: &Role, out: &mut Vec<Event>) {
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
        // And failed since, between the same two looks (a spare dying as soon as it is
        // written): heard like any member's failure.
        if n.failed {
            member_failed(volume, n, out);
        }
        return;
    }
    if !p.failed && n.failed {
        member_failed(volume, n, out);
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
    if !n.failed {
        member_kept(volume, p, n, out);
    }
    member_refused(volume, p, n, out);
    member_path_lost(volume, p, n, out);
}

/// The event of member `n`'s path found no longer naming its open file, or naming it
/// otherwise wrong than before (told once: not again while it stays so).
fn member_path_lost(volume: &str, p: &Role, n: &Role, out: &mut Vec<Event>) {
    let Some((problem, path)) = &n.path_problem else {
        return;
    };
    if p.path_problem.as_ref().map(|(was, _)| was) != Some(problem) {
        let detail = problem.describe(volume, &n.id, path);
        out.push(Event::new(EventKind::MemberPathLost, volume, detail).member(&n.id));
    }
}

/// The volume's health now (`next`), told when it changed.
fn health_changed(volume: &str, next: &VolumeSnapshot) -> Event {
    let failed = next.failed_ids();
    let (kind, detail) = match next.health {
        Health::Optimal => (EventKind::VolumeOptimal, "every member serves".to_string()),
        Health::Degraded if failed.is_empty() => (
            EventKind::VolumeDegraded,
            format!(
                "degraded: {} not in sync (being rebuilt or resynced; on a read-only volume, until a read-write start); served from the others",
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
    Event::new(kind, volume, detail)
}

/// The members pass `n` writes, for people: a replacement with the member it replaces
/// (`r (replacing d2)`).
fn onto_text(n: &Pass) -> String {
    let named = (n.members.iter()).map(|m| match n.replacing.iter().find(|(new, _)| new == m) {
        Some((_, old)) => format!("{m} (replacing {old})"),
        None => m.clone(),
    });
    named.collect::<Vec<_>>().join(", ")
}

/// Event `e` naming the members pass `n` writes, and those its replacements replace.
fn with_members(mut e: Event, n: &Pass) -> Event {
    if !n.members.is_empty() {
        e = e.member(&n.members.join(","));
    }
    if !n.replacing.is_empty() {
        let old: Vec<&str> = n.replacing.iter().map(|(_, old)| old.as_str()).collect();
        e = e.replaces(&old.join(","));
    }
    e
}

/// Whether a pass in `state` is over (it ran and stopped: it does not run again).
fn is_over(state: PassState) -> bool {
    !matches!(
        state,
        PassState::Idle | PassState::Running | PassState::Paused
    )
}

/// The events of one run from `prev` (`None`: not seen before) to `next`. A run goes
/// idle → running or paused → over, and each step is said once, however many of them
/// happened between two looks.
fn pass_changes(volume: &str, kind: PassKind, prev: Option<&Pass>, n: &Pass, out: &mut Vec<Event>) {
    let (started, finished) = kind.events();
    let begun = prev.is_none_or(|p| p.state == PassState::Idle) && n.state != PassState::Idle;
    if begun {
        let on = match n.members.is_empty() {
            true => String::new(),
            false => format!(" onto {}", onto_text(n)),
        };
        let e = Event::new(
            started,
            volume,
            format!("{} started{on} ({} bytes)", kind.name(), n.total_bytes),
        );
        out.push(with_members(e, n));
    }
    let ended = is_over(n.state) && prev.is_none_or(|p| !is_over(p.state));
    if !ended {
        return;
    }
    // Once a rebuild is over the array no longer names the members it wrote: as seen
    // while it ran.
    let seen = match (n.members.is_empty(), prev) {
        (true, Some(p)) => p,
        _ => n,
    };
    let mut detail = format!(
        "{} {} at {} of {} bytes",
        kind.name(),
        n.state.name(),
        n.position_bytes,
        n.total_bytes
    );
    if let Some(why) = n.error.as_deref().filter(|_| n.state == PassState::Failed) {
        detail += &format!(": {why}");
    }
    if kind == PassKind::Scrub {
        detail += &format!(
            ": {} checked, {} mismatches, {} repaired, {} unreadable",
            n.checked, n.mismatches, n.repaired, n.unreadable
        );
    }
    let e = Event::new(finished, volume, detail).result(n.state.name());
    out.push(with_members(e, seen));
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

/// A run's state as events tell it: a run whose task returned before its first window
/// (an error its task logged) failed — it was started, and it is over.
fn run_state<C>(run: &Run<C>) -> PassState {
    match run.state {
        PassState::Idle if run.returned => PassState::Failed,
        s => s,
    }
}

/// Reads `v`'s state now.
pub fn snapshot(v: &ControlVolume) -> VolumeSnapshot {
    // One array and one list of ids for the whole look (a reshape's end swaps the array, a
    // spare taking a role changes the ids).
    let array = v.array();
    let ids = v.member_ids();
    let vol = array.volume();
    let cache = vol.cache_usage();
    VolumeSnapshot {
        roles: roles_now(&array, &ids),
        health: health_now(vol),
        passes: passes_now(v, &array, &ids),
        refused_flushes: vol.refused_flushes(),
        cached_dirty_bytes: cache.dirty_bytes,
        failed_destages: cache.failed_destages,
    }
}

/// Each role's member now (`ids`: by role): its id, whether it failed (and why, and
/// whether its server refuses it now), whether it is current, the write errors it kept.
fn roles_now(array: &Array, ids: &[String]) -> Vec<Role> {
    let vol = array.volume();
    (ids.iter().zip(vol.member_health()).enumerate())
        .map(|(r, (id, h))| Role {
            id: id.clone(),
            failed: h.state == MemberState::Failed,
            current: h.current,
            remote: is_remote(vol.member(r).name()),
            refused_now: (h.state == MemberState::Failed)
                .then(|| vol.member(r).refused_now())
                .flatten(),
            failure: h.failure,
            write_errors_kept: h.write_errors,
            kept_past_limit: h.kept_past_limit,
            path_problem: (h.state != MemberState::Failed)
                .then(|| member_path_problem(&*vol.member(r)))
                .flatten()
                .map(|p| (p, absolute_path(vol.member(r).name()))),
        })
        .collect()
}

/// A role being rebuilt (a spare that took it) is not redundancy yet: degraded until done.
fn health_now(vol: &Volume) -> Health {
    if !vol.is_available() {
        Health::Failed
    } else if vol.is_degraded() || (0..vol.member_count()).any(|r| !vol.member_is_current(r)) {
        Health::Degraded
    } else {
        Health::Optimal
    }
}

/// Every pass's runs, in [`VolumeSnapshot::passes`]' order: rebuild, resync, re-add,
/// scrub, reshape.
fn passes_now(v: &ControlVolume, array: &Array, ids: &[String]) -> [Vec<Pass>; 5] {
    let runs_of = |runs: Vec<Run<PassControl>>, members: Vec<String>| -> Vec<Pass> {
        runs.iter().map(|run| Pass::of_run(run, &members)).collect()
    };
    let (rebuilt, replacing) = rebuild_targets(v, array, ids);
    let mut rebuild = runs_of(v.rebuild_runs(), rebuilt);
    for p in &mut rebuild {
        p.replacing = replacing.clone();
    }
    let resync = runs_of(v.resync.runs(), Vec::new());
    let returning: Vec<String> = (array.returning().iter())
        .filter_map(|(r, _)| ids.get(*r).cloned())
        .collect();
    let readd = runs_of(v.readd.runs(), returning);
    let scrub = v.scrub_runs().iter().map(Pass::of_scrub).collect();
    let mut reshape = runs_of(v.reshape.runs(), Vec::new());
    if let (Some(p), Some((position, total))) = (reshape.last_mut(), array.reshape_progress()) {
        // Before the pass's first window its control counts nothing yet.
        p.position_bytes = p.position_bytes.max(position);
        p.total_bytes = p.total_bytes.max(total);
    }
    [rebuild, resync, readd, scrub, reshape]
}

/// What a rebuild writes (`ids`: by role): a role's new member, or its replacement (the
/// member it replaces keeps the role, and its id, until the copy is done); and each
/// replacement's (new id, replaced id).
fn rebuild_targets(
    v: &ControlVolume,
    array: &Array,
    ids: &[String],
) -> (Vec<String>, Vec<(String, String)>) {
    let vol = array.volume();
    let mut replacing = Vec::new();
    let mut rebuilt = Vec::new();
    for (r, _) in array.rebuilding() {
        let Some(id) = ids.get(r) else { continue };
        match vol.replacement(r) {
            Some(rep) => {
                let new = v.id_of(&rep);
                replacing.push((new.clone(), id.clone()));
                rebuilt.push(new);
            }
            None => rebuilt.push(id.clone()),
        }
    }
    (rebuilt, replacing)
}

impl Pass {
    /// A run of a pass that counts bytes only, over `members`.
    fn of_run(run: &Run<PassControl>, members: &[String]) -> Pass {
        Pass {
            instance: run.id,
            state: run_state(run),
            members: members.to_vec(),
            replacing: Vec::new(),
            position_bytes: run.ctl.position_bytes(),
            total_bytes: run.ctl.total_bytes(),
            checked: 0,
            mismatches: 0,
            repaired: 0,
            unreadable: 0,
            error: run.ctl.failure(),
        }
    }

    /// A scrub's run, with what it found.
    fn of_scrub(run: &Run<ScrubControl>) -> Pass {
        let r = run.ctl.report();
        Pass {
            instance: run.id,
            state: run_state(run),
            members: Vec::new(),
            replacing: Vec::new(),
            position_bytes: r.position_bytes,
            total_bytes: r.total_bytes,
            checked: r.checked,
            mismatches: r.mismatches,
            repaired: r.repaired,
            unreadable: r.unreadable,
            error: None,
        }
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
#[path = "observe_tests.rs"]
mod tests;
