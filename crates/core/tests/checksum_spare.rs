//! Per-block checksums on members that take a role after the volume was created: a hot spare
//! rebuilt into a failed role (present at start or missing), and a replacement. Each must end
//! with the role's checksum area recorded and valid for every block: a block corrupted on it
//! behind the engine's back reads back right and is repaired, at once and after a restart;
//! forged entries left on the new disk never make a false mismatch; and an unclean restart
//! after the rebuild reads without checksum errors.

mod common;

use common::arrays::{self, all, apply, meta, Model};
use common::{KIB, MIB};
use futures::executor::block_on;
use nbraid_core::checksum::BLOCK_BYTES;
use nbraid_core::metadata::{Array, ArrayOptions, METADATA_AREA_BYTES};
use nbraid_core::{CacheMode, Member, MemoryMember, PassControl, PassState, VolumeOptions};
use nbraid_layout::{Level, Node, ParityLayout, Region, Shape};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

const REGION: u64 = 4 * MIB;
const RESERVE: u64 = MIB;
const START: u64 = METADATA_AREA_BYTES + RESERVE;
const MEMBER_BYTES: u64 = START + REGION;

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
            read_policy: nbraid_core::ReadPolicy::RoundRobin,
            ..VolumeOptions::default()
        },
        bitmap_chunk_bytes: Some(256 * KIB),
        bitmap_clear_delay: Duration::ZERO,
        ppl: false,
        checksum_area_before_region_bytes: Some(RESERVE),
        ..ArrayOptions::default()
    }
}

fn disk(name: &str) -> Arc<MemoryMember> {
    Arc::new(MemoryMember::new(name, MEMBER_BYTES))
}

/// A disk whose checksum reserve holds forged entries (right tag, wrong CRC) and a full
/// header: left as they are, every block read from it would be a false mismatch.
fn forged_disk(name: &str) -> Arc<MemoryMember> {
    let d = disk(name);
    let mut bytes = Vec::with_capacity(RESERVE as usize);
    while bytes.len() < RESERVE as usize {
        bytes.extend_from_slice(&0xdead_beef_u32.to_le_bytes());
        bytes.extend_from_slice(&0x4d55_5343_u32.to_le_bytes());
    }
    d.poke(METADATA_AREA_BYTES, &bytes);
    d
}

fn create(level: Level, disks: &[Arc<MemoryMember>], strip: u64) -> Array {
    arrays::create(&tree(level, disks.len(), strip), disks, opts())
}

fn open(level: Level, disks: &[Option<Arc<MemoryMember>>], strip: u64) -> Array {
    arrays::open(&tree(level, disks.len(), strip), disks, opts())
}

