//! Scrub (mdadm's `check`/`repair`): corruption injected into one member of RAID 1 (2- and
//! 3-way), 5, 6, 10 and 50 is found; repair rewrites what the redundancy proves (RAID 6
//! locates the chunk and restores it bit-exact; RAID 5 and 2-way mirrors rewrite by md's rule;
//! 3-way mirrors vote); a scrub cancelled, paused and resumed covers the volume exactly once.

mod common;

use common::*;
use futures::executor::block_on;
use nbraid_core::{Buf, Member, MemoryMember, ScrubControl, ScrubState, Volume, VolumeOptions};
use nbraid_layout::{Level, ParityLayout, StripeRoles};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;
use std::time::Duration;

const STRIP: u64 = 64 * KIB;
const MEMBER: u64 = 16 * STRIP;

fn volume(level: Level, n: usize) -> (Volume, Vec<Arc<MemoryMember>>, Vec<u8>) {
    let mems: Vec<Arc<MemoryMember>> = (0..n)
        .map(|i| Arc::new(MemoryMember::new(format!("m{i}"), MEMBER)))
        .collect();
    let dyns = mems.iter().map(|m| m.clone() as Arc<dyn Member>).collect();
    let opts = VolumeOptions {
        block_size: 4096,
        members_known_zero: true,
        cache_max_age: None,
        ..VolumeOptions::default()
    };
    let g = named(level, n, None, STRIP, MEMBER);
    let v = Volume::new(g, dyns, opts).expect("volume");
    let mut rng = SmallRng::seed_from_u64(n as u64 * 1000 + level as u64);
    let mut data = vec![0u8; v.capacity() as usize];
    rng.fill(&mut data[..]);
    block_on(async {
        for (i, piece) in data.chunks(MIB as usize).enumerate() {
            v.write(i as u64 * MIB, Buf::copy_from(piece), false)
                .await
                .expect("write");
        }
        v.flush().await.expect("flush");
    });
    (v, mems, data)
}

fn scrub(v: &Volume, repair: bool) -> nbraid_core::ScrubReport {
    let ctl = ScrubControl::new(repair, 0);
    let r = block_on(v.scrub(&ctl)).expect("scrub");
    assert_eq!(r.state, ScrubState::Done);
    assert_eq!(r.position_bytes, r.total_bytes);
    r
}

fn peek(m: &MemoryMember, at: u64, len: usize) -> Vec<u8> {
    let mut b = vec![0; len];
    m.peek(at, &mut b);
    b
}

/// Flips bits of one byte of member `m` at `at`.
fn flip(m: &MemoryMember, at: u64, bits: u8) {
    let mut b = [0u8];
    m.peek(at, &mut b);
    m.poke(at, &[b[0] ^ bits]);
}

fn read_all(v: &Volume) -> Vec<u8> {
    block_on(async {
        let mut out = Vec::new();
        let mut at = 0;
        while at < v.capacity() {
            let n = (v.capacity() - at).min(MIB);
            out.extend_from_slice(&v.read(at, n).await.expect("read"));
            at += n;
        }
        out
    })
}

#[test]
fn healthy_volumes_scrub_clean_and_count_every_unit() {
    for (level, n, units) in [
        (Level::Raid1, 2, MEMBER / (64 * KIB)),
        (Level::Raid1, 3, MEMBER / (64 * KIB)),
        (Level::Raid5, 4, MEMBER / STRIP),
        (Level::Raid6, 6, MEMBER / STRIP),
        (Level::Raid10, 4, 2 * MEMBER / (64 * KIB)),
        (Level::Raid50, 6, 2 * MEMBER / STRIP),
    ] {
        let (v, _, _) = volume(level, n);
        let r = scrub(&v, false);
        assert_eq!(r.checked, units, "{level:?} x{n}");
        assert_eq!(
            (r.mismatches, r.repaired, r.unreadable, r.skipped),
            (0, 0, 0, 0)
        );
    }
}

