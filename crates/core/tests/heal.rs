//! Arrays that heal (mdadm's tests/ as the model, over memory members): a member fails under
//! writes and a hot spare is rebuilt into its place while writes go on, bit-exact, and the
//! records name it afterwards; RAID 6 rebuilds two spares in one pass; a restart in the
//! middle of a rebuild resumes from the checkpoint in the superblocks; a healthy member is
//! replaced under writes and the replacement carries the role after a restart; a failed
//! member that comes back is not trusted and is rebuilt. After each, every view of the
//! members that loses what the layout tolerates reads the same bytes.

mod common;

use common::{KIB, MIB};
use futures::executor::block_on;
use nbraid_core::metadata::{Array, ArrayOptions, MemberMeta, METADATA_AREA_BYTES};
use nbraid_core::{
    Buf, CacheMode, Member, MemoryMember, PassControl, PassState, Volume, VolumeOptions,
};
use nbraid_layout::{Geometry, Level, Node, ParityLayout, Region, Shape};
use std::sync::Arc;
use std::time::Duration;

const REGION: u64 = 4 * MIB;
const MEMBER_BYTES: u64 = METADATA_AREA_BYTES + REGION;
const STRIP: u64 = 64 * KIB;

fn tree(level: Level, n: usize) -> Node {
    let shape = Shape::new(level, n, None, STRIP, ParityLayout::LeftSymmetric).expect("shape");
    let regions = vec![
        Region {
            start: METADATA_AREA_BYTES,
            len: REGION
        };
        n
    ];
    shape.build(&regions).expect("tree")
}

fn disk(name: &str) -> Arc<MemoryMember> {
    Arc::new(MemoryMember::new(name, MEMBER_BYTES))
}

fn opts() -> ArrayOptions {
    ArrayOptions {
        volume: VolumeOptions {
            cache: CacheMode::WriteBack { bytes: 2 * MIB },
            cache_max_age: None,
            ..VolumeOptions::default()
        },
        bitmap_chunk_bytes: Some(256 * KIB),
        ppl: true,
        bitmap_clear_delay: std::time::Duration::ZERO,

        ..ArrayOptions::default()
    }
}

fn meta(d: &Arc<MemoryMember>) -> Arc<MemberMeta> {
    block_on(MemberMeta::load(d.clone() as Arc<dyn Member>))
}

fn create(level: Level, disks: &[Arc<MemoryMember>]) -> Array {
    let m = disks.iter().map(meta).collect();
    block_on(Array::create(
        "vol",
        tree(level, disks.len()),
        m,
        opts(),
        true,
        &|_, _| {},
    ))
    .expect("create")
    .0
}

fn open(level: Level, disks: &[Arc<MemoryMember>]) -> (Array, nbraid_core::metadata::OpenReport) {
    block_on(Array::open(
        "vol",
        &tree(level, disks.len()),
        disks.iter().map(|d| Some(meta(d))).collect(),
        opts(),
        &|_, _| {},
    ))
    .expect("open")
}

/// The volume's bytes as a model: writes go to both.
struct Model {
    bytes: Vec<u8>,
    seed: u64,
}

impl Model {
    fn new(a: &Array) -> Model {
        Model {
            bytes: vec![0; a.volume().capacity() as usize],
            seed: 1,
        }
    }

    /// `n` writes of 4 KiB .. 256 KiB spread over the volume (deterministic).
    fn writes(&mut self, n: usize) -> Vec<(u64, Buf)> {
        let cap = self.bytes.len() as u64;
        (0..n)
            .map(|_| {
                self.seed = self
                    .seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let len = ((self.seed >> 33) % 64 + 1) * 4096;
                let at = (self.seed >> 7) % ((cap - len) / 4096) * 4096;
                let mut b = Buf::new(len as usize);
                for (i, x) in b.iter_mut().enumerate() {
                    *x = (self.seed as usize ^ (i * 31) ^ (i >> 9)) as u8;
                }
                self.bytes[at as usize..(at + len) as usize].copy_from_slice(&b);
                (at, b)
            })
            .collect()
    }
}

async fn apply(a: &Array, writes: Vec<(u64, Buf)>) {
    for (at, b) in writes {
        a.write(at, b, false).await.expect("write");
        // Yield now and then so a rebuild in the same executor interleaves.
        nbraid_core::timer::sleep(Duration::from_micros(50)).await;
    }
}

async fn read_all(v: &Volume) -> Vec<u8> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < v.capacity() {
        let n = (v.capacity() - at).min(MIB);
        out.extend_from_slice(&v.read(at, n).await.expect("read"));
        at += n;
    }
    out
}

/// Every view of `disks` (in role order) that loses members the layout tolerates reads
/// the model (plain volumes over the regions: nothing is written).
fn every_view_reads(level: Level, disks: &[Arc<MemoryMember>], model: &Model) {
    let g = Geometry::from_tree(tree(level, disks.len()));
    let n = disks.len();
    let mut sets: Vec<Vec<usize>> = vec![vec![]];
    sets.extend((0..n).map(|a| vec![a]));
    for a in 0..n {
        sets.extend((a + 1..n).map(|b| vec![a, b]));
    }
    for lost in sets.into_iter().filter(|s| g.survives(s)) {
        let mems = disks.iter().map(|d| d.clone() as Arc<dyn Member>).collect();
        let opts = VolumeOptions {
            members_known_zero: true,
            ..VolumeOptions::default()
        };
        let v = Volume::new(g.clone(), mems, opts).expect("view");
        for &m in &lost {
            v.fail_member(m, "view");
        }
        assert!(
            block_on(read_all(&v)) == model.bytes,
            "view losing {lost:?} differs from the model"
        );
    }
}

