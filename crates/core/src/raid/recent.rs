//! Stripes a degraded read rebuilt, kept for the next reads of the same stripe (a few,
//! forgotten as soon as the stripe is written), so sequential degraded reads in requests
//! smaller than a stripe read each surviving chunk once: the chunks read for a later request
//! and the lost chunk rebuilt ([`Kept::rows`]), or, while the lost chunk is still being
//! rebuilt across requests, its [`Fold`]: each request folds the whole chunks it reads
//! anyway into the XOR that becomes the lost chunk, so they are neither read nor copied
//! twice.

use crate::buf::{Buf, SharedBuf};
use crate::parity;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::Arc;
use std::task::Waker;

/// Stripes kept at least, whatever their size (rebuilt rows and folds together).
pub(super) const RECENT_STRIPES: usize = 4;
/// Bytes of rows kept at most beyond [`RECENT_STRIPES`] stripes: the requests in flight of a
/// sequential degraded read (a queue of 1 MiB requests spans several stripes) each find
/// their stripe kept.
pub(super) const RECENT_BYTES: usize = 32 << 20;

/// Who reads a source of a stripe's fold now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Reading {
    /// Nobody: the next reader that needs it reads it.
    Idle,
    /// A reader, into its own buffer (or P's scratch); it folds it and keeps nothing.
    Own,
    /// A reader, into a buffer kept in [`Kept::rows`] (and folded) for the next request.
    Scratch,
}

/// What is kept of one stripe, shared by the readers of the stripe in flight (each holds it
/// for a few statements, never across I/O).
pub(super) struct Kept {
    /// Data chunks' rows, whole, by data index; `None` where not kept.
    pub rows: Vec<Option<SharedBuf>>,
    /// Data index of the lost chunk the fold rebuilds (`None`: rows kept by a whole rebuild).
    lost: Option<usize>,
    /// The lost chunk partly rebuilt; `None` while no rebuild is under way.
    pub fold: Option<Fold>,
    /// Per source (data indices, then P): who reads it now. A claimed source is folded (or
    /// given back, by [`Kept::release`]) by its reader.
    reading: Vec<Reading>,
    /// The buffer of the one reader that wants the lost chunk whole: the fold completes
    /// straight into it.
    pub target: Option<Buf>,
    /// `target` once the fold completed into it, for its reader to take.
    pub finished: Option<Buf>,
    /// Readers waiting for a claimed source, a kept chunk or the lost one.
    waiters: Vec<Waker>,
}

impl Kept {
    /// Nothing kept of a stripe of `k` data chunks whose data chunk `lost` (if any) a fold
    /// rebuilds.
    pub fn new(k: usize, lost: Option<usize>) -> Kept {
        Kept {
            rows: vec![None; k],
            lost,
            fold: None,
            reading: vec![Reading::Idle; k + 1],
            target: None,
            finished: None,
            waiters: Vec::new(),
        }
    }

    /// Bytes of rows it holds.
    fn bytes(&self) -> usize {
        self.rows.iter().flatten().map(|r| r.len()).sum::<usize>()
            + self.fold.as_ref().map_or(0, Fold::bytes)
    }

    /// Whether a reader in flight depends on it (claims, a target, waiters): never dropped.
    fn in_use(&self) -> bool {
        self.reading.iter().any(|r| *r != Reading::Idle)
            || self.target.is_some()
            || self.finished.is_some()
            || !self.waiters.is_empty()
    }

    /// Whether nothing is kept and nobody uses it.
    fn is_spent(&self) -> bool {
        !self.in_use()
            && self.rows.iter().all(Option::is_none)
            && self.fold.as_ref().is_none_or(Fold::is_empty)
    }

    fn slot(&self, s: Source) -> usize {
        match s {
            Source::Data(i) => i,
            Source::P => self.rows.len(),
        }
    }

    /// Data index of the lost chunk the fold rebuilds.
    pub fn lost(&self) -> usize {
        self.lost.expect("a stripe rebuilt by a fold")
    }

