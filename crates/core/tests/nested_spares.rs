//! Redundancy restored in nested trees after a whole inner group is lost: both copies of a
//! pair under RAID 6 or RAID 5, a pair in one RAID 5 span of a RAID 50, a pair of one RAID 10
//! copy under a mirror. The node above the lost group rebuilds it, so spares go into every
//! one of its roles, the rebuild writes what that node reconstructs (parity, or the other
//! copy), and afterwards the volume is healthy and reads right with whatever the tree
//! tolerates lost again — the rebuilt members among the losses too.
//!
//! A group that nothing above can write (a RAID 5 group beyond its tolerance under a mirror
//! takes no writes) gets no spare: it is not rebuilt from itself.

mod common;

use common::arrays::{self, apply, meta, Model};
use common::{KIB, MIB};
use futures::executor::block_on;
use nbraid_core::metadata::{Array, ArrayOptions, METADATA_AREA_BYTES};
use nbraid_core::{CacheMode, Member, MemoryMember, PassControl, PassState, VolumeOptions};
use nbraid_layout::{Node, ParityLayout};
use std::sync::Arc;
use std::time::Duration;

const REGION: u64 = MIB;
const START: u64 = METADATA_AREA_BYTES;
const MEMBER_BYTES: u64 = START + REGION;

fn leaf(i: usize) -> Node {
    Node::member(i, START, REGION)
}

fn pair(first: usize) -> Node {
    Node::mirror(vec![leaf(first), leaf(first + 1)]).expect("pair")
}

fn parity(strip: u64, p: usize, children: Vec<Node>) -> Node {
    Node::parity(strip, p, ParityLayout::LeftSymmetric, children).expect("parity")
}

/// A parity group (`p` parity) over `n` pairs, the first pair's members `first`, `first+1`.
fn parity_of_pairs(strip: u64, p: usize, first: usize, n: usize) -> Node {
    parity(strip, p, (0..n).map(|k| pair(first + 2 * k)).collect())
}

/// A tree, the roles of the inner group to lose, and sets of roles to lose afterwards (each
/// within what the tree tolerates, each with a rebuilt member).
struct Case {
    what: String,
    tree: Node,
    group: Vec<usize>,
    after: Vec<Vec<usize>>,
}

fn cases(strip: u64) -> Vec<Case> {
    let mut v = Vec::new();
    // RAID 6 over four pairs, pair 2 (roles 4, 5) lost: then any two other pairs and one
    // rebuilt member.
    let mut after = Vec::new();
    for (a, b) in [(0, 1), (0, 3), (1, 3)] {
        for x in [4, 5] {
            after.push(vec![2 * a, 2 * a + 1, 2 * b, 2 * b + 1, x]);
        }
    }
    v.push(Case {
        what: format!("raid6 of 4 pairs, strip {strip}"),
        tree: parity_of_pairs(strip, 2, 0, 4),
        group: vec![4, 5],
        after,
    });
    // RAID 5 over three pairs, pair 1 (roles 2, 3) lost: then another pair and one rebuilt
    // member.
    let after = [0, 2]
        .iter()
        .flat_map(|&p| [2, 3].map(|x| vec![2 * p, 2 * p + 1, x]))
        .collect();
    v.push(Case {
        what: format!("raid5 of 3 pairs, strip {strip}"),
        tree: parity_of_pairs(strip, 1, 0, 3),
        group: vec![2, 3],
        after,
    });
    // RAID 50 over pairs: two RAID 5 spans of three pairs; span 0's pair 1 (roles 2, 3) lost;
    // then a pair of each span and one rebuilt member.
    let spans = vec![
        parity_of_pairs(strip, 1, 0, 3),
        parity_of_pairs(strip, 1, 6, 3),
    ];
    v.push(Case {
        what: format!("raid50 of pairs, strip {strip}"),
        tree: Node::stripe(strip, spans).expect("raid50"),
        group: vec![2, 3],
        after: vec![vec![0, 1, 8, 9, 3], vec![4, 5, 6, 7, 2]],
    });
    // A mirror of two RAID 10 copies, copy 0's pair 0 (roles 0, 1) lost; then the whole
    // other copy and one rebuilt member.
    let copy = |first: usize| Node::stripe(strip, vec![pair(first), pair(first + 2)]);
    let copies = vec![copy(0).expect("raid10"), copy(4).expect("raid10")];
    v.push(Case {
        what: format!("raid1 of raid10s, strip {strip}"),
        tree: Node::mirror(copies).expect("raid1"),
        group: vec![0, 1],
        after: vec![vec![4, 5, 6, 7, 0], vec![4, 5, 6, 7, 1]],
    });
    v
}

