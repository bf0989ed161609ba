//! The pass that computes the per-block checksums of a volume that enabled them (`checksums
//! = "enable"` on a volume created without: `nbraid_core::metadata::Array::fill_checksums`),
//! started at each start while the records name one unfinished, at the volume's
//! `rebuild_rate`, and shown by `status` (`checksum_fill`).

use super::ControlVolume;
use nbraid_config as config;
use nbraid_core::metadata::FillControl;
use serde_json::{json, Value};
use std::sync::Arc;

/// Starts volume `v`'s checksum pass when its records name one unfinished.
pub async fn start_checksum_fill(v: &ControlVolume) {
    let array = v.array();
    let Some(position) = array.checksum_fill_checkpoint().await else {
        return;
    };
    let name = v.name.clone();
    let rate = v.rebuild_rate().limit_bytes_per_s;
    let started = v.checksum_fill.start(
        |latest| match latest {
            Some((_, true)) => None, // one runs already
            _ => {
                let ctl = Arc::new(FillControl::resume_at(v.rebuild_rate(), position));
                if v.is_held() {
                    ctl.pause();
                }
                Some(ctl)
            }
        },
        |ctl| async move {
            match array.fill_checksums(&ctl).await {
                Ok(r) => tracing::info!(
                    "volume {name}: checksum pass {}: {} entries computed, {} mismatches found by its scrub ({} repaired)",
                    r.state.name(),
                    r.filled_blocks,
                    r.scrub.mismatches + r.scrub.unreadable,
                    r.scrub.repaired
                ),
                Err(e) => tracing::error!("volume {name}: checksum pass failed: {e}"),
            }
        },
    );
    if started.is_none() {
        return;
    }
    tracing::warn!(
        "volume {}: computing its per-block checksums in the background from {} ({}); blocks not reached yet are read unchecked",
        v.name,
        config::format_size(position),
        match rate {
            0 => "rate unlimited".to_string(),
            r => format!("at {}/s", config::format_size(r)),
        }
    );
}

/// `status`'s `checksum_fill`: the pass's progress over the volume then its regions, and
/// what its scrub found (`None`: no pass since the start).
pub(super) fn fill_json(v: &ControlVolume) -> Option<Value> {
    let ctl = v.checksum_fill.latest()?;
    let r = ctl.report();
    let left = r.total_bytes.saturating_sub(r.position_bytes);
    let running = r.state == nbraid_core::PassState::Running;
    Some(json!({
        "state": r.state.name(),
        "phase": r.phase.name(),
        "position_bytes": r.position_bytes,
        "total_bytes": r.total_bytes,
        "rate_bytes_per_s": r.rate_bytes_per_s,
        "rate_limit_bytes_per_s": r.rate_limit_bytes_per_s,
        "eta_s": (running && r.rate_bytes_per_s > 0).then(|| left / r.rate_bytes_per_s),
        "filled_blocks": r.filled_blocks,
        "skipped_bytes": r.skipped_bytes,
        "scrub": {
            "mismatches": r.scrub.mismatches,
            "unreadable": r.scrub.unreadable,
            "repaired": r.scrub.repaired,
            "skipped": r.scrub.skipped,
        },
    }))
}
