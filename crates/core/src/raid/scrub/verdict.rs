//! What a scrub concludes about a stripe and why, as pure functions over the chunks read;
//! the scrubber (`raid/scrub.rs`) reads and writes, this decides. In the order it asks:
//!
//! 1. **Can it be checked?** Not when its parity is stale or its lost children leave no
//!    parity chunk to spare ([`skip_reason`]).
//! 2. **Does a row agree?** With its parity ([`row_agrees`]), its lost children rebuilt
//!    first as a read rebuilds them ([`degraded_row_agrees`], [`rebuild_chunks`]); a row
//!    whose blocks did not read is rebuilt, and judged by a syndrome to spare
//!    ([`row_rebuild`]).
//! 3. **If not, what is wrong?** The diagnosis ([`StripeChunks::diagnose`], a [`Verdict`]):
//!    RAID 5 regenerates P; RAID 6 blames the chunk its syndromes locate (per 4 KiB row
//!    when rows blame different chunks: [`locate_rows`], [`row_repairs`]), or regenerates P
//!    and Q when nothing is located or locating is not allowed ([`locatable`]).
//! 4. **What does the repair write?** Each chunk with its bytes and what is recorded of it
//!    ([`verdict_writes`], [`Target`]): never a lost child, regenerated parity only where
//!    it changes.

use super::*;

// 1. Can the stripe be checked?

/// Why a stripe cannot be checked, if it cannot: its parity is stale, or `failed` children
/// (failed members) leave no parity chunk to spare out of `parity_chunks`.
pub(super) fn skip_reason(stale: bool, failed: usize, parity_chunks: usize) -> Option<SkipReason> {
    if stale {
        Some(SkipReason::StaleParity)
    } else if failed >= parity_chunks {
        Some(SkipReason::NoRedundancy)
    } else {
        None
    }
}

/// The children marked in `lost`.
pub(super) fn lost_children(lost: &[bool]) -> Vec<usize> {
    (0..lost.len()).filter(|&c| lost[c]).collect()
}

// 2. Does a row agree?