#[test]
fn raid6_locates_every_single_corrupt_chunk_and_restores_it() {
    let n = 6;
    let (v, mems, data) = volume(Level::Raid6, n);
    // Every member in every stripe of a rotation: data, P and Q all get corrupted somewhere.
    for (m, member) in mems.iter().enumerate() {
        for s in 0..n as u64 {
            let at = s * STRIP + 1000 + m as u64 * 7;
            let before = peek(member, s * STRIP, STRIP as usize);
            flip(member, at, 0x81);
            flip(member, at + 3000, 0x10);
            let found = scrub(&v, false);
            assert_eq!(
                (found.mismatches, found.repaired),
                (1, 0),
                "member {m} stripe {s}"
            );
            // A check changes nothing.
            assert_ne!(peek(member, s * STRIP, STRIP as usize), before);
            let fixed = scrub(&v, true);
            assert_eq!(
                (fixed.mismatches, fixed.repaired),
                (1, 1),
                "member {m} stripe {s}"
            );
            assert_eq!(
                peek(member, s * STRIP, STRIP as usize),
                before,
                "member {m} stripe {s} restored bit-exact"
            );
            assert_eq!(scrub(&v, false).mismatches, 0);
        }
    }
    assert!(
        read_all(&v) == data,
        "the volume reads back what was written"
    );
}

#[test]
fn raid6_does_not_guess_when_two_chunks_are_wrong() {
    let (v, mems, _) = volume(Level::Raid6, 6);
    // Two data chunks wrong in one stripe: no single culprit, so only parity is rewritten
    // (md's repair) and both data chunks are left as they are.
    let roles = StripeRoles::md(ParityLayout::default(), 6, 2, 0);
    let (a, b) = (roles.data[0], roles.data[1]);
    let (da, db) = (peek(&mems[a], 0, 64), peek(&mems[b], 0, 64));
    flip(&mems[a], 10, 1);
    flip(&mems[b], 20, 2);
    let r = scrub(&v, true);
    assert_eq!((r.mismatches, r.repaired), (1, 1));
    let (mut ea, mut eb) = (da, db);
    ea[10] ^= 1;
    eb[20] ^= 2;
    assert_eq!(peek(&mems[a], 0, 64), ea);
    assert_eq!(peek(&mems[b], 0, 64), eb);
    assert_eq!(scrub(&v, false).mismatches, 0);
}

#[test]
fn raid5_reports_the_mismatch_and_rewrites_parity() {
    let n = 4;
    let (v, mems, data) = volume(Level::Raid5, n);
    // md's left-symmetric layout: stripe 0 has P on the last member, data on 0..n-1.
    let at = 5000;
    flip(&mems[0], at, 0x44);
    let p_before = peek(&mems[n - 1], 0, STRIP as usize);
    let found = scrub(&v, false);
    assert_eq!(
        (found.checked, found.mismatches, found.repaired),
        (MEMBER / STRIP, 1, 0)
    );
    let fixed = scrub(&v, true);
    assert_eq!((fixed.mismatches, fixed.repaired), (1, 1));
    // The data chunk is left as it is (RAID 5 cannot tell which chunk is wrong); P now
    // matches it.
    let mut b = [0u8];
    mems[0].peek(at, &mut b);
    assert_eq!(b[0], data[at as usize] ^ 0x44);
    assert_ne!(peek(&mems[n - 1], 0, STRIP as usize), p_before);
    assert_eq!(scrub(&v, false).mismatches, 0);
    // Corrupt P itself: rewriting parity from the data restores it exactly.
    let p = peek(&mems[n - 1], 0, STRIP as usize);
    flip(&mems[n - 1], 77, 0x01);
    assert_eq!(scrub(&v, true).repaired, 1);
    assert_eq!(peek(&mems[n - 1], 0, STRIP as usize), p);
}

#[test]
fn two_way_mirror_copies_the_first_copy_over_the_other() {
    let (v, mems, data) = volume(Level::Raid1, 2);
    flip(&mems[1], 123_456, 0x08);
    let found = scrub(&v, false);
    assert_eq!((found.mismatches, found.repaired), (1, 0));
    let fixed = scrub(&v, true);
    assert_eq!((fixed.mismatches, fixed.repaired), (1, 1));
    assert_eq!(peek(&mems[1], 0, MEMBER as usize), data);
    assert_eq!(scrub(&v, false).mismatches, 0);
}

