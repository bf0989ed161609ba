//! Who holds the control socket's places, and which one gives its place up when a new
//! connection finds them all taken.
//!
//! Timeouts alone let any local process lock the operator out: 64 connections that sent half
//! a line (or nothing) held every place for the line timeout (or the idle one), and
//! `nbraid fail` on a dying disk was refused `busy` meanwhile. A connection that waits on its
//! client (for a request, the rest of one, or the taking of a reply) costs nothing to close,
//! so a new connection takes the place of the one that has waited longest: an attacker's
//! connections fall out oldest first, and an operator's command, sent the moment it connects,
//! is the newest. Never given up: a connection whose request the daemon is running (an admin
//! command is not cut off half done), and followers (their own cap,
//! `ControlLimits::followers_max`, already leaves the other places to one-shot requests). So
//! `busy` is said only when every place is running a request or following (or a few places
//! are being given up already: [`GIVING_UP_MAX`]), so the descriptors open stay bounded.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::Notify;

/// What a connection is doing, as far as giving up its place goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Phase {
    /// Waiting on its client: for a request, the rest of one, or the taking of a reply.
    Waiting,
    /// The daemon runs its request: not given up.
    Working,
    /// Follows (status polled, events followed): not given up.
    Following,
    /// Told to give its place up to a new connection.
    GivingUp,
}

/// One place's holder, as [`longest_waiting`] weighs it.
#[derive(Clone, Copy, Debug)]
pub(super) struct Holder {
    pub phase: Phase,
    /// When it began its phase, in ticks of [`Places`]: a smaller tick waited longer.
    pub since_tick: u64,
}

/// At most so many holders at once told to give up and not gone yet: a newcomer takes a
/// place at once, before its holder's task has closed, so the connections open stay under
/// the cap plus this many however fast new ones come.
pub(super) const GIVING_UP_MAX: usize = 8;

/// The holder that gives its place up to a new connection: of those waiting on their client,
/// the one waiting longest. `None`: every place runs a request or follows, or
/// [`GIVING_UP_MAX`] are giving theirs up already.
pub(super) fn longest_waiting(holders: impl IntoIterator<Item = (u64, Holder)>) -> Option<u64> {
    let mut giving_up = 0;
    let mut longest: Option<(u64, Holder)> = None;
    for (id, h) in holders {
        match h.phase {
            Phase::GivingUp => giving_up += 1,
            Phase::Waiting if longest.is_none_or(|(_, l)| h.since_tick < l.since_tick) => {
                longest = Some((id, h))
            }
            _ => {}
        }
    }
    longest
        .filter(|_| giving_up < GIVING_UP_MAX)
        .map(|(id, _)| id)
}

struct Held {
    /// Places held, those being given up included (so at most the cap plus
    /// [`GIVING_UP_MAX`]).
    open: usize,
    /// The next tick: bumped at every change of phase, so phases are ordered by when they began.
    tick: u64,
    next_id: u64,
    by_id: HashMap<u64, (Holder, Arc<Notify>)>,
}

/// The control socket's places (see the module).
pub(super) struct Places {
    max: usize,
    held: Mutex<Held>,
}

impl Places {
    pub(super) fn new(max: usize) -> Arc<Places> {
        Arc::new(Places {
            max,
            held: Mutex::new(Held {
                open: 0,
                tick: 0,
                next_id: 0,
                by_id: HashMap::new(),
            }),
        })
    }

    /// A place for a new connection: a free one, or the one the longest-waiting holder is
    /// told to give up (the newcomer takes it at once; the holder closes as soon as its task
    /// runs). `None`: busy.
    pub(super) fn admit(self: &Arc<Places>) -> Option<Place> {
        let mut held = self.held.lock();
        if held.open >= self.max {
            let picked = longest_waiting(held.by_id.iter().map(|(&id, (h, _))| (id, *h)));
            let (holder, notify) = held.by_id.get_mut(&picked?)?;
            holder.phase = Phase::GivingUp;
            // A stored permit: the holder sees it at its next wait if it is not waiting yet.
            notify.notify_one();
        }
        Some(self.register(&mut held))
    }

