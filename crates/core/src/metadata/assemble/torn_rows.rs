//! A dirty start mid-reshape with a role out, refused unless forced ([`refuse_torn_rows`]).
//!
//! Neither shape is logged while a reshape runs (the partial-parity log covers one tree),
//! so a row a client was writing at a crash may hold new data beside old parity; the
//! write-intent bitmap's resync makes the row agree again only where every chunk is there.
//! A parity group serving a child from its parity rebuilds that child's block of such a row
//! from torn parity: it may read wrong though no client wrote it. md refuses such a dirty
//! degraded start unless forced (`start_dirty_degraded`); so does nbraid.

use nbraid_layout::Node;

/// Whether some parity group of `tree` serves a child from its parity with the roles for
/// which `out` is true gone (a child of a group that cannot serve without them; a mirror
/// that keeps a copy serves its own).
pub(super) fn parity_serves_a_lost_child(tree: &Node, out: &dyn Fn(usize) -> bool) -> bool {
    let lost_here = match tree {
        Node::Parity(g) => g.children().iter().any(|c| !c.survives(out)),
        _ => false,
    };
    lost_here || (tree.children().iter()).any(|c| parity_serves_a_lost_child(c, out))
}

/// Why volume `volume` may not start as is: not clean (`clean`), mid-reshape between `old`
/// and `new`, with roles `out` that a parity group of either tree rebuilds from parity.
/// `None`: it may (clean, no reshape, no such role, or the operator forced it).
pub(super) fn refuse_torn_rows(
    (clean, force): (bool, bool),
    trees: Option<(&Node, &Node)>,
    out: &[usize],
) -> Option<Vec<usize>> {
    let (old, new) = trees?;
    let is_out = |r: usize| out.contains(&r);
    let torn = !clean
        && !force
        && (parity_serves_a_lost_child(old, &is_out) || parity_serves_a_lost_child(new, &is_out));
    torn.then(|| out.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;
    use nbraid_layout::{Level, Region, Shape};

    fn tree(level: Level, members: usize) -> Node {
        let region = Region {
            start: 1 << 20,
            len: 64 << 20,
        };
        Shape::new(level, members, None, 64 << 10, Default::default())
            .unwrap()
            .build(&vec![region; members])
            .unwrap()
    }

    #[test]
    fn only_a_dirty_unforced_reshape_with_a_role_rebuilt_from_parity_is_refused() {
        let (old, new) = (tree(Level::Raid5, 3), tree(Level::Raid5, 4));
        let trees = Some((&old, &new));
        assert_eq!(refuse_torn_rows((false, false), trees, &[1]), Some(vec![1]));
        assert_eq!(refuse_torn_rows((false, false), trees, &[3]), Some(vec![3]));
        assert_eq!(refuse_torn_rows((true, false), trees, &[1]), None, "clean");
        assert_eq!(refuse_torn_rows((false, true), trees, &[1]), None, "forced");
        assert_eq!(refuse_torn_rows((false, false), trees, &[]), None, "whole");
        assert_eq!(
            refuse_torn_rows((false, false), None, &[1]),
            None,
            "no reshape"
        );
    }

    #[test]
    fn mirrors_that_keep_a_copy_have_no_torn_parity() {
        let (old, new) = (tree(Level::Raid10, 4), tree(Level::Raid10, 6));
        assert_eq!(
            refuse_torn_rows((false, false), Some((&old, &new)), &[1]),
            None
        );
        // RAID 1 → RAID 5: the new tree rebuilds role 1 from parity.
        let (old, new) = (tree(Level::Raid1, 2), tree(Level::Raid5, 3));
        let out = [1];
        assert_eq!(
            refuse_torn_rows((false, false), Some((&old, &new)), &out),
            Some(vec![1])
        );
        let whole = |_: usize| false;
        assert!(!parity_serves_a_lost_child(&old, &whole));
    }

    #[test]
    fn a_parity_group_over_mirrors_rebuilds_only_a_pair_wholly_lost() {
        let pair = |first: usize| {
            let leaves = (first..first + 2).map(|i| Node::member(i, 1 << 20, 64 << 20));
            Node::mirror(leaves.collect()).unwrap()
        };
        let pairs = (0..3).map(|p| pair(2 * p)).collect();
        let t = Node::parity(64 << 10, 1, Default::default(), pairs).unwrap();
        assert!(!parity_serves_a_lost_child(&t, &|r| r == 0));
        assert!(parity_serves_a_lost_child(&t, &|r| r <= 1));
    }
}
