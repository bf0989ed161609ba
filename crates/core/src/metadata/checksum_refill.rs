//! The pass that gives back the per-block checksums an unclean start dropped.
//!
//! At an unclean start the entries of every page group the checksum header marked are
//! dropped (`crate::checksum`'s crash rule: they may lag their data). Left so, the blocks
//! written in the run before the crash — often the hottest data — read unchecked until each
//! is written again. This pass covers exactly those groups again, on every member region,
//! from the bytes the member holds ([`crate::checksum::cover`], as the entries' half of the
//! fill does: under the blocks' write lock, only "no checksum" entries filled, so writes
//! during the pass set their own entries as always).
//!
//! - **After the resync.** Nothing is covered before the start's resync is done: the
//!   foreground one is, by the time the array serves; a background one is waited for. A
//!   region covered before its copies or parity agree would give checksums to one side of
//!   a disagreement.
//! - **Current members only.** A member not current (failed, being rebuilt, re-added) is
//!   skipped and its bytes counted: a rebuild writes every entry of its role itself.
//! - **No checkpoint, no new record field.** The groups are the header's bits, read at
//!   the open, and the header keeps them until a clean start. While the pass runs the
//!   records stay dirty ([`super::Array::mark_clean`] declines), so a crash or a stop
//!   before the end makes the next start unclean again: it drops the same groups (and those
//!   written since) and this pass covers them again from the beginning.
//! - **Not with the fill.** A volume whose `checksums = "enable"` pass is recorded
//!   unfinished has nothing to do here: that pass's entries' half covers every region.

use super::error::ArrayError;
use super::parts::Parts;
use super::resync::BackgroundResync;
use crate::checksum::{cover, ChecksumSetup, LeafChecksums, BLOCK_BYTES};
use crate::error::VolumeResult;
use crate::pace::PassRate;
use crate::pass::{PassControl, PassState, PassWork};
use futures::FutureExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

/// Region bytes covered at a time (one member read per window and region).
const WINDOW_BYTES: u64 = 1 << 20;

/// How often the pass looks whether the background resync is done.
const RESYNC_POLL: Duration = Duration::from_millis(50);

/// The control and progress of the pass, shared (an `Arc`) with whoever watches it.
#[derive(Debug, Default)]
pub struct RefillControl {
    /// Over the dropped bytes of every region, laid end to end in role order.
    pub pass: PassControl,
    /// Waiting for the background resync before covering anything.
    waiting: AtomicBool,
    /// Entries given back ("no checksum" before).
    pub filled_blocks: AtomicU64,
    /// Dropped bytes left without entries: the member was not current or did not read.
    pub skipped_bytes: AtomicU64,
}

/// What the pass did so far.
#[derive(Clone, Debug)]
pub struct RefillReport {
    pub state: PassState,
    /// Waiting for the background resync to finish.
    pub waiting_for_resync: bool,
    pub position_bytes: u64,
    pub total_bytes: u64,
    pub rate_limit_bytes_per_s: u64,
    pub rate_bytes_per_s: u64,
    pub filled_blocks: u64,
    pub skipped_bytes: u64,
    /// Blocks whose entries were dropped and not given back (yet): at most this many read
    /// unchecked (a block written since has its entry again).
    pub unchecked_blocks: u64,
}

impl RefillControl {
    /// A control for the pass at `rate`.
    pub fn with_rate(rate: PassRate) -> RefillControl {
        RefillControl {
            pass: PassControl::with_rate(rate),
            ..RefillControl::default()
        }
    }

    pub fn report(&self) -> RefillReport {
        let (position, total) = (self.pass.position_bytes(), self.pass.total_bytes());
        let skipped = self.skipped_bytes.load(Relaxed);
        RefillReport {
            state: self.pass.state(),
            waiting_for_resync: self.waiting.load(Relaxed),
            position_bytes: position.min(total),
            total_bytes: total,
            rate_limit_bytes_per_s: self.pass.rate_limit_bytes_per_s(),
            rate_bytes_per_s: self.pass.measured_bytes_per_s(),
            filled_blocks: self.filled_blocks.load(Relaxed),
            skipped_bytes: skipped,
            unchecked_blocks: (total.saturating_sub(position) + skipped) / BLOCK_BYTES,
        }
    }
}

