//! Members: the devices a volume is built from, behind one object-safe trait.
//!
//! Every operation returns a boxed future that completes from wherever the backend completes
//! it (an io_uring engine thread, a timer thread, or at once for memory). No backend blocks
//! the polling thread, so the same futures run under tokio and under
//! `futures::executor::block_on`. Buffers are owned: a read takes a [`Buf`] and hands it back
//! filled; a write takes a [`SharedBuf`] view and holds it until the bytes are written.

use crate::buf::{Buf, SharedBuf};
use futures::future::BoxFuture;
use futures::FutureExt;
use std::fmt;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use thiserror::Error;

/// What a member was asked to do (for errors and fault injection).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemberOp {
    Read,
    Write,
    Flush,
    Trim,
    WriteZeroes,
}

impl fmt::Display for MemberOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MemberOp::Read => "read",
            MemberOp::Write => "write",
            MemberOp::Flush => "flush",
            MemberOp::Trim => "trim",
            MemberOp::WriteZeroes => "write-zeroes",
        })
    }
}

/// A member operation that failed: which member, what, where, and the OS error.
#[derive(Debug, Error)]
#[error("member `{member}`: {op} of {len} bytes at offset {offset} failed: {source}")]
pub struct MemberError {
    pub member: String,
    pub op: MemberOp,
    pub offset: u64,
    pub len: u64,
    #[source]
    pub source: io::Error,
}

impl MemberError {
    pub fn new(member: &str, op: MemberOp, offset: u64, len: u64, source: io::Error) -> Self {
        MemberError {
            member: member.to_string(),
            op,
            offset,
            len,
            source,
        }
    }
}

impl MemberError {
    /// Whether this is a read-only member's refusal ([`ReadOnlyRefusal`]): the volume's
    /// own choice (`read_only = true`), not a fault of the disk.
    pub fn is_read_only_refusal(&self) -> bool {
        (self.source.get_ref()).is_some_and(|e| e.is::<ReadOnlyRefusal>())
    }
}

/// What a member opened read-only answers a write, trim or write-zeroes (`EROFS`): nothing
/// reached the storage. Told apart from a disk gone read-only by its type.
#[derive(Debug)]
pub struct ReadOnlyRefusal;

impl ReadOnlyRefusal {
    pub fn io_error() -> io::Error {
        io::Error::new(io::ErrorKind::ReadOnlyFilesystem, ReadOnlyRefusal)
    }
}

impl fmt::Display for ReadOnlyRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the member is opened read-only (read_only = true): nothing is written")
    }
}

impl std::error::Error for ReadOnlyRefusal {}

pub type MemberResult<T> = Result<T, MemberError>;

/// Why a member's storage, re-opened behind the volumes' back, may not serve as the member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IdentityFault {
    /// It could not be read: try again later, as after a connection that did not open.
    Unreadable(String),
    /// It is another disk, or the member's as it was before: what it holds.
    NotTheMember(String),
}

/// Checks storage re-opened behind the volumes' back (a remote export whose server
/// restarted, perhaps on another file) before it serves as the member again: the member's
/// records say what it must hold. Given by the member's records' owner
/// (`metadata::MemberMeta`), so the storage's code need not know the superblock.
pub trait IdentityCheck: Send + Sync {
    /// Whether `disk`, the storage as re-opened (serving nothing else yet), is the member.
    fn verify<'a>(&'a self, disk: &'a dyn Member) -> BoxFuture<'a, Result<(), IdentityFault>>;
}

/// A member's open file as `fstat` sees it ([`Member::open_file`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenFile {
    /// The file system's device and the inode: which file it is.
    pub dev: u64,
    pub ino: u64,
    /// Names left: 0 once every path to it was removed (it lives while open).
    pub links: u64,
    /// A block device's number (`st_rdev`): the disk itself, whichever node names it.
    /// `None` for a regular file.
    pub block_device: Option<u64>,
}

/// A device a volume stores bytes on. Offsets are absolute bytes on the member.
///
/// Contract: `read` fills the whole buffer or fails; `write` writes every byte or fails;
/// `write(.., fua = true)` completes only once the bytes are durable; `flush` makes every
/// write that completed before it was called durable; after `trim` and `write_zeroes` the
/// range reads as zeroes.
pub trait Member: Send + Sync {
    /// A human name for messages (a path, "mem0", ...).
    fn name(&self) -> &str;
    /// Usable bytes.
    fn len(&self) -> u64;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    fn read(&self, offset: u64, buf: Buf) -> BoxFuture<'_, MemberResult<Buf>>;
    fn write(&self, offset: u64, data: SharedBuf, fua: bool) -> BoxFuture<'_, MemberResult<()>>;
    fn flush(&self) -> BoxFuture<'_, MemberResult<()>>;
    fn trim(&self, offset: u64, len: u64) -> BoxFuture<'_, MemberResult<()>>;
    fn write_zeroes(&self, offset: u64, len: u64) -> BoxFuture<'_, MemberResult<()>>;
    fn counters(&self) -> &MemberCounters;