/// Reads the whole volume several times in pieces of several sizes (so a mirror's reads
/// reach every copy); returns the last pass's bytes.
fn read_all(a: &Array) -> Vec<u8> {
    arrays::read_all(a, 6, 5)
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

fn corrupt(d: &MemoryMember, region_block: u64) {
    d.poke(
        START + region_block * BLOCK_BYTES,
        &[0x5a; BLOCK_BYTES as usize],
    );
}

/// Corrupts block `inner` (within the strip) of four consecutive strips from `first_row` on
/// `d`: whatever the rotation, some of them hold data a client read reaches.
fn corrupt_rows(d: &MemoryMember, strip: u64, first_row: u64, inner: u64) {
    let (per_strip, rows) = (strip / BLOCK_BYTES, REGION / strip);
    for row in first_row..first_row + 4 {
        corrupt(d, (row % rows) * per_strip + inner % per_strip);
    }
}

/// Rebuilds every role wanting it while `writes` go on; every byte then reads as the model
/// with no checksum error (forged entries on the new disk are not believed).
fn rebuild_under_writes(a: &Array, model: &mut Model, what: &str) {
    let writes = model.writes(30, 32);
    let ctl = PassControl::new(0);
    let (r, ()) = block_on(futures::future::join(a.rebuild(&ctl), apply(a, writes)));
    assert_eq!(r.expect("rebuild").state, PassState::Done, "{what}");
    block_on(a.flush()).expect("flush");
    assert!(!a.volume().is_degraded(), "{what}");
    assert!(read_all(a) == model.bytes, "{what}: reads the model");
    assert_eq!(errors_and_repairs(a), (0, 0), "{what}: no false mismatch");
}

/// Blocks on `d` (role `role`'s new disk) corrupted behind the engine's back read right and
/// are repaired; then a clean restart finds the role's area by its record and does it again;
/// then an unclean restart reads without errors.
fn corrupted_newcomer_reads_right(
    level: Level,
    strip: u64,
    mut disks: Vec<Arc<MemoryMember>>,
    a: Array,
    model: &Model,
    role: usize,
    what: &str,
) {
    let d = disks[role].clone();
    corrupt_rows(&d, strip, 0, 1);
    assert!(
        read_all(&a) == model.bytes,
        "{what}: corrupted blocks read right"
    );
    let (errors, repairs) = errors_and_repairs(&a);
    assert!(
        errors >= 1 && errors == repairs,
        "{what}: every bad block found is rewritten ({errors} found, {repairs} repaired)"
    );
    assert_eq!(a.volume().failed_count(), 0, "{what}");
    let area = a.volume().options().checksums.as_ref().unwrap().area(role);
    assert!(block_on(a.mark_clean()).expect("clean").is_recorded());
    drop(a);
    disks[role] = d.clone();
    let a = open(level, &all(&disks), strip);
    let setup = a.volume().options().checksums.as_ref().expect("checksums");
    assert_eq!(setup.area(role), area, "{what}: recorded where it was used");
    corrupt_rows(&d, strip, 4, 7);
    assert!(read_all(&a) == model.bytes, "{what}: after a restart");
    assert!(
        errors_and_repairs(&a).0 >= 1,
        "{what}: found after a restart"
    );
    // Writes since the clean start, then a power loss: nothing reads as an error.
    let mut model2 = Model::of(model.bytes.clone(), 99);
    block_on(apply(&a, model2.writes(20, 32)));
    block_on(a.flush()).expect("flush");
    drop(a);
    let a = open(level, &all(&disks), strip);
    assert!(
        read_all(&a) == model2.bytes,
        "{what}: after an unclean restart"
    );
    assert_eq!(errors_and_repairs(&a), (0, 0), "{what}: unclean restart");
}

/// Levels with redundancy and the strips the config accepts (smallest, default, large).
fn cases() -> Vec<(Level, usize, u64)> {
    let mut v = vec![(Level::Raid1, 2, 64 * KIB), (Level::Raid1, 3, 64 * KIB)];
    for strip in [4 * KIB, 64 * KIB, MIB] {
        v.extend([
            (Level::Raid5, 3, strip),
            (Level::Raid6, 4, strip),
            (Level::Raid10, 4, strip),
        ]);
    }
    v
}

#[test]
fn a_spare_rebuilt_into_a_role_carries_the_roles_checksums() {
    for (level, n, strip) in cases() {
        let what = format!("{level:?} of {n}, strip {strip}");
        let mut disks: Vec<_> = (0..n).map(|i| disk(&format!("d{i}"))).collect();
        let a = create(level, &disks, strip);
        let mut model = Model::filled(&a, 7);
        a.volume().fail_member(1, "test: pulled");
        let spare = forged_disk("spare");
        a.add_spare(meta(&spare)).expect("spare");
        assert_eq!(block_on(a.use_spares()).expect("use"), vec![1], "{what}");
        rebuild_under_writes(&a, &mut model, &what);
        disks[1] = spare;
        corrupted_newcomer_reads_right(level, strip, disks, a, &model, 1, &what);
    }
}

#[test]
fn a_spare_for_a_role_missing_at_start_gets_the_roles_area() {
    for (level, n, strip) in [(Level::Raid5, 3, 64 * KIB), (Level::Raid1, 2, 64 * KIB)] {
        let what = format!("{level:?} of {n}, missing role");
        let mut disks: Vec<_> = (0..n).map(|i| disk(&format!("d{i}"))).collect();
        let a = create(level, &disks, strip);
        let mut model = Model::filled(&a, 7);
        assert!(block_on(a.mark_clean()).expect("clean").is_recorded());
        let recorded = a.volume().options().checksums.as_ref().unwrap().area(n - 1);
        drop(a);
        let mut some = all(&disks);
        some[n - 1] = None;
        let a = open(level, &some, strip);
        let setup = a.volume().options().checksums.as_ref().unwrap();
        assert_eq!(
            setup.area(n - 1),
            recorded,
            "{what}: the missing role's place"
        );
        let spare = forged_disk("spare");
        a.add_spare(meta(&spare)).expect("spare");
        assert_eq!(block_on(a.use_spares()).expect("use"), vec![n - 1]);
        rebuild_under_writes(&a, &mut model, &what);
        disks[n - 1] = spare;
        corrupted_newcomer_reads_right(level, strip, disks, a, &model, n - 1, &what);
    }
}

/// A replacement takes over its member's checksums — and not its count of bad blocks.
#[test]
fn a_replacement_takes_over_its_members_checksums() {
    let mut v = vec![(Level::Raid1, 2, 64 * KIB), (Level::Raid6, 4, 64 * KIB)];
    v.extend([4 * KIB, 64 * KIB, MIB].map(|s| (Level::Raid5, 3, s)));
    for (level, n, strip) in v {
        let what = format!("{level:?} of {n}, strip {strip}, replaced");
        let mut disks: Vec<_> = (0..n).map(|i| disk(&format!("d{i}"))).collect();
        let a = create(level, &disks, strip);
        let mut model = Model::filled(&a, 7);
        // The member being replaced returned bad blocks: its counts are its own, not its
        // replacement's (`rebuild_under_writes` finds none after the swap).
        corrupt_rows(&disks[1], strip, 0, 1);
        assert!(
            read_all(&a) == model.bytes,
            "{what}: corrupted blocks read right"
        );
        if level != Level::Raid1 {
            assert!(errors_and_repairs(&a).0 >= 1, "{what}: bad blocks counted");
        }
        let new = forged_disk("new");
        block_on(a.replace(1, meta(&new))).expect("replace");
        rebuild_under_writes(&a, &mut model, &what);
        assert!(Arc::ptr_eq(
            &a.volume().member(1),
            &(new.clone() as Arc<dyn Member>)
        ));
        disks[1] = new;
        corrupted_newcomer_reads_right(level, strip, disks, a, &model, 1, &what);
    }
}
