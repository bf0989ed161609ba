//! One ring of a group's log (a member's log area) as the writer sees it: where the next
//! batch goes, which batches written in this life may still be needed, and how many of their
//! bytes that is. Pure bookkeeping, no I/O: the rounds (`rounds.rs`) place, write and retire.

use super::{Part, LOG_BLOCK_BYTES};
use std::collections::VecDeque;

/// The rings (children) an entry goes to, each with the partial parity it takes there: the
/// stripe's P ring and, in RAID 6, its Q ring — at most two, kept inline (every entry of a
/// stripe write carries a copy; a vector was an allocation an entry).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Rings {
    list: [(usize, Part); 2],
    len: usize,
}

impl FromIterator<(usize, Part)> for Rings {
    fn from_iter<I: IntoIterator<Item = (usize, Part)>>(iter: I) -> Rings {
        let mut rings = Rings {
            list: [(0, Part::P); 2],
            len: 0,
        };
        for r in iter {
            assert!(
                rings.len < 2,
                "an entry goes to at most two rings (P and Q)"
            );
            rings.list[rings.len] = r;
            rings.len += 1;
        }
        rings
    }
}

impl std::ops::Deref for Rings {
    type Target = [(usize, Part)];
    fn deref(&self) -> &[(usize, Part)] {
        &self.list[..self.len]
    }
}

impl<'a> IntoIterator for &'a Rings {
    type Item = &'a (usize, Part);
    type IntoIter = std::slice::Iter<'a, (usize, Part)>;
    fn into_iter(self) -> Self::IntoIter {
        self.list[..self.len].iter()
    }
}

/// On a memory-backed member the log cycles through at most this much of a ring (see
/// [`Ring::window`]).
pub(super) const MEMORY_RING_WINDOW_BYTES: u64 = 256 << 10;

/// One log ring: a member's log area.
pub(super) struct Ring {
    pub(super) member: usize,
    /// Where the area starts on the member.
    pub(super) offset: u64,
    pub(super) len: u64,
    /// Where the next batch goes, unless it must wrap.
    pub(super) head: u64,
    /// Batches written in this life that may still be needed, oldest first.
    live: VecDeque<LiveBatch>,
    /// Bytes of the `live` batches (a round asks whether the ring is more than half full).
    pub(super) live_bytes: u64,
    /// The largest tail a completed batch of this ring carries.
    pub(super) durable_tail: u64,
    /// Its member was seen failed and no batch has landed on the ring since: its
    /// `durable_tail` is frozen and its older entries are replayed if the member comes back
    /// (re-added in this life) before a batch with a newer tail masks them. Such a ring
    /// bounds nothing in `retired`, and every write to a stripe it takes is logged while it
    /// is set (`GroupLog::prepare`).
    pub(super) lapsed: bool,
}

impl Ring {
    pub(super) fn new(member: usize, offset: u64, len: u64) -> Ring {
        Ring {
            member,
            offset,
            len,
            head: LOG_BLOCK_BYTES, // block 0 holds the marker of this life
            live: VecDeque::new(),
            live_bytes: 0,
            durable_tail: 0,
            lapsed: false,
        }
    }

    /// The part of the area the log cycles through: all of it, but on a memory-backed
    /// member [`MEMORY_RING_WINDOW_BYTES`] at most. A round flushes the group's members once
    /// the live batches fill half of this, so a smaller window means more flushes (free on
    /// memory) and fewer pages written again and again, which stay in the CPU's caches: on
    /// /dev/shm the kernel's 8 KiB batch write took ~2 µs cycling through six 8 MiB rings
    /// amid the members' other I/O, ~1 µs through 512 KiB ones (`scripts/bench-wpath`'s
    /// pattern replayed with plain system calls). Windows of 1 MiB, 256 KiB and 128 KiB
    /// against each other (`nbraid bench rand-write`, 4 KiB, QD 16 × 2, six members on
    /// /dev/shm, 3–6 runs each alternated; docs/benchmarks): 256 KiB gave RAID 5
    /// write-through +11% IOPS over 1 MiB, RAID 6 write-through +13%, RAID 5 write-back +9%,
    /// RAID 6 write-back +2–5%, and +8% over 256 KiB strips, where 128 KiB gave only +2% (its
    /// batches pass half the window more often and take the whole area); 128 KiB was ahead
    /// by 2–3% on RAID 5 alone.
    pub(super) fn window(&self, memory_backed: bool) -> u64 {
        match memory_backed {
            true => self.len.min(MEMORY_RING_WINDOW_BYTES),
            false => self.len,
        }
    }