/// Whether a row (by child) satisfies its parity: P, and Q for RAID 6.
pub(super) fn row_agrees(order: &[usize], roles: &StripeRoles, row: &[&[u8]]) -> bool {
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
pub(super) fn degraded_row_agrees(
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

/// Rebuilds the chunks of children `lost` (at most the group's parity count) in `chunks` (by
/// child) from the others. `order`: the data chunks in md's syndrome order.
pub(super) fn rebuild_chunks(
    order: &[usize],
    roles: &StripeRoles,
    lost: &[usize],
    chunks: &mut [Buf],
) {
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

/// What a row whose blocks did not all read concludes ([`row_rebuild`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum RowRebuild {
    /// More blocks gone than parity chunks: nothing rebuilds the row.
    TooManyGone,
    /// Rebuilt; with what a syndrome to spare says of the rebuilt row (RAID 6 with one
    /// block gone, parity known in sync, a bad block to judge), else `None`.
    Rebuilt(Option<CrossCheck>),
}

/// A row (one checksum block of every child, `blocks`) whose `failed` children were not
/// read and whose `bad` ones did not read: their blocks are rebuilt from the others when
/// the parity can. With a syndrome to spare and parity known `in_sync`, the rebuilt row
/// must satisfy both: whether it does is recorded with each bad block's repair.
pub(super) fn row_rebuild(
    order: &[usize],
    roles: &StripeRoles,
    (failed, bad): (&[usize], &[usize]),
    blocks: &mut [Buf],
    in_sync: bool,
) -> RowRebuild {
    // Every child whose block the row must rebuild: the failed ones and the bad ones.
    let mut gone: Vec<usize> = failed.iter().chain(bad).copied().collect();
    gone.sort_unstable();
    let parity_chunks = 1 + usize::from(roles.q.is_some());
    if gone.len() > parity_chunks {
        return RowRebuild::TooManyGone;
    }
    if !gone.is_empty() {
        rebuild_chunks(order, roles, &gone, blocks);
    }
    let spare = !bad.is_empty() && gone.len() < parity_chunks && in_sync;
    RowRebuild::Rebuilt(spare.then(|| {
        let row: Vec<&[u8]> = blocks.iter().map(|b| &b[..]).collect();
        match row_agrees(order, roles, &row) {
            true => CrossCheck::Agrees,
            false => CrossCheck::Disagrees,
        }
    }))
}

// 3. If not, what is wrong?

/// A mismatching stripe's diagnosis: what to rewrite, and the bytes (`p` carries the
/// repaired data chunk for [`Fix::Data`]; `rows` the chunks and bytes of [`Fix::Rows`]).
pub(super) struct Verdict {
    pub(super) fix: Fix,
    pub(super) p: Buf,
    pub(super) q: Buf,
    pub(super) rows: Vec<(Target, Buf)>,
}

/// What a mismatching stripe's repair rewrites.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Fix {
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

/// Whether a stripe's syndromes may blame a chunk. Not without knowing its parity matched
/// its data (`in_sync`): a syndrome may only mean parity fell behind a write (the write
/// hole), and data is never rewritten from that. Nor with a child lost (`degraded`): its
/// chunk, rebuilt from one syndrome, absorbed any error in what it was rebuilt from.
pub(super) fn locatable(in_sync: bool, degraded: bool) -> bool {
    in_sync && !degraded
}

/// One stripe's chunks as a diagnosis reads them.
pub(super) struct StripeChunks<'a> {
    pub(super) roles: &'a StripeRoles,
    /// The data chunks (logical index) in md's syndrome order.
    pub(super) order: &'a [usize],
    /// Every chunk, by child, one strip each.
    pub(super) chunks: &'a [Buf],
}

impl StripeChunks<'_> {
    /// `None` when P (and Q) agree with the data; else what a repair rewrites. `locatable`:
    /// the syndromes may blame a chunk (the stripe's parity is known in sync and no child
    /// was rebuilt); otherwise a mismatch only regenerates parity.
    pub(super) fn diagnose(&self, locatable: bool) -> Option<Verdict> {
        let data: Vec<&[u8]> = (self.order.iter())
            .map(|&i| &self.chunks[self.roles.data[i]][..])
            .collect();
        let p = &self.chunks[self.roles.p][..];
        let Some(q_child) = self.roles.q else {
            return (!parity::check_p(&data, p)).then(|| regenerated_p(&data, p.len()));
        };
        let q = &self.chunks[q_child][..];
        match parity::check_pq(&data, p, q) {
            true => None,
            false => Some(self.raid6_verdict(&data, (p, q), locatable)),
        }
    }

    /// The repair of a RAID 6 stripe whose parity `read` (P, Q) disagrees with `data`.
    fn raid6_verdict(&self, data: &[&[u8]], read: (&[u8], &[u8]), locatable: bool) -> Verdict {
        let (p, q) = read;
        let (mut p_new, mut q_new) = (Buf::new(p.len()), Buf::new(q.len()));
        parity::pq_gen(data, &mut p_new, &mut q_new);
        let ps = xor_of(p, &p_new);
        let qs = xor_of(q, &q_new);
        let culprits = match locatable {
            true => locate_rows(&ps, &qs, data.len(), BLOCK_BYTES as usize),
            false => vec![Culprit::Unknown],
        };
        let Some(culprit) = stripe_culprit(&culprits) else {
            let regenerated = (&p_new[..], &q_new[..]);
            let rows = row_repairs(
                &culprits,
                self.order,
                self.roles,
                self.chunks,
                regenerated,
                &ps,
            );
            return Verdict {
                fix: Fix::Rows,
                p: p_new,
                q: q_new,
                rows,
            };
        };
        let fix = culprit_fix(culprit, self.order);
        if let Fix::Data(i) = fix {
            // `p` carries the repaired data chunk.
            p_new = xor_of(&self.chunks[self.roles.data[i]], &ps);
        }
        Verdict {
            fix,
            p: p_new,
            q: q_new,
            rows: Vec::new(),
        }
    }
}

