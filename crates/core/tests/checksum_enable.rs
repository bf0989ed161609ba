//! Enabling per-block checksums on a volume created without them (`checksums = "enable"`):
//! the areas go where each member has room (after the region, or in the metadata area when
//! the region ends the member), the pass that computes them runs while a client writes, is
//! cut off by a power loss (unflushed writes kept, dropped or torn, seeded), resumes after
//! the reopen and finishes; every read agrees with the model (no checksum error from an
//! entry that lagged), and then blocks overwritten behind the engine on every member read
//! right and are rewritten to what they were. RAID 1, 5 and 6 at 4 KiB, 64 KiB and 1 MiB
//! strips.

mod common;

use common::{yield_once, KIB, MIB};
use futures::executor::block_on;
use nbraid_core::checksum::{area_bytes, BLOCK_BYTES};
use nbraid_core::metadata::{Array, ArrayOptions, FillControl, MemberMeta, METADATA_AREA_BYTES};
use nbraid_core::{Buf, CacheMode, Member, MemoryMember, PassRate, PassState, ScrubControl};
use nbraid_core::{VolumeOptions, VolumeResult};
use nbraid_layout::{Level, Node, ParityLayout, Region, Shape};
use nbraid_sim::Faulty;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

const REGION: u64 = 4 * MIB;
const START: u64 = METADATA_AREA_BYTES;
const SECTOR: usize = 512;

type Disks = Vec<Arc<Faulty<MemoryMember>>>;

fn tree(level: Level, n: usize, strip: u64) -> Node {
    let shape = Shape::new(level, n, None, strip, ParityLayout::LeftSymmetric).expect("shape");
    let regions = vec![
        Region {
            start: START,
            len: REGION,
        };
        n
    ];
    shape.build(&regions).expect("tree")
}

/// The partial-parity log lives in the metadata area, which has no room for the ring of
/// 1 MiB strips: those run without it (the bitmap's resync closes the write hole).
fn opts(enable: bool, strip: u64) -> ArrayOptions {
    ArrayOptions {
        ppl: strip < MIB,
        volume: VolumeOptions {
            cache: CacheMode::WriteThrough,
            mirror_seq_piece: 4096,
            ..VolumeOptions::default()
        },
        bitmap_chunk_bytes: Some(256 * KIB),
        enable_checksums: enable,
        ..ArrayOptions::default()
    }
}

/// Members of exactly the region (the area goes into the metadata area) or with room for
/// the area after it.
fn disks(n: usize, room_after: bool, seed: u64) -> Disks {
    let len = START + REGION + if room_after { area_bytes(REGION) } else { 0 };
    (0..n)
        .map(|i| {
            let m = MemoryMember::new(format!("d{i}"), len);
            Arc::new(Faulty::new(m, seed ^ (i as u64 + 1)).with_power_loss())
        })
        .collect()
}

fn metas(d: &Disks) -> Vec<Option<Arc<MemberMeta>>> {
    (d.iter())
        .map(|d| Some(block_on(MemberMeta::load(d.clone() as Arc<dyn Member>))))
        .collect()
}

fn open(t: &Node, d: &Disks, enable: bool, strip: u64) -> Array {
    let (a, _) = block_on(Array::open(
        "vol",
        t,
        metas(d),
        opts(enable, strip),
        &|_, _| {},
    ))
    .expect("open");
    a
}

fn pattern(seed: u8, at: u64, len: u64) -> Vec<u8> {
    (at..at + len)
        .map(|i| (i as u8).wrapping_mul(37) ^ seed ^ (i / 4096) as u8)
        .collect()
}

/// What the volume must read as: per sector, the bytes that may be there (more than one
/// for a write cut off by the power loss).
struct Model {
    sectors: Vec<Vec<Vec<u8>>>,
}

impl Model {
    fn new(data: &[u8]) -> Model {
        let sectors = data.chunks(SECTOR).map(|s| vec![s.to_vec()]).collect();
        Model { sectors }
    }

