//! Bytes from a member are hostile: a superblock, a write-intent bitmap or a log ring whose
//! checksum is right may still hold any value (an older version's bug, a member moved from
//! another machine, a remote server lying). Arrays created on memory members are mutated —
//! a superblock field set to any value then re-encoded (so its checksum passes), raw
//! superblock bytes overwritten and re-checksummed, bitmap bytes, forged log batches with
//! right checksums — and started dirty: no panic, no allocation above 64 MiB,
//! and either a refusal naming the volume or an assembly that reads back every byte written.
//!
//! The fuzz target runs for a bounded time in the default test run (~30 s) and counts the
//! inputs it ran; `NBRAID_SOAK=N` runs N times as long.

#[path = "common/capped_alloc.rs"]
mod capped_alloc;
mod common;

use capped_alloc::{largest_alloc_bytes, ALLOC_CAP_BYTES};
use futures::executor::block_on;
use futures::future::BoxFuture;
use nbraid_core::metadata::{Array, ArrayOptions, MemberMeta, Probe, Superblock, SLOT_BYTES};
use nbraid_core::ppl::codec::{encode_batch, Entry, Part};
use nbraid_core::{Buf, CacheMode, Member, MemberResult, MemoryMember, VolumeOptions};
use nbraid_layout::{Level, Node, ParityLayout, Region, Shape};
use proptest::prelude::*;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const STRIP: u64 = 16 * KIB;
const REGION: u64 = MIB;
const LOG_RESERVE: u64 = MIB;

/// A volume created, filled, partly rewritten and dropped dirty: each member's bytes, the
/// tree, the options and what the volume holds.
struct Base {
    tree: Node,
    opts: ArrayOptions,
    members: Vec<Vec<u8>>,
    image: Vec<u8>,
}

fn opts(log_reserve: bool) -> ArrayOptions {
    ArrayOptions {
        ppl_area_before_region_bytes: log_reserve.then_some(LOG_RESERVE),
        volume: VolumeOptions {
            cache: CacheMode::WriteThrough,
            ..VolumeOptions::default()
        },
        bitmap_chunk_bytes: Some(64 * KIB),
        ..ArrayOptions::default()
    }
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (seed as usize * 131 + i * 7 + i / 4096) as u8)
        .collect()
}

fn base(level: Level, n: usize, log_reserve: bool) -> Base {
    let start = MIB + if log_reserve { LOG_RESERVE } else { 0 };
    let shape = Shape::new(level, n, None, STRIP, ParityLayout::LeftSymmetric).expect("shape");
    let tree = shape
        .build(&vec![Region { start, len: REGION }; n])
        .expect("tree");
    let member_bytes = start + REGION;
    let disks: Vec<Arc<MemoryMember>> = (0..n)
        .map(|i| Arc::new(MemoryMember::new(format!("disk{i}"), member_bytes)))
        .collect();
    let metas = disks
        .iter()
        .map(|d| block_on(MemberMeta::load(d.clone() as Arc<dyn Member>)))
        .collect();
    let o = opts(log_reserve);
    let (a, _) = block_on(Array::create(
        "vol",
        tree.clone(),
        metas,
        o.clone(),
        true,
        &|_, _| {},
    ))
    .expect("create");
    let capacity = a.volume().capacity() as usize;
    let mut image = pattern(1, capacity);
    block_on(a.write(0, Buf::copy_from(&image), false)).expect("fill");
    block_on(a.flush()).expect("flush");
    // Partial-stripe writes: log entries on the rings, bits set in the bitmaps.
    for (i, at) in [8 * KIB, 200 * KIB, 3 * STRIP + 4 * KIB]
        .into_iter()
        .enumerate()
    {
        let new = pattern(10 + i as u64, 4096);
        let at = at as usize;
        image[at..at + 4096].copy_from_slice(&new);
        block_on(a.write(at as u64, Buf::copy_from(&new), false)).expect("partial write");
    }
    drop(a); // a crash: the records stay dirty
    let members = disks
        .iter()
        .map(|d| {
            let mut b = vec![0u8; member_bytes as usize];
            d.peek(0, &mut b);
            b
        })
        .collect();
    Base {
        tree,
        opts: o,
        members,
        image,
    }
}

