//! The engine tree a [`super::Volume`] is built from: the checks of a layout against the
//! members given, and one engine node per layout node.

use super::VolumeOptions;
use crate::member::Member;
use crate::mirror::MirrorNode;
use crate::node::{ArrayNode, LeafNode, MemberTable};
use crate::raid::{ParityNode, SyncState};
use crate::split::SplitNode;
use nbraid_layout::Node;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

/// Parity groups in the tree under `node` (each has its own stripe cache).
pub(super) fn parity_groups(node: &Node) -> usize {
    let own = usize::from(matches!(node, Node::Parity(_)));
    own + node.children().iter().map(parity_groups).sum::<usize>()
}

/// Collects assembly problems (members missing or too small) and counts parity groups.
pub(super) fn check_tree(
    node: &Node,
    members: &[Arc<dyn Member>],
    problems: &mut Vec<String>,
    parity_groups: &mut usize,
) {
    match node {
        Node::Member(m) => match members.get(m.index) {
            None => problems.push(format!(
                "the layout uses member {} but only {} members were given",
                m.index,
                members.len()
            )),
            Some(member) => {
                let end = m.start.checked_add(m.len);
                if end.is_none_or(|end| end > member.len()) {
                    problems.push(format!(
                        "member {} (`{}`) has {} bytes but the layout uses bytes {}..{} of it",
                        m.index,
                        member.name(),
                        member.len(),
                        m.start,
                        m.start.saturating_add(m.len)
                    ));
                }
            }
        },
        Node::Parity(_) => *parity_groups += 1,
        _ => {}
    }
    for c in node.children() {
        check_tree(c, members, problems, parity_groups);
    }
}

/// The engine node for layout `node` and its children, over the shared member table.
pub(super) fn build(
    node: &Node,
    table: &Arc<MemberTable>,
    opts: &VolumeOptions,
    (repairs, ppl): (&Arc<AtomicU64>, Option<&crate::ppl::PplSetup>),
    groups: &mut u32,
) -> Box<dyn ArrayNode> {
    // Parity groups are numbered in preorder (the partial-parity log's group numbers).
    let group = *groups;
    if matches!(node, Node::Parity(_)) {
        *groups += 1;
    }
    let kids: Vec<Box<dyn ArrayNode>> = node
        .children()
        .iter()
        .map(|c| build(c, table, opts, (repairs, ppl), groups))
        .collect();
    match node {
        Node::Member(m) => Box::new(
            LeafNode::new(m.index, m.start, m.len, table.clone()).with_checksums(
                (opts.checksums.as_ref()).and_then(|c| c.for_region(m.index, m.start, m.len)),
            ),
        ),
        Node::Concat(c) => Box::new(SplitNode::new(c.clone(), kids, node.capacity())),
        Node::Stripe(s) => Box::new(SplitNode::new(s.clone(), kids, node.capacity())),
        Node::Mirror(_) => Box::new(
            MirrorNode::new(
                kids,
                node.capacity(),
                opts.read_policy,
                opts.mirror_seq_piece,
                repairs.clone(),
            )
            .with_members(table.clone()),
        ),
        Node::Parity(g) => {
            let leaves: Option<Vec<usize>> = node
                .children()
                .iter()
                .map(|c| match c {
                    Node::Member(m) => Some(m.index),
                    _ => None,
                })
                .collect();
            let log = match (ppl, leaves) {
                (Some(setup), Some(members)) => {
                    crate::ppl::GroupLog::new(setup, group, g, members, table.clone())
                }
                _ => None,
            };
            Box::new(ParityNode::in_volume(
                g.clone(),
                kids,
                node.capacity(),
                SyncState::at_assembly(opts.members_known_zero),
                opts.cache,
                opts.cache_max_age,
                repairs.clone(),
                (log, table.clone()),
            ))
        }
    }
}
