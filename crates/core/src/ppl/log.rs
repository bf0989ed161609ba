//! The writer side of one parity group's log: per band, the chunks written since its writes
//! were last known durable and the partial parity of the rest; entries gathered into
//! batches (callers waiting at the same time share one write per ring), written with FUA
//! before the stripe's member writes are issued; rings reused once their entries are settled.

use super::codec::{
    batch_bytes, encode_batch_into, Entry, Part, BATCH_HEADER_BYTES, LOG_BLOCK_BYTES,
};
use super::stats::{self, count};
use super::{PplSetup, BAND_BYTES, SECTOR_BYTES};
use crate::buf::Buf;
use crate::error::VolumeError;
use crate::node::MemberTable;
use crate::num_hash::NumMap;
use futures::channel::oneshot;
use futures::future::{join_all, Either};
use nbraid_layout::StripeRoles;
use parking_lot::Mutex;
use std::sync::Arc;

mod bands;
mod masks;
mod partial;
mod retired;
mod ring;
mod rounds;
mod state;
use bands::{known_bands, Band, Bands, Key};
use masks::{
    bands_masks_into, covered, needs_entry, needs_no_flush, stored_sectors, touched_bands,
};
use partial::partials;
use retired::Retired;
use ring::Ring;
pub(crate) use ring::Rings;
pub(crate) use rounds::LogFailed;
use state::{Pending, State};

/// One item per data chunk of a stripe: inline for groups of up to 8 data chunks (a
/// vector was an allocation a logged write).
pub(crate) type PerChunk<T> = smallvec::SmallVec<[T; 8]>;

/// What a stripe write can tell the log about the bytes it replaces.
pub(crate) enum Values<'a> {
    /// Read-modify-write: per data chunk written, its bytes (from row `start`), and P (and
    /// Q) over rows `[r0, ..)` — all as they were before the write, or all as they are after
    /// it: either way the parity minus the written chunks is the partial parity.
    Delta {
        chunks: PerChunk<Option<(u64, &'a [u8])>>,
        p: &'a [u8],
        q: Option<&'a [u8]>,
        r0: u64,
    },
    /// Every data chunk's new bytes over rows `[r0, ..)` (unwritten bytes as they were).
    Direct { chunks: PerChunk<&'a [u8]>, r0: u64 },
}

/// The entries one stripe write logs, each with the rings it goes to.
pub(crate) type Prepared = Vec<(Entry, Rings)>;

/// Partial-parity buffers a log keeps for reuse (4 KiB each at most: 4 MiB).
const SPARE_PARTS: usize = 1024;

/// Rounds of one group written at once. One: what queues behind a round in flight shares
/// the next (rounds carry tens of entries at depth). Four at once, tried on this project's
/// 2-core test machine (`ppl_cost`, root disk), gained nothing clear and filled the rings
/// faster (rounds in flight hold ring space): kept as a knob for faster devices.
pub(crate) const MAX_ROUNDS_IN_FLIGHT: usize = 1;

/// Why [`GroupLog::prepare`] cannot log a stripe write yet.
pub(crate) enum Blocked {
    /// A band's earlier writes are done but not known durable: flush the group's members.
    Flush,
    /// A band's earlier log entry or member writes are in flight: woken when one ends.
    Wait(oneshot::Receiver<()>),
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
}

/// A stripe write's hold on its logged bands: dropped when its member writes are done.
pub(crate) struct Hold<'a> {
    log: &'a GroupLog,
    /// A few bands a stripe write (one for a 4 KiB write): inline.
    bands: smallvec::SmallVec<[(u64, u32); 4]>,
}

