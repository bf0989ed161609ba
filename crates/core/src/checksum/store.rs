//! A region's checksum area on its member, through the region's page cache ([`Table`]): the
//! header read once at open, entry pages loaded on demand (one load of a page at a time),
//! pushed-out and dirty pages written back, header bits made durable before data is written
//! under them. The verdicts and the write protocol above it are `mod.rs`'s; this is where
//! the area's bytes move.

use super::entry::{self, ENTRIES_PER_PAGE, HEADER_BYTES, PAGE_BYTES};
use super::table::{Bits, Table};
use super::ChecksumArea;
use crate::buf::Buf;
use crate::member::{Member, MemberResult};
use std::ops::{Range, RangeInclusive};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

/// Locks that keep two loads of one entry page apart ([`EntryStore`] `loads`): pages
/// further apart than this load side by side.
const PAGE_LOAD_LOCKS: usize = 16;

/// One region's entries on its member (see the module docs).
pub(super) struct EntryStore {
    pub(super) area: ChecksumArea,
    /// The volume was shut down cleanly: the header need not be read.
    clean_open: bool,
    opened: AtomicBool,
    /// The groups the header distrusted at open (an unclean start dropped their entries):
    /// kept as read, for the pass that gives them back (`fill.rs`).
    dropped: parking_lot::Mutex<Bits>,
    table: parking_lot::Mutex<Table>,
    /// Serializes header writes.
    pub(super) header_lock: futures::lock::Mutex<()>,
    /// Held by a flush while it writes pages back (a hand-over to a replacement waits for
    /// it: `handover.rs`).
    pub(super) write_backs: futures::lock::Mutex<()>,
    /// Held while a page is read in, by the page's number modulo their count: the writers
    /// of a stream that all need a page a slow disk is bringing in wait for that one read
    /// instead of each reading the page again (25 reads of each page were measured).
    loads: [futures::lock::Mutex<()>; PAGE_LOAD_LOCKS],
}

/// Entry pages held in a region's cache for one write ([`EntryStore::pin_pages`]);
/// unpinned when dropped.
pub struct PinnedPages<'a> {
    store: &'a EntryStore,
    pub(super) first_page: u64,
    /// Pages pinned so far, from `first_page` on.
    pinned: u64,
}

impl Drop for PinnedPages<'_> {
    fn drop(&mut self) {
        let mut t = self.store.table();
        for page in self.first_page..self.first_page + self.pinned {
            t.unpin(page);
        }
    }
}

impl EntryStore {
    pub(super) fn new(area: ChecksumArea, clean_open: bool, table: Table) -> EntryStore {
        EntryStore {
            area,
            clean_open,
            opened: AtomicBool::new(false),
            dropped: parking_lot::Mutex::new(Bits::default()),
            table: parking_lot::Mutex::new(table),
            header_lock: futures::lock::Mutex::new(()),
            write_backs: futures::lock::Mutex::new(()),
            loads: std::array::from_fn(|_| futures::lock::Mutex::new(())),
        }
    }

