//! Copies added to a RAID 1 (`Array::add_copies`, what `nbraid apply` does when a `raid1`
//! volume's config lists more members): each added member takes a new role, recorded
//! rebuilding from 0, and is rebuilt from the old copies while the volume serves — never read
//! before the rebuild passes a byte, written by every write. After it every old copy may go:
//! the data is on the new copy, its block checksums with it.

mod common;

use common::arrays::{create_first, metas, open_every, seeded, write_clean};
use common::KIB;
use futures::executor::block_on;
use nbraid_core::metadata::disk_rule::Consent;
use nbraid_core::metadata::{Array, ArrayOptions, MemberMeta, METADATA_AREA_BYTES, SLOT_BYTES};
use nbraid_core::{Buf, Member, MemoryMember, PassControl};
use nbraid_layout::{Level, Node};
use nbraid_sim::Rng;
use std::sync::Arc;

const REGION: u64 = 2 * common::MIB;
const SUM_RESERVE: u64 = 64 * KIB;

fn opts() -> ArrayOptions {
    ArrayOptions {
        bitmap_chunk_bytes: Some(64 * KIB),
        checksum_area_before_region_bytes: Some(SUM_RESERVE),
        ..ArrayOptions::default()
    }
}

fn mirror(copies: usize) -> Node {
    let start = METADATA_AREA_BYTES + SUM_RESERVE;
    common::level_tree(Level::Raid1, copies, 64 * KIB, start, REGION)
}

fn open(tree: &Node, disks: &[Arc<MemoryMember>]) -> (Array, nbraid_core::metadata::OpenReport) {
    open_every(tree, disks, opts()).unwrap()
}

#[test]
fn copies_added_to_a_mirror_are_rebuilt_and_then_hold_the_volume_alone() {
    for (from, to) in [(2, 3), (2, 4), (3, 5)] {
        let disks: Vec<_> = (0..to)
            .map(|i| Arc::new(MemoryMember::new(format!("m{i}"), 4 * common::MIB)))
            .collect();
        let (old, new) = (mirror(from), mirror(to));
        let a = create_first(&old, &disks, opts(), false).unwrap();
        let mut want = seeded(&mut Rng::new(7), REGION);
        write_clean(&a, &want).unwrap();
        let added = metas(&disks[from..]);
        block_on(a.add_copies(new.clone(), added, &Consent::default()))
            .unwrap_or_else(|e| panic!("{from}→{to}: add: {e}"));
        drop(a);

        let (a, report) = open(&new, &disks);
        let rebuilding: Vec<(usize, u64)> = (from..to).map(|r| (r, 0)).collect();
        assert_eq!(report.rebuilding_roles, rebuilding, "{from}→{to}");
        assert!(
            !a.volume().member_is_current(from),
            "not read before it is rebuilt"
        );
        // A write while the new copies wait for the rebuild reads back from them after it.
        let late = vec![0x3C; 8192];
        want[4096..4096 + 8192].copy_from_slice(&late);
        block_on(a.write(4096, Buf::copy_from(&late), true)).unwrap();
        let r = block_on(a.rebuild(&PassControl::new(0))).expect("rebuild");
        assert_eq!(r.completed, (from..to).collect::<Vec<_>>(), "{from}→{to}");
        assert!(block_on(a.mark_clean()).expect("clean").is_recorded());
        drop(a);

        // Every old copy gone: the last new one holds the volume, its checksums with it.
        let (a, report) = open(&new, &disks);
        assert!(
            report.rebuilding_roles.is_empty(),
            "{from}→{to}: {report:?}"
        );
        for r in 0..to - 1 {
            a.volume().fail_member(r, "test");
        }
        let back = block_on(a.read(0, REGION)).expect("read");
        assert!(
            back[..] == want[..],
            "{from}→{to}: the new copy holds every byte"
        );
        let start = METADATA_AREA_BYTES + SUM_RESERVE;
        let flipped = Buf::copy_from(&[0x77; 4096]).freeze();
        block_on(disks[to - 1].write(start + 64 * KIB, flipped, false)).unwrap();
        assert!(
            block_on(a.read(64 * KIB, 4096)).is_err(),
            "{from}→{to}: a bad block of the new copy is caught by its checksum"
        );
    }
}

