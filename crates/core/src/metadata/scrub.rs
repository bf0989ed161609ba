//! A scrub of an `Array` that survives restarts: the position is recorded in the volume's
//! records (the superblocks' scrub checkpoint, `docs/FORMAT.md`) when the scrub starts and
//! about every sixteenth of the volume (at most 1 GiB) with no window in flight, and cleared
//! when it finishes or an operator cancels it. After a restart
//! `Array::scrub_checkpoint` names it and a scrub resumed there
//! ([`crate::ScrubControl::resume_at`]) goes on from it; the counts start again from zero
//! (they are not recorded). A crash between two checkpoints scrubs the bytes after the last
//! one again — reading twice is harmless, and a repair only rewrites what the redundancy
//! proves wrong at that moment.

use super::error::ArrayError;
use super::parts::Parts;
use super::ranges::checkpoint_every;
use super::ScrubCheckpoint;
use crate::error::VolumeResult;
use crate::scrub::{ScrubControl, ScrubReport, ScrubState, SCRUB_WINDOW_BYTES};
use futures::FutureExt;

/// Scrubs the volume from the control's position (see the module docs), recording its
/// progress; returns the final report.
pub(super) async fn scrub(p: Parts<'_>, ctl: &ScrubControl) -> Result<ScrubReport, ArrayError> {
    let repair = ctl.report().repair;
    ctl.set_volume(p.name());
    let at = |position_bytes| ScrubCheckpoint {
        position_bytes,
        repair,
    };
    record_scrub(p, Some(at(ctl.pass.position_bytes()))).await?;
    let every = checkpoint_every(p.volume.capacity(), SCRUB_WINDOW_BYTES);
    let checkpoint = move |pos: u64| record_scrub(p, Some(at(pos))).boxed();
    let report = p
        .volume
        .scrub_pass(ctl, every, Box::new(checkpoint))
        .await?;
    // Done, or cancelled by an operator (pauses do not return): nothing to resume.
    if matches!(report.state, ScrubState::Done | ScrubState::Cancelled) {
        record_scrub(p, None).await?;
    }
    Ok(report)
}

/// Commits `scrub` as the records' scrub checkpoint (nothing when it is already).
async fn record_scrub(p: Parts<'_>, scrub: Option<ScrubCheckpoint>) -> VolumeResult<()> {
    let mut rec = p.records.lock().await;
    if rec.scrub == scrub {
        return Ok(());
    }
    rec.scrub = scrub;
    p.records.commit(&mut rec).await
}
