//! Scrubbing a parity group: each stripe the range owns (its first byte lies in the range) is
//! read whole — every data chunk, P and Q — under its stripe lock and checked; see
//! [`crate::scrub`] for what repair rewrites and why.

use super::*;
use crate::checksum::BLOCK_BYTES;
use crate::error::VolumeError;
use crate::scrub::{locate, CrossCheck, Culprit, ScrubAction, ScrubFinding, ScrubFound, ScrubPass};

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

/// A child of a stripe the scrub found wrong, and what became of it.
struct Target {
    child: usize,
    found: ScrubFound,
    action: ScrubAction,
    cross_check: Option<CrossCheck>,
}

impl Target {
    /// Child `c`, whose block did not read with error `e` (not repaired yet).
    fn bad(c: usize, e: &VolumeError) -> Target {
        let found = match e {
            VolumeError::Member { source, .. } if crate::checksum::is_mismatch(source) => {
                ScrubFound::ChecksumMismatch
            }
            _ => ScrubFound::ReadError,
        };
        Target {
            child: c,
            found,
            action: ScrubAction::NotRepaired,
            cross_check: None,
        }
    }
}

/// The chunks a diagnosis blames and what a repair does with each: the one the syndromes
/// name (rebuilt, or P or Q rewritten), or P (and Q) recomputed when nothing names one.
fn verdict_targets(fix: Fix, roles: &StripeRoles) -> Vec<Target> {
    let named = |child, action| Target {
        child,
        found: ScrubFound::Syndrome,
        action,
        cross_check: Some(CrossCheck::SyndromeOnly),
    };
    let parity = |child, action| Target {
        child,
        found: ScrubFound::ParityMismatch,
        action,
        cross_check: None,
    };
    match fix {
        Fix::Data(i) => vec![named(roles.data[i], ScrubAction::RebuiltFromSyndrome)],
        Fix::P => vec![named(roles.p, ScrubAction::PRewritten)],
        Fix::Q => vec![named(roles.q.expect("RAID 6"), ScrubAction::QRewritten)],
        Fix::Parity => {
            let mut t = vec![parity(roles.p, ScrubAction::PRewritten)];
            t.extend(roles.q.map(|q| parity(q, ScrubAction::QRewritten)));
            t
        }
    }
}

