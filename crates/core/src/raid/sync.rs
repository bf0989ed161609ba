//! What is known about each stripe's parity: known in sync (a bitmap, or all), or known
//! stale after a write failed beyond tolerance (a bitmap made on the first such write).
//! Memory only, a bit per stripe at most for each; decided at assembly
//! ([`SyncState::at_assembly`]) and learned from writes.
//!
//! # Ordering
//! Every change to a stripe's marks is made under the stripe's exclusive lock (writes and
//! zeroing: `salvage`, `settle`, `write_whole_stripes`, `zero_whole_stripes`), and every
//! question whose answer a path acts on is asked under the stripe's lock, shared at least
//! (reads, writes, scrub, rebuild). The lock orders a change before the questions after it;
//! the atomics are there because stripes sharing a word change at once under their own
//! locks: each word's read-modify-write, and the stale count's, is indivisible. A stripe's
//! count increment precedes its decrement (both under its lock), so the count is never below
//! the stale stripes a locked question can see: zero means none of them. Only
//! `ParityNode::readable` asks without a lock: a hint for a mirror's choice of copy, as it
//! was under a mutex (the answer could change the moment the mutex was let go).

use super::SyncState;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;

/// A bit per stripe, each set and cleared on its own.
struct StripeBits(Box<[AtomicU64]>);

impl StripeBits {
    /// `stripes` bits, all clear.
    fn new(stripes: u64) -> StripeBits {
        StripeBits(
            (0..stripes.div_ceil(64))
                .map(|_| AtomicU64::new(0))
                .collect(),
        )
    }

    fn word(&self, stripe: u64) -> &AtomicU64 {
        &self.0[(stripe / 64) as usize]
    }

    fn get(&self, stripe: u64) -> bool {
        self.word(stripe).load(Ordering::Acquire) & (1 << (stripe % 64)) != 0
    }

    /// Sets `stripe`'s bit: whether it was clear.
    fn set(&self, stripe: u64) -> bool {
        let bit = 1 << (stripe % 64);
        self.word(stripe).fetch_or(bit, Ordering::AcqRel) & bit == 0
    }

    /// The words over `first..=last`, each with the mask of its bits in the range.
    fn words(&self, first: u64, last: u64) -> impl Iterator<Item = (&AtomicU64, u64)> {
        (first / 64..=last / 64).map(move |w| {
            let lo = if w == first / 64 { first % 64 } else { 0 };
            let hi = if w == last / 64 { last % 64 } else { 63 };
            (
                &self.0[w as usize],
                (u64::MAX << lo) & (u64::MAX >> (63 - hi)),
            )
        })
    }

    /// Clears the bits of `stripes`: how many were set.
    fn clear(&self, stripes: Range<u64>) -> u64 {
        if stripes.is_empty() {
            return 0;
        }
        self.words(stripes.start, stripes.end - 1)
            .map(|(w, m)| u64::from((w.fetch_and(!m, Ordering::AcqRel) & m).count_ones()))
            .sum()
    }

    /// Whether any bit of `first..=last` is set: a word read per 64 stripes.
    fn any(&self, first: u64, last: u64) -> bool {
        first <= last
            && self
                .words(first, last)
                .any(|(w, m)| w.load(Ordering::Acquire) & m != 0)
    }

    /// Heap bytes held.
    #[cfg(test)]
    fn bytes(&self) -> usize {
        std::mem::size_of_val(&*self.0)
    }
}

/// Stripes known to have parity matching data.
enum SyncMap {
    All,
    Some(StripeBits),
}

/// The parity health of every stripe of one group.
pub(super) struct StripeHealth {
    sync: SyncMap,
    /// Stripes in the group (the bits `stale` holds).
    stripes: u64,
    /// Stripes whose parity is known not to match their data: a write failed beyond the
    /// stripe's tolerance after (or instead of) writing some chunks. Never rebuilt from until
    /// a whole-chunk reconstruct-write or full-stripe write makes them consistent again.
    /// Made on the first such write (most groups never have one), kept from then on.
    stale: OnceLock<StripeBits>,
    /// Bits set in `stale`: an `any_stale` of a group with none reads no bitmap.
    stale_count: AtomicU64,
    /// Set when some stripe ever lost a write beyond tolerance (for logs only).
    warned: AtomicBool,
}

