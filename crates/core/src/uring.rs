//! Files and block devices through io_uring, on dedicated engine threads.
//!
//! An [`Engine`] owns a few rings, each driven by one thread. Callers push operations on a
//! channel and await a oneshot; the ring thread moves everything queued into the submission
//! queue and submits it with one `io_uring_enter` per loop turn (batching), reaps completions
//! and completes the futures. A sleeping ring thread waits in the kernel on both its
//! completions and an eventfd that submitters poke only when it sleeps, so a busy ring costs
//! no extra syscalls per op. Buffers are owned by the in-flight slot until their completion
//! arrives, so the kernel never sees memory that moved or was freed.
//!
//! On a memory-backed file system (tmpfs, ramfs) io_uring cannot complete a read or write
//! inline (no FMODE_NOWAIT): it would hand every op to an io-wq kernel thread, so an op would
//! cross three threads to do a memory copy. There ops up to `INLINE_MAX` are plain
//! `pread`/`pwritev2` calls on the caller's thread instead (see `memory_backed`).
//!
//! Files are opened with O_DIRECT where the file system allows it (alignment from `statx`
//! `STATX_DIOALIGN`); an op that does not meet the alignment goes through a second, buffered
//! descriptor. Where O_DIRECT is refused (older tmpfs, some FUSE) the member runs buffered and
//! says so in a warning. Flush is `fdatasync` (`IORING_OP_FSYNC` + DATASYNC), FUA is
//! `RWF_DSYNC` on the write, trim is `fallocate(PUNCH_HOLE | KEEP_SIZE)` — on a block device
//! the kernel turns that into a discard that is guaranteed to read back as zeroes, so mirror
//! copies stay identical after a trim (a plain BLKDISCARD leaves contents undefined).
//! Flushes go through a [`FlushGate`]: one `fdatasync` at a time, shared by the callers that
//! wait for it, and after a write-back error every later flush fails.
//!
//! A member is opened exclusively (an advisory lock, plus `O_EXCL` on block devices; see
//! [`crate::exclusive`]): open each member once per process and share the [`UringFile`].

use crate::buf::{Buf, SharedBuf};
use crate::exclusive;
use crate::flush_gate::FlushGate;
use crate::member::{check_range, Member, MemberCounters, MemberError, MemberOp, MemberResult};
use crossbeam_channel::{Receiver, Sender, TryRecvError};
use futures::channel::oneshot;
use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt, TryStreamExt};
use io_uring::{opcode, types, IoUring, Probe};
use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{fence, AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use thiserror::Error;

/// Submission queue entries per ring.
const RING_ENTRIES: u32 = 256;
/// Most user operations a ring keeps in the kernel at once: the completion queue holds
/// 2 × RING_ENTRIES, one of which is the armed eventfd read, so completions never overflow.
const MAX_IN_FLIGHT: usize = 2 * RING_ENTRIES as usize - 1;
/// user_data of the eventfd read that wakes a sleeping ring.
const WAKE_TOKEN: u64 = u64::MAX;
/// Largest single read/write handed to the kernel (a request longer is resubmitted in parts).
const MAX_RW: usize = 1 << 30;
/// Largest op on a memory-backed file that the caller runs itself (a 1 MiB copy takes the
/// caller's thread for ~0.1 ms, like any other CPU work of a request). A longer one goes to the
/// ring, and from there to an io-wq worker, so it does not hold up the caller's other tasks.
/// (Measured with 1 MiB sequential NBD I/O on tmpfs: inline costs 10–30% less CPU per op
/// than the ring.)
const INLINE_MAX: usize = 1 << 20;

/// Why io_uring or a member could not be set up. Messages say what and where.
#[derive(Debug, Error)]
pub enum UringError {
    #[error("io_uring is not available: {0} (nbraid needs Linux 5.6 or later with io_uring enabled; check /proc/sys/kernel/io_uring_disabled and any seccomp policy)")]
    Setup(io::Error),
    #[error("the kernel's io_uring lacks {0}, which nbraid needs (Linux 5.6 or later)")]
    MissingOpcode(&'static str),
    #[error("cannot open member {path}: {source}")]
    Open { path: PathBuf, source: io::Error },
    #[error("member {path} is {actual} bytes but {wanted} were asked for (refusing to resize an existing member)")]
    WrongSize {
        path: PathBuf,
        actual: u64,
        wanted: u64,
    },
    #[error("O_DIRECT was required for member {path} but its file system refuses it: {reason}")]
    DirectRefused { path: PathBuf, reason: String },
    #[error("cannot start an io_uring engine thread: {0}")]
    Thread(io::Error),
    /// Another open of the member holds it (a second daemon, `nbraid create`, a mount).
    #[error("member {path} is in use by {holder}; two programs driving one member would corrupt it, so stop the other one first")]
    InUse {
        path: PathBuf,
        /// Who holds it: "process PID (comm: cmdline)" or "another process".
        holder: String,
        /// The holder's pid, when it could be found.
        holder_pid: Option<u32>,
    },
}

/// A pool of rings, each on its own thread. Members are spread over the rings.
pub struct Engine {
    rings: Vec<Arc<Ring>>,
    next: AtomicUsize,
}

static DEFAULT_ENGINE: OnceLock<Result<Arc<Engine>, String>> = OnceLock::new();

impl Engine {
    /// An engine with `threads` rings (at least one).
    pub fn new(threads: usize) -> Result<Arc<Engine>, UringError> {
        let rings = (0..threads.max(1))
            .map(Ring::start)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Arc::new(Engine {
            rings,
            next: AtomicUsize::new(0),
        }))
    }

    /// The process-wide engine: one ring per available CPU (at most 4), started on first use.
    pub fn global() -> Result<Arc<Engine>, UringError> {
        let r = DEFAULT_ENGINE.get_or_init(|| {
            let n = std::thread::available_parallelism().map_or(1, |n| n.get().min(4));
            Engine::new(n).map_err(|e| e.to_string())
        });
        match r {
            Ok(e) => Ok(e.clone()),
            Err(msg) => Err(UringError::Setup(io::Error::other(msg.clone()))),
        }
    }

    fn pick(&self) -> Arc<Ring> {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.rings.len();
        self.rings[i].clone()
    }
}

/// Sets up one ring and checks the kernel offers every opcode we use. Asks for
/// SINGLE_ISSUER + DEFER_TASKRUN (Linux 6.1+: completions are processed when the ring thread
/// waits, with no inter-processor interrupts) and falls back to a plain ring where refused.
fn new_ring() -> Result<IoUring, UringError> {
    let ring = match IoUring::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .build(RING_ENTRIES)
    {
        Ok(r) => r,
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            tracing::debug!("io_uring DEFER_TASKRUN not available; using a plain ring");
            IoUring::new(RING_ENTRIES).map_err(UringError::Setup)?
        }
        Err(e) => return Err(UringError::Setup(e)),
    };
    let mut probe = Probe::new();
    ring.submitter()
        .register_probe(&mut probe)
        .map_err(UringError::Setup)?;
    for (code, name) in [
        (opcode::Read::CODE, "IORING_OP_READ"),
        (opcode::Write::CODE, "IORING_OP_WRITE"),
        (opcode::Fsync::CODE, "IORING_OP_FSYNC"),
        (opcode::Fallocate::CODE, "IORING_OP_FALLOCATE"),
    ] {
        if !probe.is_supported(code) {
            return Err(UringError::MissingOpcode(name));
        }
    }
    Ok(ring)
}

