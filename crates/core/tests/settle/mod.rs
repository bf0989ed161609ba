//! What the settle tests share (`settle_in_pieces.rs`, `settle_in_pieces_failing.rs`): a
//! volume whose log's P (and Q) ring is full of entries a dirty start may replay, over
//! memory members that may start failing their writes partway through a run; the run —
//! zeroing the whole volume, or writing it whole in write-back and flushing — on a thread
//! that must end within a minute; a dirty reopen from the same members.
#![allow(dead_code)]

use crate::common::{pass_through, KIB, MIB};
use futures::executor::block_on;
use futures::future::BoxFuture;
use nbraid_core::metadata::{Array, ArrayOptions, MemberMeta, OpenReport, METADATA_AREA_BYTES};
use nbraid_core::ppl::LogStats;
use nbraid_core::{Buf, CacheMode, Member, MemberResult, MemoryMember, SharedBuf};
use nbraid_core::{VolumeOptions, VolumeResult, MAX_REQUEST_BYTES};
use nbraid_layout::{Level, Node, ParityGroup, ParityLayout, Region, Shape};
use nbraid_sim::{FaultOps, Faulty};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A volume the tests run over, and the log entries left before the run.
#[derive(Clone, Copy, Debug)]
pub struct Geo {
    pub level: Level,
    pub members: usize,
    pub strip: u64,
    /// The log's reserve before the region: one ring per member, half of which (one round's
    /// batch) takes `(reserve / 2 - 64) / 40` entries without partial parity.
    pub log_reserve: u64,
    /// Each member's region.
    pub region: u64,
    /// Stripes written before the run, all with their P on member 0 (a read-modify-write,
    /// logged): more entries to settle than one round takes.
    pub written: u64,
    /// Bytes written into data chunk 0 of each, from its start: a sector (one band), or the
    /// whole chunk (an entry for every band of the strip).
    pub each: u64,
}

/// RAID 5 of 3, 4 KiB strips, a 64 KiB reserve (~800 entries a piece), 1,200 stripes a
/// sector each: the first geometry these tests ran.
pub const RAID5: Geo = Geo {
    level: Level::Raid5,
    members: 3,
    strip: 4 * KIB,
    log_reserve: 64 * KIB,
    region: 16 * MIB,
    written: 1200,
    each: 512,
};

/// RAID 6 of 4, 4 KiB strips, a 32 KiB reserve (~400 entries a piece on each of the P and
/// Q rings), 1,200 stripes a sector each (stripes with P on member 0 have Q on one other
/// member: both rings fill, the other two take nothing and keep the log's floor low).
pub const RAID6: Geo = Geo {
    level: Level::Raid6,
    members: 4,
    strip: 4 * KIB,
    log_reserve: 32 * KIB,
    region: 24 * MIB,
    written: 1200,
    each: 512,
};

impl Geo {
    pub fn tree(&self) -> Node {
        let shape = Shape::new(
            self.level,
            self.members,
            None,
            self.strip,
            ParityLayout::LeftSymmetric,
        )
        .expect("shape");
        let start = METADATA_AREA_BYTES + self.log_reserve;
        let regions = vec![
            Region {
                start,
                len: self.region
            };
            self.members
        ];
        shape.build(&regions).expect("tree")
    }

    pub fn group(&self) -> ParityGroup {
        nbraid_core::ppl::parity_groups(&self.tree()).remove(0).0
    }

    pub fn options(&self, cache: CacheMode) -> ArrayOptions {
        ArrayOptions {
            ppl_area_before_region_bytes: Some(self.log_reserve),
            volume: VolumeOptions {
                cache,
                cache_max_age: None,
                ..VolumeOptions::default()
            },
            ppl: true,
            ..ArrayOptions::default()
        }
    }

    pub fn member_bytes(&self) -> u64 {
        METADATA_AREA_BYTES + self.log_reserve + self.region
    }

    /// Where each member keeps its ring.
    pub fn ring(&self) -> Range<u64> {
        METADATA_AREA_BYTES..METADATA_AREA_BYTES + self.log_reserve
    }

    /// Where each member keeps the volume's chunks.
    pub fn data(&self) -> Range<u64> {
        let start = METADATA_AREA_BYTES + self.log_reserve;
        start..start + self.region
    }

    /// The stripes written before the run: the first `written` with their P on member 0.
    pub fn written_stripes(&self) -> Vec<u64> {
        let g = self.group();
        (0..)
            .filter(|&s| g.roles(s).p == 0)
            .take(self.written as usize)
            .collect()
    }

