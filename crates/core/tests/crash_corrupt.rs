//! Silent corruption injected at seeded points of a run ([`nbraid_sim::Corrupting`]): bytes
//! flipped in a block, writes whose block lands at another block's offset, reads returning
//! another block's bytes — behind the engine's back, while seeded writes, reads and flushes
//! run, on at most as many members per stripe row as the level tolerates. Invariants: every
//! read returns exactly what the model says was written (never wrong bytes, never an error),
//! no member is failed, a scrub afterwards repairs the members and a second finds nothing.
//! Without redundancy (RAID 0) a corrupted block reads as a checksum error.
//! RAID 1 (2-way), 5, 6 and 10; strips of 4 KiB, 64 KiB and 1 MiB.
//!
//! Also the failure threshold (`checksum_error_limit`, [`ChecksumSetup::with_fail_after_errors`]):
//! a member returning more bad blocks than the limit is failed and the volume keeps serving
//! degraded; at the limit it is not failed.

mod common;

use common::{named, seeds, SeedGuard, KIB, MIB};
use futures::executor::block_on;
use nbraid_core::checksum::{area_bytes, is_mismatch, ChecksumSetup, BLOCK_BYTES};
use nbraid_core::{
    Buf, CacheMode, Member, MemberState, MemoryMember, ReadPolicy, ScrubControl, ScrubReport,
    Volume, VolumeError, VolumeOptions,
};
use nbraid_layout::{Geometry, Level};
use nbraid_sim::{Corrupting, Rng};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

const REGION: u64 = 2 * MIB;
const OPS: u64 = 150;

type Disk = Corrupting<MemoryMember>;

struct Run {
    v: Volume,
    disks: Vec<Arc<Disk>>,
    model: Vec<u8>,
    rng: Rng,
}

/// Member `m` may be corrupted in stripe `stripe` when it is one of the stripe's `tolerance`
/// owners: no stripe ever holds bad blocks on more members than the level rebuilds. (A
/// "stripe" here is `own_bytes` of each member: a strip, or one block for the finer rule
/// that only a row of blocks is bounded.)
fn owns(m: usize, stripe: u64, n: usize, tolerance: usize) -> bool {
    (0..tolerance).any(|k| (stripe as usize + k) % n == m)
}

fn build(
    g: Geometry,
    n: usize,
    tolerance: usize,
    own_bytes: u64,
    seed: u64,
    limit: Option<u64>,
) -> Run {
    let area = area_bytes(REGION);
    let rows = REGION / BLOCK_BYTES;
    let strip_rows = own_bytes / BLOCK_BYTES;
    let disks: Vec<Arc<Disk>> = (0..n)
        .map(|m| {
            let mem = MemoryMember::new(format!("m{m}"), REGION + area);
            // Only the data area: the checksum area after it is left alone.
            let may =
                Box::new(move |row: u64| row < rows && owns(m, row / strip_rows, n, tolerance));
            Arc::new(Corrupting::new(mem, seed ^ (m as u64 + 1), rows, may))
        })
        .collect();
    let dyns = disks.iter().map(|d| d.clone() as Arc<dyn Member>).collect();
    let areas = common::areas_after(REGION, n);
    let opts = VolumeOptions {
        block_size: 4096,
        members_known_zero: true,
        cache: CacheMode::WriteThrough,
        // Mirrors move to the next copy every block: every copy is read.
        mirror_seq_piece: 4096,
        cache_max_age: None,
        read_policy: ReadPolicy::RoundRobin,
        checksums: Some(
            ChecksumSetup::new("t", areas, true)
                .with_cache_pages(2)
                .with_fail_after_errors(limit),
        ),
        ..VolumeOptions::default()
    };
    let v = Volume::new(g, dyns, opts).expect("volume");
    let mut rng = Rng::new(seed);
    let mut model = vec![0u8; v.capacity() as usize];
    fill(&mut rng, &mut model);
    block_on(async {
        for (i, piece) in model.chunks(MIB as usize).enumerate() {
            v.write(i as u64 * MIB, Buf::copy_from(piece), false)
                .await
                .expect("write");
        }
        v.flush().await.expect("flush");
    });
    Run {
        v,
        disks,
        model,
        rng,
    }
}

