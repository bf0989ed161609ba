//! The group's request entry points, in the order a request meets the parts: the stripe
//! lock, the write-back cache ([`Destager`]), the write-through joiner (`join.rs`), then the
//! members through the [`StripeWriter`] (writes) or the [`Reader`] (reads); zeroing.

use super::*;

impl ParityCore {
    /// A read of the group: under the stripes' shared lock, from the cache when it holds
    /// every byte, else from the members (rebuilding what is lost) with the cache's dirty
    /// bytes laid over; chunks that returned read errors are counted toward their members'
    /// `max_read_errors` and rewritten afterwards, each under its stripe's exclusive lock.
    pub(super) async fn read(&self, offset: u64, buf: Buf) -> VolumeResult<Buf> {
        let len = buf.len() as u64;
        let g = self.stripes.lock_stripes(offset, len, false).await;
        let cache = self.cache.as_ref();
        if cache.is_some_and(|c| c.covers(&self.stripes.chunks, offset, len)) {
            let mut buf = buf;
            if let Some(c) = cache {
                c.overlay(&self.stripes.chunks, offset, &mut buf);
            }
            return Ok(buf);
        }
        let (mut buf, repairs) = self.stripes.reader().read_members(offset, buf).await?;
        if let Some(c) = cache {
            c.overlay(&self.stripes.chunks, offset, &mut buf);
        }
        drop(g);
        let reader = self.stripes.reader();
        reader.count_corrected(&repairs);
        for r in repairs {
            if reader.repair(r).await {
                self.repairs.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(buf)
    }

    /// A write of the group: under the stripes' exclusive lock, each stripe's bytes go to
    /// the write-back cache, are left to a writer queued behind (`join`), or are written to
    /// the members through [`StripeWriter::write_stripe`] (`write.rs`: plan, log, member I/O).
    pub(super) async fn write(&self, offset: u64, data: SharedBuf, fua: bool) -> VolumeResult<()> {
        let len = data.len() as u64;
        let stripes = &self.stripes;
        self.make_room(len).await;
        // Write-through: this write counts as in flight for the hold rule (`join`).
        let arrival = self
            .cache
            .is_none()
            .then(|| self.joins.arrive(offset, len, stripes.chunks.width()));
        let over_bound = {
            let mut g = stripes.lock_stripes(offset, len, true).await;
            if arrival.is_some() {
                self.joins.holding();
            }
            let streams = arrival.as_ref().is_some_and(|a| a.streams);
            let mut d = Dispatch::default();
            for (s, segs) in stripes.per_stripe(offset, &data) {
                match &self.cache {
                    None => self.dispatch_through(&mut d, s, segs, fua, streams),
                    Some(cache) => self.dispatch_back(&mut d, cache, s, segs, fua),
                }
            }
            if !d.whole.is_empty() {
                d.futs
                    .push(self.write_whole_run(std::mem::take(&mut d.whole), fua));
            }
            // A partial stripe at either end that only went into the cache is let go now:
            // the next sequential writer, which completes it, need not wait for this one's
            // member writes (it did, and the drives saw the writers out of order).
            let g = d.to_members.map(|(a, b)| {
                g.narrow(a, b - a + 1);
                g
            });
            let results = join_all(d.futs).await;
            drop(g);
            // Only now, holding no stripe: the writer these were left to may be queued for
            // stripes this write held too.
            let answered = join_all(
                d.left
                    .into_iter()
                    .map(|(s, a, w)| self.finish_left(s, a, w)),
            )
            .await;
            crate::node::all_ok(results.into_iter().chain(answered).collect())?;
            d.over_bound
        };
        if over_bound {
            // This write is in the cache (or on the members) either way: a stripe that cannot
            // be destaged stays cached and dirty (reads see it) and the next flush reports it.
            let destager = self.destager();
            if let Err(e) = destager.evict(0).await {
                destager.warn_failed(format_args!("eviction"), &e);
            }
        }
        Ok(())
    }

    /// Write-back: room for what a write of `len_bytes` may add to the cache (its partial
    /// stripes at either end), made before the write holds stripe locks an eviction may need.
    async fn make_room(&self, len_bytes: u64) {
        let w = self.stripes.chunks.width();
        let room_bytes = len_bytes
            .min(2 * w)
            .next_multiple_of(crate::buf::BUF_ALIGN as u64);
        if (self.cache.as_ref()).is_some_and(|c| c.needs_room(room_bytes)) {
            let destager = self.destager();
            if let Err(e) = destager.evict(room_bytes).await {
                destager.warn_failed(format_args!("eviction"), &e);
            }
        }
    }

    /// Write-through: stripe `s`'s bytes are written now (with any left by writers before)
    /// or left to a writer queued behind this one (`join`).
    fn dispatch_through<'a>(
        &'a self,
        d: &mut Dispatch<'a>,
        s: u64,
        segs: Segs,
        fua: bool,
        streams: bool,
    ) {
        let stripes = &self.stripes;
        let queued = stripes.locks.exclusive_waiter(s, 1);
        stripes.debug_assert_exclusive(s, "leaving bytes to a later writer");
        let w = stripes.chunks.width();
        match self.joins.take(s, segs, fua, w, (queued, streams)) {
            Joined::Write { segs, fua, waiters } => {
                d.goes_to_members(s);
                d.futs
                    .push(self.write_joined(s, segs, fua, waiters).boxed());
            }
            Joined::Leave(answer, wait) => d.left.push((s, answer, wait)),
        }
    }

    /// Write-back: a whole stripe joins the run written together (`whole.rs`); a partial
    /// one goes into the cache, or to the members over it ([`Self::write_back`]).
    fn dispatch_back<'a>(
        &'a self,
        d: &mut Dispatch<'a>,
        cache: &Cache,
        s: u64,
        segs: Segs,
        fua: bool,
    ) {
        if segs[0].1.len() as u64 == self.stripes.chunks.width() {
            d.goes_to_members(s);
            d.whole.extend(segs.into_iter().map(|(_, data)| (s, data)));
            return;
        }
        let (to_members_now, over) = self.write_back(cache, s, segs, fua);
        d.over_bound |= over;
        if let Some(write) = to_members_now {
            d.goes_to_members(s);
            d.futs.push(write);
        }
    }

