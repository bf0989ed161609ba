//! Scrub over members no redundancy covers (RAID 0, JBOD, a bare leaf beside a parity group
//! under a stripe): the scrub reads them through their checksums, so a block corrupted
//! behind the engine's back — one a read of the volume fails on — is found, named by member
//! and offset, counted unreadable and left unrepaired (nothing to rebuild it from); a clean
//! volume scrubs with nothing found and every byte counted checked. Members under a parity
//! group are read by the group alone: a bad block there is found once.

mod common;

use common::{KIB, MIB};
use futures::executor::block_on;
use nbraid_core::checksum::{area_bytes, is_mismatch, ChecksumArea, ChecksumSetup, BLOCK_BYTES};
use nbraid_core::scrub::{
    ScrubAction, ScrubFindings, ScrubFound, ScrubReport, MIRROR_SCRUB_BLOCK_BYTES,
};
use nbraid_core::{
    Buf, CacheMode, Member, MemoryMember, ScrubControl, ScrubState, Volume, VolumeError,
    VolumeOptions,
};
use nbraid_layout::{Geometry, Node, ParityLayout};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;

/// A checksummed volume of `tree` over memory members whose regions (`regions[i]` bytes)
/// start at 0, each member's checksum area after its region; filled with random bytes.
fn build(tree: Node, regions: &[u64]) -> (Volume, Vec<Arc<MemoryMember>>) {
    let mems: Vec<Arc<MemoryMember>> = (regions.iter().enumerate())
        .map(|(i, &r)| Arc::new(MemoryMember::new(format!("m{i}"), r + area_bytes(r))))
        .collect();
    let dyns = mems.iter().map(|m| m.clone() as Arc<dyn Member>).collect();
    let areas = (regions.iter())
        .map(|&r| {
            Some(ChecksumArea {
                offset_bytes: r,
                len_bytes: area_bytes(r),
            })
        })
        .collect();
    let opts = VolumeOptions {
        block_size: 4096,
        members_known_zero: true,
        cache: CacheMode::WriteThrough,
        cache_max_age: None,
        checksums: Some(ChecksumSetup::new("t", areas, true)),
        ..VolumeOptions::default()
    };
    let v = Volume::new(Geometry::from_tree(tree), dyns, opts).expect("volume");
    let mut rng = SmallRng::seed_from_u64(regions.len() as u64);
    let mut piece = vec![0u8; MIB as usize];
    block_on(async {
        for at in (0..v.capacity()).step_by(MIB as usize) {
            rng.fill(&mut piece[..]);
            v.write(at, Buf::copy_from(&piece), false)
                .await
                .expect("write");
        }
        v.flush().await.expect("flush");
    });
    (v, mems)
}

fn scrub(v: &Volume, repair: bool) -> (ScrubReport, ScrubFindings) {
    let ctl = ScrubControl::new(repair, 0);
    let r = block_on(v.scrub(&ctl)).expect("scrub");
    assert_eq!(r.state, ScrubState::Done);
    assert_eq!(r.position_bytes, r.total_bytes);
    (r, ctl.findings())
}

/// Overwrites the 4 KiB block at member `m`'s offset `at` with other bytes.
fn corrupt(mems: &[Arc<MemoryMember>], m: usize, at: u64) {
    let mut b = vec![0u8; BLOCK_BYTES as usize];
    mems[m].peek(at, &mut b);
    b.iter_mut().for_each(|x| *x = !*x);
    mems[m].poke(at, &b);
}

/// The bare leaf's bad block is the scrub's one finding on member `m`: named where it is,
/// a checksum mismatch, not repaired; the report counts it unreadable and nothing repaired.
fn assert_found_bare(r: &ScrubReport, f: &ScrubFindings, m: usize, at: u64, what: &str) {
    let mine = f
        .by_member
        .get(&m)
        .unwrap_or_else(|| panic!("{what}: {f:?}"));
    assert_eq!(mine.total, 1, "{what}: {f:?}");
    assert_eq!(mine.repaired, 0, "{what}");
    let got = mine.first[0];
    assert_eq!(
        (got.member, got.member_offset_bytes, got.len_bytes),
        (m, at, BLOCK_BYTES),
        "{what}"
    );
    assert_eq!(got.found, ScrubFound::ChecksumMismatch, "{what}");
    assert_eq!(got.action, ScrubAction::Unrepairable, "{what}");
    assert!(r.unreadable >= 1, "{what}: {r:?}");
    assert_eq!(r.repaired, 0, "{what}: {r:?}");
}

