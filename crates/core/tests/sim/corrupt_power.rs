//! Silent corruption and power loss in one seeded schedule (`crash_corrupt_power.rs`).
//!
//! An array with per-block checksums is filled, flushed and started again cleanly, so every
//! block has a trusted checksum. Then the schedule runs requests in the *hot* half of every
//! member region while bytes rot on the medium (durably, racing the requests and the power
//! loss) in the *cold* half, on at most as many members per stripe row as the level
//! tolerates. Power is lost at a seeded step, mid-flight or not; the array is opened again
//! (unclean: the resync) with the members returning another block's bytes on reads and
//! landing repair writes on another block ([`nbraid_sim::Corrupting`]), and:
//! - every write acknowledged before a completed flush reads back, a write in flight reads old
//!   or new (per sector), and nothing reads as an error (the corruption is within tolerance);
//! - no member is failed (not for a checksum that lagged its data, not for corruption within
//!   tolerance);
//! - a scrub with repair names every bad block it finds as repaired (never unrepairable),
//!   leaves the volume reading the same bytes (nothing "repaired" into garbage), and a second
//!   scrub finds nothing.
//!
//! Why the split: after an unclean shutdown the checksums of every 2 MiB group written since
//! the open are dropped (the price of never reading a lagging checksum as an error: see
//! `crate::checksum`), so corruption there is not detectable by design; the cold half keeps
//! its checksums through the crash, and that is where the corruption goes.

use super::array::read_volume;
use super::clients::{spawn, Shared};
use super::executor::{drive, step_once, Executor};
use super::history::{History, Kind};
use nbraid_core::checksum::BLOCK_BYTES;
use nbraid_core::metadata::{Array, ArrayOptions, MemberMeta};
use nbraid_core::{CacheMode, Member, MemberState, ReadPolicy, ScrubControl, VolumeOptions};
use nbraid_layout::Node;
use nbraid_sim::scheduled::{DiskFaults, ScheduledMember, World, SECTOR_BYTES};
use nbraid_sim::{Corrupting, Rng};
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::{Arc, Mutex};

const SECTOR: u64 = SECTOR_BYTES as u64;
const STEP_LIMIT: u64 = 2_000_000;

pub struct CorruptPowerCase {
    pub name: String,
    /// Leaves start at `region_start` on every member, `region_len` long (two checksum groups
    /// or more: the first half is hot, the rest cold).
    pub tree: Node,
    pub members: usize,
    pub member_len: u64,
    pub region_start: u64,
    pub region_len: u64,
    /// Bytes of a member's rows one "stripe row" of the corruption budget spans (the strip).
    pub row_bytes: u64,
    /// Members per stripe row that may be corrupted.
    pub tolerance: usize,
}

#[derive(Clone, Copy, Debug, Default)]
pub struct CorruptPowerStats {
    pub runs: u64,
    pub requests: u64,
    pub crashes_mid_flight: u64,
    pub corruptions: u64,
    pub findings: u64,
    pub sectors_checked: u64,
}

impl CorruptPowerStats {
    pub fn add(&mut self, o: &CorruptPowerStats) {
        self.runs += o.runs;
        self.requests += o.requests;
        self.crashes_mid_flight += o.crashes_mid_flight;
        self.corruptions += o.corruptions;
        self.findings += o.findings;
        self.sectors_checked += o.sectors_checked;
    }
}

type Disk = Corrupting<ScheduledMember>;

