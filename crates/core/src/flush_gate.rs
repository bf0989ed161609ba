//! Flushes of one member: one at a time, shared by the callers that wait for it (group
//! commit), and a failure that sticks.
//!
//! Volumes on one member file share its one open file (a daemon opens each member once), and
//! the kernel reports a write-back error to the first `fsync` on an open file only: a second
//! volume's flush would succeed after its writes were lost. So a member's flushes go through
//! a [`FlushGate`]:
//! - one flush runs at a time; a caller that arrives while one runs waits for it to end and
//!   then shares the *next* one with every other such caller. A flush must cover every write
//!   that completed before it was called, so nobody may piggyback on a flush that started
//!   before they asked.
//! - once a flush has failed, every later flush of the member fails too, saying so: the pages
//!   that failed to write back may be gone from the cache, so a retried `fsync` that succeeds
//!   proves nothing (PostgreSQL's "fsyncgate").

use crate::member::{MemberError, MemberOp, MemberResult};
use futures::channel::oneshot;
use parking_lot::Mutex;
use std::future::Future;
use std::io;

/// Serializes and shares a member's flushes; remembers a failure for good.
#[derive(Default)]
pub struct FlushGate {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Flushes started so far; while `running`, the running one is number `started`.
    started: u64,
    /// Number of the last flush that ran to its end (succeeded or failed).
    completed: u64,
    running: bool,
    /// Why the member's write-back failed (the first failure), kept for good.
    failed: Option<String>,
    /// Callers waiting for the running flush to end.
    waiters: Vec<oneshot::Sender<()>>,
}

impl FlushGate {
    pub fn new() -> FlushGate {
        FlushGate::default()
    }

    /// Makes every write that completed before this call durable, by running `flush` or by
    /// sharing a flush another caller started after this call. `member` names the member in
    /// errors. After any failure (here or through [`FlushGate::poison`]) it fails at once.
    pub async fn flush<F, Fut>(&self, member: &str, flush: F) -> MemberResult<()>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = MemberResult<()>>,
    {
        let mut flush = Some(flush);
        // The first flush to start from now on covers this caller.
        let target = self.state.lock().started + 1;
        loop {
            let wait = {
                let mut st = self.state.lock();
                if let Some(why) = &st.failed {
                    return Err(sticky(member, why));
                }
                if st.completed >= target {
                    return Ok(());
                }
                if st.running {
                    let (tx, rx) = oneshot::channel();
                    st.waiters.push(tx);
                    Ok(rx)
                } else {
                    st.running = true;
                    st.started += 1;
                    Err(st.started)
                }
            };
            match wait {
                // Woken when the running flush ends (or its caller gave up): look again.
                Ok(rx) => {
                    let _ = rx.await;
                }
                Err(number) => return self.lead(number, target, flush.take()).await,
            }
        }
    }

    /// Runs flush `number`, which this caller (waiting for flush `target`) just started.
    async fn lead<F, Fut>(&self, number: u64, target: u64, flush: Option<F>) -> MemberResult<()>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = MemberResult<()>>,
    {
        assert!(number >= target, "a flush shared before its caller asked");
        let leader = Leader {
            gate: self,
            finished: false,
        };
        let flush = flush.expect("a caller runs at most one flush");
        let r = flush().await;
        leader.finish(number, &r);
        r
    }

    /// Records that the member's write-back failed outside a flush (a FUA write's sync, which
    /// consumes the same error report): every later flush fails.
    pub fn poison(&self, why: String) {
        let mut st = self.state.lock();
        st.failed.get_or_insert(why);
    }

    /// Why flushes fail, once one has.
    pub fn failure(&self) -> Option<String> {
        self.state.lock().failed.clone()
    }
}

/// The error every flush after a failed one gets.
fn sticky(member: &str, why: &str) -> MemberError {
    MemberError::new(
        member,
        MemberOp::Flush,
        0,
        0,
        io::Error::other(format!(
            "an earlier write-back to this member failed ({why}); writes may have been lost, \
             and a retried flush cannot prove them durable, so every later flush fails"
        )),
    )
}

