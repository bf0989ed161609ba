//! The reshape view and its critical-section rule against an in-memory model of the members.
//!
//! Every kind of move the plan accepts online (members added to RAID 0/5/6 and to the stripe
//! of RAID 10/50/60 spans, RAID 1 → 5, RAID 5 → 6 with members added, strip changes) over
//! strips of 4–16 KiB and random member sizes:
//! - at every position, the view finds every logical block exactly once, on a location no
//!   other block uses;
//! - copying window by window as [`Reshape::window`] says (backing a window up where its rule
//!   is `Backup`), a power loss after any single block write leaves every block recoverable:
//!   blocks below the window in the new tree, blocks above it (and their old parity) in the
//!   old tree untouched, the window's blocks in the old tree or in the backup; at the end the
//!   new tree holds every block.
//!
//! Sizes are counted in blocks of 4 KiB (the smallest strip). `NBRAID_SOAK=1` runs more cases.

use nbraid_layout::{map, Level, Node, ParityLayout, Region, Reshape, Shape, WindowRule};
use proptest::prelude::*;
use std::collections::HashSet;

const B: u64 = 4096;

fn cases(default: u32) -> ProptestConfig {
    let n = if std::env::var_os("NBRAID_SOAK").is_some() {
        default * 50
    } else {
        default
    };
    ProptestConfig::with_cases(n)
}

/// One side of a move: a named level, its members and spans, strip and member length.
#[derive(Clone, Debug)]
struct Side {
    level: Level,
    members: usize,
    spans: Option<usize>,
    strip: u64,
    len: u64,
}

impl Side {
    fn tree(&self, layout: ParityLayout) -> Node {
        Shape::new(self.level, self.members, self.spans, self.strip, layout)
            .expect("valid shape")
            .build(&vec![
                Region {
                    start: 0,
                    len: self.len
                };
                self.members
            ])
            .expect("builds")
    }
}

fn strip() -> impl Strategy<Value = u64> {
    prop::sample::select(vec![B, 2 * B, 4 * B])
}

/// A move the plan accepts online: (old, new).
fn a_move() -> impl Strategy<Value = (Side, Side)> {
    let same_level = (
        prop::sample::select(vec![Level::Raid0, Level::Raid5, Level::Raid6]),
        0usize..3,
        1usize..3,
    )
        .prop_map(|(level, extra, added)| {
            let n = level.min_members() + extra;
            ((level, n, None), (level, n + added, None))
        });
    let level_change = prop_oneof![
        (3usize..5, 1usize..3)
            .prop_map(|(n, k)| ((Level::Raid5, n, None), (Level::Raid6, n + k, None))),
        (2usize..4, 3usize..6)
            .prop_map(|(c, n)| ((Level::Raid1, c, None), (Level::Raid5, n, None))),
    ];
    let spans = prop::sample::select(vec![
        (Level::Raid10, 2),
        (Level::Raid50, 3),
        (Level::Raid60, 4),
    ])
    .prop_map(|(level, per)| ((level, 2 * per, Some(2)), (level, 3 * per, Some(3))));
    let strip_change = (
        prop::sample::select(vec![Level::Raid0, Level::Raid5, Level::Raid6]),
        0usize..2,
    )
        .prop_map(|(level, extra)| {
            let n = level.min_members() + extra;
            ((level, n, None), (level, n, None))
        });
    let shapes = prop_oneof![same_level, level_change, spans, strip_change];
    (shapes, strip(), strip(), 4u64..20, 0u64..6).prop_map(
        |(((lo, no, so), (ln, nn, sn)), strip_old, strip_new, strips, grow)| {
            let len = strips * 4 * B;
            // Members keep their start; their regions may grow.
            let old = Side {
                level: lo,
                members: no,
                spans: so,
                strip: strip_old,
                len,
            };
            let new = Side {
                level: ln,
                members: nn,
                spans: sn,
                strip: strip_new,
                len: len + grow * 4 * B,
            };
            (old, new)
        },
    )
}

fn layout() -> impl Strategy<Value = ParityLayout> {
    prop::sample::select(ParityLayout::ALL.to_vec())
}

/// What a member block holds in the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cell {
    Empty,
    Data(u64),
    OldParity,
    NewParity,
}

/// Member blocks: `(member, block)` → cell.
struct Members(Vec<Vec<Cell>>);

impl Members {
    fn at(&self, loc: (usize, u64)) -> Cell {
        self.0[loc.0][loc.1 as usize]
    }
    fn set(&mut self, loc: (usize, u64), c: Cell) {
        self.0[loc.0][loc.1 as usize] = c;
    }
}

/// Every (member, block) of the extents, one per 4 KiB, with the logical block each holds.
fn blocks(extents: &[nbraid_layout::Extent]) -> Vec<((usize, u64), u64)> {
    let mut out = Vec::new();
    for e in extents {
        assert_eq!(e.offset % B, 0, "extents are whole blocks");
        for i in 0..e.len / B {
            out.push(((e.member, e.offset / B + i), e.logical / B + i));
        }
    }
    out
}

/// Per logical block, the locations of its copies in `tree` (blocks below `cap`).
fn locations(tree: &Node, cap: u64) -> Vec<Vec<(usize, u64)>> {
    let mut out = vec![Vec::new(); (cap / B) as usize];
    for (loc, logical) in blocks(&map(tree, 0, cap).unwrap().data) {
        out[logical as usize].push(loc);
    }
    out
}

/// The invariants a power loss at this instant must find: `p` the checkpoint, `[p, end)` the
/// window being copied, `backed_up` whether the window is in the backup.
struct Model<'a> {
    old_at: &'a [Vec<(usize, u64)>],
    new_at: &'a [Vec<(usize, u64)>],
    old: &'a Node,
    cap: u64,
}

