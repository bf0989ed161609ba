//! Faults beyond tolerance, mirror read repair, power loss, request and assembly errors,
//! counters.

mod common;

use common::*;
use futures::executor::block_on;
use futures::future::join_all;
use futures::FutureExt;
use nbraid_core::{
    Buf, CacheMode, Member, MemberState, MemoryMember, ReadPolicy, Volume, VolumeError,
    VolumeOptions,
};
use nbraid_layout::{Geometry, Level, Node, ParityLayout, Region, Shape};
use nbraid_sim::FaultOps;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;
use std::task::Context;
use std::time::Duration;

fn vol(geometry: Geometry, members: Vec<Arc<dyn Member>>) -> Volume {
    Volume::new(geometry, members, VolumeOptions::default()).expect("assemble")
}

fn pattern(len: u64, salt: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(salt))
        .collect()
}

#[test]
fn raid0_beyond_tolerance_errors_and_never_returns_wrong_data() {
    let (f, m) = faulty_members(2, 256 * KIB, 1, false);
    let v = vol(named(Level::Raid0, 2, None, 4 * KIB, 256 * KIB), m);
    let data = pattern(v.capacity(), 1);
    block_on(v.write(0, Buf::copy_from(&data), false)).unwrap();
    f[1].kill();
    // Strip 0 lives on member 0 and still reads.
    let got = block_on(v.read(0, 4096)).unwrap();
    assert_eq!(&got[..], &data[..4096]);
    // Strip 1 lives on member 1: its read error surfaces (nothing to repair from).
    let e = block_on(v.read(4096, 4096)).unwrap_err();
    assert!(matches!(e, VolumeError::Member { member: 1, .. }), "{e}");
    assert!(e.to_string().contains("mem1"), "{e}");
    // A write to member 1 fails it; from then on its data is unavailable.
    let e = block_on(v.write(0, Buf::copy_from(&data[..16384]), false)).unwrap_err();
    assert!(e.to_string().contains("mem1"), "{e}");
    assert_eq!(
        v.member_health()
            .iter()
            .map(|h| h.state)
            .collect::<Vec<_>>(),
        vec![MemberState::Healthy, MemberState::Failed]
    );
    assert!(!v.is_available());
    let e = block_on(v.read(0, 16384)).unwrap_err();
    assert!(matches!(e, VolumeError::Unavailable { .. }), "{e}");
    assert!(
        e.to_string()
            .contains("member 1 (`faulty(mem1)`) has failed"),
        "{e}"
    );
    // Ranges only on member 0 still read correctly.
    let got = block_on(v.read(8192, 4096)).unwrap();
    assert_eq!(&got[..], &data[8192..12288]);
    assert!(v.counters().errors >= 3);
}

#[test]
fn mirrors_beyond_tolerance_error_within_tolerance_serve() {
    // raid10 x4: members 0,1 mirror span 0; 2,3 span 1; 8K strip.
    let (f, m) = faulty_members(4, 256 * KIB, 2, false);
    let v = vol(named(Level::Raid10, 4, Some(2), 8 * KIB, 256 * KIB), m);
    let data = pattern(v.capacity(), 2);
    block_on(v.write(0, Buf::copy_from(&data), false)).unwrap();
    // One per span: within tolerance.
    f[0].kill();
    f[3].kill();
    let got = block_on(v.read(0, v.capacity())).unwrap();
    assert!(got[..] == data[..]);
    block_on(v.write(0, Buf::copy_from(&pattern(v.capacity(), 3)), true)).unwrap();
    assert_eq!(
        v.member_health()
            .iter()
            .map(|h| h.state)
            .collect::<Vec<_>>(),
        vec![
            MemberState::Failed,
            MemberState::Healthy,
            MemberState::Healthy,
            MemberState::Failed
        ]
    );
    assert!(v.is_available());
    // Both copies of span 0 gone.
    f[1].kill();
    let e = block_on(v.read(0, 8192)).unwrap_err();
    assert!(
        e.to_string().contains("could be read") || e.to_string().contains("failed"),
        "{e}"
    );
    let e = block_on(v.write(0, Buf::copy_from(&[7; 8192]), false)).unwrap_err();
    assert!(!e.to_string().is_empty());
    assert!(!v.is_available());
    // Span 1 (strip 1) still fine.
    let got = block_on(v.read(8192, 8192)).unwrap();
    assert_eq!(&got[..], &pattern(v.capacity(), 3)[8192..16384]);
    // Flush reports the loss instead of claiming durability: span 0 has no member left
    // to make its writes durable on.
    let e = block_on(v.flush()).expect_err("a flush with a whole mirror lost must fail");
    assert!(!e.to_string().is_empty());
}

