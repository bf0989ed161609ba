//! The group's children and how its stripes lie on them: the geometry every other part asks
//! (stripes of a range, which children are lost for some rows, the one tolerance rule) and
//! the I/O that touches chunks without any policy (concurrent reads, parity of whole rows).

use crate::buf::{Buf, SharedBuf};
use crate::error::{VolumeError, VolumeResult};
use crate::node::ArrayNode;
use crate::parity;
use futures::future::join_all;
use nbraid_layout::{ParityGroup, StripeRoles};

/// Which children cannot serve some rows of a stripe, by child index.
pub(super) type Lost = Vec<bool>;

/// A stripe's piece of a range: where it lies within the stripe's logical range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct StripePiece {
    pub stripe: u64,
    /// Offset within the stripe's logical range.
    pub in_stripe: u64,
    pub len: u64,
}

/// A read of one child: `len` bytes at `at` in the child's address space.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct ChildRead {
    pub child: usize,
    pub at: u64,
    pub len: usize,
}

/// A write of one child: `bytes` at `at` in the child's address space.
pub(super) struct ChildWrite {
    pub child: usize,
    pub at: u64,
    pub bytes: SharedBuf,
}

/// The group's children and its geometry (immutable after assembly).
pub(super) struct Chunks {
    pub layout: ParityGroup,
    pub children: Vec<Box<dyn ArrayNode>>,
    pub capacity: u64,
    /// Bytes of one chunk.
    pub strip: u64,
    /// Data chunks per stripe.
    pub k: usize,
    /// Parity chunks per stripe (1 or 2).
    pub np: usize,
}

impl Chunks {
    pub fn new(layout: ParityGroup, children: Vec<Box<dyn ArrayNode>>, capacity: u64) -> Chunks {
        assert_eq!(
            children.len(),
            layout.data_chunks() + layout.parity(),
            "one child per chunk of a stripe"
        );
        Chunks {
            strip: layout.strip(),
            k: layout.data_chunks(),
            np: layout.parity(),
            layout,
            children,
            capacity,
        }
    }

    /// Logical bytes of one stripe.
    pub fn width(&self) -> u64 {
        self.layout.stripe_width()
    }

    /// `[offset, offset+len)` cut at stripe boundaries, in order. The one splitter of the
    /// group's range into stripes (`ParityGroup::split` cuts further, into chunks).
    pub fn stripe_pieces(&self, offset: u64, len: u64) -> impl Iterator<Item = StripePiece> {
        let w = self.width();
        let end = offset + len;
        let mut at = offset;
        std::iter::from_fn(move || {
            (at < end).then(|| {
                let (stripe, in_stripe) = (at / w, at % w);
                let n = (w - in_stripe).min(end - at);
                at += n;
                StripePiece {
                    stripe,
                    in_stripe,
                    len: n,
                }
            })
        })
    }

    /// Stripes `[first, last]` touched by `[offset, offset+len)`.
    pub fn stripe_span(&self, offset: u64, len: u64) -> (u64, u64) {
        let w = self.width();
        (offset / w, (offset + len.max(1) - 1) / w)
    }

    /// Which children cannot serve rows `[r0, r1)` of `stripe`.
    pub fn lost(&self, stripe: u64, r0: u64, r1: u64) -> Lost {
        let at = self.layout.chunk_offset(stripe) + r0;
        self.children
            .iter()
            .map(|c| !c.readable(at, r1 - r0))
            .collect()
    }

    /// The one tolerance rule of a parity group: a stripe can be rebuilt (and written) while
    /// no more of its children are lost than it has parity chunks.
    pub fn tolerates(&self, lost_children: usize) -> bool {
        lost_children <= self.np
    }

    /// [`Self::tolerates`] for the children marked in `lost`.
    pub fn rebuildable(&self, lost: &[bool]) -> bool {
        self.tolerates(lost.iter().filter(|&&l| l).count())
    }

