//! Requests about a volume's background passes: `scrub`, `rebuild`, `cancel`, `pause`,
//! `resume`. The passes themselves are the volume's ([`ControlVolume`]).

use super::controls::refused;
use super::report::{readd_json, rebuild_json, scrub_json};
use super::volume::ControlVolume;
use nbraid_control::Refusal;
use nbraid_core::{PassRate, ScrubControl};
use serde_json::{json, Value};
use std::sync::atomic::Ordering::SeqCst;

/// `scrub`: starts one at `rate` (unlimited when `None`; refused while the volume is
/// reshaped: a scrub walks one shape); its first report. A scrub of the same kind already
/// under way is followed, re-rated when `rate` is given (as `rebuild --rate` re-rates a
/// rebuild); one of the other kind is refused, naming `nbraid cancel`.
pub(super) fn scrub(
    v: &ControlVolume,
    repair: bool,
    rate: Option<PassRate>,
) -> Result<Value, Refusal> {
    if let Some(c) = v.scrub().filter(|c| under_way(c)) {
        if c.report().repair != repair {
            let (kind, asked) = if repair {
                ("checked (no repair)", "repair")
            } else {
                ("repaired", "check")
            };
            return Err(Refusal::new(
                "busy",
                format!(
                    "volume \"{}\" is already being {kind}: to {asked} instead, cancel it first (nbraid cancel {})",
                    v.name, v.name
                ),
            ));
        }
        if let Some(rate) = rate {
            c.pass.set_pass_rate(rate);
        }
        let rerated = rate.is_some();
        return Ok(
            json!({ "volume": v.name, "scrub": scrub_json(v, &c), "rerated": rerated, "already_running": true }),
        );
    }
    if v.array().reshape_progress().is_some() {
        return Err(Refusal::new(
            "busy",
            format!(
                "volume \"{}\" is being reshaped: scrub it once the reshape is done (nbraid status shows it)",
                v.name
            ),
        ));
    }
    let ctl = v.new_scrub(repair, rate.unwrap_or_default());
    v.start_scrub(ctl.clone())?;
    Ok(json!({ "volume": v.name, "scrub": scrub_json(v, &ctl) }))
}

/// Whether scrub `c` is under way: spawned, running or paused, and not cancelled.
fn under_way(c: &ScrubControl) -> bool {
    use nbraid_core::PassState::*;
    matches!(c.state(), Idle | Running | Paused) && !c.pass.is_cancelled()
}

/// `rebuild`: spares into failed roles, then the rebuild started at `rate` (a running one
/// re-rated), or at the volume's own rate when `rate` is `None` (a running one left alone).
pub(super) async fn rebuild(v: &ControlVolume, rate: Option<PassRate>) -> Result<Value, Refusal> {
    // As the watcher places them: the members they push out are kept as departed, or
    // `status` and `remove` would no longer know them.
    for (role, left, took) in v.take_spares().await.map_err(refused)? {
        tracing::warn!(
            "volume {}: member {left} failed: rebuilding its role {role} onto spare {took} (nbraid rebuild)",
            v.name
        );
    }
    // No role waits for a rebuild and none runs: a new pass would be done at once, its empty
    // report replacing the last rebuild's. Say so instead.
    if v.array().rebuilding().is_empty() && !v.rebuild_running() {
        let array = v.array();
        return Ok(json!({
            "volume": v.name, "rebuild": rebuild_json(v), "nothing_to_rebuild": true,
            "roles_without_a_member": array.roles_wanting_a_member(),
            // A reshape runs: spares stand by (`Array::use_spares`) until the volume opens in
            // its new shape, when the watcher puts them in failed roles and starts the
            // rebuild (`heal::watch`).
            "reshaping": array.reshape_progress().is_some(),
            "spares": array.spare_count(),
            // Of those, the roles no spare can help, and why.
            "unrebuildable": super::unrebuildable::unrebuildable_json(v),
        }));
    }
    match rate {
        Some(r) => v.start_rebuild(r),
        None => v.ensure_rebuild(v.rebuild_rate()),
    };
    Ok(json!({ "volume": v.name, "rebuild": rebuild_json(v) }))
}

/// `cancel`: the volume's scrub and its re-add resync.
pub(super) fn cancel(v: &ControlVolume) -> Result<Value, Refusal> {
    let scrub = v.scrub();
    let readd = v.cancel_readd_resync();
    let Some(c) = scrub else {
        if readd {
            return Ok(json!({ "volume": v.name, "readd": readd_json(v) }));
        }
        return Err(Refusal::new(
            "not-found",
            format!("volume \"{}\" has no scrub or re-add resync", v.name),
        ));
    };
    c.cancel();
    c.resume();
    Ok(json!({
        "volume": v.name, "scrub": scrub_json(v, &c), "readd": readd_json(v),
    }))
}

/// `pause` (`pause`: true) or `resume` of the volumes `selected`: every pass on them, and
/// the passes that start later.
pub(super) fn pause_resume(selected: &[&ControlVolume], pause: bool) -> Value {
    let mut touched = Vec::new();
    for v in selected {
        v.held.store(pause, SeqCst);
        let (scrub, rebuild) = (v.scrub(), v.rebuild());
        let resync = v.resync.latest();
        let readd = v.readd.latest();
        let reshape = v.reshape_pass();
        let fill = v.checksum_fill.latest();
        let refill = v.checksum_refill.latest();
        let passes = [
            refill.as_ref().map(|r| &r.pass),
            fill.as_ref().map(|f| &f.scrub.pass),
            fill.as_ref().map(|f| &f.entries),
            scrub.as_ref().map(|c| &c.pass),
            rebuild.as_deref(),
            resync.as_deref(),
            readd.as_deref(),
            reshape.as_deref(),
        ];
        let mut any = false;
        for c in passes.into_iter().flatten() {
            if pause {
                c.pause();
            } else {
                c.resume();
            }
            any = true;
        }
        // A cancelled re-add resync runs again (its members are written, not read).
        if !pause && !v.array().returning().is_empty() {
            v.start_readd_resync();
        }
        if any {
            touched.push(v.name.clone());
        }
    }
    let held: Vec<&str> = selected.iter().map(|v| v.name.as_str()).collect();
    json!({ "volumes": touched, "held": pause, "selected": held })
}
