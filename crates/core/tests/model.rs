//! Model-based tests: random batches of concurrent reads, writes, trims, write-zeroes and
//! flushes, with member deaths and transient read errors kept within the tree's tolerance,
//! against a plain `Vec<u8>` model of the volume. Every read must match the model.
//!
//! Replay a failure with the printed `NBRAID_SEED=...`; scale up with `NBRAID_SOAK=...`.

mod common;

use common::*;
use futures::executor::block_on;
use futures::future::{join_all, BoxFuture};
use futures::FutureExt;
use nbraid_core::{Buf, CacheMode, MemberState, MemoryMember, ReadPolicy, Volume, VolumeOptions};
use nbraid_layout::{Geometry, Level, Node, ParityLayout};
use nbraid_sim::{FaultOps, Faulty};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;
use std::time::Duration;

/// A volume shape to test: geometry and member count/size.
struct Case {
    name: &'static str,
    members: usize,
    member_len: u64,
    geometry: Geometry,
}

/// Bytes of every member.
const MEMBER_BYTES: u64 = 512 * KIB;

/// How a case's tree is built over members of `MEMBER_BYTES`.
enum Shape {
    /// A level by name: members, spans, strip.
    Named(Level, usize, Option<usize>, u64),
    /// One parity group over whole members: strip, parity chunks, layout, members.
    Parity(u64, usize, ParityLayout, usize),
    /// Any other tree, over this many members.
    Tree(usize, fn() -> Node),
}

/// The shapes tested, by name (tests pick theirs by prefix; the name seeds the runs).
const CASES: [(&str, Shape); 19] = [
    (
        "jbod (unequal regions, offset starts)",
        Shape::Tree(3, jbod_unequal),
    ),
    (
        "raid0 x3, 4K strip",
        Shape::Named(Level::Raid0, 3, None, 4 * KIB),
    ),
    (
        "raid0 x4, 16K strip",
        Shape::Named(Level::Raid0, 4, None, 16 * KIB),
    ),
    ("raid1 2-way", Shape::Named(Level::Raid1, 2, None, 64 * KIB)),
    ("raid1 3-way", Shape::Named(Level::Raid1, 3, None, 64 * KIB)),
    (
        "raid10 x4 (2 spans), 8K strip",
        Shape::Named(Level::Raid10, 4, Some(2), 8 * KIB),
    ),
    (
        "raid10 x6 (stripe over 3-way mirrors), 4K strip",
        Shape::Named(Level::Raid10, 6, Some(2), 4 * KIB),
    ),
    (
        "raid0+1 (mirror of stripes)",
        Shape::Tree(4, mirror_of_stripes),
    ),
    ("concat of mirrors", Shape::Tree(4, concat_of_mirrors)),
    (
        "raid5 x4, 4K strip",
        Shape::Named(Level::Raid5, 4, None, 4 * KIB),
    ),
    (
        "raid5 x3, 16K strip, left-asymmetric",
        Shape::Parity(16 * KIB, 1, ParityLayout::LeftAsymmetric, 3),
    ),
    (
        "raid5 x6, 8K strip, right-symmetric",
        Shape::Parity(8 * KIB, 1, ParityLayout::RightSymmetric, 6),
    ),
    (
        "raid6 x5, 8K strip",
        Shape::Named(Level::Raid6, 5, None, 8 * KIB),
    ),
    (
        "raid6 x7, 4K strip, right-asymmetric",
        Shape::Parity(4 * KIB, 2, ParityLayout::RightAsymmetric, 7),
    ),
    (
        "raid6 x4, 4K strip, left-asymmetric",
        Shape::Parity(4 * KIB, 2, ParityLayout::LeftAsymmetric, 4),
    ),
    (
        "raid50 x6 (2 spans), 4K strip",
        Shape::Named(Level::Raid50, 6, Some(2), 4 * KIB),
    ),
    (
        "raid60 x8 (2 spans), 4K strip",
        Shape::Named(Level::Raid60, 8, Some(2), 4 * KIB),
    ),
    (
        "parity over mirrors (raid5 of 3 2-way mirrors)",
        Shape::Tree(6, parity_over_mirrors),
    ),
    (
        "parity mirror (2-way mirror of raid5 x3)",
        Shape::Tree(6, mirror_of_parity),
    ),
];

