//! One simulated schedule: options, faults and requests drawn from a seed, run to a crash,
//! then the volume assembled again over the surviving images and read back.

use super::array::{crash_images, sim_members};
use super::checks::{in_write_hole, write_hole_exposure};
use super::clients::{hot_base, pick_kind, pick_range, Pace};
use super::executor::{step_once, Executor};
use super::faults::{choose_failures, draw_faults};
use super::history::{perform, History, Kind};
use nbraid_core::{CacheMode, ReadPolicy, ScrubControl, ScrubState, Volume, VolumeOptions};
use nbraid_layout::{Geometry, Node};
use nbraid_sim::scheduled::{DiskFaults, World, SECTOR_BYTES};
use nbraid_sim::Rng;
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::{Arc, Mutex};

const SECTOR: u64 = SECTOR_BYTES as u64;

/// A request waiting longer than this many scheduler steps while members answer is starved.
pub const LIVENESS_STEPS: u64 = 20_000;

/// A volume shape to simulate.
pub struct Case {
    pub name: &'static str,
    pub geometry: Geometry,
    pub members: usize,
    pub member_len: u64,
}

/// What one schedule exercised (summed over runs for the report).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub requests: u64,
    pub member_failures: u64,
    pub crashes_mid_flight: u64,
    pub sectors_checked: u64,
    /// Sectors of stripes a crash may have torn, on members lost before it: the RAID 5/6
    /// write hole, which this engine does not close yet (on-disk metadata issue).
    pub sectors_write_hole: u64,
    pub max_latency_steps: u64,
    /// Scrubs run (under client I/O before the crash, alone after it).
    pub scrubs: u64,
}

impl Stats {
    pub fn add(&mut self, o: &Stats) {
        self.requests += o.requests;
        self.member_failures += o.member_failures;
        self.crashes_mid_flight += o.crashes_mid_flight;
        self.sectors_checked += o.sectors_checked;
        self.sectors_write_hole += o.sectors_write_hole;
        self.max_latency_steps = self.max_latency_steps.max(o.max_latency_steps);
        self.scrubs += o.scrubs;
    }
}

struct Shared {
    history: RefCell<History>,
    violations: RefCell<Vec<String>>,
    /// Scheduler step at which each request was issued and completed.
    steps: RefCell<Vec<(u64, Option<u64>)>>,
}

