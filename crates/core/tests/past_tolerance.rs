//! A parity group past its tolerance (more members failed than it has parity chunks) with
//! no other copy of its bytes takes no writes: nothing reaches its survivors, in either
//! cache mode, and no write is acknowledged. A fault hunt (RAID 5 and 6 on loop devices, a
//! third device gone read-only) found each such write salvaged onto the survivors — the
//! write answered EIO, or under write-back was acknowledged and failed only at the flush —
//! and the documented way back, a forced start, then rebuilt the lost chunks from parity
//! that disagreed with those new bytes: 290 KB that nobody wrote read back wrong, silently.
//! md's group past its tolerance takes no writes either.

mod common;

use common::{named, KIB, MIB};
use futures::executor::block_on;
use nbraid_core::{Buf, CacheMode, Member, MemoryMember, Volume, VolumeOptions};
use nbraid_layout::Level;
use std::sync::Arc;

const MEMBER: u64 = 2 * MIB;
const STRIP: u64 = 16 * KIB;

fn opts(cache: CacheMode) -> VolumeOptions {
    VolumeOptions {
        cache,
        ..VolumeOptions::default()
    }
}

fn pattern(len: u64, salt: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ (i >> 12) as u8 ^ salt)
        .collect()
}

fn raw(m: &MemoryMember) -> Vec<u8> {
    block_on(m.read(0, Buf::new(MEMBER as usize)))
        .expect("memory reads")
        .to_vec()
}

fn volume(level: Level, members: &[Arc<MemoryMember>], cache: CacheMode) -> Volume {
    let dyns: Vec<Arc<dyn Member>> = (members.iter())
        .map(|m| m.clone() as Arc<dyn Member>)
        .collect();
    Volume::new(
        named(level, members.len(), None, STRIP, MEMBER),
        dyns,
        opts(cache),
    )
    .expect("volume")
}

#[test]
fn a_group_past_its_tolerance_writes_nothing_and_a_forced_start_reads_right() {
    let cases = [
        (Level::Raid5, 3, vec![0, 1]),
        (Level::Raid6, 5, vec![0, 2, 3]),
    ];
    for (level, n, gone) in cases {
        for cache in [CacheMode::WriteThrough, CacheMode::WriteBack { bytes: MIB }] {
            let what = format!("{level:?} of {n}, {cache:?}, {gone:?} failed");
            let members: Vec<Arc<MemoryMember>> = (0..n)
                .map(|i| Arc::new(MemoryMember::new(format!("m{i}"), MEMBER)))
                .collect();
            let v = volume(level, &members, cache);
            let model = pattern(v.capacity(), 3);
            block_on(v.write(0, Buf::copy_from(&model), false)).expect("fill");
            block_on(v.flush()).expect("flush");
            for &g in &gone {
                v.fail_member(g, "test: gone");
            }
            let before: Vec<Vec<u8>> = members.iter().map(|m| raw(m)).collect();
            let width = (n as u64 - if level == Level::Raid5 { 1 } else { 2 }) * STRIP;
            // A partial stripe, an unaligned run across stripes, a whole stripe, FUA.
            let writes = [
                (4 * KIB, 4 * KIB, false),
                (width - 512, 3 * width, false),
                (4 * width, width, false),
                (8 * width + 8 * KIB, 8 * KIB, true),
            ];
            for (at, len, fua) in writes {
                let r = block_on(v.write(at, Buf::copy_from(&pattern(len, 9)), fua));
                assert!(
                    r.is_err(),
                    "{what}: a write of {len} at {at} was acknowledged"
                );
                for (i, m) in members.iter().enumerate() {
                    assert!(
                        raw(m) == before[i],
                        "{what}: member {i}'s bytes changed by {at}+{len}"
                    );
                }
            }
            let _ = block_on(v.flush());
            for (i, m) in members.iter().enumerate() {
                assert!(raw(m) == before[i], "{what}: member {i}'s bytes changed");
            }
            drop(v);
            // A forced start takes the failed members back but one, rebuilt from parity.
            for rebuilt in 0..n {
                let v = volume(level, &members, CacheMode::WriteThrough);
                v.fail_member(rebuilt, "test: rebuilt from parity");
                let got = block_on(v.read(0, v.capacity())).expect("reads");
                assert!(
                    got[..] == model[..],
                    "{what}: member {rebuilt} rebuilt wrong"
                );
            }
        }
    }
}

/// A write-back stripe holding acknowledged bytes, its group then past its tolerance: a
/// newer write over those bytes is refused (nothing written), so the cached bytes are still
/// the newest — reads return them (or an error), never the older bytes the members hold.
/// The simulator (RAID 5, seed 7997125277611734310) read zeroes here: the refused write
/// dropped the cached bytes as if it had salvaged its own onto the members.
#[test]
fn a_refused_write_keeps_the_cached_bytes_it_did_not_replace() {
    let n = 4;
    let width = (n as u64 - 1) * STRIP;
    // A partial stripe over the cached bytes, one that covers them and more, a whole stripe.
    let newer = [(8 * KIB, 4 * KIB), (512, width - 1024), (0, width)];
    for (at, len) in newer {
        let what = format!("RAID 5 of {n}, newer write {at}+{len}");
        let members: Vec<Arc<MemoryMember>> = (0..n)
            .map(|i| Arc::new(MemoryMember::new(format!("m{i}"), MEMBER)))
            .collect();
        let v = volume(Level::Raid5, &members, CacheMode::WriteBack { bytes: MIB });
        let old = pattern(width, 3);
        block_on(v.write(0, Buf::copy_from(&old), false)).expect("fill");
        block_on(v.flush()).expect("flush");
        let cached = pattern(width - 1024, 5);
        block_on(v.write(512, Buf::copy_from(&cached), false)).expect("cached");
        v.fail_member(0, "test: gone");
        v.fail_member(1, "test: gone");
        let r = block_on(v.write(at, Buf::copy_from(&pattern(len, 9)), false));
        assert!(r.is_err(), "{what}: acknowledged past tolerance");
        let mut want = old.clone();
        want[512..width as usize - 512].copy_from_slice(&cached);
        let mut read = 0;
        for s in (0..width).step_by(512) {
            if let Ok(got) = block_on(v.read(s, 512)) {
                let w = &want[s as usize..s as usize + 512];
                assert!(&got[..] == w, "{what}: sector at {s} reads older bytes");
                read += 1;
            }
        }
        assert!(read > 0, "{what}: no sector read at all");
    }
}
