//! Bringing a parity group's redundancy up to date: resync (every stripe not known in sync
//! rewritten whole: data as read, parity regenerated) and rebuild.
//!
//! Rebuilding children of a parity group that take writes but are not read (a new member in
//! a failed one's place): each stripe of the range is read — the lost chunks reconstructed
//! from the rest, as a degraded read does — and only the rebuilding children's chunks are
//! written (their data chunk, or P or Q generated from the data). RAID 6 with two
//! rebuilding children rebuilds both from one read of the stripe.
//!
//! The fast path reads each surviving child's chunks of the whole range in one member read
//! and writes each rebuilding child's in one member write, rebuilding stripe by stripe in
//! memory between (memory: the range times children / data chunks). Anything unusual — a
//! read error, a stripe whose parity is stale, more lost children than parity — falls back
//! to stripe-by-stripe rebuilding through the degraded read path, which handles it.
//!
//! The whole range's stripes are held exclusively while it is rebuilt, so a user write (which
//! plans under its stripe's lock) lands either before — and then the reconstruction sees
//! it — or after, and then it writes the rebuilding child itself (a child that is written
//! but not read gets its new chunk from every write plan). Cached write-back bytes not yet
//! destaged are not the members' bytes: the rebuilt chunk matches the members, and the
//! destage writes the rebuilding child like any other write.

use super::*;

/// Resync and rebuild over a group's stripes: reads through the [`Reader`], writes through
/// the [`StripeWriter`].
#[derive(Clone, Copy)]
pub(super) struct Rebuilder<'a> {
    pub(super) stripes: &'a Stripes,
}

