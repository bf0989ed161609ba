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

    /// The bytes of `region` (handed out by this setup) whose entries this open dropped, on
    /// its member `m` (its header read, their pages blanked first): none after a clean
    /// start. What the pass that gives them back covers (`metadata/checksum_refill.rs`).
    pub(crate) async fn dropped_at_open(
        &self,
        region: &LeafChecksums,
        m: &dyn crate::member::Member,
    ) -> crate::member::MemberResult<Vec<(u64, u64)>> {
        if self.clean {
            return Ok(Vec::new());
        }
        super::fill::dropped_ranges(region, m).await
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
    /// A region asked for while the checksums of one starting there and at least as long are
    /// in use gets those: the two trees of a reshape put a member's regions at one start, of
    /// lengths that differ when a member of another size joins, over one area — two entry
    /// caches and two headers there would each overwrite what the other marked.
    pub(crate) fn for_region(
        &self,
        index: usize,
        start: u64,
        len: u64,
    ) -> Option<Arc<LeafChecksums>> {
        let mut opened = self.opened.lock();
        opened.retain(|(_, w)| w.strong_count() > 0);
        let covering = (opened.iter())
            .filter(|((i, s, l), _)| (*i, *s) == (index, start) && *l >= len)
            .max_by_key(|((_, _, l), _)| *l);
        if let Some(shared) = covering.and_then(|(_, w)| w.upgrade()) {
            return Some(shared);
        }
        let fresh = Arc::new(self.open_region(index, start, len)?);
        opened.push(((index, start, len), Arc::downgrade(&fresh)));
        Some(fresh)
    }

    /// The checksums of the longest region of each member and start in `trees` (the two
    /// trees of a reshape), opened first: held while the trees' leaves are built, every
    /// leaf over a start shares them, whichever tree asks first.
    pub(crate) fn open_spanning(&self, trees: &[&nbraid_layout::Node]) -> Vec<Arc<LeafChecksums>> {
        let mut spans: Vec<(usize, u64, u64)> = Vec::new();
        for t in trees {
            t.visit_members(&mut |m| match spans
                .iter_mut()
                .find(|s| (s.0, s.1) == (m.index, m.start))
            {
                Some(s) => s.2 = s.2.max(m.len),
                None => spans.push((m.index, m.start, m.len)),
            });
        }
        (spans.into_iter())
            .filter_map(|(index, start, len)| self.for_region(index, start, len))
            .collect()
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

    /// A reshape onto a member of another size: the new tree's region of a member is shorter
    /// (or longer) than the old one's at the same start, over the same area. Both trees' leaves
    /// share the longer region's checksums, whichever tree is built first; a region at
    /// another start or on another member keeps its own.
    #[test]
    fn regions_at_one_start_share_the_longest_ones_checksums() {
        let area = ChecksumArea {
            offset_bytes: 1 << 20,
            len_bytes: area_bytes(16 << 20),
        };
        let setup = ChecksumSetup::new("v", vec![Some(area), Some(area)], false);
        let (start, short, long) = (4u64 << 20, 6u64 << 20, 9u64 << 20);
        for (first, second) in [(long, short), (short, long)] {
            let node = |len: u64| {
                let shape = nbraid_layout::Shape::new(
                    nbraid_layout::Level::Raid1,
                    2,
                    None,
                    64 << 10,
                    Default::default(),
                )
                .unwrap();
                shape
                    .build(&[nbraid_layout::Region { start, len }; 2])
                    .unwrap()
            };
            let (a, b) = (node(first), node(second));
            let held = setup.open_spanning(&[&a, &b]);
            assert_eq!(held.len(), 2, "one per member");
            let x = setup.for_region(0, start, first).unwrap();
            let y = setup.for_region(0, start, second).unwrap();
            assert!(Arc::ptr_eq(&x, &y), "one header and one cache per start");
            assert_eq!(x.len_bytes, long, "covering the longer region");
            let other = setup.for_region(1, start, short).unwrap();
            assert!(!Arc::ptr_eq(&x, &other));
            drop((held, x, y, other));
        }
        let x = setup.for_region(0, start, short).unwrap();
        let elsewhere = setup.for_region(0, start + (1 << 20), short).unwrap();
        assert!(!Arc::ptr_eq(&x, &elsewhere), "another start: its own");
    }
}
