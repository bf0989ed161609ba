//! Write-through joining (`raid/join.rs`): a partial-stripe write with another write queued
//! on its stripe leaves its bytes to that write, so writes that fill a stripe together are
//! written as one full-stripe write (no reads, no partial parity). Each test holds the
//! stripes with a slow write first (members with added latency), so the others queue behind
//! it in the order they are polled.

mod common;

use common::*;
use futures::executor::block_on;
use futures::future::join_all;
use nbraid_core::{Buf, CacheMode, CounterSnapshot, Volume, VolumeOptions};
use nbraid_layout::Level;
use nbraid_sim::FaultOps;
use std::sync::{mpsc, Arc};
use std::time::Duration;

const STRIP: u64 = 64 * KIB;

/// A write-through array of `n` members with 20 ms of latency on every member op.
fn slow_array(level: Level, n: usize) -> (Arc<Volume>, Members) {
    let members = faulty_members(n, 4 * MIB, 7, false);
    for m in &members.0 {
        m.set_latency(Duration::from_millis(20), Duration::from_millis(20));
    }
    let v = Volume::new(
        named(level, n, None, STRIP, 4 * MIB),
        members.1.clone(),
        VolumeOptions {
            block_size: 4096,
            cache: CacheMode::WriteThrough,
            members_known_zero: true,
            ..VolumeOptions::default()
        },
    )
    .expect("volume");
    (Arc::new(v), members)
}

/// Member reads since `before`.
fn reads_since(v: &Volume, before: &[CounterSnapshot]) -> u64 {
    v.member_health()
        .iter()
        .map(|h| h.counters)
        .collect::<Vec<_>>()
        .iter()
        .zip(before)
        .map(|(a, b)| a.reads - b.reads)
        .sum()
}

fn pattern(tag: u8, len: u64) -> Vec<u8> {
    (0..len).map(|i| tag ^ (i / 4096) as u8).collect()
}

/// Runs the writes `(offset, bytes)` concurrently, polled in order, and returns which
/// succeeded; fails the test if they have not all ended within 30 s (a deadlock: the thread
/// is left behind).
fn concurrently(v: &Arc<Volume>, writes: &[(u64, Vec<u8>)]) -> Vec<bool> {
    let (tx, rx) = mpsc::channel();
    let (v, writes) = (v.clone(), writes.to_vec());
    std::thread::spawn(move || {
        let futs = writes
            .iter()
            .map(|(at, d)| v.write(*at, Buf::copy_from(d), false));
        let ok: Vec<bool> = block_on(join_all(futs)).iter().map(|r| r.is_ok()).collect();
        let _ = tx.send(ok);
    });
    rx.recv_timeout(Duration::from_secs(30))
        .expect("concurrent writes ended within 30 s (no deadlock)")
}

fn read(v: &Volume, at: u64, len: u64) -> Vec<u8> {
    block_on(v.read(at, len)).expect("read").to_vec()
}

#[test]
fn partial_writes_queued_on_a_stripe_become_one_full_stripe_write() {
    for (level, n) in [(Level::Raid5, 4), (Level::Raid6, 5)] {
        // Three data chunks a stripe.
        let (v, _m) = slow_array(level, n);
        let width = 3 * STRIP;
        let before = v
            .member_health()
            .iter()
            .map(|h| h.counters)
            .collect::<Vec<_>>();
        // A full stripe holds stripe 0; three thirds queue behind it.
        let writes = [
            (0, pattern(1, width)),
            (0, pattern(2, STRIP)),
            (STRIP, pattern(3, STRIP)),
            (2 * STRIP, pattern(4, STRIP)),
        ];
        assert_eq!(concurrently(&v, &writes), [true; 4], "{level}");
        assert_eq!(
            reads_since(&v, &before),
            0,
            "{level}: no partial write read"
        );
        let want: Vec<u8> = [pattern(2, STRIP), pattern(3, STRIP), pattern(4, STRIP)].concat();
        assert!(read(&v, 0, width) == want, "{level}: the thirds read back");
    }
}

#[test]
fn a_lone_partial_write_is_written_at_once() {
    // Nobody queued, nothing else in flight: the same thirds one after another are each
    // written alone (each reads: RMW or RCW), and none waits (a hold would time out).
    let (v, _m) = slow_array(Level::Raid5, 4);
    for i in 0..3 {
        let before = v
            .member_health()
            .iter()
            .map(|h| h.counters)
            .collect::<Vec<_>>();
        assert_eq!(concurrently(&v, &[(i * STRIP, pattern(5, STRIP))]), [true]);
        assert!(reads_since(&v, &before) > 0, "third {i}");
    }
}

#[test]
fn a_sequential_stream_across_stripes_is_written_in_full_stripes() {
    // 128 KiB writes on a 192 KiB stripe: the middle one ends stripe 0 and begins stripe 1.
    let (v, _m) = slow_array(Level::Raid5, 4);
    let before = v
        .member_health()
        .iter()
        .map(|h| h.counters)
        .collect::<Vec<_>>();
    let writes = [
        (0, pattern(1, 6 * STRIP)),
        (0, pattern(2, 2 * STRIP)),
        (2 * STRIP, pattern(3, 2 * STRIP)),
        (4 * STRIP, pattern(4, 2 * STRIP)),
    ];
    assert_eq!(concurrently(&v, &writes), [true; 4]);
    assert_eq!(reads_since(&v, &before), 0);
    let want: Vec<u8> = [
        pattern(2, 2 * STRIP),
        pattern(3, 2 * STRIP),
        pattern(4, 2 * STRIP),
    ]
    .concat();
    assert!(read(&v, 0, 6 * STRIP) == want);
}

