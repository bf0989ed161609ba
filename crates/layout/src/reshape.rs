//! A volume in the middle of a reshape: two trees and a boundary.
//!
//! A reshape copies the volume front to back from its old tree into its new one (members
//! added, a level or strip change), one window at a time. At any instant the **position**
//! `p` splits the logical address space: bytes below `p` live in the new tree, bytes at or
//! above it in the old one ([`Reshape::route`], [`Reshape::map`]). The volume offers the old
//! capacity until the copy ends; the new tree's extra space appears after it.
//!
//! **The critical section** (md's rule, decided here as a pure function): copying window
//! `[p, p+w)` writes the new tree's chunks (data and parity) of those bytes. Per member, the
//! old tree's bytes at or above a logical offset `q` lie at or above a floor offset
//! ([`Reshape::floors`]: rows ascend with the logical offset within every member). Then:
//! - a window whose writes stay below the old floor at `p` is [`WindowRule::Direct`]: a crash
//!   mid-window leaves the window's old bytes intact, and the copy is simply redone;
//! - one whose writes reach the old floor at `p` but not the floor at `p+w` needs a
//!   [`WindowRule::Backup`]: the window's bytes are saved (and the saving checkpointed) before
//!   the first write, and a restart copies the window again from the backup;
//! - one whose writes reach the floor at `p+w` would overwrite bytes not yet copied and
//!   outside any backup: [`WindowRule::Overtakes`], never carried out.
//!
//! When the new tree has more data members than the old one, the write side falls behind the
//! read side after the first windows and the rest of the reshape runs without a backup; when
//! the data members stay as many (RAID 5 → 6 with one member added, a strip change) every
//! window is backed up, as md's reshapes with the same data-disk count are.
//!
//! Windows start and end on [`Reshape::unit`]: a whole number of full stripes of both trees,
//! so no stripe of either is ever half in one tree and half in the other.

use crate::{map, LayoutError, Mapping, Node};
use serde::Serialize;

/// Which tree holds a range during the reshape.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum Side {
    /// Below the position: already copied.
    New,
    /// At or above the position: not yet copied.
    Old,
}

/// A piece of a logical range and the tree that holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Routed {
    pub side: Side,
    pub offset: u64,
    pub len: u64,
}

/// Whether a window may be copied, and how.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WindowRule {
    /// Its writes land only where no byte not yet copied lies: copy straight.
    Direct,
    /// Its writes overwrite the window's own old bytes: back the window up first.
    Backup,
    /// Its writes would overwrite bytes beyond the window: never.
    Overtakes,
}

/// The next window of a reshape.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Window {
    pub start: u64,
    pub len: u64,
    pub rule: WindowRule,
}

/// `len` bytes of member `member` from byte `offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct MemberRange {
    pub member: usize,
    pub offset: u64,
    pub len: u64,
}

/// The two trees of a reshape. Leaves are numbered alike in both (a role keeps its number;
/// added members take new ones).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reshape {
    old: Node,
    new: Node,
    unit: u64,
}

/// Logical bytes of one full stripe of `tree`, or one block where nothing is striped.
fn stripe_bytes(tree: &Node) -> u64 {
    tree.full_stripe_width().unwrap_or(MIN_UNIT)
}

/// The smallest window: one 4 KiB block (the smallest strip).
const MIN_UNIT: u64 = 4 << 10;

/// Most bytes of a strip or stripe unit a reshape takes: far above any config's (16 MiB
/// strips; a RAID 50 unit of 1024 of them), low enough that full-stripe widths cannot
/// overflow. Trees come from disks too, and every byte from a disk is hostile.
const MAX_UNIT_BYTES: u64 = 1 << 40;

