//! RAID 5/6/50/60: exact member I/O counts on a healthy array (the issue's contract),
//! integrity with every single (RAID 5/50) and every pair (RAID 6/60) of members failed
//! (mdadm's `01r5integ` / `01raid6integ`), degraded writes, read errors served by parity,
//! resync, and clear errors beyond tolerance.
//!
//! Replay with the printed `NBRAID_SEED=...`; scale with `NBRAID_SOAK=...`.

mod common;

use common::*;
use futures::executor::block_on;
use futures::future::join_all;
use nbraid_core::{
    Buf, CacheMode, CounterSnapshot, Member, MemberResult, MemberState, MemoryMember, Volume,
    VolumeError, VolumeOptions,
};
use nbraid_layout::{Geometry, Level};
use nbraid_sim::FaultOps;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;

fn opts(cache: CacheMode, members_known_zero: bool) -> VolumeOptions {
    VolumeOptions {
        block_size: 4096,
        cache,
        members_known_zero,
        // Exact counts: no background destage in the middle of a test.
        cache_max_age: None,
        ..VolumeOptions::default()
    }
}

fn memory_members(n: usize, len: u64) -> Vec<Arc<dyn Member>> {
    (0..n)
        .map(|i| Arc::new(MemoryMember::new(format!("m{i}"), len)) as Arc<dyn Member>)
        .collect()
}

/// Sum over members of (reads, writes, read bytes, write bytes) since `before`.
fn delta(v: &Volume, before: &[CounterSnapshot]) -> (u64, u64, u64, u64) {
    v.member_health()
        .iter()
        .map(|h| h.counters)
        .collect::<Vec<_>>()
        .iter()
        .zip(before)
        .fold((0, 0, 0, 0), |acc, (a, b)| {
            (
                acc.0 + a.reads - b.reads,
                acc.1 + a.writes - b.writes,
                acc.2 + a.read_bytes - b.read_bytes,
                acc.3 + a.write_bytes - b.write_bytes,
            )
        })
}

fn random_bytes(rng: &mut SmallRng, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    rng.fill(&mut v[..]);
    v
}

/// (level, members, parity per span, data chunks per span).
const SHAPES: [(Level, usize, u64, usize); 7] = [
    (Level::Raid5, 4, 1, 3),
    (Level::Raid5, 5, 1, 4),
    (Level::Raid5, 8, 1, 7),
    (Level::Raid6, 5, 2, 3),
    (Level::Raid6, 6, 2, 4),
    (Level::Raid6, 8, 2, 6),
    (Level::Raid6, 12, 2, 10),
];

#[test]
fn random_4k_write_costs_min_of_rmw_and_rcw() {
    for seed in seeds("random_4k_write_costs", 1) {
        let _g = SeedGuard {
            test: "random_4k_write_costs_min_of_rmw_and_rcw",
            seed,
        };
        let mut rng = SmallRng::seed_from_u64(seed);
        for (level, n, p, k) in SHAPES {
            for cache in [CacheMode::WriteThrough, CacheMode::WriteBack { bytes: MIB }] {
                let strip = 64 * KIB;
                let v = Volume::new(
                    named(level, n, None, strip, 2 * MIB),
                    memory_members(n, 2 * MIB),
                    opts(cache, true),
                )
                .unwrap();
                // md's counting: RMW reads the old chunk and P (+Q); RCW the k-1 others.
                let reads = (1 + p).min(k as u64 - 1);
                let writes = 1 + p;
                for _ in 0..20 {
                    let off = rng.gen_range(0..v.capacity() / 4096) * 4096;
                    let before = v
                        .member_health()
                        .iter()
                        .map(|h| h.counters)
                        .collect::<Vec<_>>();
                    let data = random_bytes(&mut rng, 4096);
                    block_on(v.write(off, Buf::copy_from(&data), false)).unwrap();
                    block_on(v.flush()).unwrap();
                    let d = delta(&v, &before);
                    assert_eq!(
                        d,
                        (reads, writes, reads * 4096, writes * 4096),
                        "{level} x{n} {cache:?}: 4K write at {off}: (reads, writes, read bytes, write bytes)"
                    );
                    let back = block_on(v.read(off, 4096)).unwrap();
                    assert_eq!(&back[..], &data[..]);
                }
            }
        }
    }
}

#[test]
fn the_issue_figures_4_and_6() {
    // RAID 5 with ≥ 4 members: 2 reads + 2 writes; RAID 6 with ≥ 6 members: 3 + 3 (with 5
    // members RCW needs only the 2 other data chunks: 2 reads + 3 writes, "never more").
    for (level, n, want) in [
        (Level::Raid5, 4, (2, 2)),
        (Level::Raid5, 6, (2, 2)),
        (Level::Raid6, 5, (2, 3)),
        (Level::Raid6, 6, (3, 3)),
        (Level::Raid6, 7, (3, 3)),
    ] {
        let v = Volume::new(
            named(level, n, None, 64 * KIB, MIB),
            memory_members(n, MIB),
            opts(CacheMode::WriteThrough, true),
        )
        .unwrap();
        let before = v
            .member_health()
            .iter()
            .map(|h| h.counters)
            .collect::<Vec<_>>();
        block_on(v.write(200 * KIB, Buf::zeroed(4096), false)).unwrap();
        let d = delta(&v, &before);
        assert_eq!((d.0, d.1), want, "{level} x{n}");
    }
}

#[test]
fn full_stripe_write_reads_nothing_and_writes_each_member_once() {
    for (level, n, _, k) in SHAPES {
        for cache in [
            CacheMode::WriteThrough,
            CacheMode::WriteBack { bytes: 4 * MIB },
        ] {
            for known_zero in [true, false] {
                let strip = 16 * KIB;
                let v = Volume::new(
                    named(level, n, None, strip, MIB),
                    memory_members(n, MIB),
                    opts(cache, known_zero),
                )
                .unwrap();
                let width = strip * k as u64;
                let before = v
                    .member_health()
                    .iter()
                    .map(|h| h.counters)
                    .collect::<Vec<_>>();
                block_on(v.write(3 * width, Buf::zeroed(width as usize), false)).unwrap();
                let d = delta(&v, &before);
                assert_eq!(
                    d,
                    (0, n as u64, 0, n as u64 * strip),
                    "{level} x{n} {cache:?} known zero {known_zero}"
                );
                // Nothing left in the cache to write.
                let before = v
                    .member_health()
                    .iter()
                    .map(|h| h.counters)
                    .collect::<Vec<_>>();
                block_on(v.flush()).unwrap();
                assert_eq!(delta(&v, &before), (0, 0, 0, 0));
            }
        }
    }
    // RAID 50/60: a full volume stripe writes every member once.
    for (level, n) in [(Level::Raid50, 6), (Level::Raid60, 8)] {
        let v = Volume::new(
            named(level, n, Some(2), 16 * KIB, MIB),
            memory_members(n, MIB),
            opts(CacheMode::WriteThrough, true),
        )
        .unwrap();
        let width = v.geometry().full_stripe_width().unwrap();
        let before = v
            .member_health()
            .iter()
            .map(|h| h.counters)
            .collect::<Vec<_>>();
        block_on(v.write(width, Buf::zeroed(width as usize), false)).unwrap();
        assert_eq!(delta(&v, &before), (0, n as u64, 0, n as u64 * 16 * KIB));
    }
}