/// What one input does to one member's bytes.
#[derive(Clone, Debug)]
enum Mutation {
    /// A field of the newest superblock copy's record set to `value`, re-encoded.
    Field { field: u8, value: u64 },
    /// Bytes of the newest superblock copy overwritten, its checksum made right again.
    SuperblockBytes { at: usize, bytes: Vec<u8> },
    /// Bytes of the bitmap area overwritten.
    Bitmap { at: usize, bytes: Vec<u8> },
    /// A batch with a right checksum and any entry written at a block of the ring.
    Batch { block: u64, life: u64, entry: Entry },
    /// A batch header declaring `len` bytes (checksum wrong) at a block of the ring.
    BatchLength { block: u64, len: u32 },
}

fn value() -> impl Strategy<Value = u64> {
    prop_oneof![
        any::<u64>(),
        0..8 * MIB,
        (0..64u32).prop_map(|s| 1u64 << s),
        Just(16u64 << 40),
        Just(u64::MAX),
    ]
}

fn entry() -> impl Strategy<Value = Entry> {
    (
        (0u64..64, 0u32..3, 0u64..80, 0u32..8, 1u8..=8, 1u8..=2),
        proptest::collection::vec(any::<u8>(), 1..6),
        any::<u8>(),
    )
        .prop_map(
            |((seq, group, stripe, band, sectors, parity), masks, fill)| {
                let in_band = ((1u16 << sectors) - 1) as u8;
                let mut e = Entry {
                    seq,
                    group,
                    stripe,
                    band,
                    sectors,
                    parity,
                    masks: masks.into_iter().map(|m| m & in_band).collect(),
                    pp: None,
                    pq: None,
                };
                let n = e.stored().count_ones() as usize * 512;
                e.pp = Some(vec![fill; n]);
                e
            },
        )
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (0u8..20, value()).prop_map(|(field, value)| Mutation::Field { field, value }),
        (0usize..4096, proptest::collection::vec(any::<u8>(), 1..16))
            .prop_map(|(at, bytes)| Mutation::SuperblockBytes { at, bytes }),
        (0usize..4096, proptest::collection::vec(any::<u8>(), 1..16))
            .prop_map(|(at, bytes)| Mutation::Bitmap { at, bytes }),
        (0u64..256, 0u64..8, entry()).prop_map(|(block, life, entry)| Mutation::Batch {
            block,
            life,
            entry
        }),
        (0u64..256, any::<u32>()).prop_map(|(block, len)| Mutation::BatchLength { block, len }),
    ]
}

/// An id made from `x` (the nil id when `x` is zero).
fn uuid(x: u64) -> nbraid_core::metadata::Uuid {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&x.to_le_bytes());
    b[8..].copy_from_slice(&x.rotate_left(29).to_le_bytes());
    nbraid_core::metadata::Uuid(b)
}

/// The newest valid superblock copy in `bytes` (a member's).
fn newest_copy(bytes: &[u8]) -> Option<Superblock> {
    let copies = [0, SLOT_BYTES as usize].map(|at| Superblock::decode(&bytes[at..]).ok());
    copies.into_iter().flatten().max_by_key(|s| s.generation)
}

