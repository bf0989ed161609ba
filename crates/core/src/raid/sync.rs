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
            if !self.in_sync(s) {
                self.resync_stripe(s).await?;
            }
        }
        Ok(())
    }

    /// Rewrites every stripe touched by `[offset, offset+len)` whole (see
    /// [`crate::ArrayNode::resync_range`]), after its children made their own copies agree.
    pub(super) async fn resync_range(&self, offset: u64, len: u64) -> VolumeResult<()> {
        if len == 0 {
            return Ok(());
        }
        let (a, b) = self.stripe_span(offset, len);
        let (c0, c1) = (
            self.layout.chunk_offset(a),
            self.layout.chunk_offset(b) + self.strip,
        );
        for c in &self.children {
            if c.writable(c0, c1 - c0) {
                c.resync_range(c0, c1 - c0).await?;
            }
        }
        for s in a..=b {
            self.resync_stripe(s).await?;
        }
        Ok(())
    }

    /// Reads stripe `s`'s data (rebuilding what is lost) and writes the whole stripe: data on
    /// every writable child, parity regenerated.
    async fn resync_stripe(&self, s: u64) -> VolumeResult<()> {
        let _g = self.locks.lock(s, 1, true).await;
        let want = vec![true; self.k];
        let rows = self
            .read_rows(s, 0, self.strip, &want, (0..self.k).map(|_| None).collect())
            .await?;
        let w = self.width();
        let mut all = Buf::new(w as usize);
        for (i, r) in rows.iter().enumerate() {
            all[i * self.strip as usize..(i + 1) * self.strip as usize].copy_from_slice(r);
        }
        // Not with the cache's dirty bytes: then the write changes no byte a present member
        // holds (only parity and a resyncing member's chunk), so a crash tearing it can cost
        // nothing a member that is absent at the next start needs. The cached bytes reach the
        // members later through the logged write path.
        // A full-row write regenerates parity and rewrites every data chunk.
        self.write_stripe(s, vec![(0, all.freeze())], false).await?;
        self.mark_in_sync(s);
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