/// A write-back request of several whole stripes (written straight, `raid/whole.rs`, where
/// the members are healthy; wide stripes folding parity in groups): each chunk written once, nothing read, nothing left cached; every
/// byte reads back, healthy and with any member (RAID 6: any two) failed; and a member whose
/// writes fail midway leaves the stripes written one by one, degraded, every byte right.
#[test]
fn whole_stripes_of_a_request_write_each_chunk_once_and_read_back_with_members_failed() {
    // 64 KiB strips on 10 and 12 members: parity folded in groups of chunks (FOLD_BYTES).
    for (level, n, strip) in [
        (Level::Raid5, 3, 16 * KIB),
        (Level::Raid5, 4, 16 * KIB),
        (Level::Raid6, 4, 16 * KIB),
        (Level::Raid5, 8, 16 * KIB),
        (Level::Raid6, 8, 16 * KIB),
        (Level::Raid5, 10, 64 * KIB),
        (Level::Raid6, 12, 64 * KIB),
    ] {
        let k = (n - level.parity()) as u64;
        let width = strip * k;
        for known_zero in [true, false] {
            let what = format!("{level} x{n} known zero {known_zero}");
            let volume = || {
                let v = Volume::new(
                    named(level, n, None, strip, MIB),
                    memory_members(n, MIB),
                    opts(CacheMode::WriteBack { bytes: 4 * MIB }, known_zero),
                )
                .unwrap();
                let mut rng = SmallRng::seed_from_u64(n as u64);
                // A partial stripe at either end (cached) around five whole ones.
                let data = random_bytes(&mut rng, (5 * width + 2 * 4 * KIB) as usize);
                let at = 2 * width - 4 * KIB;
                let before = v
                    .member_health()
                    .iter()
                    .map(|h| h.counters)
                    .collect::<Vec<_>>();
                block_on(v.write(at, Buf::copy_from(&data), false)).unwrap();
                (v, data, at, before)
            };
            let (v, data, at, before) = volume();
            assert_eq!(
                delta(&v, &before),
                (0, 5 * n as u64, 0, 5 * n as u64 * strip),
                "{what}: the whole stripes, each chunk once"
            );
            let got = block_on(v.read(at, data.len() as u64)).unwrap();
            assert!(got[..] == data[..], "{what}: read back");
            block_on(v.flush()).unwrap();
            for failed in 0..n {
                let (v, data, at, _) = volume();
                block_on(v.flush()).unwrap();
                v.fail_member(failed, "test");
                if level == Level::Raid6 {
                    v.fail_member((failed + 1) % n, "test");
                }
                let got = block_on(v.read(at, data.len() as u64)).unwrap();
                assert!(got[..] == data[..], "{what}: member {failed} failed");
            }
        }
        // A member's writes fail over the whole stripes: written again stripe by stripe,
        // that member failed, the rest rebuilt from parity.
        let (faulty, members) = faulty_members(n, MIB, 7, false);
        let v = Volume::new(
            named(level, n, None, strip, MIB),
            members,
            opts(CacheMode::WriteBack { bytes: 4 * MIB }, true),
        )
        .unwrap();
        faulty[1].fail_range(FaultOps::WRITE, 0..MIB);
        let mut rng = SmallRng::seed_from_u64(3);
        let data = random_bytes(&mut rng, (4 * width) as usize);
        block_on(v.write(width, Buf::copy_from(&data), false)).unwrap();
        assert_eq!(
            v.member_health()[1].state,
            MemberState::Failed,
            "{level} x{n}"
        );
        let got = block_on(v.read(width, data.len() as u64)).unwrap();
        assert!(
            got[..] == data[..],
            "{level} x{n}: a failing member's stripes"
        );
    }
}

/// A stripe with bytes waiting in the write-back cache, then written whole by a request
/// that covers it and its neighbours (`raid/whole.rs`): the cached bytes are superseded, never
/// destaged over the new ones later, and parity agrees with the new data (read back with each
/// member failed after the flush).
#[test]
fn whole_stripes_written_over_cached_bytes_supersede_them() {
    for (level, n) in [(Level::Raid5, 4), (Level::Raid6, 5)] {
        let strip = 16 * KIB;
        let width = strip * (n - level.parity()) as u64;
        for failed in 0..n {
            let v = Volume::new(
                named(level, n, None, strip, MIB),
                memory_members(n, MIB),
                opts(CacheMode::WriteBack { bytes: 4 * MIB }, true),
            )
            .unwrap();
            let mut rng = SmallRng::seed_from_u64(n as u64);
            let old = random_bytes(&mut rng, 4096);
            block_on(v.write(2 * width + 8 * KIB, Buf::copy_from(&old), false)).unwrap();
            assert!(
                v.cache_usage().dirty_bytes > 0,
                "{level}: the partial write is cached"
            );
            let new = random_bytes(&mut rng, (3 * width) as usize);
            block_on(v.write(width, Buf::copy_from(&new), false)).unwrap();
            assert_eq!(
                v.cache_usage().dirty_bytes,
                0,
                "{level}: the whole stripe superseded the cached bytes"
            );
            block_on(v.flush()).unwrap();
            v.fail_member(failed, "test");
            let got = block_on(v.read(width, new.len() as u64)).unwrap();
            assert!(got[..] == new[..], "{level} x{n}: member {failed} failed");
        }
    }
}

#[test]
fn sequential_4k_writes_through_the_cache_become_full_stripes() {
    for (level, n, spans, p) in [
        (Level::Raid5, 4, None, 1u64),
        (Level::Raid5, 8, None, 1),
        (Level::Raid6, 6, None, 2),
        (Level::Raid50, 6, Some(2), 1),
        (Level::Raid60, 8, Some(2), 2),
    ] {
        for start_blocks in [0u64, 5] {
            let g = named(level, n, spans, 64 * KIB, 4 * MIB);
            let v = Volume::new(
                g,
                memory_members(n, 4 * MIB),
                opts(CacheMode::WriteBack { bytes: 2 * MIB }, true),
            )
            .unwrap();
            let width = v.geometry().full_stripe_width().unwrap();
            let start = start_blocks * 4096;
            let logical = (v.capacity() - start) / 4096 * 4096 - width;
            let before = v
                .member_health()
                .iter()
                .map(|h| h.counters)
                .collect::<Vec<_>>();
            let mut at = start;
            let mut data = Buf::zeroed(4096);
            let mut past_first = None;
            while at < start + logical {
                data[..8].copy_from_slice(&at.to_le_bytes());
                data = block_on(v.write(at, data, false)).unwrap();
                at += 4096;
                if past_first.is_none() && at >= width.max(start.next_multiple_of(width)) {
                    past_first = Some(
                        v.member_health()
                            .iter()
                            .map(|h| h.counters)
                            .collect::<Vec<_>>(),
                    );
                }
            }
            let mid = v
                .member_health()
                .iter()
                .map(|h| h.counters)
                .collect::<Vec<_>>();
            block_on(v.flush()).unwrap();
            let d = delta(&v, &before);
            let ideal =
                logical as f64 * n as f64 / (n as f64 - (p * spans.unwrap_or(1) as u64) as f64);
            let ratio = d.3 as f64 / ideal;
            assert!(
                (0.98..=1.05).contains(&ratio),
                "{level} x{n} from block {start_blocks}: member bytes written {} vs ideal {ideal} ({ratio:.3})",
                d.3
            );
            // No reads at all while streaming past the first stripe.
            let mid_d: u64 = mid
                .iter()
                .zip(past_first.as_ref().unwrap())
                .map(|(a, b)| a.reads - b.reads)
                .sum();
            assert_eq!(mid_d, 0, "{level} x{n}: member reads while streaming");
            if start_blocks == 0 {
                assert_eq!(d.0, 0, "{level} x{n}: aligned stream reads nothing");
            }
            // And the data is there.
            for probe in [
                start,
                start + logical / 2 / 4096 * 4096,
                start + logical - 4096,
            ] {
                let b = block_on(v.read(probe, 4096)).unwrap();
                assert_eq!(u64::from_le_bytes(b[..8].try_into().unwrap()), probe);
            }
        }
    }
}

