//! Property tests over random trees and every named level, against brute-force models.
//!
//! Sizes are counted in granules of 512 bytes so every byte of a volume can be checked one
//! granule at a time. Case counts are sized for CI; `NBRAID_SOAK=1` runs many more.

use nbraid_layout::{
    Geometry, Level, Mapping, Node, ParityLayout, Region, Role, Shape, StripeId, StripeRoles,
};
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

const G: u64 = 512;

fn cases(default: u32) -> ProptestConfig {
    let n = if std::env::var_os("NBRAID_SOAK").is_some() {
        default * 50
    } else {
        default
    };
    ProptestConfig::with_cases(n)
}

/// A tree to build, before member indices are assigned.
#[derive(Clone, Debug)]
enum Spec {
    Leaf { start: u64, len: u64 },
    Concat(Vec<Spec>),
    Stripe(u64, Vec<Spec>),
    Mirror(Vec<Spec>),
    Parity(u64, usize, ParityLayout, Vec<Spec>),
}

fn layout() -> impl Strategy<Value = ParityLayout> {
    prop::sample::select(ParityLayout::ALL.to_vec())
}

fn spec() -> impl Strategy<Value = Spec> {
    let leaf = (0u64..8, 2u64..24).prop_map(|(s, l)| Spec::Leaf {
        start: s * G,
        len: l * G,
    });
    leaf.prop_recursive(3, 24, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 1..4).prop_map(Spec::Concat),
            (1u64..4, prop::collection::vec(inner.clone(), 1..5))
                .prop_map(|(u, c)| Spec::Stripe(u * G, c)),
            prop::collection::vec(inner.clone(), 1..4).prop_map(Spec::Mirror),
            (
                1u64..3,
                1usize..3,
                layout(),
                prop::collection::vec(inner, 4..7)
            )
                .prop_map(|(s, p, l, c)| Spec::Parity(s * G, p, l, c)),
        ]
    })
}

fn build(spec: &Spec, next: &mut usize) -> Node {
    let kids = |c: &[Spec], next: &mut usize| c.iter().map(|s| build(s, next)).collect();
    match spec {
        Spec::Leaf { start, len } => {
            let n = Node::member(*next, *start + (*next as u64) * 64 * G, *len);
            *next += 1;
            n
        }
        Spec::Concat(c) => Node::concat(kids(c, next)).unwrap(),
        Spec::Stripe(u, c) => Node::stripe(*u, kids(c, next)).unwrap(),
        Spec::Mirror(c) => Node::mirror(kids(c, next)).unwrap(),
        Spec::Parity(s, p, l, c) => Node::parity(*s, *p, *l, kids(c, next)).unwrap(),
    }
}

fn tree() -> impl Strategy<Value = Node> {
    spec().prop_map(|s| build(&s, &mut 0))
}

/// Member index → (region start, region len).
fn regions(root: &Node) -> HashMap<usize, (u64, u64)> {
    let mut out = HashMap::new();
    root.visit_members(&mut |m| {
        out.insert(m.index, (m.start, m.len));
    });
    out
}

/// One granule of a data extent: (logical granule, copy) → (member, member granule, stripe).
type Granules = BTreeMap<(u64, u32), (usize, u64, Option<StripeId>)>;

fn data_granules(m: &Mapping) -> Granules {
    let mut out = Granules::new();
    for e in &m.data {
        assert_eq!(e.role, Role::Data);
        assert!(e.len > 0 && e.len % G == 0 && e.logical % G == 0 && e.offset % G == 0);
        for i in 0..e.len / G {
            let prev = out.insert(
                (e.logical / G + i, e.copy),
                (e.member, e.offset / G + i, e.stripe),
            );
            assert!(
                prev.is_none(),
                "logical granule and copy mapped twice: {e:?}"
            );
        }
    }
    out
}

