//! Every geometry knob the config accepts, crossed where the other tests do not reach: strips
//! from 4 KiB to 16 MiB (logs in the metadata area and in a reserve), RAID 5/6 from their
//! fewest members to many, RAID 10/50/60 spans, member regions that are not a whole number of
//! strips, checksums with large strips, bitmap chunks far smaller and far larger than a strip,
//! and write-back over big strips. Each geometry is created on in-memory members where the
//! config would place it, takes a random mix of writes (partial stripes, whole stripes, writes
//! across strip and stripe boundaries, the last stripe, the volume's last byte) checked against
//! a byte model, crashes, reopens dirty, takes a torn partial-stripe write (its parity writes
//! lost) and crashes again, reopens without a member the level can spare (the write hole: the
//! chunks nobody wrote read back exactly), rebuilds onto new members and scrubs — every byte
//! checked after each step. `NBRAID_SOAK` adds the largest geometries and more seeds.

mod common;

use common::{Lossy, SeedGuard, KIB, MIB};
use futures::executor::block_on;
use nbraid_core::metadata::disk_rule::Consent;
use nbraid_core::metadata::{Array, ArrayOptions, MemberMeta, Probe, METADATA_AREA_BYTES};
use nbraid_core::{Buf, CacheMode, Member, MemoryMember, PassControl, PassState, ScrubControl};
use nbraid_core::{ReadPolicy, VolumeOptions, MAX_REQUEST_BYTES};
use nbraid_layout::{Level, Node, ParityLayout, Region, Shape, StripeRoles};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// One geometry of the sweep.
#[derive(Clone, Copy, Debug)]
struct Geo {
    level: Level,
    members: usize,
    spans: Option<usize>,
    strip: u64,
    /// Whole strips of each member region…
    strips: u64,
    /// …and this many bytes more: a region the strips do not divide (the layout drops them).
    odd_bytes: u64,
    checksums: bool,
    bitmap_chunk_bytes: Option<u64>,
    write_back: bool,
    /// `write_hole_log_size`: the log in a reserve this large instead of where its strips put
    /// it.
    log_reserve: Option<u64>,
    parity_layout: ParityLayout,
}

const fn geo(level: Level, members: usize, spans: Option<usize>, strip: u64) -> Geo {
    Geo {
        level,
        members,
        spans,
        strip,
        strips: 3,
        odd_bytes: 12 * KIB + 512,
        checksums: true,
        bitmap_chunk_bytes: Some(64 * MIB),
        write_back: false,
        log_reserve: None,
        parity_layout: ParityLayout::LeftSymmetric,
    }
}

impl Geo {
    const fn strips(self, strips: u64) -> Geo {
        Geo { strips, ..self }
    }
    const fn no_checksums(self) -> Geo {
        Geo {
            checksums: false,
            ..self
        }
    }
    const fn bitmap(self, chunk: Option<u64>) -> Geo {
        Geo {
            bitmap_chunk_bytes: chunk,
            ..self
        }
    }
    const fn log_reserve(self, bytes: u64) -> Geo {
        Geo {
            log_reserve: Some(bytes),
            ..self
        }
    }
    const fn layout(self, parity_layout: ParityLayout) -> Geo {
        Geo {
            parity_layout,
            ..self
        }
    }
    const fn write_back(self) -> Geo {
        Geo {
            write_back: true,
            ..self
        }
    }

    fn shape(&self) -> Shape {
        Shape::new(
            self.level,
            self.members,
            self.spans,
            self.strip,
            self.parity_layout,
        )
        .expect("shape")
    }

    /// Bytes of each member region as the config hands it over (not a whole number of strips).
    fn region_bytes(&self) -> u64 {
        self.strips * self.strip + self.odd_bytes
    }

    /// Bytes of the volume in one row of strips across every data member.
    fn row_bytes(&self) -> u64 {
        self.strip * self.shape().data_members() as u64
    }
}

