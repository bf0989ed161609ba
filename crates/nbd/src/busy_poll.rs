//! Busy-polling a connection's socket for its next request, briefly, before sleeping.
//!
//! At queue depth 1 a client sends its next request a few microseconds after it has read the
//! reply to the last one. A reader that sleeps in `epoll_wait` meanwhile pays a wake-up per
//! request (the client's send wakes it, the scheduler switches it back in): on a VM the
//! largest single cost of a 4 KiB request. So once the connection has nothing in flight and
//! its socket is empty, [`BusyPoll`] tries non-blocking `recv`s for up to
//! [`Limits::busy_poll`](crate::Limits::busy_poll) before letting the reader park.
//!
//! Bounded twice: only while the connection has nothing in flight (its own request tasks never
//! wait behind the spin), and only while spinning pays ([`SpinPolicy`]): a spin that ends with
//! nothing read makes the next ones rarer (a client that thinks between requests, or a machine
//! so busy that the client is not running), one that catches a request resets that.

use std::cell::Cell;
use std::io;
use std::os::fd::RawFd;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, ReadBuf};

/// After this many spins in a row that caught nothing, a reader spins only once every
/// `2^MAX_MISSES` times it would have slept.
const MAX_MISSES: u32 = 8;

/// Whether the next sleep of a reader is preceded by a spin: spins stay on while they catch
/// requests, and after `k` misses in a row are skipped `2^k - 1` times (at most `2^8 - 1`)
/// before the next try.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct SpinPolicy {
    /// Spins in a row that ended with nothing read.
    misses: u32,
    /// Sleeps still to be taken without spinning first.
    skip: u32,
}

impl SpinPolicy {
    /// Whether to spin before this sleep (counts a skipped one).
    pub fn should_spin(&mut self) -> bool {
        if self.skip > 0 {
            self.skip -= 1;
            return false;
        }
        true
    }

    /// Records how a spin ended: `hit` when it read something.
    pub fn record(&mut self, hit: bool) {
        if hit {
            self.misses = 0;
            return;
        }
        self.misses = (self.misses + 1).min(MAX_MISSES);
        self.skip = (1 << self.misses) - 1;
    }
}

thread_local! {
    /// Spinning readers' connections served on this thread, when it runs a current-thread
    /// runtime (where a connection never leaves its thread).
    static SERVED_HERE: Cell<usize> = const { Cell::new(0) };
}

/// Where a reader runs. On a current-thread runtime (the daemon's I/O workers) a spin holds
/// the whole thread — the other connections' requests, and the member I/O the thread's ring
/// submits and reaps for them, would wait behind it — so a reader spins there only while its
/// connection is the thread's only one. On a multi-thread runtime other workers go on.
struct Thread {
    /// Counted in `SERVED_HERE` (a current-thread runtime).
    counted: bool,
}

impl Thread {
    fn here() -> Thread {
        use tokio::runtime::{Handle, RuntimeFlavor};
        let counted =
            Handle::try_current().is_ok_and(|h| h.runtime_flavor() == RuntimeFlavor::CurrentThread);
        if counted {
            SERVED_HERE.with(|n| n.set(n.get() + 1));
        }
        Thread { counted }
    }

    /// Whether a spin holds up nobody else.
    fn may_spin(&self) -> bool {
        !self.counted || SERVED_HERE.with(Cell::get) <= 1
    }
}

impl Drop for Thread {
    fn drop(&mut self) {
        if self.counted {
            SERVED_HERE.with(|n| n.set(n.get().saturating_sub(1)));
        }
    }
}

/// A connection's read half that spins on its socket for a while before reporting
/// `Pending`, when its connection allows it ([`BusyPoll::set_idle`]).
pub(crate) struct BusyPoll<R> {
    inner: R,
    /// The socket to `recv` from while spinning; `None` (TLS, in-process streams): never spins.
    fd: Option<RawFd>,
    budget: Duration,
    /// Set by the transmission phase while the connection has nothing in flight.
    idle: bool,
    policy: SpinPolicy,
    /// The thread serving it, when a spin could hold up others there.
    thread: Option<Thread>,
}

impl<R> BusyPoll<R> {
    /// Spins up to `budget` on `fd`, the socket `inner` reads from (`fd` must stay open as
    /// long as `inner`: it is `inner`'s own).
    pub fn socket(inner: R, fd: RawFd, budget: Duration) -> Self {
        BusyPoll {
            inner,
            fd: (!budget.is_zero()).then_some(fd),
            budget,
            idle: false,
            policy: SpinPolicy::default(),
            thread: (!budget.is_zero()).then(Thread::here),
        }
    }

    /// Never spins.
    pub fn off(inner: R) -> Self {
        BusyPoll {
            inner,
            fd: None,
            budget: Duration::ZERO,
            idle: false,
            policy: SpinPolicy::default(),
            thread: None,
        }
    }

