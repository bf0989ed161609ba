//! Which arrays a volume's records name. A member's record of the volume carries its array's
//! id; when the members' records name more than one array, one of those disks was taken by
//! another array (`add --force`, `replace --force`, a config path pointing at the wrong
//! disk). Which side is this volume cannot be told from the records — a disk taken by force
//! holds the newer record, a majority may be the other array's — so the start is refused
//! naming every side, and nothing is written.

use super::super::{Uuid, VolumeRecord};

/// One array the records name: its id, the positions of the members carrying its record
/// (config order), and the newest event among them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Side {
    pub array: Uuid,
    pub members: Vec<usize>,
    pub newest_events: u64,
}

/// The arrays `records` (per config position: the volume's record, if the member holds one)
/// name, most members first (ties: in order of first appearance); `None` when they name one
/// array or none.
pub(super) fn sides(records: &[Option<&VolumeRecord>]) -> Option<Vec<Side>> {
    let mut sides: Vec<Side> = Vec::new();
    for (i, r) in records.iter().enumerate() {
        let Some(r) = r else { continue };
        match sides.iter_mut().find(|s| s.array == r.array) {
            Some(s) => {
                s.members.push(i);
                s.newest_events = s.newest_events.max(r.events);
            }
            None => sides.push(Side {
                array: r.array,
                members: vec![i],
                newest_events: r.events,
            }),
        }
    }
    if sides.len() < 2 {
        return None;
    }
    // Stable: equal counts keep their order of first appearance.
    sides.sort_by_key(|s| std::cmp::Reverse(s.members.len()));
    Some(sides)
}

/// `sides` in words, each member named by `id(position)`.
pub(super) fn describe(sides: &[Side], id: &dyn Fn(usize) -> String) -> String {
    sides
        .iter()
        .map(|s| {
            let who: Vec<String> = s.members.iter().map(|&i| id(i)).collect();
            let members = if who.len() == 1 { "member" } else { "members" };
            format!(
                "array {} on {members} {} (newest event {})",
                s.array,
                who.join(", "),
                s.newest_events
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use nbraid_layout::Node;

    fn rec(array: u8, events: u64) -> VolumeRecord {
        let tree = Node::member(0, 0, 1 << 20);
        let mut r = VolumeRecord::plain(Uuid([array; 16]), "r", 0, Vec::new(), tree);
        r.events = events;
        r
    }

    #[test]
    fn one_array_or_none_is_no_disagreement() {
        let (a, b) = (rec(1, 5), rec(1, 7));
        assert_eq!(sides(&[Some(&a), None, Some(&b)]), None);
        assert_eq!(sides(&[None, None]), None);
    }

    #[test]
    fn a_tie_names_both_sides_in_order_of_appearance() {
        let (ours, theirs) = (rec(1, 5), rec(2, 40));
        let s = sides(&[Some(&ours), Some(&theirs)]).expect("two arrays");
        assert_eq!(s.len(), 2);
        assert_eq!((s[0].array, s[0].members.clone()), (ours.array, vec![0]));
        assert_eq!(
            (s[1].array, s[1].members.clone(), s[1].newest_events),
            (theirs.array, vec![1], 40)
        );
    }

    #[test]
    fn most_members_first_whatever_the_events() {
        let (a, b, c) = (rec(2, 90), rec(1, 5), rec(1, 6));
        let s = sides(&[Some(&a), None, Some(&b), Some(&c)]).expect("two arrays");
        assert_eq!(s[0].members, vec![2, 3]);
        assert_eq!(s[0].newest_events, 6);
        assert_eq!(s[1].members, vec![0]);
        let said = describe(&s, &|i| format!("d{i}"));
        assert!(
            said.contains("on members d2, d3 (newest event 6); array "),
            "{said}"
        );
        assert!(said.ends_with("on member d0 (newest event 90)"), "{said}");
    }
}