impl Model<'_> {
    fn recoverable(&self, m: &Members, p: u64, end: u64, backed_up: bool) -> Result<(), String> {
        for b in 0..self.cap / B {
            let here = |locs: &[(usize, u64)]| locs.iter().all(|&l| m.at(l) == Cell::Data(b));
            let ok = if b * B < p {
                here(&self.new_at[b as usize])
            } else if b * B >= end {
                here(&self.old_at[b as usize])
            } else {
                backed_up || here(&self.old_at[b as usize])
            };
            if !ok {
                return Err(format!(
                    "block {b} lost (checkpoint {p}, window end {end}, backup {backed_up})"
                ));
            }
        }
        if end < self.cap {
            let parity = map(self.old, end, self.cap - end).unwrap().parity;
            for (loc, _) in blocks(&parity) {
                if m.at(loc) != Cell::OldParity {
                    return Err(format!("old parity at {loc:?} of a stripe not yet copied was overwritten (window end {end})"));
                }
            }
        }
        Ok(())
    }
}

proptest! {
    #![proptest_config(cases(256))]

    #[test]
    fn every_position_finds_every_block_exactly_once((old, new) in a_move(), layout in layout()) {
        let (o, n) = (old.tree(layout), new.tree(layout));
        prop_assume!(n.capacity() >= o.capacity());
        let r = Reshape::new(o, n).unwrap();
        let cap = r.capacity();
        let mut p = 0;
        loop {
            let view = r.map(p, 0, cap).unwrap();
            // Copy 0 of every block tiles the volume in order, once.
            let mut next = 0;
            for e in view.data.iter().filter(|e| e.copy == 0) {
                prop_assert_eq!(e.logical, next, "a gap or an overlap at position {}", p);
                next += e.len;
            }
            prop_assert_eq!(next, cap);
            // No location holds two blocks, nor a block and a parity chunk.
            let mut seen = HashSet::new();
            for (loc, _) in blocks(&view.data) {
                prop_assert!(seen.insert(loc), "{:?} holds two blocks at position {} ({:?} → {:?})", loc, p, old, new);
            }
            for (loc, _) in blocks(&view.parity) {
                prop_assert!(!seen.contains(&loc), "{:?} holds a block and parity at position {} ({:?} → {:?})", loc, p, old, new);
            }
            if p == cap {
                break;
            }
            // Even the shortest window never overtakes.
            let w = r.window(p, r.unit()).unwrap().unwrap();
            prop_assert_ne!(w.rule, WindowRule::Overtakes, "at {}", p);
            p += w.len;
        }
    }

    #[test]
    fn copying_window_by_window_survives_a_power_loss_anywhere(
        (old, new) in a_move(),
        layout in layout(),
        max_units in 1u64..5,
        reversed in any::<bool>(),
    ) {
        let (o, n) = (old.tree(layout), new.tree(layout));
        prop_assume!(n.capacity() >= o.capacity());
        let r = Reshape::new(o.clone(), n.clone()).unwrap();
        let cap = r.capacity();
        let width = old.len.max(new.len) / B;
        let members = old.members.max(new.members);
        let mut m = Members(vec![vec![Cell::Empty; width as usize]; members]);
        let whole = map(&o, 0, cap).unwrap();
        for (loc, logical) in blocks(&whole.data) {
            m.set(loc, Cell::Data(logical));
        }
        for (loc, _) in blocks(&whole.parity) {
            m.set(loc, Cell::OldParity);
        }
        let (old_at, new_at) = (locations(&o, cap), locations(&n, cap));
        let model = Model { old_at: &old_at, new_at: &new_at, old: &o, cap };
        let mut p = 0;
        while let Some(w) = r.window(p, max_units * r.unit()).unwrap() {
            prop_assert_ne!(w.rule, WindowRule::Overtakes, "at {} ({:?} → {:?})", p, old, new);
            let backed_up = w.rule == WindowRule::Backup;
            // The rows a backup saves hold every old block (data or parity, of this window or
            // after it) that the window's writes land on.
            if backed_up {
                let rows = r.rows_at_risk(w).unwrap();
                let saved = |(m, blk): (usize, u64)| {
                    rows.iter().any(|x| x.member == m && x.offset <= blk * B && blk * B < x.offset + x.len)
                };
                let live = map(&o, w.start, cap - w.start).unwrap();
                let live: HashSet<(usize, u64)> = blocks(&live.data).into_iter().chain(blocks(&live.parity)).map(|(l, _)| l).collect();
                let writes = map(&n, w.start, w.len).unwrap();
                for (loc, _) in blocks(&writes.data).into_iter().chain(blocks(&writes.parity)) {
                    prop_assert!(!live.contains(&loc) || saved(loc), "{:?} overwritten unsaved at {}", loc, p);
                }
            }
            let writes = map(&n, w.start, w.len).unwrap();
            let mut cells: Vec<((usize, u64), Cell)> = blocks(&writes.data)
                .into_iter()
                .map(|(loc, b)| (loc, Cell::Data(b)))
                .chain(blocks(&writes.parity).into_iter().map(|(loc, _)| (loc, Cell::NewParity)))
                .collect();
            if reversed {
                cells.reverse();
            }
            for (loc, cell) in cells {
                m.set(loc, cell);
                // A power loss here.
                if let Err(e) = model.recoverable(&m, p, p + w.len, backed_up) {
                    prop_assert!(false, "{} ({:?} → {:?}, rule {:?})", e, old, new, w.rule);
                }
            }
            p += w.len;
        }
        prop_assert_eq!(p, cap);
        model.recoverable(&m, cap, cap, false).map_err(TestCaseError::fail)?;
    }
}
