//! The space a reshape adds past the old capacity is consistent before anyone may write it.
//!
//! Found missing: after RAID 6 grew from 4 to 5 members, two of the eight stripes past the old
//! capacity failed a scrub — their rows held the old tree's stale data and its P and Q, which
//! do not cancel as RAID 5's rows do — so a client's partial write there folded its delta into
//! wrong parity, and the first member lost afterwards rebuilt its bytes wrong. The same on every
//! level when an added member holds old bytes (`--force`). The pass now rewrites the grown space
//! through the new tree before the records take it (`crates/core/src/reshape/grown.rs`).
//!
//! Per move: the old members full of seeded bytes (the old tree's rows past what the copy
//! moves are stale data), the added members full of other bytes; the reshape runs to its end
//! through the array (`Array::reshape`); then a check-only scrub of the new shape finds no
//! stripe whose parity or copies disagree, the old bytes read back, and a block written past
//! the old capacity reads back with any one member failed.

mod common;

use futures::executor::block_on;
use nbraid_core::metadata::disk_rule::Consent;
use nbraid_core::metadata::{Array, ArrayOptions, METADATA_AREA_BYTES};
use nbraid_core::reshape::{MemberRows, ReshapeHooks};
use nbraid_core::{Buf, Member, MemoryMember, PassControl, PassState, ScrubControl};
use nbraid_core::{Volume, VolumeOptions, VolumeResult};
use nbraid_layout::{Geometry, Level, Node, ParityLayout, Region, Shape, Window};
use nbraid_sim::Rng;
use std::sync::Arc;

use common::arrays::{create_first, forced, metas, open_every, seeded, write_clean};
use common::KIB;

const REGION: u64 = 512 * KIB;

fn tree(level: Level, members: usize, strip: u64) -> Node {
    common::level_tree(level, members, strip, METADATA_AREA_BYTES, REGION)
}

/// RAID 10/50/60 of `spans` spans of `width` members.
fn spans(level: Level, spans: usize, width: usize, strip: u64) -> Node {
    let members = spans * width;
    let regions = vec![
        Region {
            start: METADATA_AREA_BYTES,
            len: REGION
        };
        members
    ];
    Shape::new(level, members, Some(spans), strip, ParityLayout::default())
        .expect("shape")
        .build(&regions)
        .expect("tree")
}

/// The moves that grow a volume, as `nbraid apply` plans them.
fn moves() -> Vec<(&'static str, Node, Node)> {
    vec![
        (
            "raid5 3→4",
            tree(Level::Raid5, 3, 64 * KIB),
            tree(Level::Raid5, 4, 64 * KIB),
        ),
        (
            "raid6 4→5",
            tree(Level::Raid6, 4, 64 * KIB),
            tree(Level::Raid6, 5, 64 * KIB),
        ),
        (
            "raid6 4→6, 16 KiB strips",
            tree(Level::Raid6, 4, 16 * KIB),
            tree(Level::Raid6, 6, 16 * KIB),
        ),
        (
            "raid5 3 → raid6 5",
            tree(Level::Raid5, 3, 32 * KIB),
            tree(Level::Raid6, 5, 32 * KIB),
        ),
        (
            "raid1 2 → raid5 3",
            tree(Level::Raid1, 2, 64 * KIB),
            tree(Level::Raid5, 3, 64 * KIB),
        ),
        (
            "raid50 2×3 → 3×3",
            spans(Level::Raid50, 2, 3, 16 * KIB),
            spans(Level::Raid50, 3, 3, 16 * KIB),
        ),
        (
            "raid10 2×2 → 3×2",
            spans(Level::Raid10, 2, 2, 16 * KIB),
            spans(Level::Raid10, 3, 2, 16 * KIB),
        ),
    ]
}

/// Members for `new` (the first `n_old` for the old shape), each region full of seeded bytes:
/// the added members as a forced disk with old data would be.
fn members(new: &Node, rng: &mut Rng) -> Vec<Arc<MemoryMember>> {
    (0..new.member_count())
        .map(|i| {
            let m = Arc::new(MemoryMember::new(
                format!("m{i}"),
                METADATA_AREA_BYTES + REGION,
            ));
            let junk = Buf::copy_from(&seeded(rng, REGION)).freeze();
            block_on(m.write(METADATA_AREA_BYTES, junk, false)).unwrap();
            m
        })
        .collect()
}

fn opts() -> ArrayOptions {
    ArrayOptions {
        ppl: true,
        ..ArrayOptions::default()
    }
}