/// The default sweep: each line crosses knobs no other test of the engine crosses (they keep
/// to 4-128 KiB strips, five or fewer RAID 6 members and regions of whole strips).
const SWEEP: [Geo; 17] = [
    // Smallest strips, fewest members, bitmap chunks the size of a block.
    geo(Level::Raid5, 3, None, 4 * KIB)
        .bitmap(Some(4 * KIB))
        .write_back(),
    geo(Level::Raid6, 4, None, 8 * KIB)
        .bitmap(Some(4 * KIB))
        .layout(ParityLayout::RightAsymmetric),
    // Many members: masks past 8 data chunks in every log entry.
    geo(Level::Raid6, 12, None, 16 * KIB).write_back(),
    geo(Level::Raid5, 16, None, 64 * KIB)
        .bitmap(None)
        .layout(ParityLayout::LeftAsymmetric),
    geo(Level::Raid6, 13, None, 128 * KIB).strips(2),
    // The largest strips whose log the metadata area holds, and the first that go to a reserve.
    geo(Level::Raid5, 4, None, 256 * KIB).bitmap(Some(4 * KIB)),
    geo(Level::Raid6, 4, None, 256 * KIB)
        .layout(ParityLayout::RightSymmetric)
        .write_back(),
    geo(Level::Raid5, 5, None, MIB)
        .strips(2)
        .bitmap(Some(64 * KIB))
        .write_back(),
    // The largest strip: a 65 MiB reserve.
    geo(Level::Raid6, 4, None, 16 * MIB).strips(2),
    // A full stripe (48 MiB) longer than any request: the resync's piece is one.
    geo(Level::Raid5, 4, None, 16 * MIB).strips(2),
    // `write_hole_log_size` far above what small strips need.
    geo(Level::Raid5, 6, None, 32 * KIB)
        .log_reserve(8 * MIB)
        .bitmap(None)
        .write_back(),
    // Spans: RAID 50 with a reserve-sized strip, RAID 60 over the metadata area's largest.
    geo(Level::Raid50, 6, Some(2), 512 * KIB)
        .strips(2)
        .write_back(),
    geo(Level::Raid60, 12, Some(3), 128 * KIB)
        .strips(2)
        .layout(ParityLayout::RightAsymmetric),
    // Mirrors and stripes with big strips and checksums.
    geo(Level::Raid10, 6, Some(3), 2 * MIB)
        .strips(2)
        .write_back(),
    geo(Level::Raid1, 2, None, 4 * KIB)
        .strips(16)
        .bitmap(Some(4 * KIB)),
    geo(Level::Raid0, 3, None, MIB).strips(2).write_back(),
    geo(Level::Jbod, 3, None, 4 * KIB).strips(8).no_checksums(),
];

/// The largest geometries (`NBRAID_SOAK`): hundreds of MiB of members each.
const SOAK_SWEEP: [Geo; 3] = [
    geo(Level::Raid5, 3, None, 16 * MIB).strips(2).write_back(),
    geo(Level::Raid60, 8, Some(2), 4 * MIB)
        .strips(2)
        .write_back(),
    geo(Level::Raid6, 24, None, 64 * KIB).bitmap(Some(4 * KIB)),
];

fn pattern(rng: &mut SmallRng, len: usize) -> Buf {
    let mut b = Buf::new(len);
    rng.fill(&mut b[..]);
    b
}

/// In-memory disks that can lose their non-FUA writes, and the geometry's tree over them,
/// placed as the config places a volume: checksum reserve, log reserve, region.
struct Rig {
    geo: Geo,
    tree: Node,
    disks: Vec<Arc<Lossy>>,
    disk_bytes: u64,
    checksum_reserve: Option<u64>,
    log_reserve: Option<u64>,
}

