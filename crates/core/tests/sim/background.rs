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

use super::array::{disk_of, lost_roles, not_current, read_volume, reopen_after_power_loss};
use super::checks::write_hole_excuse;
use super::clients::{start_request, Load, Shared};
use super::crash::{CrashCase, CrashStats};
use super::executor::{drive, run_with, Executor};
use super::history::History;
use nbraid_core::metadata::{Array, ArrayOptions, OpenReport};
use nbraid_core::{PassControl, PassState};
use nbraid_layout::{Geometry, Node};
use nbraid_sim::scheduled::{DiskFaults, World, SECTOR_BYTES};
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

/// Every flushed write reads back after the reopen `report`, but in the write-hole sectors
/// of roles rebuilt from parity (lost, or resynced or rebuilt at the reopen) and in the
/// `earlier` excused sectors no guaranteed write (issued as op `new_from` or later) covers.
#[allow(clippy::too_many_arguments)]
fn check_after_power_loss(
    world: &Arc<Mutex<World>>,
    rng: &mut Rng,
    array: &Arc<Array>,
    report: &OpenReport,
    history: &History,
    (earlier, new_from): (&HashSet<u64>, usize),
    stats: &mut CrashStats,
    what: &str,
) -> Result<(), String> {
    let g = array.volume().geometry().clone();
    let lost: Vec<usize> = not_current(array)
        .into_iter()
        .chain(report.resynced_roles.iter().copied())
        .chain(report.rebuilding_roles.iter().map(|(r, _)| *r))
        .collect();
    let mut excused = write_hole_excuse(&g, history, &lost, array.volume().capacity());
    let f = history.last_flush_issued();
    let mut rewritten = HashSet::new();
    for o in history.ops[new_from..]
        .iter()
        .filter(|o| history.guaranteed(o, f))
    {
        rewritten.extend(o.offset / SECTOR..(o.offset + o.len) / SECTOR);
    }
    excused.extend(earlier.difference(&rewritten));
    let image = read_volume(world, rng, array)?;
    for (s, sector) in image.chunks(SECTOR_BYTES).enumerate() {
        if excused.contains(&(s as u64)) {
            stats.sectors_write_hole += 1;
            continue;
        }
        history.check_durable(s as u64, sector).map_err(|e| {
            format!(
                "{e} ({what}, lost {lost:?}, at {:?})",
                g.map(s as u64 * SECTOR, SECTOR)
            )
        })?;
        stats.sectors_checked += 1;
    }
    Ok(())
}