fn open(new: &Node, disks: &[Arc<MemoryMember>]) -> Array {
    open_every(new, disks, opts()).unwrap().0
}

/// Stripes of the whole volume whose parity or copies disagree (a check-only scrub).
fn mismatches(a: &Array) -> u64 {
    block_on(a.scrub(&ScrubControl::new(false, 0)))
        .expect("scrub")
        .mismatches
}

/// One move through the array, to its end; `Err` says what was wrong.
fn grow(what: &str, old: &Node, new: &Node) -> Result<(), String> {
    let mut rng = Rng::new(11);
    let disks = members(new, &mut rng);
    let n_old = old.member_count();
    let created = create_first(old, &disks, opts(), false)?;
    // Written in full: the old tree's parity agrees with its data everywhere.
    let want = seeded(&mut rng, old.capacity());
    write_clean(&created, &want)?;
    block_on(created.start_reshape(new.clone(), metas(&disks[n_old..]), &forced()))
        .map_err(|e| format!("start: {e}"))?;
    drop(created);
    let a = open(new, &disks);
    let state = block_on(a.reshape(&PassControl::new(0))).map_err(|e| e.to_string())?;
    assert_eq!(state, PassState::Done, "{what}");
    drop(a);
    let a = open(new, &disks);
    assert_eq!(
        a.volume().capacity(),
        new.capacity(),
        "{what}: the grown size"
    );
    let bad = mismatches(&a);
    if bad > 0 {
        return Err(format!("{bad} stripe(s) inconsistent after the reshape"));
    }
    let back = block_on(a.read(0, want.len() as u64)).map_err(|e| e.to_string())?;
    if back[..] != want[..] {
        return Err("the old bytes differ after the reshape".into());
    }
    // A block past the old capacity, then each member lost in turn.
    let at = old.capacity() + (new.capacity() - old.capacity()) / 2 / 4096 * 4096 + 512;
    let block = seeded(&mut rng, 4096);
    block_on(a.write(at, Buf::copy_from(&block), true)).map_err(|e| e.to_string())?;
    drop(a);
    for lost in 0..new.member_count() {
        let v = Volume::new(
            Geometry::from_tree(new.clone()),
            disks.iter().map(|d| d.clone() as Arc<dyn Member>).collect(),
            VolumeOptions::default(),
        )
        .map_err(|e| e.to_string())?;
        v.fail_member(lost, "the test");
        let back = block_on(v.read(at, 4096)).map_err(|e| e.to_string())?;
        if back[..] != block[..] {
            return Err(format!(
                "a block written past the old capacity reads wrong with member {lost} lost"
            ));
        }
    }
    Ok(())
}

#[test]
fn the_space_a_reshape_adds_is_consistent_before_it_is_offered() {
    let failures: Vec<String> = moves()
        .iter()
        .filter_map(|(what, old, new)| grow(what, old, new).err().map(|e| format!("{what}: {e}")))
        .collect();
    assert!(failures.is_empty(), "{failures:#?}");
}

/// Records that are only counted: the copy is already done when this test's pass starts.
struct NoRecords;

impl ReshapeHooks for NoRecords {
    fn backup<'a>(
        &'a self,
        _: Window,
        _: &'a [MemberRows],
    ) -> futures::future::BoxFuture<'a, VolumeResult<()>> {
        panic!("no window is copied: the copy is done")
    }

    fn checkpoint(&self, _: u64) -> futures::future::BoxFuture<'_, VolumeResult<()>> {
        panic!("no window is copied: the copy is done")
    }
}

/// A restart whose records say the copy reached the old capacity (the power lost while the
/// grown space was being rewritten, or before the records took the new tree) walks the whole
/// grown space again: every stripe of the new tree agrees afterwards, whatever its rows held.
#[test]
fn a_restart_after_the_copy_rewrites_the_grown_space() {
    for (what, old, new) in moves() {
        let mut rng = Rng::new(5);
        let disks = members(&new, &mut rng);
        let as_members = || -> Vec<Arc<dyn Member>> {
            disks.iter().map(|d| d.clone() as Arc<dyn Member>).collect()
        };
        let (old, new) = (Geometry::from_tree(old), Geometry::from_tree(new));
        let cap = old.root().capacity();
        let (v, node) =
            Volume::reshaping(old, &new, as_members(), VolumeOptions::default(), cap).unwrap();
        let ctl = PassControl::resume_at(0, cap);
        let state = block_on(node.run_pass(&ctl, 4 << 20, &NoRecords)).unwrap();
        assert_eq!(state, PassState::Done, "{what}");
        assert_eq!(
            ctl.position_bytes(),
            new.root().capacity(),
            "{what}: walked the grown space"
        );
        drop((v, node));
        let after = Volume::new(new, as_members(), VolumeOptions::default()).unwrap();
        let rest = after.capacity() - cap;
        let report = block_on(after.scrub(&ScrubControl::resume_at(false, 0, cap))).unwrap();
        assert_eq!(
            report.mismatches, 0,
            "{what}: the grown space ({rest} bytes) agrees"
        );
    }
}

