//! What a volume knows reads as zeroes, for NBD's `base:allocation`: the ranges trimmed or
//! zeroed since the daemon started, as a small extent map. A query costs per extent
//! (`O(log n + extents)`), never per export size; what the map does not know is reported as
//! data, which is always correct. It starts empty at every start (the engine keeps no
//! allocation map on disk), so "never written" is only known for space trimmed or zeroed
//! while running.
//!
//! Correctness: a range may be claimed zero only if no write can have landed in it after the
//! zeroing. A write forgets its range before it is issued; a zeroing is recorded when it
//! completes only if no write was in flight when it began and none began since (the map stays
//! silent rather than guess; concurrent overlapping requests are rare and it errs on "data").

use std::collections::BTreeMap;
use std::sync::Mutex;

use nbraid_nbd::Extent;

/// Most ranges held; beyond, new zeroings go unrecorded (reported as data).
const MAX_RANGES: usize = 1 << 16;
/// Most extents one query answers (the reply may describe less than asked).
const MAX_EXTENTS: usize = 1024;

#[derive(Default)]
pub struct ZeroMap {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// start → (end, `base:allocation` flags), disjoint, adjacent equal flags merged.
    ranges: BTreeMap<u64, (u64, u32)>,
    /// Writes begun so far, and those not yet finished.
    writes_begun: u64,
    writes_in_flight: u64,
}

/// Handed out by [`ZeroMap::begin_zeroing`], given back when the zeroing completes.
#[derive(Debug, Clone, Copy)]
pub struct ZeroToken {
    writes_begun: u64,
    quiet: bool,
}

/// Held while a write runs; forgets nothing more on drop, only ends the write.
pub struct WriteGuard<'a>(&'a ZeroMap);

impl Drop for WriteGuard<'_> {
    fn drop(&mut self) {
        self.0.lock().writes_in_flight -= 1;
    }
}

