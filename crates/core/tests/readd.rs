//! A failed member that comes back (`Array::readd`, md's re-add): it is read nowhere until the
//! regions the write-intent bitmap marks are resynced onto it, only those regions are
//! rewritten, afterwards its copy agrees with its peers and the array reopens healthy; a
//! member that comes back blank is rebuilt whole; a crash before the resync ends leaves the
//! role failed and the re-add starts over.

mod common;

use common::{KIB, MIB};
use futures::executor::block_on;
use futures::future::BoxFuture;
use futures::FutureExt;
use nbraid_core::metadata::{
    read_superblock, Array, ArrayOptions, Found, MemberMeta, OpenReport, Readd, RecordedState,
    METADATA_AREA_BYTES,
};
use nbraid_core::{
    Buf, CacheMode, Member, MemberCounters, MemberError, MemberOp, MemberResult, MemoryMember,
    PassControl, PassState, SharedBuf, VolumeOptions,
};
use nbraid_layout::{Level, Node, ParityLayout, Region, Shape, StripeRoles};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

const REGION: u64 = 16 * MIB;
const CHUNK: u64 = 256 * KIB;

/// A memory member that can go away and come back with its bytes (a remote server killed
/// and restarted), counting reads of its data region.
struct Switch {
    inner: MemoryMember,
    down: AtomicBool,
    data_reads: AtomicU64,
    /// Reads and writes answer later (yield to the executor a few times first).
    slow: AtomicBool,
}

impl Switch {
    fn new(i: usize) -> Arc<Switch> {
        Switch::sized(i, METADATA_AREA_BYTES + REGION)
    }

    fn sized(i: usize, len: u64) -> Arc<Switch> {
        Arc::new(Switch {
            inner: MemoryMember::new(format!("d{i}"), len),
            down: AtomicBool::new(false),
            data_reads: AtomicU64::new(0),
            slow: AtomicBool::new(false),
        })
    }

    /// `op` after a few yields when the member is slow.
    fn answer<'a, T: Send + 'a>(
        &'a self,
        op: BoxFuture<'a, MemberResult<T>>,
    ) -> BoxFuture<'a, MemberResult<T>> {
        if !self.slow.load(SeqCst) {
            return op;
        }
        async move {
            for _ in 0..3 {
                common::yield_once().await;
            }
            op.await
        }
        .boxed()
    }

    fn check(&self, op: MemberOp, offset: u64, len: u64) -> MemberResult<()> {
        if self.down.load(SeqCst) {
            let e = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "server gone");
            return Err(MemberError::new(self.name(), op, offset, len, e));
        }
        Ok(())
    }

    fn region(&self) -> Vec<u8> {
        let mut v = vec![0; REGION as usize];
        self.inner.peek(METADATA_AREA_BYTES, &mut v);
        v
    }
}

impl Member for Switch {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn read(&self, offset: u64, buf: Buf) -> BoxFuture<'_, MemberResult<Buf>> {
        if let Err(e) = self.check(MemberOp::Read, offset, buf.len() as u64) {
            return futures::future::ready(Err(e)).boxed();
        }
        if offset >= METADATA_AREA_BYTES {
            self.data_reads.fetch_add(1, SeqCst);
        }
        self.answer(self.inner.read(offset, buf))
    }
    fn write(&self, offset: u64, data: SharedBuf, fua: bool) -> BoxFuture<'_, MemberResult<()>> {
        match self.check(MemberOp::Write, offset, data.len() as u64) {
            Err(e) => futures::future::ready(Err(e)).boxed(),
            Ok(()) => self.answer(self.inner.write(offset, data, fua)),
        }
    }
    fn flush(&self) -> BoxFuture<'_, MemberResult<()>> {
        match self.check(MemberOp::Flush, 0, 0) {
            Err(e) => futures::future::ready(Err(e)).boxed(),
            Ok(()) => self.inner.flush(),
        }
    }
    fn trim(&self, offset: u64, len: u64) -> BoxFuture<'_, MemberResult<()>> {
        match self.check(MemberOp::Trim, offset, len) {
            Err(e) => futures::future::ready(Err(e)).boxed(),
            Ok(()) => self.inner.trim(offset, len),
        }
    }
    fn write_zeroes(&self, offset: u64, len: u64) -> BoxFuture<'_, MemberResult<()>> {
        match self.check(MemberOp::WriteZeroes, offset, len) {
            Err(e) => futures::future::ready(Err(e)).boxed(),
            Ok(()) => self.inner.write_zeroes(offset, len),
        }
    }
    fn counters(&self) -> &MemberCounters {
        self.inner.counters()
    }
}

fn tree(level: Level, n: usize) -> Node {
    tree_at(level, n, METADATA_AREA_BYTES)
}

/// [`tree`] with every member's region at `start`.
fn tree_at(level: Level, n: usize, start: u64) -> Node {
    let shape = Shape::new(level, n, None, 64 * KIB, ParityLayout::LeftSymmetric).expect("shape");
    let region = Region { start, len: REGION };
    shape.build(&vec![region; n]).expect("tree")
}

fn opts() -> ArrayOptions {
    ArrayOptions {
        volume: VolumeOptions {
            cache: CacheMode::WriteThrough,
            ..VolumeOptions::default()
        },
        bitmap_chunk_bytes: Some(CHUNK),
        bitmap_clear_delay: Duration::ZERO,
        ppl: true,

        ..ArrayOptions::default()
    }
}

fn metas(d: &[Arc<Switch>]) -> Vec<Arc<MemberMeta>> {
    d.iter()
        .map(|m| block_on(MemberMeta::load(m.clone() as Arc<dyn Member>)))
        .collect()
}

fn create(level: Level, d: &[Arc<Switch>], bitmap: bool) -> Array {
    let o = ArrayOptions {
        bitmap_chunk_bytes: bitmap.then_some(CHUNK),
        ..opts()
    };
    block_on(Array::create(
        "vol",
        tree(level, d.len()),
        metas(d),
        o,
        true,
        &|_, _| {},
    ))
    .expect("create")
    .0
}

fn reopen(level: Level, d: &[Arc<Switch>]) -> (Array, OpenReport) {
    let m = metas(d).into_iter().map(Some).collect();
    block_on(Array::open(
        "vol",
        &tree(level, d.len()),
        m,
        opts(),
        &|_, _| {},
    ))
    .expect("open")
}

fn pattern(seed: u64, len: usize) -> Buf {
    let mut b = Buf::new(len);
    for (i, x) in b.iter_mut().enumerate() {
        *x = (seed as usize ^ (i * 13) ^ (i >> 8)) as u8;
    }
    b
}

