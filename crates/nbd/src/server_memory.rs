//! The server's request memory and who may take it: a fair share among the connections that
//! compete for it.
//!
//! Every connection may hold up to its own budget ([`Limits::max_bytes_in_flight`]), but a
//! few connections that never read their replies hold theirs until the stall timeout, and
//! four of the default 128 MiB take the whole default 512 MiB: every other client's request
//! (but a light one, see [`crate::limits`]) then waited for that timeout. So a connection's
//! request is admitted by [`may_take`]:
//!
//! * a connection alone (no other holds any of the budget or waits for it) takes what is
//!   free: one client still has the whole budget;
//! * a connection holding nothing takes its request if it fits: whatever the others hold,
//!   a request (up to the largest) gets through once that much is free;
//! * otherwise it takes the request only if what stays free is then at least twice what it
//!   holds ([`FREE_PER_HELD`]). The more a connection holds, the more it must leave to the
//!   others: `n` connections that never give back what they hold, arriving together, leave
//!   `2/(n+2)` of the budget free (a third for four); arriving one after another, each takes
//!   at most a third of what it found free.
//!
//! A connection refused waits until memory is given back anywhere and asks again; it does not
//! queue ahead of the others, so one that may take nothing holds up nobody.

use std::sync::atomic::{fence, AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use crate::limits::Limits;

/// Beyond its first request, a connection may take only while what stays free of the general
/// budget is at least this many times what it then holds.
pub(crate) const FREE_PER_HELD: usize = 2;

/// What the other connections do with the server's budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Competitors {
    /// Bytes of the budget (the general part and the reserve) the others hold.
    pub held_bytes: usize,
    /// Other connections waiting for the budget.
    pub waiting: usize,
}

/// Whether a connection holding `held_bytes` of the server's budget may take `cost_bytes`
/// more of the general part, of which `free_bytes` are free (see the module's
/// documentation).
pub(crate) fn may_take(
    held_bytes: usize,
    cost_bytes: u32,
    free_bytes: usize,
    others: Competitors,
) -> bool {
    let cost = cost_bytes as usize;
    let Some(left_bytes) = free_bytes.checked_sub(cost) else {
        return false;
    };
    let alone = others.held_bytes == 0 && others.waiting == 0;
    if alone || held_bytes == 0 {
        return true;
    }
    let after = held_bytes.saturating_add(cost);
    left_bytes >= after.saturating_mul(FREE_PER_HELD)
}

/// The server's request memory: the general part and the reserve kept for light requests
/// ([`Limits::reserve_bytes`]), and the connections waiting for either.
pub(crate) struct ServerMemory {
    general: Arc<Semaphore>,
    reserve: Arc<Semaphore>,
    /// Both parts together (`Limits::server_bytes_in_flight`).
    total_bytes: usize,
    /// Connections waiting in [`ServerMemory::take`].
    waiting: AtomicUsize,
    /// Woken when bytes are given back while connections wait.
    released: Notify,
}

/// Bytes of the server's budget held by one request, given back (and the waiting connections
/// woken) when dropped.
pub(crate) struct ServerBytes {
    permit: Option<OwnedSemaphorePermit>,
    memory: Arc<ServerMemory>,
}

impl ServerMemory {
    pub fn new(limits: &Limits) -> Arc<Self> {
        let reserve = limits.reserve_bytes();
        Arc::new(ServerMemory {
            general: Arc::new(Semaphore::new(limits.server_bytes_in_flight - reserve)),
            reserve: Arc::new(Semaphore::new(reserve)),
            total_bytes: limits.server_bytes_in_flight,
            waiting: AtomicUsize::new(0),
            released: Notify::new(),
        })
    }

