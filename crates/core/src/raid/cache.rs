//! The write-back stripe cache: entries of the writers' own buffers, the bound in pinned
//! memory, and how entries reach the members (destage, eviction, drain) without ever leaving
//! the cache before the members have their bytes.

use super::*;

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

    /// Puts `data` at `off`, trimming the older segments it overlaps.
    pub(super) fn insert(&mut self, off: u64, data: SharedBuf) {
        let end = off + data.len() as u64;
        let mut out: Segs = Vec::with_capacity(self.segs.len() + 2);
        for (o, d) in self.segs.drain(..) {
            let e = o + d.len() as u64;
            if e <= off || end <= o {
                out.push((o, d));
                continue;
            }
            if o < off {
                out.push((o, d.slice(0..(off - o) as usize)));
            }
            if end < e {
                out.push((end, d.slice((end - o) as usize..d.len())));
            }
        }
        let at = out.partition_point(|(o, _)| *o < off);
        out.insert(at, (off, data));
        self.bytes = out.iter().map(|(_, d)| d.len() as u64).sum();
        self.segs = out;
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

#[derive(Default)]
pub(super) struct CacheState {
    pub(super) entries: HashMap<u64, Entry>,
    /// LRU order: `used` tick → stripe, one per entry (eviction takes the oldest).
    pub(super) lru: BTreeMap<u64, u64>,
    /// Dirty bytes of all entries.
    pub(super) bytes: u64,
    /// Bytes of the allocations the entries' segments keep alive (what the cache really
    /// costs: a slice pins its writer's whole buffer). The bound applies to this.
    pub(super) pinned_bytes: u64,
    /// Allocation → (its bytes, segments that view it).
    pub(super) pins: HashMap<usize, (u64, u32)>,
    pub(super) tick: u64,
}

impl CacheState {
    /// Removes stripe `s`'s entry, keeping `bytes`, `pinned_bytes` and `lru` in step.
    pub(super) fn remove(&mut self, s: u64) -> Option<Entry> {
        let e = self.entries.remove(&s)?;
        self.bytes -= e.bytes;
        self.lru.remove(&e.used);
        for (_, d) in &e.segs {
            self.unpin(d);
        }
        Some(e)
    }

    pub(super) fn pin(&mut self, d: &SharedBuf) {
        let p = self
            .pins
            .entry(d.alloc_id())
            .or_insert((d.alloc_len() as u64, 0));
        if p.1 == 0 {
            self.pinned_bytes += p.0;
        }
        p.1 += 1;
    }

    pub(super) fn unpin(&mut self, d: &SharedBuf) {
        let id = d.alloc_id();
        let p = self.pins.get_mut(&id).expect("a cached segment is pinned");
        p.1 -= 1;
        if p.1 == 0 {
            self.pinned_bytes -= p.0;
            self.pins.remove(&id);
        }
    }

    /// Whether caching `d` keeps the cache within `bound` pinned bytes.
    pub(super) fn admits(&self, d: &SharedBuf, bound: u64) -> bool {
        let extra = if self.pins.contains_key(&d.alloc_id()) {
            0
        } else {
            d.alloc_len() as u64
        };
        self.pinned_bytes + extra <= bound
    }

    /// Puts `data` at `off` of stripe `s`'s entry (created if needed), as the most recently
    /// used; returns whether the entry now covers the whole stripe of `width` bytes.
    pub(super) fn insert(&mut self, s: u64, off: u64, data: SharedBuf, width: u64) -> bool {
        self.tick += 1;
        let tick = self.tick;
        let mut e = match self.remove(s) {
            Some(e) => e,
            None => Entry {
                segs: Segs::new(),
                bytes: 0,
                used: 0,
                busy: false,
                since: Instant::now(),
            },
        };
        e.insert(off, data);
        e.used = tick;
        for (_, d) in &e.segs {
            self.pin(d);
        }
        self.bytes += e.bytes;
        self.lru.insert(tick, s);
        let full = e.covers(0, width);
        self.entries.insert(s, e);
        full
    }

    pub(super) fn usage(&self, bound: u64) -> CacheUsage {
        CacheUsage {
            dirty_bytes: self.bytes,
            pinned_bytes: self.pinned_bytes,
            bound_bytes: bound,
        }
    }
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
    /// Most bytes the entries may pin (`CacheState::pinned_bytes`).
    pub(super) bound: u64,
    /// A partial stripe older than this is destaged by the flusher thread (None: it waits
    /// for a flush, for eviction or to become full).
    pub(super) max_age: Option<Duration>,
    pub(super) state: Mutex<CacheState>,
}

impl Cache {
    /// Whether `room_bytes` more would take the cache past its bound.
    pub(super) fn needs_room(&self, room_bytes: u64) -> bool {
        self.state.lock().pinned_bytes + room_bytes > self.bound
    }
}

/// What a write-back cache holds and may hold.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheUsage {
    /// Bytes written by clients and not yet on the members.
    pub dirty_bytes: u64,
    /// Memory those bytes keep alive (whole allocations of the writers' buffers).
    pub pinned_bytes: u64,
    /// The most `pinned_bytes` may reach.
    pub bound_bytes: u64,
}

