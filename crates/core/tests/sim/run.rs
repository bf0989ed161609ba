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

/// What the clients and the checks share.
struct Shared {
    history: RefCell<History>,
    violations: RefCell<Vec<String>>,
    /// Scheduler step at which each request was issued and completed.
    steps: RefCell<Vec<(u64, Option<u64>)>>,
}

/// Runs schedule `seed` of `case`; `Err` describes the first broken rule.
pub fn run(case: &Case, seed: u64) -> Result<Stats, String> {
    let mut rng = Rng::for_schedule(seed);
    let plan = Plan::draw(&mut rng, case);
    if tracing() {
        eprintln!(
            "plan: beyond tolerance {}, torn {}, {} steps, {:?}, {:?}, faults {:?}",
            plan.beyond, plan.torn, plan.steps, plan.opts.cache, plan.opts.read_policy, plan.faults
        );
    }
    let (mut s, mut live) = Schedule::assemble(case, rng, plan)?;
    let traffic = s.draw_traffic(&live);
    s.serve(&mut live, &traffic)?;
    s.check_served(&live)?;
    let (images, failed) = s.lose_power(live);
    let (world, vol) = s.reassemble(images, &failed)?;
    if traffic.scrub_after_crash {
        s.scrub_after_crash(&world, &vol)?;
    }
    s.check_read_back(&world, &vol, &failed)?;
    Ok(s.stats)
}

/// What a schedule draws before its volume exists.
struct Plan {
    opts: VolumeOptions,
    /// Steps during which requests start.
    steps: u64,
    /// One schedule in six goes beyond tolerance: requests may then fail, but a FLUSH may
    /// only succeed while no data is lost, and what reads back must still be right.
    beyond: bool,
    faults: Vec<DiskFaults>,
    /// Writes in flight at the crash may land in part.
    torn: bool,
}

impl Plan {
    fn draw(rng: &mut Rng, case: &Case) -> Plan {
        let width = full_stripe(case);
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
        let steps = 300 + rng.below(1200);
        let beyond = rng.chance(170);
        let faults = draw_member_faults(rng, case, steps, beyond);
        Plan {
            opts,
            steps,
            beyond,
            faults,
            torn: rng.chance(500),
        }
    }
}

/// Each member's faults: none, or within tolerance, or (`beyond`) one member past it.
fn draw_member_faults(rng: &mut Rng, case: &Case, steps: u64, beyond: bool) -> Vec<DiskFaults> {
    let (g, n) = (&case.geometry, case.members);
    // The member that takes a beyond-tolerance schedule past the line.
    let mut extra = None;
    let failing = if beyond {
        let mut f = choose_failures(rng, g, n);
        extra = (0..n).find(|m| !f.contains(m) && !g.survives(&[f.clone(), vec![*m]].concat()));
        f.extend(extra);
        f
    } else if rng.chance(600) {
        choose_failures(rng, g, n)
    } else {
        Vec::new()
    };
    let mut faults = vec![DiskFaults::default(); n];
    for &m in &failing {
        faults[m] = draw_faults(rng, steps);
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
    faults
}

/// What the clients do once the volume exists, drawn from the seed.
struct Traffic {
    /// The hot window of two stripes that takes half the requests, so requests overlap.
    hot_base: u64,
    pace: Pace,
    /// Power goes with requests in flight (or once the last one is answered)...
    crash_mid_flight: bool,
    /// ... or right after the n-th acknowledged FLUSH (half the schedules): that is when the
    /// guarantees have just grown.
    crash_after_flushes: Option<usize>,
    /// A scrub (check or repair) among the client requests in some schedules, and one
    /// after the crash: it must never change what clients wrote, and on a live array within
    /// tolerance (parity in sync from the start) it must find nothing to repair.
    scrub_at: Option<u64>,
    scrub_repair: bool,
    scrub_after_crash: bool,
}

/// Weights of read, write, FUA write, flush, trim, write-zeroes.
const MIX: [u64; 6] = [350, 350, 60, 100, 70, 70];

/// One schedule's state between its phases: its case and draws, the history, the stats.
struct Schedule<'a> {
    case: &'a Case,
    rng: Rng,
    plan: Plan,
    shared: Rc<Shared>,
    stats: Stats,
    /// History clock when the volume first had data it could not read (beyond tolerance).
    lost_at: Option<u64>,
}