    pub fn reading(&self, s: Source) -> Reading {
        self.reading[self.slot(s)]
    }

    /// The fold of the lost chunk, begun if none is under way.
    pub fn fold_mut(&mut self) -> &mut Fold {
        let (k, lost) = (
            self.rows.len(),
            self.lost.expect("a stripe rebuilt by a fold"),
        );
        self.fold.get_or_insert_with(|| Fold::new(k, lost))
    }

    /// Whether source `s` is folded already.
    pub fn folded(&self, s: Source) -> bool {
        self.fold.as_ref().is_some_and(|f| f.has(s))
    }

    /// Claims `s` for a reader about to read it (`how`: into its own buffer or a kept one).
    pub fn claim(&mut self, s: Source, how: Reading) {
        let at = self.slot(s);
        assert_eq!(self.reading[at], Reading::Idle, "{s:?} claimed twice");
        self.reading[at] = how;
    }

    /// Claims every source the fold still misses that nobody reads (into kept buffers: the
    /// next request wants them; P into scratch). Returns them.
    pub fn claim_missing(&mut self) -> Vec<Source> {
        let missing: Vec<Source> = self
            .fold_mut()
            .missing()
            .into_iter()
            .filter(|&s| self.reading(s) == Reading::Idle)
            .collect();
        for &s in &missing {
            let how = match s {
                Source::Data(_) => Reading::Scratch,
                Source::P => Reading::Own,
            };
            self.claim(s, how);
        }
        missing
    }

    /// Folds whole chunks a reader claimed and read (any already folded are skipped). The
    /// sources that complete the fold rebuild the lost chunk in the same pass: into the
    /// waiting reader's [`Self::target`], else kept in `rows`. Wakes the waiters.
    pub fn contribute(&mut self, sources: &[(Source, &[u8])]) {
        for &(s, _) in sources {
            let at = self.slot(s);
            self.reading[at] = Reading::Idle;
        }
        let fold = self.fold_mut();
        let completes = fold
            .missing()
            .iter()
            .all(|m| sources.iter().any(|(s, _)| s == m));
        if completes {
            let fold = self.fold.take().expect("under way");
            let lost = fold.lost();
            match self.target.take() {
                Some(mut out) => {
                    fold.finish_into(sources, &mut out);
                    self.finished = Some(out);
                }
                None => {
                    let mut out = Buf::new(sources[0].1.len());
                    fold.finish_into(sources, &mut out);
                    self.rows[lost] = Some(out.freeze());
                }
            }
        } else {
            fold.absorb(sources);
        }
        self.wake();
    }

    /// Gives back claims of sources a reader will not fold (its read failed, or it was
    /// dropped): the next reader that needs them reads them. With `target`, its buffer
    /// comes back too (rebuilt or not).
    pub fn release(&mut self, sources: &[Source], target: bool) -> Option<Buf> {
        for &s in sources {
            let at = self.slot(s);
            self.reading[at] = Reading::Idle;
        }
        let given = match target {
            true => self.target.take().or(self.finished.take()),
            false => None,
        };
        self.wake();
        given
    }

    /// Registers a reader to wake at the next change.
    pub fn wait(&mut self, w: &Waker) {
        self.waiters.push(w.clone());
    }

    pub fn wake(&mut self) {
        for w in self.waiters.drain(..) {
            w.wake();
        }
    }
}

/// One stripe's shared [`Kept`].
pub(super) type KeptSlot = Arc<Mutex<Kept>>;

/// Recently rebuilt whole stripes, newest last. Contract (checked by the callers, which hold
/// the group's stripe locks): filled under the stripe's shared lock, forgotten under its
/// exclusive lock, so no read can put back bytes a write is about to change. Lock order: this
/// list, then a stripe's [`Kept`].
#[derive(Default)]
pub(super) struct RecentStripes {
    kept: Mutex<VecDeque<(u64, KeptSlot)>>,
}

