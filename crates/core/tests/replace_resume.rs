//! A replace under way at a restart goes on by itself, from where its copy had come after a
//! clean shutdown and from the start after a crash. It once was forgotten: the start found
//! the replacement standing by as a spare and the operator had to ask again, the copy
//! starting over (on big disks, hours). Every view of the members reads what was written
//! after the swap, writes going on before and after the restart. The replace is dropped,
//! said, when its role's member is gone or the replacement is not found.

mod common;

use common::arrays::{
    apply, closed_and_every_view_reads, create, load, members_then, meta, rebuild_half_way, same,
    Model,
};
use common::{level_tree, Counting, KIB, MIB};
use futures::executor::block_on;
use nbraid_core::metadata::{
    Array, ArrayOptions, MemberMeta, OpenReport, ResumedReplacement, METADATA_AREA_BYTES,
};
use nbraid_core::{CacheMode, Member, MemoryMember, PassControl, PassState, VolumeOptions};
use nbraid_layout::{Level, Node};
use std::sync::Arc;
use std::time::Duration;

const REGION: u64 = 8 * MIB;
const MEMBER_BYTES: u64 = METADATA_AREA_BYTES + REGION;
const STRIP: u64 = 64 * KIB;
/// The copy's windows: 1 MiB of the volume, so a window writes at least 256 KiB to a member.
const WINDOW: u64 = MIB;
/// A member write at least this long is a copy window's (no client write is).
const COPY_WRITE_MIN_BYTES: u64 = 256 * KIB;
const CLIENT_BLOCKS_MAX: u64 = 16;

