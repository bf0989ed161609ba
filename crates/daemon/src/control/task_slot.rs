//! One kind of background pass on a volume (its rebuild, its scrub, …) and the task that
//! runs it ([`TaskSlot`]): the latest pass's control, and whether its task is still alive —
//! which the pass's own state cannot say (a pass just spawned is `idle` until its first
//! window; a cancelled one says `cancelled` while its windows in flight drain; a rebuild
//! says `done` before its members are committed current).
//!
//! At most one task per slot runs a pass at a time: a new one started while the last one's
//! task is alive waits for it to return first. Two tasks over the same control, or two
//! passes writing the same progress records, would each think they own it.
//!
//! Each run keeps an id no other run of the daemon has and, once its task returned, the
//! state it ended in; the last [`RUNS_KEPT`] runs are kept ([`TaskSlot::runs`]), so a
//! watcher that looks now and then still sees every run since its last look — a tiny
//! volume's scrub is over in milliseconds, a resumed pass runs the same control again, and
//! a control's address may be reused by the next one.
//!
//! A slot is a handle: its clones are the same slot, so a background task (a reshape that
//! swaps the array when done) can stop and wait for the passes on the array it replaces.

use nbraid_core::metadata::{FillControl, RefillControl};
use nbraid_core::{PassControl, PassState, ScrubControl};
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Runs a slot keeps for its watchers: far more than requests start between two of the
/// observer's looks (four a second).
pub const RUNS_KEPT: usize = 8;

/// The next run's id: unique among every slot's runs while the daemon runs.
static NEXT_RUN_ID: AtomicU64 = AtomicU64::new(1);

/// A pass's control as its slot reads it: the state a run ended in is recorded when its
/// task returns (a resumed pass runs the same control again, which then says only the
/// latest run's).
pub trait SlotControl: Send + Sync + 'static {
    fn pass_state(&self) -> PassState;
}

impl SlotControl for PassControl {
    fn pass_state(&self) -> PassState {
        self.state()
    }
}

impl SlotControl for ScrubControl {
    fn pass_state(&self) -> PassState {
        self.state()
    }
}

impl SlotControl for FillControl {
    fn pass_state(&self) -> PassState {
        self.state()
    }
}

impl SlotControl for RefillControl {
    fn pass_state(&self) -> PassState {
        self.pass.state()
    }
}

/// The recent runs of one kind of pass on a volume, and their tasks.
pub struct TaskSlot<C> {
    /// Oldest first; the latest run last. At most [`RUNS_KEPT`].
    runs: Arc<Mutex<VecDeque<Spawned<C>>>>,
}

struct Spawned<C> {
    /// Unique among the daemon's runs ([`NEXT_RUN_ID`]).
    id: u64,
    ctl: Arc<C>,
    task: JoinHandle<()>,
    /// The state the run ended in, said once its task returned (dropped unsaid if it
    /// panicked: returned too).
    returned: watch::Receiver<Option<PassState>>,
}

impl<C: SlotControl> Spawned<C> {
    fn task_alive(&self) -> bool {
        !self.task.is_finished()
    }

    /// The run's state as a watcher should see it: the state it ended in once its task
    /// returned, else `running` while its task is alive past the pass's end.
    fn seen(&self) -> PassState {
        match *self.returned.borrow() {
            Some(ended) => ended,
            None => seen_state(self.ctl.pass_state(), self.task_alive()),
        }
    }
}

/// One run of a slot's pass, as watchers see it.
pub struct Run<C> {
    /// Unique among the daemon's runs: tells this run from every other.
    pub id: u64,
    pub ctl: Arc<C>,
    /// `running` until its task returned, then the state it ended in.
    pub state: PassState,
    /// Its task returned (a run that returned `idle` never got to its first window).
    pub returned: bool,
}

impl<C> Default for TaskSlot<C> {
    fn default() -> Self {
        TaskSlot {
            runs: Arc::default(),
        }
    }
}

