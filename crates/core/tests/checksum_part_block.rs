//! A volume of 512-byte blocks with per-block checksums (one per 4 KiB): a read of part of a
//! 4 KiB block that a member returns corrupted is served from the redundancy and the block
//! repaired whole. Rewriting only the rows read left the rest of the block corrupted with its
//! checksum dropped ("unknown": a part write cannot vouch for the bytes it keeps), so the next
//! read of the rest returned the corrupted bytes as good (found by `geometry_sweep.rs`).

mod common;

use common::{KIB, MIB};
use futures::executor::block_on;
use nbraid_core::metadata::{Array, ArrayOptions, MemberMeta, METADATA_AREA_BYTES};
use nbraid_core::{Buf, CacheMode, Member, MemoryMember, ReadPolicy, VolumeOptions};
use nbraid_layout::{Level, ParityLayout, Region, Shape};
use std::sync::Arc;

const RESERVE: u64 = MIB;
const START: u64 = METADATA_AREA_BYTES + RESERVE;
const REGION: u64 = 256 * KIB;

/// `level` over `n` in-memory disks, 4 KiB strips, 512-byte blocks, checksums on; every
/// byte written. Returns the array, its disks and the bytes written.
fn filled(level: Level, n: usize) -> (Array, Vec<Arc<MemoryMember>>, Vec<u8>) {
    let disks: Vec<Arc<MemoryMember>> = (0..n)
        .map(|i| Arc::new(MemoryMember::new(format!("disk{i}"), START + REGION)))
        .collect();
    let metas = (disks.iter())
        .map(|d| block_on(MemberMeta::load(d.clone() as Arc<dyn Member>)))
        .collect();
    let shape = Shape::new(level, n, None, 4 * KIB, ParityLayout::LeftSymmetric).expect("shape");
    let region = Region {
        start: START,
        len: REGION,
    };
    let tree = shape.build(&vec![region; n]).expect("tree");
    let o = ArrayOptions {
        volume: VolumeOptions {
            block_size: 512,
            cache: CacheMode::WriteThrough,
            read_policy: ReadPolicy::RoundRobin,
            ..VolumeOptions::default()
        },
        checksum_area_before_region_bytes: Some(RESERVE),
        ..ArrayOptions::default()
    };
    let (a, _) = block_on(Array::create("vol", tree, metas, o, true, &|_, _| {})).expect("create");
    let bytes: Vec<u8> = (0..a.volume().capacity() as usize)
        .map(|i| (i * 7 + i / 4096) as u8)
        .collect();
    block_on(a.write(0, Buf::copy_from(&bytes), false)).expect("fill");
    (a, disks, bytes)
}

/// Corrupts region block `block` of `disk`, reads the first 3 KiB of volume bytes `at..` (on
/// that block) then the last KiB, then the whole block: all read as written.
fn part_read_then_rest(a: &Array, disk: &MemoryMember, block: u64, at: u64, bytes: &[u8]) {
    disk.poke(START + block * 4096, &[0x5a; 4096]);
    let at = at as usize;
    for (from, len) in [(0, 3 * KIB), (3 * KIB, KIB), (0, 4 * KIB)] {
        let from = at + from as usize;
        let got = block_on(a.read(from as u64, len)).expect("read");
        assert!(
            got[..] == bytes[from..from + len as usize],
            "bytes {from}+{len} of the corrupted block read as written"
        );
    }
}

#[test]
fn raid5_repairs_the_whole_block_after_a_part_read() {
    let (a, disks, bytes) = filled(Level::Raid5, 3);
    // Left-symmetric over 3: stripe 1 has P on disk 1 and its data chunk 0 on disk 2.
    part_read_then_rest(&a, &disks[2], 1, 8 * KIB, &bytes);
}

#[test]
fn raid1_repairs_the_whole_block_after_a_part_read() {
    let (a, disks, bytes) = filled(Level::Raid1, 2);
    // Both copies may serve a read: corrupt block 5 on the first, then on the second.
    part_read_then_rest(&a, &disks[0], 5, 5 * 4 * KIB, &bytes);
    part_read_then_rest(&a, &disks[1], 6, 6 * 4 * KIB, &bytes);
}

// A write of part of a block whose old bytes are bad on a member: the leaf, reading the rest
// to checksum the block whole, cannot vouch for bad bytes and drops the block's checksum, so
// the bad bytes it kept read back as good. The volume now reads the blocks such a write
// covers in part through the redundancy first (`crate::part_blocks`): the bad copy is
// repaired whole, and the leaf then finds good bytes to checksum the block with.

/// Corrupts region block `block` of `disk`, writes 512 bytes into the middle of volume bytes
/// `at..at+4096` (on that block), then reads the whole block several times (each copy).
fn part_write_then_read(a: &Array, disk: &MemoryMember, block: u64, at: u64, bytes: &mut [u8]) {
    disk.poke(START + block * 4096, &[0x5a; 4096]);
    let at = at as usize;
    let new = [0xc3u8; 512];
    bytes[at + 1024..at + 1536].copy_from_slice(&new);
    block_on(a.write(at as u64 + 1024, Buf::copy_from(&new), false)).expect("write");
    for _ in 0..4 {
        let got = block_on(a.read(at as u64, 4096)).expect("read");
        assert!(
            got[..] == bytes[at..at + 4096],
            "the block reads as written"
        );
    }
}

