//! Shared helpers for the integration tests: seeds (replayable, printed on failure), volume
//! shapes over fault-injecting memory members.
#![allow(dead_code)]

pub mod arrays;
pub mod write_hole;

use futures::future::BoxFuture;
use futures::FutureExt;
use nbraid_core::{
    Buf, Member, MemberCounters, MemberError, MemberOp, MemberResult, MemoryMember, SharedBuf,
};
use nbraid_layout::{Geometry, Level, Node, ParityLayout, Region, Shape};
use nbraid_sim::Faulty;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The `Member` methods a test's wrapper member passes to the member in its field `$inner`
/// unchanged, written out for it: the wrapper's `impl Member` then holds only the calls it
/// watches or changes, e.g. `pass_through!(inner; name len read flush trim write_zeroes
/// counters);` beside its own `write`.
macro_rules! pass_through {
    ($inner:ident; $($method:ident)*) => {
        $( $crate::common::pass_through!(@one $inner $method); )*
    };
    (@one $inner:ident name) => {
        fn name(&self) -> &str {
            self.$inner.name()
        }
    };
    (@one $inner:ident len) => {
        fn len(&self) -> u64 {
            self.$inner.len()
        }
    };
    (@one $inner:ident read) => {
        fn read(&self, offset: u64, buf: ::nbraid_core::Buf) -> ::futures::future::BoxFuture<'_, ::nbraid_core::MemberResult<::nbraid_core::Buf>> {
            self.$inner.read(offset, buf)
        }
    };
    (@one $inner:ident write) => {
        fn write(&self, offset: u64, data: ::nbraid_core::SharedBuf, fua: bool) -> ::futures::future::BoxFuture<'_, ::nbraid_core::MemberResult<()>> {
            self.$inner.write(offset, data, fua)
        }
    };
    (@one $inner:ident flush) => {
        fn flush(&self) -> ::futures::future::BoxFuture<'_, ::nbraid_core::MemberResult<()>> {
            self.$inner.flush()
        }
    };
    (@one $inner:ident trim) => {
        fn trim(&self, offset: u64, len: u64) -> ::futures::future::BoxFuture<'_, ::nbraid_core::MemberResult<()>> {
            self.$inner.trim(offset, len)
        }
    };
    (@one $inner:ident write_zeroes) => {
        fn write_zeroes(&self, offset: u64, len: u64) -> ::futures::future::BoxFuture<'_, ::nbraid_core::MemberResult<()>> {
            self.$inner.write_zeroes(offset, len)
        }
    };
    (@one $inner:ident counters) => {
        fn counters(&self) -> &::nbraid_core::MemberCounters {
            self.$inner.counters()
        }
    };
}
pub(crate) use pass_through;

/// How much longer soak runs are than the default (env `NBRAID_SOAK`: unset = 1, a number
/// above 1 = that factor, anything else = 20).
pub fn soak() -> u64 {
    match std::env::var("NBRAID_SOAK") {
        Err(_) => 1,
        Ok(v) => match v.parse::<u64>() {
            Ok(0) => 1,
            Ok(n) if n > 1 => n,
            _ => 20,
        },
    }
}

/// Runs `check` on inputs drawn from `strategy` until `budget` has passed (proptest
/// shrinks a failing input and the test panics with it; inputs are not persisted). Prints
/// what ran as `what` with the `detail` the caller adds (called after the run), and asserts
/// at least `min_inputs` ran. For the time-bounded fuzz targets.
pub fn fuzz_for<S: proptest::strategy::Strategy>(
    (what, detail): (&str, &dyn Fn() -> String),
    (budget, min_inputs): (std::time::Duration, u64),
    strategy: &S,
    check: impl Fn(S::Value) -> Result<(), proptest::test_runner::TestCaseError>,
) {
    use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
    let mut runner = proptest::test_runner::TestRunner::new(proptest::test_runner::Config {
        cases: 1_000_000,
        failure_persistence: None,
        ..proptest::test_runner::Config::default()
    });
    let start = std::time::Instant::now();
    let ran = AtomicU64::new(0);
    let result = runner.run(strategy, |input| {
        if start.elapsed() > budget {
            return Ok(());
        }
        ran.fetch_add(1, SeqCst);
        check(input)
    });
    let ran = ran.load(SeqCst);
    let secs = start.elapsed().as_secs_f64();
    eprintln!("{what}: {ran} inputs in {secs:.1} s{}", detail());
    if let Err(e) = result {
        panic!("{e}");
    }
    assert!(ran >= min_inputs, "only {ran} inputs ran");
}

