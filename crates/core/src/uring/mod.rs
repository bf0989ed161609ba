//! # Files and block devices through io_uring, on dedicated engine threads
//!
//! An [`Engine`] owns a few rings, each driven by one thread. Callers push operations on a
//! channel and await a oneshot; the ring thread moves everything queued into the submission
//! queue and submits it with one `io_uring_enter` per loop turn (batching), reaps completions
//! and completes the futures. A sleeping ring thread waits in the kernel on both its
//! completions and an eventfd that submitters poke only when it sleeps, so a busy ring costs
//! no extra syscalls per op. Buffers are owned by the in-flight slot until their completion
//! arrives, so the kernel never sees memory that moved or was freed.
//!
//! A thread that runs its future through [`block_on`] (`nbraid bench`'s real-member targets)
//! or installs a [`DrivenRing`] for its event loop (the daemon's I/O workers) drives a ring of
//! its own instead: the ops started on it are submitted and reaped by that thread, as fio
//! does, with no ring thread between it and the kernel (see `caller`). Everything else (the
//! daemon's control tasks, rebuilds and scrubs, the flusher) uses the ring threads.
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
//! Flushes go through a [`FlushGate`](crate::FlushGate): one `fdatasync` at a time, shared by
//! the callers that wait for it, and after a write-back error every later flush fails.
//!
//! A member is opened exclusively (an advisory lock, plus `O_EXCL` on block devices; see
//! [`crate::exclusive`]): open each member once per process and share the [`UringFile`].
//!
//! The module is split by concern: `ring` (the [`Engine`] and its ring threads), `caller`
//! (a thread's own ring, driven by [`block_on`] or by the thread's loop through
//! [`DrivenRing`]), `eventfd` (the wake-up descriptors), `op` (an operation's life:
//! descriptor choice, submission entry or system call, completion and retry; one descriptor
//! chooser) and `file` (the [`UringFile`] member; one sequence —
//! count, check the range, run, name the error, finish — for every ranged op). A submission
//! the kernel keeps refusing fails its op after a bounded number of attempts, naming why.

mod bus_guard;
mod caller;
mod eventfd;
pub mod exclusive;
mod file;
mod op;
mod ring;
#[cfg(test)]
mod tests;
mod window_maps;

pub use caller::{block_on, DrivenRing};
pub use file::{DirectIo, FileOptions, UringFile};
pub use ring::Engine;

use std::io;
use std::path::PathBuf;
use thiserror::Error;

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
