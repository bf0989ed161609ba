//! The volume tree: leaves are member regions, inner nodes concatenate, stripe, mirror or
//! protect their children with parity. Each node maps its own address space (0..capacity)
//! onto its children's; composing the maps from the root gives member extents.

use crate::rotation::{ParityLayout, StripeRoles};
use crate::LayoutError;

/// One node of a volume tree. Capacities are computed once at construction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Node {
    Member(MemberRegion),
    Concat(Concat),
    Stripe(Stripe),
    Mirror(Mirror),
    Parity(ParityGroup),
}

/// `len` bytes of member `index` (index into the volume's member list), from byte `start`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberRegion {
    pub index: usize,
    pub start: u64,
    pub len: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Concat {
    children: Vec<Node>,
    /// `starts[i]` = logical offset where child `i` begins; `starts[n]` = capacity.
    starts: Vec<u64>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stripe {
    /// Bytes placed on one child before moving to the next.
    unit: u64,
    children: Vec<Node>,
    /// Whole units every child contributes (the smallest child decides).
    units_per_child: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mirror {
    children: Vec<Node>,
    capacity: u64,
    /// `copy_base[i]`: first copy number of child `i` (children's copies are numbered apart).
    copy_base: Vec<u32>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParityGroup {
    strip: u64,
    parity: usize,
    layout: ParityLayout,
    children: Vec<Node>,
    /// Stripes in the group: whole strips on the smallest child.
    stripes: u64,
}

/// A piece of a node-local range that lands on one child.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChildPiece {
    /// Offset of the piece in the parent's address space.
    pub logical: u64,
    pub child: usize,
    /// Offset of the piece in the child's address space.
    pub offset: u64,
    pub len: u64,
}

/// A piece of a parity group's range: one data chunk of one stripe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParityPiece {
    pub logical: u64,
    pub stripe: u64,
    /// Data index within the stripe (0..data chunks).
    pub data_index: usize,
    /// Child holding that chunk.
    pub child: usize,
    /// Byte offset within the chunk.
    pub in_chunk: u64,
    pub len: u64,
}

impl Node {
    pub fn member(index: usize, start: u64, len: u64) -> Node {
        Node::Member(MemberRegion { index, start, len })
    }

    pub fn concat(children: Vec<Node>) -> Result<Node, LayoutError> {
        need("concat", 1, children.len())?;
        let mut starts = Vec::with_capacity(children.len() + 1);
        let mut at = 0;
        for c in &children {
            starts.push(at);
            at += c.capacity();
        }
        starts.push(at);
        Ok(Node::Concat(Concat { children, starts }))
    }

    pub fn stripe(unit: u64, children: Vec<Node>) -> Result<Node, LayoutError> {
        need("stripe", 1, children.len())?;
        assert!(unit > 0, "stripe unit must be positive");
        let units_per_child = children
            .iter()
            .map(|c| c.capacity() / unit)
            .min()
            .unwrap_or(0);
        Ok(Node::Stripe(Stripe {
            unit,
            children,
            units_per_child,
        }))
    }

    pub fn mirror(children: Vec<Node>) -> Result<Node, LayoutError> {
        need("mirror", 1, children.len())?;
        let capacity = children.iter().map(Node::capacity).min().unwrap_or(0);
        let copy_base = children
            .iter()
            .scan(0u32, |next, c| {
                let base = *next;
                *next += c.copies();
                Some(base)
            })
            .collect();
        Ok(Node::Mirror(Mirror {
            children,
            capacity,
            copy_base,
        }))
    }

    pub fn parity(
        strip: u64,
        parity: usize,
        layout: ParityLayout,
        children: Vec<Node>,
    ) -> Result<Node, LayoutError> {
        assert!(parity == 1 || parity == 2, "parity must be 1 or 2");
        assert!(strip > 0, "strip must be positive");
        need(
            if parity == 1 { "raid5" } else { "raid6" },
            parity + 2,
            children.len(),
        )?;
        let stripes = children
            .iter()
            .map(|c| c.capacity() / strip)
            .min()
            .unwrap_or(0);
        Ok(Node::Parity(ParityGroup {
            strip,
            parity,
            layout,
            children,
            stripes,
        }))
    }

    /// Bytes of logical address space this node offers.
    pub fn capacity(&self) -> u64 {
        match self {
            Node::Member(m) => m.len,
            Node::Concat(c) => *c.starts.last().expect("concat has starts"),
            Node::Stripe(s) => s.unit * s.units_per_child * s.children.len() as u64,
            Node::Mirror(m) => m.capacity,
            Node::Parity(g) => g.stripes * g.strip * g.data_chunks() as u64,
        }
    }

    pub fn children(&self) -> &[Node] {
        match self {
            Node::Member(_) => &[],
            Node::Concat(c) => &c.children,
            Node::Stripe(s) => &s.children,
            Node::Mirror(m) => &m.children,
            Node::Parity(g) => &g.children,
        }
    }

    /// The most copies any logical byte has in this subtree (1 without mirrors).
    pub fn copies(&self) -> u32 {
        match self {
            Node::Member(_) => 1,
            Node::Mirror(m) => m.children.iter().map(Node::copies).sum(),
            _ => self.children().iter().map(Node::copies).max().unwrap_or(1),
        }
    }

    /// Number of member leaves below (and including) this node.
    pub fn member_count(&self) -> usize {
        match self {
            Node::Member(_) => 1,
            _ => self.children().iter().map(Node::member_count).sum(),
        }
    }

    /// Member indices of the leaves below this node, in tree order.
    pub fn member_indices(&self) -> Vec<usize> {
        let mut out = Vec::new();
        self.visit_members(&mut |m| out.push(m.index));
        out
    }

    /// The same tree with every member leaf's index replaced by `index(old)`: a config's tree
    /// (leaves numbered by config position) renumbered by recorded role, for comparing it
    /// with the tree the superblocks record.
    pub fn renumbered(&self, index: &dyn Fn(usize) -> usize) -> Node {
        let mut out = self.clone();
        out.renumber_in_place(index);
        out
    }

    fn renumber_in_place(&mut self, index: &dyn Fn(usize) -> usize) {
        let children = match self {
            Node::Member(m) => {
                m.index = index(m.index);
                return;
            }
            Node::Concat(c) => &mut c.children,
            Node::Stripe(s) => &mut s.children,
            Node::Mirror(m) => &mut m.children,
            Node::Parity(g) => &mut g.children,
        };
        children.iter_mut().for_each(|c| c.renumber_in_place(index));
    }

    pub fn visit_members(&self, f: &mut impl FnMut(&MemberRegion)) {
        match self {
            Node::Member(m) => f(m),
            _ => self.children().iter().for_each(|c| c.visit_members(f)),
        }
    }

    /// Members whose bytes hold distinct data: capacity ≈ data_members × bytes per member.
    pub fn data_members(&self) -> usize {
        match self {
            Node::Member(_) => 1,
            Node::Concat(_) | Node::Stripe(_) => {
                self.children().iter().map(Node::data_members).sum()
            }
            Node::Mirror(m) => m.children.iter().map(Node::data_members).min().unwrap_or(0),
            Node::Parity(g) => {
                let per = g.children.iter().map(Node::data_members).min().unwrap_or(0);
                per * g.data_chunks()
            }
        }
    }

    /// Logical bytes of one full stripe: the smallest write that needs no read of old data
    /// anywhere in the tree. `None` where nothing is striped (a plain member, JBOD of members).
    pub fn full_stripe_width(&self) -> Option<u64> {
        match self {
            Node::Member(_) => None,
            Node::Concat(c) => c.children.iter().find_map(Node::full_stripe_width),
            Node::Mirror(m) => m.children.iter().find_map(Node::full_stripe_width),
            Node::Stripe(s) => Some(s.unit * s.children.len() as u64),
            Node::Parity(g) => Some(g.strip * g.data_chunks() as u64),
        }
    }

    /// The smallest number of member losses that can make data unreadable.
    pub fn losses_to_fail(&self) -> usize {
        match self {
            Node::Member(_) => 1,
            // Needs every child.
            Node::Concat(_) | Node::Stripe(_) => self
                .children()
                .iter()
                .map(Node::losses_to_fail)
                .min()
                .unwrap_or(0),
            // Needs one child.
            Node::Mirror(m) => m.children.iter().map(Node::losses_to_fail).sum(),
            // Needs all but `parity` children: kill the parity+1 weakest.
            Node::Parity(g) => {
                let mut k: Vec<usize> = g.children.iter().map(Node::losses_to_fail).collect();
                k.sort_unstable();
                k.iter().take(g.parity + 1).sum()
            }
        }
    }

    /// The most member losses that can leave all data readable, when the losses fall luckily.
    pub fn most_losses_survived(&self) -> usize {
        match self {
            Node::Member(_) => 0,
            Node::Concat(_) | Node::Stripe(_) => {
                self.children().iter().map(Node::most_losses_survived).sum()
            }
            Node::Mirror(m) => {
                // Keep one child (as damaged as it can bear), lose every other one whole.
                let total: usize = m.children.iter().map(Node::member_count).sum();
                m.children
                    .iter()
                    .map(|c| total - c.member_count() + c.most_losses_survived())
                    .max()
                    .unwrap_or(0)
            }
            Node::Parity(g) => {
                // Lose `parity` children whole (the ones that add most), damage the rest.
                let base: usize = g.children.iter().map(Node::most_losses_survived).sum();
                let mut extra: Vec<usize> = g
                    .children
                    .iter()
                    .map(|c| c.member_count() - c.most_losses_survived())
                    .collect();
                extra.sort_unstable_by(|a, b| b.cmp(a));
                base + extra.iter().take(g.parity).sum::<usize>()
            }
        }
    }

    /// Whether lost member `member` can be rebuilt with the members for which `failed` is
    /// true gone (it among them): a node above it holds its bytes elsewhere — a parity group
    /// within its tolerance, a mirror with another copy that survives — and writes pass
    /// down to it from there. A parity group beyond its tolerance passes none (it takes no
    /// writes): a mirror of RAID 5 groups does not regenerate a group that lost two members
    /// from the other copy, as md's RAID 1 over failed RAID 5 arrays does not.
    pub fn rebuilds(&self, member: usize, failed: &dyn Fn(usize) -> bool) -> bool {
        self.reach(member, failed) == Some(Reach::Rebuilt)
    }

    /// How a rebuild reaches `member` from this node (`None`: it is not below).
    fn reach(&self, member: usize, failed: &dyn Fn(usize) -> bool) -> Option<Reach> {
        if let Node::Member(m) = self {
            return (m.index == member).then_some(Reach::Open);
        }
        let (i, below) = self
            .children()
            .iter()
            .enumerate()
            .find_map(|(i, c)| c.reach(member, failed).map(|r| (i, r)))?;
        if below != Reach::Open {
            return Some(below);
        }
        Some(match self {
            Node::Mirror(m) => {
                let other = m.children.iter().enumerate();
                if other
                    .filter(|&(j, _)| j != i)
                    .any(|(_, c)| c.survives(failed))
                {
                    Reach::Rebuilt
                } else {
                    Reach::Open
                }
            }
            Node::Parity(_) if self.survives(failed) => Reach::Rebuilt,
            Node::Parity(_) => Reach::Blocked,
            _ => Reach::Open,
        })
    }

    /// Whether all data stays readable with the members for which `failed` is true gone.
    pub fn survives(&self, failed: &dyn Fn(usize) -> bool) -> bool {
        match self {
            Node::Member(m) => !failed(m.index),
            Node::Concat(_) | Node::Stripe(_) => self.children().iter().all(|c| c.survives(failed)),
            Node::Mirror(m) => m.children.iter().any(|c| c.survives(failed)),
            Node::Parity(g) => {
                let lost = g.children.iter().filter(|c| !c.survives(failed)).count();
                lost <= g.parity
            }
        }
    }

    /// Whether member `index` may be lost (failed) with the members for which `lost` is true
    /// (failed, or not current yet) already gone: all data stays readable without it, or it
    /// is gone already. The one rule for taking a member out short of the operator's
    /// `--force`: `nbraid fail` refuses the rest, and the engine keeps them serving past
    /// their bad-block limit (md keeps its last device on read errors).
    pub fn may_lose(&self, index: usize, lost: &dyn Fn(usize) -> bool) -> bool {
        lost(index) || self.survives(&|m| m == index || lost(m))
    }

    /// Whether member `index` lies under a parity group: other members' bytes are derived
    /// from its own, so a write it failed leaves them stale (it must be failed, whatever it
    /// costs, or a later reconstruction reads wrong bytes).
    pub fn under_parity(&self, index: usize) -> bool {
        match self {
            Node::Member(_) => false,
            Node::Parity(g) => g
                .children
                .iter()
                .any(|c| c.member_indices().contains(&index)),
            _ => self.children().iter().any(|c| c.under_parity(index)),
        }
    }
}

/// How a rebuild reaches a lost member from a node above it ([`Node::rebuilds`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reach {
    /// Some node on the way holds its bytes elsewhere and writes them down to it.
    Rebuilt,
    /// Writes reach it from here, nothing so far holds its bytes.
    Open,
    /// A parity group beyond its tolerance is on the way: no writes pass.
    Blocked,
}

