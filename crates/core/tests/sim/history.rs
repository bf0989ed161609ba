//! What the clients asked and what they were told, and the rules a volume must keep:
//! - a read returns, per sector, the data of a write that no completed write had
//!   superseded when the read was issued (the last acknowledged one, or one in flight) —
//!   never older data, never bytes nobody wrote;
//! - after a crash, every write acknowledged before an acknowledged FLUSH was received, and
//!   every acknowledged FUA write, reads back (its data or that of a write not older).
//!
//! Every written sector carries its writer's id and its own sector number, followed by bytes
//! derived from both, so a read names the write it came from (or is zero: the initial
//! contents, a trim or write-zeroes) and misplaced or invented bytes are caught.

use futures::future::BoxFuture;
use nbraid_core::{Buf, VolumeResult};
use nbraid_sim::scheduled::SECTOR_BYTES;
use std::collections::HashSet;

const SECTOR: u64 = SECTOR_BYTES as u64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Read,
    Write {
        fua: bool,
    },
    /// Trim or write-zeroes (`fua` only for write-zeroes).
    Zero {
        fua: bool,
    },
    Flush,
}

#[derive(Clone, Debug)]
pub struct Op {
    pub kind: Kind,
    pub offset: u64,
    pub len: u64,
    /// Event clock when the request was received.
    pub issued: u64,
    /// Event clock when it completed, and whether it succeeded.
    pub done: Option<(u64, bool)>,
}

impl Op {
    fn done_at(&self) -> Option<u64> {
        self.done.map(|d| d.0)
    }
    fn ok(&self) -> bool {
        matches!(self.done, Some((_, true)))
    }
    fn writes(&self) -> bool {
        matches!(self.kind, Kind::Write { .. } | Kind::Zero { .. })
    }
}

/// What one sector of a read holds.
#[derive(Debug, PartialEq, Eq)]
enum Seen {
    Zero,
    /// Written by op `id - 1`.
    Write(u64),
    Garbage,
}

#[derive(Default)]
pub struct History {
    pub ops: Vec<Op>,
    /// Per sector: the ops that write it, in issue order.
    writers: Vec<Vec<usize>>,
    clock: u64,
}

/// Fills `buf` (at volume offset `offset`) with write `id`'s pattern.
pub fn fill(buf: &mut [u8], offset: u64, id: u64) {
    for (i, sector) in buf.chunks_mut(SECTOR_BYTES).enumerate() {
        let s = offset / SECTOR + i as u64;
        sector[..8].copy_from_slice(&id.to_le_bytes());
        sector[8..16].copy_from_slice(&s.to_le_bytes());
        let mut x = id.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ s.rotate_left(29);
        for w in sector[16..].chunks_mut(8) {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            w.copy_from_slice(&x.to_le_bytes()[..w.len()]);
        }
    }
}

fn decode(sector: &[u8], s: u64) -> Seen {
    if sector.iter().all(|&b| b == 0) {
        return Seen::Zero;
    }
    let id = u64::from_le_bytes(sector[..8].try_into().expect("8 bytes"));
    let mut want = vec![0u8; SECTOR_BYTES];
    fill(&mut want, s * SECTOR, id);
    if id == 0 || want != sector {
        return Seen::Garbage;
    }
    Seen::Write(id)
}

impl History {
    pub fn new(volume_bytes: u64) -> History {
        History {
            ops: Vec::new(),
            writers: vec![Vec::new(); (volume_bytes / SECTOR) as usize],
            clock: 0,
        }
    }

    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    /// Records a request as received; returns its id (its data's pattern id is `id + 1`).
    pub fn issue(&mut self, kind: Kind, offset: u64, len: u64) -> usize {
        let id = self.ops.len();
        let issued = self.tick();
        self.ops.push(Op {
            kind,
            offset,
            len,
            issued,
            done: None,
        });
        if self.ops[id].writes() {
            for s in offset / SECTOR..(offset + len) / SECTOR {
                self.writers[s as usize].push(id);
            }
        }
        id
    }

    /// The event clock now.
    pub fn now(&self) -> u64 {
        self.clock
    }

    pub fn flushes_acknowledged(&self) -> usize {
        self.ops
            .iter()
            .filter(|o| o.kind == Kind::Flush && o.ok())
            .count()
    }