    /// Entries those writes left for the run to settle (one a band each wrote).
    pub fn entries(&self) -> u64 {
        self.written * self.each.div_ceil(nbraid_core::ppl::BAND_BYTES)
    }
}

/// A memory member that starts failing its writes partway through a run: once armed, it
/// lets a number of writes (zeroings among them) into an area through and fails the next
/// one and every write after it — its `Faulty` member told `fail_after(WRITE, 0)` then.
/// Reads still answer, as from a disk whose writes fail.
pub struct Dying {
    pub inner: Faulty<MemoryMember>,
    /// The area watched and how many more writes into it go through; `None`: not armed.
    trigger: Mutex<Option<(Range<u64>, u64)>>,
    died: AtomicBool,
}

impl Dying {
    pub fn new(name: String, len: u64, seed: u64) -> Dying {
        Dying {
            inner: Faulty::new(MemoryMember::new(name, len), seed),
            trigger: Mutex::new(None),
            died: AtomicBool::new(false),
        }
    }

    /// From now on: `through` more writes into `area` go through, the next one fails and so
    /// does every write after it.
    pub fn arm(&self, area: Range<u64>, through: u64) {
        *self.trigger.lock().unwrap() = Some((area, through));
    }

    /// Whether its writes started failing.
    pub fn died(&self) -> bool {
        self.died.load(Ordering::SeqCst)
    }

    fn watch(&self, offset: u64, len: u64) {
        let mut trigger = self.trigger.lock().unwrap();
        let Some((area, through)) = trigger.as_mut() else {
            return;
        };
        if !(offset < area.end && area.start < offset + len.max(1)) {
            return;
        }
        if *through > 0 {
            *through -= 1;
            return;
        }
        self.inner.fail_after(FaultOps::WRITE, 0);
        self.died.store(true, Ordering::SeqCst);
        *trigger = None;
    }
}

impl Member for Dying {
    fn write(&self, offset: u64, data: SharedBuf, fua: bool) -> BoxFuture<'_, MemberResult<()>> {
        self.watch(offset, data.len() as u64);
        self.inner.write(offset, data, fua)
    }
    fn write_zeroes(&self, offset: u64, len: u64) -> BoxFuture<'_, MemberResult<()>> {
        self.watch(offset, len);
        self.inner.write_zeroes(offset, len)
    }
    fn trim(&self, offset: u64, len: u64) -> BoxFuture<'_, MemberResult<()>> {
        self.watch(offset, len);
        self.inner.trim(offset, len)
    }
    pass_through!(inner; name len read flush counters);
}

/// Memory members for `geo` (memory-backed: the log cycles through a small window of them).
pub fn memory_members(geo: &Geo) -> Vec<Arc<dyn Member>> {
    (0..geo.members)
        .map(|i| {
            let m = MemoryMember::new(format!("disk{i}"), geo.member_bytes());
            Arc::new(m) as Arc<dyn Member>
        })
        .collect()
}

/// Members for `geo` that may be told to die.
pub fn dying_members(geo: &Geo) -> Vec<Arc<Dying>> {
    (0..geo.members)
        .map(|i| Arc::new(Dying::new(format!("disk{i}"), geo.member_bytes(), i as u64)))
        .collect()
}

fn metas(members: &[Arc<dyn Member>]) -> Vec<Arc<MemberMeta>> {
    (members.iter())
        .map(|m| block_on(MemberMeta::load(m.clone())))
        .collect()
}

/// The volume of `geo` with the log in its reserve, created over `members` (blank).
pub fn create(geo: &Geo, cache: CacheMode, members: &[Arc<dyn Member>]) -> Array {
    let o = geo.options(cache);
    block_on(Array::create(
        "vol",
        geo.tree(),
        metas(members),
        o,
        true,
        &|_, _| {},
    ))
    .expect("create")
    .0
}

/// The volume of `geo` opened again from `members` but those in `without` (missing), after
/// its records were left dirty (a crash), with what the open did.
pub fn reopen(
    geo: &Geo,
    cache: CacheMode,
    members: &[Arc<dyn Member>],
    without: &[usize],
) -> (Array, OpenReport) {
    let metas = (metas(members).into_iter().enumerate())
        .map(|(i, m)| (!without.contains(&i)).then_some(m))
        .collect();
    let o = geo.options(cache);
    block_on(Array::open("vol", &geo.tree(), metas, o, &|_, _| {})).expect("reopened")
}

pub fn pattern(seed: u64, len: usize) -> Buf {
    let mut b = Buf::new(len);
    for (i, x) in b.iter_mut().enumerate() {
        *x = (seed as usize * 131 + i * 7 + i / 4096) as u8;
    }
    b
}

