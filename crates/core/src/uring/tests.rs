//! Unit tests of the io_uring member's internals (inline ops, descriptor choice, zeroing).

use super::file::{
    memory_backed, DirectIo, FileOptions, UringFile, INLINE_MAX, NO_PUNCH, NO_ZERO_RANGE,
    ZERO_CHUNK, ZERO_IN_FLIGHT,
};
use super::op::{Done, FileShared, Job, OpKind};
use super::ring::{Engine, RingThread};
use crate::buf::Buf;
use crate::member::Member;
use futures::executor::block_on;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

fn shm_dir() -> Option<tempfile::TempDir> {
    let dir = tempfile::tempdir_in("/dev/shm").ok()?;
    let probe = File::create(dir.path().join("probe")).ok()?;
    memory_backed(&probe).then_some(dir)
}

fn open(path: &Path, size: u64, engine: &Arc<Engine>) -> UringFile {
    UringFile::open_with(
        path,
        Some(size),
        FileOptions {
            direct: DirectIo::Auto,
            engine: Some(engine.clone()),
        },
    )
    .unwrap()
}

fn ring_ops(m: &UringFile) -> usize {
    m.ring.submitted.load(Ordering::Relaxed)
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn memory_backed_file_systems_are_recognised() {
    let Some(dir) = shm_dir() else {
        eprintln!("no tmpfs at /dev/shm; skipping");
        return;
    };
    let m = open(&dir.path().join("m.img"), 1 << 20, &Engine::new(1).unwrap());
    assert!(m.shared.inline, "a /dev/shm file runs inline");
    // A disk file system (the build directory) keeps every op on the ring.
    let disk = tempfile::tempdir_in(std::env::temp_dir()).unwrap();
    let f = File::create(disk.path().join("d.img")).unwrap();
    if !memory_backed(&f) {
        let d = open(
            &disk.path().join("d.img"),
            1 << 20,
            &Engine::new(1).unwrap(),
        );
        assert!(!d.shared.inline);
    }
}

/// Every kind of op on a tmpfs member runs on the caller's thread (the ring sees none of
/// them) and means the same as through the ring.
#[test]
fn small_ops_on_tmpfs_run_inline() {
    let Some(dir) = shm_dir() else {
        eprintln!("no tmpfs at /dev/shm; skipping");
        return;
    };
    let engine = Engine::new(1).unwrap();
    let m = open(&dir.path().join("m.img"), 4 << 20, &engine);
    let a = pattern(3 * 4096 + 100, 1);
    // Aligned, unaligned, FUA.
    block_on(m.write(8192, Buf::copy_from(&a).freeze(), false)).unwrap();
    block_on(m.write(100_001, Buf::copy_from(&a[..777]).freeze(), true)).unwrap();
    let got = block_on(m.read(8192, Buf::new(a.len()))).unwrap();
    assert!(got[..] == a[..]);
    let got = block_on(m.read(100_001, Buf::new(777))).unwrap();
    assert!(got[..] == a[..777]);
    // Vectored both ways.
    let parts = [pattern(4096, 2), pattern(512, 3), pattern(8192, 4)];
    let data = parts.iter().map(|p| Buf::copy_from(p).freeze()).collect();
    block_on(m.write_vectored(1 << 20, data, false)).unwrap();
    let bufs = parts.iter().map(|p| Buf::new(p.len())).collect();
    let got = block_on(m.read_vectored(1 << 20, bufs)).unwrap();
    for (g, p) in got.iter().zip(&parts) {
        assert!(g[..] == p[..]);
    }
    // Flush, trim (hole punch) and write-zeroes.
    block_on(m.flush()).unwrap();
    block_on(m.trim(8192, 4096)).unwrap();
    block_on(m.write_zeroes(8192 + 8192, 4096)).unwrap();
    let got = block_on(m.read(8192, Buf::new(a.len()))).unwrap();
    assert!(got[..4096].iter().all(|&b| b == 0));
    assert!(got[4096..8192] == a[4096..8192]);
    assert!(got[8192..12288].iter().all(|&b| b == 0));
    assert!(got[12288..] == a[12288..]);
    assert_eq!(ring_ops(&m), 0, "no op went through the ring");
    let c = m.counters().snapshot();
    assert_eq!((c.in_flight, c.errors), (0, 0));
}

/// Ops above INLINE_MAX on tmpfs go through the ring; both paths see each other's data.
#[test]
fn large_ops_on_tmpfs_use_the_ring() {
    let Some(dir) = shm_dir() else {
        eprintln!("no tmpfs at /dev/shm; skipping");
        return;
    };
    let engine = Engine::new(1).unwrap();
    let m = open(&dir.path().join("m.img"), 4 << 20, &engine);
    let big = pattern(INLINE_MAX + 4096, 9);
    block_on(m.write(4096, Buf::copy_from(&big).freeze(), false)).unwrap();
    assert_eq!(ring_ops(&m), 1);
    let got = block_on(m.read(4096 + INLINE_MAX as u64, Buf::new(4096))).unwrap();
    assert!(got[..] == big[INLINE_MAX..]);
    assert_eq!(ring_ops(&m), 1, "the small read ran inline");
    block_on(m.write(4096, Buf::copy_from(&big[..4096]).freeze(), false)).unwrap();
    let got = block_on(m.read(0, Buf::new(big.len() + 4096))).unwrap();
    assert!(got[4096..] == big[..]);
    assert_eq!(ring_ops(&m), 2);
}

/// The synchronous runner's error and short-transfer handling, on a file shorter than the
/// ranges asked for.
#[test]
fn inline_jobs_report_eof_and_errors() {
    let dir = tempfile::tempdir_in(std::env::temp_dir()).unwrap();
    let path = dir.path().join("short.img");
    std::fs::write(&path, pattern(6000, 5)).unwrap();
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    let shared = Arc::new(FileShared {
        direct: None,
        buffered: OwnedFd::from(file),
        dio_mem_align: 1,
        dio_off_align: 1,
        inline: true,
    });
    // A read that crosses the end gets what is there, then a clear EOF error.
    let job = Job::new(
        shared.clone(),
        4096,
        OpKind::Read {
            buf: Buf::new(4096),
        },
    );
    let e = job.run_sync().err().unwrap();
    assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
    assert!(e.to_string().contains("1904 of 4096"), "{e}");
    // A read inside the file returns the bytes.
    let job = Job::new(
        shared.clone(),
        100,
        OpKind::Read {
            buf: Buf::new(1000),
        },
    );
    let Ok(Done::Read(b)) = job.run_sync() else {
        panic!("read failed")
    };
    assert!(b[..] == pattern(6000, 5)[100..1100]);
    // An invalid fallocate mode is the kernel's error, passed through.
    let job = Job::new(
        shared,
        0,
        OpKind::Fallocate {
            mode: libc::FALLOC_FL_PUNCH_HOLE,
            len: 4096,
        },
    );
    let e = job.run_sync().err().unwrap();
    assert_eq!(e.raw_os_error(), Some(libc::EOPNOTSUPP));
}

/// Flushes asked for while one runs share the next fdatasync: 16 at once cost 2.
#[test]
fn concurrent_flushes_share_fdatasyncs() {
    let dir = tempfile::tempdir_in(std::env::temp_dir()).unwrap();
    let engine = Engine::new(1).unwrap();
    let m = open(&dir.path().join("f.img"), 1 << 20, &engine);
    if m.shared.inline {
        panic!("the temp dir is on tmpfs: this test needs a disk file system");
    }
    block_on(m.write(0, Buf::copy_from(&pattern(4096, 1)).freeze(), false)).unwrap();
    let before = ring_ops(&m);
    for r in block_on(futures::future::join_all((0..16).map(|_| m.flush()))) {
        r.unwrap();
    }
    // The first runs alone; the 15 that arrived while it ran share the second.
    assert_eq!(ring_ops(&m) - before, 2);
    assert_eq!(m.counters().snapshot().flushes, 16);
}

/// Where fallocate cannot zero, zeroing writes pieces of one shared 1 MiB zero buffer, a
/// bounded number at a time, over a range of any size; the bytes around it stay.
#[test]
fn zeroing_without_fallocate_streams_one_small_buffer() {
    let disk = tempfile::tempdir_in(std::env::temp_dir()).unwrap();
    let shm = tempfile::tempdir_in("/dev/shm").unwrap();
    let engine = Engine::new(1).unwrap();
    for (dir, len) in [(disk.path(), 256u64 << 20), (shm.path(), 64 << 20)] {
        let m = open(&dir.join("z.img"), len + (1 << 20), &engine);
        // Force the fallback, as on a file system with neither fallocate mode.
        m.unsupported
            .store(NO_PUNCH | NO_ZERO_RANGE, Ordering::Relaxed);
        // Start and end inside 1 MiB pieces, and off O_DIRECT alignment.
        let (start, zlen) = (3 * 4096 + 512, len - 5 * 4096);
        let ones = pattern(2 << 20, 3);
        for at in [0, start + zlen / 2, len - (1 << 20)] {
            block_on(m.write(at, Buf::copy_from(&ones).freeze(), false)).unwrap();
        }
        let before = ring_ops(&m);
        for trim in [false, true] {
            if trim {
                block_on(m.trim(start, zlen)).unwrap();
            } else {
                block_on(m.write_zeroes(start, zlen)).unwrap();
            }
        }
        let pieces = 2 * zlen.div_ceil(ZERO_CHUNK as u64);
        let via_ring = (ring_ops(&m) - before) as u64;
        if m.shared.inline {
            assert_eq!(via_ring, 0, "1 MiB pieces run inline on tmpfs");
        } else {
            assert!(
                (pieces..=pieces + 2).contains(&via_ring),
                "{via_ring} ring ops"
            );
        }
        let most = m.zero_in_flight.max.load(Ordering::SeqCst);
        assert!((1..=ZERO_IN_FLIGHT).contains(&most), "{most} in flight");
        let got = block_on(m.read(0, Buf::new(start as usize))).unwrap();
        assert!(
            got[..] == ones[..start as usize],
            "bytes before the range changed"
        );
        let tail = len + (1 << 20) - (start + zlen);
        let got = block_on(m.read(start + zlen, Buf::new(tail as usize))).unwrap();
        let from = (start + zlen - (len - (1 << 20))) as usize;
        assert!(
            got[..] == ones[from..from + tail as usize],
            "bytes after the range changed"
        );
        let mut at = start;
        while at < start + zlen {
            let n = (8u64 << 20).min(start + zlen - at);
            let got = block_on(m.read(at, Buf::new(n as usize))).unwrap();
            assert!(got.iter().all(|&b| b == 0), "non-zero bytes near {at}");
            at += n;
        }
    }
}

/// A ring op whose future is dropped while in flight keeps its buffer until the kernel is
/// done; the ring carries on.
#[test]
fn dropped_ring_futures_leave_the_ring_working() {
    let dir = tempfile::tempdir_in(std::env::temp_dir()).unwrap();
    let engine = Engine::new(1).unwrap();
    let m = open(&dir.path().join("d.img"), 8 << 20, &engine);
    let data = pattern(1 << 20, 7);
    block_on(m.write(0, Buf::copy_from(&data).freeze(), false)).unwrap();
    for _ in 0..50 {
        let mut r = m.read(0, Buf::new(1 << 20));
        let _ = block_on(async { futures::poll!(&mut r) });
        drop(r);
        let mut w = m.write(1 << 20, Buf::copy_from(&data).freeze(), false);
        let _ = block_on(async { futures::poll!(&mut w) });
        drop(w);
    }
    let got = block_on(m.read(0, Buf::new(2 << 20))).unwrap();
    assert!(got[..1 << 20] == data[..]);
    // The dropped writes still run, but nothing orders them before this read: on a loaded
    // machine all of them can still be in the kernel's hands here (seen once in a full run).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut second = got[1 << 20..].to_vec();
    while second != data && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
        second = block_on(m.read(1 << 20, Buf::new(1 << 20)))
            .unwrap()
            .to_vec();
    }
    assert!(
        second == data,
        "no dropped write reached the file within 10 s"
    );
}

