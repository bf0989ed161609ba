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
//! against: it is skipped and counted as such ([`SkipReason::NoRedundancy`]).

use super::*;
use crate::checksum::BLOCK_BYTES;
use crate::error::VolumeError;
use crate::node::{read_back, ReadBack};
use crate::scrub::{
    locate, CrossCheck, Culprit, ScrubAction, ScrubFinding, ScrubFound, ScrubPass, SkipReason,
};

/// What a mismatching stripe's repair rewrites.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fix {
    /// The data chunk `i` (logical order) from the P syndrome.
    Data(usize),
    P,
    Q,
    /// P (and Q) regenerated from the data.
    Parity,
    /// RAID 6 rows (one checksum block of every chunk, md's page) that blame different
    /// chunks: each row repaired by its own diagnosis ([`row_repairs`]).
    Rows,
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
/// Per row, which chunk the syndromes blame there (see [`locate_rows`]): the chunks that
/// row's repair changes, with their repaired bytes, rebuilt whole from `chunks` (by child)
/// with every other row kept as it is. A located row rewrites only its culprit (a data
/// chunk from the P syndrome `ps`, or P or Q from `p_new`/`q_new`, the parity of the data
/// read); a row nothing locates regenerates its P and Q from the data, as a stripe does.
fn row_repairs(
    culprits: &[Culprit],
    order: &[usize],
    roles: &StripeRoles,
    chunks: &[Buf],
    regenerated: (&[u8], &[u8]),
    ps: &[u8],
) -> Vec<(Target, Buf)> {
    let q_child = roles.q.expect("only RAID 6 locates");
    let (p_new, q_new) = regenerated;
    let row_len = ps.len().div_ceil(culprits.len().max(1));
    let mut bytes: Vec<Option<Buf>> = chunks.iter().map(|_| None).collect();
    // Per child: a row nothing located changed it (parity regenerated, not named).
    let mut unnamed = vec![false; chunks.len()];
    for (r, culprit) in culprits.iter().enumerate() {
        let rows = r * row_len..((r + 1) * row_len).min(ps.len());
        let mut put = |c: usize, from: &[u8], xor: bool| {
            let b = bytes[c].get_or_insert_with(|| Buf::copy_from(&chunks[c]));
            if xor {
                for (d, e) in b[rows.clone()].iter_mut().zip(&from[rows.clone()]) {
                    *d ^= e;
                }
            } else {
                b[rows.clone()].copy_from_slice(&from[rows.clone()]);
            }
        };
        match *culprit {
            Culprit::None => {}
            Culprit::P => put(roles.p, p_new, false),
            Culprit::Q => put(q_child, q_new, false),
            Culprit::Slot(z) => put(roles.data[order[z]], ps, true),
            Culprit::Unknown => {
                put(roles.p, p_new, false);
                put(q_child, q_new, false);
                unnamed[roles.p] = true;
                unnamed[q_child] = true;
            }
        }
    }
    (bytes.into_iter().enumerate())
        .filter_map(|(c, b)| b.map(|b| (c, b)))
        .filter(|(c, b)| chunks[*c][..] != b[..])
        .map(|(c, b)| {
            let action = match c {
                c if c == roles.p => ScrubAction::PRewritten,
                c if c == q_child => ScrubAction::QRewritten,
                _ => ScrubAction::RebuiltFromSyndrome,
            };
            let (found, cross_check) = match unnamed[c] {
                true => (ScrubFound::ParityMismatch, None),
                false => (ScrubFound::Syndrome, Some(CrossCheck::SyndromeOnly)),
            };
            let target = Target {
                child: c,
                found,
                action,
                cross_check,
            };
            (target, b)
        })
        .collect()
}

/// Which chunk the syndromes blame in each row of `row_len` bytes (md checks a RAID 6
/// stripe page by page): chunks wrong in different rows of one stripe are each located
/// in their own row, where the whole stripe's syndromes name no single chunk.
fn locate_rows(ps: &[u8], qs: &[u8], k: usize, row_len: usize) -> Vec<Culprit> {
    (ps.chunks(row_len).zip(qs.chunks(row_len)))
        .map(|(p, q)| locate(p, q, k))
        .collect()
}

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
        Fix::Rows => unreachable!("a per-row verdict carries its own targets"),
    }
}

