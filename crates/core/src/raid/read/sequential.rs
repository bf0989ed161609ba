//! Sequential degraded reads: a read that rebuilds a stripe whole for the next request
//! (`rebuild_ahead`), keeps the few last rebuilt stripes, and folds whole chunks a request
//! reads into the stripe's one lost data chunk while they are in cache (`read_folding`).
//! The readers of a stripe in flight share its [`Kept`]: each claims the chunks it reads
//! and folds them when they arrive, so none waits for another's I/O to issue its own.

use super::super::recent::{Kept, KeptSlot, Reading, Source};
use super::*;
use std::future::Future;
use std::task::Poll;

impl Reader<'_> {
    /// Whether a read whose chunks are all readable should still rebuild some stripe whole:
    /// it reads at least one whole chunk of a stripe (a sequential read, not a small random
    /// one) that has a lost data chunk the read does not cover, so the next request will
    /// need that chunk rebuilt — from rows this read would otherwise fetch a second time.
    pub(in crate::raid) fn rebuild_ahead(
        &self,
        offset: u64,
        len: u64,
        pieces: &[ParityPiece],
    ) -> bool {
        if len < self.stripes.chunks.strip {
            return false;
        }
        let (a, b) = self.stripes.chunks.stripe_span(offset, len);
        let at = self.stripes.chunks.layout.chunk_offset(a);
        let span = (b - a + 1) * self.stripes.chunks.strip;
        if self
            .stripes
            .chunks
            .children
            .iter()
            .all(|c| c.readable(at, span))
        {
            return false; // Healthy here: the common case costs one check per child.
        }
        let mut i = 0;
        while i < pieces.len() {
            let s = pieces[i].stripe;
            let mut j = i;
            let mut whole = 0;
            while j < pieces.len() && pieces[j].stripe == s {
                whole += usize::from(pieces[j].len == self.stripes.chunks.strip);
                j += 1;
            }
            if whole > 0 && whole < self.stripes.chunks.k {
                let roles = self.stripes.chunks.layout.roles(s);
                let lost = self.stripes.chunks.lost(s, 0, self.stripes.chunks.strip);
                if data_lost(&roles, &lost) && self.stripes.chunks.rebuildable(&lost) {
                    return true;
                }
            }
            i = j;
        }
        false
    }

    /// [`Self::read_stripe_pieces`] for a stripe with a lost data chunk, through the small
    /// cache of recently rebuilt stripes: a request covering only part of such a stripe
    /// rebuilds all of it once, so the next sequential request finds its part rebuilt
    /// instead of reading the whole stripe's rows again.
    pub(in crate::raid) async fn read_stripe_pieces_recent(
        &self,
        stripe: u64,
        pieces: Vec<(ParityPiece, Buf)>,
        force: Force,
    ) -> VolumeResult<(Vec<Buf>, Vec<Repair>)> {
        if force.is_none() {
            if let Some(rows) = self.stripes.recent.get(stripe) {
                if pieces.iter().all(|(p, _)| rows[p.data_index].is_some()) {
                    let ended =
                        ended_chunks(pieces.iter().map(|(p, _)| p), self.stripes.chunks.strip);
                    let out = copy_pieces(&rows, pieces);
                    self.stripes.recent.consumed(stripe, &ended);
                    return Ok((out, Vec::new()));
                }
            }
            let whole = pieces.len() == self.stripes.chunks.k
                && pieces
                    .iter()
                    .all(|(p, _)| p.in_chunk == 0 && p.len == self.stripes.chunks.strip);
            let roles = self.stripes.chunks.layout.roles(stripe);
            let lost = self
                .stripes
                .chunks
                .lost(stripe, 0, self.stripes.chunks.strip);
            let rebuildable = self.stripes.chunks.rebuildable(&lost);
            if !whole && rebuildable && !self.stripes.health.is_stale(stripe) {
                if let Some(x) = fold_target(&roles, &lost) {
                    return self.read_folding(stripe, &roles, x, pieces).await;
                }
            }
            if !whole
                && data_lost(&roles, &lost)
                && rebuildable
                && !self.stripes.health.is_stale(stripe)
            {
                // Whole chunks the request wants are read (or rebuilt) straight into its
                // buffers; every other chunk is kept for the next request.
                let want = vec![true; self.stripes.chunks.k];
                let mut bufs: Vec<Option<Buf>> = (0..self.stripes.chunks.k).map(|_| None).collect();
                let mut outs: Vec<(ParityPiece, Option<Buf>)> = Vec::with_capacity(pieces.len());
                for (p, b) in pieces {
                    if p.in_chunk == 0 && p.len == self.stripes.chunks.strip {
                        bufs[p.data_index] = Some(b);
                        outs.push((p, None));
                    } else {
                        outs.push((p, Some(b)));
                    }
                }
                let rows = self
                    .read_rows(stripe, 0, self.stripes.chunks.strip, &want, bufs)
                    .await?;
                let mut keep: Vec<Option<Buf>> = rows.into_iter().map(Some).collect();
                let mut handed = vec![false; self.stripes.chunks.k];
                for (p, b) in outs.iter_mut() {
                    if b.is_none() {
                        handed[p.data_index] = true;
                    }
                }
                let mut out = Vec::with_capacity(outs.len());
                for (p, b) in outs {
                    match b {
                        None => out.push(keep[p.data_index].take().expect("handed once")),
                        Some(mut b) => {
                            let at = p.in_chunk as usize;
                            let src = keep[p.data_index].as_ref().expect("kept");
                            b.copy_from_slice(&src[at..at + p.len as usize]);
                            out.push(b);
                        }
                    }
                }
                let kept: Vec<Option<SharedBuf>> = keep
                    .into_iter()
                    .zip(handed)
                    .map(|(b, h)| if h { None } else { b.map(Buf::freeze) })
                    .collect();
                self.stripes.recent.put(stripe, kept);
                return Ok((out, Vec::new()));
            }
        }
        self.read_stripe_pieces(stripe, pieces, force).await
    }

    /// Reads pieces of a stripe whose one lost data chunk `x` P rebuilds, through what is
    /// kept of the stripe ([`Kept`], shared by its readers in flight): pieces of kept chunks
    /// are copied; whole chunks are read straight into the request's buffers, parts of
    /// chunks as whole chunks kept for the next request; every chunk read is folded into the
    /// stripe's [`Fold`] once. Each reader issues its reads at once (claims are taken and
    /// folds made between I/O, never across it); only a request that wants `x` waits, for
    /// the fold to complete ([`Self::finish_lost`]). A read error hands the request to
    /// [`Self::read_stripe_pieces`] (which names the errors and repairs).
    async fn read_folding(
        &self,
        stripe: u64,
        roles: &StripeRoles,
        x: usize,
        pieces: Vec<(ParityPiece, Buf)>,
    ) -> VolumeResult<(Vec<Buf>, Vec<Repair>)> {
        let (k, strip) = (self.stripes.chunks.k, self.stripes.chunks.strip);
        self.stripes
            .assert_locked(stripe, "a degraded read folding its chunks");
        let slot = self.stripes.recent.slot(stripe, k, x);
        let (metas, mut bufs): (Vec<ParityPiece>, Vec<Option<Buf>>) =
            pieces.into_iter().map(|(p, b)| (p, Some(b))).unzip();
        let mut claims = Claims::new(&slot);
        let Some(plan) = claims.plan(&metas, &mut bufs, strip) else {
            return self.read_general(stripe, metas, bufs).await;
        };
        let wants_x = plan.steps.contains(&Step::Lost);
        let reads = own_reads(&metas, &mut bufs, &plan, strip);
        let order: Vec<(Source, Option<usize>, bool)> =
            reads.iter().map(|r| (r.0, r.3, r.4)).collect();
        let issued = reads.into_iter().map(|r| (r.0, r.1, r.2)).collect();
        let own = (self.issue_own(stripe, roles, issued, wants_x, &mut claims)).await;
        let at_once = own.at_once;
        let mut ok = settle_own(&mut claims, &order, own, &mut bufs);
        if wants_x && ok {
            if at_once {
                // Memory speed: the requests queued behind this one issue their reads and
                // fold straight from their own buffers before it reads their chunks for them.
                yield_once().await;
            }
            ok = self.finish_lost(stripe, roles, &slot, &mut claims).await;
        }
        ok = ok
            && self
                .fill_from_kept(&slot, &plan, &metas, &mut bufs, &mut claims)
                .await;
        if !ok {
            if let (Some(j), Some(b)) = (plan.target, claims.give_back()) {
                bufs[j] = Some(b);
            }
            drop(claims);
            return self.read_general(stripe, metas, bufs).await;
        }
        drop(claims);
        self.stripes.recent.drop_if_spent(stripe, &slot);
        let out = bufs.into_iter().map(|b| b.expect("filled")).collect();
        Ok((out, Vec::new()))
    }

    /// Issues a reader's own reads at once. When they are not ready at once and the reader
    /// wants the lost chunk (members with latency), what the fold still misses is claimed
    /// and read now, beside them, not a round trip later.
    async fn issue_own(
        &self,
        stripe: u64,
        roles: &StripeRoles,
        issued: Vec<(Source, u64, Buf)>,
        wants_lost: bool,
        claims: &mut Claims<'_>,
    ) -> OwnReads {
        let strip = self.stripes.chunks.strip;
        let mut own = std::pin::pin!(self.read_chunks(stripe, roles, issued));
        let first = futures::future::poll_fn(|cx| Poll::Ready(own.as_mut().poll(cx))).await;
        let at_once = first.is_ready();
        let (got, ahead) = match first {
            Poll::Ready(got) => (got, Vec::new()),
            Poll::Pending if wants_lost => {
                let more = claims.slot.lock().claim_missing();
                claims.sources.extend(&more);
                let ahead_reads = scratch_reads(&more, strip);
                let (got, ahead) =
                    futures::future::join(own, self.read_chunks(stripe, roles, ahead_reads)).await;
                (got, more.into_iter().zip(ahead).collect())
            }
            Poll::Pending => (own.await, Vec::new()),
        };
        OwnReads {
            got,
            ahead,
            at_once,
        }
    }

    /// Completes the fold of the lost chunk: reads what nobody reads yet (kept for the next
    /// request), waits for what other readers in flight fold. False when the lost chunk will
    /// not come this way (a read failed; another reader's target).
    async fn finish_lost(
        &self,
        stripe: u64,
        roles: &StripeRoles,
        slot: &KeptSlot,
        claims: &mut Claims<'_>,
    ) -> bool {
        let strip = self.stripes.chunks.strip;
        loop {
            let mine = claims.target;
            let next = futures::future::poll_fn(|cx| {
                let mut st = slot.lock();
                let done = match mine {
                    true => st.finished.is_some(),
                    false => st.rows[st.lost()].is_some(),
                };
                if done {
                    return Poll::Ready(Some(Vec::new()));
                }
                if !mine && (st.target.is_some() || st.finished.is_some()) {
                    return Poll::Ready(None); // Another reader's: not kept.
                }
                let more = st.claim_missing();
                if more.is_empty() {
                    st.wait(cx.waker());
                    return Poll::Pending;
                }
                Poll::Ready(Some(more))
            })
            .await;
            let Some(more) = next else {
                return false;
            };
            if more.is_empty() {
                return true;
            }
            claims.sources.extend(&more);
            let got = self
                .read_chunks(stripe, roles, scratch_reads(&more, strip))
                .await;
            if got.iter().any(Option::is_none) {
                return false;
            }
            let ahead = more.into_iter().zip(got).collect();
            publish(slot, claims, &[], &mut [], ahead);
        }
    }

    /// The request's buffers once its reads are folded: pieces of kept chunks copied (after
    /// waiting for those another reader brings), the lost chunk taken or copied. False when
    /// a chunk awaited will not be kept (its reader failed).
    async fn fill_from_kept(
        &self,
        slot: &KeptSlot,
        plan: &FoldPlan,
        metas: &[ParityPiece],
        bufs: &mut [Option<Buf>],
        claims: &mut Claims<'_>,
    ) -> bool {
        let strip = self.stripes.chunks.strip;
        for (j, (p, step)) in metas.iter().zip(&plan.steps).enumerate() {
            let i = p.data_index;
            if *step == Step::Lost && plan.target == Some(j) {
                let mut st = slot.lock();
                bufs[j] = st.finished.take();
                st.target = None;
                claims.target = false;
                continue;
            }
            if matches!(step, Step::Straight { .. }) {
                continue;
            }
            let src = match futures::future::poll_fn(|cx| {
                let mut st = slot.lock();
                if let Some(r) = &st.rows[i] {
                    return Poll::Ready(Some(r.clone()));
                }
                if st.reading(Source::Data(i)) != Reading::Scratch {
                    return Poll::Ready(None);
                }
                st.wait(cx.waker());
                Poll::Pending
            })
            .await
            {
                Some(src) => src,
                None => return false,
            };
            let at = p.in_chunk as usize;
            let b = bufs[j].as_mut().expect("the caller's buffer");
            b.copy_from_slice(&src[at..at + p.len as usize]);
            if p.in_chunk + p.len == strip {
                // Read to its end: a sequential reader wants it no more.
                slot.lock().rows[i] = None;
            }
        }
        true
    }

    /// The general path for a folding read that cannot finish by folding: every piece read
    /// (and rebuilt) afresh into its buffer.
    async fn read_general(
        &self,
        stripe: u64,
        metas: Vec<ParityPiece>,
        bufs: Vec<Option<Buf>>,
    ) -> VolumeResult<(Vec<Buf>, Vec<Repair>)> {
        let pieces = metas
            .into_iter()
            .zip(bufs)
            .map(|(p, b)| (p, b.unwrap_or_else(|| Buf::new(p.len as usize))))
            .collect();
        self.read_stripe_pieces(stripe, pieces, None).await
    }

    /// Reads chunks of `stripe` concurrently (source, offset in the chunk, buffer): each
    /// buffer back, or `None` where its read failed.
    async fn read_chunks(
        &self,
        stripe: u64,
        roles: &StripeRoles,
        reads: Vec<(Source, u64, Buf)>,
    ) -> Vec<Option<Buf>> {
        let base = self.stripes.chunks.layout.chunk_offset(stripe);
        let child = |s: Source| match s {
            Source::Data(i) => roles.data[i],
            Source::P => roles.p,
        };
        join_all(
            reads
                .into_iter()
                .map(|(s, at, b)| self.stripes.chunks.children[child(s)].read(base + at, b)),
        )
        .await
        .into_iter()
        .map(Result::ok)
        .collect()
    }
}

