//! The log's rounds: writers queue their entries; a writer that finds fewer than
//! `MAX_ROUNDS_IN_FLIGHT` rounds being written starts one: one batch per ring of everything
//! pending (numbering entries as it takes them). Every writer learns the end of its own
//! entries on its own channel.

use super::*;
use crate::buf::SharedBuf;
use crate::ppl::codec::BATCH_HEADER_BYTES;
use crate::{Member, MemberResult};
use futures::future::BoxFuture;
use smallvec::SmallVec;

/// Per ring a round writes to, a byte count (a few rings a round: kept inline, searched).
type RingBytes = SmallVec<[(usize, u64); 8]>;

/// Where a round puts one ring's batch (`GroupLog::place_batches`).
struct Place {
    ring_index: usize,
    /// Bytes into the ring, and the batch's length in whole blocks.
    start: u64,
    len: u64,
    /// The part of the ring it cycles through (`Ring::window`).
    window: u64,
    /// No older batch of the ring is live: this one's tail masks every older entry.
    masks_older: bool,
}

type Places = SmallVec<[Place; 8]>;

/// How many of the `pending` entries a round takes — whole tickets, in order, while every
/// ring's batch fits half its ring (`ring_len`) — and per ring its batch's bytes (a header,
/// then entries). At least the first ticket: one past half a ring goes alone (rings sized by
/// `GroupLog::new` never see one).
fn round_extent(pending: &[Pending], ring_len: impl Fn(usize) -> u64) -> (usize, RingBytes) {
    let add =
        |sizes: &mut RingBytes, r: usize, len: u64| match sizes.iter_mut().find(|(x, _)| *x == r) {
            Some((_, l)) => *l += len,
            None => sizes.push((r, len)),
        };
    let (mut size, mut ticket_size) = (RingBytes::new(), RingBytes::new());
    let mut n = 0;
    while n < pending.len() {
        let t = pending[n].ticket;
        let end = n + pending[n..].iter().take_while(|p| p.ticket == t).count();
        ticket_size.clear();
        for p in &pending[n..end] {
            for &(r, _) in &p.rings {
                add(&mut ticket_size, r, p.entry.encoded_len() as u64);
            }
        }
        let fits = ticket_size.iter().all(|&(r, len)| {
            let so_far =
                (size.iter().find(|(x, _)| *x == r)).map_or(BATCH_HEADER_BYTES as u64, |&(_, l)| l);
            so_far + len <= ring_len(r) / 2
        });
        if !fits && n > 0 {
            break;
        }
        for &(r, len) in &ticket_size {
            if !size.iter().any(|(x, _)| *x == r) {
                size.push((r, BATCH_HEADER_BYTES as u64));
            }
            add(&mut size, r, len);
        }
        n = end;
        if !fits {
            break;
        }
    }
    (n, size)
}

/// Why [`GroupLog::write`] did not log a stripe write's entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LogFailed {
    /// Every ring an entry was for is on a member that failed (before or by this write):
    /// the stripe is written as with its parity lost.
    ParityFailed,
    /// The entries fit no ring with nothing left to settle or wait for (cannot happen with
    /// rings sized by `GroupLog::new`: see `no_room`): the stripe must not be written, its
    /// parity members still serving.
    NoRoom,
    /// The round that took them was dropped before its batches were written (its writer's
    /// future cancelled), or the writer gave its ticket up: not written, and not for want
    /// of room — told apart so such a report names its cause.
    Cancelled,
}

impl LogFailed {
    pub(crate) fn into_error(self) -> VolumeError {
        VolumeError::Unavailable {
            reason: match self {
                LogFailed::ParityFailed => "no parity member could take a partial-parity log entry",
                LogFailed::NoRoom => "the partial-parity log had no room for an entry",
                LogFailed::Cancelled => {
                    "the partial-parity log round carrying an entry was cancelled unwritten"
                }
            }
            .into(),
        }
    }
}