fn write(a: &Array, model: &mut [u8], at: u64, len: u64, seed: u64) {
    let b = pattern(seed ^ at, len as usize);
    model[at as usize..(at + len) as usize].copy_from_slice(&b);
    block_on(a.write(at, b, false)).expect("write");
}

fn read_all(a: &Array) -> Vec<u8> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < a.volume().capacity() {
        out.extend_from_slice(&block_on(a.read(at, MIB)).expect("read"));
        at += MIB;
    }
    out
}

/// The whole volume written, flushed (every bit cleared), then member `gone` goes away and
/// two small regions are written while it is out. Returns the model.
fn fill_then_lose(a: &Array, d: &[Arc<Switch>], gone: usize) -> Vec<u8> {
    let cap = a.volume().capacity();
    let mut model = filled(a);
    block_on(a.flush()).expect("flush");
    assert_eq!(a.volume().failed_count(), 0);
    d[gone].down.store(true, SeqCst);
    write(a, &mut model, 3 * MIB + 4 * KIB, 8 * KIB, 2);
    write(a, &mut model, cap - 100 * KIB, 64 * KIB, 3);
    block_on(a.flush()).expect("flush degraded");
    assert!(
        a.volume().member_is_failed(gone),
        "the member was not failed"
    );
    model
}

/// The whole volume written, 1 MiB at a time. Returns the model.
fn filled(a: &Array) -> Vec<u8> {
    let cap = a.volume().capacity();
    let mut model = vec![0u8; cap as usize];
    let mut at = 0;
    while at < cap {
        write(a, &mut model, at, MIB, 1);
        at += MIB;
    }
    model
}

/// An array of `n` members (`level`, with a bitmap) filled, member `gone` lost while two
/// regions are written ([`fill_then_lose`]), then back up (not re-added yet). Returns the
/// members, the array and the model.
fn lost_and_back(level: Level, n: usize, gone: usize) -> (Vec<Arc<Switch>>, Array, Vec<u8>) {
    let d: Vec<Arc<Switch>> = (0..n).map(Switch::new).collect();
    let a = create(level, &d, true);
    let model = fill_then_lose(&a, &d, gone);
    d[gone].down.store(false, SeqCst);
    (d, a, model)
}

fn resync(a: &Array) {
    let ctl = PassControl::new(0);
    assert_eq!(
        block_on(a.resync_returned(&ctl)).expect("resync"),
        PassState::Done
    );
}

#[test]
fn a_returning_member_is_resynced_over_the_bitmap_before_it_is_read() {
    for (level, n, gone) in [
        (Level::Raid1, 2, 1),
        (Level::Raid5, 4, 2),
        (Level::Raid6, 5, 0),
    ] {
        let d: Vec<Arc<Switch>> = (0..n).map(Switch::new).collect();
        let a = create(level, &d, true);
        let model = fill_then_lose(&a, &d, gone);
        let cap = a.volume().capacity();

        // Still away: nothing happens.
        assert!(matches!(block_on(a.readd(gone)), Ok(Readd::Unreachable(_))));
        assert!(a.volume().member_is_failed(gone));

        d[gone].down.store(false, SeqCst);
        d[gone].data_reads.store(0, SeqCst);
        let Readd::Resync { bytes } = block_on(a.readd(gone)).expect("readd") else {
            panic!("{level:?}: not resynced over the bitmap");
        };
        // Two regions were written while it was away: two bitmap chunks (whole stripes).
        let width = a.volume().geometry().full_stripe_width().unwrap_or(4096);
        assert!(
            bytes >= 2 * CHUNK && bytes <= 2 * (CHUNK + width),
            "{level:?}: {bytes} bytes to resync"
        );
        assert_eq!(a.returning(), vec![(gone, bytes)]);
        assert!(!a.volume().member_is_failed(gone) && !a.volume().member_is_current(gone));
        // Served without it: its stale bytes are never read.
        assert!(read_all(&a) == model, "{level:?}: reads before the resync");
        assert_eq!(
            d[gone].data_reads.load(SeqCst),
            0,
            "{level:?}: stale member read"
        );

        let written_before = d[gone].counters().snapshot().write_bytes;
        resync(&a);
        let written = d[gone].counters().snapshot().write_bytes - written_before;
        assert!(
            written < cap / 4,
            "{level:?}: {written} bytes written to the returning member"
        );
        assert!(a.volume().member_is_current(gone), "{level:?}: not current");
        assert!(!a.volume().is_degraded());
        assert!(a.returning().is_empty());
        assert!(read_all(&a) == model, "{level:?}: reads after the resync");
        if level == Level::Raid1 {
            assert!(d[0].region() == d[1].region(), "the copies differ");
        }
        // Every other member may go: the returned one carries its share.
        let other = (gone + 1) % n;
        a.volume().fail_member(other, "test");
        assert!(
            read_all(&a) == model,
            "{level:?}: reads without member {other}"
        );

        // A clean stop and a restart: all members current, nothing resynced.
        block_on(a.mark_clean()).expect("clean");
        drop(a);
        d[other].data_reads.store(0, SeqCst);
        let (a, report) = reopen(level, &d);
        assert!(
            report.resynced_roles.is_empty() && report.absent_roles == vec![other],
            "{level:?}: {report:?}"
        );
        assert!(a.volume().member_is_current(gone));
        assert!(read_all(&a) == model, "{level:?}: after the restart");
    }
}

