//! Online rebuild and replace in the engine (mdadm's tests/ as the model): a member fails
//! under writes and a new member is rebuilt while writes go on, bit-exact; RAID 6 rebuilds
//! two new members in one pass; a healthy member is replaced under writes without the
//! redundancy ever dropping; a paused and cancelled rebuild resumes and completes. After
//! every rebuild, every view of the volume that loses members it tolerates reads the same
//! bytes as the model.

mod common;

use common::*;
use futures::executor::block_on;
use nbraid_core::{
    Buf, CacheMode, Member, MemoryMember, PassControl, PassState, Volume, VolumeOptions,
};
use nbraid_layout::{Geometry, Level};
use nbraid_sim::{FaultOps, Faulty};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;
use std::time::Duration;

const STRIP: u64 = 64 * KIB;
const MEMBER: u64 = 48 * STRIP;

fn opts(cache: bool) -> VolumeOptions {
    VolumeOptions {
        block_size: 4096,
        members_known_zero: true,
        cache: if cache {
            CacheMode::WriteBack { bytes: 4 * MIB }
        } else {
            CacheMode::WriteThrough
        },
        cache_max_age: None,
        ..VolumeOptions::default()
    }
}

fn member(name: &str, seed: u64) -> Arc<Faulty<MemoryMember>> {
    let f = Faulty::new(MemoryMember::new(name, MEMBER), seed);
    // Latency makes the rebuild and the writes interleave.
    f.set_latency(Duration::from_micros(1), Duration::from_micros(200));
    Arc::new(f)
}

struct Rig {
    g: Geometry,
    mems: Vec<Arc<dyn Member>>,
    v: Volume,
    model: Vec<u8>,
    rng: SmallRng,
}

fn rig(level: Level, n: usize, spans: Option<usize>, seed: u64, cache: bool) -> Rig {
    let g = named(level, n, spans, STRIP, MEMBER);
    let mems: Vec<Arc<dyn Member>> = (0..n)
        .map(|i| member(&format!("m{i}"), seed + i as u64) as Arc<dyn Member>)
        .collect();
    let v = Volume::new(g.clone(), mems.clone(), opts(cache)).expect("volume");
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut model = vec![0u8; v.capacity() as usize];
    rng.fill(&mut model[..]);
    block_on(async {
        for (i, piece) in model.chunks(MIB as usize).enumerate() {
            v.write(i as u64 * MIB, Buf::copy_from(piece), false)
                .await
                .expect("fill");
        }
        v.flush().await.expect("flush");
    });
    Rig {
        g,
        mems,
        v,
        model,
        rng,
    }
}

impl Rig {
    /// `count` random writes (4 KiB .. 128 KiB), applied to the model, then a flush.
    fn writes(&mut self, count: usize) -> Vec<(u64, Vec<u8>)> {
        let cap = self.v.capacity();
        (0..count)
            .map(|_| {
                let len = self.rng.gen_range(1..=32u64) * 4096;
                let at = self.rng.gen_range(0..(cap - len) / 4096) * 4096;
                let mut b = vec![0u8; len as usize];
                self.rng.fill(&mut b[..]);
                self.model[at as usize..(at + len) as usize].copy_from_slice(&b);
                (at, b)
            })
            .collect()
    }

    /// Runs `work` (the rebuild) while `writes` are issued, then flushes.
    fn under_writes<T>(
        &self,
        work: impl std::future::Future<Output = T>,
        writes: Vec<(u64, Vec<u8>)>,
    ) -> T {
        let v = &self.v;
        let writer = async move {
            for (at, b) in writes {
                v.write(at, Buf::copy_from(&b), false).await.expect("write");
            }
        };
        let (out, ()) = block_on(futures::future::join(work, writer));
        block_on(v.flush()).expect("flush");
        out
    }