/// A writer's pending entries, given up if the writer goes away before a round takes
/// them (its future dropped): nobody else would end their bands.
struct PendingGuard<'a> {
    log: &'a GroupLog,
    ticket: u64,
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        let mut st = self.log.state.lock();
        st.notify.remove(&self.ticket);
        let mut gone = Vec::new();
        st.pending.retain(|p| {
            let mine = p.ticket == self.ticket;
            if mine {
                gone.push((p.entry.stripe, p.entry.band, p.entry.seq));
            }
            !mine
        });
        if !gone.is_empty() {
            GroupLog::abandon(&mut st, gone);
        }
    }
}

/// The entries a round took, failed if the round is dropped before it ends (its writer's
/// future cancelled): their writers would otherwise wait for an end nobody sends.
struct Unfinished<'a> {
    log: &'a GroupLog,
    taken: &'a [Pending],
}

impl Drop for Unfinished<'_> {
    fn drop(&mut self) {
        let mut st = self.log.state.lock();
        for p in self.taken {
            if let Some(tx) = st.notify.remove(&p.ticket) {
                let _ = tx.send(Err(LogFailed::Cancelled));
            }
        }
        let gone = self
            .taken
            .iter()
            .map(|p| (p.entry.stripe, p.entry.band, p.entry.seq));
        GroupLog::abandon(&mut st, gone);
    }
}

/// A round being written: ended (and a writer waiting for a slot woken) when dropped.
pub(super) struct RoundSlot<'a> {
    log: &'a GroupLog,
}

impl<'a> RoundSlot<'a> {
    /// A slot to write a round in, if fewer than `MAX_ROUNDS_IN_FLIGHT` are being written
    /// (`st` is `log`'s state, locked by the caller).
    fn take_in(st: &mut State, log: &'a GroupLog) -> Option<RoundSlot<'a>> {
        let free = st.rounds_in_flight < MAX_ROUNDS_IN_FLIGHT;
        free.then(|| {
            st.rounds_in_flight += 1;
            RoundSlot { log }
        })
    }

    #[cfg(test)]
    pub(super) fn take(log: &'a GroupLog) -> Option<RoundSlot<'a>> {
        Self::take_in(&mut log.state.lock(), log)
    }
}

impl Drop for RoundSlot<'_> {
    fn drop(&mut self) {
        let mut st = self.log.state.lock();
        st.rounds_in_flight -= 1;
        for w in st.slot_waiters.drain(..) {
            let _ = w.send(());
        }
    }
}

impl GroupLog {
    /// Entries below this are settled (what a batch written now carries). A band none of
    /// whose entries a round has taken yet does not count: its entries are numbered anew
    /// when taken (above every tail written before), so a writer slow to hand its entries
    /// over never pins the ring space its own batch needs.
    fn tail(st: &State) -> u64 {
        st.bands.tail().unwrap_or(st.next_seq)
    }

    /// Numbers the entries a round takes anew, in the order they were prepared, from
    /// `next_seq`: above the tail the round's batches carry (see [`Self::tail`]).
    fn renumber(st: &mut State, taken: &mut [Pending]) {
        let mut order: SmallVec<[usize; 32]> = (0..taken.len()).collect();
        order.sort_by_key(|&i| taken[i].entry.seq);
        for i in order {
            let e = &mut taken[i].entry;
            let (old, new) = (e.seq, st.next_seq);
            st.next_seq += 1;
            e.seq = new;
            st.bands.update((e.stripe, e.band), |b| {
                if !b.written {
                    b.first_seq = new;
                    b.written = true;
                }
                if b.seq == old {
                    b.seq = new;
                }
            });
        }
    }

    /// Entries that will never be written (their round failed them, or their writer gave
    /// up): their bands' member writes are not issued either, so nothing of the bands is
    /// pending any more — without this a later write to the band would wait forever.
    fn abandon(st: &mut State, entries: impl IntoIterator<Item = (u64, u32, u64)>) {
        for (stripe, band, seq) in entries {
            let newest = st.bands.update((stripe, band), |b| {
                let newest = b.seq == seq;
                b.durable |= newest;
                newest
            });
            if newest == Some(true) {
                st.band_changed((stripe, band));
            }
        }
        // Rare (a failed round, a writer gone): every round waiting for room looks again.
        st.wake_room();
    }