/// The volume and its disks until the crash, with the requests in flight.
struct Live {
    world: Arc<Mutex<World>>,
    vol: Arc<Volume>,
    exec: Executor,
}

impl<'a> Schedule<'a> {
    /// The volume over fresh disks with the plan's faults.
    fn assemble(case: &'a Case, rng: Rng, plan: Plan) -> Result<(Schedule<'a>, Live), String> {
        let n = case.members;
        let images = vec![vec![0u8; case.member_len as usize]; n];
        let world = World::new(images, plan.faults.clone());
        let members = sim_members(&world, n, case.member_len);
        let vol = Volume::new(case.geometry.clone(), members, plan.opts.clone())
            .map_err(|e| format!("assemble: {e}"))?;
        let shared = Rc::new(Shared {
            history: RefCell::new(History::new(vol.capacity())),
            violations: RefCell::new(Vec::new()),
            steps: RefCell::new(Vec::new()),
        });
        let schedule = Schedule {
            case,
            rng,
            plan,
            shared,
            stats: Stats::default(),
            lost_at: None,
        };
        let exec = Executor::default();
        Ok((
            schedule,
            Live {
                world,
                vol: Arc::new(vol),
                exec,
            },
        ))
    }

    fn draw_traffic(&mut self, live: &Live) -> Traffic {
        let rng = &mut self.rng;
        let width = full_stripe(self.case);
        Traffic {
            hot_base: hot_base(rng, live.vol.capacity(), width),
            pace: Pace::draw(rng),
            crash_mid_flight: rng.chance(750),
            crash_after_flushes: rng.chance(500).then(|| 1 + rng.below(4) as usize),
            scrub_at: rng.chance(300).then(|| rng.below(self.plan.steps)),
            scrub_repair: rng.chance(500),
            scrub_after_crash: rng.chance(300),
        }
    }

    /// Requests (and maybe a scrub) until the crash.
    fn serve(&mut self, live: &mut Live, t: &Traffic) -> Result<(), String> {
        let steps = self.plan.steps;
        let mut step = 0u64;
        while step < steps || (!t.crash_mid_flight && live.exec.live() > 0) {
            live.world.lock().expect("world").step = step;
            if step < steps && t.pace.starts(&mut self.rng, live.exec.live()) {
                self.start_request(live, t, step);
            }
            if t.scrub_at == Some(step) {
                // Concurrent overlapping writes to a mirror may land on its copies in
                // different orders (the block layer orders nothing between them, md alike),
                // so copies may differ on a live array; parity stripes are ordered by their
                // locks.
                let strict = !self.plan.beyond && !has_mirror(self.case.geometry.root());
                spawn_scrub(live, &self.shared, t.scrub_repair, strict, self.plan.beyond);
                self.stats.scrubs += 1;
            }
            self.step(live, step)?;
            let flushes = self.shared.history.borrow().flushes_acknowledged();
            if t.crash_after_flushes.is_some_and(|n| flushes >= n) {
                break;
            }
            step += 1;
            if step > steps + LIVENESS_STEPS {
                return Err(format!(
                    "starvation: {} requests still wait {LIVENESS_STEPS} steps after the last was issued",
                    live.exec.live()
                ));
            }
        }
        Ok(())
    }

    fn start_request(&mut self, live: &mut Live, t: &Traffic, step: u64) {
        let kind = pick_kind(&mut self.rng, &MIX);
        let capacity = live.vol.capacity();
        let width = full_stripe(self.case);
        let range = pick_range(&mut self.rng, capacity, width, t.hot_base);
        spawn(live, &self.shared, kind, range, step, self.plan.beyond);
        self.stats.requests += 1;
    }