/// Runs schedule `seed` of `case`; `Err` describes the first broken rule.
pub fn run(case: &Case, seed: u64) -> Result<Stats, String> {
    let mut rng = Rng::for_schedule(seed);
    let g = &case.geometry;
    let n = case.members;
    let mut stats = Stats::default();

    // Options.
    let width = g.full_stripe_width().unwrap_or(16 * 1024);
    let cache = if rng.chance(500) {
        CacheMode::WriteThrough
    } else {
        CacheMode::WriteBack {
            bytes: width * (1 + rng.below(4)),
        }
    };
    let opts = VolumeOptions {
        block_size: 512,
        read_policy: *rng.pick(&ReadPolicy::ALL),
        members_known_zero: true,
        cache,
        cache_max_age: None,
        ..VolumeOptions::default()
    };

    // Faults within tolerance.
    let steps = 300 + rng.below(1200);
    // One schedule in six goes beyond tolerance: requests may then fail, but a FLUSH may
    // only succeed while no data is lost, and what reads back must still be right.
    let beyond = rng.chance(170);
    // The member that takes a beyond-tolerance schedule past the line.
    let mut extra = None;
    let failing = if beyond {
        let mut f = choose_failures(&mut rng, g, n);
        extra = (0..n).find(|m| !f.contains(m) && !g.survives(&[f.clone(), vec![*m]].concat()));
        f.extend(extra);
        f
    } else if rng.chance(600) {
        choose_failures(&mut rng, g, n)
    } else {
        Vec::new()
    };
    let mut faults = vec![DiskFaults::default(); n];
    for &m in &failing {
        faults[m] = draw_faults(&mut rng, steps);
    }
    // Half the time the extra member never dies but returns many transient read errors: the
    // volume stays available while single stripes cannot be read or rewritten. A stripe
    // write that fails then must not drop the acknowledged bytes it carried (the next FLUSH
    // would succeed without them).
    if let Some(m) = extra.filter(|_| rng.chance(500)) {
        faults[m] = DiskFaults {
            dies_at_step: None,
            read_error_per_mille: 100 + rng.below(300),
            flush_error_per_mille: 0,
        };
    }
    let torn = rng.chance(500);

    let world = World::new(vec![vec![0u8; case.member_len as usize]; n], faults);
    let members = sim_members(&world, n, case.member_len);
    let vol = Arc::new(
        Volume::new(g.clone(), members, opts.clone()).map_err(|e| format!("assemble: {e}"))?,
    );
    let capacity = vol.capacity();
    let shared = Rc::new(Shared {
        history: RefCell::new(History::new(capacity)),
        violations: RefCell::new(Vec::new()),
        steps: RefCell::new(Vec::new()),
    });

    // Requests: a hot window of two stripes takes half of them, so requests overlap.
    let hot_base = hot_base(&mut rng, capacity, width);
    let pace = Pace::draw(&mut rng);
    let mix = [350, 350, 60, 100, 70, 70]; // read, write, fua write, flush, trim, zeroes
    let mut exec = Executor::default();
    let crash_mid_flight = rng.chance(750);
    // Crash right after the n-th acknowledged FLUSH in half the schedules: that is when the
    // guarantees have just grown.
    let crash_after_flushes = rng.chance(500).then(|| 1 + rng.below(4) as usize);
    // A scrub (check or repair) among the client requests in some schedules, and one after
    // the crash: it must never change what clients wrote, and on a live array within
    // tolerance (parity in sync from the start) it must find nothing to repair.
    let scrub_at = rng.chance(300).then(|| rng.below(steps));
    let scrub_repair = rng.chance(500);
    let scrub_after_crash = rng.chance(300);
    let mut step = 0u64;
    // History clock when the volume first had data it could not read (beyond tolerance).
    let mut lost_at: Option<u64> = None;
    loop {
        let spawning = step < steps;
        if !spawning && (crash_mid_flight || exec.live() == 0) {
            break;
        }
        world.lock().expect("world").step = step;
        if spawning && pace.starts(&mut rng, exec.live()) {
            let kind = pick_kind(&mut rng, &mix);
            let (offset, len) = pick_range(&mut rng, capacity, width, hot_base);
            spawn(
                &mut exec, &vol, &shared, &world, kind, offset, len, step, beyond,
            );
            stats.requests += 1;
        }
        if scrub_at == Some(step) {
            // Concurrent overlapping writes to a mirror may land on its copies in different
            // orders (the block layer orders nothing between them, md alike), so copies may
            // differ on a live array; parity stripes are ordered by their locks.
            let strict = !beyond && !has_mirror(g.root());
            spawn_scrub(&mut exec, &vol, &shared, scrub_repair, strict, beyond);
            stats.scrubs += 1;
        }
        let ready = exec.ready_count();
        let pending = world.lock().expect("world").pending_count();
        if ready + pending == 0 {
            if exec.live() > 0 {
                return Err(format!(
                    "deadlock at step {step}: {} requests wait, nothing can run and no member operation is pending",
                    exec.live()
                ));
            }
        } else {
            let pick = rng.below((ready + pending) as u64) as usize;
            if pick < ready {
                exec.poll_ready(pick);
            } else {
                world
                    .lock()
                    .expect("world")
                    .complete(pick - ready, &mut rng);
            }
        }
        if let Some(v) = shared.violations.borrow().first() {
            return Err(v.clone());
        }
        let usage = vol.cache_usage();
        if usage.pinned_bytes > usage.bound_bytes || usage.dirty_bytes > usage.pinned_bytes {
            return Err(format!(
                "stripe cache out of bounds at step {step}: {usage:?}"
            ));
        }
        if lost_at.is_none() && !vol.is_available() {
            lost_at = Some(shared.history.borrow().now());
        }
        if crash_after_flushes.is_some_and(|n| shared.history.borrow().flushes_acknowledged() >= n)
        {
            break;
        }
        step += 1;
        if step > steps + LIVENESS_STEPS {
            return Err(format!(
                "starvation: {} requests still wait {LIVENESS_STEPS} steps after the last was issued",
                exec.live()
            ));
        }
    }
    if let Some(at) = lost_at {
        if let Some(f) = shared.history.borrow().flush_acknowledged_after(at) {
            return Err(format!(
                "FLUSH op {f} was acknowledged after the volume lost data (history clock {at})"
            ));
        }
    }
    for (issued, done) in shared.steps.borrow().iter() {
        if let Some(d) = done {
            stats.max_latency_steps = stats.max_latency_steps.max(d - issued);
        }
    }
    if stats.max_latency_steps > LIVENESS_STEPS {
        return Err(format!(
            "a request took {} scheduler steps (bound {LIVENESS_STEPS})",
            stats.max_latency_steps
        ));
    }
    stats.crashes_mid_flight += u64::from(exec.live() > 0);

    // Crash: what the members keep.
    let images = crash_images(&world, &mut rng, torn);
    let dead: Vec<bool> = (world.lock().expect("world").disks.iter())
        .map(|d| d.dead)
        .collect();
    let states = vol.member_states();
    let failed: Vec<usize> = (0..n)
        .filter(|&i| dead[i] || states[i] == nbraid_core::MemberState::Failed)
        .collect();
    stats.member_failures += failed.len() as u64;
    drop(exec);
    drop(vol);

    // Assemble again (as after a restart: parity sync unknown) and read everything back.
    let world = World::new(images, vec![DiskFaults::default(); n]);
    let members = sim_members(&world, n, case.member_len);
    let opts = VolumeOptions {
        members_known_zero: false,
        ..opts
    };
    let vol =
        Arc::new(Volume::new(g.clone(), members, opts).map_err(|e| format!("reassemble: {e}"))?);
    for &i in &failed {
        vol.fail_member(i, "failed before the crash");
    }
    if scrub_after_crash {
        // Parity sync is unknown now: repair may rewrite parity and mirror copies, never data
        // from parity; what reads back below must still be what clients wrote.
        let mut exec = Executor::default();
        let v = vol.clone();
        exec.spawn(async move {
            let _ = v.scrub(&ScrubControl::new(true, 0)).await;
        });
        drive(&mut exec, &world, &mut rng, "scrubbing after the crash")?;
        stats.scrubs += 1;
    }
    let (image, unreadable) = read_all(&vol, &world, &mut rng)?;
    if !unreadable.is_empty() && !beyond {
        return Err(format!(
            "after the crash, within tolerance: {}",
            unreadable[0].1
        ));
    }
    let history = shared.history.borrow();
    let exposed = write_hole_exposure(g, &history, &failed);
    for (s, sector) in image.chunks(SECTOR_BYTES).enumerate() {
        let s = s as u64;
        if unreadable
            .iter()
            .any(|&((a, b), _)| (a..b).contains(&(s * SECTOR)))
        {
            continue; // Beyond tolerance: an error, never wrong data.
        }
        if exposed
            .as_ref()
            .is_some_and(|e| in_write_hole(g, e, &failed, s))
        {
            stats.sectors_write_hole += 1;
            continue;
        }
        history.check_durable(s, sector)?;
        stats.sectors_checked += 1;
    }
    Ok(stats)
}

