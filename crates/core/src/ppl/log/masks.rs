//! The log's pure decisions over a band's sector masks (bit `x`: sector `x` of the 4 KiB band)
//! and members' write counts: which sectors a write writes, the runs a partial is computed
//! over, whether a band's earlier writes are durable, and whether a write may skip the flush.

use crate::ppl::{BAND_BYTES, SECTOR_BYTES};
use std::ops::Range;

/// Per band of `bands` from band `first` on and per data chunk, the sectors of the band (of
/// a `strip`-byte strip) that the row ranges `written[i]` of chunk `i` write, into `out`
/// (band after band, `written.len()` masks each). One pass over the ranges: a range's
/// sectors in a band are one run of bits, from the sector of its first byte, one per
/// started sector. (Walking every range for every band of a stripe write's hull, empty
/// bands included, cost a write-back destage more than its entries' bookkeeping.)
pub(super) fn bands_masks_into(
    written: &[impl AsRef<[(u64, u64)]>],
    (first, bands): (u64, usize),
    strip: u64,
    out: &mut Vec<u8>,
) {
    let k = written.len();
    let sector = SECTOR_BYTES as u64;
    out.clear();
    out.resize(bands * k, 0);
    let last = first + bands as u64;
    for (i, ranges) in written.iter().enumerate() {
        for &(s, e) in ranges.as_ref() {
            let e = e.min(strip);
            for band in (s / BAND_BYTES).max(first)..e.div_ceil(BAND_BYTES).min(last) {
                let b0 = band * BAND_BYTES;
                let (s, e) = (s.max(b0), e.min(b0 + BAND_BYTES));
                if s < e {
                    let (x, n) = ((s - b0) / sector, (e - s).div_ceil(sector));
                    out[(band - first) as usize * k + i] |= (((1u16 << n) - 1) << x) as u8;
                }
            }
        }
    }
}

/// The 4 KiB bands the row ranges `written[i]` of the data chunks span, from the first
/// range's band to the last's (`None` when they write nothing).
pub(super) fn touched_bands(written: &[impl AsRef<[(u64, u64)]>]) -> Option<Range<u64>> {
    let (lo, hi) = (written.iter().flat_map(AsRef::as_ref))
        .fold((u64::MAX, 0), |(a, b), &(s, e)| (a.min(s), b.max(e)));
    (lo < hi).then(|| lo / BAND_BYTES..hi.div_ceil(BAND_BYTES))
}

/// The sectors of a band whose partial parity an entry stores, for a write of sectors
/// `now[i]` of data chunk `i`: those some chunk writes and some does not (where every chunk
/// is written the partial is zero). `None` when the write writes nothing in the band.
pub(super) fn stored_sectors(now: &[u8]) -> Option<u8> {
    let covered = now.iter().fold(0, |a, m| a | m);
    let full = now.iter().fold(0xff, |a, m| a & m);
    (covered != 0).then_some(covered & !full)
}

/// Whether a band a write writes needs an entry: one storing a partial parity protects
/// chunks not written; one storing none still must go where an older entry of the band
/// could be replayed over the write (`replayable`), or supersede a `live` band's.
pub(super) fn needs_entry(stored: u8, live: bool, replayable: bool) -> bool {
    stored != 0 || live || replayable
}

/// The runs of set bits of a band's sector mask, as sector ranges `(first, end)`.
pub(super) fn runs(mask: u8) -> impl Iterator<Item = (usize, usize)> {
    let mut rest = u16::from(mask);
    std::iter::from_fn(move || {
        if rest == 0 {
            return None;
        }
        let first = rest.trailing_zeros() as usize;
        let end = first + (rest >> first).trailing_ones() as usize;
        rest &= !((1u16 << end) - (1u16 << first));
        Some((first, end))
    })
}

/// The runs of `stored`'s sectors over which the same chunks are written (`now[i]`, per
/// chunk): `(first, end)` sector ranges, in order.
pub(super) fn same_chunk_runs(stored: u8, now: &[u8]) -> impl Iterator<Item = (usize, usize)> + '_ {
    let column = move |x: usize| now.iter().map(move |m| m >> x & 1);
    runs(stored).flat_map(move |(first, end)| {
        let mut at = first;
        std::iter::from_fn(move || {
            (at < end).then(|| {
                let start = at;
                at += 1;
                while at < end && column(at).eq(column(start)) {
                    at += 1;
                }
                (start, at)
            })
        })
    })
}

/// Whether a completed flush covers `need` (per member: the completed-write count a band's
/// writes were among) on every member that has not failed.
pub(super) fn covered(need: &[u64], durable: &[u64], failed: &[bool]) -> bool {
    need.iter()
        .enumerate()
        .all(|(i, &n)| failed[i] || durable[i] >= n)
}

