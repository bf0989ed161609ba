//! Process-wide counters of the log's work, for benchmarks and profiling (`ppl_cost` prints
//! them per workload): how many rounds carried how many entries, how often the log had to
//! flush the members or wait. Relaxed atomics: a count may lag, never a correctness input.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// A snapshot of the counters (see [`stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogStats {
    /// Rounds written (each one batch per ring it touched).
    pub rounds: u64,
    /// Batches written (member writes with FUA).
    pub batches: u64,
    /// Entries the rounds carried.
    pub entries: u64,
    /// Bytes of the batches.
    pub batch_bytes: u64,
    /// Flushes of a group's members the log asked for (to settle bands or free ring space).
    pub member_flushes: u64,
    /// Times a stripe write found a band of its stripe still in flight and waited.
    pub band_waits: u64,
    /// Times a stripe write found a band of its stripe written but not known durable, and
    /// flushed the group's members before logging it again (counted in `member_flushes`).
    pub band_flushes: u64,
    /// Times a stripe write found a band of its stripe written but not known durable, and
    /// logged it without a flush: its entry describes every sector left in flux
    /// (`needs_no_flush` in `log.rs`: a rewrite, or sequential writes meeting in a stripe).
    pub band_rewrites: u64,
    /// Times a round found no ring space and waited for a write in flight.
    pub room_waits: u64,
}

impl LogStats {
    /// The counts of `self` and `o` together.
    pub fn plus(&self, o: &LogStats) -> LogStats {
        LogStats {
            rounds: self.rounds + o.rounds,
            batches: self.batches + o.batches,
            entries: self.entries + o.entries,
            batch_bytes: self.batch_bytes + o.batch_bytes,
            member_flushes: self.member_flushes + o.member_flushes,
            band_waits: self.band_waits + o.band_waits,
            band_flushes: self.band_flushes + o.band_flushes,
            band_rewrites: self.band_rewrites + o.band_rewrites,
            room_waits: self.room_waits + o.room_waits,
        }
    }

    /// The counts of `self` since `before`.
    pub fn since(&self, before: &LogStats) -> LogStats {
        LogStats {
            rounds: self.rounds - before.rounds,
            batches: self.batches - before.batches,
            entries: self.entries - before.entries,
            batch_bytes: self.batch_bytes - before.batch_bytes,
            member_flushes: self.member_flushes - before.member_flushes,
            band_waits: self.band_waits - before.band_waits,
            band_flushes: self.band_flushes - before.band_flushes,
            band_rewrites: self.band_rewrites - before.band_rewrites,
            room_waits: self.room_waits - before.room_waits,
        }
    }
}

pub(super) static ROUNDS: AtomicU64 = AtomicU64::new(0);
pub(super) static BATCHES: AtomicU64 = AtomicU64::new(0);
pub(super) static ENTRIES: AtomicU64 = AtomicU64::new(0);
pub(super) static BATCH_BYTES: AtomicU64 = AtomicU64::new(0);
pub(super) static MEMBER_FLUSHES: AtomicU64 = AtomicU64::new(0);
pub(super) static BAND_WAITS: AtomicU64 = AtomicU64::new(0);
pub(super) static BAND_FLUSHES: AtomicU64 = AtomicU64::new(0);
pub(super) static BAND_REWRITES: AtomicU64 = AtomicU64::new(0);
pub(super) static ROOM_WAITS: AtomicU64 = AtomicU64::new(0);

/// Adds `n` to counter `c`.
pub(super) fn count(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Relaxed);
}

/// The counters so far (every volume of the process together).
pub fn stats() -> LogStats {
    LogStats {
        rounds: ROUNDS.load(Relaxed),
        batches: BATCHES.load(Relaxed),
        entries: ENTRIES.load(Relaxed),
        batch_bytes: BATCH_BYTES.load(Relaxed),
        member_flushes: MEMBER_FLUSHES.load(Relaxed),
        band_waits: BAND_WAITS.load(Relaxed),
        band_flushes: BAND_FLUSHES.load(Relaxed),
        band_rewrites: BAND_REWRITES.load(Relaxed),
        room_waits: ROOM_WAITS.load(Relaxed),
    }
}
