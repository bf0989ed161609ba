//! A second member lost while a spare was being rebuilt into the first one's role leaves the
//! volume past its tolerance: the new member holds only what its rebuild copied. A plain
//! start refuses, naming the role being rebuilt and the failed one; a forced start
//! (`--force-assemble`, as mdadm's) takes the failed member back, the rebuild goes on from
//! its checkpoint, and the volume reads what was written. Found by a hunt over remote
//! members: assembly counted the rebuilding role as present, so the start went on and died
//! on its first read ("stripe 0 … has lost children [0, 1]"), and force took nothing back.

mod common;

use common::arrays::{
    apply, closed_and_every_view_reads, create, load, members_then, rebuild_half_way, same, Model,
};
use common::{level_tree, KIB, MIB};
use futures::executor::block_on;
use nbraid_core::fail_cause::{Because, FailCause};
use nbraid_core::metadata::{
    Absence, Array, ArrayError, ArrayOptions, AssembleError, MemberMeta, METADATA_AREA_BYTES,
};
use nbraid_core::{CacheMode, Member, MemoryMember, PassControl, PassState, VolumeOptions};
use nbraid_layout::{Level, Node};
use std::sync::Arc;
use std::time::Duration;

const REGION: u64 = 8 * MIB;
const MEMBER_BYTES: u64 = METADATA_AREA_BYTES + REGION;

fn opts(force: bool) -> ArrayOptions {
    ArrayOptions {
        volume: VolumeOptions {
            cache: CacheMode::WriteThrough,
            ..VolumeOptions::default()
        },
        bitmap_chunk_bytes: Some(256 * KIB),
        bitmap_clear_delay: Duration::ZERO,
        force_assembly: force,
        ..ArrayOptions::default()
    }
}

fn open(
    tree: &Node,
    metas: Vec<Option<Arc<MemberMeta>>>,
    force: bool,
) -> Result<Array, ArrayError> {
    let opened = Array::open("vol", tree, metas, opts(force), &|_, _| {});
    block_on(opened).map(|(a, _)| a)
}

/// `tree` written, role `first` failed and a spare rebuilt into it half-way, then role
/// `second` failed by the operator; the array dropped. Returns the disks, the spare and what
/// was written.
fn second_failure_mid_rebuild(
    tree: &Node,
    (first, second): (usize, usize),
) -> (Vec<Arc<MemoryMember>>, Arc<MemoryMember>, Model) {
    let disks: Vec<Arc<MemoryMember>> = (0..tree.member_count())
        .map(|i| Arc::new(MemoryMember::new(format!("d{i}"), MEMBER_BYTES)))
        .collect();
    let a = create(tree, &disks, opts(false));
    a.set_rebuild_window_bytes(MIB);
    let mut model = Model::zeroed(&a, 21);
    block_on(apply(&a, model.writes(200, 16)));
    block_on(a.flush()).expect("flush");
    a.volume().fail_member(first, "test: the first member dies");
    let spare = Arc::new(MemoryMember::new("s0", MEMBER_BYTES));
    block_on(a.rebuild_onto(first, load(spare.clone()))).expect("rebuild onto");
    rebuild_half_way(&a);
    let why = Because(
        FailCause::Operator,
        "test: the operator fails a second member",
    );
    a.volume().fail_member(second, &why);
    block_on(a.record_failures()).expect("recorded");
    drop(a);
    (disks, spare, model)
}

fn forced_back_after_a_second_failure(what: &str, tree: Node, (first, second): (usize, usize)) {
    let (disks, spare, model) = second_failure_mid_rebuild(&tree, (first, second));

    let refused = open(&tree, members_then(&disks, spare.clone()), false).err();
    let Some(ArrayError::Assemble(AssembleError::BeyondTolerance { why, .. })) = refused else {
        panic!("{what}: a plain start must refuse, past tolerance: {refused:?}");
    };
    assert!(
        why.iter().any(|(r, a)| *r == first
            && matches!(a, Absence::Rebuilding { checkpoint_bytes, .. } if *checkpoint_bytes > 0)),
        "{what}: the role being rebuilt is named, with its checkpoint: {why:?}"
    );
    assert!(
        why.iter()
            .any(|(r, a)| *r == second && matches!(a, Absence::Failed { .. })),
        "{what}: the failed role is named: {why:?}"
    );

    let a = open(&tree, members_then(&disks, spare.clone()), true).expect("a forced start");
    a.set_rebuild_window_bytes(MIB);
    same(&a, &model.bytes, what).expect("served from the member taken back");
    let r = block_on(a.rebuild(&PassControl::new(0))).expect("rebuild");
    assert_eq!(
        (r.state, r.completed),
        (PassState::Done, vec![first]),
        "{what}"
    );
    let put = vec![(first, spare as Arc<dyn Member>)];
    closed_and_every_view_reads(a, (&tree, &disks), put, &model.bytes, what);
}

fn level(level: Level, n: usize) -> Node {
    level_tree(level, n, 64 * KIB, METADATA_AREA_BYTES, REGION)
}

#[test]
fn raid5_with_a_second_failure_mid_rebuild_refuses_then_starts_by_force() {
    forced_back_after_a_second_failure("RAID 5 of 4", level(Level::Raid5, 4), (0, 1));
}

#[test]
fn raid1_with_the_other_copy_failed_mid_rebuild_refuses_then_starts_by_force() {
    forced_back_after_a_second_failure("RAID 1 of 2", level(Level::Raid1, 2), (1, 0));
}

/// RAID 6 loses two: the third failure past a rebuild is the one it cannot take.
#[test]
fn raid6_with_a_third_member_out_mid_rebuild_refuses_then_starts_by_force() {
    let tree = level(Level::Raid6, 5);
    let (disks, spare, model) = second_failure_mid_rebuild(&tree, (0, 1));
    // Two out (one being rebuilt, one failed): within RAID 6's tolerance, served.
    let a = open(&tree, members_then(&disks, spare.clone()), false).expect("within tolerance");
    same(&a, &model.bytes, "RAID 6, two out").expect("reads");
    drop(a);
}