/// Claims a reader holds on a stripe's [`Kept`]: given back when dropped unfolded (a read
/// failed, or the request was dropped), so no other reader waits for them forever.
struct Claims<'a> {
    slot: &'a KeptSlot,
    /// Sources claimed and not folded yet.
    sources: Vec<Source>,
    /// Whether the reader's buffer is the fold's target (given, not taken back yet).
    target: bool,
}

impl<'a> Claims<'a> {
    fn new(slot: &'a KeptSlot) -> Self {
        Claims {
            slot,
            sources: Vec::new(),
            target: false,
        }
    }

    /// Plans the reader's steps over the kept stripe ([`plan_fold`]) under its lock, holding
    /// the claims the plan takes; a whole lost chunk wanted hands its buffer (out of `bufs`)
    /// to the fold as its target. `None`, nothing claimed: the general path serves it.
    fn plan(
        &mut self,
        metas: &[ParityPiece],
        bufs: &mut [Option<Buf>],
        strip: u64,
    ) -> Option<FoldPlan> {
        let mut st = self.slot.lock();
        let plan = plan_fold(&mut st, metas, strip)?;
        self.sources.clone_from(&plan.claimed);
        if let Some(j) = plan.target {
            st.target = bufs[j].take();
            self.target = true;
        }
        Some(plan)
    }

