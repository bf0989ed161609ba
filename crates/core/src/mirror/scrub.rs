//! Scrubbing a mirror: every readable copy of the range is read under the range's exclusive
//! lock (user writes hold it shared, so no write is half-way across the copies) and compared
//! block by block; see [`crate::scrub`] for what repair rewrites and why. A copy that fails
//! to read is read again in 4 KiB units, so a bad block (an I/O error, or a checksum that
//! does not match) costs only itself: it is rewritten from a copy that read it, and the rest
//! of the copy is still compared.

use super::MirrorNode;
use crate::buf::Buf;
use crate::error::VolumeResult;
use crate::node::{all_ok, read_back, ScrubPass, SkipReason};
use crate::scrub::{majority, ScrubAction, ScrubFinding, ScrubFound, MIRROR_SCRUB_BLOCK_BYTES};
use futures::future::join_all;
use std::ops::Range;

/// The unit a copy that failed to read is read again in (the checksums' block).
const UNIT_BYTES: u64 = 4096;

/// One copy's bytes of the range and which units of it read.
struct CopyRead {
    child: usize,
    buf: Buf,
    /// By unit of [`UNIT_BYTES`]: whether it read.
    ok: Vec<bool>,
    /// By unit: what went wrong with one that did not read.
    why: Vec<Option<ScrubFound>>,
    /// The member whose read error of the copy counts toward `max_read_errors`
    /// ([`crate::read_errors::counted_member`]), if its read erred with one.
    counted: Option<usize>,
}

impl CopyRead {
    /// Whether every unit of bytes `lo..hi` of the range read.
    fn whole(&self, lo: usize, hi: usize) -> bool {
        let unit = UNIT_BYTES as usize;
        self.ok[lo / unit..hi.div_ceil(unit)].iter().all(|&k| k)
    }
}

impl MirrorNode {
    /// Scrubs `[offset, offset+len)`: the copies' own redundancy first (a copy may be a
    /// parity group), then the copies against each other, block by block.
    pub(super) async fn scrub_copies(
        &self,
        offset: u64,
        len: u64,
        pass: &ScrubPass<'_>,
    ) -> VolumeResult<()> {
        self.scrub_each_copy(offset, len, pass).await?;
        let _g = self.locks.lock(offset, len, true).await;
        let copies = self.read_copies(offset, len, pass).await;
        let block = MIRROR_SCRUB_BLOCK_BYTES as usize;
        for lo in (0..len as usize).step_by(block) {
            let hi = (lo + block).min(len as usize);
            self.compare_block(offset, lo..hi, &copies, pass).await;
        }
        Ok(())
    }

    /// Scrubs each copy's own redundancy, below this mirror.
    async fn scrub_each_copy(
        &self,
        offset: u64,
        len: u64,
        pass: &ScrubPass<'_>,
    ) -> VolumeResult<()> {
        let owned = pass.owned();
        let below = join_all(
            self.children
                .iter()
                .map(|c| c.scrub_range(offset, len, &owned)),
        )
        .await;
        all_ok(below)
    }

    /// Every readable copy's bytes of the range (the caller holds its exclusive lock); the
    /// units a copy could not read are counted, named and (repairing) rewritten from a copy
    /// that read them.
    async fn read_copies(&self, offset: u64, len: u64, pass: &ScrubPass<'_>) -> Vec<CopyRead> {
        let usable: Vec<usize> = (0..self.children.len())
            .filter(|&c| self.children[c].readable(offset, len))
            .collect();
        let copies = join_all(usable.iter().map(|&c| self.read_copy(c, offset, len))).await;
        let lost: usize = (copies.iter())
            .map(|c| c.ok.iter().filter(|&&k| !k).count())
            .sum();
        pass.bump(|s| &s.unreadable, lost as u64);
        if lost > 0 {
            self.rewrite_unreadable(offset, &copies, pass).await;
            self.count_corrected_copies(&copies);
        }
        copies
    }

