//! The control and report of the pass that computes the checksums of a volume that enabled
//! them (`checksum_fill.rs` runs it): two halves, a scrub then the entries, behind one
//! position, rate, pause and cancel.

use crate::pace::PassRate;
use crate::pass::{PassControl, PassState};
use crate::scrub::{ScrubControl, ScrubReport};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

/// Which half of the pass is running: the scrub that makes the redundancy agree, then the
/// walk over every member region that fills the entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FillPhase {
    Scrub,
    Entries,
}

impl FillPhase {
    pub fn name(self) -> &'static str {
        match self {
            FillPhase::Scrub => "scrub",
            FillPhase::Entries => "entries",
        }
    }
}

/// The control of the pass that computes an existing volume's checksums, shared (an `Arc`)
/// with whoever watches it. Positions run over the volume (the scrub) and then over its
/// member regions in role order (the entries); see `metadata/checksum_fill.rs`.
#[derive(Debug)]
pub struct FillControl {
    /// The first half: a scrub that repairs (md's rule where the redundancy cannot say).
    pub scrub: ScrubControl,
    /// The second half, over the member regions laid end to end.
    pub entries: PassControl,
    /// Bytes of the volume (where the entries' positions start).
    volume_bytes: AtomicU64,
    /// Bytes of the member regions (the entries' half).
    regions_bytes: AtomicU64,
    /// Cancelled by whoever watches it (each half's control forgets a cancel when it
    /// starts: this one stops the pass between them too).
    cancelled: AtomicBool,
    /// Entries filled ("no checksum" before).
    pub filled_blocks: AtomicU64,
    /// Region bytes left without entries: the member was not current or did not read.
    pub skipped_bytes: AtomicU64,
}

/// What the pass did so far.
#[derive(Clone, Debug)]
pub struct FillReport {
    pub state: PassState,
    pub phase: FillPhase,
    /// Over the whole pass (the volume, then its regions).
    pub position_bytes: u64,
    pub total_bytes: u64,
    pub rate_limit_bytes_per_s: u64,
    pub rate_bytes_per_s: u64,
    /// The first half's counts (mismatches found, repaired, unreadable).
    pub scrub: ScrubReport,
    pub filled_blocks: u64,
    pub skipped_bytes: u64,
}

impl FillControl {
    /// A control that resumes at `position_bytes` of the whole pass, at `rate`.
    pub fn resume_at(rate: PassRate, position_bytes: u64) -> FillControl {
        let c = FillControl {
            scrub: ScrubControl::resume_at(true, 0, 0),
            entries: PassControl::new(0),
            volume_bytes: AtomicU64::new(u64::MAX),
            regions_bytes: AtomicU64::new(0),
            cancelled: AtomicBool::new(false),
            filled_blocks: AtomicU64::new(0),
            skipped_bytes: AtomicU64::new(0),
        };
        c.set_pass_rate(rate);
        c.scrub.pass.set_position(position_bytes);
        c
    }

    /// Splits a position of the whole pass into the scrub's and the entries' positions, for
    /// a volume of `volume_bytes` over regions of `regions_bytes` (the pass sets them when it
    /// starts; a cancel before is forgotten).
    pub(crate) fn place(&self, position_bytes: u64, volume_bytes: u64, regions_bytes: u64) {
        self.cancelled.store(false, Relaxed);
        self.volume_bytes.store(volume_bytes, Relaxed);
        self.regions_bytes.store(regions_bytes, Relaxed);
        self.scrub
            .pass
            .set_position(position_bytes.min(volume_bytes));
        (self.entries).set_position(position_bytes.saturating_sub(volume_bytes));
    }

    /// Where the whole pass is (as [`FillControl::resume_at`] takes it).
    pub fn position_bytes(&self) -> u64 {
        let v = self.volume_bytes.load(Relaxed);
        match self.phase() {
            FillPhase::Scrub => self.scrub.pass.position_bytes(),
            FillPhase::Entries => v + self.entries.position_bytes(),
        }
    }

    pub fn phase(&self) -> FillPhase {
        let v = self.volume_bytes.load(Relaxed);
        if v != u64::MAX && self.scrub.pass.position_bytes() >= v {
            FillPhase::Entries
        } else {
            FillPhase::Scrub
        }
    }

    pub fn set_pass_rate(&self, rate: PassRate) {
        self.scrub.pass.set_pass_rate(rate);
        self.entries.set_pass_rate(rate);
    }

    pub fn pause(&self) {
        self.scrub.pause();
        self.entries.pause();
    }

    pub fn resume(&self) {
        self.scrub.resume();
        self.entries.resume();
    }

    /// Stops the pass after its windows in flight; the checkpoint stays recorded, so the
    /// next start resumes it.
    pub fn cancel(&self) {
        self.cancelled.store(true, Relaxed);
        self.scrub.cancel();
        self.entries.cancel();
    }

    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(Relaxed)
    }

    pub fn state(&self) -> PassState {
        let s = match self.phase() {
            FillPhase::Scrub => self.scrub.state(),
            FillPhase::Entries => self.entries.state(),
        };
        match s {
            // Cancelled between the halves.
            PassState::Idle if self.is_cancelled() => PassState::Cancelled,
            s => s,
        }
    }

    pub fn report(&self) -> FillReport {
        let pass = match self.phase() {
            FillPhase::Scrub => &self.scrub.pass,
            FillPhase::Entries => &self.entries,
        };
        let v = self.volume_bytes.load(Relaxed);
        let total = match v {
            u64::MAX => 0,
            v => v + self.regions_bytes.load(Relaxed),
        };
        FillReport {
            state: self.state(),
            phase: self.phase(),
            position_bytes: self.position_bytes().min(total),
            total_bytes: total,
            rate_limit_bytes_per_s: pass.rate_limit_bytes_per_s(),
            rate_bytes_per_s: pass.measured_bytes_per_s(),
            scrub: self.scrub.report(),
            filled_blocks: self.filled_blocks.load(Relaxed),
            skipped_bytes: self.skipped_bytes.load(Relaxed),
        }
    }
}
