//! A dirty start with a role out that a parity group without a write-hole log rebuilds,
//! refused unless forced: mid-reshape ([`refuse_torn_rows`]) and outside one
//! ([`refuse_unlogged_torn_rows`]).
//!
//! A row a client was writing at a crash may hold new data beside old parity; the
//! write-intent bitmap's resync makes the row agree again only where every chunk is there.
//! A parity group serving a child from its parity rebuilds that child's block of such a row
//! from torn parity: it may read wrong though no client wrote it. The partial-parity log
//! closes this where it runs (its replay makes the parity right for the unwritten chunks,
//! present or lost); it does not run mid-reshape (it covers one tree), with
//! `write_hole = "off"`, for a group whose children are not all member regions, or where a
//! member's ring is too small for the group's strips — nor did it in a life that stopped
//! dirty without logging, whatever this start does (its rings' marker says so:
//! `crate::ppl::last_life`). md refuses such a dirty degraded start
//! unless forced (`start_dirty_degraded`); so does nbraid. The write-intent bitmap does not
//! narrow it: its bits are not in the records assembly decides from, and md refuses
//! whatever its bitmap says.

use super::{Absence, AssembleError, RecordedState, Start, VolumeRecord};
use nbraid_layout::{is_logged, log_ring_bytes, Node, ParityGroup};

/// Whether some parity group of `tree` serves a child from its parity with the roles for
/// which `out` is true gone (a child of a group that cannot serve without them; a mirror
/// that keeps a copy serves its own).
pub(super) fn parity_serves_a_lost_child(tree: &Node, out: &dyn Fn(usize) -> bool) -> bool {
    unlogged_parity_serves_a_lost_child(tree, out, &|_| false)
}

/// [`parity_serves_a_lost_child`], counting only the groups for which `logged` is false.
fn unlogged_parity_serves_a_lost_child(
    tree: &Node,
    out: &dyn Fn(usize) -> bool,
    logged: &dyn Fn(&ParityGroup) -> bool,
) -> bool {
    let lost_here = match tree {
        Node::Parity(g) => !logged(g) && g.children().iter().any(|c| !c.survives(out)),
        _ => false,
    };
    lost_here
        || (tree.children().iter()).any(|c| unlogged_parity_serves_a_lost_child(c, out, logged))
}

/// Whether the log replays group `g`'s partial-stripe writes at a dirty start, with each
/// role's ring length `ring_bytes[role]` (`None`: no ring there): every child is a member
/// region whose ring holds the group's largest entries twice (as the engine decides,
/// `resync::every_group_logged`).
fn group_logged(g: &ParityGroup, ring_bytes: &[Option<u64>]) -> bool {
    let need = log_ring_bytes(g);
    is_logged(g)
        && g.children().iter().all(|c| match c {
            Node::Member(m) => ring_bytes.get(m.index).copied().flatten() >= Some(need),
            _ => false,
        })
}

/// Why volume `volume`, not mid-reshape, may not start as is: not clean (`clean`), not
/// forced, with roles `out` that a parity group of `tree` without a log rebuilds from
/// parity. `ring_bytes`: each role's log ring length, `None` when the start keeps no log
/// (`write_hole = "off"`). `None`: it may start (clean, forced, whole, every such group
/// logged, or the roles out kept by mirrors).
pub(super) fn refuse_unlogged_torn_rows(
    (clean, force): (bool, bool),
    tree: &Node,
    ring_bytes: Option<&[Option<u64>]>,
    out: &[usize],
) -> Option<Vec<usize>> {
    if clean || force || out.is_empty() {
        return None;
    }
    let is_out = |r: usize| out.contains(&r);
    let logged = |g: &ParityGroup| ring_bytes.is_some_and(|rings| group_logged(g, rings));
    let torn = unlogged_parity_serves_a_lost_child(tree, &is_out, &logged);
    torn.then(|| out.to_vec())
}