/// Writes `bytes` from byte 0 of the volume, in requests as long as a volume takes.
pub fn write_whole(a: &Array, bytes: &[u8]) -> VolumeResult<()> {
    for (i, piece) in bytes.chunks(MAX_REQUEST_BYTES as usize).enumerate() {
        let at = i as u64 * MAX_REQUEST_BYTES;
        block_on(a.write(at, Buf::copy_from(piece), false))?;
    }
    Ok(())
}

/// Reads the first `len` bytes of the volume, in requests as long as a volume takes.
pub fn read_whole(a: &Array, len: u64) -> VolumeResult<Vec<u8>> {
    let mut out = Vec::with_capacity(len as usize);
    let mut at = 0;
    while at < len {
        let n = (len - at).min(MAX_REQUEST_BYTES);
        out.extend_from_slice(&block_on(a.read(at, n))?);
        at += n;
    }
    Ok(out)
}

/// Writes the whole volume with `pattern(1, ..)` and flushes (whole stripes: nothing
/// logged), so the partial parity the log keeps of the writes after is not zero and a
/// wrong replay shows; the volume's bytes.
pub fn fill(a: &Array) -> Vec<u8> {
    let image = pattern(1, a.volume().capacity() as usize).to_vec();
    write_whole(a, &image).expect("filled");
    block_on(a.flush()).expect("flush");
    image
}

/// `geo.each` bytes into data chunk 0 of each of `geo`'s written stripes (a
/// read-modify-write, logged), flushed: each stripe's bands settled, their entries still
/// ones a ring may replay (the rings of members with no P or Q of these stripes took no
/// batch, so the log's floor stays low). `image`: the volume's bytes, updated.
pub fn write_one_ring(geo: &Geo, a: &Array, image: &mut [u8]) {
    let width = geo.group().stripe_width();
    for (i, s) in geo.written_stripes().into_iter().enumerate() {
        let at = (s * width) as usize; // data chunk 0 comes first in the stripe
        let data = pattern(i as u64 + 2, geo.each as usize);
        image[at..at + data.len()].copy_from_slice(&data);
        block_on(a.write(at as u64, data, false)).expect("into data chunk 0");
    }
    block_on(a.flush()).expect("flush");
}

/// Held by each test while it runs: the log's counters are the process's, and each test
/// checks what its own run settled.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

pub fn alone() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs `f` on its own thread; fails the test if it has not ended within a minute (a hang).
pub fn within_a_minute<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("{what} did not end within a minute: a hang"))
}

/// Zeroes the whole volume (within a minute); the log's counts of the run.
pub fn zero_all(a: &Arc<Array>) -> (LogStats, VolumeResult<()>) {
    let capacity = a.volume().capacity();
    let before = nbraid_core::ppl::stats();
    let zeroing = a.clone();
    let r = within_a_minute("zeroing the whole volume", move || {
        block_on(zeroing.write_zeroes(0, capacity, false))
    });
    (nbraid_core::ppl::stats().since(&before), r)
}

/// Writes the whole volume with `pattern(99, ..)` (whole stripes: in write-back straight to
/// the members; in requests of at most `MAX_REQUEST_BYTES`, each a run of whole stripes)
/// and flushes it (within a minute); the
/// bytes written, the log's counts of the run, and the write's and the flush's results.
pub fn write_all(a: &Arc<Array>) -> (Vec<u8>, LogStats, VolumeResult<()>) {
    let want = pattern(99, a.volume().capacity() as usize).to_vec();
    let whole = want.clone();
    let before = nbraid_core::ppl::stats();
    let writer = a.clone();
    let r = within_a_minute("writing the whole volume and flushing it", move || {
        write_whole(&writer, &whole)?;
        block_on(writer.flush())
    });
    (want, nbraid_core::ppl::stats().since(&before), r)
}

/// Whether every byte of the volume of `geo` reads back as `want`: `Err` saying how many do
/// not and where the first is.
pub fn reads_back(geo: &Geo, a: &Array, want: &[u8]) -> Result<(), String> {
    let got = read_whole(a, want.len() as u64).map_err(|e| format!("read: {e}"))?;
    if got[..] == want[..] {
        return Ok(());
    }
    let wrong = got.iter().zip(want).filter(|(g, w)| g != w).count();
    let first = got
        .iter()
        .zip(want)
        .position(|(g, w)| g != w)
        .expect("a byte");
    let width = geo.group().stripe_width();
    Err(format!(
        "{wrong} bytes differ, the first at byte {first} (stripe {}, byte {} of it)",
        first as u64 / width,
        first as u64 % width
    ))
}
