//! The ring thread: an [`Engine`] is a few rings, each driven by one thread. Callers push
//! operations on a channel ([`Ring::submit`]); the thread moves everything queued into the
//! submission queue, submits it with one `io_uring_enter` per loop turn (batching), reaps
//! completions and completes the callers' futures. A sleeping ring thread waits in the kernel
//! on both its completions and an eventfd that submitters poke only when it sleeps, so a busy
//! ring costs no extra syscalls per op.

use super::eventfd;
use super::op::{Next, Op};
use super::UringError;
use crossbeam_channel::{Receiver, Sender, TryRecvError};
use io_uring::{opcode, types, IoUring, Probe};
use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{fence, AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

/// Submission queue entries per ring.
const RING_ENTRIES: u32 = 256;
/// Most user operations a ring keeps in the kernel at once: the completion queue holds
/// 2 × RING_ENTRIES, one of which is the armed eventfd read, so completions never overflow.
const MAX_IN_FLIGHT: usize = 2 * RING_ENTRIES as usize - 1;
/// user_data of the eventfd read that wakes a sleeping ring.
const WAKE_TOKEN: u64 = u64::MAX;
/// IORING_ENTER_GETEVENTS: an enter that also runs the completions deferred to the ring's
/// thread (DEFER_TASKRUN) and may wait for some.
const ENTER_GETEVENTS: u32 = 1;
/// Most submits tried to make room for one entry before its op fails (normally one is enough:
/// the kernel takes the whole queue).
const SUBMIT_ATTEMPTS: u32 = 64;

/// A pool of rings, each on its own thread. Members are spread over the rings.
pub struct Engine {
    rings: Vec<Arc<Ring>>,
    next: AtomicUsize,
}

static DEFAULT_ENGINE: OnceLock<Result<Arc<Engine>, String>> = OnceLock::new();

impl Engine {
    /// An engine with `threads` rings (at least one).
    pub fn new(threads: usize) -> Result<Arc<Engine>, UringError> {
        let rings = (0..threads.max(1))
            .map(Ring::start)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Arc::new(Engine {
            rings,
            next: AtomicUsize::new(0),
        }))
    }

    /// The process-wide engine: one ring per available CPU (at most 4), started on first use.
    pub fn global() -> Result<Arc<Engine>, UringError> {
        let r = DEFAULT_ENGINE.get_or_init(|| {
            let n = std::thread::available_parallelism().map_or(1, |n| n.get().min(4));
            Engine::new(n).map_err(|e| e.to_string())
        });
        match r {
            Ok(e) => Ok(e.clone()),
            Err(msg) => Err(UringError::Setup(io::Error::other(msg.clone()))),
        }
    }

    pub(super) fn pick(&self) -> Arc<Ring> {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.rings.len();
        self.rings[i].clone()
    }
}

/// Sets up one ring and checks the kernel offers every opcode we use. Asks for
/// SINGLE_ISSUER + DEFER_TASKRUN (Linux 6.1+: completions are processed when the ring thread
/// waits, with no inter-processor interrupts) and falls back to a plain ring where refused.
pub(super) fn new_ring() -> Result<IoUring, UringError> {
    let ring = match IoUring::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .build(RING_ENTRIES)
    {
        Ok(r) => r,
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            tracing::debug!("io_uring DEFER_TASKRUN not available; using a plain ring");
            IoUring::new(RING_ENTRIES).map_err(UringError::Setup)?
        }
        Err(e) => return Err(UringError::Setup(e)),
    };
    let mut probe = Probe::new();
    ring.submitter()
        .register_probe(&mut probe)
        .map_err(UringError::Setup)?;
    for (code, name) in [
        (opcode::Read::CODE, "IORING_OP_READ"),
        (opcode::Write::CODE, "IORING_OP_WRITE"),
        (opcode::Fsync::CODE, "IORING_OP_FSYNC"),
        (opcode::Fallocate::CODE, "IORING_OP_FALLOCATE"),
    ] {
        if !probe.is_supported(code) {
            return Err(UringError::MissingOpcode(name));
        }
    }
    Ok(ring)
}

