//! The flattened view: a logical range of the whole volume as member extents, every copy of
//! every byte, with the parity chunks of the stripes it touches.

use crate::node::{ChildPiece, Node, ParityGroup, ParityPiece};
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
    let whole = Span {
        offset,
        len,
        logical: offset,
    };
    walk(root, whole, Ctx::default(), 0, &mut out);
    Ok(out)
}

/// What the path from the root says about the bytes being mapped.
#[derive(Clone, Copy, Default)]
struct Ctx {
    role: Option<Role>,
    stripe: Option<StripeId>,
    copy: u32,
}

/// Bytes `[offset, offset+len)` of a node's address space, the first of them at volume
/// offset `logical`.
#[derive(Clone, Copy)]
struct Span {
    offset: u64,
    len: u64,
    logical: u64,
}

/// Number of parity groups in a subtree (for numbering groups in tree order).
fn groups_in(node: &Node) -> usize {
    let own = usize::from(matches!(node, Node::Parity(_)));
    own + node.children().iter().map(groups_in).sum::<usize>()
}

/// Maps `span` of `node`; `group_base` is the number of the first parity group inside `node`.
fn walk(node: &Node, span: Span, ctx: Ctx, group_base: usize, out: &mut Mapping) {
    match node {
        Node::Member(m) => {
            let e = Extent {
                logical: span.logical,
                len: span.len,
                member: m.index,
                offset: m.start + span.offset,
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
        Node::Concat(c) => walk_pieces(
            c.children(),
            &c.split(span.offset, span.len),
            span,
            ctx,
            group_base,
            out,
        ),
        Node::Stripe(s) => walk_pieces(
            s.children(),
            &s.split(span.offset, span.len),
            span,
            ctx,
            group_base,
            out,
        ),
        Node::Mirror(m) => {
            for (i, child) in m.children().iter().enumerate() {
                let copy = Ctx {
                    copy: ctx.copy + m.copy_base(i),
                    ..ctx
                };
                let base = group_base + child_group_base(m.children(), i);
                walk(child, span, copy, base, out);
            }
        }
        Node::Parity(g) => {
            let pieces = g.split(span.offset, span.len);
            walk_parity_data(g, &pieces, span, ctx, group_base, out);
            walk_parity_rows(g, &pieces, span, ctx, group_base, out);
        }
    }
}

/// Concat and stripe: each piece goes to its child, at its place in the volume.
fn walk_pieces(
    children: &[Node],
    pieces: &[ChildPiece],
    span: Span,
    ctx: Ctx,
    group_base: usize,
    out: &mut Mapping,
) {
    for p in pieces {
        let child = Span {
            offset: p.offset,
            len: p.len,
            logical: span.logical + (p.logical - span.offset),
        };
        let base = group_base + child_group_base(children, p.child);
        walk(&children[p.child], child, ctx, base, out);
    }
}

/// A parity group's data pieces, each naming the stripe it belongs to.
fn walk_parity_data(
    g: &ParityGroup,
    pieces: &[ParityPiece],
    span: Span,
    ctx: Ctx,
    group_base: usize,
    out: &mut Mapping,
) {
    for p in pieces {
        // Bytes of an outer P/Q keep naming the outer stripe they protect.
        let stripe = match ctx.role {
            None => Some(StripeId {
                group: group_base,
                stripe: p.stripe,
            }),
            Some(_) => ctx.stripe,
        };
        let child = Span {
            offset: g.chunk_offset(p.stripe) + p.in_chunk,
            len: p.len,
            logical: span.logical + (p.logical - span.offset),
        };
        let base = group_base + 1 + child_group_base(g.children(), p.child);
        walk(
            &g.children()[p.child],
            child,
            Ctx { stripe, ..ctx },
            base,
            out,
        );
    }
}

/// P and Q of a parity group cover, per stripe, the union of the chunk rows touched.
fn walk_parity_rows(
    g: &ParityGroup,
    pieces: &[ParityPiece],
    span: Span,
    ctx: Ctx,
    group_base: usize,
    out: &mut Mapping,
) {
    for row in pieces.chunk_by(|a, b| a.stripe == b.stripe) {
        let stripe = row[0].stripe;
        let lo = row.iter().map(|p| p.in_chunk).min().unwrap_or(0);
        let hi = row.iter().map(|p| p.in_chunk + p.len).max().unwrap_or(0);
        let roles = g.roles(stripe);
        // The stripe row lies inside this call's contiguous piece of the volume (outer stripe
        // units are whole span stripes), so shift by the same amount.
        let rows = Span {
            offset: g.chunk_offset(stripe) + lo,
            len: hi - lo,
            logical: (span.logical + stripe * g.stripe_width() + lo) - span.offset,
        };
        let holders = std::iter::once((roles.p, Role::P)).chain(roles.q.map(|q| (q, Role::Q)));
        for (child, role) in holders {
            let c = Ctx {
                role: Some(role),
                stripe: Some(StripeId {
                    group: group_base,
                    stripe,
                }),
                ..ctx
            };
            let base = group_base + 1 + child_group_base(g.children(), child);
            walk(&g.children()[child], rows, c, base, out);
        }
    }
}

/// Parity groups in children before `child` (so groups get tree-order numbers).
fn child_group_base(children: &[Node], child: usize) -> usize {
    children[..child].iter().map(groups_in).sum()
}