#[test]
fn mirror_read_error_is_repaired_from_the_good_copy() {
    let inner: Vec<Arc<nbraid_sim::Faulty<MemoryMember>>> = (0..2)
        .map(|i| {
            Arc::new(nbraid_sim::Faulty::new(
                MemoryMember::new(format!("m{i}"), MIB),
                9,
            ))
        })
        .collect();
    let members: Vec<Arc<dyn Member>> =
        inner.iter().map(|f| f.clone() as Arc<dyn Member>).collect();
    let opts = VolumeOptions {
        read_policy: ReadPolicy::RoundRobin,
        ..VolumeOptions::default()
    };
    let v = Volume::new(named(Level::Raid1, 2, None, 64 * KIB, MIB), members, opts).unwrap();
    let data = pattern(64 * KIB, 5);
    block_on(v.write(128 * KIB, Buf::copy_from(&data), false)).unwrap();
    // Copy 0 has a bad sector, wrong bytes behind a read error, that the disk remaps when
    // it is rewritten (it reads again after that).
    inner[0].inner().poke(128 * KIB + 4096, &[0xEE; 512]);
    inner[0].fail_reads_until_written(128 * KIB + 4096..128 * KIB + 4608);
    for _ in 0..6 {
        let got = block_on(v.read(128 * KIB, 64 * KIB)).unwrap();
        assert!(got[..] == data[..], "never the bad bytes");
    }
    assert!(
        v.member_health()[0].read_errors >= 1,
        "round-robin must have tried copy 0"
    );
    assert!(v.counters().repairs >= 1);
    assert_eq!(
        v.member_health()
            .iter()
            .map(|h| h.state)
            .collect::<Vec<_>>(),
        vec![MemberState::Healthy; 2],
        "a repaired read error does not fail the member"
    );
    let mut fixed = vec![0; 512];
    inner[0].inner().peek(128 * KIB + 4096, &mut fixed);
    assert_eq!(
        fixed,
        data[4096..4608],
        "bad copy rewritten from the good one"
    );

    // When the rewrite fails too, the member is failed; reads still succeed.
    inner[0].inner().poke(128 * KIB, &[0xEE; 512]);
    inner[0].fail_range(FaultOps::ALL, 128 * KIB..128 * KIB + 512);
    for _ in 0..4 {
        let got = block_on(v.read(128 * KIB, 4096)).unwrap();
        assert_eq!(&got[..], &data[..4096]);
    }
    assert_eq!(v.member_health()[0].state, MemberState::Failed);
}

/// Encodes a write's tag into every 8 bytes of each 512-byte sector.
fn tagged(tag: u64, sectors: u64) -> Vec<u8> {
    let mut v = Vec::with_capacity((sectors * 512) as usize);
    for _ in 0..sectors * 64 {
        v.extend_from_slice(&tag.to_le_bytes());
    }
    v
}

fn power_loss_run(geometry: Geometry, members: usize, seed: u64) {
    power_loss_run_with(geometry, members, seed, VolumeOptions::default())
}

