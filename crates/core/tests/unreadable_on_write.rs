//! A read error that leaves a parity group's write no redundancy, on members the volume
//! cannot do without (a degraded RAID 5 or a RAID 6 missing two, then a bad spot on a third
//! member): that write answers an error and writes nothing — the stripe keeps what it held,
//! its parity with it — and the member keeps serving everything else. Before, the member was
//! failed (to record the stripe's lost redundancy, the write's bytes salvaged without
//! parity), which took the volume beyond its tolerance: one latent bad sector made every byte
//! unreadable. Where the volume can do without the member (a mirror of RAID 5s), it is still
//! failed that way.

mod common;

use common::{named, BadSpot, KIB, MIB};
use futures::executor::block_on;
use nbraid_core::{Buf, CacheMode, Member, MemoryMember, Volume, VolumeOptions};
use nbraid_layout::Level;
use std::sync::atomic::Ordering;
use std::sync::Arc;

const MEMBER: u64 = 4 * MIB;
const STRIP: u64 = 64 * KIB;
/// The bad spot: 16 KiB of member 1's region, inside its first chunk (stripe 0: RAID 5's
/// left-symmetric data on members 0 and 1, parity on 2).
const SPOT: std::ops::Range<u64> = 16 * KIB..32 * KIB;

/// Write-through: each write's fate is its own answer (a write-back cache keeps a refused
/// stripe's bytes and answers at the flush).
fn opts() -> VolumeOptions {
    VolumeOptions {
        cache: CacheMode::WriteThrough,
        ..VolumeOptions::default()
    }
}

fn pattern(len: u64, salt: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(29) ^ (i >> 12) as u8 ^ salt)
        .collect()
}

/// A `level` volume over `n` members, filled, then members `gone` failed and member 1's
/// spot gone bad; the spot's member and the volume's model.
fn degraded(level: Level, n: usize, gone: &[usize]) -> (Volume, Arc<BadSpot>, Vec<u8>) {
    let spotted = Arc::new(BadSpot::new("m1", MEMBER, SPOT));
    spotted.bad.store(false, Ordering::SeqCst);
    let members: Vec<Arc<dyn Member>> = (0..n)
        .map(|i| match i {
            1 => spotted.clone() as Arc<dyn Member>,
            _ => Arc::new(MemoryMember::new(format!("m{i}"), MEMBER)) as Arc<dyn Member>,
        })
        .collect();
    let v = Volume::new(named(level, n, None, STRIP, MEMBER), members, opts()).expect("volume");
    let model = pattern(v.capacity(), 1);
    block_on(v.write(0, Buf::copy_from(&model), false)).expect("fill");
    for &g in gone {
        v.fail_member(g, "test: gone");
    }
    spotted.bad.store(true, Ordering::SeqCst);
    (v, spotted, model)
}

/// Writes 4 KiB at every 16 KiB of the volume: the ones that fail leave the model as it was.
fn write_everywhere(v: &Volume, model: &mut [u8]) -> usize {
    let mut failed = 0;
    for at in (0..v.capacity()).step_by(16 * KIB as usize) {
        let bytes = pattern(4 * KIB, (at / 4096) as u8);
        match block_on(v.write(at, Buf::copy_from(&bytes), false)) {
            Ok(_) => model[at as usize..at as usize + bytes.len()].copy_from_slice(&bytes),
            Err(_) => failed += 1,
        }
    }
    failed
}

#[test]
fn a_member_the_volume_cannot_do_without_is_kept_and_the_write_alone_fails() {
    for (level, n, gone) in [(Level::Raid5, 3, &[0][..]), (Level::Raid6, 4, &[0, 2][..])] {
        let (v, spot, mut model) = degraded(level, n, gone);
        let failed = write_everywhere(&v, &mut model);
        assert!(failed > 0, "{level:?}: some writes need the bad spot");
        assert!(!v.member_is_failed(1), "{level:?}: member 1 was failed");
        assert!(v.is_available(), "{level:?}");
        // The spot reads again (the disk recovered it): every stripe, the refused writes'
        // included, holds what the model says — nothing of those writes went out, and the
        // parity the lost members' bytes come from agrees with the rest.
        spot.bad.store(false, Ordering::SeqCst);
        let got = block_on(v.read(0, v.capacity())).expect("read");
        assert!(got[..] == model[..], "{level:?}: the volume reads wrong");
    }
}

/// Where the volume can do without the member (the other side of a mirror of RAID 5s holds
/// every byte), it is failed as before, and the write goes through on the other side.
#[test]
fn a_member_the_volume_can_do_without_is_still_failed() {
    let mut members: Vec<Arc<dyn Member>> = Vec::new();
    let spotted = Arc::new(BadSpot::new("m1", MEMBER, SPOT));
    spotted.bad.store(false, Ordering::SeqCst);
    for i in 0..6 {
        members.push(match i {
            1 => spotted.clone() as Arc<dyn Member>,
            _ => Arc::new(MemoryMember::new(format!("m{i}"), MEMBER)) as Arc<dyn Member>,
        });
    }
    let tree = common::mirror_of_raid5s(STRIP, 0, MEMBER);
    let geometry = nbraid_layout::Geometry::from_tree(tree);
    let v = Volume::new(geometry, members, opts()).expect("volume");
    let mut model = pattern(v.capacity(), 1);
    block_on(v.write(0, Buf::copy_from(&model), false)).expect("fill");
    v.fail_member(0, "test: gone");
    spotted.bad.store(true, Ordering::SeqCst);
    let failed = write_everywhere(&v, &mut model);
    assert_eq!(failed, 0, "the other side takes every write");
    assert!(v.member_is_failed(1), "member 1 is failed, as before");
    let got = block_on(v.read(0, v.capacity())).expect("read");
    assert!(got[..] == model[..]);
}