impl Rebuilder<'_> {
    /// Recomputes parity of every stripe not known to be in sync.
    pub async fn resync(&self) -> VolumeResult<()> {
        for s in 0..self.stripes.chunks.layout.stripes() {
            if !self.stripes.health.in_sync(s) {
                self.resync_stripe(s).await?;
            }
        }
        Ok(())
    }

    /// Rewrites every stripe touched by `[offset, offset+len)` whole (see
    /// [`crate::node::NodeMaintenance::resync_range`]), after its children made their own copies agree.
    pub(super) async fn resync_range(&self, offset: u64, len: u64) -> VolumeResult<()> {
        if len == 0 {
            return Ok(());
        }
        let (a, b) = self.stripes.chunks.stripe_span(offset, len);
        let (c0, c1) = (
            self.stripes.chunks.layout.chunk_offset(a),
            self.stripes.chunks.layout.chunk_offset(b) + self.stripes.chunks.strip,
        );
        for c in &self.stripes.chunks.children {
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
        let _g = self.stripes.locks.lock(s, 1, true).await;
        let want = vec![true; self.stripes.chunks.k];
        let rows = self
            .stripes
            .reader()
            .read_rows(
                s,
                0,
                self.stripes.chunks.strip,
                &want,
                (0..self.stripes.chunks.k).map(|_| None).collect(),
            )
            .await?;
        let w = self.stripes.chunks.width();
        let mut all = Buf::new(w as usize);
        for (i, r) in rows.iter().enumerate() {
            all[i * self.stripes.chunks.strip as usize
                ..(i + 1) * self.stripes.chunks.strip as usize]
                .copy_from_slice(r);
        }
        // Not with the cache's dirty bytes: then the write changes no byte a present member
        // holds (only parity and a resyncing member's chunk), so a crash tearing it can cost
        // nothing a member that is absent at the next start needs. The cached bytes reach the
        // members later through the logged write path.
        // A full-row write regenerates parity and rewrites every data chunk.
        self.stripes
            .writer()
            .write_stripe(s, vec![(0, all.freeze())], false)
            .await?;
        self.stripes.health.mark_in_sync(s);
        Ok(())
    }

    /// Rebuilds the children being rebuilt under the stripes of `[offset, offset+len)`,
    /// but those current there already (every member being rebuilt under them `ahead`):
    /// they count as lost for the reconstruction (they are not read) and are not written.
    pub(super) async fn rebuild_range(
        &self,
        offset: u64,
        len: u64,
        ahead: &[usize],
    ) -> VolumeResult<()> {
        if len == 0 {
            return Ok(());
        }
        let (a, b) = self.stripes.chunks.stripe_span(offset, len);
        let c0 = self.stripes.chunks.layout.chunk_offset(a);
        let clen = self.stripes.chunks.layout.chunk_offset(b) + self.stripes.chunks.strip - c0;
        let _g = self.stripes.locks.lock(a, b - a + 1, true).await;
        let mut readable: Vec<bool> = self
            .stripes
            .chunks
            .children
            .iter()
            .map(|c| c.readable(c0, clen))
            .collect();
        // Readable children rebuild what is below them (replacements, nested groups) under
        // this group's lock. One that cannot for a member's read error (a mirrored pair
        // whose last copy errs, a new member in the other) is rebuilt from this group's
        // parity instead: written whole, its new member gets the bytes too.
        let below = join_all(
            (0..self.stripes.chunks.children.len())
                .filter(|&c| readable[c])
                .map(|c| async move {
                    (
                        c,
                        self.stripes.chunks.children[c]
                            .rebuild_range(c0, clen, ahead)
                            .await,
                    )
                }),
        )
        .await;
        for (c, r) in below {
            match r {
                Ok(()) => {}
                Err(e) if e.is_member_io() => readable[c] = false,
                Err(e) => return Err(e),
            }
        }
        let children = &self.stripes.chunks.children;
        let targets: Vec<usize> = (0..children.len())
            .filter(|&c| {
                let child = &children[c];
                !readable[c] && child.writable(c0, clen) && child.written_by_window(ahead)
            })
            .collect();
        if targets.is_empty() {
            return Ok(());
        }
        if self.rebuild_window(a, b, &readable, &targets).await {
            return Ok(());
        }
        let results = join_all((a..=b).map(|s| self.rebuild_stripe(s, &targets))).await;
        crate::node::all_ok(results)
    }

    /// Rebuilds stripes `a..=b` with one read per surviving child and one write per target;
    /// false (nothing written) when the slow path must do it.
    async fn rebuild_window(&self, a: u64, b: u64, readable: &[bool], targets: &[usize]) -> bool {
        let lost = readable.iter().filter(|&&r| !r).count();
        if !self.stripes.chunks.tolerates(lost) || self.stripes.health.any_stale(a, b) {
            return false;
        }
        let c0 = self.stripes.chunks.layout.chunk_offset(a);
        let clen = self.stripes.chunks.layout.chunk_offset(b) + self.stripes.chunks.strip - c0;
        let reads = join_all(
            (0..self.stripes.chunks.children.len())
                .filter(|&c| readable[c])
                .map(|c| async move {
                    (
                        c,
                        self.stripes.chunks.children[c]
                            .read(c0, Buf::new(clen as usize))
                            .await,
                    )
                }),
        )
        .await;
        let mut bufs: Vec<Buf> = (0..self.stripes.chunks.children.len())
            .map(|_| Buf::new(0))
            .collect();
        for (c, r) in reads {
            match r {
                Ok(buf) => bufs[c] = buf,
                Err(_) => return false,
            }
        }
        for (c, b) in bufs.iter_mut().enumerate() {
            if !readable[c] {
                *b = Buf::new(clen as usize);
            }
        }
        let strip = self.stripes.chunks.strip as usize;
        for s in a..=b {
            let roles = self.stripes.chunks.layout.roles(s);
            let Some(loss) = loss_of(&roles, readable) else {
                continue;
            };
            let off = (self.stripes.chunks.layout.chunk_offset(s) - c0) as usize;
            let mut parts: Vec<Option<&mut [u8]>> = bufs
                .iter_mut()
                .map(|b| Some(&mut b[off..off + strip]))
                .collect();
            let mut order = vec![0usize; self.stripes.chunks.k];
            for i in 0..self.stripes.chunks.k {
                order[roles.q_slot[i]] = i;
            }
            let mut data: Vec<&mut [u8]> = order
                .iter()
                .map(|&i| parts[roles.data[i]].take().expect("each child once"))
                .collect();
            let p = parts[roles.p].take().expect("P once");
            let q = roles.q.map(|c| parts[c].take().expect("Q once"));
            parity::recover(&mut data, p, q, loss);
        }
        let mut bufs: Vec<Option<Buf>> = bufs.into_iter().map(Some).collect();
        let writes = targets.iter().map(|&t| {
            let data = bufs[t].take().expect("each target once").freeze();
            self.stripes.chunks.children[t].write(c0, data, false)
        });
        // A child that fails the write is marked failed by its leaf (as in the slow path).
        drop(join_all(writes).await);
        true
    }

    /// Writes the chunks of `targets` in stripe `s` from the rest of the stripe.
    async fn rebuild_stripe(&self, s: u64, targets: &[usize]) -> VolumeResult<()> {
        let roles = self.stripes.chunks.layout.roles(s);
        let want = vec![true; self.stripes.chunks.k];
        let none = (0..self.stripes.chunks.k).map(|_| None).collect();
        let rows = self
            .stripes
            .reader()
            .read_rows(s, 0, self.stripes.chunks.strip, &want, none)
            .await?;
        let rows: Vec<SharedBuf> = rows.into_iter().map(Buf::freeze).collect();
        let at = self.stripes.chunks.layout.chunk_offset(s);
        let writes = targets.iter().map(|&c| {
            let bytes = self.stripes.chunks.chunk_from_rows(&roles, &rows, c);
            self.stripes.chunks.children[c].write(at, bytes, false)
        });
        // A child that fails the write is marked failed by its leaf: the rebuild of the
        // others goes on, and whoever drives the rebuild sees the member failed.
        drop(join_all(writes).await);
        Ok(())
    }
}