/// What a repair writes for `verdict` on a stripe whose chunks (by child, the `failed` ones
/// rebuilt) are `chunks`: each target with its bytes. Nothing goes to a failed child, and
/// regenerated parity only to the chunks it changes (with a child lost, the parity its
/// chunk was rebuilt from already agrees).
fn verdict_writes(
    verdict: Verdict,
    roles: &StripeRoles,
    chunks: &[Buf],
    failed: &[usize],
) -> Vec<(Target, Buf)> {
    let Verdict { fix, p, q, rows } = verdict;
    if fix == Fix::Rows {
        return (rows.into_iter())
            .filter(|(t, _)| !failed.contains(&t.child))
            .collect();
    }
    let bytes = match fix {
        Fix::Data(_) | Fix::P => vec![p],
        Fix::Q => vec![q],
        Fix::Parity if roles.q.is_some() => vec![p, q],
        Fix::Parity => vec![p],
        Fix::Rows => unreachable!("returned above"),
    };
    verdict_targets(fix, roles)
        .into_iter()
        .zip(bytes)
        .filter(|(t, b)| {
            !failed.contains(&t.child) && (fix != Fix::Parity || chunks[t.child][..] != b[..])
        })
        .collect()
}

/// Whether a row (by child) satisfies its parity: P, and Q for RAID 6.
fn row_agrees(order: &[usize], roles: &StripeRoles, row: &[&[u8]]) -> bool {
    let data: Vec<&[u8]> = order.iter().map(|&i| row[roles.data[i]]).collect();
    match roles.q {
        None => parity::check_p(&data, row[roles.p]),
        Some(q) => parity::check_pq(&data, row[roles.p], row[q]),
    }
}

/// [`row_agrees`] for a row whose `failed` children are lost (their slices are not read):
/// they are rebuilt as a read rebuilds them — a data chunk from P, parity from the data —
/// and what parity is left checks the row. Lost children must be fewer than parity chunks
/// (else the rebuilt row agrees by construction).
fn degraded_row_agrees(
    order: &[usize],
    roles: &StripeRoles,
    failed: &[usize],
    row: &[&[u8]],
) -> bool {
    if failed.is_empty() {
        return row_agrees(order, roles, row);
    }
    let mut blocks: Vec<Buf> = row.iter().map(|b| Buf::copy_from(b)).collect();
    rebuild_chunks(order, roles, failed, &mut blocks);
    let rebuilt: Vec<&[u8]> = blocks.iter().map(|b| &b[..]).collect();
    row_agrees(order, roles, &rebuilt)
}

/// Why a stripe cannot be checked, if it cannot: its parity is stale, or `failed` children
/// (failed members) leave no parity chunk to spare out of `parity_chunks`.
fn skip_reason(stale: bool, failed: usize, parity_chunks: usize) -> Option<SkipReason> {
    if stale {
        Some(SkipReason::StaleParity)
    } else if failed >= parity_chunks {
        Some(SkipReason::NoRedundancy)
    } else {
        None
    }
}

/// The children marked in `lost`.
fn lost_children(lost: &[bool]) -> Vec<usize> {
    (0..lost.len()).filter(|&c| lost[c]).collect()
}

