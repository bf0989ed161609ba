//! What a volume keeps across a reshape besides its bytes: every member of the new shape —
//! the added ones too — carries the volume's write-hole log area, its bitmap (grown with the
//! volume) and, on a checksummed volume, its block-checksum area; after the reshape a
//! partial-stripe write is logged and a block corrupted behind the engine on an added member
//! reads back right. (Found missing: the added members' records had no log area, so every
//! parity group spanning one ran without the log, silently, and the bitmap vanished.)

mod common;

use futures::executor::block_on;
use nbraid_core::metadata::disk_rule::Consent;
use nbraid_core::metadata::intent::area_bytes;
use nbraid_core::metadata::{Array, ArrayOptions, MemberMeta, Probe, METADATA_AREA_BYTES};
use nbraid_core::{Buf, Member, MemoryMember, PassControl, PassState, VolumeOptions};
use nbraid_layout::{Level, Node};
use nbraid_sim::Rng;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::arrays::{create_first, metas, open_every, seeded, write_clean};
use common::{KIB, MIB};

/// Where the volume keeps its log and checksums: in the metadata area (log only), or in
/// reserves before the regions (checksums, then the log), as the config leaves them.
#[derive(Clone, Copy, Debug)]
enum Keeping {
    LogInMetadataArea,
    ReservesWithChecksums,
}

const LOG_RESERVE: u64 = MIB;
const SUM_RESERVE: u64 = 64 * KIB;

impl Keeping {
    fn region_start(self) -> u64 {
        match self {
            Keeping::LogInMetadataArea => METADATA_AREA_BYTES,
            Keeping::ReservesWithChecksums => METADATA_AREA_BYTES + SUM_RESERVE + LOG_RESERVE,
        }
    }

    fn opts(self) -> ArrayOptions {
        let reserves = matches!(self, Keeping::ReservesWithChecksums);
        ArrayOptions {
            volume: VolumeOptions::default(),
            bitmap_chunk_bytes: Some(4 * KIB),
            ppl: true,
            bitmap_clear_delay: Duration::ZERO,
            ppl_area_before_region_bytes: reserves.then_some(LOG_RESERVE),
            checksum_area_before_region_bytes: reserves.then_some(SUM_RESERVE),
            ..ArrayOptions::default()
        }
    }
}

fn tree(level: Level, members: usize, strip: u64, start: u64, len: u64) -> Node {
    common::level_tree(level, members, strip, start, len)
}

fn open(config: &Node, disks: &[Arc<MemoryMember>], keeping: Keeping) -> Array {
    open_every(config, disks, keeping.opts()).unwrap().0
}

/// Each member's record of the volume: (role, log area, bitmap bytes, checksum area).
fn recorded_areas(disks: &[Arc<MemoryMember>]) -> Vec<(u32, bool, u64, bool)> {
    let record = |m: &Arc<MemberMeta>| match m.probe() {
        Probe::Superblock(sb, _) => {
            let v = sb
                .volumes
                .iter()
                .find(|v| v.name == "vol")
                .expect("a record");
            let bitmap_bytes = v.bitmap.map_or(0, |b| b.area.len);
            (v.role, v.ppl.is_some(), bitmap_bytes, v.checksums.is_some())
        }
        other => panic!("no superblock: {other:?}"),
    };
    metas(disks).iter().map(record).collect()
}

/// Reshapes `old` into `new` (members added at the end) over a volume full of seeded bytes,
/// to the finish, and opens the new shape alone; then checks what the module docs say.
fn reshape_keeps_its_areas(old: &Node, new: &Node, keeping: Keeping, what: &str) {
    reshape_into(old, new, keeping, what, true);
}

/// [`reshape_keeps_its_areas`]; `logged`: whether the new shape's log is expected (else no
/// member may record one, and writes are not logged).
fn reshape_into(old: &Node, new: &Node, keeping: Keeping, what: &str, logged: bool) {
    // The log's counters are the process's: one test at a time counts its own entries.
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let what = format!("{what}, {keeping:?}");
    let mut member_bytes = 0;
    new.visit_members(&mut |m| member_bytes = member_bytes.max(m.start + m.len));
    let disks: Vec<_> = (0..new.member_count())
        .map(|i| Arc::new(MemoryMember::new(format!("m{i}"), member_bytes)))
        .collect();
    let n_old = old.member_count();
    let created = create_first(old, &disks, keeping.opts(), true).unwrap();
    let want = seeded(&mut Rng::new(7), old.capacity());
    write_clean(&created, &want).unwrap();
    let added = metas(&disks[n_old..]);
    block_on(created.start_reshape(new.clone(), added, &Consent::default()))
        .unwrap_or_else(|e| panic!("{what}: start: {e}"));
    drop(created);
    let a = open(new, &disks, keeping);
    let state = block_on(a.reshape(&PassControl::new(0))).unwrap();
    assert_eq!(state, PassState::Done, "{what}");
    drop(a);
    let a = open(new, &disks, keeping);
    assert_eq!(a.reshape_progress(), None, "{what}: finished");
    let sums = matches!(keeping, Keeping::ReservesWithChecksums);
    let bitmap_need = area_bytes(new.capacity(), 4 * KIB);
    for (i, (role, log, bitmap_bytes, checksums)) in recorded_areas(&disks).into_iter().enumerate()
    {
        let whose = format!("{what}: member {i} (role {role})");
        assert_eq!(log, logged, "{whose}: a write-hole log area recorded");
        assert!(
            bitmap_bytes >= bitmap_need,
            "{whose}: a bitmap of {bitmap_bytes} bytes, {bitmap_need} needed"
        );
        assert_eq!(checksums, sums, "{whose}: a checksum area recorded");
    }
    assert_eq!(a.bitmap_chunk_bytes(), Some(4 * KIB), "{what}: the bitmap");
    assert!(same(&a, &want), "{what}: the bytes after the reshape");
    if sums {
        corrupt_added_members(&disks[n_old..], new, member_bytes);
        assert!(
            same(&a, &want),
            "{what}: corrupted blocks on an added member read back right"
        );
    }
    assert_eq!(
        a.write_hole_logged(),
        Some(logged),
        "{what}: the log closes the write hole"
    );
    let before = nbraid_core::ppl::stats();
    block_on(a.write(4096, Buf::copy_from(&[7u8; 4096]), false)).unwrap();
    block_on(a.flush()).unwrap();
    let entries = nbraid_core::ppl::stats().since(&before).entries;
    if logged {
        assert!(
            entries > 0,
            "{what}: a partial-stripe write after the reshape was not logged"
        );
    }
}

