//! Background resync in the crash simulator: some reopens serve at once
//! (`Array::open_background`) — mirror trees, and parity trees with the partial-parity log
//! (RAID 5, 6, 50, 60) — and the durability check reads the volume *before* the pass ran
//! (mirrors resync what reads touch; parity groups read data chunks straight, and a read
//! rebuilt from parity that was never resynced is excused only where the write-hole promise
//! excuses it: sectors being written at the crash, in stripes it may have torn). Then the
//! pass runs under the simulator's scheduler, in most schedules with the seeded request mix
//! going on (writes into regions not yet resynced among them, checked read by read, under
//! the same excuse while a member is lost); in some a member dies during it (within
//! tolerance), in others power is lost in the middle of it: the members' crash images are
//! assembled again (background again), every flushed write — of before the first crash and
//! of during the pass — must still read back (same excuse), and the pass finishes. At the
//! end the records go clean (`mark_clean`), and the caller's redundancy views require every
//! copy and every parity chunk to agree.

use super::array::{lost_roles, not_current, read_volume, reopen_after_power_loss, Powered, Setup};
use super::case::{CrashCase, CrashStats};
use super::checks::{check_durable, write_hole_excuse};
use super::clients::{start_request, Load, Pace, Shared};
use super::executor::{drive, run_with, Executor};
use super::faults::one_more_death;
use nbraid_core::metadata::{Array, OpenReport};
use nbraid_core::{PassControl, PassState};
use nbraid_layout::{Geometry, Node};
use nbraid_sim::scheduled::{World, SECTOR_BYTES};
use nbraid_sim::Rng;
use std::cell::RefCell;
use std::collections::HashSet;
use std::rc::Rc;
use std::sync::{Arc, Mutex};

const SECTOR: u64 = SECTOR_BYTES as u64;

/// Whether the tree's redundancy is mirrors only.
pub fn mirrors_only(n: &Node) -> bool {
    !matches!(n, Node::Parity(_)) && n.children().iter().all(mirrors_only)
}

/// Whether the case's volume may resync in the background: mirrors only, or every parity
/// group over members and logged (the engine decides the same; a stale or rebuilding member
/// still makes it resync first).
pub fn serves_before_resync(case: &CrashCase) -> bool {
    let logged = nbraid_core::ppl::parity_groups(&case.tree)
        .iter()
        .all(|(_, leaves)| leaves.is_some());
    mirrors_only(&case.tree) || (case.ppl && logged)
}

/// What is left after the background resync: the world and array to check, and the roles
/// not current.
pub type Finished = (Arc<Mutex<World>>, Arc<Array>, Vec<usize>);

/// Runs the pending background resync of `array` to the end, with requests going on in most
/// schedules and a member death or a power loss in the middle of it in some (see the
/// module); the records go clean at the end. `earlier`: the sectors the reopen's check
/// excused.
pub(super) fn finish(
    on: Powered,
    rng: &mut Rng,
    setup: &Setup,
    shared: &Rc<Shared>,
    earlier: &HashSet<u64>,
    stats: &mut CrashStats,
) -> Result<Finished, String> {
    let (Powered { world, array }, case) = (on, setup.case);
    if !array.background_pending() {
        let lost = not_current(&array);
        return Ok((world, array, lost));
    }
    stats.background_resyncs += 1;
    stats.background_parity += u64::from(!mirrors_only(&case.tree));
    let g = Geometry::from_tree(case.tree.clone());
    let mut pass = Pass {
        setup,
        g,
        rng,
        stats,
        shared,
        earlier,
    };
    let plan = pass.draw_plan(&world, &array);
    let (exec, outcome) = pass.run(&world, &array, &plan)?;
    // Still excused at the end: no write over them completed.
    let excused: HashSet<u64> = std::mem::take(&mut *shared.excused.borrow_mut())
        .into_iter()
        .filter(|&(_, until)| until == u64::MAX)
        .map(|(s, _)| s)
        .collect();
    if exec.live() == 0 {
        let outcome = outcome.borrow_mut().take();
        pass.check_done(&world, &array, outcome, &excused)?;
        let lost = lost_roles(&world, &array);
        clean_at_the_end(&world, pass.rng, &array)?;
        return Ok((world, array, lost));
    }
    drop(exec);
    drop(array);
    pass.resume_after_power_loss(&world, plan.new_from)
}

