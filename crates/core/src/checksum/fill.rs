//! Computing the entries of blocks written before their volume had checksums (the second
//! half of enabling them on an existing volume: `metadata/checksum_fill.rs` walks every
//! region with [`cover`] once its scrub has made the redundancy agree).
//!
//! A block gets the checksum of the bytes its member holds *now*, read with the block held
//! as a write holds it ([`LeafChecksums::write_lock`]), so no write is in flight on it and an
//! entry a write set is never overwritten (only "no checksum" entries are filled). Why that
//! survives a power loss without marking the header: a page group with no write since the
//! volume was opened has its bytes on the member's media, so its filled entries match them
//! whenever their page reaches the disk; a group written since is marked in the header and
//! dropped at an unclean start like any other.

use super::{BlockSum, LeafChecksums, BLOCK_BYTES};
use crate::buf::Buf;
use crate::member::{Member, MemberResult};
use crate::pace::PassRate;
use crate::pass::{PassControl, PassState};
use crate::scrub::{ScrubControl, ScrubReport};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Fills the "no checksum" entries of the whole blocks of region bytes `offset..offset+len`
/// (both on 4 KiB blocks, inside the region) from what `m` holds there; returns how many.
pub async fn cover(cs: &LeafChecksums, m: &dyn Member, offset: u64, len: u64) -> MemberResult<u64> {
    assert!(
        offset.is_multiple_of(BLOCK_BYTES) && len.is_multiple_of(BLOCK_BYTES),
        "entries cover whole blocks"
    );
    assert!(offset + len <= cs.len_bytes, "inside the region");
    if len == 0 {
        return Ok(0);
    }
    let _held = cs.write_lock(offset, offset + len).await;
    let start = cs.first_block * BLOCK_BYTES;
    let bytes = m.read(start + offset, Buf::new(len as usize)).await?;
    let computed = cs.compute(offset, &[&bytes]);
    cs.open(m).await?;
    let first = offset / BLOCK_BYTES;
    let mut filled = 0;
    cs.each_page(m, first, first + computed.len() as u64, |t, blocks| {
        for block in blocks {
            if t.entry(block) == BlockSum::Unknown {
                t.set_entry(block, computed[(block - first) as usize]);
                filled += 1;
            }
        }
    })
    .await?;
    Ok(filled)
}

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
            filled_blocks: AtomicU64::new(0),
            skipped_bytes: AtomicU64::new(0),
        };
        c.set_pass_rate(rate);
        c.scrub.pass.set_position(position_bytes);
        c
    }

    /// Splits a position of the whole pass into the scrub's and the entries' positions, for
    /// a volume of `volume_bytes` (the pass sets it when it starts).
    pub(crate) fn place(&self, position_bytes: u64, volume_bytes: u64) {
        self.volume_bytes.store(volume_bytes, Relaxed);
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
        self.scrub.cancel();
        self.entries.cancel();
    }

    pub fn state(&self) -> PassState {
        match self.phase() {
            FillPhase::Scrub => self.scrub.state(),
            FillPhase::Entries => self.entries.state(),
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
            v => v + self.entries.total_bytes(),
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