    /// Write-back: whole stripes `run` ((stripe, its bytes), consecutive) bypass the cache
    /// and supersede their entries, as [`Self::write_back`] writes one: together, each
    /// stripe's chunks then its parity without per-stripe planning
    /// ([`StripeWriter::write_whole_stripes`]), or where that is not taken or fails, stripe
    /// by stripe (which handles lost children and errors).
    fn write_whole_run(
        &self,
        run: Vec<(u64, SharedBuf)>,
        fua: bool,
    ) -> BoxFuture<'_, VolumeResult<()>> {
        async move {
            assert!(
                run.windows(2).all(|p| p[1].0 == p[0].0 + 1),
                "a run of consecutive stripes"
            );
            let data: Vec<SharedBuf> = run.iter().map(|(_, d)| d.clone()).collect();
            let writer = self.stripes.writer();
            match writer.write_whole_stripes(run[0].0, &data, fua).await {
                Some(Ok(())) => {
                    if let Some(cache) = &self.cache {
                        let mut st = cache.state.lock();
                        for &(s, _) in &run {
                            st.remove(s);
                        }
                    }
                    return Ok(());
                }
                Some(Err(e)) => {
                    tracing::warn!("whole stripes written together: {e}; again one by one")
                }
                None => {}
            }
            let w = self.stripes.chunks.width();
            let destager = self.destager();
            let each = run
                .into_iter()
                .map(|(s, d)| destager.write_over_cache(s, vec![(0, d)], Some((0, w)), fua));
            crate::node::all_ok(join_all(each).await)
        }
        .boxed()
    }

    /// Write-back: stripe `s`'s new bytes go into the cache, or to the members over it (a
    /// whole stripe, no room for them, an entry they fill, FUA): then the member write is
    /// returned. Also whether the cache is now over its bound. The caller holds the stripe's
    /// exclusive lock.
    fn write_back(
        &self,
        cache: &Cache,
        s: u64,
        segs: Segs,
        fua: bool,
    ) -> (Option<BoxFuture<'_, VolumeResult<()>>>, bool) {
        let w = self.stripes.chunks.width();
        let destager = self.destager();
        if segs[0].1.len() as u64 == w {
            // A whole stripe bypasses the cache and supersedes its entry, which stays
            // listed until this write is on the members.
            let write = destager.write_over_cache(s, segs, Some((0, w)), fua);
            return (Some(write.boxed()), false);
        }
        let (o, d) = segs.into_iter().next().expect("one segment");
        let d = compact(d);
        // A stripe past its tolerance takes nothing: its bytes could never be destaged.
        let refused = write::refuses_writes(&self.stripes, s);
        let mut st = cache.state.lock();
        if refused || !st.admits(&d, cache.bound) {
            // No room (destaging fails, or this stripe alone exceeds the bound): write
            // it through rather than grow the cache past its bound (where the members
            // refuse it, the write answers their error).
            let mut merged = Entry::new();
            merged.segs = st
                .entries
                .get(&s)
                .map(|e| e.segs.clone())
                .unwrap_or_default();
            let newer = (o, o + d.len() as u64);
            merged.insert(o, d, None); // not cached: pins nothing
            drop(st);
            let write = destager.write_over_cache(s, merged.segs, Some(newer), fua);
            return (Some(write.boxed()), false);
        }
        let full = st.insert(s, o, d, w);
        let over_bound = st.pins.bytes > cache.bound;
        if !(full || fua) {
            return (None, over_bound);
        }
        let segs = st.entries[&s].segs.clone();
        drop(st);
        // The entry's own bytes: it stays whole if the write fails.
        let write = destager.write_over_cache(s, segs, None, fua);
        (Some(write.boxed()), over_bound)
    }

    /// Writes a union [`join::Joins::take`] handed out and answers the writers who left
    /// bytes in it; the caller holds the stripe's exclusive lock.
    pub(super) async fn write_joined(
        &self,
        s: u64,
        segs: Segs,
        fua: bool,
        waiters: Vec<oneshot::Sender<VolumeResult<()>>>,
    ) -> VolumeResult<()> {
        self.stripes
            .debug_assert_exclusive(s, "writing joined bytes");
        let r = self.destager().write_over_cache(s, segs, None, fua).await;
        for tx in waiters {
            // A writer that went away (its request dropped) needs no answer.
            let _ = tx.send(r.as_ref().map(|_| ()).map_err(VolumeError::duplicate));
        }
        r
    }

    /// Waits for the answer to bytes left on stripe `s`: after `wait`, queues for the stripe
    /// again and, if nobody wrote them meanwhile, writes them. The caller holds no stripe
    /// (not assertable: the lock table does not know its holders; a caller holding one would
    /// deadlock here, which the join tests would show).
    pub(super) async fn finish_left(
        &self,
        s: u64,
        mut answer: Answer,
        wait: Wait,
    ) -> VolumeResult<()> {
        if let Wait::Held(woken) = wait {
            // The answer, or the wake (sent or dropped: either way time to look again).
            if let Either::Left((answered, _)) = select(&mut answer, woken).await {
                return joined(s, answered);
            }
        }
        let _g = self.stripes.locks.lock(s, 1, true).await;
        match answer.try_recv() {
            Ok(Some(r)) => joined(s, Ok(r)),
            Ok(None) => {
                // Still left (our own sender is among the waiters): write them now.
                self.stripes
                    .debug_assert_exclusive(s, "writing bytes left on the stripe");
                match self.joins.reclaim(s) {
                    Joined::Write { segs, fua, waiters } => {
                        self.write_joined(s, segs, fua, waiters).await
                    }
                    Joined::Leave(..) => unreachable!("reclaimed bytes are written"),
                }
            }
            Err(oneshot::Canceled) => joined(s, Err(oneshot::Canceled)),
        }
    }

    /// Zeroes `[offset, offset+len)`: whole stripes by zeroing every child over their chunks
    /// (zero data has zero P and Q), the partial stripes at either end written as zeroes.
    pub(super) async fn zero_range(
        &self,
        offset: u64,
        len: u64,
        kind: ZeroKind,
    ) -> VolumeResult<()> {
        let w = self.stripes.chunks.width();
        let end = offset + len;
        let first_full = offset.div_ceil(w);
        let last_full = end / w; // exclusive
        let mut pieces: Vec<(u64, u64)> = Vec::new();
        let mut full_err = None;
        if first_full < last_full {
            if offset < first_full * w {
                pieces.push((offset, first_full * w - offset));
            }
            if last_full * w < end {
                pieces.push((last_full * w, end - last_full * w));
            }
            full_err = self.zero_whole_stripes(first_full, last_full, kind).await;
        } else {
            pieces.push((offset, len));
        }
        // Every piece is attempted even if one fails, so no piece is left silently old.
        let mut results = Vec::new();
        for (o, l) in pieces {
            let mut at = o;
            while at < o + l {
                let n = (o + l - at).min(w - at % w);
                results.push(
                    self.write(at, Buf::zeroed(n as usize).freeze(), false)
                        .await,
                );
                at += n;
            }
        }
        if let Some(e) = full_err {
            results.push(Err(e));
        }
        crate::node::all_ok(results)
    }

    /// Zeroes stripes `[first_full, last_full)` by zeroing every child over their chunks,
    /// under their exclusive lock. Zero data has zero parity, so the stripes stay consistent
    /// even where some child failed: the chunks that were zeroed and the parity agree. The
    /// error when more children failed than the stripes tolerate.
    async fn zero_whole_stripes(
        &self,
        first_full: u64,
        last_full: u64,
        kind: ZeroKind,
    ) -> Option<VolumeError> {
        let stripes = &self.stripes;
        let count = last_full - first_full;
        let _g = stripes.locks.lock(first_full, count, true).await;
        assert!(
            stripes.locks.holds(first_full, count, true),
            "stripes {first_full}..{last_full} zeroed without their exclusive lock"
        );
        stripes.recent.forget_range(first_full..last_full);
        // What the log may replay of these stripes is settled first, a round's worth of
        // stripes at a time, each piece zeroed before the next is settled
        // (`GroupLog::settle_whole`). A piece's entry no parity member took is one nobody
        // replays (its rings failed): that piece is zeroed as well, and the stripes after it
        // are still settled.
        let children = &stripes.chunks.children;
        // Per child, its first error.
        let mut failed: Vec<Option<VolumeError>> = children.iter().map(|_| None).collect();
        let mut at = first_full;
        while at < last_full {
            let (held, upto) = match &stripes.ppl {
                Some(log) => {
                    let settled = log.settle_whole(at, last_full).await;
                    (settled.hold.ok(), settled.end)
                }
                None => (None, last_full),
            };
            let offset = stripes.chunks.layout.chunk_offset(at);
            let n = (upto - at) * stripes.chunks.strip;
            let results = join_all(children.iter().map(|c| c.zero(offset, n, kind))).await;
            for (slot, r) in failed.iter_mut().zip(results) {
                if let (None, Err(e)) = (&slot, r) {
                    *slot = Some(e);
                }
            }
            drop(held);
            at = upto;
        }
        let errors: Vec<VolumeError> = failed.into_iter().flatten().collect();
        let failed_children = errors.len();
        let mut full_err = None;
        if !stripes.chunks.tolerates(failed_children) {
            full_err = crate::node::first_error(errors);
            // The children that took the zeroes hold them: cached bytes of these stripes
            // must not come back over them (see `write_over_cache`).
            if let Some(cache) = &self.cache {
                let mut st = cache.state.lock();
                let hit: Vec<u64> = (st.entries.keys().copied())
                    .filter(|s| (first_full..last_full).contains(s))
                    .collect();
                for s in hit {
                    st.forget(s, 0, stripes.chunks.width());
                }
            }
        } else if let Some(cache) = &self.cache {
            // The zeroes supersede cached bytes of these stripes; until they were on the
            // members the entries stayed listed (a FLUSH waited for them).
            let mut st = cache.state.lock();
            let doomed: Vec<u64> = (st.entries.keys().copied())
                .filter(|s| (first_full..last_full).contains(s))
                .collect();
            for s in doomed {
                st.remove(s);
            }
        }
        if full_err.is_none() {
            self.joins.superseded(first_full, last_full);
        }
        if failed_children == 0 {
            for s in first_full..last_full {
                stripes.health.mark_in_sync(s);
            }
            stripes.health.mark_consistent(first_full..last_full);
        }
        full_err
    }
}

/// Where one write's stripes went ([`ParityCore::write`]): the member writes to wait for,
/// the stripes left to a later writer, the whole stripes written together.
#[derive(Default)]
struct Dispatch<'a> {
    futs: Vec<BoxFuture<'a, VolumeResult<()>>>,
    /// The first and last stripe that go to the members (the others are cached).
    to_members: Option<(u64, u64)>,
    /// Write-through stripes whose bytes this write left for a later writer (`join`).
    left: Vec<(u64, Answer, Wait)>,
    /// Write-back: the whole stripes, consecutive, written together (`whole.rs`).
    whole: Vec<(u64, SharedBuf)>,
    /// Write-back: the cache is over its bound now.
    over_bound: bool,
}

impl Dispatch<'_> {
    fn goes_to_members(&mut self, s: u64) {
        self.to_members = Some(self.to_members.map_or((s, s), |(a, _)| (a, s)));
    }
}
