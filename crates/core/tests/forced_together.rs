//! Members that drop out together under running writers, with no write acknowledged durable
//! (no flush, no FUA write) between their failures, missed nothing the array promised: a
//! forced assembly takes them all back as current and resyncs the dirty regions with every
//! member there, as after a crash — never reconstructs their bytes from stripes the last
//! failure tore (that turned flushed blocks into garbage a scrub then called consistent).
//! A member that missed an acknowledged write stays out.

mod common;

use common::{KIB, MIB};
use futures::executor::block_on;
use futures::future::{join_all, BoxFuture};
use futures::FutureExt;
use nbraid_core::metadata::{Array, ArrayOptions, MemberMeta, OpenReport, METADATA_AREA_BYTES};
use nbraid_core::{
    Buf, CacheMode, Member, MemberError, MemberOp, MemberResult, MemoryMember, ScrubControl,
    SharedBuf, VolumeOptions,
};
use nbraid_layout::{Level, Node, ParityLayout, Region, Shape};
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

const REGION: u64 = 8 * MIB;
const STRIP: u64 = 64 * KIB;
const BLOCK: u64 = 4 * KIB;

/// A memory member that drops out (a remote server gone) and comes back with its bytes.
struct Switch {
    inner: MemoryMember,
    down: AtomicBool,
}

impl Switch {
    fn new(i: usize) -> Arc<Switch> {
        Arc::new(Switch {
            inner: MemoryMember::new(format!("d{i}"), METADATA_AREA_BYTES + REGION),
            down: AtomicBool::new(false),
        })
    }

    fn check(&self, op: MemberOp, offset: u64, len: u64) -> MemberResult<()> {
        if self.down.load(SeqCst) {
            let e = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "server gone");
            return Err(MemberError::new(self.name(), op, offset, len, e));
        }
        Ok(())
    }

    fn gated<'a, T: Send + 'a>(
        &'a self,
        (op, offset, len): (MemberOp, u64, u64),
        run: impl FnOnce() -> BoxFuture<'a, MemberResult<T>>,
    ) -> BoxFuture<'a, MemberResult<T>> {
        match self.check(op, offset, len) {
            Err(e) => futures::future::ready(Err(e)).boxed(),
            Ok(()) => run(),
        }
    }
}

impl Member for Switch {
    common::pass_through!(inner; name len counters);
    fn read(&self, offset: u64, buf: Buf) -> BoxFuture<'_, MemberResult<Buf>> {
        let at = (MemberOp::Read, offset, buf.len() as u64);
        self.gated(at, || self.inner.read(offset, buf))
    }
    fn write(&self, offset: u64, data: SharedBuf, fua: bool) -> BoxFuture<'_, MemberResult<()>> {
        let at = (MemberOp::Write, offset, data.len() as u64);
        self.gated(at, || self.inner.write(offset, data, fua))
    }
    fn flush(&self) -> BoxFuture<'_, MemberResult<()>> {
        self.gated((MemberOp::Flush, 0, 0), || self.inner.flush())
    }
    fn trim(&self, offset: u64, len: u64) -> BoxFuture<'_, MemberResult<()>> {
        self.gated((MemberOp::Trim, offset, len), || {
            self.inner.trim(offset, len)
        })
    }
    fn write_zeroes(&self, offset: u64, len: u64) -> BoxFuture<'_, MemberResult<()>> {
        let at = (MemberOp::WriteZeroes, offset, len);
        self.gated(at, || self.inner.write_zeroes(offset, len))
    }
}

fn tree(level: Level, n: usize) -> Node {
    let shape = Shape::new(level, n, None, STRIP, ParityLayout::LeftSymmetric).expect("shape");
    let region = Region {
        start: METADATA_AREA_BYTES,
        len: REGION,
    };
    shape.build(&vec![region; n]).expect("tree")
}

fn opts(force: bool) -> ArrayOptions {
    ArrayOptions {
        volume: VolumeOptions {
            cache: CacheMode::WriteThrough,
            ..VolumeOptions::default()
        },
        bitmap_chunk_bytes: Some(256 * KIB),
        bitmap_clear_delay: Duration::ZERO,
        force_assembly: force,
        ..ArrayOptions::default()
    }
}

fn metas(d: &[Arc<Switch>]) -> Vec<Option<Arc<MemberMeta>>> {
    (d.iter())
        .map(|m| Some(block_on(MemberMeta::load(m.clone() as Arc<dyn Member>))))
        .collect()
}

fn open(level: Level, d: &[Arc<Switch>], force: bool) -> Result<(Array, OpenReport), String> {
    let t = tree(level, d.len());
    block_on(Array::open("vol", &t, metas(d), opts(force), &|_, _| {})).map_err(|e| e.to_string())
}

/// What a client was promised: the bytes as of its last acknowledged flush, and the blocks
/// written since (each may read old or new after a failure; no block is written twice
/// between flushes here).
struct Promised {
    acked: Vec<u8>,
    latest: Vec<u8>,
    unacked: Vec<bool>,
    seed: u64,
}

impl Promised {
    fn new(capacity: u64) -> Promised {
        Promised {
            acked: vec![0; capacity as usize],
            latest: vec![0; capacity as usize],
            unacked: vec![false; (capacity / BLOCK) as usize],
            seed: 1,
        }
    }

    /// The bytes of a write at `at`, applied to the model as not yet acknowledged.
    fn write(&mut self, at: u64, len: u64) -> Buf {
        self.seed = self.seed.wrapping_mul(6364136223846793005).wrapping_add(1);
        let mut b = Buf::new(len as usize);
        for (i, x) in b.iter_mut().enumerate() {
            *x = (self.seed >> 24) as u8 ^ (i * 7 + (i >> 12)) as u8;
        }
        self.latest[at as usize..(at + len) as usize].copy_from_slice(&b);
        for blk in at / BLOCK..(at + len).div_ceil(BLOCK) {
            self.unacked[blk as usize] = true;
        }
        b
    }

