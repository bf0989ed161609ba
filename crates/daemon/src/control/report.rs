//! What `status` says, and the JSON of each background pass that other replies carry too.

use super::controls::Controls;
use super::member_path::member_path_problem;
use super::notes::{live_notes, Holder};
use super::paths::absolute_path;
use super::readd::{is_remote, may_return_now};
use super::volume::ControlVolume;
use nbraid_assembly::adopt::{blank_member_note, missing_spare_note};
use nbraid_core::checksum::ChecksumCounters;
use nbraid_core::fail_cause::Failure;
use nbraid_core::node::MemberHealth;
use nbraid_core::scrub::{ScrubControl, ScrubFinding, ScrubFindings};
use nbraid_core::{CacheUsage, MemberState, ScrubReport, Volume, VolumeCounters};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// `status` of the volumes `selected` (`controls`: every volume, for members they share).
pub(super) fn status(controls: &Controls, selected: &[&ControlVolume]) -> Value {
    let vols: Vec<Value> = selected
        .iter()
        .map(|v| volume_status(v, notes_now(controls, v)))
        .collect();
    json!({ "volumes": vols })
}

/// The notes `check` would give for volume `v` as it is now ([`live_notes`]); the start's
/// notes when the config's ids are not known.
fn notes_now(controls: &Controls, v: &ControlVolume) -> Vec<String> {
    let Some(config) = &v.config_ids else {
        return v.notes.clone();
    };
    let array = v.array();
    let vol = array.volume();
    let holders: Vec<Option<Holder>> = v
        .member_ids()
        .into_iter()
        .enumerate()
        .map(|(r, id)| {
            // A missing member is still its role's holder: the config keeps naming it.
            let path = match v.missing_from(r) {
                Some(path) => path,
                None if v.array().has_member(r) => absolute_path(vol.member(r).name()),
                None => return None,
            };
            Some(Holder { id, path })
        })
        .collect();
    let spares: Vec<String> = v
        .array()
        .spares()
        .iter()
        .map(|m| v.id_of(m.member()))
        .collect();
    let no_role = |id: &str| {
        if spares.iter().any(|s| s == id) {
            return None;
        }
        let path = v.known_path(id)?;
        // A file another volume serves from (Matrix) must not be wiped.
        let shared = controls
            .volumes
            .iter()
            .filter(|o| o.name != v.name)
            .any(|o| {
                let other = o.array();
                let ov = other.volume();
                (0..ov.member_count()).any(|r| ov.member(r).name() == path)
            });
        Some(!shared)
    };
    // A spare missing at start that `nbraid add` has standing by since is not missing; a
    // blank member taken as a spare at start that a role took since no longer stands by.
    let standing_by = |id: &str| spares.iter().any(|s| s == id);
    let ids = v.member_ids();
    let outdated = |n: &String| {
        let taken_since = (ids.iter()).any(|id| *n == blank_member_note(id) && !standing_by(id));
        taken_since || spares.iter().any(|s| *n == missing_spare_note(s))
    };
    let start_notes: Vec<String> = (v.notes.iter()).filter(|n| !outdated(n)).cloned().collect();
    live_notes(&v.name, config, &holders, &start_notes, &no_role)
}

/// Everything `status` says about one volume.
fn volume_status(v: &ControlVolume, notes: Vec<String>) -> Value {
    let array = v.array();
    let vol = array.volume();
    let members = MemberSnapshots::read(vol).json(v);
    json!({
        "name": v.name,
        "level": v.level(),
        "capacity_bytes": vol.capacity(),
        "state": volume_state_name(vol.is_available(), vol.is_degraded()),
        "degraded": vol.is_degraded(),
        "available": vol.is_available(),
        "held": v.is_held(),
        "read_only": array.is_read_only(),
        "rebuild_rate": { "limit_bytes_per_s": v.rebuild_rate().limit_bytes_per_s, "adaptive": v.rebuild_rate().adaptive },
        "members": members,
        "metadata": metadata_json(v),
        "io": io_json(&vol.counters()),
        // What the counts (io, the members' reads, writes, read and checksum errors and
        // repairs) count since: they live in memory only, from the array's opening.
        "counted_since": counted_since_json(v),
        "cache": cache_json(&vol.cache_usage()),
        "scrub": v.scrub().map(|s| scrub_json(v, &s)),
        "rebuild": rebuild_json(v),
        "resync": resync_json(v),
        "returning": v.array().returning().iter().map(|&(i, b)| json!({ "index": i, "resync_bytes": b })).collect::<Vec<_>>(),
        "readd": readd_json(v),
        "reshape": super::reshape::reshape_json(v, &array),
        "checksum_fill": super::checksum_fill::fill_json(v),
        "checksum_refill": super::checksum_refill::refill_json(v),
        "spares": v.array().spares().iter().map(|m| v.id_of(m.member())).collect::<Vec<_>>(),
        // Failed roles nothing can rebuild, and why: a spare would not help them.
        "unrebuildable": super::unrebuildable::unrebuildable_json(v),
        // Failed members a spare pushed out of their roles, until removed (md's `(F)`).
        "departed": v.departed.to_json(),
        "notes": notes,
    })
}

