//! The caller's own ring: while a thread runs a future through [`block_on`], the member ops
//! that future starts on that thread go into a ring the thread owns (created on its first
//! `block_on`, kept for the thread's life). The thread submits them and waits for their
//! completions in one `io_uring_enter` whenever the future has nothing left to do — fio's
//! shape. No ring thread stands between the caller and the kernel, so a completion wakes the
//! caller directly: one wake-up per batch of completions instead of the ring thread's wake-up
//! plus the caller's (on the root disk, 2.3 context switches per 4 KiB write).
//!
//! A thread with an event loop of its own (the daemon's I/O workers, a tokio current-thread
//! runtime each) installs a [`DrivenRing`] instead: every op started on the thread goes to its
//! ring, and the loop turns the ring when an op is queued or the ring's eventfd says
//! completions wait.
//!
//! The ring is SINGLE_ISSUER + DEFER_TASKRUN where the kernel has them (its creator is the
//! only thread that ever enters it; completions are posted only when it enters with
//! GETEVENTS). Ops started elsewhere — on another thread, or on this one outside `block_on`
//! and without a driven ring — keep going to the engine's ring threads. Wakers from other threads
//! (a ring thread's completion, a timer) poke an eventfd whose read the ring keeps armed, only
//! when the caller sleeps, as submitters poke a sleeping ring thread. Buffers stay owned by
//! the in-flight op until its completion; before the outermost `block_on` returns it waits for
//! every op still in flight (a dropped future's), so no op outlives the wait that reaps it.

use super::eventfd;
use super::op::Op;
use super::ring::{new_ring, RingThread};
use std::cell::{Cell, RefCell};
use std::future::Future;
use std::io;
use std::mem::ManuallyDrop;
use std::os::fd::{AsRawFd, OwnedFd};
use std::pin::pin;
use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

thread_local! {
    static CALLER: Caller = const {
        Caller {
            ring: RefCell::new(None),
            depth: Cell::new(0),
            driven: Cell::new(false),
            driver: RefCell::new(None),
        }
    };
}

/// This thread's ring, how deep in `block_on` it is, and whether an event loop drives it.
struct Caller {
    ring: RefCell<Option<CallerRing>>,
    /// Nested `block_on` calls running on this thread (ops go to the ring while > 0).
    depth: Cell<usize>,
    /// A [`DrivenRing`] is installed: ops go to the ring at any depth.
    driven: Cell<bool>,
    /// The driving loop's waker, woken (once) when an op is queued for its next turn.
    driver: RefCell<Option<Waker>>,
}

/// A ring driven by the thread that created it.
struct CallerRing {
    /// The ring, its in-flight slots and waiting ops (the ring thread's bookkeeping, reused);
    /// dropped only when idle (see `Drop`).
    ring: ManuallyDrop<RingThread>,
    /// What a waker needs to interrupt the thread's wait.
    poke: Arc<Poke>,
}

/// The sleeping flag and eventfd of one caller ring.
struct Poke {
    sleeping: Arc<AtomicBool>,
    eventfd: OwnedFd,
}

impl Poke {
    fn wake(&self) {
        if self.sleeping.load(Ordering::SeqCst) && self.sleeping.swap(false, Ordering::SeqCst) {
            eventfd::signal(&self.eventfd);
        }
    }
}

/// The waker of one `block_on`: marks the future to be polled again and, when the thread
/// sleeps in the kernel, pokes it awake.
struct CallerWake {
    woken: AtomicBool,
    poke: Arc<Poke>,
}

impl Wake for CallerWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        self.poke.wake();
    }
}

impl CallerRing {
    fn new() -> io::Result<CallerRing> {
        let ring = new_ring().map_err(io::Error::other)?;
        let eventfd = eventfd::new(false)?;
        let sleeping = Arc::new(AtomicBool::new(false));
        let ring_fd = eventfd.try_clone()?;
        let ring = RingThread::new(ring, crossbeam_channel::never(), ring_fd, sleeping.clone());
        Ok(CallerRing {
            ring: ManuallyDrop::new(ring),
            poke: Arc::new(Poke { sleeping, eventfd }),
        })
    }

    /// One turn of the wait: queue what can go, then — unless `woken` is already set — sleep
    /// in the kernel until a completion or a poke, and reap.
    fn turn(&mut self, woken: &AtomicBool) {
        self.ring.arm_wake();
        self.ring.start_backlog();
        let mut want = 1;
        if !self.ring.wake_armed() {
            // Nothing could poke a sleeper (the arm is retried each turn): wait only for our
            // own ops, or, with none in flight, look again shortly.
            if self.ring.in_flight() == 0 {
                std::thread::sleep(std::time::Duration::from_millis(1));
                want = 0;
            }
        } else {
            self.ring.sleeping().store(true, Ordering::SeqCst);
            fence(Ordering::SeqCst);
            if woken.load(Ordering::SeqCst) {
                self.ring.sleeping().store(false, Ordering::SeqCst);
                want = 0;
            }
        }
        self.ring.wait(want);
        self.ring.start_backlog();
    }

