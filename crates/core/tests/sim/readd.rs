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

use super::array::{
    self, disk_of, lost_roles, not_current, read_volume, reopen_wrapped, sim_members, Powered,
    Setup,
};
use super::case::{array_options, CrashCase, CrashStats};
use super::checks::{check_durable, check_read_back, redundancy_agrees, unreadable};
use super::clients::{Clients, Load, Pace, Shared};
use super::executor::{drive, STEP_LIMIT};
use futures::future::BoxFuture;
use futures::FutureExt;
use nbraid_core::metadata::{Array, OpenReport, Readd, METADATA_AREA_BYTES};
use nbraid_core::{
    Buf, Member, MemberCounters, MemberError, MemberOp, MemberResult, PassControl, PassState,
    SharedBuf,
};
use nbraid_layout::Geometry;
use nbraid_sim::scheduled::{DiskFaults, World};
use nbraid_sim::Rng;
use std::cell::RefCell;
use std::collections::HashSet;
use std::io;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex, Weak};

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
    let (mut s, powered) = Schedule::create(case, seed)?;
    let (plan, mut clients) = s.draw_plan(&powered);
    let (outcome, end_step) = s.serve(&powered, &plan, &mut clients)?;
    s.check_served(&powered, &plan, outcome, end_step)?;
    let (powered, report) = s.lose_power_and_reopen(powered, clients)?;
    let excused = s.check_read_back(&powered, &report)?;
    s.readd_if_stale(&powered, &report)?;
    s.check_rejoined(&powered, &excused)?;
    s.compare_views(powered, &report)?;
    Ok(s.stats)
}

/// How the re-add of the returning member ended: what the re-add said, how its resync
/// ended.
type Outcome = Result<(Readd, Option<PassState>), String>;

/// One schedule's state: its case and draws, the returning member, the clients' history,
/// and what it exercised.
struct Schedule<'a> {
    /// The case, its disks and the array's options.
    setup: Setup<'a>,
    g: Geometry,
    rng: Rng,
    /// The role whose member goes away and comes back, and that member (replaced at the
    /// reopen).
    role: usize,
    back: Arc<Returning>,
    shared: Rc<Shared>,
    stats: ReaddStats,
}

/// When the member goes and answers again, and what else happens.
struct Plan {
    /// Steps during which requests start.
    steps: u64,
    leave_at: u64,
    return_at: u64,
    /// It goes away again (during the resync, or after it).
    again_at: Option<u64>,
    /// Power is lost here, or once everything is done.
    crash_at: Option<u64>,
}

impl<'a> Schedule<'a> {
    /// Draws the options and the returning role, and creates the array over fresh disks.
    fn create(case: &'a CrashCase, seed: u64) -> Result<(Schedule<'a>, Powered), String> {
        let mut rng = Rng::for_schedule(seed);
        let n = case.members;
        let g = Geometry::from_tree(case.tree.clone());
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
        let setup = Setup {
            case,
            disks: n,
            opts,
        };
        let array = array::create(&world, &mut rng, &setup, members)?;
        back.watch(&array);
        let schedule = Schedule {
            setup,
            g,
            rng,
            role,
            back,
            shared: Shared::new(array.volume().capacity()),
            stats: ReaddStats {
                runs: 1,
                ..ReaddStats::default()
            },
        };
        Ok((schedule, Powered { world, array }))
    }

    /// When the member goes and returns, another member's death during the resync, the
    /// member going again, the power loss; and the clients' load.
    fn draw_plan(&mut self, on: &Powered) -> (Plan, Clients) {
        let (g, n, role, rng) = (&self.g, self.setup.case.members, self.role, &mut self.rng);
        let steps = 300 + rng.below(900);
        let leave_at = rng.below(steps / 3);
        let return_at = leave_at + 1 + rng.below(steps / 3);
        let other = (0..n).find(|&m| m != role && g.survives(&[role, m]));
        if let Some(m) = other.filter(|_| rng.chance(250)) {
            on.world.lock().expect("world").disks[m].faults = DiskFaults {
                dies_at_step: Some(return_at + rng.below(80)),
                ..DiskFaults::default()
            };
            self.stats.deaths_during_resync += 1;
        }
        let again_at = rng.chance(150).then(|| return_at + rng.below(80));
        self.stats.went_away_again += u64::from(again_at.is_some());
        let crash_at = rng
            .chance(500)
            .then(|| return_at + rng.below(steps + 200 - return_at));
        let plan = Plan {
            steps,
            leave_at,
            return_at,
            again_at,
            crash_at,
        };
        trace_plan(&on.world, role, &plan, other);
        // Writes dominate: they are what the member misses.
        let mix = [200, 500, 60, 100, 70, 70];
        let capacity = on.array.volume().capacity();
        let width = self.g.full_stripe_width().unwrap_or(16 * 1024);
        let load = Load::draw(
            &mut self.rng,
            capacity,
            width,
            mix,
            self.setup.case.sequential,
        );
        let pace = Pace::draw(&mut self.rng);
        (plan, Clients::new(self.shared.clone(), load, pace))
    }

