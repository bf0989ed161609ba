//! The write-back stripe cache: entries of the writers' own buffers, the bound in pinned
//! memory, and how entries reach the members (destage, eviction, drain) without ever leaving
//! the cache before the members have their bytes.

use super::*;
use futures::stream::StreamExt;

/// Aged stripes the background destage writes at once, at most (and no more than a drain:
/// [`Destager::width`]).
const AGED_DESTAGES_IN_FLIGHT: usize = 32;

/// Stripe bytes (every member's strip) a drain (a flush, a volume closing) destages at once.
/// Each destage holds its read buffers and log entries from its reads until its member
/// writes end, and with a log it waits there for a round. A whole cache at once (8,192
/// stripes of 4 KiB writes in the default 32 MiB) held them all, overflowed the buffer pool
/// and spent 28% of a 2-second write-back run's CPU zeroing fresh pages. A fixed 256 stripes
/// at once was still too many with a log for wide stripes, and for RAID 6 on memory-backed
/// members (whose rings then cycled through 1 MiB windows, each taking P and Q entries): the
/// entries in flight filled the rings, and the drain waited for ring room and flushed the
/// members over and over. The final flush of `nbraid bench rand-write` (6 members on
/// /dev/shm, 4 KiB writes), timed alone: RAID 6, 64 KiB strips, 490 ms of CPU (2,473 room
/// waits, 1,490 member flushes) against 265 at 42 at once (none, 177); 256 KiB strips 1,761
/// against 558 ms at 10 at once.
const DRAIN_BYTES_IN_FLIGHT: u64 = 16 << 20;
/// Fewest stripes a drain destages at once, however wide its stripes: member I/O in
/// parallel. (The budget and both bounds were chosen from two measured widths, 42 and 10,
/// not a sweep.)
const DRAIN_DESTAGES_MIN: usize = 4;
/// Most stripes a drain destages at once, however narrow its stripes.
const DRAIN_DESTAGES_MAX: usize = 256;

/// Stripes a drain destages at once where a stripe spans `stripe_bytes` over its members:
/// [`DRAIN_BYTES_IN_FLIGHT`] of them, within [`DRAIN_DESTAGES_MIN`]..=[`DRAIN_DESTAGES_MAX`].
fn drain_width(stripe_bytes: u64) -> usize {
    let fit = DRAIN_BYTES_IN_FLIGHT / stripe_bytes.max(1);
    usize::try_from(fit)
        .unwrap_or(usize::MAX)
        .clamp(DRAIN_DESTAGES_MIN, DRAIN_DESTAGES_MAX)
}

/// Stripes an eviction destages at once in a group with a partial-parity log: their entries
/// share the log's rounds (one FUA write per ring each), so an evicting writer's stripes
/// wait for one round instead of a round apiece. `ppl_cost` on /var/tmp, 4 KiB random
/// writes with an 8 MiB log reserve: 12-16% more IOPS with the log (RAID 5 and 6); with the
/// 512 KiB ring in the metadata area about even (the ring's room is the bound there).
/// Without the log one at a time measured best (4 at once: 5-15% fewer IOPS).
const LOGGED_EVICT_BATCH: usize = 4;

/// Least recently used entries an eviction chooses its victims among, the fullest first (at
/// most a quarter of the entries: see [`choose_victims`]).
const EVICT_WINDOW: usize = 256;

/// One cached stripe: its dirty bytes as segments of the writers' own buffers (no copy; a
/// later write trims the segments it overlaps), sorted and disjoint, in stripe offsets.
pub(super) struct Entry {
    pub(super) segs: Segs,
    /// Bytes in `segs`.
    pub(super) bytes: u64,
    /// LRU tick of the last write.
    pub(super) used: u64,
    /// Chosen by an evictor (so two do not pick the same stripe).
    pub(super) busy: bool,
    /// When the stripe first became dirty.
    pub(super) since: Instant,
}

