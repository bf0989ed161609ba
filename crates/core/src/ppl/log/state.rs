//! The log's state, one lock for all of it: the bands and rings, the entries waiting for a
//! round, and who waits for what (woken when their band changes or ring room may have come).

use super::rounds::{Batch, LogFailed};
use super::{Band, Bands, Entry, Key, Retired, Ring, Rings};
use crate::buf::SharedBuf;
use crate::num_hash::NumMap;
use futures::channel::oneshot;

pub(super) struct Pending {
    pub(super) ticket: u64,
    pub(super) entry: Entry,
    pub(super) rings: Rings,
}

pub(super) struct State {
    pub(super) next_seq: u64,
    pub(super) bands: Bands,
    /// Bands settled in memory whose last entry a ring may still replay.
    pub(super) retired: Retired,
    /// Per member of the group, durable write counts and failed flags when `retire` last
    /// looked at every band.
    pub(super) seen: (Vec<u64>, Vec<bool>),
    /// Bands whose writes ended or whose entry was written since `retire` last ran.
    pub(super) changed: Vec<(u64, u32)>,
    pub(super) rings: Vec<Option<Ring>>,
    pub(super) pending: Vec<Pending>,
    pub(super) next_ticket: u64,
    /// Per ticket not yet ended, where to say whether it was written (true) or failed: a
    /// writer learns it without queueing for a round slot (where, behind a round in
    /// flight, it would hold up every writer after it).
    pub(super) notify: NumMap<u64, oneshot::Sender<Result<(), LogFailed>>>,
    /// Per band, writers waiting for its write in flight to end (`prepare`): woken when
    /// that band changes, not when any band does.
    pub(super) band_waiters: NumMap<Key, Vec<oneshot::Sender<()>>>,
    /// Rounds waiting for ring room (`no_room`): woken when a flush may settle a band, or a
    /// round ends.
    pub(super) room_waiters: Vec<oneshot::Sender<()>>,
    /// Rounds being written (at most [`super::MAX_ROUNDS_IN_FLIGHT`]).
    pub(super) rounds_in_flight: usize,
    /// Writers waiting for a round to end so they may start one.
    pub(super) slot_waiters: Vec<oneshot::Sender<()>>,
    /// Partial-parity buffers of entries written, for the next entries: allocated anew
    /// each, a round's worth freed at once gave the heap back to the kernel and every new one
    /// page-faulted (a tenth of the log's CPU time at queue depth). At most `SPARE_PARTS`.
    pub(super) spare_parts: Vec<Vec<u8>>,
    /// Entries' sector masks and retired bands' vectors (`need`, `dirty`), for the next
    /// entries and bands: a few small allocations an entry otherwise. At most `SPARE_PARTS`.
    pub(super) spare_masks: Vec<Vec<u8>>,
    pub(super) spare_bands: Vec<(Vec<u64>, Vec<u8>)>,
    /// The masks of a stripe write's bands (`prepare`), kept for the next one.
    pub(super) scratch_masks: Vec<u8>,
    /// Emptied vectors kept for the next use: a stripe write's entries (`prepare`, back from
    /// `write`), and a round's entries and batches (`take_round`, back from `finish_round`).
    pub(super) spare_prepared: Vec<(Entry, Rings)>,
    pub(super) spare_taken: Vec<Pending>,
    pub(super) spare_batches: Vec<Batch>,
    /// Batch buffers written, for the next batches (one per ring at most; each reused when
    /// it is its buffer's last view and large enough: `SharedBuf::reuse_as`).
    pub(super) spare_batch_bytes: Vec<SharedBuf>,
}

impl State {
    /// Band `key`'s writes ended or its entry was settled on the rings: `retire` looks at it
    /// again, and the writers waiting for it try again.
    pub(super) fn band_changed(&mut self, key: Key) {
        self.changed.push(key);
        for w in self.band_waiters.remove(&key).into_iter().flatten() {
            let _ = w.send(());
        }
    }

    /// Over `rings`: the smallest durable tail (a ring replays no entry below its own),
    /// and whether one of them is lapsed ([`Ring::lapsed`]: it may replay entries older
    /// than `retired` remembers).
    pub(super) fn replay_bounds(&self, rings: &Rings) -> (u64, bool) {
        let ring = |c: usize| self.rings[c].as_ref().expect("ring");
        let floor = rings.iter().map(|&(c, _)| ring(c).durable_tail).min();
        let lapsed = rings.iter().any(|&(c, _)| ring(c).lapsed);
        (floor.unwrap_or(0), lapsed)
    }

    /// `entry`'s band has a new entry and one more write in flight, its sectors dirty: live
    /// again, or live anew on vectors kept from a retired band (a group of `members`
    /// members and `k` data chunks).
    pub(super) fn band_logged(&mut self, entry: &Entry, (members, k): (usize, usize)) {
        let (key, seq) = ((entry.stripe, entry.band), entry.seq);
        let spare = match self.bands.contains_key(&key) {
            true => None,
            false => self.spare_bands.pop(),
        };
        self.bands.upsert(
            key,
            || match spare {
                Some((mut need, mut dirty)) => {
                    need.clear();
                    need.resize(members, 0);
                    dirty.clear();
                    dirty.resize(k, 0);
                    Band::live_with(seq, need, dirty)
                }
                None => Band::live(seq, vec![0; members], k),
            },
            |b| {
                b.seq = seq;
                b.durable = false;
                b.inflight += 1;
                b.writes += 1;
                for (d, m) in b.dirty.iter_mut().zip(&entry.masks) {
                    *d |= m;
                }
            },
        );
    }

    /// What writers may be waiting on, in one line (`GroupLog::waits`).
    pub(super) fn waits(&self) -> String {
        let keys: Vec<Key> = self.bands.keys().copied().collect();
        let band = |k: &Key| self.bands.get(k).expect("a key of the bands");
        let inflight = keys.iter().filter(|k| band(k).inflight > 0).count();
        let done = keys.iter().filter(|k| band(k).done()).count();
        let rings: Vec<String> = (self.rings.iter().enumerate())
            .filter_map(|(c, r)| r.as_ref().map(|r| format!("{c}: {}", r.summary())))
            .collect();
        let busy = keys.iter().filter(|k| band(k).busy()).count();
        let stale = keys.iter().filter(|k| band(k).stale()).count();
        let written = keys.iter().filter(|k| band(k).written).count();
        format!(
            "bands {} live ({inflight} with writes in flight, {done} done not durable, {busy} busy, \
             {stale} stale, {written} written; tail {:?}, next seq {}), {} \
             pending entries, {} rounds in flight, waiting: {} for room, {} for a round slot, \
             {} bands' writers, {} tickets unanswered; rings [{}]",
            keys.len(),
            self.bands.tail(),
            self.next_seq,
            self.pending.len(),
            self.rounds_in_flight,
            self.room_waiters.len(),
            self.slot_waiters.len(),
            self.band_waiters.len(),
            self.notify.len(),
            rings.join(", ")
        )
    }

    /// Wakes the rounds waiting for ring room.
    pub(super) fn wake_room(&mut self) {
        for w in self.room_waiters.drain(..) {
            let _ = w.send(());
        }
    }

    /// A receiver woken when band `key` changes (registered under the state lock: the
    /// wake-up cannot be missed).
    pub(super) fn wait_for_band(&mut self, key: Key) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        let waiters = self.band_waiters.entry(key).or_default();
        // Writers that gave up (their futures dropped) leave closed senders behind.
        waiters.retain(|w| !w.is_canceled());
        waiters.push(tx);
        rx
    }
}