/// The array's part: whether a pass begun has not finished (see the module docs).
#[derive(Default)]
pub(super) struct Refill {
    /// Begun and not done: no clean point until it is.
    pending: AtomicBool,
}

/// Dropped bytes of one region, placed in the pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Span {
    /// Index into the pass's regions.
    region: usize,
    /// Where the bytes begin in the region.
    offset: u64,
    len: u64,
    /// Where they begin in the pass.
    at: u64,
}

/// The regions the pass covers: role, the region's checksums.
type Regions = Vec<(usize, Arc<LeafChecksums>)>;

impl Refill {
    /// Whether a pass begun has not finished: the records must stay dirty.
    pub(super) fn pending(&self) -> bool {
        self.pending.load(SeqCst)
    }

    /// Whether this open dropped entries the pass should give back: an unclean start of a
    /// volume with checksums.
    pub(super) fn wanted(p: Parts<'_>) -> bool {
        (p.volume.options().checksums.as_ref()).is_some_and(|s| !s.opened_clean())
    }

    /// Runs the pass to the end (or until the control cancels it): the dropped groups
    /// found, the background resync waited for, then covered. Nothing dropped: done at once.
    pub(super) async fn run(
        &self,
        p: Parts<'_>,
        background: &BackgroundResync,
        ctl: &RefillControl,
    ) -> Result<PassState, ArrayError> {
        let setup = p.volume.options().checksums.as_ref();
        let Some(setup) = setup.filter(|_| Refill::wanted(p)) else {
            ctl.pass.nothing_to_do();
            return Ok(PassState::Done);
        };
        let fill = p.records.lock().await.checksum_fill;
        if fill.is_some() {
            ctl.pass.nothing_to_do(); // the fill's entries' half covers every region
            return Ok(PassState::Done);
        }
        let (regions, spans) = dropped(p, setup).await;
        let total = spans.last().map_or(0, |s| s.at + s.len);
        if total == 0 {
            ctl.pass.nothing_to_do();
            return Ok(PassState::Done);
        }
        ctl.pass.set_total(total);
        self.pending.store(true, SeqCst);
        {
            // A restart before the end must start unclean, to drop these groups again.
            let mut rec = p.records.lock().await;
            if !p.records.is_dirty() {
                p.records.mark_dirty(&mut rec).await?;
            }
        }
        tracing::warn!(
            "volume {}: {total} bytes of member regions lost their per-block checksums at the unclean start: computing them again once the resync is done",
            p.name()
        );
        if !wait_for_resync(background, ctl).await {
            return Ok(PassState::Cancelled);
        }
        let state = cover_spans(p, ctl, &regions, &spans).await?;
        if state == PassState::Done {
            self.pending.store(false, SeqCst);
            tracing::info!(
                "volume {}: the per-block checksums dropped at the unclean start are back: {} entries computed, {} bytes skipped",
                p.name(),
                ctl.filled_blocks.load(Relaxed),
                ctl.skipped_bytes.load(Relaxed)
            );
        }
        Ok(state)
    }
}

/// Every region not failed, with its dropped bytes laid end to end in role order (a region
/// whose header does not read is left out, said in the log).
async fn dropped(p: Parts<'_>, setup: &ChecksumSetup) -> (Regions, Vec<Span>) {
    let mut members = Vec::new();
    p.volume
        .geometry()
        .root()
        .visit_members(&mut |m| members.push((m.index, m.start, m.len)));
    members.sort_unstable();
    let (mut regions, mut spans, mut at) = (Vec::new(), Vec::new(), 0);
    for (role, start, len) in members {
        if p.volume.member_is_failed(role) {
            continue;
        }
        let Some(cs) = setup.for_region(role, start, len) else {
            continue;
        };
        let ranges = match setup.dropped_at_open(&cs, &*p.volume.member(role)).await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!("volume {}: member {role}: reading its checksum header: {e}; its dropped checksums are not computed again", p.name());
                continue;
            }
        };
        for (offset, len) in ranges {
            let region = regions.len();
            spans.push(Span {
                region,
                offset,
                len,
                at,
            });
            at += len;
        }
        regions.push((role, cs));
    }
    (regions, spans)
}

