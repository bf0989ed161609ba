//! Scrub: a streaming pass over a volume that reads every stripe of every parity group and
//! every copy of every mirror, checks that the redundancy agrees with the data, and — with
//! `repair` — rewrites what the redundancy can prove wrong.
//!
//! # Shape
//! [`Volume::scrub`] walks the volume's address space in windows of [`SCRUB_WINDOW_BYTES`]
//! and hands each window to the root node's [`crate::node::NodeMaintenance::scrub_range`]. Split nodes pass the
//! pieces on to their children; parity groups (`raid/scrub.rs`) and mirrors
//! (`mirror/scrub.rs`) check what they *own* in the range, after their children did. A parity
//! group owns the stripes whose first byte lies in the range, so every stripe of the tree is
//! checked exactly once whatever the windows, even under a split node whose pieces cut
//! stripes. A leaf no parity group or mirror stands over (a RAID 0 or JBOD member, a bare
//! leaf beside parity groups in a tree) is read by nobody else, so it reads its piece itself,
//! through its checksums (`node/leaf/scrub.rs`): a bad block is found, counted unreadable and
//! left (nothing to rebuild it from); leaves under an owner read nothing of their own
//! ([`ScrubPass::owner_above`]). Up to [`SCRUB_INFLIGHT`] windows are in flight at once (disjoint: each stripe is
//! still checked once); memory is bounded by them (times the copies or the stripe's parity
//! share). A parity group reads each child's rows of the window in one member read and
//! checks them in memory, and only a stripe that disagrees (or a window with anything
//! unusual in it: a read error, a lost child, a stale stripe) goes the stripe-by-stripe way
//! that diagnoses and repairs; a mirror reads each copy of the window in one read.
//!
//! Each node takes its own range lock like any writer (parity groups: the stripe, shared for a
//! check and exclusive for a repair; mirrors: the byte range, exclusive, since user writes to
//! a mirror hold it shared and copies are only comparable between them), so a scrub is safe
//! under concurrent client I/O and never changes bytes a client wrote.
//!
//! # What repair can prove
//! - RAID 6, on a stripe whose parity is known in sync: the P and Q syndromes locate a single
//!   corrupt chunk ([`locate`], md's raid6check idea): data chunk *z* when
//!   `Q_syndrome = g^z · P_syndrome` at every differing byte, P alone when only P differs, Q
//!   alone when only Q differs. That chunk is rewritten. Each 4 KiB row of the stripe is
//!   located on its own, as md checks page by page: chunks wrong in different rows are each
//!   named in theirs (the whole stripe's syndromes would name none).
//! - RAID 6 rows no single chunk explains, RAID 5 (one syndrome cannot say
//!   which chunk is wrong), and any stripe whose parity is not known in sync (after an
//!   unclean start its parity may legitimately be behind its data: the write hole): parity is
//!   regenerated from the data, as md's `repair` does. Data is never rewritten on a guess.
//! - RAID 6 with one child lost (a failed member): the lost chunk is rebuilt as reads
//!   rebuild it (a data chunk from P, parity from the data) and the syndrome left checks the
//!   stripe. One syndrome cannot locate a wrong chunk, so a mismatch regenerates the
//!   surviving parity the rebuild did not come from (Q; P when Q is the one lost): what
//!   reads serve is kept, as for RAID 5. The stripe's parity is not marked in sync then.
//! - A stripe with as many children lost as parity chunks (RAID 5 or a two-way mirror with
//!   one out, RAID 6 with two) has nothing to check against: it is skipped, and counted so
//!   ([`SkipReason::NoRedundancy`]; a stripe whose parity is stale, [`SkipReason::StaleParity`]).
//!   What survives of it is still read: a block that does not read (or fails its checksum)
//!   is counted unreadable and named, unrepairable — data already lost, said before a
//!   rebuild trips on it.
//! - Mirrors: a majority of ≥ 3 readable copies wins (voting); two copies that disagree
//!   cannot say which is right, so the first readable copy is copied over the others (md's
//!   rule); with ≥ 3 copies and no majority nothing is rewritten (reported only).
//! - A chunk or copy that does not read (an I/O error, or a block whose checksum does not
//!   match: the checksums name the wrong side, which a RAID 5 syndrome or two copies cannot)
//!   is counted unreadable and read again block by block; a mirror rewrites each bad block
//!   from a copy that read it, a parity group rebuilds each row of blocks with at most its
//!   parity count of bad ones (lost children count too) and rewrites them once the rebuilt
//!   bytes match their checksum (RAID 6 with a syndrome to spare checks the rebuilt row
//!   against it too: the cross-check). A row with more bad blocks is left as it is
//!   (unrepairable).
//!
//! # Report
//! Besides the counts, every bad place is a finding ([`ScrubFinding`]): member, member offset,
//! length, what was wrong and what was done, RAID 6's cross-check; logged with the volume's
//! name and kept per member up to [`FINDINGS_PER_MEMBER_MAX`] (the rest only counted), so a
//! rotten disk costs a bounded report. [`ScrubControl::findings`] gives them. What could not
//! be checked is counted skipped, with its reason ([`ScrubReport::skipped_no_redundancy`],
//! [`ScrubReport::skipped_stale`]).
//!
//! # Control
//! A [`ScrubControl`] is shared (an `Arc`) between the scrub and whoever watches it: progress
//! (position and total bytes), counts, a rate limit in bytes/s that may change while it runs,
//! pause and cancel. A cancelled scrub keeps its position: calling [`Volume::scrub`] again
//! with the same control resumes there.