/// The submitting side of one ring thread.
struct Ring {
    tx: Sender<Op>,
    /// Eventfd the ring thread keeps a read armed on; written to wake it.
    wake_fd: OwnedFd,
    /// True while the ring thread is (about to be) blocked in the kernel.
    sleeping: Arc<AtomicBool>,
    /// Ops handed to this ring (tests check which path an op took).
    #[cfg(test)]
    submitted: AtomicUsize,
}

impl Ring {
    fn start(index: usize) -> Result<Arc<Ring>, UringError> {
        // SAFETY: eventfd(2) with valid flags; the result is checked before use.
        let raw = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if raw < 0 {
            return Err(UringError::Setup(io::Error::last_os_error()));
        }
        // SAFETY: `raw` is a fresh descriptor that nothing else owns.
        let wake_fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // The thread reads the eventfd through its own descriptor (a clone).
        let thread_wake = wake_fd.try_clone().map_err(UringError::Setup)?;
        let (tx, rx) = crossbeam_channel::unbounded();
        let sleeping = Arc::new(AtomicBool::new(false));
        let thread_sleeping = sleeping.clone();
        // The ring is created on its own thread: with SINGLE_ISSUER the creating thread is the
        // only one allowed to submit.
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name(format!("nbraid-uring-{index}"))
            .spawn(move || match new_ring() {
                Ok(ring) => {
                    let _ = ready_tx.send(Ok(()));
                    RingThread::new(ring, rx, thread_wake, thread_sleeping).run();
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                }
            })
            .map_err(UringError::Thread)?;
        match ready_rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e),
            Err(_) => {
                return Err(UringError::Thread(io::Error::other(
                    "io_uring engine thread exited during start-up",
                )))
            }
        }
        Ok(Arc::new(Ring {
            tx,
            wake_fd,
            sleeping,
            #[cfg(test)]
            submitted: AtomicUsize::new(0),
        }))
    }

    fn submit(&self, op: Op) {
        #[cfg(test)]
        self.submitted.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = self.tx.send(op) {
            // The ring thread is gone: fail the op instead of hanging its caller.
            let op = e.into_inner();
            let _ = op
                .tx
                .send(Err(io::Error::other("io_uring engine thread has stopped")));
            return;
        }
        fence(Ordering::SeqCst);
        if self.sleeping.load(Ordering::SeqCst) && self.sleeping.swap(false, Ordering::SeqCst) {
            self.wake();
        }
    }

    fn wake(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our eventfd. A failure (counter full)
        // still leaves the eventfd readable, which is all the wake needs.
        unsafe {
            libc::write(
                self.wake_fd.as_raw_fd(),
                (&one as *const u64).cast(),
                std::mem::size_of::<u64>(),
            );
        }
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // Disconnect first, then wake the thread so it sees the disconnect and exits.
        let (dummy, _) = crossbeam_channel::bounded(0);
        drop(std::mem::replace(&mut self.tx, dummy));
        self.wake();
    }
}

/// A file as the ring sees it.
struct FileShared {
    /// O_DIRECT descriptor, when the file system allows it.
    direct: Option<OwnedFd>,
    /// Buffered descriptor (always open): unaligned ops, fsync, fallocate.
    buffered: OwnedFd,
    /// Required memory alignment for O_DIRECT (power of two).
    dio_mem_align: usize,
    /// Required offset/length alignment for O_DIRECT (power of two).
    dio_off_align: u64,
    /// A regular file on a memory-backed file system (tmpfs, ramfs): ops up to [`INLINE_MAX`]
    /// run as plain system calls on the calling thread (see [`memory_backed`]).
    inline: bool,
}

impl FileShared {
    fn fd_for(&self, offset: u64, ptr: usize, len: usize) -> RawFd {
        self.fd_for_vec(offset, &[(ptr, len)])
    }