    /// Whether its bytes live in memory (a memory member, a file on tmpfs): a flush costs
    /// next to nothing there, so a caller may flush often to keep the area it cycles
    /// through small (the write-hole log's ring: see `ppl::log`'s `ring_window`).
    fn memory_backed(&self) -> bool {
        false
    }

    /// Writes `data` at `offset`, a piece of `window`: a range rewritten again and again in
    /// small pieces (the write-hole log's window of its ring). A member that can write such
    /// a range cheaper — a file in memory, through a mapping of the window — does; the
    /// others write as [`Member::write`] does. The contract is `write`'s.
    fn write_in_window(
        &self,
        window: std::ops::Range<u64>,
        offset: u64,
        data: SharedBuf,
        fua: bool,
    ) -> BoxFuture<'_, MemberResult<()>> {
        let _ = window;
        self.write(offset, data, fua)
    }

    /// Takes `len_bytes` as the usable length when the file or device now holds that many
    /// (grown since it was opened: a volume growing in place over it); the length never
    /// shrinks. `Err` says why not. Members that cannot grow refuse anything longer.
    fn grow_to(&self, len_bytes: u64) -> Result<u64, String> {
        match len_bytes <= self.len() {
            true => Ok(self.len()),
            false => Err(format!(
                "{}: this kind of member does not grow while open ({} bytes, {len_bytes} wanted)",
                self.name(),
                self.len()
            )),
        }
    }

    /// Storage that can change behind the member (a remote export: its server restarted)
    /// runs `check` on every re-open before serving on it again. Others ignore it.
    fn guard_identity(&self, check: Arc<dyn IdentityCheck>) {
        let _ = check;
    }

    /// While a re-opened storage is not the member ([`IdentityCheck`]): what it holds
    /// instead (every request fails meanwhile).
    fn identity_lost(&self) -> Option<String> {
        None
    }

    /// Serves a storage found not to be the member as it is: every volume on the member has
    /// failed it, so only a re-add reads it, and that judges what it holds. No effect on a
    /// storage that is the member.
    fn readmit(&self) {}

    /// While a storage that answers is not used (a remote export back too small, changed,
    /// or another disk): why, for `status` (the failure that took the member out may be
    /// older: "stopped answering"). `None` while it is used, or does not answer at all.
    fn refused_now(&self) -> Option<String> {
        None
    }

    /// The local file or device node the member has open, as `fstat` of its descriptor says
    /// now (whether its path still names it is the caller's question: `status` asks).
    /// `None` for members that are no local file: memory, remote.
    fn open_file(&self) -> Option<io::Result<OpenFile>> {
        None
    }

    /// Reads consecutive bytes from `offset` into `bufs` in order, as one operation where the
    /// backend can (io_uring `READV`). The default issues one read per buffer.
    fn read_vectored(&self, offset: u64, bufs: Vec<Buf>) -> BoxFuture<'_, MemberResult<Vec<Buf>>> {
        let mut at = offset;
        let futs: Vec<_> = bufs
            .into_iter()
            .map(|b| {
                let o = at;
                at += b.len() as u64;
                self.read(o, b)
            })
            .collect();
        async move { futures::future::join_all(futs).await.into_iter().collect() }.boxed()
    }

    /// Writes `data` pieces to consecutive bytes from `offset`, as one operation where the
    /// backend can (io_uring `WRITEV`). The default issues one write per piece.
    fn write_vectored(
        &self,
        offset: u64,
        data: Vec<SharedBuf>,
        fua: bool,
    ) -> BoxFuture<'_, MemberResult<()>> {
        let mut at = offset;
        let futs: Vec<_> = data
            .into_iter()
            .map(|d| {
                let o = at;
                at += d.len() as u64;
                self.write(o, d, fua)
            })
            .collect();
        async move { futures::future::join_all(futs).await.into_iter().collect() }.boxed()
    }
}

