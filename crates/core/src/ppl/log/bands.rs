//! The live bands of one group's log and what a round asks of them as a whole, kept up to
//! date as each band changes: the tail (the smallest first entry of the bands a round has
//! written), the bands a flush would settle, and whether a write is in flight. A write-back
//! drain parks hundreds of writers on the log and each wake-up asked these of every live
//! band (a fifth of the drain's CPU); here each change costs O(log n) and each question O(1).

use crate::num_hash::{NumMap, NumSet};
#[cfg(test)]
use std::collections::BTreeSet;
use std::collections::VecDeque;

/// A band: (stripe, band of rows in the stripe).
pub(super) type Key = (u64, u32);

/// A band with a write whose entry or member writes may not be durable yet. One write at a
/// time: a write to a live band waits until it settles — or, once the earlier write is done,
/// goes on without the flush where its entry covers that write's flux (`needs_no_flush`; see
/// `GroupLog::prepare`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Band {
    /// The first entry since the band went live: older ones are settled.
    pub(super) first_seq: u64,
    pub(super) seq: u64,
    /// The newest entry is on its rings.
    pub(super) durable: bool,
    /// A round has taken one of the band's entries (it counts for the tail from then on).
    pub(super) written: bool,
    /// Writes of the band in flight.
    pub(super) inflight: u32,
    /// Per member of the group: its completed-writes count when the band's last write ended.
    pub(super) need: Vec<u64>,
    /// Per data chunk, the sectors written since the band went live (not known durable).
    pub(super) dirty: Vec<u8>,
    /// Writes logged since the band went live: at 1, `dirty` is one write's, whose chunks
    /// become guaranteed together (`needs_no_flush`).
    pub(super) writes: u32,
}

impl Band {
    /// A band going live with entry `seq`, nothing logged in it yet.
    pub(super) fn live(seq: u64, need: Vec<u64>, k: usize) -> Band {
        Band::live_with(seq, need, vec![0; k])
    }

    /// [`Band::live`] over vectors already zeroed (a retired band's, reused).
    pub(super) fn live_with(seq: u64, need: Vec<u64>, dirty: Vec<u8>) -> Band {
        debug_assert!(dirty.iter().all(|&d| d == 0), "nothing dirty yet");
        Band {
            first_seq: seq,
            seq,
            durable: false,
            written: false,
            inflight: 0,
            need,
            dirty,
            writes: 0,
        }
    }

    /// Its writes ended and its newest entry is on the rings: a flush of the members its
    /// writes went to settles it.
    pub(super) fn done(&self) -> bool {
        self.inflight == 0 && self.durable
    }

    /// Logged again without a flush while older entries still count for the tail: once a
    /// flush covers its earlier writes, only the newest entry is needed (`GroupLog::rebase`).
    pub(super) fn stale(&self) -> bool {
        self.inflight > 0 && self.first_seq < self.seq
    }

    /// Member writes in flight, or its entry in a round in flight: it ends by itself.
    pub(super) fn busy(&self) -> bool {
        self.inflight > 0 && (self.durable || self.written)
    }

    /// Where it holds the tail: its first entry, once a round took one of its entries.
    fn tail_at(&self) -> Option<u64> {
        self.written.then_some(self.first_seq)
    }

    /// Its share of the sets [`Bands`] keeps (copied around a change: cloning the band
    /// would allocate).
    fn class(&self) -> Class {
        Class {
            tail_at: self.tail_at(),
            done: self.done(),
            stale: self.stale(),
            busy: self.busy(),
        }
    }
}

/// What of a band the sets of [`Bands`] count.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Class {
    tail_at: Option<u64>,
    done: bool,
    stale: bool,
    busy: bool,
}

impl Class {
    /// A band not live: in no set.
    const NONE: Class = Class {
        tail_at: None,
        done: false,
        stale: false,
        busy: false,
    };
}