/// The caller running the current flush; if it is dropped before the flush ends (its caller
/// gave up), the next waiter starts a new one.
struct Leader<'a> {
    gate: &'a FlushGate,
    finished: bool,
}

impl Leader<'_> {
    fn finish(mut self, number: u64, result: &MemberResult<()>) {
        self.finished = true;
        let waiters = {
            let mut st = self.gate.state.lock();
            st.running = false;
            st.completed = number;
            if let Err(e) = result {
                st.failed.get_or_insert_with(|| e.source.to_string());
            }
            std::mem::take(&mut st.waiters)
        };
        for w in waiters {
            let _ = w.send(());
        }
    }
}

impl Drop for Leader<'_> {
    fn drop(&mut self) {
        if !self.finished {
            let waiters = {
                let mut st = self.gate.state.lock();
                st.running = false;
                std::mem::take(&mut st.waiters)
            };
            drop(waiters); // a dropped sender wakes its waiter too
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::executor::block_on;
    use futures::future::BoxFuture;
    use futures::task::noop_waker;
    use futures::FutureExt;
    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::SeqCst};
    use std::sync::Arc;
    use std::task::{Context, Poll};

    fn poll(f: &mut BoxFuture<'_, MemberResult<()>>) -> Poll<MemberResult<()>> {
        f.poll_unpin(&mut Context::from_waker(&noop_waker()))
    }

    fn eio() -> MemberError {
        MemberError::new("m", MemberOp::Flush, 0, 0, io::Error::from_raw_os_error(5))
    }

    /// A flush that runs until released, counting how many ran.
    struct Device {
        runs: AtomicUsize,
        release: Mutex<Vec<oneshot::Sender<MemberResult<()>>>>,
    }

    impl Device {
        fn new() -> Arc<Device> {
            Arc::new(Device {
                runs: AtomicUsize::new(0),
                release: Mutex::new(Vec::new()),
            })
        }

        fn flush<'a>(self: &'a Arc<Self>, gate: &'a FlushGate) -> BoxFuture<'a, MemberResult<()>> {
            gate.flush("m", move || {
                self.runs.fetch_add(1, SeqCst);
                let (tx, rx) = oneshot::channel();
                self.release.lock().push(tx);
                async move { rx.await.unwrap_or(Ok(())) }
            })
            .boxed()
        }

        /// Ends the running flush with `r`.
        fn end(&self, r: MemberResult<()>) {
            let tx = self.release.lock().pop().expect("a flush is running");
            let _ = tx.send(r);
        }
    }

    #[test]
    fn callers_during_a_flush_share_the_next_one() {
        let gate = FlushGate::new();
        let dev = Device::new();
        let mut first = dev.flush(&gate);
        assert!(poll(&mut first).is_pending());
        assert_eq!(dev.runs.load(SeqCst), 1);
        // Five callers arrive while it runs: none of them runs a flush yet, and none may be
        // answered by the running one (it started before they asked).
        let mut late: Vec<_> = (0..5).map(|_| dev.flush(&gate)).collect();
        for f in &mut late {
            assert!(poll(f).is_pending());
        }
        assert_eq!(dev.runs.load(SeqCst), 1, "one flush at a time");
        dev.end(Ok(()));
        assert!(matches!(poll(&mut first), Poll::Ready(Ok(()))));
        for f in &mut late {
            assert!(
                poll(f).is_pending(),
                "answered by a flush older than the call"
            );
        }
        // The five share one flush.
        assert_eq!(dev.runs.load(SeqCst), 2);
        dev.end(Ok(()));
        for f in &mut late {
            assert!(matches!(poll(f), Poll::Ready(Ok(()))));
        }
        assert_eq!(dev.runs.load(SeqCst), 2);
        // Alone again: a call runs its own flush.
        let mut alone = dev.flush(&gate);
        assert!(poll(&mut alone).is_pending());
        dev.end(Ok(()));
        assert!(matches!(poll(&mut alone), Poll::Ready(Ok(()))));
        assert_eq!(dev.runs.load(SeqCst), 3);
    }

    #[test]
    fn a_failed_flush_fails_every_later_one() {
        let gate = FlushGate::new();
        let dev = Device::new();
        let mut a = dev.flush(&gate);
        assert!(poll(&mut a).is_pending());
        let mut waiting = dev.flush(&gate);
        assert!(poll(&mut waiting).is_pending());
        dev.end(Err(eio()));
        let Poll::Ready(Err(e)) = poll(&mut a) else {
            panic!("the failing flush succeeded")
        };
        assert_eq!(
            e.source.raw_os_error(),
            Some(5),
            "the first caller gets the OS error"
        );
        // The waiter and every later caller fail without asking the device again (the kernel
        // would say "fine" to a retried fsync).
        for mut f in [waiting, dev.flush(&gate), dev.flush(&gate)] {
            let Poll::Ready(Err(e)) = poll(&mut f) else {
                panic!("a flush after a failed one succeeded")
            };
            let msg = e.to_string();
            assert!(msg.contains("member `m`: flush"), "{msg}");
            assert!(
                msg.contains("an earlier write-back to this member failed"),
                "{msg}"
            );
            assert!(msg.contains("os error 5"), "{msg}");
            assert!(msg.contains("may have been lost"), "{msg}");
        }
        assert_eq!(dev.runs.load(SeqCst), 1);

        let gate = FlushGate::new();
        gate.poison("a FUA write failed".into());
        let e = block_on(gate.flush("m", || async { Ok(()) })).unwrap_err();
        assert!(e.to_string().contains("(a FUA write failed)"), "{e}");
    }

    /// A caller that gives up while running the flush hands it on to a waiter.
    #[test]
    fn a_dropped_leader_hands_over() {
        let gate = FlushGate::new();
        let dev = Device::new();
        let mut leader = dev.flush(&gate);
        assert!(poll(&mut leader).is_pending());
        let mut waiter = dev.flush(&gate);
        assert!(poll(&mut waiter).is_pending());
        drop(leader);
        assert!(poll(&mut waiter).is_pending());
        assert_eq!(dev.runs.load(SeqCst), 2, "the waiter runs its own flush");
        dev.end(Ok(()));
        assert!(matches!(poll(&mut waiter), Poll::Ready(Ok(()))));
    }

    /// Threads write and flush at random: one flush runs at a time, and each caller's flush
    /// started after its write completed (its write is covered).
    #[test]
    fn concurrent_callers_are_covered_and_serialized() {
        let gate = Arc::new(FlushGate::new());
        // Writes completed so far, and how many a flush covers (what had completed when it
        // started).
        let writes = Arc::new(AtomicU64::new(0));
        let durable = Arc::new(AtomicU64::new(0));
        let in_flight = Arc::new(AtomicUsize::new(0));
        let runs = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..8u64)
            .map(|t| {
                let (gate, writes, durable, in_flight, runs) = (
                    gate.clone(),
                    writes.clone(),
                    durable.clone(),
                    in_flight.clone(),
                    runs.clone(),
                );
                std::thread::spawn(move || {
                    for i in 0..200u64 {
                        let mine = writes.fetch_add(1, SeqCst) + 1;
                        block_on(gate.flush("m", || async {
                            assert_eq!(in_flight.fetch_add(1, SeqCst), 0, "two flushes at once");
                            runs.fetch_add(1, SeqCst);
                            let covered = writes.load(SeqCst);
                            if (t + i) % 3 == 0 {
                                std::thread::yield_now();
                            }
                            durable.fetch_max(covered, SeqCst);
                            in_flight.fetch_sub(1, SeqCst);
                            Ok(())
                        }))
                        .unwrap();
                        assert!(durable.load(SeqCst) >= mine, "write {mine} not covered");
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let n = runs.load(SeqCst);
        assert!((1..=1600).contains(&n), "{n}");
    }
}
