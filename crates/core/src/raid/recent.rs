//! Stripes a degraded read rebuilt whole, kept for the next reads of the same stripe (a few,
//! forgotten as soon as the stripe is written), so sequential degraded reads in requests
//! smaller than a stripe rebuild each stripe once.

use crate::buf::SharedBuf;
use parking_lot::Mutex;
use std::collections::VecDeque;

/// Recently rebuilt stripes kept at most.
pub(super) const RECENT_STRIPES: usize = 4;

/// One rebuilt stripe: its data chunks' rows. Chunks handed straight to the reader that
/// rebuilt the stripe are not kept (`None`).
struct RecentStripe {
    stripe: u64,
    chunks: Vec<Option<SharedBuf>>,
}

/// Recently rebuilt whole stripes, newest last. Contract (checked by the callers, which hold
/// the group's stripe locks): filled under the stripe's shared lock, forgotten under its
/// exclusive lock, so no read can put back bytes a write is about to change.
#[derive(Default)]
pub(super) struct RecentStripes {
    kept: Mutex<VecDeque<RecentStripe>>,
}

impl RecentStripes {
    pub fn get(&self, stripe: u64) -> Option<Vec<Option<SharedBuf>>> {
        let kept = self.kept.lock();
        kept.iter()
            .find(|r| r.stripe == stripe)
            .map(|r| r.chunks.clone())
    }

    pub fn put(&self, stripe: u64, chunks: Vec<Option<SharedBuf>>) {
        let mut kept = self.kept.lock();
        kept.retain(|r| r.stripe != stripe);
        if kept.len() >= RECENT_STRIPES {
            kept.pop_front();
        }
        kept.push_back(RecentStripe { stripe, chunks });
    }

    /// Forgets a rebuilt stripe (its data is about to change).
    pub fn forget(&self, stripe: u64) {
        let mut kept = self.kept.lock();
        if !kept.is_empty() {
            kept.retain(|r| r.stripe != stripe);
        }
    }

    /// Forgets every rebuilt stripe in `stripes` (their data is about to change).
    pub fn forget_range(&self, stripes: std::ops::Range<u64>) {
        let mut kept = self.kept.lock();
        if !kept.is_empty() {
            kept.retain(|r| !stripes.contains(&r.stripe));
        }
    }
}
