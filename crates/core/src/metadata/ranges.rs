//! Byte ranges of the volume as the passes walk them (resync, re-add, rebuild, scrub): pure
//! functions with unit tests, so the components that run the passes only carry them out.

/// Checkpoints are at most this far apart.
const MAX_CHECKPOINT_BYTES: u64 = 1 << 30;

/// How far apart a pass over `capacity` in windows of `window` bytes records its position:
/// about a sixteenth of the volume, at least a window, at most [`MAX_CHECKPOINT_BYTES`].
pub(super) fn checkpoint_every(capacity: u64, window: u64) -> u64 {
    (capacity / 16).clamp(window, MAX_CHECKPOINT_BYTES.max(window))
}

/// Resync passes stream the volume in pieces of about this many bytes (whole full stripes).
pub(super) const PIECE_BYTES: u64 = 1 << 20;

/// Whole multiples of `width` closest to [`PIECE_BYTES`] (at least one).
pub(super) fn piece_bytes(width: u64) -> u64 {
    assert!(width > 0, "a piece is whole non-empty units");
    (PIECE_BYTES / width).max(1) * width
}

/// `ranges` widened to whole multiples of `width` (within `capacity`), sorted and merged.
pub(super) fn aligned(ranges: &[(u64, u64)], width: u64, capacity: u64) -> Vec<(u64, u64)> {
    assert!(width > 0, "ranges align to a non-empty unit");
    let mut out: Vec<(u64, u64)> = Vec::new();
    let mut wide: Vec<(u64, u64)> = ranges
        .iter()
        .filter(|(a, b)| a < b)
        .map(|&(a, b)| {
            (
                a / width * width,
                b.div_ceil(width).saturating_mul(width).min(capacity),
            )
        })
        .collect();
    wide.sort_unstable();
    for (a, b) in wide {
        match out.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

/// The real ranges under virtual bytes `at..at+len` of `plan` laid end to end.
pub(super) fn slice(plan: &[(u64, u64)], at: u64, len: u64) -> Vec<(u64, u64)> {
    let mut real = Vec::new();
    let (mut skip, mut left) = (at, len);
    for &(a, b) in plan {
        if left == 0 {
            break;
        }
        let n = b - a;
        if skip >= n {
            skip -= n;
            continue;
        }
        let take = (n - skip).min(left);
        real.push((a + skip, a + skip + take));
        left -= take;
        skip = 0;
    }
    real
}

/// Total bytes of `ranges`.
pub(super) fn total_bytes(ranges: &[(u64, u64)]) -> u64 {
    ranges.iter().map(|(a, b)| b - a).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_widen_to_stripes_and_merge() {
        let r = aligned(&[(5, 7), (100, 130), (10, 20), (8, 9)], 16, 200);
        assert_eq!(r, vec![(0, 32), (96, 144)]);
        assert_eq!(aligned(&[(190, 199)], 16, 200), vec![(176, 200)]);
        assert!(aligned(&[(3, 3)], 16, 200).is_empty());
        assert_eq!(total_bytes(&r), 80);
    }

    #[test]
    fn virtual_windows_map_onto_the_plan() {
        let plan = [(0, 10), (20, 30), (50, 60)];
        assert_eq!(slice(&plan, 0, 10), vec![(0, 10)]);
        assert_eq!(slice(&plan, 5, 10), vec![(5, 10), (20, 25)]);
        assert_eq!(slice(&plan, 15, 100), vec![(25, 30), (50, 60)]);
        assert!(slice(&plan, 30, 5).is_empty());
    }

    #[test]
    fn pieces_are_whole_stripes_near_a_mib() {
        assert_eq!(piece_bytes(4096), PIECE_BYTES);
        assert_eq!(piece_bytes(3 * 65536), 5 * 3 * 65536);
        assert_eq!(piece_bytes(4 << 20), 4 << 20);
    }

    #[test]
    fn checkpoints_every_sixteenth_within_bounds() {
        assert_eq!(checkpoint_every(16 << 20, 4096), 1 << 20);
        assert_eq!(checkpoint_every(1 << 20, 1 << 20), 1 << 20);
        assert_eq!(checkpoint_every(1 << 40, 1 << 20), MAX_CHECKPOINT_BYTES);
    }
}
