//! A write error on a member the volume cannot do without, and from which no parity is
//! derived (RAID 0, concat, the last copy of a mirror), that still answers reads (a bad spot,
//! a full file system): the write answers an error and the member keeps serving every other
//! block, as md's RAID 0 does — found by a fault hunt: one 64 KiB write error (or ENOSPC)
//! failed the member, every read of the RAID 0 then answered EIO, and the next start refused
//! the volume without --force-assemble. Under a parity group the member is still failed (its
//! peers' parity would be stale against it); so is a dead one that reads nothing either
//! (`faults.rs`, `raid0_beyond_tolerance_errors_and_never_returns_wrong_data`).

mod common;

use common::arrays::{create_first, write_clean};
use common::{level_tree, named, BadSpot, Breaking, KIB, MIB};
use futures::executor::block_on;
use nbraid_core::metadata::{Array, ArrayOptions, METADATA_AREA_BYTES};
use nbraid_core::{Buf, CacheMode, Member, MemoryMember, Volume, VolumeOptions};
use nbraid_layout::{Level, Node};
use std::sync::atomic::Ordering;
use std::sync::Arc;

const REGION: u64 = 4 * MIB;
const STRIP: u64 = 64 * KIB;

/// Disks whose data region (not their metadata) can be broken.
fn disks(n: usize) -> Vec<Arc<Breaking>> {
    (0..n)
        .map(|i| {
            Arc::new(Breaking {
                from_byte: METADATA_AREA_BYTES,
                ..Breaking::new(&format!("d{i}"), METADATA_AREA_BYTES + REGION)
            })
        })
        .collect()
}

fn opts() -> ArrayOptions {
    ArrayOptions {
        bitmap_chunk_bytes: Some(256 * KIB),
        ..ArrayOptions::default()
    }
}

/// The array over `tree` with every byte written (a pattern), and the pattern.
fn filled(tree: &Node, d: &[Arc<Breaking>]) -> (Array, Vec<u8>) {
    let a = create_first(tree, d, opts(), true).expect("create");
    let bytes: Vec<u8> = (0..a.volume().capacity())
        .map(|i| (i as u8).wrapping_mul(7) ^ (i >> 12) as u8)
        .collect();
    write_clean(&a, &bytes).expect("fill");
    (a, bytes)
}

/// Writes 64 KiB at every strip-aligned place while member `broken` fails writes; returns
/// the places whose write failed. The bytes of the others are applied to `model`.
fn writes_with_one_broken(a: &Array, model: &mut [u8]) -> Vec<u64> {
    let mut failed = Vec::new();
    for at in (0..a.volume().capacity()).step_by(STRIP as usize) {
        let b = Buf::copy_from(&[0xab; STRIP as usize]);
        match block_on(a.write(at, b, false)) {
            Ok(_) => model[at as usize..(at + STRIP) as usize].fill(0xab),
            Err(_) => failed.push(at),
        }
    }
    failed
}

/// Reads every strip: the ones a failed write touched answer an error or any bytes (that
/// write was refused); every other reads as the model.
fn reads_right_but(a: &Array, model: &[u8], failed: &[u64]) {
    for at in (0..a.volume().capacity()).step_by(STRIP as usize) {
        let got = block_on(a.volume().read(at, STRIP));
        if failed.contains(&at) {
            continue;
        }
        let got = got.unwrap_or_else(|e| panic!("strip at {at} does not read: {e}"));
        assert!(
            got[..] == model[at as usize..(at + STRIP) as usize],
            "strip at {at} reads wrong"
        );
    }
}

#[test]
fn a_member_nothing_can_do_without_is_kept_through_a_write_error() {
    let raid0 = level_tree(Level::Raid0, 2, STRIP, METADATA_AREA_BYTES, REGION);
    let jbod = level_tree(Level::Jbod, 2, STRIP, METADATA_AREA_BYTES, REGION);
    for (what, tree) in [("raid0", raid0), ("jbod", jbod)] {
        let d = disks(2);
        let (a, mut model) = filled(&tree, &d);
        d[1].broken.store(true, Ordering::SeqCst);
        let failed = writes_with_one_broken(&a, &mut model);
        assert!(!failed.is_empty(), "{what}: some writes reach d1");
        assert!(
            !a.volume().member_is_failed(1),
            "{what}: d1 was failed: {:?}",
            a.volume().member_health()[1].failure
        );
        assert!(a.volume().member_health()[1].write_errors > 0, "{what}");
        reads_right_but(&a, &model, &failed);
        // The disk answers again: the refused writes go through.
        d[1].broken.store(false, Ordering::SeqCst);
        assert!(writes_with_one_broken(&a, &mut model).is_empty(), "{what}");
        reads_right_but(&a, &model, &[]);
    }
}