fn cases() -> Vec<Case> {
    let m = MEMBER_BYTES;
    CASES
        .iter()
        .map(|(name, shape)| {
            let (members, geometry) = match *shape {
                Shape::Named(level, n, spans, strip) => (n, named(level, n, spans, strip, m)),
                Shape::Parity(strip, parity, layout, n) => (
                    n,
                    Geometry::from_tree(parity_group(strip, parity, layout, 0..n)),
                ),
                Shape::Tree(n, tree) => (n, Geometry::from_tree(tree())),
            };
            Case {
                name,
                members,
                member_len: m,
                geometry,
            }
        })
        .collect()
}

/// Member `i`, whole.
fn leaf(i: usize) -> Node {
    Node::member(i, 0, MEMBER_BYTES)
}

/// A parity group over the whole `members`.
fn parity_group(
    strip: u64,
    parity: usize,
    layout: ParityLayout,
    members: std::ops::Range<usize>,
) -> Node {
    Node::parity(strip, parity, layout, members.map(leaf).collect()).unwrap()
}

/// Three members of unequal regions, two not starting at byte 0, concatenated.
fn jbod_unequal() -> Node {
    Node::concat(vec![
        Node::member(0, 8 * KIB, 200 * KIB),
        Node::member(1, 0, 300 * KIB),
        Node::member(2, 64 * KIB, 448 * KIB),
    ])
    .unwrap()
}

fn mirror_of_stripes() -> Node {
    Node::mirror(vec![
        Node::stripe(8 * KIB, vec![leaf(0), leaf(1)]).unwrap(),
        Node::stripe(8 * KIB, vec![leaf(2), leaf(3)]).unwrap(),
    ])
    .unwrap()
}

fn concat_of_mirrors() -> Node {
    Node::concat(vec![
        Node::mirror(vec![leaf(0), leaf(1)]).unwrap(),
        Node::mirror(vec![leaf(2), leaf(3)]).unwrap(),
    ])
    .unwrap()
}

fn parity_over_mirrors() -> Node {
    let mirrors = (0..3)
        .map(|i| Node::mirror(vec![leaf(2 * i), leaf(2 * i + 1)]).unwrap())
        .collect();
    Node::parity(8 * KIB, 1, ParityLayout::LeftSymmetric, mirrors).unwrap()
}

fn mirror_of_parity() -> Node {
    Node::mirror(vec![
        parity_group(4 * KIB, 1, ParityLayout::LeftSymmetric, 0..3),
        parity_group(4 * KIB, 1, ParityLayout::LeftSymmetric, 3..6),
    ])
    .unwrap()
}

#[derive(Debug)]
enum Op {
    Read(u64, u64),
    Write(u64, Vec<u8>, bool),
    Trim(u64, u64),
    Zeroes(u64, u64, bool),
    Flush,
}

/// Picks an aligned range that overlaps none of `taken` (the batch's writes), or None.
fn pick_range(
    rng: &mut SmallRng,
    cap: u64,
    block: u64,
    max_len: u64,
    taken: &[(u64, u64)],
) -> Option<(u64, u64)> {
    for _ in 0..20 {
        let blocks = cap / block;
        let len_blocks = if rng.gen_bool(0.1) {
            rng.gen_range(1..=(max_len / block).min(blocks))
        } else {
            rng.gen_range(1..=(16 * KIB / block).min(blocks))
        };
        let start = rng.gen_range(0..=blocks - len_blocks) * block;
        let len = len_blocks * block;
        if taken
            .iter()
            .all(|&(s, l)| start + len <= s || s + l <= start)
        {
            return Some((start, len));
        }
    }
    None
}