/// The submitting side of one ring thread.
pub(super) struct Ring {
    tx: Sender<Op>,
    /// Eventfd the ring thread keeps a read armed on; written to wake it.
    wake_fd: OwnedFd,
    /// True while the ring thread is (about to be) blocked in the kernel.
    sleeping: Arc<AtomicBool>,
    /// Ops handed to this ring (tests check which path an op took).
    #[cfg(test)]
    pub(super) submitted: AtomicUsize,
}

impl Ring {
    fn start(index: usize) -> Result<Arc<Ring>, UringError> {
        let wake_fd = eventfd::new(false).map_err(UringError::Setup)?;
        // The thread reads the eventfd through its own descriptor (a clone).
        let thread_wake = wake_fd.try_clone().map_err(UringError::Setup)?;
        let (tx, rx) = crossbeam_channel::unbounded();
        let sleeping = Arc::new(AtomicBool::new(false));
        let thread_sleeping = sleeping.clone();
        // The ring is created on its own thread: with SINGLE_ISSUER the creating thread is the
        // only one allowed to submit.
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name(format!("nbraid-uring-{index}"))
            .spawn(move || match new_ring() {
                Ok(ring) => {
                    let _ = ready_tx.send(Ok(()));
                    RingThread::new(ring, rx, thread_wake, thread_sleeping).run();
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                }
            })
            .map_err(UringError::Thread)?;
        match ready_rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e),
            Err(_) => {
                return Err(UringError::Thread(io::Error::other(
                    "io_uring engine thread exited during start-up",
                )))
            }
        }
        Ok(Arc::new(Ring {
            tx,
            wake_fd,
            sleeping,
            #[cfg(test)]
            submitted: AtomicUsize::new(0),
        }))
    }

    pub(super) fn submit(&self, op: Op) {
        #[cfg(test)]
        self.submitted.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = self.tx.send(op) {
            // The ring thread is gone: fail the op instead of hanging its caller.
            let op = e.into_inner();
            let _ = op
                .tx
                .send(Err(io::Error::other("io_uring engine thread has stopped")));
            return;
        }
        fence(Ordering::SeqCst);
        if self.sleeping.load(Ordering::SeqCst) && self.sleeping.swap(false, Ordering::SeqCst) {
            self.wake();
        }
    }

    fn wake(&self) {
        eventfd::signal(&self.wake_fd);
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // Disconnect first, then wake the thread so it sees the disconnect and exits.
        let (dummy, _) = crossbeam_channel::bounded(0);
        drop(std::mem::replace(&mut self.tx, dummy));
        self.wake();
    }
}

/// The state one ring thread drives.
pub(super) struct RingThread {
    ring: IoUring,
    rx: Receiver<Op>,
    wake_fd: OwnedFd,
    sleeping: Arc<AtomicBool>,
    /// In-flight ops by slot; user_data is the slot index.
    slots: Vec<Option<Op>>,
    free: Vec<usize>,
    in_flight: usize,
    /// Ops received but not yet in the submission queue.
    backlog: VecDeque<Op>,
    /// Target of the armed eventfd read.
    wake_buf: Box<u64>,
    wake_armed: bool,
    /// Scratch space for completions being reaped.
    reaped: Vec<(u64, i32)>,
}

impl RingThread {
    pub(super) fn new(
        ring: IoUring,
        rx: Receiver<Op>,
        wake_fd: OwnedFd,
        sleeping: Arc<AtomicBool>,
    ) -> Self {
        RingThread {
            ring,
            rx,
            wake_fd,
            sleeping,
            slots: Vec::new(),
            free: Vec::new(),
            in_flight: 0,
            backlog: VecDeque::new(),
            wake_buf: Box::new(0),
            wake_armed: false,
            reaped: Vec::new(),
        }
    }

