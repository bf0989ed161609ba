//! Power loss with superblocks: an array is created over simulated members, serves a seeded
//! mix of requests (members may die within tolerance, and `mark_clean` runs now and then),
//! loses power at a random point, and is opened again from what its members kept — by
//! superblock, with the write-intent bitmap's resync — sometimes with one member deleted.
//! Then: every write acknowledged before a completed flush reads back; the copies and parity
//! agree (every readable subset of up to two more lost members reads the same bytes); and
//! the RAID 5/6 write hole is closed: with the partial-parity log on, every sector rebuilt
//! from parity in a stripe a crash may have torn reads back exactly unless it was itself
//! being written (not yet flushed: old, new or — md's PPL promises nothing there — neither);
//! with the log off such sectors are only counted (`CrashCase::ppl`, to show the check bites).
//!
//! Some schedules heal: a member is pulled during the requests, a spare (one more disk) is
//! rebuilt into its role while requests go on (small windows, so checkpoints land in the
//! superblocks), power may go mid-rebuild, and after the reopen the rebuild resumes from the
//! checkpoint and completes before anything is checked — the same rules then hold for the
//! rebuilt member (every view losing it, or it and one more, reads the same bytes). Others
//! replace a healthy member by the spare (md's want_replacement) during the requests, power
//! lost before, during or after the swap: whichever member the records name after the
//! reopen must hold every flushed write.

use super::array::{
    self, crash_images, disk_of, not_current, read_volume, sim_members, Powered, Setup,
};
use super::background::serves_before_resync;
use super::case::array_options;
pub use super::case::{CrashCase, CrashStats};
use super::checks::{check_read_back, redundancy_agrees};
use super::clients::{Clients, Load, Pace, Shared};
use super::executor::{drive, Executor, STEP_LIMIT};
use super::faults::{choose_failures, draw_faults};
use nbraid_core::metadata::{Array, ArrayError, ArrayOptions, MemberMeta, OpenReport};
use nbraid_core::{Member, PassControl, PassState};
use nbraid_layout::{Geometry, Node};
use nbraid_sim::scheduled::{DiskFaults, World};
use nbraid_sim::Rng;
use std::cell::Cell;
use std::collections::HashSet;
use std::rc::Rc;
use std::sync::{Arc, Mutex};

/// One schedule (see the module): the array is created, serves requests through faults
/// and maybe a heal until the power loss, is opened again from what its disks kept, and
/// must read back every flushed write; then a background resync and a scrub may run, and
/// every view losing up to two more members must read the same bytes.
pub fn run_crash(case: &CrashCase, seed: u64) -> Result<CrashStats, String> {
    let (mut s, powered) = Schedule::create(case, seed)?;
    let (plan, mut clients) = s.draw_plan(&powered);
    s.serve(&powered, &plan, &mut clients)?;
    let (images, lost_before) = s.lose_power(powered, clients, plan.torn);
    let (powered, report) = s.reopen(images, &lost_before)?;
    s.resume_rebuild(&powered, &report)?;
    // Which disk serves each role now.
    let role_disks: Vec<usize> = (0..case.members)
        .map(|r| disk_of(&powered.array, r))
        .collect();
    s.stats.replaced_at_reopen +=
        u64::from(s.heal && plan.replace && role_disks.contains(&case.members));
    let excused = s.check_read_back(&powered, &report)?;
    s.finish_and_compare(powered, &excused, &report, &role_disks)?;
    Ok(s.stats)
}

/// One schedule's state: its case and draws, the clients' history, and what it exercised.
struct Schedule<'a> {
    /// The case, the disks (the spare too in healing schedules) and the array's options.
    setup: Setup<'a>,
    g: Geometry,
    rng: Rng,
    /// The volume's size and its full stripe.
    capacity: u64,
    width: u64,
    /// Healing schedules have one more disk: the spare.
    heal: bool,
    shared: Rc<Shared>,
    stats: CrashStats,
}

/// What a schedule does until the power loss, drawn from its seed.
struct Plan {
    /// Steps during which requests start.
    steps: u64,
    /// Writes in flight at the power loss may land in part.
    torn: bool,
    /// The role healed onto the spare, and at which step.
    pulled: Option<usize>,
    heal_at: Option<u64>,
    /// Replace instead of pull-and-rebuild: the member keeps serving until the swap.
    replace: bool,
    /// Power goes with requests in flight (or once the last one is answered).
    crash_mid_flight: bool,
}