impl Entry {
    /// No bytes yet, dirty since now.
    pub(super) fn new() -> Entry {
        Entry {
            segs: Segs::new(),
            bytes: 0,
            used: 0,
            busy: false,
            since: Instant::now(),
        }
    }

    /// Whether the segments cover `[s, e)` without a gap.
    pub(super) fn covers(&self, s: u64, e: u64) -> bool {
        let mut at = s;
        for (o, d) in &self.segs {
            let end = o + d.len() as u64;
            if *o > at {
                break;
            }
            at = at.max(end);
            if at >= e {
                return true;
            }
        }
        at >= e
    }

    /// Puts `data` at `off`, trimming the older segments it overlaps, and keeps `pins` (the
    /// cache's, if this entry is cached) in step. Costs O(log segments + segments overlapped): a stripe gathering many small
    /// writes does not pay for all its segments on each one.
    pub(super) fn insert(&mut self, off: u64, data: SharedBuf, mut pins: Option<&mut Pins>) {
        let end = off + data.len() as u64;
        // Sorted and disjoint, so the segment ends are sorted too: the overlapped are i..j.
        let i = self
            .segs
            .partition_point(|(o, d)| o + d.len() as u64 <= off);
        let j = self.segs.partition_point(|(o, _)| *o < end);
        let overlapped = &self.segs[i..j];
        let mut put: Segs = Vec::with_capacity(3);
        if let Some((o, d)) = overlapped.first().filter(|(o, _)| *o < off) {
            put.push((*o, d.slice(0..(off - o) as usize)));
        }
        put.push((off, data));
        if let Some((o, d)) = overlapped.last().filter(|(o, d)| end < o + d.len() as u64) {
            put.push((end, d.slice((end - o) as usize..d.len())));
        }
        for (_, d) in &put {
            if let Some(p) = pins.as_deref_mut() {
                p.pin(d);
            }
            self.bytes += d.len() as u64;
        }
        for (_, d) in self.segs.splice(i..j, put) {
            if let Some(p) = pins.as_deref_mut() {
                p.unpin(&d);
            }
            self.bytes -= d.len() as u64;
        }
    }

    /// Removes the bytes in `[lo, hi)`, trimming the segments it cuts, and keeps `pins` in
    /// step.
    pub(super) fn remove_range(&mut self, lo: u64, hi: u64, pins: &mut Pins) {
        let i = self.segs.partition_point(|(o, d)| o + d.len() as u64 <= lo);
        let j = self.segs.partition_point(|(o, _)| *o < hi);
        let overlapped = &self.segs[i..j];
        let mut keep: Segs = Vec::with_capacity(2);
        if let Some((o, d)) = overlapped.first().filter(|(o, _)| *o < lo) {
            keep.push((*o, d.slice(0..(lo - o) as usize)));
        }
        if let Some((o, d)) = overlapped.last().filter(|(o, d)| hi < o + d.len() as u64) {
            keep.push((hi, d.slice((hi - o) as usize..d.len())));
        }
        for (_, d) in &keep {
            pins.pin(d);
            self.bytes += d.len() as u64;
        }
        for (_, d) in self.segs.splice(i..j, keep) {
            pins.unpin(&d);
            self.bytes -= d.len() as u64;
        }
    }

    /// Copies the cached bytes that fall in `[s, s + buf.len())` (stripe offsets) into `buf`.
    pub(super) fn overlay(&self, s: u64, buf: &mut [u8]) {
        let e = s + buf.len() as u64;
        for (o, d) in &self.segs {
            let (a, z) = ((*o).max(s), (o + d.len() as u64).min(e));
            if a < z {
                buf[(a - s) as usize..(z - s) as usize]
                    .copy_from_slice(&d[(a - o) as usize..(z - o) as usize]);
            }
        }
    }
}

/// The allocations cached segments keep alive (what the cache really costs: a slice pins
/// its writer's whole buffer).
#[derive(Default)]
pub(super) struct Pins {
    /// Allocation → (its bytes, segments that view it).
    by_alloc: HashMap<usize, (u64, u32)>,
    /// Bytes of the allocations in `by_alloc`.
    pub(super) bytes: u64,
}

