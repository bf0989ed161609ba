//! A volume's reshape as the daemon runs it: a volume that starts mid-reshape (its records
//! say so; `nbraid apply --yes` wrote them) carries on copying in the background while it
//! serves, as one more pass — at the volume's rebuild rate, held by `nbraid pause`, resumed
//! by `nbraid resume`, its progress in `nbraid status` — from the recorded position.

use super::task_slot::TaskSlot;
use super::volume::ControlVolume;
use crate::served::ServedArray;
use nbraid_core::metadata::{Array, FillControl, MemberMeta, RefillControl};
use nbraid_core::{PassControl, PassState, ScrubControl};
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
    let passes = OtherPasses::of(v);
    let pass_bytes = array.reshape_pass_bytes().unwrap_or(total);
    // Who holds each role (id and file), to name those a stopped copy waits for.
    let holders: Vec<(String, String)> = (v.member_ids().into_iter())
        .enumerate()
        .map(|(r, id)| (id, v.member_path(r)))
        .collect();
    let started = v.reshape.start(
        |latest| match latest {
            Some((_, true)) => None, // one runs (or reopens the volume) already
            _ => {
                let ctl = v.new_pass(v.rebuild_rate());
                ctl.set_position(position);
                ctl.set_total(pass_bytes);
                Some(ctl)
            }
        },
        |ctl| async move {
            let state = array.reshape(&ctl).await;
            let out = out_of_service(&array, &holders);
            drop(array);
            match state {
                Ok(PassState::Done) => {
                    // A request checking the old array meanwhile would commit through it.
                    let _operations = operations.lock_owned().await;
                    passes.stop(&name).await;
                    finish(&served, &name).await
                }
                Ok(s) => tracing::info!("reshape of {name} {}", s.name()),
                Err(e) => {
                    // Refused before its first window (a member missing): the pass never
                    // ran, and status would say `idle` with no reason.
                    if ctl.state() != PassState::Failed {
                        ctl.failed(&stopped_why(&e, &out));
                    }
                    tracing::error!("reshape of {name} failed: {e}")
                }
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

/// The members out of service (missing or failed) among `holders` (each role's id and
/// file), as "d1 (/srv/d1.img)".
fn out_of_service(array: &Array, holders: &[(String, String)]) -> Vec<String> {
    let vol = array.volume();
    (holders.iter().enumerate())
        .filter(|&(r, _)| r < vol.member_count() && vol.member_is_failed(r))
        .map(|(_, (id, path))| format!("{id} ({path})"))
        .collect()
}

/// Why a reshape stopped, naming the members out of service (`out`): the engine's reason
/// names roles only.
fn stopped_why(error: &impl std::fmt::Display, out: &[String]) -> String {
    match out {
        [] => error.to_string(),
        out => format!("{error} [out of service: {}]", out.join(", ")),
    }
}

/// The volume's passes other than the reshape, which run on the array it serves: all of
/// them must have returned before the reshape's end swaps that array for the new shape, or
/// an array no longer served would still write (its resync beside the new array's writes,
/// its records over the new array's) and its pass would stand in for the new array's in
/// `status` and to `apply`.
struct OtherPasses {
    /// The background resync after an unclean start (a restart mid-reshape of a mirrored
    /// tree starts one): cancelled. The records stay dirty and the bitmap keeps the bits of
    /// the chunks it had not resynced yet, so the new array, opened dirty, resyncs them in
    /// its own shape (the watcher starts its pass after the swap: `heal::after_reopen`).
    resync: TaskSlot<PassControl>,
    /// The engine refuses these on an array mid-reshape (`Array::not_reshaping`): their tasks
    /// return at once, and are only waited for.
    scrub: TaskSlot<ScrubControl>,
    rebuild: TaskSlot<PassControl>,
    readd: TaskSlot<PassControl>,
    checksum_fill: TaskSlot<FillControl>,
    checksum_refill: TaskSlot<RefillControl>,
}

impl OtherPasses {
    fn of(v: &ControlVolume) -> OtherPasses {
        OtherPasses {
            resync: v.resync.clone(),
            scrub: v.scrub.clone(),
            rebuild: v.rebuild.clone(),
            readd: v.readd.clone(),
            checksum_fill: v.checksum_fill.clone(),
            checksum_refill: v.checksum_refill.clone(),
        }
    }

    /// Cancels the resync and waits for every task to return. Called with the volume's
    /// operations held: nothing starts another pass on the old array meanwhile.
    async fn stop(&self, name: &str) {
        if self.resync.alive().is_some() {
            tracing::warn!(
                "volume {name}: its reshape is done: stopping the background resync on the old shape (it resumes on the new one)"
            );
        }
        self.resync.cancel_and_drain().await;
        self.scrub.drain().await;
        self.rebuild.drain().await;
        self.readd.drain().await;
        self.checksum_fill.drain().await;
        // Refused on an array mid-reshape too; cancelled all the same, since one waiting
        // for the resync cancelled above would never return.
        if let Some(c) = self.checksum_refill.alive() {
            c.pass.cancel();
            c.pass.resume();
        }
        self.checksum_refill.drain().await;
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
/// `array` is the one the rest of the reply describes (its capacity, its members): the
/// reshape's end swaps the served array, and a state read from the next one beside the
/// capacity of the last said `done` with the old size.
pub(super) fn reshape_json(v: &ControlVolume, array: &Array) -> Value {
    let Some(c) = v.reshape_pass() else {
        return Value::Null;
    };
    let progress = array.reshape_progress();
    json!({
        "state": state_name(c.state(), progress.is_some()),
        // The pass walks the copy, then the space the new shape adds (synced before it is
        // offered): its own count runs past the array's position, which stops at the old
        // capacity.
        "position_bytes": progress.map_or(c.position_bytes(), |p| p.0.max(c.position_bytes())),
        // The whole pass's (set before it runs), so a share of it is not of the copy alone.
        "total_bytes": progress.map_or(c.total_bytes(), |p| p.1.max(c.total_bytes())),
        "rate_bytes_per_s": c.measured_bytes_per_s(),
        "rate_limit_bytes_per_s": c.rate_limit_bytes_per_s(),
        "eta_s": c.eta_s(),
        "done_s_ago": c.done_s_ago(),
        // Why the copy stopped, while it is `failed` (the daemon's log says it too).
        "error": c.failure(),
    })
}

/// The reshape's state as `status` says it: a copy whose pass is done while the served
/// array is still the reshaping one (`mid_reshape`) is `finishing` — the new shape does not
/// serve alone until [`finish`] has opened it again, and a client that took `done` to mean
/// the new size would still be offered the old one.
fn state_name(pass: PassState, mid_reshape: bool) -> &'static str {
    match pass {
        PassState::Done if mid_reshape => "finishing",
        s => s.name(),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_done_copy_is_finishing_until_the_new_shape_serves_alone() {
        assert_eq!(state_name(PassState::Done, true), "finishing");
        assert_eq!(state_name(PassState::Done, false), "done");
        assert_eq!(state_name(PassState::Running, true), "running");
        assert_eq!(state_name(PassState::Failed, true), "failed");
    }
}
