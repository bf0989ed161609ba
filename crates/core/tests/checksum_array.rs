//! Per-block checksums through `metadata::Array`: the area placed in the reserve before each
//! region at create and found again by the records at open; bad blocks found after a restart
//! are repaired; and after an unclean shutdown where data and checksum pages landed apart
//! (either way round), nothing reads as a checksum error and every byte reads as it is on
//! the members.

mod common;

use common::{KIB, MIB};
use futures::executor::block_on;
use futures::future::BoxFuture;
use futures::FutureExt;
use nbraid_core::checksum::BLOCK_BYTES;
use nbraid_core::metadata::{Array, ArrayOptions, MemberMeta, METADATA_AREA_BYTES};
use nbraid_core::{Buf, CacheMode, Member, MemberResult, MemoryMember, SharedBuf, VolumeOptions};
use nbraid_layout::{Level, Node, ParityLayout, Region, Shape};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

const REGION: u64 = 4 * MIB;
const RESERVE: u64 = MIB;
const START: u64 = METADATA_AREA_BYTES + RESERVE;
const MEMBER_BYTES: u64 = START + REGION;

/// What a [`Disk`] drops (a power loss that kept some writes and not others).
const KEEP_ALL: u8 = 0;
/// Non-FUA writes into the checksum reserve vanish: data lands, its checksums do not.
const DROP_SUMS: u8 = 1;
/// Non-FUA writes outside the reserve vanish: checksums land, the data does not.
const DROP_DATA: u8 = 2;

struct Disk {
    inner: MemoryMember,
    mode: AtomicU8,
}

impl Disk {
    fn dropped(&self, offset: u64, fua: bool) -> bool {
        let in_reserve = (METADATA_AREA_BYTES..START).contains(&offset);
        match self.mode.load(Ordering::SeqCst) {
            DROP_SUMS => in_reserve && !fua,
            DROP_DATA => !in_reserve && offset >= START && !fua,
            _ => false,
        }
    }
}

impl Member for Disk {
    fn write(&self, offset: u64, data: SharedBuf, fua: bool) -> BoxFuture<'_, MemberResult<()>> {
        if self.dropped(offset, fua) {
            return async { Ok(()) }.boxed();
        }
        self.inner.write(offset, data, fua)
    }
    common::pass_through!(inner; name len read flush trim write_zeroes counters);
}

fn tree(level: Level, n: usize, strip: u64) -> Node {
    let shape = Shape::new(level, n, None, strip, ParityLayout::LeftSymmetric).expect("shape");
    let regions = vec![
        Region {
            start: START,
            len: REGION
        };
        n
    ];
    shape.build(&regions).expect("tree")
}

fn opts() -> ArrayOptions {
    ArrayOptions {
        volume: VolumeOptions {
            cache: CacheMode::WriteThrough,
            mirror_seq_piece: 4096,
            read_policy: nbraid_core::ReadPolicy::RoundRobin,
            ..VolumeOptions::default()
        },
        bitmap_chunk_bytes: Some(256 * KIB),
        checksum_area_before_region_bytes: Some(RESERVE),
        ..ArrayOptions::default()
    }
}

fn metas(disks: &[Arc<Disk>]) -> Vec<Arc<MemberMeta>> {
    disks
        .iter()
        .map(|d| block_on(MemberMeta::load(d.clone() as Arc<dyn Member>)))
        .collect()
}

fn disks(n: usize) -> Vec<Arc<Disk>> {
    (0..n)
        .map(|i| {
            Arc::new(Disk {
                inner: MemoryMember::new(format!("disk{i}"), MEMBER_BYTES),
                mode: AtomicU8::new(KEEP_ALL),
            })
        })
        .collect()
}

fn open(level: Level, disks: &[Arc<Disk>], strip: u64) -> Array {
    let m = metas(disks).into_iter().map(Some).collect();
    let (a, _) = block_on(Array::open(
        "vol",
        &tree(level, disks.len(), strip),
        m,
        opts(),
        &|_, _| {},
    ))
    .expect("open");
    a
}