    /// One scheduler step, then the rules that hold at every step: no broken rule, the
    /// stripe cache in bounds; and the clock of the first loss of data is noted.
    fn step(&mut self, live: &mut Live, step: u64) -> Result<(), String> {
        if !step_once(&mut live.exec, &live.world, &mut self.rng) && live.exec.live() > 0 {
            return Err(format!(
                "deadlock at step {step}: {} requests wait, nothing can run and no member operation is pending",
                live.exec.live()
            ));
        }
        if let Some(v) = self.shared.violations.borrow().first() {
            return Err(v.clone());
        }
        let usage = live.vol.cache_usage();
        if usage.pinned_bytes > usage.bound_bytes || usage.dirty_bytes > usage.pinned_bytes {
            return Err(format!(
                "stripe cache out of bounds at step {step}: {usage:?}"
            ));
        }
        if self.lost_at.is_none() && !live.vol.is_available() {
            self.lost_at = Some(self.shared.history.borrow().now());
        }
        Ok(())
    }

    /// No FLUSH succeeded once data was lost, and no request waited too long.
    fn check_served(&mut self, live: &Live) -> Result<(), String> {
        let history = self.shared.history.borrow();
        if let Some(at) = self.lost_at {
            if let Some(f) = history.flush_acknowledged_after(at) {
                return Err(format!(
                    "FLUSH op {f} was acknowledged after the volume lost data (history clock {at})"
                ));
            }
        }
        for (issued, done) in self.shared.steps.borrow().iter() {
            if let Some(d) = done {
                self.stats.max_latency_steps = self.stats.max_latency_steps.max(d - issued);
            }
        }
        if self.stats.max_latency_steps > LIVENESS_STEPS {
            return Err(format!(
                "a request took {} scheduler steps (bound {LIVENESS_STEPS})",
                self.stats.max_latency_steps
            ));
        }
        self.stats.crashes_mid_flight += u64::from(live.exec.live() > 0);
        Ok(())
    }

    /// The crash: what the members keep, and which were lost (dead or failed).
    fn lose_power(&mut self, live: Live) -> (Vec<Vec<u8>>, Vec<usize>) {
        let images = crash_images(&live.world, &mut self.rng, self.plan.torn);
        let dead: Vec<bool> = (live.world.lock().expect("world").disks.iter())
            .map(|d| d.dead)
            .collect();
        let states = live
            .vol
            .member_health()
            .iter()
            .map(|h| h.state)
            .collect::<Vec<_>>();
        let failed: Vec<usize> = (0..self.case.members)
            .filter(|&i| dead[i] || states[i] == nbraid_core::MemberState::Failed)
            .collect();
        self.stats.member_failures += failed.len() as u64;
        drop(live.exec);
        drop(live.vol);
        (images, failed)
    }

    /// The volume assembled again over the images, as after a restart (parity sync
    /// unknown), with the members lost before the crash failed.
    fn reassemble(
        &mut self,
        images: Vec<Vec<u8>>,
        failed: &[usize],
    ) -> Result<(Arc<Mutex<World>>, Arc<Volume>), String> {
        let n = self.case.members;
        let world = World::new(images, vec![DiskFaults::default(); n]);
        let members = sim_members(&world, n, self.case.member_len);
        let opts = VolumeOptions {
            members_known_zero: false,
            ..self.plan.opts.clone()
        };
        let vol = Volume::new(self.case.geometry.clone(), members, opts)
            .map_err(|e| format!("reassemble: {e}"))?;
        for &i in failed {
            vol.fail_member(i, "failed before the crash");
        }
        Ok((world, Arc::new(vol)))
    }