    /// Gives every claim back; the reader's target buffer, if the fold held it.
    fn give_back(&mut self) -> Option<Buf> {
        if self.sources.is_empty() && !self.target {
            return None;
        }
        let given = self.slot.lock().release(&self.sources, self.target);
        self.sources.clear();
        self.target = false;
        given
    }
}

impl Drop for Claims<'_> {
    fn drop(&mut self) {
        self.give_back();
    }
}

/// A reader's own reads ([`own_reads`]) once issued: the buffers back in their order
/// (`None` where a read failed), the chunks read ahead beside them, and whether they were
/// ready at once (memory speed).
struct OwnReads {
    got: Vec<Option<Buf>>,
    ahead: Vec<AheadRead>,
    at_once: bool,
}

/// Folds a reader's own reads (`order` matches `own.got`) and keeps what they bring, unless
/// one failed, then hands the request's buffers back into `bufs` (a failed read's is lost:
/// the general path allocates it again). False when a read failed.
fn settle_own(
    claims: &mut Claims<'_>,
    order: &[(Source, Option<usize>, bool)],
    own: OwnReads,
    bufs: &mut [Option<Buf>],
) -> bool {
    let OwnReads { mut got, ahead, .. } = own;
    let failed = got
        .iter()
        .chain(ahead.iter().map(|a| &a.1))
        .any(Option::is_none);
    if !failed {
        let mut read: Vec<Buf> = got.drain(..).flatten().collect();
        let slot = claims.slot;
        publish(slot, claims, order, &mut read, ahead);
        got = read.into_iter().map(Some).collect();
    }
    for ((_, j, _), b) in order.iter().zip(got) {
        if let (Some(j), Some(b)) = (j, b) {
            bufs[*j] = Some(b);
        }
    }
    !failed
}

