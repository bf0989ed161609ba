//! The clients of a simulated array: the seeded mix of requests they send (kinds, ranges, a
//! hot window so requests overlap, a sequential writer, idle points and flusher steps), how
//! fast they send them, and the history each request is recorded in and checked against as
//! it completes.

use super::executor::{step_once, Executor};
use super::history::{perform, History, Kind};
use nbraid_core::metadata::Array;
use nbraid_sim::scheduled::{World, SECTOR_BYTES};
use nbraid_sim::Rng;
use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const SECTOR: u64 = SECTOR_BYTES as u64;

/// What the clients and the checks share: the history, the rules broken so far, and the
/// sectors a read is excused for.
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

impl Shared {
    /// Fresh, for a volume of `capacity_bytes`.
    pub fn new(capacity_bytes: u64) -> Rc<Shared> {
        Rc::new(Shared {
            history: RefCell::new(History::new(capacity_bytes)),
            ..Shared::default()
        })
    }

    /// The first rule a request broke, if any.
    pub fn first_violation(&self) -> Result<(), String> {
        match self.violations.borrow().first() {
            Some(v) => Err(v.clone()),
            None => Ok(()),
        }
    }
}

/// How many requests the clients keep in flight, and how eagerly they start the next.
#[derive(Clone, Copy)]
pub struct Pace {
    pub max_in_flight: usize,
    pub start_per_mille: u64,
}

impl Pace {
    /// A schedule's pace: 1-12 requests in flight, one started at 10-60 % of the steps.
    pub fn draw(rng: &mut Rng) -> Pace {
        let max_in_flight = 1 + rng.below(12) as usize;
        let start_per_mille = 100 + rng.below(500);
        Pace {
            max_in_flight,
            start_per_mille,
        }
    }

    /// Whether to start a request now, with `live` in flight (no draw at the cap).
    pub fn starts(&self, rng: &mut Rng, live: usize) -> bool {
        live < self.max_in_flight && rng.chance(self.start_per_mille)
    }
}

/// The base of the hot window: two full stripes that take half the requests, so requests
/// overlap.
pub fn hot_base(rng: &mut Rng, capacity: u64, width: u64) -> u64 {
    rng.below(
        (capacity / SECTOR)
            .saturating_sub(2 * width / SECTOR)
            .max(1),
    ) * SECTOR
}

/// Where a schedule's requests go: the volume's size, its full stripe, the base of the hot
/// area, the mix of kinds.
pub(super) struct Load {
    pub capacity: u64,
    pub width: u64,
    pub hot_base: u64,
    /// Weights of read, write, FUA write, flush, trim, write-zeroes.
    pub mix: [u64; 6],
    /// Where the sequential writer writes next (`CrashCase::sequential`).
    pub stream: Option<Rc<Cell<u64>>>,
}

impl Load {
    /// A load of `mix` with a hot window drawn over a volume of `capacity` bytes.
    pub fn draw(rng: &mut Rng, capacity: u64, width: u64, mix: [u64; 6], sequential: bool) -> Load {
        Load {
            capacity,
            width,
            hot_base: hot_base(rng, capacity, width),
            mix,
            stream: sequential.then(|| Rc::new(Cell::new(0))),
        }
    }
}

/// The clients of an array through a schedule: their tasks, load and pace, and what they
/// share with the checks.
pub(super) struct Clients {
    pub exec: Executor,
    pub shared: Rc<Shared>,
    pub load: Load,
    pub pace: Pace,
    /// Requests started so far.
    pub started: u64,
}

impl Clients {
    pub fn new(shared: Rc<Shared>, load: Load, pace: Pace) -> Clients {
        Clients {
            exec: Executor::default(),
            shared,
            load,
            pace,
            started: 0,
        }
    }

    /// Starts the next request if the pace says so.
    pub fn maybe_start(&mut self, rng: &mut Rng, array: &Arc<Array>) {
        if self.pace.starts(rng, self.exec.live()) {
            start_request(&mut self.exec, rng, array, &self.shared, &self.load);
            self.started += 1;
        }
    }

    /// One scheduler step (at `step`, for the error); then the first rule a request broke.
    pub fn step(
        &mut self,
        world: &Arc<Mutex<World>>,
        rng: &mut Rng,
        step: u64,
    ) -> Result<(), String> {
        if !step_once(&mut self.exec, world, rng) && self.exec.live() > 0 {
            return Err(format!("deadlock at step {step}"));
        }
        self.shared.first_violation()
    }
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

/// Issues one request to `array`, recorded in the history; as it completes, a write clears
/// the excuse of the sectors it covers, and a read is checked.
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

/// A request kind drawn by the weights of `mix` (read, write, FUA write, flush, trim,
/// write-zeroes).
pub fn pick_kind(rng: &mut Rng, mix: &[u64; 6]) -> Kind {
    let total: u64 = mix.iter().sum();
    let mut x = rng.below(total);
    for (i, &w) in mix.iter().enumerate() {
        if x < w {
            return match i {
                0 => Kind::Read,
                1 => Kind::Write { fua: false },
                2 => Kind::Write { fua: true },
                3 => Kind::Flush,
                4 => Kind::Zero { fua: false },
                _ => Kind::Zero {
                    fua: rng.chance(300),
                },
            };
        }
        x -= w;
    }
    unreachable!("x < total")
}

/// A request's range: whole stripes (one in five), in the hot window (half the rest) or
/// anywhere, up to two stripes long.
pub fn pick_range(rng: &mut Rng, capacity: u64, width: u64, hot_base: u64) -> (u64, u64) {
    let sectors = capacity / SECTOR;
    if rng.chance(200) && capacity >= width {
        // Whole stripes.
        let stripes = capacity / width;
        let s = rng.below(stripes);
        let n = 1 + rng.below(2.min(stripes - s));
        return (s * width, n * width);
    }
    let start = if rng.chance(500) {
        hot_base / SECTOR + rng.below((2 * width / SECTOR).max(1))
    } else {
        rng.below(sectors)
    }
    .min(sectors - 1);
    let len = 1 + rng.below((2 * width / SECTOR).max(1));
    let len = len.min(sectors - start);
    (start * SECTOR, len * SECTOR)
}
