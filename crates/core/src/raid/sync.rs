//! What is known about each stripe's parity: known in sync (a bitmap, or all), or known
//! stale after a write failed beyond tolerance. Memory only; decided at assembly
//! ([`SyncState::at_assembly`]) and learned from writes.

use super::SyncState;
use parking_lot::Mutex;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Stripes known to have parity matching data.
enum SyncMap {
    All,
    Some(Vec<AtomicU64>),
}

/// The parity health of every stripe of one group.
pub(super) struct StripeHealth {
    sync: SyncMap,
    /// Stripes whose parity is known not to match their data: a write failed beyond the
    /// stripe's tolerance after (or instead of) writing some chunks. Never rebuilt from until
    /// a whole-chunk reconstruct-write or full-stripe write makes them consistent again.
    stale: Mutex<HashSet<u64>>,
    /// Set when some stripe ever lost a write beyond tolerance (for logs only).
    warned: AtomicBool,
}

impl StripeHealth {
    pub fn new(sync: SyncState, stripes: u64) -> StripeHealth {
        let sync = match sync {
            SyncState::Clean => SyncMap::All,
            SyncState::Unknown => SyncMap::Some(
                (0..stripes.div_ceil(64))
                    .map(|_| AtomicU64::new(0))
                    .collect(),
            ),
        };
        StripeHealth {
            sync,
            stale: Mutex::new(HashSet::new()),
            warned: AtomicBool::new(false),
        }
    }

    pub fn in_sync(&self, stripe: u64) -> bool {
        match &self.sync {
            SyncMap::All => true,
            SyncMap::Some(bits) => {
                bits[(stripe / 64) as usize].load(Ordering::Acquire) & (1 << (stripe % 64)) != 0
            }
        }
    }

    pub fn mark_in_sync(&self, stripe: u64) {
        if let SyncMap::Some(bits) = &self.sync {
            bits[(stripe / 64) as usize].fetch_or(1 << (stripe % 64), Ordering::AcqRel);
        }
    }

    pub fn is_stale(&self, stripe: u64) -> bool {
        let st = self.stale.lock();
        !st.is_empty() && st.contains(&stripe)
    }

    pub fn any_stale(&self, first: u64, last: u64) -> bool {
        let st = self.stale.lock();
        !st.is_empty() && st.iter().any(|s| (first..=last).contains(s))
    }

    /// A write failed beyond the stripe's tolerance: its parity no longer matches its data.
    pub fn mark_stale(&self, stripe: u64) {
        self.stale.lock().insert(stripe);
    }

    /// Parity was regenerated from the whole stripes' data: consistent again.
    pub fn mark_consistent(&self, stripes: std::ops::Range<u64>) {
        let mut stale = self.stale.lock();
        for s in stripes {
            stale.remove(&s);
        }
    }

    /// Whether this is the first write of the group to lose more chunks than parity covers
    /// (said once in the log).
    pub fn first_loss(&self) -> bool {
        !self.warned.swap(true, Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::super::SyncState;

    /// Zero members have zero parity: in sync. Anything else may not be.
    #[test]
    fn parity_starts_in_sync_only_over_known_zero_members() {
        assert_eq!(SyncState::at_assembly(true), SyncState::Clean);
        assert_eq!(SyncState::at_assembly(false), SyncState::Unknown);
    }
}