fn need(kind: &'static str, min: usize, got: usize) -> Result<(), LayoutError> {
    if got < min {
        Err(LayoutError::BadNode { kind, min, got })
    } else {
        Ok(())
    }
}

impl Concat {
    pub fn children(&self) -> &[Node] {
        &self.children
    }

    /// Splits `[offset, offset+len)` at child boundaries.
    pub fn split(&self, offset: u64, len: u64) -> Vec<ChildPiece> {
        let mut out = Vec::new();
        let end = offset + len;
        let mut at = offset;
        // First child whose range contains `at`.
        let mut child = self.starts.partition_point(|&s| s <= at).saturating_sub(1);
        while at < end && child < self.children.len() {
            let child_end = self.starts[child + 1];
            let piece_end = end.min(child_end);
            if piece_end > at {
                out.push(ChildPiece {
                    logical: at,
                    child,
                    offset: at - self.starts[child],
                    len: piece_end - at,
                });
                at = piece_end;
            }
            child += 1;
        }
        out
    }
}

impl Stripe {
    pub fn unit(&self) -> u64 {
        self.unit
    }

    pub fn children(&self) -> &[Node] {
        &self.children
    }

    /// Splits `[offset, offset+len)` at unit boundaries: unit `u` lives on child `u % n` at
    /// child offset `(u / n) * unit`.
    pub fn split(&self, offset: u64, len: u64) -> Vec<ChildPiece> {
        let n = self.children.len() as u64;
        let mut out = Vec::new();
        let end = offset + len;
        let mut at = offset;
        while at < end {
            let u = at / self.unit;
            let in_unit = at % self.unit;
            let piece = (self.unit - in_unit).min(end - at);
            out.push(ChildPiece {
                logical: at,
                child: (u % n) as usize,
                offset: (u / n) * self.unit + in_unit,
                len: piece,
            });
            at += piece;
        }
        out
    }
}