/// Runs the pending background resync of `array` to the end, with requests going on in most
/// schedules and a member death or a power loss in the middle of it in some (see the
/// module); the records go clean at the end.
#[allow(clippy::too_many_arguments)]
pub(super) fn finish(
    world: Arc<Mutex<World>>,
    rng: &mut Rng,
    array: Arc<Array>,
    case: &CrashCase,
    disks: usize,
    opts: &ArrayOptions,
    shared: &Rc<Shared>,
    earlier: &HashSet<u64>,
    stats: &mut CrashStats,
) -> Result<Finished, String> {
    if !array.background_pending() {
        let lost = not_current(&array);
        return Ok((world, array, lost));
    }
    stats.background_resyncs += 1;
    stats.background_parity += u64::from(!mirrors_only(&case.tree));
    let g = Geometry::from_tree(case.tree.clone());
    let capacity = array.volume().capacity();
    let lost = not_current(&array);
    // One more member may die during the pass (within tolerance).
    let mut dying = None;
    if rng.chance(300) {
        let m = (0..case.members)
            .find(|&m| !lost.contains(&m) && g.survives(&[lost.clone(), vec![m]].concat()));
        if let Some(m) = m {
            let mut w = world.lock().expect("world");
            w.disks[disk_of(&array, m)].faults = DiskFaults {
                dies_at_step: Some(rng.below(60)),
                ..DiskFaults::default()
            };
            stats.background_member_deaths += 1;
            dying = Some(m);
        }
    }
    // Small sim volumes resync in a few dozen steps (more with requests going on).
    let crash_at = rng.chance(400).then(|| rng.below(80));
    // Requests go on during the pass in most schedules; the crash before it ended: writes
    // acknowledged then may be lost, and reads rebuilt from parity not resynced yet may be
    // wrong in the write hole (with the member that dies counted lost from the start).
    // Sectors excused at the reopen stay excused (a rebuild then may have written what it
    // rebuilt) until a write over them completes.
    let requests = rng.chance(750);
    let new_from = {
        let mut h = shared.history.borrow_mut();
        h.power_lost();
        let rebuilt: Vec<usize> = lost.iter().copied().chain(dying).collect();
        let mut excused = write_hole_excuse(&g, &h, &rebuilt, capacity);
        excused.extend(earlier);
        *shared.excused.borrow_mut() = excused.into_iter().map(|s| (s, u64::MAX)).collect();
        h.ops.len()
    };
    if std::env::var_os("NBRAID_SIM_TRACE").is_some() {
        eprintln!("background: lost {lost:?} dying {dying:?} faults {:?} crash_at {crash_at:?} requests {requests} new ops from {new_from}", world.lock().expect("w").disks.iter().map(|d| d.faults.dies_at_step).collect::<Vec<_>>());
    }
    let outcome = Rc::new(RefCell::new(None));
    let mut exec = Executor::default();
    {
        let (a, out) = (array.clone(), outcome.clone());
        exec.spawn(async move {
            let r = a.background_resync(&PassControl::new(0)).await;
            *out.borrow_mut() = Some(r.map_err(|e| e.to_string()));
        });
    }
    let load = Load {
        capacity,
        width: g.full_stripe_width().unwrap_or(16 * 1024),
        hot_base: rng.below(capacity / SECTOR) * SECTOR / 2,
        mix: [300, 400, 60, 100, 70, 70],
        stream: None,
    };
    let max_in_flight = 2 + rng.below(8) as usize;
    let mut spawn = |exec: &mut Executor, rng: &mut Rng| {
        let running = outcome.borrow().is_none();
        if requests && running && exec.live() < max_in_flight && rng.chance(500) {
            start_request(exec, rng, &array, shared, &load);
            stats.background_requests += 1;
        }
    };
    run_with(
        &mut exec,
        &world,
        rng,
        crash_at,
        "the background resync",
        &mut spawn,
    )?;
    if let Some(v) = shared.violations.borrow().first() {
        return Err(format!("{v} (during the background resync)"));
    }
    // Still excused at the end: no write over them completed.
    let excused: HashSet<u64> = std::mem::take(&mut *shared.excused.borrow_mut())
        .into_iter()
        .filter(|&(_, until)| until == u64::MAX)
        .map(|(s, _)| s)
        .collect();
    if exec.live() == 0 {
        match outcome.borrow_mut().take() {
            Some(Ok(PassState::Done)) => {}
            other => return Err(format!("background resync within tolerance: {other:?}")),
        }
        // Every flushed write reads back after the pass (the excuse as during it).
        let image = read_volume(&world, rng, &array)?;
        let history = shared.history.borrow();
        for (s, sector) in image.chunks(SECTOR_BYTES).enumerate() {
            if !excused.contains(&(s as u64)) {
                history
                    .check_durable(s as u64, sector)
                    .map_err(|e| format!("{e} (after the background resync)"))?;
                stats.sectors_checked += 1;
            }
        }
        drop(history);
        let lost = lost_roles(&world, &array);
        clean_at_the_end(&world, rng, &array)?;
        return Ok((world, array, lost));
    }

    // Power lost in the middle of the pass.
    stats.background_crashes += 1;
    drop(exec);
    drop(array);
    shared.history.borrow_mut().power_lost();
    let (world, array, report) = reopen_after_power_loss(
        &world,
        rng,
        case,
        disks,
        opts,
        true,
        "the background resync",
    )?;
    stats.resynced_bytes += report.resynced_bytes + report.background_bytes;
    // Every flushed write still reads back (mirrors resync what reads touch first).
    let what = format!("after a crash during the background resync: {report:?}");
    let history = shared.history.borrow();
    let earlier = (earlier, new_from);
    check_after_power_loss(
        &world, rng, &array, &report, &history, earlier, stats, &what,
    )?;
    drop(history);
    let a = array.clone();
    let r = drive(&world, rng, async move {
        a.background_resync(&PassControl::new(0)).await
    })?
    .map_err(|e| format!("resumed background resync: {e}"))?;
    if r != PassState::Done || array.background_pending() {
        return Err(format!("resumed background resync did not finish: {r:?}"));
    }
    clean_at_the_end(&world, rng, &array)?;
    let lost = not_current(&array);
    Ok((world, array, lost))
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