impl Rig {
    fn new(geo: Geo) -> Rig {
        let shape = geo.shape();
        let placed = |start: u64| {
            let region = Region {
                start,
                len: geo.region_bytes(),
            };
            shape.build(&vec![region; geo.members]).expect("tree")
        };
        let log_reserve = (geo.log_reserve).or(nbraid_layout::log_reserve_bytes(&placed(
            METADATA_AREA_BYTES,
        )));
        let checksum_reserve = geo
            .checksums
            .then(|| nbraid_core::checksum::area_bytes(geo.region_bytes()).next_multiple_of(MIB));
        let start = METADATA_AREA_BYTES + checksum_reserve.unwrap_or(0) + log_reserve.unwrap_or(0);
        // The disk is a little larger than the region, as a real one would be.
        let disk_bytes = start + geo.region_bytes() + 8 * KIB;
        let disks = (0..geo.members).map(|i| lossy(i, disk_bytes)).collect();
        Rig {
            geo,
            tree: placed(start),
            disks,
            disk_bytes,
            checksum_reserve,
            log_reserve,
        }
    }

    fn opts(&self, write_back: bool) -> ArrayOptions {
        let cache = match write_back {
            true => CacheMode::WriteBack {
                bytes: 4 * self.geo.row_bytes().max(MIB),
            },
            false => CacheMode::WriteThrough,
        };
        ArrayOptions {
            volume: VolumeOptions {
                cache,
                cache_max_age: None,
                read_policy: ReadPolicy::RoundRobin,
                ..VolumeOptions::default()
            },
            bitmap_chunk_bytes: self.geo.bitmap_chunk_bytes,
            bitmap_clear_delay: Duration::ZERO,
            ppl_area_before_region_bytes: self.log_reserve,
            checksum_area_before_region_bytes: self.checksum_reserve,
            ..ArrayOptions::default()
        }
    }

    fn metas(&self, lost: &[usize]) -> Vec<Option<Arc<MemberMeta>>> {
        (self.disks.iter().enumerate())
            .map(|(i, d)| (!lost.contains(&i)).then(|| meta(d)))
            .collect()
    }

    fn create(&self) -> Array {
        let metas = self.metas(&[]).into_iter().flatten().collect();
        let o = self.opts(self.geo.write_back);
        let (a, _) = block_on(Array::create(
            "vol",
            self.tree.clone(),
            metas,
            o,
            true,
            &|_, _| {},
        ))
        .unwrap_or_else(|e| panic!("{:?}: create: {e}", self.geo));
        a.set_rebuild_window_bytes(MIB);
        a
    }

    /// Opens write-through (the torn write below needs its writes to reach the members) without
    /// the disks in `lost`; asserts an unclean start.
    fn reopen_dirty(&self, lost: &[usize]) -> (Array, nbraid_core::metadata::OpenReport) {
        let o = self.opts(false);
        let (a, report) = block_on(Array::open(
            "vol",
            &self.tree,
            self.metas(lost),
            o,
            &|_, _| {},
        ))
        .unwrap_or_else(|e| panic!("{:?}: open without {lost:?}: {e}", self.geo));
        assert!(!report.was_clean, "{:?}: {report:?}", self.geo);
        assert_eq!(report.absent_roles, lost, "{:?}", self.geo);
        a.set_rebuild_window_bytes(MIB);
        (a, report)
    }

    /// A parity geometry's log is recorded, holds its ring, and sits where the config put it.
    fn assert_log_area(&self) {
        let Some(ring) = nbraid_layout::volume_log_ring_bytes(&self.tree) else {
            return;
        };
        let g = &self.geo;
        for m in self.metas(&[]).into_iter().flatten() {
            let Probe::Superblock(sb, _) = m.probe().clone() else {
                panic!("{g:?}: no superblock")
            };
            let area = (sb.volumes[0].ppl).unwrap_or_else(|| panic!("{g:?}: no log area"));
            assert!(area.len >= ring, "{g:?}: {area:?} for a {ring}-byte ring");
            match self.log_reserve {
                Some(r) => {
                    let at = METADATA_AREA_BYTES + self.checksum_reserve.unwrap_or(0);
                    assert_eq!((area.offset, area.len), (at, r), "{g:?}");
                }
                None => assert!(area.offset + area.len <= METADATA_AREA_BYTES, "{g:?}"),
            }
        }
    }
}

