//! The pass that computes the checksums of a volume that enabled them (`checksums =
//! "enable"`, `checksum_area::enable`), resumable from the records' fill checkpoint
//! (`docs/FORMAT.md`).
//!
//! Two halves, one position: over `[0, volume)` a scrub that repairs, so the redundancy
//! agrees before its bytes are given checksums (where it cannot say which side is wrong —
//! RAID 5, two copies — md's rule: parity from the data, the first copy over the others;
//! the scrub's findings name every place); then over the member regions laid end to end in
//! role order, [`crate::checksum::cover`] fills every "no checksum" entry from the bytes the
//! member holds. Writes during the pass set their own entries as always; reads of blocks
//! not reached yet find "no checksum" and pass unchecked. A member not current (failed,
//! being rebuilt) is skipped: a rebuild writes every entry of its role itself.
//!
//! The position is recorded about every sixteenth of each half (at most 1 GiB) with no
//! window in flight, and cleared when the pass is done; a crash scrubs the bytes after the
//! last checkpoint again, which is harmless. After an unclean shutdown the entries' half
//! starts from its beginning: the entries of every page group written since the last clean
//! start were dropped at the open (`crate::checksum`'s crash rule), filled ones too.

use super::error::ArrayError;
use super::fill_control::{FillControl, FillReport};
use super::parts::Parts;
use super::ranges::checkpoint_every;
use super::ChecksumFill;
use crate::checksum::{cover, ChecksumSetup, BLOCK_BYTES};
use crate::error::VolumeResult;
use crate::pass::{PassState, PassWork};
use crate::scrub::{ScrubState, SCRUB_WINDOW_BYTES};
use futures::FutureExt;
use std::sync::atomic::Ordering::Relaxed;

/// Region bytes the entries' half reads at a time (one read per window).
const ENTRIES_WINDOW_BYTES: u64 = 1 << 20;

/// One member region, placed in the entries' half of the pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Placed {
    role: usize,
    start: u64,
    len: u64,
    /// Where the region begins in the entries' half.
    at: u64,
}

/// Runs the pass from the records' checkpoint (see the module docs); returns its report.
/// Nothing recorded: done at once.
pub(super) async fn fill(p: Parts<'_>, ctl: &FillControl) -> Result<FillReport, ArrayError> {
    let recorded = p.records.lock().await.checksum_fill;
    let (Some(setup), Some(recorded)) = (p.volume.options().checksums.as_ref(), recorded) else {
        ctl.entries.nothing_to_do();
        return Ok(ctl.report());
    };
    let volume_bytes = p.volume.capacity();
    let mut start = recorded.position_bytes.max(ctl.position_bytes());
    if !setup.opened_clean() {
        // Entries filled before an unclean shutdown in groups written since were dropped at
        // this open: the entries' half starts again (it fills only what is unknown).
        start = start.min(volume_bytes);
    }
    let placed = placed_regions(p.volume.geometry().root());
    let regions_bytes = placed.last().map_or(0, |r| r.at + r.len);
    ctl.place(start, volume_bytes, regions_bytes);
    ctl.scrub.set_volume(p.name());
    if ctl.scrub.pass.position_bytes() < volume_bytes {
        let every = checkpoint_every(volume_bytes, SCRUB_WINDOW_BYTES);
        let checkpoint = move |pos: u64| record_fill(p, Some(pos)).boxed();
        let scrubbed = (p.volume)
            .scrub_pass(&ctl.scrub, every, Box::new(checkpoint))
            .await?;
        if scrubbed.state != ScrubState::Done {
            return Ok(ctl.report());
        }
        record_fill(p, Some(volume_bytes)).await?;
    }
    if ctl.is_cancelled() {
        return Ok(ctl.report());
    }
    let state = fill_entries(p, ctl, setup, &placed, volume_bytes).await?;
    if state == PassState::Done {
        record_fill(p, None).await?;
        tracing::info!(
            "volume {}: per-block checksums computed: {} entries filled, {} bytes of regions skipped",
            p.name(),
            ctl.filled_blocks.load(Relaxed),
            ctl.skipped_bytes.load(Relaxed)
        );
    }
    Ok(ctl.report())
}

