//! Whether a stripe's chunks agree, and if not, its repair: RAID 5 regenerates P; RAID 6
//! rewrites the chunk its syndromes blame (per 4 KiB row when rows blame different chunks),
//! or regenerates P and Q when nothing is located or locating is not allowed. Pure: the
//! scrubber (`raid/scrub.rs`) reads the chunks and says whether locating is allowed.

use super::*;

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

/// `a` XOR `b`, byte by byte (a syndrome, or a chunk with one applied).
fn xor_of(a: &[u8], b: &[u8]) -> Buf {
    let mut out = Buf::copy_from(a);
    for (d, e) in out.iter_mut().zip(b) {
        *d ^= e;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use nbraid_layout::ParityLayout;

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