impl CacheUsage {
    pub fn plus(self, o: CacheUsage) -> CacheUsage {
        CacheUsage {
            dirty_bytes: self.dirty_bytes + o.dirty_bytes,
            pinned_bytes: self.pinned_bytes + o.pinned_bytes,
            bound_bytes: self.bound_bytes + o.bound_bytes,
        }
    }
}

impl ParityCore {
    /// Overlays cached dirty bytes on `buf` (which holds `[offset, offset+len)`).
    pub(super) fn overlay_cache(&self, offset: u64, buf: &mut [u8]) {
        let Some(cache) = &self.cache else { return };
        let st = cache.state.lock();
        if st.entries.is_empty() {
            return;
        }
        for (s, in_stripe, n) in self.stripe_pieces(offset, buf.len() as u64) {
            let Some(e) = st.entries.get(&s) else {
                continue;
            };
            let at = (s * self.width() + in_stripe - offset) as usize;
            e.overlay(in_stripe, &mut buf[at..at + n as usize]);
        }
    }

    /// Whether the cache alone holds every byte of the range.
    pub(super) fn cache_covers(&self, offset: u64, len: u64) -> bool {
        let Some(cache) = &self.cache else {
            return false;
        };
        let st = cache.state.lock();
        self.stripe_pieces(offset, len).all(|(s, in_stripe, n)| {
            st.entries
                .get(&s)
                .is_some_and(|e| e.covers(in_stripe, in_stripe + n))
        })
    }

    /// Destages least recently used stripes until `room_bytes` more fit within the bound.
    pub(super) async fn evict(&self, room_bytes: u64) -> VolumeResult<()> {
        let Some(cache) = &self.cache else {
            return Ok(());
        };
        loop {
            let victim = {
                let mut st = cache.state.lock();
                if st.pinned_bytes + room_bytes <= cache.bound {
                    return Ok(());
                }
                let v = st
                    .lru
                    .values()
                    .copied()
                    .find(|s| st.entries.get(s).is_some_and(|e| !e.busy));
                match v {
                    Some(s) => {
                        st.entries.get_mut(&s).expect("listed").busy = true;
                        s
                    }
                    // Others are destaging everything there is.
                    None => return Ok(()),
                }
            };
            self.destage(victim, false).await?;
        }
    }

    /// Writes stripe `s`'s dirty bytes (if still cached) to the members.
    pub(super) async fn destage(&self, s: u64, fua: bool) -> VolumeResult<()> {
        let Some(cache) = &self.cache else {
            return Ok(());
        };
        let _g = self.locks.lock(s, 1, true).await;
        // Cloned (cheap: shared buffers).
        let segs = match cache.state.lock().entries.get(&s) {
            None => return Ok(()),
            Some(e) => e.segs.clone(),
        };
        self.write_over_cache(s, segs, fua).await
    }

    /// Writes `segs` of stripe `s` to the members, the caller holding the stripe's exclusive
    /// lock, then forgets the stripe's cache entry, whose bytes `segs` include or supersede.
    /// The entry stays listed until the members have the bytes, so a concurrent FLUSH waits
    /// for them on the stripe lock instead of missing them; if the write fails it stays
    /// (reads still see it, the next FLUSH retries and reports the error), so bytes already
    /// acknowledged never vanish silently.
    pub(super) async fn write_over_cache(&self, s: u64, segs: Segs, fua: bool) -> VolumeResult<()> {
        let r = self.write_stripe(s, segs, fua).await;
        if let Some(cache) = &self.cache {
            let mut st = cache.state.lock();
            if r.is_ok() {
                st.remove(s);
            } else if let Some(e) = st.entries.get_mut(&s) {
                e.busy = false;
                // The flusher retries after another `max_age`, not every tick.
                e.since = Instant::now();
            }
        }
        r
    }

    /// Destages the partial stripes that have waited longer than the cache's `max_age`.
    pub(super) async fn destage_aged(&self) {
        let Some(cache) = &self.cache else { return };
        let Some(max_age) = cache.max_age else { return };
        let mut old: Vec<u64> = {
            let st = cache.state.lock();
            st.entries
                .iter()
                .filter(|(_, e)| !e.busy && e.since.elapsed() >= max_age)
                .map(|(&s, _)| s)
                .collect()
        };
        old.sort_unstable();
        for s in old {
            if let Err(e) = self.destage(s, false).await {
                tracing::warn!("stripe cache: destaging aged stripe {s}: {e}");
            }
        }
    }

    /// Destages every cached stripe.
    pub(super) async fn drain(&self) -> VolumeResult<()> {
        let Some(cache) = &self.cache else {
            return Ok(());
        };
        let mut keys: Vec<u64> = cache.state.lock().entries.keys().copied().collect();
        keys.sort_unstable();
        let results = join_all(keys.into_iter().map(|s| self.destage(s, false))).await;
        crate::node::all_ok(results)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        e.insert(100, seg(1, 100));
        e.insert(300, seg(2, 100));
        assert!(!e.covers(100, 400));
        e.insert(150, seg(3, 200)); // overlaps both: trims them
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
}