/// A returning member (the daemon's re-add watcher) and a hot spare (its spare watcher)
/// reach one failed role at once: whichever takes the role, the other stands aside without
/// writing anything, and the volume reads back. Each side looks at the role again under the
/// records' lock, which the other holds while it takes the role.
#[test]
fn a_returning_member_and_a_spare_racing_for_one_role_leave_each_other_alone() {
    // The re-add first: the spare's placement waits for the records' lock behind it (a
    // commit on a slow member holds the lock while both arrive).
    let (d, a, model) = lost_and_back(Level::Raid5, 4, 2);
    let spare = Switch::new(9);
    a.add_spare(metas(std::slice::from_ref(&spare)).remove(0))
        .expect("spare");
    d[0].slow.store(true, SeqCst);
    let (clean, readd, used) =
        block_on(async { futures::join!(a.mark_clean(), a.readd(2), a.use_spares()) });
    d[0].slow.store(false, SeqCst);
    clean.expect("the commit that held the lock");
    assert!(matches!(readd, Ok(Readd::Resync { .. })), "{readd:?}");
    assert_eq!(used.expect("the spare stands aside"), Vec::<usize>::new());
    assert_eq!(a.spare_count(), 1, "the spare is a spare again");
    assert_eq!(
        spare.counters().snapshot().write_bytes,
        0,
        "nothing written on it"
    );
    resync(&a);
    assert!(a.volume().member_is_current(2));
    assert!(read_all(&a) == model, "after the re-add's resync");

    // The spare first: the re-add, slowed reading its member's superblock, finds the role
    // taken once it has the lock and is refused.
    let (d, a, model) = lost_and_back(Level::Raid5, 4, 2);
    d[2].slow.store(true, SeqCst);
    let spare = Switch::new(9);
    a.add_spare(metas(std::slice::from_ref(&spare)).remove(0))
        .expect("spare");
    let (readd, used) = block_on(async { futures::join!(a.readd(2), a.use_spares()) });
    let refused = readd.expect_err("the role was taken").to_string();
    assert!(refused.contains("has not failed"), "{refused}");
    assert_eq!(used.expect("spare placed"), vec![2]);
    assert!(a.returning().is_empty(), "nothing left to resync");
    let r = block_on(a.rebuild(&PassControl::new(0))).expect("rebuild");
    assert_eq!(r.completed, vec![2]);
    assert!(read_all(&a) == model, "after the rebuild onto the spare");
}

#[test]
fn a_member_back_blank_or_without_a_bitmap_is_rebuilt_whole() {
    for bitmap in [true, false] {
        let d: Vec<Arc<Switch>> = (0..2).map(Switch::new).collect();
        let a = create(Level::Raid1, &d, bitmap);
        let model = fill_then_lose(&a, &d, 1);
        if bitmap {
            // The server came back empty.
            d[1].inner.poke(0, &vec![0u8; METADATA_AREA_BYTES as usize]);
            d[1].inner
                .poke(METADATA_AREA_BYTES, &vec![0u8; REGION as usize]);
        }
        d[1].down.store(false, SeqCst);
        assert_eq!(block_on(a.readd(1)).expect("readd"), Readd::Rebuild);
        assert!(!a.volume().member_is_current(1));
        let ctl = PassControl::new(0);
        let r = block_on(a.rebuild(&ctl)).expect("rebuild");
        assert_eq!(r.completed, vec![1], "bitmap {bitmap}");
        assert!(
            d[0].region() == d[1].region(),
            "bitmap {bitmap}: copies differ"
        );
        assert!(read_all(&a) == model);
    }
}

#[test]
fn a_crash_before_the_resync_ends_leaves_the_role_failed_and_it_starts_over() {
    let (d, a, model) = lost_and_back(Level::Raid1, 2, 1);
    assert!(matches!(block_on(a.readd(1)), Ok(Readd::Resync { .. })));
    drop(a); // a crash before the pass
    let (a, report) = reopen(Level::Raid1, &d);
    assert_eq!(report.absent_roles, vec![1], "{report:?}");
    assert!(read_all(&a) == model);
    let Readd::Resync { bytes } = block_on(a.readd(1)).expect("readd") else {
        panic!("not resynced over the bitmap after the restart");
    };
    assert!(
        bytes >= 2 * CHUNK && bytes < a.volume().capacity() / 4,
        "{bytes}"
    );
    resync(&a);
    assert!(d[0].region() == d[1].region(), "the copies differ");
    assert!(read_all(&a) == model);
}

#[test]
fn a_member_with_another_arrays_records_is_refused() {
    let d: Vec<Arc<Switch>> = (0..2).map(Switch::new).collect();
    let a = create(Level::Raid1, &d, true);
    fill_then_lose(&a, &d, 1);
    // Someone created another array on it while it was away.
    d[1].down.store(false, SeqCst);
    d[1].inner.poke(0, &vec![0u8; METADATA_AREA_BYTES as usize]);
    let other = vec![d[1].clone(), Switch::new(9)];
    drop(create(Level::Raid1, &other, true));
    let e = block_on(a.readd(1)).expect_err("refused");
    assert!(e.to_string().contains("no record of this array"), "{e}");
    assert!(a.volume().member_is_failed(1));
    let e = block_on(a.readd(0)).expect_err("not failed");
    assert!(e.to_string().contains("has not failed"), "{e}");
}

#[test]
fn a_member_that_goes_away_again_during_the_resync_stays_failed_until_it_is_back() {
    for (level, n) in [(Level::Raid1, 2), (Level::Raid5, 3)] {
        let d: Vec<Arc<Switch>> = (0..n).map(Switch::new).collect();
        let a = create(level, &d, true);
        let model = fill_then_lose(&a, &d, 1);
        d[1].down.store(false, SeqCst);
        assert!(matches!(block_on(a.readd(1)), Ok(Readd::Resync { .. })));
        d[1].down.store(true, SeqCst);
        let ctl = PassControl::new(0);
        let r = block_on(a.resync_returned(&ctl));
        assert!(a.volume().member_is_failed(1), "{level:?}: {r:?}");
        assert!(a.returning().is_empty());
        assert!(read_all(&a) == model, "{level:?}: degraded again");
        d[1].down.store(false, SeqCst);
        assert!(matches!(block_on(a.readd(1)), Ok(Readd::Resync { .. })));
        resync(&a);
        assert!(a.volume().member_is_current(1));
        a.volume().fail_member(0, "test");
        assert!(read_all(&a) == model, "{level:?}: from the returned member");
    }
}

