//! Volumes sharing a member (as a daemon's volumes share each member file): a write-back
//! error on the member fails every volume's next flush, not only the first to ask; the kernel
//! reports such an error to one fsync only, so the member remembers it.

mod common;

use common::*;
use futures::executor::block_on;
use nbraid_core::{Buf, Member, MemberState, MemoryMember, Volume, VolumeError, VolumeOptions};
use nbraid_layout::{Geometry, Level, Node, Region};
use nbraid_sim::{FaultOps, Faulty};
use std::sync::Arc;

/// Volume A on the first half of `m`, volume B on the second half.
fn two_volumes_on(m: &Arc<Faulty<MemoryMember>>) -> (Volume, Volume) {
    let half = m.len() / 2;
    let shared = m.clone() as Arc<dyn Member>;
    let on = |start| {
        Volume::new(
            Geometry::from_tree(Node::member(0, start, half)),
            vec![shared.clone()],
            VolumeOptions::default(),
        )
        .unwrap()
    };
    (on(0), on(half))
}

#[test]
fn a_write_back_error_fails_every_sharing_volumes_flush() {
    let m = Arc::new(Faulty::new(MemoryMember::new("shared", 2 * MIB), 1));
    let (a, b) = two_volumes_on(&m);
    block_on(a.write(0, Buf::copy_from(&[1; 4096]), false)).unwrap();
    block_on(b.write(0, Buf::copy_from(&[2; 4096]), false)).unwrap();
    // The member's write-back fails once (the kernel reports it to the first fsync only).
    m.fail_next(FaultOps::FLUSH, 1);
    let e = block_on(a.flush()).unwrap_err();
    assert!(matches!(e, VolumeError::Member { member: 0, .. }), "{e}");
    // B's write may be among the lost pages: its flush must not succeed.
    let e = block_on(b.flush()).expect_err("B's flush succeeded after the write-back failed");
    let msg = e.to_string();
    assert!(msg.contains("faulty(shared)"), "{msg}");
    assert!(
        msg.contains("an earlier write-back to this member failed"),
        "{msg}"
    );
    // And it stays failed for later writes and flushes, of any volume.
    block_on(b.write(8192, Buf::copy_from(&[3; 4096]), false)).unwrap_err();
    let c = Volume::new(
        Geometry::from_tree(Node::member(0, 0, MIB)),
        vec![m.clone() as Arc<dyn Member>],
        VolumeOptions::default(),
    )
    .unwrap();
    block_on(c.write(0, Buf::copy_from(&[4; 4096]), false)).unwrap();
    assert!(block_on(c.flush()).is_err());
}

/// With redundancy, each volume marks the member failed at its flush and carries on degraded,
/// rather than one of them keeping a member whose writes may be lost.
#[test]
fn mirrors_sharing_a_member_all_drop_it() {
    let bad = Arc::new(Faulty::new(MemoryMember::new("bad", 2 * MIB), 2));
    let good = Arc::new(Faulty::new(MemoryMember::new("good", 2 * MIB), 3));
    let members = vec![
        bad.clone() as Arc<dyn Member>,
        good.clone() as Arc<dyn Member>,
    ];
    let mirror_at = |start| {
        let region = Region { start, len: MIB };
        let geometry = Geometry::new(
            nbraid_layout::Shape::new(
                Level::Raid1,
                2,
                None,
                64 * KIB,
                nbraid_layout::ParityLayout::default(),
            )
            .unwrap(),
            &[region, region],
        )
        .unwrap();
        Volume::new(geometry, members.clone(), VolumeOptions::default()).unwrap()
    };
    let (a, b) = (mirror_at(0), mirror_at(MIB));
    block_on(a.write(0, Buf::copy_from(&[1; 4096]), false)).unwrap();
    block_on(b.write(0, Buf::copy_from(&[2; 4096]), false)).unwrap();
    bad.fail_next(FaultOps::FLUSH, 1);
    block_on(a.flush()).unwrap();
    block_on(b.flush()).unwrap();
    for v in [&a, &b] {
        assert_eq!(
            v.member_health()
                .iter()
                .map(|h| h.state)
                .collect::<Vec<_>>(),
            vec![MemberState::Failed, MemberState::Healthy]
        );
    }
    let got = block_on(b.read(0, 4096)).unwrap();
    assert!(got.iter().all(|&x| x == 2));
}