    /// `cost_bytes` of the budget for a connection holding `held_bytes()` of it: of the
    /// general part if [`may_take`] lets it, else for a light request of the reserve; waits
    /// until one of them can be had.
    pub async fn take(
        self: &Arc<Self>,
        held_bytes: impl Fn() -> usize,
        cost_bytes: u32,
        light: bool,
    ) -> ServerBytes {
        if let Some(got) = self.try_take(held_bytes(), cost_bytes, light) {
            return got;
        }
        let _waiting = Waiting::count(self);
        loop {
            let released = self.released.notified();
            tokio::pin!(released);
            // Registered, then fenced, before looking: bytes given back after the look wake
            // this one (see `ServerBytes::drop`).
            released.as_mut().enable();
            fence(Ordering::SeqCst);
            if let Some(got) = self.try_take_as(held_bytes(), cost_bytes, light, true) {
                return got;
            }
            released.await;
        }
    }

    /// [`ServerMemory::take`] without waiting: `None` when it would wait.
    pub fn try_take(
        self: &Arc<Self>,
        held_bytes: usize,
        cost_bytes: u32,
        light: bool,
    ) -> Option<ServerBytes> {
        self.try_take_as(held_bytes, cost_bytes, light, false)
    }

    /// `counted`: the caller is one of the connections counted as waiting.
    fn try_take_as(
        self: &Arc<Self>,
        held_bytes: usize,
        cost_bytes: u32,
        light: bool,
        counted: bool,
    ) -> Option<ServerBytes> {
        let free = self.general.available_permits();
        let in_use = self
            .total_bytes
            .saturating_sub(free + self.reserve.available_permits());
        let others = Competitors {
            held_bytes: in_use.saturating_sub(held_bytes),
            waiting: self
                .waiting
                .load(Ordering::SeqCst)
                .saturating_sub(usize::from(counted)),
        };
        let general = may_take(held_bytes, cost_bytes, free, others)
            .then(|| self.general.clone().try_acquire_many_owned(cost_bytes).ok())
            .flatten();
        let permit = general.or_else(|| {
            light
                .then(|| self.reserve.clone().try_acquire_many_owned(cost_bytes).ok())
                .flatten()
        })?;
        Some(ServerBytes {
            permit: Some(permit),
            memory: self.clone(),
        })
    }

    #[cfg(test)]
    fn free_bytes(&self) -> (usize, usize) {
        (
            self.general.available_permits(),
            self.reserve.available_permits(),
        )
    }
}

impl Drop for ServerBytes {
    fn drop(&mut self) {
        drop(self.permit.take());
        // Pairs with the fence in `take`: either the waiter sees these bytes free or this
        // sees it counted and wakes it.
        fence(Ordering::SeqCst);
        if self.memory.waiting.load(Ordering::SeqCst) > 0 {
            self.memory.released.notify_waiters();
        }
    }
}

/// One connection counted as waiting while it lives.
struct Waiting<'a>(&'a ServerMemory);