fn fill(rng: &mut Rng, bytes: &mut [u8]) {
    for chunk in bytes.chunks_mut(8) {
        let w = rng.next_u64().to_le_bytes();
        chunk.copy_from_slice(&w[..chunk.len()]);
    }
}

impl Run {
    /// A seeded block-aligned range of 4 KiB … 128 KiB.
    fn range(&mut self) -> (u64, u64) {
        let blocks = self.v.capacity() / BLOCK_BYTES;
        let len = 1 + self.rng.below(32.min(blocks));
        let at = self.rng.below(blocks - len + 1);
        (at * BLOCK_BYTES, len * BLOCK_BYTES)
    }

    fn read_check(&self, at: u64, len: u64, what: &str) {
        let got = block_on(self.v.read(at, len))
            .unwrap_or_else(|e| panic!("{what}: read {len} bytes at {at}: {e}"));
        assert!(
            got[..] == self.model[at as usize..(at + len) as usize],
            "{what}: wrong bytes read at {at}+{len}"
        );
    }

    /// Seeded writes, reads and flushes with corruption injected between and during them.
    fn churn(&mut self, what: &str) {
        for d in &self.disks {
            d.set_misdirect_per_mille(40);
            d.set_wrong_read_per_mille(40);
        }
        for _ in 0..OPS {
            match self.rng.below(10) {
                0..=3 => {
                    let (at, len) = self.range();
                    let mut bytes = vec![0u8; len as usize];
                    fill(&mut self.rng, &mut bytes);
                    block_on(self.v.write(at, Buf::copy_from(&bytes), false))
                        .unwrap_or_else(|e| panic!("{what}: write at {at}: {e}"));
                    self.model[at as usize..(at + len) as usize].copy_from_slice(&bytes);
                }
                4..=7 => {
                    let (at, len) = self.range();
                    self.read_check(at, len, what);
                }
                8 => block_on(self.v.flush()).unwrap_or_else(|e| panic!("{what}: flush: {e}")),
                _ => {
                    let m = self.rng.below(self.disks.len() as u64) as usize;
                    block_on(self.disks[m].flip_random()).expect("flip");
                }
            }
        }
        for d in &self.disks {
            d.set_misdirect_per_mille(0);
            d.set_wrong_read_per_mille(0);
        }
    }

    /// Bad blocks are counted against the member that returned them, and only there; every
    /// repair is of a counted bad block.
    fn assert_blamed_right(&self, what: &str) {
        let setup = self.v.options().checksums.as_ref().expect("checksums");
        for (m, d) in self.disks.iter().enumerate() {
            let c = setup.counters(m).expect("counters");
            let (errors, repairs) = (c.errors.load(Relaxed), c.repairs.load(Relaxed));
            if d.log().total() == 0 {
                assert_eq!(errors, 0, "{what}: member {m} was never corrupted");
            }
            assert!(
                repairs <= errors,
                "{what}: member {m}: {repairs} repairs of {errors} bad blocks"
            );
        }
    }

    fn corruptions(&self) -> u64 {
        self.disks.iter().map(|d| d.log().total()).sum()
    }
}

fn scrub(v: &Volume, repair: bool) -> ScrubReport {
    block_on(v.scrub(&ScrubControl::new(repair, 0))).expect("scrub")
}

fn corrupt_run(level: Level, n: usize, tolerance: usize, strip: u64) {
    corrupt_run_owned(level, n, tolerance, strip, strip)
}

fn corrupt_run_owned(level: Level, n: usize, tolerance: usize, strip: u64, own_bytes: u64) {
    let g = || named(level, n, None, strip, REGION);
    corrupt_geometry(
        &format!("{level:?} x{n} strip {strip}"),
        &g,
        n,
        tolerance,
        own_bytes,
    );
}

