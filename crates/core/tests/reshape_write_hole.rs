//! The write hole during a reshape (neither tree is logged): a partial-stripe write torn by a
//! power loss — its data chunk on the member, its parity not — on either side of the
//! position. The restart resyncs the write-intent bitmap's regions through the reshape (each
//! piece in the tree its position says), so the stripe's parity agrees with its data again: a
//! member lost afterwards is rebuilt exact, every byte of the stripe reads back. Checked for
//! RAID 5 growing, RAID 5 → RAID 6 and RAID 6 growing, each at the strip sizes below.

mod common;

use futures::executor::block_on;
use futures::future::join;
use nbraid_core::metadata::disk_rule::Consent;
use nbraid_core::metadata::{Array, ArrayOptions, METADATA_AREA_BYTES};
use nbraid_core::{Buf, Member, MemoryMember, PassControl, Volume, VolumeOptions};
use nbraid_layout::{Geometry, Level, Node, Reshape, Side};
use nbraid_sim::{Faulty, Rng};
use std::sync::Arc;
use std::time::Duration;

use common::arrays::{create_first, metas, open_every, seeded, write_clean};
use common::KIB;
const REGION: u64 = 384 * KIB;
const MEMBER_BYTES: u64 = METADATA_AREA_BYTES + REGION;

type Disk = Arc<Faulty<MemoryMember>>;

fn tree(level: Level, members: usize, strip: u64) -> Node {
    common::level_tree(level, members, strip, METADATA_AREA_BYTES, REGION)
}

fn opts() -> ArrayOptions {
    ArrayOptions {
        volume: VolumeOptions::default(),
        bitmap_chunk_bytes: Some(64 * KIB),
        ppl: true,
        ..ArrayOptions::default()
    }
}

fn open(config: &Node, disks: &[Disk]) -> Array {
    open_every(config, disks, opts()).unwrap().0
}

/// A reshape of `old` into `new`, created, filled and cut about half-way: the array open
/// mid-reshape, its disks and what every byte should read.
fn half_reshaped(old: &Node, new: &Node, rng: &mut Rng) -> (Array, Vec<Disk>, Vec<u8>) {
    let disks: Vec<Disk> = (0..new.member_count())
        .map(|i| {
            Arc::new(Faulty::new(
                MemoryMember::new(format!("m{i}"), MEMBER_BYTES),
                i as u64,
            ))
        })
        .collect();
    let n_old = old.member_count();
    let created = create_first(old, &disks, opts(), true).unwrap();
    let cap = created.volume().capacity();
    let want = seeded(rng, cap);
    write_clean(&created, &want).unwrap();
    let added = metas(&disks[n_old..]);
    block_on(created.start_reshape(new.clone(), added, &Consent::default())).unwrap();
    drop(created);
    let a = open(new, &disks);
    // One unit a window at about a second for the whole volume: the watcher stops the pass
    // (between windows) once half is copied, long before it would end.
    a.set_reshape_window_bytes(1);
    let ctl = PassControl::new(cap);
    block_on(join(a.reshape(&ctl), async {
        while ctl.position_bytes() < cap / 2 {
            nbraid_core::timer::sleep(Duration::from_millis(1)).await;
        }
        ctl.cancel();
    }))
    .0
    .unwrap();
    (a, disks, want)
}

/// A 4 KiB write at `at` acknowledged (FUA), then its data chunk overwritten on the member
/// as if only that write had landed: the stripe's parity no longer agrees. Returns the
/// member whose chunk was torn.
fn torn_write(a: &Array, layout: &Reshape, at: u64, rng: &mut Rng, want: &mut [u8]) -> usize {
    let data = seeded(rng, 4096);
    block_on(a.write(at, Buf::copy_from(&data), true)).unwrap();
    let position = a.reshape_progress().unwrap().0;
    let map = layout.map(position, at, 4096).unwrap();
    let chunk = map.data[0];
    assert_eq!(chunk.len, 4096, "a 4 KiB write inside one chunk");
    let landed = seeded(rng, 4096);
    let member = a.volume().member(chunk.member);
    block_on(member.write(chunk.offset, Buf::copy_from(&landed).freeze(), true)).unwrap();
    want[at as usize..at as usize + 4096].copy_from_slice(&landed);
    chunk.member
}

