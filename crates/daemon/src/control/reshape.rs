//! A volume's reshape as the daemon runs it: a volume that starts mid-reshape (its records
//! say so; `nbraid apply --yes` wrote them) carries on copying in the background while it
//! serves, as one more pass — at the volume's rebuild rate, held by `nbraid pause`, resumed
//! by `nbraid resume`, its progress in `nbraid status` — from the recorded position.

use super::volume::ControlVolume;
use serde_json::{json, Value};
use std::sync::Arc;

/// Starts volume `v`'s reshape pass if its records name a reshape (once: a running one is
/// left alone).
pub fn start_reshape_pass(v: &ControlVolume) {
    let Some((position, total)) = v.array.reshape_progress() else {
        return;
    };
    let mut slot = v.reshape.lock();
    if slot.is_some() {
        return;
    }
    let ctl = v.new_pass(v.rebuild_rate());
    ctl.set_position(position);
    *slot = Some(ctl.clone());
    let (array, name) = (v.array.clone(), v.name.clone());
    tracing::warn!(
        "volume {name}: reshape in progress at byte {position} of {total}: copying on in the background while serving"
    );
    tokio::spawn(async move {
        match array.reshape(&ctl).await {
            Ok(s) => tracing::info!(
                "reshape of {name} {} (the new shape serves alone, with its size, from the next start)",
                s.name()
            ),
            Err(e) => tracing::error!("reshape of {name} failed: {e}"),
        }
    });
}

/// The reshape in `status`: where it is, its rate and state; `null` when none ran.
pub(super) fn reshape_json(v: &ControlVolume) -> Value {
    let ctl = v.reshape.lock().clone();
    let Some(c) = ctl else {
        return Value::Null;
    };
    json!({
        "state": c.state().name(),
        "position_bytes": v.array.reshape_progress().map_or(c.position_bytes(), |p| p.0),
        "total_bytes": v.array.reshape_progress().map_or(c.total_bytes(), |p| p.1),
        "rate_bytes_per_s": c.measured_bytes_per_s(),
        "rate_limit_bytes_per_s": c.rate_limit_bytes_per_s(),
        "eta_s": c.eta_s(),
        "done_s_ago": c.done_s_ago(),
    })
}

/// The reshape's control, for pause and resume.
pub(super) fn reshape_pass(v: &ControlVolume) -> Option<Arc<nbraid_core::PassControl>> {
    v.reshape.lock().clone()
}