    /// Requests while the member goes, returns and is re-added, until the power loss; how
    /// the re-add ended (if it did), and the step reached.
    fn serve(
        &mut self,
        on: &Powered,
        plan: &Plan,
        clients: &mut Clients,
    ) -> Result<(Option<Outcome>, u64), String> {
        let outcome = Rc::new(RefCell::new(None));
        let mut step = 0u64;
        while Some(step) != plan.crash_at && (step < plan.steps || clients.exec.live() > 0) {
            on.world.lock().expect("world").step = step;
            if step == plan.leave_at || Some(step) == plan.again_at {
                self.back.away.store(true, SeqCst);
            }
            if step == plan.return_at {
                self.back.away.store(false, SeqCst);
                let (a, out, role) = (on.array.clone(), outcome.clone(), self.role);
                clients.exec.spawn(async move {
                    *out.borrow_mut() = Some(readd(&a, role).await);
                });
            }
            if step < plan.steps {
                clients.maybe_start(&mut self.rng, &on.array);
            }
            clients.step(&on.world, &mut self.rng, step)?;
            if self.back.stale_reads.load(SeqCst) > 0 {
                return Err(format!(
                    "data read from the returning member {} before it was current (step {step})",
                    self.role
                ));
            }
            step += 1;
            if step > plan.steps + STEP_LIMIT {
                return Err("starvation".into());
            }
        }
        self.stats.requests += clients.started;
        let finished = outcome.borrow_mut().take();
        Ok((finished, step))
    }

    /// A finished re-add resynced the member (unless it went away again) to the end, and
    /// left it current — or failed again (an error of a request sent before it came back
    /// may land after the re-add): never written and unread.
    fn check_served(
        &mut self,
        on: &Powered,
        plan: &Plan,
        finished: Option<Outcome>,
        end_step: u64,
    ) -> Result<(), String> {
        let (stats, volume) = (&mut self.stats, on.array.volume());
        stats.member_reads += self.back.reads.swap(0, SeqCst);
        if let Some(r) = &finished {
            let (r, state) = r.clone().map_err(|e| format!("{e} (within tolerance)"))?;
            if let Readd::Resync { bytes } = r {
                stats.resyncs += 1;
                stats.resync_bytes += bytes;
            } else if plan.again_at.is_none() {
                return Err(format!("the returning member was not resynced: {r:?}"));
            }
            // A resync whose returning member failed again during it ends failed, saying
            // so; one that made it current ends done (it may fail later, as any member).
            let failed_again = volume.member_is_failed(self.role);
            let ended_right =
                |s: PassState| s == PassState::Done || (s == PassState::Failed && failed_again);
            if state.is_some_and(|s| !ended_right(s)) {
                return Err(format!(
                    "the resync ended {state:?} (the returning member failed again: {failed_again})"
                ));
            }
        }
        let current = volume.member_is_current(self.role);
        if std::env::var_os("NBRAID_SIM_TRACE").is_some() {
            let failed: Vec<bool> = (0..self.setup.case.members)
                .map(|r| volume.member_is_failed(r))
                .collect();
            let ops = self.shared.history.borrow().ops.len();
            eprintln!("ended at step {end_step}: outcome {finished:?} current {current} failed {failed:?} history {ops}");
        }
        if plan.crash_at.is_none() && finished.is_some() && !current {
            if !volume.member_is_failed(self.role) {
                return Err(
                    "the returning member is neither current nor failed after its resync".into(),
                );
            }
            stats.failed_again += 1;
        }
        stats.crashes_before_current += u64::from(!current);
        stats.crashes_after_current += u64::from(current);
        Ok(())
    }

    /// Power lost (at the plan's step, or once everything is done): the disks' crash
    /// images assembled again, the returning member watched anew.
    fn lose_power_and_reopen(
        &mut self,
        on: Powered,
        clients: Clients,
    ) -> Result<(Powered, OpenReport), String> {
        drop(clients);
        drop(on.array);
        self.back.away.store(false, SeqCst);
        let role = self.role;
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
        let (world, rng, setup) = (&on.world, &mut self.rng, &self.setup);
        let (world, array, report) = reopen_wrapped(world, rng, setup, false, "the re-add", &wrap)?;
        self.back = again.borrow_mut().take().expect("wrapped");
        self.back.watch(&array);
        Ok((Powered { world, array }, report))
    }

