//! Two volumes on the same disks (Matrix) each reshaped onto the same added disk, before
//! either opens in its new shape (an offline `nbraid apply --yes` of a config that adds the
//! disk to both). A disk has one member id for every volume on it: the second volume's start
//! once gave the disk a new random id, and the first volume's records then named an id the
//! disk no longer carried — at the next start that volume lost the role ("member d3 no
//! longer holds a role"), its reshape stopped for good and it stayed degraded. Both volumes
//! now open with every role, finish their reshapes, and read back every byte.

mod common;

use common::arrays::{load, same};
use common::{level_tree, KIB, MIB};
use futures::executor::block_on;
use nbraid_core::metadata::disk_rule::Consent;
use nbraid_core::metadata::{Array, ArrayOptions, METADATA_AREA_BYTES};
use nbraid_core::{Buf, Member, MemoryMember, PassControl, PassState};
use nbraid_layout::{Level, Node};
use std::sync::Arc;

const REGION: u64 = 2 * MIB;
/// Each volume's region on every disk: "db" first, "db2" after it.
const STARTS: [u64; 2] = [METADATA_AREA_BYTES, METADATA_AREA_BYTES + REGION];
const MEMBER_BYTES: u64 = METADATA_AREA_BYTES + 2 * REGION;

struct Vol {
    name: &'static str,
    level: Level,
    start: u64,
}

fn vols(levels: [Level; 2]) -> [Vol; 2] {
    [("db", 0), ("db2", 1)].map(|(name, k)| Vol {
        name,
        level: levels[k],
        start: STARTS[k],
    })
}

fn tree(v: &Vol, members: usize, strip: u64) -> Node {
    level_tree(v.level, members, strip, v.start, REGION)
}

fn open(v: &Vol, config: &Node, disks: &[Arc<MemoryMember>]) -> Array {
    let metas = disks
        .iter()
        .map(|d| Some(load(d.clone() as Arc<dyn Member>)))
        .collect();
    let opened = Array::open(v.name, config, metas, ArrayOptions::default(), &|_, _| {});
    block_on(opened).expect("opens").0
}

fn pattern(seed: u8, len: u64) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed ^ (i >> 12) as u8)
        .collect()
}

/// Both volumes of `levels` grown from 3 members to 4 (`copies`: RAID 1s given a third copy)
/// onto one added disk, then each opened in its new shape, finished and read back.
fn both_grown_onto_one_disk(levels: [Level; 2], copies: bool) {
    let vols = vols(levels);
    for strip in [4 * KIB, 64 * KIB] {
        let disks: Vec<_> = (0..4)
            .map(|i| Arc::new(MemoryMember::new(format!("d{i}"), MEMBER_BYTES)))
            .collect();
        // One superblock per disk, shared by both volumes, as the daemon and the CLI load it.
        let metas: Vec<_> = (disks.iter())
            .map(|d| load(d.clone() as Arc<dyn Member>))
            .collect();
        let (mut wants, mut ids) = (Vec::new(), Vec::new());
        for (k, v) in vols.iter().enumerate() {
            let old = tree(v, 3, strip);
            let created = Array::create(
                v.name,
                old.clone(),
                metas[..3].to_vec(),
                ArrayOptions::default(),
                true,
                &|_, _| {},
            );
            let a = block_on(created).expect("create").0;
            let want = pattern(k as u8 + 1, old.capacity());
            block_on(async {
                a.write(0, Buf::copy_from(&want), false).await?;
                a.flush().await
            })
            .expect("fill");
            wants.push(want);
            ids.push(a.id());
            block_on(a.mark_clean()).expect("clean");
        }
        // Both reshapes started, as an offline apply does: the disks loaded once, each volume
        // opened over them, the added disk joining both.
        let metas: Vec<_> = (disks.iter())
            .map(|d| load(d.clone() as Arc<dyn Member>))
            .collect();
        for (k, v) in vols.iter().enumerate() {
            let a = block_on(Array::open(
                v.name,
                &tree(v, 3, strip),
                metas[..3].iter().cloned().map(Some).collect(),
                ArrayOptions::default(),
                &|_, _| {},
            ))
            .expect("open")
            .0;
            // The other volume's records may stay beside this one's on the added disk.
            let consent = Consent {
                force: false,
                siblings: vec![ids[1 - k]],
            };
            let (new, added) = (tree(v, 4, strip), vec![metas[3].clone()]);
            let started = match copies {
                true => block_on(a.add_copies(new, added, &consent)),
                false => block_on(a.start_reshape(new, added, &consent)),
            };
            started.unwrap_or_else(|e| panic!("{}: start: {e}", v.name));
        }
        drop(metas);
        for (v, want) in vols.iter().zip(&wants) {
            let what = format!("{} strip {strip}", v.name);
            let a = open(v, &tree(v, 4, strip), &disks);
            assert!(a.has_member(3), "{what}: the added disk holds its role");
            assert!(
                copies || !a.volume().is_degraded(),
                "{what}: every role held after both starts"
            );
            if copies {
                let r = block_on(a.rebuild(&PassControl::new(0))).expect("rebuild");
                assert_eq!(r.state, PassState::Done, "{what}");
            } else {
                let state = block_on(a.reshape(&PassControl::new(0))).expect("reshape");
                assert_eq!(state, PassState::Done, "{what}");
            }
            drop(a);
            let a = open(v, &tree(v, 4, strip), &disks);
            assert!(!a.volume().is_degraded(), "{what}: reopened");
            same(&a, want, &what).unwrap();
        }
    }
}

#[test]
fn one_disk_added_to_two_matrix_volumes_holds_its_role_in_both() {
    both_grown_onto_one_disk([Level::Raid5, Level::Raid0], false);
}

#[test]
fn one_disk_given_as_a_new_copy_to_two_matrix_mirrors_holds_its_role_in_both() {
    both_grown_onto_one_disk([Level::Raid1, Level::Raid1], true);
}