    /// A write acknowledged and then flushed (`sure`), or not flushed before the power loss.
    fn write(&mut self, at: u64, data: &[u8], sure: bool) {
        for (i, s) in data.chunks(SECTOR).enumerate() {
            let slot = &mut self.sectors[at as usize / SECTOR + i];
            if sure {
                slot.clear();
            }
            slot.push(s.to_vec());
        }
    }

    /// After the reopen: what was read is what each sector holds from now on.
    fn check_and_settle(&mut self, got: &[u8], what: &str) {
        for (i, s) in got.chunks(SECTOR).enumerate() {
            let slot = &mut self.sectors[i];
            assert!(
                slot.iter().any(|c| c == s),
                "{what}: sector {i} reads bytes the model never held"
            );
            *slot = vec![s.to_vec()];
        }
    }
}

fn write_all(a: &Array, data: &[u8]) {
    block_on(async {
        for (i, piece) in data.chunks(MIB as usize).enumerate() {
            let at = i as u64 * MIB;
            a.write(at, Buf::copy_from(piece), false)
                .await
                .expect("write");
        }
    });
}

fn read_all(a: &Array) -> VolumeResult<Vec<u8>> {
    block_on(async {
        let cap = a.volume().capacity();
        let mut out = Vec::with_capacity(cap as usize);
        let mut at = 0;
        while at < cap {
            let n = (cap - at).min(192 * KIB);
            out.extend_from_slice(&a.read(at, n).await?);
            at += n;
        }
        Ok(out)
    })
}

fn counts(a: &Array) -> (u64, u64) {
    let setup = a.volume().options().checksums.as_ref().expect("checksums");
    (0..a.volume().member_count()).fold((0, 0), |(e, r), i| {
        let c = setup.counters(i).expect("counters");
        (e + c.errors.load(Relaxed), r + c.repairs.load(Relaxed))
    })
}

/// Client writes of 12 KiB at offsets spread over the volume (seeded by `seed`).
fn writes(cap: u64, seed: u8, count: u64) -> Vec<(u64, Vec<u8>)> {
    (0..count)
        .map(|i| {
            let at = ((i * 7919 + seed as u64 * 104_729) * 4096) % (cap - 12 * KIB);
            let at = at / 4096 * 4096 + if i % 3 == 0 { 1024 } else { 0 };
            (at, pattern(seed.wrapping_add(i as u8), at, 12 * KIB))
        })
        .collect()
}

/// Runs the fill pass with `ws` written while it runs, the `i`th once the pass is past
/// `i / (2 × ws.len())` of its way; with `cut_off`, cancels it as soon as it is past half
/// its way (the writes go on). The members answer after a short latency so the two
/// interleave. Returns the pass's final state.
fn fill_with_writes(a: &Array, d: &Disks, ws: &[(u64, Vec<u8>)], cut_off: bool) -> PassState {
    let ctl = FillControl::resume_at(PassRate::default(), 0);
    let ctl = &ctl;
    for disk in d {
        disk.set_latency(Duration::from_micros(20), Duration::from_micros(200));
    }
    let past = |num: u64, den: u64| {
        let r = ctl.report();
        r.state == PassState::Done
            || (r.total_bytes > 0 && r.position_bytes * den >= r.total_bytes * num)
    };
    let cut = || {
        if cut_off && past(1, 2) {
            ctl.cancel();
        }
    };
    let state = block_on(async {
        let pass = a.fill_checksums(ctl);
        let client = async {
            for (i, (at, data)) in ws.iter().enumerate() {
                while !past(i as u64, 2 * ws.len() as u64) {
                    cut();
                    yield_once().await;
                }
                cut();
                a.write(*at, Buf::copy_from(data), false)
                    .await
                    .expect("write");
            }
            while cut_off && !ctl.is_cancelled() && ctl.state() != PassState::Done {
                cut();
                yield_once().await;
            }
        };
        let (report, ()) = futures::join!(pass, client);
        report.expect("the pass").state
    });
    for disk in d {
        disk.set_latency(Duration::ZERO, Duration::ZERO);
    }
    state
}