fn check_whole_map(root: &Node) {
    let cap = root.capacity();
    assert_eq!(cap % G, 0);
    if cap == 0 {
        return;
    }
    let m = nbraid_layout::map(root, 0, cap).unwrap();
    let regions = regions(root);
    // Every location lies inside its member's region.
    for e in m.data.iter().chain(m.parity.iter()) {
        let (start, len) = regions[&e.member];
        assert!(
            e.offset >= start && e.offset + e.len <= start + len,
            "extent {e:?} outside region {start}+{len}"
        );
    }
    // Bijection per copy: every logical granule has copy 0.. with distinct locations, and no
    // location (data, P or Q) is used twice.
    let data = data_granules(&m);
    let mut used = HashSet::new();
    for &(member, g, _) in data.values() {
        assert!(
            used.insert((member, g)),
            "member {member} granule {g} used twice"
        );
    }
    // Parity of a nested group may be listed once per outer piece, but a location never
    // holds two different things.
    let mut parity_at: HashMap<(usize, u64), (Role, Option<StripeId>)> = HashMap::new();
    for e in &m.parity {
        for i in 0..e.len / G {
            let at = (e.member, e.offset / G + i);
            assert!(!used.contains(&at), "parity on a data location: {e:?}");
            let prev = parity_at.insert(at, (e.role, e.stripe));
            assert!(
                prev.is_none_or(|p| p == (e.role, e.stripe)),
                "parity location reused: {e:?}"
            );
        }
    }
    let mut copies: BTreeMap<u64, u32> = BTreeMap::new();
    for &(lg, _) in data.keys() {
        *copies.entry(lg).or_default() += 1;
    }
    assert_eq!(
        copies.len() as u64,
        cap / G,
        "not every logical granule is mapped"
    );
    assert!(copies.values().all(|&c| c >= 1 && c <= root.copies()));
    // P and Q sit on members holding no data of their stripe.
    let mut data_members: HashMap<StripeId, BTreeSet<usize>> = HashMap::new();
    for &(member, _, stripe) in data.values() {
        if let Some(s) = stripe {
            data_members.entry(s).or_default().insert(member);
        }
    }
    for e in &m.parity {
        let s = e.stripe.expect("parity extents name their stripe");
        if let Some(d) = data_members.get(&s) {
            assert!(
                !d.contains(&e.member),
                "{:?} on a data member of {s:?}",
                e.role
            );
        }
    }
}

/// Brute force: the worst and best case losses over every subset of members.
fn brute_tolerance(root: &Node) -> (usize, usize) {
    let members = root.member_indices();
    let n = members.len();
    let mut worst = n;
    let mut best = 0;
    for mask in 0u32..(1 << n) {
        let failed = |m: usize| mask & (1 << members.iter().position(|&x| x == m).unwrap()) != 0;
        let lost = mask.count_ones() as usize;
        if root.survives(&failed) {
            best = best.max(lost);
        } else {
            worst = worst.min(lost - 1);
        }
    }
    (worst, best)
}

proptest! {
    #![proptest_config(cases(1000))]

    #[test]
    fn map_is_a_bijection_inside_regions(root in tree()) {
        check_whole_map(&root);
    }

    #[test]
    fn mapping_a_range_equals_mapping_its_pieces(root in tree(), a in 0.0f64..1.0, b in 0.0f64..1.0, c in 0.0f64..1.0) {
        let cap_g = root.capacity() / G;
        prop_assume!(cap_g > 0);
        let mut cut = [a, b, c].map(|x| (x * cap_g as f64) as u64 * G);
        cut.sort();
        let [lo, mid, hi] = cut;
        let whole = nbraid_layout::map(&root, lo, hi - lo).unwrap();
        let mut pieces = nbraid_layout::map(&root, lo, mid - lo).unwrap();
        pieces.data.extend(nbraid_layout::map(&root, mid, hi - mid).unwrap().data);
        prop_assert_eq!(data_granules(&whole), data_granules(&pieces));
    }

    #[test]
    fn fault_tolerance_matches_brute_force(root in tree()) {
        prop_assume!(root.member_count() <= 12);
        let (worst, best) = brute_tolerance(&root);
        prop_assert_eq!(root.losses_to_fail() - 1, worst);
        prop_assert_eq!(root.most_losses_survived(), best);
    }

    #[test]
    fn md_roles_are_a_permutation(disks in 3usize..40, parity in 1usize..3, stripe in 0u64..10_000, l in layout()) {
        prop_assume!(disks > parity + 1);
        let r = StripeRoles::md(l, disks, parity, stripe);
        let mut all: Vec<usize> = r.data.to_vec();
        all.push(r.p);
        all.extend(r.q);
        all.sort();
        prop_assert_eq!(all, (0..disks).collect::<Vec<_>>());
        let mut slots = r.q_slot.to_vec();
        slots.sort();
        prop_assert_eq!(slots, (0..disks - parity).collect::<Vec<_>>());
    }
}

/// A named level with random members, spans, strip and region length.
fn named() -> impl Strategy<Value = (Shape, Vec<Region>)> {
    (
        prop::sample::select(Level::ALL.to_vec()),
        2usize..5,
        2usize..5,
        prop::sample::select(vec![4096u64, 8192, 65536]),
        1u64..12,
        layout(),
        prop::collection::vec(0u64..4, 24),
    )
        .prop_filter_map(
            "valid shape",
            |(level, spans, per, strip, strips, l, extra)| {
                let spans = if level.has_spans() { spans } else { 1 };
                let per = per + level.parity();
                let members = spans * per;
                let shape = Shape::new(level, members, Some(spans), strip, l).ok()?;
                let regions = (0..members)
                    .map(|i| Region {
                        start: (1 << 20) + i as u64 * 4096,
                        // Unequal tails: the smallest member decides (JBOD uses them all).
                        len: strips * strip + extra[i] * 512,
                    })
                    .collect();
                Some((shape, regions))
            },
        )
}

