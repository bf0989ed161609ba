//! The pure decisions of a stripe write: which plan (md's counting rule) and which recovery.

use crate::parity::Loss;

/// How a stripe write gets its parity (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plan {
    DataOnly,
    FullRows,
    Rmw,
    Rcw,
    Reconstruct,
}

/// md's counting rule over one stripe's data chunks. `touched[i]`: chunk `i` gets new bytes;
/// `covered[i]`: it gets new bytes over the whole row range; `lost[i]`: its member cannot be
/// read; `parity_alive`: P/Q chunks that can be read and written.
pub fn choose(
    touched: &[bool],
    covered: &[bool],
    lost: &[bool],
    parity_alive: usize,
    in_sync: bool,
) -> Plan {
    if parity_alive == 0 {
        return Plan::DataOnly;
    }
    if covered.iter().all(|&c| c) {
        return Plan::FullRows;
    }
    let n = touched.len();
    let rmw = (0..n)
        .all(|i| !(touched[i] && lost[i]))
        .then(|| touched.iter().filter(|&&t| t).count() + parity_alive);
    let rcw = (0..n)
        .all(|i| covered[i] || !lost[i])
        .then(|| covered.iter().filter(|&&c| !c).count());
    match (rmw, rcw) {
        (_, Some(_)) if !in_sync => Plan::Rcw,
        (_, None) if !in_sync => Plan::Reconstruct,
        (Some(r), Some(c)) if r < c => Plan::Rmw,
        (_, Some(_)) => Plan::Rcw,
        (Some(_), None) => Plan::Rmw,
        (None, None) => Plan::Reconstruct,
    }
}

/// The recovery for lost data slots (sorted) given which parity chunks survive; `None` when
/// beyond what the parity can rebuild. Returns (loss, needs P, needs Q).
pub(super) fn recovery(lost_slots: &[usize], p_ok: bool, q_ok: bool) -> Option<(Loss, bool, bool)> {
    match *lost_slots {
        [] => None,
        [x] if p_ok => Some((Loss::Data(x), true, false)),
        [x] if q_ok => Some((Loss::DataP(x), false, true)),
        [a, b] if p_ok && q_ok => Some((Loss::TwoData(a, b), true, true)),
        _ => None,
    }
}

/// Sorted, disjoint byte ranges.
pub(super) type Ranges = Vec<(u64, u64)>;

pub(super) fn add_range(r: &mut Ranges, s: u64, e: u64) {
    let (mut s, mut e) = (s, e);
    r.retain(|&(a, b)| {
        if b < s || e < a {
            true
        } else {
            s = s.min(a);
            e = e.max(b);
            false
        }
    });
    let at = r.partition_point(|&(a, _)| a < s);
    r.insert(at, (s, e));
}

pub(super) fn covers(r: &Ranges, s: u64, e: u64) -> bool {
    r.iter().any(|&(a, b)| a <= s && e <= b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choose_follows_md_counting() {
        let f = false;
        let t = true;
        // RAID 5 of 4 (3 data): 4K into chunk 0 → RMW 1+1 = 2, RCW 2: tie goes to RCW.
        assert_eq!(choose(&[t, f, f], &[t, f, f], &[f; 3], 1, true), Plan::Rcw);
        // RAID 5 of 8 (7 data): RMW 2 < RCW 6.
        let mut touched = [f; 7];
        touched[3] = t;
        assert_eq!(choose(&touched, &touched, &[f; 7], 1, true), Plan::Rmw);
        // Not in sync: never RMW.
        assert_eq!(choose(&touched, &touched, &[f; 7], 1, false), Plan::Rcw);
        // RAID 6 of 6 (4 data): RMW 1+2 = 3, RCW 3 → RCW; of 7: RMW 3 < RCW 4.
        assert_eq!(
            choose(&[t, f, f, f], &[t, f, f, f], &[f; 4], 2, true),
            Plan::Rcw
        );
        assert_eq!(
            choose(&[t, f, f, f, f], &[t, f, f, f, f], &[f; 5], 2, true),
            Plan::Rmw
        );
        // Full rows: no reads.
        assert_eq!(choose(&[t; 3], &[t; 3], &[f; 3], 1, false), Plan::FullRows);
        // Written chunk lost: RMW impossible, RCW possible (it is covered).
        assert_eq!(choose(&touched, &touched, &touched, 1, true), Plan::Rcw);
        // An unwritten chunk lost and the written one lost too: reconstruct.
        let mut lost = touched;
        lost[0] = t;
        assert_eq!(
            choose(&touched, &touched, &lost, 1, true),
            Plan::Reconstruct
        );
        // Unwritten chunk lost, RMW possible.
        let mut lost = [f; 7];
        lost[0] = t;
        assert_eq!(choose(&touched, &touched, &lost, 1, true), Plan::Rmw);
        // Parity lost.
        assert_eq!(choose(&touched, &touched, &[f; 7], 0, true), Plan::DataOnly);
    }

    #[test]
    fn ranges_merge() {
        let mut r = Ranges::new();
        add_range(&mut r, 10, 20);
        add_range(&mut r, 30, 40);
        add_range(&mut r, 20, 30);
        assert_eq!(r, vec![(10, 40)]);
        add_range(&mut r, 0, 5);
        assert_eq!(r, vec![(0, 5), (10, 40)]);
        assert!(covers(&r, 12, 40));
        assert!(!covers(&r, 4, 11));
    }

    #[test]
    fn recovery_patterns() {
        assert_eq!(
            recovery(&[1], true, false),
            Some((Loss::Data(1), true, false))
        );
        assert_eq!(
            recovery(&[1], false, true),
            Some((Loss::DataP(1), false, true))
        );
        assert_eq!(
            recovery(&[0, 2], true, true),
            Some((Loss::TwoData(0, 2), true, true))
        );
        assert_eq!(recovery(&[0, 2], true, false), None);
        assert_eq!(recovery(&[1], false, false), None);
    }
}