impl<'a> Schedule<'a> {
    /// Draws the options and creates the array over fresh disks.
    fn create(case: &'a CrashCase, seed: u64) -> Result<(Schedule<'a>, Powered), String> {
        let mut rng = Rng::for_schedule(seed);
        let n = case.members;
        let g = Geometry::from_tree(case.tree.clone());
        let width = g.full_stripe_width().unwrap_or(16 * 1024);
        let opts = array_options(&mut rng, case, width);
        let heal = rng.chance(400) && (0..n).any(|m| g.survives(&[m]));
        let disks = n + usize::from(heal);
        let world = World::new(
            vec![vec![0u8; case.member_len as usize]; disks],
            vec![DiskFaults::default(); disks],
        );
        let members = sim_members(&world, n, case.member_len);
        let setup = Setup { case, disks, opts };
        let array = array::create(&world, &mut rng, &setup, members)?;
        let capacity = array.volume().capacity();
        // Small windows (rounded up to whole full stripes), so checkpoints land mid-rebuild.
        array.set_rebuild_window_bytes(4096 << rng.below(3));
        let schedule = Schedule {
            setup,
            g,
            rng,
            capacity,
            width,
            heal,
            shared: Shared::new(capacity),
            stats: CrashStats {
                runs: 1,
                ..CrashStats::default()
            },
        };
        Ok((schedule, Powered { world, array }))
    }

    /// Faults within tolerance from now on, the heal, the power loss and the clients' load.
    fn draw_plan(&mut self, on: &Powered) -> (Plan, Clients) {
        let (g, n, rng) = (&self.g, self.setup.case.members, &mut self.rng);
        let steps = 300 + rng.below(1200);
        let failing = if rng.chance(500) {
            choose_failures(rng, g, n)
        } else {
            Vec::new()
        };
        {
            let mut w = on.world.lock().expect("world");
            for &m in &failing {
                w.disks[m].faults = draw_faults(rng, steps);
            }
        }
        let torn = rng.chance(500);
        trace_faults(&on.world, &failing, steps);
        // The member pulled for the rebuild: one more loss the layout still survives, that
        // the engine can rebuild with the failing members lost too — in a declared tree
        // surviving is not enough: a RAID 5 group under a mirror that lost another member
        // takes no writes, so nothing reaches its new member (`Geometry::rebuilds`; the
        // rebuild refuses it).
        let pulled = (0..n).find(|&m| {
            let lost = [failing.clone(), vec![m]].concat();
            !failing.contains(&m) && g.survives(&lost) && g.rebuilds(m, &lost)
        });
        let heal_at = (self.heal && pulled.is_some()).then(|| rng.below(steps));
        let replace = rng.chance(400);
        let mix = [300, 400, 60, 100, 70, 70];
        let load = Load::draw(
            rng,
            self.capacity,
            self.width,
            mix,
            self.setup.case.sequential,
        );
        let pace = Pace::draw(rng);
        let plan = Plan {
            steps,
            torn,
            pulled,
            heal_at,
            replace,
            crash_mid_flight: rng.chance(750),
        };
        (plan, Clients::new(self.shared.clone(), load, pace))
    }

    /// Requests (and the heal) until the power loss: mid-flight, or once the last request
    /// is answered.
    fn serve(&mut self, on: &Powered, plan: &Plan, clients: &mut Clients) -> Result<(), String> {
        let healed = Rc::new(Cell::new(false));
        let mut step = 0u64;
        while step < plan.steps || (!plan.crash_mid_flight && clients.exec.live() > 0) {
            on.world.lock().expect("world").step = step;
            if plan.heal_at == Some(step) {
                self.start_heal(on, plan, &mut clients.exec, &healed);
            }
            if step < plan.steps {
                clients.maybe_start(&mut self.rng, &on.array);
            }
            clients.step(&on.world, &mut self.rng, step)?;
            step += 1;
            if step > plan.steps + STEP_LIMIT {
                return Err("starvation".into());
            }
        }
        self.stats.requests += clients.started;
        self.stats.crashes_mid_flight += u64::from(clients.exec.live() > 0);
        self.stats.rebuilds_completed += u64::from(healed.get() && !plan.replace);
        Ok(())
    }

