//! Scrubbing a parity group: each stripe the range owns (its first byte lies in the range) is
//! read whole — every data chunk, P and Q — under its stripe lock and checked; see
//! [`crate::scrub`] for what repair rewrites and why.

use super::*;
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

impl ParityCore {
    /// Scrubs this group's stripes that begin in `[offset, offset+len)`, after its children
    /// scrubbed their rows of them.
    pub(super) async fn scrub_stripes(
        &self,
        offset: u64,
        len: u64,
        pass: &ScrubPass<'_>,
    ) -> VolumeResult<()> {
        let w = self.chunks.width();
        let first = offset.div_ceil(w);
        let end = (offset + len).div_ceil(w).min(self.chunks.layout.stripes());
        if first >= end {
            return Ok(());
        }
        let at = self.chunks.layout.chunk_offset(first);
        let rows = self.chunks.layout.chunk_offset(end) - at;
        let below = join_all(
            self.chunks
                .children
                .iter()
                .map(|c| c.scrub_range(at, rows, pass)),
        )
        .await;
        crate::node::all_ok(below)?;
        let results = join_all((first..end).map(|s| self.scrub_stripe(s, pass))).await;
        crate::node::all_ok(results)
    }

    async fn scrub_stripe(&self, s: u64, pass: &ScrubPass<'_>) -> VolumeResult<()> {
        // A check only needs writers out; a repair rewrites chunks, so readers out too.
        let _g = self.locks.lock(s, 1, pass.repair).await;
        if self.health.is_stale(s) || self.chunks.lost(s, 0, self.chunks.strip).iter().any(|&l| l) {
            pass.bump(|st| &st.skipped, 1);
            return Ok(());
        }
        let roles = self.chunks.layout.roles(s);
        let at = self.chunks.layout.chunk_offset(s);
        let n = self.chunks.children.len();
        let reads = join_all(
            self.chunks
                .children
                .iter()
                .map(|c| c.read(at, Buf::new(self.chunks.strip as usize))),
        )
        .await;
        let mut chunks: Vec<Buf> = Vec::with_capacity(n);
        let mut unreadable = 0;
        for r in reads {
            match r {
                Ok(b) => chunks.push(b),
                Err(e) => {
                    tracing::warn!("scrub: stripe {s}: {e}");
                    unreadable += 1;
                    chunks.push(Buf::new(0));
                }
            }
        }
        if unreadable > 0 {
            pass.bump(|st| &st.unreadable, unreadable);
            return Ok(());
        }
        pass.bump(|st| &st.checked, 1);
        // Data in md's syndrome order.
        let mut order = vec![0usize; self.chunks.k];
        for i in 0..self.chunks.k {
            order[roles.q_slot[i]] = i;
        }
        let data: Vec<&[u8]> = order.iter().map(|&i| &chunks[roles.data[i]][..]).collect();
        let p = &chunks[roles.p][..];
        let q = roles.q.map(|c| &chunks[c][..]);
        let ok = match q {
            None => parity::check_p(&data, p),
            Some(q) => parity::check_pq(&data, p, q),
        };
        if ok {
            return Ok(());
        }
        pass.bump(|st| &st.mismatches, 1);
        let mut p_new = Buf::new(self.chunks.strip as usize);
        let mut q_new = Buf::new(if q.is_some() {
            self.chunks.strip as usize
        } else {
            0
        });
        let fix = match q {
            None => {
                parity::xor_gen(&data, &mut p_new);
                Fix::Parity
            }
            Some(q) => {
                parity::pq_gen(&data, &mut p_new, &mut q_new);
                let ps: Vec<u8> = p.iter().zip(&p_new[..]).map(|(a, b)| a ^ b).collect();
                let qs: Vec<u8> = q.iter().zip(&q_new[..]).map(|(a, b)| a ^ b).collect();
                // Without knowing parity matched its data, a syndrome may only mean parity
                // fell behind a write (the write hole): never rewrite data from it.
                let culprit = if self.health.in_sync(s) {
                    locate(&ps, &qs, self.chunks.k)
                } else {
                    Culprit::Unknown
                };
                let fix = match culprit {
                    Culprit::P => Fix::P,
                    Culprit::Q => Fix::Q,
                    Culprit::Slot(z) => {
                        let i = order[z];
                        let mut d = Buf::new(self.chunks.strip as usize);
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
                        Fix::Data(i) =>
                            format!("data chunk {i} (child {}) is wrong", roles.data[i]),
                        Fix::P => format!("P (child {}) is wrong", roles.p),
                        Fix::Q => "Q is wrong".to_string(),
                        Fix::Parity => "no single chunk explains it".to_string(),
                    }
                );
                fix
            }
        };
        if !pass.repair {
            return Ok(());
        }
        drop(data);
        let writes: Vec<(usize, SharedBuf)> = match fix {
            Fix::Data(i) => vec![(roles.data[i], p_new.freeze())],
            Fix::P => vec![(roles.p, p_new.freeze())],
            Fix::Q => vec![(roles.q.expect("RAID 6"), q_new.freeze())],
            Fix::Parity => {
                let mut w = vec![(roles.p, p_new.freeze())];
                if let Some(qc) = roles.q {
                    w.push((qc, q_new.freeze()));
                }
                w
            }
        };
        self.recent.forget(s);
        let results = join_all(
            writes
                .into_iter()
                .map(|(c, b)| self.chunks.children[c].write(at, b, true)),
        )
        .await;
        if let Err(e) = crate::node::all_ok(results) {
            // The leaf marked the member failed; the stripe is served degraded from now on.
            tracing::warn!("scrub: repairing stripe {s} failed: {e}");
            return Ok(());
        }
        self.health.mark_in_sync(s);
        pass.bump(|st| &st.repaired, 1);
        Ok(())
    }
}