/// The unit around `at` (whole stripes of both trees) in `side`'s tree, read with each of
/// its members but the torn one lost in turn (a plain volume over the same disks: nothing
/// recorded).
fn stripe_survives_a_loss(
    layout: &Reshape,
    side: Side,
    disks: &[Disk],
    (at, torn): (u64, usize),
    want: &[u8],
) -> Result<(), String> {
    let tree = match side {
        Side::Old => layout.old(),
        Side::New => layout.new_tree(),
    };
    let start = at / layout.unit() * layout.unit();
    let len = layout.unit().min(want.len() as u64 - start);
    let members: Vec<Arc<dyn Member>> = (disks.iter())
        .map(|d| d.clone() as Arc<dyn Member>)
        .collect();
    for lost in tree.member_indices().into_iter().filter(|&m| m != torn) {
        let geometry = Geometry::from_tree(tree.clone());
        let v = Volume::new(geometry, members.clone(), VolumeOptions::default()).unwrap();
        v.fail_member(lost, "lost after the restart by the test");
        let got = block_on(v.read(start, len)).unwrap();
        if got[..] != want[start as usize..(start + len) as usize] {
            return Err(format!(
                "{side:?} tree, bytes {start}+{len}: wrong with member {lost} lost"
            ));
        }
    }
    Ok(())
}

#[test]
fn a_torn_write_on_either_side_of_the_position_is_resynced_at_the_restart() {
    let moves = [
        (
            "raid5 3→4",
            tree(Level::Raid5, 3, 4 * KIB),
            tree(Level::Raid5, 4, 4 * KIB),
        ),
        (
            "raid5 3→4",
            tree(Level::Raid5, 3, 64 * KIB),
            tree(Level::Raid5, 4, 64 * KIB),
        ),
        (
            "raid5 3 → raid6 4",
            tree(Level::Raid5, 3, 8 * KIB),
            tree(Level::Raid6, 4, 8 * KIB),
        ),
        (
            "raid6 4→5",
            tree(Level::Raid6, 4, 16 * KIB),
            tree(Level::Raid6, 5, 16 * KIB),
        ),
    ];
    for (seed, (name, old, new)) in moves.into_iter().enumerate() {
        let mut rng = Rng::new(seed as u64 + 1);
        let (a, disks, mut want) = half_reshaped(&old, &new, &mut rng);
        let layout = Reshape::new(old.clone(), new.clone()).unwrap();
        let (position, cap) = a.reshape_progress().unwrap();
        assert!(
            0 < position && position < cap,
            "{name}: cut mid-way ({position} of {cap})"
        );
        let below = rng.below(position / 4096) * 4096;
        let above = position + rng.below((cap - position) / 4096) * 4096;
        let torn_below = torn_write(&a, &layout, below, &mut rng, &mut want);
        let torn_above = torn_write(&a, &layout, above, &mut rng, &mut want);
        drop(a); // the power goes: the records stay dirty, the bitmap marks both writes
        let a = open(&new, &disks);
        let back = block_on(a.read(0, cap)).unwrap();
        assert!(back[..] == want[..], "{name}: after the restart");
        let failures: Vec<String> = [
            stripe_survives_a_loss(&layout, Side::New, &disks, (below, torn_below), &want),
            stripe_survives_a_loss(&layout, Side::Old, &disks, (above, torn_above), &want),
        ]
        .into_iter()
        .filter_map(Result::err)
        .collect();
        assert!(failures.is_empty(), "{name}: {}", failures.join("; "));
    }
}