#[test]
fn the_last_copy_of_a_mirror_is_kept_a_redundant_member_is_failed() {
    let tree = level_tree(Level::Raid1, 2, STRIP, METADATA_AREA_BYTES, REGION);
    let d = disks(2);
    let (a, mut model) = filled(&tree, &d);
    d[1].broken.store(true, Ordering::SeqCst);
    // Both copies current: d1 is failed at its first write error, every write succeeds.
    assert!(writes_with_one_broken(&a, &mut model).is_empty());
    assert!(a.volume().member_is_failed(1));
    // d0 now holds the only copy: kept through its own write errors.
    d[0].broken.store(true, Ordering::SeqCst);
    let failed = writes_with_one_broken(&a, &mut model);
    assert!(!failed.is_empty());
    assert!(!a.volume().member_is_failed(0));
    d[0].broken.store(false, Ordering::SeqCst);
    reads_right_but(&a, &model, &failed);
}

/// A member that refuses every write, its superblock's and bitmap's too, but reads (an SSD
/// gone read-only): kept through the commits that follow, so the volume keeps serving all
/// it holds. Before, the first commit after its data write was kept failed it, and the RAID 0
/// with it; a forced start failed it again at its own commit, so its bytes never read again.
/// Its records lag the others' now: a restart takes it back by force, and serves it (when
/// another member takes the start's records).
#[test]
fn a_member_gone_read_only_is_kept_through_its_superblock_writes() {
    let raid0 = level_tree(Level::Raid0, 2, STRIP, METADATA_AREA_BYTES, REGION);
    let raid1 = level_tree(Level::Raid1, 2, STRIP, METADATA_AREA_BYTES, REGION);
    for (what, tree) in [("raid0", raid0), ("raid1", raid1)] {
        let d: Vec<Arc<Breaking>> = (0..2)
            .map(|i| {
                Arc::new(Breaking::new(
                    &format!("d{i}"),
                    METADATA_AREA_BYTES + REGION,
                ))
            })
            .collect();
        let (a, mut model) = filled(&tree, &d);
        if what == "raid1" {
            // d1 then holds the only copy.
            a.volume().fail_member(0, "test: d0 is gone");
            block_on(a.flush()).expect("flush records d0 failed");
        }
        d[1].broken.store(true, Ordering::SeqCst);
        let failed = writes_with_one_broken(&a, &mut model);
        assert!(!failed.is_empty(), "{what}: some writes reach d1");
        // Commits: the flush's, the clean mark's.
        let flushed = block_on(a.flush());
        let marked = block_on(a.mark_clean());
        assert!(
            !a.volume().member_is_failed(1),
            "{what}: d1 was failed ({flushed:?}, {marked:?}): {:?}",
            a.volume().member_health()[1].failure
        );
        reads_right_but(&a, &model, &failed);
        drop(a);

        let forced = ArrayOptions {
            force_assembly: true,
            ..opts()
        };
        let opened = common::arrays::open_every(&tree, &d, forced);
        if what == "raid1" {
            // No member can take the start's records: refused, saying why and naming the
            // start that serves it without writing.
            let e = opened.err().expect("no member takes the records");
            assert!(e.contains("superblock write failed"), "{e}");
            assert!(e.contains("start it with read_only = true"), "{e}");
            continue;
        }
        let (a, _) = opened.unwrap_or_else(|e| panic!("{what}: a forced start: {e}"));
        assert!(
            !a.volume().member_is_failed(1),
            "{what}: d1 failed at the start's commit: {:?}",
            a.volume().member_health()[1].failure
        );
        reads_right_but(&a, &model, &failed);
    }
}