impl Mirror {
    pub fn children(&self) -> &[Node] {
        &self.children
    }

    /// First copy number of child `i`'s copies.
    pub fn copy_base(&self, i: usize) -> u32 {
        self.copy_base[i]
    }
}

impl ParityGroup {
    pub fn strip(&self) -> u64 {
        self.strip
    }

    /// Parity chunks per stripe: 1 (RAID 5) or 2 (RAID 6).
    pub fn parity(&self) -> usize {
        self.parity
    }

    pub fn layout(&self) -> ParityLayout {
        self.layout
    }

    pub fn children(&self) -> &[Node] {
        &self.children
    }

    pub fn stripes(&self) -> u64 {
        self.stripes
    }

    pub fn data_chunks(&self) -> usize {
        self.children.len() - self.parity
    }

    /// Logical bytes of one stripe.
    pub fn stripe_width(&self) -> u64 {
        self.strip * self.data_chunks() as u64
    }

    /// Which child holds P, Q and each data chunk of `stripe`.
    pub fn roles(&self, stripe: u64) -> StripeRoles {
        StripeRoles::md(self.layout, self.children.len(), self.parity, stripe)
    }

    /// Where stripe `stripe`'s chunks begin on every child.
    pub fn chunk_offset(&self, stripe: u64) -> u64 {
        stripe * self.strip
    }