    /// Writes `entries` (from [`Self::prepare`]) to their rings; the returned hold ends the
    /// bands' writes when dropped (after the member writes, whatever their outcome). The
    /// emptied vector is kept for the next [`Self::prepare`].
    pub(crate) async fn write(
        &self,
        mut entries: Vec<(Entry, Rings)>,
    ) -> Result<Hold<'_>, LogFailed> {
        let hold = Hold {
            log: self,
            bands: entries.iter().map(|(e, _)| (e.stripe, e.band)).collect(),
        };
        if entries.is_empty() {
            return Ok(hold);
        }
        let (tx, mut ended) = oneshot::channel();
        let ticket = {
            let mut st = self.state.lock();
            let t = st.next_ticket;
            st.next_ticket += 1;
            for (entry, rings) in entries.drain(..) {
                st.pending.push(Pending {
                    ticket: t,
                    entry,
                    rings,
                });
            }
            st.spare_prepared = entries;
            st.notify.insert(t, tx);
            t
        };
        let guard = PendingGuard { log: self, ticket };
        // A writer whose entries are still pending starts a round of everything pending if
        // fewer than `MAX_ROUNDS_IN_FLIGHT` are being written; otherwise it waits for its
        // ticket's end or for a round to end, whichever comes first.
        // A dropped sender: the ticket was given up (cannot happen while we wait).
        let gone = Err(LogFailed::Cancelled);
        let ended_as = loop {
            if let Ok(Some(r)) = ended.try_recv() {
                break r;
            }
            let next = {
                let mut st = self.state.lock();
                if !st.pending.iter().any(|p| p.ticket == ticket) {
                    None // a round in flight carries them: only its end is worth waiting for
                } else if let Some(slot) = RoundSlot::take_in(&mut st, self) {
                    Some(Either::Left(slot))
                } else {
                    let (tx, rx) = oneshot::channel();
                    st.slot_waiters.push(tx);
                    Some(Either::Right(rx))
                }
            };
            match next {
                None => break (&mut ended).await.unwrap_or(gone),
                Some(Either::Right(slot_freed)) => {
                    let first = futures::future::select(&mut ended, slot_freed).await;
                    if let Either::Left((r, _)) = first {
                        break r.unwrap_or(gone);
                    }
                }
                Some(Either::Left(slot)) => {
                    if let Some(room) = self.write_round().await {
                        // Wait without the slot: the write that must end first may need it.
                        drop(slot);
                        let first = futures::future::select(&mut ended, room).await;
                        if let Either::Left((r, _)) = first {
                            break r.unwrap_or(gone);
                        }
                    }
                }
            }
        };
        std::mem::forget(guard);
        ended_as.map(|()| hold)
    }

    /// Writes what is pending (as much as fits half of each ring), one batch per ring, in
    /// stages: take a round (under the state lock), or with no room settle or wait; write
    /// the batches; answer the round's writers.
    /// `Some`: no room until a write in flight ends (wait for it without the round slot).
    pub(super) async fn write_round(&self) -> Option<oneshot::Receiver<()>> {
        let mut flushed = false;
        loop {
            let round = self.take_or_no_room(flushed);
            #[cfg(test)]
            gap::run(self, round.is_ok());
            let (taken, mut batches) = match round {
                Ok(round) => round,
                Err(NoRoom::Flush) => {
                    self.flush_members().await;
                    flushed = true;
                    continue;
                }
                Err(NoRoom::Wait(rx)) => return Some(rx),
                Err(NoRoom::Failed) => return None,
            };
            // A ring more than half full of live batches: flush the group's members beside
            // this batch, so bands written so far settle before the ring runs out (instead of
            // every writer stalling behind a flush then).
            let flush_now = self.crowded();
            let flush = async {
                if flush_now {
                    self.flush_members().await;
                }
            };
            let writes = join_all(
                (batches.iter_mut()).map(|b| async { b.took = self.write_batch(b).await }),
            );
            let unfinished = Unfinished {
                log: self,
                taken: &taken,
            };
            futures::future::join(writes, flush).await;
            std::mem::forget(unfinished);
            self.finish_round(batches, taken);
            return None;
        }
    }

