//! Why a member failed survives a restart: the records keep it beside the failed state, and
//! the open fails the role for that cause — one the operator failed, or that answered with
//! I/O errors, stays out; one that stopped answering may still come back by itself. (Before,
//! every role recorded failed came back "absent at start", which lets a remote one back.)

mod common;

use common::arrays::{create_first, metas, open_every};
use common::{level_tree, KIB, MIB};
use futures::executor::block_on;
use nbraid_core::fail_cause::{Because, FailCause};
use nbraid_core::metadata::{ArrayOptions, METADATA_AREA_BYTES};
use nbraid_core::{Buf, MemoryMember};
use nbraid_layout::{Level, Node};
use nbraid_sim::{FaultOps, Faulty};
use std::sync::Arc;

const REGION_BYTES: u64 = 2 * MIB;

fn mirror(members: usize) -> Node {
    level_tree(
        Level::Raid1,
        members,
        64 * KIB,
        METADATA_AREA_BYTES,
        REGION_BYTES,
    )
}

fn disks(n: usize) -> Vec<Arc<Faulty<MemoryMember>>> {
    (0..n)
        .map(|i| {
            let m = MemoryMember::new(format!("disk{i}"), METADATA_AREA_BYTES + REGION_BYTES);
            Arc::new(Faulty::new(m, i as u64 + 1))
        })
        .collect()
}

fn cause(a: &nbraid_core::metadata::Array, r: usize) -> Option<FailCause> {
    a.volume().member_health()[r]
        .failure
        .as_ref()
        .map(|f| f.cause)
}

/// Role 1 failed by the operator, role 2 by a write's I/O error, role 3 for not answering:
/// after a restart each is failed for the same cause, and only role 3 may return by itself.
#[test]
fn each_failed_member_keeps_its_cause_across_a_restart() {
    let d = disks(4);
    let tree = mirror(4);
    let a = create_first(&tree, &d, ArrayOptions::default(), true).expect("create");
    let volume = a.volume();
    volume.fail_member(1, &Because(FailCause::Operator, "nbraid fail"));
    volume.fail_member(3, &Because(FailCause::Unanswered, "no reply in time"));
    d[2].fail_next(FaultOps::WRITE, 1);
    block_on(a.write(0, Buf::copy_from(&[7u8; 4096]), false)).expect("write");
    assert_eq!(cause(&a, 2), Some(FailCause::Errors), "failed by the EIO");
    block_on(a.record_failures()).expect("recorded");
    drop(a);

    let (a, report) = open_every(&tree, &d, ArrayOptions::default()).expect("open");
    assert_eq!(report.absent_roles, vec![1, 2, 3], "{report:?}");
    assert_eq!(cause(&a, 1), Some(FailCause::Operator));
    assert_eq!(cause(&a, 2), Some(FailCause::Errors));
    assert_eq!(cause(&a, 3), Some(FailCause::Unanswered));
    let returns = |r| cause(&a, r).is_some_and(FailCause::returns_by_itself);
    assert!(!returns(1) && !returns(2) && returns(3));
    // Kept by the next commits too: a second restart says the same.
    block_on(a.mark_clean()).expect("clean");
    drop(a);
    let (a, _) = open_every(&tree, &d, ArrayOptions::default()).expect("open again");
    assert_eq!(cause(&a, 1), Some(FailCause::Operator));
    assert_eq!(cause(&a, 2), Some(FailCause::Errors));
    assert_eq!(cause(&a, 3), Some(FailCause::Unanswered));
}

/// The operator failing a member already failed for not answering is recorded: after a
/// restart it stays out.
#[test]
fn the_operators_fail_of_a_member_already_failed_is_recorded() {
    let d = disks(3);
    let tree = mirror(3);
    let a = create_first(&tree, &d, ArrayOptions::default(), true).expect("create");
    a.volume()
        .fail_member(2, &Because(FailCause::Unanswered, "connection lost"));
    block_on(a.record_failures()).expect("recorded");
    a.volume()
        .fail_member(2, &Because(FailCause::Operator, "nbraid fail"));
    block_on(a.record_failures()).expect("recorded again");
    drop(a);
    let (a, _) = open_every(&tree, &d, ArrayOptions::default()).expect("open");
    assert_eq!(cause(&a, 2), Some(FailCause::Operator));
}

/// A member absent at this start and not recorded failed is absent at start, as before.
#[test]
fn a_member_missing_at_this_start_is_absent_at_start() {
    let d = disks(3);
    let tree = mirror(3);
    let a = create_first(&tree, &d, ArrayOptions::default(), true).expect("create");
    block_on(a.mark_clean()).expect("clean");
    drop(a);
    let mut present: Vec<_> = metas(&d).into_iter().map(Some).collect();
    present[1] = None;
    let opened = nbraid_core::metadata::Array::open(
        "vol",
        &tree,
        present,
        ArrayOptions::default(),
        &|_, _| {},
    );
    let (a, _) = block_on(opened).expect("open");
    assert_eq!(cause(&a, 1), Some(FailCause::AbsentAtStart));
}
