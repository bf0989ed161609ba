//! The pass that gives back the per-block checksums an unclean start dropped
//! (`nbraid_core::metadata::Array::refill_checksums`): started at each start (and each
//! reopening) that dropped some, at the volume's `rebuild_rate`; it waits for the
//! background resync, and `status` shows it (`checksum_refill`) with the blocks still
//! without their checksums.

use super::ControlVolume;
use nbraid_core::metadata::RefillControl;
use serde_json::{json, Value};
use std::sync::Arc;

/// Starts volume `v`'s refill pass when its open dropped checksums (not mid-reshape: the
/// reopening after it starts it).
pub fn start_checksum_refill(v: &ControlVolume) {
    let array = v.array();
    if !array.checksums_to_refill() || array.reshape_progress().is_some() {
        return;
    }
    let name = v.name.clone();
    v.checksum_refill.start(
        |latest| match latest {
            Some((_, true)) => None, // one runs already
            _ => {
                let ctl = Arc::new(RefillControl::with_rate(v.rebuild_rate()));
                if v.is_held() {
                    ctl.pass.pause();
                }
                Some(ctl)
            }
        },
        |ctl| async move {
            match array.refill_checksums(&ctl).await {
                Ok(state) => tracing::info!(
                    "volume {name}: checksum refill {}: {} entries computed again",
                    state.name(),
                    ctl.filled_blocks.load(std::sync::atomic::Ordering::Relaxed)
                ),
                Err(e) => tracing::error!("volume {name}: checksum refill failed: {e}"),
            }
        },
    );
}

/// `status`'s `checksum_refill`: the pass's progress over the dropped bytes of every region,
/// and the blocks still without checksums (`None`: no pass since the start).
pub(super) fn refill_json(v: &ControlVolume) -> Option<Value> {
    let ctl = v.checksum_refill.latest()?;
    let r = ctl.report();
    let left = r.total_bytes.saturating_sub(r.position_bytes);
    let running = r.state == nbraid_core::PassState::Running;
    let state = match r.state {
        nbraid_core::PassState::Idle if r.waiting_for_resync => "waiting",
        s => s.name(),
    };
    Some(json!({
        "state": state,
        "waiting_for_resync": r.waiting_for_resync,
        "position_bytes": r.position_bytes,
        "total_bytes": r.total_bytes,
        "rate_bytes_per_s": r.rate_bytes_per_s,
        "rate_limit_bytes_per_s": r.rate_limit_bytes_per_s,
        "eta_s": (running && r.rate_bytes_per_s > 0).then(|| left / r.rate_bytes_per_s),
        "filled_blocks": r.filled_blocks,
        "skipped_bytes": r.skipped_bytes,
        "unchecked_blocks": r.unchecked_blocks,
        "error": ctl.pass.failure(),
    }))
}