/// Whether a row (by child) satisfies its parity: P, and Q for RAID 6.
fn row_agrees(order: &[usize], roles: &StripeRoles, row: &[&[u8]]) -> bool {
    let data: Vec<&[u8]> = order.iter().map(|&i| row[roles.data[i]]).collect();
    match roles.q {
        None => parity::check_p(&data, row[roles.p]),
        Some(q) => parity::check_pq(&data, row[roles.p], row[q]),
    }
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
        let redo = self.check_window(first, end, pass).await;
        let results = join_all(redo.into_iter().map(|s| self.scrub_stripe(s, pass))).await;
        crate::node::all_ok(results)
    }

    /// The fast path of a scrub: stripes `first..end` read with one member read per child
    /// under one shared lock and checked in memory (the stripe-by-stripe path reads a chunk
    /// per child and stripe: small reads, many of them). The stripes that agree are counted
    /// checked; returned are the stripes the stripe-by-stripe path must do — those that
    /// disagree (it reads them again under its own lock, then diagnoses, records and
    /// repairs), or all of them when anything is unusual: a stale stripe, a child that cannot
    /// serve the range or fails its read.
    async fn check_window(&self, first: u64, end: u64, pass: &ScrubPass<'_>) -> Vec<u64> {
        let chunks = &self.stripes.chunks;
        let strip = chunks.strip as usize;
        let c0 = chunks.layout.chunk_offset(first);
        let clen = chunks.layout.chunk_offset(end - 1) + chunks.strip - c0;
        // Writers out while the rows are read; nothing is written here.
        let _g = self.stripes.locks.lock(first, end - first, false).await;
        let usual = !self.stripes.health.any_stale(first, end - 1)
            && chunks.children.iter().all(|c| c.readable(c0, clen));
        if !usual {
            return (first..end).collect();
        }
        let reads =
            join_all((chunks.children.iter()).map(|c| c.read(c0, Buf::new(clen as usize)))).await;
        let Ok(bufs) = reads.into_iter().collect::<VolumeResult<Vec<Buf>>>() else {
            return (first..end).collect();
        };
        let mut redo = Vec::new();
        for s in first..end {
            let roles = chunks.layout.roles(s);
            let off = (chunks.layout.chunk_offset(s) - c0) as usize;
            let row: Vec<&[u8]> = bufs.iter().map(|b| &b[off..off + strip]).collect();
            if row_agrees(&chunks.slot_order(&roles), &roles, &row) {
                pass.bump(|st| &st.checked, 1);
            } else {
                redo.push(s);
            }
        }
        redo
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
        let read = self.read_stripe_whole(s).await;
        let Some(chunks) = self.rebuild_unreadable(s, &roles, read, pass).await else {
            return Ok(());
        };
        pass.bump(|st| &st.checked, 1);
        let Some(verdict) = self.diagnose(s, &roles, &chunks) else {
            return Ok(());
        };
        pass.bump(|st| &st.mismatches, 1);
        let targets = verdict_targets(verdict.fix, &roles);
        if !pass.repair {
            self.record(s, 0, strip, &targets, |_| ScrubAction::NotRepaired, pass);
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
            self.record(s, 0, strip, &targets, |_| ScrubAction::Unrepairable, pass);
            return Ok(());
        }
        self.record(s, 0, strip, &targets, |t| t.action, pass);
        self.stripes.health.mark_in_sync(s);
        pass.bump(|st| &st.repaired, 1);
        Ok(())
    }

    /// Records a finding for every member under each of `targets` (children of stripe `s`,
    /// bytes `off..off+len` of their chunks), with the action `action` gives each.
    fn record(
        &self,
        s: u64,
        off: u64,
        len: u64,
        targets: &[Target],
        action: impl Fn(&Target) -> ScrubAction,
        pass: &ScrubPass<'_>,
    ) {
        let at = self.stripes.chunks.layout.chunk_offset(s) + off;
        for t in targets {
            for (member, member_offset_bytes) in
                self.stripes.chunks.children[t.child].members_at(at)
            {
                pass.found(ScrubFinding {
                    member,
                    member_offset_bytes,
                    len_bytes: len,
                    found: t.found,
                    action: action(t),
                    cross_check: t.cross_check,
                });
            }
        }
    }

    /// A stripe whose chunks all read comes back as it is. Chunks that did not read (an I/O
    /// error, or a block whose checksum did not match) are counted and read again block by
    /// block; each row of blocks with at most the group's parity count of bad blocks is
    /// rebuilt from the others (md's repair of a read error; with checksums, it names which
    /// side was wrong, which a RAID 5 syndrome cannot) and, repairing, its bad blocks are
    /// rewritten in place. Every bad block is a finding. `None`: some row has more bad
    /// blocks than the parity rebuilds, so the stripe cannot be checked.
    async fn rebuild_unreadable(
        &self,
        s: u64,
        roles: &StripeRoles,
        read: Vec<Option<Buf>>,
        pass: &ScrubPass<'_>,
    ) -> Option<Vec<Buf>> {
        let lost = read.iter().filter(|b| b.is_none()).count();
        if lost == 0 {
            return Some(read.into_iter().flatten().collect());
        }
        pass.bump(|st| &st.unreadable, lost as u64);
        if pass.repair {
            self.stripes.assert_exclusive(s, "a scrub repair");
            self.stripes.recent.forget(s);
        }
        let strip = self.stripes.chunks.strip;
        let mut chunks: Vec<Buf> = read
            .iter()
            .map(|b| {
                b.as_ref()
                    .map_or_else(|| Buf::zeroed(strip as usize), |b| Buf::copy_from(b))
            })
            .collect();
        let (mut whole, mut rewrote) = (true, false);
        for off in (0..strip).step_by(BLOCK_BYTES as usize) {
            let Some((blocks, row_rewrote)) = self.rebuild_row(s, roles, &read, off, pass).await
            else {
                whole = false;
                continue;
            };
            rewrote |= row_rewrote;
            let o = off as usize;
            for (c, b) in blocks.iter().enumerate() {
                chunks[c][o..o + b.len()].copy_from_slice(b);
            }
        }
        if rewrote {
            pass.bump(|st| &st.repaired, 1);
        }
        whole.then_some(chunks)
    }

    /// Row `off` (one checksum block of every child) of stripe `s`: the children whose chunk
    /// did not read are read again there; the blocks that still do not read are rebuilt from
    /// the row when the parity can (checked against their checksums before they are
    /// rewritten: a rebuild from a row that is itself wrong must not be written as a
    /// repair). Returns the row and whether a block was rewritten; `None` when the row has
    /// too many bad blocks.
    async fn rebuild_row(
        &self,
        s: u64,
        roles: &StripeRoles,
        read: &[Option<Buf>],
        off: u64,
        pass: &ScrubPass<'_>,
    ) -> Option<(Vec<Buf>, bool)> {
        let n = BLOCK_BYTES.min(self.stripes.chunks.strip) as usize;
        let o = off as usize;
        let at = self.stripes.chunks.layout.chunk_offset(s) + off;
        let children = &self.stripes.chunks.children;
        let mut blocks: Vec<Buf> = read
            .iter()
            .map(|b| {
                b.as_ref()
                    .map_or_else(|| Buf::zeroed(n), |b| Buf::copy_from(&b[o..o + n]))
            })
            .collect();
        let mut lost: Vec<Target> = Vec::new();
        for c in (0..read.len()).filter(|&c| read[c].is_none()) {
            match children[c].read(at, Buf::new(n)).await {
                Ok(b) => blocks[c] = b,
                Err(e) => lost.push(Target::bad(c, &e)),
            }
        }
        if lost.is_empty() {
            return Some((blocks, false));
        }
        let parity_chunks = 1 + usize::from(roles.q.is_some());
        if lost.len() > parity_chunks {
            self.record(s, off, n as u64, &lost, |_| ScrubAction::Unrepairable, pass);
            return None;
        }
        let lost_children: Vec<usize> = lost.iter().map(|t| t.child).collect();
        let order = self.stripes.chunks.slot_order(roles);
        rebuild_chunks(&order, roles, &lost_children, &mut blocks);
        // RAID 6 with a syndrome to spare: the rebuilt row must satisfy both.
        if lost.len() < parity_chunks && self.stripes.health.in_sync(s) {
            let row: Vec<&[u8]> = blocks.iter().map(|b| &b[..]).collect();
            let agrees = row_agrees(&order, roles, &row);
            for t in &mut lost {
                t.cross_check = Some(if agrees {
                    CrossCheck::Agrees
                } else {
                    CrossCheck::Disagrees
                });
            }
        }
        let mut rewrote = false;
        for t in &mut lost {
            t.action = self
                .rewrite_block(t.child, at, &blocks[t.child], pass)
                .await;
            rewrote |= t.action.repaired();
        }
        self.record(s, off, n as u64, &lost, |t| t.action, pass);
        Some((blocks, rewrote))
    }

    /// Rewrites child `c`'s block at `at` with `bytes` rebuilt from parity (repairing), once
    /// they match the block's checksum; what became of it.
    async fn rewrite_block(
        &self,
        c: usize,
        at: u64,
        bytes: &Buf,
        pass: &ScrubPass<'_>,
    ) -> ScrubAction {
        if !pass.repair {
            return ScrubAction::NotRepaired;
        }
        let child = &self.stripes.chunks.children[c];
        if !child.verify_rebuilt(at, bytes).await {
            tracing::warn!("scrub: child {c} at {at}: the bytes rebuilt from parity do not match the block's checksum; left as it is");
            return ScrubAction::Unrepairable;
        }
        match child.write(at, Buf::copy_from(bytes).freeze(), true).await {
            Ok(()) => ScrubAction::RebuiltFromParity,
            Err(e) => {
                tracing::warn!("scrub: rewriting child {c} at {at} failed: {e}");
                ScrubAction::Unrepairable
            }
        }
    }

    /// Every chunk of stripe `s`, by child (`None`: the child returned an error, logged).
    async fn read_stripe_whole(&self, s: u64) -> Vec<Option<Buf>> {
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
