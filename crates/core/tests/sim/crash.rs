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

use super::executor::{step_once, Executor};
use super::history::{perform, History, Kind};
use super::run::{
    choose_failures, in_write_hole, pick_kind, pick_range, sim_members, write_hole_exposure,
};
use futures::future::join_all;
use nbraid_core::metadata::{Array, ArrayOptions, MemberMeta};
use nbraid_core::{CacheMode, Member, PassControl, PassState, ReadPolicy, Volume, VolumeOptions};
use nbraid_layout::{Geometry, Node};
use nbraid_sim::scheduled::{DiskFaults, World, SECTOR_BYTES};
use nbraid_sim::Rng;
use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const SECTOR: u64 = SECTOR_BYTES as u64;
const STEP_LIMIT: u64 = 400_000;

pub struct CrashCase {
    pub name: &'static str,
    /// Leaves start after the metadata area.
    pub tree: Node,
    pub members: usize,
    pub member_len: u64,
    /// The partial-parity log on (the write-hole check on) or off (write-hole sectors only
    /// counted, and checked when `strict`: the guard that the check is real).
    pub ppl: bool,
    pub strict: bool,
    /// The log in this many bytes right before the leaves' regions (config
    /// `write_hole_log_size`; the tree leaves that room) instead of in the metadata area (0).
    pub log_reserve: u64,
    /// One request in three is a sequential writer's next write (whole 4 KiB blocks, up to a
    /// stripe, starting where its previous one ended), so writes meet in stripes: the ones a
    /// partial-parity log may write without flushing first.
    pub sequential: bool,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CrashStats {
    pub runs: u64,
    pub requests: u64,
    pub crashes_mid_flight: u64,
    pub reopened_dirty: u64,
    pub reopened_with_stale: u64,
    pub reopened_degraded: u64,
    pub resynced_bytes: u64,
    /// What full resyncs would have covered (capacity per dirty reopen).
    pub full_resync_bytes: u64,
    pub sectors_checked: u64,
    pub sectors_write_hole: u64,
    /// Sectors in the write hole (rebuilt from parity in a stripe a crash may have torn) that
    /// were not being written, checked exactly (the log's promise).
    pub sectors_write_hole_checked: u64,
    /// Entries the log replayed at reopens.
    pub ppl_entries_replayed: u64,
    pub redundancy_views: u64,
    /// Schedules where a spare was put in a pulled member's role.
    pub rebuilds_started: u64,
    /// Reopens that resumed a rebuild from a checkpoint above 0.
    pub rebuilds_resumed: u64,
    /// Rebuilds that completed (before the crash or after the reopen).
    pub rebuilds_completed: u64,
    /// Schedules that replaced a healthy member, and reopens that found the replacement in
    /// its role.
    pub replaces_started: u64,
    pub replaced_at_reopen: u64,
    /// Reopens that left the resync to the background (mirrors), power losses during it and
    /// member deaths scheduled during it (`background.rs`).
    pub background_resyncs: u64,
    pub background_crashes: u64,
    pub background_member_deaths: u64,
    /// Of those: parity volumes, and requests issued during the pass.
    pub background_parity: u64,
    pub background_requests: u64,
    /// Schedules that scrubbed the reopened array, power losses during it, and reopens that
    /// resumed it from the recorded checkpoint (`scrub.rs`).
    pub scrubs: u64,
    pub scrub_crashes: u64,
    pub scrubs_resumed: u64,
}

impl CrashStats {
    pub fn add(&mut self, o: &CrashStats) {
        self.runs += o.runs;
        self.requests += o.requests;
        self.crashes_mid_flight += o.crashes_mid_flight;
        self.reopened_dirty += o.reopened_dirty;
        self.reopened_with_stale += o.reopened_with_stale;
        self.reopened_degraded += o.reopened_degraded;
        self.resynced_bytes += o.resynced_bytes;
        self.full_resync_bytes += o.full_resync_bytes;
        self.sectors_checked += o.sectors_checked;
        self.sectors_write_hole += o.sectors_write_hole;
        self.sectors_write_hole_checked += o.sectors_write_hole_checked;
        self.ppl_entries_replayed += o.ppl_entries_replayed;
        self.redundancy_views += o.redundancy_views;
        self.rebuilds_started += o.rebuilds_started;
        self.rebuilds_resumed += o.rebuilds_resumed;
        self.rebuilds_completed += o.rebuilds_completed;
        self.replaces_started += o.replaces_started;
        self.replaced_at_reopen += o.replaced_at_reopen;
        self.background_resyncs += o.background_resyncs;
        self.background_crashes += o.background_crashes;
        self.background_member_deaths += o.background_member_deaths;
        self.background_parity += o.background_parity;
        self.background_requests += o.background_requests;
        self.scrubs += o.scrubs;
        self.scrub_crashes += o.scrub_crashes;
        self.scrubs_resumed += o.scrubs_resumed;
    }
}

/// A schedule's array options: write-through or a small write-back cache, a read policy,
/// a bitmap chunk of 4-16 KiB, the case's log, and the most eager bitmap clearing (the most
/// bitmap writes racing the data).
pub(super) fn array_options(rng: &mut Rng, case: &CrashCase, width: u64) -> ArrayOptions {
    let cache = if rng.chance(500) {
        CacheMode::WriteThrough
    } else {
        CacheMode::WriteBack {
            bytes: width * (1 + rng.below(4)),
        }
    };
    ArrayOptions {
        volume: VolumeOptions {
            read_policy: *rng.pick(&ReadPolicy::ALL),
            cache,
            cache_max_age: None,
            ..VolumeOptions::default()
        },
        bitmap_chunk_bytes: Some(4096 << rng.below(3)),
        ppl: case.ppl,
        bitmap_clear_delay: Duration::ZERO,
        ppl_area_before_region_bytes: (case.log_reserve > 0).then_some(case.log_reserve),
        checksum_area_before_region_bytes: checksum_reserve(case),
        force_assembly: false,
        member_ids: Vec::new(),
        ..ArrayOptions::default()
    }
}

/// Per-block checksums in the room a case's tree leaves before its regions beyond the
/// metadata area and the log's reserve (`crash_checksum.rs`); none when there is none.
fn checksum_reserve(case: &CrashCase) -> Option<u64> {
    let mut start = u64::MAX;
    case.tree.visit_members(&mut |m| start = start.min(m.start));
    let room = start.checked_sub(nbraid_core::metadata::METADATA_AREA_BYTES + case.log_reserve)?;
    (room > 0).then_some(room)
}

/// Where a schedule's requests go: the volume's size, its full stripe, the base of the hot
/// area, the mix of kinds.
pub(super) struct Load {
    pub capacity: u64,
    pub width: u64,
    pub hot_base: u64,
    pub mix: [u64; 6],
    /// Where the sequential writer writes next (`CrashCase::sequential`).
    pub stream: Option<Rc<Cell<u64>>>,
}

/// Starts one request of `load` — or, one time in fifty, an idle point (the records go
/// clean if nothing is in flight), or, one time in twenty-five, the write-back cache's
/// background flusher step (every cached stripe not being written goes to the members,
/// racing the requests, flushes and the power loss as the flusher thread would).
pub(super) fn start_request(
    exec: &mut Executor,
    rng: &mut Rng,
    array: &Arc<Array>,
    shared: &Rc<Shared>,
    load: &Load,
) {
    if rng.chance(20) {
        let a = array.clone();
        let sh = shared.clone();
        exec.spawn(async move {
            if let Err(e) = a.mark_clean().await {
                sh.violations
                    .borrow_mut()
                    .push(format!("mark_clean failed within tolerance: {e}"));
            }
        });
    } else if rng.chance(40) {
        let a = array.clone();
        exec.spawn(async move { a.volume().destage_aged(Duration::ZERO).await });
    } else if let Some(at) = load.stream.as_ref().filter(|_| rng.chance(333)) {
        let block = 8 * SECTOR;
        let offset = at.get();
        let len =
            (block * (1 + rng.below((load.width / block).max(1)))).min(load.capacity - offset);
        at.set(if offset + len >= load.capacity {
            0
        } else {
            offset + len
        });
        spawn(exec, array, shared, Kind::Write { fua: false }, offset, len);
    } else {
        let kind = pick_kind(rng, &load.mix);
        let (offset, len) = pick_range(rng, load.capacity, load.width, load.hot_base);
        spawn(exec, array, shared, kind, offset, len);
    }
}

/// Runs `fut` to completion, completing member operations in seeded random order.
pub(super) fn drive<T: 'static>(
    world: &Arc<Mutex<World>>,
    rng: &mut Rng,
    fut: impl Future<Output = T> + 'static,
) -> Result<T, String> {
    let out = Rc::new(RefCell::new(None));
    let mut exec = Executor::default();
    let o = out.clone();
    exec.spawn(async move {
        *o.borrow_mut() = Some(fut.await);
    });
    let mut steps = 0u64;
    while exec.live() > 0 {
        if !step_once(&mut exec, world, rng) {
            return Err("deadlock outside the request schedule".into());
        }
        steps += 1;
        if steps > STEP_LIMIT {
            return Err("an operation outside the schedule does not finish".into());
        }
    }
    let v = out.borrow_mut().take();
    v.ok_or_else(|| "task vanished".into())
}