#[test]
fn a_member_unreachable_at_open_is_served_degraded_then_re_added_over_the_bitmap() {
    for (level, n, gone) in [
        (Level::Raid1, 2, 1),
        (Level::Raid5, 4, 2),
        (Level::Raid6, 5, 0),
    ] {
        let d: Vec<Arc<Switch>> = (0..n).map(Switch::new).collect();
        let a = create(level, &d, true);
        let cap = a.volume().capacity();
        let mut model = filled(&a);
        block_on(a.mark_clean()).expect("clean");
        drop(a);

        // Its server does not answer at open: never read, its role presumed.
        d[gone].down.store(true, SeqCst);
        let m: Vec<Option<Arc<MemberMeta>>> = d
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let member = s.clone() as Arc<dyn Member>;
                Some(if i == gone {
                    MemberMeta::unreachable(member, "connection refused".into())
                } else {
                    block_on(MemberMeta::load(member))
                })
            })
            .collect();
        let (a, report) =
            block_on(Array::open("vol", &tree(level, n), m, opts(), &|_, _| {})).expect("open");
        assert_eq!(report.absent_roles, vec![gone], "{level:?}: {report:?}");
        assert!(a.volume().member_is_failed(gone));
        write(&a, &mut model, 3 * MIB + 4 * KIB, 8 * KIB, 2);
        write(&a, &mut model, cap - 100 * KIB, 64 * KIB, 3);
        block_on(a.flush()).expect("flush degraded");
        assert!(matches!(block_on(a.readd(gone)), Ok(Readd::Unreachable(_))));

        // It answers: resynced over what the bitmap marks (its own record says where its
        // bitmap is), never read before.
        d[gone].down.store(false, SeqCst);
        d[gone].data_reads.store(0, SeqCst);
        let Readd::Resync { bytes } = block_on(a.readd(gone)).expect("readd") else {
            panic!("{level:?}: not resynced over the bitmap");
        };
        assert!(bytes >= 2 * CHUNK && bytes < cap / 4, "{level:?}: {bytes}");
        assert!(read_all(&a) == model, "{level:?}: reads before the resync");
        let written_before = d[gone].counters().snapshot().write_bytes;
        resync(&a);
        let written = d[gone].counters().snapshot().write_bytes - written_before;
        assert!(written < cap / 4, "{level:?}: {written} bytes written");
        assert_eq!(d[gone].data_reads.load(SeqCst), 0, "{level:?}: stale read");
        assert!(a.volume().member_is_current(gone), "{level:?}: not current");
        block_on(a.mark_clean()).expect("clean");
        drop(a);

        // Every member current after a restart, and the returned one carries its share.
        let (a, report) = reopen(level, &d);
        assert!(report.absent_roles.is_empty(), "{level:?}: {report:?}");
        let other = (gone + 1) % n;
        a.volume().fail_member(other, "test");
        assert!(
            read_all(&a) == model,
            "{level:?}: reads without member {other}"
        );
    }
}

/// Found by the crash simulator (`readd_sim`): the re-add put one failed member back
/// without telling the records' failure count, so the next member to fail matched the old
/// count, went unrecorded, and a restart trusted its stale copy.
#[test]
fn a_member_failing_during_the_re_add_is_recorded_before_writes_are_acknowledged() {
    let d: Vec<Arc<Switch>> = (0..3).map(Switch::new).collect();
    let a = create(Level::Raid1, &d, true);
    let mut model = fill_then_lose(&a, &d, 2);
    d[2].down.store(false, SeqCst);
    assert!(matches!(block_on(a.readd(2)), Ok(Readd::Resync { .. })));
    // Before the resync ran, member 0 goes; a write is acknowledged without it.
    d[0].down.store(true, SeqCst);
    write(&a, &mut model, 7 * MIB, 64 * KIB, 9);
    assert!(a.volume().member_is_failed(0));
    drop(a); // a crash; member 0's server comes back with its old bytes
    d[0].down.store(false, SeqCst);
    let (a, report) = reopen(Level::Raid1, &d);
    assert!(report.absent_roles.contains(&0), "{report:?}");
    assert!(read_all(&a) == model, "a stale copy was served");
}

/// A member back in the same life brings back its log ring, whose last entries describe
/// bands the array rewrote while it was away (unlogged: their stripes' parity was on it).
/// The log forgets bands the failed ring alone could replay (their memory would grow with
/// every band a degraded array writes), so it must mask that ring's entries before they can
/// be replayed: a crash after the re-add, with a data member absent at the restart, must
/// not replay them over the new bytes. RAID 5, and RAID 6 with the P ring's member away,
/// then the Q ring's.
#[test]
fn a_returning_members_old_log_entries_are_never_replayed_over_what_was_written_while_it_was_away()
{
    for (level, n, parity, ring) in [
        (Level::Raid5, 3, 1, Part::P),
        (Level::Raid6, 4, 2, Part::P),
        (Level::Raid6, 4, 2, Part::Q),
    ] {
        let roles = |stripe| StripeRoles::md(ParityLayout::LeftSymmetric, n, parity, stripe);
        let gone = match ring {
            Part::P => roles(0).p,
            Part::Q => roles(0).q.expect("RAID 6 has Q"),
        };
        // While it is away, writes go to stripes where it holds data: the resync then
        // rewrites data chunks, logged on other rings, and puts no batch on its ring.
        let holds_data = |stripe| roles(stripe).data.contains(&gone);
        old_entries_stay_masked(level, n, gone, roles(0).data[1], &holds_data);
    }
}

/// Which parity ring of stripe 0 goes away.
#[derive(Clone, Copy, Debug)]
enum Part {
    P,
    Q,
}

/// [`a_returning_members_old_log_entries_are_never_replayed_over_what_was_written_while_it_was_away`]
/// on `n` members of `level`: member `gone` holds a parity ring of stripe 0, member `absent`
/// its second data chunk; the writes while `gone` is away go to stripes `elsewhere` takes.
fn old_entries_stay_masked(
    level: Level,
    n: usize,
    gone: usize,
    absent: usize,
    elsewhere: &dyn Fn(u64) -> bool,
) {
    let what = format!("{level:?} of {n}, member {gone} away, {absent} absent at the restart");
    let d: Vec<Arc<Switch>> = (0..n).map(Switch::new).collect();
    let a = create(level, &d, true);
    let cap = a.volume().capacity();
    let mut model = filled(&a);
    block_on(a.flush()).expect("flush");
    // 64 KiB chunks: a read-modify-write of stripe 0's first sector puts an entry on the
    // rings of its parity members.
    let stripe_bytes = a.volume().geometry().full_stripe_width().expect("parity");
    write(&a, &mut model, 0, 4 * KIB, 2);
    block_on(a.flush()).expect("flush");
    // Member `gone` goes (a write to a stripe with a chunk on it finds it gone); stripe 0
    // is rewritten whole, unlogged; writes elsewhere move the other rings' tails on.
    d[gone].down.store(true, SeqCst);
    write(&a, &mut model, stripe_bytes, stripe_bytes, 3);
    assert!(a.volume().member_is_failed(gone), "{what}: not failed");
    write(&a, &mut model, 0, stripe_bytes, 4);
    let stripes = (1..).map(|i: u64| 1 + (i * 7) % (cap / stripe_bytes - 1));
    for (i, stripe) in (0..300u64).zip(stripes.filter(|&s| elsewhere(s))) {
        let at = stripe * stripe_bytes + 8 * KIB;
        write(&a, &mut model, at, 4 * KIB, 5 + i);
        if i % 50 == 49 {
            block_on(a.flush()).expect("flush degraded");
        }
    }
    block_on(a.flush()).expect("flush degraded");
    // Back, re-added, resynced: current again.
    d[gone].down.store(false, SeqCst);
    assert!(matches!(block_on(a.readd(gone)), Ok(Readd::Resync { .. })));
    resync(&a);
    assert!(a.volume().member_is_current(gone), "{what}: not current");
    assert!(read_all(&a) == model, "{what}: reads after the re-add");
    // A crash; the member holding a chunk of stripe 0 the old entry's partial parity
    // stands for is absent at the restart.
    drop(a);
    d[absent].down.store(true, SeqCst);
    let (a, report) = reopen(level, &d);
    assert_eq!(report.absent_roles, vec![absent], "{what}: {report:?}");
    assert!(read_all(&a) == model, "{what}: reads after the restart");
}