/// The live bands, with the sets a round asks about kept in step with every change.
#[derive(Default)]
pub(super) struct Bands {
    map: NumMap<Key, Band>,
    /// (first_seq, band) of every band counted for the tail ([`Band::tail_at`]).
    firsts: Firsts,
    /// Bands [`Band::done`].
    done: NumSet<Key>,
    /// Bands [`Band::stale`].
    stale: NumSet<Key>,
    /// How many bands are [`Band::busy`].
    busy: usize,
}

impl Bands {
    pub(super) fn get(&self, key: &Key) -> Option<&Band> {
        self.map.get(key)
    }

    pub(super) fn len(&self) -> usize {
        self.map.len()
    }

    pub(super) fn contains_key(&self, key: &Key) -> bool {
        self.map.contains_key(key)
    }

    pub(super) fn keys(&self) -> impl Iterator<Item = &Key> {
        self.map.keys()
    }

    /// Changes band `key` with `f`, if live.
    pub(super) fn update<R>(&mut self, key: Key, f: impl FnOnce(&mut Band) -> R) -> Option<R> {
        let band = self.map.get_mut(&key)?;
        let before = band.class();
        let r = f(band);
        let after = band.class();
        if before != after {
            self.account(key, Some(before), Some(after));
        }
        Some(r)
    }

    /// Changes band `key` with `f`, making it live first with `new()` if it is not.
    pub(super) fn upsert(
        &mut self,
        key: Key,
        new: impl FnOnce() -> Band,
        f: impl FnOnce(&mut Band),
    ) {
        if !self.map.contains_key(&key) {
            let band = new();
            self.account(key, None, Some(band.class()));
            self.map.insert(key, band);
        }
        self.update(key, f);
    }

    /// Takes band `key` out of the live set.
    pub(super) fn remove(&mut self, key: &Key) -> Option<Band> {
        let band = self.map.remove(key)?;
        self.account(*key, Some(band.class()), None);
        Some(band)
    }

    /// The smallest first entry of the bands a round has written (entries below it are
    /// settled), `None` when there is none.
    pub(super) fn tail(&self) -> Option<u64> {
        self.firsts.first()
    }

    /// Some band a flush would settle: done, or stale.
    pub(super) fn any_settles(&self) -> bool {
        !self.done.is_empty() || !self.stale.is_empty()
    }

    /// Some band is [`Band::busy`].
    pub(super) fn any_busy(&self) -> bool {
        self.busy > 0
    }

    /// The bands [`Band::done`] (the only ones `retire` may take out).
    pub(super) fn done_keys(&self) -> impl Iterator<Item = &Key> {
        self.done.iter()
    }

    /// Some band is [`Band::done`].
    pub(super) fn any_done(&self) -> bool {
        !self.done.is_empty()
    }

    /// The bands [`Band::stale`].
    pub(super) fn stale_keys(&self) -> Vec<Key> {
        self.stale.iter().copied().collect()
    }

    /// Moves band `key`'s share of the sets from what it was (`None`: not live) to what it is,
    /// touching only the sets whose share changed (a write ending changes `done` and `busy`,
    /// not the band's place in the tail).
    fn account(&mut self, key: Key, before: Option<Class>, after: Option<Class>) {
        let was = before.unwrap_or(Class::NONE);
        let is = after.unwrap_or(Class::NONE);
        if was.tail_at != is.tail_at {
            if let Some(seq) = was.tail_at {
                let had = self.firsts.remove(seq, key);
                debug_assert!(had, "a written band's first entry is in the tail set");
            }
            if let Some(seq) = is.tail_at {
                self.firsts.insert(seq, key);
            }
        }
        match (was.done, is.done) {
            (true, false) => _ = self.done.remove(&key),
            (false, true) => _ = self.done.insert(key),
            _ => {}
        }
        match (was.stale, is.stale) {
            (true, false) => _ = self.stale.remove(&key),
            (false, true) => _ = self.stale.insert(key),
            _ => {}
        }
        self.busy = self.busy + usize::from(is.busy) - usize::from(was.busy);
    }

