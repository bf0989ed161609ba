//! A volume's reshape as the daemon runs it: a volume that starts mid-reshape (its records
//! say so; `nbraid apply --yes` wrote them) carries on copying in the background while it
//! serves, as one more pass — at the volume's rebuild rate, held by `nbraid pause`, resumed
//! by `nbraid resume`, its progress in `nbraid status` — from the recorded position.

use super::volume::ControlVolume;
use crate::served::ServedArray;
use nbraid_core::metadata::{Array, MemberMeta};
use nbraid_core::PassState;
use serde_json::{json, Value};
use std::sync::Arc;

/// Starts volume `v`'s reshape pass if its records name a reshape (once: a running one is
/// left alone). When it is done the volume is opened again as the new shape alone, with its
/// new size ([`finish`]).
pub fn start_reshape_pass(v: &ControlVolume) {
    let array = v.array();
    let Some((position, total)) = array.reshape_progress() else {
        return;
    };
    let (served, name) = (v.served.clone(), v.name.clone());
    let operations = v.operations_lock();
    let started = v.reshape.start(
        |latest| match latest {
            Some((_, true)) => None, // one runs (or reopens the volume) already
            _ => {
                let ctl = v.new_pass(v.rebuild_rate());
                ctl.set_position(position);
                Some(ctl)
            }
        },
        |ctl| async move {
            let state = array.reshape(&ctl).await;
            drop(array);
            match state {
                Ok(PassState::Done) => {
                    // A request checking the old array meanwhile would commit through it.
                    let _operations = operations.lock_owned().await;
                    finish(&served, &name).await
                }
                Ok(s) => tracing::info!("reshape of {name} {}", s.name()),
                Err(e) => tracing::error!("reshape of {name} failed: {e}"),
            }
        },
    );
    if started.is_some() {
        tracing::warn!(
            "volume {}: reshape in progress at byte {position} of {total}: copying on in the background while serving",
            v.name
        );
    }
}

/// After the copy: the records say the new tree alone; the volume is opened again over the
/// same members (requests wait meanwhile), so new NBD connections see its new size.
async fn finish(served: &ServedArray, name: &str) {
    let mut quiet = served.quiet().await;
    let old = served.get();
    if old.reshape_progress().is_none() {
        return; // already opened again
    }
    if let Err(e) = old.mark_clean().await {
        tracing::warn!("volume {name}: recording it clean after the reshape: {e}");
    }
    let members = crate::served::members_by_role(&old);
    let spares = old.spares();
    drop(old);
    match served.reopen(&mut quiet, &members, None).await {
        Ok(new) => {
            carry_spares(&new, spares);
            tracing::info!(
                "reshape of {name} done: the new shape serves alone, {} bytes (new NBD connections see the new size)",
                new.volume().capacity()
            );
        }
        Err(e) => tracing::error!("volume {name}: opening it after the reshape: {e}"),
    }
}

/// The reshape in `status`: where it is, its rate and state; `null` when none ran.
pub(super) fn reshape_json(v: &ControlVolume) -> Value {
    let Some(c) = v.reshape_pass() else {
        return Value::Null;
    };
    let progress = v.array().reshape_progress();
    json!({
        "state": c.state().name(),
        // The pass walks the copy, then the space the new shape adds (synced before it is
        // offered): its own count runs past the array's position, which stops at the old
        // capacity.
        "position_bytes": progress.map_or(c.position_bytes(), |p| p.0.max(c.position_bytes())),
        "total_bytes": progress.map_or(c.total_bytes(), |p| p.1.max(c.total_bytes())),
        "rate_bytes_per_s": c.measured_bytes_per_s(),
        "rate_limit_bytes_per_s": c.rate_limit_bytes_per_s(),
        "eta_s": c.eta_s(),
        "done_s_ago": c.done_s_ago(),
        // Why the copy stopped, while it is `failed` (the daemon's log says it too).
        "error": c.failure(),
    })
}

/// The spares the old array held stand by in the new one.
pub(super) fn carry_spares(new: &Array, spares: Vec<Arc<MemberMeta>>) {
    for s in spares {
        let name = s.member().name().to_string();
        if let Err(e) = new.add_spare(s) {
            tracing::warn!("volume {}: spare {name} not kept: {e}", new.name());
        }
    }
}