/// Seeds to run: `NBRAID_SEED` alone when set, else `n × soak()` seeds derived from `name`.
pub fn seeds(name: &str, n: u64) -> Vec<u64> {
    if let Ok(s) = std::env::var("NBRAID_SEED") {
        let seed = s
            .trim()
            .parse::<u64>()
            .unwrap_or_else(|_| panic!("NBRAID_SEED={s} is not a u64"));
        return vec![seed];
    }
    let base = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    (0..n * soak())
        .map(|i| base.wrapping_add(i * 7919))
        .collect()
}

/// Prints the seed and how to replay it if the test panics while this is alive.
pub struct SeedGuard {
    pub test: &'static str,
    pub seed: u64,
}

impl Drop for SeedGuard {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "\n*** {} failed with seed {}; replay: NBRAID_SEED={} cargo test -p nbraid-core {}\n",
                self.test, self.seed, self.seed, self.test
            );
        }
    }
}

pub const KIB: u64 = 1024;
pub const MIB: u64 = 1024 * KIB;

/// A named level over `members` equal regions of `member_len` bytes from byte 0.
pub fn named(
    level: Level,
    members: usize,
    spans: Option<usize>,
    strip: u64,
    member_len: u64,
) -> Geometry {
    let shape = Shape::new(level, members, spans, strip, ParityLayout::default()).expect("shape");
    let regions = vec![
        Region {
            start: 0,
            len: member_len
        };
        members
    ];
    Geometry::new(shape, &regions).expect("geometry")
}

pub type Members = (Vec<Arc<Faulty<MemoryMember>>>, Vec<Arc<dyn Member>>);

/// `n` fault-injecting memory members of `len` bytes, seeded from `seed`.
pub fn faulty_members(n: usize, len: u64, seed: u64, power_loss: bool) -> Members {
    let faulty: Vec<Arc<Faulty<MemoryMember>>> = (0..n)
        .map(|i| {
            let f = Faulty::new(
                MemoryMember::new(format!("mem{i}"), len),
                seed ^ (i as u64 + 1),
            );
            Arc::new(if power_loss { f.with_power_loss() } else { f })
        })
        .collect();
    let dyns = faulty
        .iter()
        .map(|f| f.clone() as Arc<dyn Member>)
        .collect();
    (faulty, dyns)
}

/// A mirror of two 3-member RAID 5 groups (members 0..3 and 3..6), each member a region of
/// `len` bytes at `start`.
/// A named level over `members` members, each region `len` bytes from byte `start`.
pub fn level_tree(level: Level, members: usize, strip: u64, start: u64, len: u64) -> Node {
    let regions = vec![Region { start, len }; members];
    Shape::new(level, members, None, strip, ParityLayout::default())
        .expect("shape")
        .build(&regions)
        .expect("tree")
}

pub fn mirror_of_raid5s(strip: u64, start: u64, len: u64) -> nbraid_layout::Node {
    use nbraid_layout::Node;
    let group = |first: usize| {
        let leaves = (first..first + 3)
            .map(|i| Node::member(i, start, len))
            .collect();
        Node::parity(strip, 1, ParityLayout::LeftSymmetric, leaves).expect("parity")
    };
    Node::mirror(vec![group(0), group(3)]).expect("mirror")
}

