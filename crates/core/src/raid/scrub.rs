//! Scrubbing a parity group: each stripe the range owns (its first byte lies in the range) is
//! read whole — every data chunk, P and Q — under its stripe lock and checked; see
//! [`crate::scrub`] for what repair rewrites and why.
//!
//! A stripe with fewer children lost (failed members) than parity chunks — RAID 6 with one
//! out — is still checked: the lost chunk is rebuilt as a read rebuilds it (a data chunk from
//! P, a parity chunk from the data) and the syndrome left over checks the whole. With one
//! syndrome nothing locates a wrong chunk, so a mismatch regenerates the surviving parity
//! from the data as reads serve it (RAID 5's rule); a block whose checksum fails is still
//! named and rebuilt. A stripe with as many lost as parity chunks has nothing to compare
//! against: it is skipped and counted as such ([`SkipReason::NoRedundancy`]), and still
//! read — a block that does not read or fails its checksum is named, unrepairable.
//!
//! This file reads and writes; whether a stripe can be checked, whether a row agrees, what a
//! mismatch means and what its repair rewrites are decided by the pure functions of
//! `scrub/verdict.rs`.

use super::*;
use crate::checksum::BLOCK_BYTES;
use crate::error::VolumeError;
use crate::node::{read_back, ReadBack};
use crate::scrub::{
    locate, CrossCheck, Culprit, ScrubAction, ScrubFinding, ScrubFound, ScrubPass, SkipReason,
};

mod verdict;