impl StripeHealth {
    pub fn new(sync: SyncState, stripes: u64) -> StripeHealth {
        let sync = match sync {
            SyncState::Clean => SyncMap::All,
            SyncState::Unknown => SyncMap::Some(StripeBits::new(stripes)),
        };
        StripeHealth {
            sync,
            stripes,
            stale: OnceLock::new(),
            stale_count: AtomicU64::new(0),
            warned: AtomicBool::new(false),
        }
    }

    pub fn in_sync(&self, stripe: u64) -> bool {
        match &self.sync {
            SyncMap::All => true,
            SyncMap::Some(bits) => bits.get(stripe),
        }
    }

    pub fn mark_in_sync(&self, stripe: u64) {
        if let SyncMap::Some(bits) = &self.sync {
            bits.set(stripe);
        }
    }

    pub fn is_stale(&self, stripe: u64) -> bool {
        stripe < self.stripes && self.stale.get().is_some_and(|bits| bits.get(stripe))
    }

    /// Whether any of stripes `first..=last` is stale: a word read per 64 stripes, none when
    /// no stripe is. Stripes past the group's end are not.
    pub fn any_stale(&self, first: u64, last: u64) -> bool {
        self.stale_count.load(Ordering::Acquire) != 0
            && (self.stale.get())
                .is_some_and(|bits| bits.any(first, last.min(self.stripes.saturating_sub(1))))
    }

