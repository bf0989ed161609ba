//! The new tree's space past the old capacity: made consistent before anyone may write it.
//!
//! A reshape that grows the volume (members added, regions grown in place) offers the old
//! capacity until its pass ends; the new tree's bytes past it are whatever the members'
//! rows held — stale rows of the old tree, an added member's zeros, a forced member's old
//! data. Their parity (or copies) do not agree with them: old RAID 6 rows of P and Q do not
//! cancel as RAID 5's do, a three-way mirror's copies XOR to one copy, not zero. A client's
//! partial write there would fold its delta into wrong parity, and the first member lost
//! afterwards would rebuild its bytes wrong. So after the copy the pass walks the grown
//! space through the new tree: each whole stripe of it is **zeroed** (data and parity or
//! copies, with their checksums: the new space reads as zeroes, as a grown disk does, and
//! nothing is read), and the one stripe the old capacity may cut — copied bytes below it,
//! new space above — is **rewritten whole** from what its members hold (`resync_range`:
//! parity regenerated). Then the members are flushed; only then do the records take the new
//! tree and the next open offer the grown size. Nothing records progress here: no client
//! reaches the grown space before the commit, so a restart walks all of it again.

use crate::error::VolumeResult;
use crate::node::{ArrayNode, ZeroKind};
use nbraid_layout::Reshape;

/// The grown space of a reshape: `[capacity, end_of_tree)` of the new tree, in reshape units.
#[derive(Clone, Copy, Debug)]
pub(super) struct Grown {
    capacity: u64,
    end_of_tree: u64,
    unit: u64,
}

impl Grown {
    pub(super) fn of(layout: &Reshape) -> Grown {
        Grown {
            capacity: layout.capacity(),
            end_of_tree: layout.new_tree().capacity(),
            unit: layout.unit(),
        }
    }

    /// Logical bytes the new tree holds past the old capacity.
    pub(super) fn bytes(self) -> u64 {
        self.end_of_tree - self.capacity
    }

    /// Makes `new` (the new tree, the copy done) consistent over the units that start in
    /// `[offset, offset+len)`, a range past the old capacity: see [`pieces`].
    pub(super) async fn sync(self, new: &dyn ArrayNode, offset: u64, len: u64) -> VolumeResult<()> {
        for (how, at, n) in pieces(self, offset, len) {
            match how {
                Sync::Rewrite => new.resync_range(at, n).await?,
                Sync::Zero => new.zero(at, n, ZeroKind::WriteZeroes).await?,
            }
        }
        Ok(())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sync {
    /// Rewritten whole from what the members hold (parity regenerated, copies agreed).
    Rewrite,
    /// Zeroed: data and parity or copies, with their checksums; nothing read.
    Zero,
}

/// What the pass does for the units of the grown space that start in `[offset, offset+len)`
/// (`offset` at or past the capacity, consecutive ranges covering it once): whole units
/// are zeroed; the one the old capacity cuts (copied bytes below it) and a last one short
/// of a unit (its stripes may reach past the tree's end) are rewritten — a unit is whole
/// stripes of every group of both trees (`Reshape::unit`), so no zeroing ever writes part of
/// a stripe whose parity is not known. Pure.
fn pieces(g: Grown, offset: u64, len: u64) -> Vec<(Sync, u64, u64)> {
    assert!(
        offset >= g.capacity && offset + len <= g.end_of_tree && g.unit > 0,
        "{offset}+{len} lies in the grown space {g:?}"
    );
    let whole_end = g.end_of_tree / g.unit * g.unit;
    let from = offset.next_multiple_of(g.unit);
    let mut out = Vec::new();
    if offset == g.capacity && from > g.capacity {
        out.push((
            Sync::Rewrite,
            g.capacity,
            from.min(g.end_of_tree) - g.capacity,
        ));
    }
    let to = (offset + len).next_multiple_of(g.unit).min(whole_end);
    if from < to {
        out.push((Sync::Zero, from, to - from));
    }
    let tail_starts_here = (offset..offset + len).contains(&whole_end);
    if tail_starts_here && whole_end >= g.capacity && whole_end < g.end_of_tree {
        out.push((Sync::Rewrite, whole_end, g.end_of_tree - whole_end));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Over any grown space and any window length, consecutive windows from the capacity
    /// cover every byte once, zero only whole units, and rewrite at most the two cut ends.
    #[test]
    fn the_grown_space_is_covered_once_zeroing_whole_units_only() {
        let unit = 12u64;
        for capacity in [0, 5, 12, 30, 36] {
            for grown in [1, 7, 12, 13, 24, 50, 61] {
                for window in [12, 24, 36, 120] {
                    let g = Grown {
                        capacity,
                        end_of_tree: capacity + grown,
                        unit,
                    };
                    let mut seen = vec![0u32; g.end_of_tree as usize];
                    let mut at = capacity;
                    while at < g.end_of_tree {
                        let n = window.min(g.end_of_tree - at);
                        for (how, o, l) in pieces(g, at, n) {
                            if how == Sync::Zero {
                                assert!(o % unit == 0 && l % unit == 0, "{g:?} {o}+{l}");
                            }
                            (o..o + l).for_each(|b| seen[b as usize] += 1);
                        }
                        at += n;
                    }
                    let what = format!("{g:?}, windows of {window}");
                    assert!(seen[..capacity as usize].iter().all(|&c| c == 0), "{what}");
                    assert!(
                        seen[capacity as usize..].iter().all(|&c| c == 1),
                        "{what}: {seen:?}"
                    );
                }
            }
        }
    }
}