#[allow(clippy::too_many_arguments)]
fn spawn(
    exec: &mut Executor,
    vol: &Arc<Volume>,
    shared: &Rc<Shared>,
    world: &Arc<Mutex<World>>,
    kind: Kind,
    offset: u64,
    len: u64,
    step: u64,
    beyond_tolerance: bool,
) {
    let (offset, len) = if kind == Kind::Flush {
        (0, 0)
    } else {
        (offset, len)
    };
    let id = shared.history.borrow_mut().issue(kind, offset, len);
    shared.steps.borrow_mut().push((step, None));
    let vol = vol.clone();
    let shared = shared.clone();
    let world = world.clone();
    exec.spawn(async move {
        let result = perform(&*vol, id, kind, offset, len).await;
        let now = world.lock().expect("world").step;
        shared.steps.borrow_mut()[id].1 = Some(now);
        shared.history.borrow_mut().complete(id, result.is_ok());
        let verdict = match &result {
            // Members fail only within tolerance: every request must succeed.
            Err(e) if !beyond_tolerance => Err(format!(
                "op {id} ({kind:?} {offset}+{len}) failed within tolerance: {e}"
            )),
            Err(_) => Ok(()),
            Ok(Some(buf)) => shared.history.borrow().check_read(id, buf),
            Ok(None) => Ok(()),
        };
        if let Err(v) = verdict {
            shared.violations.borrow_mut().push(v);
        }
    });
}