    /// O_DIRECT when the offset and every piece meet its alignment, else buffered.
    fn fd_for_vec(&self, offset: u64, pieces: &[(usize, usize)]) -> RawFd {
        match &self.direct {
            Some(fd)
                if offset.is_multiple_of(self.dio_off_align)
                    && pieces.iter().all(|&(ptr, len)| {
                        (len as u64).is_multiple_of(self.dio_off_align)
                            && ptr.is_multiple_of(self.dio_mem_align)
                    }) =>
            {
                fd.as_raw_fd()
            }
            _ => self.buffered.as_raw_fd(),
        }
    }
}

enum OpKind {
    Read {
        buf: Buf,
    },
    Write {
        data: SharedBuf,
        fua: bool,
    },
    /// Consecutive bytes into several buffers (`iov` is rebuilt before each submission).
    ReadV {
        bufs: Vec<Buf>,
        iov: IoVecs,
    },
    WriteV {
        data: Vec<SharedBuf>,
        fua: bool,
        iov: IoVecs,
    },
    Fsync,
    Fallocate {
        mode: i32,
        len: u64,
    },
}

enum Done {
    Read(Buf),
    ReadV(Vec<Buf>),
    Unit,
}

/// The iovec array of a vectored op; its pointers point into the op's own buffers.
struct IoVecs(Vec<libc::iovec>);

// SAFETY: the pointers refer to buffers owned by the same op, which moves with it; nothing
// else reads or writes through them while the op is in flight.
unsafe impl Send for IoVecs {}

/// Most buffers in one vectored op (Linux's IOV_MAX).
const IOV_MAX: usize = 1024;

impl IoVecs {
    /// Fills the array with `(ptr, len)` pieces, skipping the first `skip` bytes.
    fn rebuild(&mut self, pieces: impl Iterator<Item = (usize, usize)>, mut skip: usize) {
        self.0.clear();
        for (ptr, len) in pieces {
            if skip >= len {
                skip -= len;
                continue;
            }
            self.0.push(libc::iovec {
                iov_base: (ptr + skip) as *mut libc::c_void,
                iov_len: len - skip,
            });
            skip = 0;
        }
    }
}

/// One operation and how far it got, whoever runs it (the ring thread or, on a memory-backed
/// file system, the caller).
struct Job {
    file: Arc<FileShared>,
    offset: u64,
    kind: OpKind,
    /// Bytes already transferred (short reads/writes are resubmitted for the rest).
    done: usize,
    /// Set after O_DIRECT refused this op with EINVAL (or for a synchronous op): use the
    /// buffered descriptor.
    force_buffered: bool,
}

/// What a completion leaves of a job.
enum Next {
    /// Not finished (short transfer, EAGAIN/EINTR, O_DIRECT refused): run it again.
    Again(Job),
    Finished(io::Result<Done>),
}

/// An op queued on (or in flight in) a ring: the job and whom to tell.
struct Op {
    job: Job,
    tx: oneshot::Sender<io::Result<Done>>,
}

/// The descriptor for a vectored op at `offset` over `iov`.
fn vec_fd(file: &FileShared, force_buffered: bool, offset: u64, iov: &[libc::iovec]) -> RawFd {
    match &file.direct {
        Some(fd)
            if !force_buffered
                && offset.is_multiple_of(file.dio_off_align)
                && iov.iter().all(|v| {
                    (v.iov_len as u64).is_multiple_of(file.dio_off_align)
                        && (v.iov_base as usize).is_multiple_of(file.dio_mem_align)
                }) =>
        {
            fd.as_raw_fd()
        }
        _ => file.buffered.as_raw_fd(),
    }
}

