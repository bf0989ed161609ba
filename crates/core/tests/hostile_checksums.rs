//! The per-block checksum area is read from a member like any record, so its bytes are
//! hostile too: a header bit or an entry may say anything (a lost write, a member moved
//! from another machine, a remote server lying). One member's area of a checksummed RAID 5
//! or 6 is mutated — header bytes, raw entry bytes, entries that lie with the tag right,
//! entries copied from other blocks, entries made unknown — before a dirty or a clean open,
//! or under the running array (entry pages and the header are read on demand). Then:
//! - no panic, no allocation above 64 MiB;
//! - every byte reads back as written (one member's lying checksums are caught and the
//!   block served from the redundancy), or a refusal naming the volume — never wrong bytes;
//! - a scrub with repair runs, and every byte reads back again;
//! - no member's region holds other bytes than before: a "repair" that believed a lying
//!   checksum would have rewritten good data (rewriting a block with its own bytes is fine);
//! - a clean reopen reads every byte back.
//!
//! Bounded by time in the default run (~15 s); `NBRAID_SOAK=N` runs N times as long.

#[path = "common/capped_alloc.rs"]
mod capped_alloc;
mod common;

use capped_alloc::{largest_alloc_bytes, ALLOC_CAP_BYTES};
use common::{KIB, MIB};
use futures::executor::block_on;
use nbraid_core::checksum::{block_crc, BLOCK_BYTES};
use nbraid_core::metadata::{Array, ArrayOptions, MemberMeta, Superblock, SLOT_BYTES};
use nbraid_core::{Buf, CacheMode, Member, MemoryMember, ScrubControl, VolumeOptions};
use nbraid_layout::{Level, Node, ParityLayout, Region, Shape};
use proptest::prelude::*;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

const STRIP: u64 = 16 * KIB;
/// Two entry pages, so two header groups.
const REGION: u64 = 3 * MIB;
const RESERVE: u64 = MIB;
const START: u64 = MIB + RESERVE;
const MEMBER_BYTES: u64 = START + REGION;
const HEADER_BYTES: u64 = 4096;
const ENTRY_BYTES: u64 = 8;
const ENTRY_TAG: u32 = 0x4d55_5343;
const REGION_BLOCKS: u64 = REGION / BLOCK_BYTES;

/// A checksummed volume created, filled and partly rewritten, then dropped clean or dirty.
struct Base {
    tree: Node,
    members: Vec<Vec<u8>>,
    image: Vec<u8>,
}

fn opts() -> ArrayOptions {
    ArrayOptions {
        volume: VolumeOptions {
            cache: CacheMode::WriteThrough,
            ..VolumeOptions::default()
        },
        bitmap_chunk_bytes: Some(64 * KIB),
        checksum_area_before_region_bytes: Some(RESERVE),
        ..ArrayOptions::default()
    }
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (seed as usize * 131 + i * 7 + i / 4096) as u8)
        .collect()
}

fn memory_members(bytes: &[Vec<u8>]) -> Vec<Arc<MemoryMember>> {
    bytes
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let d = MemoryMember::new(format!("disk{i}"), b.len() as u64);
            d.poke(0, b);
            Arc::new(d)
        })
        .collect()
}

fn metas(disks: &[Arc<MemoryMember>]) -> Vec<Option<Arc<MemberMeta>>> {
    disks
        .iter()
        .map(|d| Some(block_on(MemberMeta::load(d.clone() as Arc<dyn Member>))))
        .collect()
}

fn contents(disks: &[Arc<MemoryMember>]) -> Vec<Vec<u8>> {
    disks
        .iter()
        .map(|d| {
            let mut b = vec![0u8; d.len() as usize];
            d.peek(0, &mut b);
            b
        })
        .collect()
}

