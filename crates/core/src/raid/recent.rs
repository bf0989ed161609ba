//! Stripes a degraded read rebuilt, kept for the next reads of the same stripe (a few,
//! forgotten as soon as the stripe is written), so sequential degraded reads in requests
//! smaller than a stripe read each surviving chunk once: the chunks read for a later request
//! and the lost chunk rebuilt ([`Kept::rows`]), or, while the lost chunk is still being
//! rebuilt across requests, its [`Fold`]: each request folds the whole chunks it reads
//! anyway into the XOR that becomes the lost chunk, so they are neither read nor copied
//! twice.

use crate::buf::{Buf, SharedBuf};
use crate::parity;
use crate::range_lock::{RangeGuard, RangeLock};
use parking_lot::Mutex;
use std::collections::VecDeque;

/// Stripes kept at least, whatever their size (rebuilt rows and folds together).
pub(super) const RECENT_STRIPES: usize = 4;
/// Bytes of rows kept at most beyond [`RECENT_STRIPES`] stripes: the requests in flight of a
/// sequential degraded read (a queue of 1 MiB requests spans several stripes) each find
/// their stripe kept.
pub(super) const RECENT_BYTES: usize = 32 << 20;

/// What is kept of one stripe.
pub(super) struct Kept {
    /// Data chunks' rows, whole, by data index; `None` where not kept.
    pub rows: Vec<Option<SharedBuf>>,
    /// The lost chunk partly rebuilt, when it is not among `rows` yet.
    pub fold: Option<Fold>,
}

impl Kept {
    /// Bytes of rows it holds.
    fn bytes(&self) -> usize {
        self.rows.iter().flatten().map(|r| r.len()).sum::<usize>()
            + self.fold.as_ref().map_or(0, Fold::bytes)
    }
}

struct RecentStripe {
    stripe: u64,
    kept: Kept,
}

/// Recently rebuilt whole stripes, newest last. Contract (checked by the callers, which hold
/// the group's stripe locks): filled under the stripe's shared lock, forgotten under its
/// exclusive lock, so no read can put back bytes a write is about to change.
#[derive(Default)]
pub(super) struct RecentStripes {
    kept: Mutex<VecDeque<RecentStripe>>,
    /// Over stripe numbers: held by the one reader rebuilding a stripe's lost chunk, so
    /// concurrent readers of the stripe wait for what it keeps instead of reading the
    /// stripe again.
    claims: RangeLock,
}

impl RecentStripes {
    /// The rows kept of a stripe.
    pub fn get(&self, stripe: u64) -> Option<Vec<Option<SharedBuf>>> {
        let kept = self.kept.lock();
        kept.iter()
            .find(|r| r.stripe == stripe)
            .map(|r| r.kept.rows.clone())
    }

    /// Lets go of kept chunks of `stripe` a reader has read to their end (`ended`, by data
    /// index): a sequential reader wants them no more, and their buffers go back to the
    /// pool while still in the cache. The stripe is forgotten once nothing of it is kept.
    pub fn consumed(&self, stripe: u64, ended: &[usize]) {
        let mut kept = self.kept.lock();
        let Some(at) = kept.iter().position(|r| r.stripe == stripe) else {
            return;
        };
        let k = &mut kept[at].kept;
        for &i in ended {
            k.rows[i] = None;
        }
        if k.fold.is_none() && k.rows.iter().all(Option::is_none) {
            kept.remove(at);
        }
    }

    pub fn put(&self, stripe: u64, rows: Vec<Option<SharedBuf>>) {
        self.put_kept(stripe, Kept { rows, fold: None });
    }

    /// Takes what is kept of `stripe` out (the caller puts it back, grown), so two readers
    /// never fold into the same [`Fold`].
    pub fn take(&self, stripe: u64) -> Option<Kept> {
        let mut kept = self.kept.lock();
        let at = kept.iter().position(|r| r.stripe == stripe)?;
        kept.remove(at).map(|r| r.kept)
    }

    pub fn put_kept(&self, stripe: u64, what: Kept) {
        let mut kept = self.kept.lock();
        kept.retain(|r| r.stripe != stripe);
        kept.push_back(RecentStripe { stripe, kept: what });
        let mut bytes: usize = kept.iter().map(|r| r.kept.bytes()).sum();
        while kept.len() > RECENT_STRIPES && bytes > RECENT_BYTES {
            let old = kept.pop_front().expect("more than the minimum kept");
            bytes -= old.kept.bytes();
        }
    }