#[test]
fn unknown_sync_uses_reconstruct_write_until_resync() {
    let n = 8;
    let v = Volume::new(
        named(Level::Raid5, n, None, 64 * KIB, MIB),
        memory_members(n, MIB),
        opts(CacheMode::WriteThrough, false),
    )
    .unwrap();
    let before = v
        .member_health()
        .iter()
        .map(|h| h.counters)
        .collect::<Vec<_>>();
    block_on(v.write(0, Buf::zeroed(4096), false)).unwrap();
    // RCW: the 6 other data chunks are read, not old data + P.
    assert_eq!(delta(&v, &before).0, 6);
    block_on(v.resync()).unwrap();
    let before = v
        .member_health()
        .iter()
        .map(|h| h.counters)
        .collect::<Vec<_>>();
    block_on(v.write(0, Buf::zeroed(4096), false)).unwrap();
    assert_eq!(delta(&v, &before).0, 2, "after resync: RMW");
}

/// A partial stripe does not wait for a flush forever: the flusher thread writes it once it
/// is older than `cache_max_age`.
#[test]
fn aged_partial_stripes_are_destaged_in_the_background() {
    let n = 4;
    let v = Volume::new(
        named(Level::Raid5, n, None, 64 * KIB, MIB),
        memory_members(n, MIB),
        VolumeOptions {
            cache_max_age: Some(std::time::Duration::from_millis(1)),
            members_known_zero: true,
            ..VolumeOptions::default()
        },
    )
    .unwrap();
    let before = v
        .member_health()
        .iter()
        .map(|h| h.counters)
        .collect::<Vec<_>>();
    block_on(v.write(8192, Buf::zeroed(4096), false)).unwrap();
    // Liveness, not timing: wait (up to a minute) for the background destage.
    let start = std::time::Instant::now();
    while delta(&v, &before).1 < 2 {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(60),
            "the partial stripe was never destaged"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert_eq!(delta(&v, &before).1, 2, "data + parity");
    let before = v
        .member_health()
        .iter()
        .map(|h| h.counters)
        .collect::<Vec<_>>();
    block_on(v.flush()).unwrap();
    assert_eq!(delta(&v, &before).1, 0, "nothing left to destage");
}

/// The flusher's step, driven by hand (as the simulators do, with no thread): only stripes
/// cached at least `older_than` are written, in every parity group of the tree (RAID 50).
#[test]
fn destage_aged_writes_the_stripes_old_enough_in_every_group() {
    let n = 6;
    let v = Volume::new(
        named(Level::Raid50, n, Some(2), 64 * KIB, MIB),
        memory_members(n, MIB),
        VolumeOptions {
            cache_max_age: None,
            members_known_zero: true,
            ..VolumeOptions::default()
        },
    )
    .unwrap();
    // One 4 KiB write into each span (the spans alternate every full stripe of a span: two
    // data strips of 64 KiB).
    block_on(v.write(8192, Buf::zeroed(4096), false)).unwrap();
    block_on(v.write(128 * KIB + 8192, Buf::zeroed(4096), false)).unwrap();
    assert_eq!(v.cache_usage().dirty_bytes, 8192);
    let before = v
        .member_health()
        .iter()
        .map(|h| h.counters)
        .collect::<Vec<_>>();
    block_on(v.destage_aged(std::time::Duration::from_secs(3600)));
    assert_eq!(delta(&v, &before).1, 0, "nothing is an hour old");
    assert_eq!(v.cache_usage().dirty_bytes, 8192);
    block_on(v.destage_aged(std::time::Duration::ZERO));
    assert_eq!(delta(&v, &before).1, 4, "data + parity in each span");
    assert_eq!(v.cache_usage().dirty_bytes, 0);
}

/// Every member pattern a shape survives with `losses` members failed.
fn patterns(g: &Geometry, members: usize, losses: usize) -> Vec<Vec<usize>> {
    let mut out = Vec::new();
    for a in 0..members {
        if losses == 1 {
            out.push(vec![a]);
            continue;
        }
        for b in a + 1..members {
            if g.survives(&[a, b]) {
                out.push(vec![a, b]);
            }
        }
    }
    out
}

fn checksum(v: &Volume) -> Vec<u8> {
    // The data itself, read in 1 MiB requests (a checksum that cannot collide).
    let mut all = Vec::with_capacity(v.capacity() as usize);
    let mut at = 0;
    while at < v.capacity() {
        let n = MIB.min(v.capacity() - at);
        all.extend_from_slice(&block_on(v.read(at, n)).expect("read"));
        at += n;
    }
    all
}

fn integrity(level: Level, n: usize, spans: Option<usize>, losses: usize, seed: u64) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let member_len = 512 * KIB;
    let g = named(level, n, spans, 16 * KIB, member_len);
    let members = memory_members(n, member_len);
    let v = Volume::new(
        g.clone(),
        members.clone(),
        opts(CacheMode::WriteBack { bytes: MIB }, false),
    )
    .unwrap();
    // Fill in odd-sized writes (partial stripes through the cache), then flush.
    let mut at = 0;
    while at < v.capacity() {
        let n = (rng.gen_range(1..64u64) * 4096).min(v.capacity() - at);
        block_on(v.write(
            at,
            Buf::copy_from(&random_bytes(&mut rng, n as usize)),
            false,
        ))
        .unwrap();
        at += n;
    }
    block_on(v.flush()).unwrap();
    let want = checksum(&v);
    drop(v);
    for failed in patterns(&g, n, losses) {
        let v = Volume::new(
            g.clone(),
            members.clone(),
            opts(CacheMode::WriteThrough, false),
        )
        .unwrap();
        for &f in &failed {
            v.fail_member(f, "integrity test");
        }
        assert!(
            v.is_available(),
            "{level} x{n}: {failed:?} is within tolerance"
        );
        assert!(
            checksum(&v) == want,
            "{level} x{n}: volume reads back differently with members {failed:?} failed"
        );
    }
}

#[test]
fn integrity_with_every_single_member_failed() {
    for seed in seeds("integrity_single", 1) {
        let _g = SeedGuard {
            test: "integrity_with_every_single_member_failed",
            seed,
        };
        integrity(Level::Raid5, 3, None, 1, seed);
        integrity(Level::Raid5, 5, None, 1, seed);
        integrity(Level::Raid50, 6, Some(2), 1, seed);
        integrity(Level::Raid6, 4, None, 1, seed);
    }
}

#[test]
fn integrity_with_every_pair_failed() {
    for seed in seeds("integrity_pairs", 1) {
        let _g = SeedGuard {
            test: "integrity_with_every_pair_failed",
            seed,
        };
        integrity(Level::Raid6, 4, None, 2, seed);
        integrity(Level::Raid6, 6, None, 2, seed);
        integrity(Level::Raid60, 8, Some(2), 2, seed);
        // RAID 50: pairs in different spans.
        integrity(Level::Raid50, 6, Some(2), 2, seed);
    }
}

