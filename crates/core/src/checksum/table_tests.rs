//! Unit tests of the checksum table (`table.rs`).

use super::*;

fn page() -> Vec<u8> {
    vec![0; PAGE_BYTES as usize]
}

#[test]
fn bits_round_trip_through_bytes() {
    let mut b = Bits::new(100);
    b.set(0);
    b.set(9);
    b.set(99);
    let bytes = b.to_bytes(4096);
    assert_eq!(bytes[0], 1);
    assert_eq!(bytes[1], 2);
    assert_eq!(Bits::from_bytes(&bytes, 100), b);
    assert!(b.get(99) && !b.get(98));
}

#[test]
fn a_write_in_flight_accepts_old_and_new_bytes_and_a_rewrite_repairs() {
    let mut t = Table::new(1, 1, 4);
    t.insert(0, page());
    t.set_entry(3, BlockSum::Known(10));
    let w = t.begin_write(3, &[BlockSum::Known(20)]);
    assert_eq!(t.judge(3, 10).0, Verdict::Good);
    assert_eq!(t.judge(3, 20).0, Verdict::Good);
    assert!(matches!(t.judge(3, 30), (Verdict::Bad { .. }, true)));
    assert!(matches!(t.judge(3, 30), (Verdict::Bad { .. }, false)));
    assert_eq!(t.end_write(w, 3, 1), 1, "the bad block was rewritten");
    assert!(matches!(t.judge(3, 10), (Verdict::Bad { .. }, true)));
    assert_eq!(t.judge(3, 20).0, Verdict::Good);
}

/// A write refused before it reached the member hands back the sums its entries replaced
/// (the block it found bad stays bad: nothing rewrote it); one over unknown entries, none.
#[test]
fn a_refused_write_hands_back_the_sums_it_replaced() {
    let mut t = Table::new(1, 1, 4);
    t.insert(0, page());
    t.set_entry(3, BlockSum::Known(10));
    assert!(matches!(t.judge(3, 30), (Verdict::Bad { .. }, true)));
    let w = t.begin_write(3, &[BlockSum::Known(20), BlockSum::Known(21)]);
    assert_eq!(t.take_refused(w), vec![Some(10), None]);
    // No longer in flight: its old sum is accepted only once the caller puts it back.
    assert!(matches!(t.judge(3, 10), (Verdict::Bad { .. }, _)));
    t.set_entry(3, BlockSum::Known(10));
    assert_eq!(t.judge(3, 10).0, Verdict::Good);
    let unknown = t.begin_write(6, &[BlockSum::Known(5)]);
    assert!(t.take_refused(unknown).is_empty());
}

/// The fast path agrees with judging block by block: known entries must match, unknown
/// ones pass, a page not held says so, and only `judge` accepts a write's old sum.
#[test]
fn prefetch_held_says_whether_every_page_of_the_blocks_is_held() {
    let mut t = Table::new(1, 4, 4);
    t.insert(0, page());
    assert!(t.prefetch_held(3..ENTRIES_PER_PAGE));
    assert!(
        !t.prefetch_held(3..ENTRIES_PER_PAGE + 1),
        "page 1 is not held"
    );
    t.insert(1, page());
    assert!(t.prefetch_held(3..ENTRIES_PER_PAGE + 1));
}

#[test]
fn all_match_agrees_with_judging_each_block_across_pages() {
    let mut t = Table::new(1, 4, 4);
    t.insert(0, page());
    t.insert(1, page());
    let first = ENTRIES_PER_PAGE - 3;
    let crcs: Vec<u32> = (0..6).map(|i| 100 + i).collect();
    for (i, &c) in crcs.iter().enumerate() {
        if i != 2 {
            t.set_entry(first + i as u64, BlockSum::Known(c));
        }
    }
    t.prefetch(first..ENTRIES_PER_PAGE);
    t.prefetch(ENTRIES_PER_PAGE..ENTRIES_PER_PAGE + 3);
    assert_eq!(t.all_match(first, &crcs), Some(true), "block 2 unknown");
    let mut wrong = crcs.clone();
    wrong[4] = 7;
    assert_eq!(
        t.all_match(first, &wrong),
        Some(false),
        "on the second page"
    );
    wrong = crcs.clone();
    wrong[0] = 7;
    assert_eq!(t.all_match(first, &wrong), Some(false), "on the first page");
    assert_eq!(
        t.all_match(2 * ENTRIES_PER_PAGE - 1, &[1, 2]),
        None,
        "page 2 is not held"
    );
    // A write in flight: the fast path sends its old bytes to `judge`, which takes them.
    t.begin_write(first, &[BlockSum::Known(9)]);
    assert_eq!(t.all_match(first, &crcs[..1]), Some(false));
    assert_eq!(t.judge(first, crcs[0]).0, Verdict::Good);
    assert_eq!(t.all_match(first, &[9]), Some(true));
}

#[test]
fn overlapping_writes_in_flight_keep_every_old_sum_until_each_is_answered() {
    let mut t = Table::new(1, 1, 4);
    t.insert(0, page());
    t.set_entry(5, BlockSum::Known(1));
    let a = t.begin_write(5, &[BlockSum::Known(2)]);
    let b = t.begin_write(4, &[BlockSum::Known(7), BlockSum::Known(3)]);
    let c = t.begin_write(5, &[BlockSum::Known(4)]);
    for s in [1, 2, 3, 4] {
        assert_eq!(t.peek(5, s), Verdict::Good, "{s} may be on disk");
    }
    // Answered out of order: each answer takes only its own old sum away.
    assert_eq!(t.end_write(b, 4, 2), 0);
    assert_eq!(
        t.peek(5, 2),
        Verdict::Bad {
            stored: 4,
            computed: 2
        }
    );
    assert_eq!(t.peek(5, 1), Verdict::Good);
    assert_eq!(t.peek(4, 7), Verdict::Good, "block 4 had no sum before b");
    assert_eq!(t.end_write(a, 5, 1), 0);
    assert_eq!(t.end_write(c, 5, 1), 0);
    assert_eq!(
        t.peek(5, 3),
        Verdict::Bad {
            stored: 4,
            computed: 3
        }
    );
    assert_eq!(t.peek(5, 4), Verdict::Good);
    assert!(t.in_flight.is_empty(), "nothing left in flight");
}

