//! The geometry tree's bytes: one node kind code, its fields, its children (depth-first).

use super::validate::invalid;
use super::{MAX_MEMBERS, MAX_REGION_END, MAX_TREE_DEPTH};
use crate::metadata::codec::{ByteReader, Writer};
use crate::metadata::MetadataResult;
use nbraid_layout::{Node, ParityLayout};

const NODE_MEMBER: u8 = 0;
const NODE_CONCAT: u8 = 1;
const NODE_STRIPE: u8 = 2;
const NODE_MIRROR: u8 = 3;
const NODE_PARITY: u8 = 4;

fn layout_code(l: ParityLayout) -> u8 {
    // md's algorithm numbers (ALGORITHM_LEFT_ASYMMETRIC = 0 … RIGHT_SYMMETRIC = 3).
    match l {
        ParityLayout::LeftAsymmetric => 0,
        ParityLayout::RightAsymmetric => 1,
        ParityLayout::LeftSymmetric => 2,
        ParityLayout::RightSymmetric => 3,
    }
}

fn encode_children(w: &mut Writer, children: &[Node]) {
    w.u32(children.len() as u32);
    for c in children {
        encode_node(w, c);
    }
}

pub(super) fn encode_node(w: &mut Writer, n: &Node) {
    match n {
        Node::Member(m) => {
            w.u8(NODE_MEMBER);
            w.u32(m.index as u32);
            w.u64(m.start);
            w.u64(m.len);
        }
        Node::Concat(c) => {
            w.u8(NODE_CONCAT);
            encode_children(w, c.children());
        }
        Node::Stripe(s) => {
            w.u8(NODE_STRIPE);
            w.u64(s.unit());
            encode_children(w, s.children());
        }
        Node::Mirror(m) => {
            w.u8(NODE_MIRROR);
            encode_children(w, m.children());
        }
        Node::Parity(g) => {
            w.u8(NODE_PARITY);
            w.u64(g.strip());
            w.u8(g.parity() as u8);
            w.u8(layout_code(g.layout()));
            encode_children(w, g.children());
        }
    }
}

fn decode_children(r: &mut ByteReader, members: usize, depth: usize) -> MetadataResult<Vec<Node>> {
    let n = r.u32("child count")?;
    if n == 0 || n > MAX_MEMBERS {
        return Err(invalid("child count", format!("{n} (1..={MAX_MEMBERS})")));
    }
    (0..n).map(|_| decode_node(r, members, depth + 1)).collect()
}

pub(super) fn decode_node(
    r: &mut ByteReader,
    members: usize,
    depth: usize,
) -> MetadataResult<Node> {
    if depth > MAX_TREE_DEPTH {
        return Err(invalid(
            "tree",
            format!("nested deeper than {MAX_TREE_DEPTH}"),
        ));
    }
    let layout_err = |e: nbraid_layout::LayoutError| invalid("tree", e.to_string());
    match r.u8("node kind")? {
        NODE_MEMBER => {
            let index = r.u32("member index")? as usize;
            let start = r.u64("region start")?;
            let len = r.u64("region length")?;
            if index >= members {
                return Err(invalid(
                    "tree",
                    format!("member index {index} of {members}"),
                ));
            }
            if len == 0
                || start
                    .checked_add(len)
                    .is_none_or(|end| end > MAX_REGION_END)
            {
                return Err(invalid(
                    "tree",
                    format!("member {index} region {start}+{len}"),
                ));
            }
            Ok(Node::member(index, start, len))
        }
        NODE_CONCAT => Node::concat(decode_children(r, members, depth)?).map_err(layout_err),
        NODE_STRIPE => {
            let unit = r.u64("stripe unit")?;
            if unit == 0 || !unit.is_multiple_of(512) {
                return Err(invalid("stripe unit", format!("{unit} bytes")));
            }
            Node::stripe(unit, decode_children(r, members, depth)?).map_err(layout_err)
        }
        NODE_MIRROR => Node::mirror(decode_children(r, members, depth)?).map_err(layout_err),
        NODE_PARITY => {
            let strip = r.u64("strip")?;
            let parity = r.u8("parity count")?;
            let layout = match r.u8("parity layout")? {
                0 => ParityLayout::LeftAsymmetric,
                1 => ParityLayout::RightAsymmetric,
                2 => ParityLayout::LeftSymmetric,
                3 => ParityLayout::RightSymmetric,
                x => return Err(invalid("parity layout", format!("code {x} (0..=3)"))),
            };
            if strip == 0 || !strip.is_multiple_of(512) {
                return Err(invalid("strip", format!("{strip} bytes")));
            }
            if parity != 1 && parity != 2 {
                return Err(invalid("parity count", format!("{parity} (1 or 2)")));
            }
            let children = decode_children(r, members, depth)?;
            Node::parity(strip, parity as usize, layout, children).map_err(layout_err)
        }
        k => Err(invalid("node kind", format!("{k} (0..=4)"))),
    }
}
