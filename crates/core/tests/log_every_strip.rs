//! Every parity geometry gets its write-hole log: for every strip the config accepts (4 KiB
//! to 16 MiB) and RAID 5 and RAID 6, a volume created where the config places it (its log
//! in the metadata area, or in the reserve before the region the geometry asks for) writes
//! a partial stripe whose parity writes a crash loses, loses a member that was not written,
//! and reads that member's chunk back exactly through the log's replay. A create that finds
//! no room for the log is refused, naming why — never a volume silently without one.

mod common;

use common::{Lossy, KIB, MIB};
use futures::executor::block_on;
use nbraid_core::metadata::{Array, ArrayOptions, MemberMeta, Probe, METADATA_AREA_BYTES};
use nbraid_core::{Buf, CacheMode, Member, MemoryMember, VolumeOptions};
use nbraid_layout::{Level, Node, ParityLayout, Region, Shape, STRIP_MAX, STRIP_MIN};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (seed as usize * 131 + i * 7 + i / 4096) as u8)
        .collect()
}

fn opts(reserve: Option<u64>) -> ArrayOptions {
    ArrayOptions {
        ppl_area_before_region_bytes: reserve,
        volume: VolumeOptions {
            cache: CacheMode::WriteThrough,
            ..VolumeOptions::default()
        },
        ..ArrayOptions::default()
    }
}

/// The tree of `level` over `n` members with `strip`, two stripes per member, its regions
/// after the metadata area and the log's reserve `reserve`.
fn tree(level: Level, n: usize, strip: u64, reserve: u64) -> Node {
    let shape = Shape::new(level, n, None, strip, ParityLayout::LeftSymmetric).expect("shape");
    let region = Region {
        start: METADATA_AREA_BYTES + reserve,
        len: 2 * strip,
    };
    shape.build(&vec![region; n]).expect("tree")
}

fn metas(disks: &[Arc<Lossy>], skip: Option<usize>) -> Vec<Option<Arc<MemberMeta>>> {
    disks
        .iter()
        .enumerate()
        .map(|(i, d)| {
            (Some(i) != skip).then(|| block_on(MemberMeta::load(d.clone() as Arc<dyn Member>)))
        })
        .collect()
}

/// Creates `level` with `strip` where the config would place it, fills stripe 1, writes
/// 4 KiB into its data chunk 0 with the parity writes lost, crashes, loses data chunk 1's
/// member and reopens: chunk 1 reads back exactly (replayed from the log).
fn torn_write_recovers(level: Level, strip: u64) {
    let n = if level == Level::Raid5 { 3 } else { 4 };
    let what = format!("{level:?} strip {strip}");
    let reserve = nbraid_layout::log_reserve_bytes(&tree(level, n, strip, 0));
    let t = tree(level, n, strip, reserve.unwrap_or(0));
    let member_bytes = METADATA_AREA_BYTES + reserve.unwrap_or(0) + 2 * strip;
    let disks: Vec<Arc<Lossy>> = (0..n)
        .map(|i| {
            Arc::new(Lossy {
                inner: MemoryMember::new(format!("disk{i}"), member_bytes),
                lose: AtomicBool::new(false),
            })
        })
        .collect();
    let all = metas(&disks, None).into_iter().flatten().collect();
    let (a, _) = block_on(Array::create(
        "vol",
        t.clone(),
        all,
        opts(reserve),
        true,
        &|_, _| {},
    ))
    .unwrap_or_else(|e| panic!("{what}: create: {e}"));

    // What a hang report shows of it: the group's locks and its log, nothing held at rest.
    let waits = a.volume().waits();
    assert!(
        waits.contains("stripe locks 0 held, 0 waiting"),
        "{what}: {waits}"
    );
    assert!(waits.contains("log: bands 0 live"), "{what}: {waits}");
    assert!(
        waits.contains("0 pending entries, 0 rounds in flight"),
        "{what}: {waits}"
    );

    // The log exists, holds the ring its geometry needs, and sits where it was placed.
    let Probe::Superblock(sb, _) = metas(&disks, None)[0].as_ref().unwrap().probe().clone() else {
        panic!("{what}: no superblock")
    };
    let area = sb.volumes[0]
        .ppl
        .unwrap_or_else(|| panic!("{what}: no log area"));
    let ring = nbraid_layout::volume_log_ring_bytes(&t).unwrap();
    assert!(area.len >= ring, "{what}: {area:?} for a {ring}-byte ring");
    match reserve {
        Some(r) => assert_eq!((area.offset, area.len), (METADATA_AREA_BYTES, r), "{what}"),
        None => assert!(
            area.offset + area.len <= METADATA_AREA_BYTES,
            "{what}: {area:?}"
        ),
    }

    let (g, _) = nbraid_core::ppl::parity_groups(&t).remove(0);
    let (stripe, width) = (1u64, g.stripe_width());
    let roles = g.roles(stripe);
    let start = stripe * width;
    let old = pattern(1, width as usize);
    block_on(a.write(start, Buf::copy_from(&old), false)).expect("fill the stripe");
    block_on(a.flush()).expect("flush");
    for m in [Some(roles.p), roles.q].into_iter().flatten() {
        disks[m].lose.store(true, Ordering::SeqCst);
    }
    let new = pattern(9, 4096);
    block_on(a.write(start + 4 * KIB, Buf::copy_from(&new), false)).expect("partial write");
    drop(a); // power lost: the parity writes never landed
    for d in &disks {
        d.lose.store(false, Ordering::SeqCst);
    }
    let lost = roles.data[1];
    let (a, report) = block_on(Array::open(
        "vol",
        &t,
        metas(&disks, Some(lost)),
        opts(reserve),
        &|_, _| {},
    ))
    .unwrap_or_else(|e| panic!("{what}: open: {e}"));
    assert_eq!(report.ppl.entries, 1, "{what}: the log is used: {report:?}");
    let chunk1 = block_on(a.read(start + strip, strip)).expect("read the lost chunk");
    assert!(
        chunk1[..] == old[strip as usize..2 * strip as usize],
        "{what}: the chunk nobody wrote reads back exactly"
    );
}

#[test]
fn every_strip_of_raid5_and_raid6_gets_its_log_and_recovers_through_it() {
    let strips =
        std::iter::successors(Some(STRIP_MIN), |s| Some(s * 2)).take_while(|&s| s <= STRIP_MAX);
    for strip in strips {
        for level in [Level::Raid5, Level::Raid6] {
            torn_write_recovers(level, strip);
        }
    }
}

/// A ring the metadata area cannot hold, and no reserve given: refused, saying what to do
/// (before, the volume was created without a log and every start blamed its age).
#[test]
fn a_create_with_no_room_for_the_log_is_refused_naming_why() {
    let t = tree(Level::Raid5, 3, MIB, 0);
    let disks: Vec<Arc<dyn Member>> = (0..3)
        .map(|i| {
            Arc::new(MemoryMember::new(
                format!("disk{i}"),
                METADATA_AREA_BYTES + 2 * MIB,
            )) as _
        })
        .collect();
    let all = disks
        .iter()
        .map(|d| block_on(MemberMeta::load(d.clone())))
        .collect();
    let e = block_on(Array::create("vol", t, all, opts(None), true, &|_, _| {}))
        .err()
        .expect("refused");
    let e = e.to_string();
    assert!(
        e.contains("partial-parity log") && e.contains("write_hole_log_size"),
        "{e}"
    );
}