fn rebuild_under_writes(a: &Array, ctl: &PassControl, writes: Vec<(u64, Buf)>) -> Vec<usize> {
    let (r, ()) = block_on(futures::future::join(a.rebuild(ctl), apply(a, writes)));
    block_on(a.flush()).expect("flush");
    let r = r.expect("rebuild");
    assert_eq!(r.state, PassState::Done);
    r.completed
}

#[test]
fn a_spare_takes_a_failed_members_place_under_writes() {
    for level in [Level::Raid1, Level::Raid5, Level::Raid6, Level::Raid10] {
        let mut disks: Vec<_> = (0..4).map(|i| disk(&format!("d{i}"))).collect();
        let a = create(level, &disks);
        a.set_rebuild_window_bytes(256 * KIB);
        let mut model = Model::new(&a);
        block_on(apply(&a, model.writes(40)));
        a.volume().fail_member(1, "test: pulled");
        block_on(apply(&a, model.writes(20)));
        let spare = disk("spare");
        a.add_spare(meta(&spare)).expect("spare");
        assert_eq!(a.roles_wanting_a_member(), vec![1]);
        assert_eq!(block_on(a.use_spares()).expect("use"), vec![1]);
        assert_eq!(a.spare_count(), 0);
        assert!(!a.volume().member_is_current(1));
        let done = rebuild_under_writes(&a, &PassControl::new(0), model.writes(60));
        assert_eq!(done, vec![1], "{level:?}");
        assert!(!a.volume().is_degraded());
        assert!(block_on(read_all(a.volume())) == model.bytes);
        assert!(block_on(a.mark_clean()).expect("clean").is_recorded());
        drop(a);
        disks[1] = spare;
        let (a, report) = open(level, &disks);
        assert!(
            report.was_clean && report.absent_roles.is_empty(),
            "{report:?}"
        );
        assert!(report.rebuilding_roles.is_empty() && report.resynced_roles.is_empty());
        assert!(block_on(read_all(a.volume())) == model.bytes);
        drop(a);
        every_view_reads(level, &disks, &model);
    }
}

/// Two callers put spares in place at once (the daemon's watcher and `nbraid rebuild`): the
/// one that finds the spare taken waits until the other's role records it, so it sees the
/// role rebuilding instead of answering "nothing to rebuild" while a spare is on its way in
/// (a flaky end-to-end test, `disk_rule`'s Matrix re-add, printed `null` for that).
#[test]
fn a_second_caller_of_use_spares_waits_for_the_first_placement() {
    let disks: Vec<_> = (0..4).map(|i| disk(&format!("d{i}"))).collect();
    let a = create(Level::Raid5, &disks);
    a.volume().fail_member(1, "test: pulled");
    // Its record's write answers later, so the first placement is still under way when the
    // second caller looks.
    let spare: Arc<dyn Member> = Arc::new(common::Yielding {
        inner: MemoryMember::new("spare", MEMBER_BYTES),
        in_flight: Default::default(),
    });
    a.add_spare(block_on(MemberMeta::load(spare)))
        .expect("spare");
    let (first, (second, seen)) = block_on(futures::future::join(a.use_spares(), async {
        let used = a.use_spares().await;
        (used, a.rebuilding())
    }));
    assert_eq!(first.expect("first"), vec![1]);
    assert_eq!(second.expect("second"), Vec::<usize>::new());
    let roles: Vec<usize> = seen.iter().map(|&(r, _)| r).collect();
    assert_eq!(roles, vec![1], "the second caller saw the role rebuilding");
}

/// Completing a rebuild flushes the new member, not the volume: client writes still in the
/// write-back cache stay there (under steady writes destaging it all took seconds), go to
/// the new member when destaged, and everything reads back — after a restart too.
#[test]
fn completing_a_rebuild_leaves_the_write_back_cache_alone() {
    let mut disks: Vec<_> = (0..4).map(|i| disk(&format!("d{i}"))).collect();
    let a = create(Level::Raid5, &disks);
    let mut model = Model::new(&a);
    block_on(apply(&a, model.writes(40)));
    block_on(a.flush()).expect("flush");
    a.volume().fail_member(2, "test: pulled");
    let spare = disk("spare");
    a.add_spare(meta(&spare)).expect("spare");
    assert_eq!(block_on(a.use_spares()).expect("use"), vec![2]);
    // Partial-stripe writes the cache keeps (no age limit, under its bound).
    let small: Vec<(u64, Buf)> = model.writes(8).into_iter().take(8).collect();
    block_on(apply(&a, small));
    let cached = a.volume().cache_usage().dirty_bytes;
    assert!(cached > 0, "the writes are cached");
    let r = block_on(a.rebuild(&PassControl::new(0))).expect("rebuild");
    assert_eq!(r.completed, vec![2]);
    assert_eq!(a.volume().cache_usage().dirty_bytes, cached, "not destaged");
    assert!(block_on(read_all(a.volume())) == model.bytes);
    block_on(a.flush()).expect("flush");
    assert!(block_on(a.mark_clean()).expect("clean").is_recorded());
    drop(a);
    disks[2] = spare;
    let (a, report) = open(Level::Raid5, &disks);
    assert!(
        report.was_clean && report.absent_roles.is_empty(),
        "{report:?}"
    );
    assert!(block_on(read_all(a.volume())) == model.bytes);
    drop(a);
    every_view_reads(Level::Raid5, &disks, &model);
}

