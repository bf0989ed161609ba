//! Which parity groups of a volume the write-hole log leaves out, and what that means, for
//! `nbraid check`. The engine logs a group only when every child is a member region
//! (`nbraid_layout::is_logged`; docs/FORMAT.md, "The RAID 5/6 write hole"): a group over
//! mirrors, stripes, concats or other groups keeps its parity on no single member. Such a
//! volume resyncs before it serves after an unclean stop; a whole child of such a group lost
//! before that resync ends is rebuilt from parity the crash may have torn. With
//! `write_hole = "off"` no group is logged. Pure.

use crate::tree::tree_text;
use nbraid_layout::{is_logged, Node};

/// Every parity group of `root` the engine writes no log for, in preorder, each on one line
/// (members by `ids`): all of them with the log off (`ppl` false), else those whose
/// children are not all member regions.
pub fn unlogged_groups(root: &Node, ppl: bool, ids: &[&str]) -> Vec<String> {
    fn walk(n: &Node, ppl: bool, ids: &[&str], out: &mut Vec<String>) {
        if let Node::Parity(g) = n {
            if !ppl || !is_logged(g) {
                out.push(tree_text(n, ids));
            }
        }
        for c in n.children() {
            walk(c, ppl, ids, out);
        }
    }
    let mut out = Vec::new();
    walk(root, ppl, ids, &mut out);
    out
}

/// What a volume whose `unlogged` groups (of `groups` parity groups; `ppl`: the log is on)
/// risks, in a sentence; `None` when every group is logged.
pub fn note(unlogged: &[String], groups: usize, ppl: bool) -> Option<String> {
    if unlogged.is_empty() {
        return None;
    }
    if !ppl {
        return Some(format!(
            "write_hole = \"off\": none of its {groups} parity group(s) is logged, so a crash mid-write followed by the loss of a member before the resync ends rebuilds bytes nobody wrote where the crash tore a stripe (the RAID 5/6 write hole)"
        ));
    }
    Some(format!(
        "{} of its {groups} parity group(s) get no write-hole log — {} — their children are not member regions, so their parity is on no single member to log: after a crash the volume resyncs before it serves, and a whole child of such a group lost before that resync ends (both copies of a mirror, any member of a stripe) is rebuilt with bytes nobody wrote where the crash tore a stripe",
        unlogged.len(),
        unlogged.join("; ")
    ))
}

/// What a reshape's new shape of `groups` parity groups risks when its members have no room
/// for the log's ring (`why`: the start's own words), in a sentence.
pub fn no_room_note(groups: usize, why: &str) -> String {
    format!(
        "none of the new shape's {groups} parity group(s) gets a write-hole log — {why} — so after a crash the volume resyncs before it serves, and a member lost before that resync ends is rebuilt with bytes nobody wrote where the crash tore a stripe (the RAID 5/6 write hole)"
    )
}

/// The parity groups of `root`.
pub fn parity_groups(root: &Node) -> usize {
    let own = usize::from(matches!(root, Node::Parity(_)));
    own + root.children().iter().map(parity_groups).sum::<usize>()
}

#[cfg(test)]
mod tests {
    use super::*;
    use nbraid_layout::ParityLayout;

    const STRIP: u64 = 64 << 10;

    fn m(i: usize) -> Node {
        Node::member(i, 1 << 20, 1 << 20)
    }

    fn raid5(children: Vec<Node>) -> Node {
        Node::parity(STRIP, 1, ParityLayout::LeftSymmetric, children).unwrap()
    }

    const IDS: [&str; 6] = ["d0", "d1", "d2", "d3", "d4", "d5"];

    #[test]
    fn groups_over_mirrors_are_unlogged_groups_over_members_are_logged() {
        let pair = |i| Node::mirror(vec![m(i), m(i + 1)]).unwrap();
        let over_mirrors = raid5(vec![pair(0), pair(2), pair(4)]);
        let unlogged = unlogged_groups(&over_mirrors, true, &IDS);
        assert_eq!(
            unlogged,
            ["raid5:64KiB(mirror(d0 d1), mirror(d2 d3), mirror(d4 d5))"]
        );
        let text = note(&unlogged, parity_groups(&over_mirrors), true).unwrap();
        assert!(
            text.starts_with("1 of its 1 parity group(s) get no write-hole log"),
            "{text}"
        );
        // A mirror of RAID 5 groups over members: both logged.
        let mirrored = Node::mirror(vec![
            raid5(vec![m(0), m(1), m(2)]),
            raid5(vec![m(3), m(4), m(5)]),
        ])
        .unwrap();
        assert!(unlogged_groups(&mirrored, true, &IDS).is_empty());
        assert_eq!(note(&[], 2, true), None);
        // With the log off every group is unlogged, and the note says why.
        let off = unlogged_groups(&mirrored, false, &IDS);
        assert_eq!(off.len(), 2);
        let text = note(&off, parity_groups(&mirrored), false).unwrap();
        assert!(
            text.starts_with("write_hole = \"off\": none of its 2 parity group(s)"),
            "{text}"
        );
    }

    #[test]
    fn an_outer_group_over_groups_is_unlogged_its_inner_groups_logged() {
        let group = |i| raid5(vec![m(i), m(i + 1), m(i + 2)]);
        let nested = raid5(vec![group(0), group(3), group(6)]);
        assert_eq!(parity_groups(&nested), 4);
        let ids: Vec<String> = (0..9).map(|i| format!("d{i}")).collect();
        let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
        let unlogged = unlogged_groups(&nested, true, &ids);
        assert_eq!(unlogged.len(), 1);
        assert!(
            unlogged[0].starts_with("raid5:64KiB(raid5:64KiB(d0 d1 d2), "),
            "{unlogged:?}"
        );
    }
}
