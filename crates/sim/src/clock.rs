//! Virtual time: a [`SimClock`] holds the pending completions in time order, and
//! [`run_virtual`] polls a future until it stalls, then moves the clock to the next
//! completion. No thread, no wall clock: a run is a function of its inputs alone.

use parking_lot::Mutex;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

type Callback = Box<dyn FnOnce(u64) + Send>;

/// The virtual clock: nanoseconds since the start and the completions still to come.
#[derive(Default)]
pub struct SimClock {
    state: Mutex<ClockState>,
}

#[derive(Default)]
struct ClockState {
    now_ns: u64,
    seq: u64,
    /// (time, sequence): equal times fire in scheduling order.
    events: BinaryHeap<Reverse<(u64, u64)>>,
    callbacks: HashMap<u64, Callback>,
}

impl SimClock {
    pub fn new() -> Arc<SimClock> {
        Arc::new(SimClock::default())
    }

    /// Virtual time since the clock was made.
    pub fn now(&self) -> Duration {
        Duration::from_nanos(self.now_ns())
    }

    pub fn now_ns(&self) -> u64 {
        self.state.lock().now_ns
    }

    /// Runs `f` with the time when the clock reaches `at_ns` (at once if that has passed, on
    /// the next [`SimClock::advance`]).
    pub(crate) fn schedule(&self, at_ns: u64, f: Callback) {
        let mut s = self.state.lock();
        let at = at_ns.max(s.now_ns);
        s.seq += 1;
        let seq = s.seq;
        s.events.push(Reverse((at, seq)));
        s.callbacks.insert(seq, f);
    }

    /// Moves to the next event and runs it; false when nothing is pending.
    pub fn advance(&self) -> bool {
        let (at, f) = {
            let mut s = self.state.lock();
            let Some(Reverse((at, seq))) = s.events.pop() else {
                return false;
            };
            s.now_ns = at;
            let f = s
                .callbacks
                .remove(&seq)
                .expect("every event has its callback");
            (at, f)
        };
        f(at);
        true
    }
}

/// A future waited on something that is not a simulated member, so virtual time cannot move.
#[derive(Debug, thiserror::Error)]
#[error("the simulation stalled at {0:?} of virtual time: a future waits on something outside the simulated members")]
pub struct Stalled(pub Duration);

struct Flag(AtomicBool);

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::Release);
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.store(true, Ordering::Release);
    }
}

/// Polls `fut` on this thread, moving `clock` forward whenever it waits. Everything the
/// future waits on must be simulated members of `clock` (or complete at once): the engine's
/// volumes qualify when their write-back cache has no age limit (no background thread).
pub fn run_virtual<F: Future>(clock: &SimClock, fut: F) -> Result<F::Output, Stalled> {
    let flag = Arc::new(Flag(AtomicBool::new(false)));
    let waker = Waker::from(flag.clone());
    let mut cx = Context::from_waker(&waker);
    let mut fut = pin!(fut);
    loop {
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return Ok(v);
        }
        while !flag.0.swap(false, Ordering::AcqRel) {
            if !clock.advance() {
                return Err(Stalled(clock.now()));
            }
        }
    }
}