/// Whether the volume reads back `want` (in pieces a request may carry).
fn same(a: &Array, want: &[u8]) -> bool {
    want.chunks(16 * MIB as usize)
        .enumerate()
        .all(|(i, piece)| {
            let back = block_on(a.read(i as u64 * 16 * MIB, piece.len() as u64));
            back.is_ok_and(|b| b[..] == piece[..])
        })
}

/// Overwrites the first 4 KiB block of every 16 KiB of each added member's region with
/// other bytes, behind the engine: data chunks and parity chunks alike.
fn corrupt_added_members(added: &[Arc<MemoryMember>], new: &Node, member_bytes: u64) {
    let mut start = 0;
    new.visit_members(&mut |m| start = m.start);
    for d in added {
        for at in (start..member_bytes).step_by(16 * KIB as usize) {
            block_on(d.write(at, Buf::copy_from(&[0xA5; 4096]).freeze(), false)).unwrap();
        }
    }
}

#[test]
fn every_member_of_a_reshaped_volume_keeps_its_log_bitmap_and_checksums() {
    for keeping in [Keeping::LogInMetadataArea, Keeping::ReservesWithChecksums] {
        let t =
            |level, members, strip| tree(level, members, strip, keeping.region_start(), 512 * KIB);
        let moves = [
            (
                "raid5 3→4",
                t(Level::Raid5, 3, 64 * KIB),
                t(Level::Raid5, 4, 64 * KIB),
            ),
            (
                "raid5 3 → raid6 4",
                t(Level::Raid5, 3, 16 * KIB),
                t(Level::Raid6, 4, 16 * KIB),
            ),
            (
                "raid6 4→5",
                t(Level::Raid6, 4, 16 * KIB),
                t(Level::Raid6, 5, 16 * KIB),
            ),
            (
                "raid1 2 → raid5 3",
                t(Level::Raid1, 2, 16 * KIB),
                t(Level::Raid5, 3, 16 * KIB),
            ),
        ];
        for (what, old, new) in &moves {
            reshape_keeps_its_areas(old, new, keeping, what);
        }
    }
}

/// 128 MiB at 4 KiB a bit fills one 4 KiB bitmap block; grown to 192 MiB it needs two: the
/// members get a larger area (the next open refused a bitmap too small for the volume).
#[test]
fn the_bitmap_grows_with_the_volume() {
    let keeping = Keeping::LogInMetadataArea;
    let t = |members| {
        tree(
            Level::Raid5,
            members,
            64 * KIB,
            keeping.region_start(),
            64 * MIB,
        )
    };
    reshape_keeps_its_areas(&t(3), &t(4), keeping, "raid5 3→4 past the bitmap's block");
}

/// RAID 6 over 256 KiB strips needs a ring of ~1 MiB per member, more than the metadata area
/// holds, and the old members' regions cannot move to make a reserve: the reshape goes on,
/// and no member records a log (an open then warns that the write hole is open) — never
/// some groups logged and others silently not.
#[test]
fn a_new_shape_without_room_for_its_log_records_none_on_any_member() {
    let keeping = Keeping::LogInMetadataArea;
    let t = |level, members| tree(level, members, 256 * KIB, keeping.region_start(), 2 * MIB);
    let (old, new) = (t(Level::Raid5, 4), t(Level::Raid6, 5));
    reshape_into(
        &old,
        &new,
        keeping,
        "raid5 4 → raid6 5, 256 KiB strips",
        false,
    );
}

/// A reshape does not start while the pass computing a volume's checksums
/// (`checksums = "enable"`) has not finished: that pass walks the regions of one shape.
#[test]
fn a_reshape_waits_for_the_checksum_pass() {
    let keeping = Keeping::LogInMetadataArea;
    let t = |members| {
        tree(
            Level::Raid5,
            members,
            64 * KIB,
            keeping.region_start(),
            512 * KIB,
        )
    };
    let (old, new) = (t(3), t(4));
    let disks: Vec<_> = (0..4)
        .map(|i| Arc::new(MemoryMember::new(format!("m{i}"), 4 * MIB)))
        .collect();
    let opts = ArrayOptions {
        enable_checksums: true,
        ..keeping.opts()
    };
    let created = create_first(&old, &disks, opts, true).unwrap();
    assert_eq!(block_on(created.checksum_fill_checkpoint()), Some(0));
    let e = block_on(created.start_reshape(new, metas(&disks[3..]), &Consent::default()))
        .expect_err("refused while the pass runs");
    assert!(e.to_string().contains("checksum pass"), "{e}");
}