fn power_loss_run_with(geometry: Geometry, members: usize, seed: u64, opts: VolumeOptions) {
    let _g = SeedGuard {
        test: "power_loss",
        seed,
    };
    let mut rng = SmallRng::seed_from_u64(seed);
    let (faulty, dyns) = faulty_members(members, 256 * KIB, seed, true);
    let v = Volume::new(geometry.clone(), dyns.clone(), opts.clone()).expect("assemble");
    let sectors = v.capacity() / 512;
    // Per sector: tags it may hold after a crash (0 = zeroes); one tag = must read back.
    let mut allowed: Vec<Vec<u64>> = vec![vec![0]; sectors as usize];
    let mut last_batch: Vec<u64> = vec![0; sectors as usize];
    let mut next_tag = 1;
    for batch in 1..=40u64 {
        let n = rng.gen_range(1..6);
        let mut writes = Vec::new();
        let mut flush = false;
        let mut taken: Vec<(u64, u64)> = Vec::new();
        for _ in 0..n {
            if rng.gen_bool(0.2) {
                flush = true;
                continue;
            }
            let len = rng.gen_range(1..=32u64);
            let start = rng.gen_range(0..sectors - len);
            if taken.iter().any(|&(s, l)| start < s + l && s < start + len) {
                continue;
            }
            taken.push((start, len));
            writes.push((start, len, next_tag, rng.gen_bool(0.15)));
            next_tag += 1;
        }
        let vref = &v;
        let mut futs = Vec::new();
        for &(s, l, tag, fua) in &writes {
            futs.push(
                async move {
                    vref.write(s * 512, Buf::copy_from(&tagged(tag, l)), fua)
                        .await
                        .map(|_| ())
                }
                .boxed(),
            );
        }
        if flush {
            futs.push(vref.flush().boxed());
        }
        for r in block_on(join_all(futs)) {
            r.expect("no faults injected");
        }
        for &(s, l, tag, fua) in &writes {
            for sec in s..s + l {
                let a = &mut allowed[sec as usize];
                if fua {
                    *a = vec![tag];
                } else {
                    a.push(tag);
                }
                last_batch[sec as usize] = batch;
            }
        }
        if flush {
            // Writes of earlier batches completed before the flush was issued.
            for sec in 0..sectors as usize {
                if last_batch[sec] < batch {
                    let last = *allowed[sec].last().unwrap();
                    allowed[sec] = vec![last];
                }
            }
        }
    }
    drop(v);
    for f in &faulty {
        block_on(f.crash(rng.gen_bool(0.5))).unwrap();
    }
    // Reassemble over the same members and check every sector.
    let v = Volume::new(geometry, dyns, opts).expect("reassemble");
    let got = block_on(v.read(0, v.capacity())).unwrap();
    let mut must = 0;
    for sec in 0..sectors as usize {
        let bytes = &got[sec * 512..(sec + 1) * 512];
        let tag = u64::from_le_bytes(bytes[..8].try_into().unwrap());
        assert!(
            bytes.chunks(8).all(|c| c == tag.to_le_bytes()),
            "sector {sec} is not one write's data"
        );
        assert!(
            allowed[sec].contains(&tag),
            "sector {sec} holds tag {tag}, allowed {:?}",
            allowed[sec]
        );
        must += usize::from(allowed[sec].len() == 1 && allowed[sec][0] != 0);
    }
    assert!(must > 0, "the run must have flushed something");
}

#[test]
fn power_loss_keeps_every_flushed_and_fua_write() {
    for seed in seeds("power_loss", 3) {
        power_loss_run(named(Level::Raid1, 2, None, 64 * KIB, 256 * KIB), 2, seed);
        power_loss_run(named(Level::Raid0, 3, None, 4 * KIB, 256 * KIB), 3, seed);
        power_loss_run(
            named(Level::Raid10, 4, Some(2), 8 * KIB, 256 * KIB),
            4,
            seed,
        );
        power_loss_run(named(Level::Jbod, 2, None, 64 * KIB, 256 * KIB), 2, seed);
    }
}

/// Parity volumes, write-back and write-through: every write followed by a completed flush
/// (and every FUA write) reads back after power loss. Unflushed writes may leave a stripe's
/// parity stale (the write hole, a later issue); that only matters once a member is lost, so
/// the check is on a healthy reassembly.
#[test]
fn power_loss_keeps_every_flushed_and_fua_write_on_parity() {
    for seed in seeds("power_loss_parity", 3) {
        for cache in [
            CacheMode::WriteThrough,
            CacheMode::WriteBack { bytes: 64 * KIB },
            CacheMode::WriteBack { bytes: 4 * MIB },
        ] {
            let opts = VolumeOptions {
                cache,
                ..VolumeOptions::default()
            };
            let g = named(Level::Raid5, 4, None, 4 * KIB, 256 * KIB);
            power_loss_run_with(g, 4, seed, opts.clone());
            let g = named(Level::Raid6, 5, None, 8 * KIB, 256 * KIB);
            power_loss_run_with(g, 5, seed, opts.clone());
            let g = named(Level::Raid60, 8, Some(2), 4 * KIB, 256 * KIB);
            power_loss_run_with(g, 8, seed, opts);
        }
    }
}