    /// Asserts that the kept sets are what a scan of every band finds (tests).
    #[cfg(test)]
    pub(super) fn assert_consistent(&self) {
        let scan_tail = self.map.values().filter_map(Band::tail_at).min();
        assert_eq!(self.tail(), scan_tail, "tail");
        let firsts: BTreeSet<(u64, Key)> = self
            .map
            .iter()
            .filter_map(|(k, b)| b.tail_at().map(|s| (s, *k)))
            .collect();
        assert_eq!(self.firsts.live(), firsts, "tail set");
        self.firsts.assert_ordered();
        let keys = |f: fn(&Band) -> bool| -> NumSet<Key> {
            self.map
                .iter()
                .filter(|(_, b)| f(b))
                .map(|(k, _)| *k)
                .collect()
        };
        assert_eq!(self.done, keys(Band::done), "done bands");
        assert_eq!(self.stale, keys(Band::stale), "stale bands");
        assert_eq!(self.busy, keys(Band::busy).len(), "busy bands");
        let settle = self
            .map
            .values()
            .any(|b| (b.inflight == 0 && b.durable) || (b.inflight > 0 && b.first_seq < b.seq));
        assert_eq!(self.any_settles(), settle, "settle");
        let busy = self
            .map
            .values()
            .any(|b| b.inflight > 0 && (b.durable || b.written));
        assert_eq!(self.any_busy(), busy, "busy");
    }
}

/// The (first entry, band) pairs counted for the tail, in order: a queue, since a round
/// numbers the entries it takes upwards and so nearly every insert goes at the back. A
/// removal marks its pair dead where it lies (found by binary search) and the dead are
/// dropped once they reach the front, or all at once when they outnumber the live. The
/// `BTreeSet` this replaces cost ~150 ns an entry (an insert and a removal among a few
/// hundred bands), a seventh of the log's CPU in write-back (`benches/log_cost.rs`).
#[derive(Default)]
struct Firsts {
    /// Sorted by (seq, band); `alive` false: removed, not yet dropped.
    queue: VecDeque<(u64, Key, bool)>,
    /// Dead pairs in `queue`.
    dead: usize,
}

impl Firsts {
    /// The smallest live seq (the front is never dead).
    fn first(&self) -> Option<u64> {
        debug_assert!(self.queue.front().is_none_or(|f| f.2), "the front is live");
        self.queue.front().map(|f| f.0)
    }

    fn insert(&mut self, seq: u64, key: Key) {
        match self.queue.back() {
            Some(&(s, k, _)) if (s, k) > (seq, key) => {
                let at = self
                    .queue
                    .partition_point(|&(s, k, _)| (s, k) <= (seq, key));
                self.queue.insert(at, (seq, key, true));
            }
            _ => self.queue.push_back((seq, key, true)),
        }
    }

    /// Removes a live pair; whether it was there.
    fn remove(&mut self, seq: u64, key: Key) -> bool {
        let from = self.queue.partition_point(|&(s, k, _)| (s, k) < (seq, key));
        let found = (from..self.queue.len())
            .take_while(|&i| (self.queue[i].0, self.queue[i].1) == (seq, key))
            .find(|&i| self.queue[i].2);
        let Some(i) = found else { return false };
        self.queue[i].2 = false;
        self.dead += 1;
        while self.queue.front().is_some_and(|f| !f.2) {
            self.queue.pop_front();
            self.dead -= 1;
        }
        if self.dead > 64 && self.dead > self.queue.len() / 2 {
            self.queue.retain(|f| f.2);
            self.dead = 0;
        }
        true
    }

    #[cfg(test)]
    fn live(&self) -> BTreeSet<(u64, Key)> {
        self.queue
            .iter()
            .filter(|f| f.2)
            .map(|f| (f.0, f.1))
            .collect()
    }