/// A ring whose submits keep failing (created disabled, so io_uring_enter refuses it) fails
/// the entry that does not fit in its full queue, naming the cause, instead of retrying forever.
#[test]
fn a_submit_that_keeps_failing_fails_the_entry() {
    let ring = io_uring::IoUring::builder()
        .setup_r_disabled()
        .build(2)
        .unwrap();
    let (_tx, rx) = crossbeam_channel::unbounded();
    let wake_fd = OwnedFd::from(File::open("/dev/null").unwrap());
    let mut t = RingThread::new(ring, rx, wake_fd, Arc::default());
    let nop = io_uring::opcode::Nop::new().build();
    // The queue takes its entries without a submit; the next needs one, which keeps failing.
    t.push(&nop).unwrap();
    t.push(&nop).unwrap();
    let e = t.push(&nop).unwrap_err();
    assert!(e.to_string().contains("failed 64 times in a row"), "{e}");
}

/// A member grows only to what its file now holds, and never shrinks (a volume growing in
/// place over a file that grew while open).
#[test]
fn a_member_grows_to_what_its_file_now_holds() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.img");
    let engine = Engine::new(1).unwrap();
    let m = open(&path, 1 << 20, &engine);
    let e = m.grow_to(2 << 20).unwrap_err();
    assert!(e.contains("holds 1048576 bytes"), "{e}");
    assert_eq!(m.len(), 1 << 20, "unchanged by a refusal");
    OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(3 << 20)
        .unwrap();
    assert_eq!(
        m.grow_to(2 << 20),
        Ok(2 << 20),
        "the config's size, not the file's"
    );
    assert_eq!(m.len(), 2 << 20);
    let tail = block_on(m.write((2 << 20) - 4096, Buf::copy_from(&[7; 4096]).freeze(), false));
    assert!(tail.is_ok(), "the grown bytes take writes");
    assert_eq!(m.grow_to(1 << 20), Ok(2 << 20), "never shrinks");
}