/// `-errno` of the last failed libc call, io_uring style.
fn neg_errno() -> i32 {
    -io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

impl Job {
    fn new(file: Arc<FileShared>, offset: u64, kind: OpKind) -> Job {
        Job {
            file,
            offset,
            kind,
            done: 0,
            force_buffered: false,
        }
    }

    fn entry(&mut self, token: u64) -> io_uring::squeue::Entry {
        let off = self.offset + self.done as u64;
        let e = match &mut self.kind {
            OpKind::Read { buf } => {
                let len = (buf.len() - self.done).min(MAX_RW);
                // SAFETY: `done < buf.len()`, so the pointer stays inside the buffer.
                let ptr = unsafe { buf.as_mut_ptr().add(self.done) };
                let fd = if self.force_buffered {
                    self.file.buffered.as_raw_fd()
                } else {
                    self.file.fd_for(off, ptr as usize, len)
                };
                opcode::Read::new(types::Fd(fd), ptr, len as u32)
                    .offset(off)
                    .build()
            }
            OpKind::Write { data, fua } => {
                let len = (data.len() - self.done).min(MAX_RW);
                // SAFETY: `done < data.len()`.
                let ptr = unsafe { data.as_ptr().add(self.done) };
                let fd = if self.force_buffered {
                    self.file.buffered.as_raw_fd()
                } else {
                    self.file.fd_for(off, ptr as usize, len)
                };
                let flags = if *fua { libc::RWF_DSYNC } else { 0 };
                opcode::Write::new(types::Fd(fd), ptr, len as u32)
                    .offset(off)
                    .rw_flags(flags)
                    .build()
            }
            OpKind::ReadV { bufs, iov } => {
                let pieces = bufs.iter_mut().map(|b| (b.as_mut_ptr() as usize, b.len()));
                iov.rebuild(pieces, self.done);
                let fd = vec_fd(&self.file, self.force_buffered, off, &iov.0);
                opcode::Readv::new(types::Fd(fd), iov.0.as_ptr(), iov.0.len() as u32)
                    .offset(off)
                    .build()
            }
            OpKind::WriteV { data, fua, iov } => {
                iov.rebuild(
                    data.iter().map(|d| (d.as_ptr() as usize, d.len())),
                    self.done,
                );
                let fd = vec_fd(&self.file, self.force_buffered, off, &iov.0);
                let flags = if *fua { libc::RWF_DSYNC } else { 0 };
                opcode::Writev::new(types::Fd(fd), iov.0.as_ptr(), iov.0.len() as u32)
                    .offset(off)
                    .rw_flags(flags)
                    .build()
            }
            OpKind::Fsync => opcode::Fsync::new(types::Fd(self.file.buffered.as_raw_fd()))
                .flags(types::FsyncFlags::DATASYNC)
                .build(),
            OpKind::Fallocate { mode, len } => {
                opcode::Fallocate::new(types::Fd(self.file.buffered.as_raw_fd()), *len)
                    .offset(off)
                    .mode(*mode)
                    .build()
            }
        };
        e.user_data(token)
    }

    /// Performs the next step of the job with a plain system call on the buffered descriptor
    /// (the same thing an io-wq worker would do for it) and returns what io_uring would have
    /// reported: bytes moved or `-errno`. The buffers are only borrowed for the call.
    fn syscall(&mut self) -> i32 {
        let off = (self.offset + self.done as u64) as libc::off_t;
        let fd = self.file.buffered.as_raw_fd();
        let r: isize = match &mut self.kind {
            OpKind::Read { buf } => {
                let len = (buf.len() - self.done).min(MAX_RW);
                // SAFETY: `done < buf.len()`; pread writes at most `len` bytes into the buffer,
                // which we borrow mutably for the duration of the call.
                unsafe { libc::pread(fd, buf.as_mut_ptr().add(self.done).cast(), len, off) }
            }
            OpKind::Write { data, fua } => {
                let len = (data.len() - self.done).min(MAX_RW);
                let iov = libc::iovec {
                    // SAFETY: `done < data.len()`; the kernel only reads through it.
                    iov_base: unsafe { data.as_ptr().add(self.done) } as *mut libc::c_void,
                    iov_len: len,
                };
                let flags = if *fua { libc::RWF_DSYNC } else { 0 };
                // SAFETY: one valid iovec over `len` live bytes of `data`, read during the call.
                unsafe { libc::pwritev2(fd, &iov, 1, off, flags) }
            }
            OpKind::ReadV { bufs, iov } => {
                let pieces = bufs.iter_mut().map(|b| (b.as_mut_ptr() as usize, b.len()));
                iov.rebuild(pieces, self.done);
                // SAFETY: the iovecs point into `bufs`, borrowed mutably for the call; their
                // count is at most IOV_MAX.
                unsafe { libc::preadv(fd, iov.0.as_ptr(), iov.0.len() as i32, off) }
            }
            OpKind::WriteV { data, fua, iov } => {
                iov.rebuild(
                    data.iter().map(|d| (d.as_ptr() as usize, d.len())),
                    self.done,
                );
                let flags = if *fua { libc::RWF_DSYNC } else { 0 };
                // SAFETY: the iovecs point into `data`, alive for the call; at most IOV_MAX.
                unsafe { libc::pwritev2(fd, iov.0.as_ptr(), iov.0.len() as i32, off, flags) }
            }
            // SAFETY: plain system calls on a descriptor we own; no memory is passed.
            OpKind::Fsync => unsafe { libc::fdatasync(fd) as isize },
            OpKind::Fallocate { mode, len } => {
                // SAFETY: as above.
                unsafe { libc::fallocate(fd, *mode, off, *len as libc::off_t) as isize }
            }
        };
        if r < 0 {
            neg_errno()
        } else {
            // At most MAX_RW bytes per call, so it fits.
            r as i32
        }
    }

    /// Runs the whole job on the calling thread with plain system calls.
    fn run_sync(mut self) -> io::Result<Done> {
        self.force_buffered = true;
        loop {
            let res = self.syscall();
            match self.complete(res) {
                Next::Again(job) => self = job,
                Next::Finished(r) => return r,
            }
        }
    }

    fn total(&self) -> usize {
        match &self.kind {
            OpKind::Read { buf } => buf.len(),
            OpKind::Write { data, .. } => data.len(),
            OpKind::ReadV { bufs, .. } => bufs.iter().map(|b| b.len()).sum(),
            OpKind::WriteV { data, .. } => data.iter().map(|d| d.len()).sum(),
            _ => 0,
        }
    }

    /// Applies a completion (bytes moved or `-errno`).
    fn complete(mut self, res: i32) -> Next {
        if res < 0 {
            let errno = -res;
            if errno == libc::EAGAIN || errno == libc::EINTR {
                return Next::Again(self);
            }
            let rw = self.total() > 0;
            if errno == libc::EINVAL && rw && !self.force_buffered && self.file.direct.is_some() {
                tracing::debug!(
                    offset = self.offset,
                    "O_DIRECT refused an op; retrying it buffered"
                );
                self.force_buffered = true;
                return Next::Again(self);
            }
            return Next::Finished(Err(io::Error::from_raw_os_error(errno)));
        }
        let total = self.total();
        if total > 0 {
            if res == 0 {
                let kind = match self.kind {
                    OpKind::Read { .. } | OpKind::ReadV { .. } => io::ErrorKind::UnexpectedEof,
                    _ => io::ErrorKind::WriteZero,
                };
                return Next::Finished(Err(io::Error::new(
                    kind,
                    format!("transfer stopped after {} of {total} bytes", self.done),
                )));
            }
            self.done += res as usize;
            if self.done < total {
                return Next::Again(self);
            }
        }
        let done = match self.kind {
            OpKind::Read { buf } => Done::Read(buf),
            OpKind::ReadV { bufs, .. } => Done::ReadV(bufs),
            // Release our view of the written bytes before waking the caller, so it gets
            // its buffer back without a copy.
            other => {
                drop(other);
                Done::Unit
            }
        };
        Next::Finished(Ok(done))
    }
}

/// The state one ring thread drives.
struct RingThread {
    ring: IoUring,
    rx: Receiver<Op>,
    wake_fd: OwnedFd,
    sleeping: Arc<AtomicBool>,
    /// In-flight ops by slot; user_data is the slot index.
    slots: Vec<Option<Op>>,
    free: Vec<usize>,
    in_flight: usize,
    /// Ops received but not yet in the submission queue.
    backlog: VecDeque<Op>,
    /// Target of the armed eventfd read.
    wake_buf: Box<u64>,
    wake_armed: bool,
    /// Scratch space for completions being reaped.
    reaped: Vec<(u64, i32)>,
}

impl RingThread {
    fn new(ring: IoUring, rx: Receiver<Op>, wake_fd: OwnedFd, sleeping: Arc<AtomicBool>) -> Self {
        RingThread {
            ring,
            rx,
            wake_fd,
            sleeping,
            slots: Vec::new(),
            free: Vec::new(),
            in_flight: 0,
            backlog: VecDeque::new(),
            wake_buf: Box::new(0),
            wake_armed: false,
            reaped: Vec::new(),
        }
    }

    fn push(&mut self, entry: &io_uring::squeue::Entry) {
        loop {
            // SAFETY: every entry points at memory owned by an in-flight slot (or at
            // `wake_buf`), which stays put until its completion is reaped.
            if unsafe { self.ring.submission().push(entry) }.is_ok() {
                return;
            }
            // Queue full: hand what is queued to the kernel and try again.
            if let Err(e) = self.ring.submit() {
                tracing::error!("io_uring submit failed: {e}");
            }
        }
    }

    fn run(mut self) {
        let mut closed = false;
        loop {
            if !self.wake_armed {
                let ptr = (&mut *self.wake_buf as *mut u64).cast::<u8>();
                let e = opcode::Read::new(types::Fd(self.wake_fd.as_raw_fd()), ptr, 8)
                    .build()
                    .user_data(WAKE_TOKEN);
                self.push(&e);
                self.wake_armed = true;
            }
            while !closed && self.backlog.len() < MAX_IN_FLIGHT {
                match self.rx.try_recv() {
                    Ok(op) => self.backlog.push_back(op),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => closed = true,
                }
            }
            while self.in_flight < MAX_IN_FLIGHT {
                let Some(op) = self.backlog.pop_front() else {
                    break;
                };
                self.start(op);
            }
            if closed && self.in_flight == 0 && self.backlog.is_empty() {
                // The eventfd read may still be armed when the ring is torn down: leave its
                // target allocated rather than risk the kernel writing into freed memory.
                Box::leak(std::mem::replace(&mut self.wake_buf, Box::new(0)));
                return;
            }
            let mut want = 1;
            if self.backlog.is_empty() && !closed {
                self.sleeping.store(true, Ordering::SeqCst);
                fence(Ordering::SeqCst);
                if !self.rx.is_empty() {
                    self.sleeping.store(false, Ordering::SeqCst);
                    want = 0;
                }
            }
            match self.ring.submit_and_wait(want) {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {}
                Err(e) => tracing::error!("io_uring_enter failed: {e}"),
            }
            self.sleeping.store(false, Ordering::SeqCst);
            self.reap();
        }
    }

    fn start(&mut self, mut op: Op) {
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.slots.push(None);
                self.slots.len() - 1
            }
        };
        let e = op.job.entry(slot as u64);
        self.slots[slot] = Some(op);
        self.in_flight += 1;
        self.push(&e);
    }

    fn reap(&mut self) {
        // Copy the completions out first (completing an op may push to the submission queue);
        // the scratch vector is reused, so reaping allocates nothing.
        let mut done = std::mem::take(&mut self.reaped);
        done.extend(self.ring.completion().map(|c| (c.user_data(), c.result())));
        for &(token, res) in &done {
            if token == WAKE_TOKEN {
                self.wake_armed = false;
                continue;
            }
            let slot = token as usize;
            let Some(op) = self.slots.get_mut(slot).and_then(Option::take) else {
                tracing::error!("io_uring completion for unknown slot {slot}");
                continue;
            };
            self.in_flight -= 1;
            self.free.push(slot);
            let Op { job, tx } = op;
            match job.complete(res) {
                Next::Again(job) => self.backlog.push_front(Op { job, tx }),
                Next::Finished(r) => {
                    let _ = tx.send(r);
                }
            }
        }
        done.clear();
        self.reaped = done;
    }
}