fn pattern(seed: u8, len: u64) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed ^ (i / 4096) as u8)
        .collect()
}

fn write_all(a: &Array, data: &[u8]) {
    block_on(async {
        for (i, piece) in data.chunks(MIB as usize).enumerate() {
            a.write(i as u64 * MIB, Buf::copy_from(piece), false)
                .await
                .expect("write");
        }
    });
}

fn read_all(a: &Array, times: usize) -> Vec<u8> {
    block_on(async {
        let mut out = Vec::new();
        for t in 0..times {
            out.clear();
            let cap = a.volume().capacity();
            let mut at = 0;
            while at < cap {
                let n = (cap - at).min(4096 * (t as u64 % 16 + 1));
                out.extend_from_slice(&a.read(at, n).await.expect("read"));
                at += n;
            }
        }
        out
    })
}

fn errors_and_repairs(a: &Array) -> (u64, u64) {
    let setup = a.volume().options().checksums.as_ref().expect("checksums");
    (0..a.volume().member_count()).fold((0, 0), |(e, r), i| {
        let c = setup.counters(i).expect("counters");
        (
            e + c.errors.load(Ordering::Relaxed),
            r + c.repairs.load(Ordering::Relaxed),
        )
    })
}

fn corrupt(d: &Disk, region_block: u64) {
    let at = START + region_block * BLOCK_BYTES;
    d.inner.poke(at, &vec![0xa5; BLOCK_BYTES as usize]);
}

const LEVELS: [(Level, usize); 4] = [
    (Level::Raid1, 2),
    (Level::Raid5, 3),
    (Level::Raid6, 4),
    (Level::Raid10, 4),
];

#[test]
fn bad_blocks_found_after_a_clean_restart_are_repaired() {
    for (level, n) in LEVELS {
        let strip = 64 * KIB;
        let d = disks(n);
        let (a, _) = block_on(Array::create(
            "vol",
            tree(level, n, strip),
            metas(&d),
            opts(),
            true,
            &|_, _| {},
        ))
        .expect("create");
        let data = pattern(1, a.volume().capacity());
        write_all(&a, &data);
        block_on(a.mark_clean()).expect("clean");
        drop(a);
        // Every member, blocks in several stripes.
        for (m, disk) in d.iter().enumerate() {
            for k in 0..3u64 {
                corrupt(disk, (m as u64 + k * n as u64) * strip / BLOCK_BYTES + 1);
            }
        }
        let a = open(level, &d, strip);
        assert!(read_all(&a, 16) == data, "{level:?}: read back exactly");
        let (errors, repairs) = errors_and_repairs(&a);
        assert!(errors >= 2, "{level:?}: {errors}");
        assert_eq!(errors, repairs, "{level:?}");
        assert_eq!(a.volume().failed_count(), 0);
    }
}

/// A power loss where data and checksum pages land apart: after the restart nothing is a
/// checksum error, and the bytes read are what the members hold.
fn torn(level: Level, n: usize, mode: u8) {
    let strip = 64 * KIB;
    let d = disks(n);
    let (a, _) = block_on(Array::create(
        "vol",
        tree(level, n, strip),
        metas(&d),
        opts(),
        true,
        &|_, _| {},
    ))
    .expect("create");
    let old = pattern(1, a.volume().capacity());
    write_all(&a, &old);
    block_on(a.mark_clean()).expect("clean");
    for disk in &d {
        disk.mode.store(mode, Ordering::SeqCst);
    }
    let new = pattern(2, a.volume().capacity());
    write_all(&a, &new);
    block_on(a.flush()).expect("flush");
    drop(a);
    for disk in &d {
        disk.mode.store(KEEP_ALL, Ordering::SeqCst);
    }
    let a = open(level, &d, strip);
    let got = read_all(&a, 4);
    let want = if mode == DROP_SUMS { &new } else { &old };
    assert!(got == *want, "{level:?} mode {mode}: the members' bytes");
    assert_eq!(errors_and_repairs(&a), (0, 0), "{level:?} mode {mode}");
    // The blocks are checked again once written.
    write_all(&a, &new);
    corrupt(&d[0], 1);
    corrupt(&d[1], strip / BLOCK_BYTES + 1);
    assert!(read_all(&a, 16) == new, "{level:?}");
    assert!(errors_and_repairs(&a).0 >= 1, "{level:?}: checked again");
}

