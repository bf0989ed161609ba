//! The writer side of one parity group's log: per band, the chunks written since its writes
//! were last known durable and the partial parity of the rest; entries gathered into
//! batches (callers waiting at the same time share one write per ring), written with FUA
//! before the stripe's member writes are issued; rings reused once their entries are settled.

use super::codec::{encode_batch, Entry, LOG_BLOCK_BYTES};
use super::{PplSetup, BAND_BYTES, SECTOR_BYTES};
use crate::buf::Buf;
use crate::error::VolumeError;
use crate::node::MemberTable;
use crate::parity;
use futures::channel::oneshot;
use futures::future::{join_all, Either};
use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

static ZERO: [u8; SECTOR_BYTES] = [0; SECTOR_BYTES];

/// Adds `v` (data chunk at syndrome slot `slot`) into a partial P (and Q).
fn add(slot: usize, v: &[u8], sp: &mut [u8], sq: &mut Option<&mut [u8]>) {
    match sq {
        Some(q) => parity::pq_update(sp, q, slot, &ZERO, v),
        None => parity::xor_update(sp, &ZERO, v),
    }
}

/// What a stripe write can tell the log about the bytes it replaces.
pub(crate) enum Values<'a> {
    /// Read-modify-write: per data chunk the old bytes it read (from row `start`), and the
    /// old P (and Q) over rows `[r0, ..)`.
    Delta {
        old: Vec<Option<(u64, &'a [u8])>>,
        p: &'a [u8],
        q: Option<&'a [u8]>,
        r0: u64,
    },
    /// Every data chunk's new bytes over rows `[r0, ..)` (unwritten bytes as they were).
    Direct { chunks: Vec<&'a [u8]>, r0: u64 },
}

/// One log ring: a member's log area.
struct Ring {
    member: usize,
    offset: u64,
    len: u64,
    head: u64,
    /// Batches written in this life that may still be needed: (start, end, newest seq).
    live: VecDeque<(u64, u64, u64)>,
    /// The largest tail a completed batch of this ring carries.
    durable_tail: u64,
}

struct Band {
    /// Per data chunk: sectors written since the band's writes were last all durable.
    masks: Vec<u8>,
    /// Partial P and Q of the band's sectors (zero where nothing is written).
    pp: Vec<u8>,
    pq: Vec<u8>,
    /// The first entry since the band went live: older ones are settled.
    first_seq: u64,
    seq: u64,
    /// The newest entry is on its rings.
    durable: bool,
    /// A round has taken one of the band's entries (it counts for the tail from then on).
    written: bool,
    /// Writes of the band in flight.
    inflight: u32,
    /// Per member of the group: its completed-writes count when the band's last write ended.
    need: Vec<u64>,
}

impl Band {
    /// A band going live with entry `seq`, nothing logged in it yet.
    fn live(seq: u64, need: Vec<u64>) -> Band {
        Band {
            masks: Vec::new(),
            pp: Vec::new(),
            pq: Vec::new(),
            first_seq: seq,
            seq,
            durable: false,
            written: false,
            inflight: 0,
            need,
        }
    }
}

struct Pending {
    ticket: u64,
    entry: Entry,
    rings: Vec<usize>,
}

struct State {
    next_seq: u64,
    bands: HashMap<(u64, u32), Band>,
    /// Bands settled in memory whose last entry a ring may still replay: (band) → seq.
    retired: HashMap<(u64, u32), u64>,
    rings: Vec<Option<Ring>>,
    pending: Vec<Pending>,
    next_ticket: u64,
    /// Per ticket not yet ended, where to say whether it was written (true) or failed: a
    /// writer learns it without queueing for the writer lock (where, behind a round in
    /// flight, it would hold up every writer after it).
    notify: HashMap<u64, oneshot::Sender<Result<(), LogFailed>>>,
    waiters: Vec<oneshot::Sender<()>>,
}

/// Why [`GroupLog::write`] did not log a stripe write's entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LogFailed {
    /// Every ring an entry was for is on a member that failed (before or by this write):
    /// the stripe is written as with its parity lost.
    ParityFailed,
    /// The entries fit no ring (cannot happen with rings sized by `GroupLog::new`): the
    /// stripe must not be written, its parity members still serving.
    NoRoom,
}

