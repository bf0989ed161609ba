//! What a background resync has left: the ranges pending when it started (its plan, fixed)
//! less the aligned pieces resynced since, a bit per piece.
//!
//! Requests resync the pieces they touch ahead of the pass, in any order. A map of the
//! ranges left split at each of them: a paused resync under random I/O grew it towards one
//! range per two pieces (~150 MB of map for a 10 TB volume). A bit per piece is 1.25 MB
//! there, whatever the order.

use super::ranges::{aligned, total_bytes};

pub(super) struct Unsynced {
    /// Sorted, disjoint, none empty.
    plan: Vec<(u64, u64)>,
    piece_bytes: u64,
    /// Bit `i` set: piece `i` (`[i × piece_bytes, (i + 1) × piece_bytes)`) is resynced.
    done: Vec<u64>,
    /// Bytes of the plan in pieces not resynced yet.
    left_bytes: u64,
}

impl Unsynced {
    /// The ranges of `pending` (sorted and merged here) left to resync in pieces of
    /// `piece_bytes`, aligned from byte 0.
    pub(super) fn new(pending: &[(u64, u64)], piece_bytes: u64) -> Unsynced {
        assert!(piece_bytes > 0, "pieces are not empty");
        let plan = aligned(pending, 1, u64::MAX);
        let pieces = plan.last().map_or(0, |r| r.1.div_ceil(piece_bytes));
        Unsynced {
            left_bytes: total_bytes(&plan),
            done: vec![0; pieces.div_ceil(64) as usize],
            plan,
            piece_bytes,
        }
    }

    /// The ranges pending at the start, in order.
    pub(super) fn plan(&self) -> &[(u64, u64)] {
        &self.plan
    }

    /// Bytes of the plan not resynced yet.
    pub(super) fn left_bytes(&self) -> u64 {
        self.left_bytes
    }

    pub(super) fn piece_bytes(&self) -> u64 {
        self.piece_bytes
    }

    /// The bytes of piece `piece`: `[start, end)`.
    pub(super) fn piece_range(&self, piece: u64) -> (u64, u64) {
        (piece * self.piece_bytes, (piece + 1) * self.piece_bytes)
    }

    fn is_done(&self, piece: u64) -> bool {
        let word = self.done.get((piece / 64) as usize);
        word.is_some_and(|w| w & (1 << (piece % 64)) != 0)
    }

    /// The plan's ranges overlapping `[a, b)`, clipped to it.
    fn overlapping(&self, a: u64, b: u64) -> impl Iterator<Item = (u64, u64)> + '_ {
        let first = self.plan.partition_point(|r| r.1 <= a);
        self.plan[first..]
            .iter()
            .take_while(move |r| r.0 < b)
            .map(move |r| (r.0.max(a), r.1.min(b)))
            .filter(|(s, e)| s < e)
    }

    /// The first piece overlapping `[a, b)` with plan bytes not resynced yet.
    pub(super) fn first_piece(&self, a: u64, b: u64) -> Option<u64> {
        let p = self.piece_bytes;
        self.overlapping(a, b)
            .flat_map(|(s, e)| s / p..e.div_ceil(p))
            .find(|&i| !self.is_done(i))
    }

    /// The plan's bytes in piece `piece`: what resyncing it rewrites.
    pub(super) fn parts(&self, piece: u64) -> Vec<(u64, u64)> {
        let (start, end) = self.piece_range(piece);
        self.overlapping(start, end).collect()
    }

    /// Piece `piece` is resynced.
    pub(super) fn mark_done(&mut self, piece: u64) {
        if self.is_done(piece) {
            return;
        }
        let bytes = total_bytes(&self.parts(piece));
        // Past the plan's last piece: nothing to mark.
        if let Some(word) = self.done.get_mut((piece / 64) as usize) {
            *word |= 1 << (piece % 64);
            self.left_bytes -= bytes;
        }
    }

    /// Whether `[a, b)` holds plan bytes not resynced yet.
    pub(super) fn any_left(&self, a: u64, b: u64) -> bool {
        self.first_piece(a, b).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn pieces_left_are_found_in_order_and_counted_in_plan_bytes() {
        // Pieces of 10: the plan covers parts of pieces 0, 2 and 3 (two ranges in piece 2).
        let mut u = Unsynced::new(&[(20, 24), (5, 10), (26, 35), (7, 9)], 10);
        assert_eq!(u.left_bytes(), 18);
        assert_eq!(u.first_piece(0, 100), Some(0));
        assert_eq!(u.first_piece(10, 20), None, "piece 1 has no plan bytes");
        assert_eq!(u.first_piece(24, 26), None, "a gap inside piece 2");
        assert_eq!(u.parts(2), vec![(20, 24), (26, 30)]);
        u.mark_done(2);
        assert_eq!(u.left_bytes(), 10);
        assert_eq!(u.first_piece(15, 100), Some(3));
        assert!(u.any_left(0, 6) && !u.any_left(20, 30));
        u.mark_done(2);
        assert_eq!(u.left_bytes(), 10, "marking twice counts once");
        u.mark_done(0);
        u.mark_done(3);
        assert_eq!(u.left_bytes(), 0);
        assert_eq!(u.first_piece(0, u64::MAX), None);
        assert_eq!(Unsynced::new(&[], 10).first_piece(0, 100), None);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Against a model of a flag per byte: pieces marked in any order.
        #[test]
        fn agrees_with_a_byte_model(
            cuts in proptest::collection::btree_set(0u64..400, 0..12),
            piece in 1u64..40,
            marks in proptest::collection::vec(0u64..420, 0..40),
            probes in proptest::collection::vec((0u64..420, 0u64..420), 1..20),
        ) {
            let cuts: Vec<u64> = cuts.into_iter().collect();
            let plan: Vec<(u64, u64)> = cuts.chunks_exact(2).map(|c| (c[0], c[1])).collect();
            let mut left = vec![false; 420];
            for &(a, b) in &plan {
                left[a as usize..b as usize].fill(true);
            }
            let mut u = Unsynced::new(&plan, piece);
            for at in marks {
                let i = at / piece;
                u.mark_done(i);
                let end = ((i + 1) * piece).min(420);
                left[(i * piece) as usize..end as usize].fill(false);
                prop_assert_eq!(u.left_bytes(), left.iter().filter(|&&x| x).count() as u64);
            }
            for (a, b) in probes {
                let (a, b) = (a.min(b), a.max(b));
                let first = (a..b).find(|&x| left[x as usize]).map(|x| x / piece);
                prop_assert_eq!(u.first_piece(a, b), first);
            }
        }
    }
}