/// Opens "vol" on `d` with the members in `away` left out (never read: `None` when
/// `missing`, else unreachable), as a start elsewhere that could reach only the others.
fn open_without(level: Level, d: &[Arc<Switch>], away: &[usize], missing: bool) -> Array {
    let m: Vec<Option<Arc<MemberMeta>>> = (d.iter().enumerate())
        .map(|(i, s)| {
            let member = s.clone() as Arc<dyn Member>;
            match (away.contains(&i), missing) {
                (false, _) => Some(block_on(MemberMeta::load(member))),
                (true, true) => None,
                (true, false) => Some(MemberMeta::unreachable(member, "refused".into())),
            }
        })
        .collect();
    let t = tree(level, d.len());
    block_on(Array::open("vol", &t, m, opts(), &|_, _| {}))
        .expect("open without some members")
        .0
}

/// Split brain: a member the array set out is started on its own elsewhere (its peers
/// unreachable or missing there), maybe written there, then answers the array again. Its
/// bytes and the volume's have gone apart where the array's bitmap does not say (the
/// resync over it left its own writes in the mirror as bytes nobody wrote to this volume):
/// it is rebuilt whole. Its records, though more numerous, never win over the array's — a
/// crash before the rebuild, or a restart with it present before any re-add (assembly
/// names it), starts the volume from the array's bytes; after the rebuild every copy reads
/// the volume's.
#[test]
fn a_member_started_on_its_own_while_away_is_rebuilt_whole() {
    for (n, apart, missing, writes, restart_first) in [
        (2, vec![1], false, true, false),
        (2, vec![1], true, true, false),
        (3, vec![1, 2], false, true, false),
        (2, vec![1], false, false, false),
        (2, vec![1], false, true, true),
    ] {
        let what = format!(
            "{n}-way mirror, {apart:?} apart, missing {missing}, writes {writes}, restart first {restart_first}"
        );
        let d: Vec<Arc<Switch>> = (0..n).map(Switch::new).collect();
        let a = create(Level::Raid1, &d, true);
        let mut model = filled(&a);
        block_on(a.flush()).expect("flush");
        for &i in &apart {
            d[i].down.store(true, SeqCst);
        }
        write(&a, &mut model, 3 * MIB + 4 * KIB, 8 * KIB, 2);
        block_on(a.flush()).expect("flush degraded");
        for &i in &apart {
            assert!(a.volume().member_is_failed(i), "{what}: not failed");
            d[i].down.store(false, SeqCst);
        }
        // Started elsewhere on the members apart alone, and written there (more commits
        // than the array made since they left).
        let stay: Vec<usize> = (0..n).filter(|i| !apart.contains(i)).collect();
        let other = open_without(Level::Raid1, &d, &stay, missing);
        if writes {
            let mut theirs = model.clone();
            for k in 0..4 {
                write(&other, &mut theirs, 9 * MIB + k * MIB, 64 * KIB, 7 + k);
                block_on(other.mark_clean()).expect("clean elsewhere");
            }
        }
        drop(other);
        let a = if restart_first {
            // The daemon was down when they came back: a restart with every member, the
            // array's life the longer (at equal events the two are refused as split brain).
            for k in 0..6 {
                write(&a, &mut model, 10 * MIB + k * MIB, 4 * KIB, 20 + k);
                block_on(a.mark_clean()).expect("clean");
            }
            drop(a);
            let (a, report) = reopen(Level::Raid1, &d);
            assert_eq!(report.absent_roles, apart, "{what}: {report:?}");
            let said = |w: &&String| w.contains("split brain");
            let named = report.warnings.iter().filter(said).count();
            assert_eq!(named, apart.len(), "{what}: {report:?}");
            a
        } else {
            a
        };
        for &i in &apart {
            assert_eq!(block_on(a.readd(i)).expect(&what), Readd::Rebuild, "{what}");
        }
        // A crash before the rebuild: the array's records still win.
        drop(a);
        let (a, _) = reopen(Level::Raid1, &d);
        assert!(
            read_all(&a) == model,
            "{what}: the volume after the restart"
        );
        let r = block_on(a.rebuild(&PassControl::new(0))).expect("rebuild");
        assert_eq!(r.completed, apart, "{what}");
        for &i in &stay {
            a.volume().fail_member(i, "test");
        }
        assert!(read_all(&a) == model, "{what}: from the members rebuilt");
    }
}

/// A member that only went away is resynced over the bitmap as before: unreachable at a
/// start and back before anything was written.
#[test]
fn a_member_unreachable_at_a_start_is_not_taken_for_one_started_apart() {
    let d: Vec<Arc<Switch>> = (0..2).map(Switch::new).collect();
    let a = create(Level::Raid1, &d, true);
    let model = filled(&a);
    block_on(a.mark_clean()).expect("clean");
    drop(a);
    d[1].down.store(true, SeqCst);
    let a = open_without(Level::Raid1, &d, &[1], false);
    d[1].down.store(false, SeqCst);
    let r = block_on(a.readd(1)).expect("an untouched member comes back");
    assert!(matches!(r, Readd::Resync { .. }), "{r:?}");
    resync(&a);
    assert!(a.volume().member_is_current(1));
    a.volume().fail_member(0, "test");
    assert!(read_all(&a) == model, "reads from the returned member");
}