    /// Puts the spare in the pulled role's place, among the requests; `healed` once the
    /// rebuild is done.
    fn start_heal(
        &mut self,
        on: &Powered,
        plan: &Plan,
        exec: &mut Executor,
        healed: &Rc<Cell<bool>>,
    ) {
        let (role, replace) = (plan.pulled.expect("chosen"), plan.replace);
        if replace {
            self.stats.replaces_started += 1;
        } else {
            self.stats.rebuilds_started += 1;
        }
        let spare = sim_members(
            &on.world,
            self.setup.case.members + 1,
            self.setup.case.member_len,
        )
        .pop()
        .expect("spare");
        let (a, shared, healed) = (on.array.clone(), self.shared.clone(), healed.clone());
        exec.spawn(async move {
            match heal(&a, role, spare, replace).await {
                Ok(()) => healed.set(true),
                Err(v) => shared.violations.borrow_mut().push(v),
            }
        });
    }

    /// Power lost: what each disk keeps, and the roles lost before (dead or failed).
    fn lose_power(
        &mut self,
        on: Powered,
        clients: Clients,
        torn: bool,
    ) -> (Vec<Vec<u8>>, Vec<usize>) {
        let images = crash_images(&on.world, &mut self.rng, torn);
        let lost_before: Vec<usize> = {
            let w = on.world.lock().expect("world");
            (0..self.setup.case.members)
                .filter(|&i| w.disks[i].dead || on.array.volume().member_is_failed(i))
                .collect()
        };
        drop(clients);
        drop(on);
        (images, lost_before)
    }

    /// The array opened again by superblock from the disks' `images` (every disk offered,
    /// the spare too: the records say who plays which role) — sometimes with a member that
    /// was fine deleted first, sometimes serving at once and resyncing in the background
    /// (`background.rs`).
    fn reopen(
        &mut self,
        images: Vec<Vec<u8>>,
        lost_before: &[usize],
    ) -> Result<(Powered, OpenReport), String> {
        let (g, n) = (&self.g, self.setup.case.members);
        let deleted = (!self.heal && self.rng.chance(250))
            .then(|| {
                (0..n).find(|m| {
                    !lost_before.contains(m)
                        && g.survives(&[lost_before.to_vec(), vec![*m]].concat())
                })
            })
            .flatten();
        let world = World::new(images, vec![DiskFaults::default(); self.setup.disks]);
        let members = sim_members(&world, self.setup.disks, self.setup.case.member_len);
        let background = serves_before_resync(self.setup.case) && self.rng.chance(600);
        let (tree, opts) = (
            self.setup.case.tree.clone(),
            array::reopen_options(&self.setup),
        );
        let opening = open(tree, opts, members, deleted, background);
        let opened = drive(&world, &mut self.rng, opening)?;
        let (array, report) = opened.map_err(|e| {
            format!("reopen after the crash (deleted {deleted:?}, lost {lost_before:?}): {e}")
        })?;
        self.count_reopen(&report);
        Ok((
            Powered {
                world,
                array: Arc::new(array),
            },
            report,
        ))
    }

    /// What the reopen found: dirty records, stale or lost members, log entries replayed.
    fn count_reopen(&mut self, report: &OpenReport) {
        let stats = &mut self.stats;
        if !report.was_clean {
            stats.reopened_dirty += 1;
            stats.full_resync_bytes += self.capacity;
        }
        stats.reopened_with_stale += u64::from(!report.resynced_roles.is_empty());
        stats.resynced_bytes += report.resynced_bytes + report.background_bytes;
        stats.ppl_entries_replayed += report.ppl.entries;
    }

    /// A rebuild the power loss interrupted resumes from its checkpoint and completes.
    fn resume_rebuild(&mut self, on: &Powered, report: &OpenReport) -> Result<(), String> {
        if report.rebuilding_roles.is_empty() {
            return Ok(());
        }
        let resumed = report.rebuilding_roles.iter().any(|&(_, c)| c > 0);
        self.stats.rebuilds_resumed += u64::from(resumed);
        let a = on.array.clone();
        let r = drive(&on.world, &mut self.rng, async move {
            a.rebuild(&PassControl::new(0)).await
        })?
        .map_err(|e| format!("resumed rebuild failed (report {report:?}): {e}"))?;
        if r.state != PassState::Done || r.completed.is_empty() {
            return Err(format!("resumed rebuild did not complete: {r:?}"));
        }
        self.stats.rebuilds_completed += 1;
        Ok(())
    }