    /// Every flushed write reads back, but where a torn stripe rebuilt from parity (a role
    /// absent at the reopen) was being written: old or new (md's PPL promise); every other
    /// sector is checked — including those of a stripe the re-add's resync was rewriting at
    /// the crash. The sectors excused, and those that do not read back.
    fn check_read_back(
        &mut self,
        on: &Powered,
        report: &OpenReport,
    ) -> Result<HashSet<u64>, String> {
        let rebuilt: Vec<usize> = not_current(&on.array)
            .iter()
            .chain(&report.resynced_roles)
            .copied()
            .collect();
        let image = read_volume(&on.world, &mut self.rng, &on.array)?;
        let history = self.shared.history.borrow();
        let what = format!("reopened: {report:?}");
        let r = check_read_back(&self.g, &history, &image, &rebuilt, false, &what)?;
        self.stats.sectors_write_hole += r.write_hole;
        self.stats.sectors_write_hole_checked += r.write_hole_checked;
        self.stats.sectors_checked += r.checked;
        let mut excused = r.excused;
        // Sectors that did not read back before the re-add need not after it.
        excused.extend(unreadable(&on.world, &mut self.rng, &on.array, &history)?);
        Ok(excused)
    }

    /// Not current after the reopen: re-added again, and resynced to the end.
    fn readd_if_stale(&mut self, on: &Powered, report: &OpenReport) -> Result<(), String> {
        let role = self.role;
        if on.array.volume().member_is_current(role) {
            return Ok(());
        }
        let a = on.array.clone();
        let (r, state) = drive(
            &on.world,
            &mut self.rng,
            async move { readd(&a, role).await },
        )??;
        match (r, state) {
            (Readd::Resync { bytes }, Some(PassState::Done)) => {
                self.stats.resyncs += 1;
                self.stats.resync_bytes += bytes;
            }
            other => return Err(format!("re-add after the reopen: {other:?} ({report:?})")),
        }
        if !on.array.volume().member_is_current(role) {
            return Err(format!(
                "the returning member is not current after the re-add following the reopen ({report:?})"
            ));
        }
        Ok(())
    }

    /// The member is back: every flushed write still reads back (but the `excused`
    /// sectors), and nothing was read from it while it was stale.
    fn check_rejoined(&mut self, on: &Powered, excused: &HashSet<u64>) -> Result<(), String> {
        self.stats.rejoined += 1;
        let mut checked = CrashStats::default();
        let history = self.shared.history.borrow();
        let (world, array, when) = (&on.world, &on.array, "after the re-add");
        check_durable(
            world,
            &mut self.rng,
            array,
            &history,
            &mut checked,
            excused,
            when,
        )?;
        self.stats.sectors_checked += checked.sectors_checked;
        if self.back.stale_reads.load(SeqCst) > 0 {
            return Err(
                "data read from the returning member before it was current, after the reopen"
                    .into(),
            );
        }
        self.stats.member_reads += self.back.reads.load(SeqCst);
        Ok(())
    }

    /// Copies and parity agree: every view losing up to two more members reads the same.
    fn compare_views(&mut self, on: Powered, report: &OpenReport) -> Result<(), String> {
        let lost = lost_roles(&on.world, &on.array);
        let role_disks: Vec<usize> = (0..self.setup.case.members)
            .map(|r| disk_of(&on.array, r))
            .collect();
        drop(on.array);
        let what = format!("re-add of role {}, reopened {report:?}", self.role);
        let history = self.shared.history.borrow();
        let (world, rng, case) = (&on.world, &mut self.rng, self.setup.case);
        self.stats.redundancy_views +=
            redundancy_agrees(world, rng, case, &role_disks, &lost, &history, &what)?;
        Ok(())
    }
}

/// With `NBRAID_SIM_TRACE` set: the schedule's plan.
fn trace_plan(world: &Arc<Mutex<World>>, role: usize, plan: &Plan, other: Option<usize>) {
    if std::env::var_os("NBRAID_SIM_TRACE").is_none() {
        return;
    }
    let dies: Vec<_> = (world.lock().expect("w").disks.iter())
        .map(|d| d.faults.dies_at_step)
        .collect();
    let Plan {
        steps,
        leave_at,
        return_at,
        again_at,
        crash_at,
    } = plan;
    eprintln!("role {role} steps {steps} leave {leave_at} return {return_at} again {again_at:?} crash {crash_at:?} other {other:?} faults {dies:?}");
}