fn disk_member(dir: &tempfile::TempDir, size: u64, engine: &Arc<Engine>) -> UringFile {
    let m = open(&dir.path().join("c.img"), size, engine);
    assert!(
        !m.shared.inline,
        "the temp dir is on tmpfs: this test needs a disk file system"
    );
    m
}

/// Under `uring::block_on`, every kind of op on a disk member goes through the caller's own
/// ring (the engine's ring sees none), means the same, and none is left when it returns.
#[test]
fn block_on_runs_disk_ops_on_the_callers_ring() {
    let dir = tempfile::tempdir_in(std::env::temp_dir()).unwrap();
    let engine = Engine::new(1).unwrap();
    let m = disk_member(&dir, 4 << 20, &engine);
    let a = pattern(3 * 4096, 1);
    let odd = pattern(777, 2);
    let parts = [pattern(4096, 3), pattern(512, 4), pattern(8192, 5)];
    let (got, got_odd, got_v) = super::block_on(async {
        // Aligned (O_DIRECT), unaligned (buffered descriptor), FUA, vectored.
        m.write(8192, Buf::copy_from(&a).freeze(), false)
            .await
            .unwrap();
        m.write(100_001, Buf::copy_from(&odd).freeze(), true)
            .await
            .unwrap();
        let data = parts.iter().map(|p| Buf::copy_from(p).freeze()).collect();
        m.write_vectored(1 << 20, data, false).await.unwrap();
        m.flush().await.unwrap();
        m.trim(8192, 4096).await.unwrap();
        let got = m.read(8192, Buf::new(a.len())).await.unwrap();
        let got_odd = m.read(100_001, Buf::new(odd.len())).await.unwrap();
        let bufs = parts.iter().map(|p| Buf::new(p.len())).collect();
        let got_v = m.read_vectored(1 << 20, bufs).await.unwrap();
        (got, got_odd, got_v)
    });
    assert!(got[..4096].iter().all(|&b| b == 0), "trimmed");
    assert!(got[4096..] == a[4096..]);
    assert!(got_odd[..] == odd[..]);
    for (g, p) in got_v.iter().zip(&parts) {
        assert!(g[..] == p[..]);
    }
    assert_eq!(ring_ops(&m), 0, "no op went through the engine's ring");
    assert!(!super::caller::caller_ops_pending());
    // Outside block_on the same thread uses the engine's ring again.
    block_on(m.read(0, Buf::new(4096))).unwrap();
    assert_eq!(ring_ops(&m), 1);
    let c = m.counters().snapshot();
    assert_eq!((c.in_flight, c.errors), (0, 0));
}