    /// Every view that loses members the layout tolerates (none, any one, any two) reads
    /// the model's bytes.
    fn every_view_reads_the_model(&self) {
        let n = self.mems.len();
        let mut sets: Vec<Vec<usize>> = vec![vec![]];
        sets.extend((0..n).map(|a| vec![a]));
        for a in 0..n {
            sets.extend((a + 1..n).map(|b| vec![a, b]));
        }
        for lost in sets.into_iter().filter(|s| self.g.survives(s)) {
            let view = Volume::new(self.g.clone(), self.mems.clone(), opts(false)).expect("view");
            for &m in &lost {
                view.fail_member(m, "view");
            }
            let got = block_on(read_all(&view));
            assert!(
                got == self.model,
                "view losing {lost:?} differs from the model"
            );
        }
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

/// Fails `failed` under writes, installs new members there and rebuilds under more writes.
fn fail_and_rebuild(level: Level, n: usize, spans: Option<usize>, failed: &[usize], cache: bool) {
    let mut r = rig(
        level,
        n,
        spans,
        11 + n as u64 * 3 + failed.len() as u64,
        cache,
    );
    for &f in failed {
        r.v.fail_member(f, "test");
    }
    let before = r.writes(40);
    r.under_writes(async {}, before);
    for &f in failed {
        let new = member(&format!("new{f}"), 99 + f as u64) as Arc<dyn Member>;
        r.v.install_member(f, new.clone()).expect("install");
        r.mems[f] = new;
        assert!(
            !r.v.member_is_current(f),
            "a new member is not read before the rebuild"
        );
    }
    assert_eq!(r.v.rebuild_targets(), failed.to_vec());
    let during = r.writes(60);
    let ctl = PassControl::new(0);
    let (state, done) = r.under_writes(r.v.rebuild(&ctl), during).expect("rebuild");
    assert_eq!(state, PassState::Done);
    assert_eq!(done, failed.to_vec(), "{level:?}");
    assert!(!r.v.is_degraded());
    assert!(block_on(read_all(&r.v)) == r.model);
    r.every_view_reads_the_model();
}

#[test]
fn fail_under_writes_and_rebuild_a_new_member_bit_exact() {
    fail_and_rebuild(Level::Raid1, 2, None, &[1], false);
    fail_and_rebuild(Level::Raid1, 3, None, &[0], false);
    fail_and_rebuild(Level::Raid5, 4, None, &[2], false);
    fail_and_rebuild(Level::Raid5, 4, None, &[0], true);
    fail_and_rebuild(Level::Raid6, 6, None, &[3], true);
    fail_and_rebuild(Level::Raid10, 4, None, &[1], false);
    fail_and_rebuild(Level::Raid50, 6, Some(2), &[4], true);
}

#[test]
fn raid6_rebuilds_two_new_members_in_one_pass() {
    fail_and_rebuild(Level::Raid6, 6, None, &[1, 4], false);
    fail_and_rebuild(Level::Raid6, 5, None, &[0, 1], true);
}

#[test]
fn replace_a_healthy_member_under_writes() {
    for (level, n, m) in [
        (Level::Raid1, 2, 0),
        (Level::Raid5, 4, 3),
        (Level::Raid6, 6, 2),
        (Level::Raid10, 4, 2),
    ] {
        let mut r = rig(level, n, None, 500 + n as u64, true);
        let new = member("replacement", 7) as Arc<dyn Member>;
        r.v.start_replacement(m, new.clone()).expect("replace");
        let during = r.writes(60);
        let ctl = PassControl::new(0);
        let (state, done) = r.under_writes(r.v.rebuild(&ctl), during).expect("rebuild");
        assert_eq!((state, done), (PassState::Done, vec![m]));
        // The replacement took the slot; redundancy never dropped.
        assert!(Arc::ptr_eq(&r.v.member(m), &new));
        assert!(!r.v.is_degraded());
        r.mems[m] = new;
        assert!(block_on(read_all(&r.v)) == r.model);
        r.every_view_reads_the_model();
    }
}

#[test]
fn a_paused_and_cancelled_rebuild_resumes_and_completes() {
    let mut r = rig(Level::Raid5, 4, None, 77, false);
    r.v.fail_member(1, "test");
    let new = member("new1", 3) as Arc<dyn Member>;
    r.v.install_member(1, new.clone()).expect("install");
    r.mems[1] = new;
    let ctl = PassControl::new(0);
    ctl.pause();
    let watcher = async {
        nbraid_core::timer::sleep(Duration::from_millis(60)).await;
        assert_eq!(ctl.state(), PassState::Paused);
        assert_eq!(ctl.position_bytes(), 0);
        ctl.cancel();
    };
    let (first, ()) = block_on(futures::future::join(r.v.rebuild(&ctl), watcher));
    assert_eq!(first.expect("rebuild").0, PassState::Cancelled);
    assert!(!r.v.member_is_current(1), "not rebuilt yet");
    ctl.resume();
    let during = r.writes(30);
    let (state, done) = r.under_writes(r.v.rebuild(&ctl), during).expect("rebuild");
    assert_eq!((state, done), (PassState::Done, vec![1]));
    assert_eq!(ctl.position_bytes(), r.v.capacity());
    r.every_view_reads_the_model();
}

#[test]
fn refuses_what_cannot_be_rebuilt() {
    let r = rig(Level::Raid5, 4, None, 5, false);
    let small = Arc::new(MemoryMember::new("small", MEMBER / 2)) as Arc<dyn Member>;
    let big = Arc::new(MemoryMember::new("big", MEMBER)) as Arc<dyn Member>;
    r.v.fail_member(0, "test");
    assert!(r.v.install_member(0, small).is_err(), "too small");
    assert!(r.v.install_member(1, big.clone()).is_err(), "not failed");
    assert!(
        r.v.start_replacement(0, big.clone()).is_err(),
        "not current"
    );
    let r0 = rig(Level::Raid0, 2, None, 6, false);
    assert!(
        r0.v.start_replacement(0, big).is_err(),
        "no redundancy over a RAID 0 member"
    );
}

/// A mirror of two RAID 5 groups whose copy 0 lost two members: a new member in one of
/// their places cannot be rebuilt (the group takes no writes, so the other copy's bytes
/// never reach it). The rebuild says so instead of making a member of zeroes current —
/// which then read, with the group's parity, as bytes nobody wrote.
#[test]
fn a_member_of_a_group_beyond_its_tolerance_is_not_made_current() {
    let g = Geometry::from_tree(common::mirror_of_raid5s(STRIP, 0, MEMBER));
    let mems: Vec<Arc<dyn Member>> = (0..6)
        .map(|i| member(&format!("m{i}"), 40 + i as u64) as Arc<dyn Member>)
        .collect();
    let v = Volume::new(g, mems, opts(false)).expect("volume");
    let data = vec![0x5a; v.capacity() as usize];
    block_on(v.write(0, Buf::copy_from(&data), false)).expect("fill");
    v.fail_member(0, "test");
    v.fail_member(2, "test");
    let new = member("new0", 99) as Arc<dyn Member>;
    v.install_member(0, new)
        .expect("install: the mirror survives losing it");
    let e = block_on(v.rebuild(&PassControl::new(0))).expect_err("nothing to rebuild from");
    assert!(e.to_string().contains("cannot be rebuilt"), "{e}");
    assert!(!v.member_is_current(0), "member 0 holds nothing it should");
    assert!(block_on(v.read(0, v.capacity())).expect("copy 1 reads")[..] == data[..]);
}

/// RAID 5 over mirrored pairs: a new member rebuilt into pair 0 while pair 1 lost one copy
/// and its other copy fails every read. Pair 1 has nothing to rebuild (its lost copy is
/// failed, not new): the rebuild reads none of it, so its read errors cannot fail the pass.
#[test]
fn a_rebuild_reads_nothing_for_a_mirror_with_no_new_copy() {
    let (faulty, v, data) = raid5_of_pairs();
    v.fail_member(0, "test");
    v.fail_member(2, "test");
    faulty[3].fail_range(FaultOps::READ, 0..MEMBER);
    v.install_member(0, member("new0", 99) as Arc<dyn Member>)
        .expect("install");
    let (state, done) = block_on(v.rebuild(&PassControl::new(0))).expect("rebuild");
    assert_eq!((state, done), (PassState::Done, vec![0]));
    assert!(block_on(read_all(&v)) == data);
}

/// RAID 5 over three mirrored pairs of faulty members, filled: the members, the volume, its
/// bytes.
fn raid5_of_pairs() -> (Vec<Arc<Faulty<MemoryMember>>>, Volume, Vec<u8>) {
    let t = common::raid5_of_pairs(STRIP, 0, MEMBER);
    let faulty: Vec<_> = (0..6).map(|i| member(&format!("m{i}"), 60 + i)).collect();
    let mems: Vec<Arc<dyn Member>> = faulty.iter().map(|m| m.clone() as _).collect();
    let v = Volume::new(Geometry::from_tree(t), mems, opts(false)).expect("volume");
    let data: Vec<u8> = (0..v.capacity()).map(|i| (i % 251) as u8).collect();
    block_on(v.write(0, Buf::copy_from(&data), false)).expect("fill");
    (faulty, v, data)
}

/// RAID 5 over mirrored pairs: a new member rebuilt into pair 0 whose other copy fails every
/// read. The pair cannot copy itself; the parity group rebuilds the pair's bytes from the
/// other pairs and writes them to both copies.
#[test]
fn a_pair_whose_last_copy_errs_is_rebuilt_from_the_parity_group() {
    let (faulty, v, data) = raid5_of_pairs();
    v.fail_member(1, "test");
    v.install_member(1, member("new1", 98) as Arc<dyn Member>)
        .expect("install");
    faulty[0].fail_range(FaultOps::READ, 0..MEMBER);
    let (state, done) = block_on(v.rebuild(&PassControl::new(0))).expect("rebuild");
    assert_eq!((state, done), (PassState::Done, vec![1]));
    assert!(block_on(read_all(&v)) == data);
    // The new member alone holds pair 0 as written.
    v.fail_member(0, "test");
    assert!(block_on(read_all(&v)) == data);
}