const LOG_RESERVE: u64 = common::MIB;
const SUM_RESERVE: u64 = 64 * KIB;

/// The config's reserves before the regions: block checksums, then the log.
fn reserved_opts() -> ArrayOptions {
    ArrayOptions {
        ppl: true,
        bitmap_chunk_bytes: Some(4 * KIB),
        ppl_area_before_region_bytes: Some(LOG_RESERVE),
        checksum_area_before_region_bytes: Some(SUM_RESERVE),
        ..ArrayOptions::default()
    }
}

fn grown_tree(level: Level, members: usize, len: u64) -> Node {
    let start = METADATA_AREA_BYTES + SUM_RESERVE + LOG_RESERVE;
    common::level_tree(level, members, 16 * KIB, start, len)
}

/// Members long enough for `new`'s regions, and the volume of shape `old` created over
/// them with the reserves of [`reserved_opts`].
fn created_with_reserves(old: &Node, new: &Node) -> (Vec<Arc<MemoryMember>>, Array) {
    created_with_room(old, new, 0, reserved_opts())
}

/// [`created_with_reserves`] with `opts`, over members `room_after` bytes longer than
/// `new`'s regions need (where the config leaves a grown region's checksum area).
fn created_with_room(
    old: &Node,
    new: &Node,
    room_after: u64,
    opts: ArrayOptions,
) -> (Vec<Arc<MemoryMember>>, Array) {
    let mut member_bytes = 0;
    new.visit_members(&mut |m| member_bytes = member_bytes.max(m.start + m.len));
    let disks: Vec<_> = (0..old.member_count())
        .map(|i| {
            Arc::new(MemoryMember::new(
                format!("m{i}"),
                member_bytes + room_after,
            ))
        })
        .collect();
    let created = block_on(Array::create(
        "vol",
        old.clone(),
        metas(&disks),
        opts,
        false,
        &|_, _| {},
    ));
    (disks, created.expect("create").0)
}

/// Each member's checksum area length as its record says.
fn checksum_area_lens(disks: &[Arc<MemoryMember>]) -> Vec<u64> {
    checksum_areas(disks).iter().map(|a| a.1).collect()
}

/// Each member's checksum area (offset, length) as its record says ((0, 0): none).
fn checksum_areas(disks: &[Arc<MemoryMember>]) -> Vec<(u64, u64)> {
    metas(disks)
        .iter()
        .map(|m| match m.probe() {
            nbraid_core::metadata::Probe::Superblock(sb, _) => {
                let v = sb
                    .volumes
                    .iter()
                    .find(|v| v.name == "vol")
                    .expect("a record");
                v.checksums.map_or((0, 0), |a| (a.offset, a.len))
            }
            other => panic!("no superblock: {other:?}"),
        })
        .collect()
}