/// Whether to use O_DIRECT.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DirectIo {
    /// O_DIRECT where the file system allows it, buffered (with a warning) where not.
    #[default]
    Auto,
    /// Always buffered (page cache).
    Off,
    /// O_DIRECT or fail to open.
    Required,
}

/// How to open a file member.
#[derive(Clone, Default)]
pub struct FileOptions {
    pub direct: DirectIo,
    /// Engine to run on; the process-wide one when `None`.
    pub engine: Option<Arc<Engine>>,
}

// Bits of `UringFile::unsupported`.
const NO_PUNCH: u8 = 1;
const NO_ZERO_RANGE: u8 = 2;

/// A file or block device member driven through io_uring.
pub struct UringFile {
    name: String,
    len: u64,
    is_block: bool,
    shared: Arc<FileShared>,
    ring: Arc<Ring>,
    /// fallocate modes the file system refused (`NO_*` bits), so we stop asking.
    unsupported: AtomicU8,
    /// One fdatasync at a time, shared by the callers waiting for it; a write-back error
    /// fails every later flush (the kernel reports it to one fsync only).
    flushes: FlushGate,
    counters: MemberCounters,
    #[cfg(test)]
    zero_in_flight: ZeroInFlight,
    /// Keeps the engine (and so the ring threads) alive as long as the member.
    _engine: Arc<Engine>,
}