#[test]
fn raid6_rebuilds_two_spares_in_one_pass() {
    let mut disks: Vec<_> = (0..6).map(|i| disk(&format!("d{i}"))).collect();
    let a = create(Level::Raid6, &disks);
    let mut model = Model::new(&a);
    block_on(apply(&a, model.writes(40)));
    a.volume().fail_member(0, "test");
    a.volume().fail_member(4, "test");
    block_on(apply(&a, model.writes(20)));
    let spares = [disk("s0"), disk("s1")];
    for s in &spares {
        a.add_spare(meta(s)).expect("spare");
    }
    let mut used = block_on(a.use_spares()).expect("use");
    used.sort_unstable();
    assert_eq!(used, vec![0, 4]);
    let done = rebuild_under_writes(&a, &PassControl::new(0), model.writes(40));
    assert_eq!(done.len(), 2);
    assert!(!a.volume().is_degraded());
    drop(a);
    // Equal spares go in role order: role 0 got s0, role 4 got s1.
    disks[0] = spares[0].clone();
    disks[4] = spares[1].clone();
    let (a, report) = open(Level::Raid6, &disks);
    assert!(report.absent_roles.is_empty(), "{report:?}");
    assert!(block_on(read_all(a.volume())) == model.bytes);
    drop(a);
    every_view_reads(Level::Raid6, &disks, &model);
}

#[test]
fn a_restart_mid_rebuild_resumes_from_the_checkpoint() {
    let mut disks: Vec<_> = (0..4).map(|i| disk(&format!("d{i}"))).collect();
    let a = create(Level::Raid5, &disks);
    a.set_rebuild_window_bytes(128 * KIB);
    let mut model = Model::new(&a);
    block_on(apply(&a, model.writes(40)));
    a.volume().fail_member(2, "test");
    let spare = disk("spare");
    block_on(a.rebuild_onto(2, meta(&spare))).expect("rebuild onto");
    let cap = a.volume().capacity();
    // Slow enough to stop half-way: the pass sleeps to keep to the rate.
    let ctl = PassControl::new(cap * 4);
    let watcher = async {
        while ctl.position_bytes() < cap / 2 {
            nbraid_core::timer::sleep(Duration::from_millis(1)).await;
        }
        ctl.cancel();
    };
    let (r, ()) = block_on(futures::future::join(a.rebuild(&ctl), watcher));
    let r = r.expect("rebuild");
    assert_eq!(r.state, PassState::Cancelled);
    assert!(r.completed.is_empty());
    block_on(apply(&a, model.writes(20)));
    block_on(a.flush()).expect("flush");
    // A crash: no clean shutdown.
    drop(a);
    disks[2] = spare.clone();
    let (a, report) = open(Level::Raid5, &disks);
    assert!(!report.was_clean);
    let [(role, checkpoint)] = report.rebuilding_roles[..] else {
        panic!("one role resumes: {report:?}");
    };
    assert_eq!(role, 2);
    assert!(
        checkpoint >= cap / 4 && checkpoint < cap,
        "checkpoint {checkpoint} of {cap}"
    );
    assert!(
        !a.volume().member_is_current(2),
        "not read before it is rebuilt"
    );
    assert_eq!(a.rebuilding(), vec![(2, checkpoint)]);
    let before = spare.counters().snapshot();
    let ctl = PassControl::new(0);
    let done = rebuild_under_writes(&a, &ctl, model.writes(20));
    assert_eq!(done, vec![2]);
    let after = spare.counters().snapshot();
    assert!(
        after.write_bytes - before.write_bytes < REGION,
        "the resumed pass rebuilt less than the whole member"
    );
    assert!(block_on(read_all(a.volume())) == model.bytes);
    assert!(block_on(a.mark_clean()).expect("clean").is_recorded());
    drop(a);
    let (_a, report) = open(Level::Raid5, &disks);
    assert!(report.rebuilding_roles.is_empty() && report.absent_roles.is_empty());
    drop(_a);
    every_view_reads(Level::Raid5, &disks, &model);
}

#[test]
fn replace_a_healthy_member_under_writes() {
    for level in [Level::Raid1, Level::Raid5, Level::Raid6] {
        let mut disks: Vec<_> = (0..4).map(|i| disk(&format!("d{i}"))).collect();
        let a = create(level, &disks);
        a.set_rebuild_window_bytes(256 * KIB);
        let mut model = Model::new(&a);
        block_on(apply(&a, model.writes(40)));
        let new = disk("new");
        block_on(a.replace(3, meta(&new))).expect("replace");
        // Redundancy never drops: the old member still serves.
        assert!(!a.volume().is_degraded());
        let done = rebuild_under_writes(&a, &PassControl::new(0), model.writes(60));
        assert_eq!(done, vec![3]);
        assert!(Arc::ptr_eq(
            &a.volume().member(3),
            &(new.clone() as Arc<dyn Member>)
        ));
        assert!(block_on(a.mark_clean()).expect("clean").is_recorded());
        drop(a);
        disks[3] = new;
        let (a, report) = open(level, &disks);
        assert!(report.absent_roles.is_empty(), "{level:?}: {report:?}");
        assert!(block_on(read_all(a.volume())) == model.bytes);
        drop(a);
        every_view_reads(level, &disks, &model);
    }
}

