//! The runtimes connections are served on (the daemon's I/O workers), when the server was
//! given some: connections are dealt out in turn, each counted on its worker while it lives,
//! and a worker serving no connection is *spare*.
//!
//! A spare worker takes a connection's long reads and writes (1 MiB and more by default, see
//! [`Limits::spare_worker_min_len`](crate::Limits::spare_worker_min_len)): a worker is one
//! thread, so a connection alone on it otherwise receives a write's payload, then copies it
//! into the export, in turn — with the copy on the spare worker, the next payload arrives
//! meanwhile (as in a server that receives on one thread while another copies).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::runtime::Handle;

/// The runtimes and how many connections each serves.
pub(crate) struct Workers {
    workers: Vec<Worker>,
    next: AtomicUsize,
}

struct Worker {
    runtime: Handle,
    connections: Arc<AtomicUsize>,
}

/// A connection's place on a worker: counted there until `counted` is dropped (the
/// connection's task holds it).
pub(crate) struct Placed {
    pub runtime: Handle,
    pub counted: Counted,
}

/// One connection counted on its worker while this lives.
pub(crate) struct Counted(Arc<AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        let before = self.0.fetch_sub(1, Ordering::Relaxed);
        debug_assert!(before > 0, "a worker's connection count went below zero");
    }
}

impl Workers {
    pub fn new(runtimes: Vec<Handle>) -> Self {
        Workers {
            workers: runtimes
                .into_iter()
                .map(|runtime| Worker {
                    runtime,
                    connections: Arc::new(AtomicUsize::new(0)),
                })
                .collect(),
            next: AtomicUsize::new(0),
        }
    }

    /// The worker for the next connection, counted there; `None` when there are none.
    pub fn next(&self) -> Option<Placed> {
        let n = self.workers.len();
        if n == 0 {
            return None;
        }
        let w = &self.workers[self.next.fetch_add(1, Ordering::Relaxed) % n];
        w.connections.fetch_add(1, Ordering::Relaxed);
        Some(Placed {
            runtime: w.runtime.clone(),
            counted: Counted(w.connections.clone()),
        })
    }

    /// A worker serving no connection (so not the caller's, which serves the caller's own),
    /// if there is one. The counts are read without a lock: a connection placed meanwhile
    /// may share the worker with long requests for a while, which costs only speed.
    pub fn spare(&self) -> Option<&Handle> {
        let w = self
            .workers
            .iter()
            .find(|w| w.connections.load(Ordering::Relaxed) == 0)?;
        Some(&w.runtime)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_workers_no_spare() {
        assert!(Workers::new(Vec::new()).spare().is_none());
        assert!(Workers::new(Vec::new()).next().is_none());
    }

    #[test]
    fn connections_are_counted_on_their_worker_while_placed() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let workers = Workers::new(vec![rt.handle().clone(), rt.handle().clone()]);
        assert!(workers.spare().is_some(), "no connection yet");
        let first = workers.next().unwrap();
        assert!(workers.spare().is_some(), "the second serves none");
        let second = workers.next().unwrap();
        assert!(workers.spare().is_none(), "each serves one");
        drop(first);
        assert!(workers.spare().is_some(), "the first's connection ended");
        let Placed { counted, .. } = second;
        let third = workers.next().unwrap();
        assert!(workers.spare().is_none(), "dealt in turn: the first again");
        drop((counted, third));
        assert!(workers.spare().is_some());
    }
}