fn lossy(i: usize, bytes: u64) -> Arc<Lossy> {
    Arc::new(Lossy {
        inner: MemoryMember::new(format!("disk{i}"), bytes),
        lose: AtomicBool::new(false),
    })
}

fn meta(d: &Arc<Lossy>) -> Arc<MemberMeta> {
    block_on(MemberMeta::load(d.clone() as Arc<dyn Member>))
}

/// The bytes of the volume as written: what every read must return.
struct Model {
    bytes: Vec<u8>,
    rng: SmallRng,
}

impl Model {
    /// One write from the mix: where and how long (512-byte sectors).
    fn pick(&mut self, g: &Geo) -> (u64, u64) {
        let cap = self.bytes.len() as u64;
        let (strip, row) = (g.strip, g.row_bytes());
        let r = &mut self.rng;
        let sectors = |r: &mut SmallRng, most: u64| r.gen_range(1..=most.max(1)) * 512;
        let (at, len) = match r.gen_range(0..6) {
            // A small write anywhere.
            0 => (r.gen_range(0..cap / 512) * 512, sectors(r, 32)),
            // Whole stripes.
            1 => (r.gen_range(0..cap / row) * row, row * r.gen_range(1..=2)),
            // Across a strip boundary.
            2 => {
                let edge = r.gen_range(1..cap / strip) * strip;
                let before = sectors(r, 16).min(edge);
                (edge - before, before + sectors(r, 16))
            }
            // Across a stripe boundary, partial on both sides.
            3 => {
                let edge = r.gen_range(1..cap / row).max(1) * row;
                let before = sectors(r, strip / 512).min(edge);
                (edge - before, before + sectors(r, strip / 512))
            }
            // In the last stripe.
            4 => (cap - row + r.gen_range(0..row / 512) * 512, sectors(r, 64)),
            // Ending at the volume's last byte.
            _ => {
                let len = sectors(r, 64).min(cap);
                (cap - len, len)
            }
        };
        (at, len.min(cap - at).min(MAX_REQUEST_BYTES))
    }

    /// `n` writes of the mix, each applied to the model and to `a`.
    fn writes(&mut self, g: &Geo, a: &Array, n: usize) {
        for _ in 0..n {
            let (at, len) = self.pick(g);
            let data = pattern(&mut self.rng, len as usize);
            self.bytes[at as usize..(at + len) as usize].copy_from_slice(&data);
            block_on(a.write(at, data, false))
                .unwrap_or_else(|e| panic!("{g:?}: write {len} at {at}: {e}"));
        }
    }

    /// Every byte of `a` reads as the model, in pieces that start and end off the strips.
    fn check(&self, g: &Geo, a: &Array, when: &str) {
        let cap = self.bytes.len() as u64;
        let piece =
            ((g.row_bytes() * 2 / 3).max(4 * KIB) / 512 * 512 + 512).min(MAX_REQUEST_BYTES - 512);
        let mut at = 0;
        while at < cap {
            let n = piece.min(cap - at);
            let got = block_on(a.read(at, n)).unwrap_or_else(|e| panic!("{g:?} {when}: {e}"));
            if got[..] != self.bytes[at as usize..(at + n) as usize] {
                let first = (0..n as usize)
                    .find(|&i| got[i] != self.bytes[at as usize + i])
                    .unwrap_or(0);
                let i = first;
                panic!(
                    "{g:?} {when}: byte {} reads wrong: {:x?} for {:x?}",
                    at + first as u64,
                    &got[i..(i + 16).min(n as usize)],
                    &self.bytes[at as usize + i..(at as usize + i + 16).min(self.bytes.len())]
                );
            }
            at += n;
        }
    }
}

/// Group 0's last stripe: its volume offset and the members of its chunks. `None` without a
/// logged parity group.
fn last_stripe_of_group_0(rig: &Rig, capacity: u64) -> Option<(u64, StripeRoles)> {
    let (g, leaves) = nbraid_core::ppl::parity_groups(&rig.tree)
        .into_iter()
        .next()?;
    leaves?;
    // RAID 50/60 stripe whole span stripes over the spans: group 0's stripe s is row s.
    let row = g.stripe_width() * rig.geo.spans.unwrap_or(1) as u64;
    let stripe = capacity / row - 1;
    Some((stripe * row, g.roles(stripe)))
}