impl LogFailed {
    pub(crate) fn into_error(self) -> VolumeError {
        VolumeError::Unavailable {
            reason: match self {
                LogFailed::ParityFailed => "no parity member could take a partial-parity log entry",
                LogFailed::NoRoom => "the partial-parity log had no room for an entry",
            }
            .into(),
        }
    }
}

/// Why [`GroupLog::prepare`] cannot log a stripe write yet.
pub(crate) enum Blocked {
    /// A band's earlier writes are done but not known durable: flush the group's members.
    Flush,
    /// A band's earlier log entry or member writes are in flight: woken when one ends.
    Wait(oneshot::Receiver<()>),
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

/// One parity group's log (see the module docs of `ppl`).
pub(crate) struct GroupLog {
    group: u32,
    layout: nbraid_layout::ParityGroup,
    k: usize,
    np: usize,
    strip: u64,
    life: u64,
    table: Arc<MemberTable>,
    /// Member index of each child of the group.
    members: Vec<usize>,
    state: Mutex<State>,
    writer: futures::lock::Mutex<()>,
}

/// A stripe write's hold on its logged bands: dropped when its member writes are done.
pub(crate) struct Hold<'a> {
    log: &'a GroupLog,
    bands: Vec<(u64, u32)>,
}

impl Drop for Hold<'_> {
    fn drop(&mut self) {
        if self.bands.is_empty() {
            return;
        }
        let need = self.log.counts().0;
        let mut st = self.log.state.lock();
        for key in &self.bands {
            if let Some(band) = st.bands.get_mut(key) {
                band.inflight -= 1;
                band.need = need.clone();
            }
        }
        for w in st.waiters.drain(..) {
            let _ = w.send(());
        }
    }
}

impl GroupLog {
    /// The log of parity group `group` whose children are the leaves `members` (member
    /// indexes), or `None` when some member has no log area.
    pub(crate) fn new(
        setup: &PplSetup,
        group: u32,
        layout: &nbraid_layout::ParityGroup,
        members: Vec<usize>,
        table: Arc<MemberTable>,
    ) -> Option<GroupLog> {
        let rings: Vec<Option<Ring>> = members
            .iter()
            .map(|&m| {
                let (offset, len) = setup.areas.get(m).copied().flatten()?;
                Some(Ring {
                    member: m,
                    offset,
                    len,
                    head: LOG_BLOCK_BYTES, // block 0 holds the marker of this life
                    live: VecDeque::new(),
                    durable_tail: 0,
                })
            })
            .collect();
        let k = layout.data_chunks();
        let np = layout.parity();
        // One stripe write's entries must fit half a ring, or the log cannot keep up.
        let need = super::min_ring_bytes(layout);
        if rings
            .iter()
            .any(|r| r.as_ref().is_none_or(|r| r.len < need))
        {
            return None;
        }
        Some(GroupLog {
            group,
            layout: layout.clone(),
            k,
            np,
            strip: layout.strip(),
            life: setup.life,
            table,
            members,
            state: Mutex::new(State {
                next_seq: 1,
                bands: HashMap::new(),
                retired: HashMap::new(),
                rings,
                pending: Vec::new(),
                next_ticket: 1,
                notify: HashMap::new(),
                waiters: Vec::new(),
            }),
            writer: futures::lock::Mutex::new(()),
        })
    }

    /// Per member of the group: (writes completed, writes known durable).
    fn counts(&self) -> (Vec<u64>, Vec<u64>) {
        self.members
            .iter()
            .map(|&m| self.table.slot(m).write_counts())
            .unzip()
    }

    /// Moves bands whose writes are all durable out of the live set.
    fn retire(&self, st: &mut State) {
        let durable = self.counts().1;
        let failed: Vec<bool> = self
            .members
            .iter()
            .map(|&m| self.table.slot(m).is_failed())
            .collect();
        let settled: Vec<(u64, u32)> = st
            .bands
            .iter()
            .filter(|(_, b)| {
                b.inflight == 0
                    && b.durable
                    && b.need
                        .iter()
                        .enumerate()
                        .all(|(i, &n)| failed[i] || durable[i] >= n)
            })
            .map(|(k, _)| *k)
            .collect();
        for key in settled {
            let b = st.bands.remove(&key).expect("listed");
            st.retired.insert(key, b.seq);
        }
        let floor = st
            .rings
            .iter()
            .flatten()
            .map(|r| r.durable_tail)
            .min()
            .unwrap_or(0);
        st.retired.retain(|_, seq| *seq >= floor);
    }