impl Pins {
    pub(super) fn pin(&mut self, d: &SharedBuf) {
        let p = self
            .by_alloc
            .entry(d.alloc_id())
            .or_insert((d.alloc_len() as u64, 0));
        if p.1 == 0 {
            self.bytes += p.0;
        }
        p.1 += 1;
    }

    pub(super) fn unpin(&mut self, d: &SharedBuf) {
        let id = d.alloc_id();
        let p = self
            .by_alloc
            .get_mut(&id)
            .expect("a cached segment is pinned");
        p.1 -= 1;
        if p.1 == 0 {
            self.bytes -= p.0;
            self.by_alloc.remove(&id);
        }
    }

    /// Whether pinning `d` keeps the pinned bytes within `bound`.
    pub(super) fn admit(&self, d: &SharedBuf, bound: u64) -> bool {
        let extra = if self.by_alloc.contains_key(&d.alloc_id()) {
            0
        } else {
            d.alloc_len() as u64
        };
        self.bytes + extra <= bound
    }
}

#[derive(Default)]
pub(super) struct CacheState {
    pub(super) entries: HashMap<u64, Entry>,
    /// LRU order: `used` tick → (stripe, its dirty bytes after that write), one per entry:
    /// eviction reads its candidates' sizes here, not in `entries` (the bytes a hint: a
    /// `forget` since may have shrunk the entry).
    pub(super) lru: BTreeMap<u64, (u64, u64)>,
    /// Dirty bytes of all entries.
    pub(super) bytes: u64,
    /// What the entries' segments keep alive; the cache's bound applies to `pins.bytes`.
    pub(super) pins: Pins,
    pub(super) tick: u64,
}

impl CacheState {
    /// Removes stripe `s`'s entry, keeping `bytes`, `pins` and `lru` in step.
    pub(super) fn remove(&mut self, s: u64) -> Option<Entry> {
        let e = self.entries.remove(&s)?;
        self.bytes -= e.bytes;
        self.lru.remove(&e.used);
        for (_, d) in &e.segs {
            self.pins.unpin(d);
        }
        Some(e)
    }

    /// Whether caching `d` keeps the cache within `bound` pinned bytes.
    pub(super) fn admits(&self, d: &SharedBuf, bound: u64) -> bool {
        self.pins.admit(d, bound)
    }

    /// Puts `data` at `off` of stripe `s`'s entry (created if needed), as the most recently
    /// used; returns whether the entry now covers the whole stripe of `width` bytes.
    pub(super) fn insert(&mut self, s: u64, off: u64, data: SharedBuf, width: u64) -> bool {
        self.tick += 1;
        let tick = self.tick;
        let e = self.entries.entry(s).or_insert_with(|| Entry {
            segs: Segs::new(),
            bytes: 0,
            used: 0,
            busy: false,
            since: Instant::now(),
        });
        self.lru.remove(&e.used);
        e.used = tick;
        let before = e.bytes;
        e.insert(off, data, Some(&mut self.pins));
        self.lru.insert(tick, (s, e.bytes));
        self.bytes = self.bytes + e.bytes - before;
        e.covers(0, width)
    }

    /// Drops stripe `s`'s cached bytes in `[lo, hi)` (stripe offsets), and the entry with
    /// them if nothing is left: a newer write over them failed and salvaged its own bytes
    /// onto the data chunks that take writes, and the older cached bytes must not come back
    /// over those, in reads or in a retried destage (a mirror above reads this copy). Pins
    /// only shrink.
    pub(super) fn forget(&mut self, s: u64, lo: u64, hi: u64) {
        let Some(e) = self.entries.get_mut(&s) else {
            return;
        };
        let before = e.bytes;
        e.remove_range(lo, hi, &mut self.pins);
        self.bytes = self.bytes + e.bytes - before;
        if e.segs.is_empty() {
            self.remove(s);
        }
    }