/// RAID 5 over three mirrored pairs (members 2p and 2p+1), regions as in [`mirror_of_raid5s`].
pub fn raid5_of_pairs(strip: u64, start: u64, len: u64) -> nbraid_layout::Node {
    use nbraid_layout::Node;
    let pairs = (0..3)
        .map(|p| {
            let leaf = |i: usize| Node::member(i, start, len);
            Node::mirror(vec![leaf(2 * p), leaf(2 * p + 1)]).expect("pair")
        })
        .collect();
    Node::parity(strip, 1, ParityLayout::LeftSymmetric, pairs).expect("raid5")
}

/// A member whose non-FUA writes vanish while `lose` is set: what a power loss does to
/// writes still in the drive's volatile cache (FUA writes — the log — are durable).
pub struct Lossy {
    pub inner: MemoryMember,
    pub lose: AtomicBool,
}

impl Member for Lossy {
    fn write(&self, offset: u64, data: SharedBuf, fua: bool) -> BoxFuture<'_, MemberResult<()>> {
        if self.lose.load(Ordering::SeqCst) && !fua {
            return async { Ok(()) }.boxed();
        }
        self.inner.write(offset, data, fua)
    }
    pass_through!(inner; name len read flush trim write_zeroes counters);
}

/// A memory member whose every operation first yields to the executor a few times, as a
/// device's answer arrives later: requests on it overlap (a `MemoryMember` ends each within
/// its first poll, so requests over it never do). Counts the operations in flight across
/// the members sharing `in_flight`, and the most at once.
pub struct Yielding {
    pub inner: MemoryMember,
    pub in_flight: Arc<InFlight>,
}

#[derive(Default)]
pub struct InFlight {
    now: std::sync::atomic::AtomicUsize,
    pub most: std::sync::atomic::AtomicUsize,
}

impl Yielding {
    async fn op<T>(&self, op: BoxFuture<'_, MemberResult<T>>) -> MemberResult<T> {
        let now = self.in_flight.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.in_flight.most.fetch_max(now, Ordering::SeqCst);
        for _ in 0..3 {
            yield_once().await;
        }
        let r = op.await;
        self.in_flight.now.fetch_sub(1, Ordering::SeqCst);
        r
    }
}

/// Pending once (waking itself at once), then ready: the other futures of a `join!` (or
/// tasks of the executor) run once.
pub async fn yield_once() {
    let mut yielded = false;
    futures::future::poll_fn(|cx| {
        if std::mem::replace(&mut yielded, true) {
            std::task::Poll::Ready(())
        } else {
            cx.waker().wake_by_ref();
            std::task::Poll::Pending
        }
    })
    .await
}

impl Member for Yielding {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn read(&self, offset: u64, buf: Buf) -> BoxFuture<'_, MemberResult<Buf>> {
        self.op(self.inner.read(offset, buf)).boxed()
    }
    fn write(&self, offset: u64, data: SharedBuf, fua: bool) -> BoxFuture<'_, MemberResult<()>> {
        self.op(self.inner.write(offset, data, fua)).boxed()
    }
    fn flush(&self) -> BoxFuture<'_, MemberResult<()>> {
        self.op(self.inner.flush()).boxed()
    }
    fn trim(&self, offset: u64, len: u64) -> BoxFuture<'_, MemberResult<()>> {
        self.op(self.inner.trim(offset, len)).boxed()
    }
    fn write_zeroes(&self, offset: u64, len: u64) -> BoxFuture<'_, MemberResult<()>> {
        self.op(self.inner.write_zeroes(offset, len)).boxed()
    }
    fn counters(&self) -> &MemberCounters {
        self.inner.counters()
    }
}

/// `n` members' checksum areas, each right after its region `[0, region_bytes)`.
pub fn areas_after(
    region_bytes: u64,
    n: usize,
) -> Vec<Option<nbraid_core::checksum::ChecksumArea>> {
    let area = nbraid_core::checksum::ChecksumArea {
        offset_bytes: region_bytes,
        len_bytes: nbraid_core::checksum::area_bytes(region_bytes),
    };
    vec![Some(area); n]
}