    /// A round of what is pending (`flushed`: the group's members were just flushed, so
    /// rebase first), or — no room — what to do about it, decided under the same lock as
    /// the attempt. Decided under a second lock, the state had moved on in between: another
    /// writer's `retire` (after a flush it saw complete) could take out the very bands whose
    /// entries held the ring, leaving nothing to flush or wait for while there was room
    /// again, and the pending entries failed on a healthy array.
    fn take_or_no_room(&self, flushed: bool) -> Result<(Vec<Pending>, Vec<Batch>), NoRoom> {
        let mut st = self.state.lock();
        if flushed {
            self.rebase(&mut st);
        }
        self.retire(&mut st);
        match self.take_round(&mut st) {
            Some(round) => Ok(round),
            None => Err(self.no_room(&mut st)),
        }
    }

    /// Takes whole tickets (one stripe write's entries, which fit half a ring by
    /// `min_ring_bytes`) in order while every ring's batch fits half its ring — a write whose
    /// entries were split over two batches would hold ring space while waiting for ring
    /// space — places each ring's batch where it touches no live batch, and encodes them.
    /// `None` when the batches have no room.
    fn take_round(&self, st: &mut State) -> Option<(Vec<Pending>, Vec<Batch>)> {
        let tail = Self::tail(st);
        let ring_len = |r: usize| st.rings[r].as_ref().expect("ring").len;
        let (n, size) = round_extent(&st.pending, ring_len);
        let places = self.place_batches(st, &size, tail)?;
        // The vectors of the last round, emptied (`finish_round`), when it ended.
        let mut taken = std::mem::take(&mut st.spare_taken);
        taken.extend(st.pending.drain(..n));
        Self::renumber(st, &mut taken);
        let batches = self.encode_batches(st, &taken, places, tail);
        count(&stats::ROUNDS, 1);
        count(&stats::ENTRIES, taken.len() as u64);
        count(&stats::BATCHES, batches.len() as u64);
        let bytes: usize = batches.iter().map(|b| b.bytes.len()).sum();
        count(&stats::BATCH_BYTES, bytes as u64);
        Some((taken, batches))
    }

    /// Where each ring's batch of `size` bytes goes in its ring (whole blocks, touching no
    /// batch live from `tail` on); `None` when a ring has no room for its batch.
    fn place_batches(&self, st: &mut State, size: &RingBytes, tail: u64) -> Option<Places> {
        let mut places = Places::new();
        for &(ring_index, len) in size {
            let len = len.next_multiple_of(LOG_BLOCK_BYTES);
            let ring = st.rings[ring_index].as_mut().expect("ring");
            // One stripe's entries fit half a ring (`min_ring_bytes`), and a round past half
            // a ring takes one ticket alone: a batch never runs past its ring's area.
            assert!(
                len <= ring.len,
                "a log batch of {len} bytes for a ring of {} (a ticket of more than one stripe?)",
                ring.len
            );
            ring.keep_live_from(tail);
            let masks_older = ring.none_live();
            let window = ring.window(self.memory_backed(ring));
            let start = ring.place(len, window)?;
            places.push(Place {
                ring_index,
                start,
                len,
                window,
                masks_older,
            });
        }
        Some(places)
    }