/// The members of `world` behind corrupting wrappers that touch only cold rows, each stripe
/// row on at most `tolerance` members.
fn corrupting_members(
    world: &Arc<Mutex<World>>,
    case: &CorruptPowerCase,
    seed: u64,
) -> Vec<Arc<Disk>> {
    let n = case.members;
    let first = case.region_start / BLOCK_BYTES;
    let blocks = case.region_len / BLOCK_BYTES;
    let cold = first + blocks / 2..first + blocks;
    let row_blocks = case.row_bytes.max(BLOCK_BYTES) / BLOCK_BYTES;
    let tolerance = case.tolerance;
    (0..n)
        .map(|m| {
            let cold = cold.clone();
            let may = Box::new(move |b: u64| {
                cold.contains(&b)
                    && (0..tolerance)
                        .any(|k| ((b - first) / row_blocks + k as u64) % n as u64 == m as u64)
            });
            let inner = ScheduledMember::new(world.clone(), m, case.member_len);
            Arc::new(Corrupting::new(
                inner,
                seed ^ ((m as u64 + 1) * 0x9e37),
                first + blocks,
                may,
            ))
        })
        .collect()
}

fn options(rng: &mut Rng, case: &CorruptPowerCase) -> ArrayOptions {
    let cache = if rng.chance(500) {
        CacheMode::WriteThrough
    } else {
        CacheMode::WriteBack { bytes: 256 << 10 }
    };
    ArrayOptions {
        volume: VolumeOptions {
            read_policy: *rng.pick(&ReadPolicy::ALL),
            cache,
            cache_max_age: None,
            ..VolumeOptions::default()
        },
        bitmap_chunk_bytes: Some(64 << 10),
        // The log of 1 MiB strips needs a reserve the metadata area lacks; with no member lost
        // the write hole does not show, and the resync mends the parity either way.
        ppl: case.row_bytes <= 64 << 10,
        checksum_area_before_region_bytes: Some(
            case.region_start - nbraid_core::metadata::METADATA_AREA_BYTES,
        ),
        ..ArrayOptions::default()
    }
}

/// Opens (or with `create`, creates) the array over `disks`; whether it was clean.
fn open(
    world: &Arc<Mutex<World>>,
    rng: &mut Rng,
    case: &CorruptPowerCase,
    disks: &[Arc<Disk>],
    opts: &ArrayOptions,
    create: bool,
) -> Result<(Arc<Array>, bool), String> {
    let members: Vec<Arc<dyn Member>> =
        disks.iter().map(|d| d.clone() as Arc<dyn Member>).collect();
    let (tree, o) = (case.tree.clone(), opts.clone());
    let opened = drive(world, rng, async move {
        let mut metas = Vec::new();
        for m in members {
            metas.push(MemberMeta::load(m).await);
        }
        if create {
            Array::create("sim", tree, metas, o, true, &|_, _| {}).await
        } else {
            Array::open(
                "sim",
                &tree,
                metas.into_iter().map(Some).collect(),
                o,
                &|_, _| {},
            )
            .await
        }
    })?;
    opened
        .map(|(a, r)| (Arc::new(a), r.was_clean))
        .map_err(|e| format!("open (create {create}): {e}"))
}

/// Runs every task of `exec` to completion.
fn settle(
    exec: &mut Executor,
    world: &Arc<Mutex<World>>,
    rng: &mut Rng,
    shared: &Shared,
) -> Result<(), String> {
    let mut steps = 0;
    while exec.live() > 0 {
        if !step_once(exec, world, rng) {
            return Err("deadlock".into());
        }
        steps += 1;
        if steps > STEP_LIMIT {
            return Err("a request does not finish".into());
        }
    }
    shared.first_violation()
}

/// The images after a clean shutdown: every completed write landed.
fn clean_shutdown(world: &Arc<Mutex<World>>) -> Arc<Mutex<World>> {
    let w = world.lock().expect("world");
    let images = w.disks.iter().map(|d| d.volatile.clone()).collect();
    World::new(images, vec![DiskFaults::default(); w.disks.len()])
}

/// The images every disk keeps through a power loss.
fn power_loss(world: &Arc<Mutex<World>>, rng: &mut Rng, torn: bool) -> Arc<Mutex<World>> {
    let w = world.lock().expect("world");
    let images = w.disks.iter().map(|d| d.crash_image(rng, torn)).collect();
    World::new(images, vec![DiskFaults::default(); w.disks.len()])
}