#[test]
fn three_way_mirror_votes() {
    let (v, mems, data) = volume(Level::Raid1, 3);
    // The first copy is the wrong one: the two others outvote it.
    flip(&mems[0], 70_000, 0x20);
    flip(&mems[2], 700_000, 0x02);
    let fixed = scrub(&v, true);
    assert_eq!((fixed.mismatches, fixed.repaired), (2, 2));
    for m in &mems {
        assert_eq!(peek(m, 0, MEMBER as usize), data);
    }
    // Three different copies of one block: no majority, nothing rewritten.
    flip(&mems[0], 10, 1);
    flip(&mems[1], 10, 2);
    let r = scrub(&v, true);
    assert_eq!((r.mismatches, r.repaired), (1, 0));
    assert_ne!(peek(&mems[0], 0, 64), peek(&mems[1], 0, 64));
}

#[test]
fn raid10_and_raid50_scrub_their_children() {
    let (v, mems, data) = volume(Level::Raid10, 4);
    flip(&mems[3], 4096, 1);
    let r = scrub(&v, true);
    assert_eq!((r.mismatches, r.repaired), (1, 1));
    assert!(read_all(&v) == data);
    let (v, mems, _) = volume(Level::Raid50, 6);
    flip(&mems[4], 3 * STRIP + 9, 1);
    let r = scrub(&v, true);
    assert_eq!((r.mismatches, r.repaired), (1, 1));
    assert_eq!(scrub(&v, false).mismatches, 0);
}

#[test]
fn degraded_stripes_are_skipped_not_repaired() {
    let (v, _, _) = volume(Level::Raid5, 4);
    v.fail_member(2, "test");
    let r = scrub(&v, true);
    assert_eq!((r.checked, r.skipped, r.repaired), (0, MEMBER / STRIP, 0));
}

#[test]
fn a_cancelled_paused_and_resumed_scrub_covers_the_volume_once() {
    let n = 6;
    let mems: Vec<Arc<dyn Member>> = (0..n)
        .map(|i| Arc::new(MemoryMember::new(format!("m{i}"), 8 * MIB)) as Arc<dyn Member>)
        .collect();
    let opts = VolumeOptions {
        block_size: 4096,
        members_known_zero: true,
        ..VolumeOptions::default()
    };
    let v =
        Arc::new(Volume::new(named(Level::Raid6, n, None, STRIP, 8 * MIB), mems, opts).unwrap());
    let stripes = 8 * MIB / STRIP;
    // Slow enough (8 MiB/s over a 32 MiB volume) to be stopped part-way.
    let ctl = Arc::new(ScrubControl::new(false, 8 * MIB));
    let run = |v: Arc<Volume>, ctl: Arc<ScrubControl>| {
        std::thread::spawn(move || block_on(v.scrub(&ctl)).expect("scrub"))
    };
    let t = run(v.clone(), ctl.clone());
    while ctl.report().position_bytes == 0 {
        std::thread::sleep(Duration::from_millis(5));
    }
    ctl.cancel();
    let first = t.join().unwrap();
    assert_eq!(first.state, ScrubState::Cancelled);
    assert!(first.position_bytes > 0 && first.position_bytes < first.total_bytes);
    // Resume paused: nothing moves until it is resumed.
    ctl.pause();
    let t = run(v.clone(), ctl.clone());
    std::thread::sleep(Duration::from_millis(100));
    let held = ctl.report();
    assert_eq!(held.state, ScrubState::Paused);
    assert_eq!(held.position_bytes, first.position_bytes);
    ctl.set_rate(0);
    ctl.resume();
    let done = t.join().unwrap();
    assert_eq!(done.state, ScrubState::Done);
    assert_eq!(done.checked, stripes, "every stripe checked exactly once");
}