/// Degraded writes keep the lost data recoverable: write with members failed, then read back
/// through a fresh assembly with the same (and, for RAID 6, one more) member failed.
#[test]
fn degraded_writes_stay_recoverable() {
    for seed in seeds("degraded_writes", 2) {
        let _g = SeedGuard {
            test: "degraded_writes_stay_recoverable",
            seed,
        };
        let mut rng = SmallRng::seed_from_u64(seed);
        for (level, n) in [(Level::Raid5, 4), (Level::Raid6, 6)] {
            let member_len = 256 * KIB;
            let g = named(level, n, None, 8 * KIB, member_len);
            let members = memory_members(n, member_len);
            let dead = rng.gen_range(0..n);
            let v = Volume::new(
                g.clone(),
                members.clone(),
                opts(CacheMode::WriteBack { bytes: 64 * KIB }, true),
            )
            .unwrap();
            v.fail_member(dead, "test");
            let mut model = vec![0u8; v.capacity() as usize];
            for _ in 0..200 {
                let len = rng.gen_range(1..=24u64) * 4096;
                let off = rng.gen_range(0..=(v.capacity() - len) / 4096) * 4096;
                let d = random_bytes(&mut rng, len as usize);
                block_on(v.write(off, Buf::copy_from(&d), rng.gen_bool(0.1))).unwrap();
                model[off as usize..(off + len) as usize].copy_from_slice(&d);
            }
            block_on(v.flush()).unwrap();
            assert!(checksum(&v) == model, "{level}: degraded read-back");
            drop(v);
            let mut failed = vec![dead];
            if level == Level::Raid6 {
                failed.push((dead + 1 + rng.gen_range(0..n - 1)) % n);
            }
            let v = Volume::new(
                g.clone(),
                members.clone(),
                opts(CacheMode::WriteThrough, true),
            )
            .unwrap();
            for &f in &failed {
                v.fail_member(f, "test");
            }
            assert!(
                checksum(&v) == model,
                "{level}: read-back with {failed:?} failed"
            );
        }
    }
}

/// Degraded sequential reads rebuild whole stripes: each member is read once per stripe.
#[test]
fn degraded_sequential_read_reads_each_stripe_once() {
    let n = 5;
    let strip = 64 * KIB;
    let v = Volume::new(
        named(Level::Raid5, n, None, strip, 4 * MIB),
        memory_members(n, 4 * MIB),
        opts(CacheMode::WriteThrough, true),
    )
    .unwrap();
    v.fail_member(2, "test");
    let width = strip * 4;
    let stripes = 8;
    let before = v
        .member_health()
        .iter()
        .map(|h| h.counters)
        .collect::<Vec<_>>();
    block_on(v.read(0, stripes * width)).unwrap();
    let d = delta(&v, &before);
    // Every surviving member once per stripe (data or parity), nothing more.
    assert_eq!(d.0, stripes * (n as u64 - 1), "member reads");
    assert_eq!(d.2, stripes * (n as u64 - 1) * strip, "member read bytes");
}

/// Degraded sequential reads in requests smaller than a stripe still read each stripe's
/// surviving chunks once: the stripe is rebuilt whole and the next request finds its part.
#[test]
fn degraded_partial_stripe_reads_rebuild_each_stripe_once() {
    let (n, strip) = (8u64, 16 * KIB);
    let v = Volume::new(
        named(Level::Raid6, n as usize, None, strip, 2 * MIB),
        memory_members(n as usize, 2 * MIB),
        opts(CacheMode::WriteThrough, true),
    )
    .unwrap();
    let mut rng = SmallRng::seed_from_u64(5);
    let data = random_bytes(&mut rng, v.capacity() as usize);
    block_on(v.write(0, Buf::copy_from(&data), false)).unwrap();
    v.fail_member(3, "test");
    let width = strip * (n - 2);
    let stripes = 40;
    let before = v
        .member_health()
        .iter()
        .map(|h| h.counters)
        .collect::<Vec<_>>();
    // 64 KiB requests over 96 KiB stripes.
    let mut at = 0;
    while at < stripes * width {
        let got = block_on(v.read(at, 64 * KIB)).unwrap();
        assert!(got[..] == data[at as usize..(at + 64 * KIB) as usize]);
        at += 64 * KIB;
    }
    // One pass over a stripe's surviving chunks is n - 2 chunks (RAID 6, one loss: the
    // data and P; or just the data where the lost member held P or Q). Rebuilding per
    // request instead would cost about 1.5 passes here.
    let d = delta(&v, &before);
    let one_pass = stripes * (n - 2) * strip;
    assert!(
        d.2 <= one_pass,
        "member bytes read {} vs one pass over the surviving chunks {one_pass}",
        d.2
    );
    // Writes after the rebuild are seen (the rebuilt copy is forgotten).
    let fresh = random_bytes(&mut rng, 8192);
    block_on(v.write(width / 2, Buf::copy_from(&fresh), false)).unwrap();
    let got = block_on(v.read(0, width)).unwrap();
    assert!(got[(width / 2) as usize..(width / 2) as usize + 8192] == fresh[..]);
}

/// Sequential degraded reads of every geometry the bench measures (RAID 5/6/50/60 of 4 to 24
/// members, strips 4 KiB to 1 MiB) in requests that line up with chunks (1 MiB) or do not
/// (96 KiB: 1.5 strips of 64 KiB, part of one of 1 MiB): every byte right, and, for requests
/// of at least a strip, each surviving chunk read at most once (the requests fold what they
/// read into the lost chunk, or find it kept).
#[test]
fn degraded_sequential_reads_of_every_geometry_read_each_surviving_chunk_once() {
    let mut rng = SmallRng::seed_from_u64(36);
    let shapes = [
        (Level::Raid5, 4, None),
        (Level::Raid6, 4, None),
        (Level::Raid5, 8, None),
        (Level::Raid6, 8, None),
        (Level::Raid5, 24, None),
        (Level::Raid6, 24, None),
        (Level::Raid50, 8, Some(2)),
        (Level::Raid60, 12, Some(2)),
    ];
    for (level, n, spans) in shapes {
        for strip in [4 * KIB, 64 * KIB, MIB] {
            let stripes_per_member = 3;
            let member_len = strip * stripes_per_member;
            let v = Volume::new(
                named(level, n, spans, strip, member_len),
                memory_members(n, member_len),
                opts(CacheMode::WriteThrough, true),
            )
            .unwrap();
            let data = random_bytes(&mut rng, v.capacity() as usize);
            for (i, piece) in data.chunks(16 * MIB as usize).enumerate() {
                let at = i as u64 * 16 * MIB;
                block_on(v.write(at, Buf::copy_from(piece), false)).unwrap();
            }
            v.fail_member(1, "test");
            for request in [MIB, 96 * KIB] {
                let before = v
                    .member_health()
                    .iter()
                    .map(|h| h.counters)
                    .collect::<Vec<_>>();
                let mut at = 0;
                while at < v.capacity() {
                    let len = request.min(v.capacity() - at);
                    let got = block_on(v.read(at, len)).unwrap();
                    assert!(
                        got[..] == data[at as usize..(at + len) as usize],
                        "{level:?}x{n} strip {strip}: bytes at {at}+{len}"
                    );
                    at += len;
                }
                let surviving = (n as u64 - 1) * member_len;
                let read = delta(&v, &before).2;
                // Requests smaller than a strip read healthy chunks straight (a stripe is
                // rebuilt only where they meet the lost chunk): no bound on those.
                assert!(
                    request < strip || read <= surviving,
                    "{level:?}x{n} strip {strip}, {request}-byte requests: read {read} bytes, the surviving chunks hold {surviving}"
                );
            }
        }
    }
}