impl Drop for Hold<'_> {
    fn drop(&mut self) {
        if self.bands.is_empty() {
            return;
        }
        let log = self.log;
        let mut st = log.state.lock();
        let settled_before = st.bands.any_settles();
        for &key in &self.bands {
            let ended = st.bands.update(key, |band| {
                band.inflight -= 1;
                // Each member's completed writes now (the band's writes among them).
                band.need.clear();
                let done = log
                    .members
                    .iter()
                    .map(|&m| log.table.slot(m).write_counts().0);
                band.need.extend(done);
            });
            if ended.is_some() {
                State::band_changed(&mut st, key);
            }
        }
        if !settled_before && st.bands.any_settles() {
            State::wake_room(&mut st);
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
                Some(Ring::new(m, offset, len))
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
                bands: Bands::default(),
                retired: Retired::default(),
                seen: (Vec::new(), Vec::new()),
                changed: Vec::new(),
                rings,
                pending: Vec::new(),
                next_ticket: 1,
                notify: NumMap::default(),
                band_waiters: NumMap::default(),
                room_waiters: Vec::new(),
                rounds_in_flight: 0,
                slot_waiters: Vec::new(),
                spare_parts: Vec::new(),
                spare_masks: Vec::new(),
                spare_bands: Vec::new(),
                scratch_masks: Vec::new(),
                spare_prepared: Vec::new(),
                spare_taken: Vec::new(),
                spare_batches: Vec::new(),
                spare_batch_bytes: Vec::new(),
            }),
        })
    }

    /// Per member of the group into `seen`: writes known durable, and whether it failed;
    /// whether either changed since `seen` was last filled.
    fn refresh_seen(&self, (durable, failed): &mut (Vec<u64>, Vec<bool>)) -> bool {
        let n = self.members.len();
        let mut changed = durable.len() != n || failed.len() != n;
        durable.resize(n, 0);
        failed.resize(n, false);
        // Failed flags first, then counts (a member failing in between: counted failed).
        for (i, &m) in self.members.iter().enumerate() {
            let f = self.table.slot(m).is_failed();
            changed |= failed[i] != f;
            failed[i] = f;
        }
        for (i, &m) in self.members.iter().enumerate() {
            let d = self.table.slot(m).write_counts().1;
            changed |= durable[i] != d;
            durable[i] = d;
        }
        changed
    }

    /// Moves bands whose writes are all durable out of the live set. Every live band is
    /// looked at only when a member's durable count or failed state changed since the last
    /// look (hundreds of bands wait for a flush between two; a round calls this each time);
    /// otherwise only the bands whose own state changed since (`State::changed`).
    fn retire(&self, st: &mut State) {
        // The members' counts into `seen` in place (a round calls this each time: three
        // vectors a call otherwise), taken out while the bands are looked at.
        let mut seen = std::mem::take(&mut st.seen);
        let members_changed = self.refresh_seen(&mut seen);
        let (durable, failed) = (&seen.0, &seen.1);
        let ready = |b: &Band| b.inflight == 0 && b.durable && covered(&b.need, durable, failed);
        let mut settled: Vec<(u64, u32)> = if members_changed {
            st.changed.clear();
            // Only a done band may retire: those alone are looked at.
            let done = st.bands.done_keys().copied().collect::<Vec<_>>();
            let all = done
                .into_iter()
                .filter(|k| st.bands.get(k).is_some_and(ready));
            all.collect()
        } else {
            // Drained in place: the vector is kept for the next bands that change.
            let State { changed, bands, .. } = &mut *st;
            let some = changed
                .drain(..)
                .filter(|k| bands.get(k).is_some_and(ready));
            some.collect()
        };
        settled.sort_unstable();
        settled.dedup();
        for key in settled {
            let b = st.bands.remove(&key).expect("listed");
            st.retired.insert(key, b.seq);
            if st.spare_bands.len() < SPARE_PARTS {
                st.spare_bands.push((b.need, b.dirty));
            }
        }
        for (ring, _) in (st.rings.iter_mut().zip(&seen.1)).filter(|(_, &f)| f) {
            if let Some(r) = ring {
                r.lapsed = true;
            }
        }
        st.seen = seen;
        // A lapsed ring's tail is frozen: counting it kept every band retired while its
        // member was failed (memory growing with each band a degraded array wrote).
        let floor = (st.rings.iter().flatten())
            .filter(|r| !r.lapsed)
            .map(|r| r.durable_tail)
            .min();
        st.retired.trim_to(floor);
        if st.retired.over_cap() {
            self.trim_retired(st);
        }
    }

    /// Forgets each retired band whose entry lies below the tails of the rings its stripe's
    /// entries go to (see [`Retired::trim_each`]).
    fn trim_retired(&self, st: &mut State) {
        let tail = |c: usize| {
            let r = st.rings[c].as_ref().filter(|r| !r.lapsed)?;
            Some(r.durable_tail)
        };
        let floors: Vec<Option<u64>> = (0..st.rings.len()).map(tail).collect();
        let floor_of = |stripe: u64| {
            let roles = self.layout.roles(stripe);
            // No ring left that is not lapsed: a lapsed ring back from a failure is logged
            // over before any write could need this band (see `Ring::lapsed`).
            ([Some(roles.p), roles.q].into_iter().flatten())
                .filter_map(|c| floors[c])
                .min()
                .unwrap_or(u64::MAX)
        };
        st.retired.trim_each(floor_of);
    }

    /// Whether a write may be logged over a band left unflushed when `needs_no_flush` says so:
    /// every member of the group current (and the write not FUA, see [`Self::prepare`]). A
    /// chunk known only through the parity (a failed or resyncing member) is left out until
    /// it is argued too. RAID 6 was left out at first for a crash-simulation seed
    /// (1983543693 of `raid6_with_the_log_before_the_region`) that turned out to be the FUA
    /// hole: it passes since FUA writes flush first.
    fn may_skip_flushes(&self) -> bool {
        self.members
            .iter()
            .all(|&m| self.table.slot(m).is_current())
    }

    /// Bands whose newest write was logged without a flush (`needs_no_flush`) pin the ring
    /// space of their older entries until the band settles; once a flush made those older
    /// entries' writes durable, they are not needed (a crash leaves the band as the newest
    /// entry describes it, or its member writes never started), so the band counts for the
    /// tail from its newest entry on — and from none while that one is still pending (not
    /// yet taken by a round, like any band's first entry). Without this the newest entry
    /// could wait forever for ring space its own band's older entries hold.
    fn rebase(&self, st: &mut State) {
        const _: () = assert!(
            MAX_ROUNDS_IN_FLIGHT == 1,
            "rebase infers `written` from `durable`"
        );
        let stale = st.bands.stale_keys();
        if stale.is_empty() {
            return;
        }
        let mut seen = (Vec::new(), Vec::new());
        self.refresh_seen(&mut seen);
        let (durable, failed) = seen;
        for key in stale {
            st.bands.update(key, |b| {
                if b.stale() && covered(&b.need, &durable, &failed) {
                    b.first_seq = b.seq;
                    // Taken by a round: the caller holds the only round slot
                    // (`MAX_ROUNDS_IN_FLIGHT`), so a round took the newest entry only if it
                    // ended, which made the band durable. Not "absent from `pending`": an
                    // entry `prepare` made and its writer has not yet handed to `write` is in
                    // neither, and counted written it held the tail for a band whose entry
                    // still waited for room — busy for `no_room`, so every writer waited for
                    // room that only that entry's own round would free (a deadlock).
                    b.written = b.durable;
                }
            });
        }
    }

    /// Keeps the partial-parity buffers of `entries` (written, or never to be) for reuse.
    fn recycle(st: &mut State, entries: impl IntoIterator<Item = Entry>) {
        for e in entries {
            if st.spare_masks.len() < SPARE_PARTS {
                st.spare_masks.push(e.masks);
            }
            for part in [e.pp, e.pq].into_iter().flatten() {
                if st.spare_parts.len() < SPARE_PARTS {
                    st.spare_parts.push(part);
                }
            }
        }
    }

    /// Flushes the group's members (so the bands written before are settled).
    pub(crate) async fn flush_members(&self) {
        count(&stats::MEMBER_FLUSHES, 1);
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

    /// What writers may be waiting on, in one line: for reports of a hang.
    pub(crate) fn waits(&self) -> String {
        self.state.lock().waits()
    }

    /// The children whose rings take stripe `stripe`'s entries: its P (taking the partial P)
    /// and Q (the partial Q), where their members have not failed.
    ///
    /// One partial per ring is enough for every loss RAID 6 tolerates after a crash, because
    /// an entry's member writes start only once it is durable on every ring it went to (or
    /// that ring's member failed): P lost — the Q ring's partial Q makes Q right; Q lost —
    /// the P ring's P; one data member lost — either partial rebuilds it (an unwritten
    /// chunk exactly); a data member and P (or Q) — the other ring; two data members — both
    /// rings are there and replay uses both partials of the same entry; P and Q — the data
    /// is all there, nothing to rebuild. See docs/FORMAT.md, "Replay".
    fn targets(&self, roles: &StripeRoles) -> Rings {
        [Some((roles.p, Part::P)), roles.q.map(|q| (q, Part::Q))]
            .into_iter()
            .flatten()
            .filter(|&(c, _)| !self.table.slot(self.members[c]).is_failed())
            .collect()
    }

    /// Builds the entries of one stripe write (the caller holds the stripe's exclusive
    /// lock, which the log does not see: asserted by the parity group before it logs): `written[i]` are data chunk `i`'s new byte ranges (rows). Returns the entries
    /// to write (none: nothing needs logging), or why not yet: a band it touches still has
    /// earlier writes that are not durable — [`Blocked::Flush`] when a flush of the group's
    /// members settles them, [`Blocked::Wait`] when their log entry or member writes are
    /// still in flight (then prepare again once woken).
    ///
    /// Why not log the union of both writes instead: an earlier acknowledged write becomes
    /// guaranteed when a flush issued after it completes — possibly after this entry is
    /// written — and then its chunk must be rebuilt exactly if its member is lost, which an
    /// entry that calls it "being written" cannot do.
    ///
    /// `fua`: the write's member writes are FUA, durable when done while the earlier writes
    /// may not be; such a write never skips the flush (`needs_no_flush` assumes a write is
    /// only ever guaranteed by a flush, which covers the earlier writes too).
    pub(crate) fn prepare(
        &self,
        stripe: u64,
        roles: &StripeRoles,
        written: &[impl AsRef<[(u64, u64)]>],
        values: &Values<'_>,
        fua: bool,
    ) -> Result<Vec<(Entry, Rings)>, Blocked> {
        // The caller's roles (the write path has them: two vectors a write otherwise).
        debug_assert_eq!(*roles, self.layout.roles(stripe), "stripe {stripe}'s roles");
        let rings = self.targets(roles);
        let mut st = self.state.lock();
        let touched = match touched_bands(written) {
            Some(touched) if !rings.is_empty() => touched,
            _ => return Ok(Vec::new()),
        };
        let (first, k) = (touched.start, written.len());
        let mut all = std::mem::take(&mut st.scratch_masks);
        let bands = touched.clone().count();
        bands_masks_into(written, (first, bands), self.strip, &mut all);
        // Per data chunk, the sectors of band `band` this write writes.
        let masks = |band: u64| &all[(band - first) as usize * k..][..k];
        if let Some(why) = self.blocked(&mut st, stripe, touched.clone(), masks, fua) {
            st.scratch_masks = all;
            return Err(why);
        }
        // Checked above: a band still live here has its earlier writes done and this
        // write's entry describes every sector they left in flux (`needs_no_flush`).
        let (floor, lapsed) = st.replay_bounds(&rings);
        // The vector of an earlier write's entries, emptied (`write`).
        let mut out = std::mem::take(&mut st.spare_prepared);
        debug_assert!(out.is_empty(), "a spare vector is kept empty");
        for band in touched {
            let key = (stripe, band as u32);
            let live = st.bands.contains_key(&key);
            let Some(stored) = stored_sectors(masks(band)) else {
                debug_assert!(!live, "a live band this write does not write blocks it");
                continue;
            };
            // A ring back from a failure may replay entries older than `retired` knows:
            // until a batch lands on it, every band is logged (its batch's tail masks them).
            let replayable = lapsed || st.retired.replayable(&key, floor);
            if !needs_entry(stored, live, replayable) {
                continue;
            }
            let entry = self.band_entry(&mut st, key, masks(band), stored, (roles, values));
            st.band_logged(&entry, (self.members.len(), self.k));
            out.push((entry, rings));
        }
        st.scratch_masks = all;
        Ok(out)
    }

    /// Band `key`'s entry for a write of sectors `now[i]` of data chunk `i`: the partial
    /// parity of sectors `stored` from the write's `values`, on vectors kept from entries
    /// written before.
    fn band_entry(
        &self,
        st: &mut State,
        key: Key,
        now: &[u8],
        stored: u8,
        (roles, values): (&StripeRoles, &Values<'_>),
    ) -> Entry {
        let mut masks = st.spare_masks.pop().unwrap_or_default();
        masks.clear();
        masks.extend_from_slice(now);
        let mut spare = || st.spare_parts.pop().unwrap_or_default();
        let bufs = (spare(), (self.np == 2).then(&mut spare));
        let b0 = u64::from(key.1) * BAND_BYTES;
        let parts = partials(&roles.q_slot, b0, stored, &masks, values, bufs);
        self.next_entry(st, key, self.band_sectors(key.1), masks, parts)
    }

    /// The sectors of band `band` of a strip: 8, fewer at the end of a strip that is not a
    /// multiple of 4 KiB.
    fn band_sectors(&self, band: u32) -> u8 {
        let b0 = u64::from(band) * BAND_BYTES;
        ((self.strip.min(b0 + BAND_BYTES) - b0) / SECTOR_BYTES as u64) as u8
    }

    /// Why a write over bands `touched` of `stripe` (sectors `masks(band)`) cannot be logged
    /// yet: a band it touches is live with earlier writes not durable ([`Self::prepare`]).
    fn blocked<'m>(
        &self,
        st: &mut State,
        stripe: u64,
        touched: std::ops::Range<u64>,
        masks: impl Fn(u64) -> &'m [u8],
        fua: bool,
    ) -> Option<Blocked> {
        if !(touched.clone()).any(|b| st.bands.contains_key(&(stripe, b as u32))) {
            return None;
        }
        self.retire(st);
        let (mut flush, mut wait) = (false, None);
        for band in touched {
            let Some(b) = st.bands.get(&(stripe, band as u32)) else {
                continue;
            };
            if b.inflight > 0 || !b.durable {
                wait = wait.or(Some((stripe, band as u32)));
            } else if fua
                || !self.may_skip_flushes()
                || !needs_no_flush(&b.dirty, masks(band), b.writes == 1)
            {
                flush = true;
            }
        }
        if flush {
            return Some(Blocked::Flush);
        }
        if let Some(key) = wait {
            count(&stats::BAND_WAITS, 1);
            return Some(Blocked::Wait(st.wait_for_band(key)));
        }
        count(&stats::BAND_REWRITES, 1);
        None
    }

    /// [`Self::prepare`], flushing the group's members first when a band it touches has
    /// earlier writes that are not durable yet, or waiting for those writes to end.
    pub(crate) async fn prepare_settled(
        &self,
        stripe: u64,
        roles: &StripeRoles,
        written: &[impl AsRef<[(u64, u64)]>],
        values: &Values<'_>,
        fua: bool,
    ) -> Vec<(Entry, Rings)> {
        loop {
            match self.prepare(stripe, roles, written, values, fua) {
                Ok(e) => return e,
                Err(Blocked::Flush) => {
                    count(&stats::BAND_FLUSHES, 1);
                    self.flush_members().await
                }
                Err(Blocked::Wait(rx)) => {
                    let _ = rx.await;
                }
            }
        }
    }

    /// [`Self::prepare_whole`], flushing or waiting first like [`Self::prepare_settled`].
    async fn prepare_whole_settled(&self, first: u64, end: u64) -> (Vec<(Entry, Rings)>, u64) {
        loop {
            match self.prepare_whole(first, end) {
                Ok(e) => return e,
                Err(Blocked::Flush) => {
                    count(&stats::BAND_FLUSHES, 1);
                    self.flush_members().await
                }
                Err(Blocked::Wait(rx)) => {
                    let _ = rx.await;
                }
            }
        }
    }

    /// Settles what the rings may still replay over the first stripes of `[first, end)`,
    /// which the caller replaces whole under their exclusive locks
    /// ([`Self::prepare_whole_settled`]): as many stripes as one round takes (their entries
    /// fit half of each ring), written as one ticket and held until the caller's member
    /// writes of those stripes end. The caller writes them, drops the hold, and settles the
    /// rest from [`Settled::end`] on. Nearly always there is nothing to settle and the
    /// prefix is the whole run.
    ///
    /// Why a prefix and one ticket: the entries of stripes whose member writes have not
    /// ended pin the log's tail, so every batch written after them stays live. Settling a
    /// long run one ticket a stripe — each its own round once the first is written —
    /// filled the ring with the run's own batches and then waited for room only the run's
    /// end would free: the writer hung, and every writer of the group behind it.
    pub(crate) async fn settle_whole(&self, first: u64, end: u64) -> Settled<'_> {
        let (entries, upto) = self.prepare_whole_settled(first, end).await;
        // Callers loop until `end`: a piece of no stripe would loop forever.
        assert!(
            (first < upto || first == end) && upto <= end,
            "a settled piece of at least one stripe ({first}..{upto} of ..{end})"
        );
        Settled {
            hold: self.write(entries).await,
            end: upto,
        }
    }

    /// Entries that settle every band of the first stripes of `[first, end)` a ring may
    /// still replay (every chunk written, no partial parity), and where those stripes end:
    /// as many as fit half of each ring they go to, one round's worth ([`Self::settle_whole`];
    /// at least one stripe, whose entries always fit by `min_ring_bytes`). For writes that
    /// replace whole stripes without going through [`Self::prepare`] (zeroing; the caller
    /// holds the stripes' exclusive locks, asserted by the parity group). Like
    /// [`Self::prepare`], a band still live blocks it: its new entry must not wait for ring
    /// space its own older entries hold.
    fn prepare_whole(&self, first: u64, end: u64) -> Result<(Vec<(Entry, Rings)>, u64), Blocked> {
        let mut st = self.state.lock();
        let per_stripe = self.strip.div_ceil(BAND_BYTES);
        let live = |st: &State| {
            known_bands(&st.bands, st.retired.seqs(), first..end, per_stripe)
                .into_iter()
                .filter_map(|k| st.bands.get(&k).map(|b| (k, b.done())))
                .collect::<Vec<(Key, bool)>>()
        };
        if !live(&st).is_empty() {
            self.retire(&mut st);
            let blocking = live(&st);
            if blocking.iter().any(|&(_, done)| done) {
                return Err(Blocked::Flush);
            }
            if let Some(&(key, _)) = blocking.first() {
                return Err(Blocked::Wait(st.wait_for_band(key)));
            }
        }
        let mut keys = known_bands(&st.bands, st.retired.seqs(), first..end, per_stripe);
        keys.extend(self.lapsed_keys(&st, first..end));
        keys.sort_unstable();
        keys.dedup();
        // Per ring, the bytes of entries it takes so far against half the ring (less the
        // batch header): a round takes a ticket whole only within that.
        let mut room: Vec<Option<u64>> = (st.rings.iter())
            .map(|r| r.as_ref().map(|r| r.len / 2 - BATCH_HEADER_BYTES as u64))
            .collect();
        let mut out = Vec::new();
        let mut at = 0;
        while at < keys.len() {
            let stripe = keys[at].0;
            let ends = at + keys[at..].iter().take_while(|k| k.0 == stripe).count();
            let rings = self.targets(&self.layout.roles(stripe));
            let bytes = ((ends - at) * Entry::whole_encoded_len(self.k)) as u64;
            let fits = rings
                .iter()
                .all(|&(r, _)| room[r].is_some_and(|left| bytes <= left));
            if !fits && !out.is_empty() {
                return Ok((out, stripe));
            }
            for &(r, _) in &rings {
                let left = room[r].as_mut().expect("a ring on every target");
                *left = left.saturating_sub(bytes);
            }
            for (entry, rings) in self.whole_entries(&mut st, &keys[at..ends], rings) {
                debug_assert_eq!(entry.encoded_len(), Entry::whole_encoded_len(self.k));
                self.mark_whole(&mut st, &entry);
                out.push((entry, rings));
            }
            at = ends;
        }
        Ok((out, end))
    }

    /// Per lapsed ring whose member is back ([`ring::Ring::lapsed`]), band 0 of the first
    /// stripe of `stripes` it takes: a run of whole stripes logs it, so the ring gets a
    /// batch that masks its older entries before the run's member writes go out.
    fn lapsed_keys(&self, st: &State, stripes: std::ops::Range<u64>) -> Vec<Key> {
        let back = |c: usize| {
            st.rings[c].as_ref().is_some_and(|r| r.lapsed)
                && !self.table.slot(self.members[c]).is_failed()
        };
        let mut left: Vec<usize> = (0..st.rings.len()).filter(|&c| back(c)).collect();
        let mut keys = Vec::new();
        // Every layout rotates parity: each ring takes one stripe of any `members` in a row.
        for stripe in stripes.take(self.members.len()) {
            if left.is_empty() {
                break;
            }
            let rings = self.targets(&self.layout.roles(stripe));
            let before = left.len();
            left.retain(|&c| !rings.iter().any(|&(r, _)| r == c));
            if left.len() < before {
                keys.push((stripe, 0));
            }
        }
        keys
    }

    /// The entries that settle bands `keys` (all of one stripe) on `rings`: none when the
    /// stripe has no ring left.
    fn whole_entries(&self, st: &mut State, keys: &[Key], rings: Rings) -> Vec<(Entry, Rings)> {
        if rings.is_empty() {
            return Vec::new();
        }
        keys.iter()
            .map(|&(stripe, band)| {
                let sectors = self.band_sectors(band);
                let all = ((1u16 << sectors) - 1) as u8;
                let masks = vec![all; self.k];
                let parts = (Vec::new(), (self.np == 2).then(Vec::new));
                let entry = self.next_entry(st, (stripe, band), sectors, masks, parts);
                (entry, rings)
            })
            .collect()
    }

    /// An entry of this group for band `(stripe, band)` under the next sequence number
    /// (renumbered when a round takes it), with its masks and partial P (and Q).
    fn next_entry(
        &self,
        st: &mut State,
        (stripe, band): Key,
        sectors: u8,
        masks: Vec<u8>,
        (pp, pq): (Vec<u8>, Option<Vec<u8>>),
    ) -> Entry {
        let seq = st.next_seq;
        st.next_seq += 1;
        Entry {
            seq,
            group: self.group,
            stripe,
            band,
            sectors,
            parity: self.np as u8,
            masks,
            pp: Some(pp),
            pq,
        }
    }

    /// Band `entry` names is being written whole: live again, its writes in flight.
    fn mark_whole(&self, st: &mut State, entry: &Entry) {
        let (k, seq, all) = (self.k, entry.seq, entry.masks[0]);
        st.bands.upsert(
            (entry.stripe, entry.band),
            || Band::live(seq, Vec::new(), k),
            |b| {
                b.dirty.fill(all);
                b.writes += 1;
                b.seq = seq;
                b.durable = false;
                b.inflight += 1;
            },
        );
    }
}

/// What [`GroupLog::settle_whole`] settled: the stripes up to `end`, and the hold on their
/// bands (ended when dropped, after the caller's member writes of those stripes) — or why
/// the piece's entries were not all logged (its end is known either way: the stripes past
/// it are still to settle).
pub(crate) struct Settled<'a> {
    pub(crate) hold: Result<Hold<'a>, LogFailed>,
    pub(crate) end: u64,
}

#[cfg(test)]
#[path = "log_tests.rs"]
mod tests;
