//! The whole stripes of a write-back request, healthy and without a log, written straight:
//! each stripe's data chunks, then P (and Q) generated from them while they are in the CPU
//! cache — the member writes the per-stripe path (`write.rs`) makes for such a stripe, in the
//! same order, without its per-stripe planning (plan, per-attempt health, the new chunks
//! assembled, the plan followed), which a full-stripe write on 4 and 8 members of 64 KiB
//! paid ~5% for (docs/benchmarks, issue 36). The per-stripe path stays the one for logs,
//! lost children, wide stripes (whose parity folds in groups) and errors: a run this does
//! not take, or whose writes fail, goes there stripe by stripe (`ParityCore::write_whole_run`).

use super::*;

impl StripeWriter<'_> {
    /// Writes stripes `first ..` whole (`data[j]`: stripe `first + j`'s bytes, one stripe
    /// width each) with P (and Q) generated from them, the caller holding the stripes'
    /// exclusive lock. `None` when the run is not taken — a partial-parity log, a child that
    /// cannot serve the rows, a stripe whose parity folds in groups — before anything is
    /// written; else the first child's error, if any (the stripes are then partly written,
    /// and the caller writes them again one by one).
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
        // Wide stripes fold their parity in groups (`write_folding_parity`): not here.
        let one_pass = !(2..chunks.k).contains(&super::write::fold_group(strip as usize));
        if stripes.ppl.is_some() || !served || !one_pass {
            return None;
        }
        let mut results = Vec::new();
        let mut in_flight = Vec::new();
        for (s, bytes) in (first..).zip(data) {
            stripes.assert_exclusive(s, "a write");
            stripes.recent.forget(s);
            let roles = chunks.layout.roles(s);
            let at = chunks.layout.chunk_offset(s);
            let news: Vec<SharedBuf> = (0..chunks.k as u64)
                .map(|i| bytes.slice((i * strip) as usize..((i + 1) * strip) as usize))
                .collect();
            // The data first: a member that copies on submission pulls the stripe into the
            // CPU cache, where parity then reads it (as `write_regenerated`).
            let mut writes = join_all(
                (roles.data.iter().zip(&news))
                    .map(|(&c, b)| chunks.children[c].write(at, b.clone(), fua)),
            );
            match futures::poll!(&mut writes) {
                std::task::Poll::Ready(done) => results.extend(done),
                std::task::Poll::Pending => in_flight.push(writes),
            }
            let (p, q) = chunks.parity_of(&roles, &news);
            let mut parity = vec![chunks.children[roles.p].write(at, p.freeze(), fua)];
            if let (Some(c), Some(q)) = (roles.q, q) {
                parity.push(chunks.children[c].write(at, q.freeze(), fua));
            }
            let mut parity = join_all(parity);
            match futures::poll!(&mut parity) {
                std::task::Poll::Ready(done) => results.extend(done),
                std::task::Poll::Pending => in_flight.push(parity),
            }
        }
        results.extend(join_all(in_flight).await.into_iter().flatten());
        if let Some(e) =
            crate::node::first_error(results.into_iter().filter_map(Result::err).collect())
        {
            return Some(Err(e));
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
}