/// Why volume `volume` may not start as is: not clean (`clean`), mid-reshape between `old`
/// and `new`, with roles `out` that a parity group of either tree rebuilds from parity.
/// `None`: it may (clean, no reshape, no such role, or the operator forced it).
pub(super) fn refuse_torn_rows(
    (clean, force): (bool, bool),
    trees: Option<(&Node, &Node)>,
    out: &[usize],
) -> Option<Vec<usize>> {
    let (old, new) = trees?;
    let is_out = |r: usize| out.contains(&r);
    let torn = !clean
        && !force
        && (parity_serves_a_lost_child(old, &is_out) || parity_serves_a_lost_child(new, &is_out));
    torn.then(|| out.to_vec())
}

/// What assembly found: the records by member, each role's holder, the roles out.
pub(super) type Found<'a> = (
    &'a [Option<&'a VolumeRecord>],
    &'a [Result<usize, Absence>],
    &'a [usize],
);

/// What the operator of a dirty degraded start refused can do: bring the member back (its
/// rows then resync with it, `resyncs`) — unless a role out is recorded failed
/// (`recorded_failed`): such a member stays out even with its disk there (only a rebuild
/// brings a failed member back, and none runs before the start), so the way on is the
/// forced start, then the member removed and added back (rebuilt) or a spare.
fn way_back(volume: &str, recorded_failed: bool, resyncs: bool) -> String {
    let forced = format!("start with --force-assemble {volume} to serve it as it is");
    if recorded_failed {
        return format!(
            "a member recorded failed stays out even with its disk there, so bringing it back does not help: {forced}, then take the member out and back (nbraid remove {volume} <member>, nbraid add {volume} <member>) or add a spare, and let its rebuild finish"
        );
    }
    let resync = if resyncs {
        " (the resync then makes the rows agree)"
    } else {
        ""
    };
    format!("bring the member back{resync}, or {forced}")
}

/// A dirty start with a role out that a parity group without a log would rebuild from
/// torn parity, refused unless forced: mid-reshape (`trees.1`, the new tree: neither is
/// logged) or not (the start's log and the rings the records place). `found`: the records by
/// member, each role's holder, the roles out. `Ok`: it may start.
pub(super) fn check(
    volume: &str,
    (clean, start): (bool, Start),
    (tree, new_tree): (&Node, Option<&Node>),
    (records, roles, out): Found<'_>,
    role_name: &dyn Fn(usize) -> String,
) -> Result<(), AssembleError> {
    let names = |out: &[usize]| {
        out.iter()
            .map(|&r| role_name(r))
            .collect::<Vec<_>>()
            .join(", ")
    };
    // By the newest record: a role recorded failed stays out whatever its member's disk
    // holds now, present or missing.
    let newest = records.iter().flatten().max_by_key(|r| r.events);
    let recorded_failed = |out: &[usize]| {
        newest.is_some_and(|n| {
            (out.iter())
                .any(|&r| (n.members.get(r)).is_some_and(|m| m.state == RecordedState::Failed))
        })
    };
    let volume = volume.to_string();
    if let Some(new_tree) = new_tree {
        return match refuse_torn_rows((clean, start.force), Some((tree, new_tree)), out) {
            Some(out) => Err(AssembleError::DirtyDegradedReshape {
                way_back: way_back(&volume, recorded_failed(&out), false),
                volume,
                roles: names(&out),
            }),
            None => Ok(()),
        };
    }
    let logged = start.write_hole_log && start.last_life_logged;
    let rings = logged.then(|| ring_bytes_by_role(records, roles));
    match refuse_unlogged_torn_rows((clean, start.force), tree, rings.as_deref(), out) {
        Some(out) => Err(AssembleError::DirtyDegradedUnlogged {
            way_back: way_back(&volume, recorded_failed(&out), true),
            volume,
            roles: names(&out),
            unlogged: unlogged_why(start),
        }),
        None => Ok(()),
    }
}