    pub(super) fn usage(&self, bound: u64) -> CacheUsage {
        CacheUsage {
            dirty_bytes: self.bytes,
            pinned_bytes: self.pins.bytes,
            bound_bytes: bound,
            failed_destages: 0,
        }
    }
}

/// The stripe offsets in `newer` whose bytes a failed write salvaged: its salvaged rows
/// (in-chunk offsets) on each of the `k` data chunks of `strip` bytes. Pure.
fn salvaged_in(newer: (u64, u64), rows: &[(u64, u64)], strip: u64, k: u64) -> Vec<(u64, u64)> {
    let (lo, hi) = newer;
    (0..k)
        .flat_map(|i| {
            rows.iter()
                .map(move |&(r0, r1)| (i * strip + r0, i * strip + r1))
        })
        .map(|(a, b)| (a.max(lo), b.min(hi)))
        .filter(|(a, b)| a < b)
        .collect()
}

/// The `batch` stripes an eviction destages, from `oldest` ((stripe, dirty bytes) of the
/// `entries`, least recently used first) that are `free` (not being destaged): the fullest
/// of the oldest [`EVICT_WINDOW`] — at most a quarter of the entries, at least `batch` —
/// older first among equals; too few free there, the next oldest. Only the stripes taken
/// and the busy ones before them are looked up. A destage costs its reads, its member
/// writes and, with the log, a round whatever it carries, so the fullest stripes write the
/// most bytes for it (engine bench, 4 KiB random writes filling the cache: 102 → 67
/// destages per 1,000 writes); the window keeps the recently written ones — a stripe a
/// sequential writer is filling, a hot one — out of reach, as LRU alone did, and an old
/// sparse stripe still leaves by `max_age` or a flush.
pub(super) fn choose_victims(
    mut oldest: impl Iterator<Item = (u64, u64)>,
    entries: usize,
    batch: usize,
    free: impl Fn(u64) -> bool,
) -> Vec<u64> {
    let window = (entries / 4).clamp(batch, EVICT_WINDOW.max(batch));
    let mut seen: Vec<(u64, u64)> = oldest.by_ref().take(window).collect();
    // Stable: among equals the older first.
    seen.sort_by_key(|&(_, bytes)| std::cmp::Reverse(bytes));
    let mut picked: Vec<u64> = (seen.into_iter().map(|(s, _)| s))
        .filter(|&s| free(s))
        .take(batch)
        .collect();
    let short = batch - picked.len();
    picked.extend(oldest.map(|(s, _)| s).filter(|&s| free(s)).take(short));
    picked
}

/// A segment that views only a small part of a large buffer is copied out, so a few cached
/// KiB never pin a writer's 32 MiB.
pub(super) fn compact(d: SharedBuf) -> SharedBuf {
    if d.alloc_len() > 2 * d.len() + crate::buf::BUF_ALIGN {
        Buf::copy_from(&d).freeze()
    } else {
        d
    }
}

pub(super) struct Cache {
    /// Most bytes the entries may pin (`Pins::bytes`).
    pub(super) bound: u64,
    /// A partial stripe older than this is destaged by the flusher thread (None: it waits
    /// for a flush, for eviction or to become full).
    pub(super) max_age: Option<Duration>,
    pub(super) state: Mutex<CacheState>,
    /// Evictions and aged destages that failed ([`Destager::warn_failed`]).
    pub(super) failed_destages: AtomicU64,
}

impl Cache {
    /// Overlays cached dirty bytes on `buf` (which holds `[offset, offset+len)`).
    pub(super) fn overlay(&self, chunks: &Chunks, offset: u64, buf: &mut [u8]) {
        let st = self.state.lock();
        if st.entries.is_empty() {
            return;
        }
        for StripePiece {
            stripe: s,
            in_stripe,
            len: n,
        } in chunks.stripe_pieces(offset, buf.len() as u64)
        {
            let Some(e) = st.entries.get(&s) else {
                continue;
            };
            let at = (s * chunks.width() + in_stripe - offset) as usize;
            e.overlay(in_stripe, &mut buf[at..at + n as usize]);
        }
    }