fn opts() -> ArrayOptions {
    ArrayOptions {
        volume: VolumeOptions {
            cache: CacheMode::WriteThrough,
            read_policy: nbraid_core::ReadPolicy::RoundRobin,
            ..VolumeOptions::default()
        },
        bitmap_chunk_bytes: Some(64 * KIB),
        bitmap_clear_delay: Duration::ZERO,
        ..ArrayOptions::default()
    }
}

fn disk(name: &str) -> Arc<MemoryMember> {
    Arc::new(MemoryMember::new(name, MEMBER_BYTES))
}

/// A copy of `d`'s bytes (a degraded open below must not touch the disks the next uses).
fn copy(d: &MemoryMember, name: &str) -> Arc<MemoryMember> {
    let mut bytes = vec![0; MEMBER_BYTES as usize];
    d.peek(0, &mut bytes);
    let c = disk(name);
    c.poke(0, &bytes);
    c
}

fn create(tree: &Node, disks: &[Arc<MemoryMember>]) -> Array {
    arrays::create(tree, disks, opts())
}

fn open(tree: &Node, disks: &[Option<Arc<MemoryMember>>]) -> Array {
    arrays::open(tree, disks, opts())
}

/// Every byte, read in pieces of several sizes (a mirror's reads reach each copy).
fn read_all(a: &Array) -> Vec<u8> {
    arrays::read_all(a, 3, 7)
}

fn region(d: &MemoryMember) -> Vec<u8> {
    let mut b = vec![0; REGION as usize];
    d.peek(START, &mut b);
    b
}

/// How the new members come.
#[derive(Clone, Copy, PartialEq)]
enum Newcomers {
    /// Spares, placed by `use_spares` (what the heal watcher and `nbraid rebuild` do).
    Spares,
    /// `replace` of each failed role.
    Replace,
}

/// Loses `c.group` whole, brings a blank disk per role, and rebuilds under writes; returns
/// the disks now in the roles and the model.
fn lose_the_group_and_rebuild(c: &Case, how: Newcomers) -> (Vec<Arc<MemoryMember>>, Model) {
    let what = &c.what;
    let n = c.tree.member_count();
    let mut disks: Vec<_> = (0..n).map(|i| disk(&format!("d{i}"))).collect();
    let a = create(&c.tree, &disks);
    let mut model = Model::filled(&a, 11);
    for &r in &c.group {
        a.volume().fail_member(r, "test: pulled");
    }
    assert!(read_all(&a) == model.bytes, "{what}: serves degraded");
    let spares: Vec<_> = (0..c.group.len())
        .map(|i| disk(&format!("spare{i}")))
        .collect();
    if how == Newcomers::Replace {
        for (&r, s) in c.group.iter().zip(&spares) {
            block_on(a.replace(r, meta(s))).expect("replace a failed role");
        }
    } else {
        for s in &spares {
            a.add_spare(meta(s)).expect("spare");
        }
        let mut placed = block_on(a.use_spares()).expect("use spares");
        placed.sort_unstable();
        assert_eq!(
            placed, c.group,
            "{what}: a spare goes into every role of the lost group"
        );
        assert_eq!(a.spares().len(), 0, "{what}: no spare left standing by");
    }
    let writes = model.writes(40, 16);
    let ctl = PassControl::new(0);
    let (r, ()) = block_on(futures::future::join(a.rebuild(&ctl), apply(&a, writes)));
    let r = r.expect("rebuild");
    assert_eq!(r.state, PassState::Done, "{what}");
    let mut completed = r.completed.clone();
    completed.sort_unstable();
    assert_eq!(completed, c.group, "{what}: every role rebuilt");
    block_on(a.flush()).expect("flush");
    assert!(!a.volume().is_degraded(), "{what}: healthy again");
    assert!(read_all(&a) == model.bytes, "{what}: reads the model");
    // The spare went into the role that was free first: find which disk each role got.
    for &r in &c.group {
        let m = a.volume().member(r);
        let s = spares
            .iter()
            .find(|s| Arc::ptr_eq(&(Arc::clone(s) as Arc<dyn Member>), &m))
            .expect("a spare holds the role");
        disks[r] = s.clone();
    }
    assert!(block_on(a.mark_clean()).expect("clean").is_recorded());
    drop(a);
    (disks, model)
}