    /// Durability: every flushed write reads back, but in the write hole of the roles
    /// rebuilt from parity (lost now, or stale and rebuilt at the reopen); the sectors
    /// excused.
    fn check_read_back(
        &mut self,
        on: &Powered,
        report: &OpenReport,
    ) -> Result<HashSet<u64>, String> {
        let lost_now = not_current(&on.array);
        self.stats.reopened_degraded += u64::from(!lost_now.is_empty());
        let rebuilt: Vec<usize> = lost_now
            .iter()
            .chain(&report.resynced_roles)
            .chain(report.rebuilding_roles.iter().map(|(r, _)| r))
            .copied()
            .collect();
        let image = read_volume(&on.world, &mut self.rng, &on.array)?;
        let hole_unchecked = !self.setup.case.ppl && !self.setup.case.strict;
        let what = format!("report {report:?}");
        let history = self.shared.history.borrow();
        let r = check_read_back(&self.g, &history, &image, &rebuilt, hole_unchecked, &what)?;
        self.stats.sectors_write_hole += r.write_hole;
        self.stats.sectors_write_hole_checked += r.write_hole_checked;
        self.stats.sectors_checked += r.checked;
        Ok(r.excused)
    }

    /// The background resync (if any) finishes, with requests going on, maybe through a
    /// member death or a power loss; a scrub may run likewise; then every view that loses
    /// up to two more members reads the same bytes.
    fn finish_and_compare(
        &mut self,
        on: Powered,
        excused: &HashSet<u64>,
        report: &OpenReport,
        role_disks: &[usize],
    ) -> Result<(), String> {
        let (setup, rng, stats) = (&self.setup, &mut self.rng, &mut self.stats);
        let read_back = self.shared.history.borrow().ops.len();
        let finished = super::background::finish(on, rng, setup, &self.shared, excused, stats)?;
        let history = self.shared.history.borrow();
        stats.requests += (history.ops.len() - read_back) as u64;
        let (world, array, lost) =
            super::scrub::maybe_scrub(finished, rng, setup, &history, stats)?;
        let case = setup.case;
        drop(array);
        let what = format!("report {report:?}");
        stats.redundancy_views +=
            redundancy_agrees(&world, rng, case, role_disks, &lost, &history, &what)?;
        Ok(())
    }
}

/// Pulls role `role` and rebuilds it onto `spare`, or with `replace` copies it there while
/// it serves; then the rebuild runs to the end.
async fn heal(a: &Array, role: usize, spare: Arc<dyn Member>, replace: bool) -> Result<(), String> {
    let meta = MemberMeta::load(spare).await;
    let started = if replace {
        a.replace(role, meta).await
    } else {
        a.volume().fail_member(role, "sim: pulled for a rebuild");
        a.rebuild_onto(role, meta).await
    };
    let r = match started {
        Ok(()) => a.rebuild(&PassControl::new(0)).await,
        Err(e) => Err(e),
    };
    match r {
        Ok(r) if r.state == PassState::Done => Ok(()),
        Ok(r) => Err(format!("rebuild stopped: {r:?}")),
        Err(e) => Err(format!(
            "rebuild of role {role} within tolerance failed: {e}"
        )),
    }
}

/// Opens the case's array over `members` (all but `deleted`, loaded one by one), in the
/// background or not.
async fn open(
    tree: Node,
    opts: ArrayOptions,
    members: Vec<Arc<dyn Member>>,
    deleted: Option<usize>,
    background: bool,
) -> Result<(Array, OpenReport), ArrayError> {
    let mut metas = Vec::new();
    for (i, m) in members.into_iter().enumerate() {
        metas.push(if Some(i) == deleted {
            None
        } else {
            Some(MemberMeta::load(m).await)
        });
    }
    if background {
        Array::open_background("sim", &tree, metas, opts, &|_, _| {}).await
    } else {
        Array::open("sim", &tree, metas, opts, &|_, _| {}).await
    }
}

/// With `NBRAID_SIM_TRACE` set: the schedule's faults.
fn trace_faults(world: &Arc<Mutex<World>>, failing: &[usize], steps: u64) {
    if std::env::var_os("NBRAID_SIM_TRACE").is_none() {
        return;
    }
    let faults: Vec<_> = (world.lock().expect("w").disks.iter())
        .map(|d| {
            let f = &d.faults;
            (
                f.dies_at_step,
                f.read_error_per_mille,
                f.flush_error_per_mille,
            )
        })
        .collect();
    eprintln!("crash: failing {failing:?} faults {faults:?} steps {steps}");
}