    /// Whether the cache alone holds every byte of the range.
    pub(super) fn covers(&self, chunks: &Chunks, offset: u64, len: u64) -> bool {
        let st = self.state.lock();
        chunks.stripe_pieces(offset, len).all(
            |StripePiece {
                 stripe: s,
                 in_stripe,
                 len: n,
             }| {
                st.entries
                    .get(&s)
                    .is_some_and(|e| e.covers(in_stripe, in_stripe + n))
            },
        )
    }

    /// What the cache holds now.
    pub(super) fn usage(&self) -> CacheUsage {
        CacheUsage {
            failed_destages: self.failed_destages.load(Ordering::Relaxed),
            ..self.state.lock().usage(self.bound)
        }
    }

    /// Whether `room_bytes` more would take the cache past its bound.
    pub(super) fn needs_room(&self, room_bytes: u64) -> bool {
        self.state.lock().pins.bytes + room_bytes > self.bound
    }
}

/// Writes stripes to the members over the write-back cache (`None`: write-through), which
/// forgets what the members now hold: destage, eviction, drain. Borrowed per request
/// ([`ParityCore::destager`]).
#[derive(Clone, Copy)]
pub(super) struct Destager<'a> {
    pub(super) cache: Option<&'a Cache>,
    pub(super) stripes: &'a Stripes,
}

