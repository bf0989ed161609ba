//! Scrubbing a parity group: each stripe the range owns (its first byte lies in the range) is
//! read whole — every data chunk, P and Q — under its stripe lock and checked; see
//! [`crate::scrub`] for what repair rewrites and why.

use super::*;
use crate::checksum::BLOCK_BYTES;
use crate::scrub::{locate, Culprit, ScrubPass};

/// What a mismatching stripe's repair rewrites.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fix {
    /// The data chunk `i` (logical order) from the P syndrome.
    Data(usize),
    P,
    Q,
    /// P (and Q) regenerated from the data.
    Parity,
}

/// A mismatching stripe's diagnosis: what to rewrite, and the bytes (`p` carries the
/// repaired data chunk for [`Fix::Data`]).
struct Verdict {
    fix: Fix,
    p: Buf,
    q: Buf,
}

/// Checking and repairing a group's stripes.
#[derive(Clone, Copy)]
pub(super) struct Scrubber<'a> {
    pub(super) stripes: &'a Stripes,
}

impl Scrubber<'_> {
    /// Scrubs this group's stripes that begin in `[offset, offset+len)`, after its children
    /// scrubbed their rows of them.
    pub(super) async fn scrub_stripes(
        &self,
        offset: u64,
        len: u64,
        pass: &ScrubPass<'_>,
    ) -> VolumeResult<()> {
        let w = self.stripes.chunks.width();
        let first = offset.div_ceil(w);
        let end = (offset + len)
            .div_ceil(w)
            .min(self.stripes.chunks.layout.stripes());
        if first >= end {
            return Ok(());
        }
        let at = self.stripes.chunks.layout.chunk_offset(first);
        let rows = self.stripes.chunks.layout.chunk_offset(end) - at;
        let below = join_all(
            self.stripes
                .chunks
                .children
                .iter()
                .map(|c| c.scrub_range(at, rows, pass)),
        )
        .await;
        crate::node::all_ok(below)?;
        let results = join_all((first..end).map(|s| self.scrub_stripe(s, pass))).await;
        crate::node::all_ok(results)
    }

    /// Checks stripe `s` in three stages: read it whole, diagnose it, and (repairing) rewrite
    /// what the diagnosis names.
    async fn scrub_stripe(&self, s: u64, pass: &ScrubPass<'_>) -> VolumeResult<()> {
        // A check only needs writers out; a repair rewrites chunks, so readers out too.
        let _g = self.stripes.locks.lock(s, 1, pass.repair).await;
        let strip = self.stripes.chunks.strip;
        if self.stripes.health.is_stale(s) || self.stripes.chunks.lost(s, 0, strip).contains(&true)
        {
            pass.bump(|st| &st.skipped, 1);
            return Ok(());
        }
        let roles = self.stripes.chunks.layout.roles(s);
        let read = self.read_stripe_whole(s, pass).await;
        let Some(chunks) = self.rebuild_unreadable(s, &roles, read, pass).await else {
            return Ok(());
        };
        pass.bump(|st| &st.checked, 1);
        let Some(verdict) = self.diagnose(s, &roles, &chunks) else {
            return Ok(());
        };
        pass.bump(|st| &st.mismatches, 1);
        if !pass.repair {
            return Ok(());
        }
        let writes: Vec<(usize, SharedBuf)> = match verdict.fix {
            Fix::Data(i) => vec![(roles.data[i], verdict.p.freeze())],
            Fix::P => vec![(roles.p, verdict.p.freeze())],
            Fix::Q => vec![(roles.q.expect("RAID 6"), verdict.q.freeze())],
            Fix::Parity => {
                let mut w = vec![(roles.p, verdict.p.freeze())];
                if let Some(qc) = roles.q {
                    w.push((qc, verdict.q.freeze()));
                }
                w
            }
        };
        self.stripes.assert_exclusive(s, "a scrub repair");
        self.stripes.recent.forget(s);
        let at = self.stripes.chunks.layout.chunk_offset(s);
        let results = join_all(
            writes
                .into_iter()
                .map(|(c, b)| self.stripes.chunks.children[c].write(at, b, true)),
        )
        .await;
        if let Err(e) = crate::node::all_ok(results) {
            // The leaf marked the member failed; the stripe is served degraded from now on.
            tracing::warn!("scrub: repairing stripe {s} failed: {e}");
            return Ok(());
        }
        self.stripes.health.mark_in_sync(s);
        pass.bump(|st| &st.repaired, 1);
        Ok(())
    }

    /// A stripe whose chunks all read comes back as it is. Chunks that did not read (an I/O
    /// error, or a block whose checksum did not match) are counted; a repair within the
    /// group's tolerance rebuilds them from the others and rewrites them in place (md's
    /// repair of a read error; with checksums, it names which side was wrong, which a RAID 5
    /// syndrome cannot). `None`: nothing more to check in this stripe.
    async fn rebuild_unreadable(
        &self,
        s: u64,
        roles: &StripeRoles,
        read: Vec<Option<Buf>>,
        pass: &ScrubPass<'_>,
    ) -> Option<Vec<Buf>> {
        let lost: Vec<usize> = (0..read.len()).filter(|&c| read[c].is_none()).collect();
        if lost.is_empty() {
            return Some(read.into_iter().flatten().collect());
        }
        pass.bump(|st| &st.unreadable, lost.len() as u64);
        let parity_chunks = 1 + usize::from(roles.q.is_some());
        let strip = self.stripes.chunks.strip as usize;
        if pass.repair && lost.len() > parity_chunks && strip as u64 > BLOCK_BYTES {
            // Bad blocks of many children may lie in different rows: block by block.
            return self.rebuild_by_block(s, roles, read, pass).await;
        }
        if !pass.repair || lost.len() > parity_chunks {
            return None;
        }
        let mut chunks: Vec<Buf> = read
            .into_iter()
            .map(|b| b.unwrap_or_else(|| Buf::zeroed(strip)))
            .collect();
        rebuild_chunks(
            &self.stripes.chunks.slot_order(roles),
            roles,
            &lost,
            &mut chunks,
        );
        self.stripes.assert_exclusive(s, "a scrub repair");
        self.stripes.recent.forget(s);
        let at = self.stripes.chunks.layout.chunk_offset(s);
        let children = &self.stripes.chunks.children;
        let writes = lost.iter().map(|&c| {
            let bytes = Buf::copy_from(&chunks[c]).freeze();
            children[c].write(at, bytes, true)
        });
        if let Err(e) = crate::node::all_ok(join_all(writes).await) {
            tracing::warn!("scrub: rewriting the unreadable chunks of stripe {s} failed: {e}");
            return None;
        }
        tracing::warn!("scrub: stripe {s}: children {lost:?} did not read; rebuilt from the others and rewritten");
        pass.bump(|st| &st.repaired, 1);
        Some(chunks)
    }

    /// [`Self::rebuild_unreadable`] one checksum block at a time: each child that did not
    /// read is read again per block, and each block row with at most the parity count of
    /// bad blocks is rebuilt and its bad blocks rewritten. `None` when a row has more.
    async fn rebuild_by_block(
        &self,
        s: u64,
        roles: &StripeRoles,
        read: Vec<Option<Buf>>,
        pass: &ScrubPass<'_>,
    ) -> Option<Vec<Buf>> {
        self.stripes.assert_exclusive(s, "a scrub repair");
        let parity_chunks = 1 + usize::from(roles.q.is_some());
        let strip = self.stripes.chunks.strip;
        let at = self.stripes.chunks.layout.chunk_offset(s);
        let children = &self.stripes.chunks.children;
        let order = self.stripes.chunks.slot_order(roles);
        let mut chunks: Vec<Buf> = read
            .iter()
            .map(|b| {
                b.as_ref()
                    .map_or_else(|| Buf::zeroed(strip as usize), |b| Buf::copy_from(b))
            })
            .collect();
        self.stripes.recent.forget(s);
        let n = BLOCK_BYTES as usize;
        for off in (0..strip).step_by(n) {
            let o = off as usize;
            let mut blocks: Vec<Buf> = chunks
                .iter()
                .map(|c| Buf::copy_from(&c[o..o + n]))
                .collect();
            let mut lost = Vec::new();
            for c in (0..read.len()).filter(|&c| read[c].is_none()) {
                match children[c].read(at + off, Buf::new(n)).await {
                    Ok(b) => blocks[c] = b,
                    Err(_) => lost.push(c),
                }
            }
            if lost.len() > parity_chunks {
                return None;
            }
            if !lost.is_empty() {
                rebuild_chunks(&order, roles, &lost, &mut blocks);
                for &c in &lost {
                    let bytes = Buf::copy_from(&blocks[c]).freeze();
                    if let Err(e) = children[c].write(at + off, bytes, true).await {
                        tracing::warn!("scrub: rewriting a block of stripe {s} failed: {e}");
                        return None;
                    }
                }
            }
            for (c, b) in blocks.iter().enumerate() {
                chunks[c][o..o + n].copy_from_slice(b);
            }
        }
        tracing::warn!("scrub: stripe {s}: bad blocks of several children rebuilt block by block and rewritten");
        pass.bump(|st| &st.repaired, 1);
        Some(chunks)
    }

    /// Every chunk of stripe `s`, by child (`None`: the child returned an error, logged).
    async fn read_stripe_whole(&self, s: u64, _pass: &ScrubPass<'_>) -> Vec<Option<Buf>> {
        let at = self.stripes.chunks.layout.chunk_offset(s);
        let strip = self.stripes.chunks.strip as usize;
        let reads = join_all(
            self.stripes
                .chunks
                .children
                .iter()
                .map(|c| c.read(at, Buf::new(strip))),
        )
        .await;
        reads
            .into_iter()
            .map(|r| r.map_err(|e| tracing::warn!("scrub: stripe {s}: {e}")).ok())
            .collect()
    }

    /// Whether stripe `s`'s chunks (by child) agree, and if not what a repair rewrites.
    fn diagnose(&self, s: u64, roles: &StripeRoles, chunks: &[Buf]) -> Option<Verdict> {
        let strip = self.stripes.chunks.strip as usize;
        // Data in md's syndrome order.
        let order = self.stripes.chunks.slot_order(roles);
        let data: Vec<&[u8]> = order.iter().map(|&i| &chunks[roles.data[i]][..]).collect();
        let p = &chunks[roles.p][..];
        let q = roles.q.map(|c| &chunks[c][..]);
        let ok = match q {
            None => parity::check_p(&data, p),
            Some(q) => parity::check_pq(&data, p, q),
        };
        if ok {
            return None;
        }
        let mut p_new = Buf::new(strip);
        let mut q_new = Buf::new(if q.is_some() { strip } else { 0 });
        let Some(q) = q else {
            parity::xor_gen(&data, &mut p_new);
            return Some(Verdict {
                fix: Fix::Parity,
                p: p_new,
                q: q_new,
            });
        };
        parity::pq_gen(&data, &mut p_new, &mut q_new);
        let ps: Vec<u8> = p.iter().zip(&p_new[..]).map(|(a, b)| a ^ b).collect();
        let qs: Vec<u8> = q.iter().zip(&q_new[..]).map(|(a, b)| a ^ b).collect();
        // Without knowing parity matched its data, a syndrome may only mean parity fell
        // behind a write (the write hole): never rewrite data from it.
        let culprit = if self.stripes.health.in_sync(s) {
            locate(&ps, &qs, self.stripes.chunks.k)
        } else {
            Culprit::Unknown
        };
        let fix = match culprit {
            Culprit::P => Fix::P,
            Culprit::Q => Fix::Q,
            Culprit::Slot(z) => {
                let i = order[z];
                let mut d = Buf::new(strip);
                d.copy_from_slice(&chunks[roles.data[i]]);
                for (b, e) in d.iter_mut().zip(&ps) {
                    *b ^= e;
                }
                p_new = d; // carries the repaired data chunk
                Fix::Data(i)
            }
            Culprit::None | Culprit::Unknown => Fix::Parity,
        };
        tracing::warn!(
            "scrub: stripe {s} of a RAID 6 group: P/Q mismatch, {}",
            match fix {
                Fix::Data(i) => format!("data chunk {i} (child {}) is wrong", roles.data[i]),
                Fix::P => format!("P (child {}) is wrong", roles.p),
                Fix::Q => "Q is wrong".to_string(),
                Fix::Parity => "no single chunk explains it".to_string(),
            }
        );
        Some(Verdict {
            fix,
            p: p_new,
            q: q_new,
        })
    }
}