#[test]
fn a_failed_member_that_returns_is_not_trusted_and_is_rebuilt() {
    let disks: Vec<_> = (0..2).map(|i| disk(&format!("d{i}"))).collect();
    let a = create(Level::Raid1, &disks);
    let mut model = Model::new(&a);
    block_on(apply(&a, model.writes(20)));
    a.volume().fail_member(1, "test: cable pulled");
    // The failure is recorded before the next write is acknowledged; the writes miss d1.
    block_on(apply(&a, model.writes(20)));
    block_on(a.flush()).expect("flush");
    drop(a);
    let (a, report) = open(Level::Raid1, &disks);
    assert_eq!(report.absent_roles, vec![1], "recorded failed: not trusted");
    assert!(a.volume().member_is_failed(1));
    block_on(a.rebuild_onto(1, meta(&disks[1]))).expect("rebuild onto the old member");
    let done = rebuild_under_writes(&a, &PassControl::new(0), model.writes(20));
    assert_eq!(done, vec![1]);
    assert!(block_on(a.mark_clean()).expect("clean").is_recorded());
    drop(a);
    let (a, report) = open(Level::Raid1, &disks);
    assert!(
        report.absent_roles.is_empty() && report.was_clean,
        "{report:?}"
    );
    drop(a);
    every_view_reads(Level::Raid1, &disks, &model);
}

/// Opens `vol` over `disks` followed by `extra` (spares the config names): assembly goes by
/// superblock over every one of them.
fn open_with(
    level: Level,
    disks: &[Arc<MemoryMember>],
    extra: &[Arc<MemoryMember>],
) -> (Array, nbraid_core::metadata::OpenReport) {
    block_on(Array::open(
        "vol",
        &tree(level, disks.len()),
        disks.iter().chain(extra).map(|d| Some(meta(d))).collect(),
        opts(),
        &|_, _| {},
    ))
    .expect("open")
}

/// After a spare took role 1, the unchanged config (old member still listed, the spare after
/// the members) assembles healthy: the spare holds role 1 by its superblock, the old member
/// is ignored and said so, nothing is resynced.
#[test]
fn a_spare_that_took_a_role_is_found_beside_the_member_it_replaced() {
    let disks: Vec<_> = (0..4).map(|i| disk(&format!("d{i}"))).collect();
    let a = create(Level::Raid5, &disks);
    let mut model = Model::new(&a);
    block_on(apply(&a, model.writes(30)));
    a.volume().fail_member(1, "test: pulled");
    let spare = disk("spare");
    a.add_spare(meta(&spare)).expect("spare");
    assert_eq!(block_on(a.use_spares()).expect("use"), vec![1]);
    assert_eq!(
        rebuild_under_writes(&a, &PassControl::new(0), model.writes(20)),
        vec![1]
    );
    assert!(block_on(a.mark_clean()).expect("clean").is_recorded());
    drop(a);
    let before = spare.counters().snapshot();
    let (a, report) = open_with(Level::Raid5, &disks, std::slice::from_ref(&spare));
    assert_eq!(report.roles, vec![Ok(0), Ok(4), Ok(2), Ok(3)], "{report:?}");
    assert!(report.was_clean && report.absent_roles.is_empty() && report.resynced_bytes == 0);
    assert!(
        report
            .warnings
            .iter()
            .any(|w| w.contains("member 1") && w.contains("belongs to another member")),
        "{report:?}"
    );
    assert!(!a.volume().is_degraded());
    assert!(block_on(read_all(a.volume())) == model.bytes);
    assert!(
        spare.counters().snapshot().write_bytes - before.write_bytes < 64 * KIB,
        "only records written on the spare at assembly, no resync"
    );
}

/// mdadm --remove: an active member is refused; a failed one is taken out (records bumped,
/// the role named by no member), the old member is ignored at the next assembly, and a
/// spare then takes the role.
#[test]
fn remove_takes_out_failed_members_only() {
    let disks: Vec<_> = (0..4).map(|i| disk(&format!("d{i}"))).collect();
    let a = create(Level::Raid6, &disks);
    let mut model = Model::new(&a);
    block_on(apply(&a, model.writes(30)));
    let e = block_on(a.remove_member(2)).unwrap_err().to_string();
    assert!(e.contains("active") && e.contains("fail it first"), "{e}");
    a.volume().fail_member(2, "test");
    block_on(a.record_failures()).expect("record");
    let events = block_on(a.events());
    assert_eq!(block_on(a.remove_member(2)).expect("remove"), "d2");
    assert!(block_on(a.events()) > events);
    let e = block_on(a.remove_member(2)).unwrap_err().to_string();
    assert!(e.contains("no member to remove"), "{e}");
    assert!(a.volume().member(2).name().contains("removed"));
    block_on(apply(&a, model.writes(20)));
    assert!(block_on(a.mark_clean()).expect("clean").is_recorded());
    drop(a);
    // d2 comes back: its id is no longer named, so it is not even stale — ignored.
    let (a, report) = open(Level::Raid6, &disks);
    assert_eq!(report.absent_roles, vec![2], "{report:?}");
    assert!(block_on(read_all(a.volume())) == model.bytes);
    // A spare removed before use is not used; the next one is.
    let (s0, s1) = (meta(&disk("s0")), disk("s1"));
    a.add_spare(s0.clone()).expect("spare");
    assert!(a.remove_spare(&s0) && !a.remove_spare(&s0));
    a.add_spare(meta(&s1)).expect("spare");
    assert_eq!(block_on(a.use_spares()).expect("use"), vec![2]);
    assert_eq!(
        rebuild_under_writes(&a, &PassControl::new(0), model.writes(10)),
        vec![2]
    );
    assert!(block_on(a.mark_clean()).expect("clean").is_recorded());
    drop(a);
    let (a, report) = open_with(Level::Raid6, &disks, &[s1]);
    assert!(report.absent_roles.is_empty(), "{report:?}");
    assert!(block_on(read_all(a.volume())) == model.bytes);
}

