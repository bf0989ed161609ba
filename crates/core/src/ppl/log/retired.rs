//! Bands settled in memory whose newest entry a ring may still replay ([`Retired`]): a write
//! replacing such a band whole must log over that entry, or a crash replays it over the new
//! bytes. What it remembers is bounded: an entry below the tails of every ring that can hold
//! it is never replayed and is forgotten.

use super::Key;
use crate::num_hash::NumMap;

/// Past this many bands the log trims band by band ([`Retired::trim_each`]), then waits for
/// twice what is left: a few MiB a group at most, a pass over it rare.
pub(super) const CAP_MIN: usize = 1 << 16;

/// Per band, the sequence number of its newest entry.
pub(super) struct Retired {
    seqs: NumMap<Key, u64>,
    /// The floor [`Retired::trim_to`] last trimmed to.
    floor: u64,
    /// Past this many bands, [`Retired::over_cap`].
    cap: usize,
}

impl Default for Retired {
    fn default() -> Retired {
        Retired {
            seqs: NumMap::default(),
            floor: 0,
            cap: CAP_MIN,
        }
    }
}

impl Retired {
    /// Band `key` settled, its newest entry `seq`.
    pub(super) fn insert(&mut self, key: Key, seq: u64) {
        self.seqs.insert(key, seq);
    }

    /// Whether band `key`'s newest entry lies at or above `floor` (a ring may replay it).
    pub(super) fn replayable(&self, key: &Key, floor: u64) -> bool {
        self.seqs.get(key).is_some_and(|&s| s >= floor)
    }

    /// The bands remembered, with their newest entries.
    pub(super) fn seqs(&self) -> &NumMap<Key, u64> {
        &self.seqs
    }

    /// The floor of every ring that counts, or `None` when none does (kept as it was):
    /// forgets the bands below it, when it moved.
    pub(super) fn trim_to(&mut self, floor: Option<u64>) {
        let floor = floor.unwrap_or(self.floor);
        if floor != self.floor {
            self.seqs.retain(|_, seq| *seq >= floor);
            self.floor = floor;
        }
    }

    /// Whether it holds more bands than its cap: time for [`Retired::trim_each`].
    pub(super) fn over_cap(&self) -> bool {
        self.seqs.len() > self.cap
    }

    /// Forgets each band below `floor_of(stripe)` (the tails of the rings its stripe's entries
    /// go to), then caps at twice what is left. One ring that gets no batch holds the floor
    /// of every ring together still ([`Retired::trim_to`]), not those of the others' bands.
    pub(super) fn trim_each(&mut self, floor_of: impl Fn(u64) -> u64) {
        self.seqs
            .retain(|&(stripe, _), seq| *seq >= floor_of(stripe));
        self.cap = (2 * self.seqs.len()).max(CAP_MIN);
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.seqs.len()
    }

    #[cfg(test)]
    pub(super) fn set_cap(&mut self, cap: usize) {
        self.cap = cap;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(entries: &[(Key, u64)]) -> Retired {
        let mut r = Retired::default();
        for &(k, s) in entries {
            r.insert(k, s);
        }
        r
    }

    #[test]
    fn a_floor_forgets_what_lies_below_it_and_none_keeps_it() {
        let mut r = with(&[((1, 0), 5), ((2, 0), 9), ((3, 1), 12)]);
        r.trim_to(Some(9));
        assert!(!r.replayable(&(1, 0), 0) && r.replayable(&(2, 0), 9));
        r.trim_to(None);
        assert_eq!(r.len(), 2, "no ring counts: nothing forgotten");
        assert!(!r.replayable(&(3, 1), 13), "below the asker's floor");
    }

    #[test]
    fn trimming_band_by_band_uses_each_stripes_floor_and_doubles_the_cap() {
        let mut r = with(&[((1, 0), 5), ((2, 0), 5), ((3, 0), 20)]);
        r.set_cap(2);
        assert!(r.over_cap());
        // Stripe 1's rings are at 3, the others at 10.
        r.trim_each(|stripe| if stripe == 1 { 3 } else { 10 });
        assert!(r.replayable(&(1, 0), 0) && !r.replayable(&(2, 0), 0));
        assert_eq!(r.len(), 2);
        assert!(
            !r.over_cap(),
            "capped at twice what is left, or the minimum"
        );
    }
}
