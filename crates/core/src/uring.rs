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
//! Files are opened with O_DIRECT where the file system allows it (alignment from `statx`
//! `STATX_DIOALIGN`); an op that does not meet the alignment goes through a second, buffered
//! descriptor. Where O_DIRECT is refused (older tmpfs, some FUSE) the member runs buffered and
//! says so in a warning. Flush is `fdatasync` (`IORING_OP_FSYNC` + DATASYNC), FUA is
//! `RWF_DSYNC` on the write, trim is `fallocate(PUNCH_HOLE | KEEP_SIZE)` — on a block device
//! the kernel turns that into a discard that is guaranteed to read back as zeroes, so mirror
//! copies stay identical after a trim (a plain BLKDISCARD leaves contents undefined).

use crate::buf::{Buf, SharedBuf};
use crate::member::{check_range, Member, MemberCounters, MemberError, MemberOp, MemberResult};
use crossbeam_channel::{Receiver, Sender, TryRecvError};
use futures::channel::oneshot;
use futures::future::BoxFuture;
use futures::FutureExt;
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
        }))
    }

    fn submit(&self, op: Op) {
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

struct Op {
    file: Arc<FileShared>,
    offset: u64,
    kind: OpKind,
    /// Bytes already transferred (short reads/writes are resubmitted for the rest).
    done: usize,
    /// Set after O_DIRECT refused this op with EINVAL: retry it buffered.
    force_buffered: bool,
    tx: oneshot::Sender<io::Result<Done>>,
}

/// The descriptor for a vectored op at `offset` over `iov`.
fn vec_fd(file: &FileShared, force_buffered: bool, offset: u64, iov: &[libc::iovec]) -> RawFd {
    if force_buffered {
        return file.buffered.as_raw_fd();
    }
    let pieces: Vec<(usize, usize)> = iov
        .iter()
        .map(|v| (v.iov_base as usize, v.iov_len))
        .collect();
    file.fd_for_vec(offset, &pieces)
}

impl Op {
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

    fn total(&self) -> usize {
        match &self.kind {
            OpKind::Read { buf } => buf.len(),
            OpKind::Write { data, .. } => data.len(),
            OpKind::ReadV { bufs, .. } => bufs.iter().map(|b| b.len()).sum(),
            OpKind::WriteV { data, .. } => data.iter().map(|d| d.len()).sum(),
            _ => 0,
        }
    }

    /// Applies a completion: `Some(op)` when the op must be submitted again.
    fn complete(mut self, res: i32) -> Option<Op> {
        if res < 0 {
            let errno = -res;
            if errno == libc::EAGAIN || errno == libc::EINTR {
                return Some(self);
            }
            let rw = self.total() > 0;
            if errno == libc::EINVAL && rw && !self.force_buffered && self.file.direct.is_some() {
                tracing::debug!(
                    offset = self.offset,
                    "O_DIRECT refused an op; retrying it buffered"
                );
                self.force_buffered = true;
                return Some(self);
            }
            let _ = self.tx.send(Err(io::Error::from_raw_os_error(errno)));
            return None;
        }
        let total = self.total();
        if total > 0 {
            if res == 0 {
                let kind = match self.kind {
                    OpKind::Read { .. } | OpKind::ReadV { .. } => io::ErrorKind::UnexpectedEof,
                    _ => io::ErrorKind::WriteZero,
                };
                let _ = self.tx.send(Err(io::Error::new(
                    kind,
                    format!("transfer stopped after {} of {total} bytes", self.done),
                )));
                return None;
            }
            self.done += res as usize;
            if self.done < total {
                return Some(self);
            }
        }
        let Op { kind, tx, .. } = self;
        let done = match kind {
            OpKind::Read { buf } => Done::Read(buf),
            OpKind::ReadV { bufs, .. } => Done::ReadV(bufs),
            // Release our view of the written bytes before waking the caller, so it gets
            // its buffer back without a copy.
            other => {
                drop(other);
                Done::Unit
            }
        };
        let _ = tx.send(Ok(done));
        None
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
        let e = op.entry(slot as u64);
        self.slots[slot] = Some(op);
        self.in_flight += 1;
        self.push(&e);
    }

    fn reap(&mut self) {
        let done: Vec<(u64, i32)> = self
            .ring
            .completion()
            .map(|c| (c.user_data(), c.result()))
            .collect();
        for (token, res) in done {
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
            if let Some(again) = op.complete(res) {
                self.backlog.push_front(again);
            }
        }
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
    counters: MemberCounters,
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
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(size.is_some())
            .truncate(false)
            .custom_flags(libc::O_CLOEXEC)
            .open(path)
            .map_err(open_err)?;
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
            }),
            ring: engine.pick(),
            unsupported: AtomicU8::new(0),
            counters: MemberCounters::default(),
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
        let (tx, rx) = oneshot::channel();
        self.ring.submit(Op {
            file: self.shared.clone(),
            offset,
            kind,
            done: 0,
            force_buffered: false,
            tx,
        });
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
        // Neither mode: write zeroes.
        let chunk = (1u64 << 20).min(len) as usize;
        let zeros = Buf::zeroed(chunk).freeze();
        let mut at = 0;
        while at < len {
            let n = (len - at).min(chunk as u64) as usize;
            self.run(
                offset + at,
                OpKind::Write {
                    data: zeros.slice(0..n),
                    fua: false,
                },
            )
            .await?;
            at += n as u64;
        }
        Ok(())
    }

    fn err(&self, op: MemberOp, offset: u64, len: u64, e: io::Error) -> MemberError {
        MemberError::new(&self.name, op, offset, len, e)
    }
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
                    .map_err(|e| self.err(MemberOp::Write, offset, len, e)),
            };
            g.finish(r)
        }
        .boxed()
    }

    fn flush(&self) -> BoxFuture<'_, MemberResult<()>> {
        async move {
            let g = self.counters.start(MemberOp::Flush, 0);
            let r = self
                .run(0, OpKind::Fsync)
                .await
                .map(|_| ())
                .map_err(|e| self.err(MemberOp::Flush, 0, 0, e));
            g.finish(r)
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
                        .map_err(|e| self.err(MemberOp::Write, offset, len, e))
                }
            };
            g.finish(r)
        }
        .boxed()
    }
}