/// A write over many pages updates every entry, keeps every old sum of the blocks that
/// had one while unanswered, and counts the bad blocks it rewrote once answered.
#[test]
fn a_write_across_pages_keeps_its_old_sums_until_answered() {
    let mut t = Table::new(1, 4, 4);
    for page in 0..3 {
        t.insert(page, self::page());
    }
    let first = ENTRIES_PER_PAGE - 2;
    let n = ENTRIES_PER_PAGE + 4;
    for b in (first..first + n).step_by(2) {
        t.set_entry(b, BlockSum::Known(b as u32));
    }
    assert!(matches!(t.judge(first + 2, 0), (Verdict::Bad { .. }, true)));
    let news: Vec<BlockSum> = (0..n)
        .map(|i| BlockSum::Known(1_000_000 + i as u32))
        .collect();
    let w = t.begin_write(first, &news);
    for (i, b) in (first..first + n).enumerate() {
        assert_eq!(t.entry(b), news[i]);
        assert_eq!(t.peek(b, 1_000_000 + i as u32), Verdict::Good);
        let old = t.peek(b, b as u32);
        if (b - first).is_multiple_of(2) {
            assert_eq!(old, Verdict::Good, "block {b}'s old bytes");
        } else {
            assert!(
                matches!(old, Verdict::Bad { .. }),
                "block {b} had no old sum"
            );
        }
    }
    assert_eq!(t.end_write(w, first, n), 1, "one bad block rewritten");
    assert!(matches!(t.peek(first, first as u32), Verdict::Bad { .. }));
    assert!(t.in_flight.is_empty());
}

#[test]
fn the_cache_stays_bounded_and_hands_out_dirty_pages_it_drops() {
    let mut t = Table::new(1, 8, 2);
    assert!(t.insert(0, page()).is_empty());
    t.set_entry(0, BlockSum::Known(1));
    assert!(t.insert(1, page()).is_empty());
    // Page 1 is clean and page 0 dirty: the clean one goes.
    assert!(t.insert(2, page()).is_empty());
    assert_eq!(t.cached_pages(), 2);
    assert!(!t.has_page(1));
    t.set_entry(2 * ENTRIES_PER_PAGE, BlockSum::Known(2));
    let out = t.insert(3, page());
    assert_eq!(
        out.len(),
        1,
        "only dirty pages left: the oldest is written back"
    );
    assert_eq!(out[0].page, 0);
    assert_eq!(
        BlockSum::decode(&t.evicting(0).unwrap()[0..8]),
        BlockSum::Known(1)
    );
    t.evicted_done(0);
    assert!(t.evicting(0).is_none());
}

#[test]
fn a_pinned_page_is_never_evicted_and_the_cache_shrinks_back_once_unpinned() {
    let mut t = Table::new(1, 8, 1);
    assert!(t.insert(0, page()).is_empty());
    assert!(t.pin(0), "a held page pins");
    assert!(!t.pin(5), "a page not held does not");
    // Over the bound with only pinned pages (and the new one) to choose from: both stay.
    assert!(t.insert(1, page()).is_empty());
    assert!(t.has_page(0) && t.has_page(1));
    t.unpin(0);
    // The next load brings the cache back to its bound, the unpinned pages first.
    assert!(t.insert(2, page()).is_empty());
    assert_eq!(t.cached_pages(), 1);
    assert!(t.has_page(2));
}

/// A page taken back from its eviction keeps this table's entries (even in a group
/// untrusted at open) and is written back again: the eviction's write may never land.
#[test]
fn a_page_taken_back_from_its_eviction_keeps_its_entries_and_is_dirty() {
    let mut t = Table::new(1, 1, 1);
    let mut on_disk = Bits::new(1);
    on_disk.set(0);
    t.open_unclean(on_disk);
    t.insert(0, page());
    t.set_entry(0, BlockSum::Known(7));
    t.take_dirty();
    t.set_entry(1, BlockSum::Known(8));
    let out = t.insert(1, page());
    assert_eq!(out[0].page, 0, "page 0 pushed out, dirty");
    t.insert_evicted(0, t.evicting(0).unwrap());
    assert_eq!(t.entry(0), BlockSum::Known(7));
    assert_eq!(t.entry(1), BlockSum::Known(8));
    let dirty: Vec<u64> = t.take_dirty().into_iter().map(|(k, _)| k).collect();
    assert!(dirty.contains(&0), "written back again");
}

#[test]
fn untrusted_groups_load_as_unknown_and_dirty() {
    let mut t = Table::new(2, 1, 4);
    let mut on_disk = Bits::new(2);
    on_disk.set(1);
    t.open_unclean(on_disk);
    let mut bytes = page();
    BlockSum::Known(5).encode(&mut bytes[0..8]);
    t.insert(0, bytes.clone());
    t.insert(1, bytes);
    assert_eq!(t.entry(0), BlockSum::Known(5));
    assert_eq!(t.entry(ENTRIES_PER_PAGE), BlockSum::Unknown);
    let dirty: Vec<u64> = t.take_dirty().into_iter().map(|(k, _)| k).collect();
    assert_eq!(dirty, vec![1]);
    assert!(t.take_dirty().is_empty());
}