/// Each role's partial-parity log ring length, as the open will place it
/// (`ppl_area::areas_by_role`): the record of the member held in the role, or where its peers
/// keep it for a role no member holds.
fn ring_bytes_by_role(
    records: &[Option<&VolumeRecord>],
    roles: &[Result<usize, Absence>],
) -> Vec<Option<u64>> {
    let peers = records.iter().flatten().find_map(|r| r.ppl);
    let held = |r: &Result<usize, Absence>| match r {
        Ok(i) => Some(*i),
        Err(a) => a.member(),
    };
    (roles.iter())
        .map(
            |r| match held(r).and_then(|i| records.get(i).copied().flatten()) {
                Some(rec) => rec.ppl.map(|a| a.len),
                None => peers.map(|a| a.len),
            },
        )
        .collect()
}

/// Why the write hole is open at a start refused by
/// [`refuse_unlogged_torn_rows`].
fn unlogged_why(start: Start) -> String {
    if start.write_hole_log && !start.last_life_logged {
        "the life that stopped did not log its writes (it ran with write_hole = \"off\" or mid-reshape, resynced an earlier such crash, or was run by an nbraid that does not say), so no log replay covers its torn rows".into()
    } else if start.write_hole_log {
        "a parity group that rebuilds it keeps no partial-parity log (a group over mirrors or other groups, or a member whose log ring is missing or too small for its strips: a volume from before the log, a reshape into wider strips)".into()
    } else {
        "write_hole = \"off\" keeps no partial-parity log (if the volume ran with the log when it stopped, start it with write_hole = \"ppl\": the log's replay closes the hole)".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_way_back_of_a_refused_dirty_start_names_what_works() {
        let missing = way_back("v", false, true);
        assert!(
            missing.starts_with("bring the member back (the resync"),
            "{missing}"
        );
        assert!(missing.contains("--force-assemble v"), "{missing}");
        let failed = way_back("v", true, false);
        assert!(
            failed.contains("bringing it back does not help"),
            "{failed}"
        );
        assert!(
            failed.contains("--force-assemble v") && failed.contains("nbraid remove v"),
            "{failed}"
        );
    }
    use nbraid_layout::{Level, Region, Shape};

    fn tree(level: Level, members: usize) -> Node {
        let region = Region {
            start: 1 << 20,
            len: 64 << 20,
        };
        Shape::new(level, members, None, 64 << 10, Default::default())
            .unwrap()
            .build(&vec![region; members])
            .unwrap()
    }

    #[test]
    fn only_a_dirty_unforced_reshape_with_a_role_rebuilt_from_parity_is_refused() {
        let (old, new) = (tree(Level::Raid5, 3), tree(Level::Raid5, 4));
        let trees = Some((&old, &new));
        assert_eq!(refuse_torn_rows((false, false), trees, &[1]), Some(vec![1]));
        assert_eq!(refuse_torn_rows((false, false), trees, &[3]), Some(vec![3]));
        assert_eq!(refuse_torn_rows((true, false), trees, &[1]), None, "clean");
        assert_eq!(refuse_torn_rows((false, true), trees, &[1]), None, "forced");
        assert_eq!(refuse_torn_rows((false, false), trees, &[]), None, "whole");
        assert_eq!(
            refuse_torn_rows((false, false), None, &[1]),
            None,
            "no reshape"
        );
    }

    #[test]
    fn mirrors_that_keep_a_copy_have_no_torn_parity() {
        let (old, new) = (tree(Level::Raid10, 4), tree(Level::Raid10, 6));
        assert_eq!(
            refuse_torn_rows((false, false), Some((&old, &new)), &[1]),
            None
        );
        // RAID 1 → RAID 5: the new tree rebuilds role 1 from parity.
        let (old, new) = (tree(Level::Raid1, 2), tree(Level::Raid5, 3));
        let out = [1];
        assert_eq!(
            refuse_torn_rows((false, false), Some((&old, &new)), &out),
            Some(vec![1])
        );
        let whole = |_: usize| false;
        assert!(!parity_serves_a_lost_child(&old, &whole));
    }

    /// Every role's ring as the config makes it (the largest group's need).
    fn rings(t: &Node, roles: usize) -> Vec<Option<u64>> {
        vec![nbraid_layout::volume_log_ring_bytes(t); roles]
    }

    #[test]
    fn a_dirty_degraded_start_is_refused_only_where_no_log_covers_the_role_out() {
        for (level, n) in [(Level::Raid5, 4), (Level::Raid6, 5)] {
            let t = tree(level, n);
            let logged = rings(&t, n);
            let refuse = |c: (bool, bool), r: Option<&[Option<u64>]>, out: &[usize]| {
                refuse_unlogged_torn_rows(c, &t, r, out)
            };
            assert_eq!(refuse((false, false), None, &[2]), Some(vec![2]), "log off");
            assert_eq!(refuse((false, false), Some(&logged), &[2]), None, "logged");
            assert_eq!(refuse((true, false), None, &[2]), None, "clean");
            assert_eq!(refuse((false, true), None, &[2]), None, "forced");
            assert_eq!(refuse((false, false), None, &[]), None, "whole");
            // A ring too small for the strips (a reshape into wider ones), or none on one
            // member (a volume from before the log): that group is not logged.
            let mut short = logged.clone();
            short[0] = Some(4096);
            assert_eq!(refuse((false, false), Some(&short), &[2]), Some(vec![2]));
            short[0] = None;
            assert_eq!(refuse((false, false), Some(&short), &[2]), Some(vec![2]));
        }
    }

    #[test]
    fn a_span_of_raid_50_is_judged_by_its_own_groups() {
        let spans = (0..2).map(|s| {
            let leaves = (3 * s..3 * s + 3).map(|i| Node::member(i, 1 << 20, 64 << 20));
            Node::parity(64 << 10, 1, Default::default(), leaves.collect()).unwrap()
        });
        let t = Node::stripe(64 << 10, spans.collect()).unwrap();
        let logged = rings(&t, 6);
        assert_eq!(
            refuse_unlogged_torn_rows((false, false), &t, Some(&logged), &[4]),
            None
        );
        assert_eq!(
            refuse_unlogged_torn_rows((false, false), &t, None, &[4]),
            Some(vec![4])
        );
    }

    #[test]
    fn mirrors_start_and_raid_5_over_mirrors_is_refused_only_for_a_pair_wholly_lost() {
        let t = tree(Level::Raid10, 4);
        assert_eq!(
            refuse_unlogged_torn_rows((false, false), &t, None, &[1]),
            None
        );
        let pair = |first: usize| {
            let leaves = (first..first + 2).map(|i| Node::member(i, 1 << 20, 64 << 20));
            Node::mirror(leaves.collect()).unwrap()
        };
        let pairs = (0..3).map(|p| pair(2 * p)).collect();
        let t = Node::parity(64 << 10, 1, Default::default(), pairs).unwrap();
        // The log keeps nothing for a group over mirrors, whatever the rings.
        let big = vec![Some(1u64 << 30); 6];
        assert_eq!(
            refuse_unlogged_torn_rows((false, false), &t, Some(&big), &[0]),
            None
        );
        assert_eq!(
            refuse_unlogged_torn_rows((false, false), &t, Some(&big), &[0, 1]),
            Some(vec![0, 1])
        );
    }

    #[test]
    fn a_parity_group_over_mirrors_rebuilds_only_a_pair_wholly_lost() {
        let pair = |first: usize| {
            let leaves = (first..first + 2).map(|i| Node::member(i, 1 << 20, 64 << 20));
            Node::mirror(leaves.collect()).unwrap()
        };
        let pairs = (0..3).map(|p| pair(2 * p)).collect();
        let t = Node::parity(64 << 10, 1, Default::default(), pairs).unwrap();
        assert!(!parity_serves_a_lost_child(&t, &|r| r == 0));
        assert!(parity_serves_a_lost_child(&t, &|r| r <= 1));
    }
}
