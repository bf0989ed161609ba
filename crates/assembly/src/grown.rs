//! A member that grew while the config does not pin its size: a LUN resized, `lvextend`, a
//! file truncated larger. The config's `size = "all"` then reads the new length and asks for
//! larger regions than the superblocks record, though nobody changed the config. A start
//! never grows a volume (that is `nbraid apply`'s move, planned and recorded), so it opens
//! the volume with the recorded regions and says once which member grew and by how much.
//! A config that asks for the growth itself (a member's or the volume's `size` given) is
//! compared as it is, and refused by the engine naming `nbraid apply` as the way.
//!
//! [`unused_growth`] decides, purely; [`start_tree`] applies it to a volume's probes, and is
//! what the start, `nbraidd --check` and `nbraid check` open the volume with.

use crate::records;
use nbraid_config::{format_size, Config, Volume, VolumeSize};
use nbraid_core::metadata::Probe;
use nbraid_layout::Node;

/// One region the config would grow and the start leaves as recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gain {
    /// The member's position in the volume (the config tree's leaf index).
    pub position: usize,
    pub gained_bytes: u64,
}

/// Whether the config's tree (`config`, leaves by config position) is the recorded one
/// (`recorded`, leaves by role) but for regions that grew at their recorded start on members
/// the config sizes by what they hold (`sized_by_path(position)`): those growths, in leaf
/// order (empty: the trees are the same). `None` when anything else differs — another
/// level, strip, start, a shrink, or a growth the config asks for — which the engine's
/// comparison refuses by name.
pub fn unused_growth(
    config: &Node,
    recorded: &Node,
    sized_by_path: &dyn Fn(usize) -> bool,
) -> Option<Vec<Gain>> {
    let mut gains = Vec::new();
    same_but_grown(config, recorded, sized_by_path, &mut gains).then_some(gains)
}

fn same_but_grown(
    c: &Node,
    r: &Node,
    sized_by_path: &dyn Fn(usize) -> bool,
    gains: &mut Vec<Gain>,
) -> bool {
    let alike = match (c, r) {
        (Node::Member(a), Node::Member(b)) => {
            if a.start != b.start || a.len < b.len {
                return false;
            }
            if a.len > b.len {
                if !sized_by_path(a.index) {
                    return false;
                }
                gains.push(Gain {
                    position: a.index,
                    gained_bytes: a.len - b.len,
                });
            }
            return true;
        }
        (Node::Stripe(a), Node::Stripe(b)) => a.unit() == b.unit(),
        (Node::Parity(a), Node::Parity(b)) => {
            (a.strip(), a.parity(), a.layout()) == (b.strip(), b.parity(), b.layout())
        }
        (Node::Mirror(_), Node::Mirror(_)) | (Node::Concat(_), Node::Concat(_)) => true,
        _ => false,
    };
    alike
        && c.children().len() == r.children().len()
        && (c.children().iter().zip(r.children()))
            .all(|(a, b)| same_but_grown(a, b, sized_by_path, gains))
}

/// `recorded` with each leaf numbered as the config's leaf in the same place: the recorded
/// regions under the config's numbering, what the start opens with.
pub fn as_recorded(config: &Node, recorded: &Node) -> Node {
    let positions = config.member_indices();
    let roles = recorded.member_indices();
    recorded.renumbered(&|role| {
        let leaf = roles.iter().position(|&r| r == role).expect("a leaf");
        positions[leaf]
    })
}

/// The tree volume `v` is opened with over `probes` (its members by position, then its
/// spares): the config's, or the recorded regions where its members grew under a config
/// that does not pin their size — with one note per such member (the member, the bytes
/// gained, and that `nbraid apply` grows the volume into them).
pub fn start_tree(config: &Config, v: &Volume, probes: &[Probe]) -> (Node, Vec<String>) {
    let tree = v.geometry.root();
    let unchanged = (tree.clone(), Vec::new());
    let Some(newest) = records::newest_record(probes, &v.name) else {
        return unchanged;
    };
    // Mid-reshape the config says the new shape: the engine compares it with that one.
    if newest.reshape.is_some() || newest.tree.member_count() != tree.member_count() {
        return unchanged;
    }
    let sized_by_path = |p: usize| {
        v.requested == VolumeSize::All
            && (v.members.get(p)).is_some_and(|&m| config.members[m].sized_by_path)
    };
    let recorded = &newest.tree;
    match unused_growth(tree, recorded, &sized_by_path) {
        Some(gains) if !gains.is_empty() => {
            let notes = gains.iter().map(|g| note(config, v, g)).collect();
            (as_recorded(tree, recorded), notes)
        }
        _ => unchanged,
    }
}