/// Folds what a reader read into the stripe's fold and keeps the whole chunks read for the
/// next request: `order` (source, piece, fold) matches `got`, the reads into the request's
/// buffers; `ahead` are chunks read into kept buffers (all folded, data chunks kept).
fn publish(
    slot: &KeptSlot,
    claims: &mut Claims<'_>,
    order: &[(Source, Option<usize>, bool)],
    got: &mut [Buf],
    ahead: Vec<AheadRead>,
) {
    let ahead: Vec<(Source, SharedBuf)> = ahead
        .into_iter()
        .map(|(s, b)| (s, b.expect("read").freeze()))
        .collect();
    // Reads of whole chunks into scratch for a part (no piece of their own, or P): folded,
    // data chunks kept too.
    let scratch: Vec<(Source, SharedBuf)> = order
        .iter()
        .zip(got.iter_mut())
        .filter(|((_, j, _), _)| j.is_none())
        .map(|((s, _, _), b)| (*s, std::mem::replace(b, Buf::new(0)).freeze()))
        .collect();
    let mut sources: Vec<(Source, &[u8])> = Vec::with_capacity(order.len() + ahead.len());
    for ((s, j, fold), b) in order.iter().zip(got.iter()) {
        if *fold && j.is_some() {
            sources.push((*s, &b[..]));
        }
    }
    let mut keep: Vec<(usize, SharedBuf)> = Vec::new();
    for (s, b) in scratch.iter().chain(&ahead) {
        sources.push((*s, &b[..]));
        if let Source::Data(i) = s {
            keep.push((*i, b.clone()));
        }
    }
    let mut st = slot.lock();
    for (i, b) in keep {
        st.rows[i] = Some(b);
    }
    if sources.is_empty() {
        st.wake();
    } else {
        st.contribute(&sources);
    }
    claims
        .sources
        .retain(|c| !sources.iter().any(|(s, _)| s == c));
}