    /// Parity sync is unknown now: a repairing scrub may rewrite parity and mirror copies,
    /// never data from parity; what reads back after must still be what clients wrote.
    fn scrub_after_crash(
        &mut self,
        world: &Arc<Mutex<World>>,
        vol: &Arc<Volume>,
    ) -> Result<(), String> {
        let mut exec = Executor::default();
        let v = vol.clone();
        exec.spawn(async move {
            let _ = v.scrub(&ScrubControl::new(true, 0)).await;
        });
        run_to_end(&mut exec, world, &mut self.rng, "scrubbing after the crash")?;
        self.stats.scrubs += 1;
        Ok(())
    }

    /// Everything reads back: every flushed write, but in the write hole of the members
    /// lost (counted), and beyond tolerance an error is allowed, never wrong data.
    fn check_read_back(
        &mut self,
        world: &Arc<Mutex<World>>,
        vol: &Arc<Volume>,
        failed: &[usize],
    ) -> Result<(), String> {
        let (image, unreadable) = read_all(vol, world, &mut self.rng)?;
        if !unreadable.is_empty() && !self.plan.beyond {
            return Err(format!(
                "after the crash, within tolerance: {}",
                unreadable[0].1
            ));
        }
        let g = &self.case.geometry;
        let history = self.shared.history.borrow();
        let exposed = write_hole_exposure(g, &history, failed);
        for (s, sector) in image.chunks(SECTOR_BYTES).enumerate() {
            let s = s as u64;
            if unreadable
                .iter()
                .any(|&((a, b), _)| (a..b).contains(&(s * SECTOR)))
            {
                continue;
            }
            if exposed
                .as_ref()
                .is_some_and(|e| in_write_hole(g, e, failed, s))
            {
                self.stats.sectors_write_hole += 1;
                continue;
            }
            history.check_durable(s, sector)?;
            self.stats.sectors_checked += 1;
        }
        Ok(())
    }
}

/// `NBRAID_SIM_TRACE` set: the plan and every answer go to stderr (with `NBRAID_SEED`).
fn tracing() -> bool {
    std::env::var_os("NBRAID_SIM_TRACE").is_some()
}

/// The case's full stripe (16 KiB where it has none).
fn full_stripe(case: &Case) -> u64 {
    case.geometry.full_stripe_width().unwrap_or(16 * 1024)
}

/// Issues one request (a FLUSH covers nothing) and checks it as it completes: within
/// tolerance every request succeeds, and a read returns what the history allows.
fn spawn(
    live: &mut Live,
    shared: &Rc<Shared>,
    kind: Kind,
    range: (u64, u64),
    step: u64,
    beyond_tolerance: bool,
) {
    let (offset, len) = if kind == Kind::Flush { (0, 0) } else { range };
    let id = shared.history.borrow_mut().issue(kind, offset, len);
    shared.steps.borrow_mut().push((step, None));
    let vol = live.vol.clone();
    let shared = shared.clone();
    let world = live.world.clone();
    live.exec.spawn(async move {
        let result = perform(&*vol, id, kind, offset, len).await;
        let now = world.lock().expect("world").step;
        shared.steps.borrow_mut()[id].1 = Some(now);
        shared.history.borrow_mut().complete(id, result.is_ok());
        if tracing() {
            let states: Vec<_> = vol.member_health().iter().map(|h| h.state).collect();
            let error = result.as_ref().err().map(|e| e.to_string());
            eprintln!(
                "op {id} {kind:?} {offset}+{len} answered at step {now}: error {error:?}, members {states:?}, available {}",
                vol.is_available()
            );
        }
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
    run_to_end(&mut exec, world, rng, "reading back after the crash")?;
    let image = image.borrow().clone();
    let errors = errors.borrow().clone();
    Ok((image, errors))
}

/// Runs `exec` to completion, completing member operations in random order (a bound of
/// ten times the liveness bound: the whole volume is in flight).
fn run_to_end(
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
    live: &mut Live,
    shared: &Rc<Shared>,
    repair: bool,
    strict: bool,
    beyond_tolerance: bool,
) {
    let vol = live.vol.clone();
    let shared = shared.clone();
    live.exec.spawn(async move {
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