/// Members whose record cannot say what they missed — one that left while a peer was out
/// (the peer back first), one away while a peer was replaced (its role has another member
/// now) — are rebuilt whole, and read the volume's bytes after.
#[test]
fn a_member_whose_peers_changed_while_it_was_away_is_rebuilt_whole() {
    for replaced in [false, true] {
        let d: Vec<Arc<Switch>> = (0..4).map(Switch::new).collect();
        let a = create(Level::Raid1, &d[..3], true);
        let mut model = filled(&a);
        block_on(a.flush()).expect("flush");
        d[2].down.store(true, SeqCst);
        write(&a, &mut model, 3 * MIB, 8 * KIB, 2);
        block_on(a.flush()).expect("flush");
        d[1].down.store(true, SeqCst);
        write(&a, &mut model, 5 * MIB, 8 * KIB, 3);
        block_on(a.flush()).expect("flush");
        assert!(a.volume().member_is_failed(1) && a.volume().member_is_failed(2));
        if replaced {
            let new = block_on(MemberMeta::load(d[3].clone() as Arc<dyn Member>));
            block_on(a.rebuild_onto(2, new)).expect("a new member in role 2");
            block_on(a.rebuild(&PassControl::new(0))).expect("rebuild");
        } else {
            d[2].down.store(false, SeqCst);
            assert!(matches!(block_on(a.readd(2)), Ok(Readd::Resync { .. })));
            resync(&a);
        }
        assert!(a.volume().member_is_current(2), "replaced {replaced}");
        d[1].down.store(false, SeqCst);
        let r = block_on(a.readd(1)).expect("back");
        assert_eq!(r, Readd::Rebuild, "replaced {replaced}");
        let r = block_on(a.rebuild(&PassControl::new(0))).expect("rebuild");
        assert_eq!(r.completed, vec![1], "replaced {replaced}");
        a.volume().fail_member(0, "test");
        a.volume().fail_member(2, "test");
        assert!(read_all(&a) == model, "replaced {replaced}: from member 1");
    }
}

/// A new member that fails before its rebuild finished and comes back holds the volume only
/// below its checkpoint, which no bitmap says: it is rebuilt whole (a resync over the
/// bitmap's regions made it current with everything above unwritten). RAID 1 and RAID 5.
#[test]
fn a_member_that_failed_while_it_was_being_rebuilt_is_rebuilt_whole_when_it_comes_back() {
    for (level, n) in [(Level::Raid1, 2usize), (Level::Raid5, 3)] {
        let d: Vec<Arc<Switch>> = (0..=n).map(Switch::new).collect();
        let a = create(level, &d[..n], true);
        let mut model = filled(&a);
        block_on(a.flush()).expect("flush");
        d[1].down.store(true, SeqCst);
        write(&a, &mut model, 3 * MIB, 8 * KIB, 2);
        block_on(a.flush()).expect("flush");
        assert!(a.volume().member_is_failed(1));
        let new = block_on(MemberMeta::load(d[n].clone() as Arc<dyn Member>));
        block_on(a.rebuild_onto(1, new)).expect("a new member in role 1");
        // The new member goes away before its rebuild ran.
        d[n].down.store(true, SeqCst);
        write(&a, &mut model, 5 * MIB, 8 * KIB, 3);
        block_on(a.flush()).expect("flush");
        assert!(a.volume().member_is_failed(1));
        d[n].down.store(false, SeqCst);
        assert_eq!(
            block_on(a.readd(1)).expect("back"),
            Readd::Rebuild,
            "{level:?}"
        );
        let r = block_on(a.rebuild(&PassControl::new(0))).expect("rebuild");
        assert_eq!(r.completed, vec![1], "{level:?}");
        a.volume().fail_member(0, "test");
        assert!(read_all(&a) == model, "{level:?}: without member 0");
    }
}

// Found by a review of the rebuild fix: passes that made a member current that was not theirs.

async fn sleep_ms(ms: u64) {
    nbraid_core::timer::sleep(Duration::from_millis(ms)).await;
}

/// A member re-added over the bitmap fails again mid-resync and the spare watcher puts a
/// spare in the role: the resync's end must not make the spare current.
#[test]
fn a_spare_put_in_a_returning_role_mid_resync_is_not_made_current_by_it() {
    let (d, a, mut model) = lost_and_back(Level::Raid5, 4, 2);
    for i in 0..8u64 {
        write(&a, &mut model, i * 2 * MIB, 512 * KIB, 7 + i);
    }
    let Readd::Resync { bytes } = block_on(a.readd(2)).expect("readd") else {
        panic!("not resynced");
    };
    let spare = Switch::new(9);
    a.add_spare(metas(std::slice::from_ref(&spare)).remove(0))
        .expect("spare");
    let ctl = PassControl::new(bytes * 2);
    let flap = async {
        while ctl.position_bytes() == 0 {
            sleep_ms(1).await;
        }
        d[2].down.store(true, SeqCst);
        a.volume().fail_member(2, "test: gone again");
        assert_eq!(a.use_spares().await.expect("use"), vec![2]);
    };
    let (r, ()) = block_on(futures::future::join(a.resync_returned(&ctl), flap));
    r.expect("resync");
    assert!(
        !a.volume().member_is_current(2),
        "the spare made current by the resync"
    );
    assert_eq!(a.rebuilding(), vec![(2, 0)]);
    let done = block_on(a.rebuild(&PassControl::new(0))).expect("rebuild");
    assert_eq!(done.completed, vec![2]);
    a.volume().fail_member(0, "test");
    assert!(read_all(&a) == model, "without member 0");
}

/// A re-added member fails again mid-resync and is re-added again (the daemon probes remote
/// members every second) while the first pass runs on: that pass's end must not make it
/// current (it skipped windows while the member was out, and the regions written meanwhile
/// lie behind it).
#[test]
fn a_member_re_added_twice_during_one_resync_is_not_made_current_missing_bytes() {
    let (d, a, mut model) = lost_and_back(Level::Raid5, 4, 2);
    for i in 0..8u64 {
        write(&a, &mut model, i * 2 * MIB, 512 * KIB, 7 + i);
    }
    let Readd::Resync { bytes } = block_on(a.readd(2)).expect("readd") else {
        panic!("not resynced");
    };
    let ctl = PassControl::new(bytes * 2);
    let flap = async {
        while ctl.position_bytes() == 0 {
            sleep_ms(1).await;
        }
        d[2].down.store(true, SeqCst);
        a.volume().fail_member(2, "test: gone again");
        while ctl.position_bytes() < bytes / 2 {
            sleep_ms(1).await;
        }
        d[2].down.store(false, SeqCst);
        let again = a.readd(2).await;
        assert!(matches!(again, Ok(Readd::Resync { .. })), "{again:?}");
    };
    let (r, ()) = block_on(futures::future::join(a.resync_returned(&ctl), flap));
    assert_eq!(r.expect("resync"), PassState::Done);
    assert!(
        a.volume().member_is_current(2),
        "current after the second re-add's pass"
    );
    assert!(a.returning().is_empty());
    a.volume().fail_member(0, "test");
    assert!(read_all(&a) == model, "without member 0");
}