/// One schedule (see the module docs).
pub fn run_corrupt_power(case: &CorruptPowerCase, seed: u64) -> Result<CorruptPowerStats, String> {
    let mut rng = Rng::for_schedule(seed);
    let mut stats = CorruptPowerStats {
        runs: 1,
        ..CorruptPowerStats::default()
    };
    let opts = options(&mut rng, case);
    let world = World::new(
        vec![vec![0u8; case.member_len as usize]; case.members],
        vec![DiskFaults::default(); case.members],
    );
    let disks = corrupting_members(&world, case, seed);
    let array = open(&world, &mut rng, case, &disks, &opts, true)?.0;
    let capacity = array.volume().capacity();
    let shared = Rc::new(Shared {
        history: RefCell::new(History::new(capacity)),
        ..Shared::default()
    });
    // Every block written, flushed, the records clean: a clean start trusts every checksum.
    let mut exec = Executor::default();
    let piece = 64 << 10;
    for at in (0..capacity).step_by(piece as usize) {
        spawn(
            &mut exec,
            &array,
            &shared,
            Kind::Write { fua: false },
            at,
            piece.min(capacity - at),
        );
    }
    settle(&mut exec, &world, &mut rng, &shared)?;
    spawn(&mut exec, &array, &shared, Kind::Flush, 0, 0);
    settle(&mut exec, &world, &mut rng, &shared)?;
    let a = array.clone();
    drive(&world, &mut rng, async move { a.mark_clean().await })?
        .map_err(|e| format!("mark_clean: {e}"))?;
    drop(array);
    let world = clean_shutdown(&world);
    let disks = corrupting_members(&world, case, seed.rotate_left(17));
    let array = open(&world, &mut rng, case, &disks, &opts, false)?;
    if !array.1 {
        return Err("the clean restart found the records dirty".into());
    }
    let array = array.0;

    let (requests, mid_flight) = churn(&world, &mut rng, &array, &shared, &disks)?;
    stats.requests += requests;
    stats.crashes_mid_flight += u64::from(mid_flight);
    stats.corruptions += disks.iter().map(|d| d.log().total()).sum::<u64>();
    drop(array);
    let torn = rng.chance(500);
    let world = power_loss(&world, &mut rng, torn);
    let disks = corrupting_members(&world, case, seed.rotate_left(31));
    // Recovery meets bad blocks too: wrong reads, and repair writes landing elsewhere.
    for d in &disks {
        d.set_wrong_read_per_mille(30);
        d.set_misdirect_per_mille(100);
    }
    let array = open(&world, &mut rng, case, &disks, &opts, false)
        .map_err(|e| format!("reopen after the power loss: {e}"))?
        .0;
    let image = read_volume(&world, &mut rng, &array)?;
    let history = shared.history.borrow();
    for (s, sector) in image.chunks(SECTOR_BYTES).enumerate() {
        history
            .check_durable(s as u64, sector)
            .map_err(|e| format!("after the power loss: {e}"))?;
        stats.sectors_checked += 1;
    }
    drop(history);
    stats.findings += after_recovery(&world, &mut rng, &array, &disks, &image)?;
    stats.corruptions += disks.iter().map(|d| d.log().total()).sum::<u64>();
    Ok(stats)
}

