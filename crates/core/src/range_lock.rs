//! An async range lock over a node's address space. User writes take ranges *shared* (they may
//! overlap each other: the block layer orders nothing between concurrent writes); a mirror
//! repair takes its range *exclusive*, so the good copy it re-reads and writes back cannot be
//! overtaken by a user write landing in between (which would leave the copies different).

use parking_lot::Mutex;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

#[derive(Default)]
pub(crate) struct RangeLock {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Held ranges: (id, start, end, exclusive).
    held: Vec<(u64, u64, u64, bool)>,
    next_id: u64,
    /// Tasks waiting for any release.
    waiters: Vec<Waker>,
}

pub(crate) struct RangeGuard<'a> {
    lock: &'a RangeLock,
    id: u64,
}

pub(crate) struct Acquire<'a> {
    lock: &'a RangeLock,
    start: u64,
    end: u64,
    exclusive: bool,
}

impl RangeLock {
    pub(crate) fn lock(&self, start: u64, len: u64, exclusive: bool) -> Acquire<'_> {
        Acquire {
            lock: self,
            start,
            end: start + len,
            exclusive,
        }
    }
}

impl<'a> Future for Acquire<'a> {
    type Output = RangeGuard<'a>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<RangeGuard<'a>> {
        let mut st = self.lock.state.lock();
        let conflict = st
            .held
            .iter()
            .any(|&(_, s, e, x)| s < self.end && self.start < e && (x || self.exclusive));
        if conflict {
            st.waiters.push(cx.waker().clone());
            return Poll::Pending;
        }
        st.next_id += 1;
        let id = st.next_id;
        st.held.push((id, self.start, self.end, self.exclusive));
        Poll::Ready(RangeGuard {
            lock: self.lock,
            id,
        })
    }
}

impl Drop for RangeGuard<'_> {
    fn drop(&mut self) {
        let waiters = {
            let mut st = self.lock.state.lock();
            st.held.retain(|h| h.0 != self.id);
            std::mem::take(&mut st.waiters)
        };
        waiters.into_iter().for_each(Waker::wake);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

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
}
