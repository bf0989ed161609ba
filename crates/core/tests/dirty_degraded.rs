//! A dirty degraded start the write-hole log does not cover is refused unless forced (md's
//! "cannot start dirty degraded array", `start_dirty_degraded`): after a crash a row a client
//! was writing may hold new data beside old parity, and a missing member's block there,
//! rebuilt from that parity, may read wrong though no client wrote it. With the log off
//! (`write_hole = "off"`) a RAID 5, RAID 6 and RAID 50 crashed with a member gone are
//! refused, naming the role and the way out, and no member byte changes; forced, they serve
//! every byte written. With the log on (its replay closes the hole) the same starts serve.

mod common;

use common::arrays::{metas, same, seeded, write_clean};
use common::{KIB, MIB};
use futures::executor::block_on;
use nbraid_core::metadata::{
    assemble_as_started, Array, ArrayOptions, AssembleError, MemberMeta, METADATA_AREA_BYTES,
};
use nbraid_core::{Buf, CacheMode, MemoryMember, VolumeOptions};
use nbraid_layout::{Level, Node, ParityLayout, Region, Shape};
use nbraid_sim::Rng;
use std::sync::Arc;

const REGION: u64 = 4 * MIB;
const MEMBER_BYTES: u64 = METADATA_AREA_BYTES + REGION;

fn tree(level: Level, members: usize, groups: Option<usize>) -> Node {
    let shape = Shape::new(
        level,
        members,
        groups,
        64 * KIB,
        ParityLayout::LeftSymmetric,
    );
    let region = Region {
        start: METADATA_AREA_BYTES,
        len: REGION,
    };
    shape
        .expect("shape")
        .build(&vec![region; members])
        .expect("tree")
}

fn opts(log: bool) -> ArrayOptions {
    ArrayOptions {
        volume: VolumeOptions {
            cache: CacheMode::WriteThrough,
            ..VolumeOptions::default()
        },
        ppl: log,
        ..ArrayOptions::default()
    }
}

fn bytes(d: &Arc<MemoryMember>) -> Vec<u8> {
    let mut all = vec![0; MEMBER_BYTES as usize];
    d.peek(0, &mut all);
    all
}

/// Opens "vol" of `t` over `disks` without member `out`.
fn open_without(
    t: &Node,
    disks: &[Arc<MemoryMember>],
    out: usize,
    o: ArrayOptions,
) -> Result<Array, String> {
    let mut m: Vec<Option<Arc<MemberMeta>>> = metas(disks).into_iter().map(Some).collect();
    m[out] = None;
    block_on(Array::open("vol", t, m, o, &|_, _| {}))
        .map(|(a, _)| a)
        .map_err(|e| e.to_string())
}

/// A volume of `t` written whole and recorded clean, then written once more and dropped
/// without a clean mark (the crash): its disks, and the bytes it holds.
fn crashed(t: &Node, log: bool, seed: u64) -> (Vec<Arc<MemoryMember>>, Vec<u8>) {
    let disks: Vec<Arc<MemoryMember>> = (0..t.member_count())
        .map(|i| Arc::new(MemoryMember::new(format!("d{i}"), MEMBER_BYTES)))
        .collect();
    let created = Array::create("vol", t.clone(), metas(&disks), opts(log), true, &|_, _| {});
    let (a, _) = block_on(created).expect("create");
    let mut want = seeded(&mut Rng::new(seed), a.volume().capacity());
    write_clean(&a, &want).expect("written clean");
    let at = want.len() / 3 / 4096 * 4096;
    want[at..at + 4096].fill(0x5c);
    block_on(a.write(at as u64, Buf::copy_from(&want[at..at + 4096]), true)).expect("write");
    drop(a); // the crash: recorded dirty
    (disks, want)
}

fn cases() -> Vec<(&'static str, Node)> {
    vec![
        ("raid5", tree(Level::Raid5, 4, None)),
        ("raid6", tree(Level::Raid6, 5, None)),
        ("raid50", tree(Level::Raid50, 6, Some(2))),
    ]
}

#[test]
fn a_dirty_degraded_start_without_the_log_is_refused_until_forced() {
    for (name, t) in cases() {
        let (disks, want) = crashed(&t, false, 7);
        let before: Vec<Vec<u8>> = disks.iter().map(bytes).collect();
        let e = open_without(&t, &disks, 1, opts(false))
            .err()
            .unwrap_or_default();
        assert!(
            e.contains("not shut down clean, with role 1 out")
                && e.contains("write_hole = \"off\"")
                && e.contains("--force-assemble vol"),
            "{name}: {e}"
        );
        // `nbraid check` and `nbraidd --check` assemble the same way and say the same.
        let probes: Vec<_> = (metas(&disks).iter().enumerate())
            .map(|(i, m)| match i {
                1 => nbraid_core::metadata::Probe::Missing,
                _ => m.probe().clone(),
            })
            .collect();
        let checked = assemble_as_started("vol", &t, &probes, &[], false);
        assert!(
            matches!(checked, Err(AssembleError::DirtyDegradedUnlogged { .. })),
            "{name}: {checked:?}"
        );
        assert!(assemble_as_started("vol", &t, &probes, &[], true).is_ok());
        let after: Vec<Vec<u8>> = disks.iter().map(bytes).collect();
        assert!(before == after, "{name}: a refused start writes nothing");
        let forcing = ArrayOptions {
            force_assembly: true,
            ..opts(false)
        };
        let a = open_without(&t, &disks, 1, forcing).expect("forced");
        same(&a, &want, &format!("{name}: forced")).unwrap();
    }
}

#[test]
fn a_dirty_degraded_start_the_log_covers_serves() {
    for (name, t) in cases() {
        let (disks, want) = crashed(&t, true, 8);
        let a = open_without(&t, &disks, 1, opts(true)).expect(name);
        same(&a, &want, &format!("{name}: logged")).unwrap();
    }
}

/// A volume that ran with the log, started after a crash with `write_hole = "off"`: no
/// replay runs with the log off, so the hole is open and the start is refused; started as
/// it ran (the log on), the replay closes it and it serves.
#[test]
fn a_logged_volume_started_dirty_with_the_log_off_is_refused() {
    let t = tree(Level::Raid5, 4, None);
    let (disks, want) = crashed(&t, true, 9);
    let e = open_without(&t, &disks, 2, opts(false))
        .err()
        .unwrap_or_default();
    assert!(e.contains("write_hole = \"ppl\""), "{e}");
    let a = open_without(&t, &disks, 2, opts(true)).expect("with the log");
    same(&a, &want, "logged").unwrap();
}

/// A clean degraded start, and a dirty one with every member there, serve with the log off.
#[test]
fn clean_or_whole_starts_without_the_log_serve() {
    let t = tree(Level::Raid5, 4, None);
    let (disks, want) = crashed(&t, false, 10);
    let (a, _) = block_on(Array::open(
        "vol",
        &t,
        metas(&disks).into_iter().map(Some).collect(),
        opts(false),
        &|_, _| {},
    ))
    .expect("whole");
    same(&a, &want, "whole").unwrap();
    drop(a); // settled clean at the open; reads leave it so
    let a = open_without(&t, &disks, 1, opts(false)).expect("clean, degraded");
    same(&a, &want, "clean, degraded").unwrap();
}