/// Applies `m` to a member's `bytes`; false when it does not apply (nothing changed).
fn apply(m: &Mutation, bytes: &mut [u8]) -> bool {
    let Some(mut sb) = newest_copy(bytes) else {
        return false;
    };
    let slot = sb.slot_offset() as usize;
    let v = &sb.volumes[0];
    let (bitmap, ring) = (v.bitmap.map(|b| b.area), v.ppl);
    match m {
        Mutation::Field { field, value } => {
            let v = &mut sb.volumes[0];
            let x = *value;
            match field {
                0 => sb.member_bytes = x,
                1..=3 => {
                    let Some(b) = v.bitmap.as_mut() else {
                        return false;
                    };
                    *[&mut b.area.offset, &mut b.area.len, &mut b.chunk_bytes]
                        [usize::from(*field) - 1] = x;
                }
                4 | 5 => {
                    let Some(a) = v.ppl.as_mut() else {
                        return false;
                    };
                    *[&mut a.offset, &mut a.len][usize::from(*field) - 4] = x;
                }
                6 => {
                    v.checksums = Some(nbraid_core::metadata::Area {
                        offset: x,
                        len: x >> 7,
                    })
                }
                7 => v.events = x,
                8 => v.role = x as u32,
                9 => {
                    let i = x as usize % v.members.len();
                    v.members[i].state = nbraid_core::metadata::RecordedState::Rebuilding {
                        checkpoint_bytes: x,
                    };
                }
                10 => {
                    v.scrub = Some(nbraid_core::metadata::ScrubCheckpoint {
                        position_bytes: x,
                        repair: x & 1 == 1,
                    })
                }
                11 => v.clean = x & 1 == 1,
                14 => v.array = uuid(x),
                15 => sb.member = uuid(x),
                16 => {
                    let i = x as usize % v.members.len();
                    v.members[i].uuid = uuid(x);
                }
                17 => {
                    use nbraid_core::metadata::RecordedState as S;
                    let i = (x >> 8) as usize % v.members.len();
                    v.members[i].state = [S::Active, S::Failed, S::Spare][(x % 3) as usize];
                }
                // The geometry: another level, strip or region over the same members.
                18 => {
                    let level = [Level::Raid5, Level::Raid6, Level::Raid0][(x % 3) as usize];
                    let strip = 512 << ((x >> 2) % 8);
                    let start = (x >> 8) % (4 * MIB) / 512 * 512;
                    let len = (x >> 32) % (2 * MIB) / 512 * 512 + 512;
                    let n = v.members.len();
                    let shape = Shape::new(level, n, None, strip, ParityLayout::LeftSymmetric);
                    let tree = shape
                        .ok()
                        .and_then(|s| s.build(&vec![Region { start, len }; n]).ok());
                    let Some(tree) = tree else { return false };
                    v.tree = tree;
                }
                19 => sb.generation = x,
                // Both lengths of an area at once (a consistent-looking area).
                12 => {
                    if let Some(b) = v.bitmap.as_mut() {
                        b.area.len = (x / 4096).max(1) * 4096;
                        sb.member_bytes = sb.member_bytes.max(b.area.offset.saturating_add(x));
                    }
                }
                _ => {
                    if let Some(a) = v.ppl.as_mut() {
                        a.len = (x / 4096).max(1) * 4096;
                        sb.member_bytes = sb.member_bytes.max(a.offset.saturating_add(x));
                    }
                }
            }
            let Ok(enc) = sb.encode() else { return false };
            bytes[slot..slot + enc.len()].copy_from_slice(&enc);
        }
        Mutation::SuperblockBytes { at, bytes: b } => {
            let len = u32::from_le_bytes(bytes[slot + 12..slot + 16].try_into().unwrap()) as usize;
            let at = 20 + at % (len - 20);
            let n = b.len().min(len - at);
            bytes[slot + at..slot + at + n].copy_from_slice(&b[..n]);
            bytes[slot + 16..slot + 20].fill(0);
            let crc = nbraid_core::crc32c::crc32c(&bytes[slot..slot + len]);
            bytes[slot + 16..slot + 20].copy_from_slice(&crc.to_le_bytes());
        }
        Mutation::Bitmap { at, bytes: b } => {
            let Some(area) = bitmap else { return false };
            let at = area.offset as usize + at % area.len as usize;
            let n = b.len().min(area.offset as usize + area.len as usize - at);
            bytes[at..at + n].copy_from_slice(&b[..n]);
        }
        Mutation::Batch { block, life, entry } => {
            let Some(area) = ring else { return false };
            let batch = encode_batch(*life, 0, &[(entry, Part::P)]);
            let at = (block * 4096) % area.len;
            if at + batch.len() as u64 > area.len {
                return false;
            }
            let at = (area.offset + at) as usize;
            bytes[at..at + batch.len()].copy_from_slice(&batch);
        }
        Mutation::BatchLength { block, len } => {
            let Some(area) = ring else { return false };
            let at = (area.offset + (block * 4096) % area.len) as usize;
            let mut header = encode_batch(1, 0, &[]);
            header[16..20].copy_from_slice(&len.to_le_bytes());
            bytes[at..at + header.len()].copy_from_slice(&header);
        }
    }
    true
}