    /// Waits until every op of this ring has completed (its buffers are the kernel's until
    /// then).
    fn drain(&mut self) {
        self.ring.start_backlog();
        while !self.ring.is_idle() {
            self.ring.wait(1);
            self.ring.start_backlog();
        }
    }
}

impl Drop for CallerRing {
    fn drop(&mut self) {
        // Only a panic that unwound past the drain leaves ops in flight: then the ring and
        // their memory stay (leaked) rather than let the kernel write into freed buffers.
        if self.ring.is_idle() {
            self.ring.leak_wake_buf();
            // SAFETY: dropped once, here, and never used again (`self` is being dropped).
            unsafe { ManuallyDrop::drop(&mut self.ring) };
        }
    }
}

/// Hands `op` to this thread's ring when the thread is inside [`block_on`] or has a
/// [`DrivenRing`] (whose loop is then told); gives it back otherwise (or when the ring is
/// busy reaping), for the engine's ring thread.
pub(super) fn try_submit(op: Op) -> Result<(), Op> {
    let mut op = Some(op);
    // `try_with` fails only while the thread's locals are destroyed: the op is still ours.
    let _ = CALLER.try_with(|c| {
        if c.depth.get() == 0 && !c.driven.get() {
            return;
        }
        if let Ok(mut ring) = c.ring.try_borrow_mut() {
            if let (Some(r), Some(op)) = (ring.as_mut(), op.take()) {
                r.ring.offer(op);
            }
        }
        if op.is_none() && c.driven.get() {
            // Outside the ring's borrow: the driver's waker may run code of its own.
            let driver = c.driver.try_borrow_mut().ok().and_then(|mut d| d.take());
            if let Some(w) = driver {
                w.wake();
            }
        }
    });
    match op {
        Some(op) => Err(op),
        None => Ok(()),
    }
}

/// Runs `fut` to completion on this thread, which drives its own ring meanwhile: the member
/// ops `fut` starts here are submitted and reaped by this thread (see the module's docs).
/// Where no ring can be set up it runs `fut` as `futures::executor::block_on` would, with the
/// ops on the engine's ring threads.
///
/// Inside `fut`, nothing may block this thread on another executor (a nested
/// `futures::executor::block_on`, a runtime's `block_on`): an op started there would wait in
/// this thread's ring, which only this loop submits and reaps.
pub fn block_on<F: Future>(fut: F) -> F::Output {
    let Some(poke) = enter() else {
        return futures::executor::block_on(fut);
    };
    let _leave = Leave;
    let wake = Arc::new(CallerWake {
        woken: AtomicBool::new(false),
        poke,
    });
    let waker = Waker::from(wake.clone());
    let mut cx = Context::from_waker(&waker);
    let mut fut = pin!(fut);
    loop {
        wake.woken.store(false, Ordering::SeqCst);
        if let Poll::Ready(out) = fut.as_mut().poll(&mut cx) {
            return out;
        }
        while !wake.woken.load(Ordering::SeqCst) {
            CALLER.with(|c| match c.ring.try_borrow_mut() {
                Ok(mut ring) => match ring.as_mut() {
                    Some(r) => r.turn(&wake.woken),
                    None => std::thread::yield_now(),
                },
                // Only a waker run while this thread reaps could get here: let it finish.
                Err(_) => std::thread::yield_now(),
            });
        }
    }
}

/// Enters `block_on` on this thread, creating its ring on first use; `None` when the ring
/// cannot be created.
fn enter() -> Option<Arc<Poke>> {
    // `try_with`: while the thread's locals are destroyed there is no ring to enter.
    CALLER
        .try_with(|c| {
            let mut slot = c.ring.try_borrow_mut().ok()?;
            if slot.is_none() {
                match CallerRing::new() {
                    Ok(r) => *slot = Some(r),
                    Err(e) => {
                        tracing::debug!("no caller-owned io_uring ({e}); ops use the ring threads");
                        return None;
                    }
                }
            }
            c.depth.set(c.depth.get() + 1);
            slot.as_ref().map(|r| r.poke.clone())
        })
        .ok()
        .flatten()
}

/// Leaves `block_on` (also when the future panics): the outermost one waits for every op
/// still in flight on this thread's ring.
struct Leave;

