//! Members of a scheduled world: every operation waits in the world's pending list until the
//! simulation completes it (in any order, possibly with an error), and a disk keeps what a
//! real one keeps — a volatile image that reads see, a durable image, and the log of
//! completed writes between them that a crash may drop or tear.

use crate::rng::Rng;
use futures::future::BoxFuture;
use futures::FutureExt;
use nbraid_core::{Buf, Member, MemberCounters, MemberError, MemberOp, MemberResult, SharedBuf};
use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

/// Sector size of the crash model: a torn write keeps or drops each sector whole.
pub const SECTOR_BYTES: usize = 512;

/// How a disk misbehaves (only disks the schedule allows to fail get any of this).
#[derive(Clone, Copy, Debug, Default)]
pub struct DiskFaults {
    /// From this simulation step on, every operation fails (fail-stop).
    pub dies_at_step: Option<u64>,
    /// Reads fail with this probability (‰) while the disk lives: a transient media error.
    pub read_error_per_mille: u64,
    /// Flushes fail with this probability (‰); the disk is dead afterwards.
    pub flush_error_per_mille: u64,
}

/// A completed write the disk has not made durable yet.
struct LogEntry {
    seq: u64,
    offset: usize,
    /// `None`: zeroes of `len` bytes.
    data: Option<Vec<u8>>,
    len: usize,
    /// FUA, or covered by a completed flush: survives any crash.
    forced: bool,
}

pub struct Disk {
    /// What reads see.
    pub volatile: Vec<u8>,
    /// What survives a crash for sure.
    durable: Vec<u8>,
    /// Completed writes in completion order, not yet folded into `durable`.
    log: VecDeque<LogEntry>,
    next_seq: u64,
    pub faults: DiskFaults,
    pub dead: bool,
}

impl Disk {
    fn new(image: Vec<u8>, faults: DiskFaults) -> Disk {
        Disk {
            volatile: image.clone(),
            durable: image,
            log: VecDeque::new(),
            next_seq: 0,
            faults,
            dead: false,
        }
    }

    fn apply(&mut self, offset: usize, data: Option<&[u8]>, len: usize, forced: bool) {
        match data {
            Some(d) => self.volatile[offset..offset + len].copy_from_slice(d),
            None => self.volatile[offset..offset + len].fill(0),
        }
        self.log.push_back(LogEntry {
            seq: self.next_seq,
            offset,
            data: data.map(<[u8]>::to_vec),
            len,
            forced,
        });
        self.next_seq += 1;
        self.compact();
    }

    /// Folds the forced prefix of the log into the durable image (order is kept: an entry
    /// is folded only after every earlier one).
    fn compact(&mut self) {
        while self.log.front().is_some_and(|e| e.forced) {
            let e = self.log.pop_front().expect("front");
            write_into(&mut self.durable, &e);
        }
    }

    /// Completes a flush registered when the log's next sequence number was `upto`.
    fn flushed(&mut self, upto: u64) {
        for e in self.log.iter_mut().filter(|e| e.seq < upto) {
            e.forced = true;
        }
        self.compact();
    }

    /// What the disk holds after power loss: the durable image plus, in order, each
    /// unforced write kept whole, dropped, or (with `torn`) kept sector by sector.
    pub fn crash_image(&self, rng: &mut Rng, torn: bool) -> Vec<u8> {
        let mut image = self.durable.clone();
        for e in &self.log {
            if e.forced {
                write_into(&mut image, e);
                continue;
            }
            match rng.below(if torn { 3 } else { 2 }) {
                0 => {}
                1 => write_into(&mut image, e),
                _ => {
                    for s in (0..e.len).step_by(SECTOR_BYTES) {
                        if rng.chance(500) {
                            let n = SECTOR_BYTES.min(e.len - s);
                            let at = e.offset + s;
                            match &e.data {
                                Some(d) => image[at..at + n].copy_from_slice(&d[s..s + n]),
                                None => image[at..at + n].fill(0),
                            }
                        }
                    }
                }
            }
        }
        image
    }
}

fn write_into(image: &mut [u8], e: &LogEntry) {
    let dst = &mut image[e.offset..e.offset + e.len];
    match &e.data {
        Some(d) => dst.copy_from_slice(d),
        None => dst.fill(0),
    }
}

enum OpKind {
    Read(Buf),
    Write(SharedBuf, bool),
    Zero(u64),
    /// The disk's log sequence when the flush was issued.
    Flush(u64),
}

#[derive(Default)]
struct Slot {
    waker: Option<Waker>,
    /// `Some` once completed: a read's buffer, or nothing.
    outcome: Option<Result<Option<Buf>, io::Error>>,
}

struct Pending {
    disk: usize,
    offset: u64,
    kind: OpKind,
    slot: Arc<Mutex<Slot>>,
}

/// Every simulated disk and every member operation in flight.
#[derive(Default)]
pub struct World {
    pub step: u64,
    pub disks: Vec<Disk>,
    pending: Vec<Pending>,
}

impl World {
    pub fn new(images: Vec<Vec<u8>>, faults: Vec<DiskFaults>) -> Arc<Mutex<World>> {
        Arc::new(Mutex::new(World {
            step: 0,
            disks: images
                .into_iter()
                .zip(faults)
                .map(|(i, f)| Disk::new(i, f))
                .collect(),
            pending: Vec::new(),
        }))
    }

    pub fn pending_count(&self) -> usize {
        self.pending.len()
    }

