//! Roles being rebuilt onto a new member and how far each has come (in memory; the records
//! hold the last checkpoint). The records own it: a role listed here takes every commit.
//!
//! A role's position belongs to the member it was given: a pass that started with one member
//! in a role must not carry its progress over to another member put there meanwhile (the
//! first failed mid-pass and a spare took the role — the pass would then call the spare
//! rebuilt with the bytes below the pass's position never copied onto it). So every
//! [`Rebuilding::resume`] opens a new *term* for the role, a pass works for the terms it
//! [`Rebuilding::claim`]ed at its start, and only those advance or complete.

use parking_lot::Mutex;
use std::collections::BTreeMap;

/// Roles being rebuilt onto a new member, with the bytes of the volume current on it (in
/// memory; the records hold the last checkpoint). A role listed here takes every commit.
#[derive(Default)]
pub(super) struct Rebuilding(Mutex<Terms>);

#[derive(Default)]
struct Terms {
    /// Per role: the bytes current on its member, and its term.
    roles: BTreeMap<usize, (u64, u64)>,
    /// The last term given.
    last: u64,
}

/// The roles a pass works for, each in the term it had when the pass started.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Claim(Vec<(usize, u64)>);

impl Rebuilding {
    pub(super) fn contains(&self, r: usize) -> bool {
        self.0.lock().roles.contains_key(&r)
    }

    /// Role `r` rebuilds from `checkpoint_bytes` onto the member it has now (a new member:
    /// 0; at open: as recorded), in a new term: a pass claimed before does not count for it.
    pub(super) fn resume(&self, r: usize, checkpoint_bytes: u64) {
        let mut t = self.0.lock();
        t.last += 1;
        let term = t.last;
        t.roles.insert(r, (checkpoint_bytes, term));
    }

    /// Role `r` is not rebuilt any more (done, failed, or its member gone); whether it was.
    pub(super) fn remove(&self, r: usize) -> bool {
        self.0.lock().roles.remove(&r).is_some()
    }

    /// The roles of `targets` being rebuilt, in their present terms (replacements, not
    /// listed here, are not claimed).
    pub(super) fn claim(&self, targets: &[usize]) -> Claim {
        let t = self.0.lock();
        Claim(
            (targets.iter())
                .filter_map(|r| t.roles.get(r).map(|&(_, term)| (*r, term)))
                .collect(),
        )
    }

    /// Whether role `r` is still in the term `claim` has for it.
    pub(super) fn holds(&self, claim: &Claim, r: usize) -> bool {
        let t = self.0.lock();
        (claim.0.iter()).any(|&(c, term)| c == r && t.roles.get(&r).map(|e| e.1) == Some(term))
    }

    /// Role `r`'s present term, while it is being rebuilt.
    pub(super) fn term(&self, r: usize) -> Option<u64> {
        self.0.lock().roles.get(&r).map(|e| e.1)
    }

    /// Where each role of `claim` still in its claimed term is current up to: what a pass
    /// over them leaves out below ([`crate::rebuild::roles_ahead`]). A role put in a new
    /// term since is not listed (its new member is written from the pass's start).
    pub(super) fn starts(&self, claim: &Claim) -> Vec<(usize, u64)> {
        let t = self.0.lock();
        (claim.0.iter())
            .filter_map(|&(r, term)| t.roles.get(&r).filter(|e| e.1 == term).map(|e| (r, e.0)))
            .collect()
    }

    /// The bytes below `pos` are current on the members `claim` names, those still in their
    /// claimed term; positions never go back. Returns the roles that advanced.
    pub(super) fn advance(&self, claim: &Claim, pos: u64) -> Vec<usize> {
        let mut t = self.0.lock();
        let mut advanced = Vec::new();
        for &(r, term) in &claim.0 {
            if let Some(e) = t.roles.get_mut(&r).filter(|e| e.1 == term) {
                e.0 = e.0.max(pos);
                advanced.push(r);
            }
        }
        advanced
    }

    pub(super) fn snapshot(&self) -> Vec<(usize, u64)> {
        (self.0.lock().roles.iter())
            .map(|(&r, &(b, _))| (r, b))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rebuild_positions_only_advance() {
        let rb = Rebuilding::default();
        rb.resume(2, 100);
        rb.resume(4, 0);
        let claim = rb.claim(&[2, 4, 7]);
        assert_eq!(
            claim,
            Claim(vec![(2, 1), (4, 2)]),
            "role 7 is not being rebuilt"
        );
        assert_eq!(rb.advance(&claim, 50), vec![2, 4]);
        assert_eq!(rb.snapshot(), vec![(2, 100), (4, 50)]);
        assert_eq!(rb.starts(&claim), vec![(2, 100), (4, 50)]);
        assert!(rb.remove(4) && !rb.contains(4));
        assert_eq!(rb.starts(&claim), vec![(2, 100)], "4 is not being rebuilt");
    }

    /// A member put in a role mid-pass starts a new term: the pass's progress does not
    /// count for it, nor does the pass complete it.
    #[test]
    fn a_role_given_a_new_member_mid_pass_is_not_advanced_by_that_pass() {
        let rb = Rebuilding::default();
        rb.resume(1, 0);
        rb.resume(3, 0);
        let claim = rb.claim(&[1, 3]);
        assert_eq!(rb.advance(&claim, 64), vec![1, 3]);
        rb.resume(1, 0); // its member failed, a spare took the role
        assert!(!rb.holds(&claim, 1) && rb.holds(&claim, 3));
        // The old claim's pass leaves nothing of the spare out.
        assert_eq!(rb.starts(&claim), vec![(3, 64)]);
        assert_eq!(rb.advance(&claim, 128), vec![3]);
        assert_eq!(rb.snapshot(), vec![(1, 0), (3, 128)]);
        let next = rb.claim(&[1, 3]);
        assert!(rb.holds(&next, 1) && rb.holds(&next, 3));
    }
}