    /// Puts `entry` in the submission queue. When the queue is full, what is queued goes to
    /// the kernel first (and, when the kernel is busy, completions are reaped to make room),
    /// at most [`SUBMIT_ATTEMPTS`] times: a ring that stays stuck fails the entry's op with
    /// an error instead of spinning forever.
    pub(super) fn push(&mut self, entry: &io_uring::squeue::Entry) -> io::Result<()> {
        let mut last_error = None;
        for _ in 0..SUBMIT_ATTEMPTS {
            // SAFETY: every entry points at memory owned by an in-flight slot (or at
            // `wake_buf`), which stays put until its completion is reaped.
            if unsafe { self.ring.submission().push(entry) }.is_ok() {
                return Ok(());
            }
            match self.ring.submit() {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                Err(e) => {
                    // EBUSY/EAGAIN: the kernel wants completions reaped before it takes more
                    // (posted first: a DEFER_TASKRUN ring posts them only on GETEVENTS).
                    tracing::warn!("io_uring submit failed: {e}; reaping completions");
                    self.wait(0);
                    last_error = Some(e);
                }
            }
        }
        let cause =
            last_error.map_or_else(|| "the queue stayed full".to_string(), |e| e.to_string());
        Err(io::Error::other(format!(
            "io_uring submission failed {SUBMIT_ATTEMPTS} times in a row ({cause})"
        )))
    }

    fn run(mut self) {
        let mut closed = false;
        loop {
            self.arm_wake();
            while !closed && self.backlog.len() < MAX_IN_FLIGHT {
                match self.rx.try_recv() {
                    Ok(op) => self.backlog.push_back(op),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => closed = true,
                }
            }
            self.start_backlog();
            if closed && self.is_idle() {
                self.leak_wake_buf();
                return;
            }
            let mut want = 1;
            if !self.wake_armed {
                std::thread::sleep(std::time::Duration::from_millis(1));
                want = 0;
            } else if self.backlog.is_empty() && !closed {
                self.sleeping.store(true, Ordering::SeqCst);
                fence(Ordering::SeqCst);
                if !self.rx.is_empty() {
                    self.sleeping.store(false, Ordering::SeqCst);
                    want = 0;
                }
            }
            self.wait(want);
        }
    }

    /// Keeps a read armed on the wake eventfd. When it cannot be armed the thread must not
    /// sleep in the kernel (nothing would wake it for new ops): it polls, pausing briefly,
    /// until it is.
    pub(super) fn arm_wake(&mut self) {
        if self.wake_armed {
            return;
        }
        let ptr = (&mut *self.wake_buf as *mut u64).cast::<u8>();
        let e = opcode::Read::new(types::Fd(self.wake_fd.as_raw_fd()), ptr, 8)
            .build()
            .user_data(WAKE_TOKEN);
        match self.push(&e) {
            Ok(()) => self.wake_armed = true,
            Err(e) => tracing::error!("cannot arm the io_uring wake-up: {e}"),
        }
    }

    /// Whether the wake eventfd's read is armed (a sleeper can be woken).
    pub(super) fn wake_armed(&self) -> bool {
        self.wake_armed
    }

    /// The flag wakers read to learn whether they must poke the eventfd.
    pub(super) fn sleeping(&self) -> &AtomicBool {
        &self.sleeping
    }

    /// No user op in flight or waiting for room.
    pub(super) fn is_idle(&self) -> bool {
        self.in_flight == 0 && self.backlog.is_empty()
    }

    /// Takes `op` in: into the submission queue now when there is room, after the ops
    /// already waiting otherwise.
    pub(super) fn offer(&mut self, op: Op) {
        self.backlog.push_back(op);
        self.start_backlog();
    }

    /// Moves waiting ops into the submission queue while the ring has room for them.
    pub(super) fn start_backlog(&mut self) {
        while self.in_flight < MAX_IN_FLIGHT {
            let Some(op) = self.backlog.pop_front() else {
                break;
            };
            self.start(op);
        }
    }

    /// Submits what is queued, waits in the kernel for `want` completions (0: none) and
    /// reaps what arrived. Ops to run again go back to the backlog.
    pub(super) fn wait(&mut self, want: usize) {
        self.enter(want);
        self.sleeping.store(false, Ordering::SeqCst);
        self.reap();
    }