    /// Flushes the group's members (so the bands written before are settled).
    pub(crate) async fn flush_members(&self) {
        let todo: Vec<(usize, u64)> = self
            .members
            .iter()
            .filter(|&&m| !self.table.slot(m).is_failed())
            .filter_map(|&m| self.table.slot(m).flush_target().map(|t| (m, t)))
            .collect();
        let results = join_all(todo.iter().map(|&(m, _)| self.table.slot(m).flush())).await;
        for (&(m, target), r) in todo.iter().zip(results) {
            match r {
                Ok(()) => self.table.slot(m).flushed(target),
                Err(e) => self.table.fail(m, &e),
            }
        }
    }

    /// Entries below this are settled (what a batch written now carries). A band none of
    /// whose entries a round has taken yet does not count: its entries are numbered anew
    /// when taken (above every tail written before), so a writer slow to hand its entries
    /// over never pins the ring space its own batch needs.
    fn tail(st: &State) -> u64 {
        st.bands
            .values()
            .filter(|b| b.written)
            .map(|b| b.first_seq)
            .min()
            .unwrap_or(st.next_seq)
    }

    /// Numbers the entries a round takes anew, in the order they were prepared, from
    /// `next_seq`: above the tail the round's batches carry (see [`Self::tail`]).
    fn renumber(st: &mut State, taken: &mut [Pending]) {
        let mut order: Vec<usize> = (0..taken.len()).collect();
        order.sort_by_key(|&i| taken[i].entry.seq);
        for i in order {
            let e = &mut taken[i].entry;
            let (old, new) = (e.seq, st.next_seq);
            st.next_seq += 1;
            e.seq = new;
            if let Some(b) = st.bands.get_mut(&(e.stripe, e.band)) {
                if !b.written {
                    b.first_seq = new;
                    b.written = true;
                }
                if b.seq == old {
                    b.seq = new;
                }
            }
        }
    }

    /// Entries that will never be written (their round failed them, or their writer gave
    /// up): their bands' member writes are not issued either, so nothing of the bands is
    /// pending any more — without this a later write to the band would wait forever.
    fn abandon(st: &mut State, entries: impl IntoIterator<Item = (u64, u32, u64)>) {
        for (stripe, band, seq) in entries {
            if let Some(b) = st.bands.get_mut(&(stripe, band)) {
                if b.seq == seq {
                    b.durable = true;
                }
            }
        }
        for w in st.waiters.drain(..) {
            let _ = w.send(());
        }
    }

    /// The children whose rings take stripe `stripe`'s entries: its P and Q, where their
    /// members have not failed.
    fn targets(&self, stripe: u64) -> Vec<usize> {
        let roles = self.layout.roles(stripe);
        [Some(roles.p), roles.q]
            .into_iter()
            .flatten()
            .filter(|&c| !self.table.slot(self.members[c]).is_failed())
            .collect()
    }

