//! What `status` says, and the JSON of each background pass that other replies carry too.

use super::controls::Controls;
use super::notes::{live_notes, Holder};
use super::paths::absolute_path;
use super::volume::ControlVolume;
use nbraid_core::checksum::ChecksumCounters;
use nbraid_core::scrub::{ScrubControl, ScrubFinding, ScrubFindings};
use nbraid_core::{MemberState, ScrubReport};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};

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
            v.array().has_member(r).then(|| Holder {
                id,
                path: absolute_path(vol.member(r).name()),
            })
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
        let member = v.known_member(id)?;
        // A file another volume serves from (Matrix) must not be wiped.
        let shared = controls
            .volumes
            .iter()
            .filter(|o| o.name != v.name)
            .any(|o| {
                let other = o.array();
                let ov = other.volume();
                (0..ov.member_count()).any(|r| ov.member(r).name() == member.name())
            });
        Some(!shared)
    };
    live_notes(&v.name, config, &holders, &v.notes, &no_role)
}

/// Everything `status` says about one volume.
fn volume_status(v: &ControlVolume, notes: Vec<String>) -> Value {
    let array = v.array();
    let vol = array.volume();
    let states = vol.member_states();
    let counters = vol.member_counters();
    let region_io = vol.member_region_io();
    let read_errors = vol.member_read_errors();
    // Blocks whose checksum did not match, and those rewritten since (null: no checksums).
    let sums = vol.options().checksums.as_ref();
    let checksum = |i: usize, pick: fn(&ChecksumCounters) -> &AtomicU64| {
        sums.and_then(|s| s.counters(i))
            .map(|c| pick(c).load(Ordering::Relaxed))
    };
    let ids = v.member_ids();
    let members: Vec<Value> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| {
            let (c, file) = (&region_io[i], &counters[i]);
            json!({
                "id": id,
                "index": i,
                "path": absolute_path(vol.member(i).name()),
                "state": match (states[i], v.at_start.get(i).copied()) {
                    (MemberState::Healthy, _) if !vol.member_is_current(i) => "rebuilding",
                    (MemberState::Healthy, _) => "healthy",
                    (MemberState::Failed, _) if !v.array().has_member(i) && v.at_start.get(i) != Some(&"missing") => "removed",
                    (MemberState::Failed, Some("missing")) => "missing",
                    (MemberState::Failed, _) => "failed",
                },
                "at_start": v.at_start.get(i).copied().unwrap_or("?"),
                "read_errors": read_errors[i],
                "checksum_errors": checksum(i, |c| &c.errors),
                "checksum_repairs": checksum(i, |c| &c.repairs),
                "reads": c.reads,
                "writes": c.writes,
                "read_bytes": c.read_bytes,
                "write_bytes": c.write_bytes,
                // The whole file's, every volume on it and the metadata included.
                "file_io": {
                    "reads": file.reads, "writes": file.writes,
                    "read_bytes": file.read_bytes, "write_bytes": file.write_bytes,
                    "flushes": file.flushes,
                },
            })
        })
        .collect();
    let c = vol.counters();
    let cache = vol.cache_usage();
    let state = if !vol.is_available() {
        "failed"
    } else if vol.is_degraded() {
        "degraded"
    } else {
        "healthy"
    };
    json!({
        "name": v.name,
        "level": v.level(),
        "capacity_bytes": vol.capacity(),
        "state": state,
        "degraded": vol.is_degraded(),
        "available": vol.is_available(),
        "held": v.is_held(),
        "rebuild_rate": { "limit_bytes_per_s": v.rebuild_rate().limit_bytes_per_s, "adaptive": v.rebuild_rate().adaptive },
        "members": members,
        "metadata": {
            "array": v.array().id().to_string(),
            "dirty": v.array().is_dirty(),
            "bitmap_chunk_bytes": v.array().bitmap_chunk_bytes(),
            // null: no parity group; false: RAID 5/6 writes torn by a crash are not repaired.
            "write_hole_logged": v.array().write_hole_logged(),
            "created_at_start": v.start.created,
            "clean_at_start": v.start.was_clean,
            "resynced_bytes_at_start": v.start.resynced_bytes,
            "background_resync_bytes_at_start": v.start.background_bytes,
        },
        "io": {
            "reads": c.reads, "read_bytes": c.read_bytes,
            "writes": c.writes, "write_bytes": c.write_bytes,
            "flushes": c.flushes, "trims": c.trims, "write_zeroes": c.write_zeroes,
            "errors": c.errors, "repairs": c.repairs,
        },
        "cache": {
            "dirty_bytes": cache.dirty_bytes,
            "pinned_bytes": cache.pinned_bytes,
            "bound_bytes": cache.bound_bytes,
        },
        "scrub": v.scrub().map(|s| scrub_json(v, &s)),
        "rebuild": rebuild_json(v),
        "resync": v.resync.latest().map(|c| json!({
            "state": v.resync.state().unwrap_or(c.state()).name(),
            "done_s_ago": c.done_s_ago(),
            "position_bytes": c.position_bytes(),
            "total_bytes": c.total_bytes(),
            "remaining_bytes": v.array().background_bytes(),
            "rate_bytes_per_s": c.measured_bytes_per_s(),
            "rate_limit_bytes_per_s": c.rate_limit_bytes_per_s(),
            "eta_s": c.eta_s(),
        })),
        "returning": v.array().returning().iter().map(|&(i, b)| json!({ "index": i, "resync_bytes": b })).collect::<Vec<_>>(),
        "readd": readd_json(v),
        "reshape": super::reshape::reshape_json(v),
        "checksum_fill": super::checksum_fill::fill_json(v),
        "spares": v.array().spares().iter().map(|m| v.id_of(m.member())).collect::<Vec<_>>(),
        // Failed members a spare pushed out of their roles, until removed (md's `(F)`).
        "departed": v.departed.to_json(),
        "notes": notes,
    })
}

/// A scrub's progress, counts and findings (what was found bad where, per member, and what
/// was done: see [`findings_json`]).
pub(super) fn scrub_json(v: &ControlVolume, c: &ScrubControl) -> Value {
    let mut out = report_json(&c.report());
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
    })
}

pub(super) fn rebuild_json(v: &ControlVolume) -> Value {
    let Some(c) = v.rebuild() else {
        return Value::Null;
    };
    let state = v.rebuild_state().unwrap_or(c.state());
    let roles: Vec<usize> = v.array().rebuilding().iter().map(|(r, _)| *r).collect();
    json!({
        "state": state.name(),
        "moves": moves(v, &roles),
        "roles": roles,
        "done_s_ago": c.done_s_ago(),
        "position_bytes": c.position_bytes(),
        "total_bytes": c.total_bytes(),
        "rate_bytes_per_s": c.measured_bytes_per_s(),
        "rate_limit_bytes_per_s": c.rate_limit_bytes_per_s(),
        "adaptive": c.is_adaptive(),
        "eta_s": c.eta_s(),
        "spares": v.array().spare_count(),
    })
}

/// For each role a pass fills: who held it at start and who is written now (a spare or a
/// replacement by its id; the same id when a member comes back into its own role).
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
            json!({ "role": r, "from": from, "to": to })
        })
        .collect()
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
    })
}
