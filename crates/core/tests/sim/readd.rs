//! The re-add of a member that comes back (`Array::readd`, md's re-add with a bitmap) in the
//! crash simulator. An array is created over simulated disks and serves a seeded mix of
//! requests; one member goes away (a remote server gone: every operation fails at once, its
//! disk keeps its bytes), writes go on degraded, then it answers again and is re-added and
//! resynced while requests go on. Some schedules kill another member during the resync
//! (within tolerance), some take the returning one away again, some lose power at a random
//! point (before the re-add, during the resync, after it): the disks' crash images are
//! assembled again, the member is re-added again if it is not current, and the resync runs
//! to the end.
//!
//! Checked: no data is read from the returning member while it is not current (its stale
//! bytes would be served); every read returns what the history allows; every write
//! acknowledged before a completed flush reads back after the power loss and after the
//! resync; the returning member ends current; copies and parity agree (every view losing up
//! to two more members reads the same bytes).

use super::array::{self, disk_of, lost_roles, read_volume, reopen_wrapped, sim_members};
use super::checks::{
    being_written, check_durable, in_write_hole, redundancy_agrees, unreadable, write_hole_exposure,
};
use super::clients::{start_request, Load, Pace, Shared};
use super::crash::{array_options, CrashCase, CrashStats};
use super::executor::{drive, step_once, Executor};
use super::history::History;
use futures::future::BoxFuture;
use futures::FutureExt;
use nbraid_core::metadata::{Array, Readd, METADATA_AREA_BYTES};
use nbraid_core::{
    Buf, Member, MemberCounters, MemberError, MemberOp, MemberResult, PassControl, PassState,
    SharedBuf,
};
use nbraid_layout::Geometry;
use nbraid_sim::scheduled::{DiskFaults, World, SECTOR_BYTES};
use nbraid_sim::Rng;
use std::cell::RefCell;
use std::collections::HashSet;
use std::io;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex, Weak};

const SECTOR: u64 = SECTOR_BYTES as u64;
const STEP_LIMIT: u64 = 400_000;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReaddStats {
    pub runs: u64,
    pub requests: u64,
    /// Re-adds that resynced over the bitmap (before or after a power loss), and the bytes.
    pub resyncs: u64,
    pub resync_bytes: u64,
    /// Re-adds whose member ended current.
    pub rejoined: u64,
    /// Another member died during the resync; the returning one went away again.
    pub deaths_during_resync: u64,
    pub went_away_again: u64,
    /// Re-adds that ended with the member failed again (a late error of a request sent
    /// while it was away); it is re-added after the restart.
    pub failed_again: u64,
    /// Power lost before the member was current again, and after.
    pub crashes_before_current: u64,
    pub crashes_after_current: u64,
    /// Reads of the returning member's data while it was current (the only ones allowed).
    pub member_reads: u64,
    pub sectors_checked: u64,
    /// Sectors of a stripe torn at the crash and rebuilt from parity, being written: old
    /// or new both allowed (the crash check's rule), not checked.
    pub sectors_write_hole: u64,
    /// Such sectors not being written: checked like every other.
    pub sectors_write_hole_checked: u64,
    pub redundancy_views: u64,
}

impl ReaddStats {
    pub fn add(&mut self, o: &ReaddStats) {
        self.runs += o.runs;
        self.requests += o.requests;
        self.resyncs += o.resyncs;
        self.resync_bytes += o.resync_bytes;
        self.rejoined += o.rejoined;
        self.deaths_during_resync += o.deaths_during_resync;
        self.went_away_again += o.went_away_again;
        self.failed_again += o.failed_again;
        self.crashes_before_current += o.crashes_before_current;
        self.crashes_after_current += o.crashes_after_current;
        self.member_reads += o.member_reads;
        self.sectors_checked += o.sectors_checked;
        self.sectors_write_hole += o.sectors_write_hole;
        self.sectors_write_hole_checked += o.sectors_write_hole_checked;
        self.redundancy_views += o.redundancy_views;
    }
}

/// The returning member: its server can go away (every operation fails at once; the disk
/// keeps its bytes) and come back; reads of its data while its role is not current are
/// counted as violations.
struct Returning {
    inner: Arc<dyn Member>,
    away: AtomicBool,
    role: usize,
    array: Mutex<Weak<Array>>,
    stale_reads: AtomicU64,
    reads: AtomicU64,
}