/// Returns (members that died, mirror repairs, requests) for coverage checks.
fn run_case(case: &Case, seed: u64, rounds: u64) -> (usize, u64, u64) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut run = ModelRun::new(case, seed, &mut rng);
    for round in 0..rounds {
        run.maybe_fail_a_member(&mut rng);
        let ops = run.draw_batch(&mut rng);
        let results = block_on(join_all(ops.iter().map(|op| perform(&run.vol, op))));
        run.check_batch(round, &ops, results);
    }
    run.check_final();
    let c = run.vol.counters();
    (
        run.dead.len(),
        c.repairs,
        c.reads + c.writes + c.trims + c.write_zeroes + c.flushes,
    )
}

/// One seeded run of a case: the volume, its members' fault switches, the model of what it
/// holds, and the members that may have lost data.
struct ModelRun<'a> {
    case: &'a Case,
    vol: Volume,
    faulty: Vec<Arc<Faulty<MemoryMember>>>,
    model: Vec<u8>,
    block_bytes: u64,
    /// The longest request (a tenth of them may reach it).
    max_len_bytes: u64,
    /// Members that may lose data: dead ones and ones with injected read errors.
    risky: Vec<usize>,
    dead: Vec<usize>,
}

impl<'a> ModelRun<'a> {
    /// The volume over fault-injecting members, with seeded options.
    fn new(case: &'a Case, seed: u64, rng: &mut SmallRng) -> ModelRun<'a> {
        let block_bytes = if rng.gen_bool(0.3) { 4096 } else { 512 };
        let policy = ReadPolicy::ALL[rng.gen_range(0..3)];
        let seq_piece = [4 * KIB, 8 * KIB, MIB][rng.gen_range(0..3)];
        let (faulty, members) = faulty_members(case.members, case.member_len, seed, false);
        if rng.gen_bool(0.5) {
            for f in &faulty {
                f.set_latency(Duration::ZERO, Duration::from_micros(200));
            }
        }
        // Write-through, a small write-back cache (evictions) or a large one (flush drains).
        let cache = match rng.gen_range(0..3) {
            0 => CacheMode::WriteThrough,
            1 => CacheMode::WriteBack { bytes: 64 * KIB },
            _ => CacheMode::WriteBack { bytes: 4 * MIB },
        };
        let opts = VolumeOptions {
            block_size: block_bytes,
            read_policy: policy,
            mirror_seq_piece: seq_piece,
            // Zero-filled members are in sync either way; not saying so exercises
            // reconstruct-writes.
            members_known_zero: rng.gen_bool(0.7),
            cache,
            // Never by age, by the flusher thread racing the requests, or rarely.
            cache_max_age: [
                None,
                Some(Duration::from_millis(1)),
                Some(Duration::from_secs(1)),
            ][rng.gen_range(0..3)],
            checksums: None,
            ..VolumeOptions::default()
        };
        let vol = Volume::new(case.geometry.clone(), members, opts).expect("assemble");
        let cap = vol.capacity();
        assert!(cap > 0);
        ModelRun {
            case,
            vol,
            faulty,
            model: vec![0u8; cap as usize],
            block_bytes,
            max_len_bytes: (256 * KIB).min(cap),
            risky: Vec::new(),
            dead: Vec::new(),
        }
    }

    /// Now and then a member dies or returns read errors on a range, within tolerance.
    fn maybe_fail_a_member(&mut self, rng: &mut SmallRng) {
        if !rng.gen_bool(0.03) {
            return;
        }
        let m = rng.gen_range(0..self.case.members);
        let mut with = self.risky.clone();
        with.push(m);
        if self.risky.contains(&m) || !self.case.geometry.survives(&with) {
            return;
        }
        if rng.gen_bool(0.5) {
            self.faulty[m].kill();
            self.dead.push(m);
        } else {
            let start = rng.gen_range(0..self.case.member_len / 512) * 512;
            let times = rng.gen_range(1..4);
            self.faulty[m].fail_range_times(FaultOps::READ, start..start + 64 * KIB, times);
        }
        self.risky.push(m);
    }

    /// A batch of up to eight concurrent requests: reads may overlap reads but not writes;
    /// writes (trims, write-zeroes) overlap nothing, so the model's order is theirs.
    fn draw_batch(&self, rng: &mut SmallRng) -> Vec<Op> {
        let cap = self.vol.capacity();
        let n = rng.gen_range(1..=8);
        let mut ops = Vec::new();
        let mut taken: Vec<(u64, u64)> = Vec::new(); // ranges written in this batch
        let mut reads: Vec<(u64, u64)> = Vec::new();
        for _ in 0..n {
            let kind = rng.gen_range(0..100);
            if kind < 6 {
                ops.push(Op::Flush);
                continue;
            }
            let busy: Vec<(u64, u64)> = if kind < 45 {
                taken.clone()
            } else {
                taken.iter().chain(reads.iter()).copied().collect()
            };
            let (block, max_len) = (self.block_bytes, self.max_len_bytes);
            let Some((off, len)) = pick_range(rng, cap, block, max_len, &busy) else {
                continue;
            };
            if kind < 45 {
                reads.push((off, len));
                ops.push(Op::Read(off, len));
                continue;
            }
            taken.push((off, len));
            if kind < 84 {
                let mut data = vec![0u8; len as usize];
                rng.fill(&mut data[..]);
                ops.push(Op::Write(off, data, rng.gen_bool(0.1)));
            } else if kind < 92 {
                ops.push(Op::Trim(off, len));
            } else {
                ops.push(Op::Zeroes(off, len, rng.gen_bool(0.2)));
            }
        }
        ops
    }

    /// Every request succeeded, every read matches the model as it was before the batch,
    /// and the model takes the batch's writes.
    fn check_batch(&mut self, round: u64, ops: &[Op], results: Vec<OpResult>) {
        let before = self.model.clone();
        let (name, dead, risky) = (self.case.name, &self.dead, &self.risky);
        for (op, r) in ops.iter().zip(results) {
            let got = r.unwrap_or_else(|e| {
                panic!("{name}: round {round}: request failed within tolerance (dead {dead:?}, risky {risky:?}): {e}")
            });
            match op {
                Op::Read(o, l) => {
                    let got = got.expect("read returns data");
                    let want = &before[*o as usize..(*o + *l) as usize];
                    if &got[..] != want {
                        let first = got.iter().zip(want).position(|(a, b)| a != b).unwrap();
                        panic!(
                            "{name}: round {round}: read {o}+{l} differs from the model at volume byte {} (dead {dead:?})",
                            o + first as u64
                        );
                    }
                }
                Op::Write(o, d, _) => {
                    self.model[*o as usize..*o as usize + d.len()].copy_from_slice(d)
                }
                Op::Trim(o, l) | Op::Zeroes(o, l, _) => {
                    self.model[*o as usize..(*o + *l) as usize].fill(0)
                }
                Op::Flush => {}
            }
        }
    }

    /// A final full read-back matches the model, no healthy member was failed, and the
    /// volume is available.
    fn check_final(&self) {
        let (name, dead, risky) = (self.case.name, &self.dead, &self.risky);
        let cap = self.vol.capacity();
        let mut at = 0;
        while at < cap {
            let len = (4 * MIB).min(cap - at);
            let got = block_on(self.vol.read(at, len)).expect("final read");
            let want = &self.model[at as usize..(at + len) as usize];
            assert!(
                got[..] == *want,
                "{name}: final read-back at {at} differs from byte {:?} (dead {dead:?}, risky {risky:?})",
                got.iter()
                    .zip(want)
                    .position(|(a, b)| a != b)
                    .map(|p| at + p as u64)
            );
            at += len;
        }
        for (i, h) in self.vol.member_health().iter().enumerate() {
            if h.state == MemberState::Failed {
                assert!(
                    dead.contains(&i),
                    "{name}: member {i} failed but only {dead:?} died"
                );
            }
        }
        assert!(self.vol.is_available());
    }
}

/// What a request returned: a read's data, or nothing; or its error.
type OpResult = Result<Option<Buf>, String>;

/// Carries out `op` on `vol`.
fn perform<'v>(vol: &'v Volume, op: &'v Op) -> BoxFuture<'v, OpResult> {
    async move {
        let r = match op {
            Op::Read(o, l) => vol.read(*o, *l).await.map(Some),
            Op::Write(o, d, fua) => vol.write(*o, Buf::copy_from(d), *fua).await.map(|_| None),
            Op::Trim(o, l) => vol.trim(*o, *l).await.map(|_| None),
            Op::Zeroes(o, l, fua) => vol.write_zeroes(*o, *l, *fua).await.map(|_| None),
            Op::Flush => vol.flush().await.map(|_| None),
        };
        r.map_err(|e| format!("{op:?}: {e}"))
    }
    .boxed()
}

/// Runs the matching cases; returns totals of (deaths, repairs, requests).
fn run_all(
    filter: impl Fn(&Case) -> bool,
    test: &'static str,
    seeds_per_case: u64,
    rounds: u64,
) -> (usize, u64, u64) {
    let mut total = (0, 0, 0);
    for case in cases().into_iter().filter(|c| filter(c)) {
        for seed in seeds(&format!("{test}/{}", case.name), seeds_per_case) {
            let _g = SeedGuard { test, seed };
            let (d, r, n) = run_case(&case, seed, rounds);
            total = (total.0 + d, total.1 + r, total.2 + n);
        }
    }
    eprintln!(
        "{test}: {} member deaths, {} mirror repairs, {} requests",
        total.0, total.1, total.2
    );
    total
}

/// The default seeds must exercise the fault paths (not checked when replaying one seed).
fn assert_faults_hit(total: (usize, u64, u64)) {
    if std::env::var("NBRAID_SEED").is_err() {
        assert!(total.0 > 0, "no member died in any run: {total:?}");
        assert!(
            total.1 > 0,
            "no mirror repair happened in any run: {total:?}"
        );
    }
}

#[test]
fn model_jbod_and_raid0() {
    run_all(
        |c| c.name.starts_with("jbod") || c.name.starts_with("raid0 "),
        "model_jbod_and_raid0",
        3,
        150,
    );
}

#[test]
fn model_raid1() {
    assert_faults_hit(run_all(
        |c| c.name.starts_with("raid1 "),
        "model_raid1",
        4,
        150,
    ));
}

/// The default seeds must have killed members (not checked when replaying one seed).
fn assert_deaths(total: (usize, u64, u64)) {
    if std::env::var("NBRAID_SEED").is_err() {
        assert!(total.0 > 0, "no member died in any run: {total:?}");
    }
}

#[test]
fn model_raid5() {
    assert_deaths(run_all(
        |c| c.name.starts_with("raid5 "),
        "model_raid5",
        3,
        150,
    ));
}

#[test]
fn model_raid6() {
    assert_deaths(run_all(
        |c| c.name.starts_with("raid6 "),
        "model_raid6",
        3,
        150,
    ));
}

#[test]
fn model_raid50_and_raid60() {
    assert_deaths(run_all(
        |c| c.name.starts_with("raid50") || c.name.starts_with("raid60"),
        "model_raid50_and_raid60",
        3,
        150,
    ));
}

#[test]
fn model_parity_and_mirror_nestings() {
    assert_deaths(run_all(
        |c| c.name.starts_with("parity"),
        "model_parity_and_mirror_nestings",
        3,
        150,
    ));
}

#[test]
fn model_raid10_and_nestings() {
    assert_faults_hit(run_all(
        |c| {
            c.name.starts_with("raid10")
                || c.name.starts_with("raid0+1")
                || c.name.starts_with("concat")
        },
        "model_raid10_and_nestings",
        3,
        150,
    ));
}