fn base(level: Level, n: usize, clean: bool) -> Base {
    let shape = Shape::new(level, n, None, STRIP, ParityLayout::LeftSymmetric).expect("shape");
    let region = Region {
        start: START,
        len: REGION,
    };
    let tree = shape.build(&vec![region; n]).expect("tree");
    let disks = memory_members(&vec![vec![0u8; MEMBER_BYTES as usize]; n]);
    let metas = metas(&disks).into_iter().flatten().collect();
    let (a, _) = block_on(Array::create(
        "vol",
        tree.clone(),
        metas,
        opts(),
        true,
        &|_, _| {},
    ))
    .expect("create");
    let capacity = a.volume().capacity() as usize;
    let mut image = pattern(1, capacity);
    block_on(a.write(0, Buf::copy_from(&image), false)).expect("fill");
    block_on(a.flush()).expect("flush");
    // Partial-stripe writes in both header groups of every member.
    for (i, at) in [8 * KIB, 3 * STRIP + 4 * KIB, 5 * MIB + 12 * KIB]
        .into_iter()
        .enumerate()
    {
        let new = pattern(10 + i as u64, 4096);
        let at = at as usize;
        image[at..at + 4096].copy_from_slice(&new);
        block_on(a.write(at as u64, Buf::copy_from(&new), false)).expect("partial write");
    }
    if clean {
        block_on(a.mark_clean()).expect("clean");
    }
    drop(a); // clean, or a crash with the entries of the last writes lagging
    Base {
        tree,
        members: contents(&disks),
        image,
    }
}

/// What one input does to one member's checksum area.
#[derive(Clone, Debug)]
enum Mutation {
    /// Bytes of the header (the page groups' bits) overwritten.
    Header { at: u64, bytes: Vec<u8> },
    /// Bytes of the entries overwritten.
    Entries { at: u64, bytes: Vec<u8> },
    /// `count` entries from `block` on say "known" with a wrong CRC.
    Lie { block: u64, count: u64, xor: u32 },
    /// `count` entries from `block` on hold the right CRCs of other blocks' bytes, or of
    /// their own bytes at another place (a misdirected write of the area or the data).
    Shifted { block: u64, count: u64, by: u64 },
    /// `count` entries from `block` on hold the CRC of the block's bytes as the volume held
    /// them before the last writes (an entry page that lagged, then landed out of order).
    Stale { block: u64, count: u64 },
    /// `count` entries from `block` on say "no checksum".
    Unknown { block: u64, count: u64 },
}

/// When the mutation happens.
#[derive(Clone, Copy, Debug)]
enum When {
    /// On the bytes the array is opened from.
    BeforeOpen,
    /// On the member under the open array, after it read the first `read_first` bytes.
    Running { read_first: u64 },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let block = 0..REGION_BLOCKS;
    let count = prop_oneof![Just(1u64), 1u64..8, 1u64..REGION_BLOCKS];
    prop_oneof![
        (
            0..HEADER_BYTES,
            proptest::collection::vec(any::<u8>(), 1..16)
        )
            .prop_map(|(at, bytes)| Mutation::Header { at, bytes }),
        (
            0..REGION_BLOCKS * ENTRY_BYTES,
            proptest::collection::vec(any::<u8>(), 1..64)
        )
            .prop_map(|(at, bytes)| Mutation::Entries { at, bytes }),
        (block.clone(), count.clone(), 1..=u32::MAX)
            .prop_map(|(block, count, xor)| Mutation::Lie { block, count, xor }),
        (block.clone(), count.clone(), 1..REGION_BLOCKS)
            .prop_map(|(block, count, by)| Mutation::Shifted { block, count, by }),
        (block.clone(), count.clone()).prop_map(|(block, count)| Mutation::Stale { block, count }),
        (block, count).prop_map(|(block, count)| Mutation::Unknown { block, count }),
    ]
}

fn when() -> impl Strategy<Value = When> {
    prop_oneof![
        Just(When::BeforeOpen),
        (0..4u64).prop_map(|q| When::Running {
            read_first: q * MIB
        }),
    ]
}

/// The victim's checksum area (offset on the member), from its newest superblock copy.
fn area_offset(bytes: &[u8]) -> u64 {
    let copies = [0, SLOT_BYTES as usize].map(|at| Superblock::decode(&bytes[at..]).ok());
    let sb = copies
        .into_iter()
        .flatten()
        .max_by_key(|s| s.generation)
        .expect("a superblock");
    sb.volumes[0].checksums.expect("a checksum area").offset
}

fn entry_bytes(crc: u32) -> [u8; 8] {
    let mut e = [0u8; 8];
    e[..4].copy_from_slice(&crc.to_le_bytes());
    e[4..].copy_from_slice(&ENTRY_TAG.to_le_bytes());
    e
}