/// Regions grown in place (a member file or LUN grown, `size = "all"`): nothing is copied,
/// the new space is synced, and the volume keeps its log, bitmap and checksums over all of
/// it — the checksum area grown into its reserve, so a block corrupted in the new space
/// behind the engine reads back right.
#[test]
fn regions_grown_in_place_keep_their_checksums_log_and_bitmap() {
    for level in [Level::Raid5, Level::Raid6, Level::Raid1, Level::Raid0] {
        let members = if level == Level::Raid6 { 4 } else { 3 };
        let (old, new) = (
            grown_tree(level, members, REGION),
            grown_tree(level, members, 16 * REGION),
        );
        let (disks, created) = created_with_reserves(&old, &new);
        let mut rng = Rng::new(3);
        let want = seeded(&mut rng, old.capacity());
        block_on(async {
            created.write(0, Buf::copy_from(&want), false).await?;
            created.flush().await?;
            created.mark_clean().await.map(|_| ())
        })
        .unwrap();
        let before = checksum_area_lens(&disks);
        block_on(created.start_reshape(new.clone(), Vec::new(), &Consent::default()))
            .unwrap_or_else(|e| panic!("{level}: start: {e}"));
        drop(created);
        let reopen = || {
            let m = metas(&disks).into_iter().map(Some).collect();
            block_on(Array::open("vol", &new, m, reserved_opts(), &|_, _| {}))
                .expect("open")
                .0
        };
        let a = reopen();
        assert_eq!(
            a.reshape_progress(),
            Some((old.capacity(), old.capacity())),
            "{level}: nothing to copy"
        );
        let ctl = PassControl::resume_at(0, old.capacity());
        assert_eq!(block_on(a.reshape(&ctl)).unwrap(), PassState::Done);
        drop(a);
        let a = reopen();
        assert_eq!(a.volume().capacity(), new.capacity(), "{level}");
        let logged = (level.parity() > 0).then_some(true);
        assert_eq!(a.write_hole_logged(), logged, "{level}: the log");
        assert!(
            checksum_area_lens(&disks)
                .iter()
                .zip(&before)
                .all(|(now, was)| now > was),
            "{level}: every checksum area grew"
        );
        assert_eq!(mismatches(&a), 0, "{level}: the new space agrees");
        let back = block_on(a.read(0, old.capacity())).unwrap();
        assert!(back[..] == want[..], "{level}: the old bytes stay");
        let tail = seeded(&mut rng, new.capacity() - old.capacity());
        block_on(a.write(old.capacity(), Buf::copy_from(&tail), true)).unwrap();
        if level != Level::Raid0 {
            // A block of the new space flipped on member 1, behind the engine.
            let at = METADATA_AREA_BYTES + SUM_RESERVE + LOG_RESERVE + 2 * REGION;
            block_on(disks[1].write(at, Buf::copy_from(&[0x5A; 4096]).freeze(), false)).unwrap();
            let back = block_on(a.read(old.capacity(), tail.len() as u64)).unwrap();
            assert!(
                back[..] == tail[..],
                "{level}: the corrupted block read back right"
            );
        }
    }
}

/// A region that outgrows the checksum reserve before it, on members with no room after the
/// grown region either, is refused by name, nothing written: the region is never moved.
#[test]
fn a_growth_past_the_checksum_reserve_with_no_room_after_is_refused() {
    let (old, new) = (
        grown_tree(Level::Raid5, 3, REGION),
        grown_tree(Level::Raid5, 3, 40 * common::MIB),
    );
    let (disks, a) = created_with_reserves(&old, &new);
    block_on(a.mark_clean()).unwrap();
    let e = block_on(a.start_reshape(new, Vec::new(), &Consent::default())).unwrap_err();
    assert!(e.to_string().contains("block-checksum area"), "{e}");
    assert!(
        e.to_string().contains("right after the grown region"),
        "{e}"
    );
    drop(a);
    let m = metas(&disks).into_iter().map(Some).collect();
    let again = block_on(Array::open("vol", &old, m, reserved_opts(), &|_, _| {}))
        .expect("the old shape opens")
        .0;
    assert_eq!(again.reshape_progress(), None, "no reshape recorded");
}