    /// Compares bytes `block` of the range (at `offset + block.start` on the copies) across
    /// the copies that read all of it. A mismatch is named by the units that differ and
    /// (repairing) rewritten from the copy [`right_copy`] picks; with none picked, every
    /// copy is named and none rewritten.
    async fn compare_block(
        &self,
        offset: u64,
        block: Range<usize>,
        copies: &[CopyRead],
        pass: &ScrubPass<'_>,
    ) {
        let (lo, hi) = (block.start, block.end);
        let good: Vec<&CopyRead> = copies.iter().filter(|c| c.whole(lo, hi)).collect();
        if good.len() < 2 {
            // Nothing to compare against: a member under it has failed or erred.
            pass.skip(SkipReason::NoRedundancy);
            return;
        }
        let views: Vec<&[u8]> = good.iter().map(|c| &c.buf[lo..hi]).collect();
        pass.bump(|s| &s.checked, 1);
        if views.iter().all(|v| *v == views[0]) {
            return;
        }
        pass.bump(|s| &s.mismatches, 1);
        let (at, len) = (offset + lo as u64, (hi - lo) as u64);
        let Some(src) = right_copy(&views) else {
            for c in &good {
                let (found, action) = (ScrubFound::CopyDiffers, ScrubAction::Unrepairable);
                self.record(c.child, at, len, found, action, pass);
            }
            return;
        };
        let right = views[src].to_vec();
        for c in good.iter().filter(|c| c.buf[lo..hi] != right[..]) {
            let action = if pass.repair {
                self.rewrite(c.child, at, &right, pass).await
            } else {
                ScrubAction::NotRepaired
            };
            // Named by the units that differ, not the whole compared block.
            for u in differing_units(&c.buf[lo..hi], &right) {
                let (o, n) = (at + u.start as u64, u.len() as u64);
                self.record(c.child, o, n, ScrubFound::CopyDiffers, action, pass);
            }
        }
    }

    /// Copy `c`'s bytes of the range: whole, or (when that fails) unit by unit.
    async fn read_copy(&self, c: usize, offset: u64, len: u64) -> CopyRead {
        let units = len.div_ceil(UNIT_BYTES) as usize;
        let first = self.children[c].read(offset, Buf::new(len as usize)).await;
        let e = match first {
            Ok(buf) => {
                return CopyRead {
                    child: c,
                    buf,
                    ok: vec![true; units],
                    why: vec![None; units],
                    counted: None,
                }
            }
            Err(e) => e,
        };
        tracing::warn!("scrub: mirror copy {c}, bytes {offset}+{len}: {e}; reading it by block");
        let mut buf = Buf::zeroed(len as usize);
        let mut ok = vec![false; units];
        let mut why = vec![None; units];
        for (u, k) in ok.iter_mut().enumerate() {
            let lo = u as u64 * UNIT_BYTES;
            let n = UNIT_BYTES.min(len - lo);
            match self.children[c]
                .read(offset + lo, Buf::new(n as usize))
                .await
            {
                Ok(b) => {
                    buf[lo as usize..(lo + n) as usize].copy_from_slice(&b);
                    *k = true;
                }
                Err(e) => why[u] = Some(ScrubFound::of_read_error(&e)),
            }
        }
        CopyRead {
            child: c,
            buf,
            ok,
            why,
            counted: crate::read_errors::counted_member(&e),
        }
    }

    /// Every unit a copy could not read is a finding; repairing, it is rewritten from the
    /// first copy that read it.
    async fn rewrite_unreadable(&self, offset: u64, copies: &[CopyRead], pass: &ScrubPass<'_>) {
        let unit = UNIT_BYTES as usize;
        for bad in copies {
            for u in (0..bad.ok.len()).filter(|&u| !bad.ok[u]) {
                let lo = u * unit;
                let hi = (lo + unit).min(bad.buf.len());
                let at = offset + lo as u64;
                let found = bad.why[u].unwrap_or(ScrubFound::ReadError);
                let action = match copies.iter().find(|c| c.ok[u]) {
                    None => ScrubAction::Unrepairable,
                    Some(_) if !pass.repair => ScrubAction::NotRepaired,
                    Some(src) => self.rewrite(bad.child, at, &src.buf[lo..hi], pass).await,
                };
                self.record(bad.child, at, (hi - lo) as u64, found, action, pass);
            }
        }
    }