use crate::parity::gf;
use crate::pass::{PassControl, PassState};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

/// Logical bytes a scrub hands to the tree at a time.
pub const SCRUB_WINDOW_BYTES: u64 = 4 << 20;

/// Scrub windows in flight at most: while one window's rows are checked in memory the next
/// ones' reads keep the members busy (with one, every member idled during each check).
pub const SCRUB_INFLIGHT: usize = 4;

/// Member bytes the scrub's windows in flight may hold together. The buffer pool keeps 32
/// MiB per size class; past that every window's buffers are fresh memory, zeroed and
/// faulted in (the rebuild bench measured that quadrupling the CPU per GiB).
pub const SCRUB_BUFFER_BYTES: u64 = 32 << 20;

/// Windows of `window_bytes` a scrub keeps in flight over a volume whose members hold
/// `member_bytes` in all for its `capacity_bytes` (each window reads its share of every
/// member: the copies of a mirror, the parity of a stripe): as many as
/// [`SCRUB_BUFFER_BYTES`] holds, at least one, at most [`SCRUB_INFLIGHT`].
pub fn scrub_inflight(window_bytes: u64, member_bytes: u64, capacity_bytes: u64) -> usize {
    let per_window = (window_bytes as u128 * member_bytes as u128)
        .div_ceil(capacity_bytes.max(1) as u128)
        .max(1);
    let fit = u128::from(SCRUB_BUFFER_BYTES) / per_window;
    (fit.min(SCRUB_INFLIGHT as u128) as usize).max(1)
}

pub use crate::node::scrub_findings::{
    CrossCheck, MemberFindings, ScrubAction, ScrubFinding, ScrubFindings, ScrubFound,
    FINDINGS_PER_MEMBER_MAX,
};
pub use crate::node::{ScrubPass, ScrubStats, SkipReason, MIRROR_SCRUB_BLOCK_BYTES};

/// Where a scrub is (the state of its [`crate::pass`]).
pub type ScrubState = PassState;

/// A scrub's shared control and progress.
#[derive(Debug, Default)]
pub struct ScrubControl {
    repair: AtomicBool,
    /// Position, rate, pause and cancel (the pass machinery shared with rebuild).
    pub pass: PassControl,
    pub stats: ScrubStats,
    /// The volume's name for the log lines (set by `Array::scrub`; empty on a bare volume).
    volume: std::sync::OnceLock<String>,
    /// Where this control's counts begin: a scrub resumed after a restart counts from its
    /// checkpoint (what it found before is not recorded).
    counted_from_bytes: u64,
}

/// A copy of a scrub's progress and counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScrubReport {
    pub state: ScrubState,
    pub repair: bool,
    pub position_bytes: u64,
    pub total_bytes: u64,
    pub rate_limit_bytes_per_s: u64,
    /// Yields to client I/O ([`crate::pace`]).
    pub adaptive: bool,
    /// Measured over the current run.
    pub rate_bytes_per_s: u64,
    pub checked: u64,
    pub mismatches: u64,
    pub repaired: u64,
    pub unreadable: u64,
    /// Stripes or blocks not checked (the two counts below say why).
    pub skipped: u64,
    /// Skipped with no redundancy left: members under them failed.
    pub skipped_no_redundancy: u64,
    /// Skipped because their parity is stale.
    pub skipped_stale: u64,
    /// Where the counts above begin (0: the whole scrub; after a restart, where it resumed).
    pub counted_from_bytes: u64,
}

impl ScrubReport {
    /// Seconds left at the measured rate, when it is known.
    pub fn eta_s(&self) -> Option<u64> {
        (self.rate_bytes_per_s > 0 && self.state == ScrubState::Running)
            .then(|| self.total_bytes.saturating_sub(self.position_bytes) / self.rate_bytes_per_s)
    }
}