/// A read error (member not failed) is served by rebuilding from parity.
#[test]
fn read_errors_are_served_from_parity() {
    let (faulty, members) = faulty_members(6, MIB, 9, false);
    let v = Volume::new(
        named(Level::Raid6, 6, None, 16 * KIB, MIB),
        members,
        opts(CacheMode::WriteThrough, true),
    )
    .unwrap();
    let mut rng = SmallRng::seed_from_u64(9);
    let data = random_bytes(&mut rng, v.capacity() as usize);
    block_on(v.write(0, Buf::copy_from(&data), false)).unwrap();
    faulty[1].fail_range(FaultOps::READ, 0..MIB);
    faulty[4].fail_range(FaultOps::READ, 128 * KIB..256 * KIB);
    let got = block_on(v.read(0, v.capacity())).unwrap();
    assert!(got[..] == data[..]);
    // Writes over the erroring ranges keep the stripes consistent.
    let d2 = random_bytes(&mut rng, 64 * KIB as usize);
    block_on(v.write(128 * KIB, Buf::copy_from(&d2), false)).unwrap();
    faulty[1].clear_faults();
    faulty[4].clear_faults();
    let got = block_on(v.read(128 * KIB, 64 * KIB)).unwrap();
    assert!(got[..] == d2[..]);
    assert!(v
        .member_health()
        .iter()
        .all(|h| h.state == MemberState::Healthy));
}

/// A read error met while a degraded sequential read folds chunks into the lost one (a
/// member failed, another returning errors on some rows): the stripe is read the general
/// way, every byte right, and the erroring rows repaired.
#[test]
fn a_read_error_while_folding_a_degraded_stripe_is_served_and_repaired() {
    let (faulty, members) = faulty_members(6, MIB, 36, false);
    let strip = 16 * KIB;
    let v = Volume::new(
        named(Level::Raid6, 6, None, strip, MIB),
        members,
        opts(CacheMode::WriteThrough, true),
    )
    .unwrap();
    let mut rng = SmallRng::seed_from_u64(36);
    let data = random_bytes(&mut rng, v.capacity() as usize);
    block_on(v.write(0, Buf::copy_from(&data), false)).unwrap();
    v.fail_member(2, "test");
    // Bad spots the disk remaps when they are rewritten.
    for at in (128 * KIB..192 * KIB).step_by(4096) {
        faulty[4].fail_reads_until_written(at..at + 4096);
    }
    // Requests of 3 strips over stripes of 4: each stripe is split between two requests.
    let mut at = 0;
    while at < v.capacity() {
        let len = (3 * strip).min(v.capacity() - at);
        let got = block_on(v.read(at, len)).unwrap();
        assert!(
            got[..] == data[at as usize..(at + len) as usize],
            "bytes at {at}"
        );
        at += len;
    }
    faulty[4].clear_faults();
    assert!(v.counters().repairs > 0, "the erroring rows were rewritten");
    let got = block_on(v.read(0, v.capacity())).unwrap();
    assert!(got[..] == data[..]);
}

/// A read error on a chunk is served from parity and the chunk is rewritten (read repair):
/// afterwards the member reads cleanly again and stays healthy.
#[test]
fn read_error_is_repaired_from_parity() {
    for (level, n) in [(Level::Raid5, 4), (Level::Raid6, 5)] {
        let (faulty, members) = faulty_members(n, MIB, 11, false);
        let v = Volume::new(
            named(level, n, None, 16 * KIB, MIB),
            members,
            opts(CacheMode::WriteThrough, true),
        )
        .unwrap();
        let mut rng = SmallRng::seed_from_u64(11);
        let data = random_bytes(&mut rng, v.capacity() as usize);
        block_on(v.write(0, Buf::copy_from(&data), false)).unwrap();
        // A media error that fails twice (the rewrite is what cures it on a real disk).
        faulty[0].fail_range_times(FaultOps::READ, 0..MIB, 2);
        let got = block_on(v.read(0, v.capacity())).unwrap();
        assert!(got[..] == data[..], "{level}");
        assert!(
            v.counters().repairs > 0,
            "{level}: no repair {:?} {:?}",
            v.counters(),
            v.member_health()
                .iter()
                .map(|h| h.read_errors)
                .collect::<Vec<_>>()
        );
        assert!(v.member_health()[0].read_errors >= 1, "{level}");
        let errors_before = faulty[0].counters().snapshot().errors;
        let got = block_on(v.read(0, v.capacity())).unwrap();
        assert!(got[..] == data[..]);
        assert_eq!(faulty[0].counters().snapshot().errors, errors_before);
        assert!(v
            .member_health()
            .iter()
            .all(|h| h.state == MemberState::Healthy));
    }
}

/// Beyond tolerance: errors, never wrong data.
#[test]
fn beyond_tolerance_errors_never_wrong_data() {
    for (level, n, kill) in [
        (Level::Raid5, 4, vec![0, 2]),
        (Level::Raid6, 5, vec![1, 3, 4]),
        (Level::Raid50, 6, vec![0, 1]),
    ] {
        let member_len = 256 * KIB;
        let (faulty, members) = faulty_members(n, member_len, 3, false);
        let v = Volume::new(
            named(
                level,
                n,
                Some(2).filter(|_| level == Level::Raid50),
                8 * KIB,
                member_len,
            ),
            members,
            opts(CacheMode::WriteThrough, true),
        )
        .unwrap();
        let mut rng = SmallRng::seed_from_u64(3);
        let data = random_bytes(&mut rng, v.capacity() as usize);
        block_on(v.write(0, Buf::copy_from(&data), false)).unwrap();
        for &k in &kill {
            faulty[k].kill();
        }
        // Reads: each 4K block either errors clearly or returns the right bytes.
        let mut errors = 0;
        let mut served = 0;
        let results = block_on(join_all(
            (0..v.capacity() / 4096).map(|b| v.read(b * 4096, 4096)),
        ));
        for (b, r) in results.into_iter().enumerate() {
            match r {
                Ok(got) => {
                    assert!(
                        got[..] == data[b * 4096..(b + 1) * 4096],
                        "{level}: block {b}"
                    );
                    served += 1;
                }
                Err(e) => {
                    assert!(
                        matches!(
                            e,
                            VolumeError::Unavailable { .. } | VolumeError::Member { .. }
                        ),
                        "{e}"
                    );
                    errors += 1;
                }
            }
        }
        assert!(errors > 0, "{level}: some data must be lost");
        assert!(served > 0, "{level}: data on survivors still reads");
        // Writes fail (members die on write errors) and the volume says it is unavailable.
        let r = block_on(v.write(0, Buf::zeroed(64 * 1024), false));
        assert!(r.is_err(), "{level}: write beyond tolerance");
        assert!(!v.is_available());
        let e = block_on(v.read(0, v.capacity())).unwrap_err();
        assert!(
            e.to_string().contains("unavailable") || e.to_string().contains("member"),
            "{e}"
        );
    }
}

/// A mirror of two RAID 5 groups (4 KiB strips: stripe 0 has data chunks on members 0 and
/// 1, P on 2), a write-back cache of two 4 KiB buffers per group, full with 1 KiB of `a`
/// across chunks 0 and 1 (bytes 3584..4608) and a sector of stripe 1 in both copies; then copy 0's group loses
/// members 1 and 2 — beyond its tolerance: its cache can no longer destage stripe 0.
fn mirror_with_copy_0_beyond_tolerance(a: u8) -> Volume {
    let tree = mirror_of_raid5s(4 * KIB, 0, 64 * KIB);
    let v = Volume::new(
        Geometry::from_tree(tree),
        memory_members(6, 64 * KIB),
        VolumeOptions {
            block_size: 512,
            ..opts(CacheMode::WriteBack { bytes: 4 * KIB }, true)
        },
    )
    .unwrap();
    block_on(v.write(3584, Buf::copy_from(&[a; 1024]), false)).unwrap();
    // Stripe 1 fills the rest of the cache (its least bound: one stripe, 8 KiB).
    block_on(v.write(8 * KIB, Buf::copy_from(&[a; 512]), false)).unwrap();
    v.fail_member(1, "test");
    v.fail_member(2, "test");
    v
}