use verdict::{
    degraded_row_agrees, locatable, lost_children, rebuild_chunks, row_rebuild, skip_reason,
    verdict_writes, RowRebuild, StripeChunks, Target, Verdict,
};

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
        let owned = pass.owned();
        let below = join_all(
            self.stripes
                .chunks
                .children
                .iter()
                .map(|c| c.scrub_range(at, rows, &owned)),
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
    /// repairs), or all of them when anything is unusual: a stale stripe, more children
    /// lost over the range than leave a syndrome to check with, a child that fails its read.
    /// Children lost over the whole range (RAID 6 with a member out) are not read: each
    /// stripe's chunk on them is rebuilt in memory and the syndrome left checks the row.
    async fn check_window(&self, first: u64, end: u64, pass: &ScrubPass<'_>) -> Vec<u64> {
        let chunks = &self.stripes.chunks;
        let strip = chunks.strip as usize;
        let c0 = chunks.layout.chunk_offset(first);
        let clen = chunks.layout.chunk_offset(end - 1) + chunks.strip - c0;
        // Writers out while the rows are read; nothing is written here.
        let _g = self.stripes.locks.lock(first, end - first, false).await;
        let lost: Vec<bool> = (chunks.children.iter())
            .map(|c| !c.readable(c0, clen))
            .collect();
        let failed = lost_children(&lost);
        let stale = self.stripes.health.any_stale(first, end - 1);
        // Each stripe decides for itself (a child being rebuilt is lost over the window but
        // readable in the stripes below its checkpoint).
        if skip_reason(stale, failed.len(), chunks.np).is_some() {
            return (first..end).collect();
        }
        let reads = join_all(
            (chunks.children.iter().zip(&lost)).map(|(c, &l)| async move {
                match l {
                    true => Ok(Buf::new(0)),
                    false => c.read(c0, Buf::new(clen as usize)).await,
                }
            }),
        )
        .await;
        let Ok(bufs) = reads.into_iter().collect::<VolumeResult<Vec<Buf>>>() else {
            return (first..end).collect();
        };
        // What a lost child's slice of a row holds before it is rebuilt.
        let blank = vec![0u8; if failed.is_empty() { 0 } else { strip }];
        let mut redo = Vec::new();
        for s in first..end {
            let roles = chunks.layout.roles(s);
            let off = (chunks.layout.chunk_offset(s) - c0) as usize;
            let row: Vec<&[u8]> = (bufs.iter().zip(&lost))
                .map(|(b, &l)| if l { &blank[..] } else { &b[off..off + strip] })
                .collect();
            if degraded_row_agrees(&chunks.slot_order(&roles), &roles, &failed, &row) {
                pass.bump(|st| &st.checked, 1);
            } else {
                redo.push(s);
            }
        }
        redo
    }

    /// Checks stripe `s` in three stages: read it whole (its lost children's chunks rebuilt),
    /// diagnose it, and (repairing) rewrite what the diagnosis names.
    async fn scrub_stripe(&self, s: u64, pass: &ScrubPass<'_>) -> VolumeResult<()> {
        // A check only needs writers out; a repair rewrites chunks, so readers out too.
        let _g = self.stripes.locks.lock(s, 1, pass.repair).await;
        let strip = self.stripes.chunks.strip;
        let failed = lost_children(&self.stripes.chunks.lost(s, 0, strip));
        let stale = self.stripes.health.is_stale(s);
        if let Some(why) = skip_reason(stale, failed.len(), self.stripes.chunks.np) {
            pass.skip(why);
            if why == SkipReason::NoRedundancy {
                self.name_unreadable(s, &failed, pass).await;
            }
            return Ok(());
        }
        let roles = self.stripes.chunks.layout.roles(s);
        let (read, erred) = self.read_stripe_whole(s, &failed).await;
        let Some(chunks) = self
            .rebuild_unreadable(s, &roles, read, &failed, pass)
            .await
        else {
            return Ok(());
        };
        // Every chunk that erred was rebuilt from the rest: read errors the redundancy
        // corrected, which count toward the member's `max_read_errors` as a client read's do.
        self.count_corrected(erred);
        pass.bump(|st| &st.checked, 1);
        let Some(verdict) = self.diagnose(s, &roles, &chunks, !failed.is_empty()) else {
            return Ok(());
        };
        pass.bump(|st| &st.mismatches, 1);
        let (targets, writes): (Vec<Target>, Vec<Buf>) =
            (verdict_writes(verdict, &roles, &chunks, &failed).into_iter()).unzip();
        if !pass.repair {
            self.record(s, 0, strip, &targets, |_| ScrubAction::NotRepaired, pass);
            return Ok(());
        }
        let rewritten = self.rewrite_chunks(s, &targets, writes, pass).await;
        // Parity known to match its data, as a write knows it: only with every child there.
        if rewritten && failed.is_empty() {
            self.stripes.health.mark_in_sync(s);
        }
        Ok(())
    }

    /// Stripe `s` has nothing to check against (as many children `failed` as parity
    /// chunks), but its surviving chunks are still read: a block that does not read (an I/O
    /// error, or one failing its checksum) is counted unreadable and named, unrepairable —
    /// nothing can rebuild it, but the operator learns where data is already lost before a
    /// rebuild of the failed member trips on it. Nothing is written.
    async fn name_unreadable(&self, s: u64, failed: &[usize], pass: &ScrubPass<'_>) {
        let (read, _) = self.read_stripe_whole(s, failed).await;
        let bad: Vec<usize> = (0..read.len())
            .filter(|c| read[*c].is_none() && !failed.contains(c))
            .collect();
        pass.bump(|st| &st.unreadable, bad.len() as u64);
        let strip = self.stripes.chunks.strip;
        let n = BLOCK_BYTES.min(strip);
        let at = self.stripes.chunks.layout.chunk_offset(s);
        for c in bad {
            let child = &self.stripes.chunks.children[c];
            for off in (0..strip).step_by(n as usize) {
                if let Err(e) = child.read(at + off, Buf::new(n as usize)).await {
                    let t = [Target::bad(c, &e)];
                    self.record(s, off, n, &t, |_| ScrubAction::Unrepairable, pass);
                }
            }
        }
    }

    /// Rewrites each of `targets` (children of stripe `s`) with its bytes in `writes` under
    /// the stripe's exclusive lock, reads them back, and records what became of them;
    /// whether every write went through and holds.
    async fn rewrite_chunks(
        &self,
        s: u64,
        targets: &[Target],
        writes: Vec<Buf>,
        pass: &ScrubPass<'_>,
    ) -> bool {
        self.stripes.assert_exclusive(s, "a scrub repair");
        self.stripes.recent.forget(s);
        let at = self.stripes.chunks.layout.chunk_offset(s);
        let strip = self.stripes.chunks.strip;
        let children = &self.stripes.chunks.children;
        let writes: Vec<SharedBuf> = writes.into_iter().map(Buf::freeze).collect();
        let results = join_all(
            (targets.iter().zip(&writes))
                .map(|(t, b)| children[t.child].write(at, b.clone(), true)),
        )
        .await;
        if let Err(e) = crate::node::all_ok(results) {
            // The leaf marked the member failed; the stripe is served degraded from now on.
            tracing::warn!("scrub: repairing stripe {s} failed: {e}");
            self.record(s, 0, strip, targets, |_| ScrubAction::Unrepairable, pass);
            return false;
        }
        let backs = join_all(
            (targets.iter().zip(&writes)).map(|(t, b)| read_back(&*children[t.child], at, b)),
        )
        .await;
        for (t, back) in targets.iter().zip(&backs).filter(|(_, b)| !b.holds()) {
            tracing::warn!("scrub: stripe {s}, child {}: {back}", t.child);
        }
        let held = |t: &Target| {
            let i = targets
                .iter()
                .position(|o| o.child == t.child)
                .expect("a target");
            backs[i].holds()
        };
        self.record(
            s,
            0,
            strip,
            targets,
            |t| {
                if held(t) {
                    t.action
                } else {
                    ScrubAction::RewriteDidNotHold
                }
            },
            pass,
        );
        if backs.iter().all(ReadBack::holds) {
            pass.bump(|st| &st.repaired, 1);
            return true;
        }
        false
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
    /// rewritten in place. Every bad block is a finding. The `failed` children (failed
    /// members, not read) count against the parity in every row and are rebuilt, never
    /// rewritten. `None`: some row has more bad blocks than the parity rebuilds, so the
    /// stripe cannot be checked.
    async fn rebuild_unreadable(
        &self,
        s: u64,
        roles: &StripeRoles,
        read: Vec<Option<Buf>>,
        failed: &[usize],
        pass: &ScrubPass<'_>,
    ) -> Option<Vec<Buf>> {
        let lost = (0..read.len())
            .filter(|c| read[*c].is_none() && !failed.contains(c))
            .count();
        if lost == 0 {
            let strip = self.stripes.chunks.strip as usize;
            let mut chunks: Vec<Buf> = (read.into_iter())
                .map(|b| b.unwrap_or_else(|| Buf::zeroed(strip)))
                .collect();
            if !failed.is_empty() {
                let order = self.stripes.chunks.slot_order(roles);
                rebuild_chunks(&order, roles, failed, &mut chunks);
            }
            return Some(chunks);
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
            let rebuilt = self.rebuild_row(s, roles, &read, failed, off, pass).await;
            let Some((blocks, row_rewrote)) = rebuilt else {
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
    /// did not read (but for the `failed` ones) are read again there; the blocks that still
    /// do not read, and the failed children's, are rebuilt from the row when the parity can
    /// ([`row_rebuild`]; checked against their checksums before they are rewritten: a rebuild
    /// from a row that is itself wrong must not be written as a repair). Returns the row and
    /// whether a block was rewritten; `None` when the row has too many bad blocks.
    async fn rebuild_row(
        &self,
        s: u64,
        roles: &StripeRoles,
        read: &[Option<Buf>],
        failed: &[usize],
        off: u64,
        pass: &ScrubPass<'_>,
    ) -> Option<(Vec<Buf>, bool)> {
        let n = BLOCK_BYTES.min(self.stripes.chunks.strip) as usize;
        let at = self.stripes.chunks.layout.chunk_offset(s) + off;
        let (mut blocks, mut bad) = self.reread_row(at, read, failed, off as usize, n).await;
        let order = self.stripes.chunks.slot_order(roles);
        let bad_children: Vec<usize> = bad.iter().map(|t| t.child).collect();
        let gone = (failed, &bad_children[..]);
        let in_sync = self.stripes.health.in_sync(s);
        let cross_check = match row_rebuild(&order, roles, gone, &mut blocks, in_sync) {
            RowRebuild::TooManyGone => {
                self.record(s, off, n as u64, &bad, |_| ScrubAction::Unrepairable, pass);
                return None;
            }
            RowRebuild::Rebuilt(cross_check) => cross_check,
        };
        let mut rewrote = false;
        for t in &mut bad {
            t.cross_check = cross_check;
            t.action = self
                .rewrite_block(t.child, at, &blocks[t.child], pass)
                .await;
            rewrote |= t.action.repaired();
        }
        if !bad.is_empty() {
            self.record(s, off, n as u64, &bad, |t| t.action, pass);
        }
        Some((blocks, rewrote))
    }

    /// The `n`-byte row at `at` (`o` bytes into each chunk) of a stripe whose chunks were
    /// `read` (by child): the blocks that read, and those that did not (but for the
    /// `failed` children, never read) read again. Returns the row (zeros where nothing
    /// read) and the children whose block still does not read.
    async fn reread_row(
        &self,
        at: u64,
        read: &[Option<Buf>],
        failed: &[usize],
        o: usize,
        n: usize,
    ) -> (Vec<Buf>, Vec<Target>) {
        let mut blocks: Vec<Buf> = read
            .iter()
            .map(|b| {
                b.as_ref()
                    .map_or_else(|| Buf::zeroed(n), |b| Buf::copy_from(&b[o..o + n]))
            })
            .collect();
        let children = &self.stripes.chunks.children;
        let mut bad: Vec<Target> = Vec::new();
        for c in (0..read.len()).filter(|&c| read[c].is_none() && !failed.contains(&c)) {
            match children[c].read(at, Buf::new(n)).await {
                Ok(b) => blocks[c] = b,
                Err(e) => bad.push(Target::bad(c, &e)),
            }
        }
        (blocks, bad)
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
            Ok(()) => match read_back(&**child, at, bytes).await {
                ReadBack::Holds => ScrubAction::RebuiltFromParity,
                back => {
                    tracing::warn!("scrub: child {c} at {at}: {back}");
                    ScrubAction::RewriteDidNotHold
                }
            },
            Err(e) => {
                tracing::warn!("scrub: rewriting child {c} at {at} failed: {e}");
                ScrubAction::Unrepairable
            }
        }
    }

    /// Every chunk of stripe `s`, by child (`None`: the child returned an error, logged, or
    /// is one of the `failed`, not read); and the members whose read error counts toward
    /// `max_read_errors` ([`crate::read_errors::counted_member`]).
    async fn read_stripe_whole(&self, s: u64, failed: &[usize]) -> (Vec<Option<Buf>>, Vec<usize>) {
        let at = self.stripes.chunks.layout.chunk_offset(s);
        let strip = self.stripes.chunks.strip as usize;
        let children = self.stripes.chunks.children.iter().enumerate();
        let reads = join_all(children.map(|(c, child)| async move {
            match failed.contains(&c) {
                true => None,
                false => Some(child.read(at, Buf::new(strip)).await),
            }
        }))
        .await;
        let mut counted = Vec::new();
        let chunks = (reads.into_iter())
            .map(|r| match r? {
                Ok(b) => Some(b),
                Err(e) => {
                    tracing::warn!("scrub: stripe {s}: {e}");
                    counted.extend(crate::read_errors::counted_member(&e));
                    None
                }
            })
            .collect();
        (chunks, counted)
    }

    /// Counts toward `max_read_errors` the read errors of `members` that a stripe's rebuild
    /// corrected: each member once per stripe, as a client read counts once per request.
    fn count_corrected(&self, mut members: Vec<usize>) {
        let Some(table) = &self.stripes.members else {
            return;
        };
        members.sort_unstable();
        members.dedup();
        for m in members {
            table.read_error_corrected(m);
        }
    }

    /// Whether stripe `s`'s chunks (by child) agree, and if not what a repair rewrites.
    /// `degraded`: a lost child's chunk was rebuilt from one syndrome, so only the other
    /// checks the stripe and nothing can be located.
    fn diagnose(
        &self,
        s: u64,
        roles: &StripeRoles,
        chunks: &[Buf],
        degraded: bool,
    ) -> Option<Verdict> {
        let order = self.stripes.chunks.slot_order(roles);
        let stripe = StripeChunks {
            roles,
            order: &order,
            chunks,
        };
        stripe.diagnose(locatable(self.stripes.health.in_sync(s), degraded))
    }
}