impl<T: Member + ?Sized> Member for Arc<T> {
    fn name(&self) -> &str {
        (**self).name()
    }
    fn len(&self) -> u64 {
        (**self).len()
    }
    // Forwarded like every method: with the trait in scope, `arc.memory_backed()` on an
    // `Arc<dyn Member>` resolves to this impl, not to the member's own.
    fn memory_backed(&self) -> bool {
        (**self).memory_backed()
    }
    fn guard_identity(&self, check: Arc<dyn IdentityCheck>) {
        (**self).guard_identity(check)
    }
    fn identity_lost(&self) -> Option<String> {
        (**self).identity_lost()
    }
    fn readmit(&self) {
        (**self).readmit()
    }
    fn refused_now(&self) -> Option<String> {
        (**self).refused_now()
    }
    fn open_file(&self) -> Option<io::Result<OpenFile>> {
        (**self).open_file()
    }
    fn grow_to(&self, len_bytes: u64) -> Result<u64, String> {
        (**self).grow_to(len_bytes)
    }
    fn read(&self, offset: u64, buf: Buf) -> BoxFuture<'_, MemberResult<Buf>> {
        (**self).read(offset, buf)
    }
    fn write(&self, offset: u64, data: SharedBuf, fua: bool) -> BoxFuture<'_, MemberResult<()>> {
        (**self).write(offset, data, fua)
    }
    fn write_in_window(
        &self,
        window: std::ops::Range<u64>,
        offset: u64,
        data: SharedBuf,
        fua: bool,
    ) -> BoxFuture<'_, MemberResult<()>> {
        (**self).write_in_window(window, offset, data, fua)
    }
    fn flush(&self) -> BoxFuture<'_, MemberResult<()>> {
        (**self).flush()
    }
    fn trim(&self, offset: u64, len: u64) -> BoxFuture<'_, MemberResult<()>> {
        (**self).trim(offset, len)
    }
    fn write_zeroes(&self, offset: u64, len: u64) -> BoxFuture<'_, MemberResult<()>> {
        (**self).write_zeroes(offset, len)
    }
    fn counters(&self) -> &MemberCounters {
        (**self).counters()
    }
    fn read_vectored(&self, offset: u64, bufs: Vec<Buf>) -> BoxFuture<'_, MemberResult<Vec<Buf>>> {
        (**self).read_vectored(offset, bufs)
    }
    fn write_vectored(
        &self,
        offset: u64,
        data: Vec<SharedBuf>,
        fua: bool,
    ) -> BoxFuture<'_, MemberResult<()>> {
        (**self).write_vectored(offset, data, fua)
    }
}

/// Checks that `[offset, offset+len)` lies on a member of `size` bytes.
pub fn check_range(name: &str, op: MemberOp, offset: u64, len: u64, size: u64) -> MemberResult<()> {
    if offset.checked_add(len).is_none_or(|end| end > size) {
        return Err(MemberError::new(
            name,
            op,
            offset,
            len,
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("range ends past the member's {size} bytes"),
            ),
        ));
    }
    Ok(())
}

/// Per-member counters (atomics; read them with [`MemberCounters::snapshot`]).
#[derive(Debug, Default)]
pub struct MemberCounters {
    reads: AtomicU64,
    read_bytes: AtomicU64,
    writes: AtomicU64,
    write_bytes: AtomicU64,
    flushes: AtomicU64,
    trims: AtomicU64,
    errors: AtomicU64,
    /// Operations issued and not yet completed.
    in_flight: AtomicU64,
}

/// A copy of a member's counters at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CounterSnapshot {
    pub reads: u64,
    pub read_bytes: u64,
    pub writes: u64,
    pub write_bytes: u64,
    pub flushes: u64,
    pub trims: u64,
    pub errors: u64,
    pub in_flight: u64,
}

impl MemberCounters {
    /// Counts an operation as in flight until the returned guard is finished or dropped.
    pub fn start(&self, op: MemberOp, bytes: u64) -> OpGuard<'_> {
        self.in_flight.fetch_add(1, Relaxed);
        OpGuard {
            counters: self,
            op,
            bytes,
            done: false,
        }
    }

    pub fn snapshot(&self) -> CounterSnapshot {
        CounterSnapshot {
            reads: self.reads.load(Relaxed),
            read_bytes: self.read_bytes.load(Relaxed),
            writes: self.writes.load(Relaxed),
            write_bytes: self.write_bytes.load(Relaxed),
            flushes: self.flushes.load(Relaxed),
            trims: self.trims.load(Relaxed),
            errors: self.errors.load(Relaxed),
            in_flight: self.in_flight.load(Relaxed),
        }
    }

    pub fn in_flight(&self) -> u64 {
        self.in_flight.load(Relaxed)
    }
}

/// One operation in flight; [`OpGuard::finish`] counts it as done (or failed).
pub struct OpGuard<'a> {
    counters: &'a MemberCounters,
    op: MemberOp,
    bytes: u64,
    done: bool,
}

impl OpGuard<'_> {
    pub fn finish<T, E>(mut self, result: Result<T, E>) -> Result<T, E> {
        self.done = true;
        let c = self.counters;
        match (&result, self.op) {
            (Err(_), _) => {
                c.errors.fetch_add(1, Relaxed);
            }
            (Ok(_), MemberOp::Read) => {
                c.reads.fetch_add(1, Relaxed);
                c.read_bytes.fetch_add(self.bytes, Relaxed);
            }
            (Ok(_), MemberOp::Write) => {
                c.writes.fetch_add(1, Relaxed);
                c.write_bytes.fetch_add(self.bytes, Relaxed);
            }
            (Ok(_), MemberOp::Flush) => {
                c.flushes.fetch_add(1, Relaxed);
            }
            (Ok(_), MemberOp::Trim | MemberOp::WriteZeroes) => {
                c.trims.fetch_add(1, Relaxed);
            }
        }
        c.in_flight.fetch_sub(1, Relaxed);
        result
    }
}

impl Drop for OpGuard<'_> {
    fn drop(&mut self) {
        if !self.done {
            // Dropped before completion (the caller cancelled): no longer counted in flight.
            self.counters.in_flight.fetch_sub(1, Relaxed);
        }
    }
}