    /// A FLUSH issued after `at` that was acknowledged (it claimed data durable that was
    /// already lost).
    pub fn flush_acknowledged_after(&self, at: u64) -> Option<usize> {
        self.ops
            .iter()
            .position(|o| o.kind == Kind::Flush && o.ok() && o.issued > at)
    }

    /// Power was lost (before requests go on after the restart): writes acknowledged but not
    /// guaranteed may have been lost, so a later FLUSH must not make them guaranteed — they
    /// count as failed from now on (their data may still be found, until superseded).
    pub fn power_lost(&mut self) {
        let f = self.last_flush_issued();
        let lost: Vec<usize> = (0..self.ops.len())
            .filter(|&i| {
                let o = &self.ops[i];
                o.writes() && o.ok() && !self.guaranteed(o, f)
            })
            .collect();
        for i in lost {
            if let Some((at, _)) = self.ops[i].done {
                self.ops[i].done = Some((at, false));
            }
        }
    }

    pub fn complete(&mut self, id: usize, ok: bool) {
        let at = self.tick();
        self.ops[id].done = Some((at, ok));
    }

    /// The latest issue time among writes of sector `s` that succeeded before `before`
    /// (anything that completed before that write was issued is superseded).
    fn barrier(&self, s: u64, mut counts: impl FnMut(&Op) -> bool) -> u64 {
        self.writers[s as usize]
            .iter()
            .map(|&w| &self.ops[w])
            .filter(|o| counts(o))
            .map(|o| o.issued)
            .max()
            .unwrap_or(0)
    }

    /// Whether `seen` at sector `s` is allowed given the barrier: the value's writer did not
    /// complete before the barrier (the initial zeroes complete at time 0).
    fn allowed(&self, s: u64, seen: &Seen, barrier: u64, issued_before: u64) -> Result<(), String> {
        let fresh = |o: &Op| o.issued < issued_before && o.done_at().is_none_or(|d| d >= barrier);
        match seen {
            Seen::Garbage => Err("bytes nobody wrote".into()),
            Seen::Zero => {
                let initial = barrier == 0;
                let zeroing = self.writers[s as usize].iter().any(|&w| {
                    let o = &self.ops[w];
                    matches!(o.kind, Kind::Zero { .. }) && fresh(o)
                });
                if initial || zeroing {
                    Ok(())
                } else {
                    Err("zeroes, but a completed write had superseded every zeroing".into())
                }
            }
            Seen::Write(id) => {
                let w = (*id - 1) as usize;
                let Some(o) = self.ops.get(w) else {
                    return Err(format!("data of op {w}, which was never issued"));
                };
                if !self.writers[s as usize].contains(&w) {
                    return Err(format!("data of op {w}, which did not write this sector"));
                }
                if fresh(o) {
                    Ok(())
                } else {
                    Err(format!(
                        "stale data of op {w} ({o:?}), superseded by a write issued at {barrier}"
                    ))
                }
            }
        }
    }

    /// Checks a successful read of `[offset, offset + data.len())` issued as op `id`.
    pub fn check_read(&self, id: usize, data: &[u8]) -> Result<(), String> {
        self.check_read_except(id, data, &HashSet::new())
    }

    /// [`History::check_read`], but for the sectors in `excused`.
    pub fn check_read_except(
        &self,
        id: usize,
        data: &[u8],
        excused: &HashSet<u64>,
    ) -> Result<(), String> {
        let op = &self.ops[id];
        let issued = op.issued;
        let done = op.done_at().unwrap_or(u64::MAX);
        for (i, sector) in data.chunks(SECTOR_BYTES).enumerate() {
            let s = op.offset / SECTOR + i as u64;
            if excused.contains(&s) {
                continue;
            }
            let seen = decode(sector, s);
            let barrier = self.barrier(s, |o| o.ok() && o.done_at().is_some_and(|d| d < issued));
            self.allowed(s, &seen, barrier, done).map_err(|e| {
                format!(
                    "read op {id} ({op:?}) sector {s} (byte {}): {e}; writers of the sector: {:?}",
                    s * SECTOR,
                    self.writers_of(s)
                )
            })?;
        }
        Ok(())
    }

    /// The issue time of the latest FLUSH that completed successfully (0: none).
    pub fn last_flush_issued(&self) -> u64 {
        self.ops
            .iter()
            .filter(|o| o.kind == Kind::Flush && o.ok())
            .map(|o| o.issued)
            .max()
            .unwrap_or(0)
    }

