//! The stripe writer: how new bytes of one stripe reach the members. Read top to bottom:
//! - [`StripeWriter::write_stripe`] — the rows the stripe's chunks write, as runs split where
//!   they lie far apart ([`row_runs`]: a cache's sparse writes over wide strips are not one
//!   hull of parity rows).
//! - [`StripeWriter::write_run`] — one run, and retries: a read that fails plans again
//!   without its child; read errors that leave no plan are read again (`REREADS`) before the
//!   run's redundancy is given up ([`StripeWriter::salvage`]).
//! - [`StripeWriter::write_rows`] — one attempt, as named stages: 1 plan ([`plan_write`], a
//!   pure function), 2 read what the plan reads, 3 compute the new chunks and the log's
//!   entries from them (`compute_rmw`, `compute_regenerated`, `RowsWrite::data_only`),
//!   asserting the result follows the plan (`RowsWrite::follow_plan`), 4 log (durable before
//!   any member write), 5 member I/O — a plan that regenerates parity issues its data writes
//!   first and generates P (and Q) from the same bytes after them, while the stripe is still
//!   in the CPU cache (`write/regenerated.rs`) — 6 settle what is known of the stripe's
//!   parity.
//!
//! The request-level dispatch in front of it (cache, joiner, members) and whole-stripe
//! zeroing are `ParityCore::write` and `ParityCore::zero_range` in `requests.rs`.

use super::chunks::{ChildRead, ChildWrite, Retry};
use super::plan::{
    add_range, covers, plan_write, row_runs, DataChunk, Health, NewBytes, Ranges, Rows,
    StripeWrite, Target, WritePlan, ROW_GAP_SPLIT_BYTES,
};
use super::*;
use crate::parity;
use crate::ppl::LogFailed;

mod attempts;
mod give_up;
mod regenerated;
mod rows;
use attempts::{Again, Attempts, Exhausted, REREADS};
pub(super) use give_up::refuses_writes;
use give_up::{give_up, may_lose, GiveUp, GivingUp, Refusal};
pub(super) use regenerated::fold_group;
use rows::assemble;
use rows::RowsWrite;

/// Stripe writes carried out as more than one run of rows ([`row_runs`]), process-wide (for
/// tests and benchmarks). Relaxed: a count may lag, never a correctness input.
static SPLIT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// [`SPLIT`]: stripe writes whose rows lay far enough apart to be written as separate runs.
pub fn split_stripe_writes() -> u64 {
    SPLIT.load(std::sync::atomic::Ordering::Relaxed)
}

/// The stripe writer over a group's stripes: carries out [`WritePlan`]s. Borrowed per
/// request ([`Stripes::writer`]).
#[derive(Clone, Copy)]
pub(super) struct StripeWriter<'a> {
    pub(super) stripes: &'a Stripes,
}

/// Stage 3 of a stripe write: the member writes of the new data (and, but for a
/// regenerated plan, parity), the log's entries for them, and a regenerated plan's new rows
/// of every data chunk (its parity is computed from them in stage 5).
struct Computed {
    out: Vec<(Target, SharedBuf)>,
    entries: crate::ppl::Prepared,
    news: Option<Vec<SharedBuf>>,
}

/// How a run of a stripe's rows failed to write.
pub(super) enum RunFailed {
    /// Its bytes went out without parity, the stripe's parity marked stale
    /// ([`StripeWriter::salvage`]): the stripe's later runs are salvaged too.
    Salvaged(VolumeError),
    /// Nothing of it was written: the stripe holds what it held, its parity with it.
    Refused(VolumeError),
}

/// A stripe write that failed ([`StripeWriter::write_stripe`]): its first error, and the
/// row ranges (in-chunk offsets) whose new bytes were salvaged onto the data chunks that
/// take writes. Runs refused wrote nothing: older bytes a cache holds there are still the
/// newest the members do not have, and must stay.
#[derive(Debug)]
pub(super) struct StripeWriteFailed {
    pub(super) error: VolumeError,
    pub(super) salvaged_rows: Vec<(u64, u64)>,
}