/// A RAID 5 mismatch's repair: P regenerated from the data (`strip` bytes a chunk).
fn regenerated_p(data: &[&[u8]], strip: usize) -> Verdict {
    let mut p = Buf::new(strip);
    parity::xor_gen(data, &mut p);
    Verdict {
        fix: Fix::Parity,
        p,
        q: Buf::new(0),
        rows: Vec::new(),
    }
}

/// The chunk every row that differs blames (`Unknown` when no row names one), or `None`
/// when rows blame different chunks and each row is repaired as its own diagnosis says.
pub(super) fn stripe_culprit(culprits: &[Culprit]) -> Option<Culprit> {
    let mut named = culprits.iter().filter(|&&c| c != Culprit::None);
    let first = named.next().copied().unwrap_or(Culprit::Unknown);
    named.all(|&c| c == first).then_some(first)
}

/// What the stripe's repair rewrites when the syndromes blame `culprit`; `order` maps a
/// syndrome slot to its data chunk.
pub(super) fn culprit_fix(culprit: Culprit, order: &[usize]) -> Fix {
    match culprit {
        Culprit::P => Fix::P,
        Culprit::Q => Fix::Q,
        Culprit::Slot(z) => Fix::Data(order[z]),
        Culprit::None | Culprit::Unknown => Fix::Parity,
    }
}

/// Which chunk the syndromes blame in each row of `row_len` bytes (md checks a RAID 6
/// stripe page by page): chunks wrong in different rows of one stripe are each located
/// in their own row, where the whole stripe's syndromes name no single chunk.
pub(super) fn locate_rows(ps: &[u8], qs: &[u8], k: usize, row_len: usize) -> Vec<Culprit> {
    (ps.chunks(row_len).zip(qs.chunks(row_len)))
        .map(|(p, q)| locate(p, q, k))
        .collect()
}

