//! Whether a new tree keeps every byte of the old one where it is: the **grow in place**
//! (md's `--grow --size`, a concatenation's new member at its end). Then a reshape has
//! nothing to copy — its position starts at the old capacity — and only the space the new
//! tree adds needs its parity or copies made (`nbraid apply`'s *append* move).
//!
//! Decided on the trees' structure, node kind by node kind, because every placement rule
//! here depends on the children's order and units but not on how long a child is:
//! - a member region keeps its member and start and may only grow;
//! - a concatenation keeps its children whole, except the last, which may grow in place,
//!   and may take new children after it;
//! - a stripe, a mirror and a parity group keep their unit, strip, parity count, rotation
//!   and children, each child growing in place (a stripe's chunk `k` lands on child
//!   `k mod n` at row `k / n`, a parity stripe's roles depend on its number only: longer
//!   children add rows after the old ones).
//!
//! `tests/props.rs` checks it against [`crate::map`]: every byte below the old capacity maps
//! to the same member offsets in both trees whenever this says so.

use crate::Node;

/// Whether every logical byte of `old` lives at the same member offsets in `new` (which may
/// be larger).
pub fn grows_in_place(old: &Node, new: &Node) -> bool {
    match (old, new) {
        (Node::Member(a), Node::Member(b)) => {
            a.index == b.index && a.start == b.start && b.len >= a.len
        }
        (Node::Concat(a), Node::Concat(b)) => {
            let (old, new) = (a.children(), b.children());
            let Some((last, whole)) = old.split_last() else {
                return false;
            };
            new.len() >= old.len()
                && whole.iter().zip(new).all(|(o, n)| o == n)
                && grows_in_place(last, &new[whole.len()])
        }
        (Node::Stripe(a), Node::Stripe(b)) => {
            a.unit() == b.unit() && children_grow(a.children(), b.children())
        }
        (Node::Mirror(a), Node::Mirror(b)) => children_grow(a.children(), b.children()),
        (Node::Parity(a), Node::Parity(b)) => {
            (a.strip(), a.parity(), a.layout()) == (b.strip(), b.parity(), b.layout())
                && children_grow(a.children(), b.children())
        }
        _ => false,
    }
}

fn children_grow(old: &[Node], new: &[Node]) -> bool {
    old.len() == new.len() && old.iter().zip(new).all(|(o, n)| grows_in_place(o, n))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Level, ParityLayout, Region, Shape};

    fn tree(level: Level, members: usize, len: u64) -> Node {
        let regions = vec![Region { start: 4096, len }; members];
        let spans = level.has_spans().then_some(2);
        Shape::new(level, members, spans, 4096, ParityLayout::default())
            .unwrap()
            .build(&regions)
            .unwrap()
    }

    #[test]
    fn longer_regions_of_the_same_shape_grow_in_place() {
        for level in [
            Level::Jbod,
            Level::Raid0,
            Level::Raid1,
            Level::Raid5,
            Level::Raid6,
            Level::Raid10,
            Level::Raid50,
            Level::Raid60,
        ] {
            let old = tree(level, 8, 64 << 10);
            // A concatenation whose first members grew moves every byte after them.
            let longer = level != Level::Jbod;
            assert_eq!(
                grows_in_place(&old, &tree(level, 8, 256 << 10)),
                longer,
                "{level}"
            );
            assert!(grows_in_place(&old, &old), "{level}");
            assert!(
                !grows_in_place(&tree(level, 8, 256 << 10), &old),
                "{level}: shrinks"
            );
        }
    }

    #[test]
    fn other_shapes_do_not() {
        let old = tree(Level::Raid5, 4, 64 << 10);
        assert!(
            !grows_in_place(&old, &tree(Level::Raid5, 5, 64 << 10)),
            "a member added"
        );
        assert!(
            !grows_in_place(&old, &tree(Level::Raid6, 4, 64 << 10)),
            "another level"
        );
        let moved = Node::parity(
            4096,
            1,
            ParityLayout::default(),
            (0..4).map(|i| Node::member(i, 8192, 64 << 10)).collect(),
        )
        .unwrap();
        assert!(!grows_in_place(&old, &moved), "regions moved");
    }

    #[test]
    fn a_concatenation_grows_at_its_end() {
        let jbod = |lens: &[u64]| {
            let members = lens.iter().enumerate();
            Node::concat(members.map(|(i, &l)| Node::member(i, 0, l)).collect()).unwrap()
        };
        let old = jbod(&[8192, 8192]);
        assert!(
            grows_in_place(&old, &jbod(&[8192, 16384])),
            "the last one longer"
        );
        assert!(grows_in_place(&old, &jbod(&[8192, 8192, 4096])), "one more");
        assert!(
            !grows_in_place(&old, &jbod(&[16384, 8192])),
            "the first one longer"
        );
        assert!(grows_in_place(&old, &jbod(&[8192, 16384, 4096])), "both");
    }
}