    /// Where a batch of `len` bytes goes: at the head, or back at the start when it would
    /// pass the end of the `window` (a batch over half the window may use the whole area);
    /// `None` while a live batch is there.
    pub(super) fn place(&self, len: u64, window: u64) -> Option<u64> {
        let end = if len <= window / 2 { window } else { self.len };
        let start = if self.head + len <= end { self.head } else { 0 };
        (!self.live.iter().any(|b| b.overlaps(start, start + len))).then_some(start)
    }

    /// A batch of entries up to `newest_seq` written at `start`: the head moves past it.
    pub(super) fn push_live(&mut self, start: u64, len: u64, newest_seq: u64) {
        let batch = LiveBatch {
            start,
            end: start + len,
            newest_seq,
        };
        self.head = batch.end;
        self.live_bytes += batch.len();
        self.live.push_back(batch);
    }

    /// The ring's state in a few words, for reports of a hang.
    pub(super) fn summary(&self) -> String {
        let oldest = self.live.front().map(|b| b.newest_seq);
        format!(
            "{} of {} bytes live in {} batches (oldest up to seq {oldest:?}), head {}, durable tail {}{}",
            self.live_bytes,
            self.len,
            self.live.len(),
            self.head,
            self.durable_tail,
            if self.lapsed { ", lapsed" } else { "" }
        )
    }

    /// Whether no batch written before is live: a batch written now masks every older
    /// entry of the ring at replay (all lie below its tail).
    pub(super) fn none_live(&self) -> bool {
        self.live.is_empty()
    }

    /// Drops the batches whose entries all lie below the log's tail (settled).
    pub(super) fn keep_live_from(&mut self, tail: u64) {
        let mut gone = 0;
        self.live.retain(|b| {
            let keep = b.newest_seq >= tail;
            if !keep {
                gone += b.len();
            }
            keep
        });
        self.live_bytes -= gone;
        debug_assert_eq!(
            self.live_bytes,
            self.live.iter().map(LiveBatch::len).sum::<u64>(),
            "live bytes kept in step"
        );
    }
}

/// A batch written to a ring in this life that may still be needed: ring bytes
/// `[start, end)`, holding entries up to `newest_seq`.
#[derive(Clone, Copy, Debug)]
struct LiveBatch {
    start: u64,
    end: u64,
    newest_seq: u64,
}

impl LiveBatch {
    fn len(&self) -> u64 {
        self.end - self.start
    }

    /// Whether ring bytes `[start, end)` touch this batch.
    fn overlaps(&self, start: u64, end: u64) -> bool {
        self.start < end && start < self.end
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn batches_go_at_the_head_and_wrap_at_the_window_on_memory() {
        let mut r = Ring::new(0, 0, 8 * MIB);
        assert_eq!(r.window(false), 8 * MIB);
        assert_eq!(r.window(true), MEMORY_RING_WINDOW_BYTES);
        let window = r.window(true);
        // The head starts past the marker block.
        assert_eq!(r.place(8192, window), Some(LOG_BLOCK_BYTES));
        r.head = window - 4096;
        // Past the window's end: back at the start (free), or the whole area for the disk.
        assert_eq!(r.place(8192, window), Some(0));
        assert_eq!(r.place(8192, r.window(false)), Some(window - 4096));
        // A batch over half the window may use the whole area.
        assert_eq!(r.place(window, window), Some(window - 4096));
    }

    #[test]
    fn a_place_holding_a_live_batch_is_refused_until_the_tail_passes_it() {
        let mut r = Ring::new(0, 0, 64 * 1024);
        r.push_live(0, 16 * 1024, 5);
        r.push_live(16 * 1024, 32 * 1024, 9);
        assert_eq!((r.head, r.live_bytes), (48 * 1024, 48 * 1024));
        // 32 KiB more pass the end: back at 0, where batch 5 still lives.
        assert_eq!(r.place(32 * 1024, r.window(false)), None);
        r.keep_live_from(6);
        assert_eq!(r.live_bytes, 32 * 1024);
        assert_eq!(r.place(16 * 1024, r.window(false)), Some(48 * 1024));
        assert_eq!(
            r.place(32 * 1024, r.window(false)),
            None,
            "batch 9 overlaps"
        );
        r.keep_live_from(10);
        assert_eq!(
            (r.live_bytes, r.place(32 * 1024, r.window(false))),
            (0, Some(0))
        );
    }
}