/// Reads the whole volume (requests of up to 64 KiB in flight together, member operations
/// completed in random order).
/// Unreadable ranges come back beside the image, with their errors.
type Unreadable = Vec<((u64, u64), String)>;

fn read_all(
    vol: &Arc<Volume>,
    world: &Arc<Mutex<World>>,
    rng: &mut Rng,
) -> Result<(Vec<u8>, Unreadable), String> {
    let capacity = vol.capacity();
    let image = Rc::new(RefCell::new(vec![0u8; capacity as usize]));
    let errors = Rc::new(RefCell::new(Unreadable::new()));
    let mut exec = Executor::default();
    let piece = 4 * 1024;
    let mut at = 0;
    while at < capacity {
        let len = piece.min(capacity - at);
        let (vol, image, errors) = (vol.clone(), image.clone(), errors.clone());
        exec.spawn(async move {
            match vol.read(at, len).await {
                Ok(b) => image.borrow_mut()[at as usize..(at + len) as usize].copy_from_slice(&b),
                Err(e) => errors
                    .borrow_mut()
                    .push(((at, at + len), format!("read back {at}+{len}: {e}"))),
            }
        });
        at += len;
    }
    drive(&mut exec, world, rng, "reading back after the crash")?;
    let image = image.borrow().clone();
    let errors = errors.borrow().clone();
    Ok((image, errors))
}

/// Runs `exec` to completion, completing member operations in random order.
fn drive(
    exec: &mut Executor,
    world: &Arc<Mutex<World>>,
    rng: &mut Rng,
    what: &str,
) -> Result<(), String> {
    let mut steps = 0u64;
    while exec.live() > 0 {
        if !step_once(exec, world, rng) {
            return Err(format!("deadlock {what}"));
        }
        steps += 1;
        if steps > 10 * LIVENESS_STEPS {
            return Err(format!("{what} does not finish"));
        }
    }
    Ok(())
}

fn has_mirror(n: &Node) -> bool {
    matches!(n, Node::Mirror(_)) || n.children().iter().any(has_mirror)
}

/// A scrub of the whole volume among the client requests (not in the history: it writes
/// nothing a client could see).
fn spawn_scrub(
    exec: &mut Executor,
    vol: &Arc<Volume>,
    shared: &Rc<Shared>,
    repair: bool,
    strict: bool,
    beyond_tolerance: bool,
) {
    let vol = vol.clone();
    let shared = shared.clone();
    exec.spawn(async move {
        let r = vol.scrub(&ScrubControl::new(repair, 0)).await;
        let verdict = match r {
            Err(e) if !beyond_tolerance => Err(format!("scrub failed within tolerance: {e}")),
            Ok(r) if r.state != ScrubState::Done => Err(format!("scrub stopped: {r:?}")),
            Ok(r) if strict && r.mismatches > 0 => Err(format!(
                "a scrub of a live array in sync found mismatches: {r:?}"
            )),
            _ => Ok(()),
        };
        if let Err(v) = verdict {
            shared.violations.borrow_mut().push(v);
        }
    });
}