/// Reads bytes 3584..4096 (chunk 0, on member 0) from copy 0 alone (copy 1's members failed).
fn read_chunk_0_of_copy_0(v: &Volume) -> Vec<u8> {
    for m in 3..6 {
        v.fail_member(m, "test: copy 1 away");
    }
    block_on(v.read(3584, 512)).unwrap().to_vec()
}

/// A write that copy 0's group fails beyond its tolerance goes through the cache (no room)
/// and is salvaged onto member 0; the bytes cached before it must not come back over it —
/// neither in reads of that copy nor in later destage attempts (the crash simulator's
/// mirror of RAID 5s, seed 1625684700: a flushed write read back as the zeroes cached
/// before it, which the retried destage had written over member 0).
#[test]
fn a_write_a_parity_group_fails_leaves_no_older_cached_bytes_over_it() {
    let v = mirror_with_copy_0_beyond_tolerance(0xaa);
    // Copy 0 fails it (chunk 1 and P lost); copy 1 takes it: the mirror's write succeeds.
    block_on(v.write(3584, Buf::copy_from(&[0xbb; 1024]), false)).unwrap();
    // Copy 0's destage is retried (and salvaged again) by a flush.
    let _ = block_on(v.flush());
    assert!(
        read_chunk_0_of_copy_0(&v).iter().all(|&x| x == 0xbb),
        "copy 0 serves the bytes cached before the write"
    );
}

/// The same for whole stripes zeroed while copy 0's group is beyond its tolerance: the
/// zeroes reached member 0, and the cached bytes they superseded must not come back.
#[test]
fn zeroing_a_parity_group_fails_leaves_no_older_cached_bytes_over_it() {
    let v = mirror_with_copy_0_beyond_tolerance(0xaa);
    block_on(v.write_zeroes(0, 8 * KIB, false)).unwrap();
    let _ = block_on(v.flush());
    assert!(
        read_chunk_0_of_copy_0(&v).iter().all(|&x| x == 0),
        "copy 0 serves the bytes cached before the zeroes"
    );
}

/// A degraded RAID 5 whose partial write needs the parity that returns a read error has no
/// plan left. Giving the stripe's redundancy up (data written, parity stale) would need the
/// member failed — recorded, or a restart would rebuild the lost chunk from the stale parity
/// as bytes nobody wrote (the mirror-of-RAID-5 crash case, seed 1624846868) — and a plain
/// RAID 5 cannot do without it: one bad spot would take every byte away. So the write
/// answers its error and writes nothing; the member keeps serving. (Where the volume can do
/// without the member, it is still failed that way: `unreadable_on_write.rs`.)
#[test]
fn a_read_error_that_leaves_a_degraded_stripe_no_plan_refuses_the_write_alone() {
    // Stripe 0: data on members 0 and 1, P on member 2.
    let member_len = 64 * KIB;
    let (faulty, members) = faulty_members(3, member_len, 5, false);
    let v = Volume::new(
        named(Level::Raid5, 3, None, 4 * KIB, member_len),
        members,
        VolumeOptions {
            block_size: 512,
            ..opts(CacheMode::WriteThrough, true)
        },
    )
    .unwrap();
    block_on(v.write(0, Buf::copy_from(&[0xaa; 8192]), false)).unwrap();
    v.fail_member(1, "test");
    faulty[2].fail_range(FaultOps::READ, 0..4096);
    // Part of chunk 0: RMW needs P (read error), RCW needs chunk 1 (lost).
    assert!(block_on(v.write(0, Buf::copy_from(&[0xbb; 512]), false)).is_err());
    assert_eq!(
        v.member_health()[2].state,
        MemberState::Healthy,
        "the member whose read error left the write no plan serves on"
    );
    assert!(v.is_available());
    // Chunk 0 kept its bytes (nothing written); chunk 1 needs the unreadable P: an error,
    // never rebuilt bytes.
    assert!(block_on(v.read(0, 512)).unwrap().iter().all(|&x| x == 0xaa));
    assert!(block_on(v.read(4096, 512)).is_err());
    // Stripe 1 serves: its writes and reads go through.
    block_on(v.write(8192, Buf::copy_from(&[0xcc; 512]), false)).unwrap();
    assert!(block_on(v.read(8192, 512))
        .unwrap()
        .iter()
        .all(|&x| x == 0xcc));
}

/// A mirror's resync goes on past a copy that cannot be made consistent in itself (its RAID 5
/// group lost two members): the other copy's bytes still serve, where before the resync —
/// and with it every read during a background resync — failed (the crash simulator's mirror
/// of RAID 5 groups resyncing in the background, seed 1700042290).
#[test]
fn a_mirror_resyncs_past_a_copy_beyond_its_tolerance() {
    let tree = mirror_of_raid5s(4 * KIB, 0, 64 * KIB);
    let v = Volume::new(
        Geometry::from_tree(tree),
        memory_members(6, 64 * KIB),
        opts(CacheMode::WriteThrough, true),
    )
    .unwrap();
    let data = vec![0x5a; 16 * 1024];
    block_on(v.write(0, Buf::copy_from(&data), false)).unwrap();
    v.fail_member(3, "test");
    v.fail_member(4, "test");
    // Stripe 1's first data chunk: on member 5 in copy 1, which still takes writes there.
    block_on(v.resync_range(8 * KIB, 4 * KIB)).unwrap();
    assert!(block_on(v.read(0, 16 * KIB)).unwrap()[..] == data[..]);
}

/// Sequential writes of `bs` bytes, `qd` in flight, over a write-back RAID 5 of 4 simulated
/// HDDs (64 KiB strips: a 192 KiB stripe that 128 KiB and 1 MiB do not divide): MB/s on the
/// virtual clock, and the member reads they cost.
fn sim_seq_write(bs: u64, qd: usize) -> (f64, u64) {
    use futures::stream::{FuturesUnordered, StreamExt};
    use nbraid_sim::clock::{run_virtual, SimClock};
    use nbraid_sim::timed::{HddParams, SimMember, SimModel};
    let member_len = 1024 * MIB;
    let total = 64 * MIB;
    let clock = SimClock::new();
    let model = SimModel::Hdd(HddParams::default());
    let members = (0..4)
        .map(|i| {
            Arc::new(SimMember::new(
                format!("hdd{i}"),
                member_len,
                &model,
                clock.clone(),
                false,
            )) as Arc<dyn Member>
        })
        .collect();
    let v = Volume::new(
        named(Level::Raid5, 4, None, 64 * KIB, member_len),
        members,
        opts(CacheMode::WriteBack { bytes: 32 * MIB }, true),
    )
    .unwrap();
    run_virtual(&clock, async {
        let mut q = FuturesUnordered::new();
        let mut at = 0;
        while at < total || !q.is_empty() {
            while q.len() < qd && at < total {
                q.push(v.write(at, Buf::new(bs as usize), false));
                at += bs;
            }
            q.next().await.expect("in flight").expect("write");
        }
    })
    .expect("only simulated members wait");
    let reads = v.member_health().iter().map(|h| h.counters.reads).sum();
    (total as f64 / clock.now().as_secs_f64() / 1e6, reads)
}