    /// Builds the entries of one stripe write (the caller holds the stripe's exclusive
    /// lock): `written[i]` are data chunk `i`'s new byte ranges (rows). Returns the entries
    /// to write (none: nothing needs logging), or why not yet: a band it touches still has
    /// earlier writes that are not durable — [`Blocked::Flush`] when a flush of the group's
    /// members settles them, [`Blocked::Wait`] when their log entry or member writes are
    /// still in flight (then prepare again once woken).
    ///
    /// Why not log the union of both writes instead: an earlier acknowledged write becomes
    /// guaranteed when a flush issued after it completes — possibly after this entry is
    /// written — and then its chunk must be rebuilt exactly if its member is lost, which an
    /// entry that calls it "being written" cannot do.
    pub(crate) fn prepare(
        &self,
        stripe: u64,
        written: &[Vec<(u64, u64)>],
        values: &Values<'_>,
    ) -> Result<Vec<(Entry, Vec<usize>)>, Blocked> {
        let rings = self.targets(stripe);
        let q_slot = self.layout.roles(stripe).q_slot;
        let mut st = self.state.lock();
        if rings.is_empty() {
            return Ok(Vec::new());
        }
        let (lo, hi) = written
            .iter()
            .flatten()
            .fold((u64::MAX, 0), |(a, b), &(s, e)| (a.min(s), b.max(e)));
        if lo >= hi {
            return Ok(Vec::new());
        }
        let touched = (lo / BAND_BYTES)..hi.div_ceil(BAND_BYTES);
        if touched
            .clone()
            .any(|b| st.bands.contains_key(&(stripe, b as u32)))
        {
            self.retire(&mut st);
            let blocking: Vec<&Band> = touched
                .clone()
                .filter_map(|b| st.bands.get(&(stripe, b as u32)))
                .collect();
            if !blocking.is_empty() {
                if blocking.iter().any(|b| b.inflight == 0 && b.durable) {
                    return Err(Blocked::Flush);
                }
                // Registered under the state lock: the wake-up cannot be missed.
                let (tx, rx) = oneshot::channel();
                st.waiters.push(tx);
                return Err(Blocked::Wait(rx));
            }
        }
        let floor = rings
            .iter()
            .map(|&c| st.rings[c].as_ref().expect("ring").durable_tail)
            .min()
            .unwrap_or(0);
        let mut out = Vec::new();
        for band in (lo / BAND_BYTES)..hi.div_ceil(BAND_BYTES) {
            let b0 = band * BAND_BYTES;
            let b1 = (b0 + BAND_BYTES).min(self.strip);
            let sectors = ((b1 - b0) / SECTOR_BYTES as u64) as u8;
            let now: Vec<u8> = written
                .iter()
                .map(|ranges| {
                    let mut m = 0u8;
                    for &(s, e) in ranges {
                        let (s, e) = (s.max(b0), e.min(b1));
                        for x in (s..e).step_by(SECTOR_BYTES) {
                            m |= 1 << ((x - b0) / SECTOR_BYTES as u64);
                        }
                    }
                    m
                })
                .collect();
            if now.iter().all(|&m| m == 0) {
                continue;
            }
            let key = (stripe, band as u32);
            let live = st.bands.contains_key(&key);
            let replayable = live || st.retired.get(&key).is_some_and(|&s| s >= floor);
            let prev_masks = st
                .bands
                .get(&key)
                .map_or_else(|| vec![0; self.k], |b| b.masks.clone());
            let union: Vec<u8> = prev_masks.iter().zip(&now).map(|(a, b)| a | b).collect();
            let covered = union.iter().fold(0, |a, m| a | m);
            let full = union.iter().fold(0xff, |a, m| a & m);
            if covered & !full == 0 && !replayable {
                // Every chunk written wherever anything is: nothing to protect, nothing stale.
                continue;
            }
            let n = sectors as usize * SECTOR_BYTES;
            let (mut pp, mut pq) = match st.bands.get(&key) {
                Some(b) => (b.pp.clone(), b.pq.clone()),
                None => (vec![0; n], vec![0; if self.np == 2 { n } else { 0 }]),
            };
            for x in 0..sectors as usize {
                let bit = 1u8 << x;
                if now.iter().all(|m| m & bit == 0) {
                    continue; // untouched now: as before
                }
                let row = b0 + (x * SECTOR_BYTES) as u64;
                let sp = &mut pp[x * SECTOR_BYTES..(x + 1) * SECTOR_BYTES];
                let mut sq =
                    (self.np == 2).then(|| &mut pq[x * SECTOR_BYTES..(x + 1) * SECTOR_BYTES]);
                match values {
                    Values::Direct { chunks, r0 } => {
                        sp.fill(0);
                        if let Some(q) = sq.as_deref_mut() {
                            q.fill(0);
                        }
                        let at = (row - r0) as usize;
                        for i in 0..self.k {
                            if union[i] & bit == 0 {
                                add(q_slot[i], &chunks[i][at..at + SECTOR_BYTES], sp, &mut sq);
                            }
                        }
                    }
                    Values::Delta { old, p, q, r0 } => {
                        if prev_masks.iter().all(|m| m & bit == 0) {
                            // Not covered before: start from the old parity.
                            let at = (row - r0) as usize;
                            sp.copy_from_slice(&p[at..at + SECTOR_BYTES]);
                            if let (Some(dq), Some(q)) = (sq.as_deref_mut(), q) {
                                dq.copy_from_slice(&q[at..at + SECTOR_BYTES]);
                            }
                        }
                        for i in 0..self.k {
                            if now[i] & bit == 0 || prev_masks[i] & bit != 0 {
                                continue;
                            }
                            let (start, bytes) = old[i].expect("RMW read the written chunk");
                            let at = (row - start) as usize;
                            add(q_slot[i], &bytes[at..at + SECTOR_BYTES], sp, &mut sq);
                        }
                    }
                }
            }
            let seq = st.next_seq;
            st.next_seq += 1;
            let stored = covered & !full;
            let mut entry = Entry {
                seq,
                group: self.group,
                stripe,
                band: band as u32,
                sectors,
                parity: self.np as u8,
                masks: union.clone(),
                pp: Vec::new(),
                pq: Vec::new(),
            };
            for x in (0..sectors as usize).filter(|x| stored & (1 << x) != 0) {
                let r = x * SECTOR_BYTES..(x + 1) * SECTOR_BYTES;
                entry.pp.extend_from_slice(&pp[r.clone()]);
                if self.np == 2 {
                    entry.pq.extend_from_slice(&pq[r]);
                }
            }
            let need = vec![0; self.members.len()];
            let b = st.bands.entry(key).or_insert_with(|| Band::live(seq, need));
            b.masks = union;
            b.pp = pp;
            b.pq = pq;
            b.seq = seq;
            b.durable = false;
            b.inflight += 1;
            out.push((entry, rings.clone()));
        }
        Ok(out)
    }