/// The volume's state in one word: `failed` when it cannot serve, else `degraded` or
/// `healthy`.
fn volume_state_name(available: bool, degraded: bool) -> &'static str {
    if !available {
        "failed"
    } else if degraded {
        "degraded"
    } else {
        "healthy"
    }
}

/// What `status` shows of every member, read from the volume before any member is shown.
struct MemberSnapshots<'a> {
    vol: &'a Volume,
    /// Every member's health, by member index (its `counters` are the whole file's I/O,
    /// every volume on it and the metadata included; `region_io` this volume's).
    health: Vec<MemberHealth>,
}

impl<'a> MemberSnapshots<'a> {
    fn read(vol: &'a Volume) -> MemberSnapshots<'a> {
        MemberSnapshots {
            vol,
            health: vol.member_health(),
        }
    }

    /// One object per member, in role order.
    fn json(&self, v: &ControlVolume) -> Vec<Value> {
        let ids = v.member_ids();
        ids.iter()
            .enumerate()
            .map(|(i, id)| self.member_json(v, i, id))
            .collect()
    }

    fn member_json(&self, v: &ControlVolume, i: usize, id: &str) -> Value {
        let h = &self.health[i];
        let (c, file) = (&h.region_io, &h.counters);
        let at_start = v.at_start.get(i).copied();
        let in_array = v.array().has_member(i);
        json!({
            "id": id,
            "index": i,
            "path": v.member_path(i),
            "state": member_state_name(h.state, at_start, h.current, in_array, v.array().is_read_only()),
            "at_start": at_start.unwrap_or("?"),
            "failure": self.failure_json(i, h.failure.as_ref()),
            "path_problem": self.path_problem_json(v, i, id, h.state),
            "read_errors": h.read_errors,
            "write_errors_kept_through": h.write_errors,
            "checksum_errors": self.checksum(i, |c| &c.errors),
            "checksum_repairs": self.checksum(i, |c| &c.repairs),
            "kept_past_bad_block_limit": h.kept_past_limit,
            "corrected_read_errors": h.corrected_read_errors,
            "kept_past_read_error_limit": h.kept_past_read_limit,
            "reads": c.reads,
            "writes": c.writes,
            "read_bytes": c.read_bytes,
            "write_bytes": c.write_bytes,
            "file_io": {
                "reads": file.reads, "writes": file.writes,
                "read_bytes": file.read_bytes, "write_bytes": file.write_bytes,
                "flushes": file.flushes,
            },
        })
    }

    /// Why member `i` is failed (`failure`; null while it is not), and whether it comes back
    /// by itself (the probe's rule, [`may_return_now`]) or why it stays out.
    fn failure_json(&self, i: usize, failure: Option<&Failure>) -> Value {
        let Some(f) = failure else {
            return Value::Null;
        };
        let member = self.vol.member(i);
        let remote = is_remote(member.name());
        let verdict = may_return_now(self.vol.is_available(), remote, Some(f));
        json!({
            "cause": f.cause.describe(),
            "why": f.why,
            "returns_by_itself": verdict.is_ok(),
            "stays_out": verdict.err(),
            // Its server answers again but the export is not used (too small, changed,
            // another disk): the failure above may only say it stopped answering.
            "refused_now": member.refused_now(),
        })
    }

    /// Whether member `i`'s path still names the file it serves from ([`super::member_path`]; null
    /// while it does, and for a failed member or one with no path: remote, memory).
    fn path_problem_json(
        &self,
        v: &ControlVolume,
        i: usize,
        id: &str,
        state: MemberState,
    ) -> Value {
        if state == MemberState::Failed {
            return Value::Null;
        }
        let member = self.vol.member(i);
        let Some(problem) = member_path_problem(&*member) else {
            return Value::Null;
        };
        let path = absolute_path(member.name());
        json!({
            "problem": problem.name(),
            "message": problem.describe(&v.name, id, &path),
        })
    }

    /// Blocks whose checksum did not match, and those rewritten since (`None`: no checksums).
    fn checksum(&self, i: usize, pick: fn(&ChecksumCounters) -> &AtomicU64) -> Option<u64> {
        let sums = self.vol.options().checksums.as_ref();
        sums.and_then(|s| s.counters(i))
            .map(|c| pick(c).load(Ordering::Relaxed))
    }
}

/// A member's state as `status` names it. `at_start`: what assembly found ("missing"...);
/// `current`: it holds every byte of its role; `in_array`: the array still has it (a failed
/// member taken out is `removed`).
fn member_state_name(
    state: MemberState,
    at_start: Option<&str>,
    current: bool,
    in_array: bool,
    read_only: bool,
) -> &'static str {
    match (state, at_start) {
        // A read-only volume rebuilds and resyncs nothing: the member waits for a
        // read-write start (a stale one, or one stopped mid-rebuild).
        (MemberState::Healthy, _) if !current && read_only => "out-of-sync",
        (MemberState::Healthy, _) if !current => "rebuilding",
        (MemberState::Healthy, _) => "healthy",
        (MemberState::Failed, _) if !in_array && at_start != Some("missing") => "removed",
        (MemberState::Failed, Some("missing")) => "missing",
        (MemberState::Failed, _) => "failed",
    }
}