/// What a stripe with the children `readable` says lost has to rebuild, in Q-slot terms;
/// `None` when nothing of it is lost.
fn loss_of(roles: &StripeRoles, readable: &[bool]) -> Option<Loss> {
    let mut slots: Vec<usize> = (0..roles.data.len())
        .filter(|&i| !readable[roles.data[i]])
        .map(|i| roles.q_slot[i])
        .collect();
    slots.sort_unstable();
    let p = !readable[roles.p];
    let q = roles.q.is_some_and(|c| !readable[c]);
    Some(match (&slots[..], p, q) {
        ([], false, false) => return None,
        ([], true, false) => Loss::P,
        ([], false, true) => Loss::Q,
        ([], true, true) => Loss::PQ,
        (&[x], false, false) => Loss::Data(x),
        (&[x], true, false) => Loss::DataP(x),
        (&[x], false, true) => Loss::DataQ(x),
        (&[x, y], false, false) => Loss::TwoData(x, y),
        _ => unreachable!("the caller checked the tolerance"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every pattern of up to two lost children of a RAID 6 stripe maps to the loss that
    /// rebuilds it, in Q-slot terms; RAID 5 loses data or P.
    #[test]
    fn loss_of_names_what_to_rebuild() {
        let roles = StripeRoles {
            data: smallvec::smallvec![2, 3, 4, 5],
            p: 0,
            q: Some(1),
            q_slot: smallvec::smallvec![0, 1, 2, 3],
        };
        let lost = |c: &[usize]| -> Vec<bool> { (0..6).map(|i| !c.contains(&i)).collect() };
        assert_eq!(loss_of(&roles, &lost(&[])), None);
        assert_eq!(loss_of(&roles, &lost(&[0])), Some(Loss::P));
        assert_eq!(loss_of(&roles, &lost(&[1])), Some(Loss::Q));
        assert_eq!(loss_of(&roles, &lost(&[0, 1])), Some(Loss::PQ));
        assert_eq!(loss_of(&roles, &lost(&[3])), Some(Loss::Data(1)));
        assert_eq!(loss_of(&roles, &lost(&[0, 4])), Some(Loss::DataP(2)));
        assert_eq!(loss_of(&roles, &lost(&[5, 1])), Some(Loss::DataQ(3)));
        assert_eq!(loss_of(&roles, &lost(&[5, 2])), Some(Loss::TwoData(0, 3)));
        let raid5 = StripeRoles {
            data: smallvec::smallvec![1, 2, 3],
            p: 0,
            q: None,
            q_slot: smallvec::smallvec![0, 1, 2],
        };
        let lost5 = |c: usize| -> Vec<bool> { (0..4).map(|i| i != c).collect() };
        assert_eq!(loss_of(&raid5, &lost5(0)), Some(Loss::P));
        assert_eq!(loss_of(&raid5, &lost5(2)), Some(Loss::Data(1)));
    }
}