/// Rebuilds the chunks of children `lost` (at most the group's parity count) in `chunks` (by
/// child) from the others. `order`: the data chunks in md's syndrome order.
fn rebuild_chunks(order: &[usize], roles: &StripeRoles, lost: &[usize], chunks: &mut [Buf]) {
    // Each lost child as a slot of the syndrome: data slot z, P or Q.
    let slot = |c: usize| -> Option<usize> { order.iter().position(|&i| roles.data[i] == c) };
    let is_p = |c: usize| c == roles.p;
    let loss = match lost {
        [c] if is_p(*c) => parity::Loss::P,
        [c] if Some(*c) == roles.q => parity::Loss::Q,
        [c] => parity::Loss::Data(slot(*c).expect("a data child")),
        [a, b] => {
            let (pq, data): (Vec<usize>, Vec<usize>) = [*a, *b]
                .into_iter()
                .partition(|&c| is_p(c) || Some(c) == roles.q);
            match (pq.as_slice(), data.as_slice()) {
                ([_, _], []) => parity::Loss::PQ,
                ([c], [d]) if is_p(*c) => parity::Loss::DataP(slot(*d).expect("data")),
                ([_], [d]) => parity::Loss::DataQ(slot(*d).expect("data")),
                _ => parity::Loss::TwoData(slot(*a).expect("data"), slot(*b).expect("data")),
            }
        }
        _ => unreachable!("at most two chunks are rebuilt"),
    };
    // Take the chunks apart so data, P and Q can be borrowed mutably together.
    let mut taken: Vec<Option<Buf>> = chunks
        .iter_mut()
        .map(|b| Some(std::mem::replace(b, Buf::new(0))))
        .collect();
    let mut p = taken[roles.p].take().expect("P");
    let mut q = roles.q.map(|c| taken[c].take().expect("Q"));
    let mut data: Vec<Buf> = order
        .iter()
        .map(|&i| taken[roles.data[i]].take().expect("data"))
        .collect();
    {
        let mut refs: Vec<&mut [u8]> = data.iter_mut().map(|b| &mut b[..]).collect();
        parity::recover(&mut refs, &mut p, q.as_deref_mut(), loss);
    }
    chunks[roles.p] = p;
    if let (Some(c), Some(q)) = (roles.q, q) {
        chunks[c] = q;
    }
    for (&i, b) in order.iter().zip(data) {
        chunks[roles.data[i]] = b;
    }
}