#[derive(Default)]
pub(super) struct Shared {
    pub history: RefCell<History>,
    pub violations: RefCell<Vec<String>>,
    /// Sectors a read may return anything for (a torn stripe rebuilt from parity, being
    /// written at the last power loss), with the event clock from which on they may not: a
    /// write over them completed then (`u64::MAX`: none yet). A read issued before that
    /// clock is still excused.
    pub excused: RefCell<HashMap<u64, u64>>,
}

pub fn run_crash(case: &CrashCase, seed: u64) -> Result<CrashStats, String> {
    let mut rng = Rng::for_schedule(seed);
    let n = case.members;
    let g = Geometry::from_tree(case.tree.clone());
    let mut stats = CrashStats {
        runs: 1,
        ..CrashStats::default()
    };
    let width = g.full_stripe_width().unwrap_or(16 * 1024);
    let opts = array_options(&mut rng, case, width);

    // Healing schedules have one more disk: the spare.
    let heal = rng.chance(400) && (0..n).any(|m| g.survives(&[m]));
    let disks = n + usize::from(heal);
    let world = World::new(
        vec![vec![0u8; case.member_len as usize]; disks],
        vec![DiskFaults::default(); disks],
    );
    let members = sim_members(&world, n, case.member_len);
    let (tree, o) = (case.tree.clone(), opts.clone());
    let array = drive(&world, &mut rng, async move {
        let metas = join_all(members.into_iter().map(MemberMeta::load)).await;
        Array::create("sim", tree, metas, o, true, &|_, _| {}).await
    })?
    .map_err(|e| format!("create: {e}"))?
    .0;
    let array = Arc::new(array);
    let capacity = array.volume().capacity();
    // Small windows (rounded up to whole full stripes), so checkpoints land mid-rebuild.
    array.set_rebuild_window_bytes(4096 << rng.below(3));

    // Faults within tolerance, from now on.
    let steps = 300 + rng.below(1200);
    let failing = if rng.chance(500) {
        choose_failures(&mut rng, &g, n)
    } else {
        Vec::new()
    };
    {
        let mut w = world.lock().expect("world");
        for &m in &failing {
            w.disks[m].faults = DiskFaults {
                dies_at_step: rng.chance(700).then(|| rng.below(steps)),
                read_error_per_mille: if rng.chance(500) { rng.below(60) } else { 0 },
                flush_error_per_mille: if rng.chance(300) { rng.below(100) } else { 0 },
            };
        }
    }
    let torn = rng.chance(500);
    if std::env::var_os("NBRAID_SIM_TRACE").is_some() {
        eprintln!(
            "crash: failing {failing:?} faults {:?} steps {steps}",
            world
                .lock()
                .expect("w")
                .disks
                .iter()
                .map(|d| (
                    d.faults.dies_at_step,
                    d.faults.read_error_per_mille,
                    d.faults.flush_error_per_mille
                ))
                .collect::<Vec<_>>()
        );
    }
    // The member pulled for the rebuild: one more loss the layout still survives, that the
    // engine can rebuild with the failing members lost too — in a declared tree surviving
    // is not enough: a RAID 5 group under a mirror that lost another member takes no writes,
    // so nothing reaches its new member (`Geometry::rebuilds`; the rebuild refuses it).
    let pulled = (0..n).find(|&m| {
        let lost = [failing.clone(), vec![m]].concat();
        !failing.contains(&m) && g.survives(&lost) && g.rebuilds(m, &lost)
    });
    let heal_at = (heal && pulled.is_some()).then(|| rng.below(steps));
    // Replace instead of pull-and-rebuild: the member keeps serving until the swap.
    let replace = rng.chance(400);
    let shared = Rc::new(Shared {
        history: RefCell::new(History::new(capacity)),
        ..Shared::default()
    });
    let hot_base = rng.below(
        (capacity / SECTOR)
            .saturating_sub(2 * width / SECTOR)
            .max(1),
    ) * SECTOR;
    let max_in_flight = 1 + rng.below(12) as usize;
    let spawn_per_mille = 100 + rng.below(500);
    let stream = case.sequential.then(|| Rc::new(Cell::new(0)));
    let mix = [300, 400, 60, 100, 70, 70];
    let mut exec = Executor::default();
    let completed = Rc::new(RefCell::new(false));
    let crash_mid_flight = rng.chance(750);
    let mut step = 0u64;
    loop {
        let spawning = step < steps;
        if !spawning && (crash_mid_flight || exec.live() == 0) {
            break;
        }
        world.lock().expect("world").step = step;
        if heal_at == Some(step) {
            let m = pulled.expect("chosen");
            if replace {
                stats.replaces_started += 1;
            } else {
                stats.rebuilds_started += 1;
            }
            let spare = sim_members(&world, n + 1, case.member_len)
                .pop()
                .expect("spare");
            let a = array.clone();
            let sh = shared.clone();
            let done = completed.clone();
            exec.spawn(async move {
                let meta = MemberMeta::load(spare).await;
                let started = if replace {
                    a.replace(m, meta).await
                } else {
                    a.volume().fail_member(m, "sim: pulled for a rebuild");
                    a.rebuild_onto(m, meta).await
                };
                let r = match started {
                    Ok(()) => a.rebuild(&PassControl::new(0)).await,
                    Err(e) => Err(e),
                };
                match r {
                    Ok(r) if r.state == PassState::Done => *done.borrow_mut() = true,
                    Ok(r) => sh
                        .violations
                        .borrow_mut()
                        .push(format!("rebuild stopped: {r:?}")),
                    Err(e) => sh
                        .violations
                        .borrow_mut()
                        .push(format!("rebuild of role {m} within tolerance failed: {e}")),
                }
            });
        }
        if spawning && exec.live() < max_in_flight && rng.chance(spawn_per_mille) {
            let load = Load {
                capacity,
                width,
                hot_base,
                mix,
                stream: stream.clone(),
            };
            start_request(&mut exec, &mut rng, &array, &shared, &load);
            stats.requests += 1;
        }
        if !step_once(&mut exec, &world, &mut rng) && exec.live() > 0 {
            return Err(format!("deadlock at step {step}"));
        }
        if let Some(v) = shared.violations.borrow().first() {
            return Err(v.clone());
        }
        step += 1;
        if step > steps + STEP_LIMIT {
            return Err("starvation".into());
        }
    }
    stats.crashes_mid_flight += u64::from(exec.live() > 0);
    stats.rebuilds_completed += u64::from(*completed.borrow() && !replace);

    // Power loss.
    let images: Vec<Vec<u8>> = {
        let w = world.lock().expect("world");
        w.disks
            .iter()
            .map(|d| d.crash_image(&mut rng, torn))
            .collect()
    };
    let lost_before: Vec<usize> = {
        let w = world.lock().expect("world");
        (0..n)
            .filter(|&i| w.disks[i].dead || array.volume().member_is_failed(i))
            .collect()
    };
    drop(exec);
    drop(array);
    // Sometimes a member that was fine is deleted before the restart.
    let deleted = (!heal && rng.chance(250))
        .then(|| {
            (0..n).find(|m| {
                !lost_before.contains(m) && g.survives(&[lost_before.clone(), vec![*m]].concat())
            })
        })
        .flatten();

    let world = World::new(images, vec![DiskFaults::default(); disks]);
    // Every disk is offered (the spare too): superblocks say who plays which role.
    let members = sim_members(&world, disks, case.member_len);
    let (tree, o) = (case.tree.clone(), opts.clone());
    // Sometimes the volume serves at once and resyncs in the background (`background.rs`).
    let background = super::background::serves_before_resync(case) && rng.chance(600);
    let (array, report) = drive(&world, &mut rng, async move {
        let mut metas = Vec::new();
        for (i, m) in members.into_iter().enumerate() {
            metas.push(if Some(i) == deleted {
                None
            } else {
                Some(MemberMeta::load(m).await)
            });
        }
        if background {
            Array::open_background("sim", &tree, metas, o, &|_, _| {}).await
        } else {
            Array::open("sim", &tree, metas, o, &|_, _| {}).await
        }
    })?
    .map_err(|e| {
        format!("reopen after the crash (deleted {deleted:?}, lost {lost_before:?}): {e}")
    })?;
    let array = Arc::new(array);
    if !report.rebuilding_roles.is_empty() {
        stats.rebuilds_resumed += u64::from(report.rebuilding_roles.iter().any(|&(_, c)| c > 0));
        let a = array.clone();
        let r = drive(&world, &mut rng, async move {
            a.rebuild(&PassControl::new(0)).await
        })?
        .map_err(|e| format!("resumed rebuild failed (report {report:?}): {e}"))?;
        if r.state != PassState::Done || r.completed.is_empty() {
            return Err(format!("resumed rebuild did not complete: {r:?}"));
        }
        stats.rebuilds_completed += 1;
    }
    // Which disk serves each role now.
    let role_disks: Vec<usize> = (0..n)
        .map(|r| {
            let name = array.volume().member(r).name().to_string();
            name.strip_prefix("sim")
                .and_then(|d| d.parse().ok())
                .unwrap_or(r)
        })
        .collect();
    stats.replaced_at_reopen += u64::from(heal && replace && role_disks.contains(&n));
    if !report.was_clean {
        stats.reopened_dirty += 1;
        stats.full_resync_bytes += capacity;
    }
    stats.reopened_with_stale += u64::from(!report.resynced_roles.is_empty());
    stats.resynced_bytes += report.resynced_bytes + report.background_bytes;
    stats.ppl_entries_replayed += report.ppl.entries;
    let not_current: Vec<usize> = (0..n)
        .filter(|&i| !array.volume().member_is_current(i))
        .collect();
    stats.reopened_degraded += u64::from(!not_current.is_empty());

    // Durability: read everything back.
    let image = read_volume(&world, &mut rng, &array)?;
    let history = shared.history.borrow();
    let read_back = history.ops.len();
    // Chunks rebuilt from parity in stripes a crash may have torn: on members lost now, and
    // on stale members rebuilt at the reopen.
    let rebuilt: Vec<usize> = not_current
        .iter()
        .chain(&report.resynced_roles)
        .chain(report.rebuilding_roles.iter().map(|(r, _)| r))
        .copied()
        .collect();
    let exposed = write_hole_exposure(&g, &history, &rebuilt);
    let being_written = being_written(&history);
    let mut excused = HashSet::new();
    for (s, sector) in image.chunks(SECTOR_BYTES).enumerate() {
        let s = s as u64;
        if exposed
            .as_ref()
            .is_some_and(|e| in_write_hole(&g, e, &rebuilt, s))
        {
            if (!case.ppl && !case.strict) || being_written.contains(&s) {
                stats.sectors_write_hole += 1;
                excused.insert(s);
                continue;
            }
            stats.sectors_write_hole_checked += 1;
        }
        history
            .check_durable(s, sector)
            .map_err(|e| format!("{e} (report {report:?}) at {:?}", g.map(s * SECTOR, SECTOR)))?;
        stats.sectors_checked += 1;
    }

    // The background resync (if any) finishes, with requests going on, maybe through a
    // member death or a power loss.
    drop(history);
    let (world, array, lost) = super::background::finish(
        world, &mut rng, array, case, disks, &opts, &shared, &excused, &mut stats,
    )?;
    let history = shared.history.borrow();
    stats.requests += (history.ops.len() - read_back) as u64;
    // A scrub (if any) runs, maybe through a member death or a power loss.
    let (world, array, not_current) = super::scrub::maybe_scrub(
        (world, array, lost),
        &mut rng,
        case,
        disks,
        &opts,
        &history,
        &mut stats,
    )?;
    // Redundancy agrees: every view that loses up to two more members reads the same bytes.
    drop(array);
    let what = format!("report {report:?}");
    stats.redundancy_views += redundancy_agrees(
        &world,
        &mut rng,
        case,
        &role_disks,
        &not_current,
        &history,
        &what,
    )?;
    Ok(stats)
}