const BLKGETSIZE64: libc::c_ulong = 0x8008_1272;

impl UringFile {
    /// Opens `path`, creating a sparse file of `size` bytes when it is missing (or empty).
    /// An existing file or device must hold at least `size` bytes; the member uses `size`.
    pub fn open_or_create(path: impl AsRef<Path>, size: u64) -> Result<UringFile, UringError> {
        UringFile::open_with(path, Some(size), FileOptions::default())
    }

    /// Opens an existing file or device and uses all of it.
    pub fn open(path: impl AsRef<Path>) -> Result<UringFile, UringError> {
        UringFile::open_with(path, None, FileOptions::default())
    }

    pub fn open_with(
        path: impl AsRef<Path>,
        size: Option<u64>,
        opts: FileOptions,
    ) -> Result<UringFile, UringError> {
        let path = path.as_ref();
        let open_err = |source| UringError::Open {
            path: path.to_path_buf(),
            source,
        };
        let engine = match opts.engine {
            Some(e) => e,
            None => Engine::global()?,
        };
        // Exclusive before anything else (even the resize below): see `exclusive`.
        let file = exclusive::open_exclusive(path, size.is_some())?;
        let meta = file.metadata().map_err(open_err)?;
        let is_block = meta.file_type().is_block_device();
        let actual = if is_block {
            let mut bytes: u64 = 0;
            // SAFETY: BLKGETSIZE64 writes one u64 through the pointer we pass.
            let r = unsafe { libc::ioctl(file.as_raw_fd(), BLKGETSIZE64, &mut bytes) };
            if r < 0 {
                return Err(open_err(io::Error::last_os_error()));
            }
            bytes
        } else if !meta.is_file() {
            return Err(open_err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a regular file or block device",
            )));
        } else {
            meta.len()
        };
        let len = match size {
            None => actual,
            Some(wanted) if actual == 0 && !is_block => {
                file.set_len(wanted).map_err(open_err)?;
                wanted
            }
            Some(wanted) if actual < wanted => {
                return Err(UringError::WrongSize {
                    path: path.to_path_buf(),
                    actual,
                    wanted,
                })
            }
            Some(wanted) => wanted,
        };
        let inline = !is_block && memory_backed(&file);
        let (direct, mem_align, off_align) = match opts.direct {
            DirectIo::Off => (None, 1, 1),
            mode => match open_direct(path) {
                Ok((fd, mem, off)) => (Some(fd), mem, off),
                Err(reason) if mode == DirectIo::Required => {
                    return Err(UringError::DirectRefused {
                        path: path.to_path_buf(),
                        reason,
                    })
                }
                Err(reason) => {
                    tracing::warn!(
                        "member {}: O_DIRECT not available ({reason}); using buffered I/O through the page cache",
                        path.display()
                    );
                    (None, 1, 1)
                }
            },
        };
        Ok(UringFile {
            name: path.display().to_string(),
            len,
            is_block,
            shared: Arc::new(FileShared {
                direct,
                buffered: OwnedFd::from(file),
                dio_mem_align: mem_align,
                dio_off_align: off_align,
                inline,
            }),
            ring: engine.pick(),
            unsupported: AtomicU8::new(0),
            flushes: FlushGate::new(),
            counters: MemberCounters::default(),
            #[cfg(test)]
            zero_in_flight: ZeroInFlight::default(),
            _engine: engine,
        })
    }

    /// Whether aligned ops bypass the page cache.
    pub fn is_direct(&self) -> bool {
        self.shared.direct.is_some()
    }

    pub fn is_block_device(&self) -> bool {
        self.is_block
    }

    async fn run(&self, offset: u64, kind: OpKind) -> io::Result<Done> {
        let job = Job::new(self.shared.clone(), offset, kind);
        if self.shared.inline && job.total() <= INLINE_MAX {
            return job.run_sync();
        }
        let (tx, rx) = oneshot::channel();
        self.ring.submit(Op { job, tx });
        match rx.await {
            Ok(r) => r,
            Err(_) => Err(io::Error::other("io_uring engine dropped the operation")),
        }
    }

    async fn fallocate(&self, offset: u64, len: u64, mode: i32) -> io::Result<()> {
        self.run(offset, OpKind::Fallocate { mode, len })
            .await
            .map(|_| ())
    }

    /// Zeroes a range the best way the file system offers, in `order` of preference.
    async fn zero_range(&self, offset: u64, len: u64, punch_first: bool) -> io::Result<()> {
        let punch = (
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            NO_PUNCH,
        );
        let zero = (
            libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE,
            NO_ZERO_RANGE,
        );
        let order = if punch_first {
            [punch, zero]
        } else {
            [zero, punch]
        };
        for (mode, bit) in order {
            if self.unsupported.load(Ordering::Relaxed) & bit != 0 {
                continue;
            }
            match self.fallocate(offset, len, mode).await {
                Ok(()) => return Ok(()),
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EOPNOTSUPP) | Some(libc::EINVAL) | Some(libc::ENODEV)
                    ) =>
                {
                    self.unsupported.fetch_or(bit, Ordering::Relaxed);
                }
                Err(e) => return Err(e),
            }
        }
        self.write_zero_bytes(offset, len).await
    }

    /// Zeroes a range by writing zeroes, for file systems without fallocate modes that zero:
    /// pieces of at most [`ZERO_CHUNK`] from the one process-wide zero buffer, at most
    /// [`ZERO_IN_FLIGHT`] at a time, so a range of any size costs the same memory. Pieces end
    /// on multiples of `ZERO_CHUNK`, so all but the first and last can go O_DIRECT.
    async fn write_zero_bytes(&self, offset: u64, len: u64) -> io::Result<()> {
        let zeros = zero_buf();
        let end = offset + len;
        let mut at = offset;
        let pieces = std::iter::from_fn(move || {
            (at < end).then(|| {
                let n = (ZERO_CHUNK as u64 - at % ZERO_CHUNK as u64).min(end - at);
                at += n;
                (at - n, n as usize)
            })
        });
        futures::stream::iter(pieces)
            .map(|(at, n)| async move {
                #[cfg(test)]
                let _count = ZeroInFlight::enter(&self.zero_in_flight);
                let data = zeros.slice(0..n);
                self.run(at, OpKind::Write { data, fua: false }).await
            })
            .buffer_unordered(ZERO_IN_FLIGHT)
            .try_for_each(|_| futures::future::ready(Ok(())))
            .await
    }

    fn err(&self, op: MemberOp, offset: u64, len: u64, e: io::Error) -> MemberError {
        MemberError::new(&self.name, op, offset, len, e)
    }

    /// A write's error. A FUA write syncs, and its sync consumes the file's write-back error
    /// report just as a flush would (it may even be another write's error): so it fails every
    /// later flush too.
    fn write_err(&self, offset: u64, len: u64, fua: bool, e: io::Error) -> MemberError {
        if fua {
            self.flushes.poison(format!(
                "a FUA write of {len} bytes at offset {offset} failed: {e}"
            ));
        }
        self.err(MemberOp::Write, offset, len, e)
    }
}