/// The entry a block of `region` (the member's region bytes) would have: its right CRC.
fn right_entry(region: &[u8], block: u64) -> [u8; 8] {
    let at = (block * BLOCK_BYTES) as usize;
    let data = &region[at..at + BLOCK_BYTES as usize];
    entry_bytes(block_crc(START / BLOCK_BYTES + block, data))
}

/// Applies `m` to `area` (the victim's checksum area: header and entries) given its region
/// bytes now (`region`) and before the base's last writes (`older`).
fn apply(m: &Mutation, area: &mut [u8], region: &[u8], older: &[u8]) {
    let entries = &mut area[HEADER_BYTES as usize..];
    let run = |block: u64, count: u64| block..(block + count).min(REGION_BLOCKS);
    let mut put = |b: u64, e: [u8; 8]| {
        let at = (b * ENTRY_BYTES) as usize;
        entries[at..at + 8].copy_from_slice(&e);
    };
    match m {
        Mutation::Header { at, bytes } => {
            let at = *at as usize;
            let n = bytes.len().min(HEADER_BYTES as usize - at);
            area[at..at + n].copy_from_slice(&bytes[..n]);
        }
        Mutation::Entries { at, bytes } => {
            let at = (HEADER_BYTES + at) as usize;
            let n = bytes.len().min(area.len() - at);
            area[at..at + n].copy_from_slice(&bytes[..n]);
        }
        Mutation::Lie { block, count, xor } => {
            for b in run(*block, *count) {
                let right = u32::from_le_bytes(right_entry(region, b)[..4].try_into().unwrap());
                put(b, entry_bytes(right ^ xor));
            }
        }
        Mutation::Shifted { block, count, by } => {
            for b in run(*block, *count) {
                put(b, right_entry(region, (b + by) % REGION_BLOCKS));
            }
        }
        Mutation::Stale { block, count } => {
            for b in run(*block, *count) {
                put(b, right_entry(older, b));
            }
        }
        Mutation::Unknown { block, count } => {
            for b in run(*block, *count) {
                put(b, [0; 8]);
            }
        }
    }
}

/// Mutates the victim member `disk` in place.
fn mutate(disk: &MemoryMember, m: &Mutation, older_region: &[u8]) {
    let mut sb = vec![0u8; 2 * SLOT_BYTES as usize];
    disk.peek(0, &mut sb);
    let offset = area_offset(&sb);
    let area_len = HEADER_BYTES + (REGION_BLOCKS * ENTRY_BYTES).next_multiple_of(4096);
    let mut area = vec![0u8; area_len as usize];
    disk.peek(offset, &mut area);
    let mut region = vec![0u8; REGION as usize];
    disk.peek(START, &mut region);
    apply(m, &mut area, &region, older_region);
    disk.poke(offset, &area);
}

fn regions(disks: &[Arc<MemoryMember>]) -> Vec<Vec<u8>> {
    disks
        .iter()
        .map(|d| {
            let mut r = vec![0u8; REGION as usize];
            d.peek(START, &mut r);
            r
        })
        .collect()
}

/// Reads the whole volume: every byte as written, or an error naming the volume.
fn read_back(a: &Array, want: &[u8], when: &str) -> Result<bool, TestCaseError> {
    match block_on(a.read(0, a.volume().capacity())) {
        Ok(got) => {
            prop_assert!(got[..] == want[..], "{when}: wrong bytes served");
            Ok(true)
        }
        Err(e) => {
            // A lying entry the redundancy cannot overrule (the bytes rebuilt for the block
            // match the bytes read, not the entry) is refused: allowed, and counted.
            let e = e.to_string();
            prop_assert!(
                e.contains("checksum") || e.contains("vol"),
                "{when}: an error that says neither the volume nor the checksum: {e}"
            );
            REFUSED.fetch_add(1, SeqCst);
            Ok(false)
        }
    }
}

/// Whole-volume reads refused (an error, never wrong bytes).
static REFUSED: AtomicU64 = AtomicU64::new(0);

fn open(base: &Base, disks: &[Arc<MemoryMember>]) -> Result<Array, String> {
    block_on(Array::open(
        "vol",
        &base.tree,
        metas(disks),
        opts(),
        &|_, _| {},
    ))
    .map(|(a, _)| a)
    .map_err(|e| e.to_string())
}

