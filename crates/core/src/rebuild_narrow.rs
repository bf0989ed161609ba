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
//! that cannot be rebuilt fails and reads the bad block again — bounded by the stripes of
//! one window, on a path that only runs after a read error.

use crate::error::{VolumeError, VolumeResult};
use crate::node::ArrayNode;
use futures::future::BoxFuture;
use futures::FutureExt;
use std::ops::Range;

/// Pieces a failed range is split into at each step.
pub const SPLIT: u64 = 16;

/// The smallest piece tried: one checksum block (and a volume block at most this size).
pub const MIN_PIECE_BYTES: u64 = 4096;

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
    let mut lost = Vec::new();
    let mut cause = None;
    failing_pieces(root, (at, len, ahead), &mut lost, &mut cause).await;
    if lost.is_empty() {
        tracing::info!(
            "rebuild: the window at volume byte {at} ({len} bytes) failed ({first}) but was rebuilt piece by piece"
        );
        return Ok(());
    }
    Err(VolumeError::Unrebuildable {
        ranges: coalesce(lost),
        cause: Box::new(cause.unwrap_or(first)),
    })
}

/// Tries each piece of `[at, at + len)`; a failing piece is split again until it is one
/// block, then added to `lost` (its error kept in `cause`, the first one).
fn failing_pieces<'a>(
    root: &'a dyn ArrayNode,
    (at, len, ahead): (u64, u64, &'a [usize]),
    lost: &'a mut Vec<Range<u64>>,
    cause: &'a mut Option<VolumeError>,
) -> BoxFuture<'a, ()> {
    async move {
        for piece in pieces(at, len) {
            let piece_len = piece.end - piece.start;
            let Err(e) = root.rebuild_range(piece.start, piece_len, ahead).await else {
                continue;
            };
            if piece_len <= MIN_PIECE_BYTES {
                cause.get_or_insert(e);
                lost.push(piece);
            } else {
                failing_pieces(root, (piece.start, piece_len, ahead), lost, cause).await;
            }
        }
    }
    .boxed()
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