/// The array's records: identity, clean or dirty, and what the start found and did.
fn metadata_json(v: &ControlVolume) -> Value {
    let array = v.array();
    json!({
        "array": array.id().to_string(),
        "dirty": array.is_dirty(),
        "bitmap_chunk_bytes": array.bitmap_chunk_bytes(),
        // null: no parity group; false: RAID 5/6 writes torn by a crash are not repaired.
        "write_hole_logged": array.write_hole_logged(),
        "created_at_start": v.start.created,
        "clean_at_start": v.start.was_clean,
        "resynced_bytes_at_start": v.start.resynced_bytes,
        "background_resync_bytes_at_start": v.start.background_bytes,
    })
}

/// When the volume's counters started counting (the array served now was opened), and
/// what opened it: a restart or reopen starts them again from zero. Not persisted: the
/// records have no field for them (a format change), and the counts since the last commit
/// would still be lost at a crash — a total sometimes short is no truer than counts that
/// say since when.
fn counted_since_json(v: &ControlVolume) -> Value {
    let (at, by) = v.served.opened();
    let unix_s = at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let s_ago = SystemTime::now()
        .duration_since(at)
        .map_or(0, |d| d.as_secs());
    json!({ "unix_s": unix_s, "s_ago": s_ago, "by": by.name() })
}

/// Client requests the volume served.
fn io_json(c: &VolumeCounters) -> Value {
    json!({
        "reads": c.reads, "read_bytes": c.read_bytes,
        "writes": c.writes, "write_bytes": c.write_bytes,
        "flushes": c.flushes, "trims": c.trims, "write_zeroes": c.write_zeroes,
        "errors": c.errors, "repairs": c.repairs,
    })
}

fn cache_json(cache: &CacheUsage) -> Value {
    json!({
        "dirty_bytes": cache.dirty_bytes,
        "pinned_bytes": cache.pinned_bytes,
        "bound_bytes": cache.bound_bytes,
        "failed_destages": cache.failed_destages,
    })
}