/// The schedule's requests and corruption until the power loss at a seeded step (mid-flight
/// or once the last request is answered). Returns the requests issued and whether any was in
/// flight at the loss.
fn churn(
    world: &Arc<Mutex<World>>,
    rng: &mut Rng,
    array: &Arc<Array>,
    shared: &Rc<Shared>,
    disks: &[Arc<Disk>],
) -> Result<(u64, bool), String> {
    // The hot half of the regions is the first half of the volume (every level here maps
    // member rows in order). Requests stay there: a read of the cold half that met a bad
    // block would repair it, and that write would cost the cold group its checksums at the
    // power loss, leaving the rest of the corruption there undetectable by design.
    let hot = array.volume().capacity() / 2;
    let steps = 500 + rng.below(3000);
    let crash_mid_flight = rng.chance(600);
    let mut exec = Executor::default();
    let mut requests = 0;
    let mut step = 0u64;
    loop {
        let spawning = step < steps;
        if !spawning && (crash_mid_flight || exec.live() == 0) {
            break;
        }
        if spawning && exec.live() < 8 && rng.chance(300) {
            requests += 1;
            let len = SECTOR * 8 * (1 + rng.below(16));
            match rng.below(20) {
                0..=8 => {
                    let at = rng.below((hot - len) / SECTOR) * SECTOR;
                    spawn(
                        &mut exec,
                        array,
                        shared,
                        Kind::Write {
                            fua: rng.chance(100),
                        },
                        at,
                        len,
                    );
                }
                9..=16 => {
                    let at = rng.below((hot - len) / SECTOR) * SECTOR;
                    spawn(&mut exec, array, shared, Kind::Read, at, len);
                }
                17 => spawn(&mut exec, array, shared, Kind::Flush, 0, 0),
                _ => {
                    let d = disks[rng.below(disks.len() as u64) as usize].clone();
                    exec.spawn(async move {
                        let _ = d.flip_random().await;
                    });
                }
            }
        }
        if !step_once(&mut exec, world, rng) && exec.live() > 0 {
            return Err(format!("deadlock at step {step}"));
        }
        shared.first_violation()?;
        step += 1;
        if step > steps + STEP_LIMIT {
            return Err("starvation".into());
        }
    }
    Ok((requests, exec.live() > 0))
}

/// After the reopen: no member failed, a repair scrub repairs all it names and changes no
/// byte the volume reads, and a second scrub finds nothing. Returns the repair's findings.
fn after_recovery(
    world: &Arc<Mutex<World>>,
    rng: &mut Rng,
    array: &Arc<Array>,
    disks: &[Arc<Disk>],
    image: &[u8],
) -> Result<u64, String> {
    let states = array
        .volume()
        .member_health()
        .iter()
        .map(|h| h.state)
        .collect::<Vec<_>>();
    if states.iter().any(|s| *s != MemberState::Healthy) {
        return Err(format!("a member failed within tolerance: {states:?}"));
    }
    // Bad blocks left on the medium for the scrub; no more transient faults from here on.
    for d in disks {
        d.set_misdirect_per_mille(0);
        let _ = drive(world, rng, {
            let d = d.clone();
            async move { d.flip_random().await }
        })?;
        d.set_wrong_read_per_mille(0);
    }
    let scrub = |repair: bool, rng: &mut Rng| {
        let a = array.clone();
        drive(world, rng, async move {
            let ctl = ScrubControl::new(repair, 0);
            let r = a.scrub(&ctl).await;
            r.map(|r| (r, ctl.findings()))
        })?
        .map_err(|e| format!("scrub: {e}"))
    };
    let (fixed, findings) = scrub(true, rng)?;
    for m in findings.by_member.values() {
        if m.repaired != m.total {
            return Err(format!(
                "the repair scrub left bad blocks: {:?} ({fixed:?})",
                m.first
            ));
        }
    }
    let (clean, left) = scrub(false, rng)?;
    if (clean.mismatches, clean.unreadable, left.total()) != (0, 0, 0) {
        return Err(format!(
            "a second scrub found something: {clean:?} {left:?} (first: {fixed:?} {findings:?})"
        ));
    }
    let after = read_volume(world, rng, array)?;
    if let Some(at) = (0..image.len()).find(|&i| image[i] != after[i]) {
        return Err(format!(
            "the repair scrub changed what the volume reads at byte {at}"
        ));
    }
    let states = array
        .volume()
        .member_health()
        .iter()
        .map(|h| h.state)
        .collect::<Vec<_>>();
    if states.iter().any(|s| *s != MemberState::Healthy) {
        return Err(format!("a member failed in the scrubs: {states:?}"));
    }
    Ok(findings.total())
}
