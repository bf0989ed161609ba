//! Records of one volume that must agree on its geometry. The volume starts from one record
//! ([`crate::metadata::newest_record_checked`]) and reads every member where that record's
//! tree places it; a peer's record that places the bytes elsewhere is a record that lies
//! (every commit writes one tree to every member: `Records::write_into`), and which one does
//! cannot be told. Trusted blindly, the chosen record served a member's chunks from the wrong
//! offset and wrote acknowledged bytes there.
//!
//! What must agree, among the peers the newest record trusts ([`trusted_by`]):
//! - records of the newest event: the whole tree (levels, strips, stripe units, parity layout,
//!   every leaf's member index and region) and the member count;
//! - a record one event older (a commit torn on its member, which is still read as current):
//!   its own role's region, unless the commit it missed was a reshape's end.
//!
//! What may differ: the role, each member's own areas (bitmap, log, checksums, backup), a
//! record of a member the newest record sets out (a start ran without it), and records older
//! than that (stale: not read until resynced).

use super::reshape_records::trusted_by;
use super::{AssembleError, Names};
use crate::metadata::{Probe, VolumeRecord};
use nbraid_layout::Node;

/// Where two trees first differ: what, and what each says.
#[derive(Clone, Debug, PartialEq, Eq)]
struct TreeDifference {
    what: String,
    a: String,
    b: String,
}

impl TreeDifference {
    fn new(what: impl Into<String>, a: impl ToString, b: impl ToString) -> TreeDifference {
        TreeDifference {
            what: what.into(),
            a: a.to_string(),
            b: b.to_string(),
        }
    }
}

/// The first difference of tree `b` from tree `a`, walking both in the same order (`None`:
/// they are the same). Pure.
fn tree_difference(a: &Node, b: &Node) -> Option<TreeDifference> {
    let mut leaf = 0;
    node_difference(a, b, &mut leaf).or_else(|| {
        // A field the walk does not name (a mirror's copy numbering): still not one tree.
        (a != b).then(|| TreeDifference::new("a geometry tree", "of one shape", "of another"))
    })
}

fn node_difference(a: &Node, b: &Node, leaf: &mut usize) -> Option<TreeDifference> {
    match (a, b) {
        (Node::Member(x), Node::Member(y)) => {
            let k = *leaf;
            *leaf += 1;
            if x.index != y.index {
                let role = |i: usize| format!("role {i}");
                return Some(TreeDifference::new(
                    format!("member leaf {k} is"),
                    role(x.index),
                    role(y.index),
                ));
            }
            if (x.start, x.len) != (y.start, y.len) {
                return Some(TreeDifference::new(
                    format!("role {}'s region at", x.index),
                    region(x.start, x.len),
                    region(y.start, y.len),
                ));
            }
            return None;
        }
        (Node::Stripe(x), Node::Stripe(y)) if x.unit() != y.unit() => {
            return Some(TreeDifference::new("a stripe unit of", x.unit(), y.unit()));
        }
        (Node::Parity(x), Node::Parity(y)) => {
            if x.strip() != y.strip() {
                return Some(TreeDifference::new("a strip size of", x.strip(), y.strip()));
            }
            if x.parity() != y.parity() {
                let (p, q) = (x.parity(), y.parity());
                return Some(TreeDifference::new("parity strips per stripe:", p, q));
            }
            if x.layout() != y.layout() {
                return Some(TreeDifference::new(
                    "a parity layout",
                    x.layout(),
                    y.layout(),
                ));
            }
        }
        (x, y) if std::mem::discriminant(x) != std::mem::discriminant(y) => {
            return Some(TreeDifference::new(
                "a level:",
                super::geometry::kind(x),
                super::geometry::kind(y),
            ));
        }
        _ => {}
    }
    let (xs, ys) = (a.children(), b.children());
    if xs.len() != ys.len() {
        let kind = super::geometry::kind(a);
        return Some(TreeDifference::new(
            format!("{kind} over"),
            format!("{} parts", xs.len()),
            format!("{} parts", ys.len()),
        ));
    }
    (xs.iter().zip(ys)).find_map(|(x, y)| node_difference(x, y, leaf))
}