/// A region grown past the checksum reserve before it, with room right after the grown region
/// (where the config leaves it: `nbraid_config::pins`), has its checksum area moved there:
/// every old entry copied (a block corrupted in the old space behind the engine is caught —
/// rebuilt where there is redundancy, EIO on RAID 0), the new space's written by the sync.
#[test]
fn a_region_grown_past_its_checksum_reserve_moves_its_area_after_the_region() {
    const GROWN: u64 = 40 * common::MIB;
    for level in [Level::Raid5, Level::Raid6, Level::Raid1, Level::Raid0] {
        let members = if level == Level::Raid6 { 4 } else { 3 };
        // As the config places them: the log's reserve only where there is parity to log.
        let (opts, start) = match level.parity() > 0 {
            true => (
                reserved_opts(),
                METADATA_AREA_BYTES + SUM_RESERVE + LOG_RESERVE,
            ),
            false => {
                let opts = ArrayOptions {
                    ppl_area_before_region_bytes: None,
                    ..reserved_opts()
                };
                (opts, METADATA_AREA_BYTES + SUM_RESERVE)
            }
        };
        let (old, new) = (
            common::level_tree(level, members, 16 * KIB, start, REGION),
            common::level_tree(level, members, 16 * KIB, start, GROWN),
        );
        let (disks, created) = created_with_room(&old, &new, 512 * KIB, opts.clone());
        let mut rng = Rng::new(5);
        let want = seeded(&mut rng, old.capacity());
        block_on(async {
            created.write(0, Buf::copy_from(&want), false).await?;
            created.flush().await?;
            created.mark_clean().await.map(|_| ())
        })
        .unwrap();
        block_on(created.start_reshape(new.clone(), Vec::new(), &Consent::default()))
            .unwrap_or_else(|e| panic!("{level}: start: {e}"));
        drop(created);
        for (offset, len) in checksum_areas(&disks) {
            assert_eq!(
                offset,
                start + GROWN,
                "{level}: the area moved after the region"
            );
            assert!(
                len >= 4096 + GROWN / 512,
                "{level}: sized for the grown region"
            );
        }
        let reopen = |tree: &Node| {
            let m = metas(&disks).into_iter().map(Some).collect();
            block_on(Array::open("vol", tree, m, opts.clone(), &|_, _| {}))
                .expect("open")
                .0
        };
        let grown = |from: &Node, to: &Node| {
            let a = reopen(to);
            let ctl = PassControl::resume_at(0, from.capacity());
            assert_eq!(block_on(a.reshape(&ctl)).unwrap(), PassState::Done);
            drop(a);
            let a = reopen(to);
            assert_eq!(a.volume().capacity(), to.capacity(), "{level}");
            assert_eq!(mismatches(&a), 0, "{level}: the new space agrees");
            a
        };
        let a = grown(&old, &new);
        let first = checksum_areas(&disks);
        // Grown again by one strip: the moved area, now inside the region even though it is
        // large enough, moves again past the new end.
        let again = common::level_tree(level, members, 16 * KIB, start, GROWN + 64 * KIB);
        block_on(a.mark_clean()).unwrap();
        block_on(a.start_reshape(again.clone(), Vec::new(), &Consent::default()))
            .unwrap_or_else(|e| panic!("{level}: second start: {e}"));
        drop(a);
        for ((offset, _), (was, was_len)) in checksum_areas(&disks).into_iter().zip(&first) {
            // The grown end falls inside the old area, so the new one goes past it.
            let old_end = (was + was_len).next_multiple_of(4096);
            assert!(
                offset >= old_end,
                "{level}: moved again, not over the old area"
            );
        }
        let a = grown(&new, &again);
        // Member 1's first strips of the old space flipped behind the engine.
        for k in 0..4 {
            let at = start + k * 16 * KIB;
            block_on(disks[1].write(at, Buf::copy_from(&[0xA5; 4096]).freeze(), false)).unwrap();
        }
        let back = block_on(a.read(0, old.capacity()));
        match level {
            Level::Raid0 => assert!(back.is_err(), "{level}: a bad block is an error"),
            _ => assert!(
                back.expect("read")[..] == want[..],
                "{level}: the old bytes read back right"
            ),
        }
    }
}

/// A JBOD grows by a member at its end in place: nothing copied, the added member's old
/// bytes (a forced disk) read back as zeroes, the old bytes stay.
#[test]
fn a_jbod_grows_by_a_member_at_its_end() {
    let old = tree(Level::Jbod, 2, 64 * KIB);
    let new = tree(Level::Jbod, 3, 64 * KIB);
    let mut rng = Rng::new(9);
    let disks = members(&new, &mut rng);
    let a = create_first(&old, &disks, opts(), false).unwrap();
    let want = seeded(&mut rng, old.capacity());
    block_on(a.write(0, Buf::copy_from(&want), true)).unwrap();
    block_on(a.mark_clean()).unwrap();
    block_on(a.start_reshape(new.clone(), metas(&disks[2..]), &forced())).unwrap();
    drop(a);
    let a = open(&new, &disks);
    let cap = old.capacity();
    assert_eq!(a.reshape_progress(), Some((cap, cap)), "nothing to copy");
    let ctl = PassControl::resume_at(0, cap);
    assert_eq!(block_on(a.reshape(&ctl)).unwrap(), PassState::Done);
    drop(a);
    let a = open(&new, &disks);
    assert_eq!(a.volume().capacity(), new.capacity());
    let back = block_on(a.read(0, new.capacity())).unwrap();
    assert!(back[..cap as usize] == want[..], "the old bytes stay");
    assert!(
        back[cap as usize..].iter().all(|&b| b == 0),
        "the new member reads zeroes"
    );
}