    #[cfg(test)]
    fn assert_ordered(&self) {
        let pairs: Vec<(u64, Key)> = self.queue.iter().map(|f| (f.0, f.1)).collect();
        assert!(pairs.windows(2).all(|w| w[0] <= w[1]), "sorted");
        let dead = self.queue.iter().filter(|f| !f.2).count();
        assert_eq!(dead, self.dead, "dead count");
    }
}

/// The bands of `stripes` the log knows — live in `bands`, or in `retired` (perhaps still
/// replayed) — sorted, once each; `per_stripe` bands a stripe. Each looked up where that
/// visits fewer than both maps hold (a sequential writer's few stripes among thousands of a
/// random writer's bands), else both maps scanned (a whole device zeroed).
pub(super) fn known_bands<V>(
    bands: &Bands,
    retired: &NumMap<Key, V>,
    stripes: std::ops::Range<u64>,
    per_stripe: u64,
) -> Vec<Key> {
    let lookups = (stripes.end - stripes.start).saturating_mul(per_stripe);
    let keys: Vec<Key> = if lookups <= (bands.len() + retired.len()) as u64 {
        stripes
            .flat_map(|s| (0..per_stripe as u32).map(move |b| (s, b)))
            .filter(|k| bands.contains_key(k) || retired.contains_key(k))
            .collect()
    } else {
        let mut all: Vec<Key> = (bands.keys().chain(retired.keys()))
            .filter(|(s, _)| stripes.contains(s))
            .copied()
            .collect();
        all.sort_unstable();
        all.dedup();
        all
    };
    debug_assert!(keys.windows(2).all(|p| p[0] < p[1]), "sorted, once each");
    keys
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// One change to a band, as the log makes them.
    #[derive(Clone, Debug)]
    enum Op {
        /// `prepare`: live (or again), a new entry, a write in flight.
        Prepare(Key, u64),
        /// `renumber`: a round takes the band's newest entry under a new number.
        Take(Key, u64),
        /// `finish_round` / `abandon`: the newest entry is on the rings (or never will be).
        Durable(Key),
        /// `Hold::drop`: a write ended.
        End(Key),
        /// `rebase`: the first entry moves up to the newest.
        Rebase(Key),
        /// `retire`.
        Remove(Key),
    }

    fn key() -> impl Strategy<Value = Key> {
        (0u64..6, 0u32..3)
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (key(), 1u64..1000).prop_map(|(k, s)| Op::Prepare(k, s)),
            (key(), 1u64..1000).prop_map(|(k, s)| Op::Take(k, s)),
            key().prop_map(Op::Durable),
            key().prop_map(Op::End),
            key().prop_map(Op::Rebase),
            key().prop_map(Op::Remove),
        ]
    }

    fn apply(bands: &mut Bands, op: Op) {
        match op {
            Op::Prepare(k, seq) => bands.upsert(
                k,
                || Band::live(seq, vec![0; 3], 2),
                |b| {
                    b.seq = seq.max(b.seq);
                    b.durable = false;
                    b.inflight += 1;
                    b.writes += 1;
                },
            ),
            Op::Take(k, seq) => {
                bands.update(k, |b| {
                    if !b.written {
                        b.first_seq = seq;
                        b.written = true;
                    }
                    b.seq = b.seq.max(seq);
                });
            }
            Op::Durable(k) => {
                bands.update(k, |b| b.durable = true);
            }
            Op::End(k) => {
                bands.update(k, |b| b.inflight = b.inflight.saturating_sub(1));
            }
            Op::Rebase(k) => {
                bands.update(k, |b| b.first_seq = b.seq);
            }
            Op::Remove(k) => {
                bands.remove(&k);
            }
        }
    }

    proptest! {
        /// The kept tail set and counters agree with a scan of every band after any
        /// sequence of the log's changes.
        #[test]
        fn kept_sets_match_a_scan(ops in proptest::collection::vec(op(), 0..200)) {
            let mut bands = Bands::default();
            for op in ops {
                apply(&mut bands, op);
                bands.assert_consistent();
            }
        }
    }

    proptest! {
        /// The tail queue against a sorted set: mostly rising inserts (as rounds number
        /// entries), some out of order (`rebase`), removals anywhere; enough of them that the
        /// dead are compacted.
        #[test]
        fn firsts_match_a_sorted_set(
            ops in proptest::collection::vec((0u64..40, 0u32..4, 0u8..10), 0..600)
        ) {
            let (mut q, mut model) = (Firsts::default(), BTreeSet::new());
            let mut next = 0u64;
            for (stripe, band, what) in ops {
                let key = (stripe, band);
                let live = model.iter().find(|(_, k)| *k == key).copied();
                match (live, what) {
                    (Some((seq, _)), 0..=5) => {
                        prop_assert!(q.remove(seq, key));
                        model.remove(&(seq, key));
                    }
                    (None, 0..=7) => {
                        next += 1;
                        q.insert(next, key);
                        model.insert((next, key));
                    }
                    (None, _) => {
                        let seq = next.saturating_sub(u64::from(what) * 3);
                        q.insert(seq, key);
                        model.insert((seq, key));
                    }
                    (Some(_), _) => prop_assert!(!q.remove(u64::MAX, key)),
                }
                prop_assert_eq!(q.first(), model.first().map(|p| p.0));
                prop_assert_eq!(q.live(), model.clone());
                q.assert_ordered();
            }
        }
    }

    #[test]
    fn tail_is_the_smallest_written_first_entry() {
        let mut bands = Bands::default();
        bands.upsert((0, 0), || Band::live(5, Vec::new(), 1), |b| b.inflight += 1);
        assert_eq!(
            bands.tail(),
            None,
            "a band not yet taken by a round holds no tail"
        );
        bands.update((0, 0), |b| b.written = true);
        bands.upsert(
            (1, 0),
            || Band::live(3, Vec::new(), 1),
            |b| b.written = true,
        );
        assert_eq!(bands.tail(), Some(3));
        bands.remove(&(1, 0));
        assert_eq!(bands.tail(), Some(5));
        assert!(
            !bands.any_done() && bands.any_busy(),
            "its entry in a round in flight"
        );
        bands.update((0, 0), |b| b.durable = true);
        assert!(bands.any_busy(), "its member writes in flight");
        bands.update((0, 0), |b| b.inflight -= 1);
        assert!(bands.any_done() && !bands.any_busy());
        bands.assert_consistent();
    }

    /// Looked up stripe by stripe or found by a scan, the same bands, sorted, once each.
    #[test]
    fn known_bands_by_lookup_and_by_scan_agree() {
        let mut bands = Bands::default();
        for key in [(3, 0), (3, 5), (7, 1), (40, 2)] {
            bands.upsert(key, || Band::live(1, Vec::new(), 1), |_| {});
        }
        let retired: NumMap<Key, u64> = [((3, 5), 1), ((4, 0), 1), ((9, 3), 1)]
            .into_iter()
            .collect();
        let want = vec![(3, 0), (3, 5), (4, 0), (7, 1)];
        // 5 stripes of 16 bands: 80 lookups, more than the 7 entries, so a scan.
        assert_eq!(known_bands(&bands, &retired, 3..8, 16), want);
        // 5 stripes of 1 band: 5 lookups (only band 0 of each exists then).
        assert_eq!(known_bands(&bands, &retired, 3..8, 1), vec![(3, 0), (4, 0)]);
        // The lookup branch over the same set as the scan: 1 stripe of 6 bands.
        assert_eq!(known_bands(&bands, &retired, 3..4, 6), vec![(3, 0), (3, 5)]);
    }
}