#[test]
fn under_parity_the_member_is_failed_whatever_it_costs() {
    let tree = level_tree(Level::Raid5, 3, STRIP, METADATA_AREA_BYTES, REGION);
    let d = disks(3);
    let (a, mut model) = filled(&tree, &d);
    a.volume().fail_member(0, "test: d0 is gone");
    d[1].broken.store(true, Ordering::SeqCst);
    let _ = writes_with_one_broken(&a, &mut model);
    assert!(
        a.volume().member_is_failed(1),
        "a write d1 refused leaves d2's parity stale against it"
    );
}

/// With checksums on, a refused write leaves its blocks' old bytes readable: their entries
/// are dropped with the write, not left for the new bytes (a fault hunt found every block of
/// a refused 1 MiB write reading EIO as "checksum mismatch" and counted as bad, for good).
#[test]
fn a_refused_write_leaves_the_old_bytes_readable_with_checksums_on() {
    const RESERVE: u64 = MIB;
    let start = METADATA_AREA_BYTES + RESERVE;
    let tree = level_tree(Level::Raid0, 2, STRIP, start, REGION);
    let d: Vec<Arc<Breaking>> = (0..2)
        .map(|i| {
            Arc::new(Breaking {
                from_byte: start,
                ..Breaking::new(&format!("d{i}"), start + REGION)
            })
        })
        .collect();
    let opts = ArrayOptions {
        checksum_area_before_region_bytes: Some(RESERVE),
        ..opts()
    };
    let a = create_first(&tree, &d, opts, true).expect("create");
    let model: Vec<u8> = (0..a.volume().capacity())
        .map(|i| (i as u8).wrapping_mul(5) ^ (i >> 12) as u8)
        .collect();
    write_clean(&a, &model).expect("fill");
    d[1].broken.store(true, Ordering::SeqCst);
    let mut after = model.clone();
    let failed = writes_with_one_broken(&a, &mut after);
    assert!(!failed.is_empty());
    assert!(!a.volume().member_is_failed(1));
    // Every strip reads: the refused ones as they were, the others as written.
    for at in (0..a.volume().capacity()).step_by(STRIP as usize) {
        let got = block_on(a.volume().read(at, STRIP))
            .unwrap_or_else(|e| panic!("strip at {at} does not read: {e}"));
        let want = match failed.contains(&at) {
            true => &model[at as usize..(at + STRIP) as usize],
            false => &after[at as usize..(at + STRIP) as usize],
        };
        assert!(got[..] == want[..], "strip at {at} reads wrong");
    }
    let sums = a
        .volume()
        .options()
        .checksums
        .as_ref()
        .expect("checksums on");
    for i in 0..2 {
        let errors = sums
            .counters(i)
            .expect("counters")
            .errors
            .load(Ordering::Relaxed);
        assert_eq!(errors, 0, "d{i}: old bytes counted as bad blocks");
    }
}

/// A bad spot on the very block the keep's probe used to read (the region's first) is still
/// a bad spot: the probe reads away from the write that failed (a fault hunt saw one such
/// sector fail a RAID 0's member and with it the whole volume).
#[test]
fn a_bad_spot_at_the_region_start_is_not_taken_for_a_dead_disk() {
    let mut spot = BadSpot::new("d1", MIB, 0..4096);
    spot.writes_fail = true;
    let spot = Arc::new(spot);
    let members: Vec<Arc<dyn Member>> = vec![Arc::new(MemoryMember::new("d0", MIB)), spot];
    let opts = VolumeOptions {
        cache: CacheMode::WriteThrough,
        ..VolumeOptions::default()
    };
    let v = Volume::new(named(Level::Raid0, 2, None, STRIP, MIB), members, opts).expect("volume");
    // Strip 1 starts d1's region.
    let e = block_on(v.write(STRIP, Buf::copy_from(&[7; 4096]), false));
    assert!(e.is_err(), "the write over the bad spot answers an error");
    assert!(
        !v.member_is_failed(1),
        "d1 was failed: {:?}",
        v.member_health()[1].failure
    );
    block_on(v.write(STRIP + 4096, Buf::copy_from(&[8; 4096]), false)).expect("beside it");
    assert!(block_on(v.read(STRIP + 4096, 4096)).expect("read")[..] == [8; 4096][..]);
}