/// The seeded run of [`corrupt_run`] on any geometry of `n` members (regions from byte 0).
fn corrupt_geometry(
    name: &str,
    g: &dyn Fn() -> Geometry,
    n: usize,
    tolerance: usize,
    own_bytes: u64,
) {
    let test = "corruption_within_tolerance_never_reads_wrong_bytes";
    let mut injected = 0;
    for seed in seeds(&format!("{name}{own_bytes}"), 3) {
        let _g = SeedGuard { test, seed };
        let what = format!("{name} owned by {own_bytes} seed {seed}");
        let mut r = build(g(), n, tolerance, own_bytes, seed, None);
        r.churn(&what);
        injected += r.corruptions();
        // Corruption left on the members, then the scrub that finds it.
        for _ in 0..4 {
            let m = r.rng.below(n as u64) as usize;
            block_on(r.disks[m].flip_random()).expect("flip");
        }
        assert!(
            r.v.member_health()
                .iter()
                .map(|h| h.state)
                .collect::<Vec<_>>()
                .iter()
                .all(|s| *s == MemberState::Healthy),
            "{what}: no member failed without a threshold"
        );
        let fixed = scrub(&r.v, true);
        let clean = scrub(&r.v, false);
        assert_eq!(
            (clean.mismatches, clean.unreadable),
            (0, 0),
            "{what}: a second scrub finds nothing (first: {fixed:?})"
        );
        r.read_check(0, r.v.capacity(), &what);
        r.assert_blamed_right(&what);
    }
    assert!(injected > 0, "{name}: corruption was injected");
}

#[test]
fn raid1_corruption_reads_back_exactly() {
    for strip in [4 * KIB, 64 * KIB, MIB] {
        corrupt_run(Level::Raid1, 2, 1, strip);
    }
}

#[test]
fn raid5_corruption_reads_back_exactly() {
    for strip in [4 * KIB, 64 * KIB, MIB] {
        corrupt_run(Level::Raid5, 4, 1, strip);
    }
}

#[test]
fn raid6_corruption_reads_back_exactly() {
    for strip in [4 * KIB, 64 * KIB, MIB] {
        corrupt_run(Level::Raid6, 5, 2, strip);
    }
}

#[test]
fn raid10_corruption_reads_back_exactly() {
    for strip in [4 * KIB, 64 * KIB, MIB] {
        corrupt_run(Level::Raid10, 4, 1, strip);
    }
}

/// Nested levels: RAID 50 and 60, a RAID 5 of mirrored pairs and a mirror of RAID 5s (one
/// bad member per stripe row, or two for RAID 60, anywhere in the tree).
#[test]
fn nested_corruption_reads_back_exactly() {
    for strip in [4 * KIB, 64 * KIB, MIB] {
        for (level, n, tolerance) in [(Level::Raid50, 6, 1), (Level::Raid60, 8, 2)] {
            corrupt_run(level, n, tolerance, strip);
        }
        let pairs = || Geometry::from_tree(common::raid5_of_pairs(strip, 0, REGION));
        corrupt_geometry(
            &format!("raid5 of pairs strip {strip}"),
            &pairs,
            6,
            1,
            strip,
        );
        let raid5s = || Geometry::from_tree(common::mirror_of_raid5s(strip, 0, REGION));
        corrupt_geometry(
            &format!("mirror of raid5s strip {strip}"),
            &raid5s,
            6,
            1,
            strip,
        );
    }
}

/// Bad blocks of more members than the parity rebuilds within one strip, but never two
/// (three) in one row of blocks: each block rebuilds from its row, in reads, in the
/// reads of partial-stripe writes and in scrub.
#[test]
fn parity_bad_blocks_of_many_members_in_one_stripe_read_back_exactly() {
    for strip in [64 * KIB, MIB] {
        corrupt_run_owned(Level::Raid5, 4, 1, strip, BLOCK_BYTES);
        corrupt_run_owned(Level::Raid6, 5, 2, strip, BLOCK_BYTES);
    }
}

fn assert_checksum_error<T: std::fmt::Debug>(r: Result<T, VolumeError>, what: &str) {
    match r {
        Err(VolumeError::Member { source, .. }) if is_mismatch(&source) => {}
        other => panic!("{what}: expected a checksum error, got {other:?}"),
    }
}