/// One background pass over a reopened array: the schedule's draws and history, and what
/// it exercised.
struct Pass<'a> {
    setup: &'a Setup<'a>,
    g: Geometry,
    rng: &'a mut Rng,
    stats: &'a mut CrashStats,
    shared: &'a Rc<Shared>,
    /// The sectors the reopen's check excused.
    earlier: &'a HashSet<u64>,
}

/// What happens during a pass, drawn from the seed.
struct PassPlan {
    /// Step at which power is lost (small sim volumes resync in a few dozen steps, more
    /// with requests going on).
    crash_at: Option<u64>,
    /// Requests go on during the pass (in most schedules).
    requests: bool,
    /// The first op of the history issued during the pass.
    new_from: usize,
}

/// What a pass ended with, once it did.
type Outcome = Rc<RefCell<Option<Result<PassState, String>>>>;

impl Pass<'_> {
    /// A member death, a power loss, requests; and the sectors excused during the pass.
    fn draw_plan(&mut self, world: &Arc<Mutex<World>>, array: &Arc<Array>) -> PassPlan {
        let lost = not_current(array);
        let shape = (&self.g, self.setup.case.members);
        let dying = one_more_death(self.rng, world, array, shape, &lost);
        self.stats.background_member_deaths += u64::from(dying.is_some());
        let crash_at = self.rng.chance(400).then(|| self.rng.below(80));
        let requests = self.rng.chance(750);
        let new_from = self.excuse_during_pass(&lost, dying, array.volume().capacity());
        if std::env::var_os("NBRAID_SIM_TRACE").is_some() {
            let dies: Vec<_> = (world.lock().expect("w").disks.iter())
                .map(|d| d.faults.dies_at_step)
                .collect();
            eprintln!("background: lost {lost:?} dying {dying:?} faults {dies:?} crash_at {crash_at:?} requests {requests} new ops from {new_from}");
        }
        PassPlan {
            crash_at,
            requests,
            new_from,
        }
    }

    /// The history starts over from the power loss; during the pass, reads rebuilt from
    /// parity not resynced yet may be wrong in the write hole (with the member that dies
    /// counted lost from the start), and sectors excused at the reopen stay excused (a
    /// rebuild then may have written what it rebuilt) until a write over them completes.
    /// Returns the first op of the pass.
    fn excuse_during_pass(&mut self, lost: &[usize], dying: Option<usize>, capacity: u64) -> usize {
        let mut h = self.shared.history.borrow_mut();
        h.power_lost();
        let rebuilt: Vec<usize> = lost.iter().copied().chain(dying).collect();
        let mut excused = write_hole_excuse(&self.g, &h, &rebuilt, capacity);
        excused.extend(self.earlier);
        *self.shared.excused.borrow_mut() = excused.into_iter().map(|s| (s, u64::MAX)).collect();
        h.ops.len()
    }

    /// The pass, with requests going on, until it ends or power is lost; the tasks left
    /// and how the pass ended.
    fn run(
        &mut self,
        world: &Arc<Mutex<World>>,
        array: &Arc<Array>,
        plan: &PassPlan,
    ) -> Result<(Executor, Outcome), String> {
        let outcome: Outcome = Rc::new(RefCell::new(None));
        let mut exec = Executor::default();
        let (a, out) = (array.clone(), outcome.clone());
        exec.spawn(async move {
            let r = a.background_resync(&PassControl::new(0)).await;
            *out.borrow_mut() = Some(r.map_err(|e| e.to_string()));
        });
        let capacity = array.volume().capacity();
        let load = Load {
            capacity,
            width: self.g.full_stripe_width().unwrap_or(16 * 1024),
            hot_base: self.rng.below(capacity / SECTOR) * SECTOR / 2,
            mix: [300, 400, 60, 100, 70, 70],
            stream: None,
        };
        let pace = Pace {
            max_in_flight: 2 + self.rng.below(8) as usize,
            start_per_mille: 500,
        };
        let (shared, stats) = (self.shared, &mut *self.stats);
        let mut spawn = |exec: &mut Executor, rng: &mut Rng| {
            let running = outcome.borrow().is_none();
            if plan.requests && running && pace.starts(rng, exec.live()) {
                start_request(exec, rng, array, shared, &load);
                stats.background_requests += 1;
            }
        };
        let what = "the background resync";
        run_with(&mut exec, world, self.rng, plan.crash_at, what, &mut spawn)?;
        if let Some(v) = self.shared.violations.borrow().first() {
            return Err(format!("{v} (during the background resync)"));
        }
        Ok((exec, outcome))
    }

    /// The pass ended well, and every flushed write reads back after it (the excuse as
    /// during it).
    fn check_done(
        &mut self,
        world: &Arc<Mutex<World>>,
        array: &Arc<Array>,
        outcome: Option<Result<PassState, String>>,
        excused: &HashSet<u64>,
    ) -> Result<(), String> {
        match outcome {
            Some(Ok(PassState::Done)) => {}
            other => return Err(format!("background resync within tolerance: {other:?}")),
        }
        let history = self.shared.history.borrow();
        let when = "after the background resync";
        check_durable(world, self.rng, array, &history, self.stats, excused, when)?;
        Ok(())
    }

    /// Power lost in the middle of the pass: the images assembled again (in the
    /// background again), every flushed write still reads back (mirrors resync what reads
    /// touch first), and the pass resumes and finishes.
    fn resume_after_power_loss(
        &mut self,
        world: &Arc<Mutex<World>>,
        new_from: usize,
    ) -> Result<Finished, String> {
        self.stats.background_crashes += 1;
        self.shared.history.borrow_mut().power_lost();
        let during = "the background resync";
        let (world, array, report) =
            reopen_after_power_loss(world, self.rng, self.setup, true, during)?;
        self.stats.resynced_bytes += report.resynced_bytes + report.background_bytes;
        self.check_after_power_loss(&world, &array, &report, new_from)?;
        let a = array.clone();
        let r = drive(&world, self.rng, async move {
            a.background_resync(&PassControl::new(0)).await
        })?
        .map_err(|e| format!("resumed background resync: {e}"))?;
        if r != PassState::Done || array.background_pending() {
            return Err(format!("resumed background resync did not finish: {r:?}"));
        }
        clean_at_the_end(&world, self.rng, &array)?;
        let lost = not_current(&array);
        Ok((world, array, lost))
    }

    /// Every flushed write reads back after the reopen `report`, but in the write-hole
    /// sectors of roles rebuilt from parity (lost, or resynced or rebuilt at the reopen)
    /// and in the sectors excused before that no guaranteed write (issued as op `new_from`
    /// or later) covers.
    fn check_after_power_loss(
        &mut self,
        world: &Arc<Mutex<World>>,
        array: &Arc<Array>,
        report: &OpenReport,
        new_from: usize,
    ) -> Result<(), String> {
        let g = array.volume().geometry().clone();
        let lost: Vec<usize> = not_current(array)
            .into_iter()
            .chain(report.resynced_roles.iter().copied())
            .chain(report.rebuilding_roles.iter().map(|(r, _)| *r))
            .collect();
        let history = self.shared.history.borrow();
        let mut excused = write_hole_excuse(&g, &history, &lost, array.volume().capacity());
        let f = history.last_flush_issued();
        let mut rewritten = HashSet::new();
        for o in history.ops[new_from..]
            .iter()
            .filter(|o| history.guaranteed(o, f))
        {
            rewritten.extend(o.offset / SECTOR..(o.offset + o.len) / SECTOR);
        }
        excused.extend(self.earlier.difference(&rewritten));
        let image = read_volume(world, self.rng, array)?;
        let what = format!("after a crash during the background resync: {report:?}");
        for (s, sector) in image.chunks(SECTOR_BYTES).enumerate() {
            if excused.contains(&(s as u64)) {
                self.stats.sectors_write_hole += 1;
                continue;
            }
            history.check_durable(s as u64, sector).map_err(|e| {
                format!(
                    "{e} ({what}, lost {lost:?}, at {:?})",
                    g.map(s as u64 * SECTOR, SECTOR)
                )
            })?;
            self.stats.sectors_checked += 1;
        }
        Ok(())
    }
}

/// After the pass: nothing pending, and the records go clean.
fn clean_at_the_end(
    world: &Arc<Mutex<World>>,
    rng: &mut Rng,
    array: &Arc<Array>,
) -> Result<(), String> {
    if array.background_pending() {
        return Err("the background resync is done but still pending".into());
    }
    let a = array.clone();
    match drive(world, rng, async move { a.mark_clean().await })? {
        Ok(nbraid_core::metadata::CleanMark::Recorded) => Ok(()),
        other => Err(format!(
            "records not clean after the background resync: {other:?}"
        )),
    }
}