/// Scrub checkpoints (issue 11: a scrub is resumable): a repairing scrub of a RAID 5 is cut
/// off by a crash after its first checkpoint; the reopened array names the checkpoint, and
/// a scrub resumed there finds corruption put above it but not corruption put below it
/// (those bytes were scrubbed before the crash), then clears the checkpoint.
#[test]
fn a_restart_mid_scrub_resumes_from_the_checkpoint() {
    use nbraid_core::ScrubControl;
    let disks: Vec<_> = (0..4).map(|i| disk(&format!("d{i}"))).collect();
    let a = create(Level::Raid5, &disks);
    let mut model = Model::new(&a);
    block_on(apply(&a, model.writes(40)));
    block_on(a.flush()).expect("flush");
    let cap = a.volume().capacity();
    assert_eq!(block_on(a.scrub_checkpoint()), None);
    // Slow enough to be cut off between windows.
    let ctl = ScrubControl::new(true, cap);
    {
        let crash = Box::pin(async {
            while a
                .scrub_checkpoint()
                .await
                .is_none_or(|c| c.position_bytes == 0)
            {
                nbraid_core::timer::sleep(Duration::from_millis(1)).await;
            }
        });
        // The scrub is dropped where it is: nothing after its last checkpoint is recorded.
        block_on(futures::future::select(Box::pin(a.scrub(&ctl)), crash));
    }
    drop(a);
    let (a, _) = open(Level::Raid5, &disks);
    let c = block_on(a.scrub_checkpoint()).expect("a scrub to resume");
    assert!(
        c.repair && c.position_bytes > 0 && c.position_bytes < cap,
        "{c:?}"
    );
    // One flipped byte on member 0 in a stripe below the checkpoint, one above: stripe s
    // starts at member offset s × strip and volume offset s × 3 strips.
    let stripe_at = |s: u64| METADATA_AREA_BYTES + s * STRIP;
    let (below, above) = (0, cap / (3 * STRIP) - 1);
    assert!(above * 3 * STRIP >= c.position_bytes && c.position_bytes > STRIP * 3);
    for s in [below, above] {
        let mut b = [0u8; 1];
        disks[0].peek(stripe_at(s), &mut b);
        disks[0].poke(stripe_at(s), &[b[0] ^ 0x5a]);
    }
    let ctl = ScrubControl::resume_at(c.repair, 0, c.position_bytes);
    let r = block_on(a.scrub(&ctl)).expect("scrub");
    assert_eq!(r.state, PassState::Done);
    assert_eq!((r.mismatches, r.repaired), (1, 1), "{r:?}");
    assert_eq!(block_on(a.scrub_checkpoint()), None);
    drop(a);
    let (a, _) = open(Level::Raid5, &disks);
    assert_eq!(block_on(a.scrub_checkpoint()), None);
    // The stripe below was never scrubbed again: a full scrub still finds it.
    let r = block_on(a.scrub(&ScrubControl::new(false, 0))).expect("scrub");
    assert_eq!(r.mismatches, 1, "{r:?}");
}

/// RAID 5 over mirrored pairs with both members of pair 0 lost — one failed, a spare being
/// rebuilt into the other's role — restarts after a crash (refused until forced: see
/// `dirty_degraded.rs`; every write here was flushed, so nothing is torn): the resync at the open finds no
/// readable copy of pair 0 to make agree and leaves it to the parity group (which rebuilds
/// the pair's bytes and writes them to the spare) instead of failing the open; the rebuild
/// then completes from the other pairs.
#[test]
fn raid5_of_mirrors_restarts_with_a_whole_pair_lost_and_one_being_rebuilt() {
    let mut disks: Vec<_> = (0..6).map(|i| disk(&format!("d{i}"))).collect();
    let t = common::raid5_of_pairs(STRIP, METADATA_AREA_BYTES, REGION);
    let o = ArrayOptions {
        ppl: false,
        ..opts()
    };
    let metas = |disks: &[Arc<MemoryMember>]| disks.iter().map(meta).collect::<Vec<_>>();
    let a = block_on(Array::create(
        "vol",
        t.clone(),
        metas(&disks),
        o.clone(),
        true,
        &|_, _| {},
    ))
    .expect("create")
    .0;
    let mut model = Model::new(&a);
    block_on(apply(&a, model.writes(40)));
    a.volume().fail_member(0, "test");
    a.volume().fail_member(1, "test");
    let spare = disk("spare");
    block_on(a.rebuild_onto(1, meta(&spare))).expect("rebuild onto");
    block_on(apply(&a, model.writes(20)));
    block_on(a.flush()).expect("flush");
    // A crash before the rebuild: no clean shutdown.
    drop(a);
    disks[1] = spare;
    let open = |o: ArrayOptions| {
        let m = metas(&disks).into_iter().map(Some).collect();
        block_on(Array::open("vol", &t, m, o, &|_, _| {}))
    };
    // Dirty, and the parity group (over mirrors: never logged) rebuilds pair 0 from parity a
    // crash may have torn: refused unless forced (md's start_dirty_degraded). Here every
    // write was flushed before the crash, so forcing it is safe.
    let refused = open(o.clone())
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        refused.contains("not shut down clean") && refused.contains("--force-assemble vol"),
        "{refused}"
    );
    let forcing = ArrayOptions {
        force_assembly: true,
        ..o
    };
    let (a, report) = open(forcing).expect("a dirty RAID 5 of mirrors missing a pair starts");
    assert!(!report.was_clean);
    assert_eq!(report.rebuilding_roles, vec![(1, 0)]);
    let done = rebuild_under_writes(&a, &PassControl::new(0), model.writes(20));
    assert_eq!(done, vec![1]);
    assert!(block_on(read_all(a.volume())) == model.bytes);
}