#[test]
fn raid1_part_write_into_a_corrupted_block_keeps_the_rest() {
    let (a, disks, mut bytes) = filled(Level::Raid1, 2);
    part_write_then_read(&a, &disks[0], 5, 5 * 4 * KIB, &mut bytes);
}

#[test]
fn raid5_part_write_into_a_corrupted_block_keeps_the_rest() {
    let (a, disks, mut bytes) = filled(Level::Raid5, 3);
    part_write_then_read(&a, &disks[2], 1, 8 * KIB, &mut bytes);
}

/// Two writes of different sectors of one block at once both land: neither writes back the
/// other's old bytes. (Nothing is merged today — each heals, then writes only its own bytes;
/// this guards against a design that widens part writes to whole blocks, which the crash
/// simulator rejected.)
#[test]
fn part_writes_of_one_block_at_once_both_land() {
    for (level, n) in [(Level::Raid1, 2), (Level::Raid5, 3)] {
        let (a, _disks, mut bytes) = filled(level, n);
        let at = 12 * KIB as usize;
        let (x, y) = ([0x11u8; 512], [0x22u8; 1024]);
        bytes[at + 512..at + 1024].copy_from_slice(&x);
        bytes[at + 2048..at + 3072].copy_from_slice(&y);
        let (rx, ry) = block_on(futures::future::join(
            a.write(at as u64 + 512, Buf::copy_from(&x), false),
            a.write(at as u64 + 2048, Buf::copy_from(&y), false),
        ));
        rx.expect("write x");
        ry.expect("write y");
        let got = block_on(a.read(at as u64, 4096)).expect("read");
        assert!(
            got[..] == bytes[at..at + 4096],
            "{level:?}: both writes kept"
        );
    }
}

/// Zeroing part of a block whose bytes are bad on a member: the rest of the block is healed
/// and the block keeps a checksum — a later corruption of its other bytes is still caught.
/// (A leaf zeroing part of a block drops its entry: the bad bytes it kept read as good.)
#[test]
fn part_zeroes_into_a_corrupted_block_keep_the_rest_checked() {
    for (level, n, disk, block, at) in [
        (Level::Raid1, 2, 0, 5, 20 * KIB),
        (Level::Raid5, 3, 2, 1, 8 * KIB),
    ] {
        let (a, disks, mut bytes) = filled(level, n);
        let at = at as usize;
        disks[disk].poke(START + block * 4096, &[0x5a; 4096]);
        bytes[at + 1024..at + 1536].fill(0);
        block_on(a.write_zeroes(at as u64 + 1024, 512, false)).expect("zero");
        for round in 0..2 {
            for _ in 0..4 {
                let got = block_on(a.read(at as u64, 4096)).expect("read");
                assert!(
                    got[..] == bytes[at..at + 4096],
                    "{level:?} round {round}: as written"
                );
            }
            // Bad again: still checked, so served from the redundancy.
            disks[disk].poke(START + block * 4096 + 2048, &[0x77; 512]);
        }
    }
}

/// A write of part of a block whose bytes are bad where nothing can rebuild them (RAID 0,
/// JBOD): the write is refused — keeping the bad rest under a dropped checksum would serve
/// it as good later — and the block keeps failing reads until a write covers it whole.
/// Nothing around it is touched.
#[test]
fn a_part_write_into_a_block_nothing_can_heal_is_refused_until_the_block_is_written_whole() {
    // Block 3 of disk 0 holds volume bytes 24..28 KiB on RAID 0 of 2 (4 KiB strips), 12..16
    // KiB on JBOD.
    for (level, at) in [(Level::Raid0, 24 * KIB), (Level::Jbod, 12 * KIB)] {
        let (a, disks, mut bytes) = filled(level, 2);
        let at = at as usize;
        disks[0].poke(START + 3 * 4096, &[0x5a; 4096]);
        let e = block_on(a.write(at as u64 + 1024, Buf::copy_from(&[0xc3; 512]), false));
        assert!(
            e.is_err(),
            "{level:?}: a part write over bad bytes is refused"
        );
        assert!(
            block_on(a.read(at as u64, 4096)).is_err(),
            "{level:?}: still bad"
        );
        let around = block_on(a.read(at as u64 - 4096, 4096)).expect("the block before");
        assert!(
            around[..] == bytes[at - 4096..at],
            "{level:?}: the block before"
        );
        let after = block_on(a.read(at as u64 + 4096, 4096)).expect("the block after");
        assert!(
            after[..] == bytes[at + 4096..at + 8192],
            "{level:?}: the block after"
        );
        // A whole-block write makes the block good again, part writes then land.
        bytes[at..at + 4096].fill(0x3c);
        block_on(a.write(at as u64, Buf::copy_from(&bytes[at..at + 4096]), false)).expect("whole");
        bytes[at + 1024..at + 1536].fill(0xc3);
        block_on(a.write(at as u64 + 1024, Buf::copy_from(&[0xc3; 512]), false)).expect("part");
        let got = block_on(a.read(at as u64, 4096)).expect("read");
        assert!(got[..] == bytes[at..at + 4096], "{level:?}: as written");
    }
}
