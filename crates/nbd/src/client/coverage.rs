//! Which bytes of a read its structured reply has answered so far. The spec lets a server
//! answer a read with several `OFFSET_DATA` / `OFFSET_HOLE` chunks in any order, but every
//! byte exactly once: a byte answered twice (the second chunk silently overwriting the first)
//! or never (left as the zeroes the buffer started with) is a broken reply, not data.

use std::collections::BTreeMap;

/// Disjoint byte ranges of a read (relative to its offset) answered so far; touching ranges
/// are merged, so chunks arriving in order keep one entry.
#[derive(Debug, Default)]
pub(crate) struct Coverage {
    /// Start -> end (exclusive) of each answered range.
    ranges: BTreeMap<u64, u64>,
}

/// A chunk answering bytes an earlier chunk of the same reply already answered.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Overlap {
    pub start: u64,
    pub end: u64,
}

impl Coverage {
    /// Records `start..end` (non-empty) as answered, unless any of it already is.
    pub fn add(&mut self, start: u64, end: u64) -> Result<(), Overlap> {
        debug_assert!(start < end);
        let before = self.ranges.range(..end).next_back().map(|(&s, &e)| (s, e));
        if let Some((s, e)) = before {
            if e > start {
                return Err(Overlap {
                    start: start.max(s),
                    end: end.min(e),
                });
            }
        }
        let (mut new_start, mut new_end) = (start, end);
        if let Some((s, e)) = before.filter(|&(_, e)| e == start) {
            self.ranges.remove(&s);
            new_start = s.min(new_start);
            new_end = e.max(new_end);
        }
        if let Some(e) = self.ranges.remove(&end) {
            new_end = e;
        }
        self.ranges.insert(new_start, new_end);
        Ok(())
    }

    /// Whether exactly `0..len` is answered, every byte of it.
    pub fn is_whole(&self, len: u64) -> bool {
        if len == 0 {
            return self.ranges.is_empty();
        }
        self.ranges.len() == 1 && self.ranges.get(&0) == Some(&len)
    }

    /// Bytes answered.
    pub fn answered_bytes(&self) -> u64 {
        self.ranges.iter().map(|(s, e)| e - s).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_in_any_order_cover_the_read_once() {
        let mut c = Coverage::default();
        c.add(8, 12).unwrap();
        c.add(0, 4).unwrap();
        assert!(!c.is_whole(12));
        c.add(4, 8).unwrap();
        assert!(c.is_whole(12));
        assert!(!c.is_whole(16));
        assert_eq!(c.ranges.len(), 1);
    }

    #[test]
    fn overlaps_are_found_wherever_they_are() {
        let mut c = Coverage::default();
        c.add(0, 4).unwrap();
        c.add(8, 12).unwrap();
        assert_eq!(c.add(2, 6), Err(Overlap { start: 2, end: 4 }));
        assert_eq!(c.add(6, 10), Err(Overlap { start: 8, end: 10 }));
        assert_eq!(c.add(0, 12), Err(Overlap { start: 8, end: 12 }));
        assert_eq!(c.add(9, 10), Err(Overlap { start: 9, end: 10 }));
        // Nothing recorded by a refused chunk.
        assert_eq!(c.answered_bytes(), 8);
        c.add(4, 8).unwrap();
        assert!(c.is_whole(12));
    }

    #[test]
    fn lengths_adding_up_are_not_enough() {
        // 0..4 and 2..6 sum to 8 but leave 6..8 unanswered: the old byte count took it.
        let mut c = Coverage::default();
        c.add(0, 4).unwrap();
        assert!(c.add(2, 6).is_err());
        c.add(4, 6).unwrap();
        assert!(!c.is_whole(8));
    }
}