#[test]
fn raid0_corruption_reads_as_an_error_never_wrong_bytes() {
    for strip in [4 * KIB, 64 * KIB, MIB] {
        for seed in seeds(&format!("raid0{strip}"), 3) {
            let _g = SeedGuard {
                test: "raid0_corruption_reads_as_an_error_never_wrong_bytes",
                seed,
            };
            let r = build(
                named(Level::Raid0, 2, None, strip, REGION),
                2,
                1,
                strip,
                seed,
                None,
            );
            let row = block_on(r.disks[1].flip_random())
                .expect("flip")
                .expect("a block to flip");
            // Member 1's block `row` in volume bytes: find it by reading every block.
            let bad: Vec<u64> = (0..r.v.capacity() / BLOCK_BYTES)
                .filter(|b| block_on(r.v.read(b * BLOCK_BYTES, BLOCK_BYTES)).is_err())
                .collect();
            assert_eq!(bad.len(), 1, "strip {strip}: one bad block (row {row})");
            assert_checksum_error(
                block_on(r.v.read(bad[0] * BLOCK_BYTES, BLOCK_BYTES)),
                "raid0",
            );
            // Every other block reads exactly.
            for b in (0..r.v.capacity() / BLOCK_BYTES).filter(|b| *b != bad[0]) {
                r.read_check(b * BLOCK_BYTES, BLOCK_BYTES, "raid0");
            }
        }
    }
}

/// `checksum_error_limit`: a member that returns more bad blocks than the limit is failed
/// and the volume keeps serving, degraded, the right bytes; up to the limit it is not failed.
#[test]
fn a_member_past_the_checksum_error_limit_is_failed_and_the_volume_serves_degraded() {
    const LIMIT: u64 = 3;
    for (level, n, strip) in [
        (Level::Raid5, 4, 64 * KIB),
        (Level::Raid1, 2, 4 * KIB),
        (Level::Raid6, 5, MIB),
        (Level::Raid10, 4, 64 * KIB),
    ] {
        let what = format!("{level:?} x{n} strip {strip}, limit {LIMIT}");
        // Member 0 owns every stripe: any of its blocks may go bad.
        let mut r = build(
            named(level, n, None, strip, REGION),
            n,
            n,
            strip,
            7,
            Some(LIMIT),
        );
        let counters = r.v.options().checksums.clone().expect("checksums");
        let errors = || counters.counters(0).expect("counters").errors.load(Relaxed);
        let rows = REGION / BLOCK_BYTES;
        // One bad block at a time, spread over the region; a block client reads never reach
        // (a parity chunk) counts nothing and the next one is tried.
        let mut row = 1;
        while errors() <= LIMIT {
            assert!(
                row < rows,
                "{what}: ran out of blocks ({} errors)",
                errors()
            );
            block_on(r.disks[0].flip_block(row)).expect("flip");
            row += 37;
            // Mirrors read copies in turn: two passes reach every copy's blocks.
            r.read_check(0, r.v.capacity(), &what);
            r.read_check(0, r.v.capacity(), &what);
            let failed = r.v.member_health()[0].state == MemberState::Failed;
            assert_eq!(
                failed,
                errors() > LIMIT,
                "{what}: failed iff past the limit ({} errors counted)",
                errors()
            );
        }
        assert!(
            r.v.member_health()[1..]
                .iter()
                .all(|h| h.state == MemberState::Healthy),
            "{what}: only the bad member fails"
        );
        r.assert_blamed_right(&what);
        // Degraded, the volume still serves writes and reads exactly.
        let bytes = vec![0x6du8; 3 * BLOCK_BYTES as usize];
        block_on(r.v.write(5 * BLOCK_BYTES, Buf::copy_from(&bytes), false)).expect("write");
        r.model[5 * BLOCK_BYTES as usize..8 * BLOCK_BYTES as usize].copy_from_slice(&bytes);
        r.read_check(0, r.v.capacity(), &what);
    }
}
