//! Scrub checkpoints in the crash simulator: in some schedules a repairing scrub runs over
//! the reopened array under the simulator's scheduler, sometimes with a member dying during
//! it, sometimes with power lost in the middle. After a power loss the members' crash images
//! are assembled again: every flushed write still reads back, the records name the
//! unfinished scrub (once its start was committed), and a scrub resumed from that checkpoint
//! runs to the end, clears it, and changes no data (every flushed write reads back again).

use super::array::{lost_roles, not_current, reopen_after_power_loss, Setup};
use super::background::Finished;
use super::case::CrashStats;
use super::checks::{check_durable, unreadable};
use super::executor::{drive, run_until, Executor};
use super::faults::one_more_death;
use super::history::History;
use nbraid_core::metadata::Array;
use nbraid_core::{ScrubControl, ScrubReport, ScrubState};
use nbraid_layout::Geometry;
use nbraid_sim::scheduled::World;
use nbraid_sim::Rng;
use std::cell::RefCell;
use std::collections::HashSet;
use std::rc::Rc;
use std::sync::{Arc, Mutex};

/// In some schedules, scrubs `array` (repairing) with a member death or a power loss during
/// it (see the module); `lost`: the roles not current (or dead) before.
pub(super) fn maybe_scrub(
    (world, array, lost): Finished,
    rng: &mut Rng,
    setup: &Setup,
    history: &History,
    stats: &mut CrashStats,
) -> Result<Finished, String> {
    let case = setup.case;
    if !rng.chance(300) {
        return Ok((world, array, lost));
    }
    stats.scrubs += 1;
    let g = Geometry::from_tree(case.tree.clone());
    let death = one_more_death(rng, &world, &array, (&g, case.members), &lost);
    // Sectors that do not read back already (the write hole of lost roles: the reopen's
    // check excused them); every other one must keep reading back.
    let excused = unreadable(&world, rng, &array, history)?;
    let crash_at = rng.chance(500).then(|| rng.below(60));
    let mut scrub = Scrub {
        rng,
        history,
        stats,
        excused,
    };
    let (exec, outcome) = scrub.run(&world, &array, crash_at)?;
    if exec.live() == 0 {
        let outcome = outcome.borrow_mut().take();
        let now = scrub.check_finished(&world, &array, outcome, lost, death)?;
        return Ok((world, array, now));
    }
    scrub.stats.scrub_crashes += 1;
    drop(exec);
    drop(array);
    scrub.resume_after_power_loss(&world, setup)
}

/// One scrub over a reopened array: the schedule's draws and history, the sectors that
/// need not read back, and what it exercised.
struct Scrub<'a> {
    rng: &'a mut Rng,
    history: &'a History,
    stats: &'a mut CrashStats,
    excused: HashSet<u64>,
}

/// How a scrub ended, once it did.
type Outcome = Rc<RefCell<Option<Result<ScrubReport, String>>>>;

impl Scrub<'_> {
    /// The scrub, until it ends or power is lost at `crash_at`; the tasks left and how it
    /// ended.
    fn run(
        &mut self,
        world: &Arc<Mutex<World>>,
        array: &Arc<Array>,
        crash_at: Option<u64>,
    ) -> Result<(Executor, Outcome), String> {
        let outcome: Outcome = Rc::new(RefCell::new(None));
        let mut exec = Executor::default();
        let (a, out) = (array.clone(), outcome.clone());
        exec.spawn(async move {
            let r = a.scrub(&ScrubControl::new(true, 0)).await;
            *out.borrow_mut() = Some(r.map_err(|e| e.to_string()));
        });
        run_until(&mut exec, world, self.rng, crash_at, "the scrub")?;
        Ok((exec, outcome))
    }

    /// The scrub ended well, cleared its checkpoint and changed no data; the roles lost
    /// now (before it, or since).
    fn check_finished(
        &mut self,
        world: &Arc<Mutex<World>>,
        array: &Arc<Array>,
        outcome: Option<Result<ScrubReport, String>>,
        lost: Vec<usize>,
        death: Option<usize>,
    ) -> Result<Vec<usize>, String> {
        match outcome {
            Some(Ok(r)) if r.state == ScrubState::Done => {}
            other => return Err(format!("scrub within tolerance: {other:?}")),
        }
        let a = array.clone();
        let c = drive(world, self.rng, async move { a.scrub_checkpoint().await })?;
        if c.is_some() {
            return Err(format!("a finished scrub left its checkpoint: {c:?}"));
        }
        let when = format!(
            "after a scrub; lost before {lost:?}, death {death:?}, now {:?}",
            lost_roles(world, array)
        );
        self.check_durable(world, array, &when)?;
        let mut now = lost_roles(world, array);
        now.extend(lost);
        now.sort_unstable();
        now.dedup();
        Ok(now)
    }

    /// Power lost in the middle of the scrub: the images assembled again, every flushed
    /// write still reads back, and a scrub the records name resumes from its checkpoint.
    fn resume_after_power_loss(
        &mut self,
        world: &Arc<Mutex<World>>,
        setup: &Setup,
    ) -> Result<Finished, String> {
        let (world, array, _) = reopen_after_power_loss(world, self.rng, setup, false, "a scrub")?;
        self.check_durable(&world, &array, "after a crash during a scrub")?;
        let a = array.clone();
        let c = drive(&world, self.rng, async move { a.scrub_checkpoint().await })?;
        let cap = array.volume().capacity();
        if let Some(c) = c {
            if !c.repair || c.position_bytes > cap {
                return Err(format!("scrub checkpoint {c:?} of a {cap}-byte volume"));
            }
            self.stats.scrubs_resumed += 1;
            let a = array.clone();
            let r = drive(&world, self.rng, async move {
                let ctl = ScrubControl::resume_at(c.repair, 0, c.position_bytes);
                let r = a.scrub(&ctl).await;
                (r, a.scrub_checkpoint().await)
            })?;
            match r {
                (Ok(r), None) if r.state == ScrubState::Done => {}
                other => return Err(format!("resumed scrub: {other:?}")),
            }
            self.check_durable(&world, &array, "after a resumed scrub")?;
        }
        let lost = not_current(&array);
        Ok((world, array, lost))
    }

    /// Every flushed write reads back, but in the excused sectors.
    fn check_durable(
        &mut self,
        world: &Arc<Mutex<World>>,
        array: &Arc<Array>,
        when: &str,
    ) -> Result<(), String> {
        let (history, excused) = (self.history, &self.excused);
        check_durable(world, self.rng, array, history, self.stats, excused, when)
    }
}