/// The first replacement's disk dies mid-pass (dropped); the operator starts a second
/// replace of the same role while the pass runs on: it must not be swapped in with the bytes
/// below the pass's position never copied.
#[test]
fn a_second_replacement_started_mid_pass_is_not_swapped_in_half_copied() {
    let d: Vec<Arc<Switch>> = (0..4).map(Switch::new).collect();
    let a = create(Level::Raid5, &d, true);
    let model = filled(&a);
    let (r1, r2) = (Switch::new(8), Switch::new(9));
    block_on(a.replace(0, metas(std::slice::from_ref(&r1)).remove(0))).expect("replace");
    let r2_meta = metas(std::slice::from_ref(&r2)).remove(0);
    let cap = a.volume().capacity();
    let ctl = PassControl::new(cap * 2);
    let redo = async {
        while ctl.position_bytes() < cap / 2 {
            sleep_ms(1).await;
        }
        r1.down.store(true, SeqCst);
        while a.volume().replacement(0).is_some() {
            sleep_ms(1).await;
        }
        a.replace(0, r2_meta).await.expect("second replace");
    };
    let (r, ()) = block_on(futures::future::join(a.rebuild(&ctl), redo));
    assert_eq!(r.expect("rebuild").completed, vec![0], "by a second pass");
    let swapped = Arc::ptr_eq(&a.volume().member(0), &(r2.clone() as Arc<dyn Member>));
    assert!(swapped, "the second replacement holds the role");
    assert!(read_all(&a) == model, "swapped in half copied");
    a.volume().fail_member(1, "test");
    assert!(read_all(&a) == model, "without member 1");
}

// Matrix RAID: volumes "a" and "b" on the same three members, as a daemon's volumes share
// each member file and its `MemberMeta` (one superblock holding both volumes' records).

const MATRIX: [&str; 2] = ["a", "b"];

/// Matrix volume `k`'s tree: RAID 5 over `n` members, its regions after the volumes before it.
fn matrix_tree(k: usize, n: usize) -> Node {
    tree_at(Level::Raid5, n, METADATA_AREA_BYTES + k as u64 * REGION)
}

/// `n` members with both Matrix volumes on them (one `MemberMeta` per member, shared), each
/// volume filled and recorded clean. Returns the members, the volumes and their models.
fn matrix(n: usize) -> (Vec<Arc<Switch>>, Vec<Array>, Vec<Vec<u8>>) {
    let len = METADATA_AREA_BYTES + MATRIX.len() as u64 * REGION;
    let d: Vec<Arc<Switch>> = (0..n).map(|i| Switch::sized(i, len)).collect();
    let m = metas(&d);
    let mut volumes = Vec::new();
    let mut models = Vec::new();
    for (k, name) in MATRIX.iter().enumerate() {
        let created = Array::create(name, matrix_tree(k, n), m.clone(), opts(), true, &|_, _| {});
        let v = block_on(created).expect("create").0;
        models.push(filled(&v));
        block_on(v.mark_clean()).expect("clean");
        volumes.push(v);
    }
    (d, volumes, models)
}

/// Both volumes opened again over fresh loads of `d` (shared by both, as a restart does).
fn reopen_matrix(d: &[Arc<Switch>]) -> Vec<(Array, OpenReport)> {
    let m: Vec<Option<Arc<MemberMeta>>> = metas(d).into_iter().map(Some).collect();
    (MATRIX.iter().enumerate())
        .map(|(k, name)| {
            let t = matrix_tree(k, d.len());
            block_on(Array::open(name, &t, m.clone(), opts(), &|_, _| {})).expect(name)
        })
        .collect()
}

/// Member `r`'s superblock, read from the disk, holds each volume's own record in role `r`
/// at the volume's events, naming the member's id there, active.
fn holds_both_records(d: &[Arc<Switch>], r: usize, volumes: &[Array], what: &str) {
    let sb = match block_on(read_superblock(&*d[r])).expect("read") {
        Found::Superblock(sb, _) => sb,
        Found::Blank => panic!("{what}: member {r} is blank"),
    };
    for v in volumes {
        let Some(rec) = (sb.volumes.iter()).find(|x| x.array == v.id() && x.name == v.name())
        else {
            panic!("{what}: member {r} holds no record of `{}`", v.name());
        };
        assert_eq!(rec.role as usize, r, "{what}: `{}`", v.name());
        assert_eq!(rec.events, block_on(v.events()), "{what}: `{}`", v.name());
        let entry = rec.members[r];
        assert_eq!(
            entry.uuid,
            sb.member,
            "{what}: `{}` names another id",
            v.name()
        );
        assert_eq!(entry.state, RecordedState::Active, "{what}: `{}`", v.name());
    }
}

/// Both volumes read their models, then again without member `other` (from the member
/// that came back), then after a restart with every member present.
fn both_read_back(d: &[Arc<Switch>], volumes: Vec<Array>, models: &[Vec<u8>], other: usize) {
    for (v, model) in volumes.iter().zip(models) {
        assert!(read_all(v) == *model, "`{}`", v.name());
        block_on(v.mark_clean()).expect("clean");
    }
    drop(volumes);
    for ((v, report), model) in reopen_matrix(d).into_iter().zip(models) {
        assert!(report.absent_roles.is_empty(), "`{}`: {report:?}", v.name());
        v.volume().fail_member(other, "test");
        assert!(read_all(&v) == *model, "`{}` without {other}", v.name());
    }
}

/// A member of both volumes goes away, both fail it, it comes back as it left: each volume
/// re-adds it over its own bitmap, and the member ends up holding both records, current.
#[test]
fn a_matrix_member_back_intact_is_resynced_into_both_volumes() {
    let (d, v, mut models) = matrix(3);
    d[2].down.store(true, SeqCst);
    for (k, x) in v.iter().enumerate() {
        write(x, &mut models[k], 3 * MIB + 4 * KIB, 8 * KIB, 2 + k as u64);
        block_on(x.flush()).expect("flush degraded");
        assert!(x.volume().member_is_failed(2), "`{}`", x.name());
    }
    d[2].down.store(false, SeqCst);
    for x in &v {
        let r = block_on(x.readd(2)).expect("readd");
        assert!(matches!(r, Readd::Resync { .. }), "`{}`: {r:?}", x.name());
    }
    for x in &v {
        resync(x);
        assert!(x.volume().member_is_current(2), "`{}`", x.name());
    }
    holds_both_records(&d, 2, &v, "intact");
    both_read_back(&d, v, &models, 0);
}