/// More ops at once than the caller's ring keeps in the kernel wait their turn and all land.
#[test]
fn block_on_queues_ops_beyond_the_rings_room() {
    let dir = tempfile::tempdir_in(std::env::temp_dir()).unwrap();
    let engine = Engine::new(1).unwrap();
    let m = disk_member(&dir, 8 << 20, &engine);
    let n = 1200u64;
    super::block_on(async {
        let writes = (0..n).map(|i| {
            let data = Buf::copy_from(&pattern(4096, i as u8)).freeze();
            m.write(i * 4096, data, false)
        });
        for r in futures::future::join_all(writes).await {
            r.unwrap();
        }
        let reads = (0..n).map(|i| m.read(i * 4096, Buf::new(4096)));
        for (i, r) in futures::future::join_all(reads)
            .await
            .into_iter()
            .enumerate()
        {
            assert!(r.unwrap()[..] == pattern(4096, i as u8)[..], "block {i}");
        }
    });
    assert_eq!(ring_ops(&m), 0);
    assert!(!super::caller::caller_ops_pending());
}

/// Futures dropped while their ops are in the caller's ring: the ops keep their buffers and
/// finish before `block_on` returns; the ring goes on working.
#[test]
fn block_on_waits_for_ops_of_dropped_futures() {
    let dir = tempfile::tempdir_in(std::env::temp_dir()).unwrap();
    let engine = Engine::new(1).unwrap();
    let m = disk_member(&dir, 8 << 20, &engine);
    let data = pattern(1 << 20, 7);
    for round in 0..20u64 {
        super::block_on(async {
            let mut w = m.write((round % 4) << 20, Buf::copy_from(&data).freeze(), false);
            assert!(futures::poll!(&mut w).is_pending());
            drop(w);
            let mut r = m.read(4 << 20, Buf::new(1 << 20));
            let _ = futures::poll!(&mut r);
            drop(r);
        });
        assert!(!super::caller::caller_ops_pending(), "drained on return");
    }
    // Every dropped write ran to its end before its block_on returned.
    let got = super::block_on(m.read(0, Buf::new(4 << 20))).unwrap();
    for piece in got.chunks(1 << 20) {
        assert!(piece == &data[..]);
    }
    assert_eq!(ring_ops(&m), 0);
}