impl ScrubControl {
    /// A control for a scrub from byte 0; `repair` rewrites what redundancy proves wrong,
    /// `rate_bytes_per_s` limits it (0: unlimited).
    pub fn new(repair: bool, rate_bytes_per_s: u64) -> ScrubControl {
        ScrubControl::resume_at(repair, rate_bytes_per_s, 0)
    }

    /// A control that resumes at `position_bytes` (counts start from zero).
    pub fn resume_at(repair: bool, rate_bytes_per_s: u64, position_bytes: u64) -> ScrubControl {
        ScrubControl {
            repair: AtomicBool::new(repair),
            pass: PassControl::resume_at(rate_bytes_per_s, position_bytes),
            stats: ScrubStats::default(),
            volume: std::sync::OnceLock::new(),
            counted_from_bytes: position_bytes,
        }
    }

    /// Names the volume in the scrub's log lines (the first name given stays).
    pub fn set_volume(&self, name: &str) {
        let _ = self.volume.set(name.to_string());
    }

    /// The volume's name for the log lines.
    pub(crate) fn volume(&self) -> &str {
        self.volume.get().map_or("", String::as_str)
    }

    /// What the scrub found where so far, per member (the first
    /// [`FINDINGS_PER_MEMBER_MAX`] of each, and counts).
    pub fn findings(&self) -> ScrubFindings {
        self.stats.findings.lock().clone()
    }

    /// Whether the scrub rewrites what redundancy proves wrong.
    pub(crate) fn repair(&self) -> bool {
        self.repair.load(Relaxed)
    }

    pub fn set_rate(&self, bytes_per_s: u64) {
        self.pass.set_rate(bytes_per_s);
    }

    pub fn pause(&self) {
        self.pass.pause();
    }

    pub fn resume(&self) {
        self.pass.resume();
    }

    /// Stops the scrub after its current window; the position is kept.
    pub fn cancel(&self) {
        self.pass.cancel();
    }

    pub fn is_paused(&self) -> bool {
        self.pass.is_paused()
    }

    pub fn state(&self) -> ScrubState {
        self.pass.state()
    }

    pub fn report(&self) -> ScrubReport {
        let s = &self.stats;
        ScrubReport {
            state: self.state(),
            repair: self.repair.load(Relaxed),
            position_bytes: self.pass.position_bytes(),
            total_bytes: self.pass.total_bytes(),
            rate_limit_bytes_per_s: self.pass.rate_limit_bytes_per_s(),
            adaptive: self.pass.is_adaptive(),
            rate_bytes_per_s: self.pass.measured_bytes_per_s(),
            checked: s.checked.load(Relaxed),
            mismatches: s.mismatches.load(Relaxed),
            repaired: s.repaired.load(Relaxed),
            unreadable: s.unreadable.load(Relaxed),
            skipped: s.skipped.load(Relaxed),
            skipped_no_redundancy: s.skipped_no_redundancy.load(Relaxed),
            skipped_stale: s.skipped_stale.load(Relaxed),
            counted_from_bytes: self.counted_from_bytes,
        }
    }
}

/// Which chunk of a RAID 6 stripe the P and Q syndromes blame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Culprit {
    /// P and Q match the data.
    None,
    P,
    Q,
    /// The data chunk in Q syndrome slot `z` (md's order), by `e ⊕= P_syndrome`.
    Slot(usize),
    /// More than one chunk is wrong (or the syndromes point outside the stripe).
    Unknown,
}

/// Locates a single corrupt chunk from the syndromes `ps = P ⊕ P(data)` and
/// `qs = Q ⊕ Q(data)` of a stripe with `k` data chunks: one culprit must explain every byte.
/// An error `e` in the data chunk of slot z gives `ps = e` and `qs = g^z·e`, so
/// `z = log qs − log ps`; only P (only Q) differing blames P (Q).
pub fn locate(ps: &[u8], qs: &[u8], k: usize) -> Culprit {
    assert_eq!(ps.len(), qs.len(), "syndromes of one stripe");
    let mut found = Culprit::None;
    for (&p, &q) in ps.iter().zip(qs) {
        let this = match (p, q) {
            (0, 0) => continue,
            (_, 0) => Culprit::P,
            (0, _) => Culprit::Q,
            (p, q) => {
                let z = (255 + gf::LOG[q as usize] as usize - gf::LOG[p as usize] as usize) % 255;
                if z < k {
                    Culprit::Slot(z)
                } else {
                    return Culprit::Unknown;
                }
            }
        };
        match found {
            Culprit::None => found = this,
            f if f == this => {}
            _ => return Culprit::Unknown,
        }
    }
    found
}