/// Every view of the members in `role_disks` that loses up to two more members than
/// `not_current` (within tolerance) reads the same bytes: copies and parity agree. Returns
/// the views checked; `what` goes into the error.
pub(super) fn redundancy_agrees(
    world: &Arc<Mutex<World>>,
    rng: &mut Rng,
    case: &CrashCase,
    role_disks: &[usize],
    not_current: &[usize],
    history: &History,
    what: &str,
) -> Result<u64, String> {
    let g = Geometry::from_tree(case.tree.clone());
    let n = case.members;
    let mut views_checked = 0;
    let others: Vec<usize> = (0..n).filter(|m| !not_current.contains(m)).collect();
    let mut views = Vec::new();
    for (i, &a) in others.iter().enumerate() {
        views.push(vec![a]);
        for &b in &others[i + 1..] {
            views.push(vec![a, b]);
        }
    }
    let baseline = read_view(world, rng, &g, case, role_disks, not_current)?;
    for v in views {
        let lost = [not_current.to_vec(), v].concat();
        if !g.survives(&lost) {
            continue;
        }
        let got = read_view(world, rng, &g, case, role_disks, &lost)?;
        if let Some(at) = (0..got.len()).find(|&i| got[i] != baseline[i]) {
            let s = at / SECTOR_BYTES * SECTOR_BYTES;
            let id = |b: &[u8]| u64::from_le_bytes(b[s..s + 8].try_into().expect("8"));
            let ops: Vec<String> = history
                .ops
                .iter()
                .enumerate()
                .filter(|(_, o)| o.offset <= at as u64 && (at as u64) < o.offset + o.len)
                .map(|(i, o)| format!("{i}:{o:?}"))
                .collect();
            return Err(format!(
                "writer ids seen {} vs {}; ops over the byte: {ops:?}; ",
                id(&got),
                id(&baseline)
            ) + &format!(
                "after the resync, the volume read without members {lost:?} differs at byte {at} from the read without {not_current:?}: copies or parity disagree ({what})"
            ));
        }
        views_checked += 1;
    }
    Ok(views_checked)
}