    /// Whether op `o` must survive a crash: it succeeded and was FUA, or completed before an
    /// acknowledged FLUSH was received.
    pub fn guaranteed(&self, o: &Op, flush_issued: u64) -> bool {
        let fua = matches!(o.kind, Kind::Write { fua: true } | Kind::Zero { fua: true });
        o.writes() && o.ok() && (fua || o.done_at().is_some_and(|d| d < flush_issued))
    }

    /// Ops that wrote something not guaranteed to be durable (their stripes may be torn).
    pub fn unguaranteed_writes(&self) -> Vec<&Op> {
        let f = self.last_flush_issued();
        self.ops
            .iter()
            .filter(|o| o.writes() && !self.guaranteed(o, f))
            .collect()
    }

    /// Checks one sector of the volume read back after a crash.
    pub fn check_durable(&self, s: u64, sector: &[u8]) -> Result<(), String> {
        let f = self.last_flush_issued();
        let seen = decode(sector, s);
        let barrier = self.barrier(s, |o| self.guaranteed(o, f));
        self.allowed(s, &seen, barrier, u64::MAX).map_err(|e| {
            format!(
                "after the crash, sector {s} (byte {}): {e}; last acknowledged flush issued at {f}; writers of the sector: {:?}",
                s * SECTOR,
                self.writers_of(s)
            )
        })
    }

    fn writers_of(&self, s: u64) -> Vec<(usize, &Op)> {
        self.writers[s as usize]
            .iter()
            .map(|&w| (w, &self.ops[w]))
            .collect()
    }
}

/// What a schedule's requests run against: a bare volume or an array with its metadata.
pub trait Target {
    fn read(&self, offset: u64, len: u64) -> BoxFuture<'_, VolumeResult<Buf>>;
    fn write(&self, offset: u64, buf: Buf, fua: bool) -> BoxFuture<'_, VolumeResult<Buf>>;
    fn trim(&self, offset: u64, len: u64) -> BoxFuture<'_, VolumeResult<()>>;
    fn write_zeroes(&self, offset: u64, len: u64, fua: bool) -> BoxFuture<'_, VolumeResult<()>>;
    fn flush(&self) -> BoxFuture<'_, VolumeResult<()>>;
}

macro_rules! target {
    ($t:ty) => {
        impl Target for $t {
            fn read(&self, offset: u64, len: u64) -> BoxFuture<'_, VolumeResult<Buf>> {
                Box::pin(<$t>::read(self, offset, len))
            }
            fn write(&self, offset: u64, buf: Buf, fua: bool) -> BoxFuture<'_, VolumeResult<Buf>> {
                Box::pin(<$t>::write(self, offset, buf, fua))
            }
            fn trim(&self, offset: u64, len: u64) -> BoxFuture<'_, VolumeResult<()>> {
                Box::pin(<$t>::trim(self, offset, len))
            }
            fn write_zeroes(
                &self,
                offset: u64,
                len: u64,
                fua: bool,
            ) -> BoxFuture<'_, VolumeResult<()>> {
                Box::pin(<$t>::write_zeroes(self, offset, len, fua))
            }
            fn flush(&self) -> BoxFuture<'_, VolumeResult<()>> {
                Box::pin(<$t>::flush(self))
            }
        }
    };
}
target!(nbraid_core::Volume);
target!(nbraid_core::metadata::Array);

/// Performs request `id` of `kind` (a write carries `id`'s pattern); a read's bytes come back.
pub async fn perform(
    t: &dyn Target,
    id: usize,
    kind: Kind,
    offset: u64,
    len: u64,
) -> VolumeResult<Option<Buf>> {
    match kind {
        Kind::Read => t.read(offset, len).await.map(Some),
        Kind::Write { fua } => {
            let mut buf = Buf::new(len as usize);
            fill(&mut buf, offset, id as u64 + 1);
            t.write(offset, buf, fua).await.map(|_| None)
        }
        Kind::Zero { fua: false } if id.is_multiple_of(2) => {
            t.trim(offset, len).await.map(|_| None)
        }
        Kind::Zero { fua } => t.write_zeroes(offset, len, fua).await.map(|_| None),
        Kind::Flush => t.flush().await.map(|_| None),
    }
}