/// A region as messages say it: its first byte (in MiB when whole) and its length.
fn region(start: u64, len: u64) -> String {
    const MIB: u64 = 1 << 20;
    if start.is_multiple_of(MIB) {
        format!("{} MiB ({start}+{len})", start / MIB)
    } else {
        format!("byte {start} ({start}+{len})")
    }
}

/// Role `role`'s region (start, length) in `tree`.
fn region_of(tree: &Node, role: usize) -> Option<(u64, u64)> {
    let mut out = None;
    tree.visit_members(&mut |m| {
        if m.index == role {
            out = Some((m.start, m.len));
        }
    });
    out
}

/// Why record `r` disagrees with `newest` on what both must say (`None`: it agrees). Only
/// for a peer `newest` trusts; `r` of the newest event or one older. Pure.
fn record_difference(newest: &VolumeRecord, r: &VolumeRecord) -> Option<Disagreement> {
    if r.events == newest.events {
        if r.members.len() != newest.members.len() {
            let (a, b) = (newest.members.len(), r.members.len());
            return Some(Disagreement::Tree(TreeDifference::new(
                "a member count of",
                a,
                b,
            )));
        }
        return tree_difference(&newest.tree, &r.tree).map(Disagreement::Tree);
    }
    // One commit short: a reshape's end (the new tree recorded) is the only commit that moves
    // a region; a reshape's start and added mirror copies keep every existing one.
    let missed_the_end = (r.reshape.as_ref()).is_some_and(|x| x.new_tree == newest.tree);
    if r.events + 1 != newest.events || missed_the_end {
        return None;
    }
    let role = r.role as usize;
    match (region_of(&newest.tree, role), region_of(&r.tree, role)) {
        (Some(a), Some(b)) if a != b => Some(Disagreement::OwnRegion {
            role,
            newest: region(a.0, a.1),
            own: region(b.0, b.1),
        }),
        _ => None,
    }
}

/// How a peer's record disagrees with the newest.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Disagreement {
    /// Of the same event: the trees (or member counts) differ.
    Tree(TreeDifference),
    /// One event older: its own role's region is elsewhere.
    OwnRegion {
        role: usize,
        newest: String,
        own: String,
    },
}