/// A mismatching stripe's diagnosis: what to rewrite, and the bytes (`p` carries the
/// repaired data chunk for [`Fix::Data`]; `rows` the chunks and bytes of [`Fix::Rows`]).
struct Verdict {
    fix: Fix,
    p: Buf,
    q: Buf,
    rows: Vec<(Target, Buf)>,
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
            return Ok(());
        }
        let roles = self.stripes.chunks.layout.roles(s);
        let read = self.read_stripe_whole(s, &failed).await;
        let Some(chunks) = self
            .rebuild_unreadable(s, &roles, read, &failed, pass)
            .await
        else {
            return Ok(());
        };
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
    /// (checked against their checksums before they are rewritten: a rebuild from a row that
    /// is itself wrong must not be written as a repair). Returns the row and whether a block
    /// was rewritten; `None` when the row has too many bad blocks.
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
        for c in (0..read.len()).filter(|&c| read[c].is_none() && !failed.contains(&c)) {
            match children[c].read(at, Buf::new(n)).await {
                Ok(b) => blocks[c] = b,
                Err(e) => lost.push(Target::bad(c, &e)),
            }
        }
        // Every child whose block the row must rebuild: the failed ones and the bad ones.
        let mut gone: Vec<usize> = (failed.iter().copied())
            .chain(lost.iter().map(|t| t.child))
            .collect();
        gone.sort_unstable();
        let parity_chunks = 1 + usize::from(roles.q.is_some());
        if gone.len() > parity_chunks {
            self.record(s, off, n as u64, &lost, |_| ScrubAction::Unrepairable, pass);
            return None;
        }
        let order = self.stripes.chunks.slot_order(roles);
        if !gone.is_empty() {
            rebuild_chunks(&order, roles, &gone, &mut blocks);
        }
        if lost.is_empty() {
            return Some((blocks, false));
        }
        // RAID 6 with a syndrome to spare: the rebuilt row must satisfy both.
        if gone.len() < parity_chunks && self.stripes.health.in_sync(s) {
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
    /// is one of the `failed`, not read).
    async fn read_stripe_whole(&self, s: u64, failed: &[usize]) -> Vec<Option<Buf>> {
        let at = self.stripes.chunks.layout.chunk_offset(s);
        let strip = self.stripes.chunks.strip as usize;
        let children = self.stripes.chunks.children.iter().enumerate();
        let reads = join_all(children.map(|(c, child)| async move {
            if failed.contains(&c) {
                return None;
            }
            let r = child.read(at, Buf::new(strip)).await;
            r.map_err(|e| tracing::warn!("scrub: stripe {s}: {e}")).ok()
        }))
        .await;
        reads
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
                rows: Vec::new(),
            });
        };
        parity::pq_gen(&data, &mut p_new, &mut q_new);
        let ps: Vec<u8> = p.iter().zip(&p_new[..]).map(|(a, b)| a ^ b).collect();
        let qs: Vec<u8> = q.iter().zip(&q_new[..]).map(|(a, b)| a ^ b).collect();
        // Without knowing parity matched its data, a syndrome may only mean parity fell
        // behind a write (the write hole): never rewrite data from it. Nor with a child
        // lost: its rebuilt chunk absorbed any error in what it was rebuilt from.
        let culprits = if self.stripes.health.in_sync(s) && !degraded {
            locate_rows(&ps, &qs, self.stripes.chunks.k, BLOCK_BYTES as usize)
        } else {
            vec![Culprit::Unknown]
        };
        let mut named = culprits.iter().filter(|&&c| c != Culprit::None);
        let first = named.next().copied().unwrap_or(Culprit::Unknown);
        // One culprit for every row that differs: the stripe's own fix. Rows blaming
        // different chunks are each repaired as their own diagnosis says.
        let culprit = match named.all(|&c| c == first) {
            true => first,
            false => {
                let rows = row_repairs(
                    &culprits,
                    &order,
                    roles,
                    chunks,
                    (&p_new[..], &q_new[..]),
                    &ps,
                );
                return Some(Verdict {
                    fix: Fix::Rows,
                    p: p_new,
                    q: q_new,
                    rows,
                });
            }
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
            rows: Vec::new(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use nbraid_layout::ParityLayout;

    /// A RAID 6 row of `n` children (stripe `s`'s roles) with consistent P and Q, by child.
    fn row6(n: usize, s: u64, len: usize) -> (StripeRoles, Vec<usize>, Vec<Vec<u8>>) {
        let roles = StripeRoles::md(ParityLayout::default(), n, 2, s);
        let k = n - 2;
        let mut order = vec![0usize; k];
        for i in 0..k {
            order[roles.q_slot[i]] = i;
        }
        let mut row = vec![vec![0u8; len]; n];
        for i in 0..k {
            row[roles.data[i]] = (0..len).map(|b| (b * 13 + i * 71 + 5) as u8).collect();
        }
        let data: Vec<&[u8]> = order.iter().map(|&i| &row[roles.data[i]][..]).collect();
        let (mut p, mut q) = (vec![0u8; len], vec![0u8; len]);
        parity::pq_gen(&data, &mut p, &mut q);
        row[roles.p] = p;
        row[roles.q.expect("RAID 6")] = q;
        (roles, order, row)
    }

    /// With one child lost, the syndrome left still checks the row: a good row agrees, and
    /// a byte flipped in any surviving child — data, P or Q — is caught, whichever child is
    /// the lost one (data rebuilt from P and checked by Q, P lost and Q checks, Q lost and P
    /// checks). The lost child's own bytes are never looked at.
    #[test]
    fn one_lost_child_leaves_a_syndrome_that_checks_the_row() {
        for n in [4, 6] {
            for s in 0..n as u64 {
                let (roles, order, row) = row6(n, s, 64);
                for lost in 0..n {
                    let mut blanked = row.clone();
                    blanked[lost] = vec![0xee; 64];
                    let view: Vec<&[u8]> = blanked.iter().map(|b| &b[..]).collect();
                    assert!(degraded_row_agrees(&order, &roles, &[lost], &view));
                    for bad in (0..n).filter(|&c| c != lost) {
                        let mut wrong = blanked.clone();
                        wrong[bad][17] ^= 0x40;
                        let view: Vec<&[u8]> = wrong.iter().map(|b| &b[..]).collect();
                        assert!(
                            !degraded_row_agrees(&order, &roles, &[lost], &view),
                            "x{n} stripe {s}: lost {lost}, bad {bad}"
                        );
                    }
                }
            }
        }
    }

    /// A stripe is skipped when its parity is stale, or when as many children are lost as
    /// it has parity chunks (RAID 5 with one, RAID 6 with two): nothing left to check with.
    #[test]
    fn skip_reason_needs_a_parity_chunk_to_spare() {
        assert_eq!(skip_reason(false, 0, 1), None);
        assert_eq!(skip_reason(false, 1, 1), Some(SkipReason::NoRedundancy));
        assert_eq!(skip_reason(false, 0, 2), None);
        assert_eq!(skip_reason(false, 1, 2), None);
        assert_eq!(skip_reason(false, 2, 2), Some(SkipReason::NoRedundancy));
        assert_eq!(skip_reason(false, 3, 2), Some(SkipReason::NoRedundancy));
        assert_eq!(skip_reason(true, 0, 2), Some(SkipReason::StaleParity));
        assert_eq!(skip_reason(true, 2, 2), Some(SkipReason::StaleParity));
    }

    /// The syndromes of a stripe whose `chunks` (by child) were read: P and Q of its data,
    /// and the P and Q syndromes.
    fn regenerate(
        order: &[usize],
        roles: &StripeRoles,
        chunks: &[Buf],
    ) -> (Vec<u8>, Vec<u8>, Vec<u8>, Vec<u8>) {
        let len = chunks[0].len();
        let data: Vec<&[u8]> = order.iter().map(|&i| &chunks[roles.data[i]][..]).collect();
        let (mut p_new, mut q_new) = (vec![0u8; len], vec![0u8; len]);
        parity::pq_gen(&data, &mut p_new, &mut q_new);
        let q = roles.q.expect("RAID 6");
        let syndrome = |a: &[u8], b: &[u8]| a.iter().zip(b).map(|(x, y)| x ^ y).collect();
        let ps = syndrome(&chunks[roles.p], &p_new);
        let qs = syndrome(&chunks[q], &q_new);
        (p_new, q_new, ps, qs)
    }

    /// Two data chunks of one RAID 6 stripe, each wrong in a different row: the whole
    /// stripe's syndromes name no single chunk (the old diagnosis regenerated P and Q from
    /// the wrong data, making both errors permanent), but each row names its own, and the
    /// repair writes back exactly the bytes the stripe held, leaving P and Q alone.
    #[test]
    fn chunks_wrong_in_different_rows_are_each_located_in_their_row() {
        let row = BLOCK_BYTES as usize;
        let (roles, order, good) = row6(6, 1, 2 * row);
        let mut chunks: Vec<Buf> = good.iter().map(|b| Buf::copy_from(b)).collect();
        let (a, b) = (roles.data[0], roles.data[2]);
        chunks[a][100..300].fill(0xee);
        chunks[b][row + 7..row + 4000].fill(0x11);
        let (p_new, q_new, ps, qs) = regenerate(&order, &roles, &chunks);
        let k = order.len();
        assert_eq!(
            locate(&ps, &qs, k),
            Culprit::Unknown,
            "the stripe names none"
        );
        let culprits = locate_rows(&ps, &qs, k, row);
        assert!(matches!(culprits[..], [Culprit::Slot(_), Culprit::Slot(_)]));
        let repairs = row_repairs(&culprits, &order, &roles, &chunks, (&p_new, &q_new), &ps);
        let children: Vec<usize> = repairs.iter().map(|(t, _)| t.child).collect();
        assert_eq!(
            children,
            vec![a.min(b), a.max(b)],
            "only the two wrong chunks"
        );
        for (t, bytes) in &repairs {
            assert_eq!(bytes[..], good[t.child][..], "child {} as it was", t.child);
            assert_eq!(t.action, ScrubAction::RebuiltFromSyndrome);
            assert_eq!(t.found, ScrubFound::Syndrome);
        }
    }

    /// A row two chunks are wrong in names none: its P and Q are regenerated from the data
    /// (md's rule), while another row's located culprit (P here) is rewritten as located.
    #[test]
    fn a_row_nothing_locates_regenerates_its_parity_beside_located_rows() {
        let row = BLOCK_BYTES as usize;
        let (roles, order, good) = row6(5, 2, 2 * row);
        let q = roles.q.expect("RAID 6");
        let mut chunks: Vec<Buf> = good.iter().map(|b| Buf::copy_from(b)).collect();
        chunks[roles.p][10..20].fill(0x5a);
        chunks[roles.data[0]][row + 1..row + 9].fill(0xff);
        chunks[roles.data[1]][row + 1..row + 9].fill(0x00);
        let (p_new, q_new, ps, qs) = regenerate(&order, &roles, &chunks);
        let culprits = locate_rows(&ps, &qs, order.len(), row);
        assert_eq!(culprits, vec![Culprit::P, Culprit::Unknown]);
        let repairs = row_repairs(&culprits, &order, &roles, &chunks, (&p_new, &q_new), &ps);
        let mut children: Vec<usize> = repairs.iter().map(|(t, _)| t.child).collect();
        children.sort_unstable();
        let mut parity = vec![roles.p, q];
        parity.sort_unstable();
        assert_eq!(children, parity, "no data chunk is written on a guess");
        for (t, bytes) in &repairs {
            assert_eq!(t.found, ScrubFound::ParityMismatch, "child {}", t.child);
            assert_eq!(bytes[..row], good[t.child][..row], "row 0 as it was");
            let fresh = if t.child == q { &q_new } else { &p_new };
            assert_eq!(bytes[row..], fresh[row..], "row 1 follows its data");
        }
    }

    /// Regenerated parity goes only to the surviving parity chunks it changes: with a data
    /// chunk lost (rebuilt from P) only Q, with P lost only Q, with Q lost only P — never to
    /// the lost child.
    #[test]
    fn regenerated_parity_is_written_where_it_changes_and_never_to_a_lost_child() {
        let n = 5;
        let (roles, order, row) = row6(n, 1, 32);
        let q = roles.q.expect("RAID 6");
        let written = |lost: usize, bad: usize| -> Vec<usize> {
            let mut chunks: Vec<Buf> = row.iter().map(|b| Buf::copy_from(b)).collect();
            chunks[bad][3] ^= 1;
            rebuild_chunks(&order, &roles, &[lost], &mut chunks);
            let data: Vec<&[u8]> = order.iter().map(|&i| &chunks[roles.data[i]][..]).collect();
            let (mut p_new, mut q_new) = (Buf::new(32), Buf::new(32));
            parity::pq_gen(&data, &mut p_new, &mut q_new);
            let v = Verdict {
                fix: Fix::Parity,
                p: p_new,
                q: q_new,
                rows: Vec::new(),
            };
            (verdict_writes(v, &roles, &chunks, &[lost]).iter())
                .map(|(t, _)| t.child)
                .collect()
        };
        let (d0, d1) = (roles.data[0], roles.data[1]);
        assert_eq!(written(d0, d1), vec![q], "data lost: Q checks, Q rewritten");
        assert_eq!(
            written(d0, roles.p),
            vec![q],
            "data lost, P wrong: Q follows P"
        );
        assert_eq!(written(d0, q), vec![q]);
        assert_eq!(written(roles.p, d1), vec![q], "P lost: Q rewritten");
        assert_eq!(written(roles.p, q), vec![q]);
        assert_eq!(written(q, d1), vec![roles.p], "Q lost: P rewritten");
        assert_eq!(written(q, roles.p), vec![roles.p]);
    }
}
