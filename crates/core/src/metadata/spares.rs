//! Which hot spare goes into which failed role, as a pure decision over the volume's tree.
//!
//! - Only a role some node above can rebuild gets a spare, and it is rebuilt from that node
//!   ([`crate::rebuild::rebuild_source`], the rule the rebuild pass follows): the nearest
//!   one that still has the redundancy. A whole inner group lost (both copies of a pair
//!   under RAID 6) is rebuilt by the node above it, every role of it. A role nothing can
//!   rebuild gets none (a spare spent there rebuilds nothing): no redundancy above it, or a
//!   parity group beyond its tolerance between (it takes no writes).
//! - The most endangered roles go first: those whose source is fewest further losses away
//!   from losing data (a RAID 60 span down two members before a span down one; a RAID 10
//!   pair down one copy before nothing). Ties: lower role first.
//! - Each takes the smallest spare large enough for it (best fit: large spares stay for the
//!   roles that need them); ties: the spare listed first.

use crate::rebuild::rebuild_source;
use nbraid_layout::Node;

/// One spare placed: role `role` is rebuilt onto spare number `spare` (an index into the
/// sizes given to [`assign_spares`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpareChoice {
    pub role: usize,
    pub spare: usize,
}

/// Decides which of the spares (`spare_bytes[i]`: spare `i`'s size) go into which of the
/// roles in `wanting` (failed roles with no member being rebuilt into them), given every
/// role that cannot be read now (`unavailable`: failed, missing, or still being rebuilt).
pub fn assign_spares(
    tree: &Node,
    unavailable: &dyn Fn(usize) -> bool,
    wanting: &[usize],
    spare_bytes: &[u64],
) -> Vec<SpareChoice> {
    // (losses that would lose the data of the node the role is rebuilt from, role):
    // rebuildable roles only.
    let mut roles: Vec<(usize, usize)> = wanting
        .iter()
        .filter_map(|&r| {
            let source = rebuild_source(tree, r, unavailable)?;
            let margin = losses_to_lose(source, unavailable);
            (margin > 0).then_some((margin, r))
        })
        .collect();
    roles.sort_unstable();
    roles.dedup();
    let mut free: Vec<bool> = vec![true; spare_bytes.len()];
    let mut out = Vec::new();
    for (_, role) in roles {
        let need = member_end(tree, role);
        let best = (0..spare_bytes.len())
            .filter(|&i| free[i] && spare_bytes[i] >= need)
            .min_by_key(|&i| (spare_bytes[i], i));
        if let Some(spare) = best {
            free[spare] = false;
            out.push(SpareChoice { role, spare });
        }
    }
    out
}

/// Bytes a member in `role` needs (the end of its last region).
fn member_end(tree: &Node, role: usize) -> u64 {
    let mut end = 0;
    tree.visit_members(&mut |m| {
        if m.index == role {
            end = end.max(m.start + m.len);
        }
    });
    end
}