    /// Submits what is queued and runs the completions the kernel deferred to this thread,
    /// waiting for `want` of them (0: never waits). Always with GETEVENTS: io-uring's
    /// `submit_and_wait(0)` leaves it out, and a DEFER_TASKRUN ring then posts nothing.
    fn enter(&mut self, want: usize) {
        let queued = self.ring.submission().len() as u32;
        // SAFETY: io_uring_enter(2) with no argument struct; every queued entry points at
        // memory owned by an in-flight slot (or the wake read's buffer), which stays put until
        // its completion is reaped.
        let entered = unsafe {
            self.ring.submitter().enter::<libc::sigset_t>(
                queued,
                want as u32,
                ENTER_GETEVENTS,
                None,
            )
        };
        match entered {
            Ok(_) => {}
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR | libc::EBUSY)) => {}
            Err(e) => tracing::error!("io_uring_enter failed: {e}"),
        }
    }

    /// Entries in the submission queue, or ops waiting while the ring has room for them: a
    /// `wait(0)` has work to hand the kernel. (With the ring full, the ops
    /// waiting go in as completions make room: a flush now would do nothing.)
    pub(super) fn has_unsubmitted(&mut self) -> bool {
        let room = self.in_flight < MAX_IN_FLIGHT;
        (room && !self.backlog.is_empty()) || !self.ring.submission().is_empty()
    }

    /// Has the kernel signal `eventfd` whenever completions wait for this thread (with
    /// DEFER_TASKRUN: when work is deferred to it after the last enter with GETEVENTS).
    pub(super) fn register_eventfd(&self, eventfd: RawFd) -> io::Result<()> {
        self.ring.submitter().register_eventfd(eventfd)
    }

    /// Stops signalling the eventfd [`register_eventfd`](Self::register_eventfd) gave.
    pub(super) fn unregister_eventfd(&self) {
        if let Err(e) = self.ring.submitter().unregister_eventfd() {
            tracing::debug!("io_uring: unregistering the completion eventfd: {e}");
        }
    }

    /// User ops in the kernel.
    pub(super) fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Before the ring goes away: the eventfd read may still be armed, so its target stays
    /// allocated rather than risk the kernel writing into freed memory.
    pub(super) fn leak_wake_buf(&mut self) {
        Box::leak(std::mem::replace(&mut self.wake_buf, Box::new(0)));
    }

    fn start(&mut self, mut op: Op) {
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.slots.push(None);
                self.slots.len() - 1
            }
        };
        let e = op.job.entry(slot as u64);
        self.slots[slot] = Some(op);
        self.in_flight += 1;
        if let Err(e) = self.push(&e) {
            // Never queued: the slot is free again and the op fails with the reason.
            let op = self.slots[slot]
                .take()
                .expect("the op just placed in its slot");
            self.in_flight -= 1;
            self.free.push(slot);
            let _ = op.tx.send(Err(e));
        }
    }

    fn reap(&mut self) {
        // Copy the completions out first (completing an op may push to the submission queue);
        // the scratch vector is reused, so reaping allocates nothing.
        let mut done = std::mem::take(&mut self.reaped);
        done.extend(self.ring.completion().map(|c| (c.user_data(), c.result())));
        for &(token, res) in &done {
            if token == WAKE_TOKEN {
                self.wake_armed = false;
                continue;
            }
            let slot = token as usize;
            let Some(op) = self.slots.get_mut(slot).and_then(Option::take) else {
                tracing::error!("io_uring completion for unknown slot {slot}");
                continue;
            };
            self.in_flight -= 1;
            self.free.push(slot);
            let Op { job, tx } = op;
            match job.complete(res) {
                Next::Again(job) => self.backlog.push_front(Op { job, tx }),
                Next::Finished(r) => {
                    let _ = tx.send(r);
                }
            }
        }
        done.clear();
        self.reaped = done;
    }
}