/// What a reader does for one piece of a stripe being folded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    /// Copied out of a kept chunk (kept now, or brought by another reader).
    Copy,
    /// Read straight into its buffer; a whole chunk the fold misses is folded (`fold`).
    Straight { fold: bool },
    /// Its whole chunk read into a kept buffer and folded, the piece copied out of it.
    Scratch,
    /// A piece of the lost chunk: rebuilt by the fold.
    Lost,
}

/// A reader's plan over a stripe's [`Kept`]: a step per piece, the sources it claimed, and
/// the piece whose buffer becomes the fold's target (the lost chunk wanted whole).
#[derive(Debug, PartialEq)]
struct FoldPlan {
    steps: Vec<Step>,
    claimed: Vec<Source>,
    target: Option<usize>,
}

/// Decides each piece's [`Step`] and takes the claims (pure over `kept`). `None`, with no
/// claim taken: another reader's buffer is the fold's target and this one wants the lost
/// chunk too (overlapping requests) — the general path serves it.
fn plan_fold(kept: &mut Kept, metas: &[ParityPiece], strip: u64) -> Option<FoldPlan> {
    let x = kept.fold_mut().lost();
    // Decided before any claim: a claim left behind is folded by nobody, and the target's
    // reader would wait for it forever, holding the stripe's lock.
    let wants_lost = metas.iter().any(|p| p.data_index == x) && kept.rows[x].is_none();
    if wants_lost && (kept.target.is_some() || kept.finished.is_some()) {
        return None;
    }
    let mut plan = FoldPlan {
        steps: Vec::with_capacity(metas.len()),
        claimed: Vec::new(),
        target: None,
    };
    for (j, p) in metas.iter().enumerate() {
        let (i, whole) = (p.data_index, p.in_chunk == 0 && p.len == strip);
        let s = Source::Data(i);
        let step = if kept.rows[i].is_some() {
            Step::Copy
        } else if i == x {
            if whole {
                plan.target = Some(j);
            }
            Step::Lost
        } else if kept.reading(s) == Reading::Scratch {
            Step::Copy
        } else if kept.folded(s) || kept.reading(s) == Reading::Own {
            Step::Straight { fold: false }
        } else if whole {
            kept.claim(s, Reading::Own);
            plan.claimed.push(s);
            Step::Straight { fold: true }
        } else {
            kept.claim(s, Reading::Scratch);
            plan.claimed.push(s);
            Step::Scratch
        };
        plan.steps.push(step);
    }
    if plan.steps.contains(&Step::Lost)
        && !kept.folded(Source::P)
        && kept.reading(Source::P) == Reading::Idle
    {
        kept.claim(Source::P, Reading::Own);
        plan.claimed.push(Source::P);
    }
    Some(plan)
}

