//! The I/O workers: the threads NBD connections are served on. Each runs a tokio
//! current-thread runtime and owns an io_uring ([`DrivenRing`]): the member ops its
//! connections' requests start go into that ring, are submitted in batches when the worker
//! has run what it can, and their completions wake the worker's own event loop — no ring
//! thread between a request and the kernel (the engine's ring threads still serve everything
//! else: the control socket, rebuilds, scrubs, the flusher).
//!
//! A connection stays on the worker it was dealt (`nbd::Server::run_connections_on`), and so
//! do the tasks it spawns — but for its long reads and writes while a worker serves no
//! connection: those run there, so one client alone gets both threads
//! (`nbd::Limits::spare_worker_min_len`, `NBRAIDD_SPARE_WORKER_KIB`). `NBRAIDD_IO_WORKERS`
//! sets how many workers run (default: one per CPU); `0` serves connections on the shared
//! runtime with ops through the ring threads, as before the workers (for benchmarks:
//! `scripts/bench-nbd` compares the two).

use anyhow::{Context as _, Result};
use nbraid_core::uring::DrivenRing;
use std::future::poll_fn;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::mpsc;
use std::task::Poll;
use std::time::Duration;
use tokio::io::unix::AsyncFd;
use tokio::runtime::Handle;
use tokio::sync::oneshot;

/// Longest a stopping daemon waits for a worker's thread to end (ops still in its ring finish
/// first); one that takes longer is left to the process's exit.
const STOP_WAIT: Duration = Duration::from_secs(10);

/// The running workers.
pub struct IoWorkers {
    workers: Vec<Worker>,
}

struct Worker {
    handle: Handle,
    stop: oneshot::Sender<()>,
    done: mpsc::Receiver<()>,
}

impl IoWorkers {
    /// Starts `count` workers (none for 0).
    pub fn start(count: usize) -> Result<IoWorkers> {
        let workers = (0..count).map(start_worker).collect::<Result<Vec<_>>>()?;
        Ok(IoWorkers { workers })
    }

    /// How many workers to run: `NBRAIDD_IO_WORKERS`, else one per CPU.
    pub fn count_wanted() -> usize {
        let default = std::thread::available_parallelism().map_or(1, |n| n.get());
        match std::env::var("NBRAIDD_IO_WORKERS") {
            Err(_) => default,
            Ok(text) => text.trim().parse().unwrap_or_else(|_| {
                tracing::warn!("NBRAIDD_IO_WORKERS={text:?} is not a number of threads: ignored");
                default
            }),
        }
    }

    /// The workers' runtimes, for the NBD server to deal connections to.
    pub fn handles(&self) -> Vec<Handle> {
        self.workers.iter().map(|w| w.handle.clone()).collect()
    }

    /// Stops every worker and waits (at most [`STOP_WAIT`] for all) for its thread to end:
    /// the tasks left on it are dropped, then the ops still in its ring finish.
    pub fn stop(self) {
        let deadline = std::time::Instant::now() + STOP_WAIT;
        let waiting: Vec<_> = self
            .workers
            .into_iter()
            .map(|w| {
                let _ = w.stop.send(());
                w.done
            })
            .collect();
        for (i, done) in waiting.into_iter().enumerate() {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if let Err(mpsc::RecvTimeoutError::Timeout) = done.recv_timeout(left) {
                tracing::warn!("I/O worker {i} did not stop within {STOP_WAIT:?}; left running");
            }
        }
    }
}

fn start_worker(index: usize) -> Result<Worker> {
    let (ready_tx, ready_rx) = mpsc::channel();
    let (stop, stop_rx) = oneshot::channel();
    let (done_tx, done) = mpsc::channel();
    std::thread::Builder::new()
        .name(format!("nbraidd-io-{index}"))
        .spawn(move || {
            run_worker(ready_tx, stop_rx);
            let _ = done_tx.send(());
        })
        .context("starting an I/O worker thread")?;
    let handle = ready_rx
        .recv()
        .context("an I/O worker thread ended during start-up")??;
    Ok(Worker { handle, stop, done })
}

/// A worker thread's life: its runtime, its ring driven until `stop`, then the runtime's
/// tasks dropped before the ring (which waits for the ops still in it).
fn run_worker(ready: mpsc::Sender<Result<Handle>>, mut stop: oneshot::Receiver<()>) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            let _ = ready.send(Err(e).context("starting an I/O worker's runtime"));
            return;
        }
    };
    let mut ring = match DrivenRing::install() {
        Ok(r) => Some(r),
        Err(e) => {
            tracing::warn!(
                "an I/O worker has no io_uring of its own ({e}); its ops use the ring threads"
            );
            None
        }
    };
    let _ = ready.send(Ok(runtime.handle().clone()));
    let failed = runtime.block_on(async {
        let Some(r) = &ring else {
            let _ = (&mut stop).await;
            return false;
        };
        tokio::select! {
            biased;
            _ = &mut stop => false,
            driven = drive(r) => {
                if let Err(e) = driven {
                    tracing::error!("an I/O worker's io_uring cannot be driven ({e}); its ops use the ring threads");
                }
                true
            }
        }
    });
    if failed {
        // The worker keeps its connections: the ring goes (after its ops finish), later ops
        // take the ring threads, and it serves on until stopped.
        drop(ring.take());
        runtime.block_on(async {
            let _ = stop.await;
        });
    }
    drop(runtime);
    drop(ring);
}

/// Turns the ring whenever an op waits to be submitted or completions wait to be reaped.
/// Runs as the worker's main future: a turn comes after the tasks that queued ops have run
/// (their ops go to the kernel together).
async fn drive(ring: &DrivenRing) -> std::io::Result<()> {
    let fd = Signal(ring.completion_fd());
    // SAFETY: `Signal` holds a `BorrowedFd` of the ring's eventfd, so the descriptor stays
    // open and the same for as long as the `AsyncFd` (which owns the `Signal`) lives.
    let signal = unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }
        .map_err(|e| e.into_parts().1)?;
    loop {
        poll_fn(|cx| {
            ring.wake_when_queued(cx.waker());
            if ring.has_queued() {
                return Poll::Ready(Ok(()));
            }
            match signal.poll_read_ready(cx) {
                Poll::Ready(Ok(mut ready)) => {
                    ring.take_signal();
                    ready.clear_ready();
                    Poll::Ready(Ok(()))
                }
                Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
                Poll::Pending => Poll::Pending,
            }
        })
        .await?;
        // A turn that posts completions has the kernel signal the eventfd again, so the next
        // look finds it readable and turns once more: that also picks up what a turn left
        // deferred (Linux runs a bounded number of deferred completions per enter).
        ring.turn();
        if ring.has_queued() {
            // Ops the kernel would not take yet: let the tasks run before trying again.
            tokio::task::yield_now().await;
        }
    }
}

/// The ring's completion eventfd, as tokio's reactor watches it.
struct Signal<'a>(BorrowedFd<'a>);

impl AsRawFd for Signal<'_> {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.0.as_raw_fd()
    }
}
