//! A seeded, single-threaded executor: the simulation decides which ready task runs next, so
//! every interleaving of the engine's futures is a function of the seed alone. Also the ways
//! to run tasks against the simulated disks: one step, one future to the end, or a set of
//! tasks until a power loss.

use nbraid_sim::scheduled::World;
use nbraid_sim::Rng;
use std::cell::RefCell;
use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

/// Scheduler steps after which a task outside the request schedule (an assembly, a read-back,
/// a pass) is taken not to finish.
pub const STEP_LIMIT: u64 = 400_000;

type Task = Pin<Box<dyn Future<Output = ()>>>;

/// Task ids whose wakers fired, in a sorted set so "the n-th ready task" is deterministic.
type ReadySet = Arc<Mutex<BTreeSet<usize>>>;

struct TaskWaker {
    id: usize,
    ready: ReadySet,
}

impl Wake for TaskWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.ready.lock().expect("ready set").insert(self.id);
    }
}

#[derive(Default)]
pub struct Executor {
    /// `None` once the task finished.
    tasks: Vec<Option<Task>>,
    wakers: Vec<Waker>,
    ready: ReadySet,
    live: usize,
}

impl Executor {
    /// Adds a task; it is ready at once.
    pub fn spawn(&mut self, f: impl Future<Output = ()> + 'static) {
        let id = self.tasks.len();
        self.tasks.push(Some(Box::pin(f)));
        self.wakers.push(Waker::from(Arc::new(TaskWaker {
            id,
            ready: self.ready.clone(),
        })));
        self.ready.lock().expect("ready set").insert(id);
        self.live += 1;
    }

    /// Tasks not finished yet.
    pub fn live(&self) -> usize {
        self.live
    }

    pub fn ready_count(&self) -> usize {
        self.ready.lock().expect("ready set").len()
    }

    /// Polls the `n`-th ready task (in id order) once.
    pub fn poll_ready(&mut self, n: usize) {
        let id = {
            let mut ready = self.ready.lock().expect("ready set");
            let id = *ready.iter().nth(n).expect("n < ready_count");
            ready.remove(&id);
            id
        };
        let Some(task) = self.tasks[id].as_mut() else {
            return; // A stale wake of a finished task.
        };
        let waker = self.wakers[id].clone();
        let mut cx = Context::from_waker(&waker);
        if let Poll::Ready(()) = task.as_mut().poll(&mut cx) {
            self.tasks[id] = None;
            self.live -= 1;
        }
    }
}

/// One scheduler step: polls a ready task or completes a pending member operation, chosen by
/// `rng`. Returns false when there is nothing to do.
pub fn step_once(exec: &mut Executor, world: &Arc<Mutex<World>>, rng: &mut Rng) -> bool {
    let ready = exec.ready_count();
    let pending = world.lock().expect("world").pending_count();
    if ready + pending == 0 {
        return false;
    }
    let pick = rng.below((ready + pending) as u64) as usize;
    if pick < ready {
        exec.poll_ready(pick);
    } else {
        world.lock().expect("world").complete(pick - ready, rng);
    }
    true
}

/// Runs `fut` to completion, completing member operations in seeded random order.
pub fn drive<T: 'static>(
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

/// Runs `exec` until its tasks are done or step `crash_at` (power lost there); a member
/// death that did not come by then does not come later.
pub fn run_until(
    exec: &mut Executor,
    world: &Arc<Mutex<World>>,
    rng: &mut Rng,
    crash_at: Option<u64>,
    what: &str,
) -> Result<(), String> {
    run_with(exec, world, rng, crash_at, what, &mut |_, _| {})
}

/// [`run_until`], calling `spawn` before every step (to start requests).
pub fn run_with(
    exec: &mut Executor,
    world: &Arc<Mutex<World>>,
    rng: &mut Rng,
    crash_at: Option<u64>,
    what: &str,
    spawn: &mut dyn FnMut(&mut Executor, &mut Rng),
) -> Result<(), String> {
    let mut step = 0u64;
    while exec.live() > 0 && Some(step) != crash_at {
        world.lock().expect("world").step = step;
        spawn(exec, rng);
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
