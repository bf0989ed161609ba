//! An operation's life: a [`Job`] is one read, write, sync or fallocate and how far it got.
//! It becomes a submission entry for the ring thread ([`Job::entry`]) or runs as plain system
//! calls on a memory-backed file ([`Job::run_sync`]); either way [`Job::complete`] applies
//! what the kernel reported: the rest of a short transfer goes again, EAGAIN/EINTR go again,
//! an O_DIRECT refusal (EINVAL) goes again buffered, and anything else finishes the job.

use crate::buf::{Buf, SharedBuf};
use futures::channel::oneshot;
use io_uring::{opcode, types};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;

/// Largest single read/write handed to the kernel (a request longer is resubmitted in parts).
const MAX_RW: usize = 1 << 30;

/// A file as the ring sees it.
pub(super) struct FileShared {
    /// O_DIRECT descriptor, when the file system allows it.
    pub(super) direct: Option<OwnedFd>,
    /// Buffered descriptor (always open): unaligned ops, fsync, fallocate.
    pub(super) buffered: OwnedFd,
    /// Required memory alignment for O_DIRECT (power of two).
    pub(super) dio_mem_align: usize,
    /// Required offset/length alignment for O_DIRECT (power of two).
    pub(super) dio_off_align: u64,
    /// A regular file on a memory-backed file system (tmpfs, ramfs): ops up to `INLINE_MAX`
    /// run as plain system calls on the calling thread (see `file::memory_backed`).
    pub(super) inline: bool,
}

impl FileShared {
    /// The one descriptor chooser: O_DIRECT when the job has not been forced buffered and the
    /// offset and every `(address, length)` piece meet its alignment, else buffered.
    fn fd(
        &self,
        force_buffered: bool,
        offset: u64,
        mut pieces: impl Iterator<Item = (usize, usize)>,
    ) -> RawFd {
        match &self.direct {
            Some(fd)
                if !force_buffered
                    && offset.is_multiple_of(self.dio_off_align)
                    && pieces.all(|(ptr, len)| {
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

pub(super) enum OpKind {
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

pub(super) enum Done {
    Read(Buf),
    ReadV(Vec<Buf>),
    Unit,
}

impl Done {
    /// A read's buffer back.
    pub(super) fn into_buf(self) -> Buf {
        match self {
            Done::Read(b) => b,
            _ => unreachable!("a read completes with its buffer"),
        }
    }

    /// A vectored read's buffers back.
    pub(super) fn into_bufs(self) -> Vec<Buf> {
        match self {
            Done::ReadV(b) => b,
            _ => unreachable!("a vectored read completes with its buffers"),
        }
    }
}

/// The iovec array of a vectored op; its pointers point into the op's own buffers.
pub(super) struct IoVecs(Vec<libc::iovec>);

// SAFETY: the pointers refer to buffers owned by the same op, which moves with it; nothing
// else reads or writes through them while the op is in flight.
unsafe impl Send for IoVecs {}

/// Most buffers in one vectored op (Linux's IOV_MAX).
pub(super) const IOV_MAX: usize = 1024;

impl IoVecs {
    /// Room for `n` buffers.
    pub(super) fn with_capacity(n: usize) -> IoVecs {
        IoVecs(Vec::with_capacity(n))
    }

    /// The `(address, length)` pieces, for the descriptor chooser.
    fn pieces(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.0.iter().map(|v| (v.iov_base as usize, v.iov_len))
    }

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
pub(super) struct Job {
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
pub(super) enum Next {
    /// Not finished (short transfer, EAGAIN/EINTR, O_DIRECT refused): run it again.
    Again(Job),
    Finished(io::Result<Done>),
}

/// An op queued on (or in flight in) a ring: the job and whom to tell.
pub(super) struct Op {
    pub(super) job: Job,
    pub(super) tx: oneshot::Sender<io::Result<Done>>,
}

/// `-errno` of the last failed libc call, io_uring style.
fn neg_errno() -> i32 {
    -io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}
impl Job {
    pub(super) fn new(file: Arc<FileShared>, offset: u64, kind: OpKind) -> Job {
        Job {
            file,
            offset,
            kind,
            done: 0,
            force_buffered: false,
        }
    }

    pub(super) fn entry(&mut self, token: u64) -> io_uring::squeue::Entry {
        let off = self.offset + self.done as u64;
        let e = match &mut self.kind {
            OpKind::Read { buf } => {
                let len = (buf.len() - self.done).min(MAX_RW);
                // SAFETY: `done < buf.len()`, so the pointer stays inside the buffer.
                let ptr = unsafe { buf.as_mut_ptr().add(self.done) };
                let fd = self
                    .file
                    .fd(self.force_buffered, off, [(ptr as usize, len)].into_iter());
                opcode::Read::new(types::Fd(fd), ptr, len as u32)
                    .offset(off)
                    .build()
            }
            OpKind::Write { data, fua } => {
                let len = (data.len() - self.done).min(MAX_RW);
                // SAFETY: `done < data.len()`.
                let ptr = unsafe { data.as_ptr().add(self.done) };
                let fd = self
                    .file
                    .fd(self.force_buffered, off, [(ptr as usize, len)].into_iter());
                let flags = if *fua { libc::RWF_DSYNC } else { 0 };
                opcode::Write::new(types::Fd(fd), ptr, len as u32)
                    .offset(off)
                    .rw_flags(flags)
                    .build()
            }
            OpKind::ReadV { bufs, iov } => {
                let pieces = bufs.iter_mut().map(|b| (b.as_mut_ptr() as usize, b.len()));
                iov.rebuild(pieces, self.done);
                let fd = self.file.fd(self.force_buffered, off, iov.pieces());
                opcode::Readv::new(types::Fd(fd), iov.0.as_ptr(), iov.0.len() as u32)
                    .offset(off)
                    .build()
            }
            OpKind::WriteV { data, fua, iov } => {
                iov.rebuild(
                    data.iter().map(|d| (d.as_ptr() as usize, d.len())),
                    self.done,
                );
                let fd = self.file.fd(self.force_buffered, off, iov.pieces());
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
    pub(super) fn run_sync(mut self) -> io::Result<Done> {
        self.force_buffered = true;
        loop {
            let res = self.syscall();
            match self.complete(res) {
                Next::Again(job) => self = job,
                Next::Finished(r) => return r,
            }
        }
    }

    pub(super) fn total(&self) -> usize {
        match &self.kind {
            OpKind::Read { buf } => buf.len(),
            OpKind::Write { data, .. } => data.len(),
            OpKind::ReadV { bufs, .. } => bufs.iter().map(|b| b.len()).sum(),
            OpKind::WriteV { data, .. } => data.iter().map(|d| d.len()).sum(),
            _ => 0,
        }
    }

    /// Applies a completion (bytes moved or `-errno`).
    pub(super) fn complete(mut self, res: i32) -> Next {
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
