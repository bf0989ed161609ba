//! Scrub checkpoints in the crash simulator: in some schedules a repairing scrub runs over
//! the reopened array under the simulator's scheduler, sometimes with a member dying during
//! it, sometimes with power lost in the middle. After a power loss the members' crash images
//! are assembled again: every flushed write still reads back, the records name the
//! unfinished scrub (once its start was committed), and a scrub resumed from that checkpoint
//! runs to the end, clears it, and changes no data (every flushed write reads back again).

use super::array::{disk_of, lost_roles, not_current, reopen_after_power_loss};
use super::background::Finished;
use super::checks::{check_durable, unreadable};
use super::crash::{CrashCase, CrashStats};
use super::executor::{drive, run_until, Executor};
use super::history::History;
use nbraid_core::metadata::ArrayOptions;
use nbraid_core::{ScrubControl, ScrubState};
use nbraid_layout::Geometry;
use nbraid_sim::scheduled::DiskFaults;
use nbraid_sim::Rng;
use std::cell::RefCell;
use std::rc::Rc;

/// In some schedules, scrubs `array` (repairing) with a member death or a power loss during
/// it (see the module); `lost`: the roles not current (or dead) before.
pub fn maybe_scrub(
    (world, array, lost): Finished,
    rng: &mut Rng,
    case: &CrashCase,
    disks: usize,
    opts: &ArrayOptions,
    history: &History,
    stats: &mut CrashStats,
) -> Result<Finished, String> {
    if !rng.chance(300) {
        return Ok((world, array, lost));
    }
    stats.scrubs += 1;
    let g = Geometry::from_tree(case.tree.clone());
    let mut death = None;
    if rng.chance(300) {
        let m = (0..case.members)
            .find(|&m| !lost.contains(&m) && g.survives(&[lost.clone(), vec![m]].concat()));
        if let Some(m) = m {
            world.lock().expect("world").disks[disk_of(&array, m)].faults = DiskFaults {
                dies_at_step: Some(rng.below(60)),
                ..DiskFaults::default()
            };
            death = Some(m);
        }
    }
    // Sectors that do not read back already (the write hole of lost roles: the reopen's
    // check excused them); every other one must keep reading back.
    let excused = unreadable(&world, rng, &array, history)?;
    let crash_at = rng.chance(500).then(|| rng.below(60));
    let outcome = Rc::new(RefCell::new(None));
    let mut exec = Executor::default();
    {
        let (a, out) = (array.clone(), outcome.clone());
        exec.spawn(async move {
            let r = a.scrub(&ScrubControl::new(true, 0)).await;
            *out.borrow_mut() = Some(r.map_err(|e| e.to_string()));
        });
    }
    run_until(&mut exec, &world, rng, crash_at, "the scrub")?;
    if exec.live() == 0 {
        match outcome.borrow_mut().take() {
            Some(Ok(r)) if r.state == ScrubState::Done => {}
            other => return Err(format!("scrub within tolerance: {other:?}")),
        }
        let a = array.clone();
        let c = drive(&world, rng, async move { a.scrub_checkpoint().await })?;
        if c.is_some() {
            return Err(format!("a finished scrub left its checkpoint: {c:?}"));
        }
        let when = format!(
            "after a scrub; lost before {lost:?}, death {death:?}, now {:?}",
            lost_roles(&world, &array)
        );
        check_durable(&world, rng, &array, history, stats, &excused, &when)?;
        let mut now = lost_roles(&world, &array);
        now.extend(lost);
        now.sort_unstable();
        now.dedup();
        return Ok((world, array, now));
    }

    // Power lost in the middle of the scrub.
    stats.scrub_crashes += 1;
    drop(exec);
    drop(array);
    let (world, array, _) =
        reopen_after_power_loss(&world, rng, case, disks, opts, false, "a scrub")?;
    let when = "after a crash during a scrub";
    check_durable(&world, rng, &array, history, stats, &excused, when)?;
    let a = array.clone();
    let c = drive(&world, rng, async move { a.scrub_checkpoint().await })?;
    let cap = array.volume().capacity();
    if let Some(c) = c {
        if !c.repair || c.position_bytes > cap {
            return Err(format!("scrub checkpoint {c:?} of a {cap}-byte volume"));
        }
        stats.scrubs_resumed += 1;
        let a = array.clone();
        let r = drive(&world, rng, async move {
            let ctl = ScrubControl::resume_at(c.repair, 0, c.position_bytes);
            let r = a.scrub(&ctl).await;
            (r, a.scrub_checkpoint().await)
        })?;
        match r {
            (Ok(r), None) if r.state == ScrubState::Done => {}
            other => return Err(format!("resumed scrub: {other:?}")),
        }
        let when = "after a resumed scrub";
        check_durable(&world, rng, &array, history, stats, &excused, when)?;
    }
    let lost = not_current(&array);
    Ok((world, array, lost))
}