    /// Waits until no other reader rebuilds `stripe`'s lost chunk and claims it: the
    /// guard's holder takes what is kept of the stripe and puts it back grown.
    pub async fn claim(&self, stripe: u64) -> RangeGuard<'_> {
        self.claims.lock(stripe, 1, true).await
    }

    /// Forgets a rebuilt stripe (its data is about to change).
    pub fn forget(&self, stripe: u64) {
        let mut kept = self.kept.lock();
        if !kept.is_empty() {
            kept.retain(|r| r.stripe != stripe);
        }
    }

    /// Forgets every rebuilt stripe in `stripes` (their data is about to change).
    pub fn forget_range(&self, stripes: std::ops::Range<u64>) {
        let mut kept = self.kept.lock();
        if !kept.is_empty() {
            kept.retain(|r| !stripes.contains(&r.stripe));
        }
    }
}

/// A whole chunk a [`Fold`] takes: a surviving data chunk (data index) or P.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Source {
    Data(usize),
    P,
}

/// The one lost data chunk of a stripe, rebuilt from P and the other data chunks as readers
/// bring them (whole chunks, any order): the XOR of every source folded so far. Complete,
/// it is the lost chunk.
pub(super) struct Fold {
    /// Data index of the lost chunk.
    lost: usize,
    /// XOR of the folded sources; `None` while none is.
    acc: Option<Buf>,
    /// Per data index, whether folded (never the lost one).
    folded: Vec<bool>,
    p_folded: bool,
}

impl Fold {
    /// A fold of data chunk `lost` of a stripe of `k` data chunks.
    pub fn new(k: usize, lost: usize) -> Fold {
        assert!(lost < k, "lost data chunk {lost} of {k}");
        Fold {
            lost,
            acc: None,
            folded: vec![false; k],
            p_folded: false,
        }
    }

    pub fn lost(&self) -> usize {
        self.lost
    }

    pub fn has(&self, s: Source) -> bool {
        match s {
            Source::Data(i) => self.folded[i],
            Source::P => self.p_folded,
        }
    }

    /// The sources still to fold before the lost chunk is known.
    pub fn missing(&self) -> Vec<Source> {
        (0..self.folded.len())
            .filter(|&i| i != self.lost && !self.folded[i])
            .map(Source::Data)
            .chain((!self.p_folded).then_some(Source::P))
            .collect()
    }

    pub fn is_empty(&self) -> bool {
        self.acc.is_none()
    }

    fn bytes(&self) -> usize {
        self.acc.as_ref().map_or(0, |a| a.len())
    }

    /// Folds whole chunks in (one kernel pass over the accumulator and all of them); a
    /// source already folded is skipped.
    pub fn absorb(&mut self, sources: &[(Source, &[u8])]) {
        let mut fresh: Vec<&[u8]> = Vec::with_capacity(sources.len() + 1);
        for &(s, rows) in sources {
            assert!(
                s != Source::Data(self.lost),
                "the lost chunk folded into itself"
            );
            if self.has(s) {
                continue;
            }
            self.mark(s);
            fresh.push(rows);
        }
        if fresh.is_empty() {
            return;
        }
        // The first batch makes the accumulator; later ones fold into it in place.
        for batch in fresh.chunks(parity::MAX_DATA) {
            match self.acc.as_mut() {
                Some(acc) => parity::xor_into(acc, batch),
                None => {
                    let mut out = Buf::new(batch[0].len());
                    parity::xor_gen(batch, &mut out);
                    self.acc = Some(out);
                }
            }
        }
    }

    /// The lost chunk into `out`: the fold so far and `sources`, which complete it, in one
    /// pass (no accumulator written).
    pub fn finish_into(mut self, sources: &[(Source, &[u8])], out: &mut [u8]) {
        // Sources beyond one kernel pass fold into the accumulator first.
        let room = parity::MAX_DATA - usize::from(self.acc.is_some());
        if sources.len() > room {
            let (first, last) = sources.split_at(sources.len() - room + 1);
            self.absorb(first);
            return self.finish_into(last, out);
        }
        let acc = self.acc.take();
        let mut srcs: Vec<&[u8]> = Vec::with_capacity(sources.len() + 1);
        srcs.extend(acc.as_deref());
        for &(s, rows) in sources {
            assert!(
                s != Source::Data(self.lost),
                "the lost chunk folded into itself"
            );
            if !self.has(s) {
                self.mark(s);
                srcs.push(rows);
            }
        }
        assert!(
            self.missing().is_empty(),
            "finishing a fold that misses {:?}",
            self.missing()
        );
        parity::xor_gen(&srcs, out);
    }

    fn mark(&mut self, s: Source) {
        match s {
            Source::Data(i) => self.folded[i] = true,
            Source::P => self.p_folded = true,
        }
    }

