//! Roles being rebuilt onto a new member and how far each has come (in memory; the records
//! hold the last checkpoint). The records own it: a role listed here takes every commit.

use parking_lot::Mutex;
use std::collections::BTreeMap;

/// Roles being rebuilt onto a new member, with the bytes of the volume current on it (in
/// memory; the records hold the last checkpoint). A role listed here takes every commit.
#[derive(Default)]
pub(super) struct Rebuilding(Mutex<BTreeMap<usize, u64>>);

impl Rebuilding {
    pub(super) fn contains(&self, r: usize) -> bool {
        self.0.lock().contains_key(&r)
    }

    /// Role `r` rebuilds from `checkpoint_bytes` (a new member: 0; at open: as recorded).
    pub(super) fn resume(&self, r: usize, checkpoint_bytes: u64) {
        self.0.lock().insert(r, checkpoint_bytes);
    }

    /// Role `r` is not rebuilt any more (done, failed, or its member gone); whether it was.
    pub(super) fn remove(&self, r: usize) -> bool {
        self.0.lock().remove(&r).is_some()
    }

    /// The lowest position among `targets` (0 for one not listed): where a pass resumes.
    pub(super) fn start_of(&self, targets: &[usize]) -> u64 {
        let rb = self.0.lock();
        targets
            .iter()
            .map(|r| rb.get(r).copied().unwrap_or(0))
            .min()
            .unwrap_or(0)
    }

    /// The bytes below `pos` are current on `targets`' new members; positions never go back.
    pub(super) fn advance(&self, targets: &[usize], pos: u64) {
        let mut rb = self.0.lock();
        for r in targets {
            if let Some(b) = rb.get_mut(r) {
                *b = (*b).max(pos);
            }
        }
    }

    pub(super) fn snapshot(&self) -> Vec<(usize, u64)> {
        self.0.lock().iter().map(|(&r, &b)| (r, b)).collect()
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
        assert_eq!(rb.start_of(&[2, 4]), 0);
        rb.advance(&[2, 4], 50);
        assert_eq!(rb.snapshot(), vec![(2, 100), (4, 50)]);
        assert!(rb.remove(4) && !rb.contains(4));
        assert_eq!(rb.start_of(&[2]), 100);
    }
}
