//! Automatic rebuild while volumes are served.
//!
//! A watcher per volume looks at the volume's failures so far and failed count (atomic loads
//! every [`WATCH_INTERVAL`]); when they change — a member failed past the engine's tolerance
//! of I/O errors, `nbraid fail`, a new member installed — failed roles take spares
//! ([`Array::use_spares`]: the most endangered first, the smallest spare that fits) and the
//! rebuild starts at the volume's `rebuild_rate`, logged loudly and shown by `nbraid
//! status`. At start the same look resumes rebuilds left at a checkpoint and puts spares in
//! roles lost before the start. Which spares stand by is decided at start
//! ([`nbraid_assembly::adopt`]).
//!
//! [`Array::use_spares`]: nbraid_core::metadata::Array::use_spares

use crate::control::{ControlVolume, Controls};
use nbraid_config as config;
use nbraid_core::{PassRate, ScrubControl};
use std::sync::Arc;
use std::time::Duration;

/// How often the watcher looks at a volume's failures.
pub const WATCH_INTERVAL: Duration = Duration::from_millis(200);

/// Puts spares in failed roles and makes sure a rebuild runs for whatever is being rebuilt
/// or replaced; says loudly what it started.
pub async fn heal_once(v: &ControlVolume) {
    // A change of the volume like a request's: not amid one (a `remove` of the spare it
    // would place, a reshape replacing the array).
    let _operations = v.operations().await;
    let array = &v.array();
    let wanting = array.roles_wanting_a_member();
    if !wanting.is_empty() && array.spare_count() > 0 {
        match v.take_spares().await {
            Ok(taken) => {
                for (r, left, took) in taken {
                    let msg = format!(
                        "volume {}: member {left} failed: rebuilding its role {r} onto spare {took} ({})",
                        v.name,
                        rate_text(v.rebuild_rate())
                    );
                    tracing::warn!("{msg}");
                }
            }
            Err(e) => tracing::error!("volume {}: putting a spare in place: {e}", v.name),
        }
    }
    if !array.rebuilding().is_empty() {
        v.ensure_rebuild(v.rebuild_rate());
    }
}

fn rate_text(rate: PassRate) -> String {
    match (rate.limit_bytes_per_s, rate.adaptive) {
        (0, false) => "rate unlimited".into(),
        (0, true) => "rate adaptive".into(),
        (r, false) => format!("at {}/s", config::format_size(r)),
        (r, true) => format!("rate adaptive, at most {}/s", config::format_size(r)),
    }
}

/// Resumes the scrub volume `v`'s superblocks name as unfinished (a restart cut it off), at
/// the volume's `rebuild_rate`.
pub async fn resume_scrub(v: &ControlVolume) {
    let Some(c) = v.array().scrub_checkpoint().await else {
        return;
    };
    let ctl = Arc::new(ScrubControl::resume_at(c.repair, 0, c.position_bytes));
    ctl.pass.set_pass_rate(v.rebuild_rate());
    // Its share of the whole volume from the first report (of 0 bytes, it was millions of %).
    ctl.pass.set_total(v.array().volume().capacity());
    let msg = format!(
        "volume {}: resuming the {} interrupted at {} ({})",
        v.name,
        if c.repair { "scrub --repair" } else { "scrub" },
        config::format_size(c.position_bytes),
        rate_text(v.rebuild_rate())
    );
    tracing::warn!("{msg}");
    if let Err(e) = v.start_scrub(ctl) {
        tracing::error!("volume {}: resuming its scrub: {}", v.name, e.message);
    }
}

/// Starts volume `v`'s background resync if its start left one (after an unclean
/// shutdown), at the volume's `rebuild_rate`.
pub fn start_background_resync(v: &ControlVolume) {
    if !v.array().background_pending() {
        return;
    }
    let (array, name) = (v.array(), v.name.clone());
    let msg = format!(
        "volume {name}: not shut down cleanly: resyncing {} in the background while serving ({})",
        config::format_size(array.background_bytes()),
        rate_text(v.rebuild_rate())
    );
    let started = v.resync.start(
        |latest| match latest {
            Some((_, true)) => None, // one runs already
            _ => Some(v.new_pass(v.rebuild_rate())),
        },
        |ctl| async move {
            match array.background_resync(&ctl).await {
                Ok(s) => tracing::info!("background resync of {name} {}", s.name()),
                Err(e) => tracing::error!("background resync of {name} failed: {e}"),
            }
        },
    );
    if started.is_some() {
        tracing::warn!("{msg}");
    }
}

/// Watches every volume: on a new member failure, [`heal_once`]; when the volume was
/// opened again (a reshape started or ended), what a start does for a volume opened
/// ([`after_reopen`]).
pub async fn watch(controls: Arc<Controls>) {
    // (failures so far, failed count, swaps of the served array). The count alone misses a
    // spare placed and rebuilt and then failed, all between two looks: it is as it was, and
    // the next spare stood by unused.
    let mut seen: Vec<Option<(u64, usize, u64)>> = vec![None; controls.volumes.len()];
    loop {
        for (v, seen) in controls.volumes.iter().zip(seen.iter_mut()) {
            if v.array().is_read_only() {
                // Takes no spare, starts no pass: each writes.
                continue;
            }
            let swaps = v.served.swaps();
            let array = v.array();
            let now = (
                array.volume().failures_so_far(),
                array.volume().failed_count(),
                swaps,
            );
            drop(array);
            let was = seen.replace(now);
            // A volume already swapped at the first look (its reshape ended that soon) too.
            if was.map_or(now.2 != 0, |(_, _, a)| a != now.2) {
                after_reopen(v).await;
            }
            if was != Some(now) {
                heal_once(v).await;
            }
        }
        tokio::time::sleep(WATCH_INTERVAL).await;
    }
}

/// A volume opened again as another array (a reshape's start or end) gets the passes its
/// records ask for, as at a start: a checksum pass left to run (`checksums = "enable"`
/// waits for a reshape), a background resync (then [`heal_once`] puts spares in roles lost
/// meanwhile), the refill of checksums an unclean open dropped.
async fn after_reopen(v: &ControlVolume) {
    // Not amid a swap: a reshape's end stops the old array's passes and swaps it under this
    // lock, so what starts here runs on the array served.
    let _operations = v.operations().await;
    start_background_resync(v);
    crate::control::start_checksum_fill(v).await;
    crate::control::start_checksum_refill(v);
}
