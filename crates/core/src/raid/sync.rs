//! What is known about parity: stripes known in sync (a bitmap, or all), stripes whose parity
//! is known stale after a write failed beyond tolerance, and resync.

use super::*;

/// Stripes known to have parity matching data.
pub(super) enum SyncMap {
    All,
    Some(Vec<AtomicU64>),
}

impl ParityCore {
    pub(super) fn in_sync(&self, stripe: u64) -> bool {
        match &self.sync {
            SyncMap::All => true,
            SyncMap::Some(bits) => {
                bits[(stripe / 64) as usize].load(Ordering::Acquire) & (1 << (stripe % 64)) != 0
            }
        }
    }

    pub(super) fn mark_in_sync(&self, stripe: u64) {
        if let SyncMap::Some(bits) = &self.sync {
            bits[(stripe / 64) as usize].fetch_or(1 << (stripe % 64), Ordering::AcqRel);
        }
    }

    pub(super) fn is_stale(&self, stripe: u64) -> bool {
        let st = self.stale.lock();
        !st.is_empty() && st.contains(&stripe)
    }

    pub(super) fn any_stale(&self, first: u64, last: u64) -> bool {
        let st = self.stale.lock();
        !st.is_empty() && st.iter().any(|s| (first..=last).contains(s))
    }

    /// Recomputes parity of every stripe not known to be in sync.
    pub async fn resync(&self) -> VolumeResult<()> {
        for s in 0..self.layout.stripes() {
            if self.in_sync(s) {
                continue;
            }
            let _g = self.locks.lock(s, 1, true).await;
            let want = vec![true; self.k];
            let rows = self
                .read_rows(s, 0, self.strip, &want, (0..self.k).map(|_| None).collect())
                .await?;
            // Rewriting the stripe's data through the full-row plan regenerates parity.
            let w = self.width();
            let mut all = Buf::new(w as usize);
            for (i, r) in rows.iter().enumerate() {
                all[i * self.strip as usize..(i + 1) * self.strip as usize].copy_from_slice(r);
            }
            let mut segs = vec![(0, all.freeze())];
            if let Some(cache) = &self.cache {
                if let Some(e) = cache.state.lock().entries.get(&s) {
                    let mut b = Buf::new(w as usize);
                    b.copy_from_slice(&segs[0].1);
                    e.overlay(0, &mut b);
                    segs = vec![(0, b.freeze())];
                }
            }
            self.write_stripe(s, segs, false).await?;
            self.mark_in_sync(s);
        }
        Ok(())
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
