//! A disk copied from a serving member carries its id: `nbraid add` once took such a copy
//! as a spare (it carries "this array's own record"), wrote nothing onto it, and the next
//! start refused the volume — "members 1 and 3 both claim role 1". A copy is refused as a
//! spare and as a replacement, naming the member it copies; a blank disk is still taken.

mod common;

use common::{KIB, MIB};
use futures::executor::block_on;
use nbraid_core::metadata::{Array, ArrayOptions, MemberMeta, METADATA_AREA_BYTES};
use nbraid_core::{Member, MemoryMember};
use nbraid_layout::{Level, ParityLayout, Region, Shape};
use std::sync::Arc;

const REGION: u64 = 4 * MIB;
const MEMBER_BYTES: u64 = METADATA_AREA_BYTES + REGION;

fn disk(name: &str) -> Arc<MemoryMember> {
    Arc::new(MemoryMember::new(name, MEMBER_BYTES))
}

fn meta(d: &Arc<MemoryMember>) -> Arc<MemberMeta> {
    block_on(MemberMeta::load(d.clone() as Arc<dyn Member>))
}

fn raid5(disks: &[Arc<MemoryMember>]) -> Array {
    let shape = Shape::new(
        Level::Raid5,
        disks.len(),
        None,
        64 * KIB,
        ParityLayout::LeftSymmetric,
    )
    .expect("shape");
    let region = Region {
        start: METADATA_AREA_BYTES,
        len: REGION,
    };
    let tree = shape.build(&vec![region; disks.len()]).expect("tree");
    let metas = disks.iter().map(meta).collect();
    let opts = ArrayOptions::default();
    block_on(Array::create("vol", tree, metas, opts, true, &|_, _| {}))
        .expect("create")
        .0
}

/// A byte-for-byte copy of `d`'s metadata area (what `dd` of the disk gives).
fn copy_of(d: &MemoryMember, name: &str) -> Arc<MemoryMember> {
    let copy = disk(name);
    let mut head = vec![0u8; METADATA_AREA_BYTES as usize];
    d.peek(0, &mut head);
    copy.poke(0, &head);
    copy
}

#[test]
fn a_copy_of_a_serving_member_is_refused_as_a_spare_and_as_a_replacement() {
    let disks: Vec<_> = (0..3).map(|i| disk(&format!("d{i}"))).collect();
    let a = raid5(&disks);
    let copy = copy_of(&disks[1], "d1-copy");

    let e = a
        .add_spare(meta(&copy))
        .expect_err("a copy of d1 taken as a spare");
    let said = e.to_string();
    assert!(
        said.contains("`d1-copy` is a copy of member 1 (`d1`)") && said.contains("blank"),
        "{said}"
    );
    assert_eq!(a.spare_count(), 0);

    let e = block_on(a.replace(2, meta(&copy))).expect_err("a copy of d1 replacing d2");
    assert!(e.to_string().contains("is a copy of member 1"), "{e}");

    a.add_spare(meta(&disk("blank")))
        .expect("a blank disk is a spare");
    assert_eq!(a.spare_count(), 1);
}