proptest! {
    #![proptest_config(cases(600))]

    #[test]
    fn named_levels_map_correctly((shape, regions) in named()) {
        let g = Geometry::new(shape.clone(), &regions).unwrap();
        check_whole_map(g.root());
        // capacity = data members × usable strips (JBOD: the sum of its members).
        let cap = if shape.level == Level::Jbod {
            regions.iter().map(|r| r.len).sum()
        } else {
            let usable = regions.iter().map(|r| r.len).min().unwrap() / shape.strip;
            shape.data_members() as u64 * usable * shape.strip
        };
        prop_assert_eq!(g.capacity(), cap);
        // P and Q name the volume offset of the data row they protect.
        if g.capacity() > 0 {
            let m = g.map(0, g.capacity()).unwrap();
            for e in &m.parity {
                let row = g.map(e.logical, G).unwrap();
                prop_assert!(row.data.iter().all(|d| d.stripe == e.stripe), "{:?} vs {:?}", e, row.data);
                let d = row.data[0];
                let start = |member: usize| regions[member].start;
                prop_assert_eq!(d.offset - start(d.member), e.offset - start(e.member));
            }
        }
        prop_assert_eq!(g.data_members(), shape.data_members());
        // Asking for what a capacity needs gives at least that capacity back.
        if shape.level != Level::Jbod {
            let need = shape.member_len_for(g.capacity());
            let again = Geometry::new(shape.clone(), &vec![Region { start: 0, len: need }; shape.members]).unwrap();
            prop_assert!(again.capacity() >= g.capacity());
        }
    }
}

#[test]
fn named_fault_tolerance() {
    let cases = [
        (Level::Jbod, 3, None, (0, 0)),
        (Level::Raid0, 4, None, (0, 0)),
        (Level::Raid1, 3, None, (2, 2)),
        (Level::Raid5, 4, None, (1, 1)),
        (Level::Raid6, 5, None, (2, 2)),
        (Level::Raid10, 4, None, (1, 2)),
        (Level::Raid10, 6, Some(2), (2, 4)),
        (Level::Raid50, 6, None, (1, 2)),
        (Level::Raid50, 24, Some(8), (1, 8)),
        (Level::Raid60, 8, None, (2, 4)),
        (Level::Raid60, 24, Some(6), (2, 12)),
    ];
    for (level, members, spans, (worst, best)) in cases {
        let shape = Shape::new(level, members, spans, 65536, ParityLayout::default()).unwrap();
        let g = Geometry::new(
            shape,
            &vec![
                Region {
                    start: 0,
                    len: 1 << 20
                };
                members
            ],
        )
        .unwrap();
        let t = g.fault_tolerance();
        assert_eq!((t.worst, t.best), (worst, best), "{level} of {members}");
    }
}

/// Trees a config may declare: how many lost members each survives, worst and best, checked
/// against brute force too.
#[test]
fn nested_fault_tolerance() {
    let mut next = 0;
    let mut m = || {
        next += 1;
        Node::member(next - 1, 0, 1 << 20)
    };
    let l = ParityLayout::default();
    let mut mirror = |n: usize| Node::mirror((0..n).map(|_| m()).collect()).unwrap();
    let raid5_of_mirrors =
        Node::parity(65536, 1, l, vec![mirror(2), mirror(2), mirror(2)]).unwrap();
    let raid6_of_mirrors = Node::parity(
        65536,
        2,
        l,
        vec![mirror(2), mirror(2), mirror(3), mirror(2)],
    )
    .unwrap();
    let concat_of_mirrors = Node::concat(vec![mirror(2), mirror(3)]).unwrap();
    let mut next = 0;
    let mut m = || {
        next += 1;
        Node::member(next - 1, 0, 1 << 20)
    };
    let mut raid5 = |n: usize| Node::parity(65536, 1, l, (0..n).map(|_| m()).collect()).unwrap();
    let mirror_of_raid5 = Node::mirror(vec![raid5(3), raid5(4)]).unwrap();
    let cases = [
        // Data is lost only with both halves of two pairs gone; luckily one of each pair and
        // the whole of one more.
        ("raid5 over 3 mirrors", raid5_of_mirrors, (3, 4)),
        ("raid6 over 4 mirrors", raid6_of_mirrors, (5, 7)),
        // Each RAID 5 copy dies with two losses; one copy can lose everything.
        ("mirror of raid5 of 3 and 4", mirror_of_raid5, (3, 5)),
        ("concat of a pair and a triple", concat_of_mirrors, (1, 3)),
    ];
    for (what, root, (worst, best)) in cases {
        let t = Geometry::from_tree(root.clone()).fault_tolerance();
        assert_eq!((t.worst, t.best), (worst, best), "{what}");
        assert_eq!(
            brute_tolerance(&root),
            (worst, best),
            "{what} by brute force"
        );
    }
}