    pub fn unavailable(&self, stripe: u64, lost: &[bool], what: &str) -> VolumeError {
        let which: Vec<usize> = (0..lost.len()).filter(|&c| lost[c]).collect();
        VolumeError::Unavailable {
            reason: format!(
                "{what}: stripe {stripe} of a {}-member RAID {} group has lost children {which:?}, more than its {} parity chunk(s) can rebuild",
                self.children.len(),
                if self.np == 1 { 5 } else { 6 },
                self.np
            ),
        }
    }

    /// Data chunk indices in parity-slot order (the order the parity kernels take them).
    pub fn slot_order(&self, roles: &StripeRoles) -> Vec<usize> {
        let mut order = vec![0usize; self.k];
        for i in 0..self.k {
            order[roles.q_slot[i]] = i;
        }
        order
    }

    /// P (and Q for RAID 6) of equal-length rows of every data chunk, in data order.
    pub fn parity_of<B: std::ops::Deref<Target = [u8]>>(
        &self,
        roles: &StripeRoles,
        data: &[B],
    ) -> (Buf, Option<Buf>) {
        assert_eq!(data.len(), self.k, "one row range per data chunk");
        let srcs: Vec<&[u8]> = self
            .slot_order(roles)
            .iter()
            .map(|&i| &data[i][..])
            .collect();
        let n = srcs.first().map_or(0, |s| s.len());
        let mut p = Buf::new(n);
        if self.np == 2 {
            let mut q = Buf::new(n);
            parity::pq_gen(&srcs, &mut p, &mut q);
            (p, Some(q))
        } else {
            parity::xor_gen(&srcs, &mut p);
            (p, None)
        }
    }

    /// An empty accumulator of this group's parity (P, and Q for RAID 6).
    pub fn parity_fold(&self) -> ParityFold {
        ParityFold {
            p: None,
            q: None,
            with_q: self.np == 2,
        }
    }

    /// The bytes child `child` holds over rows of a stripe whose data rows are `rows`: its
    /// data, or parity regenerated from them.
    pub fn chunk_from_rows(
        &self,
        roles: &StripeRoles,
        rows: &[SharedBuf],
        child: usize,
    ) -> SharedBuf {
        if let Some(i) = roles.data_index_of(child) {
            return rows[i].clone();
        }
        let (p, q) = self.parity_of(roles, rows);
        match q {
            Some(q) if Some(child) == roles.q => q.freeze(),
            _ => p.freeze(),
        }
    }

    /// Issues `reads` concurrently; the first failure names the child.
    pub async fn read_all(&self, reads: &[ChildRead]) -> Result<Vec<Buf>, Retry> {
        let results = join_all(
            reads
                .iter()
                .map(|r| self.children[r.child].read(r.at, Buf::new(r.len))),
        )
        .await;
        let mut out = Vec::with_capacity(reads.len());
        for (read, r) in reads.iter().zip(results) {
            match r {
                Ok(b) => out.push(b),
                Err(e) => return Err(Retry::Read(read.child, e)),
            }
        }
        Ok(out)
    }

    /// Issues `writes` concurrently; each child's outcome, in order.
    pub async fn write_all(&self, writes: &[ChildWrite], fua: bool) -> Vec<VolumeResult<()>> {
        join_all(
            writes
                .iter()
                .map(|w| self.children[w.child].write(w.at, w.bytes.clone(), fua)),
        )
        .await
    }
}

/// Why an attempt at writing rows of a stripe stopped, and whether to plan again.
pub(super) enum Retry {
    /// A read of this child failed: plan again without it.
    Read(usize, VolumeError),
    /// Rebuilding the plan's lost chunks failed: a read error beyond what the stripe's
    /// parity covers (which child is not known here).
    Rebuild(VolumeError),
    /// No plan, or the log refused: nothing was written.
    Fatal(VolumeError),
    /// The member writes went out and lost more chunks than parity covers.
    Lost(VolumeError),
}