    /// A write failed beyond the stripe's tolerance: its parity no longer matches its data.
    pub fn mark_stale(&self, stripe: u64) {
        assert!(
            stripe < self.stripes,
            "stripe {stripe} marked stale in a group of {} stripes",
            self.stripes
        );
        let bits = self.stale.get_or_init(|| StripeBits::new(self.stripes));
        if bits.set(stripe) {
            self.stale_count.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Parity was regenerated from the whole stripes' data: consistent again.
    pub fn mark_consistent(&self, stripes: Range<u64>) {
        if self.stale_count.load(Ordering::Acquire) == 0 {
            return;
        }
        if let Some(bits) = self.stale.get() {
            let cleared = bits.clear(stripes.start..stripes.end.min(self.stripes));
            if cleared != 0 {
                self.stale_count.fetch_sub(cleared, Ordering::AcqRel);
            }
        }
    }

    /// Whether this is the first write of the group to lose more chunks than parity covers
    /// (said once in the log).
    pub fn first_loss(&self) -> bool {
        !self.warned.swap(true, Ordering::Relaxed)
    }

    /// Stripes known stale.
    #[cfg(test)]
    fn stale_count(&self) -> u64 {
        self.stale_count.load(Ordering::Acquire)
    }

    /// Heap bytes holding the stale stripes.
    #[cfg(test)]
    fn stale_heap_bytes(&self) -> usize {
        self.stale.get().map_or(0, StripeBits::bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{ParityCore, ParityNode, SyncState};
    use super::StripeHealth;
    use crate::buf::{Buf, SharedBuf};
    use crate::memory::MemoryMember;
    use crate::mirror::MirrorNode;
    use crate::node::{ArrayNode, LeafNode, MemberTable, NodeIo};
    use crate::{CacheMode, Member, ReadPolicy};
    use futures::executor::block_on;
    use nbraid_layout::{Node, ParityLayout};
    use std::sync::atomic::AtomicU64;
    use std::sync::Arc;

    /// A mirror of two RAID 5 groups of three members (copy 0 on members 0–2, copy 1 on
    /// 3–5), `stripes` stripes of 4 KiB strips each, parity known in sync; and copy 0's
    /// group, to look at.
    fn mirror_of_raid5s(
        stripes: u64,
        cache: CacheMode,
    ) -> (MirrorNode, Arc<ParityCore>, Arc<MemberTable>) {
        const STRIP: u64 = 4096;
        let len = stripes * STRIP;
        let members: Vec<Arc<dyn Member>> = (0..6)
            .map(|i| Arc::new(MemoryMember::new(format!("m{i}"), len)) as Arc<dyn Member>)
            .collect();
        let table = Arc::new(MemberTable::new(members));
        let repairs = Arc::new(AtomicU64::new(0));
        let group = |first: usize| {
            let leaves = (first..first + 3)
                .map(|i| Node::member(i, 0, len))
                .collect();
            let node = Node::parity(STRIP, 1, ParityLayout::LeftSymmetric, leaves).unwrap();
            let Node::Parity(g) = &node else {
                unreachable!()
            };
            let kids = (first..first + 3)
                .map(|i| Box::new(LeafNode::new(i, 0, len, table.clone())) as Box<dyn ArrayNode>)
                .collect();
            ParityNode::new(
                g.clone(),
                kids,
                node.capacity(),
                SyncState::Clean,
                cache,
                None,
                repairs.clone(),
            )
        };
        let (copy0, copy1) = (group(0), group(3));
        let core0 = copy0.core.clone();
        let capacity = copy0.capacity();
        let mirror = MirrorNode::new(
            vec![Box::new(copy0), Box::new(copy1)],
            capacity,
            ReadPolicy::default(),
            4096,
            repairs,
        );
        (mirror, core0, table)
    }

    /// The stale marks answer as a set of stripes would, over random marks, regenerated
    /// ranges and questions (ranges within a word, across words, past the group's end).
    #[test]
    fn stale_marks_answer_as_a_set_of_stripes() {
        use rand::{rngs::SmallRng, Rng, SeedableRng};
        use std::collections::BTreeSet;
        let mut rng = SmallRng::seed_from_u64(0x57a1e);
        for stripes in [1, 63, 64, 65, 200, 1000] {
            let h = StripeHealth::new(SyncState::Clean, stripes);
            let mut model = BTreeSet::new();
            assert!(!h.any_stale(0, stripes + 5) && h.stale_heap_bytes() == 0);
            h.mark_consistent(0..stripes);
            assert_eq!(h.stale_heap_bytes(), 0, "no bitmap until a stripe is stale");
            for _ in 0..2000 {
                let a = rng.gen_range(0..stripes);
                let b = rng.gen_range(a..(a + 130).min(stripes + 3));
                match rng.gen_range(0..3) {
                    0 => {
                        h.mark_stale(a);
                        model.insert(a);
                    }
                    1 => {
                        h.mark_consistent(a..b);
                        model.retain(|s| !(a..b).contains(s));
                    }
                    _ => {}
                }
                assert_eq!(h.any_stale(a, b), model.range(a..=b).next().is_some());
                assert_eq!(h.is_stale(a), model.contains(&a));
                assert!(!h.is_stale(stripes + a));
                assert_eq!(h.stale_count(), model.len() as u64);
            }
            assert_eq!(h.stale_heap_bytes(), stripes.div_ceil(64) as usize * 8);
        }
    }

    /// Counts the warnings and errors logged on this thread while it is the default.
    #[derive(Default)]
    struct Warnings(std::sync::atomic::AtomicUsize);

    impl tracing::Subscriber for Warnings {
        fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
            tracing::span::Id::from_u64(1)
        }
        fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
        fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
        fn event(&self, e: &tracing::Event<'_>) {
            if *e.metadata().level() <= tracing::Level::WARN {
                self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
        fn enter(&self, _: &tracing::span::Id) {}
        fn exit(&self, _: &tracing::span::Id) {}
    }

    /// A copy whose RAID 5 lost two members that stay unreplaced salvages every write that
    /// reaches it and marks its stripe stale, while the other copy serves the volume. What
    /// holds those marks is bounded by the group's size (a bit per stripe), however many
    /// stripes the writes touch — it was a hash set growing by at least 9 bytes per stripe
    /// (a volume written all over held GBs), scanned whole by every `any_stale`.
    /// 4 KiB into stripe 0, `every`, 2 × `every`, … (`written` stripes of 8 KiB of data),
    /// the `j`th filled with `j % 251`.
    fn write_spread(mirror: &MirrorNode, written: u64, every: u64) {
        for j in 0..written {
            let at = j * every * 8192;
            let data = SharedBuf::from(Buf::copy_from(&[(j % 251) as u8; 4096]));
            block_on(mirror.write(at, data, false)).unwrap();
        }
    }

    #[test]
    fn stale_stripes_of_a_copy_beyond_tolerance_cost_memory_bounded_by_the_group() {
        let stripes = 1 << 16;
        let (mirror, core0, table) = mirror_of_raid5s(stripes, CacheMode::WriteThrough);
        let health = &core0.stripes.health;
        table.fail(1, &"test");
        table.fail(2, &"test");
        // 4 KiB into every 16th stripe (8 KiB of data each): 4096 distinct stripes.
        let written = 4096;
        let every = stripes / written;
        let warnings = Arc::new(Warnings::default());
        tracing::subscriber::with_default(warnings.clone(), || {
            write_spread(&mirror, written, every);
        });
        let logged = warnings.0.load(std::sync::atomic::Ordering::Relaxed);
        assert_eq!(
            logged, 1,
            "the group's first lost write is logged, no other"
        );
        assert_eq!(
            health.stale_count(),
            written,
            "every stripe written is stale"
        );
        // The other copy serves what was written.
        let last = (written - 1) * every * 8192;
        let got = block_on(mirror.read(last, Buf::new(4096))).unwrap();
        assert!(got.iter().all(|&x| x == ((written - 1) % 251) as u8));
        let bound = stripes.div_ceil(64) as usize * 8;
        let held = health.stale_heap_bytes();
        assert!(
            held <= bound,
            "{written} stale stripes of {stripes} held in {held} bytes, above a bit per stripe ({bound})"
        );
    }

    /// Zero members have zero parity: in sync. Anything else may not be.
    #[test]
    fn parity_starts_in_sync_only_over_known_zero_members() {
        assert_eq!(SyncState::at_assembly(true), SyncState::Clean);
        assert_eq!(SyncState::at_assembly(false), SyncState::Unknown);
    }

    /// As above with a write-back cache: the stale marks as bounded, and the writes, their
    /// evictions (of stripes that stay cached, each failing again) and aged destages say
    /// little more than the loss itself. A line per write and per aged entry each flusher
    /// tick before.
    #[test]
    fn a_write_back_copy_beyond_tolerance_logs_no_line_per_write() {
        let stripes = 1 << 16;
        let cache = CacheMode::WriteBack { bytes: 64 << 10 };
        let (mirror, core0, table) = mirror_of_raid5s(stripes, cache);
        table.fail(1, &"test");
        table.fail(2, &"test");
        let written = 4096;
        let every = stripes / written;
        let warnings = Arc::new(Warnings::default());
        tracing::subscriber::with_default(warnings.clone(), || {
            write_spread(&mirror, written, every);
            for _ in 0..16 {
                block_on(
                    core0
                        .destager()
                        .destage_older_than(std::time::Duration::ZERO),
                );
            }
        });
        let cached = core0.cache.as_ref().unwrap().state.lock().entries.len();
        assert!(cached > 0, "stripes that cannot be destaged stay cached");
        let failed = (core0.cache.as_ref().unwrap().failed_destages)
            .load(std::sync::atomic::Ordering::Relaxed);
        assert!(failed >= written - 64, "{failed} failed destages");
        let logged = warnings.0.load(std::sync::atomic::Ordering::Relaxed) as u64;
        assert!(
            logged <= 2 + failed.ilog2() as u64,
            "{logged} warnings for {failed} failed destages"
        );
        let health = &core0.stripes.health;
        assert_eq!(health.stale_count(), written);
        assert_eq!(health.stale_heap_bytes(), stripes.div_ceil(64) as usize * 8);
    }
}
