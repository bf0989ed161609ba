//! Who may write an export's blocks while an unaligned request read-modify-writes them.
//!
//! A read-modify-write of an edge block (see the `unaligned` module) rewrites bytes it was not
//! asked to write: a write to the same block landing between its read and its write-back would
//! be lost. Unaligned requests come only from clients that negotiated no block size, so they
//! are rare; aligned writes are the common case and must not pay for them.
//!
//! So an export's writes pass a [`WriteGate`] in one of two modes:
//!
//! * **No read-modify-write in flight** (the usual state): a write of whole blocks only bumps
//!   a counter of unlocked writes and goes ahead: no lock, no allocation.
//! * **A read-modify-write in flight or waiting**: writes of whole blocks take shared
//!   [`BlockLocks`] over their blocks, and read-modify-writes take the edge blocks exclusive.
//!
//! The hand-over: a read-modify-write first announces itself (`rmw_in_flight`), then waits
//! until every unlocked write has finished (`unlocked_in_flight` at zero), then locks. A write
//! of whole blocks first counts itself unlocked, then looks for an announced read-modify-write
//! and, seeing one, uncounts itself and locks instead. Both counters are sequentially
//! consistent, so of a write and a read-modify-write arriving together at least one sees the
//! other: either the write locks, or the read-modify-write waits for it.

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

use tokio::sync::{Notify, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Lock slots per export; block `b` maps to slot `b % SLOTS`.
const SLOTS: u64 = 64;

/// Per-export block locks, hashed into [`SLOTS`] slots (unrelated blocks may share a slot:
/// they then wait for each other, never for long).
struct BlockLocks {
    slots: Box<[RwLock<()>]>,
}

/// One held slot lock, released on drop.
pub(crate) enum Held<'a> {
    Shared(#[allow(dead_code)] RwLockReadGuard<'a, ()>),
    Exclusive(#[allow(dead_code)] RwLockWriteGuard<'a, ()>),
}

/// Slots of blocks `[first, last]` as a bit mask.
fn slot_mask(first: u64, last: u64) -> u64 {
    if last - first + 1 >= SLOTS {
        return u64::MAX;
    }
    let (a, b) = (first % SLOTS, last % SLOTS);
    let upto = |x: u64| {
        if x == 63 {
            u64::MAX
        } else {
            (1u64 << (x + 1)) - 1
        }
    };
    if a <= b {
        upto(b) & !((1u64 << a) - 1)
    } else {
        upto(b) | !((1u64 << a) - 1)
    }
}

impl BlockLocks {
    fn new() -> Self {
        BlockLocks {
            slots: (0..SLOTS).map(|_| RwLock::new(())).collect(),
        }
    }

    /// Locks the blocks of `[offset, offset+len)` (block size `bs`): shared, except the
    /// blocks in `exclusive` (block start offsets). Slots are taken in ascending order, so two
    /// requests never wait for each other in a cycle.
    async fn lock(&self, bs: u64, offset: u64, len: u64, exclusive: &[u64]) -> Vec<Held<'_>> {
        if len == 0 {
            return Vec::new();
        }
        let all = slot_mask(offset / bs, (offset + len - 1) / bs);
        let excl = exclusive
            .iter()
            .fold(0u64, |m, b| m | 1 << ((b / bs) % SLOTS));
        let mut held = Vec::with_capacity(all.count_ones() as usize);
        let mut left = all | excl;
        while left != 0 {
            let i = left.trailing_zeros() as usize;
            left &= left - 1;
            let slot = &self.slots[i];
            held.push(if excl & (1 << i) != 0 {
                match slot.try_write() {
                    Ok(g) => Held::Exclusive(g),
                    Err(_) => Held::Exclusive(slot.write().await),
                }
            } else {
                match slot.try_read() {
                    Ok(g) => Held::Shared(g),
                    Err(_) => Held::Shared(slot.read().await),
                }
            });
        }
        held
    }
}

/// The gate of one export's writes (see the module essay).
pub(crate) struct WriteGate {
    locks: BlockLocks,
    /// Read-modify-writes in flight or waiting to start; while non-zero, writes of whole
    /// blocks lock.
    rmw_in_flight: AtomicUsize,
    /// Writes of whole blocks that went ahead without a lock and have not finished.
    unlocked_in_flight: AtomicUsize,
    /// Woken when `unlocked_in_flight` falls to zero while a read-modify-write is announced.
    unlocked_drained: Notify,
}

/// What a write of whole blocks holds until it is done.
pub(crate) enum WholeBlocksPass<'a> {
    /// No read-modify-write was in flight: counted in `unlocked_in_flight`, nothing locked.
    Unlocked(#[allow(dead_code)] UnlockedWrite<'a>),
    /// A read-modify-write was in flight: shared locks over the blocks.
    Locked(#[allow(dead_code)] Vec<Held<'a>>),
}

/// An unlocked write of whole blocks, uncounted on drop.
pub(crate) struct UnlockedWrite<'a>(&'a WriteGate);

impl Drop for UnlockedWrite<'_> {
    fn drop(&mut self) {
        let gate = self.0;
        let was = gate.unlocked_in_flight.fetch_sub(1, SeqCst);
        assert!(was > 0, "unlocked write counted out twice");
        if was == 1 && gate.rmw_in_flight.load(SeqCst) > 0 {
            gate.unlocked_drained.notify_waiters();
        }
    }
}