/// The reads a plan issues at once: (source, offset in the chunk, buffer, the piece it fills
/// when read into the request's buffer, whether folded).
type OwnRead = (Source, u64, Buf, Option<usize>, bool);

fn own_reads(
    metas: &[ParityPiece],
    bufs: &mut [Option<Buf>],
    plan: &FoldPlan,
    strip: u64,
) -> Vec<OwnRead> {
    let mut reads = Vec::new();
    for (j, (p, step)) in metas.iter().zip(&plan.steps).enumerate() {
        let s = Source::Data(p.data_index);
        match step {
            Step::Straight { fold } => {
                let b = bufs[j].take().expect("each piece once");
                reads.push((s, p.in_chunk, b, Some(j), *fold));
            }
            Step::Scratch => reads.push((s, 0, Buf::new(strip as usize), None, true)),
            Step::Copy | Step::Lost => {}
        }
    }
    if plan.claimed.contains(&Source::P) {
        reads.push((Source::P, 0, Buf::new(strip as usize), None, true));
    }
    reads
}

/// A chunk read ahead into a kept buffer: the buffer, or `None` where the read failed.
type AheadRead = (Source, Option<Buf>);

/// Whole-chunk reads into fresh (pooled) buffers of `sources`.
fn scratch_reads(sources: &[Source], strip: u64) -> Vec<(Source, u64, Buf)> {
    sources
        .iter()
        .map(|&s| (s, 0, Buf::new(strip as usize)))
        .collect()
}

/// A future pending once (its waker woken at once): the executor polls the tasks queued
/// before it first.
async fn yield_once() {
    let mut yielded = false;
    futures::future::poll_fn(|cx| {
        if yielded {
            return Poll::Ready(());
        }
        yielded = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    })
    .await;
}

/// Whether a data chunk of the stripe (not only a parity chunk) is among the `lost` children.
fn data_lost(roles: &StripeRoles, lost: &[bool]) -> bool {
    (0..lost.len()).any(|c| lost[c] && roles.data_index_of(c).is_some())
}

/// Data indices of the chunks `pieces` read to their end.
fn ended_chunks<'a>(pieces: impl Iterator<Item = &'a ParityPiece>, strip: u64) -> Vec<usize> {
    pieces
        .filter(|p| p.in_chunk + p.len == strip)
        .map(|p| p.data_index)
        .collect()
}