/// A read of the volume over the bad block fails with a checksum error (what the scrub
/// must have found before a client did).
fn assert_read_fails(v: &Volume, at: u64, what: &str) {
    match block_on(v.read(at, BLOCK_BYTES)) {
        Err(VolumeError::Member { source, .. }) if is_mismatch(&source) => {}
        other => panic!("{what}: expected a checksum error, got {other:?}"),
    }
}

/// RAID 0 (4 KiB and 64 KiB strips) and JBOD over two 4 MiB members: clean, every byte is
/// checked and nothing found; with a block corrupted, check and repair both find it once.
#[test]
fn raid0_and_jbod_scrubs_find_a_corrupt_block() {
    let region = 4 * MIB;
    let leaves = || vec![Node::member(0, 0, region), Node::member(1, 0, region)];
    let shapes = [
        ("raid0 4k", Node::stripe(4 * KIB, leaves()).unwrap()),
        ("raid0 64k", Node::stripe(64 * KIB, leaves()).unwrap()),
        ("jbod", Node::concat(leaves()).unwrap()),
    ];
    for (what, tree) in shapes {
        let (v, mems) = build(tree, &[region, region]);
        let (r, f) = scrub(&v, false);
        assert_eq!(f.total(), 0, "{what}: {f:?}");
        assert_eq!((r.unreadable, r.mismatches, r.skipped), (0, 0, 0), "{what}");
        assert_eq!(
            r.checked,
            v.capacity() / MIRROR_SCRUB_BLOCK_BYTES,
            "{what}: every byte checked"
        );
        // Member 1, 1 MiB in: volume offset 2 MiB + 4 KiB for RAID 0 with 4 KiB strips.
        let at = MIB + 8 * KIB;
        corrupt(&mems, 1, at);
        let logical = match what {
            "raid0 4k" => 2 * at + 4 * KIB,
            "raid0 64k" => 2 * MIB + 64 * KIB + 8 * KIB,
            _ => region + at,
        };
        assert_read_fails(&v, logical, what);
        for repair in [false, true] {
            let (r, f) = scrub(&v, repair);
            assert_found_bare(&r, &f, 1, at, what);
            assert_eq!(f.total(), 1, "{what}: only the bad block: {f:?}");
            assert_eq!(r.unreadable, 1, "{what}");
            assert_eq!(r.checked, v.capacity() / MIRROR_SCRUB_BLOCK_BYTES);
        }
    }
}

/// A stripe of a RAID 5 (members 0..3) and a bare leaf (member 3): the leaf's bad block is
/// found by the leaf, the RAID 5 member's by the group alone (once, not again by its leaf).
#[test]
fn a_bare_leaf_beside_a_parity_group_is_scrubbed_once() {
    let strip = 64 * KIB;
    let region = 2 * MIB;
    let group = Node::parity(
        strip,
        1,
        ParityLayout::LeftSymmetric,
        (0..3).map(|i| Node::member(i, 0, region)).collect(),
    )
    .unwrap();
    let leaf = Node::member(3, 0, 2 * region);
    let tree = Node::stripe(strip, vec![group, leaf]).unwrap();
    let (v, mems) = build(tree, &[region, region, region, 2 * region]);
    let (r, f) = scrub(&v, false);
    assert_eq!(f.total(), 0, "{f:?}");
    assert_eq!((r.unreadable, r.mismatches, r.skipped), (0, 0, 0));
    // The leaf's bytes in mirror blocks, and the group's stripes.
    let stripes = 2 * region / (2 * strip);
    assert_eq!(
        r.checked,
        2 * region / MIRROR_SCRUB_BLOCK_BYTES + stripes,
        "every byte checked"
    );
    let at = MIB + 4 * KIB;
    corrupt(&mems, 3, at);
    corrupt(&mems, 0, 4 * KIB);
    let (r, f) = scrub(&v, false);
    assert_found_bare(&r, &f, 3, at, "bare leaf");
    let grouped = &f.by_member[&0];
    assert_eq!(grouped.total, 1, "found once, by the group: {f:?}");
    assert_eq!(grouped.first[0].action, ScrubAction::NotRepaired);
    assert_eq!(f.total(), 2, "{f:?}");
}
