//! The flattened view: a logical range of the whole volume as member extents, every copy of
//! every byte, with the parity chunks of the stripes it touches.

use crate::node::Node;
use crate::rotation::Role;
use crate::LayoutError;
use serde::Serialize;

/// Names one stripe of one parity group. Groups are numbered in tree order (span order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct StripeId {
    pub group: usize,
    pub stripe: u64,
}

/// A run of bytes on one member.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Extent {
    /// Volume offset of the first byte (for P and Q: of the data row the bytes protect, i.e.
    /// the offset within the chunk is the same as that of the data).
    pub logical: u64,
    pub len: u64,
    /// Index into the volume's member list.
    pub member: usize,
    /// Absolute byte offset on the member (its region start included).
    pub offset: u64,
    pub role: Role,
    /// The parity stripe the bytes belong to, for data under a parity group and for P/Q.
    pub stripe: Option<StripeId>,
    /// Which copy of a mirrored byte this is (0 where there are no mirrors). Distinct copies of
    /// one logical byte have distinct numbers.
    pub copy: u32,
}

/// Everything behind a logical range.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Mapping {
    /// Data extents in logical order (copies of one piece next to each other).
    pub data: Vec<Extent>,
    /// P and Q extents of the touched stripes, covering the chunk rows the range touches.
    /// (Under nested parity, an inner group's P row may be listed once per outer piece.)
    pub parity: Vec<Extent>,
}

/// Maps `[offset, offset+len)` of `root`'s address space.
pub fn map(root: &Node, offset: u64, len: u64) -> Result<Mapping, LayoutError> {
    let capacity = root.capacity();
    if offset.checked_add(len).is_none_or(|end| end > capacity) {
        return Err(LayoutError::OutOfRange {
            offset,
            len,
            capacity,
        });
    }
    let mut out = Mapping::default();
    if len == 0 {
        return Ok(out);
    }
    let mut group_base = 0;
    walk(
        root,
        offset,
        len,
        offset,
        Ctx::default(),
        &mut group_base,
        &mut out,
    );
    Ok(out)
}

/// What the path from the root says about the bytes being mapped.
#[derive(Clone, Copy, Default)]
struct Ctx {
    role: Option<Role>,
    stripe: Option<StripeId>,
    copy: u32,
}

/// Number of parity groups in a subtree (for numbering groups in tree order).
fn groups_in(node: &Node) -> usize {
    let own = usize::from(matches!(node, Node::Parity(_)));
    own + node.children().iter().map(groups_in).sum::<usize>()
}

/// `logical` is the volume offset of the first byte of `[offset, offset+len)` of `node`.
/// `group_base` is the number of the first parity group inside `node`.
fn walk(
    node: &Node,
    offset: u64,
    len: u64,
    logical: u64,
    ctx: Ctx,
    group_base: &mut usize,
    out: &mut Mapping,
) {
    let base = *group_base;
    match node {
        Node::Member(m) => {
            let e = Extent {
                logical,
                len,
                member: m.index,
                offset: m.start + offset,
                role: ctx.role.unwrap_or(Role::Data),
                stripe: ctx.stripe,
                copy: ctx.copy,
            };
            if e.role == Role::Data {
                out.data.push(e);
            } else {
                out.parity.push(e);
            }
        }
        Node::Concat(c) => {
            for p in c.split(offset, len) {
                let mut gb = base + child_group_base(c.children(), p.child);
                walk(
                    &c.children()[p.child],
                    p.offset,
                    p.len,
                    logical + (p.logical - offset),
                    ctx,
                    &mut gb,
                    out,
                );
            }
        }
        Node::Stripe(s) => {
            for p in s.split(offset, len) {
                let mut gb = base + child_group_base(s.children(), p.child);
                walk(
                    &s.children()[p.child],
                    p.offset,
                    p.len,
                    logical + (p.logical - offset),
                    ctx,
                    &mut gb,
                    out,
                );
            }
        }
        Node::Mirror(m) => {
            for (i, child) in m.children().iter().enumerate() {
                let mut gb = base + child_group_base(m.children(), i);
                let c = Ctx {
                    copy: ctx.copy + m.copy_base(i),
                    ..ctx
                };
                walk(child, offset, len, logical, c, &mut gb, out);
            }
        }
        Node::Parity(g) => {
            let pieces = g.split(offset, len);
            for p in &pieces {
                let mut gb = base + 1 + child_group_base(g.children(), p.child);
                // Bytes of an outer P/Q keep naming the outer stripe they protect.
                let c = Ctx {
                    stripe: match ctx.role {
                        None => Some(StripeId {
                            group: base,
                            stripe: p.stripe,
                        }),
                        Some(_) => ctx.stripe,
                    },
                    ..ctx
                };
                walk(
                    &g.children()[p.child],
                    g.chunk_offset(p.stripe) + p.in_chunk,
                    p.len,
                    logical + (p.logical - offset),
                    c,
                    &mut gb,
                    out,
                );
            }
            // P and Q cover, per stripe, the union of the chunk rows touched.
            let mut i = 0;
            while i < pieces.len() {
                let stripe = pieces[i].stripe;
                let mut lo = u64::MAX;
                let mut hi = 0;
                let mut j = i;
                while j < pieces.len() && pieces[j].stripe == stripe {
                    lo = lo.min(pieces[j].in_chunk);
                    hi = hi.max(pieces[j].in_chunk + pieces[j].len);
                    j += 1;
                }
                let roles = g.roles(stripe);
                // The stripe row lies inside this call's contiguous piece of the volume
                // (outer stripe units are whole span stripes), so shift by the same amount.
                let row_logical = (logical + stripe * g.stripe_width() + lo) - offset;
                let holders =
                    std::iter::once((roles.p, Role::P)).chain(roles.q.map(|q| (q, Role::Q)));
                for (child, role) in holders {
                    let mut gb = base + 1 + child_group_base(g.children(), child);
                    let c = Ctx {
                        role: Some(role),
                        stripe: Some(StripeId {
                            group: base,
                            stripe,
                        }),
                        ..ctx
                    };
                    walk(
                        &g.children()[child],
                        g.chunk_offset(stripe) + lo,
                        hi - lo,
                        row_logical,
                        c,
                        &mut gb,
                        out,
                    );
                }
                i = j;
            }
        }
    }
}

/// Parity groups in children before `child` (so groups get tree-order numbers).
fn child_group_base(children: &[Node], child: usize) -> usize {
    children[..child].iter().map(groups_in).sum()
}