/// Whether a stripe can be read by folding ([`Reader::read_folding`]): one data chunk lost,
/// which P (readable) rebuilds. The lost data chunk's index, if so.
fn fold_target(roles: &StripeRoles, lost: &[bool]) -> Option<usize> {
    if lost[roles.p] {
        return None;
    }
    let mut lost_data = (0..roles.data.len()).filter(|&i| lost[roles.data[i]]);
    let x = lost_data.next()?;
    lost_data.next().is_none().then_some(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn piece(data_index: usize, in_chunk: u64, len: u64) -> ParityPiece {
        ParityPiece {
            logical: 0,
            stripe: 0,
            data_index,
            child: data_index,
            in_chunk,
            len,
        }
    }

    #[test]
    fn own_reads_are_folded_only_when_all_read_and_the_buffers_always_come_back() {
        let strip = 4096;
        let metas = [piece(0, 0, strip)];
        for read_ok in [true, false] {
            let slot: KeptSlot =
                std::sync::Arc::new(parking_lot::Mutex::new(Kept::new(3, Some(2))));
            let mut claims = Claims::new(&slot);
            let mut bufs = vec![Some(Buf::new(strip as usize))];
            let plan = claims.plan(&metas, &mut bufs, strip).unwrap();
            let reads = own_reads(&metas, &mut bufs, &plan, strip);
            let order: Vec<_> = reads.iter().map(|r| (r.0, r.3, r.4)).collect();
            assert_eq!(order, vec![(Source::Data(0), Some(0), true)]);
            let got = reads.into_iter().map(|r| read_ok.then_some(r.2)).collect();
            let own = OwnReads {
                got,
                ahead: Vec::new(),
                at_once: true,
            };
            assert_eq!(settle_own(&mut claims, &order, own, &mut bufs), read_ok);
            // A read's buffer back in its place; a failed one's lost (allocated again).
            assert_eq!(bufs[0].is_some(), read_ok);
            assert_eq!(slot.lock().folded(Source::Data(0)), read_ok);
            // Folded: no claim left; failed: the claim given back when the reader lets go.
            assert_eq!(claims.sources.is_empty(), read_ok);
            drop(claims);
            assert_eq!(slot.lock().reading(Source::Data(0)), Reading::Idle);
        }
    }

    #[test]
    fn readers_of_a_stripe_claim_each_chunk_once_and_one_waits_for_the_lost_one() {
        let strip = 4096;
        let mut kept = Kept::new(4, Some(1));
        // The request before: its whole chunk read into its buffer and folded.
        let z = plan_fold(&mut kept, &[piece(0, 0, strip)], strip).unwrap();
        assert_eq!(z.steps, vec![Step::Straight { fold: true }]);
        assert_eq!((z.claimed, z.target), (vec![Source::Data(0)], None));
        // The one that wants the lost chunk whole (and part of the next): the fold's target,
        // the part's chunk read whole into a kept buffer, and P.
        let a = plan_fold(&mut kept, &[piece(1, 0, strip), piece(2, 0, 100)], strip).unwrap();
        assert_eq!(a.steps, vec![Step::Lost, Step::Scratch]);
        assert_eq!(a.claimed, vec![Source::Data(2), Source::P]);
        assert_eq!(a.target, Some(0));
        kept.target = Some(Buf::new(strip as usize));
        // The one behind: chunk 2 comes kept, chunk 3 straight; chunk 0, which the first
        // reads and folds, straight again, not folded twice.
        let b = plan_fold(
            &mut kept,
            &[
                piece(2, 100, strip - 100),
                piece(3, 0, strip),
                piece(0, 0, strip),
            ],
            strip,
        )
        .unwrap();
        assert_eq!(
            b.steps,
            vec![
                Step::Copy,
                Step::Straight { fold: true },
                Step::Straight { fold: false }
            ]
        );
        assert_eq!(b.claimed, vec![Source::Data(3)]);
        assert!(kept.claim_missing().is_empty(), "every source claimed");
        // Another reader wanting the lost chunk while it is a reader's target: the general
        // path serves it.
        assert!(plan_fold(&mut kept, &[piece(1, 0, 100)], strip).is_none());
        // Also with a piece before it it would otherwise claim: nothing is left claimed,
        // or the target's reader would wait for that chunk forever.
        let mut two = Kept::new(3, Some(2));
        two.target = Some(Buf::new(strip as usize));
        let early = [piece(1, 100, strip - 100), piece(2, 0, 100)];
        assert!(plan_fold(&mut two, &early, strip).is_none());
        assert_eq!(two.reading(Source::Data(1)), Reading::Idle);
        assert_eq!(
            two.claim_missing(),
            vec![Source::Data(0), Source::Data(1), Source::P]
        );
        // Once rebuilt and kept, a piece of it is copied.
        kept.target = None;
        kept.rows[1] = Some(Buf::new(strip as usize).freeze());
        let c = plan_fold(&mut kept, &[piece(1, 0, 100)], strip).unwrap();
        assert_eq!((c.steps, c.claimed), (vec![Step::Copy], vec![]));
    }
}