/// Starts the volume from `base` with member `victim` mutated by `m`: no panic, and a
/// refusal naming the volume, or every byte as written.
fn check(base: &Base, victim: usize, m: &Mutation) -> Result<(), TestCaseError> {
    let mut bytes = base.members.clone();
    if !apply(m, &mut bytes[victim]) {
        return Ok(());
    }
    let metas = bytes
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let d = MemoryMember::new(format!("disk{i}"), b.len() as u64);
            d.poke(0, b);
            Some(block_on(MemberMeta::load(Arc::new(d) as Arc<dyn Member>)))
        })
        .collect();
    match block_on(Array::open(
        "vol",
        &base.tree,
        metas,
        base.opts.clone(),
        &|_, _| {},
    )) {
        Ok((a, _)) => {
            let got = block_on(a.read(0, a.volume().capacity()))
                .map_err(|e| TestCaseError::fail(format!("started, then a read failed: {e}")))?;
            prop_assert!(got[..] == base.image[..], "started with wrong bytes");
        }
        Err(e) => {
            let e = e.to_string();
            prop_assert!(e.contains("vol"), "a refusal that names no volume: {e}");
        }
    }
    prop_assert!(largest_alloc_bytes() <= ALLOC_CAP_BYTES);
    Ok(())
}

#[test]
fn hostile_records_never_panic_nor_allocate_from_a_disk_value() {
    let bases = [base(Level::Raid5, 4, false), base(Level::Raid6, 5, true)];
    let detail = || format!(", largest allocation {} bytes", largest_alloc_bytes());
    let budget = Duration::from_secs(30 * common::soak());
    let strategy = (0usize..2, 0usize..5, mutation());
    common::fuzz_for(
        ("hostile records", &detail),
        (budget, 100),
        &strategy,
        |(b, victim, m)| {
            let base = &bases[b];
            check(base, victim % base.members.len(), &m)
        },
    );
}

/// Both superblock copies of `bytes` (a member's) with `f` applied, re-encoded: their
/// checksums are right.
fn rewrite(bytes: &mut [u8], f: impl Fn(&mut Superblock)) {
    for slot in [0, SLOT_BYTES as usize] {
        let mut sb = Superblock::decode(&bytes[slot..]).expect("a superblock copy");
        f(&mut sb);
        let enc = sb.encode().expect("encodes");
        bytes[slot..slot + enc.len()].copy_from_slice(&enc);
    }
}

fn load(bytes: &[u8], name: &str) -> Arc<MemberMeta> {
    let d = MemoryMember::new(name, bytes.len() as u64);
    d.poke(0, bytes);
    block_on(MemberMeta::load(Arc::new(d) as Arc<dyn Member>))
}