/// Every case of `cases` whose name starts with `tree`, at two strips: the group is lost and
/// rebuilt, then the volume reads right whole and with each of the losses `after` names.
fn rebuilt_by_the_node_above(tree: &str, how: Newcomers) {
    for strip in [4 * KIB, 64 * KIB] {
        for c in cases(strip)
            .into_iter()
            .filter(|c| c.what.starts_with(tree))
        {
            let what = &c.what;
            let (disks, model) = lose_the_group_and_rebuild(&c, how);
            // The lost group's copies agree: each holds what the node above reconstructed.
            let first = region(&disks[c.group[0]]);
            for &r in &c.group[1..] {
                assert!(
                    region(&disks[r]) == first,
                    "{what}: copies {r} and {}",
                    c.group[0]
                );
            }
            // Reopened whole: healthy, the model.
            let a = open(
                &c.tree,
                &disks.iter().cloned().map(Some).collect::<Vec<_>>(),
            );
            assert!(!a.volume().is_degraded(), "{what}: reopened healthy");
            assert!(read_all(&a) == model.bytes, "{what}: reopened");
            drop(a);
            // Losses the tree tolerates, rebuilt members among them: read from what is left.
            for lost in &c.after {
                let some: Vec<Option<Arc<MemoryMember>>> = (disks.iter().enumerate())
                    .map(|(i, d)| (!lost.contains(&i)).then(|| copy(d, &format!("c{i}"))))
                    .collect();
                let a = open(&c.tree, &some);
                assert!(
                    read_all(&a) == model.bytes,
                    "{what}: reads right with roles {lost:?} lost"
                );
            }
        }
    }
}

#[test]
fn a_pair_lost_under_raid6_is_rebuilt_from_the_raid6() {
    rebuilt_by_the_node_above("raid6 of 4 pairs", Newcomers::Spares);
}

#[test]
fn a_pair_lost_under_raid5_is_rebuilt_from_the_raid5() {
    rebuilt_by_the_node_above("raid5 of 3 pairs", Newcomers::Spares);
}

#[test]
fn a_pair_lost_in_a_raid50_span_is_rebuilt_from_its_span() {
    rebuilt_by_the_node_above("raid50 of pairs", Newcomers::Spares);
}

#[test]
fn a_pair_lost_in_one_copy_of_a_raid1_of_raid10s_is_rebuilt_from_the_other_copy() {
    rebuilt_by_the_node_above("raid1 of raid10s", Newcomers::Spares);
}

/// `replace` of a failed role puts the new disk in the role, rebuilt from the node above
/// the lost group, as a spare would be.
#[test]
fn replacing_the_members_of_a_lost_pair_rebuilds_them_from_the_node_above() {
    rebuilt_by_the_node_above("raid6 of 4 pairs", Newcomers::Replace);
    rebuilt_by_the_node_above("raid1 of raid10s", Newcomers::Replace);
}

/// A RAID 5 group that lost two members under a mirror takes no writes: nothing above can
/// rebuild it onto new members, so no spare is spent there; the volume serves from the other
/// copy and the spares stand by.
#[test]
fn a_group_nothing_above_can_write_gets_no_spare() {
    for strip in [4 * KIB, 64 * KIB] {
        let tree = Node::mirror(vec![
            parity(strip, 1, (0..3).map(leaf).collect()),
            parity(strip, 1, (3..6).map(leaf).collect()),
        ])
        .expect("mirror of raid5s");
        let disks: Vec<_> = (0..6).map(|i| disk(&format!("d{i}"))).collect();
        let a = create(&tree, &disks);
        let model = Model::filled(&a, 11);
        a.volume().fail_member(0, "test: pulled");
        a.volume().fail_member(1, "test: pulled");
        for i in 0..2 {
            a.add_spare(meta(&disk(&format!("spare{i}"))))
                .expect("spare");
        }
        assert_eq!(
            block_on(a.use_spares()).expect("use spares"),
            Vec::<usize>::new()
        );
        assert_eq!(a.spares().len(), 2, "strip {strip}: the spares stand by");
        let refused = block_on(a.replace(0, meta(&disk("new")))).expect_err("replace");
        assert!(
            refused.to_string().contains("cannot be rebuilt"),
            "strip {strip}: {refused}"
        );
        assert!(a.volume().member_is_failed(0), "strip {strip}");
        assert!(read_all(&a) == model.bytes, "strip {strip}: serves");
    }
}