/// Refuses the volume when a record of a member the newest record trusts disagrees with it
/// ([`record_difference`]), naming both members and what differs.
pub(super) fn records_agree(
    volume: &str,
    records: &[Option<&VolumeRecord>],
    probes: &[Probe],
    newest: &VolumeRecord,
    names: &Names,
) -> Result<(), AssembleError> {
    let first = (records.iter())
        .position(|r| r.is_some_and(|r| std::ptr::eq(r, newest)))
        .expect("the record is one of the records");
    for (i, r) in records.iter().enumerate() {
        let Some(r) = r.filter(|r| i != first && trusted_by(newest, r, &probes[i])) else {
            continue;
        };
        let Some(d) = record_difference(newest, r) else {
            continue;
        };
        let (a, b) = (names.member(first), names.member(i));
        let detail = match d {
            Disagreement::Tree(t) => format!("{a}'s record says {} {}, {b}'s {}", t.what, t.a, t.b),
            Disagreement::OwnRegion { role, newest: at, own } => format!(
                "{a}'s record (event {}) puts role {role}'s region at {at}, {b}'s own record (event {}) at {own}",
                newest.events, r.events
            ),
        };
        return Err(AssembleError::RecordsDisagree {
            volume: volume.to_string(),
            members: format!("{a} and {b}"),
            detail,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::{MemberEntry, ReshapeRecord, Uuid};
    use nbraid_layout::{Level, ParityLayout, Region, Shape};

    const MIB: u64 = 1 << 20;

    fn raid5(strip: u64, starts: &[u64]) -> Node {
        let regions: Vec<Region> = (starts.iter())
            .map(|&start| Region {
                start,
                len: 4 * MIB,
            })
            .collect();
        Shape::new(
            Level::Raid5,
            starts.len(),
            None,
            strip,
            ParityLayout::default(),
        )
        .unwrap()
        .build(&regions)
        .unwrap()
    }

    fn record(role: u32, events: u64, tree: Node) -> VolumeRecord {
        let members = (0..4u8)
            .map(|i| MemberEntry::active(Uuid([i; 16])))
            .collect();
        let mut r = VolumeRecord::plain(Uuid([9; 16]), "v", role, members, tree);
        r.events = events;
        r
    }

    #[test]
    fn a_peer_region_moved_is_named_with_both_places() {
        let ours = raid5(16 << 10, &[MIB; 4]);
        let theirs = raid5(16 << 10, &[MIB, 2 * MIB, MIB, MIB]);
        let d = tree_difference(&theirs, &ours).expect("differs");
        assert_eq!(d.what, "role 1's region at");
        assert_eq!(
            (d.a.as_str(), d.b.as_str()),
            ("2 MiB (2097152+4194304)", "1 MiB (1048576+4194304)")
        );
        assert_eq!(tree_difference(&ours, &ours.clone()), None);
    }

    #[test]
    fn a_strip_size_and_a_level_differ() {
        let d = tree_difference(&raid5(16 << 10, &[MIB; 4]), &raid5(32 << 10, &[MIB; 4]));
        assert_eq!(
            d.map(|d| (d.a, d.b)),
            Some(("16384".into(), "32768".into()))
        );
        let raid0 = Shape::new(Level::Raid0, 4, None, 16 << 10, ParityLayout::default())
            .unwrap()
            .build(
                &[Region {
                    start: MIB,
                    len: 4 * MIB,
                }; 4],
            )
            .unwrap();
        let d = tree_difference(&raid5(16 << 10, &[MIB; 4]), &raid0).expect("differs");
        assert!(d.what.contains("level"), "{d:?}");
    }

    #[test]
    fn only_records_of_the_newest_event_compare_whole_trees() {
        let newest = record(0, 7, raid5(16 << 10, &[MIB; 4]));
        let moved = raid5(16 << 10, &[MIB, 2 * MIB, MIB, MIB]);
        // Same event: any difference refuses; a peer's region is not its own either.
        assert!(matches!(
            record_difference(&newest, &record(2, 7, moved.clone())),
            Some(Disagreement::Tree(_))
        ));
        // Its areas and role differ legitimately.
        let mut peer = record(3, 7, newest.tree.clone());
        peer.ppl = Some(crate::metadata::Area {
            offset: 4096,
            len: 4096,
        });
        assert_eq!(record_difference(&newest, &peer), None);
        // One event older: only its own region counts.
        assert_eq!(
            record_difference(&newest, &record(2, 6, moved.clone())),
            None
        );
        assert!(matches!(
            record_difference(&newest, &record(1, 6, moved.clone())),
            Some(Disagreement::OwnRegion { role: 1, .. })
        ));
        // Older still: stale, resynced before it is read.
        assert_eq!(record_difference(&newest, &record(1, 5, moved)), None);
    }

    #[test]
    fn a_record_that_missed_a_reshape_end_keeps_the_old_regions() {
        let new_tree = raid5(16 << 10, &[MIB, 2 * MIB, MIB, MIB]);
        let newest = record(0, 9, new_tree.clone());
        let mut r = record(1, 8, raid5(16 << 10, &[MIB; 4]));
        r.reshape = Some(ReshapeRecord {
            new_tree,
            position_bytes: 0,
            backup_area: None,
            backup_window: None,
        });
        assert_eq!(record_difference(&newest, &r), None);
    }
}