    /// The round's batches, one a place: the entries of `taken` its ring gets, encoded into
    /// a buffer kept from a batch written before when one is free; each noted live in its
    /// ring.
    fn encode_batches(
        &self,
        st: &mut State,
        taken: &[Pending],
        places: Places,
        tail: u64,
    ) -> Vec<Batch> {
        let mut batches = std::mem::take(&mut st.spare_batches);
        for p in places {
            let spare = st.spare_batch_bytes.pop();
            let ring = st.rings[p.ring_index].as_mut().expect("ring");
            let es: SmallVec<[(&Entry, Part); 16]> = taken
                .iter()
                .filter_map(|t| {
                    let (_, part) = t.rings.iter().find(|(c, _)| *c == p.ring_index)?;
                    Some((&t.entry, *part))
                })
                .collect();
            let newest_seq = es.iter().map(|e| e.0.seq).max().unwrap_or(0);
            ring.push_live(p.start, p.len, newest_seq);
            let n = batch_bytes(&es);
            let mut bytes = (spare.and_then(|b| b.reuse_as(n))).unwrap_or_else(|| Buf::new(n));
            encode_batch_into(self.life, tail, &es, &mut bytes);
            debug_assert_eq!(bytes.len() as u64, p.len);
            batches.push(Batch {
                ring: p.ring_index,
                member: ring.member,
                at: ring.offset + p.start,
                window: ring.offset..ring.offset + p.window,
                bytes: bytes.freeze(),
                tail,
                masks_older: p.masks_older,
                took: false,
            });
        }
        batches
    }

    /// No room for a round (`take_round` just found none, under the caller's lock on `st`):
    /// settle what can be settled (flush the group's members), or wait for a write in flight
    /// to end, or — nothing to wait for — fail the pending entries.
    fn no_room(&self, st: &mut State) -> NoRoom {
        // A band done but not durable settles with a flush; so do the older entries of a
        // band logged again without one (see `rebase`).
        if st.bands.any_settles() {
            return NoRoom::Flush;
        }
        // Member writes in flight, or an entry in another round in flight: each ends, and
        // the first band done (a flush would settle it) or the round's end wakes the
        // waiters. (Not a band whose entry is only pending.)
        if st.bands.any_busy() {
            count(&stats::ROOM_WAITS, 1);
            let (tx, rx) = oneshot::channel();
            st.room_waiters.push(tx);
            return NoRoom::Wait(rx);
        }
        // No room can ever come. Only a band a round has taken an entry of holds the tail,
        // and such a band, seen under the lock that just retired and tried, is done
        // (settles), stale (settles) or busy: the slot this round holds is the only one
        // (`MAX_ROUNDS_IN_FLIGHT`), so the round that took its newest entry has ended and
        // made it durable, and its member writes are in flight or done. None here: the tail
        // is `next_seq`, no ring keeps a live batch, and the round still does not fit — a
        // batch larger than its ring, which `GroupLog::new`'s sizing excludes (asserted in
        // `place_batches`). Fail the entries rather than hang on such a bookkeeping bug.
        tracing::error!(
            "parity group {}: {} partial-parity log entries fit no ring, with nothing to \
             settle or wait for: {}",
            self.group,
            st.pending.len(),
            st.waits()
        );
        let failed: Vec<Pending> = st.pending.drain(..).collect();
        for p in &failed {
            if let Some(tx) = st.notify.remove(&p.ticket) {
                let _ = tx.send(Err(LogFailed::NoRoom));
            }
        }
        let gone = failed
            .iter()
            .map(|p| (p.entry.stripe, p.entry.band, p.entry.seq));
        Self::abandon(st, gone);
        NoRoom::Failed
    }

    /// Whether some ring is more than half full of live batches while a band waits only
    /// for a flush to settle.
    fn crowded(&self) -> bool {
        let st = self.state.lock();
        st.bands.any_done()
            && (st.rings.iter().flatten())
                .any(|r| r.live_bytes > r.window(self.memory_backed(r)) / 2)
    }

    /// Whether `ring`'s member keeps its bytes in memory (see [`Ring::window`]).
    fn memory_backed(&self, ring: &Ring) -> bool {
        self.table.slot(ring.member).memory_backed()
    }