#[test]
fn copies_are_added_to_a_mirror_only() {
    let disks: Vec<_> = (0..4)
        .map(|i| Arc::new(MemoryMember::new(format!("m{i}"), 4 * common::MIB)))
        .collect();
    let start = METADATA_AREA_BYTES + SUM_RESERVE;
    let r5 = |n| common::level_tree(Level::Raid5, n, 64 * KIB, start, REGION);
    let a = create_first(&r5(3), &disks, opts(), false).unwrap();
    block_on(a.mark_clean()).unwrap();
    let e = block_on(a.add_copies(r5(4), metas(&disks[3..]), &Consent::default())).unwrap_err();
    assert!(e.to_string().contains("RAID 1"), "{e}");
}

/// The commit torn where it can be: the old members took it, the added one did not (its
/// superblock writes fail). The volume opens on its old copies with every byte, the added
/// role absent (it held nothing); never an added member's record ahead of the old ones.
#[test]
fn a_commit_torn_before_the_added_member_leaves_the_old_copies_serving() {
    use nbraid_sim::{FaultOps, Faulty};
    let disks: Vec<_> = (0..3)
        .map(|i| Arc::new(MemoryMember::new(format!("m{i}"), 4 * common::MIB)))
        .collect();
    let (old, new) = (mirror(2), mirror(3));
    let a = create_first(&old, &disks, opts(), false).unwrap();
    let want: Vec<u8> = (0..REGION).map(|i| (i * 7 % 251) as u8).collect();
    write_clean(&a, &want).unwrap();
    let faulty = Arc::new(Faulty::new(disks[2].clone(), 1));
    faulty.fail_range(FaultOps::WRITE, 0..2 * SLOT_BYTES);
    let added = block_on(MemberMeta::load(faulty as Arc<dyn Member>));
    let e = block_on(a.add_copies(new.clone(), vec![added], &Consent::default()));
    assert!(e.is_err(), "the added member's record failed");
    drop(a);
    let (a, report) = open(&new, &disks);
    assert_eq!(report.absent_roles, vec![2], "{report:?}");
    let back = block_on(a.read(0, REGION)).expect("read");
    assert!(back[..] == want[..], "the old copies serve every byte");
}

/// The commit torn among the old members: the first took it, the second did not (its
/// superblock writes fail), the added member never got its record. The second is one commit
/// short, not stale and not a changed geometry: the volume opens on both old copies with
/// every byte, the added role absent.
#[test]
fn a_commit_torn_between_the_old_members_leaves_them_both_current() {
    use nbraid_sim::{FaultOps, Faulty};
    let disks: Vec<_> = (0..3)
        .map(|i| Arc::new(MemoryMember::new(format!("m{i}"), 4 * common::MIB)))
        .collect();
    let (old, new) = (mirror(2), mirror(3));
    let faulty = Arc::new(Faulty::new(disks[1].clone(), 1));
    let first = block_on(MemberMeta::load(disks[0].clone() as Arc<dyn Member>));
    let second = block_on(MemberMeta::load(faulty.clone() as Arc<dyn Member>));
    let a = block_on(Array::create(
        "vol",
        old,
        vec![first, second],
        opts(),
        false,
        &|_, _| {},
    ))
    .expect("create")
    .0;
    let want: Vec<u8> = (0..REGION).map(|i| (i * 13 % 251) as u8).collect();
    block_on(async {
        a.write(0, Buf::copy_from(&want), false).await?;
        a.flush().await?;
        a.mark_clean().await.map(|_| ())
    })
    .unwrap();
    faulty.fail_range(FaultOps::WRITE, 0..2 * SLOT_BYTES);
    let added = metas(&disks[2..]);
    let e = block_on(a.add_copies(new.clone(), added, &Consent::default()));
    assert!(e.is_err(), "the second old member's record failed");
    drop(a);
    let (a, report) = open(&new, &disks);
    assert_eq!(report.absent_roles, vec![2], "{report:?}");
    assert!(report.resynced_roles.is_empty(), "{report:?}");
    let back = block_on(a.read(0, REGION)).expect("read");
    assert!(back[..] == want[..], "the old copies serve every byte");
}
