//! A declared tree once checked ([`Spec`]) and what a volume's geometry is built from
//! ([`Plan`]: a named level's shape or a declared tree): their sizing for region allocation and
//! the layout [`Node`] they build. No config text here; `tree` checks the text into a `Spec`.

use crate::allocate::Sizing;
use nbraid_layout::{Geometry, LayoutError, Node, ParityLayout, Region, Shape, STRIP_MIN};

/// A checked tree, before member sizes are known. Leaves are positions in the volume's
/// member list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Spec {
    Member(usize),
    Concat(Vec<Spec>),
    Stripe {
        unit: u64,
        children: Vec<Spec>,
    },
    Mirror(Vec<Spec>),
    Parity {
        strip: u64,
        parity: usize,
        layout: ParityLayout,
        children: Vec<Spec>,
    },
}

impl Spec {
    pub(crate) fn children(&self) -> &[Spec] {
        match self {
            Spec::Member(_) => &[],
            Spec::Concat(c) | Spec::Mirror(c) => c,
            Spec::Stripe { children, .. } | Spec::Parity { children, .. } => children,
        }
    }

    /// Logical bytes of one full stripe (as [`Node::full_stripe_width`]), known before sizes.
    pub(crate) fn width(&self) -> Option<u64> {
        match self {
            Spec::Member(_) | Spec::Concat(_) => None,
            Spec::Mirror(c) => c.iter().find_map(Spec::width),
            Spec::Stripe { unit, children } => Some(unit * children.len() as u64),
            Spec::Parity {
                strip,
                parity,
                children,
                ..
            } => Some(strip * (children.len() - parity) as u64),
        }
    }

    /// The unit member regions are whole multiples of: the largest power-of-two strip in the
    /// tree (every strip of a parity group or stripe of members divides it), at least 4 KiB.
    pub(crate) fn member_unit(&self) -> u64 {
        let own = match self {
            Spec::Stripe { unit, .. } if unit.is_power_of_two() => *unit,
            Spec::Parity { strip, .. } => *strip,
            _ => STRIP_MIN,
        };
        self.children()
            .iter()
            .map(Spec::member_unit)
            .fold(own, u64::max)
    }

    /// The layout tree over one region per volume member.
    pub(crate) fn build(&self, regions: &[Region]) -> Result<Node, LayoutError> {
        let kids = |c: &[Spec]| {
            c.iter()
                .map(|c| c.build(regions))
                .collect::<Result<Vec<_>, _>>()
        };
        match self {
            Spec::Member(i) => Ok(Node::member(*i, regions[*i].start, regions[*i].len)),
            Spec::Concat(c) => Node::concat(kids(c)?),
            Spec::Stripe { unit, children } => Node::stripe(*unit, kids(children)?),
            Spec::Mirror(c) => Node::mirror(kids(c)?),
            Spec::Parity {
                strip,
                parity,
                layout,
                children,
            } => Node::parity(*strip, *parity, *layout, kids(children)?),
        }
    }

    pub(crate) fn member_count(&self) -> usize {
        match self {
            Spec::Member(_) => 1,
            _ => self.children().iter().map(Spec::member_count).sum(),
        }
    }
}

/// Sizes a declared tree: every member gives the same whole number of [`Spec::member_unit`]s.
impl Sizing for Spec {
    fn name(&self) -> String {
        "the tree".into()
    }

    fn concatenates_members(&self) -> bool {
        false
    }

    fn unit(&self) -> u64 {
        self.member_unit()
    }

    fn has_strips(&self) -> bool {
        // Its nodes set their own units: no `strip_size` to lower, and a tree of mirrors
        // has no strips at all.
        false
    }

    fn capacity_at(&self, member_len: u64) -> u64 {
        let region = Region {
            start: 0,
            len: member_len,
        };
        self.build(&vec![region; self.member_count()])
            .map_or(0, |n| n.capacity())
    }

    fn member_len_for(&self, capacity: u64) -> u64 {
        // Capacity grows with the member length: double, then bisect, in whole units.
        let unit = self.member_unit();
        let mut hi = 1u64;
        while self.capacity_at(hi * unit) < capacity {
            if hi > (u64::MAX / 4) / unit {
                return u64::MAX;
            }
            hi *= 2;
        }
        let mut lo = 0u64;
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if self.capacity_at(mid * unit) >= capacity {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        hi * unit
    }
}

/// What a volume's geometry is built from: a named level's shape or a declared tree.
pub(crate) enum Plan {
    Named(Shape),
    Declared(Spec),
}

impl Plan {
    pub(crate) fn sizing(&self) -> &dyn Sizing {
        match self {
            Plan::Named(shape) => shape,
            Plan::Declared(spec) => spec,
        }
    }

    /// The geometry over one region per volume member.
    pub(crate) fn geometry(&self, regions: &[Region]) -> Result<Geometry, LayoutError> {
        match self {
            Plan::Named(shape) => Geometry::new(shape.clone(), regions),
            Plan::Declared(spec) => Ok(Geometry::from_tree(spec.build(regions)?)),
        }
    }

    pub(crate) fn into_shape(self) -> Option<Shape> {
        match self {
            Plan::Named(shape) => Some(shape),
            Plan::Declared(_) => None,
        }
    }
}