impl From<StripeWriteFailed> for VolumeError {
    fn from(f: StripeWriteFailed) -> VolumeError {
        f.error
    }
}

impl StripeWriter<'_> {
    /// Writes new bytes of one stripe to the members (with parity), the caller holding the
    /// stripe's lock: the rows its chunks write, as runs split at wide gaps ([`row_runs`]),
    /// each carried out on its own. A run that fails salvages (the stripe's parity stale) —
    /// or, refused, writes nothing ([`RunFailed`]); the runs after a salvaged one are
    /// salvaged straight away, as one hull's failure would have put
    /// them (plans over stale parity would only fail again, after rereads); the first error
    /// is returned, with the rows salvaged.
    pub(super) async fn write_stripe(
        &self,
        stripe: u64,
        segs: Segs,
        fua: bool,
    ) -> Result<(), StripeWriteFailed> {
        self.stripes.assert_exclusive(stripe, "a write");
        self.stripes.recent.forget(stripe);
        let strip = self.stripes.chunks.strip;
        // Per data chunk: (in-chunk offset, bytes).
        let mut w: Vec<Vec<(u64, SharedBuf)>> =
            (0..self.stripes.chunks.k).map(|_| Vec::new()).collect();
        for (off, data) in segs {
            let mut at = 0u64;
            let len = data.len() as u64;
            while at < len {
                let o = off + at;
                let i = (o / strip) as usize;
                let ic = o % strip;
                let n = (strip - ic).min(len - at);
                w[i].push((ic, data.slice(at as usize..(at + n) as usize)));
                at += n;
            }
        }
        let written = w.iter().flatten().map(|(s, d)| (*s, *s + d.len() as u64));
        let runs = row_runs(written, ROW_GAP_SPLIT_BYTES);
        if runs.len() > 1 {
            SPLIT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        let roles = self.stripes.chunks.layout.roles(stripe);
        let mut first_error = None;
        let mut salvaging = false;
        let mut salvaged_rows = Vec::new();
        let one_run = runs.len() == 1;
        for (r0, r1) in runs {
            let in_run = |c: &Vec<(u64, SharedBuf)>| -> Vec<(u64, SharedBuf)> {
                let piece_in = |(s, d): &&(u64, SharedBuf)| {
                    let inside = (r0..r1).contains(s);
                    debug_assert!(!inside || *s + d.len() as u64 <= r1, "a piece past its run");
                    inside
                };
                c.iter().filter(piece_in).cloned().collect()
            };
            // One run (nearly every write) holds every piece: no copy of the pieces.
            let part: std::borrow::Cow<[Vec<(u64, SharedBuf)>]> = if one_run {
                std::borrow::Cow::Borrowed(&w)
            } else {
                std::borrow::Cow::Owned(w.iter().map(in_run).collect())
            };
            if salvaging {
                self.salvage(stripe, &part, fua).await;
                salvaged_rows.push((r0, r1));
                continue;
            }
            match self.write_run(stripe, &roles, (r0, r1), &part, fua).await {
                Ok(()) => {}
                Err(RunFailed::Salvaged(e)) => {
                    salvaging = true;
                    salvaged_rows.push((r0, r1));
                    first_error.get_or_insert(e);
                }
                Err(RunFailed::Refused(e)) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        match first_error {
            None => Ok(()),
            Some(error) => Err(StripeWriteFailed {
                error,
                salvaged_rows,
            }),
        }
    }

    /// Writes rows `r0..r1` of the stripe (`w`: per data chunk, the new bytes there), and
    /// retries: a read that fails plans again without its child; read errors that leave no
    /// plan are read again ([`REREADS`]) before the stripe's redundancy is given up (its
    /// parity marked stale, the bytes written without it: [`Self::salvage`]) — unless the
    /// children whose reads failed are members the volume cannot do without: then nothing
    /// is written ([`RunFailed::Refused`]). An error is returned only after that.
    async fn write_run(
        &self,
        stripe: u64,
        roles: &StripeRoles,
        (r0, r1): (u64, u64),
        w: &[Vec<(u64, SharedBuf)>],
        fua: bool,
    ) -> Result<(), RunFailed> {
        let mut attempts = Attempts::new(self.stripes.chunks.lost(stripe, r0, r1));
        loop {
            let again = attempts.start();
            let r = self
                .write_rows(stripe, roles, r0, r1, w, &attempts.plan_lost, fua, again)
                .await;
            let Err(failed) = r else { return Ok(()) };
            match attempts.after(failed) {
                Ok(Again::Without(child, e)) => tracing::warn!(
                    "stripe {stripe}: child {child}'s read for a parity update failed: {e}"
                ),
                Ok(Again::ReadAgain) => {}
                Err(exhausted) => {
                    return Err(self
                        .give_up_run(stripe, (r0, r1), w, fua, &attempts, exhausted)
                        .await)
                }
            }
        }
    }

    /// A run whose attempts are over ([`Attempts`]): refused (nothing written) or salvaged.
    /// Salvaging writes data without parity: a chunk lost in this stripe can no longer be
    /// rebuilt. The stale mark says so only until the next start, so where read errors (not
    /// failed members) forced it, those children fail — recorded, the group is beyond its
    /// tolerance on disk too, and nothing rebuilds the stripe from its parity after a crash
    /// (md fails a member whose read error it cannot correct). A stripe beyond its tolerance
    /// through failed members alone (a copy under a mirror: every write) has nothing to
    /// find, and reads nothing.
    async fn give_up_run(
        &self,
        stripe: u64,
        (r0, r1): (u64, u64),
        w: &[Vec<(u64, SharedBuf)>],
        fua: bool,
        attempts: &Attempts,
        exhausted: Exhausted,
    ) -> RunFailed {
        let e = exhausted.error;
        let base = self.stripes.chunks.layout.chunk_offset(stripe);
        let plan_lost = &attempts.plan_lost;
        let failing = if attempts.read_errors_found(exhausted.rebuild_failed) {
            self.still_unreadable(base + r0, r1 - r0, plan_lost, &attempts.unreadable)
                .await
        } else {
            Vec::new()
        };
        let alive: Vec<usize> = (0..plan_lost.len()).filter(|&c| !plan_lost[c]).collect();
        let giving_up = GivingUp {
            read_errors: !failing.is_empty(),
            wrote: exhausted.wrote,
            may_lose_unreadable: may_lose(self.stripes, base + r0, &failing),
            may_lose_alive: may_lose(self.stripes, base + r0, &alive),
        };
        match give_up(giving_up) {
            GiveUp::Refuse(Refusal::Unreadable) => {
                tracing::error!(
                    "stripe {stripe}: a read error, {REREADS} times again, left a write no redundancy, and the volume cannot do without the members that did not read: that write answers an error, nothing of it written ({e})"
                );
                return RunFailed::Refused(e);
            }
            // The volume says it is failed; every such write answers so.
            GiveUp::Refuse(Refusal::PastTolerance) => return RunFailed::Refused(e),
            GiveUp::Salvage => {}
        }
        for c in failing {
            let why = format!(
                "stripe {stripe}: its read error, {REREADS} times again, left a write no redundancy to keep ({e})"
            );
            self.stripes.chunks.children[c].fail_unreadable(base + r0, r1 - r0, &why);
        }
        self.salvage(stripe, w, fua).await;
        RunFailed::Salvaged(e)
    }

    /// The children that cannot be read over `[at, at+len)` now: those in `unreadable`,
    /// and any other not in `lost` whose read there fails (a read error met while
    /// rebuilding a lost chunk does not say whose it was).
    async fn still_unreadable(
        &self,
        at: u64,
        len: u64,
        lost: &[bool],
        unreadable: &[usize],
    ) -> Vec<usize> {
        let probe: Vec<usize> = (0..self.stripes.chunks.children.len())
            .filter(|&c| !lost[c] && !unreadable.contains(&c))
            .collect();
        let reads = join_all(
            probe
                .iter()
                .map(|&c| self.stripes.chunks.children[c].read(at, Buf::new(len as usize))),
        )
        .await;
        let failed = probe.iter().zip(reads).filter(|(_, r)| r.is_err());
        unreadable
            .iter()
            .copied()
            .chain(failed.map(|(&c, _)| c))
            .collect()
    }

    /// After a write failed beyond the stripe's tolerance: put the new bytes on every data
    /// chunk that still takes writes (so a direct read there is never stale) and mark the
    /// stripe's parity stale (so nothing is rebuilt from it).
    pub(super) async fn salvage(&self, stripe: u64, w: &[Vec<(u64, SharedBuf)>], fua: bool) {
        self.stripes
            .debug_assert_exclusive(stripe, "marking its parity stale");
        if self.stripes.health.first_loss() {
            tracing::error!("stripe {stripe}: a write lost more chunks than parity covers");
        }
        self.stripes.health.mark_stale(stripe);
        let roles = self.stripes.chunks.layout.roles(stripe);
        let base = self.stripes.chunks.layout.chunk_offset(stripe);
        let futs = (0..self.stripes.chunks.k).flat_map(|i| {
            let c = roles.data[i];
            w[i].iter()
                .filter(move |(ic, d)| {
                    self.stripes.chunks.children[c].readable(base + ic, d.len() as u64)
                })
                .map(move |(ic, d)| {
                    self.stripes.chunks.children[c].write(base + ic, d.clone(), fua)
                })
        });
        for r in join_all(futs).await {
            if let Err(e) = r {
                tracing::warn!("stripe {stripe}: salvaging a failed write: {e}");
            }
        }
    }

    /// What the planner needs to know about writing `w` over rows `[r0, r1)` of `stripe`:
    /// `failed` marks children that cannot serve the rows ([`Self::lost`], asked once per
    /// attempt), `plan_lost` those too and children that returned read errors during this
    /// write.
    fn stripe_write(
        &self,
        stripe: u64,
        roles: &StripeRoles,
        (r0, r1): (u64, u64),
        w: &[Vec<(u64, SharedBuf)>],
        (failed, plan_lost): (&[bool], &[bool]),
        force_reconstruct: bool,
    ) -> StripeWrite {
        // Children that merely returned a read error still take writes (skipping them would
        // leave stale data under fresh parity): only failed members refuse writes.
        let at = self.stripes.chunks.layout.chunk_offset(stripe) + r0;
        let health = |c: usize| match (failed[c], plan_lost[c]) {
            // A stale child being resynced is not read but takes writes.
            (true, _) if self.stripes.chunks.children[c].writable(at, r1 - r0) => {
                Health::READ_ERROR
            }
            (true, _) => Health::FAILED,
            (false, true) => Health::READ_ERROR,
            (false, false) => Health::OK,
        };
        let data = (0..self.stripes.chunks.k)
            .map(|i| {
                let mut ranges = Ranges::new();
                for (s, d) in &w[i] {
                    add_range(&mut ranges, *s, *s + d.len() as u64);
                }
                let hull = match (ranges.first(), ranges.last()) {
                    (Some(a), Some(b)) => (a.0, b.1),
                    _ => (0, 0),
                };
                DataChunk {
                    new: NewBytes {
                        hull,
                        hull_covered: ranges.len() <= 1,
                        rows_covered: covers(&ranges, r0, r1),
                    },
                    health: health(roles.data[i]),
                }
            })
            .collect();
        StripeWrite {
            rows: (r0, r1),
            data,
            p: health(roles.p),
            q: roles.q.map(health),
            // The log computes a read-modify-write's partial parity from the old P.
            parity_trusted: self.stripes.health.in_sync(stripe)
                && !self.stripes.health.is_stale(stripe)
                && (self.stripes.ppl.is_none() || health(roles.p) == Health::OK),
            force_reconstruct,
        }
    }

    /// Plans and carries out one stripe write (see [`plan_write`]), in named stages: plan,
    /// read what the plan reads, compute the new chunks (and the log entries from them), log,
    /// write the members, settle what is known of the stripe's parity.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn write_rows(
        &self,
        stripe: u64,
        roles: &StripeRoles,
        r0: u64,
        r1: u64,
        w: &[Vec<(u64, SharedBuf)>],
        plan_lost: &[bool],
        fua: bool,
        force_reconstruct: bool,
    ) -> Result<(), Retry> {
        assert!(
            r0 < r1 && r1 <= self.stripes.chunks.strip,
            "rows {r0}..{r1} outside a {}-byte strip",
            self.stripes.chunks.strip
        );
        let rows = RowsWrite {
            stripe,
            roles,
            r0,
            r1,
            w,
            fua,
            base: self.stripes.chunks.layout.chunk_offset(stripe),
        };
        // 1. Plan.
        let failed = self.stripes.chunks.lost(stripe, r0, r1);
        let input = self.stripe_write(
            stripe,
            roles,
            (r0, r1),
            w,
            (&failed, plan_lost),
            force_reconstruct,
        );
        let Some(plan) = plan_write(&input) else {
            // Named with the children whose reads failed: they are why no plan fits.
            let unusable: Vec<bool> = (failed.iter().zip(plan_lost))
                .map(|(&f, &l)| f || l)
                .collect();
            return Err(Retry::Fatal(
                self.stripes.chunks.unavailable(stripe, &unusable, "write"),
            ));
        };
        // 2. Read what the plan reads.
        let old = self.read_planned(&rows, &plan).await?;
        // 3. Compute the new chunks, and the log's entries from them.
        let Computed { out, entries, news } = self.compute(&rows, &input, &plan, old).await?;
        // A regenerated plan's parity writes follow in stage 5.
        let planned = match news {
            Some(_) => data_prefix(&plan.writes),
            None => &plan.writes[..],
        };
        let writes = rows.follow_plan(planned, out);
        // 4. Log: the entries are durable before any member write is issued.
        let _hold = self.log(roles, entries).await?;
        // 5. Member I/O.
        let (now_lost, errors) = self.member_io(&rows, &plan, writes, news, failed).await;
        // 6. Settle.
        self.settle(&rows, &input, &plan, &now_lost, errors)
    }

    /// Stage 5: the member writes (a regenerated plan's parity generated between its data
    /// and parity writes); the children lost now — `failed` and those whose writes failed —
    /// and the writes' errors.
    async fn member_io(
        &self,
        rows: &RowsWrite<'_>,
        plan: &WritePlan,
        writes: Vec<ChildWrite>,
        news: Option<Vec<SharedBuf>>,
        failed: Vec<bool>,
    ) -> (Vec<bool>, Vec<VolumeError>) {
        let (writes, results) = match news {
            Some(news) => {
                regenerated::write_regenerated(&self.stripes.chunks, rows, plan, writes, &news)
                    .await
            }
            None => {
                let results = self.stripes.chunks.write_all(&writes, rows.fua).await;
                (writes, results)
            }
        };
        let mut now_lost = failed;
        let mut errors = Vec::new();
        for (w, r) in writes.iter().zip(results) {
            if let Err(e) = r {
                now_lost[w.child] = true;
                errors.push(e);
            }
        }
        (now_lost, errors)
    }

    /// Stage 2: the old rows the plan reads, by target.
    async fn read_planned(
        &self,
        rows: &RowsWrite<'_>,
        plan: &WritePlan,
    ) -> Result<HashMap<Target, Buf>, Retry> {
        let reads: Vec<ChildRead> = (plan.reads.iter())
            .map(|r| ChildRead {
                child: rows.child(r.target),
                at: rows.base + r.start,
                len: (r.end - r.start) as usize,
            })
            .collect();
        let got = self.stripes.chunks.read_all(&reads).await?;
        Ok(plan.reads.iter().map(|r| r.target).zip(got).collect())
    }

    /// Stage 3: the new chunks the plan writes, and the log's entries from them.
    /// Regenerated parity is computed in stage 5, from the same bytes (`regenerated.rs`).
    async fn compute(
        &self,
        rows: &RowsWrite<'_>,
        input: &StripeWrite,
        plan: &WritePlan,
        old: HashMap<Target, Buf>,
    ) -> Result<Computed, Retry> {
        Ok(match plan.plan {
            Plan::DataOnly => Computed {
                out: rows.data_only(input, plan, &old),
                entries: Vec::new(),
                news: None,
            },
            Plan::Rmw => {
                let (out, entries) = self.compute_rmw(rows, input, plan, old).await;
                Computed {
                    out,
                    entries,
                    news: None,
                }
            }
            Plan::FullRows | Plan::Rcw | Plan::Reconstruct => {
                self.compute_regenerated(rows, input, plan, old).await?
            }
        })
    }

    /// Stage 4: `entries` durable in the log before any member write is issued; the hold
    /// keeps their bands live until the member writes end. A log that no parity member took
    /// (they failed): plan again without P. A log with no room must not leave the stripe
    /// written without its parity while P still serves.
    async fn log(
        &self,
        roles: &StripeRoles,
        entries: crate::ppl::Prepared,
    ) -> Result<Option<crate::ppl::Hold<'_>>, Retry> {
        let Some(log) = &self.stripes.ppl else {
            return Ok(None);
        };
        let hold = log.write(entries).await.map_err(|e| match e {
            LogFailed::ParityFailed => Retry::Read(roles.p, e.into_error()),
            LogFailed::NoRoom | LogFailed::Cancelled => Retry::Fatal(e.into_error()),
        })?;
        Ok(Some(hold))
    }

    /// Stage 3 of a read-modify-write: the parity updated by the difference of each written
    /// chunk, and the log's entries from the new P (and Q) and the new bytes.
    async fn compute_rmw(
        &self,
        rows: &RowsWrite<'_>,
        input: &StripeWrite,
        plan: &WritePlan,
        mut old: HashMap<Target, Buf>,
    ) -> (Vec<(Target, SharedBuf)>, crate::ppl::Prepared) {
        let (r0, n) = (rows.r0, (rows.r1 - rows.r0) as usize);
        let (p_read, q_read) = (old.contains_key(&Target::P), old.contains_key(&Target::Q));
        let mut p = old.remove(&Target::P).unwrap_or_else(|| Buf::zeroed(n));
        let mut q = (self.stripes.chunks.np == 2)
            .then(|| old.remove(&Target::Q).unwrap_or_else(|| Buf::zeroed(n)));
        let mut out: Vec<(Target, SharedBuf)> = Vec::with_capacity(plan.writes.len());
        for r in &plan.writes {
            let Target::Data(i) = r.target else { continue };
            let (h0, h1) = input.data[i].new.hull;
            let before = old.get(&r.target).expect("RMW read the old bytes");
            let new = assemble(h0, h1, &rows.w[i], Some(before));
            let (a, b) = ((h0 - r0) as usize, (h1 - r0) as usize);
            match q.as_mut() {
                Some(q) => parity::pq_update(
                    &mut p[a..b],
                    &mut q[a..b],
                    rows.roles.q_slot[i],
                    before,
                    &new,
                ),
                None => parity::xor_update(&mut p[a..b], before, &new),
            }
            out.push((r.target, new));
        }
        let mut entries = Vec::new();
        if let (Some(log), true) = (&self.stripes.ppl, p_read) {
            let mut news: crate::ppl::PerChunk<Option<(u64, &[u8])>> =
                smallvec::smallvec![None; self.stripes.chunks.k];
            for (t, b) in &out {
                if let Target::Data(i) = *t {
                    news[i] = Some((input.data[i].new.hull.0, &b[..]));
                }
            }
            let values = crate::ppl::Values::Delta {
                chunks: news,
                p: &p,
                q: q.as_deref().filter(|_| q_read),
                r0,
            };
            self.stripes
                .debug_assert_exclusive(rows.stripe, "logging a write");
            entries = log
                .prepare_settled(rows.stripe, rows.roles, &rows.ranges(), &values, rows.fua)
                .await;
        }
        let (mut p, mut q) = (Some(p.freeze()), q.map(Buf::freeze));
        for r in &plan.writes {
            match r.target {
                Target::P => out.push((Target::P, p.take().expect("P written once"))),
                Target::Q => out.push((Target::Q, q.take().expect("Q written once"))),
                Target::Data(_) => {}
            }
        }
        (out, entries)
    }

    /// Stage 3 of a plan that regenerates parity (full rows, reconstruct-write, RCW): the
    /// lost old data rebuilt, the new rows of every data chunk, parity generated from them,
    /// and the log's entries from those rows.
    async fn compute_regenerated(
        &self,
        rows: &RowsWrite<'_>,
        input: &StripeWrite,
        plan: &WritePlan,
        mut old: HashMap<Target, Buf>,
    ) -> Result<Computed, Retry> {
        let (k, r0, r1) = (self.stripes.chunks.k, rows.r0, rows.r1);
        if !plan.rebuild.is_empty() {
            let mut want = vec![false; k];
            plan.rebuild.iter().for_each(|&i| want[i] = true);
            let rebuilt = self
                .stripes
                .reader()
                .read_rows(rows.stripe, r0, r1, &want, (0..k).map(|_| None).collect())
                .await
                .map_err(Retry::Rebuild)?;
            for (i, b) in rebuilt.into_iter().enumerate().filter(|(i, _)| want[*i]) {
                old.insert(Target::Data(i), b);
            }
        }
        let news: Vec<SharedBuf> = (0..k)
            .map(
                |i| match (input.data[i].new.touched(), old.remove(&Target::Data(i))) {
                    (false, Some(o)) => o.freeze(),
                    (_, o) => assemble(r0, r1, &rows.w[i], o.as_deref()),
                },
            )
            .collect();
        let mut entries = Vec::new();
        if let Some(log) = &self.stripes.ppl {
            let values = crate::ppl::Values::Direct {
                chunks: news.iter().map(|b| &b[..]).collect(),
                r0,
            };
            self.stripes
                .debug_assert_exclusive(rows.stripe, "logging a write");
            entries = log
                .prepare_settled(rows.stripe, rows.roles, &rows.ranges(), &values, rows.fua)
                .await;
        }
        // The data writes; the plan lists them before P and Q.
        let out = plan
            .writes
            .iter()
            .map_while(|r| match r.target {
                Target::Data(i) => {
                    let (h0, h1) = input.data[i].new.hull;
                    Some((
                        r.target,
                        news[i].slice((h0 - r0) as usize..(h1 - r0) as usize),
                    ))
                }
                Target::P | Target::Q => None,
            })
            .collect();
        Ok(Computed {
            out,
            entries,
            news: Some(news),
        })
    }

    /// Stage 6: a write that lost more chunks than parity covers fails (the caller salvages);
    /// parity generated from a whole healthy stripe's data makes it consistent and in sync.
    fn settle(
        &self,
        rows: &RowsWrite<'_>,
        input: &StripeWrite,
        plan: &WritePlan,
        now_lost: &[bool],
        errors: Vec<VolumeError>,
    ) -> Result<(), Retry> {
        let stripe = rows.stripe;
        if !self.stripes.chunks.rebuildable(now_lost) {
            return Err(Retry::Lost(
                crate::node::first_error(errors)
                    .unwrap_or_else(|| self.stripes.chunks.unavailable(stripe, now_lost, "write")),
            ));
        }
        let whole = rows.r0 == 0 && rows.r1 == self.stripes.chunks.strip;
        let regenerated = matches!(plan.plan, Plan::FullRows | Plan::Rcw | Plan::Reconstruct);
        if whole && regenerated && errors.is_empty() {
            // Parity was generated from the whole stripe's data: it is consistent again.
            if !input.parity_trusted {
                self.stripes.health.mark_consistent(stripe..stripe + 1);
            }
            if !now_lost.contains(&true) {
                self.stripes.health.mark_in_sync(stripe);
            }
        }
        Ok(())
    }
}

/// The data writes a plan lists before its parity writes.
fn data_prefix(writes: &[Rows]) -> &[Rows] {
    let n = writes
        .iter()
        .take_while(|r| matches!(r.target, Target::Data(_)))
        .count();
    &writes[..n]
}