    /// Writes one ring's batch (FUA) to its member and the member's replacement; whether the
    /// member took it.
    async fn write_batch(&self, batch: &Batch) -> bool {
        let slot = self.table.slot(batch.member);
        // A ring write reuses space of entries that may still be needed to rebuild a stripe
        // a failed member missed: not before the failure is recorded.
        let recorded = self.table.failure_gate().wait_recorded().await;
        if recorded.is_err() || slot.is_failed() {
            return false;
        }
        let rep = slot.replacement();
        let copy = rep.as_ref().map(|r| batch.write_to(r));
        let member = slot.member();
        let r = batch.write_to(&member).await;
        if let Some(Err(e)) = match copy {
            Some(f) => Some(f.await),
            None => None,
        } {
            slot.drop_replacement(&e);
        }
        match r {
            Ok(()) => true,
            Err(e) => {
                self.table.fail(batch.member, &e);
                false
            }
        }
    }

    /// After a round's batches were written: each ring's durable tail, each taken band
    /// durable, each writer answered (logged when some ring of each of its entries took it).
    /// The round's vectors, emptied, are kept for the next round.
    fn finish_round(&self, mut batches: Vec<Batch>, mut taken: Vec<Pending>) {
        let mut st = self.state.lock();
        // A few rings and tickets a round: small lists, searched (maps cost an allocation
        // each, a round).
        for b in &batches {
            if b.took {
                let ring = st.rings[b.ring].as_mut().expect("ring");
                ring.durable_tail = ring.durable_tail.max(b.tail);
                // Every older entry of the ring below this batch's tail: none replayed again.
                ring.lapsed &= !b.masks_older;
            }
        }
        let took = |r: &usize| batches.iter().any(|b| b.ring == *r && b.took);
        // A ticket's entries are taken together, one after another (`take_round`).
        let mut tickets: SmallVec<[(u64, bool); 16]> = SmallVec::new();
        for p in &taken {
            let ok = p.rings.iter().any(|(r, _)| took(r));
            match tickets.last_mut() {
                Some((t, all)) if *t == p.ticket => *all &= ok,
                _ => tickets.push((p.ticket, ok)),
            }
            // Nothing of the band is pending any more (an entry no ring took was not written,
            // and neither are the member writes it was to protect).
            let key = (p.entry.stripe, p.entry.band);
            let newest = st.bands.update(key, |b| {
                let newest = b.seq == p.entry.seq;
                b.durable |= newest;
                newest
            });
            if newest == Some(true) {
                st.band_changed(key);
            }
        }
        debug_assert!(
            tickets.windows(2).all(|w| w[0].0 < w[1].0),
            "a ticket's entries together, tickets in order"
        );
        for (t, ok) in tickets {
            if let Some(tx) = st.notify.remove(&t) {
                let _ = tx.send(if ok {
                    Ok(())
                } else {
                    Err(LogFailed::ParityFailed)
                });
            }
        }
        st.wake_room();
        Self::recycle(&mut st, taken.drain(..).map(|p| p.entry));
        st.spare_taken = taken;
        // The batches' buffers (written: the member writes are done), one a ring at most.
        for b in batches.drain(..) {
            if st.spare_batch_bytes.len() < st.rings.len() {
                st.spare_batch_bytes.push(b.bytes);
            }
        }
        st.spare_batches = batches;
    }
}

/// What a round with no room does next.
enum NoRoom {
    /// Flush the group's members (bands settle), then try again.
    Flush,
    /// Wait for a write in flight to end, without the round slot.
    Wait(oneshot::Receiver<()>),
    /// The pending entries were failed.
    Failed,
}

/// One ring's part of a round: the encoded batch and where it goes.
pub(super) struct Batch {
    ring: usize,
    member: usize,
    /// Byte on the member.
    at: u64,
    /// The ring's window on the member ([`Ring::window`]); the batch may lie past it (one
    /// over half the window takes the whole area).
    window: std::ops::Range<u64>,
    bytes: SharedBuf,
    /// The log tail the batch carries.
    tail: u64,
    /// No older batch of the ring was live when it was placed: once it lands, no older
    /// entry of the ring is replayed.
    masks_older: bool,
    /// Its member took it (set once written: `write_round`).
    took: bool,
}

impl Batch {
    /// Writes the batch (FUA) to `member`, naming its window: a member in memory may write
    /// it through a mapping.
    fn write_to<'a>(&self, member: &'a Arc<dyn Member>) -> BoxFuture<'a, MemberResult<()>> {
        member.write_in_window(self.window.clone(), self.at, self.bytes.clone(), true)
    }
}