impl Returning {
    fn new(inner: Arc<dyn Member>, role: usize) -> Arc<Returning> {
        Arc::new(Returning {
            inner,
            away: AtomicBool::new(false),
            role,
            array: Mutex::new(Weak::new()),
            stale_reads: AtomicU64::new(0),
            reads: AtomicU64::new(0),
        })
    }

    fn watch(&self, a: &Arc<Array>) {
        *self.array.lock().expect("watch") = Arc::downgrade(a);
    }

    fn gone<T: Send + 'static>(
        &self,
        op: MemberOp,
        offset: u64,
        len: u64,
    ) -> Option<BoxFuture<'static, MemberResult<T>>> {
        if !self.away.load(SeqCst) {
            return None;
        }
        let e = io::Error::new(io::ErrorKind::ConnectionRefused, "sim: server gone");
        let e = MemberError::new(self.inner.name(), op, offset, len, e);
        Some(futures::future::ready(Err(e)).boxed())
    }
}

impl Member for Returning {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn read(&self, offset: u64, buf: Buf) -> BoxFuture<'_, MemberResult<Buf>> {
        if let Some(f) = self.gone(MemberOp::Read, offset, buf.len() as u64) {
            return f;
        }
        if offset >= METADATA_AREA_BYTES {
            let a = self.array.lock().expect("watch").upgrade();
            match a {
                Some(a) if !a.volume().member_is_current(self.role) => {
                    self.stale_reads.fetch_add(1, SeqCst);
                }
                _ => {
                    self.reads.fetch_add(1, SeqCst);
                }
            }
        }
        self.inner.read(offset, buf)
    }
    fn write(&self, offset: u64, data: SharedBuf, fua: bool) -> BoxFuture<'_, MemberResult<()>> {
        if let Some(f) = self.gone(MemberOp::Write, offset, data.len() as u64) {
            return f;
        }
        self.inner.write(offset, data, fua)
    }
    fn flush(&self) -> BoxFuture<'_, MemberResult<()>> {
        self.gone(MemberOp::Flush, 0, 0)
            .unwrap_or_else(|| self.inner.flush())
    }
    fn trim(&self, offset: u64, len: u64) -> BoxFuture<'_, MemberResult<()>> {
        self.gone(MemberOp::Trim, offset, len)
            .unwrap_or_else(|| self.inner.trim(offset, len))
    }
    fn write_zeroes(&self, offset: u64, len: u64) -> BoxFuture<'_, MemberResult<()>> {
        self.gone(MemberOp::WriteZeroes, offset, len)
            .unwrap_or_else(|| self.inner.write_zeroes(offset, len))
    }
    fn counters(&self) -> &MemberCounters {
        self.inner.counters()
    }
}

/// Re-adds `role` (failing it first if no request noticed it go) and resyncs it; what the
/// re-add said and how the pass ended.
async fn readd(a: &Array, role: usize) -> Result<(Readd, Option<PassState>), String> {
    if !a.volume().member_is_failed(role) {
        a.volume().fail_member(role, "sim: its server went away");
    }
    let r = a.readd(role).await.map_err(|e| format!("re-add: {e}"))?;
    if !matches!(r, Readd::Resync { .. }) {
        return Ok((r, None));
    }
    let s = a
        .resync_returned(&PassControl::new(0))
        .await
        .map_err(|e| format!("resync of the returning member: {e}"))?;
    Ok((r, Some(s)))
}