/// A mirror of two RAID 5 groups whose copy 0 lost two members: one recorded failed, one
/// missing while writes went on (stale when it is back). Nothing can resync the stale one
/// (its group takes no writes): it stays out instead of being made current unresynced —
/// then read, with the group's parity, as bytes nobody wrote.
#[test]
fn a_stale_member_nothing_can_resync_stays_out() {
    let disks: Vec<_> = (0..6).map(|i| disk(&format!("d{i}"))).collect();
    let t = common::mirror_of_raid5s(STRIP, METADATA_AREA_BYTES, REGION);
    let open = |skip: Option<usize>| {
        let metas = (disks.iter().enumerate())
            .map(|(i, d)| (Some(i) != skip).then(|| meta(d)))
            .collect();
        block_on(Array::open("vol", &t, metas, opts(), &|_, _| {})).expect("open")
    };
    let a = block_on(Array::create(
        "vol",
        t.clone(),
        disks.iter().map(meta).collect(),
        opts(),
        true,
        &|_, _| {},
    ))
    .expect("create")
    .0;
    let mut model = Model::new(&a);
    block_on(apply(&a, model.writes(20)));
    assert!(block_on(a.mark_clean()).expect("clean").is_recorded());
    drop(a);
    // Member 0 missing: writes it misses, then member 1 fails.
    let (a, _) = open(Some(0));
    block_on(apply(&a, model.writes(40)));
    a.volume().fail_member(1, "test");
    block_on(apply(&a, model.writes(10)));
    assert!(block_on(a.mark_clean()).expect("clean").is_recorded());
    drop(a);
    let (a, report) = open(None);
    assert!(block_on(read_all(a.volume())) == model.bytes);
    assert!(
        report.absent_roles.contains(&0) && !report.resynced_roles.contains(&0),
        "{report:?}"
    );
    assert!(!a.volume().member_is_current(0));
}

/// How [`a_read_error_after_a_restart_is_repaired_from_the_redundancy`] restarts.
#[derive(Clone, Copy, Debug)]
enum Restart {
    /// After `mark_clean`.
    Clean,
    /// A crash with set bitmap bits; `Array::open` resyncs them before serving.
    CrashResyncFirst,
    /// A crash; `Array::open_background` serves at once (the daemon's way), the read error
    /// comes before the background resync has run.
    CrashServeAtOnce,
}

/// Issue 11: "a read error during normal I/O is repaired by rewriting from the redundancy —
/// after a restart too". RAID 1, 5 and 6 reopened from their superblocks (clean, after a
/// crash resynced first, after a crash serving at once): a bad sector of a member (wrong
/// bytes behind a read error) is served from the other copy or parity, and rewritten with
/// the right bytes; the member stays healthy.
#[test]
fn a_read_error_after_a_restart_is_repaired_from_the_redundancy() {
    use nbraid_core::{MemberState, ReadPolicy};
    use nbraid_sim::{FaultOps, Faulty};
    let restarts = [
        Restart::Clean,
        Restart::CrashResyncFirst,
        Restart::CrashServeAtOnce,
    ];
    // The member holding volume offset 0 (md's RAID 6 puts Q of stripe 0 on member 0).
    for (level, n, bad) in [
        (Level::Raid1, 2, 0),
        (Level::Raid5, 4, 0),
        (Level::Raid6, 5, 1),
    ] {
        for restart in restarts {
            let what = format!("{level:?} {restart:?}");
            let disks: Vec<Arc<Faulty<MemoryMember>>> = (0..n)
                .map(|i| {
                    Arc::new(Faulty::new(
                        MemoryMember::new(format!("d{i}"), MEMBER_BYTES),
                        7,
                    ))
                })
                .collect();
            let metas = || -> Vec<Arc<MemberMeta>> {
                disks
                    .iter()
                    .map(|d| block_on(MemberMeta::load(d.clone() as Arc<dyn Member>)))
                    .collect()
            };
            let mut o = opts();
            // Write-through: every acknowledged write is on the members at the "crash".
            o.volume.cache = CacheMode::WriteThrough;
            // Mirrors: every copy is read in turn, so member 0's error is met.
            o.volume.read_policy = ReadPolicy::RoundRobin;
            let (a, _) = block_on(Array::create(
                "vol",
                tree(level, n),
                metas(),
                o.clone(),
                true,
                &|_, _| {},
            ))
            .expect("create");
            let mut model = Model::new(&a);
            block_on(apply(&a, model.writes(60)));
            block_on(a.flush()).expect("flush");
            match restart {
                Restart::Clean => assert!(block_on(a.mark_clean()).expect("clean").is_recorded()),
                // Writes after the last flush leave bitmap bits set and the records dirty.
                _ => block_on(apply(&a, model.writes(20))),
            }
            drop(a);
            let m = metas().into_iter().map(Some).collect();
            let t = tree(level, n);
            let (a, report) = match restart {
                Restart::CrashServeAtOnce => {
                    block_on(Array::open_background("vol", &t, m, o, &|_, _| {}))
                }
                _ => block_on(Array::open("vol", &t, m, o, &|_, _| {})),
            }
            .expect("open");
            assert_eq!(
                report.was_clean,
                matches!(restart, Restart::Clean),
                "{what}: {report:?}"
            );
            if matches!(restart, Restart::CrashServeAtOnce) {
                assert!(a.background_pending(), "{what}: nothing left to resync");
            }
            let v = a.volume();
            // A bad sector: wrong bytes behind a read error, in the chunk at volume offset 0.
            let (at, len) = (METADATA_AREA_BYTES, 4 * KIB);
            let mut good = vec![0; len as usize];
            disks[bad].inner().peek(at, &mut good);
            disks[bad].inner().poke(at + 512, &[0xee; 1024]);
            disks[bad].fail_range_times(FaultOps::READ, at..at + len, 1);
            // Round-robin mirrors reach copy 0 within two reads.
            for _ in 0..2 {
                let got = block_on(v.read(0, STRIP)).expect("read");
                assert!(
                    got[..] == model.bytes[..STRIP as usize],
                    "{what}: never the bad bytes"
                );
            }
            assert_eq!(
                v.member_health()[bad].read_errors,
                1,
                "{what}: the read error met"
            );
            assert!(
                v.counters().repairs > 0,
                "{what}: nothing repaired {:?}",
                v.counters()
            );
            let mut fixed = vec![0; len as usize];
            disks[bad].inner().peek(at, &mut fixed);
            assert!(
                fixed == good,
                "{what}: the bad sector rewritten from the redundancy"
            );
            assert!(block_on(read_all(v)) == model.bytes, "{what}: read back");
            assert!(
                v.member_health()
                    .iter()
                    .all(|h| h.state == MemberState::Healthy),
                "{what}: {:?}",
                v.member_health()
                    .iter()
                    .map(|h| h.state)
                    .collect::<Vec<_>>()
            );
            if matches!(restart, Restart::CrashServeAtOnce) {
                let ctl = PassControl::new(0);
                block_on(a.background_resync(&ctl)).expect("background resync");
                assert!(
                    block_on(read_all(a.volume())) == model.bytes,
                    "{what}: after"
                );
            }
        }
    }
}