impl Destager<'_> {
    /// Logs a failed eviction or aged destage: the group's first and each power of two after
    /// it. A group beyond its tolerance fails every one, again and again (its entries stay
    /// and are chosen again): under a mirror whose other copy serves, one per write and one
    /// per aged entry each flusher tick, where the loss itself is said once
    /// (`StripeHealth::first_loss`).
    pub(super) fn warn_failed(&self, what: std::fmt::Arguments<'_>, e: &VolumeError) {
        let Some(cache) = self.cache else { return };
        let n = cache.failed_destages.fetch_add(1, Ordering::Relaxed) + 1;
        if n.is_power_of_two() {
            tracing::warn!(
                "stripe cache {what}: {e} (failure {n} of the group's, said at powers of two)"
            );
        }
    }

    /// Destages least recently used stripes, the fullest of them first ([`choose_victims`]),
    /// until `room_bytes` more fit within the bound: one at a time, or with a partial-parity
    /// log [`LOGGED_EVICT_BATCH`] at once.
    pub(super) async fn evict(&self, room_bytes: u64) -> VolumeResult<()> {
        let Some(cache) = &self.cache else {
            return Ok(());
        };
        let batch = if self.stripes.ppl.is_some() {
            LOGGED_EVICT_BATCH
        } else {
            1
        };
        loop {
            let victims: Vec<u64> = {
                let mut st = cache.state.lock();
                if st.pins.bytes + room_bytes <= cache.bound {
                    return Ok(());
                }
                let st = &mut *st;
                let free = |s: u64| st.entries.get(&s).is_some_and(|e| !e.busy);
                let picked =
                    choose_victims(st.lru.values().copied(), st.entries.len(), batch, free);
                for s in &picked {
                    st.entries.get_mut(s).expect("listed").busy = true;
                }
                picked
            };
            if victims.is_empty() {
                // Others are destaging everything there is.
                return Ok(());
            }
            let results = join_all(victims.into_iter().map(|s| self.destage(s, false))).await;
            crate::node::all_ok(results)?;
        }
    }

    /// Writes stripe `s`'s dirty bytes (if still cached) to the members.
    pub(super) async fn destage(&self, s: u64, fua: bool) -> VolumeResult<()> {
        let Some(cache) = &self.cache else {
            return Ok(());
        };
        let _g = self.stripes.locks.lock(s, 1, true).await;
        // Cloned (cheap: shared buffers).
        let segs = match cache.state.lock().entries.get(&s) {
            None => return Ok(()),
            Some(e) => e.segs.clone(),
        };
        self.write_over_cache(s, segs, None, fua).await
    }

    /// Writes `segs` of stripe `s` to the members, the caller holding the stripe's exclusive
    /// lock, then forgets the stripe's cache entry, whose bytes `segs` include or supersede.
    /// The entry stays listed until the members have the bytes, so a concurrent FLUSH waits
    /// for them on the stripe lock instead of missing them; if the write fails it stays
    /// (reads still see it, the next FLUSH retries and reports the error), so bytes already
    /// acknowledged never vanish silently — except its bytes in `newer` (stripe offsets),
    /// which a newer write in `segs` covered, where that write salvaged its own bytes: the
    /// older ones must not come back over them ([`CacheState::forget`]). Where the newer
    /// write was refused (nothing written) the older bytes stay: the members hold older
    /// still.
    /// Takes the (copyable) destager by value, so the future outlives the caller's handle.
    pub(super) async fn write_over_cache(
        self,
        s: u64,
        segs: Segs,
        newer: Option<(u64, u64)>,
        fua: bool,
    ) -> VolumeResult<()> {
        self.stripes
            .debug_assert_exclusive(s, "a write over the cache");
        let r = self.stripes.writer().write_stripe(s, segs, fua).await;
        if let Some(cache) = &self.cache {
            let mut st = cache.state.lock();
            match &r {
                Ok(()) => {
                    st.remove(s);
                }
                Err(failed) => {
                    let (strip, k) = (self.stripes.chunks.strip, self.stripes.chunks.k as u64);
                    for (lo, hi) in newer
                        .map(|n| salvaged_in(n, &failed.salvaged_rows, strip, k))
                        .unwrap_or_default()
                    {
                        st.forget(s, lo, hi);
                    }
                    if let Some(e) = st.entries.get_mut(&s) {
                        e.busy = false;
                        // The flusher retries after another `max_age`, not every tick.
                        e.since = Instant::now();
                    }
                }
            }
        }
        r.map_err(Into::into)
    }

    /// Destages the partial stripes that have waited longer than the cache's `max_age`.
    pub(super) async fn destage_aged(&self) {
        if let Some(max_age) = self.cache.as_ref().and_then(|c| c.max_age) {
            self.destage_older_than(max_age).await;
        }
    }

    /// Destages the partial stripes that have waited at least `age`.
    pub(super) async fn destage_older_than(&self, age: Duration) {
        let Some(cache) = &self.cache else { return };
        let mut old: Vec<u64> = {
            let st = cache.state.lock();
            st.entries
                .iter()
                .filter(|(_, e)| !e.busy && e.since.elapsed() >= age)
                .map(|(&s, _)| s)
                .collect()
        };
        old.sort_unstable();
        // Several at once: each stripe write waits on its own round trips (and, with the
        // partial-parity log, a log write), which concurrent destages share.
        let mut writes = futures::stream::iter(old)
            .map(|s| async move { (s, self.destage(s, false).await) })
            .buffer_unordered(self.width().min(AGED_DESTAGES_IN_FLIGHT));
        while let Some((s, r)) = writes.next().await {
            if let Err(e) = r {
                self.warn_failed(format_args!("destaging aged stripe {s}"), &e);
            }
        }
    }

    /// Destages the cached stripes among `stripes`.
    pub(super) async fn drain_stripes(&self, stripes: std::ops::Range<u64>) -> VolumeResult<()> {
        let Some(cache) = &self.cache else {
            return Ok(());
        };
        let mut keys: Vec<u64> = (cache.state.lock().entries.keys().copied())
            .filter(|s| stripes.contains(s))
            .collect();
        keys.sort_unstable();
        self.destage_all(keys).await
    }

    /// Destages every cached stripe.
    pub(super) async fn drain(&self) -> VolumeResult<()> {
        let Some(cache) = &self.cache else {
            return Ok(());
        };
        let mut keys: Vec<u64> = cache.state.lock().entries.keys().copied().collect();
        keys.sort_unstable();
        self.destage_all(keys).await
    }

    /// Stripes of this group a drain destages at once ([`drain_width`] of its stripes).
    fn width(&self) -> usize {
        let chunks = &self.stripes.chunks;
        drain_width(chunks.strip * (chunks.k + chunks.np) as u64)
    }

    /// Destages `stripes`, [`Self::width`] at a time; every one is tried, the most telling
    /// error returned (among equals the first stripe's, as they end in any order).
    async fn destage_all(&self, stripes: Vec<u64>) -> VolumeResult<()> {
        let mut results: Vec<(u64, VolumeResult<()>)> = futures::stream::iter(stripes)
            .map(|s| async move { (s, self.destage(s, false).await) })
            .buffer_unordered(self.width())
            .collect()
            .await;
        results.sort_unstable_by_key(|(s, _)| *s);
        crate::node::all_ok(results.into_iter().map(|(_, r)| r).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_salvaged_rows_of_a_newer_write_are_forgotten() {
        // Refused: nothing salvaged, nothing forgotten.
        assert!(salvaged_in((0, 12288), &[], 4096, 3).is_empty());
        // One run over every row: the newer write's span, chunk by chunk.
        assert_eq!(
            salvaged_in((6656, 12288), &[(0, 4096)], 4096, 3),
            vec![(6656, 8192), (8192, 12288)]
        );
        // Two runs, the first refused: only the second's rows, on each chunk the span meets.
        assert_eq!(
            salvaged_in((0, 8192), &[(2048, 4096)], 4096, 3),
            vec![(2048, 4096), (6144, 8192)]
        );
    }

    #[test]
    fn a_drain_holds_about_its_byte_budget_of_stripes_within_bounds() {
        // 64 KiB strips over 6 members: 384 KiB stripes, 42 of them in 16 MiB.
        assert_eq!(drain_width(6 * (64 << 10)), 42);
        assert_eq!(drain_width(DRAIN_BYTES_IN_FLIGHT), DRAIN_DESTAGES_MIN);
        // Narrow stripes stop at the most, wide ones at the fewest.
        assert_eq!(drain_width(3 * 4096), DRAIN_DESTAGES_MAX);
        assert_eq!(drain_width(24 * (16 << 20)), DRAIN_DESTAGES_MIN);
        assert_eq!(drain_width(0), DRAIN_DESTAGES_MAX);
        for stripe_bytes in [1, 4096, 1 << 20, 5 << 20, u64::MAX] {
            let w = drain_width(stripe_bytes);
            assert!((DRAIN_DESTAGES_MIN..=DRAIN_DESTAGES_MAX).contains(&w));
            assert!(
                w == DRAIN_DESTAGES_MIN || w as u64 * stripe_bytes <= DRAIN_BYTES_IN_FLIGHT,
                "{w} stripes of {stripe_bytes} bytes"
            );
        }
    }

    #[test]
    fn eviction_takes_the_fullest_of_the_oldest_quarter() {
        // (stripe, bytes), least recently used first.
        let lru = |n: u64| (0..n).map(|s| (s, if s % 10 == 7 { 9000 } else { 100 + s }));
        // 40 entries: the oldest 10 are looked at; stripe 7 is the fullest there, then the
        // largest of the rest; stripe 17, fuller than all but 7, is too recent.
        let any = |_| true;
        assert_eq!(choose_victims(lru(40), 40, 4, any), vec![7, 9, 8, 6]);
        // A few entries: the batch's worth looked at, here all three.
        assert_eq!(choose_victims(lru(3), 3, 4, any), vec![2, 1, 0]);
        // 8 entries, one victim: the oldest 2 looked at, the fullest (stripe 7) out of reach.
        assert_eq!(choose_victims(lru(8), 8, 1, any), vec![1]);
        // Equals: the older first.
        let flat = || (0..100u64).map(|s| (s, 4096));
        assert_eq!(choose_victims(flat(), 100, 4, any), vec![0, 1, 2, 3]);
        // Busy stripes are passed over; too few free in the window, the next oldest.
        let not = |busy: &'static [u64]| move |s| !busy.contains(&s);
        assert_eq!(choose_victims(lru(40), 40, 2, not(&[7, 8])), vec![9, 6]);
        let window_busy: Vec<u64> = (0..25).collect();
        let free = |s| !window_busy.contains(&s);
        assert_eq!(choose_victims(flat(), 100, 2, free), vec![25, 26]);
        // Many entries: at most `EVICT_WINDOW` looked at.
        let many = (0..10_000u64).map(|s| (s, s));
        let w = EVICT_WINDOW as u64;
        assert_eq!(choose_victims(many, 10_000, 2, any), vec![w - 1, w - 2]);
    }

    #[test]
    fn cache_entry_segments_merge_and_trim() {
        let seg = |byte: u8, n: usize| Buf::copy_from(&vec![byte; n]).freeze();
        let mut e = Entry {
            segs: Segs::new(),
            bytes: 0,
            used: 0,
            busy: false,
            since: Instant::now(),
        };
        let mut pins = Pins::default();
        e.insert(100, seg(1, 100), Some(&mut pins));
        e.insert(300, seg(2, 100), Some(&mut pins));
        assert!(!e.covers(100, 400));
        e.insert(150, seg(3, 200), Some(&mut pins)); // overlaps both: trims them
        assert_eq!(e.bytes, 300);
        assert!(e.covers(100, 400));
        assert!(!e.covers(99, 400));
        let mut out = vec![0u8; 300];
        e.overlay(100, &mut out);
        assert!(out[..50].iter().all(|&b| b == 1));
        assert!(out[50..250].iter().all(|&b| b == 3));
        assert!(out[250..].iter().all(|&b| b == 2));
        let offs: Vec<(u64, usize)> = e.segs.iter().map(|(o, d)| (*o, d.len())).collect();
        assert_eq!(offs, vec![(100, 50), (150, 200), (350, 50)]);
    }

    proptest::proptest! {
        /// Any sequence of overlapping writes and removed ranges: the entry reads as a
        /// byte-by-byte model, its segments stay sorted and disjoint, and the incremental
        /// pins equal a recount.
        #[test]
        fn entry_insert_matches_a_byte_model_and_keeps_pins_exact(
            writes in proptest::collection::vec((0u64..4000, 1usize..900, proptest::bool::weighted(0.2)), 1..40)
        ) {
            let mut e = Entry { segs: Segs::new(), bytes: 0, used: 0, busy: false, since: Instant::now() };
            let mut pins = Pins::default();
            let mut model = vec![0u8; 5000];
            for (n, (off, len, remove)) in writes.into_iter().enumerate() {
                let byte = (n % 250 + 1) as u8;
                if remove {
                    e.remove_range(off, off + len as u64, &mut pins);
                    model[off as usize..off as usize + len].fill(0);
                } else {
                    e.insert(off, Buf::copy_from(&vec![byte; len]).freeze(), Some(&mut pins));
                    model[off as usize..off as usize + len].fill(byte);
                }
                let mut out = vec![0u8; 5000];
                e.overlay(0, &mut out);
                proptest::prop_assert_eq!(&out, &model);
                proptest::prop_assert!(e.segs.windows(2).all(|w| w[0].0 + w[0].1.len() as u64 <= w[1].0));
                proptest::prop_assert_eq!(e.bytes, model.iter().filter(|&&b| b != 0).count() as u64);
                let mut recount = Pins::default();
                for (_, d) in &e.segs {
                    recount.pin(d);
                }
                proptest::prop_assert_eq!(pins.bytes, recount.bytes);
                proptest::prop_assert_eq!(&pins.by_alloc, &recount.by_alloc);
            }
        }
    }
}