impl<C> Clone for TaskSlot<C> {
    /// The same slot.
    fn clone(&self) -> Self {
        TaskSlot {
            runs: self.runs.clone(),
        }
    }
}

impl<C: SlotControl> TaskSlot<C> {
    /// The latest pass's control (running or finished), if one started.
    pub fn latest(&self) -> Option<Arc<C>> {
        self.runs.lock().back().map(|s| s.ctl.clone())
    }

    /// The latest pass's control while its task has not returned (an `idle` pass just
    /// spawned included).
    pub fn alive(&self) -> Option<Arc<C>> {
        let runs = self.runs.lock();
        runs.back()
            .filter(|s| s.task_alive())
            .map(|s| s.ctl.clone())
    }

    /// Whether the latest pass's task has not returned yet.
    pub fn task_alive(&self) -> bool {
        self.runs.lock().back().is_some_and(Spawned::task_alive)
    }

    /// The recent runs (up to [`RUNS_KEPT`]), oldest first.
    pub fn runs(&self) -> Vec<Run<C>> {
        let runs = self.runs.lock();
        runs.iter()
            .map(|s| Run {
                id: s.id,
                ctl: s.ctl.clone(),
                state: s.seen(),
                returned: s.returned.borrow().is_some() || !s.task_alive(),
            })
            .collect()
    }

    /// Under the slot's lock, `choose(latest, its task alive)` names the control to run
    /// (`None`: leave the slot as it is); then `run(control)` is spawned, after the latest
    /// task returned. The control started, if one was.
    pub fn start<F>(
        &self,
        choose: impl FnOnce(Option<(&Arc<C>, bool)>) -> Option<Arc<C>>,
        run: impl FnOnce(Arc<C>) -> F,
    ) -> Option<Arc<C>>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let mut runs = self.runs.lock();
        let latest = runs.back().map(|s| (&s.ctl, s.task_alive()));
        let ctl = choose(latest)?;
        let before = runs.back().map(|s| s.returned.clone());
        let work = run(ctl.clone());
        let (said, returned) = watch::channel(None);
        let ended = ctl.clone();
        let task = tokio::spawn(async move {
            if let Some(mut before) = before {
                // Its outcome was logged by its own task; only its end matters here (an
                // error: it panicked, and so returned).
                let _ = before.wait_for(Option::is_some).await;
            }
            work.await;
            let _ = said.send(Some(ended.pass_state()));
        });
        runs.push_back(Spawned {
            id: NEXT_RUN_ID.fetch_add(1, Relaxed),
            ctl: ctl.clone(),
            task,
            returned,
        });
        // A run let go of here only leaves the watchers' view: its task goes on.
        while runs.len() > RUNS_KEPT {
            runs.pop_front();
        }
        Some(ctl)
    }

    /// Waits until the latest task returned (and so every task of the slot before it); at
    /// once when none was started.
    pub async fn drain(&self) {
        let returned = self.runs.lock().back().map(|s| s.returned.clone());
        if let Some(mut returned) = returned {
            // An error: the sender is gone unsaid, the task with it (a panic).
            let _ = returned.wait_for(Option::is_some).await;
        }
    }
}

impl TaskSlot<PassControl> {
    /// Cancels the latest pass while its task is alive (a paused one too) and waits for the
    /// task to return: its windows in flight drained, nothing of it runs afterwards.
    pub async fn cancel_and_drain(&self) {
        if let Some(c) = self.alive() {
            c.cancel();
            c.resume(); // a paused pass sees the cancel only once it runs
        }
        self.drain().await;
    }

    /// The latest pass's state as a watcher should see it: `running` while its task is
    /// alive past the pass's end (a rebuild commits its members current after its last
    /// window; a cancelled pass drains the windows in flight).
    pub fn state(&self) -> Option<PassState> {
        let runs = self.runs.lock();
        let s = runs.back()?;
        Some(seen_state(s.ctl.state(), s.task_alive()))
    }
}