impl Drop for Leave {
    fn drop(&mut self) {
        let _ = CALLER.try_with(|c| {
            let depth = c.depth.get().saturating_sub(1);
            c.depth.set(depth);
            if depth == 0 {
                if let Ok(mut ring) = c.ring.try_borrow_mut() {
                    if let Some(r) = ring.as_mut() {
                        r.drain();
                    }
                }
            }
        });
    }
}

/// This thread's ring, driven by the thread's own event loop rather than by [`block_on`]
/// (the daemon's I/O workers: a tokio current-thread runtime each). While it is installed,
/// every member op started on this thread goes into the ring; the loop must then
/// - call [`turn`](Self::turn) soon after the waker given to
///   [`wake_when_queued`](Self::wake_when_queued) is woken (an op waits to be submitted), and
/// - call it when [`completion_fd`](Self::completion_fd) turns readable (completions wait:
///   with DEFER_TASKRUN the kernel posts them only when this thread enters the ring), after
///   [`take_signal`](Self::take_signal).
///
/// The thread must never block on anything an op in its ring would finish (a nested
/// `futures::executor::block_on`): only this thread reaps them. Dropping it waits for every
/// op still in the ring; the ring itself stays for the thread's life.
pub struct DrivenRing {
    /// Registered with the ring: readable when completions wait for a turn.
    eventfd: OwnedFd,
    /// Bound to the thread that installed it (its ring is a thread local).
    _thread: std::marker::PhantomData<*const ()>,
}

impl DrivenRing {
    /// Installs this thread's ring for its event loop; an error when the ring cannot be
    /// created (ops then keep the engine's ring threads) or one is installed already.
    pub fn install() -> io::Result<DrivenRing> {
        CALLER.with(|c| {
            if c.driven.get() {
                return Err(io::Error::other(
                    "this thread's io_uring is driven by a loop already",
                ));
            }
            let mut slot = c
                .ring
                .try_borrow_mut()
                .map_err(|_| io::Error::other("this thread's io_uring is busy"))?;
            if slot.is_none() {
                *slot = Some(CallerRing::new()?);
            }
            let eventfd = eventfd::new(true)?;
            let ring = slot.as_ref().expect("created above");
            ring.ring.register_eventfd(eventfd.as_raw_fd())?;
            c.driven.set(true);
            Ok(DrivenRing {
                eventfd,
                _thread: std::marker::PhantomData,
            })
        })
    }

    /// Readable when completions wait for a [`turn`](Self::turn) (non-blocking eventfd).
    pub fn completion_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.eventfd.as_fd()
    }

    /// Clears the completion signal; true when it was set.
    pub fn take_signal(&self) -> bool {
        eventfd::take(&self.eventfd)
    }

    /// Wakes `waker` once, when the next op is queued for this ring.
    pub fn wake_when_queued(&self, waker: &Waker) {
        CALLER.with(|c| {
            if let Ok(mut d) = c.driver.try_borrow_mut() {
                match d.as_mut() {
                    Some(w) if w.will_wake(waker) => {}
                    _ => *d = Some(waker.clone()),
                }
            }
        });
    }

    /// Ops queued that no turn has handed the kernel yet.
    pub fn has_queued(&self) -> bool {
        CALLER.with(|c| match c.ring.try_borrow_mut() {
            Ok(mut ring) => ring.as_mut().is_some_and(|r| r.ring.has_unsubmitted()),
            Err(_) => false,
        })
    }

    /// Submits the queued ops, runs the completions the kernel deferred to this thread and
    /// finishes their ops (waking their tasks); never waits.
    pub fn turn(&self) {
        CALLER.with(|c| {
            if let Ok(mut ring) = c.ring.try_borrow_mut() {
                if let Some(r) = ring.as_mut() {
                    r.ring.start_backlog();
                    r.ring.wait(0);
                    r.ring.start_backlog();
                }
            }
        });
    }
}

impl Drop for DrivenRing {
    fn drop(&mut self) {
        let _ = CALLER.try_with(|c| {
            c.driven.set(false);
            if let Ok(mut d) = c.driver.try_borrow_mut() {
                d.take();
            }
            if let Ok(mut ring) = c.ring.try_borrow_mut() {
                if let Some(r) = ring.as_mut() {
                    r.ring.unregister_eventfd();
                    if c.depth.get() == 0 {
                        r.drain();
                    }
                }
            }
        });
    }
}

#[cfg(test)]
/// Ops this thread's ring has in flight or waiting (tests check that none is left).
pub(super) fn caller_ops_pending() -> bool {
    CALLER.with(|c| c.ring.borrow().as_ref().is_some_and(|r| !r.ring.is_idle()))
}