/// Largest piece of a zeroing done by writing zeroes (the size of the shared zero buffer).
const ZERO_CHUNK: usize = 1 << 20;
/// Most such pieces one zeroing keeps in flight.
const ZERO_IN_FLIGHT: usize = 4;

/// [`ZERO_CHUNK`] zero bytes, shared by every member and request (read-only, never freed).
fn zero_buf() -> &'static SharedBuf {
    static ZEROS: OnceLock<SharedBuf> = OnceLock::new();
    ZEROS.get_or_init(|| Buf::zeroed(ZERO_CHUNK).freeze())
}

/// Counts zero-writes in flight and the most at once (tests check the bound).
#[cfg(test)]
#[derive(Default)]
struct ZeroInFlight {
    now: AtomicUsize,
    max: AtomicUsize,
}

#[cfg(test)]
impl ZeroInFlight {
    fn enter(this: &ZeroInFlight) -> impl Drop + '_ {
        let n = this.now.fetch_add(1, Ordering::SeqCst) + 1;
        this.max.fetch_max(n, Ordering::SeqCst);
        struct Leave<'a>(&'a ZeroInFlight);
        impl Drop for Leave<'_> {
            fn drop(&mut self) {
                self.0.now.fetch_sub(1, Ordering::SeqCst);
            }
        }
        Leave(this)
    }
}

/// Whether `file` lives on a memory-backed file system (tmpfs, ramfs).
///
/// Those lack FMODE_NOWAIT, so io_uring can never complete a read or write on them inline: it
/// hands every one to an io-wq kernel worker thread, which copies the bytes and passes the
/// completion back to the ring thread, which wakes the caller: three thread hops and context
/// switches for what is a memory copy (measured: ~5.8 context switches per 4 KiB op). The
/// copy never waits for a device, so the caller does it itself with pread/pwrite instead,
/// exactly the work the io-wq worker would have done, with no hop at all. (A swapped-out
/// tmpfs page makes that call wait for swap-in, as it would make the worker wait.)
///
/// Block devices are excluded by the caller: their nodes sit on devtmpfs, which reports
/// TMPFS_MAGIC too.
fn memory_backed(file: &File) -> bool {
    const TMPFS_MAGIC: u32 = 0x0102_1994;
    const RAMFS_MAGIC: u32 = 0x8584_58f6;
    // SAFETY: `statfs` is plain old data; zeroed is a valid value.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: fstatfs(2) on an open descriptor, writing into `st`.
    if unsafe { libc::fstatfs(file.as_raw_fd(), &mut st) } != 0 {
        return false;
    }
    // f_type's width and sign differ between architectures; the magic is 32 bits.
    let magic = st.f_type as u32;
    magic == TMPFS_MAGIC || magic == RAMFS_MAGIC
}

/// Opens `path` with O_DIRECT and learns its alignment; `Err` says why not.
fn open_direct(path: &Path) -> Result<(OwnedFd, usize, u64), String> {
    let file: File = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_DIRECT | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| e.to_string())?;
    let (mut mem, mut off) = (512usize, 512u64);
    // SAFETY: `statx` is plain old data; zeroed is a valid value.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    let empty = c"";
    // SAFETY: statx(2) on an open fd with AT_EMPTY_PATH and an empty path, writing into `stx`.
    let r = unsafe {
        libc::statx(
            file.as_raw_fd(),
            empty.as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_DIOALIGN,
            &mut stx,
        )
    };
    if r == 0 && stx.stx_mask & libc::STATX_DIOALIGN != 0 {
        if stx.stx_dio_offset_align == 0 {
            return Err("the file system reports no direct I/O support".into());
        }
        mem = stx.stx_dio_mem_align.max(1) as usize;
        off = u64::from(stx.stx_dio_offset_align);
    }
    Ok((OwnedFd::from(file), mem, off))
}

