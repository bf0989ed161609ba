//! The new tree's space past the old capacity: zeroes, consistent, before anyone may read it.
//!
//! A reshape that grows the volume (members added, regions grown in place) offers the old
//! capacity until its pass ends; the new tree's bytes past it are whatever the members'
//! rows held — stale rows of the old tree, an added member's zeros, a forced member's old
//! data. Their parity (or copies) do not agree with them: old RAID 6 rows of P and Q do not
//! cancel as RAID 5's do, a three-way mirror's copies XOR to one copy, not zero. A client's
//! partial write there would fold its delta into wrong parity, and the first member lost
//! afterwards would rebuild its bytes wrong; and a client would read another volume's or
//! its own stale bytes where a grown disk reads zeroes. So after the copy the pass walks the
//! grown space through the new tree, and every byte of it ends as a **zero**, with parity
//! (or copies) and checksums that agree — and **nothing past the capacity is read**: a power
//! loss mid-way leaves rows there whose checksums a read would refuse (a zero written, its
//! checksum not yet), and the restart walks them again. Each whole unit is zeroed (data and
//! parity or copies, with their checksums). In a unit the grown space only partly covers —
//! the one the old capacity cuts, a last one short of a unit — the new tree's stripe the
//! capacity cuts is written whole, its copied bytes below the capacity as read (clients held
//! off them meanwhile) and zeroes above; the whole stripes after it are zeroed. Then the
//! members are flushed; only then do the records take the new tree and the next open offer
//! the grown size. Nothing records progress here: no client reaches the grown space before
//! the commit, so a restart walks all of it again.

use super::ReshapeNode;
use crate::buf::Buf;
use crate::error::VolumeResult;
use crate::node::ZeroKind;
use nbraid_layout::{Reshape, Side};

/// The grown space of a reshape: `[capacity, end_of_tree)` of the new tree, in reshape units.
#[derive(Clone, Copy, Debug)]
pub(super) struct Grown {
    capacity: u64,
    end_of_tree: u64,
    unit: u64,
    /// The new tree's full stripe: a write of whole ones reads nothing.
    stripe: u64,
}

impl Grown {
    pub(super) fn of(layout: &Reshape) -> Grown {
        Grown {
            capacity: layout.capacity(),
            end_of_tree: layout.new_tree().capacity(),
            unit: layout.unit(),
            // Nothing striped: any block is written whole.
            stripe: layout.new_tree().full_stripe_width().unwrap_or(4096),
        }
    }

    /// Logical bytes the new tree holds past the old capacity.
    pub(super) fn bytes(self) -> u64 {
        self.end_of_tree - self.capacity
    }

    /// Makes the new tree of `node` (the copy done) zero and consistent over the units that
    /// start in `[offset, offset+len)`, a range past the old capacity: see [`pieces`].
    pub(super) async fn sync(self, node: &ReshapeNode, offset: u64, len: u64) -> VolumeResult<()> {
        let new = node.tree(Side::New);
        for (how, at, n) in pieces(self, offset, len) {
            let steps = match how {
                Sync::Zero => vec![Step::Zero(at, n)],
                Sync::Cut => cut_steps(at, at + n, self.stripe),
            };
            for step in steps {
                match step {
                    Step::Zero(o, l) => new.zero(o, l, ZeroKind::WriteZeroes).await?,
                    Step::Resync(o, l) => new.resync_range(o, l).await?,
                    Step::Keep { start, kept_to, to } => {
                        // Clients write the copied bytes below the capacity meanwhile: held
                        // off them, as the copy holds off its window.
                        let _held = node.0.window.lock(start, kept_to - start, true).await;
                        let kept = new
                            .read(start, Buf::new((kept_to - start) as usize))
                            .await?;
                        let mut whole = Buf::zeroed((to - start) as usize);
                        whole[..kept.len()].copy_from_slice(&kept);
                        new.write(start, whole.freeze(), false).await?;
                    }
                }
            }
            // What waits in the write-back cache is on the members before the pass's flush:
            // the records never take the tree without it.
            new.flush_range(at, n).await?;
        }
        Ok(())
    }
}

/// One step of making a cut piece zero and consistent, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    /// Zeroed: whole stripes (nothing read), or after their resync.
    Zero(u64, u64),
    /// Stripes rewritten from what the members hold (parity regenerated): only a stripe the
    /// tree's end cuts, which no zeroing writes whole (a tree whose end is not on a full
    /// stripe: none of the levels nbraid builds over equal regions).
    Resync(u64, u64),
    /// The stripe from `start` written whole: `[start, kept_to)` as read (copied bytes below
    /// the capacity), zeroes up to `to`.
    Keep { start: u64, kept_to: u64, to: u64 },
}