/// A parity group's scrub reads each member once per window (its rows of the window in one
/// read), for every strip size the config takes from the smallest to the largest and windows
/// that cut stripes: a healthy volume reads each member's bytes exactly once and checks every
/// stripe once. Corruption seeded into random stripes is found once per stripe (the window's
/// check sends just those stripes the stripe-by-stripe way), a repair leaves nothing, and
/// only the stripes that disagreed are read a second time.
#[test]
fn parity_scrub_reads_each_member_once_and_finds_every_bad_stripe() {
    for seed in seeds("parity_scrub_reads_each_member_once", 1) {
        let _g = SeedGuard {
            test: "parity_scrub_reads_each_member_once_and_finds_every_bad_stripe",
            seed,
        };
        let mut rng = SmallRng::seed_from_u64(seed);
        for (level, n) in [
            (Level::Raid5, 3),
            (Level::Raid5, 8),
            (Level::Raid6, 4),
            (Level::Raid6, 7),
        ] {
            for strip in [4 * KIB, 64 * KIB, MIB, 16 * MIB] {
                let member = (2 * MIB).max(strip);
                one_parity_scrub(&mut rng, level, n, strip, member);
            }
        }
    }
}

fn one_parity_scrub(rng: &mut SmallRng, level: Level, n: usize, strip: u64, member: u64) {
    let what = format!("{level:?} x{n}, {} KiB strips", strip / KIB);
    let mems: Vec<Arc<MemoryMember>> = (0..n)
        .map(|i| Arc::new(MemoryMember::new(format!("m{i}"), member)))
        .collect();
    let opts = VolumeOptions {
        block_size: 4096,
        members_known_zero: true,
        cache_max_age: None,
        ..VolumeOptions::default()
    };
    let dyns = mems.iter().map(|m| m.clone() as Arc<dyn Member>).collect();
    let v = Volume::new(named(level, n, None, strip, member), dyns, opts).expect("volume");
    let mut data = vec![0u8; v.capacity() as usize];
    rng.fill(&mut data[..]);
    block_on(async {
        for (i, piece) in data.chunks(MIB as usize).enumerate() {
            let at = i as u64 * MIB;
            v.write(at, Buf::copy_from(piece), false)
                .await
                .expect("write");
        }
        v.flush().await.expect("flush");
    });
    let stripes = member / strip;
    let read_bytes = |m: &MemoryMember| m.counters().snapshot().read_bytes;
    let before: Vec<(u64, u64)> = (mems.iter())
        .map(|m| (read_bytes(m), m.counters().snapshot().reads))
        .collect();
    let r = scrub(&v, false);
    assert_eq!(
        (r.checked, r.mismatches, r.skipped),
        (stripes, 0, 0),
        "{what}"
    );
    // One read per member for each window that owns a stripe (its first byte).
    let (window, width) = (4 * MIB, v.capacity() / stripes);
    let owning = (0..v.capacity().div_ceil(window))
        .filter(|i| (i * window).div_ceil(width) < ((i + 1) * window).div_ceil(width).min(stripes))
        .count() as u64;
    for (m, (b, r)) in mems.iter().zip(&before) {
        assert_eq!(
            read_bytes(m) - b,
            member,
            "{what}: member {} read once",
            m.name()
        );
        let reads = m.counters().snapshot().reads - r;
        assert_eq!(reads, owning, "{what}: member {}", m.name());
    }
    // Corrupt a few random stripes, each in one random member and byte.
    let mut bad = std::collections::BTreeSet::new();
    for _ in 0..rng.gen_range(1..=3u64.min(stripes)) {
        let s = rng.gen_range(0..stripes);
        if bad.insert(s) {
            let at = s * strip + rng.gen_range(0..strip);
            flip(&mems[rng.gen_range(0..n)], at, 0x10);
        }
    }
    let bad_len = bad.len() as u64;
    let before: Vec<u64> = mems.iter().map(|m| read_bytes(m)).collect();
    let found = scrub(&v, false);
    let counts = (found.checked, found.mismatches, found.repaired);
    assert_eq!(counts, (stripes, bad_len, 0), "{what}: bad stripes {bad:?}");
    for (m, b) in mems.iter().zip(&before) {
        let again = bad_len * strip;
        assert_eq!(read_bytes(m) - b, member + again, "{what}: {}", m.name());
    }
    let fixed = scrub(&v, true);
    assert_eq!(
        (fixed.mismatches, fixed.repaired),
        (bad_len, bad_len),
        "{what}"
    );
    assert_eq!(scrub(&v, false).mismatches, 0, "{what}");
}
