//! Scrubbing a mirror: every readable copy of the range is read under the range's exclusive
//! lock (user writes hold it shared, so no write is half-way across the copies) and compared
//! block by block; see [`crate::scrub`] for what repair rewrites and why.

use super::MirrorNode;
use crate::buf::Buf;
use crate::error::VolumeResult;
use crate::node::{all_ok, ScrubPass};
use crate::scrub::{majority, MIRROR_SCRUB_BLOCK_BYTES};
use futures::future::join_all;

impl MirrorNode {
    /// Scrubs `[offset, offset+len)`: the copies' own redundancy first (a copy may be a
    /// parity group), then the copies against each other.
    pub(super) async fn scrub_copies(
        &self,
        offset: u64,
        len: u64,
        pass: &ScrubPass<'_>,
    ) -> VolumeResult<()> {
        let below = join_all(
            self.children
                .iter()
                .map(|c| c.scrub_range(offset, len, pass)),
        )
        .await;
        all_ok(below)?;
        let blocks = len.div_ceil(MIRROR_SCRUB_BLOCK_BYTES);
        let _g = self.locks.lock(offset, len, true).await;
        let usable: Vec<usize> = (0..self.children.len())
            .filter(|&c| self.children[c].readable(offset, len))
            .collect();
        let reads = join_all(
            usable
                .iter()
                .map(|&c| self.children[c].read(offset, Buf::new(len as usize))),
        )
        .await;
        let mut good: Vec<(usize, Buf)> = Vec::new();
        let mut bad: Vec<usize> = Vec::new();
        for (&c, r) in usable.iter().zip(reads) {
            match r {
                Ok(b) => good.push((c, b)),
                Err(e) => {
                    tracing::warn!("scrub: mirror copy {c}, bytes {offset}+{len}: {e}");
                    bad.push(c);
                }
            }
        }
        pass.bump(|s| &s.unreadable, bad.len() as u64);
        if good.len() < 2 {
            // Nothing to compare against: a member under the range has failed or erred.
            pass.bump(|s| &s.skipped, blocks);
        }
        if pass.repair && !good.is_empty() && !bad.is_empty() {
            let src = good[0].1.to_vec();
            for &c in &bad {
                self.rewrite(c, offset, &src, pass).await;
            }
        }
        if good.len() < 2 {
            return Ok(());
        }
        let block = MIRROR_SCRUB_BLOCK_BYTES as usize;
        for b in 0..blocks as usize {
            let lo = b * block;
            let hi = (lo + block).min(len as usize);
            let views: Vec<&[u8]> = good.iter().map(|(_, buf)| &buf[lo..hi]).collect();
            pass.bump(|s| &s.checked, 1);
            if views.iter().all(|v| *v == views[0]) {
                continue;
            }
            pass.bump(|s| &s.mismatches, 1);
            // A majority of three or more decides; two copies cannot: md copies the first.
            let source = match majority(&views) {
                Some(i) => Some(i),
                None if views.len() == 2 => Some(0),
                None => None,
            };
            tracing::warn!(
                "scrub: mirror copies differ at bytes {}+{}{}",
                offset + lo as u64,
                hi - lo,
                if source.is_none() {
                    " (no majority: left as is)"
                } else {
                    ""
                }
            );
            let Some(src) = source.filter(|_| pass.repair) else {
                continue;
            };
            let right = views[src].to_vec();
            let wrong: Vec<usize> = good
                .iter()
                .filter(|(_, buf)| buf[lo..hi] != right[..])
                .map(|(c, _)| *c)
                .collect();
            for c in wrong {
                self.rewrite(c, offset + lo as u64, &right, pass).await;
            }
        }
        Ok(())
    }

    /// Writes `bytes` to copy `c` at `offset` (durably), counting a repair.
    async fn rewrite(&self, c: usize, offset: u64, bytes: &[u8], pass: &ScrubPass<'_>) {
        let b = Buf::copy_from(bytes).freeze();
        match self.children[c].write(offset, b, true).await {
            Ok(()) => {
                pass.bump(|s| &s.repaired, 1);
                self.repairs
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            // The leaf has marked the member failed.
            Err(e) => tracing::warn!("scrub: rewriting mirror copy {c} failed: {e}"),
        }
    }
}