/// A waker from another thread wakes a caller sleeping in its ring (no op of its own would),
/// and a `block_on` nested in a polled future shares the thread's ring.
#[test]
fn block_on_is_woken_from_other_threads_and_nests() {
    let dir = tempfile::tempdir_in(std::env::temp_dir()).unwrap();
    let engine = Engine::new(1).unwrap();
    let m = disk_member(&dir, 4 << 20, &engine);
    let m = &m;
    let (tx, rx) = futures::channel::oneshot::channel::<u32>();
    let got = super::block_on(async move {
        let t = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(50));
            tx.send(7).unwrap();
        });
        let write = m.write(0, Buf::copy_from(&pattern(4096, 9)).freeze(), false);
        let (r, sent) = futures::join!(write, rx);
        r.unwrap();
        t.join().unwrap();
        // Nested: a synchronous call inside the future drives the same ring.
        let inner = super::block_on(m.read(0, Buf::new(4096))).unwrap();
        assert!(inner[..] == pattern(4096, 9)[..]);
        sent.unwrap()
    });
    assert_eq!(got, 7);
    assert_eq!(ring_ops(m), 0);
    assert!(!super::caller::caller_ops_pending());
}

/// A waker that counts its wakes.
struct CountWake(std::sync::atomic::AtomicUsize);

impl std::task::Wake for CountWake {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// The engine is sometimes driven by a nested executor inside a tokio task: nbraidd assembles
/// (and replays the write-hole log) under futures' `block_on`, called from the future its
/// runtime's `block_on` polls. A member op's completion must not take tokio's co-op budget
/// there: once a task's 128 units are spent, a budgeted receiver answers Pending and wakes
/// itself for ever, and the nested `block_on` spins (tokio's oneshot did, on the SIGKILL tests).
#[test]
fn member_ops_finish_under_a_nested_executor_inside_a_tokio_task() {
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let dir = tempfile::tempdir_in(std::env::temp_dir()).unwrap();
        let engine = Engine::new(1).unwrap();
        let m = disk_member(&dir, 1 << 20, &engine);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        runtime.block_on(async {
            // Four times a task's budget, all in this one poll of the runtime's future.
            for i in 0..512u64 {
                let data = Buf::copy_from(&pattern(4096, i as u8)).freeze();
                block_on(m.write(i % 256 * 4096, data, false)).unwrap();
            }
            let got = block_on(m.read(255 * 4096, Buf::new(4096))).unwrap();
            assert!(got[..] == pattern(4096, 255)[..]);
        });
        let _ = done_tx.send(());
    });
    done_rx
        .recv_timeout(std::time::Duration::from_secs(120))
        .expect(
            "512 member ops under a nested block_on inside a tokio task did not finish in 120 s",
        );
}

