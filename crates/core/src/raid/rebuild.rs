//! Rebuilding children of a parity group that take writes but are not read (a new member in
//! a failed one's place): each stripe of the range is read — the lost chunks reconstructed
//! from the rest, as a degraded read does — and only the rebuilding children's chunks are
//! written (their data chunk, or P or Q generated from the data). RAID 6 with two
//! rebuilding children rebuilds both from one read of the stripe.
//!
//! The whole range's stripes are held exclusively while it is rebuilt, so a user write (which
//! plans under its stripe's lock) lands either before — and then the reconstruction sees
//! it — or after, and then it writes the rebuilding child itself (a child that is written
//! but not read gets its new chunk from every write plan). Cached write-back bytes not yet
//! destaged are not the members' bytes: the rebuilt chunk matches the members, and the
//! destage writes the rebuilding child like any other write.

use super::*;

impl ParityCore {
    pub(super) async fn rebuild_range(&self, offset: u64, len: u64) -> VolumeResult<()> {
        if len == 0 {
            return Ok(());
        }
        let (a, b) = self.stripe_span(offset, len);
        let c0 = self.layout.chunk_offset(a);
        let clen = self.layout.chunk_offset(b) + self.strip - c0;
        let _g = self.locks.lock(a, b - a + 1, true).await;
        let readable: Vec<bool> = self.children.iter().map(|c| c.readable(c0, clen)).collect();
        // Readable children rebuild what is below them (replacements, nested groups) under
        // this group's lock.
        crate::node::all_ok(
            join_all(
                self.children
                    .iter()
                    .zip(&readable)
                    .filter(|(_, &r)| r)
                    .map(|(c, _)| c.rebuild_range(c0, clen)),
            )
            .await,
        )?;
        let targets: Vec<usize> = (0..self.children.len())
            .filter(|&c| !readable[c] && self.children[c].writable(c0, clen))
            .collect();
        if targets.is_empty() {
            return Ok(());
        }
        let results = join_all((a..=b).map(|s| self.rebuild_stripe(s, &targets))).await;
        crate::node::all_ok(results)
    }

    /// Writes the chunks of `targets` in stripe `s` from the rest of the stripe.
    async fn rebuild_stripe(&self, s: u64, targets: &[usize]) -> VolumeResult<()> {
        let roles = self.layout.roles(s);
        let want = vec![true; self.k];
        let none = (0..self.k).map(|_| None).collect();
        let rows = self.read_rows(s, 0, self.strip, &want, none).await?;
        let rows: Vec<SharedBuf> = rows.into_iter().map(Buf::freeze).collect();
        let at = self.layout.chunk_offset(s);
        let writes = targets.iter().map(|&c| {
            let bytes = self.chunk_from_rows(&roles, &rows, c);
            self.children[c].write(at, bytes, false)
        });
        // A child that fails the write is marked failed by its leaf: the rebuild of the
        // others goes on, and whoever drives the rebuild sees the member failed.
        drop(join_all(writes).await);
        Ok(())
    }
}
