//! New members that fail while they are written. A replacement that fails while it copies:
//! the member it was to replace keeps its role, and the replacement's path leaves the
//! records' list of paths a start opens (left there, the next start opened the disk that had
//! just failed as a spare, and the next member failure rebuilt onto it); the pass says it
//! failed. A spare that fails while it is rebuilt: the pass says it failed and why (it said
//! "done", its event too, with the volume still degraded).

mod common;

use common::arrays::{apply, create, read_all, Model};
use common::{level_tree, Breaking, KIB, MIB};
use futures::executor::block_on;
use nbraid_core::metadata::{ArrayOptions, MemberMeta, METADATA_AREA_BYTES};
use nbraid_core::{Member, MemoryMember, PassControl, PassState};
use nbraid_layout::Level;
use std::sync::atomic::Ordering;
use std::sync::Arc;

const REGION: u64 = 4 * MIB;
const MEMBER_BYTES: u64 = METADATA_AREA_BYTES + REGION;

/// A RAID 5 of four memory disks with writes on it, its model, and a breakable newcomer.
fn raid5_and_newcomer() -> (nbraid_core::metadata::Array, Model, Arc<Breaking>) {
    let disks: Vec<_> = (0..4)
        .map(|i| Arc::new(MemoryMember::new(format!("d{i}"), MEMBER_BYTES)))
        .collect();
    let tree = level_tree(Level::Raid5, 4, 64 * KIB, METADATA_AREA_BYTES, REGION);
    let opts = ArrayOptions {
        bitmap_chunk_bytes: Some(256 * KIB),
        ppl: true,
        ..ArrayOptions::default()
    };
    let a = create(&tree, &disks, opts);
    let mut model = Model::zeroed(&a, 7);
    block_on(apply(&a, model.writes(40, 16)));
    let new = Arc::new(Breaking::new("new", MEMBER_BYTES));
    (a, model, new)
}

fn meta_of(m: &Arc<Breaking>) -> Arc<MemberMeta> {
    block_on(MemberMeta::load(m.clone() as Arc<dyn Member>))
}

#[test]
fn a_replacement_that_fails_leaves_the_recorded_paths() {
    let (a, mut model, new) = raid5_and_newcomer();
    block_on(a.replace(0, meta_of(&new))).expect("replace");
    assert!(
        block_on(a.added_paths()).contains(&"new".to_string()),
        "the replace records its path when it starts"
    );

    new.broken.store(true, Ordering::SeqCst);
    let ctl = PassControl::new(0);
    let (report, ()) = block_on(futures::future::join(
        a.rebuild(&ctl),
        apply(&a, model.writes(20, 16)),
    ));
    let report = report.expect("rebuild");
    assert!(report.completed.is_empty(), "{report:?}");
    assert_eq!(report.state, PassState::Failed, "{report:?}");
    let why = ctl.failure().expect("a failed pass says why");
    assert!(
        why.contains("the replacement `new` of role 0 failed"),
        "{why}"
    );
    assert!(a.volume().replacement(0).is_none());
    assert!(!a.volume().member_is_failed(0));
    assert!(!a.volume().is_degraded());
    let paths = block_on(a.added_paths());
    assert!(
        !paths.contains(&"new".to_string()),
        "the failed replacement is still recorded, so a start would open it as a spare: {paths:?}"
    );
    assert!(read_all(&a, 1, 1) == model.bytes, "the volume's bytes");
}

#[test]
fn a_spare_that_fails_while_rebuilt_fails_the_pass() {
    let (a, mut model, spare) = raid5_and_newcomer();
    a.volume().fail_member(2, "test: d2 dies");
    a.add_spare(meta_of(&spare)).expect("spare");
    assert_eq!(block_on(a.use_spares()).expect("use"), vec![2]);
    spare.broken.store(true, Ordering::SeqCst);
    let ctl = PassControl::new(0);
    let (report, ()) = block_on(futures::future::join(
        a.rebuild(&ctl),
        apply(&a, model.writes(20, 16)),
    ));
    let report = report.expect("rebuild");
    assert_eq!(report.state, PassState::Failed, "{report:?}");
    assert_eq!(ctl.state(), PassState::Failed);
    let why = ctl.failure().expect("a failed pass says why");
    assert!(why.contains("role 2's new member `new` failed"), "{why}");
    assert!(a.volume().member_is_failed(2));
    assert!(read_all(&a, 1, 1) == model.bytes, "the volume's bytes");
}

/// A spare that fails at its first rebuild write, with no other spare: the pass stops at
/// once, not at the volume's end (it walked on, writing nowhere, then said failed), and the
/// role leaves the roles being rebuilt (nothing claims it rebuilt, or rebuilding).
#[test]
fn a_pass_whose_only_target_failed_stops_at_once() {
    let (a, _model, spare) = raid5_and_newcomer();
    a.set_rebuild_window_bytes(192 * KIB);
    a.volume().fail_member(2, "test: d2 dies");
    a.add_spare(meta_of(&spare)).expect("spare");
    assert_eq!(block_on(a.use_spares()).expect("use"), vec![2]);
    spare.broken.store(true, Ordering::SeqCst);
    let ctl = PassControl::new(0);
    let report = block_on(a.rebuild(&ctl)).expect("rebuild");
    assert_eq!(report.state, PassState::Failed, "{report:?}");
    assert!(report.completed.is_empty(), "{report:?}");
    let capacity = a.volume().capacity();
    assert!(
        ctl.position_bytes() < capacity / 4,
        "walked to {} of {capacity}",
        ctl.position_bytes()
    );
    let why = ctl.failure().expect("a failed pass says why");
    assert!(why.contains("role 2's new member `new` failed"), "{why}");
    assert!(a.rebuilding().is_empty(), "{:?}", a.rebuilding());
}