/// Sectors some write not guaranteed durable covers (a crash may have torn them).
pub(super) fn being_written(h: &History) -> std::collections::HashSet<u64> {
    h.unguaranteed_writes()
        .iter()
        .flat_map(|o| o.offset / SECTOR..(o.offset + o.len).div_ceil(SECTOR))
        .collect()
}

pub(super) fn spawn(
    exec: &mut Executor,
    array: &Arc<Array>,
    shared: &Rc<Shared>,
    kind: Kind,
    offset: u64,
    len: u64,
) {
    let (offset, len) = if kind == Kind::Flush {
        (0, 0)
    } else {
        (offset, len)
    };
    let id = shared.history.borrow_mut().issue(kind, offset, len);
    let a = array.clone();
    let shared = shared.clone();
    exec.spawn(async move {
        let result = perform(&*a, id, kind, offset, len).await;
        shared.history.borrow_mut().complete(id, result.is_ok());
        if result.is_ok() && matches!(kind, Kind::Write { .. } | Kind::Zero { .. }) {
            let now = shared.history.borrow().now();
            let mut excused = shared.excused.borrow_mut();
            for s in offset / SECTOR..(offset + len) / SECTOR {
                if let Some(until) = excused.get_mut(&s) {
                    *until = (*until).min(now);
                }
            }
        }
        let verdict = match &result {
            Err(e) => Err(format!(
                "op {id} ({kind:?} {offset}+{len}) failed within tolerance: {e}"
            )),
            Ok(Some(buf)) => {
                let history = shared.history.borrow();
                let issued = history.ops[id].issued;
                let excused: HashSet<u64> = (shared.excused.borrow().iter())
                    .filter(|&(_, &until)| until > issued)
                    .map(|(&s, _)| s)
                    .collect();
                history.check_read_except(id, buf, &excused)
            }
            Ok(None) => Ok(()),
        };
        if let Err(v) = verdict {
            shared.violations.borrow_mut().push(v);
        }
    });
}

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