/// The members a dirty start goes without: for parity, data chunks of the torn stripe nobody
/// was writing (RAID 6: two, or one and P); a mirror's first copy; none without redundancy.
fn members_to_lose(level: Level, roles: Option<&StripeRoles>) -> Vec<usize> {
    let mut lost = match (level, roles) {
        (Level::Raid1 | Level::Raid10, _) => vec![0],
        (_, Some(r)) if r.q.is_some() => match r.data.len() {
            2 => vec![r.data[1], r.p],
            _ => vec![r.data[1], r.data[2]],
        },
        (_, Some(r)) => vec![r.data[1]],
        _ => vec![],
    };
    lost.sort_unstable();
    lost
}

/// Up to 64 KiB (several of the log's 4 KiB bands) into data chunk 0 of the volume's last
/// stripe of group 0, with that stripe's parity writes lost, then a power loss. Returns where
/// it wrote, the old bytes there and the members a restart may go without.
fn torn_write(rig: &Rig, model: &mut Model, a: Array) -> (u64, Vec<u8>, Vec<usize>) {
    let capacity = model.bytes.len() as u64;
    let strip = rig.geo.strip;
    let stripe = last_stripe_of_group_0(rig, capacity);
    let (start, inner) = match &stripe {
        Some((start, _)) => (*start, (strip / 2).min(8 * KIB) / (4 * KIB) * 4 * KIB),
        None => (capacity - rig.geo.row_bytes(), 0),
    };
    if let Some((_, roles)) = &stripe {
        for m in [Some(roles.p), roles.q].into_iter().flatten() {
            rig.disks[m].lose.store(true, Ordering::SeqCst);
        }
    }
    let at = start + inner;
    let len = (strip - inner).min(64 * KIB) as usize;
    let old = model.bytes[at as usize..at as usize + len].to_vec();
    let new = pattern(&mut model.rng, len);
    model.bytes[at as usize..at as usize + len].copy_from_slice(&new);
    block_on(a.write(at, new, false)).expect("the torn write");
    drop(a); // power lost: the parity writes never landed
    for d in &rig.disks {
        d.lose.store(false, Ordering::SeqCst);
    }
    let lost = members_to_lose(rig.geo.level, stripe.map(|s| s.1).as_ref());
    (at, old, lost)
}

/// Each sector of the torn write reads as before or as written (never bytes nobody wrote);
/// the model takes what it reads.
fn accept_torn(g: &Geo, model: &mut Model, a: &Array, at: u64, old: &[u8]) {
    let got = block_on(a.read(at, old.len() as u64)).expect("read the torn write");
    for s in (0..old.len()).step_by(512) {
        let new = &model.bytes[at as usize + s..at as usize + s + 512];
        assert!(
            got[s..s + 512] == *new || got[s..s + 512] == old[s..s + 512],
            "{g:?}: sector {s} of the torn write reads bytes nobody wrote"
        );
    }
    model.bytes[at as usize..at as usize + old.len()].copy_from_slice(&got);
}

/// Closes `a` cleanly and opens it again without `lost`, with the geometry's cache.
fn reopen_clean(rig: &Rig, a: Array, lost: &[usize]) -> Array {
    let g = &rig.geo;
    assert!(
        block_on(a.mark_clean()).expect("clean").is_recorded(),
        "{g:?}"
    );
    drop(a);
    let o = rig.opts(g.write_back);
    let (a, report) = block_on(Array::open(
        "vol",
        &rig.tree,
        rig.metas(lost),
        o,
        &|_, _| {},
    ))
    .unwrap_or_else(|e| panic!("{g:?}: clean open without {lost:?}: {e}"));
    assert!(report.was_clean, "{g:?}: {report:?}");
    a.set_rebuild_window_bytes(MIB);
    a
}