fn note(config: &Config, v: &Volume, g: &Gain) -> String {
    let m = &config.members[v.members[g.position]];
    format!(
        "member {} ({}) grew {} ({} bytes) past the region the volume records; the growth is unused — `nbraid apply {}` grows the volume into it",
        m.id,
        m.path_text,
        format_size(g.gained_bytes),
        g.gained_bytes,
        config.file.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use nbraid_layout::{Level, ParityLayout, Region, Shape};

    const MIB: u64 = 1 << 20;

    fn tree(level: Level, strip: u64, lens: &[u64]) -> Node {
        let regions: Vec<Region> = (lens.iter())
            .map(|&len| Region {
                start: 2 * MIB,
                len,
            })
            .collect();
        let shape = Shape::new(level, lens.len(), None, strip, ParityLayout::LeftSymmetric);
        shape.unwrap().build(&regions).unwrap()
    }

    #[test]
    fn a_region_grown_on_a_member_sized_by_its_path_is_unused_growth() {
        let recorded = tree(Level::Raid1, 64 << 10, &[22 * MIB; 2]);
        let config = tree(Level::Raid1, 64 << 10, &[30 * MIB; 2]);
        let gains = unused_growth(&config, &recorded, &|_| true).unwrap();
        assert_eq!(
            gains,
            [0, 1].map(|position| Gain {
                position,
                gained_bytes: 8 * MIB
            })
        );
        let opened = as_recorded(&config, &recorded);
        assert_eq!(opened, recorded);
        assert_eq!(unused_growth(&recorded, &recorded, &|_| true), Some(vec![]));
    }

    #[test]
    fn a_growth_the_config_asks_for_or_any_other_change_is_left_to_the_engine() {
        let recorded = tree(Level::Raid5, 64 << 10, &[22 * MIB; 3]);
        let grown = tree(Level::Raid5, 64 << 10, &[30 * MIB; 3]);
        // A pinned size asks for the growth: the engine refuses it, naming `nbraid apply`.
        assert_eq!(unused_growth(&grown, &recorded, &|_| false), None);
        assert_eq!(unused_growth(&grown, &recorded, &|p| p != 1), None);
        // Another strip, another level, a shrink: never hidden behind the recorded tree.
        let strip = tree(Level::Raid5, 128 << 10, &[30 * MIB; 3]);
        assert_eq!(unused_growth(&strip, &recorded, &|_| true), None);
        let level = tree(Level::Raid0, 64 << 10, &[30 * MIB; 3]);
        assert_eq!(unused_growth(&level, &recorded, &|_| true), None);
        let shrunk = tree(Level::Raid5, 64 << 10, &[20 * MIB; 3]);
        assert_eq!(unused_growth(&shrunk, &recorded, &|_| true), None);
    }

    #[test]
    fn the_recorded_tree_takes_the_config_numbering_leaf_for_leaf() {
        // Members swapped in the config: position 0 holds role 1 and position 1 role 0.
        let recorded = tree(Level::Jbod, 64 << 10, &[4 * MIB, 6 * MIB]);
        let config = tree(Level::Jbod, 64 << 10, &[4 * MIB, 9 * MIB]).renumbered(&|p| 1 - p);
        let opened = as_recorded(&config, &recorded);
        assert_eq!(opened.member_indices(), [1, 0]);
        assert_eq!(opened.capacity(), recorded.capacity());
        let gains = unused_growth(&config, &recorded, &|p| p == 0).unwrap();
        assert_eq!(
            gains,
            [Gain {
                position: 0,
                gained_bytes: 3 * MIB
            }]
        );
    }
}
