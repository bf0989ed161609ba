//! A seeded, single-threaded executor: the simulation decides which ready task runs next, so
//! every interleaving of the engine's futures is a function of the seed alone.

use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

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
pub fn step_once(
    exec: &mut Executor,
    world: &std::sync::Arc<std::sync::Mutex<nbraid_sim::scheduled::World>>,
    rng: &mut nbraid_sim::Rng,
) -> bool {
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