/// Sequential writes in flight together stream as fast as one at a time: each one's partial
/// stripes at either end are only cached, and the next writer (which completes them) does not
/// wait for the stripe lock while the first one's middle is on the members. It did: the
/// writers then reached the drives out of order (128 KiB writes: 480 MB/s at QD 1, 163 at
/// QD 4), with no member read either way.
#[test]
fn sequential_writes_in_flight_together_stream_as_fast_as_one_at_a_time() {
    for bs in [128 * KIB, MIB] {
        let (one, reads) = sim_seq_write(bs, 1);
        assert_eq!(reads, 0, "{bs} B at QD 1: full stripes, nothing read");
        assert!(
            one > 470.0,
            "{bs} B at QD 1: {one:.1} MB/s, three data HDDs give 480"
        );
        for qd in [2, 4, 16] {
            let (rate, reads) = sim_seq_write(bs, qd);
            assert_eq!(reads, 0, "{bs} B at QD {qd}: full stripes, nothing read");
            assert!(
                rate > 0.97 * one,
                "{bs} B at QD {qd}: {rate:.1} MB/s against {one:.1} at QD 1"
            );
        }
    }
}

/// RAID 5 and 6 stripes wide enough that a regenerating write folds P (and Q) a few chunks
/// at a time as it issues their writes (`raid/write.rs` `write_folding_parity`, 512 KiB of
/// rows per fold): with strips of 64 and 128 KiB from 4 to 24 members, of 16 KiB on 40 and
/// of 4 KiB on 70 (which, like 4 and 8 members, takes one pass).
/// Member I/O stays exact (a full stripe writes each member once and reads nothing), and
/// after partial writes (read-modify-write, reconstruct-write) every member failed in turn
/// (RAID 6: with its neighbour, so Q rebuilds too) reads the model back.
#[test]
fn wide_parity_stripes_fold_parity_in_groups_and_read_back_with_any_members_failed() {
    let mut rng = SmallRng::seed_from_u64(36);
    let sizes = [
        (4, 128 * KIB),
        (6, 128 * KIB),
        (8, 64 * KIB),
        (24, 64 * KIB),
        (40, 16 * KIB),
        (70, 4 * KIB),
    ];
    let configs = [Level::Raid5, Level::Raid6]
        .into_iter()
        .flat_map(|level| sizes.map(|(n, strip)| (level, n, strip)));
    for (level, n, strip) in configs {
        let name = format!("{} x{n}, strip {strip}", level.name());
        let member_len = 5 * strip;
        let g = named(level, n, None, strip, member_len);
        let members = memory_members(n, member_len);
        let v = Volume::new(
            g.clone(),
            members.clone(),
            opts(CacheMode::WriteThrough, true),
        )
        .unwrap();
        let width = strip * (n - level.parity()) as u64;
        let mut model = vec![0u8; v.capacity() as usize];
        let mut write = |at: u64, len: u64| {
            let bytes = random_bytes(&mut rng, len as usize);
            model[at as usize..(at + len) as usize].copy_from_slice(&bytes);
            block_on(v.write(at, Buf::copy_from(&bytes), false)).unwrap();
        };
        let before = v
            .member_health()
            .iter()
            .map(|h| h.counters)
            .collect::<Vec<_>>();
        write(width, 2 * width);
        let d = delta(&v, &before);
        assert_eq!(d, (0, 2 * n as u64, 0, 2 * n as u64 * strip), "{name}");
        // Partial stripes: a few chunks and a ragged range over chunk boundaries.
        write(3 * width + strip, 2 * strip);
        write(4096, width - 8192);
        assert!(block_on(v.read(0, v.capacity())).unwrap()[..] == model[..]);
        drop(v);
        let failed: Vec<usize> = if n > 8 {
            vec![0, 1, n - 1]
        } else {
            (0..n).collect()
        };
        for f in failed {
            let v = Volume::new(
                g.clone(),
                members.clone(),
                opts(CacheMode::WriteThrough, false),
            )
            .unwrap();
            v.fail_member(f, "test");
            if level == Level::Raid6 {
                v.fail_member((f + 1) % n, "test");
            }
            assert!(
                block_on(v.read(0, v.capacity())).unwrap()[..] == model[..],
                "{name}: member {f} failed (RAID 6: and the next)"
            );
        }
        // Written degraded: P's member failed in some stripes, a data chunk's in others.
        let v = Volume::new(g.clone(), members, opts(CacheMode::WriteThrough, false)).unwrap();
        v.fail_member(1, "test");
        for (at, len) in [(0, 2 * width), (2 * width + 4096, width)] {
            let bytes = random_bytes(&mut rng, len as usize);
            model[at as usize..(at + len) as usize].copy_from_slice(&bytes);
            block_on(v.write(at, Buf::copy_from(&bytes), false)).unwrap();
        }
        assert!(
            block_on(v.read(0, v.capacity())).unwrap()[..] == model[..],
            "{name}: written with member 1 failed"
        );
    }
}

/// Reads all of `v` sequentially in `request`-byte reads, `depth` of them in flight (each
/// completion issues the next, as a client's queue does). Returns the bytes; asserts each
/// read lands in the buffer it was given.
fn read_queued(v: &Volume, request: u64, depth: usize) -> Vec<u8> {
    use futures::stream::{FuturesUnordered, StreamExt};
    let cap = v.capacity();
    let mut out = vec![0u8; cap as usize];
    block_on(async {
        let mut inflight = FuturesUnordered::new();
        let mut next = 0u64;
        loop {
            while inflight.len() < depth && next < cap {
                let len = request.min(cap - next);
                let buf = Buf::new(len as usize);
                let addr = buf.as_ptr() as usize;
                let at = next;
                inflight.push(async move { (at, addr, v.read_into(at, buf).await) });
                next += len;
            }
            let Some((at, addr, r)) = inflight.next().await else {
                break;
            };
            let b = r.unwrap();
            assert_eq!(b.as_ptr() as usize, addr, "read at {at} landed in place");
            out[at as usize..at as usize + b.len()].copy_from_slice(&b);
        }
    });
    out
}

/// Two degraded reads of one stripe side by side (issue 32's crash-simulator hang, seed
/// 1678468116 of `raid5-sequential`): the first wants the lost chunk whole (the fold's
/// target) and yields after its own reads; the second wants part of a surviving chunk before
/// it and a piece of the lost one, so it leaves the fold to the general path. It must not
/// leave its claim on that surviving chunk behind: the first would wait for someone to fold
/// it, forever, holding the stripe's lock (every writer of the stripe queued behind it).
#[test]
fn a_degraded_read_that_leaves_the_fold_to_another_leaves_no_claim_behind() {
    let strip = 16 * KIB;
    let member_len = 4 * strip;
    let g = named(Level::Raid5, 4, None, strip, member_len);
    // The member of stripe 0's last data chunk: the reads below want it rebuilt.
    let lost = g.map(2 * strip, 1).unwrap().data[0].member;
    let v = Volume::new(
        g,
        memory_members(4, member_len),
        opts(CacheMode::WriteThrough, true),
    )
    .unwrap();
    let mut rng = SmallRng::seed_from_u64(32);
    let data = random_bytes(&mut rng, v.capacity() as usize);
    block_on(v.write(0, Buf::copy_from(&data), false)).unwrap();
    v.fail_member(lost, "test");
    let whole_lost = v.read(2 * strip, strip);
    let part_and_lost = v.read(strip + strip / 2, strip / 2 + 4 * KIB);
    use std::future::Future;
    let mut both = std::pin::pin!(futures::future::join(whole_lost, part_and_lost));
    // Memory members answer inline: only a wait nobody ends keeps the pair pending.
    let waker = futures::task::noop_waker();
    let mut cx = std::task::Context::from_waker(&waker);
    let (a, b) = (0..1000)
        .find_map(|_| match both.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(r) => Some(r),
            std::task::Poll::Pending => None,
        })
        .expect("the reader of the lost chunk waits for a chunk nobody reads");
    let (s, s2) = ((2 * strip) as usize, (strip + strip / 2) as usize);
    assert!(a.unwrap()[..] == data[s..s + strip as usize]);
    assert!(b.unwrap()[..] == data[s2..s2 + (strip / 2 + 4 * KIB) as usize]);
}

