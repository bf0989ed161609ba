//! A volume's checksum setup: where each member's area is, how its regions open (a clean
//! shutdown trusts every entry), and the regions handed out — one [`LeafChecksums`] per
//! region, shared by every leaf over it.

use super::entry::{area_bytes, pages, pages_per_group, BLOCK_BYTES, HEADER_BITS, PAGE_BYTES};
use super::store::EntryStore;
use super::table::Table;
use super::{ChecksumArea, ChecksumCounters, LeafChecksums};
use std::sync::{Arc, Weak};

/// Default bound of the entry pages one region keeps in memory: 1024 pages (4 MiB) cover
/// 2 GiB of the region.
pub const CACHE_PAGES_DEFAULT: usize = 1024;

/// The checksum setup of a volume: where each member's area is and how to open them.
#[derive(Clone, Debug)]
pub struct ChecksumSetup {
    volume: Arc<str>,
    /// By member index: the area of the volume's region on that member.
    areas: Vec<Option<ChecksumArea>>,
    /// The volume was shut down cleanly: every entry on disk is trusted.
    clean: bool,
    cache_pages: usize,
    /// Fail a member after this many checksum errors (`None`: never for checksums alone).
    fail_after_errors: Option<u64>,
    counters: Arc<[ChecksumCounters]>,
    /// The regions' checksums handed out, by (member index, region start, length): every leaf
    /// over one region (both trees of a reshape) shares one entry cache and one header, so
    /// no leaf judges or writes back entries another leaf has changed.
    opened: Arc<parking_lot::Mutex<OpenedRegions>>,
}

/// The regions handed out, by (member index, start, length), held weakly: a region no leaf
/// uses any more is opened afresh.
type OpenedRegions = Vec<((usize, u64, u64), Weak<LeafChecksums>)>;

impl ChecksumSetup {
    pub fn new(volume: &str, areas: Vec<Option<ChecksumArea>>, clean: bool) -> ChecksumSetup {
        let counters: Vec<ChecksumCounters> =
            areas.iter().map(|_| ChecksumCounters::default()).collect();
        ChecksumSetup {
            volume: volume.into(),
            areas,
            clean,
            cache_pages: CACHE_PAGES_DEFAULT,
            fail_after_errors: None,
            counters: counters.into(),
            opened: Default::default(),
        }
    }

    /// The same areas as a new open of the volume sees them: nothing shared with the
    /// regions this setup has handed out (their caches stay theirs).
    pub fn reopened(&self) -> ChecksumSetup {
        ChecksumSetup {
            opened: Default::default(),
            ..self.clone()
        }
    }

    /// Bounds each region's cached entry pages (at least 1).
    pub fn with_cache_pages(mut self, pages: usize) -> ChecksumSetup {
        self.cache_pages = pages.max(1);
        self
    }

    /// Fails a member once it has returned more than `n` bad blocks.
    pub fn with_fail_after_errors(mut self, n: Option<u64>) -> ChecksumSetup {
        self.fail_after_errors = n;
        self
    }

    /// Member `index`'s counters (zero for a member without an area).
    pub fn counters(&self, index: usize) -> Option<&ChecksumCounters> {
        self.counters.get(index)
    }

    /// The most memory the entry caches of `regions` regions take.
    pub fn memory_bound_bytes(&self, regions: usize) -> u64 {
        regions as u64 * self.cache_pages as u64 * PAGE_BYTES
    }

    /// Whether the volume was opened after a clean shutdown (every entry trusted).
    pub fn opened_clean(&self) -> bool {
        self.clean
    }

    /// Where member `index`'s checksum area is (`None`: it keeps none).
    pub fn area(&self, index: usize) -> Option<ChecksumArea> {
        self.areas.get(index).copied().flatten()
    }

    /// The checksums of member `index`'s regions now in use (one, but two trees of a
    /// reshape may use two regions of a member).
    pub fn regions_of(&self, index: usize) -> Vec<Arc<LeafChecksums>> {
        let opened = self.opened.lock();
        opened
            .iter()
            .filter(|((i, _, _), _)| *i == index)
            .filter_map(|(_, w)| w.upgrade())
            .collect()
    }

    /// The checksums of member `index`'s region `start..start+len`, when it has an area that
    /// holds them (a region not on 4 KiB blocks, or an area too small, has none).
    /// The same region asked for again while its checksums are in use gets the same ones.
    pub(crate) fn for_region(
        &self,
        index: usize,
        start: u64,
        len: u64,
    ) -> Option<Arc<LeafChecksums>> {
        let key = (index, start, len);
        let mut opened = self.opened.lock();
        opened.retain(|(_, w)| w.strong_count() > 0);
        if let Some(shared) =
            (opened.iter().find(|(k, _)| *k == key)).and_then(|(_, w)| w.upgrade())
        {
            return Some(shared);
        }
        let fresh = Arc::new(self.open_region(index, start, len)?);
        opened.push((key, Arc::downgrade(&fresh)));
        Some(fresh)
    }

    fn open_region(&self, index: usize, start: u64, len: u64) -> Option<LeafChecksums> {
        let area = (*self.areas.get(index)?)?;
        if !start.is_multiple_of(BLOCK_BYTES) || area.len_bytes < area_bytes(len) {
            tracing::warn!(
                "volume {}: member {index}'s checksum area ({} bytes) does not cover its region of {len} bytes at {start}; its blocks are not checked",
                self.volume,
                area.len_bytes
            );
            return None;
        }
        let groups = pages(len).div_ceil(pages_per_group(len));
        assert!(groups <= HEADER_BITS, "a header bit per page group");
        Some(LeafChecksums {
            volume: self.volume.clone(),
            index,
            first_block: start / BLOCK_BYTES,
            len_bytes: len,
            store: EntryStore::new(
                area,
                self.clean,
                Table::new(groups, pages_per_group(len), self.cache_pages),
            ),
            writes: crate::range_lock::RangeLock::default(),
            counters: self.counters.clone(),
            fail_after_errors: self.fail_after_errors,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both trees of a reshape build a leaf over the same region: they must share one entry
    /// cache, or one would judge (and write back) entries the other has changed.
    #[test]
    fn one_region_asked_twice_shares_its_checksums_until_dropped() {
        let area = ChecksumArea {
            offset_bytes: 1 << 20,
            len_bytes: area_bytes(8 << 20),
        };
        let setup = ChecksumSetup::new("v", vec![Some(area), Some(area)], true);
        let a = setup
            .for_region(0, 4 << 20, 8 << 20)
            .expect("an area that holds it");
        let b = setup.clone().for_region(0, 4 << 20, 8 << 20).unwrap();
        assert!(Arc::ptr_eq(&a, &b), "the same region shares its checksums");
        let other = setup.for_region(1, 4 << 20, 8 << 20).unwrap();
        assert!(
            !Arc::ptr_eq(&a, &other),
            "another member's region has its own"
        );
        let weak = Arc::downgrade(&a);
        drop((a, b));
        assert!(weak.upgrade().is_none());
        let again = setup.for_region(0, 4 << 20, 8 << 20).unwrap();
        assert_eq!(again.first_block, (4 << 20) / BLOCK_BYTES);
    }
}