/// Whether a write that writes sectors `now[i]` of data chunk `i` may be logged in a band
/// whose earlier writes are done but not known durable (`dirty[i]`: the sectors they wrote;
/// `one_write`: all of them by one write) without flushing the members first. Its entry
/// supersedes theirs, so it must describe every sector they left in flux: it writes somewhere
/// in each dirty sector. And no settled chunk may be rebuilt from a partial parity that counted
/// unflushed bytes the media may not hold. So in each sector where the partial parity covers an
/// unflushed chunk, either:
/// - that chunk is the only one it covers: rebuilt from the partial parity it is exact (its
///   bytes after the earlier write). This covers sequential writes meeting in a stripe, where
///   the previous write wrote one chunk of the sector.
/// - or every chunk it covers is unflushed and one write wrote them all. Chunks of one write
///   become guaranteed together: a flush acknowledged after that write finds every one of its
///   member writes done and makes them durable at once. Once guaranteed, each is rebuilt
///   exactly from the partial parity and the others' media; until then its sectors are in flux.
///   This covers sequential writes of more than a chunk meeting in a stripe.
///
/// A rewrite of the same sectors (nothing unflushed unwritten) passes. A write beside an
/// unflushed chunk with settled chunks unwritten does not: it flushes first.
pub(super) fn needs_no_flush(dirty: &[u8], now: &[u8], one_write: bool) -> bool {
    let covered = now.iter().fold(0, |a, m| a | m);
    let full = now.iter().fold(0xff, |a, m| a & m);
    let dirty_any = dirty.iter().fold(0, |a, m| a | m);
    if dirty_any & !covered != 0 {
        return false;
    }
    let stored = covered & !full;
    (0..8).filter(|x| stored >> x & 1 == 1).all(|x| {
        let unwritten = now.iter().filter(|m| *m >> x & 1 == 0).count();
        let unflushed = (0..now.len())
            .filter(|&i| now[i] >> x & 1 == 0 && dirty[i] >> x & 1 == 1)
            .count();
        unflushed == 0
            || (unflushed == 1 && unwritten == 1)
            || (one_write && unflushed == unwritten)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The sectors a range writes, one sector start at a time (the definition).
    fn stepped(written: &[Vec<(u64, u64)>], b0: u64, strip: u64) -> Vec<u8> {
        let b1 = (b0 + BAND_BYTES).min(strip);
        written
            .iter()
            .map(|ranges| {
                let mut m = 0u8;
                for &(s, e) in ranges {
                    let (s, e) = (s.max(b0), e.min(b1));
                    for x in (s..e).step_by(SECTOR_BYTES) {
                        m |= 1 << ((x - b0) / SECTOR_BYTES as u64);
                    }
                }
                m
            })
            .collect()
    }

    #[test]
    fn a_write_spans_the_bands_from_its_first_byte_to_its_last() {
        let none: [Vec<(u64, u64)>; 2] = [vec![], vec![]];
        assert_eq!(touched_bands(&none), None);
        assert_eq!(touched_bands(&[vec![(512, 512)]]), None, "an empty range");
        assert_eq!(touched_bands(&[vec![(0, 4096)]]), Some(0..1));
        assert_eq!(touched_bands(&[vec![(4095, 4097)]]), Some(0..2));
        let two = [vec![(9000, 9512)], vec![], vec![(100, 200)]];
        assert_eq!(
            touched_bands(&two),
            Some(0..3),
            "the hull of every chunk's ranges"
        );
    }

    #[test]
    fn an_entry_stores_the_sectors_some_chunk_writes_and_some_does_not() {
        assert_eq!(
            stored_sectors(&[0, 0, 0]),
            None,
            "nothing written in the band"
        );
        assert_eq!(stored_sectors(&[0xff, 0, 0]), Some(0xff));
        assert_eq!(
            stored_sectors(&[0xff, 0xff, 0xff]),
            Some(0),
            "every chunk written whole"
        );
        assert_eq!(stored_sectors(&[0x0f, 0xff, 0x0f]), Some(0xf0));
        assert_eq!(
            stored_sectors(&[0x01]),
            Some(0),
            "one data chunk: no partial"
        );
    }

    #[test]
    fn a_band_without_a_partial_is_logged_only_over_a_live_band_or_a_replayable_entry() {
        assert!(
            needs_entry(0x01, false, false),
            "a partial protects the chunks not written"
        );
        assert!(
            !needs_entry(0, false, false),
            "nothing to protect, nothing stale"
        );
        assert!(
            needs_entry(0, true, false),
            "supersedes the live band's entry"
        );
        assert!(
            needs_entry(0, false, true),
            "masks an older entry a ring could replay"
        );
    }

    proptest! {
        /// Band masks by runs of bits, all bands in one pass, equal masks band by band and
        /// sector by sector, aligned or not, over the bands' edges and a short last band.
        #[test]
        fn band_masks_match_a_sector_by_sector_count(
            ranges in proptest::collection::vec(
                proptest::collection::vec((0u64..20_000, 1u64..9_000), 0..4), 1..6),
            band in 0u64..5,
            short in proptest::bool::ANY,
        ) {
            let strip = if short { 18_944 } else { 20_480 };
            let written: Vec<Vec<(u64, u64)>> = ranges
                .into_iter()
                .map(|c| c.into_iter().map(|(s, n)| (s, (s + n).min(strip))).collect())
                .collect();
            let (first, bands) = (band, 6 - band as usize);
            let mut all = Vec::new();
            bands_masks_into(&written, (first, bands), strip, &mut all);
            for (j, one) in all.chunks(written.len()).enumerate() {
                let b0 = (first + j as u64) * BAND_BYTES;
                prop_assert_eq!(one, &stepped(&written, b0, strip)[..], "band {}", first + j as u64);
            }
        }
    }
}