/// New disks in the roles `lost`, rebuilt while the volume serves.
fn rebuild(rig: &mut Rig, a: &Array, lost: &[usize]) {
    for &role in lost {
        // A replacement a little larger than the disk it replaces, as they usually are.
        let d = lossy(100 + role, rig.disk_bytes + MIB + 512);
        block_on(a.rebuild_onto(role, meta(&d)))
            .unwrap_or_else(|e| panic!("{:?}: rebuild onto role {role}: {e}", rig.geo));
        rig.disks[role] = d;
    }
    if lost.is_empty() {
        return;
    }
    let r = block_on(a.rebuild(&PassControl::new(0))).expect("rebuild");
    assert_eq!(r.state, PassState::Done, "{:?}", rig.geo);
    assert!(!a.volume().is_degraded(), "{:?}", rig.geo);
}

/// A scrub that repairs, then one that only checks: the second finds nothing.
fn scrub_clean(g: &Geo, a: &Array) {
    block_on(a.scrub(&ScrubControl::new(true, 0))).expect("scrub");
    let r = block_on(a.scrub(&ScrubControl::new(false, 0))).expect("scrub");
    assert_eq!((r.mismatches, r.unreadable), (0, 0), "{g:?}: {r:?}");
}

/// Checksum mismatches counted on every member (none: the volume keeps no checksums).
fn checksum_errors(a: &Array) -> u64 {
    let Some(setup) = a.volume().options().checksums.as_ref() else {
        return 0;
    };
    (0..a.volume().member_count())
        .filter_map(|i| setup.counters(i))
        .map(|c| c.errors.load(Ordering::Relaxed))
        .sum()
}

/// With checksums and redundancy: a block of a rebuilt disk's region (data or parity)
/// corrupted behind the engine's back is found and repaired.
fn corrupt_and_repair(rig: &Rig, a: &Array, model: &Model, role: usize) {
    let mut start = u64::MAX;
    rig.tree.visit_members(&mut |m| start = start.min(m.start));
    let block = rig.geo.strips * rig.geo.strip / 4096 / 2;
    rig.disks[role]
        .inner
        .poke(start + block * 4096, &[0x5a; 4096]);
    model.check(&rig.geo, a, "with a corrupted block");
    scrub_clean(&rig.geo, a);
}

/// The whole sweep for one geometry and seed.
fn sweep(geo: Geo, seed: u64) {
    let _guard = SeedGuard {
        test: "geometry_sweep",
        seed,
    };
    let mut rig = Rig::new(geo);
    let a = rig.create();
    rig.assert_log_area();
    if rig.geo.level.parity() > 0 {
        assert_eq!(a.write_hole_logged(), Some(true), "{geo:?}");
    }
    let mut model = Model {
        bytes: vec![0; a.volume().capacity() as usize],
        rng: SmallRng::seed_from_u64(seed),
    };
    model.writes(&geo, &a, 40);
    model.check(&geo, &a, "after the writes");
    block_on(a.flush()).expect("flush");
    drop(a); // power lost with the records dirty
    let (a, _) = rig.reopen_dirty(&[]);
    model.check(&geo, &a, "after a dirty start");
    model.writes(&geo, &a, 8);
    let (at, old, lost) = torn_write(&rig, &mut model, a);
    let (a, report) = rig.reopen_dirty(&lost);
    if last_stripe_of_group_0(&rig, model.bytes.len() as u64).is_some() {
        assert!(report.ppl.entries >= 1, "{geo:?}: {report:?}");
    }
    accept_torn(&geo, &mut model, &a, at, &old);
    model.check(&geo, &a, "dirty and degraded");
    // Degraded, with the geometry's cache.
    let a = reopen_clean(&rig, a, &lost);
    model.writes(&geo, &a, 8);
    block_on(a.flush()).expect("flush");
    model.check(&geo, &a, "degraded after writes");
    rebuild(&mut rig, &a, &lost);
    model.check(&geo, &a, "after the rebuild");
    let a = reopen_clean(&rig, a, &[]);
    scrub_clean(&geo, &a);
    // Nothing was corrupted yet: a mismatch is a false one (a redundant level hides it).
    assert_eq!(checksum_errors(&a), 0, "{geo:?}: false checksum errors");
    if let (true, Some(&role)) = (geo.checksums, lost.first()) {
        corrupt_and_repair(&rig, &a, &model, role);
    }
    model.check(&geo, &a, "at the end");
}