/// The copy whose bytes a strict majority of `copies` share, if any.
pub fn majority(copies: &[&[u8]]) -> Option<usize> {
    let n = copies.len();
    (0..n).find(|&i| copies.iter().filter(|c| **c == copies[i]).count() * 2 > n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parity;

    fn stripe(k: usize, len: usize, seed: u8) -> Vec<Vec<u8>> {
        (0..k)
            .map(|i| {
                (0..len)
                    .map(|j| (j as u8).wrapping_mul(31) ^ seed ^ (i as u8 * 17))
                    .collect()
            })
            .collect()
    }

    fn syndromes(data: &[Vec<u8>], p: &[u8], q: &[u8]) -> (Vec<u8>, Vec<u8>) {
        let refs: Vec<&[u8]> = data.iter().map(|d| &d[..]).collect();
        let mut p2 = vec![0; p.len()];
        let mut q2 = vec![0; q.len()];
        parity::pq_gen(&refs, &mut p2, &mut q2);
        let ps = p.iter().zip(&p2).map(|(a, b)| a ^ b).collect();
        let qs = q.iter().zip(&q2).map(|(a, b)| a ^ b).collect();
        (ps, qs)
    }

    #[test]
    fn locate_blames_each_single_corrupt_chunk() {
        let k = 6;
        let data = stripe(k, 4096, 5);
        let refs: Vec<&[u8]> = data.iter().map(|d| &d[..]).collect();
        let mut p = vec![0; 4096];
        let mut q = vec![0; 4096];
        parity::pq_gen(&refs, &mut p, &mut q);
        let (ps, qs) = syndromes(&data, &p, &q);
        assert_eq!(locate(&ps, &qs, k), Culprit::None);
        for z in 0..k {
            let mut bad = data.clone();
            bad[z][100] ^= 0x5a;
            bad[z][3000] ^= 0x01;
            let (ps, qs) = syndromes(&bad, &p, &q);
            assert_eq!(locate(&ps, &qs, k), Culprit::Slot(z));
            // Repair by the P syndrome restores the original.
            for (b, s) in bad[z].iter_mut().zip(&ps) {
                *b ^= s;
            }
            assert_eq!(bad[z], data[z]);
        }
        let mut bp = p.clone();
        bp[7] ^= 0xff;
        let (ps, qs) = syndromes(&data, &bp, &q);
        assert_eq!(locate(&ps, &qs, k), Culprit::P);
        let mut bq = q.clone();
        bq[9] ^= 0x10;
        let (ps, qs) = syndromes(&data, &p, &bq);
        assert_eq!(locate(&ps, &qs, k), Culprit::Q);
        // Two data chunks wrong at different bytes: no single culprit.
        let mut two = data.clone();
        two[1][10] ^= 3;
        two[4][20] ^= 9;
        let (ps, qs) = syndromes(&two, &p, &q);
        assert_eq!(locate(&ps, &qs, k), Culprit::Unknown);
        // P wrong at one byte and data at another: no single culprit either.
        let mut d1 = data.clone();
        d1[2][50] ^= 1;
        let (ps, qs) = syndromes(&d1, &bp, &q);
        assert_eq!(locate(&ps, &qs, k), Culprit::Unknown);
    }

    /// Windows in flight fit the buffer budget: a two-way mirror or a parity group keeps the
    /// most, a four-way mirror (four copies of every window) half as many, and a window
    /// larger than the budget still moves.
    #[test]
    fn scrub_inflight_fits_the_buffer_budget() {
        let w = SCRUB_WINDOW_BYTES;
        let gib = 1u64 << 30;
        assert_eq!(scrub_inflight(w, 2 * gib, gib), 4); // RAID 1 x2
        assert_eq!(scrub_inflight(w, 4 * gib, gib), 2); // RAID 1 x4
        assert_eq!(scrub_inflight(w, 4 * gib, 3 * gib), 4); // RAID 5 x4
        assert_eq!(scrub_inflight(w, 8 * gib, 6 * gib), 4); // RAID 6 x8
        assert_eq!(scrub_inflight(w, 16 * gib, gib), 1); // RAID 1 x16
        assert_eq!(scrub_inflight(64 << 20, 2 * gib, gib), 1);
        assert_eq!(scrub_inflight(w, 0, 0), SCRUB_INFLIGHT);
    }

    #[test]
    fn majority_needs_more_than_half() {
        let a = [1u8, 2, 3];
        let b = [1u8, 2, 4];
        let c = [9u8, 9, 9];
        assert_eq!(majority(&[&a, &a, &b]), Some(0));
        assert_eq!(majority(&[&b, &a, &a]), Some(1));
        assert_eq!(majority(&[&a, &b, &c]), None);
        assert_eq!(majority(&[&a, &b]), None);
        assert_eq!(majority(&[&a, &a]), Some(0));
    }
}