    /// Counts toward `max_read_errors` each copy's read error that other copies corrected
    /// (every unit it could not read, another did): once per member and range, as a client
    /// read counts once per request.
    fn count_corrected_copies(&self, copies: &[CopyRead]) {
        let Some(table) = &self.members else {
            return;
        };
        for bad in copies {
            let Some(m) = bad.counted else { continue };
            let missed = (0..bad.ok.len()).filter(|&u| !bad.ok[u]);
            if missed.clone().all(|u| copies.iter().any(|c| c.ok[u])) {
                table.read_error_corrected(m);
            }
        }
    }

    /// Records a finding for every member under copy `c` at `offset`.
    fn record(
        &self,
        c: usize,
        offset: u64,
        len: u64,
        found: ScrubFound,
        action: ScrubAction,
        pass: &ScrubPass<'_>,
    ) {
        for (member, member_offset_bytes) in self.children[c].members_at(offset) {
            pass.found(ScrubFinding {
                member,
                member_offset_bytes,
                len_bytes: len,
                found,
                action,
                cross_check: None,
            });
        }
    }

    /// Writes `bytes` to copy `c` at `offset` (durably) and reads them back, counting a
    /// repair once they hold; what became of the copy's bytes.
    async fn rewrite(
        &self,
        c: usize,
        offset: u64,
        bytes: &[u8],
        pass: &ScrubPass<'_>,
    ) -> ScrubAction {
        let b = Buf::copy_from(bytes).freeze();
        match self.children[c].write(offset, b, true).await {
            Ok(()) => {
                let back = read_back(&*self.children[c], offset, bytes).await;
                if !back.holds() {
                    tracing::warn!(
                        "scrub: mirror copy {c}, bytes {offset}+{}: {back}",
                        bytes.len()
                    );
                    return ScrubAction::RewriteDidNotHold;
                }
                pass.bump(|s| &s.repaired, 1);
                self.repairs
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                ScrubAction::RepairedFromMirror
            }
            // The leaf has marked the member failed.
            Err(e) => {
                tracing::warn!("scrub: rewriting mirror copy {c} failed: {e}");
                ScrubAction::Unrepairable
            }
        }
    }
}

/// Which of a block's differing copies (`views`) is right: a majority of three or more
/// decides; two copies cannot, and md copies the first. `None`: no majority.
fn right_copy(views: &[&[u8]]) -> Option<usize> {
    match majority(views) {
        Some(i) => Some(i),
        None if views.len() == 2 => Some(0),
        None => None,
    }
}

/// The units of [`UNIT_BYTES`] (from the start of `copy`, the last one short) where `copy`
/// differs from `right`.
fn differing_units<'a>(copy: &'a [u8], right: &'a [u8]) -> impl Iterator<Item = Range<usize>> + 'a {
    let unit = UNIT_BYTES as usize;
    (0..copy.len())
        .step_by(unit)
        .map(move |u| u..(u + unit).min(copy.len()))
        .filter(move |u| copy[u.clone()] != right[u.clone()])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_majority_or_the_first_of_two_copies_is_right() {
        let (a, b, c): (&[u8], &[u8], &[u8]) = (b"a", b"b", b"c");
        assert_eq!(right_copy(&[a, b]), Some(0));
        assert_eq!(right_copy(&[a, b, b]).map(|i| [a, b, b][i]), Some(b));
        assert_eq!(right_copy(&[a, b, c]), None);
        assert_eq!(right_copy(&[a, a, b, b]), None);
    }

    #[test]
    fn differing_units_are_named_each_and_the_last_short() {
        let unit = UNIT_BYTES as usize;
        let right = vec![0u8; 3 * unit + 100];
        let mut copy = right.clone();
        assert_eq!(differing_units(&copy, &right).count(), 0);
        copy[unit + 5] = 1;
        copy[3 * unit + 99] = 1;
        let units: Vec<Range<usize>> = differing_units(&copy, &right).collect();
        assert_eq!(units, vec![unit..2 * unit, 3 * unit..3 * unit + 100]);
    }
}