fn opts() -> ArrayOptions {
    ArrayOptions {
        volume: VolumeOptions {
            cache: CacheMode::WriteThrough,
            cache_max_age: None,
            ..VolumeOptions::default()
        },
        bitmap_chunk_bytes: Some(256 * KIB),
        bitmap_clear_delay: Duration::ZERO,
        ..ArrayOptions::default()
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Shutdown {
    /// Flushed and recorded clean.
    Clean,
    /// Dropped with writes acknowledged since the last clean point (records dirty).
    Crash,
}

fn reopen(tree: &Node, metas: Vec<Option<Arc<MemberMeta>>>) -> (Array, OpenReport) {
    let (a, report) = block_on(Array::open("vol", tree, metas, opts(), &|_, _| {})).expect("open");
    a.set_rebuild_window_bytes(WINDOW);
    (a, report)
}

/// A new array of `tree` over blank disks, written, its role `role` being replaced by
/// `new` under client writes, the copy stopped half-way.
fn replaced_half_way(
    tree: &Node,
    role: usize,
    new: Arc<dyn Member>,
) -> (Vec<Arc<MemoryMember>>, Model, Array) {
    let disks: Vec<Arc<MemoryMember>> = (0..tree.member_count())
        .map(|i| Arc::new(MemoryMember::new(format!("d{i}"), MEMBER_BYTES)))
        .collect();
    let a = create(tree, &disks, opts());
    a.set_rebuild_window_bytes(WINDOW);
    let mut model = Model::zeroed(&a, 5);
    block_on(apply(&a, model.writes(200, CLIENT_BLOCKS_MAX)));
    block_on(a.replace(role, load(new))).expect("replace");
    rebuild_half_way(&a);
    // Writes the replacement takes too.
    block_on(apply(&a, model.writes(100, CLIENT_BLOCKS_MAX)));
    (disks, model, a)
}

/// Role `role` of `tree` is replaced, the copy stopped half-way, the array shut down as
/// `how` and started again with the replacement among the members. The replace goes on by
/// itself, from its checkpoint (clean) or from 0 (crash), and completes; no copy window
/// writes the replacement below the checkpoint again.
fn replace_goes_on(what: &str, tree: Node, role: usize, how: Shutdown) {
    let n = tree.member_count();
    let new = Arc::new(Counting::new("new", MEMBER_BYTES));
    let (disks, mut model, a) = replaced_half_way(&tree, role, new.clone());
    let cap = a.volume().capacity();
    if how == Shutdown::Clean {
        block_on(a.flush()).expect("flush");
        assert!(block_on(a.mark_clean()).expect("clean").is_recorded());
    }
    drop(a);

    let (a, report) = reopen(&tree, members_then(&disks, new.clone()));
    let [resumed] = report.replacing[..] else {
        panic!("{what}: the replace does not go on: {:?}", report.warnings);
    };
    assert_eq!((resumed.role, resumed.position), (role, n), "{what}");
    match how {
        Shutdown::Clean => assert!(
            resumed.from_bytes >= cap / 4 && resumed.from_bytes <= cap * 3 / 4,
            "{what}: resumed from {} of {cap}",
            resumed.from_bytes
        ),
        Shutdown::Crash => assert_eq!(resumed.from_bytes, 0, "{what}: copied anew"),
    }
    let mark = new.writes.lock().len();
    let ctl = PassControl::new(0);
    let (r, ()) = block_on(futures::future::join(a.rebuild(&ctl), async {
        apply(&a, model.writes(100, CLIENT_BLOCKS_MAX)).await
    }));
    let r = r.expect("rebuild");
    assert_eq!(
        (r.state, r.completed),
        (PassState::Done, vec![role]),
        "{what}"
    );
    let copies: Vec<(u64, u64)> = new.writes.lock()[mark..]
        .iter()
        .copied()
        .filter(|&(o, len)| len >= COPY_WRITE_MIN_BYTES && o >= METADATA_AREA_BYTES)
        .collect();
    let lowest = copies.iter().map(|c| c.0).min().expect("the copy went on");
    // The replacement's bytes of volume position `from_bytes`.
    let below = METADATA_AREA_BYTES + resumed.from_bytes / (cap / REGION);
    assert!(
        lowest >= below && lowest < below + WINDOW,
        "{what}: the copy resumed at member byte {lowest}, its checkpoint at {below}"
    );

    let put = vec![(role, new as Arc<dyn Member>)];
    closed_and_every_view_reads(a, (&tree, &disks), put, &model.bytes, what);
}

fn level(level: Level, n: usize) -> Node {
    level_tree(level, n, STRIP, METADATA_AREA_BYTES, REGION)
}

#[test]
fn raid5_replace_goes_on_from_its_checkpoint_after_a_clean_restart() {
    replace_goes_on("RAID 5 of 4", level(Level::Raid5, 4), 1, Shutdown::Clean);
}

#[test]
fn raid6_replace_goes_on_from_its_checkpoint_after_a_clean_restart() {
    replace_goes_on("RAID 6 of 5", level(Level::Raid6, 5), 3, Shutdown::Clean);
}

#[test]
fn raid1_replace_goes_on_from_its_checkpoint_after_a_clean_restart() {
    replace_goes_on("RAID 1 of 2", level(Level::Raid1, 2), 0, Shutdown::Clean);
}

#[test]
fn raid10_replace_goes_on_from_its_checkpoint_after_a_clean_restart() {
    replace_goes_on("RAID 10 of 4", level(Level::Raid10, 4), 2, Shutdown::Clean);
}

#[test]
fn raid5_replace_after_a_crash_copies_anew() {
    replace_goes_on(
        "RAID 5 of 4, crash",
        level(Level::Raid5, 4),
        1,
        Shutdown::Crash,
    );
}

#[test]
fn raid6_replace_after_a_crash_copies_anew() {
    replace_goes_on(
        "RAID 6 of 5, crash",
        level(Level::Raid6, 5),
        0,
        Shutdown::Crash,
    );
}

/// Flushed and recorded clean, then closed.
fn shut_down_clean(a: Array) {
    block_on(a.flush()).expect("flush");
    assert!(block_on(a.mark_clean()).expect("clean").is_recorded());
    drop(a);
}

/// The start did not go on with role 2's replace, and said so, naming `why`.
fn not_resumed(report: &OpenReport, why: &str) {
    assert_eq!(report.replacing, Vec::<ResumedReplacement>::new());
    let said = (report.warnings.iter()).any(|w| w.contains("replace of role 2") && w.contains(why));
    assert!(said, "{why}: {:?}", report.warnings);
}

/// A restart without the replacement, or without the member it copied: the replace does
/// not go on, said; the records drop it, so a later start with the replacement back does
/// not trust its old checkpoint (it stands by as a spare).
#[test]
fn a_replace_whose_replacement_or_member_is_missing_is_dropped_and_said() {
    let tree = level(Level::Raid5, 4);
    let new = Arc::new(MemoryMember::new("new", MEMBER_BYTES));
    let (disks, model, a) = replaced_half_way(&tree, 2, new.clone());
    shut_down_clean(a);

    // Without the replacement: nothing goes on, said; the records drop it at the clean point.
    let metas: Vec<Option<Arc<MemberMeta>>> = disks.iter().map(|d| Some(meta(d))).collect();
    let (a, report) = reopen(&tree, metas);
    not_resumed(&report, "the replacement was not found");
    assert!(a.rebuilding().is_empty());
    same(&a, &model.bytes, "without the replacement").expect("reads");
    assert!(block_on(a.mark_clean()).expect("clean").is_recorded());
    drop(a);
    // With it back: a spare now, not a copy resumed from a checkpoint the records dropped.
    let (_a, report) = reopen(&tree, members_then(&disks, new));
    assert_eq!(report.replacing, Vec::<ResumedReplacement>::new());

    // Role 2's member gone: the replacement holds only part of it; not resumed either.
    let new = Arc::new(MemoryMember::new("new2", MEMBER_BYTES));
    let (disks, _, a) = replaced_half_way(&tree, 2, new.clone());
    shut_down_clean(a);
    let mut metas = members_then(&disks, new);
    metas[2] = None;
    let (_a, report) = reopen(&tree, metas);
    not_resumed(&report, "role 2's member is not current");
}