/// P (and Q) of one stripe's rows, accumulated a group of data chunks at a time in parity-slot
/// order: each group is folded in while it is still in the CPU cache.
pub struct ParityFold {
    /// None until the first group.
    p: Option<Buf>,
    /// None until the first group, or without Q (RAID 5).
    q: Option<Buf>,
    with_q: bool,
}

impl ParityFold {
    /// Fold in the data chunks of parity slots `first_slot ..` (`srcs`, in slot order).
    pub fn fold(&mut self, first_slot: usize, srcs: &[&[u8]]) {
        let len = srcs.first().map_or(0, |s| s.len());
        match (self.p.as_mut(), self.q.as_mut()) {
            (Some(p), None) => parity::xor_into(p, srcs),
            (Some(p), Some(q)) => parity::pq_fold(srcs, first_slot, p, q),
            (None, _) if !self.with_q => {
                let mut p = Buf::new(len);
                parity::xor_gen(srcs, &mut p);
                self.p = Some(p);
            }
            (None, _) if first_slot == 0 => {
                let (mut p, mut q) = (Buf::new(len), Buf::new(len));
                parity::pq_gen(srcs, &mut p, &mut q);
                (self.p, self.q) = (Some(p), Some(q));
            }
            (None, _) => {
                let (mut p, mut q) = (Buf::zeroed(len), Buf::zeroed(len));
                parity::pq_fold(srcs, first_slot, &mut p, &mut q);
                (self.p, self.q) = (Some(p), Some(q));
            }
        }
    }

    /// P, and Q for RAID 6, of every chunk folded in.
    ///
    /// # Panics
    /// If nothing was folded in.
    pub fn finish(self) -> (Buf, Option<Buf>) {
        let p = self.p.expect("parity folded from at least one data chunk");
        assert_eq!(self.q.is_some(), self.with_q, "Q folded exactly for RAID 6");
        (p, self.q)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Folding a stripe in any grouping, from slot 0 or onto a later start, gives the P and Q
    /// (or the P) generated in one pass.
    #[test]
    fn parity_fold_in_groups_is_the_one_pass_parity() {
        let k = 7;
        let rows: Vec<Vec<u8>> = (0..k)
            .map(|i| (0..300).map(|b| (b * 7 + i * 31) as u8).collect())
            .collect();
        let srcs: Vec<&[u8]> = rows.iter().map(|r| &r[..]).collect();
        let (mut p, mut q) = (vec![0; 300], vec![0; 300]);
        parity::pq_gen(&srcs, &mut p, &mut q);
        for with_q in [false, true] {
            for group in 1..=k {
                let mut fold = ParityFold {
                    p: None,
                    q: None,
                    with_q,
                };
                for first in (0..k).step_by(group) {
                    fold.fold(first, &srcs[first..(first + group).min(k)]);
                }
                let (fp, fq) = fold.finish();
                assert_eq!(fp[..], p[..], "P in groups of {group}");
                assert_eq!(
                    fq.as_deref(),
                    with_q.then_some(&q[..]),
                    "Q in groups of {group}"
                );
            }
            // A fold that starts past slot 0 (slots 0 ..= 1 hold zeroes).
            let mut fold = ParityFold {
                p: None,
                q: None,
                with_q,
            };
            let zero = vec![0u8; 300];
            fold.fold(2, &srcs[2..]);
            let mut with_zeroes = srcs.clone();
            with_zeroes[..2].copy_from_slice(&[&zero[..], &zero[..]]);
            let (mut zp, mut zq) = (vec![0; 300], vec![0; 300]);
            parity::pq_gen(&with_zeroes, &mut zp, &mut zq);
            let (fp, fq) = fold.finish();
            assert_eq!(fp[..], zp[..]);
            assert_eq!(fq.as_deref(), with_q.then_some(&zq[..]));
        }
    }
}