/// One schedule (see the module).
pub fn run_readd(case: &CrashCase, seed: u64) -> Result<ReaddStats, String> {
    let mut rng = Rng::for_schedule(seed);
    let n = case.members;
    let g = Geometry::from_tree(case.tree.clone());
    let mut stats = ReaddStats {
        runs: 1,
        ..ReaddStats::default()
    };
    let width = g.full_stripe_width().unwrap_or(16 * 1024);
    let opts = array_options(&mut rng, case, width);
    let role = loop {
        let r = rng.below(n as u64) as usize;
        if g.survives(&[r]) {
            break r;
        }
    };
    let world = World::new(
        vec![vec![0u8; case.member_len as usize]; n],
        vec![DiskFaults::default(); n],
    );
    let mut members = sim_members(&world, n, case.member_len);
    let back = Returning::new(members[role].clone(), role);
    members[role] = back.clone();
    let array = array::create(&world, &mut rng, case, &opts, members)?;
    back.watch(&array);
    let capacity = array.volume().capacity();

    // When it goes, when it answers again, what else happens.
    let steps = 300 + rng.below(900);
    let leave_at = rng.below(steps / 3);
    let return_at = leave_at + 1 + rng.below(steps / 3);
    let other = (0..n).find(|&m| m != role && g.survives(&[role, m]));
    if let Some(m) = other.filter(|_| rng.chance(250)) {
        world.lock().expect("world").disks[m].faults = DiskFaults {
            dies_at_step: Some(return_at + rng.below(80)),
            ..DiskFaults::default()
        };
        stats.deaths_during_resync += 1;
    }
    let again_at = rng.chance(150).then(|| return_at + rng.below(80));
    stats.went_away_again += u64::from(again_at.is_some());
    let crash_at = rng
        .chance(500)
        .then(|| return_at + rng.below(steps + 200 - return_at));

    if std::env::var_os("NBRAID_SIM_TRACE").is_some() {
        eprintln!("role {role} steps {steps} leave {leave_at} return {return_at} again {again_at:?} crash {crash_at:?} other {other:?} faults {:?}", world.lock().expect("w").disks.iter().map(|d| d.faults.dies_at_step).collect::<Vec<_>>());
    }
    let shared = Rc::new(Shared {
        history: RefCell::new(History::new(capacity)),
        ..Shared::default()
    });
    // Writes dominate: they are what the member misses.
    let mix = [200, 500, 60, 100, 70, 70];
    let load = Load::draw(&mut rng, capacity, width, mix, case.sequential);
    let pace = Pace::draw(&mut rng);
    let outcome = Rc::new(RefCell::new(None));
    let mut exec = Executor::default();
    let mut step = 0u64;
    loop {
        let spawning = step < steps;
        if Some(step) == crash_at || (!spawning && exec.live() == 0) {
            break;
        }
        world.lock().expect("world").step = step;
        if step == leave_at {
            back.away.store(true, SeqCst);
        }
        if Some(step) == again_at {
            back.away.store(true, SeqCst);
        }
        if step == return_at {
            back.away.store(false, SeqCst);
            let (a, out) = (array.clone(), outcome.clone());
            exec.spawn(async move {
                *out.borrow_mut() = Some(readd(&a, role).await);
            });
        }
        if spawning && pace.starts(&mut rng, exec.live()) {
            start_request(&mut exec, &mut rng, &array, &shared, &load);
            stats.requests += 1;
        }
        if !step_once(&mut exec, &world, &mut rng) && exec.live() > 0 {
            return Err(format!("deadlock at step {step}"));
        }
        if let Some(v) = shared.violations.borrow().first() {
            return Err(v.clone());
        }
        if back.stale_reads.load(SeqCst) > 0 {
            return Err(format!(
                "data read from the returning member {role} before it was current (step {step})"
            ));
        }
        step += 1;
        if step > steps + STEP_LIMIT {
            return Err("starvation".into());
        }
    }
    stats.member_reads += back.reads.swap(0, SeqCst);
    let finished = outcome.borrow_mut().take();
    if let Some(r) = &finished {
        let (r, state) = r.clone().map_err(|e| format!("{e} (within tolerance)"))?;
        if let Readd::Resync { bytes } = r {
            stats.resyncs += 1;
            stats.resync_bytes += bytes;
        } else if again_at.is_none() {
            return Err(format!("the returning member was not resynced: {r:?}"));
        }
        if state.is_some_and(|s| s != PassState::Done) {
            return Err(format!("the resync stopped: {state:?}"));
        }
    }
    let current = array.volume().member_is_current(role);
    if std::env::var_os("NBRAID_SIM_TRACE").is_some() {
        eprintln!(
            "ended at step {step}: outcome {finished:?} current {current} failed {:?} history {}",
            (0..n)
                .map(|r| array.volume().member_is_failed(r))
                .collect::<Vec<_>>(),
            shared.history.borrow().ops.len()
        );
    }
    // A finished resync leaves it current, or failed again (an error of a request sent
    // before it came back may land after the re-add): never written and unread.
    if crash_at.is_none() && finished.is_some() && !current {
        if !array.volume().member_is_failed(role) {
            return Err(
                "the returning member is neither current nor failed after its resync".into(),
            );
        }
        stats.failed_again += 1;
    }
    let history = shared.history.borrow();

    // Power lost (at `crash_at`, or once everything is done): the disks' crash images
    // assembled again.
    stats.crashes_before_current += u64::from(!current);
    stats.crashes_after_current += u64::from(current);
    drop(exec);
    drop(array);
    back.away.store(false, SeqCst);
    let again = Rc::new(RefCell::new(None::<Arc<Returning>>));
    let wrap = {
        let again = again.clone();
        move |i: usize, m: Arc<dyn Member>| -> Arc<dyn Member> {
            if i != role {
                return m;
            }
            let r = Returning::new(m, role);
            *again.borrow_mut() = Some(r.clone());
            r
        }
    };
    let (world, array, report) =
        reopen_wrapped(&world, &mut rng, case, n, &opts, false, "the re-add", &wrap)?;
    let back = again.borrow_mut().take().expect("wrapped");
    back.watch(&array);
    // Every flushed write reads back, but where a torn stripe rebuilt from parity was being
    // written (the crash check's rule for lost roles).
    let not_current: Vec<usize> = (0..n)
        .filter(|&r| !array.volume().member_is_current(r))
        .collect();
    let rebuilt: Vec<usize> = not_current
        .iter()
        .chain(&report.resynced_roles)
        .copied()
        .collect();
    let exposed = write_hole_exposure(&g, &history, &rebuilt);
    let busy = being_written(&history);
    let image = read_volume(&world, &mut rng, &array)?;
    let mut excused = HashSet::new();
    for (s, sector) in image.chunks(SECTOR_BYTES).enumerate() {
        let s = s as u64;
        let hole = exposed
            .as_ref()
            .is_some_and(|e| in_write_hole(&g, e, &rebuilt, s));
        // Where a torn stripe is rebuilt from parity (a role absent at the reopen), a sector
        // being written may read old or new (md's PPL promise); every other one is checked —
        // including those of a stripe the re-add's resync was rewriting at the crash.
        if hole && busy.contains(&s) {
            stats.sectors_write_hole += 1;
            excused.insert(s);
            continue;
        }
        stats.sectors_write_hole_checked += u64::from(hole);
        history.check_durable(s, sector).map_err(|e| {
            format!(
                "{e} (reopened: {report:?}) map {:?}",
                g.map(s * SECTOR, SECTOR)
            )
        })?;
        stats.sectors_checked += 1;
    }
    // Sectors that did not read back before the re-add need not after it.
    excused.extend(unreadable(&world, &mut rng, &array, &history)?);

    // Not current after the reopen: re-added again, and resynced to the end.
    if !array.volume().member_is_current(role) {
        let a = array.clone();
        let (r, state) = drive(&world, &mut rng, async move { readd(&a, role).await })??;
        match (r, state) {
            (Readd::Resync { bytes }, Some(PassState::Done)) => {
                stats.resyncs += 1;
                stats.resync_bytes += bytes;
            }
            other => return Err(format!("re-add after the reopen: {other:?} ({report:?})")),
        }
        if !array.volume().member_is_current(role) {
            return Err(format!(
                "the returning member is not current after the re-add following the reopen ({report:?})"
            ));
        }
    }
    stats.rejoined += 1;
    let mut checked = CrashStats::default();
    let when = "after the re-add";
    check_durable(
        &world,
        &mut rng,
        &array,
        &history,
        &mut checked,
        &excused,
        when,
    )?;
    stats.sectors_checked += checked.sectors_checked;
    if back.stale_reads.load(SeqCst) > 0 {
        return Err(
            "data read from the returning member before it was current, after the reopen".into(),
        );
    }
    stats.member_reads += back.reads.load(SeqCst);
    let lost = lost_roles(&world, &array);
    let role_disks: Vec<usize> = (0..n).map(|r| disk_of(&array, r)).collect();
    drop(array);
    let what = format!("re-add of role {role}, reopened {report:?}");
    stats.redundancy_views +=
        redundancy_agrees(&world, &mut rng, case, &role_disks, &lost, &history, &what)?;
    Ok(stats)
}