    /// The lost chunk's rows, once every source is folded.
    #[cfg(test)]
    pub fn rows(&self) -> Option<&[u8]> {
        if !self.missing().is_empty() {
            return None;
        }
        self.acc.as_deref()
    }

    /// [`Self::rows`], owned.
    pub fn into_rows(self) -> Option<Buf> {
        if !self.missing().is_empty() {
            return None;
        }
        self.acc
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fold_in_any_order_and_batches_is_the_lost_chunk() {
        let k = 5;
        let n = 4096;
        let data: Vec<Vec<u8>> = (0..k)
            .map(|i| (0..n).map(|b| (b * 7 + i * 31) as u8).collect())
            .collect();
        let refs: Vec<&[u8]> = data.iter().map(|d| &d[..]).collect();
        let mut p = vec![0u8; n];
        parity::xor_gen(&refs, &mut p);
        for (lost, want) in data.iter().enumerate() {
            let mut f = Fold::new(k, lost);
            assert!(f.rows().is_none() && f.is_empty());
            let others: Vec<usize> = (0..k).filter(|&i| i != lost).rev().collect();
            // First half, then P and the first again (skipped), then the rest.
            let (a, b) = others.split_at(others.len() / 2);
            let first: Vec<(Source, &[u8])> =
                a.iter().map(|&i| (Source::Data(i), refs[i])).collect();
            f.absorb(&first);
            assert!(f.rows().is_none(), "incomplete");
            let mut second: Vec<(Source, &[u8])> = vec![(Source::P, &p[..])];
            second.extend(a.iter().map(|&i| (Source::Data(i), refs[i])));
            f.absorb(&second);
            let mut rest: Vec<usize> = b.to_vec();
            rest.sort_unstable();
            let rest: Vec<Source> = rest.into_iter().map(Source::Data).collect();
            assert_eq!(f.missing(), rest);
            let third: Vec<(Source, &[u8])> =
                b.iter().map(|&i| (Source::Data(i), refs[i])).collect();
            f.absorb(&third);
            assert_eq!(f.rows(), Some(&want[..]), "lost chunk {lost}");
            // Finished into a buffer: from nothing folded, and from the first half folded
            // (the second time with a source folded already given again).
            let all: Vec<(Source, &[u8])> = others
                .iter()
                .map(|&i| (Source::Data(i), refs[i]))
                .chain([(Source::P, &p[..])])
                .collect();
            let mut out = vec![0xEE; n];
            Fold::new(k, lost).finish_into(&all, &mut out);
            assert_eq!(out, *want, "finished from nothing, lost chunk {lost}");
            let mut g = Fold::new(k, lost);
            g.absorb(&first);
            let mut out = vec![0xEE; n];
            g.finish_into(&all, &mut out);
            assert_eq!(out, *want, "finished from half, lost chunk {lost}");
        }
    }

    #[test]
    fn kept_stripes_are_few_and_taken_out_whole() {
        let r = RecentStripes::default();
        r.put_kept(
            3,
            Kept {
                rows: vec![None; 4],
                fold: Some(Fold::new(4, 1)),
            },
        );
        assert!(r
            .get(3)
            .is_some_and(|rows| rows.iter().all(Option::is_none)));
        let k = r.take(3).expect("kept");
        assert!(k.fold.is_some_and(|f| f.lost() == 1));
        assert!(r.take(3).is_none(), "taken out");
        // Small stripes: more than the minimum stay while they fit the byte bound.
        r.put(3, vec![None; 4]);
        for s in 10..10 + 2 * RECENT_STRIPES as u64 {
            r.put(s, vec![None; 4]);
        }
        assert!(r.get(3).is_some(), "no bytes, nothing dropped");
        // Large ones: the oldest go once the bound is passed, down to the minimum.
        let half = Buf::new(RECENT_BYTES / 2).freeze();
        for s in 20..20 + RECENT_STRIPES as u64 {
            r.put(s, vec![Some(half.clone()), None, None, None]);
        }
        assert!(r.get(3).is_none(), "the oldest dropped");
        assert!((20..20 + RECENT_STRIPES as u64).all(|s| r.get(s).is_some()));
        // Chunks read to their end are let go; the stripe with them.
        r.consumed(22, &[0]);
        assert!(r.get(22).is_none(), "nothing left of it");
        r.put(23, vec![Some(half.clone()), Some(half.clone()), None, None]);
        r.consumed(23, &[1]);
        assert!(r
            .get(23)
            .is_some_and(|rows| rows[0].is_some() && rows[1].is_none()));
        r.forget_range(20..22);
        assert!(r.get(21).is_none() && r.get(23).is_some());
    }
}