impl RecentStripes {
    /// The rows kept of a stripe.
    pub fn get(&self, stripe: u64) -> Option<Vec<Option<SharedBuf>>> {
        let kept = self.kept.lock();
        kept.iter()
            .find(|r| r.0 == stripe)
            .map(|r| r.1.lock().rows.clone())
    }

    /// Lets go of kept chunks of `stripe` a reader has read to their end (`ended`, by data
    /// index): a sequential reader wants them no more, and their buffers go back to the
    /// pool while still in the cache. The stripe is forgotten once nothing of it is kept.
    pub fn consumed(&self, stripe: u64, ended: &[usize]) {
        let mut kept = self.kept.lock();
        let Some(at) = kept.iter().position(|r| r.0 == stripe) else {
            return;
        };
        let spent = {
            let mut k = kept[at].1.lock();
            for &i in ended {
                k.rows[i] = None;
            }
            k.is_spent()
        };
        if spent {
            kept.remove(at);
        }
    }

    /// Keeps the rows of a stripe rebuilt whole (no fold).
    pub fn put(&self, stripe: u64, rows: Vec<Option<SharedBuf>>) {
        let mut what = Kept::new(rows.len(), None);
        what.rows = rows;
        let mut kept = self.kept.lock();
        kept.retain(|r| r.0 != stripe);
        kept.push_back((stripe, Arc::new(Mutex::new(what))));
        evict(&mut kept);
    }

    /// The shared state of `stripe`, whose data chunk `lost` a fold rebuilds (begun afresh if
    /// what is kept was for another lost chunk; its readers in flight finish on the old one).
    pub fn slot(&self, stripe: u64, k: usize, lost: usize) -> KeptSlot {
        let mut kept = self.kept.lock();
        if let Some(at) = kept.iter().position(|r| r.0 == stripe) {
            let slot = kept[at].1.clone();
            let mut st = slot.lock();
            match st.lost {
                Some(l) if l != lost => {}
                _ => {
                    st.lost = Some(lost);
                    drop(st);
                    return slot;
                }
            }
            drop(st);
            kept.remove(at);
        }
        let slot = Arc::new(Mutex::new(Kept::new(k, Some(lost))));
        kept.push_back((stripe, slot.clone()));
        evict(&mut kept);
        slot
    }

    /// Forgets `slot` of `stripe` if nothing is kept in it and nobody uses it.
    pub fn drop_if_spent(&self, stripe: u64, slot: &KeptSlot) {
        let mut kept = self.kept.lock();
        if let Some(at) = kept
            .iter()
            .position(|r| r.0 == stripe && Arc::ptr_eq(&r.1, slot))
        {
            if kept[at].1.lock().is_spent() {
                kept.remove(at);
            }
        }
    }

    /// Forgets a rebuilt stripe (its data is about to change).
    pub fn forget(&self, stripe: u64) {
        let mut kept = self.kept.lock();
        if !kept.is_empty() {
            kept.retain(|r| r.0 != stripe);
        }
    }

    /// Forgets every rebuilt stripe in `stripes` (their data is about to change).
    pub fn forget_range(&self, stripes: std::ops::Range<u64>) {
        let mut kept = self.kept.lock();
        if !kept.is_empty() {
            kept.retain(|r| !stripes.contains(&r.0));
        }
    }
}

