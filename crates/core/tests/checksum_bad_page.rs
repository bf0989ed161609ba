//! A bad spot in a member's checksum area: an entry page that does not read loses its
//! blocks' checksums (they are read unchecked until written again, as after a crash), not
//! the member — its data is no less there. The page is written back blank, which rewrites
//! the spot (a disk remaps a sector on its write). Found by a fault hunt: one unreadable
//! page failed a mirror's member at the next write under it.

mod common;

use common::{BadSpot, KIB, MIB};
use futures::executor::block_on;
use nbraid_core::checksum::{area_bytes, ChecksumSetup};
use nbraid_core::{Buf, CacheMode, Member, Volume, VolumeOptions};
use nbraid_layout::{Geometry, Node};
use std::sync::atomic::Ordering;
use std::sync::Arc;

const REGION: u64 = 8 * MIB;
/// The area's header, then entry pages of 512 entries (2 MiB of the region each).
const HEADER_BYTES: u64 = 4096;
const PAGE_BYTES: u64 = 4096;

/// `n` members holding `tree`'s regions at 0 and their checksum areas right after; member
/// 0's entry page `bad_page` does not read.
fn volume(tree: Node, n: usize, bad_page: u64) -> (Volume, Vec<Arc<BadSpot>>) {
    let area = area_bytes(REGION);
    let members: Vec<Arc<BadSpot>> = (0..n)
        .map(|i| {
            let at = REGION + HEADER_BYTES + bad_page * PAGE_BYTES;
            let m = BadSpot::new(&format!("m{i}"), REGION + area, at..at + PAGE_BYTES);
            m.bad.store(i == 0, Ordering::SeqCst);
            Arc::new(m)
        })
        .collect();
    let areas = common::areas_after(REGION, n);
    let opts = VolumeOptions {
        block_size: 4096,
        members_known_zero: true,
        cache: CacheMode::WriteThrough,
        checksums: Some(ChecksumSetup::new("t", areas, true)),
        ..VolumeOptions::default()
    };
    let dyns = members
        .iter()
        .map(|m| m.clone() as Arc<dyn Member>)
        .collect();
    let v = Volume::new(Geometry::from_tree(tree), dyns, opts).expect("volume");
    (v, members)
}

fn pattern(len: u64, salt: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(13) ^ (i >> 12) as u8 ^ salt)
        .collect()
}

/// On a mirror (a member it can lose) and a concat (one it cannot): writes and reads under
/// the bad page go through, no member is failed, and the page is rewritten at the flush.
#[test]
fn an_unreadable_entry_page_drops_its_checksums_not_the_member() {
    let mirror = Node::mirror(vec![Node::member(0, 0, REGION), Node::member(1, 0, REGION)]);
    let concat = Node::concat(vec![Node::member(0, 0, REGION)]);
    for (what, tree, n) in [("mirror", mirror, 2), ("concat", concat, 1)] {
        // Page 1 holds the entries of the region's second 2 MiB.
        let (v, members) = volume(tree.expect("tree"), n, 1);
        let at = 2 * MIB + 64 * KIB;
        let bytes = pattern(256 * KIB, 1);
        block_on(v.write(at, Buf::copy_from(&bytes), false)).expect("write under the bad page");
        let got = block_on(v.read(at, 256 * KIB)).expect("read under the bad page");
        assert!(got[..] == bytes[..], "{what}: the bytes written read back");
        assert!(
            (0..n).all(|i| !v.member_is_failed(i)),
            "{what}: a member was failed for its checksum page"
        );
        block_on(v.flush()).expect("flush");
        assert!(
            !members[0].bad.load(Ordering::SeqCst),
            "{what}: the page is written back, over the bad spot"
        );
        // Blocks whose checksums the page lost are checked again once written.
        let again = pattern(256 * KIB, 2);
        block_on(v.write(at, Buf::copy_from(&again), false)).expect("write again");
        let got = block_on(v.read(at, 256 * KIB)).expect("read again");
        assert!(got[..] == again[..], "{what}");
    }
}