/// A pass's state as watchers see it, from its control's state and whether its task is
/// alive: past its end but not returned, it is still `running`.
pub fn seen_state(state: PassState, task_alive: bool) -> PassState {
    match state {
        PassState::Done | PassState::Cancelled | PassState::Failed if task_alive => {
            PassState::Running
        }
        s => s,
    }
}

/// What a request to (re)start a pass does, given the latest pass's state and whether its
/// task is alive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Restart {
    /// A pass is on its way (idle, running or paused, its task alive): left alone.
    Leave,
    /// The latest pass was cancelled: run it again under its control, from its position
    /// (after its task returned, if it has not yet).
    Resume,
    /// None ran, the latest finished, or its task died before it ended: a new pass.
    New,
}

/// Decides [`Restart`] for a pass that resumes when cancelled (the re-add resync).
pub fn restart(latest: Option<(PassState, bool)>) -> Restart {
    match latest {
        Some((PassState::Cancelled | PassState::Failed, _)) => Restart::Resume,
        Some((PassState::Idle | PassState::Running | PassState::Paused, true)) => Restart::Leave,
        _ => Restart::New,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nbraid_core::PassRate;
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    use std::time::Duration;

    #[test]
    fn a_pass_past_its_end_is_running_until_its_task_returns() {
        use PassState::*;
        assert_eq!(seen_state(Done, true), Running);
        assert_eq!(seen_state(Cancelled, true), Running);
        assert_eq!(seen_state(Done, false), Done);
        assert_eq!(seen_state(Cancelled, false), Cancelled);
        assert_eq!(seen_state(Idle, true), Idle);
        assert_eq!(seen_state(Paused, true), Paused);
    }

    #[test]
    fn a_spawned_pass_is_left_alone_until_it_ends_and_a_cancelled_one_resumes() {
        use PassState::*;
        assert_eq!(restart(None), Restart::New);
        // Spawned, not at its first window yet: a second start must not spawn another.
        assert_eq!(restart(Some((Idle, true))), Restart::Leave);
        assert_eq!(restart(Some((Running, true))), Restart::Leave);
        assert_eq!(restart(Some((Paused, true))), Restart::Leave);
        assert_eq!(restart(Some((Cancelled, true))), Restart::Resume);
        assert_eq!(restart(Some((Cancelled, false))), Restart::Resume);
        assert_eq!(restart(Some((Done, false))), Restart::New);
        // Its task returned (an error before its first window) and left it idle.
        assert_eq!(restart(Some((Idle, false))), Restart::New);
        assert_eq!(restart(Some((Running, false))), Restart::New);
    }

    /// A pass started while the last one's task is alive runs only after it returned: the
    /// two never overlap.
    #[tokio::test]
    async fn tasks_in_one_slot_never_overlap() {
        let slot: TaskSlot<PassControl> = TaskSlot::default();
        let (alive, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        for _ in 0..3 {
            let (alive, most) = (alive.clone(), most.clone());
            let started = slot.start(
                |_| Some(Arc::new(PassControl::new(0))),
                move |_| async move {
                    let now = alive.fetch_add(1, SeqCst) + 1;
                    most.fetch_max(now, SeqCst);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    alive.fetch_sub(1, SeqCst);
                },
            );
            assert!(started.is_some());
        }
        assert!(slot.task_alive());
        while slot.task_alive() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(most.load(SeqCst), 1, "two tasks of one slot overlapped");
    }

    /// A clone of the slot waits for the same task (a reshape's end waits so for the passes
    /// on the array it replaces); `cancel_and_drain` stops a pass that runs until cancelled,
    /// a paused one too.
    #[tokio::test]
    async fn a_clone_of_the_slot_waits_for_its_task_and_a_cancelled_pass_returns() {
        use futures::FutureExt;
        let slot: TaskSlot<PassControl> = TaskSlot::default();
        slot.drain().await; // none started: at once
        let (go, wait) = tokio::sync::oneshot::channel::<()>();
        slot.start(
            |_| Some(Arc::new(PassControl::new(0))),
            |_| async move {
                let _ = wait.await;
            },
        );
        let other = slot.clone();
        let mut drained = Box::pin(other.drain());
        assert!((&mut drained).now_or_never().is_none(), "its task waits");
        go.send(()).unwrap();
        drained.await;
        assert!(!slot.task_alive());

        let ctl = slot
            .start(
                |_| Some(Arc::new(PassControl::new(0))),
                |ctl| async move {
                    while ctl.is_paused() || !ctl.is_cancelled() {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                },
            )
            .unwrap();
        ctl.pause();
        slot.clone().cancel_and_drain().await;
        assert!(!slot.task_alive() && ctl.is_cancelled() && !ctl.is_paused());
    }

    /// Each run has an id of its own and, once its task returned, the state it ended in: a
    /// resumed pass runs the same control again, which then says only the latest run's
    /// (the observer told runs apart by their control's address, which the next one may
    /// reuse, and missed whatever happened between two of its looks).
    #[tokio::test]
    async fn each_run_keeps_its_id_and_the_state_it_ended_in() {
        let slot: TaskSlot<PassControl> = TaskSlot::default();
        let ctl = Arc::new(PassControl::new(0));
        slot.start(
            |_| Some(ctl.clone()),
            |c| async move { c.failed(&"a member went away") },
        );
        slot.drain().await;
        let (go, wait) = tokio::sync::oneshot::channel::<()>();
        slot.start(
            |latest| latest.map(|(c, _)| c.clone()),
            |_| async move {
                let _ = wait.await;
            },
        );
        let runs = slot.runs();
        assert_eq!(runs.len(), 2);
        assert!(runs[0].id != runs[1].id && Arc::ptr_eq(&runs[0].ctl, &runs[1].ctl));
        assert_eq!((runs[0].state, runs[0].returned), (PassState::Failed, true));
        // The control still says the first run's end: the second is under way.
        assert_eq!(
            (runs[1].state, runs[1].returned),
            (PassState::Running, false)
        );
        go.send(()).unwrap();
        slot.drain().await;
        assert!(slot.runs().iter().all(|r| r.returned));
        // Only the latest runs are kept, the newest last.
        for _ in 0..RUNS_KEPT + 2 {
            slot.start(|_| Some(Arc::new(PassControl::new(0))), |_| async {});
        }
        let runs = slot.runs();
        assert_eq!(runs.len(), RUNS_KEPT);
        assert!(runs.windows(2).all(|w| w[0].id < w[1].id));
        assert!(Arc::ptr_eq(
            &runs[RUNS_KEPT - 1].ctl,
            &slot.latest().unwrap()
        ));
    }

    /// A pass just spawned is alive before its first window (a reload re-rates it); a
    /// finished one is not.
    #[tokio::test]
    async fn a_pass_is_alive_from_its_spawn_to_its_task_s_return() {
        let slot: TaskSlot<PassControl> = TaskSlot::default();
        let (go, wait) = tokio::sync::oneshot::channel::<()>();
        let ctl = slot
            .start(
                |_| Some(Arc::new(PassControl::new(1))),
                |_| async move {
                    let _ = wait.await;
                },
            )
            .unwrap();
        assert_eq!(slot.state(), Some(PassState::Idle));
        let rate = PassRate {
            limit_bytes_per_s: 5 << 20,
            adaptive: false,
        };
        slot.alive()
            .expect("alive before its first window")
            .set_pass_rate(rate);
        assert_eq!(ctl.pass_rate(), rate);
        go.send(()).unwrap();
        while slot.task_alive() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(slot.alive().is_none());
        // Declined: the slot keeps its latest.
        assert!(slot.start(|_| None, |_| async {}).is_none());
        assert!(Arc::ptr_eq(&slot.latest().unwrap(), &ctl));
    }
}
