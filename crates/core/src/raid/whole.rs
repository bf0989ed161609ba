//! The whole stripes of a write-back request, healthy, written straight:
//! each stripe's data chunks, then P (and Q) generated from them while they are in the CPU
//! cache (a wide stripe's a group of chunks at a time, as `write_folding_parity` folds them)
//! — the member writes the per-stripe path (`write.rs`) makes for such a stripe, in the same
//! order, without its per-stripe planning (plan, per-attempt health, the new chunks
//! assembled, the plan followed), which full-stripe writes of 64 KiB strips paid 0.02–0.04 of
//! the ideal for (docs/benchmarks, issue 36). A whole stripe needs no log entry of its own;
//! the bands a log may still replay over it are settled first. The per-stripe path stays
//! the one for lost children and errors: a run this does not take, or whose writes fail,
//! goes there stripe by stripe (`ParityCore::write_whole_run`).

use super::*;
use crate::ppl::Settled;

impl StripeWriter<'_> {
    /// Writes stripes `first ..` whole (`data[j]`: stripe `first + j`'s bytes, one stripe
    /// width each) with P (and Q) generated from them, the caller holding the stripes'
    /// exclusive lock. `None` when the run is not taken — a child that cannot serve the
    /// rows — before anything is written; else the log's or the first child's error, if any
    /// (the stripes are then unwritten or partly written, and the caller writes them again
    /// one by one).
    pub(super) async fn write_whole_stripes(
        &self,
        first: u64,
        data: &[SharedBuf],
        fua: bool,
    ) -> Option<VolumeResult<()>> {
        let stripes = self.stripes;
        let chunks = &stripes.chunks;
        let (strip, count) = (chunks.strip, data.len() as u64);
        let served = (first..first + count).all(|s| !chunks.lost(s, 0, strip).contains(&true));
        if !served {
            return None;
        }
        for s in first..first + count {
            stripes.assert_exclusive(s, "a write");
        }
        // A whole stripe leaves no chunk's old bytes to protect: it logs nothing of its own
        // (as `Log::prepare` finds), but what a ring may still replay over these stripes is
        // settled first, as zeroing does — a round's worth of stripes at a time, each piece
        // written before the next is settled (`GroupLog::settle_whole`). A log that cannot
        // take that writes nothing more.
        let end = first + count;
        let mut at = first;
        while at < end {
            let (held, upto) = match &stripes.ppl {
                Some(log) => match log.settle_whole(at, end).await {
                    Settled { hold: Ok(h), end } => (Some(h), end),
                    // Written one by one by the caller, each stripe through the log.
                    Settled { hold: Err(e), .. } => return Some(Err(e.into_error())),
                },
                None => (None, end),
            };
            let piece = &data[(at - first) as usize..(upto - first) as usize];
            if let Some(e) = self.write_whole_piece(at, piece, fua).await {
                return Some(Err(e));
            }
            drop(held);
            at = upto;
        }
        // As `settle` for a whole stripe regenerated without errors.
        for s in first..first + count {
            // Parity not trusted before (`stripe_write`'s `parity_trusted`): consistent now.
            if !stripes.health.in_sync(s) || stripes.health.is_stale(s) {
                stripes.health.mark_consistent(s..s + 1);
            }
            stripes.health.mark_in_sync(s);
        }
        Some(Ok(()))
    }

    /// Writes stripes `first ..` whole (`data[j]`: stripe `first + j`), data chunks then P
    /// (and Q) folded from them, and waits for every member write: the first error, if any.
    async fn write_whole_piece(
        &self,
        first: u64,
        data: &[SharedBuf],
        fua: bool,
    ) -> Option<VolumeError> {
        let chunks = &self.stripes.chunks;
        let strip = chunks.strip;
        let mut results = Vec::new();
        let mut in_flight = Vec::new();
        for (s, bytes) in (first..).zip(data) {
            self.stripes.recent.forget(s);
            let roles = chunks.layout.roles(s);
            let at = chunks.layout.chunk_offset(s);
            let news: Vec<SharedBuf> = (0..chunks.k as u64)
                .map(|i| bytes.slice((i * strip) as usize..((i + 1) * strip) as usize))
                .collect();
            // The data first: a member that copies on submission pulls the stripe into the
            // CPU cache, where parity then reads it (as `write_regenerated`); a wide stripe
            // a group of chunks at a time, folded right after (as `write_folding_parity`).
            let group = match super::write::fold_group(strip as usize) {
                g if (2..chunks.k).contains(&g) => g,
                _ => chunks.k, // one pass (below 2, one pass does as well)
            };
            let order = chunks.slot_order(&roles);
            let mut fold = chunks.parity_fold();
            for first_slot in (0..chunks.k).step_by(group) {
                let slots = first_slot..(first_slot + group).min(chunks.k);
                let writes = slots.clone().map(|slot| {
                    let i = order[slot];
                    chunks.children[roles.data[i]].write(at, news[i].clone(), fua)
                });
                submit(writes.collect(), &mut results, &mut in_flight);
                let srcs: Vec<&[u8]> = slots.map(|slot| &news[order[slot]][..]).collect();
                fold.fold(first_slot, &srcs);
            }
            let (p, q) = fold.finish();
            let mut parity = vec![chunks.children[roles.p].write(at, p.freeze(), fua)];
            if let (Some(c), Some(q)) = (roles.q, q) {
                parity.push(chunks.children[c].write(at, q.freeze(), fua));
            }
            submit(parity, &mut results, &mut in_flight);
        }
        results.extend(join_all(in_flight).await.into_iter().flatten());
        crate::node::first_error(results.into_iter().filter_map(Result::err).collect())
    }
}

/// Member writes issued together and polled once, so a member that copies on submission
/// copies now: their results if done, else the writes kept in `in_flight` to wait for.
fn submit<'a>(
    writes: Vec<BoxFuture<'a, VolumeResult<()>>>,
    results: &mut Vec<VolumeResult<()>>,
    in_flight: &mut Vec<futures::future::JoinAll<BoxFuture<'a, VolumeResult<()>>>>,
) {
    let mut writes = join_all(writes);
    match (&mut writes).now_or_never() {
        Some(done) => results.extend(done),
        None => in_flight.push(writes),
    }
}