    /// [`Self::prepare`], flushing the group's members first when a band it touches has
    /// earlier writes that are not durable yet, or waiting for those writes to end.
    pub(crate) async fn prepare_settled(
        &self,
        stripe: u64,
        written: &[Vec<(u64, u64)>],
        values: &Values<'_>,
    ) -> Vec<(Entry, Vec<usize>)> {
        loop {
            match self.prepare(stripe, written, values) {
                Ok(e) => return e,
                Err(Blocked::Flush) => self.flush_members().await,
                Err(Blocked::Wait(rx)) => {
                    let _ = rx.await;
                }
            }
        }
    }

    /// [`Self::prepare_whole`], flushing or waiting first like [`Self::prepare_settled`].
    pub(crate) async fn prepare_whole_settled(
        &self,
        first: u64,
        end: u64,
    ) -> Vec<(Entry, Vec<usize>)> {
        loop {
            match self.prepare_whole(first, end) {
                Ok(e) => return e,
                Err(Blocked::Flush) => self.flush_members().await,
                Err(Blocked::Wait(rx)) => {
                    let _ = rx.await;
                }
            }
        }
    }

    /// Entries that settle every band of stripes `[first, end)` a ring may still replay
    /// (every chunk written, no partial parity): for writes that replace whole stripes
    /// without going through [`Self::prepare`] (zeroing; the caller holds the stripes'
    /// exclusive locks). Like [`Self::prepare`], a band still live blocks it: its new entry
    /// must not wait for ring space its own older entries hold.
    fn prepare_whole(&self, first: u64, end: u64) -> Result<Vec<(Entry, Vec<usize>)>, Blocked> {
        let mut st = self.state.lock();
        let live = |st: &State| {
            st.bands
                .iter()
                .filter(|((s, _), _)| (first..end).contains(s))
                .map(|(_, b)| b.inflight == 0 && b.durable)
                .collect::<Vec<bool>>()
        };
        if !live(&st).is_empty() {
            self.retire(&mut st);
            let blocking = live(&st);
            if blocking.contains(&true) {
                return Err(Blocked::Flush);
            }
            if !blocking.is_empty() {
                let (tx, rx) = oneshot::channel();
                st.waiters.push(tx);
                return Err(Blocked::Wait(rx));
            }
        }
        let mut keys: Vec<(u64, u32)> = st
            .bands
            .keys()
            .chain(st.retired.keys())
            .filter(|(s, _)| (first..end).contains(s))
            .copied()
            .collect();
        keys.sort_unstable();
        keys.dedup();
        let mut out = Vec::new();
        for (stripe, band) in keys {
            let rings = self.targets(stripe);
            if rings.is_empty() {
                continue;
            }
            let b0 = u64::from(band) * BAND_BYTES;
            let sectors = ((self.strip.min(b0 + BAND_BYTES) - b0) / SECTOR_BYTES as u64) as u8;
            let all = ((1u16 << sectors) - 1) as u8;
            let seq = st.next_seq;
            st.next_seq += 1;
            let n = sectors as usize * SECTOR_BYTES;
            let b = st
                .bands
                .entry((stripe, band))
                .or_insert_with(|| Band::live(seq, Vec::new()));
            b.masks = vec![all; self.k];
            b.pp = vec![0; n];
            b.pq = vec![0; if self.np == 2 { n } else { 0 }];
            b.seq = seq;
            b.durable = false;
            b.inflight += 1;
            let entry = Entry {
                seq,
                group: self.group,
                stripe,
                band,
                sectors,
                parity: self.np as u8,
                masks: vec![all; self.k],
                pp: Vec::new(),
                pq: Vec::new(),
            };
            out.push((entry, rings));
        }
        Ok(out)
    }