/// What a read-modify-write holds until it is done: its announcement and its locks.
pub(crate) struct RmwPass<'a> {
    gate: &'a WriteGate,
    held: Vec<Held<'a>>,
}

impl Drop for RmwPass<'_> {
    fn drop(&mut self) {
        // Unlock before the announcement goes, so writes that saw it still find the locks.
        self.held.clear();
        let was = self.gate.rmw_in_flight.fetch_sub(1, SeqCst);
        assert!(was > 0, "read-modify-write announced out twice");
    }
}

impl WriteGate {
    pub(crate) fn new() -> Self {
        WriteGate {
            locks: BlockLocks::new(),
            rmw_in_flight: AtomicUsize::new(0),
            unlocked_in_flight: AtomicUsize::new(0),
            unlocked_drained: Notify::new(),
        }
    }

    /// Admits a write, trim or zeroing of the whole blocks `[offset, offset+len)` (block size
    /// `bs`). Without a read-modify-write in flight: two atomic operations, no lock.
    pub(crate) async fn whole_blocks(&self, bs: u64, offset: u64, len: u64) -> WholeBlocksPass<'_> {
        self.unlocked_in_flight.fetch_add(1, SeqCst);
        let unlocked = UnlockedWrite(self);
        if self.rmw_in_flight.load(SeqCst) == 0 {
            return WholeBlocksPass::Unlocked(unlocked);
        }
        // Uncounted before waiting, so an announced read-modify-write can start.
        drop(unlocked);
        WholeBlocksPass::Locked(self.locks.lock(bs, offset, len, &[]).await)
    }

    /// Admits a read-modify-write of `[offset, offset+len)` whose partial blocks start at
    /// `edges`: announces it, waits for the unlocked writes to finish, then locks the edge
    /// blocks exclusive and the rest shared.
    pub(crate) async fn read_modify_write(
        &self,
        bs: u64,
        offset: u64,
        len: u64,
        edges: &[u64],
    ) -> RmwPass<'_> {
        self.rmw_in_flight.fetch_add(1, SeqCst);
        // Announced from here on; withdrawn on drop, also if this future is cancelled.
        let mut pass = RmwPass {
            gate: self,
            held: Vec::new(),
        };
        self.unlocked_writes_drained().await;
        pass.held = self.locks.lock(bs, offset, len, edges).await;
        pass
    }

    /// Waits until no write runs unlocked. New ones see the announcement and lock, so the
    /// count only falls.
    async fn unlocked_writes_drained(&self) {
        loop {
            let drained = self.unlocked_drained.notified();
            tokio::pin!(drained);
            // Registered before looking, so a fall to zero after the look still wakes us.
            drained.as_mut().enable();
            if self.unlocked_in_flight.load(SeqCst) == 0 {
                return;
            }
            drained.await;
        }
    }

    #[cfg(test)]
    fn unlocked_in_flight(&self) -> usize {
        self.unlocked_in_flight.load(SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures::FutureExt;

    use super::*;

    const BS: u64 = 4096;

    #[test]
    fn slot_masks_wrap_and_saturate() {
        assert_eq!(slot_mask(0, 0), 1);
        assert_eq!(slot_mask(3, 5), 0b111000);
        assert_eq!(slot_mask(63, 64), 1 | 1 << 63);
        assert_eq!(slot_mask(62, 63), 3 << 62);
        assert_eq!(slot_mask(10, 10 + 63), u64::MAX);
        assert_eq!(slot_mask(70, 70), 1 << 6);
    }

    #[test]
    fn whole_block_writes_take_no_lock_while_no_read_modify_write_is_in_flight() {
        let gate = WriteGate::new();
        let a = gate.whole_blocks(BS, 0, BS).now_or_never().unwrap();
        let b = gate.whole_blocks(BS, 0, BS).now_or_never().unwrap();
        assert!(matches!(a, WholeBlocksPass::Unlocked(_)));
        assert!(matches!(b, WholeBlocksPass::Unlocked(_)));
        assert_eq!(gate.unlocked_in_flight(), 2);
        drop((a, b));
        assert_eq!(gate.unlocked_in_flight(), 0);
        // Every slot is free: an exclusive lock of every block is had at once.
        let all: Vec<u64> = (0..SLOTS).map(|b| b * BS).collect();
        let rmw = gate.read_modify_write(BS, 0, SLOTS * BS, &all);
        assert!(rmw.now_or_never().is_some());
    }

    #[tokio::test]
    async fn a_read_modify_write_waits_for_unlocked_writes_and_later_writes_lock() {
        let gate = WriteGate::new();
        let early = gate.whole_blocks(BS, 0, BS).await;
        assert!(matches!(early, WholeBlocksPass::Unlocked(_)));
        let rmw = gate.read_modify_write(BS, 100, 10, &[0]);
        tokio::pin!(rmw);
        // The unlocked write may be writing block 0: the read-modify-write must not start.
        assert!(futures::poll!(rmw.as_mut()).is_pending());
        // Announced: a later write of the same block locks it (shared, still free).
        let late = gate.whole_blocks(BS, 0, BS).await;
        assert!(matches!(late, WholeBlocksPass::Locked(_)));
        drop(early);
        assert!(
            futures::poll!(rmw.as_mut()).is_pending(),
            "block 0 is locked"
        );
        drop(late);
        let pass = tokio::time::timeout(Duration::from_secs(5), rmw)
            .await
            .expect("woken when the unlocked write finished");
        // Block 0 is read-modify-written: a write of it waits.
        let later = gate.whole_blocks(BS, 0, BS);
        tokio::pin!(later);
        assert!(futures::poll!(later.as_mut()).is_pending());
        drop(pass);
        let later = later.await;
        assert!(matches!(later, WholeBlocksPass::Locked(_)));
        drop(later);
        // Nothing announced any more: unlocked again.
        let again = gate.whole_blocks(BS, 0, BS).await;
        assert!(matches!(again, WholeBlocksPass::Unlocked(_)));
    }

    #[tokio::test]
    async fn a_cancelled_read_modify_write_withdraws_its_announcement() {
        let gate = WriteGate::new();
        let early = gate.whole_blocks(BS, 0, BS).await;
        {
            let rmw = gate.read_modify_write(BS, 100, 10, &[0]);
            tokio::pin!(rmw);
            assert!(futures::poll!(rmw.as_mut()).is_pending());
        }
        drop(early);
        let next = gate.whole_blocks(BS, 0, BS).await;
        assert!(matches!(next, WholeBlocksPass::Unlocked(_)));
    }
}