#[test]
fn bad_requests_get_clear_errors() {
    let (_, m) = faulty_members(2, MIB, 3, false);
    let v = vol(named(Level::Raid0, 2, None, 64 * KIB, MIB), m);
    let e = block_on(v.read(100, 512)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "read at offset 100, length 512: not aligned to the volume's 512-byte logical block"
    );
    let e = block_on(v.write(0, Buf::zeroed(700), false)).unwrap_err();
    assert!(e.to_string().contains("length 700: not aligned"), "{e}");
    let e = block_on(v.read(2 * MIB - 512, 1024)).unwrap_err();
    assert!(
        e.to_string()
            .contains("outside the volume of 2097152 bytes"),
        "{e}"
    );
    let e = block_on(v.read(0, 33 * MIB)).unwrap_err();
    assert!(
        e.to_string().contains("exceeds the 33554432-byte limit"),
        "{e}"
    );
    let e = block_on(v.trim(512, 2 * MIB)).unwrap_err();
    assert!(matches!(e, VolumeError::OutOfRange { .. }), "{e}");
    assert!(block_on(v.read(0, 0)).unwrap().is_empty());

    let (_, m) = faulty_members(2, MIB, 3, false);
    let opts = VolumeOptions {
        block_size: 4096,
        ..VolumeOptions::default()
    };
    let v = Volume::new(named(Level::Raid1, 2, None, 64 * KIB, MIB), m, opts).unwrap();
    let e = block_on(v.write(512, Buf::zeroed(4096), false)).unwrap_err();
    assert!(e.to_string().contains("4096-byte logical block"), "{e}");
}

#[test]
fn assembly_errors_name_the_problem() {
    // Parity groups assemble; a write-back cache of no bytes does not.
    let shape = Shape::new(Level::Raid5, 3, None, 64 * KIB, ParityLayout::default()).unwrap();
    let g = Geometry::new(shape, &[Region { start: 0, len: MIB }; 3]).unwrap();
    let (_, m) = faulty_members(3, MIB, 4, false);
    Volume::new(g.clone(), m.clone(), VolumeOptions::default()).expect("raid5 assembles");
    let opts = VolumeOptions {
        cache: CacheMode::WriteBack { bytes: 0 },
        ..VolumeOptions::default()
    };
    let e = Volume::new(g, m, opts).err().unwrap();
    assert!(
        e.to_string().contains("write-back cache needs a size"),
        "{e}"
    );
    // A member smaller than its region.
    let g = named(Level::Raid1, 2, None, 64 * KIB, MIB);
    let m: Vec<Arc<dyn Member>> = vec![
        Arc::new(MemoryMember::new("big", MIB)),
        Arc::new(MemoryMember::new("small", 512 * KIB)),
    ];
    let e = Volume::new(g.clone(), m, VolumeOptions::default())
        .err()
        .unwrap();
    assert!(
        e.to_string()
            .contains("member 1 (`small`) has 524288 bytes"),
        "{e}"
    );
    // Too few members.
    let m: Vec<Arc<dyn Member>> = vec![Arc::new(MemoryMember::new("only", MIB))];
    let e = Volume::new(g.clone(), m, VolumeOptions::default())
        .err()
        .unwrap();
    assert!(
        e.to_string().contains("uses member 1 but only 1 members"),
        "{e}"
    );
    // Bad block size.
    let (_, m) = faulty_members(2, MIB, 4, false);
    let opts = VolumeOptions {
        block_size: 1024,
        ..VolumeOptions::default()
    };
    let e = Volume::new(g, m, opts).err().unwrap();
    assert!(e.to_string().contains("1024 is not supported"), "{e}");
}

