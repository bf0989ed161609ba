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
//! A slot is a handle: its clones are the same slot, so a background task (a reshape that
//! swaps the array when done) can stop and wait for the passes on the array it replaces.

use nbraid_core::{PassControl, PassState};
use parking_lot::Mutex;
use std::future::Future;
use std::sync::Arc;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The latest pass of one kind on a volume, and its task.
pub struct TaskSlot<C> {
    latest: Arc<Mutex<Option<Spawned<C>>>>,
}

struct Spawned<C> {
    ctl: Arc<C>,
    task: JoinHandle<()>,
    /// Says `true` once the task returned (dropped unsaid if it panicked: returned too).
    returned: watch::Receiver<bool>,
}

impl<C> Default for TaskSlot<C> {
    fn default() -> Self {
        TaskSlot {
            latest: Arc::default(),
        }
    }
}

impl<C> Clone for TaskSlot<C> {
    /// The same slot.
    fn clone(&self) -> Self {
        TaskSlot {
            latest: self.latest.clone(),
        }
    }
}

impl<C: Send + Sync + 'static> TaskSlot<C> {
    /// The latest pass's control (running or finished), if one started.
    pub fn latest(&self) -> Option<Arc<C>> {
        self.latest.lock().as_ref().map(|s| s.ctl.clone())
    }

    /// The latest pass's control while its task has not returned (an `idle` pass just
    /// spawned included).
    pub fn alive(&self) -> Option<Arc<C>> {
        let slot = self.latest.lock();
        slot.as_ref()
            .filter(|s| !s.task.is_finished())
            .map(|s| s.ctl.clone())
    }

    /// Whether the latest pass's task has not returned yet.
    pub fn task_alive(&self) -> bool {
        self.latest
            .lock()
            .as_ref()
            .is_some_and(|s| !s.task.is_finished())
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
        let mut slot = self.latest.lock();
        let latest = slot.as_ref().map(|s| (&s.ctl, !s.task.is_finished()));
        let ctl = choose(latest)?;
        let before = slot.take().map(|s| s.task);
        let work = run(ctl.clone());
        let (said, returned) = watch::channel(false);
        let task = tokio::spawn(async move {
            if let Some(before) = before {
                // Its outcome was logged by its own task; only its end matters here.
                let _ = before.await;
            }
            work.await;
            let _ = said.send(true);
        });
        *slot = Some(Spawned {
            ctl: ctl.clone(),
            task,
            returned,
        });
        Some(ctl)
    }

    /// Waits until the latest task returned (and so every task of the slot before it); at
    /// once when none was started.
    pub async fn drain(&self) {
        let returned = self.latest.lock().as_ref().map(|s| s.returned.clone());
        if let Some(mut returned) = returned {
            // An error: the sender is gone unsaid, the task with it (a panic).
            let _ = returned.wait_for(|&r| r).await;
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
        let slot = self.latest.lock();
        let s = slot.as_ref()?;
        Some(seen_state(s.ctl.state(), !s.task.is_finished()))
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