    /// A flush was acknowledged: everything written so far is promised.
    fn flushed(&mut self) {
        self.acked.copy_from_slice(&self.latest);
        self.unacked.fill(false);
    }

    /// `Err` naming the first block that reads neither its acknowledged bytes nor (written
    /// since the last flush) its newest ones, and how many such blocks there are.
    fn check(&self, a: &Array) -> Result<(), String> {
        let mut wrong = Vec::new();
        for (i, piece) in self.acked.chunks(MIB as usize).enumerate() {
            let at = i as u64 * MIB;
            let back = block_on(a.read(at, piece.len() as u64)).map_err(|e| e.to_string())?;
            for (j, got) in back.chunks(BLOCK as usize).enumerate() {
                let blk = (at / BLOCK) as usize + j;
                let span = blk * BLOCK as usize..(blk + 1) * BLOCK as usize;
                let newer = self.unacked[blk] && got == &self.latest[span.clone()];
                if got != &self.acked[span] && !newer {
                    wrong.push(blk);
                }
            }
        }
        match wrong.first() {
            None => Ok(()),
            Some(b) => Err(format!(
                "{} block(s) read wrong, the first block {b} (acknowledged: {})",
                wrong.len(),
                !self.unacked[*b]
            )),
        }
    }
}

/// A write through the model; its result is not looked at (it may meet a failure).
async fn send(a: &Array, at: u64, buf: Buf) {
    let _ = a.write(at, buf, false).await;
}

/// `level` over `n` members, filled and flushed; then the members of `fail` drop out one
/// after another while writes run (a small write and a full-stripe one into fresh stripes
/// after each), with a flush acknowledged after the first one's writes when
/// `flush_after_first`. The last one drops out under writes in flight: their stripes are
/// torn. Returns the members and the model.
fn fail_under_writes(
    level: Level,
    n: usize,
    fail: &[usize],
    flush_after_first: bool,
) -> (Vec<Arc<Switch>>, Promised) {
    let d: Vec<Arc<Switch>> = (0..n).map(Switch::new).collect();
    let m = metas(&d).into_iter().map(|m| m.unwrap()).collect();
    let created = Array::create("vol", tree(level, n), m, opts(false), true, &|_, _| {});
    let a = block_on(created).expect("create").0;
    let cap = a.volume().capacity();
    let parity = if level == Level::Raid6 { 2 } else { 1 };
    let stripe = STRIP * (n - parity) as u64;
    let mut p = Promised::new(cap);
    for at in (0..cap).step_by(MIB as usize) {
        let b = p.write(at, MIB);
        block_on(a.write(at, b, false)).expect("fill");
    }
    block_on(a.flush()).expect("flush");
    p.flushed();
    let mut next = 2;
    for (k, &role) in fail.iter().enumerate() {
        d[role].down.store(true, SeqCst);
        let (s, t) = (next * stripe, (next + 2) * stripe);
        next += 4;
        let writes = vec![
            (s + STRIP + 8 * KIB, p.write(s + STRIP + 8 * KIB, 3 * STRIP)),
            (t, p.write(t, stripe)),
        ];
        block_on(join_all(writes.into_iter().map(|(at, b)| send(&a, at, b))));
        if k == 0 && flush_after_first {
            block_on(a.flush()).expect("a flush with one member out");
            p.flushed();
        }
    }
    drop(a);
    for m in &d {
        m.down.store(false, SeqCst);
    }
    (d, p)
}

/// Forced assembly after `fail_under_writes`: every promised block reads back, a scrub
/// finds nothing, the roles in `back` were taken back (and only they), and an ordinary
/// start afterwards serves the same.
fn forced_back(level: Level, d: &[Arc<Switch>], p: &Promised, back: &[usize]) {
    let refused = open(level, d, false).err().expect("started past tolerance");
    assert!(
        refused.contains("more than the volume tolerates"),
        "{refused}"
    );
    let (a, report) = open(level, d, true).expect("forced open");
    p.check(&a).expect("after the forced assembly");
    let scrub = block_on(a.scrub(&ScrubControl::new(false, 0))).expect("scrub");
    assert_eq!(scrub.mismatches, 0, "{scrub:?}");
    let mut taken: Vec<usize> = report.forced.iter().map(|f| f.role).collect();
    taken.sort_unstable();
    assert_eq!(taken, back, "{:?}", report.warnings);
    drop(a);
    let (a, _) = open(level, d, false).expect("an ordinary start afterwards");
    p.check(&a).expect("after an ordinary start");
}

#[test]
fn three_raid6_members_that_failed_together_all_come_back_current() {
    let (d, p) = fail_under_writes(Level::Raid6, 6, &[1, 2, 3], false);
    forced_back(Level::Raid6, &d, &p, &[1, 2, 3]);
}

#[test]
fn two_raid5_members_that_failed_together_both_come_back_current() {
    let (d, p) = fail_under_writes(Level::Raid5, 4, &[2, 0], false);
    forced_back(Level::Raid5, &d, &p, &[0, 2]);
}

/// Role 1 missed a flushed write: it stays out; the two that failed together come back.
#[test]
fn a_raid6_member_that_missed_an_acknowledged_flush_stays_out() {
    let (d, p) = fail_under_writes(Level::Raid6, 6, &[1, 2, 3], true);
    forced_back(Level::Raid6, &d, &p, &[2, 3]);
}
