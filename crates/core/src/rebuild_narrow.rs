//! A rebuild window that fails on a read error is tried again in ever smaller pieces, so one
//! unreadable block costs the pass only what cannot be rebuilt, and the error names it.
//!
//! A member's read error inside a 4 MiB window used to stop the pass with "read of 4194304
//! bytes at member offset … failed": nothing said which of the volume's bytes were gone, and
//! a read error that does not come back (a cable, a busy remote) stopped it all the same.
//! Now the window is split into [`SPLIT`] pieces and each is rebuilt on its own (a piece is
//! a window in small: the node takes its locks); only a piece that fails again is split
//! further, down to [`MIN_PIECE_BYTES`]. Pieces that still fail are the volume's bytes no
//! redundancy can give back — every copy of a mirror's block unreadable, or more of a
//! stripe than its parity — and the pass stops with [`VolumeError::Unrebuildable`] naming
//! them. Writing them again (a client write, from a backup) makes them whole: a mirror's
//! write reaches every copy, a write of a parity group's named range rewrites the whole
//! stripe. A window whose pieces all succeed was rebuilt; the pass goes on.
//!
//! What a piece costs: a parity group rebuilds whole stripes, so every piece inside a stripe
//! that cannot be rebuilt fails and reads the stripe again (RAID 5 of 1 MiB strips: a 3 MiB
//! read per 4 KiB piece). Every piece is tried once, as every byte must be rebuilt or named;
//! splitting failed pieces further is bounded by [`SPLIT_TRIES`] tries a window — one bad
//! block of a mirror takes 36 — past which a failing piece is named whole.

use crate::error::{VolumeError, VolumeResult};
use crate::node::ArrayNode;
use futures::future::BoxFuture;
use futures::FutureExt;
use std::ops::Range;

/// Pieces a failed range is split into at each step.
pub const SPLIT: u64 = 16;

/// The smallest piece tried: one checksum block (and a volume block at most this size).
pub const MIN_PIECE_BYTES: u64 = 4096;

/// Tries a window may spend splitting failed pieces further (its first [`SPLIT`] tries
/// aside): each reads again what failed, bad blocks and the warnings they log included.
pub const SPLIT_TRIES: u64 = 256;

/// Whether a failed piece of `piece_len` bytes is split again with `tries_left`: not one
/// block, nor when its pieces would overspend the tries.
pub fn splits_further(piece_len: u64, tries_left: u64) -> bool {
    piece_len > MIN_PIECE_BYTES && pieces(0, piece_len).len() as u64 <= tries_left
}

/// Whether a window's error may come from bytes that cannot be read (a member's read error,
/// or a parity group that lost more of a stripe than it can rebuild through one), as opposed
/// to one the pieces would only repeat.
pub fn worth_narrowing(e: &VolumeError) -> bool {
    matches!(
        e,
        VolumeError::Member { .. } | VolumeError::Unavailable { .. }
    )
}

/// `[at, at + len)` cut into up to [`SPLIT`] consecutive pieces whose bounds fall on
/// multiples of [`MIN_PIECE_BYTES`] (from `at`, itself a multiple); one piece when the range
/// is no larger than that.
pub fn pieces(at: u64, len: u64) -> Vec<Range<u64>> {
    assert!(
        at.is_multiple_of(MIN_PIECE_BYTES),
        "a rebuild window starts on a block"
    );
    let blocks = len.div_ceil(MIN_PIECE_BYTES);
    let per = blocks.div_ceil(SPLIT).max(1) * MIN_PIECE_BYTES;
    let end = at + len;
    (0..)
        .map(|i| at + i * per)
        .take_while(|&s| s < end)
        .map(|s| s..(s + per).min(end))
        .collect()
}

/// `ranges` (in ascending order, not overlapping) with touching ones joined.
pub fn coalesce(ranges: Vec<Range<u64>>) -> Vec<Range<u64>> {
    let mut out: Vec<Range<u64>> = Vec::with_capacity(ranges.len());
    for r in ranges {
        match out.last_mut() {
            Some(last) if last.end == r.start => last.end = r.end,
            _ => out.push(r),
        }
    }
    out
}