    /// Completes the `n`-th pending operation (in issue order), deciding its fate.
    pub fn complete(&mut self, n: usize, rng: &mut Rng) {
        let op = self.pending.remove(n);
        let step = self.step;
        let disk = &mut self.disks[op.disk];
        if disk.faults.dies_at_step.is_some_and(|s| step >= s) {
            disk.dead = true;
        }
        let eio = || io::Error::from_raw_os_error(libc::EIO);
        let outcome = if disk.dead {
            Err(eio())
        } else {
            let at = op.offset as usize;
            match op.kind {
                OpKind::Read(mut buf) => {
                    if rng.chance(disk.faults.read_error_per_mille) {
                        Err(eio())
                    } else {
                        let n = buf.len();
                        buf.copy_from_slice(&disk.volatile[at..at + n]);
                        Ok(Some(buf))
                    }
                }
                OpKind::Write(data, fua) => {
                    disk.apply(at, Some(&data), data.len(), fua);
                    Ok(None)
                }
                OpKind::Zero(len) => {
                    disk.apply(at, None, len as usize, false);
                    Ok(None)
                }
                OpKind::Flush(upto) => {
                    if rng.chance(disk.faults.flush_error_per_mille) {
                        disk.dead = true;
                        Err(eio())
                    } else {
                        disk.flushed(upto);
                        Ok(None)
                    }
                }
            }
        };
        let mut slot = op.slot.lock().expect("slot");
        slot.outcome = Some(outcome);
        if let Some(w) = slot.waker.take() {
            w.wake();
        }
    }
}

/// One member operation: registered with the world when first polled, ready once the
/// world completes it.
struct OpFuture {
    world: Arc<Mutex<World>>,
    disk: usize,
    offset: u64,
    kind: Option<OpKind>,
    slot: Arc<Mutex<Slot>>,
}

impl Future for OpFuture {
    type Output = Result<Option<Buf>, io::Error>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if let Some(mut kind) = self.kind.take() {
            let mut world = self.world.lock().expect("world");
            if let OpKind::Flush(upto) = &mut kind {
                *upto = world.disks[self.disk].next_seq;
            }
            world.pending.push(Pending {
                disk: self.disk,
                offset: self.offset,
                kind,
                slot: self.slot.clone(),
            });
        }
        let mut slot = self.slot.lock().expect("slot");
        match slot.outcome.take() {
            Some(o) => Poll::Ready(o),
            None => {
                slot.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

/// A member backed by disk `disk` of a world.
pub struct ScheduledMember {
    world: Arc<Mutex<World>>,
    disk: usize,
    name: String,
    len: u64,
    counters: MemberCounters,
}

impl ScheduledMember {
    pub fn new(world: Arc<Mutex<World>>, disk: usize, len: u64) -> ScheduledMember {
        ScheduledMember {
            world,
            disk,
            name: format!("sim{disk}"),
            len,
            counters: MemberCounters::default(),
        }
    }

    fn op(&self, offset: u64, kind: OpKind) -> OpFuture {
        OpFuture {
            world: self.world.clone(),
            disk: self.disk,
            offset,
            kind: Some(kind),
            slot: Arc::default(),
        }
    }

    fn error(&self, op: MemberOp, offset: u64, len: u64, e: io::Error) -> MemberError {
        MemberError::new(&self.name, op, offset, len, e)
    }

    fn check(&self, op: MemberOp, offset: u64, len: u64) -> MemberResult<()> {
        assert!(
            offset + len <= self.len,
            "engine asked {} for {op} of {len} bytes at {offset}, past its {} bytes",
            self.name,
            self.len
        );
        Ok(())
    }
}

impl Member for ScheduledMember {
    fn name(&self) -> &str {
        &self.name
    }
    fn len(&self) -> u64 {
        self.len
    }
    fn read(&self, offset: u64, buf: Buf) -> BoxFuture<'_, MemberResult<Buf>> {
        let len = buf.len() as u64;
        let f = self.op(offset, OpKind::Read(buf));
        async move {
            self.check(MemberOp::Read, offset, len)?;
            match f.await {
                Ok(b) => Ok(b.expect("a read returns its buffer")),
                Err(e) => Err(self.error(MemberOp::Read, offset, len, e)),
            }
        }
        .boxed()
    }
    fn write(&self, offset: u64, data: SharedBuf, fua: bool) -> BoxFuture<'_, MemberResult<()>> {
        let len = data.len() as u64;
        let f = self.op(offset, OpKind::Write(data, fua));
        async move {
            self.check(MemberOp::Write, offset, len)?;
            f.await
                .map(|_| ())
                .map_err(|e| self.error(MemberOp::Write, offset, len, e))
        }
        .boxed()
    }
    fn flush(&self) -> BoxFuture<'_, MemberResult<()>> {
        let f = self.op(0, OpKind::Flush(0));
        async move {
            f.await
                .map(|_| ())
                .map_err(|e| self.error(MemberOp::Flush, 0, 0, e))
        }
        .boxed()
    }
    fn trim(&self, offset: u64, len: u64) -> BoxFuture<'_, MemberResult<()>> {
        let f = self.op(offset, OpKind::Zero(len));
        async move {
            self.check(MemberOp::Trim, offset, len)?;
            f.await
                .map(|_| ())
                .map_err(|e| self.error(MemberOp::Trim, offset, len, e))
        }
        .boxed()
    }
    fn write_zeroes(&self, offset: u64, len: u64) -> BoxFuture<'_, MemberResult<()>> {
        let f = self.op(offset, OpKind::Zero(len));
        async move {
            self.check(MemberOp::WriteZeroes, offset, len)?;
            f.await
                .map(|_| ())
                .map_err(|e| self.error(MemberOp::WriteZeroes, offset, len, e))
        }
        .boxed()
    }
    fn counters(&self) -> &MemberCounters {
        &self.counters
    }
}