/// A member of both volumes comes back blank (a restarted `nbdkit memory` export): whichever
/// volume re-adds it first rebuilds it whole and writes its record there; the other, told
/// the first is its sibling on the member, rebuilds it into its own role beside that record
/// (before, it was refused — "carries no record of this array", the advice to wipe a disk
/// the first volume had just rebuilt — and stayed degraded). Told no sibling, it refuses.
#[test]
fn a_matrix_member_back_blank_is_rebuilt_into_every_volume_that_had_it() {
    for first in [0, 1] {
        let (d, v, mut models) = matrix(3);
        d[2].down.store(true, SeqCst);
        for (k, x) in v.iter().enumerate() {
            write(x, &mut models[k], 5 * MIB, 8 * KIB, 4 + k as u64);
            block_on(x.flush()).expect("flush degraded");
        }
        let len = d[2].len() as usize;
        d[2].inner.poke(0, &vec![0u8; len]);
        d[2].down.store(false, SeqCst);
        let (one, two) = (&v[first], &v[1 - first]);
        assert_eq!(block_on(one.readd(2)).expect("first"), Readd::Rebuild);
        let e = block_on(two.readd(2)).expect_err("no sibling named");
        assert!(e.to_string().contains("no record of this array"), "{e}");
        let r = block_on(two.readd_with_siblings(2, &[one.id()]));
        assert_eq!(
            r.expect("beside its sibling"),
            Readd::Rebuild,
            "first {first}"
        );
        for x in &v {
            let done = block_on(x.rebuild(&PassControl::new(0))).expect("rebuild");
            assert_eq!(done.completed, vec![2], "first {first}: `{}`", x.name());
        }
        holds_both_records(&d, 2, &v, &format!("blank, first {first}"));
        both_read_back(&d, v, &models, 1);
    }
}

/// A member of both volumes fails in "a" only ("b" wrote nothing while it was away), and
/// comes back blank: "a" rebuilds it and writes its own record there. "b"'s next commit
/// finds no record of "b" on it: the member is failed in "b" (before, the commit said it
/// succeeded without writing "b"'s record, "b" kept the member current and served the
/// zeroes of its blank region as data), and "b" rebuilds it once re-added beside "a".
#[test]
fn a_commit_fails_a_member_that_holds_no_record_of_the_volume() {
    let (d, v, mut models) = matrix(3);
    d[2].down.store(true, SeqCst);
    write(&v[0], &mut models[0], 5 * MIB, 8 * KIB, 4);
    block_on(v[0].flush()).expect("flush degraded");
    assert!(v[0].volume().member_is_failed(2));
    assert!(v[1].volume().member_is_current(2), "b saw nothing");
    let len = d[2].len() as usize;
    d[2].inner.poke(0, &vec![0u8; len]);
    d[2].down.store(false, SeqCst);
    assert_eq!(block_on(v[0].readd(2)).expect("readd"), Readd::Rebuild);
    let done = block_on(v[0].rebuild(&PassControl::new(0))).expect("rebuild");
    assert_eq!(done.completed, vec![2]);

    // "b"'s first write commits the volume dirty.
    write(&v[1], &mut models[1], 7 * MIB, 8 * KIB, 5);
    assert!(
        v[1].volume().member_is_failed(2),
        "b committed to a member without its record"
    );
    assert!(read_all(&v[1]) == models[1], "b served a blank member");
    let r = block_on(v[1].readd_with_siblings(2, &[v[0].id()]));
    assert_eq!(r.expect("beside a"), Readd::Rebuild);
    let done = block_on(v[1].rebuild(&PassControl::new(0))).expect("rebuild");
    assert_eq!(done.completed, vec![2]);
    holds_both_records(&d, 2, &v, "b failed at its commit");
    both_read_back(&d, v, &models, 0);
}

/// Both volumes re-add the blank member at once (the daemon probes each volume's failed
/// members on its own, every second): one at a time they put it in their roles, so it ends
/// with one id that both records name and their areas apart. (Before, each took an id of
/// its own and placed its bitmap at the same offset, blind to the other's record: the
/// member's id then matched one volume's record only, and each volume's bitmap wrote over
/// the other's.)
#[test]
fn a_matrix_member_back_blank_re_added_by_both_volumes_at_once_gets_one_id_and_apart_areas() {
    let (d, v, mut models) = matrix(3);
    d[2].down.store(true, SeqCst);
    for (k, x) in v.iter().enumerate() {
        write(x, &mut models[k], 5 * MIB, 8 * KIB, 4 + k as u64);
        block_on(x.flush()).expect("flush degraded");
    }
    let len = d[2].len() as usize;
    d[2].inner.poke(0, &vec![0u8; len]);
    d[2].down.store(false, SeqCst);
    // Slow: each re-add's member reads and writes yield, so the two interleave.
    d[2].slow.store(true, SeqCst);
    let (of_a, of_b) = ([v[1].id()], [v[0].id()]);
    let (ra, rb) = block_on(async {
        futures::join!(
            v[0].readd_with_siblings(2, &of_a),
            v[1].readd_with_siblings(2, &of_b)
        )
    });
    d[2].slow.store(false, SeqCst);
    assert_eq!(ra.expect("a"), Readd::Rebuild);
    assert_eq!(rb.expect("b"), Readd::Rebuild);
    for x in &v {
        let done = block_on(x.rebuild(&PassControl::new(0))).expect("rebuild");
        assert_eq!(done.completed, vec![2], "`{}`", x.name());
    }
    holds_both_records(&d, 2, &v, "re-added at once");
    let Found::Superblock(sb, _) = block_on(read_superblock(&*d[2])).expect("read") else {
        panic!("blank");
    };
    let areas: Vec<(u64, u64)> = (sb.volumes.iter())
        .flat_map(|r| [r.bitmap.map(|b| b.area), r.ppl, r.checksums])
        .flatten()
        .map(|a| (a.offset, a.offset + a.len))
        .collect();
    for (i, x) in areas.iter().enumerate() {
        for y in &areas[i + 1..] {
            assert!(x.1 <= y.0 || y.1 <= x.0, "areas {x:?} and {y:?} overlap");
        }
    }
    both_read_back(&d, v, &models, 0);
}