/// Waits while the background resync is pending; `false`: cancelled meanwhile.
async fn wait_for_resync(background: &BackgroundResync, ctl: &RefillControl) -> bool {
    while background.pending() {
        if ctl.pass.is_cancelled() {
            ctl.waiting.store(false, Relaxed);
            return false;
        }
        ctl.waiting.store(true, Relaxed);
        crate::timer::sleep(RESYNC_POLL).await;
    }
    ctl.waiting.store(false, Relaxed);
    true
}

/// Covers `spans` on the pass machinery (rate, pause, cancel, progress).
async fn cover_spans(
    p: Parts<'_>,
    ctl: &RefillControl,
    regions: &Regions,
    spans: &[Span],
) -> VolumeResult<PassState> {
    let total = spans.last().map_or(0, |s| s.at + s.len);
    crate::pass::run(
        &ctl.pass,
        PassWork {
            total_bytes: total,
            window_bytes: WINDOW_BYTES,
            inflight: 2,
            window: Box::new(move |at, len| cover_window(p, ctl, regions, spans, at, len).boxed()),
            checkpoint_bytes: 0,
            checkpoint: Box::new(|_| futures::future::ready(Ok(())).boxed()),
            activity: Some(Box::new(move || p.volume.client_ops())),
            stale: None,
        },
    )
    .await
}

/// Covers the pass's bytes `at..at+len`; a member not current, or whose bytes do not read,
/// is skipped and counted.
async fn cover_window(
    p: Parts<'_>,
    ctl: &RefillControl,
    regions: &Regions,
    spans: &[Span],
    at: u64,
    len: u64,
) -> VolumeResult<()> {
    for (s, offset, n) in pieces(spans, at, len) {
        let (role, cs) = &regions[s.region];
        if !p.volume.member_is_current(*role) {
            ctl.skipped_bytes.fetch_add(n, Relaxed);
            continue;
        }
        match cover(cs, &*p.volume.member(*role), offset, n).await {
            Ok(filled) => ctl.filled_blocks.fetch_add(filled, Relaxed),
            Err(e) => {
                tracing::warn!("volume {}: member {role}: computing checksums again: {e}; those blocks stay unchecked until written", p.name());
                ctl.skipped_bytes.fetch_add(n, Relaxed)
            }
        };
    }
    Ok(())
}

/// The parts of `spans` under the pass's bytes `at..at+len`: (span, offset in its region,
/// bytes).
fn pieces(spans: &[Span], at: u64, len: u64) -> Vec<(Span, u64, u64)> {
    let end = at + len;
    (spans.iter())
        .filter(|s| s.at < end && at < s.at + s.len)
        .map(|s| {
            let a = at.max(s.at);
            let b = end.min(s.at + s.len);
            (*s, s.offset + (a - s.at), b - a)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_cut_spans_at_their_ends_and_map_into_their_regions() {
        let s = |region, offset, len, at| Span {
            region,
            offset,
            len,
            at,
        };
        // Two stretches of region 0, one of region 1.
        let spans = [
            s(0, 0, 8192, 0),
            s(0, 65536, 4096, 8192),
            s(1, 4096, 8192, 12288),
        ];
        assert_eq!(
            pieces(&spans, 4096, 8192),
            vec![(spans[0], 4096, 4096), (spans[1], 65536, 4096)]
        );
        assert_eq!(pieces(&spans, 12288, 1 << 20), vec![(spans[2], 4096, 8192)]);
        assert!(pieces(&spans, 20480, 4096).is_empty());
    }

    #[test]
    fn the_report_counts_what_is_left_and_what_was_skipped_as_unchecked() {
        let c = RefillControl::with_rate(PassRate::default());
        c.pass.set_total(10 * BLOCK_BYTES);
        c.pass.set_position(6 * BLOCK_BYTES);
        c.skipped_bytes.store(2 * BLOCK_BYTES, Relaxed);
        let r = c.report();
        assert_eq!(r.unchecked_blocks, 6);
        assert_eq!(
            (r.position_bytes, r.total_bytes),
            (6 * BLOCK_BYTES, 10 * BLOCK_BYTES)
        );
    }
}