/// The case: a right checksum over a 16 TiB bitmap (the recorded member size raised
/// to match) aborted a dirty start allocating it. The member is unreadable, named; its
/// peers serve.
#[test]
fn a_16_tib_bitmap_behind_a_right_checksum_makes_the_member_unreadable() {
    let base = base(Level::Raid5, 4, false);
    let mut bytes = base.members.clone();
    rewrite(&mut bytes[1], |sb| {
        sb.member_bytes = 1 << 50;
        let b = sb.volumes[0].bitmap.as_mut().expect("a bitmap");
        b.area.len = 16 << 40;
    });
    let metas: Vec<_> = bytes
        .iter()
        .enumerate()
        .map(|(i, b)| load(b, &format!("disk{i}")))
        .collect();
    let Probe::Unreadable(why) = metas[1].probe() else {
        panic!("taken as {:?}", metas[1].probe())
    };
    assert!(
        why.contains("disk1") && why.contains("bitmap area"),
        "{why}"
    );
    let (a, report) = block_on(Array::open(
        "vol",
        &base.tree,
        metas.into_iter().map(Some).collect(),
        base.opts.clone(),
        &|_, _| {},
    ))
    .expect("the peers serve");
    assert_eq!(report.absent_roles, vec![1], "{report:?}");
    let got = block_on(a.read(0, a.volume().capacity())).expect("read");
    assert!(got[..] == base.image[..]);
}

/// A member cut shorter than the regions its superblock places on it is unreadable (its
/// recorded size, unchanged, would pass).
#[test]
fn a_member_shorter_than_its_region_is_unreadable() {
    let base = base(Level::Raid5, 4, false);
    let cut = &base.members[2][..(2 * MIB - 64 * KIB) as usize];
    let meta = load(cut, "disk2");
    let Probe::Unreadable(why) = meta.probe() else {
        panic!("taken as {:?}", meta.probe())
    };
    assert!(
        why.contains("disk2") && why.contains("past its end"),
        "{why}"
    );
}

/// Reads of a member, by length (the largest one asked for).
struct Watched {
    inner: MemoryMember,
    largest_read: AtomicU64,
}

impl Member for Watched {
    fn read(&self, offset: u64, buf: Buf) -> BoxFuture<'_, MemberResult<Buf>> {
        self.largest_read.fetch_max(buf.len() as u64, SeqCst);
        self.inner.read(offset, buf)
    }
    common::pass_through!(inner; name len write flush trim write_zeroes counters);
}

/// A dirty start reads each log ring a piece at a time: an 8 MiB ring is never one read
/// (nor one allocation of its recorded length).
#[test]
fn a_dirty_start_reads_the_log_ring_in_bounded_pieces() {
    const RING: u64 = 8 * MIB;
    let n = 4;
    let start = MIB + RING;
    let shape = Shape::new(Level::Raid5, n, None, STRIP, ParityLayout::LeftSymmetric).unwrap();
    let tree = shape
        .build(&vec![Region { start, len: REGION }; n])
        .unwrap();
    let o = ArrayOptions {
        ppl_area_before_region_bytes: Some(RING),
        ..opts(false)
    };
    let disks: Vec<Arc<Watched>> = (0..n)
        .map(|i| {
            Arc::new(Watched {
                inner: MemoryMember::new(format!("disk{i}"), start + REGION),
                largest_read: AtomicU64::new(0),
            })
        })
        .collect();
    let metas = || -> Vec<Arc<MemberMeta>> {
        disks
            .iter()
            .map(|d| block_on(MemberMeta::load(d.clone() as Arc<dyn Member>)))
            .collect()
    };
    let (a, _) = block_on(Array::create(
        "vol",
        tree.clone(),
        metas(),
        o.clone(),
        true,
        &|_, _| {},
    ))
    .expect("create");
    block_on(a.write(8 * KIB, Buf::copy_from(&pattern(3, 4096)), false)).expect("write");
    drop(a); // a crash
    for d in &disks {
        d.largest_read.store(0, SeqCst);
    }
    let metas = metas().into_iter().map(Some).collect();
    let (_, report) = block_on(Array::open("vol", &tree, metas, o, &|_, _| {})).expect("open");
    assert!(!report.was_clean && report.ppl.entries >= 1, "{report:?}");
    for d in &disks {
        let largest = d.largest_read.load(SeqCst);
        assert!(largest <= MIB, "{}: a {largest}-byte read", d.name());
    }
}