/// A disk of another array offered with `--force` but refused for another reason — too
/// small to be a spare, or for a role that is not current — keeps that array's records: they
/// are taken off only once every other check has passed.
#[test]
fn a_refused_forced_add_or_replace_leaves_another_arrays_disk_as_it_was() {
    use nbraid_core::metadata::disk_rule::{Consent, DiskContents};
    let small_region = REGION / 2;
    let small: Vec<_> = (0..2)
        .map(|i| {
            let len = METADATA_AREA_BYTES + small_region;
            Arc::new(MemoryMember::new(format!("small{i}"), len))
        })
        .collect();
    let small_tree = common::level_tree(Level::Raid1, 2, STRIP, METADATA_AREA_BYTES, small_region);
    let m = small.iter().map(meta).collect();
    block_on(Array::create(
        "other",
        small_tree,
        m,
        opts(),
        true,
        &|_, _| {},
    ))
    .expect("other");
    let big: Vec<_> = (0..2).map(|i| disk(&format!("big{i}"))).collect();
    let m = big.iter().map(meta).collect();
    block_on(Array::create(
        "another",
        tree(Level::Raid1, 2),
        m,
        opts(),
        true,
        &|_, _| {},
    ))
    .expect("another");
    let records_kept = |d: &Arc<MemoryMember>| matches!(meta(d).contents(), DiskContents::Records(ref v) if !v.is_empty());
    let forced = Consent {
        force: true,
        siblings: Vec::new(),
    };
    let disks: Vec<_> = (0..3).map(|i| disk(&format!("d{i}"))).collect();
    let a = create(Level::Raid5, &disks);

    let add = block_on(a.add_recorded_spare(meta(&small[0]), &forced));
    assert!(
        add.is_err_and(|e| e.to_string().contains("bytes")),
        "too small"
    );
    assert!(
        records_kept(&small[0]),
        "a refused add took the other array's records"
    );

    // A failed role is replaced by rebuilding onto the newcomer, unless nothing can rebuild
    // it: refused then, before the other array's records are touched.
    a.volume().fail_member(1, "the test");
    a.volume().fail_member(2, "the test");
    let replace = block_on(a.replace_with(1, meta(&big[0]), &forced));
    assert!(
        replace.is_err_and(|e| e.to_string().contains("cannot be rebuilt")),
        "roles 1 and 2 failed: nothing rebuilds role 1"
    );
    assert!(
        records_kept(&big[0]),
        "a refused replace took the other array's records"
    );
}

