//! An async range lock over a node's address space, fair among conflicting requests.
//!
//! Two requests conflict when their ranges overlap and either is exclusive. A request is
//! granted when it conflicts with no held range *and* with no request that asked before it
//! and still waits: so a steady stream of shared holders cannot starve an exclusive request
//! (a write, destage or repair waiting behind reads), and a FLUSH that must destage a hot
//! stripe is not held up forever. Requests that conflict with nothing proceed at once.
//!
//! Users: the parity group locks stripe numbers (writes and destages exclusive, reads
//! shared); a mirror locks byte ranges (user writes shared — the block layer orders nothing
//! between concurrent writes — and read repairs exclusive, so the good copy a repair re-reads
//! and writes back cannot be overtaken by a user write landing in between).

use parking_lot::Mutex;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

#[derive(Default)]
pub(crate) struct RangeLock {
    state: Mutex<State>,
}

#[derive(Clone, Copy)]
struct Range {
    start: u64,
    end: u64,
    exclusive: bool,
}

impl Range {
    fn conflicts(&self, o: &Range) -> bool {
        self.start < o.end && o.start < self.end && (self.exclusive || o.exclusive)
    }
}

#[derive(Default)]
struct State {
    /// Granted ranges by id.
    held: Vec<(u64, Range)>,
    /// Requests not granted yet, by ticket (arrival order): (ticket, range, waker).
    waiting: Vec<(u64, Range, Waker)>,
    next_id: u64,
    next_ticket: u64,
}

impl State {
    fn wake_all(&mut self) -> Vec<Waker> {
        self.waiting.iter().map(|w| w.2.clone()).collect()
    }
}

pub(crate) struct RangeGuard<'a> {
    lock: &'a RangeLock,
    id: u64,
}

pub(crate) struct Acquire<'a> {
    lock: &'a RangeLock,
    range: Range,
    /// Arrival order, taken at the first poll.
    ticket: Option<u64>,
    granted: bool,
}

impl RangeLock {
    pub(crate) fn lock(&self, start: u64, len: u64, exclusive: bool) -> Acquire<'_> {
        assert!(len > 0, "a range lock covers at least one unit");
        Acquire {
            lock: self,
            range: Range {
                start,
                end: start + len,
                exclusive,
            },
            ticket: None,
            granted: false,
        }
    }
}

impl RangeLock {
    /// Whether some granted range covers `[start, start + len)` (exclusively, if asked): for
    /// contract assertions ("the caller holds the stripe's lock"). Cost: one pass over the
    /// ranges held now.
    pub(crate) fn holds(&self, start: u64, len: u64, exclusive: bool) -> bool {
        let end = start + len;
        self.state
            .lock()
            .held
            .iter()
            .any(|(_, h)| h.start <= start && end <= h.end && (h.exclusive || !exclusive))
    }
}

impl RangeLock {
    /// Ranges granted now, and requests waiting: for reports of a hang.
    pub(crate) fn counts(&self) -> (usize, usize) {
        let st = self.state.lock();
        (st.held.len(), st.waiting.len())
    }
}

impl RangeLock {
    /// Whether an exclusive request overlapping `[start, start + len)` waits (a writer
    /// queued behind the holder). Cost: one pass over the waiting requests.
    pub(crate) fn exclusive_waiter(&self, start: u64, len: u64) -> bool {
        let asked = Range {
            start,
            end: start + len,
            exclusive: true,
        };
        self.state
            .lock()
            .waiting
            .iter()
            .any(|(_, w, _)| w.exclusive && w.conflicts(&asked))
    }
}

impl RangeGuard<'_> {
    /// Keeps only `[start, start + len)` of the held range and lets the rest go: a writer
    /// done with the ends of its range (cached, nothing to write) does not hold up the next
    /// writer there while its middle is on the members.
    pub(crate) fn narrow(&mut self, start: u64, len: u64) {
        assert!(len > 0, "a range lock covers at least one unit");
        let wakers = {
            let mut st = self.lock.state.lock();
            let h = st
                .held
                .iter_mut()
                .find(|h| h.0 == self.id)
                .expect("a guard's range is held");
            assert!(
                h.1.start <= start && start + len <= h.1.end,
                "narrowed to a part of the held range"
            );
            if (h.1.start, h.1.end) == (start, start + len) {
                return;
            }
            h.1.start = start;
            h.1.end = start + len;
            st.wake_all()
        };
        wakers.into_iter().for_each(Waker::wake);
    }
}