/// Every strip and stripe unit of `tree` is at most [`MAX_UNIT_BYTES`].
fn units_in_bounds(tree: &Node) -> bool {
    let own = match tree {
        Node::Stripe(s) => s.unit(),
        Node::Parity(g) => g.strip(),
        _ => 0,
    };
    own <= MAX_UNIT_BYTES && tree.children().iter().all(units_in_bounds)
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

impl Reshape {
    /// From `old` to `new`; refused when the new tree holds less than the old one.
    pub fn new(old: Node, new: Node) -> Result<Reshape, LayoutError> {
        if new.capacity() < old.capacity() {
            return Err(LayoutError::ReshapeShrinks {
                old: old.capacity(),
                new: new.capacity(),
            });
        }
        if !units_in_bounds(&old) || !units_in_bounds(&new) {
            return Err(LayoutError::ReshapeUnit {
                detail: format!("a strip or stripe unit above {MAX_UNIT_BYTES} bytes"),
            });
        }
        let (a, b) = (stripe_bytes(&old), stripe_bytes(&new));
        let unit = (a / gcd(a, b))
            .checked_mul(b)
            .ok_or_else(|| LayoutError::ReshapeUnit {
                detail: format!(
                    "full stripes of {a} and {b} bytes have no common multiple below 2^64"
                ),
            })?;
        Ok(Reshape { old, new, unit })
    }

    pub fn old(&self) -> &Node {
        &self.old
    }

    pub fn new_tree(&self) -> &Node {
        &self.new
    }

    /// The tree of `side`.
    pub fn tree(&self, side: Side) -> &Node {
        match side {
            Side::New => &self.new,
            Side::Old => &self.old,
        }
    }

    /// Windows and positions are multiples of this (or the end of the volume): whole full
    /// stripes of both trees.
    pub fn unit(&self) -> u64 {
        self.unit
    }

    /// Logical bytes offered while the reshape runs: the old capacity.
    pub fn capacity(&self) -> u64 {
        self.old.capacity()
    }

    /// Whether `position` is one a reshape can stop at (and a checkpoint can name).
    pub fn is_position(&self, position: u64) -> bool {
        position == self.capacity()
            || (position < self.capacity() && position.is_multiple_of(self.unit))
    }

    fn check_position(&self, position: u64) -> Result<(), LayoutError> {
        if self.is_position(position) {
            Ok(())
        } else {
            Err(LayoutError::ReshapePosition {
                position,
                unit: self.unit,
                capacity: self.capacity(),
            })
        }
    }

    /// `[offset, offset+len)` cut at `position`: the part below in the new tree, the rest in
    /// the old one (at most two pieces, in logical order).
    pub fn route(&self, position: u64, offset: u64, len: u64) -> Result<Vec<Routed>, LayoutError> {
        self.check_position(position)?;
        let capacity = self.capacity();
        if offset.checked_add(len).is_none_or(|end| end > capacity) {
            return Err(LayoutError::OutOfRange {
                offset,
                len,
                capacity,
            });
        }
        let end = offset + len;
        let mut out = Vec::with_capacity(2);
        if offset < position && len > 0 {
            let to = end.min(position);
            out.push(Routed {
                side: Side::New,
                offset,
                len: to - offset,
            });
        }
        if end > position && len > 0 {
            let from = offset.max(position);
            out.push(Routed {
                side: Side::Old,
                offset: from,
                len: end - from,
            });
        }
        Ok(out)
    }

    /// Member extents behind `[offset, offset+len)` with the reshape at `position`.
    pub fn map(&self, position: u64, offset: u64, len: u64) -> Result<Mapping, LayoutError> {
        let mut out = Mapping::default();
        for r in self.route(position, offset, len)? {
            let m = map(self.tree(r.side), r.offset, r.len)?;
            out.data.extend(m.data);
            out.parity.extend(m.parity);
        }
        Ok(out)
    }

    /// Per member index, the lowest member offset where the old tree keeps a byte (data or
    /// parity) of logical offset `q` or above; `None` where it keeps none. `q` is a position
    /// ([`Reshape::is_position`]), so it begins a full stripe of the old tree.
    pub fn floors(&self, q: u64) -> Vec<Option<u64>> {
        let members = 1 + max_index(&self.old).max(max_index(&self.new));
        let mut out = vec![None; members];
        if q < self.capacity() {
            floors_in(&self.old, q, &mut out);
        }
        out
    }

    /// How window `[position, position+len)` may be copied (see the module's essay).
    pub fn rule(&self, position: u64, len: u64) -> Result<WindowRule, LayoutError> {
        let end = position.saturating_add(len);
        self.check_position(position)?;
        self.check_position(end)?;
        let writes = map(&self.new, position, len)?;
        let (from_here, beyond) = (self.floors(position), self.floors(end));
        let reaches = |floors: &[Option<u64>]| {
            writes
                .data
                .iter()
                .chain(&writes.parity)
                .any(|e| floors[e.member].is_some_and(|f| e.offset + e.len > f))
        };
        Ok(if reaches(&beyond) {
            WindowRule::Overtakes
        } else if reaches(&from_here) {
            WindowRule::Backup
        } else {
            WindowRule::Direct
        })
    }

    /// What a `Backup` window must save before its first write: per member, from its old
    /// floor at the window's start up to the end of the new tree's last write there — every
    /// old byte the window's writes may overwrite. A function of the window alone, so a
    /// restart finds the saved rows again from the recorded window.
    pub fn rows_at_risk(&self, window: Window) -> Result<Vec<MemberRange>, LayoutError> {
        let floors = self.floors(window.start);
        let writes = map(&self.new, window.start, window.len)?;
        let mut ends = vec![0u64; floors.len()];
        for e in writes.data.iter().chain(&writes.parity) {
            ends[e.member] = ends[e.member].max(e.offset + e.len);
        }
        Ok(floors
            .iter()
            .zip(ends)
            .enumerate()
            .filter_map(|(member, (floor, end))| {
                floor.filter(|&f| end > f).map(|offset| MemberRange {
                    member,
                    offset,
                    len: end - offset,
                })
            })
            .collect())
    }

    /// The next window from `position`, at most `max_len` bytes (at least one unit): the
    /// longest that does not overtake, backed up where it must be. `None` at the end.
    pub fn window(&self, position: u64, max_len: u64) -> Result<Option<Window>, LayoutError> {
        self.check_position(position)?;
        let left = self.capacity() - position;
        if left == 0 {
            return Ok(None);
        }
        // All that is left when the caller allows it (the tail may be less than a unit).
        let mut len = if max_len >= left {
            left
        } else {
            (max_len / self.unit).max(1) * self.unit
        };
        loop {
            let rule = self.rule(position, len)?;
            // A shorter window overtakes less; the shortest is one unit (or the tail).
            if rule != WindowRule::Overtakes || len <= self.unit {
                return Ok(Some(Window {
                    start: position,
                    len,
                    rule,
                }));
            }
            len = (len / 2 / self.unit).max(1) * self.unit;
        }
    }
}

fn max_index(tree: &Node) -> usize {
    tree.member_indices().into_iter().max().unwrap_or(0)
}

/// [`Reshape::floors`] within `node`, `q` an offset of its own address space. Rows ascend with
/// the offset inside every node kind, so the row that holds `q` bounds from below every
/// location of the bytes after it.
fn floors_in(node: &Node, q: u64, out: &mut [Option<u64>]) {
    match node {
        Node::Member(m) => {
            if q < m.len {
                let at = m.start + q;
                out[m.index] = Some(out[m.index].map_or(at, |f: u64| f.min(at)));
            }
        }
        Node::Concat(_) => {
            let mut start = 0;
            for child in node.children() {
                let end = start + child.capacity();
                if q < end {
                    floors_in(child, q.saturating_sub(start), out);
                }
                start = end;
            }
        }
        Node::Mirror(_) => node.children().iter().for_each(|c| floors_in(c, q, out)),
        Node::Stripe(s) => {
            let n = s.children().len() as u64;
            let row = q / (s.unit() * n);
            s.children()
                .iter()
                .for_each(|c| floors_in(c, row * s.unit(), out));
        }
        Node::Parity(g) => {
            let stripe = q / g.stripe_width();
            let at = g.chunk_offset(stripe);
            g.children().iter().for_each(|c| floors_in(c, at, out));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Level, ParityLayout, Region, Shape};

    fn raid(level: Level, members: usize, strip: u64, len: u64) -> Node {
        Shape::new(level, members, None, strip, ParityLayout::default())
            .unwrap()
            .build(&vec![Region { start: 0, len }; members])
            .unwrap()
    }

    #[test]
    fn routes_below_the_position_to_the_new_tree() {
        let r = Reshape::new(
            raid(Level::Raid5, 3, 4096, 64 * 4096),
            raid(Level::Raid5, 4, 4096, 64 * 4096),
        )
        .unwrap();
        assert_eq!(r.unit(), 6 * 4096, "lcm of 2 and 3 data strips");
        let u = r.unit();
        assert_eq!(
            r.route(u, u - 4096, 8192).unwrap(),
            vec![
                Routed {
                    side: Side::New,
                    offset: u - 4096,
                    len: 4096
                },
                Routed {
                    side: Side::Old,
                    offset: u,
                    len: 4096
                }
            ]
        );
        assert!(r.route(4096, 0, 1).is_err(), "not a position");
        assert!(
            r.route(0, r.capacity() - 1, 2).is_err(),
            "past the old capacity"
        );
    }

    #[test]
    fn growing_needs_a_backup_only_at_the_start() {
        let r = Reshape::new(
            raid(Level::Raid5, 3, 4096, 256 * 4096),
            raid(Level::Raid5, 4, 4096, 256 * 4096),
        )
        .unwrap();
        let u = r.unit();
        assert_eq!(r.rule(0, u).unwrap(), WindowRule::Backup);
        let mut p = 0;
        let mut rules = Vec::new();
        while let Some(w) = r.window(p, 4 * u).unwrap() {
            assert_ne!(w.rule, WindowRule::Overtakes, "at {p}");
            rules.push(w.rule);
            p += w.len;
        }
        assert_eq!(p, r.capacity());
        assert_eq!(rules.last(), Some(&WindowRule::Direct));
        let backed = rules.iter().filter(|r| **r == WindowRule::Backup).count();
        assert!(backed <= 2, "{rules:?}");
    }

    #[test]
    fn the_same_data_members_back_up_every_window() {
        let r = Reshape::new(
            raid(Level::Raid5, 3, 4096, 64 * 4096),
            raid(Level::Raid6, 4, 4096, 64 * 4096),
        )
        .unwrap();
        let mut p = 0;
        while let Some(w) = r.window(p, r.unit()).unwrap() {
            assert_eq!(w.rule, WindowRule::Backup, "at {p}");
            p += w.len;
        }
    }

    #[test]
    fn fewer_data_members_would_overtake_and_are_caught() {
        // RAID 0 of three onto two longer members: the writes outrun the reads.
        let old = raid(Level::Raid0, 3, 4096, 64 * 4096);
        let new = raid(Level::Raid0, 2, 4096, 128 * 4096);
        let r = Reshape::new(old, new).unwrap();
        let w = r.window(0, 64 * 4096).unwrap().unwrap();
        assert_eq!((w.len, w.rule), (r.unit(), WindowRule::Overtakes));
    }

    #[test]
    fn a_shrinking_reshape_is_refused() {
        let e = Reshape::new(
            raid(Level::Raid5, 4, 4096, 64 * 4096),
            raid(Level::Raid5, 3, 4096, 64 * 4096),
        )
        .unwrap_err();
        assert!(matches!(e, LayoutError::ReshapeShrinks { .. }), "{e}");
    }
}
