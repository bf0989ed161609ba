//! Writers known to reach the log together: the destages of one eviction. On members that
//! answer inline (memory, and files in the page cache) a destage runs through its reads and
//! into a round of its own before the next one starts, so an eviction of four stripes wrote
//! four rounds. Gathered, the writers that arrive first queue their entries without starting
//! a round and wait; the last one to arrive (or the last to leave without logging) lets the
//! round go, which carries every entry pending. What a round guarantees is unchanged: each
//! writer still waits for its own entries' end before its member writes.
//!
//! Liveness is the caller's part: a gathered writer waits for its siblings, so a sibling must
//! not wait for anything a waiting one holds — the eviction locks every gathered stripe
//! before any of them starts. A round another writer starts meanwhile takes the waiting
//! entries with it (rounds take everything pending).

use super::*;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

/// One gathering's count in the log's state.
pub(super) struct Gathering {
    id: u64,
    /// Writers neither arrived nor gone.
    coming: usize,
    /// Arrived writers waiting for the rest.
    waiters: Vec<oneshot::Sender<()>>,
}

/// One gathered writer's place: given to [`GroupLog::write_in`] (once; later calls, a
/// retried write, are ordinary), or dropped unused when the writer does not log.
pub(crate) struct Arrival<'a> {
    log: &'a GroupLog,
    id: u64,
    /// Counted in (arrived or gone).
    counted: AtomicBool,
}

impl GroupLog {
    /// Places for `writers` writers whose entries one round should carry.
    pub(crate) fn gather(&self, writers: usize) -> Vec<Arrival<'_>> {
        let mut st = self.state.lock();
        let id = st.next_gathering;
        st.next_gathering += 1;
        if writers > 0 {
            st.gatherings.push(Gathering {
                id,
                coming: writers,
                waiters: Vec::new(),
            });
        }
        (0..writers)
            .map(|_| Arrival {
                log: self,
                id,
                counted: AtomicBool::new(false),
            })
            .collect()
    }
}

impl Arrival<'_> {
    /// Counts the writer in as it queues its entries (`st` locked by the caller, the entries
    /// pushed under the same lock): a receiver to wait on while siblings are still coming,
    /// `None` when it is the last (or was counted before).
    pub(super) fn arrive(&self, st: &mut State) -> Option<oneshot::Receiver<()>> {
        if self.counted.swap(true, Relaxed) {
            return None;
        }
        let i = Self::count_down(st, self.id)?;
        let (tx, rx) = oneshot::channel();
        st.gatherings[i].waiters.push(tx);
        Some(rx)
    }

    /// Counts the writer out without entries (it logs nothing, or no longer will).
    pub(crate) fn leave(&self) {
        if self.counted.swap(true, Relaxed) {
            return;
        }
        let mut st = self.log.state.lock();
        Self::count_down(&mut st, self.id);
    }

    /// One writer fewer coming: the gathering's index while others still are; otherwise it
    /// ends and its waiters are woken.
    fn count_down(st: &mut State, id: u64) -> Option<usize> {
        let i = st.gatherings.iter().position(|g| g.id == id)?;
        let g = &mut st.gatherings[i];
        g.coming -= 1;
        if g.coming > 0 {
            return Some(i);
        }
        for w in st.gatherings.swap_remove(i).waiters {
            let _ = w.send(());
        }
        None
    }
}

impl Drop for Arrival<'_> {
    fn drop(&mut self) {
        self.leave();
    }
}