    fn register(self: &Arc<Places>, held: &mut Held) -> Place {
        held.open += 1;
        let id = held.next_id;
        held.next_id += 1;
        let notify = Arc::new(Notify::new());
        let holder = Holder {
            phase: Phase::Waiting,
            since_tick: held.tick,
        };
        held.tick += 1;
        held.by_id.insert(id, (holder, notify.clone()));
        Place {
            places: self.clone(),
            id,
            give_up: notify,
        }
    }

    /// Moves holder `id` to `phase` unless it must give up or follows (a follower stays one);
    /// whether it keeps its place.
    fn enter(&self, id: u64, phase: Phase) -> bool {
        let mut held = self.held.lock();
        let tick = held.tick;
        held.tick += 1;
        let Some((holder, _)) = held.by_id.get_mut(&id) else {
            return false;
        };
        match holder.phase {
            Phase::GivingUp => false,
            Phase::Following => true,
            _ => {
                *holder = Holder {
                    phase,
                    since_tick: tick,
                };
                true
            }
        }
    }
}

/// A connection's place, given back when dropped.
pub(super) struct Place {
    places: Arc<Places>,
    id: u64,
    give_up: Arc<Notify>,
}

impl Place {
    /// It waits on its client from now on (a follower stays one).
    pub(super) fn waiting(&self) {
        self.places.enter(self.id, Phase::Waiting);
    }

    /// The daemon is to run its request; `false`: it was told to give its place up first.
    pub(super) fn working(&self) -> bool {
        self.places.enter(self.id, Phase::Working)
    }

    /// It follows from now on and keeps its place.
    pub(super) fn following(&self) {
        self.places.enter(self.id, Phase::Following);
    }

    /// Resolves once it is told to give its place up to a new connection.
    pub(super) async fn told_to_give_up(&self) {
        self.give_up.notified().await
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut held = self.places.held.lock();
        held.by_id.remove(&self.id);
        held.open -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(phase: Phase, since_tick: u64) -> Holder {
        Holder { phase, since_tick }
    }

    #[test]
    fn the_longest_waiting_gives_up_and_running_or_following_ones_never() {
        let held = [
            (1, holder(Phase::Working, 0)),
            (2, holder(Phase::Following, 1)),
            (3, holder(Phase::Waiting, 5)),
            (4, holder(Phase::Waiting, 3)),
            (5, holder(Phase::GivingUp, 2)),
        ];
        assert_eq!(longest_waiting(held), Some(4));
        let none_waiting = [
            (1, holder(Phase::Working, 0)),
            (2, holder(Phase::Following, 1)),
            (3, holder(Phase::GivingUp, 2)),
        ];
        assert_eq!(longest_waiting(none_waiting), None);
        let many_giving_up = (0..GIVING_UP_MAX as u64)
            .map(|i| (i, holder(Phase::GivingUp, i)))
            .chain([(99, holder(Phase::Waiting, 99))]);
        assert_eq!(longest_waiting(many_giving_up), None, "newcomers wait");
    }

    #[tokio::test]
    async fn a_full_house_gives_the_longest_waiting_place_to_a_newcomer() {
        let places = Places::new(2);
        let old = places.admit().expect("a free place");
        let newer = places.admit().expect("a free place");
        assert!(newer.working(), "runs a request");
        let newcomer = places.admit().expect("the waiting one's place");
        // Told while it waited: it gives up, and cannot start a request any more.
        old.told_to_give_up().await;
        assert!(!old.working());
        assert!(newcomer.working());
        // None waits: a fourth newcomer is busy until one does.
        assert!(places.admit().is_none());
        drop(old);
        assert!(places.admit().is_none(), "still full");
        newcomer.following();
        newer.waiting();
        let fifth = places.admit().expect("the runner waits again: its place");
        newer.told_to_give_up().await;
        newcomer.waiting();
        assert!(newcomer.working(), "a follower stays one, never picked");
        drop(fifth);
    }
}