/// The chunks a diagnosis blames and what a repair does with each: the one the syndromes
/// name (rebuilt, or P or Q rewritten), or P (and Q) recomputed when nothing names one.
/// Per row, which chunk the syndromes blame there (see [`locate_rows`]): the chunks that
/// row's repair changes, with their repaired bytes, rebuilt whole from `chunks` (by child)
/// with every other row kept as it is. A located row rewrites only its culprit (a data
/// chunk from the P syndrome `ps`, or P or Q from `p_new`/`q_new`, the parity of the data
/// read); a row nothing locates regenerates its P and Q from the data, as a stripe does.
pub(super) fn row_repairs(
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

/// `a` XOR `b`, byte by byte (a syndrome, or a chunk with one applied).
fn xor_of(a: &[u8], b: &[u8]) -> Buf {
    let mut out = Buf::copy_from(a);
    for (d, e) in out.iter_mut().zip(b) {
        *d ^= e;
    }
    out
}

// 4. What does the repair write?

/// A child of a stripe the scrub found wrong, and what became of it.
pub(super) struct Target {
    pub(super) child: usize,
    pub(super) found: ScrubFound,
    pub(super) action: ScrubAction,
    pub(super) cross_check: Option<CrossCheck>,
}

impl Target {
    /// Child `c`, whose block did not read with error `e` (not repaired yet).
    pub(super) fn bad(c: usize, e: &VolumeError) -> Target {
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

/// The targets of a whole-stripe `fix` (not [`Fix::Rows`], whose rows carry their own).
pub(super) fn verdict_targets(fix: Fix, roles: &StripeRoles) -> Vec<Target> {
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
pub(super) fn verdict_writes(
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

    /// A RAID 6 row with bad blocks: one bad block is rebuilt and, parity in sync, the
    /// syndrome to spare judges the rebuilt row (agreeing, or not when another block is
    /// wrong too); none judges it out of sync or with two gone, which are still rebuilt;
    /// three gone is past the parity. Nothing bad: nothing to judge.
    #[test]
    fn a_row_is_rebuilt_within_its_parity_and_judged_by_a_syndrome_to_spare() {
        let (roles, order, good) = row6(6, 1, 64);
        let (d0, d1) = (roles.data[0], roles.data[1]);
        let rebuild = |failed: &[usize], bad: &[usize], wrong: Option<usize>, in_sync| {
            let mut blocks: Vec<Buf> = good.iter().map(|b| Buf::copy_from(b)).collect();
            for &c in failed.iter().chain(bad) {
                blocks[c].fill(0);
            }
            if let Some(c) = wrong {
                blocks[c][5] ^= 0x21;
            }
            let done = row_rebuild(&order, &roles, (failed, bad), &mut blocks, in_sync);
            let restored = failed
                .iter()
                .chain(bad)
                .all(|&c| blocks[c][..] == good[c][..]);
            (done, restored)
        };
        let agrees = RowRebuild::Rebuilt(Some(CrossCheck::Agrees));
        assert_eq!(rebuild(&[], &[d0], None, true), (agrees, true));
        let disagrees = RowRebuild::Rebuilt(Some(CrossCheck::Disagrees));
        assert_eq!(rebuild(&[], &[d0], Some(roles.p), true).0, disagrees);
        assert_eq!(
            rebuild(&[], &[d0], None, false),
            (RowRebuild::Rebuilt(None), true)
        );
        assert_eq!(
            rebuild(&[d1], &[d0], None, true),
            (RowRebuild::Rebuilt(None), true)
        );
        assert_eq!(
            rebuild(&[d1], &[], None, true),
            (RowRebuild::Rebuilt(None), true)
        );
        let three = rebuild(&[d1], &[d0, roles.p], None, true).0;
        assert_eq!(three, RowRebuild::TooManyGone);
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

    /// Stripe `s` of `n` children with `np` parity chunks, consistent: roles, syndrome
    /// order and chunks by child.
    fn stripe(n: usize, np: usize, s: u64) -> (StripeRoles, Vec<usize>, Vec<Buf>) {
        const LEN: usize = 2 * BLOCK_BYTES as usize;
        let roles = StripeRoles::md(ParityLayout::default(), n, np, s);
        let k = n - np;
        let mut order = vec![0usize; k];
        for i in 0..k {
            order[roles.q_slot[i]] = i;
        }
        let mut chunks: Vec<Buf> = (0..n).map(|_| Buf::new(LEN)).collect();
        for i in 0..k {
            let bytes: Vec<u8> = (0..LEN).map(|b| (b * 13 + i * 71 + 5) as u8).collect();
            chunks[roles.data[i]] = Buf::copy_from(&bytes);
        }
        let data: Vec<&[u8]> = order.iter().map(|&i| &chunks[roles.data[i]][..]).collect();
        let (mut p, mut q) = (Buf::new(LEN), Buf::new(LEN));
        match np {
            1 => parity::xor_gen(&data, &mut p),
            _ => parity::pq_gen(&data, &mut p, &mut q),
        }
        chunks[roles.p] = p;
        if let Some(c) = roles.q {
            chunks[c] = q;
        }
        (roles, order, chunks)
    }

    fn diagnose(
        roles: &StripeRoles,
        order: &[usize],
        chunks: &[Buf],
        locatable: bool,
    ) -> Option<Verdict> {
        StripeChunks {
            roles,
            order,
            chunks,
        }
        .diagnose(locatable)
    }

    /// Only a stripe known in sync with no child lost lets its syndromes blame a chunk.
    #[test]
    fn only_an_in_sync_stripe_with_every_child_there_is_located() {
        assert!(locatable(true, false));
        assert!(!locatable(false, false));
        assert!(!locatable(true, true));
        assert!(!locatable(false, true));
    }

    #[test]
    fn rows_that_differ_share_a_culprit_or_are_repaired_each_as_their_own() {
        use Culprit::{None as Same, Slot, Unknown, P};
        assert_eq!(stripe_culprit(&[Same, Same]), Some(Unknown));
        assert_eq!(stripe_culprit(&[Same, Slot(1), Slot(1)]), Some(Slot(1)));
        assert_eq!(stripe_culprit(&[P]), Some(P));
        assert_eq!(stripe_culprit(&[Slot(1), Same, P]), None);
        assert_eq!(stripe_culprit(&[Unknown, Slot(0)]), None);
    }

    #[test]
    fn a_culprit_names_the_chunk_rewritten_and_nothing_named_regenerates_parity() {
        let order = [2, 0, 1];
        assert_eq!(culprit_fix(Culprit::Slot(0), &order), Fix::Data(2));
        assert_eq!(culprit_fix(Culprit::P, &order), Fix::P);
        assert_eq!(culprit_fix(Culprit::Q, &order), Fix::Q);
        assert_eq!(culprit_fix(Culprit::Unknown, &order), Fix::Parity);
        assert_eq!(culprit_fix(Culprit::None, &order), Fix::Parity);
    }

    /// A RAID 5 stripe that agrees needs nothing; one with a flipped data byte gets P
    /// regenerated from the data as read.
    #[test]
    fn raid5_mismatch_regenerates_p() {
        let (roles, order, mut chunks) = stripe(4, 1, 1);
        assert!(diagnose(&roles, &order, &chunks, true).is_none());
        let good_p = chunks[roles.p].to_vec();
        chunks[roles.data[0]][9] ^= 0x10;
        let verdict = diagnose(&roles, &order, &chunks, true).expect("mismatch");
        assert_eq!(verdict.fix, Fix::Parity);
        assert_eq!(verdict.p[9], good_p[9] ^ 0x10);
        assert!(verdict.q.is_empty() && verdict.rows.is_empty());
    }

    /// A RAID 6 data chunk wrong in both rows is located and its bytes repaired when
    /// locating is allowed; otherwise only P and Q are regenerated.
    #[test]
    fn raid6_locates_a_wrong_data_chunk_only_when_allowed() {
        let (roles, order, good) = stripe(6, 2, 2);
        assert!(diagnose(&roles, &order, &good, true).is_none());
        let mut chunks: Vec<Buf> = good.iter().map(|b| Buf::copy_from(b)).collect();
        let bad = roles.data[1];
        chunks[bad][3] ^= 0x5a;
        chunks[bad][BLOCK_BYTES as usize + 3] ^= 0x0f;
        let verdict = diagnose(&roles, &order, &chunks, true).expect("mismatch");
        assert_eq!(verdict.fix, Fix::Data(1));
        assert_eq!(&verdict.p[..], &good[bad][..]);
        let verdict = diagnose(&roles, &order, &chunks, false).expect("mismatch");
        assert_eq!(verdict.fix, Fix::Parity);
        assert!(verdict.rows.is_empty());
    }

    /// Two rows blaming different chunks are repaired row by row.
    #[test]
    fn raid6_rows_blaming_different_chunks_are_repaired_by_row() {
        let (roles, order, mut chunks) = stripe(6, 2, 0);
        chunks[roles.data[0]][3] ^= 0x5a;
        chunks[roles.p][BLOCK_BYTES as usize + 3] ^= 0x0f;
        let verdict = diagnose(&roles, &order, &chunks, true).expect("mismatch");
        assert_eq!(verdict.fix, Fix::Rows);
        let mut children: Vec<usize> = verdict.rows.iter().map(|(t, _)| t.child).collect();
        children.sort_unstable();
        let mut expected = vec![roles.data[0], roles.p];
        expected.sort_unstable();
        assert_eq!(children, expected);
    }
}
