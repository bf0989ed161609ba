//! Sequential degraded reads: a read that rebuilds a stripe whole for the next request
//! (`rebuild_ahead`), keeps the few last rebuilt stripes, and folds whole chunks a request
//! reads into the stripe's one lost data chunk while they are in cache (`read_folding`).

use super::super::recent::{Fold, Kept, Source};
use super::*;

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
    /// kept of the stripe ([`Kept`]): pieces of kept chunks are copied; whole chunks are read
    /// straight into the request's buffers, parts of chunks as whole chunks kept for the next
    /// request; every chunk read is folded into the stripe's [`Fold`]; a request that wants
    /// `x` also reads what the fold still misses, and keeps `x`. Sequential requests then
    /// read each surviving chunk once, mostly into the buffer that wants it, and XOR it while
    /// it is still in the cache. A read error hands the stripe to
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
        // One reader at a time rebuilds the stripe; the next finds what it kept.
        let _claim = self.stripes.recent.claim(stripe).await;
        let Kept { mut rows, fold } = self.stripes.recent.take(stripe).unwrap_or(Kept {
            rows: vec![None; k],
            fold: None,
        });
        let mut fold = fold
            .filter(|f| f.lost() == x)
            .unwrap_or_else(|| Fold::new(k, x));
        let (metas, mut bufs): (Vec<ParityPiece>, Vec<Option<Buf>>) =
            pieces.into_iter().map(|(p, b)| (p, Some(b))).unzip();
        let wants_x = rows[x].is_none() && metas.iter().any(|p| p.data_index == x);
        let reads = fold_reads(&metas, &mut bufs, &rows, &mut fold, wants_x, strip);
        let (got, failed) = self.read_sources(stripe, roles, reads).await;
        if failed {
            // The general path reads again, names the errors and repairs; nothing is kept.
            for (_, j, b) in got {
                if let Some(j) = j {
                    bufs[j] = Some(b);
                }
            }
            let pieces = metas
                .into_iter()
                .zip(bufs)
                .map(|(p, b)| (p, b.unwrap_or_else(|| Buf::new(p.len as usize))))
                .collect();
            return self.read_stripe_pieces(stripe, pieces, None).await;
        }
        let sources: Vec<(Source, &[u8])> = got.iter().map(|(s, _, b)| (*s, &b[..])).collect();
        let mut filled = vec![false; metas.len()];
        // The lost chunk wanted whole: the fold so far and what was just read, straight into
        // the request's buffer in one pass (neither kept nor copied; the reader is past it).
        let x_whole = metas
            .iter()
            .position(|p| p.data_index == x && p.in_chunk == 0 && p.len == strip)
            .filter(|_| wants_x);
        match x_whole {
            Some(jx) => {
                let done = std::mem::replace(&mut fold, Fold::new(k, x));
                done.finish_into(&sources, bufs[jx].as_mut().expect("the caller's buffer"));
                filled[jx] = true;
            }
            None => fold.absorb(&sources),
        }
        for (s, j, b) in got {
            match (j, s) {
                (Some(j), _) => {
                    bufs[j] = Some(b);
                    filled[j] = true;
                }
                (None, Source::Data(i)) => rows[i] = Some(b.freeze()),
                (None, Source::P) => {}
            }
        }
        if wants_x && x_whole.is_none() {
            let done = std::mem::replace(&mut fold, Fold::new(k, x));
            rows[x] = Some(done.into_rows().expect("every source folded").freeze());
        }
        for ((p, b), _) in metas
            .iter()
            .zip(bufs.iter_mut())
            .zip(&filled)
            .filter(|(_, f)| !**f)
        {
            let at = p.in_chunk as usize;
            let src = rows[p.data_index].as_ref().expect("kept, read or rebuilt");
            let b = b.as_mut().expect("the caller's buffer");
            b.copy_from_slice(&src[at..at + p.len as usize]);
            if p.in_chunk + p.len == strip {
                // Read to its end: a sequential reader wants it no more.
                rows[p.data_index] = None;
            }
        }
        let fold = (!fold.is_empty()).then_some(fold);
        if fold.is_some() || rows.iter().any(Option::is_some) {
            self.stripes.recent.put_kept(stripe, Kept { rows, fold });
        }
        let out = bufs.into_iter().map(|b| b.expect("filled")).collect();
        Ok((out, Vec::new()))
    }

    /// Issues a fold's reads of whole chunks of `stripe` concurrently: those that succeeded,
    /// and whether any failed.
    async fn read_sources(
        &self,
        stripe: u64,
        roles: &StripeRoles,
        reads: Vec<(Source, Option<usize>, Buf)>,
    ) -> (Vec<(Source, Option<usize>, Buf)>, bool) {
        let base = self.stripes.chunks.layout.chunk_offset(stripe);
        let child = |s: Source| match s {
            Source::Data(i) => roles.data[i],
            Source::P => roles.p,
        };
        let meta: Vec<(Source, Option<usize>)> = reads.iter().map(|r| (r.0, r.1)).collect();
        let results = join_all(
            reads
                .into_iter()
                .map(|(s, _, b)| self.stripes.chunks.children[child(s)].read(base, b)),
        )
        .await;
        let mut got = Vec::with_capacity(meta.len());
        let mut failed = false;
        for ((s, j), r) in meta.into_iter().zip(results) {
            match r {
                Ok(b) => got.push((s, j, b)),
                Err(_) => failed = true,
            }
        }
        (got, failed)
    }
}

/// Whether a data chunk of the stripe (not only a parity chunk) is among the `lost` children.
fn data_lost(roles: &StripeRoles, lost: &[bool]) -> bool {
    (0..lost.len()).any(|c| lost[c] && roles.data_index_of(c).is_some())
}

/// The whole-chunk reads of a [`Reader::read_folding`]: (source, the piece it fills when the
/// piece is that whole chunk, else `None`: kept in `rows`). Pieces of kept chunks read
/// nothing; when the request wants the lost chunk (`wants_x`), the kept chunks are folded
/// and every source the fold still misses is read.
fn fold_reads(
    metas: &[ParityPiece],
    bufs: &mut [Option<Buf>],
    rows: &[Option<SharedBuf>],
    fold: &mut Fold,
    wants_x: bool,
    strip: u64,
) -> Vec<(Source, Option<usize>, Buf)> {
    let x = fold.lost();
    let mut reads: Vec<(Source, Option<usize>, Buf)> = Vec::new();
    for (j, p) in metas.iter().enumerate() {
        let i = p.data_index;
        if i == x || rows[i].is_some() {
            continue;
        }
        if p.in_chunk == 0 && p.len == strip {
            let b = bufs[j].take().expect("each piece once");
            reads.push((Source::Data(i), Some(j), b));
        } else if !reads.iter().any(|r| r.0 == Source::Data(i)) {
            reads.push((Source::Data(i), None, Buf::new(strip as usize)));
        }
    }
    if wants_x {
        let kept: Vec<(Source, &[u8])> = (0..rows.len())
            .filter(|&i| i != x)
            .filter_map(|i| rows[i].as_ref().map(|r| (Source::Data(i), &r[..])))
            .collect();
        fold.absorb(&kept);
        for s in fold.missing() {
            if !reads.iter().any(|r| r.0 == s) {
                reads.push((s, None, Buf::new(strip as usize)));
            }
        }
    }
    reads
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