/// Sequential degraded reads with a client's queue of 8 requests (the bench's shape) on RAID
/// 5/6 of 4 to 24 members and RAID 50/60, strips of 4 KiB to 1 MiB, requests of 1 MiB and
/// 96 KiB: every byte right, every read lands in the buffer it was given, and for requests
/// that line up with chunks each surviving chunk is read at most once (requests in flight
/// together fold into, or find kept, what the others read).
#[test]
fn queued_degraded_reads_serve_every_byte_in_place_reading_each_chunk_once() {
    let mut rng = SmallRng::seed_from_u64(3636);
    let depth = 8;
    let shapes = [
        (Level::Raid5, 4, None),
        (Level::Raid6, 4, None),
        (Level::Raid5, 8, None),
        (Level::Raid6, 8, None),
        (Level::Raid5, 24, None),
        (Level::Raid6, 24, None),
        (Level::Raid50, 8, Some(2)),
        (Level::Raid60, 12, Some(2)),
    ];
    for (level, n, spans) in shapes {
        for strip in [4 * KIB, 64 * KIB, MIB] {
            let member_len = strip * 4;
            let v = Volume::new(
                named(level, n, spans, strip, member_len),
                memory_members(n, member_len),
                opts(CacheMode::WriteThrough, true),
            )
            .unwrap();
            let data = random_bytes(&mut rng, v.capacity() as usize);
            for (i, piece) in data.chunks(16 * MIB as usize).enumerate() {
                let at = i as u64 * 16 * MIB;
                block_on(v.write(at, Buf::copy_from(piece), false)).unwrap();
            }
            v.fail_member(1, "test");
            for request in [MIB, 96 * KIB] {
                let name = format!("{level:?}x{n} strip {strip}, {request}-byte requests");
                let before = v
                    .member_health()
                    .iter()
                    .map(|h| h.counters)
                    .collect::<Vec<_>>();
                let got = read_queued(&v, request, depth);
                assert!(got == data, "{name}: bytes");
                let surviving = (n as u64 - 1) * member_len;
                let read = delta(&v, &before).2;
                // Requests that split chunks (96 KiB on 64 KiB strips) may read a part of a
                // chunk straight that an earlier request read whole and kept (half a chunk
                // on RAID 5 × 24 with 64 KiB strips): no bound on those.
                assert!(
                    request % strip != 0 || read <= surviving,
                    "{name}: read {read} bytes, the surviving chunks hold {surviving}"
                );
            }
        }
    }
}

/// A memory member that records where each read lands (a tick of the test's clock, the
/// buffer's address and length), so a test can tell reads into the requests' own buffers
/// from reads into scratch buffers.
struct WhereMember {
    inner: MemoryMember,
    clock: Arc<std::sync::atomic::AtomicU64>,
    log: Arc<std::sync::Mutex<Vec<(u64, usize, usize)>>>,
}

impl Member for WhereMember {
    fn read(&self, offset: u64, buf: Buf) -> futures::future::BoxFuture<'_, MemberResult<Buf>> {
        let tick = self
            .clock
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let entry = (tick, buf.as_ptr() as usize, buf.len());
        self.log.lock().unwrap().push(entry);
        self.inner.read(offset, buf)
    }
    common::pass_through!(inner; name len write flush trim write_zeroes counters);
}

/// Sequential degraded 1 MiB reads, 8 in flight, on members at memory speed: the requests
/// behind the one that rebuilds a stripe's lost chunk read their chunks straight into their
/// own buffers and fold them; the only chunk a stripe reads into a scratch buffer is P (no
/// chunk read ahead and copied out of a kept buffer) while the requests in flight cover the
/// stripe. RAID 5/6 × 8/24, strips 64 KiB and 1 MiB.
#[test]
fn queued_degraded_reads_fold_from_the_requests_own_buffers() {
    use futures::stream::{FuturesUnordered, StreamExt};
    use std::sync::atomic::{AtomicU64, Ordering};
    let mut rng = SmallRng::seed_from_u64(3637);
    for (level, n) in [
        (Level::Raid5, 8),
        (Level::Raid6, 8),
        (Level::Raid5, 24),
        (Level::Raid6, 24),
    ] {
        for strip in [64 * KIB, MIB] {
            let member_len = (strip * 16).min(4 * MIB);
            let clock = Arc::new(AtomicU64::new(0));
            let log = Arc::new(std::sync::Mutex::new(Vec::new()));
            let members: Vec<Arc<dyn Member>> = (0..n)
                .map(|i| {
                    Arc::new(WhereMember {
                        inner: MemoryMember::new(format!("m{i}"), member_len),
                        clock: clock.clone(),
                        log: log.clone(),
                    }) as Arc<dyn Member>
                })
                .collect();
            let v = Volume::new(
                named(level, n, None, strip, member_len),
                members,
                opts(CacheMode::WriteThrough, true),
            )
            .unwrap();
            let data = random_bytes(&mut rng, v.capacity() as usize);
            for (i, piece) in data.chunks(16 * MIB as usize).enumerate() {
                let at = i as u64 * 16 * MIB;
                block_on(v.write(at, Buf::copy_from(piece), false)).unwrap();
            }
            v.fail_member(1, "test");
            log.lock().unwrap().clear();
            // The queue of `read_queued`, each request's buffer and ticks in flight noted.
            let (cap, mut next) = (v.capacity(), 0u64);
            let mut got = vec![0u8; cap as usize];
            let mut requests: Vec<(u64, u64, usize, usize)> = Vec::new();
            let v = &v;
            block_on(async {
                let mut inflight = FuturesUnordered::new();
                loop {
                    while inflight.len() < 8 && next < cap {
                        let len = MIB.min(cap - next);
                        let buf = Buf::new(len as usize);
                        let (at, addr) = (next, buf.as_ptr() as usize);
                        let start = clock.fetch_add(1, Ordering::Relaxed);
                        inflight.push(async move { (at, addr, start, v.read_into(at, buf).await) });
                        next += len;
                    }
                    let Some((at, addr, start, r)) = inflight.next().await else {
                        break;
                    };
                    let b = r.unwrap();
                    let end = clock.fetch_add(1, Ordering::Relaxed);
                    requests.push((start, end, addr, b.len()));
                    got[at as usize..at as usize + b.len()].copy_from_slice(&b);
                }
            });
            let name = format!("{level:?}x{n} strip {strip}");
            assert!(got == data, "{name}: bytes");
            let scratch: usize = log
                .lock()
                .unwrap()
                .iter()
                .filter(|&&(t, a, l)| {
                    !requests
                        .iter()
                        .any(|&(s, e, ra, rl)| s <= t && t <= e && ra <= a && a + l <= ra + rl)
                })
                .map(|r| r.2)
                .sum();
            // One chunk per stripe at most (P; each member holds one chunk of a stripe), when
            // the requests in flight cover a stripe (not 1 MiB strips on 24 members: the
            // chunks of requests not issued yet are read ahead and kept).
            let stripe_data = (n - if level == Level::Raid6 { 2 } else { 1 }) as u64 * strip;
            assert!(
                stripe_data > 8 * MIB || scratch as u64 <= member_len,
                "{name}: {scratch} bytes read into scratch buffers, P is {member_len}"
            );
        }
    }
}