/// The latest resync after an unclean shutdown, and what is left of it.
fn resync_json(v: &ControlVolume) -> Value {
    let Some(c) = v.resync.latest() else {
        return Value::Null;
    };
    json!({
        "state": v.resync.state().unwrap_or(c.state()).name(),
        "done_s_ago": c.done_s_ago(),
        "position_bytes": c.position_bytes(),
        "total_bytes": c.total_bytes(),
        "remaining_bytes": v.array().background_bytes(),
        "rate_bytes_per_s": c.measured_bytes_per_s(),
        "rate_limit_bytes_per_s": c.rate_limit_bytes_per_s(),
        "eta_s": c.eta_s(),
        "error": c.failure(),
    })
}

/// A scrub's progress, counts and findings (what was found bad where, per member, and what
/// was done: see [`findings_json`]).
pub(super) fn scrub_json(v: &ControlVolume, c: &ScrubControl) -> Value {
    let mut out = report_json(&c.report());
    out["error"] = json!(c.pass.failure());
    let findings = c.findings();
    out["findings"] = findings_json(v, &findings);
    out["findings_total"] = json!(findings.total());
    out["findings_not_listed"] = json!(findings.dropped());
    out
}

/// Per member that had findings: its id and path, how many findings and how many of them
/// repaired, and the first ones (bounded: `nbraid_core::scrub::FINDINGS_PER_MEMBER_MAX`).
fn findings_json(v: &ControlVolume, f: &ScrubFindings) -> Value {
    let ids = v.member_ids();
    let array = v.array();
    let vol = array.volume();
    let members: Vec<Value> = f
        .by_member
        .iter()
        .map(|(&m, mf)| {
            json!({
                "index": m,
                "id": ids.get(m),
                "path": (m < vol.member_count()).then(|| absolute_path(vol.member(m).name())),
                "total": mf.total,
                "repaired": mf.repaired,
                "first": mf.first.iter().map(finding_json).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!(members)
}

fn finding_json(f: &ScrubFinding) -> Value {
    json!({
        "member_offset_bytes": f.member_offset_bytes,
        "len_bytes": f.len_bytes,
        "found": f.found.name(),
        "action": f.action.name(),
        "repaired": f.action.repaired(),
        "cross_check": f.cross_check.map(|c| c.name()),
    })
}

/// A scrub report's progress and counts.
fn report_json(r: &ScrubReport) -> Value {
    json!({
        "state": r.state.name(),
        "repair": r.repair,
        "position_bytes": r.position_bytes,
        "total_bytes": r.total_bytes,
        "rate_bytes_per_s": r.rate_bytes_per_s,
        "rate_limit_bytes_per_s": r.rate_limit_bytes_per_s,
        "adaptive": r.adaptive,
        "eta_s": r.eta_s(),
        "checked": r.checked,
        "mismatches": r.mismatches,
        "repaired": r.repaired,
        "unreadable": r.unreadable,
        "skipped": r.skipped,
        // Why: no redundancy left (failed members under them), or stale parity.
        "skipped_no_redundancy": r.skipped_no_redundancy,
        "skipped_stale": r.skipped_stale,
        // The counts above are of the bytes from here (a scrub resumed after a restart:
        // what it found before is not recorded).
        "counted_from_bytes": r.counted_from_bytes,
    })
}

pub(super) fn rebuild_json(v: &ControlVolume) -> Value {
    let Some(c) = v.rebuild() else {
        return Value::Null;
    };
    let state = v.rebuild_state().unwrap_or(c.state());
    // Each role's own progress: one the pass has not started on (it starts again for it)
    // is not shown moving with it.
    let progress = v.array().rebuild_progress(c.position_bytes());
    let roles: Vec<usize> = progress.iter().map(|(r, _)| *r).collect();
    let mut moves = moves(v, &roles);
    for (m, (_, at)) in moves.iter_mut().zip(&progress) {
        m["position_bytes"] = json!(at);
    }
    let rebuilt = v.rebuilt_roles(&c);
    json!({
        "state": state.name(),
        "moves": moves,
        "roles": roles,
        // What it made current once it returned, and which of those failed since: then
        // its "done" is history, not the roles' state.
        "failed_since": failed_since(v, &rebuilt),
        "rebuilt_roles": rebuilt,
        "done_s_ago": c.done_s_ago(),
        "position_bytes": c.position_bytes(),
        "total_bytes": c.total_bytes(),
        "rate_bytes_per_s": c.measured_bytes_per_s(),
        "rate_limit_bytes_per_s": c.rate_limit_bytes_per_s(),
        "adaptive": c.is_adaptive(),
        "eta_s": c.eta_s(),
        "spares": v.array().spare_count(),
        "error": c.failure(),
    })
}

/// Of `roles` (a finished rebuild's), those failed now: role, id, cause and words.
fn failed_since(v: &ControlVolume, roles: &[usize]) -> Vec<Value> {
    let (health, ids) = (v.array().volume().member_health(), v.member_ids());
    (roles.iter())
        .filter_map(|&r| {
            let f = health.get(r)?.failure.as_ref()?;
            Some(json!({ "role": r, "id": ids.get(r), "cause": f.cause.describe(), "why": f.why }))
        })
        .collect()
}

/// For each role a pass fills: who held it before and who is written now (a spare or a
/// replacement by its id); `from` is null where no other holder is known ([`earlier_holder`]).
fn moves(v: &ControlVolume, roles: &[usize]) -> Vec<Value> {
    let ids = v.member_ids();
    let array = v.array();
    let vol = array.volume();
    roles
        .iter()
        .map(|&r| {
            let (from, to) = match vol.replacement(r) {
                Some(rep) => (ids[r].clone(), v.id_of(&rep)),
                None => (v.start_id(r), ids[r].clone()),
            };
            json!({ "role": r, "from": earlier_holder(from, &to), "to": to })
        })
        .collect()
}

/// The member a move comes from: the role's holder at start, unless that is the member
/// written now — a start that found the new member already in the role (a rebuild resumed
/// after a restart), or a member back in its own role, knows of no other.
fn earlier_holder(at_start: String, now: &str) -> Option<String> {
    (at_start != now).then_some(at_start)
}

/// The re-add resync (`returning.rs`): its pass, and the roles it brings back.
pub(super) fn readd_json(v: &ControlVolume) -> Value {
    let Some(c) = v.readd.latest() else {
        return Value::Null;
    };
    let roles: Vec<usize> = v.array().returning().iter().map(|(r, _)| *r).collect();
    json!({
        "state": v.readd.state().unwrap_or(c.state()).name(),
        "moves": moves(v, &roles),
        "roles": roles,
        "done_s_ago": c.done_s_ago(),
        "position_bytes": c.position_bytes(),
        "total_bytes": c.total_bytes(),
        "rate_bytes_per_s": c.measured_bytes_per_s(),
        "rate_limit_bytes_per_s": c.rate_limit_bytes_per_s(),
        "eta_s": c.eta_s(),
        "error": c.failure(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_move_comes_from_another_member_or_from_none_known() {
        assert_eq!(earlier_holder("d1".into(), "s0"), Some("d1".to_string()));
        // A rebuild resumed after a restart: the start found s0 in the role already.
        assert_eq!(earlier_holder("s0".into(), "s0"), None);
    }

    #[test]
    fn a_member_state_says_rebuilding_removed_missing_or_failed() {
        use MemberState::{Failed, Healthy};
        let name = |s, at, current, in_array| member_state_name(s, at, current, in_array, false);
        assert_eq!(name(Healthy, Some("ok"), true, true), "healthy");
        assert_eq!(name(Healthy, Some("ok"), false, true), "rebuilding");
        assert_eq!(name(Failed, Some("ok"), true, true), "failed");
        assert_eq!(name(Failed, Some("ok"), true, false), "removed");
        assert_eq!(name(Failed, None, true, false), "removed");
        // Missing at start and never added: missing, whether or not the array holds it.
        assert_eq!(name(Failed, Some("missing"), true, false), "missing");
        assert_eq!(name(Failed, Some("missing"), true, true), "missing");
        // Read-only: nothing rebuilds a member that is not current.
        let ro = |s, at, current| member_state_name(s, at, current, true, true);
        assert_eq!(ro(Healthy, Some("stale"), false), "out-of-sync");
        assert_eq!(ro(Healthy, Some("ok"), true), "healthy");
        assert_eq!(ro(Failed, Some("missing"), true), "missing");
    }

    #[test]
    fn a_volume_that_cannot_serve_is_failed_before_it_is_degraded() {
        assert_eq!(volume_state_name(false, true), "failed");
        assert_eq!(volume_state_name(true, true), "degraded");
        assert_eq!(volume_state_name(true, false), "healthy");
    }
}
