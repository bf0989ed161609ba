//! The way back past tolerance (mdadm's `--assemble --force`): which absent roles a forced
//! assembly takes back, as pure decisions. Members that failed with nothing acknowledged
//! durable since dropped out together with the ones whose loss stopped the volume: they
//! come back current (the dirty regions resynced with them, as after a crash). Only then
//! are the freshest others taken, as stale as their event counters say.

use super::{Absence, ForcedRole};
use crate::metadata::{MemberEntry, VolumeRecord};
use nbraid_layout::Node;

/// The roles to take back, freshest first, until `tree` survives: `candidates` are
/// (role, events) of absent roles whose member is there with this array's records,
/// `absent` every absent role. `None` when even all of them do not make it survive.
pub fn pick_forced(
    tree: &Node,
    absent: &[usize],
    candidates: &[(usize, u64)],
) -> Option<Vec<usize>> {
    pick_forced_with(tree, absent, &[], candidates)
}

/// [`pick_forced`], every role of `together` taken first (absent roles whose member missed
/// nothing acknowledged: all of them, needed to survive or not — served current, they
/// spare a resync from stripes the failure tore), then the freshest `candidates` (the
/// others) until `tree` survives. `None` when even all of them do not make it survive.
pub fn pick_forced_with(
    tree: &Node,
    absent: &[usize],
    together: &[usize],
    candidates: &[(usize, u64)],
) -> Option<Vec<usize>> {
    let mut by_freshness: Vec<(usize, u64)> = (candidates.iter())
        .filter(|(role, _)| !together.contains(role))
        .copied()
        .collect();
    // The freshest first; among equals the lower role, so the choice is repeatable.
    by_freshness.sort_by_key(|&(role, events)| (std::cmp::Reverse(events), role));
    let mut taken: Vec<usize> = together.to_vec();
    taken.sort_unstable();
    taken.dedup();
    for (role, _) in by_freshness {
        if tree.survives(&|m| absent.contains(&m) && !taken.contains(&m)) {
            break;
        }
        taken.push(role);
    }
    tree.survives(&|m| absent.contains(&m) && !taken.contains(&m))
        .then_some(taken)
}

/// Takes back into `roles` the failed members that missed nothing acknowledged, then the
/// freshest failed or stale members ([`pick_forced_with`]) and says which; nothing when even
/// all of them leave the tree beyond its tolerance. The roles of `rebuilding` (a new member
/// being rebuilt into each) are out for reads and never taken back: a new member holds only
/// what its rebuild copied.
pub(super) fn force_roles(
    newest: &VolumeRecord,
    records: &[Option<&VolumeRecord>],
    roles: &mut [Result<usize, Absence>],
    rebuilding: &[usize],
) -> Vec<ForcedRole> {
    let newest_events = newest.events;
    let absent: Vec<usize> = (0..roles.len())
        .filter(|&r| roles[r].is_err() || rebuilding.contains(&r))
        .collect();
    let events_of = |member: usize| records[member].map_or(0, |r| r.events);
    let candidates: Vec<(usize, u64)> = (absent.iter())
        .filter(|r| !rebuilding.contains(r))
        .filter_map(|&r| match roles[r] {
            Err(Absence::Failed { member } | Absence::Stale { member, .. }) => {
                Some((r, events_of(member)))
            }
            _ => None,
        })
        .collect();
    let together: Vec<usize> = (absent.iter().copied())
        .filter(|&r| match roles[r] {
            Err(Absence::Failed { member }) => {
                records[member].is_some_and(|own| missed_nothing(&newest.members, r, own))
            }
            _ => false,
        })
        .collect();
    let Some(taken) = pick_forced_with(&newest.tree, &absent, &together, &candidates) else {
        return Vec::new();
    };
    taken
        .into_iter()
        .map(|role| {
            let (member, was_failed) = match roles[role] {
                Err(Absence::Failed { member }) => (member, true),
                Err(Absence::Stale { member, .. }) => (member, false),
                _ => unreachable!("only failed or stale roles are candidates"),
            };
            roles[role] = Ok(member);
            ForcedRole {
                role,
                member,
                events: events_of(member),
                newest_events,
                was_failed,
                missed_nothing_acked: together.contains(&role),
            }
        })
        .collect()
}