#[test]
fn data_landed_without_its_checksums_reads_without_errors() {
    for (level, n) in LEVELS {
        torn(level, n, DROP_SUMS);
    }
}

#[test]
fn checksums_landed_without_their_data_read_without_errors() {
    for (level, n) in LEVELS {
        torn(level, n, DROP_DATA);
    }
}

/// Where member `d`'s checksum entry of region block `block` lives (its newest superblock
/// names the area: a 4 KiB header, then 8 bytes a block).
fn entry_at(d: &Disk, block: u64) -> u64 {
    use nbraid_core::metadata::{Superblock, SLOT_BYTES};
    let mut sb = vec![0u8; 2 * SLOT_BYTES as usize];
    d.inner.peek(0, &mut sb);
    let newest = [0, SLOT_BYTES as usize]
        .map(|at| Superblock::decode(&sb[at..]).ok())
        .into_iter()
        .flatten()
        .max_by_key(|s| s.generation)
        .expect("a superblock");
    newest.volumes[0].checksums.expect("a checksum area").offset + 4096 + 8 * block
}

/// Makes member `d`'s entry of region block `block` lie: its CRC changed, its tag kept (as
/// a damaged entry page or a member moved from elsewhere could hold). The entry as it was.
fn lie(d: &Disk, block: u64) -> [u8; 8] {
    let at = entry_at(d, block);
    let mut right = [0u8; 8];
    d.inner.peek(at, &mut right);
    let mut lying = right;
    lying[0] ^= 0x5a;
    d.inner.poke(at, &lying);
    right
}

/// A data block's entry that lies while the member holds the right bytes: the rest of the
/// stripe rebuilds exactly those bytes, so the entry is overruled — the read returns them
/// and its repair rewrites the entry; a scrub with repair does the same for an entry of
/// another block. (Refusing left good bytes unreadable for good, scrub or not.)
#[test]
fn a_lying_checksum_entry_is_overruled_by_the_redundancy_and_rewritten() {
    let strip = 64 * KIB;
    for (level, n) in LEVELS {
        let d = disks(n);
        let (a, _) = block_on(Array::create(
            "vol",
            tree(level, n, strip),
            metas(&d),
            opts(),
            true,
            &|_, _| {},
        ))
        .expect("create");
        let data = pattern(3, a.volume().capacity());
        write_all(&a, &data);
        block_on(a.flush()).expect("flush");
        block_on(a.mark_clean()).expect("clean");
        drop(a);
        // Member 0 holds data at its region's blocks 1 and 2 on every level here.
        let (read_block, scrub_block) = (1, 2);
        let right = [lie(&d[0], read_block), lie(&d[0], scrub_block)];
        let a = open(level, &d, strip);
        let got = block_on(a.read(read_block * BLOCK_BYTES, BLOCK_BYTES)).expect("read");
        assert!(got[..] == data[4096..8192], "{level:?}: the block's bytes");
        let scrub = nbraid_core::ScrubControl::new(true, 0);
        let report = block_on(a.scrub(&scrub)).expect("scrub");
        assert!(read_all(&a, 1) == data, "{level:?}: every byte");
        block_on(a.flush()).expect("flush");
        block_on(a.mark_clean()).expect("clean");
        drop(a);
        for (block, right) in [(read_block, right[0]), (scrub_block, right[1])] {
            let mut now = [0u8; 8];
            d[0].inner.peek(entry_at(&d[0], block), &mut now);
            assert_eq!(
                now, right,
                "{level:?}: block {block}'s entry rewritten ({report:?})"
            );
        }
        let a = open(level, &d, strip);
        assert!(read_all(&a, 1) == data, "{level:?}: after a reopen");
        assert_eq!(
            errors_and_repairs(&a),
            (0, 0),
            "{level:?}: nothing left to repair"
        );
    }
}