/// The volume's bytes as a plain volume over the same images reads them with `lost` failed.
fn read_view(
    world: &Arc<Mutex<World>>,
    rng: &mut Rng,
    g: &Geometry,
    case: &CrashCase,
    role_disks: &[usize],
    lost: &[usize],
) -> Result<Vec<u8>, String> {
    let disks = sim_members(
        world,
        role_disks
            .len()
            .max(*role_disks.iter().max().unwrap_or(&0) + 1),
        case.member_len,
    );
    let members: Vec<Arc<dyn Member>> = role_disks.iter().map(|&d| disks[d].clone()).collect();
    debug_assert_eq!(members.len(), case.members);
    let opts = VolumeOptions {
        members_known_zero: true, // read-only view: parity taken as written
        cache: CacheMode::WriteThrough,
        ..VolumeOptions::default()
    };
    let vol = Arc::new(Volume::new(g.clone(), members, opts).map_err(|e| e.to_string())?);
    for &m in lost {
        vol.fail_member(m, "view");
    }
    drive(world, rng, async move {
        let capacity = vol.capacity();
        let mut out = Vec::with_capacity(capacity as usize);
        let piece = 16 * 1024;
        let mut at = 0;
        while at < capacity {
            let b = vol
                .read(at, piece.min(capacity - at))
                .await
                .map_err(|e| format!("view read: {e}"))?;
            out.extend_from_slice(&b);
            at += piece;
        }
        Ok(out)
    })?
}