/// Tests: another writer's steps run where `write_round` has let go of the state lock after
/// trying to take a round, before it acts on what it found (another thread may run there).
#[cfg(test)]
pub(super) mod gap {
    use super::GroupLog;
    use std::cell::RefCell;

    /// Called with the log and whether the round took entries.
    type Step = Box<dyn FnOnce(&GroupLog, bool)>;

    thread_local! {
        static NEXT: RefCell<Option<Step>> = const { RefCell::new(None) };
    }

    /// Runs `step` in the next round this thread writes, once.
    pub(in crate::ppl::log) fn once(step: impl FnOnce(&GroupLog, bool) + 'static) {
        NEXT.with(|n| *n.borrow_mut() = Some(Box::new(step)));
    }

    pub(super) fn run(log: &GroupLog, took: bool) {
        if let Some(step) = NEXT.with(|n| n.borrow_mut().take()) {
            step(log, took);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ticket's entry of one band storing `sectors` sectors of partial parity on `rings`
    /// (of a stripe of two data chunks: 32 + 8 + 512 × sectors bytes).
    fn pending(ticket: u64, rings: &[usize], sectors: u32) -> Pending {
        let stored = ((1u16 << sectors) - 1) as u8;
        let entry = Entry {
            seq: ticket,
            group: 0,
            stripe: ticket,
            band: 0,
            sectors: 8,
            parity: 1,
            masks: vec![stored, 0],
            pp: Some(vec![0; 512 * sectors as usize]),
            pq: None,
        };
        let rings = rings.iter().map(|&r| (r, Part::P)).collect();
        Pending {
            ticket,
            entry,
            rings,
        }
    }

    #[test]
    fn a_round_takes_whole_tickets_while_each_ring_s_batch_fits_half_its_ring() {
        let header = BATCH_HEADER_BYTES as u64;
        let one = (32 + 8 + 4096) as u64;
        // Rings of 8 blocks and more: half a ring takes the header and seven such entries.
        let ring_len = |r: usize| {
            if r == 0 {
                2 * (header + 7 * one)
            } else {
                1 << 20
            }
        };
        let tickets: Vec<Pending> = (0..10).map(|t| pending(t, &[t as usize % 2], 8)).collect();
        let (n, size) = round_extent(&tickets, ring_len);
        // Ten tickets alternating over two rings: five entries each, all fit.
        assert_eq!(n, 10);
        assert_eq!(
            size.as_slice(),
            &[(0, header + 5 * one), (1, header + 5 * one)]
        );
        let many: Vec<Pending> = (0..20).map(|t| pending(t, &[0], 8)).collect();
        let (n, size) = round_extent(&many, ring_len);
        assert_eq!((n, size.as_slice()), (7, &[(0, header + 7 * one)][..]));
    }

    #[test]
    fn a_ticket_s_entries_are_never_split_over_two_rounds() {
        let header = BATCH_HEADER_BYTES as u64;
        let one = (32 + 8 + 4096) as u64;
        let ring_len = |_| 2 * (header + 3 * one);
        // Ticket 0 of two entries, ticket 1 of two: the second does not fit beside the first.
        let tickets = [0, 0, 1, 1].map(|t| pending(t, &[0], 8));
        let (n, size) = round_extent(&tickets, ring_len);
        assert_eq!((n, size.as_slice()), (2, &[(0, header + 2 * one)][..]));
    }

    #[test]
    fn a_first_ticket_past_half_a_ring_goes_alone() {
        let header = BATCH_HEADER_BYTES as u64;
        let one = (32 + 8 + 4096) as u64;
        let tickets = [pending(0, &[0, 1], 8), pending(1, &[1], 1)];
        let (n, size) = round_extent(&tickets, |_| one);
        assert_eq!(
            (n, size.as_slice()),
            (1, &[(0, header + one), (1, header + one)][..])
        );
        assert_eq!(round_extent(&[], |_| one), (0, RingBytes::new()));
    }
}