/// One input: the volume opened from `base` with member `victim`'s area mutated by `m` at
/// `when`; the checks of the module docs. `older` is the victim's region before the last
/// writes (for [`Mutation::Stale`]).
fn check(
    base: &Base,
    older: &[u8],
    victim: usize,
    m: &Mutation,
    when: When,
) -> Result<(), TestCaseError> {
    let disks = memory_members(&base.members);
    let before = regions(&disks);
    if matches!(when, When::BeforeOpen) {
        mutate(&disks[victim], m, older);
    }
    let a = match open(base, &disks) {
        Ok(a) => a,
        Err(e) => {
            prop_assert!(e.contains("vol"), "a refusal that names no volume: {e}");
            return Ok(());
        }
    };
    if let When::Running { read_first } = when {
        let n = read_first.min(a.volume().capacity());
        let got = block_on(a.read(0, n)).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert!(got[..] == base.image[..n as usize], "before the mutation");
        mutate(&disks[victim], m, older);
    }
    read_back(&a, &base.image, "first read")?;
    let scrub = ScrubControl::new(true, 0);
    if let Err(e) = block_on(a.scrub(&scrub)) {
        let e = e.to_string();
        prop_assert!(e.contains("vol"), "a scrub error naming no volume: {e}");
    }
    read_back(&a, &base.image, "after the scrub")?;
    block_on(a.flush()).map_err(|e| TestCaseError::fail(e.to_string()))?;
    block_on(a.mark_clean()).map_err(|e| TestCaseError::fail(e.to_string()))?;
    drop(a);
    let after = regions(&disks);
    for (i, (b, a)) in before.iter().zip(&after).enumerate() {
        let at = b.iter().zip(a).position(|(x, y)| x != y);
        prop_assert!(at.is_none(), "member {i}'s region changed at {at:?}");
    }
    let a = open(base, &disks).map_err(TestCaseError::fail)?;
    read_back(&a, &base.image, "after a clean reopen")?;
    prop_assert!(largest_alloc_bytes() <= ALLOC_CAP_BYTES);
    Ok(())
}

/// The bases: RAID 5 of 4 and RAID 6 of 5, each dropped clean and dirty; with each, its
/// members' regions before the last writes (entries of those bytes are stale ones).
fn bases() -> Vec<(Base, Vec<Vec<u8>>)> {
    let mut out = Vec::new();
    for (level, n) in [(Level::Raid5, 4), (Level::Raid6, 5)] {
        for clean in [true, false] {
            let b = base(level, n, clean);
            let older = older_regions(level, n);
            out.push((b, older));
        }
    }
    out
}

/// Each member's region of a base before its partial writes: the full write alone.
fn older_regions(level: Level, n: usize) -> Vec<Vec<u8>> {
    let shape = Shape::new(level, n, None, STRIP, ParityLayout::LeftSymmetric).expect("shape");
    let region = Region {
        start: START,
        len: REGION,
    };
    let tree = shape.build(&vec![region; n]).expect("tree");
    let disks = memory_members(&vec![vec![0u8; MEMBER_BYTES as usize]; n]);
    let metas = metas(&disks).into_iter().flatten().collect();
    let (a, _) =
        block_on(Array::create("vol", tree, metas, opts(), true, &|_, _| {})).expect("create");
    let image = pattern(1, a.volume().capacity() as usize);
    block_on(a.write(0, Buf::copy_from(&image), false)).expect("fill");
    drop(a);
    regions(&disks)
}

#[test]
fn hostile_checksum_areas_never_serve_wrong_bytes_nor_damage_good_ones() {
    let bases = bases();
    let detail = || {
        let (refused, largest) = (REFUSED.load(SeqCst), largest_alloc_bytes());
        format!(", {refused} reads refused, largest allocation {largest} bytes")
    };
    let budget = Duration::from_secs(15 * common::soak());
    let strategy = (0..bases.len(), 0usize..5, mutation(), when());
    let what = "hostile checksums";
    common::fuzz_for(
        (what, &detail),
        (budget, 50),
        &strategy,
        |(b, victim, m, when)| {
            let (base, older) = &bases[b];
            let victim = victim % base.members.len();
            check(base, &older[victim], victim, &m, when)
        },
    );
}
