//! A rewrite that does not change a block's checksum — a read's or a scrub's repair — leaves
//! its page group unmarked in the checksum header, so an unclean shutdown afterwards does
//! not drop the group's checksums: the same block, bad again after the restart, is still
//! found and repaired (before, its group's entries read as "no checksum" and the bad bytes
//! were served). RAID 1 and RAID 5; the client's write that makes the shutdown unclean lands
//! in another group.

mod common;

use common::{KIB, MIB};
use futures::executor::block_on;
use nbraid_core::checksum::BLOCK_BYTES;
use nbraid_core::metadata::{Array, ArrayOptions, MemberMeta, METADATA_AREA_BYTES};
use nbraid_core::{Buf, CacheMode, Member, MemoryMember, VolumeOptions};
use nbraid_layout::{Level, Node, ParityLayout, Region, Shape};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// Two page groups of 2 MiB per member region.
const REGION: u64 = 4 * MIB;
const RESERVE: u64 = MIB;
const START: u64 = METADATA_AREA_BYTES + RESERVE;

fn tree(level: Level, n: usize) -> Node {
    let shape = Shape::new(level, n, None, 64 * KIB, ParityLayout::LeftSymmetric).expect("shape");
    let region = Region {
        start: START,
        len: REGION,
    };
    shape.build(&vec![region; n]).expect("tree")
}

fn opts() -> ArrayOptions {
    ArrayOptions {
        volume: VolumeOptions {
            cache: CacheMode::WriteThrough,
            read_policy: nbraid_core::ReadPolicy::RoundRobin,
            ..VolumeOptions::default()
        },
        checksum_area_before_region_bytes: Some(RESERVE),
        ..ArrayOptions::default()
    }
}

fn metas(d: &[Arc<MemoryMember>]) -> Vec<Arc<MemberMeta>> {
    (d.iter())
        .map(|m| block_on(MemberMeta::load(m.clone() as Arc<dyn Member>)))
        .collect()
}

fn open(t: &Node, d: &[Arc<MemoryMember>]) -> Array {
    let m = metas(d).into_iter().map(Some).collect();
    let (a, _) = block_on(Array::open("vol", t, m, opts(), &|_, _| {})).expect("open");
    a
}

fn read_all(a: &Array) -> Vec<u8> {
    block_on(async {
        let cap = a.volume().capacity();
        let mut out = Vec::new();
        // Twice, in 4 KiB reads: round-robin reaches every copy of every block.
        for _ in 0..2 {
            out.clear();
            for at in (0..cap).step_by(4096) {
                out.extend_from_slice(&a.read(at, 4096).await.expect("read"));
            }
        }
        out
    })
}

fn errors(a: &Array) -> u64 {
    let setup = a.volume().options().checksums.as_ref().expect("checksums");
    (0..a.volume().member_count())
        .map(|i| setup.counters(i).expect("counters").errors.load(Relaxed))
        .sum()
}

/// Block 1 of member 0's region (page group 0), overwritten behind the engine.
fn corrupt(d: &MemoryMember) {
    d.poke(START + BLOCK_BYTES, &[0x77; BLOCK_BYTES as usize]);
}

#[test]
fn a_repaired_block_keeps_its_checksum_through_an_unclean_shutdown() {
    for (level, n) in [(Level::Raid1, 2), (Level::Raid5, 3)] {
        let t = tree(level, n);
        let d: Vec<Arc<MemoryMember>> = (0..n)
            .map(|i| Arc::new(MemoryMember::new(format!("d{i}"), START + REGION)))
            .collect();
        let (a, _) = block_on(Array::create(
            "vol",
            t.clone(),
            metas(&d),
            opts(),
            true,
            &|_, _| {},
        ))
        .expect("create");
        let cap = a.volume().capacity();
        let data: Vec<u8> = (0..cap).map(|i| (i * 7 / 5) as u8).collect();
        block_on(async {
            for (i, piece) in data.chunks(MIB as usize).enumerate() {
                a.write(i as u64 * MIB, Buf::copy_from(piece), false)
                    .await
                    .expect("write");
            }
        });
        block_on(a.mark_clean()).expect("clean");
        drop(a);

        // A clean start; the bad block is found and repaired by a read.
        let a = open(&t, &d);
        corrupt(&d[0]);
        assert!(read_all(&a) == data, "{level:?}");
        assert!(errors(&a) >= 1, "{level:?}: found");
        // A client write in page group 1 of every member (the end of the volume), then the
        // power goes: an unclean shutdown.
        let tail = cap - 64 * KIB;
        let new = vec![0x42u8; 64 * KIB as usize];
        block_on(a.write(tail, Buf::copy_from(&new), false)).expect("write");
        block_on(a.flush()).expect("flush");
        drop(a);

        let mut want = data.clone();
        want[tail as usize..].copy_from_slice(&new);
        let a = open(&t, &d);
        corrupt(&d[0]);
        assert!(
            read_all(&a) == want,
            "{level:?}: read right after the unclean start"
        );
        assert!(
            errors(&a) >= 1,
            "{level:?}: the repaired block's checksum survived"
        );
    }
}