/// Overwrites block 1 of stripe `m` on member `m` (one bad block per stripe row) behind the
/// engine; returns (member, offset, the bytes it held).
fn corrupt_each_member(d: &Disks, strip: u64) -> Vec<(usize, u64, Vec<u8>)> {
    (d.iter().enumerate())
        .map(|(m, disk)| {
            let at = START + m as u64 * strip + BLOCK_BYTES;
            let mut was = vec![0u8; BLOCK_BYTES as usize];
            disk.inner().peek(at, &mut was);
            disk.inner().poke(at, &vec![0x5a; BLOCK_BYTES as usize]);
            (m, at, was)
        })
        .collect()
}

fn case(level: Level, n: usize, strip: u64, room_after: bool, seed: u64) {
    let what = format!("{level:?} ×{n}, strip {strip}, seed {seed}");
    let t = tree(level, n, strip);
    let d = disks(n, room_after, seed);
    // Created without checksums, written, shut down cleanly.
    let (a, _) = block_on(Array::create(
        "vol",
        t.clone(),
        metas(&d).into_iter().flatten().collect(),
        opts(false, strip),
        true,
        &|_, _| {},
    ))
    .expect("create");
    assert!(a.volume().options().checksums.is_none());
    let cap = a.volume().capacity();
    let first = pattern(1, 0, cap);
    write_all(&a, &first);
    block_on(a.mark_clean()).expect("clean");
    drop(a);
    let mut model = Model::new(&first);

    // Enabled: the areas placed, the pass recorded at 0.
    let a = open(&t, &d, true, strip);
    assert_eq!(block_on(a.checksum_fill_checkpoint()), Some(0), "{what}");
    assert!(a.volume().options().checksums.is_some(), "{what}");
    // Writes while the pass runs; cancelled part-way, flushed, then more writes the
    // power loss may keep, drop or tear.
    let during = writes(cap, 2, 24);
    let state = fill_with_writes(&a, &d, &during, true);
    assert_ne!(state, PassState::Done, "{what}: cut off");
    for (at, data) in &during {
        model.write(*at, data, true);
    }
    block_on(a.flush()).expect("flush");
    for (at, data) in writes(cap, 3, 6) {
        block_on(a.write(at, Buf::copy_from(&data), false)).expect("write");
        model.write(at, &data, false);
    }
    for disk in &d {
        block_on(disk.crash(seed.is_multiple_of(2))).expect("crash");
    }
    drop(a);

    // Reopened unclean: the pass resumes and finishes under more writes.
    let a = open(&t, &d, true, strip);
    assert!(block_on(a.checksum_fill_checkpoint()).is_some(), "{what}");
    let got = read_all(&a).expect("no read fails after the power loss");
    model.check_and_settle(&got, &what);
    let after = writes(cap, 4, 8);
    assert_eq!(
        fill_with_writes(&a, &d, &after, false),
        PassState::Done,
        "{what}"
    );
    for (at, data) in &after {
        model.write(*at, data, true);
    }
    assert_eq!(block_on(a.checksum_fill_checkpoint()), None, "{what}: done");
    let got = read_all(&a).expect("reads");
    model.check_and_settle(&got, &what);
    assert_eq!(
        counts(&a),
        (0, 0),
        "{what}: nothing read as a checksum error"
    );
    block_on(a.flush()).expect("flush");

    // Bad blocks behind the engine: found by reads (data) and the scrub (parity), rewritten.
    let bad = corrupt_each_member(&d, strip);
    let got = read_all(&a).expect("read right");
    model.check_and_settle(&got, &what);
    let scrub = ScrubControl::new(true, 0);
    let report = block_on(a.scrub(&scrub)).expect("scrub");
    let (errors, repairs) = counts(&a);
    assert!(report.unreadable >= 1 || errors >= 1, "{what}: {report:?}");
    // The rewrites reach the members' media.
    block_on(a.flush()).expect("flush");
    assert!(
        errors >= 1 && errors == repairs,
        "{what}: {errors} found, {repairs} repaired"
    );
    for (m, at, was) in bad {
        let mut now = vec![0u8; was.len()];
        d[m].inner().peek(at, &mut now);
        assert!(
            now == was,
            "{what}: member {m} at {at} rewritten to what it held"
        );
    }
    assert_eq!(a.volume().failed_count(), 0, "{what}");
}