/// Each geometry with a few seeds (one for strips of 4 MiB and more: seconds each).
fn run(name: &str, geos: &[Geo]) {
    for (i, &g) in geos.iter().enumerate() {
        let seeds = if g.strip >= 4 * MIB { 1 } else { 3 };
        for seed in common::seeds(&format!("{name} {i}"), seeds) {
            let t = std::time::Instant::now();
            sweep(g, seed);
            eprintln!("{g:?}: {:?}", t.elapsed());
        }
    }
}

#[test]
fn every_geometry_of_the_sweep_keeps_every_byte() {
    run("sweep", &SWEEP);
}

/// The largest geometries, with `NBRAID_SOAK` only (hundreds of MiB of memory members).
#[test]
fn the_largest_geometries_keep_every_byte() {
    if common::soak() == 1 {
        return;
    }
    run("soak sweep", &SOAK_SWEEP);
}

/// Two volumes on the same four disks (Matrix): RAID 5 with 64 KiB strips (its log in the
/// metadata area, beside the superblocks) and, after it, RAID 6 with 256 KiB strips (its log
/// in a reserve), write-back, both with checksums. Writes to both, a power loss, a dirty
/// start of both without the same disk, degraded writes, one new disk rebuilt into that role
/// of both, scrubs, a clean restart.
#[test]
fn two_volumes_sharing_their_disks_keep_every_byte() {
    for seed in common::seeds("matrix", 2) {
        let _guard = SeedGuard {
            test: "two_volumes_sharing_their_disks_keep_every_byte",
            seed,
        };
        matrix(seed);
    }
}

const MATRIX_NAMES: [&str; 2] = ["a", "b"];

/// The two volumes' rigs over one set of disks, placed one after the other as the config
/// places a member's volumes: checksum reserve, log reserve, region.
fn matrix_rigs() -> Vec<Rig> {
    let geos = [
        geo(Level::Raid5, 4, None, 64 * KIB).strips(8),
        geo(Level::Raid6, 4, None, 256 * KIB).write_back(),
    ];
    let mut at = METADATA_AREA_BYTES;
    let mut rigs = Vec::new();
    for geo in geos {
        let shape = geo.shape();
        let placed = |start| {
            let region = Region {
                start,
                len: geo.region_bytes(),
            };
            shape.build(&vec![region; geo.members]).expect("tree")
        };
        let log_reserve = nbraid_layout::log_reserve_bytes(&placed(at));
        let sums = nbraid_core::checksum::area_bytes(geo.region_bytes()).next_multiple_of(MIB);
        let start = at + sums + log_reserve.unwrap_or(0);
        rigs.push(Rig {
            geo,
            tree: placed(start),
            disks: Vec::new(),
            disk_bytes: 0,
            checksum_reserve: Some(sums),
            log_reserve,
        });
        at = (start + geo.region_bytes()).next_multiple_of(MIB);
    }
    let disks: Vec<Arc<Lossy>> = (0..4).map(|i| lossy(i, at + MIB)).collect();
    for r in &mut rigs {
        r.disks = disks.clone();
        r.disk_bytes = at + MIB;
    }
    rigs
}

/// Each disk's metadata, loaded once for every volume on it (`None`: the disks in `lost`).
fn shared_metas(disks: &[Arc<Lossy>], lost: &[usize]) -> Vec<Option<Arc<MemberMeta>>> {
    (disks.iter().enumerate())
        .map(|(i, d)| (!lost.contains(&i)).then(|| meta(d)))
        .collect()
}

