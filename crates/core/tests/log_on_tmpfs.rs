//! The write-hole log on member files in memory (tmpfs), whose log windows are written
//! through mappings (`uring/window_maps.rs`): a partial-stripe write whose parity write is
//! lost in a "crash" is replayed from the batches the mapping put in the files, and the
//! member that was not written then rebuilds exactly.

mod common;

use common::{KIB, MIB};
use futures::executor::block_on;
use futures::future::BoxFuture;
use nbraid_core::metadata::{Array, ArrayOptions, MemberMeta, METADATA_AREA_BYTES};
use nbraid_core::{
    Buf, CacheMode, DirectIo, Engine, FileOptions, Member, MemberResult, SharedBuf, UringFile,
    VolumeOptions,
};
use nbraid_layout::{Level, Node, ParityLayout, Region, Shape};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::Arc;

const REGION: u64 = 2 * MIB;
const LOG_RESERVE: u64 = MIB;
const MEMBER_BYTES: u64 = METADATA_AREA_BYTES + LOG_RESERVE + REGION;
const STRIP: u64 = 64 * KIB;

/// A file member whose plain writes a crash may lose (`lose`: non-FUA writes vanish), and
/// which passes the log's window writes to the file (so they take its mapping), counting
/// them.
struct LossyFile {
    inner: UringFile,
    lose: AtomicBool,
    window_writes: AtomicU64,
}

impl Member for LossyFile {
    fn write(&self, offset: u64, data: SharedBuf, fua: bool) -> BoxFuture<'_, MemberResult<()>> {
        if self.lose.load(SeqCst) && !fua {
            return Box::pin(async { Ok(()) });
        }
        self.inner.write(offset, data, fua)
    }
    fn write_in_window(
        &self,
        window: Range<u64>,
        offset: u64,
        data: SharedBuf,
        fua: bool,
    ) -> BoxFuture<'_, MemberResult<()>> {
        self.window_writes.fetch_add(1, SeqCst);
        self.inner.write_in_window(window, offset, data, fua)
    }
    fn memory_backed(&self) -> bool {
        self.inner.memory_backed()
    }
    common::pass_through!(inner; name len read flush trim write_zeroes counters);
}

fn pattern(seed: u64, len: usize) -> Buf {
    let mut b = Buf::new(len);
    for (i, x) in b.iter_mut().enumerate() {
        *x = (seed as usize * 131 + i * 7 + i / 4096) as u8;
    }
    b
}

fn opts() -> ArrayOptions {
    ArrayOptions {
        ppl_area_before_region_bytes: Some(LOG_RESERVE),
        volume: VolumeOptions {
            cache: CacheMode::WriteThrough,
            ..VolumeOptions::default()
        },
        bitmap_chunk_bytes: Some(256 * KIB),
        ppl: true,
        ..ArrayOptions::default()
    }
}

fn metas(files: &[Arc<LossyFile>]) -> Vec<Option<Arc<MemberMeta>>> {
    let load = |f: &Arc<LossyFile>| block_on(MemberMeta::load(f.clone() as Arc<dyn Member>));
    files.iter().map(|f| Some(load(f))).collect()
}

fn torn_write_replays_from_the_files(level: Level, n: usize) {
    let dir = tempfile::tempdir_in("/dev/shm").expect("a directory on /dev/shm");
    let engine = Engine::global().expect("io_uring");
    let files: Vec<Arc<LossyFile>> = (0..n)
        .map(|i| {
            let path = dir.path().join(format!("d{i}.img"));
            let o = FileOptions {
                direct: DirectIo::Auto,
                engine: Some(engine.clone()),
            };
            let inner = UringFile::open_with(&path, Some(MEMBER_BYTES), o).expect("open");
            assert!(inner.memory_backed(), "a file on /dev/shm is in memory");
            Arc::new(LossyFile {
                inner,
                lose: AtomicBool::new(false),
                window_writes: AtomicU64::new(0),
            })
        })
        .collect();
    let shape = Shape::new(level, n, None, STRIP, ParityLayout::LeftSymmetric).expect("shape");
    let start = METADATA_AREA_BYTES + LOG_RESERVE;
    let t: Node = shape
        .build(&vec![Region { start, len: REGION }; n])
        .expect("tree");
    let all = metas(&files).into_iter().flatten().collect();
    let a = block_on(Array::create(
        "vol",
        t.clone(),
        all,
        opts(),
        true,
        &|_, _| {},
    ))
    .expect("create")
    .0;
    let capacity = a.volume().capacity();
    let mut image = pattern(1, capacity as usize).to_vec();
    block_on(a.write(0, pattern(1, capacity as usize), false)).expect("fill");
    block_on(a.flush()).expect("flush");

    let (g, _) = nbraid_core::ppl::parity_groups(&t).remove(0);
    let stripe = 3u64;
    let roles = g.roles(stripe);
    for m in [Some(roles.p), roles.q].into_iter().flatten() {
        files[m].lose.store(true, SeqCst);
    }
    let at = (stripe * g.stripe_width() + 8 * KIB) as usize;
    let new = pattern(9, 4096);
    image[at..at + 4096].copy_from_slice(&new);
    let logged_before: u64 = files.iter().map(|f| f.window_writes.load(SeqCst)).sum();
    block_on(a.write(at as u64, new, false)).expect("partial write");
    let logged: u64 = files.iter().map(|f| f.window_writes.load(SeqCst)).sum();
    assert!(logged > logged_before, "the write's batch went to a window");
    drop(a); // power lost: the parity members' writes never reached them

    for f in &files {
        f.lose.store(false, SeqCst);
    }
    let (a, report) = block_on(Array::open("vol", &t, metas(&files), opts(), &|_, _| {}))
        .expect("a dirty array starts");
    assert!(!report.was_clean, "{report:?}");
    assert_eq!(report.ppl.entries, 1, "the batch is read back: {report:?}");
    assert!(block_on(a.read(0, capacity)).expect("read")[..] == image[..]);
    // The parity the replay left rebuilds a member the write did not touch.
    a.volume()
        .fail_member(roles.data[1], "the test loses a member not written");
    let got = block_on(a.read(0, capacity)).expect("degraded read");
    assert!(got[..] == image[..], "degraded read differs");
}

#[test]
fn raid5_on_tmpfs_replays_a_torn_write_from_batches_written_through_the_mapping() {
    torn_write_replays_from_the_files(Level::Raid5, 4);
}

#[test]
fn raid6_on_tmpfs_replays_a_torn_write_from_batches_written_through_the_mapping() {
    torn_write_replays_from_the_files(Level::Raid6, 5);
}
