//! A simulated array's life over the scheduled members: created, read back whole, assembled
//! again from the crash images after a power loss, and asked which disk serves which role.

use super::case::CrashCase;
use super::executor::drive;
use futures::future::join_all;
use nbraid_core::metadata::{Array, ArrayOptions, MemberMeta, OpenReport};
use nbraid_core::Member;
use nbraid_sim::scheduled::{DiskFaults, ScheduledMember, World};
use nbraid_sim::Rng;
use std::sync::{Arc, Mutex};

/// What assembling a schedule's array takes: the case (tree, members), the disks offered
/// (the members, and a spare in healing schedules) and the array's options.
pub(super) struct Setup<'a> {
    pub case: &'a CrashCase,
    pub disks: usize,
    pub opts: ArrayOptions,
}

/// An array and the world its disks live in, from one power-up to the next power loss.
pub(super) struct Powered {
    pub world: Arc<Mutex<World>>,
    pub array: Arc<Array>,
}

/// The first `n` disks of `world` as members of `len` bytes (named `simN`).
pub fn sim_members(world: &Arc<Mutex<World>>, n: usize, len: u64) -> Vec<Arc<dyn Member>> {
    (0..n)
        .map(|i| Arc::new(ScheduledMember::new(world.clone(), i, len)) as Arc<dyn Member>)
        .collect()
}

/// Creates the case's array over `members` (superblocks written).
pub(super) fn create(
    world: &Arc<Mutex<World>>,
    rng: &mut Rng,
    setup: &Setup,
    members: Vec<Arc<dyn Member>>,
) -> Result<Arc<Array>, String> {
    let (tree, o) = (setup.case.tree.clone(), setup.opts.clone());
    let array = drive(world, rng, async move {
        let metas = join_all(members.into_iter().map(MemberMeta::load)).await;
        Array::create("sim", tree, metas, o, true, &|_, _| {}).await
    })?
    .map_err(|e| format!("create: {e}"))?
    .0;
    Ok(Arc::new(array))
}

/// Reads the whole volume (16 KiB requests, all in flight together).
pub(super) fn read_volume(
    world: &Arc<Mutex<World>>,
    rng: &mut Rng,
    array: &Arc<Array>,
) -> Result<Vec<u8>, String> {
    let a = array.clone();
    drive(world, rng, async move {
        let capacity = a.volume().capacity();
        let piece = 16 * 1024;
        let reads = (0..capacity).step_by(piece as usize).map(|at| {
            let a = a.clone();
            async move { a.read(at, piece.min(capacity - at)).await }
        });
        let mut out = Vec::with_capacity(capacity as usize);
        for r in join_all(reads).await {
            out.extend_from_slice(&r.map_err(|e| format!("read back: {e}"))?);
        }
        Ok(out)
    })?
}

/// The world after a power loss, the array assembled on it and what the assembly did.
pub type Reopened = (Arc<Mutex<World>>, Arc<Array>, OpenReport);

/// Power lost: the members' crash images (some torn) assembled again — in the background
/// (`Array::open_background`) or not; `during` names what was running.
pub(super) fn reopen_after_power_loss(
    world: &Arc<Mutex<World>>,
    rng: &mut Rng,
    setup: &Setup,
    background: bool,
    during: &str,
) -> Result<Reopened, String> {
    let same = |_: usize, m: Arc<dyn Member>| m;
    reopen_wrapped(world, rng, setup, background, during, &same)
}

/// [`reopen_after_power_loss`] with disk `i`'s member given as `wrap(i, member)`.
pub(super) fn reopen_wrapped(
    world: &Arc<Mutex<World>>,
    rng: &mut Rng,
    setup: &Setup,
    background: bool,
    during: &str,
    wrap: &dyn Fn(usize, Arc<dyn Member>) -> Arc<dyn Member>,
) -> Result<Reopened, String> {
    let (disks, case) = (setup.disks, setup.case);
    let torn = rng.chance(500);
    let world = World::new(
        crash_images(world, rng, torn),
        vec![DiskFaults::default(); disks],
    );
    let members: Vec<Arc<dyn Member>> = sim_members(&world, disks, case.member_len)
        .into_iter()
        .enumerate()
        .map(|(i, m)| wrap(i, m))
        .collect();
    let (tree, o) = (case.tree.clone(), reopen_options(setup));
    let (array, report) = drive(&world, rng, async move {
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

/// The options a reopen after a power loss uses: the case's, forced where some parity group
/// is not logged (the log off, or a group over mirrors). A dirty start with a role such a
/// group rebuilds is refused unless forced (md's `start_dirty_degraded`); these cases study
/// what such a start loses, so they force it (nothing else changes: every reopen here is
/// within the tolerance, where forcing takes no member back).
pub(super) fn reopen_options(setup: &Setup) -> ArrayOptions {
    ArrayOptions {
        force_assembly: !super::background::serves_before_resync(setup.case),
        ..setup.opts.clone()
    }
}

/// What every disk of `world` keeps through a power loss (`torn`: writes in flight may land
/// in part).
pub fn crash_images(world: &Arc<Mutex<World>>, rng: &mut Rng, torn: bool) -> Vec<Vec<u8>> {
    let w = world.lock().expect("world");
    w.disks.iter().map(|d| d.crash_image(rng, torn)).collect()
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

/// Roles not current.
pub(super) fn not_current(array: &Array) -> Vec<usize> {
    (0..array.volume().member_count())
        .filter(|&i| !array.volume().member_is_current(i))
        .collect()
}