/// The steps for a cut piece `[at, end)` of the new tree, full stripes of `stripe` bytes: the
/// stripe `at` cuts written whole (its bytes below `at` kept), then the rest zeroed — a last
/// stripe the end cuts resynced first, so its zeroes fold into right parity. Nothing at or
/// past `at` is read but in such a last stripe. Pure.
fn cut_steps(at: u64, end: u64, stripe: u64) -> Vec<Step> {
    let mut out = Vec::new();
    let head = at / stripe * stripe;
    let mut from = at;
    if head < at && at < end {
        let to = (head + stripe).min(end);
        if to - head < stripe {
            out.push(Step::Resync(head, to - head));
        }
        out.push(Step::Keep {
            start: head,
            kept_to: at,
            to,
        });
        from = to;
    }
    if from < end {
        let tail = end / stripe * stripe;
        if from <= tail && tail < end {
            out.push(Step::Resync(tail, end - tail));
        }
        out.push(Step::Zero(from, end - from));
    }
    out
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sync {
    /// Part of a unit: see [`cut_steps`].
    Cut,
    /// Zeroed: data and parity or copies, with their checksums; nothing read.
    Zero,
}

/// What the pass does for the units of the grown space that start in `[offset, offset+len)`
/// (`offset` at or past the capacity, consecutive ranges covering it once): whole units
/// are zeroed; the one the old capacity cuts (copied bytes below it) and a last one short
/// of a unit (its stripes may reach past the tree's end) are cut pieces ([`cut_steps`]) —
/// a unit is whole stripes of every group of both trees (`Reshape::unit`), so no zeroing
/// writes part of a stripe whose parity is not known. Pure.
fn pieces(g: Grown, offset: u64, len: u64) -> Vec<(Sync, u64, u64)> {
    assert!(
        offset >= g.capacity && offset + len <= g.end_of_tree && g.unit > 0,
        "{offset}+{len} lies in the grown space {g:?}"
    );
    let whole_end = g.end_of_tree / g.unit * g.unit;
    let from = offset.next_multiple_of(g.unit);
    let mut out = Vec::new();
    if offset == g.capacity && from > g.capacity {
        out.push((Sync::Cut, g.capacity, from.min(g.end_of_tree) - g.capacity));
    }
    let to = (offset + len).next_multiple_of(g.unit).min(whole_end);
    if from < to {
        out.push((Sync::Zero, from, to - from));
    }
    let tail_starts_here = (offset..offset + len).contains(&whole_end);
    if tail_starts_here && whole_end >= g.capacity && whole_end < g.end_of_tree {
        out.push((Sync::Cut, whole_end, g.end_of_tree - whole_end));
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
                        stripe: unit,
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

    /// Over any cut piece: every byte of it is kept (below the start only) or zeroed once,
    /// whole stripes are written or zeroed without a read, and a stripe written or zeroed
    /// only in part is resynced first.
    #[test]
    fn a_cut_piece_is_zeroed_reading_nothing_past_its_start_but_a_stripe_the_end_cuts() {
        let stripe = 12u64;
        for at in 0..40 {
            for end in at + 1..at + 50 {
                let steps = cut_steps(at, end, stripe);
                let what = format!("{at}..{end}: {steps:?}");
                let mut zeroed = vec![0u32; end as usize];
                let mut resynced = Vec::new();
                for s in &steps {
                    match *s {
                        Step::Resync(o, l) => resynced.push((o, o + l)),
                        Step::Keep { start, kept_to, to } => {
                            assert!(start % stripe == 0 && kept_to == at, "{what}");
                            let whole = to - start == stripe;
                            assert!(whole || resynced.contains(&(start, to)), "{what}");
                            (kept_to..to).for_each(|b| zeroed[b as usize] += 1);
                        }
                        Step::Zero(o, l) => {
                            assert!(o % stripe == 0, "{what}");
                            let tail = (o + l) / stripe * stripe;
                            let ends_whole = tail == o + l;
                            assert!(ends_whole || resynced.contains(&(tail, o + l)), "{what}");
                            (o..o + l).for_each(|b| zeroed[b as usize] += 1);
                        }
                    }
                }
                assert!(zeroed[at as usize..].iter().all(|&c| c == 1), "{what}");
                assert!(zeroed[..at as usize].iter().all(|&c| c == 0), "{what}");
            }
        }
    }
}
