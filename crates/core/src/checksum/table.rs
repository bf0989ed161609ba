//! The in-memory side of one region's checksums: a bounded cache of entry pages, the header
//! bits (which page groups may lag their data on disk), writes in flight and blocks found
//! bad. No I/O: [`super::LeafChecksums`] loads and writes pages and asks this what to do.

use super::entry::{verdict, BlockSum, Verdict, ENTRIES_PER_PAGE, ENTRY_BYTES, PAGE_BYTES};
use crate::num_hash::{NumMap, NumSet};
use std::collections::{HashMap, HashSet};

/// Every read and write looks up each of its 4 KiB blocks here (a 1 MiB write, ~300 of
/// them, several times): SipHash cost more than the CRC of the bytes.
type BlockMap<V> = NumMap<u64, V>;
type BlockSet = NumSet<u64>;

/// A write not yet answered: the checksums its blocks had before it, `None` where none was
/// known. Its bytes may or may not have landed, so a read of its blocks may find the old
/// bytes and they are as good. Kept per write, not per block: a 1 MiB write is one record,
/// and only a read that does not match its entry looks here.
struct Unanswered {
    first_block: u64,
    olds: Vec<Option<u32>>,
}

impl Unanswered {
    fn old_of(&self, block: u64) -> Option<u32> {
        let i = block.checked_sub(self.first_block)?;
        self.olds.get(usize::try_from(i).ok()?).copied().flatten()
    }
}

/// Names one write begun in a region's table ([`Table::begin_write`]). Unique in the
/// process, so a write begun in a table a blank start replaced never ends another's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct WriteId(u64);