/// Rebuilds `[at, at + len)` of `root` piece by piece after the whole failed with `first`,
/// each piece leaving out the window's targets `ahead` (a piece's own would be as many or
/// more): `Ok` when every piece was rebuilt, else [`VolumeError::Unrebuildable`] naming the
/// volume bytes that were not (the other pieces were).
pub async fn rebuild_in_pieces(
    root: &dyn ArrayNode,
    (at, len, ahead): (u64, u64, &[usize]),
    first: VolumeError,
) -> VolumeResult<()> {
    let mut n = Narrowing {
        lost: Vec::new(),
        cause: None,
        tries_left: SPLIT_TRIES,
    };
    n.try_pieces(root, (at, len, ahead)).await;
    if n.lost.is_empty() {
        tracing::info!(
            "rebuild: the window at volume byte {at} ({len} bytes) failed ({first}) but was rebuilt piece by piece"
        );
        return Ok(());
    }
    Err(VolumeError::Unrebuildable {
        ranges: coalesce(n.lost),
        cause: Box::new(n.cause.unwrap_or(first)),
    })
}

/// One window's narrowing: what it found, and the splitting tries it has left.
struct Narrowing {
    /// Pieces that failed at the smallest size tried, in order.
    lost: Vec<Range<u64>>,
    /// The first of their errors.
    cause: Option<VolumeError>,
    tries_left: u64,
}

impl Narrowing {
    /// Tries each piece of `[at, at + len)`; a failing piece is split again while
    /// [`splits_further`] says so, else added to `lost`.
    fn try_pieces<'a>(
        &'a mut self,
        root: &'a dyn ArrayNode,
        (at, len, ahead): (u64, u64, &'a [usize]),
    ) -> BoxFuture<'a, ()> {
        async move {
            for piece in pieces(at, len) {
                let piece_len = piece.end - piece.start;
                let Err(e) = root.rebuild_range(piece.start, piece_len, ahead).await else {
                    continue;
                };
                if splits_further(piece_len, self.tries_left) {
                    self.tries_left -= pieces(piece.start, piece_len).len() as u64;
                    self.try_pieces(root, (piece.start, piece_len, ahead)).await;
                } else {
                    self.cause.get_or_insert(e);
                    self.lost.push(piece);
                }
            }
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn a_window_is_cut_into_sixteen_block_aligned_pieces_covering_it_once() {
        let p = pieces(8 * MIB, 4 * MIB);
        assert_eq!(p.len(), 16);
        assert_eq!(p[0], 8 * MIB..8 * MIB + 256 * 1024);
        assert_eq!(p[15].end, 12 * MIB);
        assert!(p.windows(2).all(|w| w[0].end == w[1].start));
        // A range of a few blocks: a piece per block.
        assert_eq!(
            pieces(4096, 3 * 4096),
            vec![4096..8192, 8192..12288, 12288..16384]
        );
        // A ragged end (a volume not a whole number of windows) is kept.
        let p = pieces(0, 17 * 4096 + 512);
        assert_eq!(p.last().unwrap().end, 17 * 4096 + 512);
        assert!(p.iter().all(|r| r.start % 4096 == 0));
        // One block is one piece.
        assert_eq!(pieces(4096, 4096), vec![4096..8192]);
    }

    /// A failed piece is split while its pieces fit the tries left, never below one block:
    /// one bad block in a 4 MiB window is found in 16 + 16 + 4 tries.
    #[test]
    fn failed_pieces_are_split_while_the_tries_last() {
        assert!(splits_further(256 * 1024, 16));
        assert!(!splits_further(256 * 1024, 15));
        assert!(splits_further(16 * 1024, 4));
        assert!(!splits_further(4096, SPLIT_TRIES));
        let to_one_block = pieces(0, 256 * 1024).len() + pieces(0, 16 * 1024).len();
        assert_eq!(to_one_block, 20);
    }

    #[test]
    fn touching_ranges_are_joined_and_gaps_kept() {
        assert_eq!(
            coalesce(vec![
                0..4096,
                4096..8192,
                12288..16384,
                16384..20480,
                40960..45056
            ]),
            vec![0..8192, 12288..20480, 40960..45056]
        );
        assert_eq!(coalesce(Vec::new()), Vec::<Range<u64>>::new());
    }

    #[test]
    fn read_errors_and_lost_stripes_are_narrowed_other_errors_are_not() {
        assert!(worth_narrowing(&VolumeError::Unavailable {
            reason: "read: stripe 1".into()
        }));
        assert!(!worth_narrowing(&VolumeError::Unsupported("x".into())));
        assert!(!worth_narrowing(&VolumeError::Assembly("x".into())));
    }
}