/// A memory disk with a bad spot: reads that touch `[at_byte, at_byte + len_bytes)` answer
/// EIO while `bad` is set; a write over the whole spot clears it (a disk remaps a sector
/// on its write) — unless `writes_fail`: then writes that touch it answer EIO too.
pub struct BadSpot {
    pub inner: MemoryMember,
    pub at_byte: u64,
    pub len_bytes: u64,
    pub bad: AtomicBool,
    pub writes_fail: bool,
}

impl BadSpot {
    pub fn new(name: &str, len_bytes: u64, spot: std::ops::Range<u64>) -> BadSpot {
        BadSpot {
            inner: MemoryMember::new(name, len_bytes),
            at_byte: spot.start,
            len_bytes: spot.end - spot.start,
            bad: AtomicBool::new(true),
            writes_fail: false,
        }
    }
}

impl BadSpot {
    /// The error of an `op` touching the spot while it is bad.
    fn refuses(&self, op: MemberOp, offset: u64, len: u64) -> Option<MemberError> {
        let hits = offset < self.at_byte + self.len_bytes && self.at_byte < offset + len;
        let eio = || std::io::Error::from_raw_os_error(libc::EIO);
        (hits && self.bad.load(Ordering::SeqCst))
            .then(|| MemberError::new(self.name(), op, offset, len, eio()))
    }
}

impl Member for BadSpot {
    fn read(&self, offset: u64, buf: Buf) -> BoxFuture<'_, MemberResult<Buf>> {
        let len = buf.len() as u64;
        if let Some(e) = self.refuses(MemberOp::Read, offset, len) {
            return async move { Err(e) }.boxed();
        }
        self.inner.read(offset, buf)
    }
    fn write(&self, offset: u64, data: SharedBuf, fua: bool) -> BoxFuture<'_, MemberResult<()>> {
        let len = data.len() as u64;
        if self.writes_fail {
            if let Some(e) = self.refuses(MemberOp::Write, offset, len) {
                return async move { Err(e) }.boxed();
            }
        } else if offset <= self.at_byte && self.at_byte + self.len_bytes <= offset + len {
            self.bad.store(false, Ordering::SeqCst);
        }
        self.inner.write(offset, data, fua)
    }
    pass_through!(inner; name len flush trim write_zeroes counters);
}

/// A memory disk that keeps the place and length of every write.
pub struct Counting {
    pub inner: MemoryMember,
    pub writes: parking_lot::Mutex<Vec<(u64, u64)>>,
}

impl Counting {
    pub fn new(name: &str, len_bytes: u64) -> Counting {
        Counting {
            inner: MemoryMember::new(name, len_bytes),
            writes: parking_lot::Mutex::new(Vec::new()),
        }
    }
}

impl Member for Counting {
    fn write(&self, offset: u64, data: SharedBuf, fua: bool) -> BoxFuture<'_, MemberResult<()>> {
        self.writes.lock().push((offset, data.len() as u64));
        self.inner.write(offset, data, fua)
    }
    pass_through!(inner; name len read flush trim write_zeroes counters);
}

/// A memory disk whose writes at or past `from_byte` fail while `broken` is set (a bad spot
/// in its data, its metadata still written when `from_byte` is past the metadata).
pub struct Breaking {
    pub inner: MemoryMember,
    pub broken: AtomicBool,
    pub from_byte: u64,
}

impl Breaking {
    pub fn new(name: &str, len_bytes: u64) -> Breaking {
        Breaking {
            inner: MemoryMember::new(name, len_bytes),
            broken: AtomicBool::new(false),
            from_byte: 0,
        }
    }
}

impl Member for Breaking {
    fn write(&self, offset: u64, data: SharedBuf, fua: bool) -> BoxFuture<'_, MemberResult<()>> {
        if self.broken.load(Ordering::SeqCst) && offset >= self.from_byte {
            let e = MemberError::new(
                self.name(),
                MemberOp::Write,
                offset,
                data.len() as u64,
                std::io::Error::other("medium error"),
            );
            return async move { Err(e) }.boxed();
        }
        self.inner.write(offset, data, fua)
    }
    pass_through!(inner; name len read flush trim write_zeroes counters);
}