    /// Splits `[offset, offset+len)` into data chunk pieces.
    pub fn split(&self, offset: u64, len: u64) -> Vec<ParityPiece> {
        let width = self.stripe_width();
        let mut out = Vec::new();
        let end = offset + len;
        let mut at = offset;
        let mut roles: Option<(u64, StripeRoles)> = None;
        while at < end {
            let stripe = at / width;
            let in_stripe = at % width;
            let data_index = (in_stripe / self.strip) as usize;
            let in_chunk = in_stripe % self.strip;
            let piece = (self.strip - in_chunk).min(end - at);
            if roles.as_ref().map(|(s, _)| *s) != Some(stripe) {
                roles = Some((stripe, self.roles(stripe)));
            }
            let (_, r) = roles.as_ref().expect("set above");
            out.push(ParityPiece {
                logical: at,
                stripe,
                data_index,
                child: r.data[data_index],
                in_chunk,
                len: piece,
            });
            at += piece;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raid5(members: std::ops::Range<usize>) -> Node {
        let leaves = members.map(|i| Node::member(i, 0, 1 << 20)).collect();
        Node::parity(4096, 1, ParityLayout::LeftSymmetric, leaves).expect("raid5")
    }

    /// A member is rebuilt by the nearest node above it that still holds its bytes, unless a
    /// parity group beyond its tolerance lies between.
    #[test]
    fn rebuilds_only_through_nodes_that_take_writes() {
        let lost = |l: &'static [usize]| move |m: usize| l.contains(&m);
        let mirror_of_groups = Node::mirror(vec![raid5(0..3), raid5(3..6)]).expect("mirror");
        assert!(mirror_of_groups.rebuilds(0, &lost(&[0])));
        assert!(mirror_of_groups.rebuilds(0, &lost(&[0, 4])));
        // Its group lost another member: the other copy survives, the group takes no writes.
        assert!(mirror_of_groups.survives(&lost(&[0, 2])));
        assert!(!mirror_of_groups.rebuilds(0, &lost(&[0, 2])));
        let pairs = (0..3)
            .map(|p| {
                Node::mirror(vec![
                    Node::member(2 * p, 0, 1 << 20),
                    Node::member(2 * p + 1, 0, 1 << 20),
                ])
                .expect("pair")
            })
            .collect();
        let group_of_pairs =
            Node::parity(4096, 1, ParityLayout::LeftSymmetric, pairs).expect("raid5");
        assert!(group_of_pairs.rebuilds(0, &lost(&[0])));
        // Both copies of a pair: the group rebuilds the pair and writes it down to the leaf.
        assert!(group_of_pairs.rebuilds(0, &lost(&[0, 1])));
        assert!(!group_of_pairs.rebuilds(0, &lost(&[0, 1, 2, 3])));
        assert!(!raid5(0..3).rebuilds(0, &lost(&[0, 1])));
        assert!(raid5(0..3).rebuilds(1, &lost(&[1])));
    }

    /// A member may go when the tree survives without it beside those lost already, or when
    /// it is lost already; never the only readable copy of anything.
    #[test]
    fn may_lose_only_what_the_tree_does_without() {
        let lost = |l: &'static [usize]| move |m: usize| l.contains(&m);
        let leaves = |n: usize| (0..n).map(|i| Node::member(i, 0, 1 << 20)).collect();
        let raid0 = Node::stripe(4096, leaves(2)).expect("raid0");
        let jbod = Node::concat(leaves(2)).expect("jbod");
        let raid1 = Node::mirror(leaves(2)).expect("raid1");
        let bare = Node::member(0, 0, 1 << 20);
        for (what, t) in [("raid0", &raid0), ("jbod", &jbod)] {
            assert!(!t.may_lose(0, &lost(&[])), "{what}");
            assert!(!t.may_lose(1, &lost(&[])), "{what}");
        }
        assert!(!bare.may_lose(0, &lost(&[])));
        assert!(raid1.may_lose(0, &lost(&[])));
        assert!(!raid1.may_lose(1, &lost(&[0])), "the only readable copy");
        assert!(raid1.may_lose(0, &lost(&[0])), "lost already");
        assert!(raid5(0..3).may_lose(2, &lost(&[])));
        assert!(
            !raid5(0..3).may_lose(2, &lost(&[0])),
            "past the group's tolerance"
        );
        // A region beside the rest: a mirror concatenated with a bare leaf.
        let mixed = Node::concat(vec![
            Node::mirror(leaves(2)).expect("pair"),
            Node::member(2, 0, 1 << 20),
        ])
        .expect("concat");
        assert!(mixed.may_lose(0, &lost(&[])));
        assert!(!mixed.may_lose(2, &lost(&[])));
    }

    /// Members whose bytes a parity group derives others from, however deep they sit.
    #[test]
    fn under_parity_finds_members_of_parity_groups_at_any_depth() {
        let leaves = |r: std::ops::Range<usize>| r.map(|i| Node::member(i, 0, 1 << 20)).collect();
        let raid0 = Node::stripe(4096, leaves(0..2)).expect("raid0");
        assert!(!raid0.under_parity(0) && !raid0.under_parity(1));
        assert!(raid5(0..3).under_parity(2));
        let pairs: Vec<Node> = (0..3)
            .map(|p| Node::mirror(leaves(2 * p..2 * p + 2)).expect("pair"))
            .collect();
        let raid5_of_pairs = Node::parity(4096, 1, ParityLayout::LeftSymmetric, pairs).unwrap();
        assert!(raid5_of_pairs.under_parity(5));
        let beside = Node::concat(vec![raid5(0..3), Node::member(3, 0, 1 << 20)]).unwrap();
        assert!(beside.under_parity(1) && !beside.under_parity(3));
    }
}