#[test]
fn a_writer_that_left_bytes_while_holding_other_stripes_does_not_deadlock() {
    // A (stripe 0's tail and all of stripe 1) leaves its tail to B, queued for stripes 0
    // and 1. A must not wait for stripe 0 again while it still holds stripe 1, which B needs.
    let (v, _m) = slow_array(Level::Raid5, 4);
    let width = 3 * STRIP;
    let tail = STRIP + STRIP / 2;
    let a = pattern(2, tail + width);
    let b = pattern(3, width + STRIP);
    let writes = [
        (0, pattern(1, 2 * width)),
        (width - tail, a.clone()),
        (0, b.clone()),
    ];
    assert_eq!(concurrently(&v, &writes), [true; 3]);
    // B came after A on both stripes: B's bytes, then the rest of A's.
    let mut want = b;
    want.extend_from_slice(&a[(width + STRIP - (width - tail)) as usize..]);
    assert!(read(&v, 0, 2 * width) == want);
}

#[test]
fn writers_whose_bytes_were_joined_share_the_failure() {
    // Two members of a RAID 5 fail every write: the joined write fails beyond tolerance,
    // and both requests whose bytes it carried hear so.
    let (v, m) = slow_array(Level::Raid5, 4);
    for f in &m.0[1..3] {
        f.fail_range(FaultOps::WRITE, 0..4 * MIB);
    }
    let writes = [
        (0, pattern(1, 3 * STRIP)),
        (0, pattern(2, STRIP)),
        (STRIP, pattern(3, 2 * STRIP)),
    ];
    assert_eq!(concurrently(&v, &writes), [false; 3]);
}

#[test]
fn a_stream_write_waits_for_its_successor_while_other_writes_are_in_flight() {
    // P (a whole stripe, slow) is in flight when A begins stripe 1; nobody is queued on
    // stripe 1 yet, but A continues P, so A holds its bytes until B, which continues A,
    // arrives and completes the stripe.
    let (v, _m) = slow_array(Level::Raid5, 4);
    let width = 3 * STRIP;
    let half = width / 2;
    let before = v
        .member_health()
        .iter()
        .map(|h| h.counters)
        .collect::<Vec<_>>();
    let writes = [
        (0, pattern(1, width)),
        (width, pattern(2, half)),
        (width + half, pattern(3, half)),
    ];
    assert_eq!(concurrently(&v, &writes), [true; 3]);
    assert_eq!(reads_since(&v, &before), 0, "stripe 1 written whole");
    let want: Vec<u8> = [pattern(1, width), pattern(2, half), pattern(3, half)].concat();
    assert!(read(&v, 0, 2 * width) == want);
}

#[test]
fn a_held_write_whose_successor_never_comes_is_written_when_the_others_end() {
    // A holds (P is in flight) but no write follows it: once P ends, A writes alone.
    let (v, _m) = slow_array(Level::Raid5, 4);
    let width = 3 * STRIP;
    let writes = [(0, pattern(1, width)), (width, pattern(2, width / 2))];
    assert_eq!(concurrently(&v, &writes), [true; 2]);
    let mut want = pattern(1, width);
    want.extend(pattern(2, width / 2));
    assert!(read(&v, 0, width + width / 2) == want);
}

/// A whole stripe held by a slow write; then A (`STRIP` bytes of pattern 2 at 0, with `fua`)
/// and a zeroing of the stripe queue behind it, in that order: A leaves its bytes to the
/// zeroing. Returns the array once all three succeeded.
fn zeroed_over_left_bytes(fua: bool) -> Arc<Volume> {
    let (v, _m) = slow_array(Level::Raid5, 4);
    let width = 3 * STRIP;
    let (held, a) = (pattern(1, width), pattern(2, STRIP));
    let (r_held, r_a, r_zero) = block_on(futures::future::join3(
        v.write(0, Buf::copy_from(&held), false),
        v.write(0, Buf::copy_from(&a), fua),
        v.write_zeroes(0, width, false),
    ));
    assert!(r_held.is_ok() && r_a.is_ok() && r_zero.is_ok());
    v
}

#[test]
fn bytes_left_on_a_stripe_that_is_then_zeroed_whole_do_not_land_after_the_zeroes() {
    // The zeroes supersede A's bytes (both were in flight together) and A is answered, so
    // its bytes never land later: another write of the stripe finds nothing to carry.
    let v = zeroed_over_left_bytes(false);
    block_on(v.write(2 * STRIP, Buf::copy_from(&pattern(3, STRIP)), false)).unwrap();
    let mut want = vec![0u8; 2 * STRIP as usize];
    want.extend(pattern(3, STRIP));
    assert!(read(&v, 0, 3 * STRIP) == want);
}

#[test]
fn fua_bytes_left_on_a_stripe_that_is_then_zeroed_whole_land_after_the_zeroes() {
    // A FUA write was promised durability, which unflushed zeroes cannot give: its bytes
    // are written after them.
    let v = zeroed_over_left_bytes(true);
    let mut want = pattern(2, STRIP);
    want.resize(3 * STRIP as usize, 0);
    assert!(read(&v, 0, 3 * STRIP) == want);
}