/// Drops the oldest stripes nobody uses while more than [`RECENT_STRIPES`] hold more than
/// [`RECENT_BYTES`].
fn evict(kept: &mut VecDeque<(u64, KeptSlot)>) {
    let sizes: Vec<(usize, bool)> = kept
        .iter()
        .map(|r| {
            let k = r.1.lock();
            (k.bytes(), k.in_use())
        })
        .collect();
    let mut bytes: usize = sizes.iter().map(|s| s.0).sum();
    let mut drop_at = Vec::new();
    let mut left = kept.len();
    for (at, &(b, used)) in sizes.iter().enumerate() {
        if left <= RECENT_STRIPES || bytes <= RECENT_BYTES {
            break;
        }
        if !used {
            drop_at.push(at);
            bytes -= b;
            left -= 1;
        }
    }
    for at in drop_at.into_iter().rev() {
        kept.remove(at);
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
    fn kept_stripes_are_few_and_those_in_use_stay() {
        let r = RecentStripes::default();
        let slot = r.slot(3, 4, 1);
        assert!(Arc::ptr_eq(&slot, &r.slot(3, 4, 1)), "one state per stripe");
        assert!(r
            .get(3)
            .is_some_and(|rows| rows.iter().all(Option::is_none)));
        // Another lost chunk: begun afresh.
        assert!(!Arc::ptr_eq(&slot, &r.slot(3, 4, 2)));
        r.drop_if_spent(3, &r.slot(3, 4, 2));
        assert!(r.get(3).is_none(), "nothing kept, nobody using it");
        // Small stripes: more than the minimum stay while they fit the byte bound.
        r.put(3, vec![None; 4]);
        for s in 10..10 + 2 * RECENT_STRIPES as u64 {
            r.put(s, vec![None; 4]);
        }
        assert!(r.get(3).is_some(), "no bytes, nothing dropped");
        // Large ones: the oldest go once the bound is passed, down to the minimum, but never
        // one a reader has claimed a source of.
        r.slot(5, 4, 0).lock().claim(Source::P, Reading::Own);
        let half = Buf::new(RECENT_BYTES / 2).freeze();
        for s in 20..20 + RECENT_STRIPES as u64 {
            r.put(s, vec![Some(half.clone()), None, None, None]);
        }
        assert!(r.get(3).is_none(), "the oldest dropped");
        assert!(
            r.get(5).is_some(),
            "in use: kept (it counts among the minimum)"
        );
        assert!(r.get(20).is_none());
        assert!((21..20 + RECENT_STRIPES as u64).all(|s| r.get(s).is_some()));
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

    #[test]
    fn contributions_complete_the_fold_into_the_target_or_the_kept_rows() {
        let (k, n) = (4, 512);
        let data: Vec<Vec<u8>> = (0..k)
            .map(|i| (0..n).map(|b| (b * 13 + i * 7 + 1) as u8).collect())
            .collect();
        let refs: Vec<&[u8]> = data.iter().map(|d| &d[..]).collect();
        let mut p = vec![0u8; n];
        parity::xor_gen(&refs, &mut p);
        for target in [false, true] {
            let mut kept = Kept::new(k, Some(2));
            kept.claim(Source::Data(0), Reading::Own);
            kept.claim(Source::Data(3), Reading::Scratch);
            if target {
                kept.target = Some(Buf::zeroed(n));
            }
            kept.contribute(&[(Source::Data(0), refs[0])]);
            assert_eq!(kept.reading(Source::Data(0)), Reading::Idle);
            // What is missing and unclaimed is claimed at once: data 1 and P.
            assert_eq!(kept.claim_missing(), vec![Source::Data(1), Source::P]);
            assert!(kept.claim_missing().is_empty(), "claimed already");
            kept.release(&[Source::Data(3)], false);
            assert_eq!(kept.claim_missing(), vec![Source::Data(3)]);
            kept.contribute(&[(Source::P, &p[..]), (Source::Data(1), refs[1])]);
            assert!(
                kept.finished.is_none() && kept.rows[2].is_none(),
                "data 3 missing"
            );
            kept.contribute(&[(Source::Data(3), refs[3]), (Source::Data(0), refs[0])]);
            match target {
                true => assert_eq!(kept.finished.as_deref(), Some(&data[2][..])),
                false => assert_eq!(kept.rows[2].as_deref(), Some(&data[2][..])),
            }
            assert!(kept.fold.is_none(), "done");
        }
    }
}