/// Found by a bug hunt over the control socket: the member being rebuilt into a role fails
/// half-way and a second spare takes the role while the pass runs on. The pass's progress is
/// the first spare's: the second is rebuilt from the start (once it called the second
/// rebuilt with the bytes below the pass's position never copied onto it, and checkpointed
/// it there). With and without a restart after the second spare came in.
#[test]
fn a_spare_put_in_a_role_while_the_rebuild_runs_is_rebuilt_from_the_start() {
    for restart in [false, true] {
        let mut disks: Vec<_> = (0..4).map(|i| disk(&format!("d{i}"))).collect();
        let a = create(Level::Raid5, &disks);
        a.set_rebuild_window_bytes(128 * KIB);
        let mut model = Model::new(&a);
        block_on(apply(&a, model.writes(40)));
        a.volume().fail_member(2, "test");
        let (first, second) = (disk("first"), disk("second"));
        block_on(a.rebuild_onto(2, meta(&first))).expect("rebuild onto");
        let cap = a.volume().capacity();
        // Slow enough to change members half-way: the pass sleeps to keep to the rate.
        let ctl = PassControl::new(cap * 4);
        let second_meta = meta(&second);
        let swap = async {
            while ctl.position_bytes() < cap / 2 {
                nbraid_core::timer::sleep(Duration::from_millis(1)).await;
            }
            a.volume().fail_member(2, "test: the first spare dies");
            a.rebuild_onto(2, second_meta).await.expect("second");
            if restart {
                // Far enough for a checkpoint past where the second came in.
                while ctl.position_bytes() < cap * 7 / 8 {
                    nbraid_core::timer::sleep(Duration::from_millis(1)).await;
                }
                ctl.cancel();
            }
        };
        let (r, ()) = block_on(futures::future::join(a.rebuild(&ctl), swap));
        let r = r.expect("rebuild");
        let a = if restart {
            assert_eq!(r.state, PassState::Cancelled);
            // The second's own progress (0, unless the watcher woke only in the second
            // pass): never the first pass's, which the read-back after the restart checks.
            let [(2, own)] = a.rebuilding()[..] else {
                panic!("role 2 rebuilding: {:?}", a.rebuilding());
            };
            // A crash, what was acknowledged flushed (the write-back cache's writes count).
            block_on(a.flush()).expect("flush");
            drop(a);
            disks[2] = second.clone();
            let (a, report) = open(Level::Raid5, &disks);
            let [(2, recorded)] = report.rebuilding_roles[..] else {
                panic!("role 2 resumes: {report:?}");
            };
            assert!(recorded <= own, "{report:?}: recorded past {own}");
            let done = rebuild_under_writes(&a, &PassControl::new(0), model.writes(10));
            assert_eq!(done, vec![2]);
            a
        } else {
            assert_eq!((r.state, r.completed), (PassState::Done, vec![2]));
            a
        };
        assert!(Arc::ptr_eq(
            &a.volume().member(2),
            &(second.clone() as Arc<dyn Member>)
        ));
        assert!(
            block_on(read_all(a.volume())) == model.bytes,
            "restart {restart}"
        );
        assert!(block_on(a.mark_clean()).expect("clean").is_recorded());
        drop(a);
        disks[2] = second;
        every_view_reads(Level::Raid5, &disks, &model);
    }
}

/// Found by the same hunt: the member being replaced fails before the replacement is done.
/// The replacement copied that member and takes no write while the role is failed, so it is
/// never swapped in as it stands (it once was, when a spare later filled the role, and
/// served what it missed): it goes into the role as a new member and is rebuilt whole.
#[test]
fn a_replacement_whose_member_fails_is_rebuilt_whole_into_the_role() {
    for spare_too in [false, true] {
        let mut disks: Vec<_> = (0..4).map(|i| disk(&format!("d{i}"))).collect();
        let a = create(Level::Raid5, &disks);
        a.set_rebuild_window_bytes(256 * KIB);
        let mut model = Model::new(&a);
        block_on(apply(&a, model.writes(40)));
        let new = disk("new");
        block_on(a.replace(0, meta(&new))).expect("replace");
        a.volume()
            .fail_member(0, "test: the member being replaced dies");
        block_on(apply(&a, model.writes(40)));
        if spare_too {
            a.add_spare(meta(&disk("spare"))).expect("spare");
            assert_eq!(block_on(a.use_spares()).expect("use"), vec![0]);
        }
        let done = rebuild_under_writes(&a, &PassControl::new(0), model.writes(20));
        assert_eq!(done, vec![0], "spare too {spare_too}");
        assert!(!a.volume().is_degraded());
        assert!(
            block_on(read_all(a.volume())) == model.bytes,
            "spare too {spare_too}"
        );
        let holder = a.volume().member(0);
        assert!(block_on(a.mark_clean()).expect("clean").is_recorded());
        drop(a);
        if !spare_too {
            assert!(Arc::ptr_eq(&holder, &(new.clone() as Arc<dyn Member>)));
            disks[0] = new;
            every_view_reads(Level::Raid5, &disks, &model);
        }
    }
}

/// A replacement given up because its member failed is rebuilt into the role;
/// the records must list its path, or a restart (which opens members by the config and the
/// recorded paths) does not find it.
#[test]
fn a_replacement_rebuilt_into_the_role_is_recorded_by_path() {
    let disks: Vec<_> = (0..4).map(|i| disk(&format!("d{i}"))).collect();
    let a = create(Level::Raid5, &disks);
    let mut model = Model::new(&a);
    block_on(apply(&a, model.writes(10)));
    let new = disk("new");
    block_on(a.replace(0, meta(&new))).expect("replace");
    a.volume().fail_member(0, "test");
    let done = rebuild_under_writes(&a, &PassControl::new(0), model.writes(5));
    assert_eq!(done, vec![0]);
    assert!(Arc::ptr_eq(
        &a.volume().member(0),
        &(new.clone() as Arc<dyn Member>)
    ));
    let paths = block_on(a.added_paths());
    assert!(
        paths.iter().any(|p| p == "new"),
        "the replacement now serving role 0 is not recorded: {paths:?}"
    );
}

/// A volume with no redundancy takes no spare (the config refuses `spares` there too):
/// nothing could be rebuilt onto it. `nbraid add` once said "added as a hot spare" on RAID 0.
#[test]
fn a_volume_without_redundancy_takes_no_spare() {
    for level in [Level::Raid0, Level::Jbod] {
        let disks: Vec<_> = (0..2).map(|i| disk(&format!("d{i}"))).collect();
        let a = create(level, &disks);
        let e = a
            .add_spare(meta(&disk("spare")))
            .expect_err("a spare taken");
        assert!(e.to_string().contains("no redundancy"), "{level:?}: {e}");
        assert_eq!(a.spare_count(), 0);
        // Nor a replacement; said as a refusal of the serving volume (it once read
        // "cannot assemble the volume: ..." while the volume served).
        let e = (a.volume().check_replacement(0, &*disk("new"))).expect_err("replaced");
        assert_eq!(
            e.to_string(),
            "member 0 has no redundancy over it: nothing to rebuild it from"
        );
    }
}
