//! How many bytes the partial-parity log (nbraid-core's `ppl`, which closes the RAID 5/6
//! write hole) needs on each member of a volume: a function of the geometry alone, so the
//! config leaves room for it before it places a volume's regions and the engine sizes the
//! same ring. The sizes of a log entry and batch are the log format's (docs/FORMAT.md, "The
//! RAID 5/6 write hole"); nbraid-core checks its encoder against them.

use crate::{Node, ParityGroup};

/// Rows of a strip one log entry covers.
pub const LOG_BAND_BYTES: u64 = 4096;
/// Bytes of a log entry's header (before its masks).
pub const LOG_ENTRY_HEADER_BYTES: u64 = 32;
/// Bytes of a log batch's header.
pub const LOG_BATCH_HEADER_BYTES: u64 = 64;
/// Log batches start on, and are written in, blocks of this size.
pub const LOG_BLOCK_BYTES: u64 = 4096;
/// The largest ring kept inside a member's 1 MiB metadata area (beside the two superblock
/// copies and the write-intent bitmap). Every power-of-two strip up to 256 KiB (RAID 5) or
/// 128 KiB (RAID 6) needs less (at most ~660 KiB with 1024 members); the next strips need
/// more than 1 MiB, so their log goes to a reserve before the volume's region.
pub const LOG_IN_METADATA_AREA_MAX_BYTES: u64 = 768 << 10;

/// The smallest ring `g`'s log works with: two of its largest write's batches (an entry for
/// every band of a strip, every data chunk's mask, the partial parities) and a marker block.
pub fn log_ring_bytes(g: &ParityGroup) -> u64 {
    let bands = g.strip().div_ceil(LOG_BAND_BYTES);
    let masks = g.data_chunks().next_multiple_of(8) as u64;
    let entry = LOG_ENTRY_HEADER_BYTES + masks + g.parity() as u64 * LOG_BAND_BYTES;
    let worst = bands * entry + LOG_BATCH_HEADER_BYTES;
    2 * worst.next_multiple_of(LOG_BLOCK_BYTES) + LOG_BLOCK_BYTES
}

/// Whether `g`'s log is kept: every child is a member region (a group over mirrors or groups
/// keeps parity on no single member).
pub fn is_logged(g: &ParityGroup) -> bool {
    g.children().iter().all(|c| matches!(c, Node::Member(_)))
}

/// The ring a volume over `root` needs per member: the largest of its logged groups'.
/// `None`: no logged parity group.
pub fn volume_log_ring_bytes(root: &Node) -> Option<u64> {
    fn walk(n: &Node, most: &mut Option<u64>) {
        if let Node::Parity(g) = n {
            if is_logged(g) {
                let need = log_ring_bytes(g);
                *most = Some(most.map_or(need, |m: u64| m.max(need)));
            }
        }
        for c in n.children() {
            walk(c, most);
        }
    }
    let mut most = None;
    walk(root, &mut most);
    most
}

/// The reserve the log of a volume over `root` takes before the volume's region on every
/// member when the metadata area cannot hold its ring: the ring in whole MiB. `None`: the
/// log lives in the metadata area, or there is no log.
pub fn log_reserve_bytes(root: &Node) -> Option<u64> {
    volume_log_ring_bytes(root)
        .filter(|&need| need > LOG_IN_METADATA_AREA_MAX_BYTES)
        .map(|need| need.next_multiple_of(1 << 20))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Level, ParityLayout, Region, Shape, STRIP_MAX, STRIP_MIN};

    fn tree(level: Level, n: usize, strip: u64) -> Node {
        let shape = Shape::new(level, n, None, strip, ParityLayout::LeftSymmetric).unwrap();
        let region = Region {
            start: 1 << 20,
            len: strip * 4,
        };
        shape.build(&vec![region; n]).unwrap()
    }

    /// The metadata area holds the ring exactly for the strips it always held; every larger
    /// strip gets a reserve that holds its ring.
    #[test]
    fn the_log_moves_out_of_the_metadata_area_exactly_where_it_cannot_fit() {
        let strips =
            std::iter::successors(Some(STRIP_MIN), |s| Some(s * 2)).take_while(|&s| s <= STRIP_MAX);
        for strip in strips {
            for (level, n, parity) in [
                (Level::Raid5, 3, 1),
                (Level::Raid5, 1024, 1),
                (Level::Raid6, 4, 2),
                (Level::Raid6, 1024, 2),
            ] {
                let t = tree(level, n, strip);
                let need = volume_log_ring_bytes(&t).unwrap();
                let inside = strip * parity <= 256 << 10;
                assert_eq!(
                    log_reserve_bytes(&t).is_none(),
                    inside,
                    "{level:?} x{n} strip {strip}: ring {need}"
                );
                if let Some(r) = log_reserve_bytes(&t) {
                    assert!(r >= need && r <= 1 << 30, "{r} for {need}");
                }
            }
        }
    }
}