/// Whether role `role`'s member, whose own record is `own`, missed nothing the array promised:
/// the newest record (`members`) says it failed with nothing acknowledged durable since, and
/// its own record sets out no member the newest keeps active (no life of its own since).
fn missed_nothing(members: &[MemberEntry], role: usize, own: &VolumeRecord) -> bool {
    members.get(role).is_some_and(|m| m.missed_nothing_acked())
        && crate::metadata::ran_apart_from(members, own).is_none()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::{RecordedState, Uuid};
    use nbraid_layout::{Level, ParityLayout, Region, Shape};

    fn tree(level: Level, members: usize) -> Node {
        let shape = Shape::new(level, members, None, 64 << 10, ParityLayout::LeftSymmetric);
        let region = Region {
            start: 1 << 20,
            len: 1 << 30,
        };
        shape.unwrap().build(&vec![region; members]).unwrap()
    }

    /// Role `role`'s record at `events` over 6 members, `failed` the roles it sets out.
    fn record(role: u32, events: u64, failed: &[(usize, bool)]) -> VolumeRecord {
        let mut members: Vec<MemberEntry> = (0..6u8)
            .map(|i| MemberEntry::active(Uuid([10 + i; 16])))
            .collect();
        for &(r, unacked) in failed {
            members[r].state = RecordedState::Failed;
            members[r].unacked_since_failed = unacked;
        }
        VolumeRecord {
            events,
            ..VolumeRecord::plain(Uuid([1; 16]), "db", role, members, tree(Level::Raid6, 6))
        }
    }

    #[test]
    fn members_that_failed_together_all_come_back_then_the_freshest_others() {
        let raid6 = tree(Level::Raid6, 6);
        // Three out together: all three back, not only the one the tree needs.
        assert_eq!(
            pick_forced_with(&raid6, &[1, 2, 3], &[1, 2, 3], &[(1, 4), (2, 5), (3, 6)]),
            Some(vec![1, 2, 3])
        );
        // Role 1 missed an acknowledged write: the two that did not are enough.
        assert_eq!(
            pick_forced_with(&raid6, &[1, 2, 3], &[2, 3], &[(1, 4), (2, 5), (3, 6)]),
            Some(vec![2, 3])
        );
        // One together, still past tolerance: the freshest other joins it.
        let raid5 = tree(Level::Raid5, 4);
        assert_eq!(
            pick_forced_with(&raid5, &[0, 1, 2], &[0], &[(0, 3), (1, 6), (2, 7)]),
            Some(vec![0, 2])
        );
        // Not enough even with every one: none taken.
        assert_eq!(pick_forced_with(&raid5, &[0, 1, 2], &[0], &[(0, 3)]), None);
        // Without any together, the old rule: the freshest only.
        assert_eq!(
            pick_forced_with(&raid6, &[1, 2, 3], &[], &[(1, 4), (2, 5), (3, 6)]),
            Some(vec![3])
        );
    }

    #[test]
    fn only_a_failed_member_the_newest_record_marks_unacked_missed_nothing() {
        // Role 1 failed at event 6, a flush was acknowledged (event 7), then roles 2 and 3
        // failed one after the other with none between (events 8, 9).
        let newest = record(0, 9, &[(1, false), (2, true), (3, true)]);
        let own2 = record(2, 7, &[(1, false)]);
        let own3 = record(3, 8, &[(1, false), (2, true)]);
        assert!(missed_nothing(&newest.members, 2, &own2));
        assert!(missed_nothing(&newest.members, 3, &own3));
        assert!(!missed_nothing(&newest.members, 1, &record(1, 5, &[])));
        // Active in the newest record: nothing to say (the mark means nothing there).
        let mut odd = newest.clone();
        odd.members[4].unacked_since_failed = true;
        assert!(!missed_nothing(&odd.members, 4, &record(4, 8, &[])));
        // Its own record sets out role 5, which the volume kept: a life of its own since.
        assert!(!missed_nothing(
            &newest.members,
            2,
            &record(2, 7, &[(5, false)])
        ));
    }
}