/// The fewest further member losses that make `node`'s data unreadable (0: it is already).
fn losses_to_lose(node: &Node, unavailable: &dyn Fn(usize) -> bool) -> usize {
    match node {
        Node::Member(m) => usize::from(!unavailable(m.index)),
        Node::Concat(_) | Node::Stripe(_) => node
            .children()
            .iter()
            .map(|c| losses_to_lose(c, unavailable))
            .min()
            .unwrap_or(0),
        Node::Mirror(_) => node
            .children()
            .iter()
            .map(|c| losses_to_lose(c, unavailable))
            .sum(),
        Node::Parity(g) => {
            let mut k: Vec<usize> = node
                .children()
                .iter()
                .map(|c| losses_to_lose(c, unavailable))
                .collect();
            k.sort_unstable();
            k.iter().take(g.parity() + 1).sum()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nbraid_layout::ParityLayout;

    const MIB: u64 = 1 << 20;

    fn members(first: usize, n: usize) -> Vec<Node> {
        (first..first + n)
            .map(|i| Node::member(i, MIB, 8 * MIB))
            .collect()
    }

    fn parity(first: usize, n: usize, p: usize) -> Node {
        Node::parity(64 << 10, p, ParityLayout::default(), members(first, n)).unwrap()
    }

    fn choose(
        tree: &Node,
        down: &[usize],
        wanting: &[usize],
        spares: &[u64],
    ) -> Vec<(usize, usize)> {
        assign_spares(tree, &|r| down.contains(&r), wanting, spares)
            .into_iter()
            .map(|c| (c.role, c.spare))
            .collect()
    }

    #[test]
    fn the_most_endangered_group_goes_first() {
        // RAID 60: span 0 (roles 0-3) down two, span 1 (roles 4-7) down one.
        let tree = Node::stripe(128 << 10, vec![parity(0, 4, 2), parity(4, 4, 2)]).unwrap();
        let down = [1, 2, 5];
        assert_eq!(choose(&tree, &down, &[5, 1, 2], &[9 * MIB]), vec![(1, 0)]);
        assert_eq!(
            choose(&tree, &down, &[5, 1, 2], &[9 * MIB; 3]),
            vec![(1, 0), (2, 1), (5, 2)]
        );
        // RAID 10: the pair down a copy before anything else; a pair down both gets nothing.
        let pairs = (0..3)
            .map(|k| Node::mirror(members(2 * k, 2)).unwrap())
            .collect();
        let tree = Node::stripe(64 << 10, pairs).unwrap();
        assert_eq!(
            choose(&tree, &[2, 4, 5], &[2, 4, 5], &[9 * MIB; 3]),
            vec![(2, 0)]
        );
    }

    #[test]
    fn the_smallest_spare_that_fits() {
        let tree = parity(0, 4, 1);
        let need = 9 * MIB;
        // Too small, a big one, a snug one: the snug one.
        assert_eq!(
            choose(&tree, &[3], &[3], &[need - 4096, 100 * MIB, need]),
            vec![(3, 2)]
        );
        // None fits: nothing.
        assert_eq!(choose(&tree, &[3], &[3], &[need - 4096]), vec![]);
        // Equal sizes: the first listed.
        assert_eq!(choose(&tree, &[3], &[3], &[need, need]), vec![(3, 0)]);
    }

    #[test]
    fn roles_nothing_can_rebuild_get_no_spare() {
        // RAID 5 down two: the group is lost, a spare would rebuild nothing.
        assert_eq!(
            choose(&parity(0, 4, 1), &[0, 1], &[0, 1], &[9 * MIB; 2]),
            vec![]
        );
        // No redundancy at all.
        let tree = Node::stripe(64 << 10, members(0, 2)).unwrap();
        assert_eq!(choose(&tree, &[0], &[0], &[9 * MIB]), vec![]);
        // A role still being rebuilt counts as down: RAID 6 with role 0 rebuilding and role 1
        // failed is one loss from losing data; role 1 is still rebuilt (the group serves).
        assert_eq!(
            choose(&parity(0, 5, 2), &[0, 1], &[1], &[9 * MIB]),
            vec![(1, 0)]
        );
        // A mirror of stripes: the dead stripe's member is rebuilt from the other copy.
        let tree = Node::mirror(vec![
            Node::stripe(64 << 10, members(0, 2)).unwrap(),
            Node::stripe(64 << 10, members(2, 2)).unwrap(),
        ])
        .unwrap();
        assert_eq!(choose(&tree, &[1], &[1], &[9 * MIB]), vec![(1, 0)]);
    }

    fn pairs(first: usize, n: usize) -> Vec<Node> {
        (0..n)
            .map(|k| Node::mirror(members(first + 2 * k, 2)).unwrap())
            .collect()
    }

    #[test]
    fn a_lost_inner_group_takes_a_spare_in_every_role() {
        // RAID 6 over four pairs, pair 2 (roles 4, 5) lost: the RAID 6 rebuilds both.
        let tree = Node::parity(64 << 10, 2, ParityLayout::default(), pairs(0, 4)).unwrap();
        let spares = [9 * MIB; 2];
        assert_eq!(
            choose(&tree, &[4, 5], &[4, 5], &spares),
            vec![(4, 0), (5, 1)]
        );
        // One spare: the lower role; the other stays failed (its pair rebuilds it later).
        assert_eq!(choose(&tree, &[4, 5], &[4, 5], &[9 * MIB]), vec![(4, 0)]);
        // Role 4 being rebuilt, role 5 failed: still rebuilt (through the RAID 6).
        assert_eq!(choose(&tree, &[4, 5], &[5], &[9 * MIB]), vec![(5, 0)]);
        // A member of another pair lost too: its pair is one loss from losing its data, the
        // RAID 6 three; the pair's role first.
        assert_eq!(
            choose(&tree, &[0, 4, 5], &[0, 4, 5], &[9 * MIB; 3]),
            vec![(0, 0), (4, 1), (5, 2)]
        );
        // Three pairs lost: beyond the RAID 6, nothing is rebuilt.
        let down = [0, 1, 2, 3, 4, 5];
        assert_eq!(choose(&tree, &down, &down, &[9 * MIB; 6]), vec![]);
        // RAID 5 over pairs and a mirror of RAID 10 copies, a pair lost.
        let tree = Node::parity(64 << 10, 1, ParityLayout::default(), pairs(0, 3)).unwrap();
        assert_eq!(
            choose(&tree, &[2, 3], &[2, 3], &spares),
            vec![(2, 0), (3, 1)]
        );
        let copy = |f: usize| Node::stripe(64 << 10, pairs(f, 2)).unwrap();
        let tree = Node::mirror(vec![copy(0), copy(4)]).unwrap();
        assert_eq!(
            choose(&tree, &[0, 1], &[0, 1], &spares),
            vec![(0, 0), (1, 1)]
        );
    }

    #[test]
    fn a_group_beyond_its_tolerance_under_a_mirror_takes_no_spare() {
        // It takes no writes: the mirror above cannot write its copy down to new members.
        let tree = Node::mirror(vec![parity(0, 3, 1), parity(3, 3, 1)]).unwrap();
        assert_eq!(choose(&tree, &[0, 1], &[0, 1], &[9 * MIB; 2]), vec![]);
        // The other group's lost member is still rebuilt from its own group.
        assert_eq!(
            choose(&tree, &[0, 1, 4], &[0, 1, 4], &[9 * MIB; 2]),
            vec![(4, 0)]
        );
    }
}