impl ZeroMap {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Before a write of `[offset, offset+len)` is issued: the range is data from now on.
    pub fn begin_write(&self, offset: u64, len: u64) -> WriteGuard<'_> {
        let mut m = self.lock();
        m.writes_begun += 1;
        m.writes_in_flight += 1;
        if !m.ranges.is_empty() {
            m.remove(offset, offset + len);
        }
        WriteGuard(self)
    }

    /// Before a trim or zeroing is issued.
    pub fn begin_zeroing(&self) -> ZeroToken {
        let m = self.lock();
        ZeroToken {
            writes_begun: m.writes_begun,
            quiet: m.writes_in_flight == 0,
        }
    }

    /// After a trim or zeroing of `[offset, offset+len)` succeeded: records it with `flags`
    /// (`STATE_ZERO`, with `STATE_HOLE` when deallocated) if no write could have overtaken it.
    pub fn zeroed(&self, token: ZeroToken, offset: u64, len: u64, flags: u32) {
        let mut m = self.lock();
        if !token.quiet || m.writes_begun != token.writes_begun || len == 0 {
            return;
        }
        m.insert(offset, offset + len, flags);
    }

    /// Extents from `offset` covering at most `len` bytes (at least one when `len > 0`).
    pub fn extents(&self, offset: u64, len: u32) -> Vec<Extent> {
        let m = self.lock();
        let end = offset + u64::from(len);
        let mut out = Vec::new();
        let mut pos = offset;
        let from = match m.ranges.range(..=offset).next_back() {
            Some((&s, &(e, _))) if e > offset => s,
            _ => offset,
        };
        for (&s, &(e, flags)) in m.ranges.range(from..) {
            if s >= end || out.len() + 2 > MAX_EXTENTS {
                break;
            }
            if s > pos {
                out.push(extent(s - pos, 0));
                pos = s;
            }
            let stop = e.min(end);
            out.push(extent(stop - pos, flags));
            pos = stop;
        }
        if pos < end && out.len() < MAX_EXTENTS {
            out.push(extent(end - pos, 0));
        }
        out
    }

    /// Ranges held (for tests and bounds).
    pub fn len(&self) -> usize {
        self.lock().ranges.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn extent(len: u64, flags: u32) -> Extent {
    Extent {
        length: len as u32,
        flags,
    }
}

impl Inner {
    /// Forgets `[s, e)`, keeping the parts of ranges outside it.
    fn remove(&mut self, s: u64, e: u64) {
        let first = match self.ranges.range(..s).next_back() {
            Some((&k, &(end, _))) if end > s => k,
            _ => s,
        };
        let hit: Vec<(u64, (u64, u32))> =
            self.ranges.range(first..e).map(|(&k, &v)| (k, v)).collect();
        for (k, (end, flags)) in hit {
            self.ranges.remove(&k);
            let (left, right) = ((k < s).then_some((k, s)), (end > e).then_some((e, end)));
            // A write inside one range splits it: one range more. At the cap the shorter
            // side is forgotten (reported as data, always correct), or scattered writes over
            // a device trimmed whole would grow the map with each of them.
            let keep = match (left, right) {
                (Some(l), Some(r)) if self.ranges.len() + 2 > MAX_RANGES => {
                    [Some(if l.1 - l.0 >= r.1 - r.0 { l } else { r }), None]
                }
                _ => [left, right],
            };
            for (from, to) in keep.into_iter().flatten() {
                self.ranges.insert(from, (to, flags));
            }
        }
    }

    fn insert(&mut self, mut s: u64, mut e: u64, flags: u32) {
        self.remove(s, e);
        if let Some((&k, &(end, f))) = self.ranges.range(..s).next_back() {
            if end == s && f == flags {
                self.ranges.remove(&k);
                s = k;
            }
        }
        if let Some(&(end, f)) = self.ranges.get(&e) {
            if f == flags {
                self.ranges.remove(&e);
                e = end;
            }
        }
        if self.ranges.len() < MAX_RANGES {
            self.ranges.insert(s, (e, flags));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nbraid_nbd::proto::{STATE_HOLE, STATE_ZERO};
    use proptest::prelude::*;

    const HZ: u32 = STATE_HOLE | STATE_ZERO;

    /// Expands extents into per-unit flags.
    fn expand(ex: &[Extent]) -> Vec<u32> {
        ex.iter()
            .flat_map(|e| std::iter::repeat_n(e.flags, e.length as usize))
            .collect()
    }

    proptest! {
        #[test]
        fn matches_a_per_byte_model(ops in proptest::collection::vec((0u8..3, 0u64..200, 1u64..60), 1..60)) {
            let map = ZeroMap::default();
            let mut model = vec![0u32; 256];
            for (op, off, len) in ops {
                let (off, len) = (off, len.min(256 - off));
                match op {
                    0 => {
                        let _w = map.begin_write(off, len);
                        model[off as usize..(off + len) as usize].fill(0);
                    }
                    k => {
                        let flags = if k == 1 { HZ } else { STATE_ZERO };
                        let t = map.begin_zeroing();
                        map.zeroed(t, off, len, flags);
                        model[off as usize..(off + len) as usize].fill(flags);
                    }
                }
                for q in [0u64, off, 100] {
                    let ex = map.extents(q, (256 - q) as u32);
                    prop_assert!(ex.iter().all(|e| e.length > 0));
                    prop_assert_eq!(expand(&ex), model[q as usize..].to_vec());
                }
            }
        }
    }

    #[test]
    fn scattered_writes_over_a_device_trimmed_whole_never_pass_the_cap() {
        let map = ZeroMap::default();
        let t = map.begin_zeroing();
        map.zeroed(t, 0, 1 << 40, HZ);
        let writes = MAX_RANGES as u64 + 1000;
        for i in 0..writes {
            drop(map.begin_write(i * 8192 + 4096, 4096));
        }
        assert_eq!(map.len(), MAX_RANGES);
        // What is kept is still right: the gap before each write, and the device's tail.
        let ex = map.extents(0, 16384);
        assert_eq!(
            expand_lengths(&ex),
            vec![(4096, HZ), (4096, 0), (4096, HZ), (4096, 0)]
        );
        let tail = (writes - 1) * 8192 + 8192;
        assert_eq!(map.extents(tail, 4096)[0].flags, HZ);
    }

    fn expand_lengths(ex: &[Extent]) -> Vec<(u32, u32)> {
        ex.iter().map(|e| (e.length, e.flags)).collect()
    }

    #[test]
    fn zeroing_overtaken_by_a_write_is_not_recorded() {
        let map = ZeroMap::default();
        let t = map.begin_zeroing();
        drop(map.begin_write(0, 10));
        map.zeroed(t, 0, 100, HZ);
        assert!(map.is_empty());
        let w = map.begin_write(500, 10);
        let t = map.begin_zeroing();
        map.zeroed(t, 0, 100, HZ);
        assert!(map.is_empty(), "a write was in flight");
        drop(w);
        let t = map.begin_zeroing();
        map.zeroed(t, 0, 100, HZ);
        assert_eq!(map.extents(0, 200), vec![extent(100, HZ), extent(100, 0)]);
    }

    #[test]
    fn queries_cost_per_extent() {
        let map = ZeroMap::default();
        // Many small holes: one query returns at most MAX_EXTENTS, from the offset asked.
        for i in 0..5000u64 {
            let t = map.begin_zeroing();
            map.zeroed(t, i * 8192, 4096, HZ);
        }
        let ex = map.extents(4096 * 3 + 100, u32::MAX);
        assert!(ex.len() <= MAX_EXTENTS);
        assert_eq!(ex[0], extent(4096 - 100, 0));
        assert_eq!(ex[1], extent(4096, HZ));
    }
}