    /// The page cache and its bookkeeping (no I/O under it).
    pub(super) fn table(&self) -> parking_lot::MutexGuard<'_, Table> {
        self.table.lock()
    }

    /// Whether the header has been read (or needs no reading).
    pub(super) fn is_open(&self) -> bool {
        self.opened.load(Relaxed)
    }

    /// Marks the area open without reading its header (a cleared area has nothing to
    /// distrust).
    pub(super) fn set_open(&self) {
        self.opened.store(true, Relaxed);
    }

    /// Reads the header once: after an unclean shutdown its set bits name untrusted groups.
    pub(super) async fn open(&self, m: &dyn Member) -> MemberResult<()> {
        if self.is_open() {
            return Ok(());
        }
        let _g = self.header_lock.lock().await;
        if self.is_open() {
            return Ok(());
        }
        if !self.clean_open {
            // A header that does not read names no group trusted: every entry is dropped.
            let header = Buf::new(HEADER_BYTES as usize);
            let bytes = match m.read(self.area.offset_bytes, header).await {
                Ok(b) => b.to_vec(),
                Err(e) => {
                    tracing::warn!(
                        "{e}: the checksum area's header does not read; every checksum is dropped"
                    );
                    vec![0xff; HEADER_BYTES as usize]
                }
            };
            let mut t = self.table();
            let n = t.header_bits();
            let bits = Bits::from_bytes(&bytes, n);
            *self.dropped.lock() = bits.clone();
            t.open_unclean(bits);
        }
        self.set_open();
        Ok(())
    }

    /// The page groups whose entries this open dropped, in order (none after a clean start,
    /// or before [`EntryStore::open`]).
    pub(super) fn dropped_groups(&self) -> Vec<u64> {
        let n = self.table().header_bits();
        let dropped = self.dropped.lock();
        (0..n).filter(|&g| dropped.get(g)).collect()
    }

    /// Where entry page `page` lies on the member.
    pub(super) fn page_offset(&self, page: u64) -> u64 {
        self.area.offset_bytes + HEADER_BYTES + page * PAGE_BYTES
    }

    /// Loads entry page `page` into the cache (writing back what it pushes out), unless it
    /// is held: one load of a page at a time, the others waiting for it.
    async fn load_page(&self, m: &dyn Member, page: u64) -> MemberResult<()> {
        if self.table().has_page(page) {
            return Ok(());
        }
        let _one = self.loads[(page % PAGE_LOAD_LOCKS as u64) as usize]
            .lock()
            .await;
        let (held, evicting) = {
            let t = self.table();
            (t.has_page(page), t.evicting(page))
        };
        if held {
            return Ok(());
        }
        let out = match evicting {
            Some(b) => self.table().insert_evicted(page, b),
            None => match m
                .read(self.page_offset(page), Buf::new(PAGE_BYTES as usize))
                .await
            {
                Ok(b) => self.table().insert(page, b.to_vec()),
                // A bad spot in the area costs the checksums it held, not the member: its
                // data is no less there (a dead member fails on its data's own I/O).
                Err(e) => {
                    tracing::warn!(
                        "{e}: checksum entry page {page} does not read; the blocks it covers are read unchecked until written again"
                    );
                    self.table().insert_unreadable(page)
                }
            },
        };
        // The page is in; what it pushed out is written without holding up the next load
        // of this lock (a load of an evicted page takes its bytes from `evicting`).
        drop(_one);
        for e in out {
            let r = self.write_page(m, e.page, &e.bytes).await;
            self.table().evicted_done(e.page);
            r?;
        }
        Ok(())
    }

    /// Writes entry page `page`'s `bytes` to `m` (not FUA: the volume's flush makes it
    /// durable).
    pub(super) async fn write_page(
        &self,
        m: &dyn Member,
        page: u64,
        bytes: &[u8],
    ) -> MemberResult<()> {
        m.write(
            self.page_offset(page),
            Buf::copy_from(bytes).freeze(),
            false,
        )
        .await
    }

    /// Writes `header` (the header's bytes) to `m`, FUA: a bit is durable before any data
    /// write it covers.
    pub(super) async fn write_header(&self, m: &dyn Member, header: &[u8]) -> MemberResult<()> {
        m.write(
            self.area.offset_bytes,
            Buf::copy_from(header).freeze(),
            true,
        )
        .await
    }

    /// Runs `f` on the table for each entry page of blocks `first..last`, the page loaded
    /// (pages one at a time: the cache may hold fewer than a request spans).
    pub(super) async fn each_page(
        &self,
        m: &dyn Member,
        first: u64,
        last: u64,
        mut f: impl FnMut(&mut Table, Range<u64>),
    ) -> MemberResult<()> {
        for page in first / ENTRIES_PER_PAGE..=(last - 1) / ENTRIES_PER_PAGE {
            let blocks =
                (page * ENTRIES_PER_PAGE).max(first)..((page + 1) * ENTRIES_PER_PAGE).min(last);
            // One lock when the page is held (nearly always); otherwise load it and look
            // again (another load may push it out in between).
            loop {
                {
                    let mut t = self.table();
                    if t.has_page(page) {
                        f(&mut t, blocks);
                        break;
                    }
                }
                self.load_page(m, page).await?;
            }
        }
        Ok(())
    }

    /// Loads the entry pages of blocks `first..last` and pins them in the cache until the
    /// returned [`PinnedPages`] is dropped.
    pub(super) async fn pin_pages(
        &self,
        m: &dyn Member,
        first: u64,
        last: u64,
    ) -> MemberResult<PinnedPages<'_>> {
        assert!(first < last, "pinned pages cover a block");
        self.open(m).await?;
        let mut pinned = PinnedPages {
            store: self,
            first_page: first / ENTRIES_PER_PAGE,
            pinned: 0,
        };
        for page in pinned.first_page..=(last - 1) / ENTRIES_PER_PAGE {
            while !self.table().pin(page) {
                self.load_page(m, page).await?;
            }
            pinned.pinned += 1;
        }
        Ok(pinned)
    }

    /// The page groups blocks `first..last` lie in.
    fn groups_of(&self, first: u64, last: u64) -> RangeInclusive<u64> {
        let t = self.table();
        t.group_of(first / ENTRIES_PER_PAGE)..=t.group_of((last - 1) / ENTRIES_PER_PAGE)
    }

    /// Whether the header bits of blocks `first..last` are all durable already.
    pub(super) fn groups_durable(&self, first: u64, last: u64) -> bool {
        let groups = self.groups_of(first, last);
        let t = self.table();
        groups.into_iter().all(|g| t.durable.get(g))
    }

    /// Makes the header bits of blocks `first..last` durable before data is written there;
    /// a write into the group after one written since the open marks ahead
    /// ([`entry::groups_to_mark`]).
    pub(super) async fn mark_groups(
        &self,
        m: &dyn Member,
        first: u64,
        last: u64,
    ) -> MemberResult<()> {
        if self.groups_durable(first, last) {
            return Ok(());
        }
        let needed = self.groups_of(first, last);
        let _g = self.header_lock.lock().await;
        let (marked, bytes) = {
            let mut t = self.table();
            if needed.clone().all(|g| t.durable.get(g)) {
                return Ok(());
            }
            let (a, b) = (*needed.start(), *needed.end());
            // A stream: the group before was written since the open (marked only ahead of
            // a writer does not count, or writes beside those would mark further and further).
            let streaming = a > 0 && t.written.get(a - 1);
            let marked =
                entry::groups_to_mark(a, b, streaming, t.header_bits(), t.pages_per_group());
            marked.clone().for_each(|g| t.header.set(g));
            (marked, t.header.to_bytes(HEADER_BYTES as usize))
        };
        self.write_header(m, &bytes).await?;
        let mut t = self.table();
        marked.for_each(|g| t.durable.set(g));
        Ok(())
    }

    /// After an unclean open: blank pages written over the groups the header distrusted
    /// (the pages the cache holds are blank already, and dirty), which are trusted from then
    /// on; returns how many. Left on disk, their stale entries would be trusted by the start
    /// after a clean shutdown: every block written just before the crash a false mismatch.
    /// A page written back meanwhile and blanked after loses its entries (unknown, not wrong).
    /// Pages go in runs of up to [`PAGE_LOAD_LOCKS`] (each page's load lock held, taken in
    /// page order: consecutive pages have distinct locks), one write a run of pages the
    /// cache does not hold — a whole area distrusted is 1/512 of the region.
    pub(super) async fn blank_untrusted(&self, m: &dyn Member) -> MemberResult<usize> {
        let area_pages = (self.area.len_bytes - HEADER_BYTES) / PAGE_BYTES;
        let per_group = self.table().pages_per_group();
        let mut written = 0;
        loop {
            let first = self.table().untrusted.first_set();
            let Some(g) = first else { break };
            let group = g * per_group..((g + 1) * per_group).min(area_pages);
            let mut at = group.start;
            while at < group.end {
                let end = (at + PAGE_LOAD_LOCKS as u64).min(group.end);
                written += self.blank_pages(m, at..end).await?;
                at = end;
            }
            self.table().untrusted.clear(g);
        }
        Ok(written)
    }

    /// Blanks the pages of `pages` (at most [`PAGE_LOAD_LOCKS`]) the cache does not hold,
    /// their load locks held; how many.
    async fn blank_pages(&self, m: &dyn Member, pages: Range<u64>) -> MemberResult<usize> {
        debug_assert!(pages.end - pages.start <= PAGE_LOAD_LOCKS as u64);
        let mut held_locks = Vec::with_capacity(PAGE_LOAD_LOCKS);
        for page in pages.clone() {
            held_locks.push(
                self.loads[(page % PAGE_LOAD_LOCKS as u64) as usize]
                    .lock()
                    .await,
            );
        }
        let cached: Vec<bool> = {
            let t = self.table();
            (pages.clone())
                .map(|p| t.has_page(p) || t.evicting(p).is_some())
                .collect()
        };
        let mut written = 0;
        let mut page = pages.start;
        while page < pages.end {
            let run = (page..pages.end)
                .take_while(|&p| !cached[(p - pages.start) as usize])
                .count() as u64;
            if run > 0 {
                let zeroes = Buf::zeroed((run * PAGE_BYTES) as usize).freeze();
                m.write(self.page_offset(page), zeroes, false).await?;
                written += run as usize;
            }
            page += run.max(1);
        }
        Ok(written)
    }

    /// Writes the changed entry pages back (before the member flush that makes them
    /// durable); returns how many. A page that fails to write stays dirty and the error is
    /// returned.
    pub(super) async fn flush(&self, m: &dyn Member) -> MemberResult<usize> {
        let _backs = self.write_backs.lock().await;
        let dirty = self.table().take_dirty();
        let written = dirty.len();
        let mut first_err = None;
        for (page, bytes) in dirty {
            if let Err(e) = self.write_page(m, page, &bytes).await {
                self.table().redirty(page);
                first_err.get_or_insert(e);
            }
        }
        match first_err {
            None => Ok(written),
            Some(e) => Err(e),
        }
    }
}