/// Polls `fut` once with a waker that does nothing; true when it is pending.
fn poll_once<F: std::future::Future>(fut: std::pin::Pin<&mut F>) -> bool {
    let waker = futures::task::noop_waker();
    fut.poll(&mut std::task::Context::from_waker(&waker))
        .is_pending()
}

/// Runs `fut` on this thread the way the daemon's I/O workers do: the future is polled, and
/// the loop turns the driven ring when an op is queued or its completion eventfd is readable
/// (here `poll(2)` stands in for the runtime's reactor).
fn drive<F: std::future::Future>(ring: &super::DrivenRing, fut: F) -> F::Output {
    let woken = Arc::new(CountWake(Default::default()));
    let waker = std::task::Waker::from(woken.clone());
    let mut cx = std::task::Context::from_waker(&waker);
    let mut fut = std::pin::pin!(fut);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        if let std::task::Poll::Ready(out) = fut.as_mut().poll(&mut cx) {
            return out;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the driven ring never finished"
        );
        if !ring.has_queued() {
            let mut p = libc::pollfd {
                fd: std::os::fd::AsRawFd::as_raw_fd(&ring.completion_fd()),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd, for the length given.
            let ready = unsafe { libc::poll(&mut p, 1, 10_000) };
            // The future waits on ops in the ring: the kernel must say when they complete.
            assert_eq!(ready, 1, "ops in the ring and no completion signal");
            ring.take_signal();
        }
        ring.turn();
    }
}

/// On a thread with a driven ring, every op its futures start goes into that ring (the
/// engine's ring sees none), the loop's waker hears of each queued op, a loop that turns on
/// the completion eventfd finishes them all, and dropping the ring waits for ops still in it.
#[test]
fn a_driven_ring_takes_the_threads_ops_and_its_loop_finishes_them() {
    let dir = tempfile::tempdir_in(std::env::temp_dir()).unwrap();
    let engine = Engine::new(1).unwrap();
    let m = disk_member(&dir, 8 << 20, &engine);
    let ring = super::DrivenRing::install().unwrap();
    assert!(super::DrivenRing::install().is_err(), "one per thread");

    // The loop's waker is woken when an op is queued, and the op waits for a turn.
    let told = Arc::new(CountWake(Default::default()));
    ring.wake_when_queued(&std::task::Waker::from(told.clone()));
    let mut w = Box::pin(m.write(0, Buf::copy_from(&pattern(4096, 1)).freeze(), false));
    assert!(poll_once(w.as_mut()));
    assert_eq!(
        told.0.load(Ordering::SeqCst),
        1,
        "the loop hears of the queued op"
    );
    assert!(ring.has_queued());
    drive(&ring, w).unwrap();

    // Many ops at once, beyond the ring's room; FUA, flush, vectored, unaligned.
    let n = 700u64;
    drive(&ring, async {
        let writes = (0..n).map(|i| {
            let data = Buf::copy_from(&pattern(4096, i as u8)).freeze();
            m.write(i * 4096, data, i % 7 == 0)
        });
        for r in futures::future::join_all(writes).await {
            r.unwrap();
        }
        m.flush().await.unwrap();
        let odd = pattern(777, 9);
        m.write(100_001, Buf::copy_from(&odd).freeze(), true)
            .await
            .unwrap();
        let got = m.read(100_001, Buf::new(777)).await.unwrap();
        assert!(got[..] == odd[..]);
    });
    let m = &m;
    let reads = drive(&ring, async {
        let reads = (0..n)
            .filter(|i| !(24..=25).contains(i))
            .map(|i| async move { (i, m.read(i * 4096, Buf::new(4096)).await.unwrap()) });
        futures::future::join_all(reads).await
    });
    for (i, got) in reads {
        assert!(got[..] == pattern(4096, i as u8)[..], "block {i}");
    }
    assert_eq!(ring_ops(m), 0, "no op went through the engine's ring");

    // A future dropped with its op in the ring: dropping the ring waits for the op.
    let data = pattern(1 << 20, 5);
    let mut w = Box::pin(m.write(4 << 20, Buf::copy_from(&data).freeze(), false));
    assert!(poll_once(w.as_mut()));
    drop(w);
    ring.turn();
    drop(ring);
    assert!(!super::caller::caller_ops_pending(), "drained on drop");
    // Without the driven ring, ops go to the engine's ring again.
    let got = block_on(m.read(4 << 20, Buf::new(1 << 20))).unwrap();
    assert!(got[..] == data[..]);
    assert_eq!(ring_ops(m), 1);
}