/// Opens both volumes over `metas`: unclean or clean as `clean` says.
fn open_both(rigs: &[Rig], metas: &[Option<Arc<MemberMeta>>], clean: bool) -> Vec<Array> {
    (rigs.iter().zip(MATRIX_NAMES))
        .map(|(r, name)| {
            let o = r.opts(r.geo.write_back);
            let (a, report) = block_on(Array::open(name, &r.tree, metas.to_vec(), o, &|_, _| {}))
                .unwrap_or_else(|e| panic!("{name}: open: {e}"));
            assert_eq!(report.was_clean, clean, "{name}: {report:?}");
            a
        })
        .collect()
}

fn check_both(rigs: &[Rig], arrays: &[Array], models: &[Model], when: &str) {
    for ((r, a), m) in rigs.iter().zip(arrays).zip(models) {
        m.check(&r.geo, a, when);
    }
}

fn write_both(rigs: &[Rig], arrays: &[Array], models: &mut [Model], n: usize) {
    for _ in 0..n {
        for ((r, a), m) in rigs.iter().zip(arrays).zip(models.iter_mut()) {
            m.writes(&r.geo, a, 1);
        }
    }
    arrays
        .iter()
        .for_each(|a| block_on(a.flush()).expect("flush"));
}

fn matrix(seed: u64) {
    let rigs = matrix_rigs();
    let mut disks = rigs[0].disks.clone();
    let metas: Vec<Arc<MemberMeta>> = shared_metas(&disks, &[]).into_iter().flatten().collect();
    let arrays: Vec<Array> = (rigs.iter().zip(MATRIX_NAMES))
        .map(|(r, name)| {
            let o = r.opts(r.geo.write_back);
            let t = r.tree.clone();
            block_on(Array::create(name, t, metas.clone(), o, true, &|_, _| {}))
                .unwrap_or_else(|e| panic!("{name}: create: {e}"))
                .0
        })
        .collect();
    let mut models: Vec<Model> = (arrays.iter().enumerate())
        .map(|(i, a)| Model {
            bytes: vec![0; a.volume().capacity() as usize],
            rng: SmallRng::seed_from_u64(seed + i as u64),
        })
        .collect();
    write_both(&rigs, &arrays, &mut models, 24);
    check_both(&rigs, &arrays, &models, "after the writes");
    drop(arrays); // power lost with both volumes' records dirty
    let lost = 1;
    let arrays = open_both(&rigs, &shared_metas(&disks, &[lost]), false);
    check_both(&rigs, &arrays, &models, "dirty and degraded");
    write_both(&rigs, &arrays, &mut models, 8);
    let new = lossy(100, rigs[0].disk_bytes + MIB);
    let new_meta = meta(&new);
    // As `nbraid add` gives a disk to every volume of its member file: each a spare, its
    // siblings' records allowed beside its own.
    let ids: Vec<_> = arrays.iter().map(Array::id).collect();
    for a in &arrays {
        let siblings = ids.iter().copied().filter(|&id| id != a.id()).collect();
        let consent = Consent {
            force: false,
            siblings,
        };
        (a.add_spare_with(new_meta.clone(), &consent)).unwrap_or_else(|e| panic!("add: {e}"));
        assert_eq!(block_on(a.use_spares()).expect("use the spare"), vec![lost]);
        let r = block_on(a.rebuild(&PassControl::new(0))).expect("rebuild");
        assert_eq!(r.state, PassState::Done);
    }
    disks[lost] = new;
    check_both(&rigs, &arrays, &models, "after the rebuilds");
    for (r, a) in rigs.iter().zip(&arrays) {
        scrub_clean(&r.geo, a);
        assert!(block_on(a.mark_clean()).expect("clean").is_recorded());
    }
    drop(arrays);
    let arrays = open_both(&rigs, &shared_metas(&disks, &[]), true);
    check_both(&rigs, &arrays, &models, "after a clean restart");
    for (r, a) in rigs.iter().zip(&arrays) {
        assert_eq!(checksum_errors(a), 0, "{:?}: false checksum errors", r.geo);
    }
}