/// The seed review's RAID 50-2/4/8 and 60-2/4/6 are spans counts, with equal data members.
#[test]
fn seed_span_counts() {
    for (level, members, spans, data) in [
        (Level::Raid50, 18, 2, 16),
        (Level::Raid50, 20, 4, 16),
        (Level::Raid50, 24, 8, 16),
        (Level::Raid60, 16, 2, 12),
        (Level::Raid60, 20, 4, 12),
        (Level::Raid60, 24, 6, 12),
    ] {
        let shape = Shape::new(
            level,
            members,
            Some(spans),
            256 << 10,
            ParityLayout::default(),
        )
        .unwrap();
        assert_eq!(shape.data_members(), data, "{level}-{spans}");
        let g = Geometry::new(
            shape,
            &vec![
                Region {
                    start: 0,
                    len: 64 << 20
                };
                members
            ],
        )
        .unwrap();
        assert_eq!(g.full_stripe_width(), Some(data as u64 * (256 << 10)));
    }
}

/// `spec` with every leaf `grow[i]` granules longer (leaves in build order).
fn grown(spec: &Spec, grow: &[u64], next: &mut usize) -> Spec {
    let kids = |c: &[Spec], next: &mut usize| c.iter().map(|s| grown(s, grow, next)).collect();
    match spec {
        Spec::Leaf { start, len } => {
            let more = grow[*next % grow.len()] * G;
            *next += 1;
            Spec::Leaf {
                start: *start,
                len: len + more,
            }
        }
        Spec::Concat(c) => Spec::Concat(kids(c, next)),
        Spec::Stripe(u, c) => Spec::Stripe(*u, kids(c, next)),
        Spec::Mirror(c) => Spec::Mirror(kids(c, next)),
        Spec::Parity(s, p, l, c) => Spec::Parity(*s, *p, *l, kids(c, next)),
    }
}

proptest! {
    #![proptest_config(cases(300))]

    /// Whenever `grows_in_place` says a tree grew in place, every byte below the old
    /// capacity — data and the parity rows that protect it — maps to the same member
    /// offsets; and a tree whose leaves only grew always does, unless a concatenation's
    /// child before its last grew.
    #[test]
    fn growing_in_place_keeps_every_old_byte_where_it_was(
        spec in spec(),
        grow in prop::collection::vec(prop::sample::select(vec![0u64, 0, 1, 3, 8, 40]), 1..30),
    ) {
        let old = build(&spec, &mut 0);
        let new = build(&grown(&spec, &grow, &mut 0), &mut 0);
        prop_assert!(new.capacity() >= old.capacity());
        if !nbraid_layout::grows_in_place(&old, &new) {
            return Ok(());
        }
        let cap = old.capacity();
        if cap == 0 {
            return Ok(());
        }
        let (a, b) = (nbraid_layout::map(&old, 0, cap).unwrap(), nbraid_layout::map(&new, 0, cap).unwrap());
        prop_assert_eq!(data_granules(&a), data_granules(&b));
        let rows = |m: &Mapping| -> BTreeSet<(usize, u64, u64, Option<StripeId>)> {
            m.parity.iter().map(|e| (e.member, e.offset, e.len, e.stripe)).collect()
        };
        prop_assert_eq!(rows(&a), rows(&b));
    }

    /// Named levels with longer regions grow in place (but a concatenation).
    #[test]
    fn named_levels_with_longer_regions_grow_in_place(
        (shape, regions) in named(),
        more in 0u64..6,
    ) {
        let old = Geometry::new(shape.clone(), &regions).unwrap();
        let longer: Vec<Region> = regions.iter().map(|r| Region { start: r.start, len: r.len + more * shape.strip }).collect();
        let jbod = shape.level == Level::Jbod;
        let new = Geometry::new(shape, &longer).unwrap();
        // A concatenation's members before its last move every byte after them.
        prop_assert_eq!(nbraid_layout::grows_in_place(old.root(), new.root()), !jbod || more == 0);
    }
}