impl Member for UringFile {
    fn name(&self) -> &str {
        &self.name
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn read(&self, offset: u64, buf: Buf) -> BoxFuture<'_, MemberResult<Buf>> {
        async move {
            let len = buf.len() as u64;
            let g = self.counters.start(MemberOp::Read, len);
            let r = match check_range(&self.name, MemberOp::Read, offset, len, self.len) {
                Err(e) => Err(e),
                Ok(()) => match self.run(offset, OpKind::Read { buf }).await {
                    Ok(Done::Read(b)) => Ok(b),
                    Ok(_) => unreachable!("a read completes with its buffer"),
                    Err(e) => Err(self.err(MemberOp::Read, offset, len, e)),
                },
            };
            g.finish(r)
        }
        .boxed()
    }

    fn write(&self, offset: u64, data: SharedBuf, fua: bool) -> BoxFuture<'_, MemberResult<()>> {
        async move {
            let len = data.len() as u64;
            let g = self.counters.start(MemberOp::Write, len);
            let r = match check_range(&self.name, MemberOp::Write, offset, len, self.len) {
                Err(e) => Err(e),
                Ok(()) => self
                    .run(offset, OpKind::Write { data, fua })
                    .await
                    .map(|_| ())
                    .map_err(|e| self.write_err(offset, len, fua, e)),
            };
            g.finish(r)
        }
        .boxed()
    }

    fn flush(&self) -> BoxFuture<'_, MemberResult<()>> {
        async move {
            let g = self.counters.start(MemberOp::Flush, 0);
            let fsync = || async {
                self.run(0, OpKind::Fsync)
                    .await
                    .map(|_| ())
                    .map_err(|e| self.err(MemberOp::Flush, 0, 0, e))
            };
            g.finish(self.flushes.flush(&self.name, fsync).await)
        }
        .boxed()
    }

    fn trim(&self, offset: u64, len: u64) -> BoxFuture<'_, MemberResult<()>> {
        async move {
            let g = self.counters.start(MemberOp::Trim, len);
            let r = match check_range(&self.name, MemberOp::Trim, offset, len, self.len) {
                Err(e) => Err(e),
                Ok(()) => self
                    .zero_range(offset, len, true)
                    .await
                    .map_err(|e| self.err(MemberOp::Trim, offset, len, e)),
            };
            g.finish(r)
        }
        .boxed()
    }

    fn write_zeroes(&self, offset: u64, len: u64) -> BoxFuture<'_, MemberResult<()>> {
        async move {
            let g = self.counters.start(MemberOp::WriteZeroes, len);
            let r = match check_range(&self.name, MemberOp::WriteZeroes, offset, len, self.len) {
                Err(e) => Err(e),
                Ok(()) => self
                    .zero_range(offset, len, false)
                    .await
                    .map_err(|e| self.err(MemberOp::WriteZeroes, offset, len, e)),
            };
            g.finish(r)
        }
        .boxed()
    }

    fn counters(&self) -> &MemberCounters {
        &self.counters
    }

    fn read_vectored(&self, offset: u64, bufs: Vec<Buf>) -> BoxFuture<'_, MemberResult<Vec<Buf>>> {
        async move {
            let len: u64 = bufs.iter().map(|b| b.len() as u64).sum();
            if bufs.len() > IOV_MAX || bufs.iter().any(Buf::is_empty) {
                return futures::future::try_join_all(bufs.into_iter().scan(offset, |at, b| {
                    let o = *at;
                    *at += b.len() as u64;
                    Some(self.read(o, b))
                }))
                .await;
            }
            let g = self.counters.start(MemberOp::Read, len);
            let r = match check_range(&self.name, MemberOp::Read, offset, len, self.len) {
                Err(e) => Err(e),
                Ok(()) => {
                    let iov = IoVecs(Vec::with_capacity(bufs.len()));
                    match self.run(offset, OpKind::ReadV { bufs, iov }).await {
                        Ok(Done::ReadV(b)) => Ok(b),
                        Ok(_) => unreachable!("a vectored read completes with its buffers"),
                        Err(e) => Err(self.err(MemberOp::Read, offset, len, e)),
                    }
                }
            };
            g.finish(r)
        }
        .boxed()
    }

    fn write_vectored(
        &self,
        offset: u64,
        data: Vec<SharedBuf>,
        fua: bool,
    ) -> BoxFuture<'_, MemberResult<()>> {
        async move {
            let len: u64 = data.iter().map(|d| d.len() as u64).sum();
            if data.len() > IOV_MAX || data.iter().any(SharedBuf::is_empty) {
                let mut at = offset;
                for d in data {
                    let n = d.len() as u64;
                    self.write(at, d, fua).await?;
                    at += n;
                }
                return Ok(());
            }
            let g = self.counters.start(MemberOp::Write, len);
            let r = match check_range(&self.name, MemberOp::Write, offset, len, self.len) {
                Err(e) => Err(e),
                Ok(()) => {
                    let iov = IoVecs(Vec::with_capacity(data.len()));
                    self.run(offset, OpKind::WriteV { data, fua, iov })
                        .await
                        .map(|_| ())
                        .map_err(|e| self.write_err(offset, len, fua, e))
                }
            };
            g.finish(r)
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::executor::block_on;

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
        assert!(got[1 << 20..] == data[..]);
    }
}