#[test]
fn enabling_survives_a_power_loss_and_then_finds_bad_blocks() {
    let levels = [(Level::Raid1, 2), (Level::Raid5, 3), (Level::Raid6, 4)];
    for (i, (level, n)) in levels.into_iter().enumerate() {
        for (j, strip) in [4 * KIB, 64 * KIB, MIB].into_iter().enumerate() {
            let seed = 0x5eed_0000 + (i * 3 + j) as u64;
            case(level, n, strip, (i + j) % 2 == 0, seed);
        }
    }
}

/// The pass with no concurrent writes covers every block: every member's bytes, overwritten
/// near the first or the last block of its region (one bad block per row), are found.
#[test]
fn every_block_of_every_member_is_covered() {
    for (level, n) in [(Level::Raid1, 3), (Level::Raid5, 4), (Level::Raid6, 5)] {
        let strip = 64 * KIB;
        let t = tree(level, n, strip);
        let d = disks(n, true, 7);
        let (a, _) = block_on(Array::create(
            "vol",
            t.clone(),
            metas(&d).into_iter().flatten().collect(),
            opts(false, strip),
            true,
            &|_, _| {},
        ))
        .expect("create");
        let data = pattern(9, 0, a.volume().capacity());
        write_all(&a, &data);
        block_on(a.mark_clean()).expect("clean");
        drop(a);
        let a = open(&t, &d, true, strip);
        assert_eq!(fill_with_writes(&a, &d, &[], false), PassState::Done);
        block_on(a.flush()).expect("flush");
        for (m, disk) in d.iter().enumerate() {
            let row = m as u64 * BLOCK_BYTES;
            let at = if m % 2 == 0 {
                START + row
            } else {
                START + REGION - BLOCK_BYTES - row
            };
            disk.inner().poke(at, &[0xee; 4096]);
        }
        let scrub = ScrubControl::new(true, 0);
        let report = block_on(a.scrub(&scrub)).expect("scrub");
        let (errors, repairs) = counts(&a);
        assert!(report.repaired >= 1, "{level:?}: {:?}", scrub.findings());
        assert_eq!((errors, repairs), (n as u64, n as u64), "{level:?}");
        assert!(read_all(&a).expect("reads") == data, "{level:?}");
    }
}

/// `checksums = "enable"` on a volume that does not exist yet: created with the areas and the
/// pass recorded (not only at the next open), filled, and then bad blocks on every member
/// read right. RAID 1, 5 and 6; created synced and assumed clean.
#[test]
fn a_volume_created_with_enable_gets_its_checksums_at_once() {
    for (i, (level, n)) in [(Level::Raid1, 2), (Level::Raid5, 3), (Level::Raid6, 4)]
        .into_iter()
        .enumerate()
    {
        let strip = 64 * KIB;
        let (t, d) = (tree(level, n, strip), disks(n, i % 2 == 0, 11));
        let what = format!("{level:?} ×{n}");
        let (a, _) = block_on(Array::create(
            "vol",
            t.clone(),
            metas(&d).into_iter().flatten().collect(),
            opts(true, strip),
            i == 1,
            &|_, _| {},
        ))
        .expect("create");
        assert_eq!(block_on(a.checksum_fill_checkpoint()), Some(0), "{what}");
        assert!(a.volume().options().checksums.is_some(), "{what}");
        let data = pattern(5, 0, a.volume().capacity());
        write_all(&a, &data);
        let fill = FillControl::resume_at(PassRate::default(), 0);
        assert_eq!(
            block_on(a.fill_checksums(&fill)).expect("fill").state,
            PassState::Done
        );
        assert_eq!(block_on(a.checksum_fill_checkpoint()), None, "{what}: done");
        block_on(a.flush()).expect("flush");
        corrupt_each_member(&d, strip);
        assert!(read_all(&a).expect("read") == data, "{what}: read right");
        assert!(counts(&a).0 >= 1, "{what}: the bad blocks were noticed");
    }
}