static NEXT_WRITE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl WriteId {
    fn next() -> WriteId {
        WriteId(NEXT_WRITE.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
    }
}

/// One cached page of entries.
struct Page {
    bytes: Box<[u8]>,
    /// Changed since it was last handed out for writing back.
    dirty: bool,
    /// Tick of the last use (least recently used is evicted first).
    used: u64,
    /// Writes holding the page in the cache ([`Table::pin`]): not evicted while any does.
    pins: u32,
}

/// Asks the CPU to bring `bytes`' first cache line into its caches (a hint: it never faults
/// and changes nothing else).
fn prefetch_line(bytes: &[u8]) {
    // SAFETY: SSE is part of every x86-64 CPU, and a prefetch reads and writes nothing.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(bytes.as_ptr().cast())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = bytes;
}

/// A bitset over page groups.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Bits(Vec<u64>);

impl Bits {
    pub(super) fn new(n: u64) -> Bits {
        Bits(vec![0; n.div_ceil(64) as usize])
    }

    pub(super) fn from_bytes(bytes: &[u8], n: u64) -> Bits {
        let mut b = Bits::new(n);
        for i in 0..n {
            if bytes
                .get((i / 8) as usize)
                .is_some_and(|x| x & (1 << (i % 8)) != 0)
            {
                b.set(i);
            }
        }
        b
    }

    pub(super) fn to_bytes(&self, len: usize) -> Vec<u8> {
        let mut out = vec![0u8; len];
        for (w, word) in self.0.iter().enumerate() {
            for bit in 0..64 {
                let i = w * 64 + bit;
                if word & (1 << bit) != 0 && i / 8 < len {
                    out[i / 8] |= 1 << (i % 8);
                }
            }
        }
        out
    }

    pub(super) fn get(&self, i: u64) -> bool {
        self.0
            .get((i / 64) as usize)
            .is_some_and(|w| w & (1 << (i % 64)) != 0)
    }

    pub(super) fn set(&mut self, i: u64) {
        if let Some(w) = self.0.get_mut((i / 64) as usize) {
            *w |= 1 << (i % 64);
        }
    }

    pub(super) fn clear(&mut self, i: u64) {
        if let Some(w) = self.0.get_mut((i / 64) as usize) {
            *w &= !(1 << (i % 64));
        }
    }

    pub(super) fn first_set(&self) -> Option<u64> {
        let (w, word) = self.0.iter().enumerate().find(|(_, w)| **w != 0)?;
        Some(w as u64 * 64 + u64::from(word.trailing_zeros()))
    }
}

/// A page the cache no longer holds whose bytes must reach the disk.
pub(super) struct Evicted {
    pub page: u64,
    pub bytes: Vec<u8>,
}

/// The cache and the bookkeeping (see the module docs).
pub(super) struct Table {
    pages: BlockMap<Page>,
    /// Most pages held at once.
    max_pages: usize,
    tick: u64,
    /// Header bits as they are (or are being written) on disk.
    pub(super) header: Bits,
    /// Header bits known durable: a write under a group whose bit is here needs no header
    /// write first.
    pub(super) durable: Bits,
    /// Groups written since the open ([`Table::begin_write`]): a write into the group after
    /// one of these continues a stream and marks ahead.
    pub(super) written: Bits,
    /// Groups untrusted at open (an unclean shutdown): their pages load as all unknown.
    pub(super) untrusted: Bits,
    pages_per_group: u64,
    groups: u64,
    /// Writes not yet answered that replaced known checksums, by write (few at once: one per
    /// write in flight on the region).
    in_flight: NumMap<u64, Unanswered>,
    /// Blocks found bad and not rewritten yet.
    bad: BlockSet,
    /// Pages evicted and still being written: loads take these bytes, not the disk's.
    evicting: HashMap<u64, Vec<u8>>,
    /// While the area is copied to a replacement: the pages handed out for writing back
    /// since the copy began (`handover.rs` copies them again).
    noted: Option<HashSet<u64>>,
}

impl Table {
    pub(super) fn new(groups: u64, pages_per_group: u64, max_pages: usize) -> Table {
        assert!(max_pages >= 1, "the cache holds at least one page");
        Table {
            pages: BlockMap::default(),
            max_pages,
            tick: 0,
            header: Bits::new(groups),
            durable: Bits::new(groups),
            written: Bits::new(groups),
            untrusted: Bits::new(groups),
            pages_per_group,
            groups,
            in_flight: NumMap::default(),
            bad: BlockSet::default(),
            evicting: HashMap::new(),
            noted: None,
        }
    }

    pub(super) fn pages_per_group(&self) -> u64 {
        self.pages_per_group
    }

    pub(super) fn max_pages(&self) -> usize {
        self.max_pages
    }

    /// The cached bytes of `page`, if held.
    pub(super) fn page_bytes(&self, page: u64) -> Option<Vec<u8>> {
        self.pages.get(&page).map(|p| p.bytes.to_vec())
    }

    /// `bytes` of `page` read from disk as a load sees them (an untrusted group's: blank).
    pub(super) fn as_loaded(&self, page: u64, mut bytes: Vec<u8>) -> Vec<u8> {
        if self.untrusted.get(self.group_of(page)) {
            bytes.fill(0);
        }
        bytes
    }

    /// Notes every page handed out for writing back from now on.
    pub(super) fn start_noting_write_backs(&mut self) {
        self.noted = Some(HashSet::new());
    }

    /// The pages handed out for writing back since the noting started; the noting stops.
    pub(super) fn stop_noting_write_backs(&mut self) -> Vec<u64> {
        let mut pages: Vec<u64> = self.noted.take().unwrap_or_default().into_iter().collect();
        pages.sort_unstable();
        pages
    }

    #[cfg(test)]
    pub(super) fn is_noting_write_backs(&self) -> bool {
        self.noted.is_some()
    }

    fn note_write_back(&mut self, page: u64) {
        if let Some(n) = self.noted.as_mut() {
            n.insert(page);
        }
    }

    /// After an unclean shutdown: groups whose bit was set hold entries that may lag.
    pub(super) fn open_unclean(&mut self, on_disk: Bits) {
        self.untrusted = on_disk.clone();
        self.durable = on_disk.clone();
        self.header = on_disk;
    }

    pub(super) fn header_bits(&self) -> u64 {
        self.groups
    }

    pub(super) fn group_of(&self, page: u64) -> u64 {
        page / self.pages_per_group
    }

    pub(super) fn has_page(&self, page: u64) -> bool {
        self.pages.contains_key(&page)
    }

    /// Bytes an evicted page is still being written with.
    pub(super) fn evicting(&self, page: u64) -> Option<Vec<u8>> {
        self.evicting.get(&page).cloned()
    }

    pub(super) fn evicted_done(&mut self, page: u64) {
        self.evicting.remove(&page);
    }

    /// Adds a page read from disk (unless another load was first); returns the pages pushed
    /// out to stay within the bound that must be written back.
    pub(super) fn insert(&mut self, page: u64, mut bytes: Vec<u8>) -> Vec<Evicted> {
        // Entries written before the crash may lag their data: drop them, and make the
        // dropping durable with the page's next write-back.
        let untrusted = self.untrusted.get(self.group_of(page));
        if untrusted {
            bytes.fill(0);
        }
        self.insert_page(page, bytes, untrusted)
    }

    /// Adds `page` in place of one that did not read: every entry "no checksum" (its blocks
    /// are read unchecked until written again, as after a crash), dirty, so that its
    /// write-back rewrites the bad spot.
    pub(super) fn insert_unreadable(&mut self, page: u64) -> Vec<Evicted> {
        self.insert_page(page, vec![0; PAGE_BYTES as usize], true)
    }

    /// Adds a page back from the bytes of its eviction ([`Table::evicting`]): this table's
    /// own entries (kept as they are), dirty — its write-back may not have finished, or may
    /// have been given up with the load that started it.
    pub(super) fn insert_evicted(&mut self, page: u64, bytes: Vec<u8>) -> Vec<Evicted> {
        self.insert_page(page, bytes, true)
    }

    fn insert_page(&mut self, page: u64, bytes: Vec<u8>, dirty: bool) -> Vec<Evicted> {
        assert_eq!(
            bytes.len() as u64,
            PAGE_BYTES,
            "a page is {PAGE_BYTES} bytes"
        );
        if self.pages.contains_key(&page) {
            return Vec::new();
        }
        self.tick += 1;
        self.pages.insert(
            page,
            Page {
                bytes: bytes.into_boxed_slice(),
                dirty,
                used: self.tick,
                pins: 0,
            },
        );
        self.evict(page)
    }

    /// Drops pages beyond the bound, never `keep` (the page just loaded for its user) nor a
    /// pinned one (the cache then stays over its bound until they are unpinned).
    fn evict(&mut self, keep: u64) -> Vec<Evicted> {
        let mut out = Vec::new();
        while self.pages.len() > self.max_pages {
            // Clean pages first, least recently used first.
            let Some(victim) = self
                .pages
                .iter()
                .filter(|(&k, p)| k != keep && p.pins == 0)
                .min_by_key(|(_, p)| (p.dirty, p.used))
                .map(|(&k, _)| k)
            else {
                break;
            };
            let p = self.pages.remove(&victim).expect("victim present");
            if p.dirty {
                self.note_write_back(victim);
                let bytes = p.bytes.into_vec();
                self.evicting.insert(victim, bytes.clone());
                out.push(Evicted {
                    page: victim,
                    bytes,
                });
            }
        }
        out
    }

    fn slot(&mut self, block: u64) -> (&mut Page, usize) {
        let page = block / ENTRIES_PER_PAGE;
        let at = ((block % ENTRIES_PER_PAGE) * ENTRY_BYTES) as usize;
        self.tick += 1;
        let tick = self.tick;
        let p = self
            .pages
            .get_mut(&page)
            .expect("the page of a block is loaded before its entry is used");
        p.used = tick;
        (p, at)
    }

    /// Pins `page` if it is held (one more write keeps it from eviction); whether it was.
    pub(super) fn pin(&mut self, page: u64) -> bool {
        match self.pages.get_mut(&page) {
            Some(p) => {
                p.pins += 1;
                true
            }
            None => false,
        }
    }

    /// Takes back one [`Table::pin`] of `page`. A page not held has nothing to take back: a
    /// blank start replaced the whole table (`handover.rs`).
    pub(super) fn unpin(&mut self, page: u64) {
        if let Some(p) = self.pages.get_mut(&page) {
            assert!(p.pins > 0, "unpinned as often as pinned");
            p.pins -= 1;
        }
    }

    pub(super) fn entry(&mut self, block: u64) -> BlockSum {
        let (p, at) = self.slot(block);
        BlockSum::decode(&p.bytes[at..at + ENTRY_BYTES as usize])
    }

    pub(super) fn set_entry(&mut self, block: u64, e: BlockSum) {
        let (p, at) = self.slot(block);
        e.encode(&mut p.bytes[at..at + ENTRY_BYTES as usize]);
        p.dirty = true;
    }

    /// Whether every block from `first` on whose entry is known has the checksum `computed`
    /// gives it: a read's fast path, one lookup per page and nothing noted. `None` when a
    /// page is not held; `Some(false)` sends the read to [`Table::judge`], which also accepts
    /// the old checksums of writes in flight.
    pub(super) fn all_match(&mut self, first: u64, computed: &[u32]) -> Option<bool> {
        self.all_match_where(first, computed, true)
    }

    /// As [`Self::all_match`], but a block without a known checksum does not match: only
    /// bytes vouched for by their checksum pass (a read checked without the blocks' lock).
    pub(super) fn all_known_match(&mut self, first: u64, computed: &[u32]) -> Option<bool> {
        self.all_match_where(first, computed, false)
    }

    fn all_match_where(
        &mut self,
        first: u64,
        computed: &[u32],
        unknown_passes: bool,
    ) -> Option<bool> {
        self.tick += 1;
        let tick = self.tick;
        let mut block = first;
        let mut rest = computed;
        while !rest.is_empty() {
            let in_page = ((ENTRIES_PER_PAGE - block % ENTRIES_PER_PAGE) as usize).min(rest.len());
            let p = self.pages.get_mut(&(block / ENTRIES_PER_PAGE))?;
            p.used = tick;
            let at = ((block % ENTRIES_PER_PAGE) * ENTRY_BYTES) as usize;
            let entries =
                p.bytes[at..at + in_page * ENTRY_BYTES as usize].chunks_exact(ENTRY_BYTES as usize);
            let (here, next) = rest.split_at(in_page);
            let differs = |(e, &c): (&[u8], &u32)| match BlockSum::decode(e) {
                BlockSum::Known(s) => s != c,
                _ => !unknown_passes,
            };
            if entries.zip(here).any(differs) {
                return Some(false);
            }
            rest = next;
            block += in_page as u64;
        }
        Some(true)
    }

    /// Asks the CPU to fetch the cache lines of the entries of `blocks` (one page's, held):
    /// a read does it before its member I/O, so the check after finds them in the cache.
    pub(super) fn prefetch(&self, blocks: std::ops::Range<u64>) {
        let Some(p) = self.pages.get(&(blocks.start / ENTRIES_PER_PAGE)) else {
            return;
        };
        let at = ((blocks.start % ENTRIES_PER_PAGE) * ENTRY_BYTES) as usize;
        let len = ((blocks.end - blocks.start) * ENTRY_BYTES) as usize;
        let entries = &p.bytes[at..at + len];
        for line in entries.chunks(64) {
            prefetch_line(line);
        }
    }

    /// [`Self::prefetch`] for `blocks` over any number of pages, if every page is held:
    /// whether they all were (nothing is asked for a page that is not).
    pub(super) fn prefetch_held(&self, blocks: std::ops::Range<u64>) -> bool {
        let pages = blocks.start / ENTRIES_PER_PAGE..=(blocks.end - 1) / ENTRIES_PER_PAGE;
        if !pages.clone().all(|page| self.has_page(page)) {
            return false;
        }
        for page in pages {
            let (p0, p1) = (page * ENTRIES_PER_PAGE, (page + 1) * ENTRIES_PER_PAGE);
            self.prefetch(p0.max(blocks.start)..p1.min(blocks.end));
        }
        true
    }

    /// Judges one block read; with a bad verdict, whether the block was not known bad yet
    /// (a bad block read again before its rewrite is counted once).
    pub(super) fn judge(&mut self, block: u64, computed: u32) -> (Verdict, bool) {
        let v = self.peek(block, computed);
        let new = matches!(v, Verdict::Bad { .. }) && self.bad.insert(block);
        (v, new)
    }

    /// Judges one block without noting it bad (a check of bytes not read from the member).
    pub(super) fn peek(&mut self, block: u64, computed: u32) -> Verdict {
        let e = self.entry(block);
        let olds = match e {
            BlockSum::Known(stored) if stored != computed => self.olds_of(block),
            _ => Vec::new(),
        };
        verdict(e, computed, &olds)
    }

    /// The checksums unanswered writes replaced on `block`.
    fn olds_of(&self, block: u64) -> Vec<u32> {
        self.in_flight
            .values()
            .filter_map(|w| w.old_of(block))
            .collect()
    }

    /// A write of `entries` to the blocks from `first` on starts (their pages held): the
    /// entries take the new checksums, and the old ones stay acceptable until
    /// [`Table::end_write`]. One page lookup per page, not per block.
    pub(super) fn begin_write(&mut self, first: u64, entries: &[BlockSum]) -> WriteId {
        self.tick += 1;
        let tick = self.tick;
        let mut olds = Vec::with_capacity(entries.len());
        let mut block = first;
        let mut rest = entries;
        while !rest.is_empty() {
            let in_page = ((ENTRIES_PER_PAGE - block % ENTRIES_PER_PAGE) as usize).min(rest.len());
            let p = self
                .pages
                .get_mut(&(block / ENTRIES_PER_PAGE))
                .expect("the page of a block is loaded before its entry is used");
            p.used = tick;
            p.dirty = true;
            let at = ((block % ENTRIES_PER_PAGE) * ENTRY_BYTES) as usize;
            let stored = p.bytes[at..at + in_page * ENTRY_BYTES as usize]
                .chunks_exact_mut(ENTRY_BYTES as usize);
            let (here, next) = rest.split_at(in_page);
            for (bytes, &new) in stored.zip(here) {
                olds.push(match BlockSum::decode(bytes) {
                    BlockSum::Known(old) => Some(old),
                    BlockSum::Unknown => None,
                });
                new.encode(bytes);
            }
            rest = next;
            block += in_page as u64;
        }
        if !entries.is_empty() {
            let last = first + entries.len() as u64 - 1;
            let groups =
                self.group_of(first / ENTRIES_PER_PAGE)..=self.group_of(last / ENTRIES_PER_PAGE);
            groups.for_each(|g| self.written.set(g));
        }
        let id = WriteId::next();
        if olds.iter().any(Option::is_some) {
            let w = Unanswered {
                first_block: first,
                olds,
            };
            self.in_flight.insert(id.0, w);
        }
        id
    }

    /// The write begun as `id` over `blocks` blocks from `first` was answered; returns how
    /// many of them had been found bad (repairs).
    pub(super) fn end_write(&mut self, id: WriteId, first: u64, blocks: u64) -> usize {
        self.in_flight.remove(&id.0);
        if self.bad.is_empty() {
            return 0;
        }
        (first..first + blocks)
            .filter(|b| self.bad.remove(b))
            .count()
    }

    /// The write begun as `id` failed: its old checksums are no longer accepted (its blocks'
    /// entries are dropped by the caller), nor do its blocks count as repaired.
    pub(super) fn abandon_write(&mut self, id: WriteId) {
        self.in_flight.remove(&id.0);
    }

    /// The write begun as `id` never reached its member: the checksums its entries replaced,
    /// block by block from its first (`None`: none was known; empty: none of them was).
    pub(super) fn take_refused(&mut self, id: WriteId) -> Vec<Option<u32>> {
        self.in_flight
            .remove(&id.0)
            .map(|w| w.olds)
            .unwrap_or_default()
    }

    /// The dirty pages' bytes, handed out for writing back (they count as clean from now on;
    /// a later change makes them dirty again).
    pub(super) fn take_dirty(&mut self) -> Vec<(u64, Vec<u8>)> {
        let mut out: Vec<(u64, Vec<u8>)> = self
            .pages
            .iter_mut()
            .filter(|(_, p)| p.dirty)
            .map(|(&k, p)| {
                p.dirty = false;
                (k, p.bytes.to_vec())
            })
            .collect();
        out.sort_unstable_by_key(|(k, _)| *k);
        for &(page, _) in &out {
            self.note_write_back(page);
        }
        out
    }

    /// A write-back failed: the page is dirty again.
    pub(super) fn redirty(&mut self, page: u64) {
        if let Some(p) = self.pages.get_mut(&page) {
            p.dirty = true;
        }
    }

    #[cfg(test)]
    pub(super) fn cached_pages(&self) -> usize {
        self.pages.len()
    }
}

#[cfg(test)]
#[path = "table_tests.rs"]
mod tests;