    /// Writes `entries` (from [`Self::prepare`]) to their rings; the returned hold ends the
    /// bands' writes when dropped (after the member writes, whatever their outcome).
    pub(crate) async fn write(
        &self,
        entries: Vec<(Entry, Vec<usize>)>,
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
            for (entry, rings) in entries {
                st.pending.push(Pending {
                    ticket: t,
                    entry,
                    rings,
                });
            }
            st.notify.insert(t, tx);
            t
        };
        let guard = PendingGuard { log: self, ticket };
        // Whoever holds the writer lock writes a round of everything pending; the others
        // wait for their ticket's end or for the lock, whichever comes first.
        // A dropped sender: the ticket was given up (cannot happen while we wait).
        let gone = Err(LogFailed::NoRoom);
        let ended_as = loop {
            if let Ok(Some(r)) = ended.try_recv() {
                break r;
            }
            let lock = self.writer.lock();
            futures::pin_mut!(lock);
            let _g = match futures::future::select(&mut ended, lock).await {
                Either::Left((r, _)) => break r.unwrap_or(gone),
                Either::Right((g, _)) => g,
            };
            if let Ok(Some(r)) = ended.try_recv() {
                break r;
            }
            if let Some(room) = self.write_round().await {
                // Wait without the writer lock: the write that must end first may need it.
                drop(_g);
                if let Either::Left((r, _)) = futures::future::select(&mut ended, room).await {
                    break r.unwrap_or(gone);
                }
            }
        };
        std::mem::forget(guard);
        ended_as.map(|()| hold)
    }

    /// Writes what is pending (as much as fits half of each ring), one batch per ring.
    /// `Some`: no room until a write in flight ends (wait for it without the writer lock).
    async fn write_round(&self) -> Option<oneshot::Receiver<()>> {
        loop {
            let (taken, plan) = {
                let mut st = self.state.lock();
                self.retire(&mut st);
                let tail = Self::tail(&st);
                // Take whole tickets (one stripe write's entries, which fit half a ring by
                // `min_ring_bytes`) in order while every ring's batch fits half its ring: a
                // write whose entries were split over two batches would hold ring space
                // while waiting for ring space.
                let mut size: HashMap<usize, u64> = HashMap::new();
                let mut n = 0;
                while n < st.pending.len() {
                    let t = st.pending[n].ticket;
                    let end = n + st.pending[n..].iter().take_while(|p| p.ticket == t).count();
                    let mut next = size.clone();
                    for p in &st.pending[n..end] {
                        for &r in &p.rings {
                            *next.entry(r).or_insert(64) += p.entry.encoded_len() as u64;
                        }
                    }
                    let fits = next
                        .iter()
                        .all(|(&r, &len)| len <= st.rings[r].as_ref().expect("ring").len / 2);
                    if !fits && n > 0 {
                        break;
                    }
                    size = next;
                    n = end;
                }
                // Ring places: every ring's batch must fit without touching a live batch.
                let mut places = Vec::new();
                let mut ok = true;
                for (&r, &len) in &size {
                    let len = len.next_multiple_of(LOG_BLOCK_BYTES);
                    let ring = st.rings[r].as_mut().expect("ring");
                    ring.live.retain(|b| b.2 >= tail);
                    let start = if ring.head + len <= ring.len {
                        ring.head
                    } else {
                        0
                    };
                    if ring.live.iter().any(|b| b.0 < start + len && start < b.1) {
                        ok = false;
                        break;
                    }
                    places.push((r, start, len));
                }
                if ok {
                    let mut taken: Vec<Pending> = st.pending.drain(..n).collect();
                    Self::renumber(&mut st, &mut taken);
                    let mut plan = Vec::new();
                    for (r, start, len) in places {
                        let ring = st.rings[r].as_mut().expect("ring");
                        let es: Vec<&Entry> = taken
                            .iter()
                            .filter(|p| p.rings.contains(&r))
                            .map(|p| &p.entry)
                            .collect();
                        let newest = es.iter().map(|e| e.seq).max().unwrap_or(0);
                        ring.head = start + len;
                        ring.live.push_back((start, start + len, newest));
                        let bytes = encode_batch(self.life, tail, &es);
                        debug_assert_eq!(bytes.len() as u64, len);
                        plan.push((r, ring.member, ring.offset + start, bytes, tail));
                    }
                    (taken, Some(plan))
                } else {
                    (Vec::new(), None)
                }
            };
            let Some(plan) = plan else {
                // No room: settle what can be settled (flush the group's members), or wait
                // for a write in flight to end, then try again.
                let waiting = {
                    let mut st = self.state.lock();
                    let settle = st.bands.values().any(|b| b.inflight == 0 && b.durable);
                    let busy = st.bands.values().any(|b| b.inflight > 0 && b.durable);
                    if settle {
                        None
                    } else if busy {
                        let (tx, rx) = oneshot::channel();
                        st.waiters.push(tx);
                        Some(rx)
                    } else {
                        // Nothing to wait for: the pending entries cannot fit (cannot happen
                        // with rings sized by `GroupLog::new`, pending entries pinning no
                        // ring space); fail them rather than hang.
                        tracing::error!(
                            "parity group {}: {} partial-parity log entries fit no ring",
                            self.group,
                            st.pending.len()
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
                        Self::abandon(&mut st, gone);
                        return None;
                    }
                };
                match waiting {
                    None => self.flush_members().await,
                    Some(rx) => return Some(rx),
                }
                continue;
            };
            // A ring more than half full of live batches: flush the group's members beside
            // this batch, so bands written so far settle before the ring runs out (instead of
            // every writer stalling behind a flush then).
            let flush_now = {
                let st = self.state.lock();
                let crowded = st
                    .rings
                    .iter()
                    .flatten()
                    .any(|r| r.live.iter().map(|b| b.1 - b.0).sum::<u64>() > r.len / 2);
                crowded && st.bands.values().any(|b| b.inflight == 0 && b.durable)
            };
            let flush = async {
                if flush_now {
                    self.flush_members().await;
                }
            };
            let writes = join_all(plan.iter().map(|(_, m, at, bytes, _)| {
                let slot = self.table.slot(*m);
                let mut b = Buf::zeroed(bytes.len());
                b.copy_from_slice(bytes);
                let b = b.freeze();
                async move {
                    if slot.is_failed() {
                        return false;
                    }
                    let rep = slot.replacement();
                    let copy = rep.as_ref().map(|r| r.write(*at, b.clone(), true));
                    let r = slot.member().write(*at, b, true).await;
                    if let Some(Err(e)) = match copy {
                        Some(f) => Some(f.await),
                        None => None,
                    } {
                        slot.drop_replacement(&e);
                    }
                    match r {
                        Ok(()) => true,
                        Err(e) => {
                            self.table.fail(*m, &e);
                            false
                        }
                    }
                }
            }));
            let (results, ()) = futures::future::join(writes, flush).await;
            let mut st = self.state.lock();
            let mut ring_ok = HashMap::new();
            for ((r, _, _, _, tail), ok) in plan.iter().zip(results) {
                ring_ok.insert(*r, ok);
                if ok {
                    let ring = st.rings[*r].as_mut().expect("ring");
                    ring.durable_tail = ring.durable_tail.max(*tail);
                }
            }
            let mut tickets: HashMap<u64, bool> = HashMap::new();
            for p in &taken {
                let ok = p.rings.iter().any(|r| ring_ok.get(r) == Some(&true));
                let t = tickets.entry(p.ticket).or_insert(true);
                *t &= ok;
                // Nothing of the band is pending any more (an entry no ring took was not
                // written, and neither are the member writes it was to protect).
                if let Some(b) = st.bands.get_mut(&(p.entry.stripe, p.entry.band)) {
                    if b.seq == p.entry.seq {
                        b.durable = true;
                    }
                }
            }
            for (t, ok) in tickets {
                if let Some(tx) = st.notify.remove(&t) {
                    let _ = tx.send(if ok {
                        Ok(())
                    } else {
                        Err(LogFailed::ParityFailed)
                    });
                }
            }
            for w in st.waiters.drain(..) {
                let _ = w.send(());
            }
            return None;
        }
    }
}

#[cfg(test)]
#[path = "log_tests.rs"]
mod tests;