/// The second half: every region's "no checksum" entries filled.
async fn fill_entries(
    p: Parts<'_>,
    ctl: &FillControl,
    setup: &ChecksumSetup,
    placed: &[Placed],
    volume_bytes: u64,
) -> VolumeResult<PassState> {
    let total = placed.last().map_or(0, |r| r.at + r.len);
    let every = checkpoint_every(total, ENTRIES_WINDOW_BYTES);
    let checkpoint = move |pos: u64| record_fill(p, Some(volume_bytes + pos)).boxed();
    crate::pass::run(
        &ctl.entries,
        PassWork {
            total_bytes: total,
            window_bytes: ENTRIES_WINDOW_BYTES,
            inflight: 2,
            window: Box::new(move |at, len| fill_window(p, ctl, setup, placed, at, len).boxed()),
            checkpoint_bytes: every,
            checkpoint: Box::new(checkpoint),
            activity: Some(Box::new(move || p.volume.client_ops())),
            stale: None,
        },
    )
    .await
}

/// Fills the entries of the entries' half bytes `at..at+len` (parts of one or more regions).
/// A member not current, or whose bytes do not read, is skipped and counted.
async fn fill_window(
    p: Parts<'_>,
    ctl: &FillControl,
    setup: &ChecksumSetup,
    placed: &[Placed],
    at: u64,
    len: u64,
) -> VolumeResult<()> {
    for (r, off, n) in pieces(placed, at, len) {
        let cs = setup.for_region(r.role, r.start, r.len);
        let (Some(cs), true) = (cs, p.volume.member_is_current(r.role)) else {
            ctl.skipped_bytes.fetch_add(n, Relaxed);
            continue;
        };
        let m = p.volume.member(r.role);
        match cover(&cs, &*m, off, n).await {
            Ok(filled) => ctl.filled_blocks.fetch_add(filled, Relaxed),
            Err(e) => {
                tracing::warn!("volume {}: member {}: computing checksums: {e}; those blocks stay unchecked until written", p.name(), r.role);
                ctl.skipped_bytes.fetch_add(n, Relaxed)
            }
        };
    }
    Ok(())
}

/// Every member region of `tree` (whole blocks), by role, laid end to end.
fn placed_regions(tree: &nbraid_layout::Node) -> Vec<Placed> {
    let mut regions = Vec::new();
    tree.visit_members(&mut |m| regions.push((m.index, m.start, m.len)));
    regions.sort_unstable();
    let mut at = 0;
    (regions.into_iter())
        .map(|(role, start, len)| {
            let len = len / BLOCK_BYTES * BLOCK_BYTES;
            let r = Placed {
                role,
                start,
                len,
                at,
            };
            at += len;
            r
        })
        .collect()
}

/// The parts of the regions under `at..at+len` of the entries' half: (region, offset in
/// the region, bytes).
fn pieces(placed: &[Placed], at: u64, len: u64) -> Vec<(Placed, u64, u64)> {
    let end = at + len;
    (placed.iter())
        .filter(|r| r.at < end && at < r.at + r.len)
        .map(|r| {
            let a = at.max(r.at);
            let b = end.min(r.at + r.len);
            (*r, a - r.at, b - a)
        })
        .collect()
}

/// Commits `position` as the records' fill checkpoint (`None`: the pass is done).
async fn record_fill(p: Parts<'_>, position: Option<u64>) -> VolumeResult<()> {
    let mut rec = p.records.lock().await;
    let fill = position.map(|position_bytes| ChecksumFill { position_bytes });
    if rec.checksum_fill == fill {
        return Ok(());
    }
    rec.checksum_fill = fill;
    p.records.commit(&mut rec).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_split_at_region_ends_and_cover_every_region_once() {
        let r = |role, at, len| Placed {
            role,
            start: 1 << 20,
            len,
            at,
        };
        let placed = [r(0, 0, 12288), r(1, 12288, 8192)];
        assert_eq!(
            pieces(&placed, 8192, 8192),
            vec![(placed[0], 8192, 4096), (placed[1], 0, 4096)]
        );
        assert_eq!(pieces(&placed, 16384, 4096), vec![(placed[1], 4096, 4096)]);
        assert!(pieces(&placed, 20480, 4096).is_empty());
    }
}