impl<'a> Waiting<'a> {
    fn count(memory: &'a ServerMemory) -> Self {
        memory.waiting.fetch_add(1, Ordering::SeqCst);
        Waiting(memory)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use futures::FutureExt;

    use super::*;

    const MIB: usize = 1 << 20;
    const NOBODY: Competitors = Competitors {
        held_bytes: 0,
        waiting: 0,
    };

    fn others(held_bytes: usize, waiting: usize) -> Competitors {
        Competitors {
            held_bytes,
            waiting,
        }
    }

    #[test]
    fn a_connection_alone_takes_what_is_free() {
        assert!(may_take(400 * MIB, MIB as u32, 80 * MIB, NOBODY));
        assert!(may_take(479 * MIB, MIB as u32, MIB, NOBODY));
        assert!(!may_take(479 * MIB, 2 * MIB as u32, MIB, NOBODY));
        // Another connection waiting (holding nothing yet) ends it.
        assert!(!may_take(479 * MIB, MIB as u32, MIB, others(0, 1)));
    }

    #[test]
    fn a_connection_holding_nothing_takes_a_request_that_fits() {
        let crowded = others(470 * MIB, 30);
        assert!(may_take(0, 32 * MIB as u32, 32 * MIB, crowded));
        assert!(may_take(0, MIB as u32, 2 * MIB, crowded));
        assert!(!may_take(0, 32 * MIB as u32, 31 * MIB, crowded));
        assert!(!may_take(0, 4096, 0, crowded));
    }

    #[test]
    fn beyond_its_first_request_a_connection_leaves_twice_what_it_holds() {
        let one_other = others(MIB, 0);
        // Holding 9 MiB, taking 1: 20 MiB must stay free.
        assert!(may_take(9 * MIB, MIB as u32, 21 * MIB, one_other));
        assert!(!may_take(9 * MIB, MIB as u32, 20 * MIB, one_other));
        assert!(!may_take(usize::MAX, 1, usize::MAX, one_other));
        // Four connections that never give back: each stops at a sixth of the budget, and
        // a third stays free for everyone else.
        let total = 480 * MIB;
        let mut held = [0usize; 4];
        let mut free = total;
        loop {
            let mut took = false;
            for mine in &mut held {
                let theirs = total - free - *mine;
                if may_take(*mine, MIB as u32, free, others(theirs, 3)) {
                    *mine += MIB;
                    free -= MIB;
                    took = true;
                }
            }
            if !took {
                break;
            }
        }
        assert!(held.iter().all(|&h| h == 80 * MIB), "{held:?}");
        assert_eq!(free, 160 * MIB);
        assert!(may_take(0, 32 * MIB as u32, free, others(total - free, 4)));
    }

    #[test]
    fn one_client_with_the_default_limits_keeps_its_whole_share() {
        // Its own budget (128 MiB) bounds it before the rule does, another client waiting
        // beside it or not; two busy clients each still reach 120 MiB.
        let l = Limits::default();
        let general = l.server_bytes_in_flight - l.reserve_bytes();
        let held = l.max_bytes_in_flight - MIB;
        assert!(may_take(held, MIB as u32, general - held, others(0, 1)));
        let held = 119 * MIB;
        let free = general - 2 * held;
        assert!(may_take(held, MIB as u32, free, others(held, 1)));
    }

    #[tokio::test]
    async fn a_refused_connection_waits_for_bytes_given_back_and_holds_up_nobody() {
        let limits = Limits {
            max_bytes_in_flight: 32 * MIB,
            server_bytes_in_flight: 64 * MIB,
            ..Limits::default()
        };
        let memory = ServerMemory::new(&limits);
        let (general, reserve) = memory.free_bytes();
        assert_eq!((general, reserve), (60 * MIB, 4 * MIB));
        // One connection alone takes 56 MiB.
        let hog: Vec<ServerBytes> = (0..56)
            .map(|i| {
                let got = memory
                    .take(move || i * MIB, MIB as u32, false)
                    .now_or_never();
                got.expect("alone: taken at once")
            })
            .collect();
        // Another one's first request fits; its second would leave too little.
        let first = memory.take(|| 0, MIB as u32, false).now_or_never();
        let first = first.expect("a first request that fits");
        let second = memory.take(|| MIB, MIB as u32, false);
        tokio::pin!(second);
        assert!(futures::poll!(second.as_mut()).is_pending());
        // The hog waits too now, and holds up nobody: a connection holding nothing still
        // gets a small request.
        let more = memory.take(|| 56 * MIB, MIB as u32, false);
        tokio::pin!(more);
        assert!(futures::poll!(more.as_mut()).is_pending());
        let light = memory.take(|| 0, 4096, true).now_or_never();
        assert!(light.is_some());
        assert_eq!(memory.waiting.load(Ordering::SeqCst), 2);
        // The hog gives back most of what it holds: the waiting second request is woken.
        drop(hog);
        let second = tokio::time::timeout(std::time::Duration::from_secs(5), second)
            .await
            .expect("woken when bytes were given back");
        drop((first, second));
        assert!(more.now_or_never().is_some());
        assert_eq!(memory.waiting.load(Ordering::SeqCst), 0);
    }
}