#[test]
fn counters_and_in_flight() {
    let (f, m) = faulty_members(2, MIB, 5, false);
    let v = vol(named(Level::Raid1, 2, None, 64 * KIB, MIB), m);
    block_on(v.write(0, Buf::zeroed(8192), false)).unwrap();
    block_on(v.read(0, 8192)).unwrap();
    let c = v
        .member_health()
        .iter()
        .map(|h| h.counters)
        .collect::<Vec<_>>();
    assert_eq!((c[0].writes, c[0].write_bytes, c[1].writes), (1, 8192, 1));
    assert_eq!(c[0].reads + c[1].reads, 1, "one copy serves a read");
    assert_eq!(c[0].read_bytes + c[1].read_bytes, 8192);
    let vc = v.counters();
    assert_eq!((vc.reads, vc.writes, vc.read_bytes), (1, 1, 8192));
    // A read held up by latency is in flight on exactly one member.
    for x in &f {
        x.set_latency(Duration::from_millis(30), Duration::from_millis(30));
    }
    let mut fut = v.read(0, 4096).boxed();
    let waker = futures::task::noop_waker();
    assert!(fut
        .as_mut()
        .poll(&mut Context::from_waker(&waker))
        .is_pending());
    let inflight: u64 = v.member_health().iter().map(|h| h.counters.in_flight).sum();
    assert_eq!(inflight, 1);
    assert!(block_on(fut).is_ok());
    assert_eq!(
        v.member_health()
            .iter()
            .map(|h| h.counters.in_flight)
            .sum::<u64>(),
        0
    );
}

#[test]
fn flush_reaches_only_members_that_got_writes() {
    // jbod: a write to the first member's region dirties only it.
    let (f, m) = faulty_members(2, MIB, 6, false);
    let g = Geometry::from_tree(
        Node::concat(vec![Node::member(0, 0, MIB), Node::member(1, 0, MIB)]).unwrap(),
    );
    let v = vol(g, m);
    block_on(v.write(4096, Buf::zeroed(4096), false)).unwrap();
    block_on(v.flush()).unwrap();
    block_on(v.flush()).unwrap();
    let flushes: Vec<u64> = f.iter().map(|x| x.counters().snapshot().flushes).collect();
    assert_eq!(flushes, vec![1, 0]);
    // FUA writes need no flush.
    block_on(v.write(MIB, Buf::zeroed(4096), true)).unwrap();
    block_on(v.flush()).unwrap();
    assert_eq!(f[1].counters().snapshot().flushes, 0);
}

#[test]
fn mirror_reads_stay_sequential_and_spread_in_large_pieces() {
    for policy in ReadPolicy::ALL {
        let (_, m) = faulty_members(2, 64 * MIB, 7, false);
        let opts = VolumeOptions {
            read_policy: policy,
            ..VolumeOptions::default()
        };
        let v = Volume::new(named(Level::Raid1, 2, None, 64 * KIB, 64 * MIB), m, opts).unwrap();
        // 64 sequential 4 KiB reads, one at a time: one copy serves the whole run.
        for i in 0..64 {
            block_on(v.read(i * 4096, 4096)).unwrap();
        }
        let c = v
            .member_health()
            .iter()
            .map(|h| h.counters)
            .collect::<Vec<_>>();
        assert_eq!(
            (c[0].reads.min(c[1].reads), c[0].reads.max(c[1].reads)),
            (0, 64),
            "{policy}: a short sequential run stays on one copy"
        );
        // One 32 MiB read is cut in 1 MiB pieces over both copies.
        block_on(v.read(0, 32 * MIB)).unwrap();
        let c = v
            .member_health()
            .iter()
            .map(|h| h.counters)
            .collect::<Vec<_>>();
        let bytes = [c[0].read_bytes, c[1].read_bytes];
        assert!(
            bytes.iter().all(|&b| b >= 15 * MIB),
            "{policy}: a long read is spread: {bytes:?}"
        );
        // Queued 1 MiB sequential reads spread over both copies too.
        let before = v
            .member_health()
            .iter()
            .map(|h| h.counters)
            .collect::<Vec<_>>();
        let futs = (0..16u64).map(|i| v.read(32 * MIB + i * MIB, MIB));
        for r in block_on(join_all(futs)) {
            r.unwrap();
        }
        let after = v
            .member_health()
            .iter()
            .map(|h| h.counters)
            .collect::<Vec<_>>();
        let got: Vec<u64> = (0..2)
            .map(|i| after[i].read_bytes - before[i].read_bytes)
            .collect();
        assert_eq!(got, vec![8 * MIB, 8 * MIB], "{policy}");
    }
}