impl<'a> Future for Acquire<'a> {
    type Output = RangeGuard<'a>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<RangeGuard<'a>> {
        assert!(!self.granted, "polled after it was granted");
        let lock = self.lock;
        let range = self.range;
        let mut st = lock.state.lock();
        let ticket = match self.ticket {
            Some(t) => t,
            None => {
                st.next_ticket += 1;
                let t = st.next_ticket;
                self.ticket = Some(t);
                t
            }
        };
        let blocked = st.held.iter().any(|(_, h)| h.conflicts(&range))
            || st
                .waiting
                .iter()
                .any(|(t, w, _)| *t < ticket && w.conflicts(&range));
        let mine = st.waiting.iter().position(|w| w.0 == ticket);
        if blocked {
            match mine {
                Some(i) => st.waiting[i].2 = cx.waker().clone(),
                None => st.waiting.push((ticket, range, cx.waker().clone())),
            }
            return Poll::Pending;
        }
        if let Some(i) = mine {
            st.waiting.remove(i);
        }
        st.next_id += 1;
        let id = st.next_id;
        st.held.push((id, range));
        drop(st);
        self.granted = true;
        Poll::Ready(RangeGuard { lock, id })
    }
}

impl Drop for Acquire<'_> {
    /// A request given up while waiting no longer blocks those behind it.
    fn drop(&mut self) {
        let (Some(ticket), false) = (self.ticket, self.granted) else {
            return;
        };
        let wakers = {
            let mut st = self.lock.state.lock();
            st.waiting.retain(|w| w.0 != ticket);
            st.wake_all()
        };
        wakers.into_iter().for_each(Waker::wake);
    }
}

impl Drop for RangeGuard<'_> {
    fn drop(&mut self) {
        let wakers = {
            let mut st = self.lock.state.lock();
            let before = st.held.len();
            st.held.retain(|h| h.0 != self.id);
            assert_eq!(st.held.len() + 1, before, "a guard releases its range once");
            st.wake_all()
        };
        wakers.into_iter().for_each(Waker::wake);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;
    use std::pin::pin;
    use std::task::Context;

    #[test]
    fn shared_overlap_exclusive_waits() {
        let l = RangeLock::default();
        let a = l.lock(0, 100, false).now_or_never().expect("free");
        let b = l
            .lock(50, 100, false)
            .now_or_never()
            .expect("shared overlaps shared");
        assert!(l.lock(90, 10, true).now_or_never().is_none());
        let c = l.lock(200, 10, true).now_or_never().expect("disjoint");
        drop((a, b));
        let d = l.lock(90, 10, true).now_or_never().expect("released");
        assert!(l.lock(95, 1, false).now_or_never().is_none());
        drop((c, d));
    }

    /// A shared request arriving while an exclusive one waits queues behind it (the old lock
    /// granted it, so a stream of reads starved writes and destages).
    #[test]
    fn waiting_exclusive_is_not_overtaken_by_later_shared() {
        let l = RangeLock::default();
        let reader = l.lock(0, 10, false).now_or_never().expect("free");
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        let mut writer = pin!(l.lock(5, 1, true));
        assert!(writer.as_mut().poll(&mut cx).is_pending());
        let mut late_reader = pin!(l.lock(0, 10, false));
        assert!(
            late_reader.as_mut().poll(&mut cx).is_pending(),
            "a later shared request must wait behind the exclusive one"
        );
        // Shared requests that conflict with no waiter still go ahead.
        let elsewhere = l.lock(20, 5, false).now_or_never().expect("no conflict");
        drop(reader);
        let w = match writer.as_mut().poll(&mut cx) {
            Poll::Ready(g) => g,
            Poll::Pending => panic!("the exclusive request is next"),
        };
        assert!(late_reader.as_mut().poll(&mut cx).is_pending());
        drop(w);
        assert!(late_reader.as_mut().poll(&mut cx).is_ready());
        drop(elsewhere);
    }

    /// A narrowed guard lets go of the rest of its range (and only that).
    #[test]
    fn narrowed_guard_releases_its_ends() {
        let l = RangeLock::default();
        let mut g = l.lock(0, 10, true).now_or_never().expect("free");
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        let mut tail = pin!(l.lock(9, 3, true));
        assert!(tail.as_mut().poll(&mut cx).is_pending());
        g.narrow(1, 8);
        assert!(tail.as_mut().poll(&mut cx).is_ready());
        assert!(l.lock(0, 1, true).now_or_never().is_some());
        assert!(l.lock(8, 1, false).now_or_never().is_none());
        assert!(l.holds(1, 8, true));
        drop(g);
    }

    /// A waiter that gives up stops blocking the requests behind it.
    #[test]
    fn abandoned_waiter_unblocks_followers() {
        let l = RangeLock::default();
        let reader = l.lock(0, 10, false).now_or_never().expect("free");
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        {
            let mut writer = pin!(l.lock(0, 10, true));
            assert!(writer.as_mut().poll(&mut cx).is_pending());
        }
        let again = l
            .lock(0, 10, false)
            .now_or_never()
            .expect("nobody waits any more");
        drop((reader, again));
    }
}