    /// Whether the connection has nothing in flight: spinning is allowed only then.
    pub fn set_idle(&mut self, idle: bool) {
        self.idle = idle;
    }

    pub fn into_inner(self) -> R {
        self.inner
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for BusyPoll<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        // The inner reader registers the waker first: if the spin catches nothing, the
        // reader sleeps as it would have; if it catches something, a later wake-up is
        // merely spurious.
        if let Poll::Ready(r) = Pin::new(&mut this.inner).poll_read(cx, buf) {
            return Poll::Ready(r);
        }
        let Some(fd) = this.fd else {
            return Poll::Pending;
        };
        let alone = this.thread.as_ref().is_none_or(Thread::may_spin);
        if !this.idle || !alone || buf.remaining() == 0 || !this.policy.should_spin() {
            return Poll::Pending;
        }
        let got = spin_recv(fd, buf, this.budget);
        this.policy.record(got.is_some());
        match got {
            Some(r) => Poll::Ready(r),
            None => Poll::Pending,
        }
    }
}

/// Non-blocking `recv`s into `buf` until one returns data, end of stream or an error, or
/// `budget` has passed (`None`).
fn spin_recv(fd: RawFd, buf: &mut ReadBuf<'_>, budget: Duration) -> Option<io::Result<()>> {
    let start = Instant::now();
    loop {
        let room = buf.initialize_unfilled();
        // SAFETY: `room` is valid for writes of `room.len()` bytes for the whole call, and
        // `fd` is the open socket of the reader that owns this `BusyPoll`.
        let n = unsafe { libc::recv(fd, room.as_mut_ptr().cast(), room.len(), libc::MSG_DONTWAIT) };
        if n >= 0 {
            // 0: end of stream, reported as a read of nothing.
            buf.advance(n as usize);
            return Some(Ok(()));
        }
        let err = io::Error::last_os_error();
        match err.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => {}
            _ => return Some(Err(err)),
        }
        if start.elapsed() >= budget {
            return None;
        }
        std::hint::spin_loop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On a current-thread runtime a reader may spin only while its connection is the
    /// thread's only one; on a multi-thread runtime always.
    #[test]
    fn on_a_current_thread_runtime_a_reader_spins_only_while_alone() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            let a = Thread::here();
            assert!(a.may_spin(), "alone");
            let b = Thread::here();
            assert!(!a.may_spin() && !b.may_spin(), "two on one thread");
            drop(b);
            assert!(a.may_spin(), "alone again");
        });
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .build()
            .unwrap();
        rt.block_on(async {
            let (a, b) = (Thread::here(), Thread::here());
            assert!(a.may_spin() && b.may_spin(), "other workers go on");
        });
    }

    #[test]
    fn spins_stay_on_while_they_catch_requests_and_back_off_when_they_do_not() {
        let mut p = SpinPolicy::default();
        for _ in 0..10 {
            assert!(p.should_spin());
            p.record(true);
        }
        // One miss: the next sleep is taken without a spin, the one after spins again.
        p.record(false);
        assert!(!p.should_spin());
        assert!(p.should_spin());
        // A second miss in a row: three sleeps without a spin.
        p.record(false);
        let spins: Vec<bool> = (0..4).map(|_| p.should_spin()).collect();
        assert_eq!(spins, [false, false, false, true]);
        // A hit resets the back-off.
        p.record(true);
        assert!(p.should_spin());
        // Misses without end: at most 2^8 - 1 sleeps skipped between tries.
        for _ in 0..20 {
            while !p.should_spin() {}
            p.record(false);
        }
        let skipped = (0..).take_while(|_| !p.should_spin()).count();
        assert_eq!(skipped, (1 << MAX_MISSES) - 1);
    }

    /// Data written while the reader spins is read by the spin itself: the test's runtime
    /// is blocked in it, so nothing else could deliver it. Then end of stream reads as 0.
    #[tokio::test]
    async fn a_spin_catches_data_sent_meanwhile_and_reports_end_of_stream() {
        use std::io::Write;
        use std::os::fd::AsRawFd;
        use tokio::io::AsyncReadExt;

        let (a, mut b) = std::os::unix::net::UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        let a = tokio::net::UnixStream::from_std(a).unwrap();
        let fd = a.as_raw_fd();
        let mut r = BusyPoll::socket(a, fd, Duration::from_secs(30));
        r.set_idle(true);
        let writer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(5));
            b.write_all(b"hello").unwrap();
            b
        });
        let mut got = [0u8; 5];
        let mut n = 0;
        while n < got.len() {
            n += r.read(&mut got[n..]).await.unwrap();
        }
        assert_eq!(&got, b"hello");
        assert_eq!(r.policy, SpinPolicy::default(), "the spin caught the data");
        drop(writer.join().unwrap());
        assert_eq!(r.read(&mut got).await.unwrap(), 0);
    }
}
