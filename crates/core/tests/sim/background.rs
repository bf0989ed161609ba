//! Background resync in the crash simulator (mirrors-only trees): some reopens serve at once
//! (`Array::open_background`) and the durability check reads the volume *before* the pass
//! ran — reads resync what they touch. Then the pass runs under the simulator's scheduler;
//! in some schedules a member dies during it (within tolerance), in others power is lost in
//! the middle of it: the members' crash images are assembled again (background again), every
//! flushed write must still read back, and the pass finishes. The caller's redundancy views
//! then require every copy to agree.

use super::crash::{read_volume, CrashCase, CrashStats};
use super::disk::{DiskFaults, World, SECTOR_BYTES};
use super::executor::{step_once, Executor};
use super::history::History;
use super::rng::Rng;
use super::run::sim_members;
use futures::future::join_all;
use nbraid_core::metadata::{Array, ArrayOptions, MemberMeta, OpenReport};
use nbraid_core::{Member, PassControl, PassState};
use nbraid_layout::{Geometry, Node};
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::{Arc, Mutex};

const STEP_LIMIT: u64 = 400_000;

/// Whether the tree's redundancy is mirrors only (the trees that resync in the background).
pub fn mirrors_only(n: &Node) -> bool {
    !matches!(n, Node::Parity(_)) && n.children().iter().all(mirrors_only)
}

/// What is left after the background resync: the world and array to check, and the roles
/// not current.
pub type Finished = (Arc<Mutex<World>>, Arc<Array>, Vec<usize>);

/// Runs the pending background resync of `array` to the end, with a member death or a power
/// loss in the middle of it in some schedules (see the module).
#[allow(clippy::too_many_arguments)]
pub fn finish(
    world: Arc<Mutex<World>>,
    rng: &mut Rng,
    array: Arc<Array>,
    case: &CrashCase,
    disks: usize,
    opts: &ArrayOptions,
    history: &History,
    stats: &mut CrashStats,
) -> Result<Finished, String> {
    if !array.background_pending() {
        let lost = not_current(&array);
        return Ok((world, array, lost));
    }
    stats.background_resyncs += 1;
    let g = Geometry::from_tree(case.tree.clone());
    let lost = not_current(&array);
    // One more member may die during the pass (within tolerance).
    if rng.chance(300) {
        let m = (0..case.members)
            .find(|&m| !lost.contains(&m) && g.survives(&[lost.clone(), vec![m]].concat()));
        if let Some(m) = m {
            let mut w = world.lock().expect("world");
            w.disks[disk_of(&array, m)].faults = DiskFaults {
                dies_at_step: Some(rng.below(40)),
                ..DiskFaults::default()
            };
            stats.background_member_deaths += 1;
        }
    }
    // Small sim volumes resync in a few dozen steps.
    let crash_at = rng.chance(400).then(|| rng.below(40));
    let outcome = Rc::new(RefCell::new(None));
    let mut exec = Executor::default();
    {
        let (a, out) = (array.clone(), outcome.clone());
        exec.spawn(async move {
            let r = a.background_resync(&PassControl::new(0)).await;
            *out.borrow_mut() = Some(r.map_err(|e| e.to_string()));
        });
    }
    run_until(&mut exec, &world, rng, crash_at, "the background resync")?;
    if exec.live() == 0 {
        match outcome.borrow_mut().take() {
            Some(Ok(PassState::Done)) => {}
            other => return Err(format!("background resync within tolerance: {other:?}")),
        }
        let lost = lost_roles(&world, &array);
        return Ok((world, array, lost));
    }

    // Power lost in the middle of the pass.
    stats.background_crashes += 1;
    drop(exec);
    drop(array);
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
    // Every flushed write still reads back (reads resync what they touch first).
    let image = read_volume(&world, rng, &array)?;
    for (s, sector) in image.chunks(SECTOR_BYTES).enumerate() {
        history
            .check_durable(s as u64, sector)
            .map_err(|e| format!("{e} (after a crash during the background resync: {report:?})"))?;
        stats.sectors_checked += 1;
    }
    let a = array.clone();
    let r = super::crash::drive(&world, rng, async move {
        a.background_resync(&PassControl::new(0)).await
    })?
    .map_err(|e| format!("resumed background resync: {e}"))?;
    if r != PassState::Done || array.background_pending() {
        return Err(format!("resumed background resync did not finish: {r:?}"));
    }
    let lost = not_current(&array);
    Ok((world, array, lost))
}

