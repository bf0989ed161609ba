//! A runtime-free sleep: one timer thread completes oneshots at their deadlines. Used by the
//! fault-injecting member for added latency, so its futures work under any executor.

use crossbeam_channel::{RecvTimeoutError, Sender};
use futures::channel::oneshot;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

type Wake = (Instant, oneshot::Sender<()>);

static TIMER: OnceLock<Sender<Wake>> = OnceLock::new();

fn timer() -> &'static Sender<Wake> {
    TIMER.get_or_init(|| {
        let (tx, rx) = crossbeam_channel::unbounded::<Wake>();
        std::thread::Builder::new()
            .name("nbraid-timer".into())
            .spawn(move || {
                // (deadline, sequence) keeps equal deadlines in arrival order.
                let mut heap: BinaryHeap<Reverse<(Instant, u64)>> = BinaryHeap::new();
                let mut waiting: std::collections::HashMap<u64, oneshot::Sender<()>> =
                    std::collections::HashMap::new();
                let mut seq = 0u64;
                loop {
                    let now = Instant::now();
                    while let Some(Reverse((at, s))) = heap.peek().copied() {
                        if at > now {
                            break;
                        }
                        heap.pop();
                        if let Some(w) = waiting.remove(&s) {
                            let _ = w.send(());
                        }
                    }
                    let got = match heap.peek() {
                        Some(Reverse((at, _))) => {
                            rx.recv_timeout(at.saturating_duration_since(Instant::now()))
                        }
                        None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
                    };
                    match got {
                        Ok((at, w)) => {
                            seq += 1;
                            heap.push(Reverse((at, seq)));
                            waiting.insert(seq, w);
                        }
                        Err(RecvTimeoutError::Timeout) => {}
                        Err(RecvTimeoutError::Disconnected) => return,
                    }
                }
            })
            .expect("start the timer thread");
        tx
    })
}

/// Completes after `d` (at once for zero).
pub async fn sleep(d: Duration) {
    if d.is_zero() {
        return;
    }
    let (tx, rx) = oneshot::channel();
    if timer().send((Instant::now() + d, tx)).is_ok() {
        let _ = rx.await;
    }
}