/// Runs `exec` until its tasks are done or step `crash_at` (power lost there); a member
/// death that did not come by then does not come later.
pub(super) fn run_until(
    exec: &mut Executor,
    world: &Arc<Mutex<World>>,
    rng: &mut Rng,
    crash_at: Option<u64>,
    what: &str,
) -> Result<(), String> {
    let mut step = 0u64;
    while exec.live() > 0 && Some(step) != crash_at {
        world.lock().expect("world").step = step;
        if !step_once(exec, world, rng) {
            return Err(format!("{what} deadlocked at step {step}"));
        }
        step += 1;
        if step > STEP_LIMIT {
            return Err(format!("{what} does not finish"));
        }
    }
    for d in &mut world.lock().expect("world").disks {
        if !d.dead {
            d.faults.dies_at_step = None;
        }
    }
    Ok(())
}

/// The world after a power loss, the array assembled on it and what the assembly did.
pub type Reopened = (Arc<Mutex<World>>, Arc<Array>, OpenReport);

/// Power lost: the members' crash images (some torn) assembled again — in the background
/// (`Array::open_background`) or not; `during` names what was running.
pub(super) fn reopen_after_power_loss(
    world: &Arc<Mutex<World>>,
    rng: &mut Rng,
    case: &CrashCase,
    disks: usize,
    opts: &ArrayOptions,
    background: bool,
    during: &str,
) -> Result<Reopened, String> {
    let same = |_: usize, m: Arc<dyn Member>| m;
    reopen_wrapped(world, rng, case, disks, opts, background, during, &same)
}

/// [`reopen_after_power_loss`] with disk `i`'s member given as `wrap(i, member)`.
#[allow(clippy::too_many_arguments)]
pub(super) fn reopen_wrapped(
    world: &Arc<Mutex<World>>,
    rng: &mut Rng,
    case: &CrashCase,
    disks: usize,
    opts: &ArrayOptions,
    background: bool,
    during: &str,
    wrap: &dyn Fn(usize, Arc<dyn Member>) -> Arc<dyn Member>,
) -> Result<Reopened, String> {
    let torn = rng.chance(500);
    let images: Vec<Vec<u8>> = {
        let w = world.lock().expect("world");
        w.disks.iter().map(|d| d.crash_image(rng, torn)).collect()
    };
    let world = World::new(images, vec![DiskFaults::default(); disks]);
    let members: Vec<Arc<dyn Member>> = sim_members(&world, disks, case.member_len)
        .into_iter()
        .enumerate()
        .map(|(i, m)| wrap(i, m))
        .collect();
    let (tree, o) = (case.tree.clone(), opts.clone());
    let (array, report) = super::crash::drive(&world, rng, async move {
        let metas = join_all(members.into_iter().map(MemberMeta::load)).await;
        let metas = metas.into_iter().map(Some).collect();
        if background {
            Array::open_background("sim", &tree, metas, o, &|_, _| {}).await
        } else {
            Array::open("sim", &tree, metas, o, &|_, _| {}).await
        }
    })?
    .map_err(|e| format!("reopen after a crash during {during}: {e}"))?;
    Ok((world, Arc::new(array), report))
}

/// The disk serving role `r` (members are named `simN`).
pub(super) fn disk_of(array: &Array, r: usize) -> usize {
    let name = array.volume().member(r).name().to_string();
    name.strip_prefix("sim")
        .and_then(|d| d.parse().ok())
        .unwrap_or(r)
}

/// Roles not current, or whose disk died without the array noticing (no I/O since).
pub(super) fn lost_roles(world: &Arc<Mutex<World>>, array: &Array) -> Vec<usize> {
    let w = world.lock().expect("world");
    (0..array.volume().member_count())
        .filter(|&r| !array.volume().member_is_current(r) || w.disks[disk_of(array, r)].dead)
        .collect()
}

pub(super) fn not_current(array: &Array) -> Vec<usize> {
    (0..array.volume().member_count())
        .filter(|&i| !array.volume().member_is_current(i))
        .collect()
}
