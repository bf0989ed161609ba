//! Declared trees: `tree = { raid5 = [{ mirror = [...] }, ...] }` instead of a named level.
//! Good trees load into the layout tree a named level would build; every way a tree can be
//! wrong gives one located error naming the value and what was expected.

use nbraid_config::{self as config, ConfigError, ErrorKind, ReadPolicy};
use nbraid_layout::{Node, ParityLayout};
use proptest::prelude::*;
use std::path::Path;

const MIB: u64 = 1 << 20;

/// `n` members m0.. of 1 GiB each (4 lines per member), then `rest`.
fn members(n: usize) -> String {
    (0..n)
        .map(|i| {
            format!("[[member]]\nid = \"m{i}\"\npath = \"nowhere/m{i}.img\"\nsize = \"1GiB\"\n")
        })
        .collect()
}

fn parse(text: &str) -> Result<config::Config, ConfigError> {
    config::parse(text, Path::new("configs/tree.toml"))
}

fn load(n: usize, rest: &str) -> config::Config {
    parse(&format!("{}{rest}", members(n))).unwrap_or_else(|e| panic!("{e}"))
}

fn err(n: usize, rest: &str) -> ConfigError {
    match parse(&format!("{}{rest}", members(n))) {
        Ok(_) => panic!("config was accepted:\n{rest}"),
        Err(e) => e,
    }
}

/// `e` is `kind`, at `line:column`, and says each of `contains`.
fn expect(e: &ConfigError, kind: ErrorKind, at: (usize, usize), contains: &[&str]) {
    let msg = e.to_string();
    assert_eq!(e.location(), Some(at), "{msg}");
    assert_eq!(e.kind(), Some(kind), "{msg}");
    for c in contains {
        assert!(msg.contains(c), "expected {c:?} in\n  {msg}");
    }
}

#[test]
fn raid5_over_mirrors_mirror_of_raid5_and_concat_of_mirrors_load() {
    let c = load(
        6,
        r#"[[volume]]
name = "r5m"
size = "256MiB"
tree = { raid5 = [
    { mirror = ["m0", "m1"] },
    { mirror = ["m2", "m3"] },
    { mirror = ["m4", "m5"] },
], strip = "128KiB" }
[[volume]]
name = "m5"
size = "256MiB"
[volume.tree]
mirror = [{ raid5 = ["m0", "m1", "m2"] }, { raid5 = ["m3", "m4", "m5"], parity_layout = "right-asymmetric" }]
[[volume]]
name = "cm"
members = ["m3", "m2", "m1", "m0"]
tree = { concat = [{ mirror = ["m0", "m1"] }, { mirror = ["m2", "m3"] }] }
read_policy = "round-robin"
checksums = "off"
"#,
    );
    let r5m = c.volume("r5m").unwrap();
    assert!(r5m.shape.is_none() && r5m.level().is_none());
    assert_eq!(r5m.kind_name(), "tree");
    // 2 data children × 128 MiB mirrors; exactly what was asked (whole 128 KiB strips).
    assert_eq!(r5m.capacity(), 256 * MIB);
    assert!(r5m.regions.iter().all(|r| r.len == 128 * MIB));
    assert_eq!(r5m.geometry.data_members(), 2);
    let ft = r5m.geometry.fault_tolerance();
    assert_eq!((ft.worst, ft.best), (3, 4));
    assert_eq!(
        r5m.tree_text(&c),
        "raid5:128KiB(mirror(m0 m1), mirror(m2 m3), mirror(m4 m5))"
    );
    let Node::Parity(g) = r5m.geometry.root() else {
        panic!("root is the parity group")
    };
    assert_eq!((g.strip(), g.parity()), (128 << 10, 1));

    let m5 = c.volume("m5").unwrap();
    // A mirror is as large as its smallest child: one RAID 5 group of 2 data members.
    assert_eq!(m5.capacity(), 256 * MIB);
    assert!(m5.regions.iter().all(|r| r.len == 128 * MIB));
    let ft = m5.geometry.fault_tolerance();
    assert_eq!((ft.worst, ft.best), (3, 4));
    let layouts: Vec<ParityLayout> = m5
        .geometry
        .root()
        .children()
        .iter()
        .map(|n| match n {
            Node::Parity(g) => g.layout(),
            _ => panic!("children are parity groups"),
        })
        .collect();
    assert_eq!(
        layouts,
        [ParityLayout::LeftSymmetric, ParityLayout::RightAsymmetric]
    );

    // `members` gives the volume's order; the tree's leaves point into it.
    let cm = c.volume("cm").unwrap();
    assert_eq!(cm.member_ids(&c), ["m3", "m2", "m1", "m0"]);
    assert_eq!(cm.geometry.root().member_indices(), [3, 2, 1, 0]);
    assert_eq!(cm.read_policy, ReadPolicy::RoundRobin);
    // Concat = the sum: two mirrors of what was left on m0..m3 (1 GiB − 1 MiB − 256 MiB −
    // the 1 MiB checksum reserve of each of the volumes before it).
    let left = (1024 - 1 - 256 - 2) * MIB;
    assert_eq!(cm.capacity(), 2 * left);
    let ft = cm.geometry.fault_tolerance();
    assert_eq!((ft.worst, ft.best), (1, 2));
    assert_eq!(cm.tree_text(&c), "concat(mirror(m0 m1), mirror(m2 m3))");
}

#[test]
fn a_declared_tree_is_the_tree_its_named_level_builds() {
    let named = load(
        6,
        "[[volume]]\nname = \"v\"\nlevel = \"raid50\"\nmembers = [\"m0\", \"m1\", \"m2\", \"m3\", \"m4\", \"m5\"]\n",
    );
    let declared = load(
        6,
        "[[volume]]\nname = \"v\"\ntree = { stripe = [{ raid5 = [\"m0\", \"m1\", \"m2\"] }, { raid5 = [\"m3\", \"m4\", \"m5\"] }] }\n",
    );
    let (n, d) = (named.volume("v").unwrap(), declared.volume("v").unwrap());
    assert_eq!(n.geometry.root(), d.geometry.root());
    assert_eq!(n.regions, d.regions);
    assert_eq!(n.tree_text(&named), d.tree_text(&declared));

    let named = load(
        4,
        "[[volume]]\nname = \"v\"\nlevel = \"raid10\"\nstrip_size = \"32KiB\"\nsize = \"100MiB\"\nmembers = [\"m0\", \"m1\", \"m2\", \"m3\"]\n",
    );
    let declared = load(
        4,
        "[[volume]]\nname = \"v\"\nstrip_size = \"32KiB\"\nsize = \"100MiB\"\ntree = { stripe = [{ mirror = [\"m0\", \"m1\"] }, { mirror = [\"m2\", \"m3\"] }] }\n",
    );
    let (n, d) = (named.volume("v").unwrap(), declared.volume("v").unwrap());
    assert_eq!(n.geometry.root(), d.geometry.root());
    assert_eq!(n.capacity(), d.capacity());
}

#[test]
fn explicit_sizes_round_up_to_the_smallest_member_length_that_holds_them() {
    // A stripe over two RAID 5 groups of four: unit = one group stripe (3 × 64 KiB).
    let c = load(
        8,
        "[[volume]]\nname = \"v\"\nsize = \"100MiB\"\ntree = { stripe = [{ raid5 = [\"m0\", \"m1\", \"m2\", \"m3\"] }, { raid5 = [\"m4\", \"m5\", \"m6\", \"m7\"] }] }\n",
    );
    let v = c.volume("v").unwrap();
    let len = v.regions[0].len;
    assert!(v.capacity() >= 100 * MIB, "{}", v.capacity());
    // One 64 KiB strip less on every member would not hold it.
    let smaller = config::parse(
        &format!(
            "{}[[volume]]\nname = \"v\"\nsize = \"{}B\"\ntree = {{ stripe = [{{ raid5 = [\"m0\", \"m1\", \"m2\", \"m3\"] }}, {{ raid5 = [\"m4\", \"m5\", \"m6\", \"m7\"] }}] }}\n",
            members(8),
            v.capacity() - 1
        ),
        Path::new("x.toml"),
    )
    .unwrap();
    assert_eq!(smaller.volumes[0].regions[0].len, len);
    let Node::Stripe(s) = v.geometry.root() else {
        panic!("root is a stripe")
    };
    assert_eq!(s.unit(), 3 * (64 << 10));
}

#[test]
fn level_and_tree_together_or_neither() {
    let e = err(
        2,
        "[[volume]]\nname = \"v\"\nlevel = \"raid1\"\nmembers = [\"m0\", \"m1\"]\ntree = { mirror = [\"m0\", \"m1\"] }\n",
    );
    expect(
        &e,
        ErrorKind::Tree,
        (13, 8),
        &["volume \"v\": gives both level and tree; give one"],
    );
    let e = err(2, "[[volume]]\nname = \"v\"\nmembers = [\"m0\", \"m1\"]\n");
    expect(
        &e,
        ErrorKind::Schema,
        (9, 1),
        &["volume \"v\": missing field `level` (or `tree`"],
    );
}

#[test]
fn members_used_twice_unknown_unlisted_or_left_out() {
    // Line 11 is the tree; `tree = { mirror = [` is 19 characters.
    let head = "[[volume]]\nname = \"v\"\n";
    let e = err(
        3,
        &format!("{head}tree = {{ mirror = [\"m0\", \"m0\"] }}\n"),
    );
    expect(
        &e,
        ErrorKind::Duplicate,
        (15, 26),
        &["tree: member \"m0\" is used twice (first at line 15, column 20); each member holds one place"],
    );
    let e = err(
        3,
        &format!("{head}tree = {{ mirror = [\"m0\", \"m9\"] }}\n"),
    );
    expect(
        &e,
        ErrorKind::UnknownMember,
        (15, 26),
        &["tree: unknown member \"m9\"; defined members: m0, m1, m2"],
    );
    let e = err(
        3,
        &format!(
            "{head}members = [\"m0\", \"m1\", \"m2\"]\ntree = {{ mirror = [\"m0\", \"m1\"] }}\n"
        ),
    );
    expect(
        &e,
        ErrorKind::Members,
        (15, 24),
        &["members: member \"m2\" is listed but the tree does not use it"],
    );
    let e = err(
        3,
        &format!("{head}members = [\"m0\", \"m1\"]\ntree = {{ mirror = [\"m0\", \"m2\"] }}\n"),
    );
    expect(
        &e,
        ErrorKind::Members,
        (16, 26),
        &["tree: member \"m2\" is not in the volume's members = [\"m0\", \"m1\"]"],
    );
}

#[test]
fn nodes_need_one_kind_enough_children_and_known_keys() {
    let head = "[[volume]]\nname = \"v\"\n";
    let e = err(3, &format!("{head}tree = {{ mirror = [] }}\n"));
    expect(
        &e,
        ErrorKind::Tree,
        (15, 10),
        &["tree: mirror needs at least 2 children, got 0"],
    );
    let e = err(3, &format!("{head}tree = {{ raid5 = [\"m0\", \"m1\"] }}\n"));
    expect(
        &e,
        ErrorKind::Tree,
        (15, 10),
        &["tree: raid5 needs at least 3 children, got 2"],
    );
    let e = err(
        4,
        &format!("{head}tree = {{ raid6 = [\"m0\", \"m1\", \"m2\"] }}\n"),
    );
    expect(
        &e,
        ErrorKind::Tree,
        (19, 10),
        &["raid6 needs at least 4 children, got 3"],
    );
    let e = err(
        3,
        &format!("{head}tree = {{ mirror = [\"m0\", {{ strip = \"64KiB\" }}] }}\n"),
    );
    expect(
        &e,
        ErrorKind::Tree,
        (15, 26),
        &["tree: a node needs a kind with its children, e.g. { mirror = [\"d0\", \"d1\"] }; kinds: concat, stripe, mirror, raid5, raid6"],
    );
    let e = err(
        3,
        &format!("{head}tree = {{ mirror = [\"m0\", \"m1\"], concat = [\"m2\"] }}\n"),
    );
    expect(
        &e,
        ErrorKind::Tree,
        (15, 33),
        &["a node has one kind, but this one says both `mirror` and `concat`; nest them"],
    );
    let e = err(
        3,
        &format!("{head}tree = {{ mirorr = [\"m0\", \"m1\"] }}\n"),
    );
    expect(
        &e,
        ErrorKind::Tree,
        (15, 10),
        &[
            "tree: unknown key `mirorr` in a node",
            "did you mean `mirror`?",
        ],
    );
    let e = err(3, &format!("{head}tree = {{ mirror = \"m0\" }}\n"));
    expect(
        &e,
        ErrorKind::Tree,
        (15, 19),
        &["tree: `mirror` takes the list of its children, e.g. mirror = [\"d0\", \"d1\", \"d2\"]"],
    );
    let e = err(3, &format!("{head}tree = \"m0\"\n"));
    expect(
        &e,
        ErrorKind::Tree,
        (15, 8),
        &["tree = \"m0\" is a single member; the tree's root must be a node"],
    );
    // A child that is neither a member id nor a node: toml's own error, located.
    let e = err(3, &format!("{head}tree = {{ mirror = [1, 2] }}\n"));
    assert_eq!(e.kind(), Some(ErrorKind::Schema), "{e}");
    assert!(e.to_string().contains("a member id such as \"d0\""), "{e}");
}

#[test]
fn nesting_is_bounded() {
    // A chain of concats, each with one member and the next node: 9 nodes deep.
    let mut tree = "\"m9\"".to_string();
    for i in (0..9).rev() {
        tree = format!("{{ concat = [\"m{i}\", {tree}] }}");
    }
    let e = err(10, &format!("[[volume]]\nname = \"v\"\ntree = {tree}\n"));
    expect(
        &e,
        ErrorKind::Tree,
        (43, 152),
        &["tree: nodes nest more than 8 deep here; flatten the tree"],
    );
    // 8 deep is fine.
    let mut tree = "\"m8\"".to_string();
    for i in (0..8).rev() {
        tree = format!("{{ concat = [\"m{i}\", {tree}] }}");
    }
    let c = load(9, &format!("[[volume]]\nname = \"v\"\ntree = {tree}\n"));
    assert_eq!(c.volumes[0].members.len(), 9);
}

#[test]
fn strips_are_checked_where_they_apply() {
    let head = "[[volume]]\nname = \"v\"\n";
    let e = err(
        3,
        &format!("{head}tree = {{ raid5 = [\"m0\", \"m1\", \"m2\"], strip = \"48KiB\" }}\n"),
    );
    expect(
        &e,
        ErrorKind::Strip,
        (15, 46),
        &["volume \"v\": tree: raid5: strip \"48KiB\" is not a power of two; valid: 4KiB, 8KiB, 16KiB, … 16MiB (powers of two); nearest: 32KiB or 64KiB"],
    );
    let e = err(
        3,
        &format!("{head}tree = {{ raid5 = [\"m0\", \"m1\", \"m2\"], strip = \"1000B\" }}\n"),
    );
    expect(
        &e,
        ErrorKind::Strip,
        (15, 46),
        &["strip \"1000B\" is not a power of two"],
    );
    let e = err(
        4,
        &format!("{head}tree = {{ stripe = [{{ mirror = [\"m0\", \"m1\"] }}, {{ mirror = [\"m2\", \"m3\"] }}], strip = \"6000B\" }}\n"),
    );
    expect(
        &e,
        ErrorKind::Strip,
        (19, 83),
        &["strip \"6000B\" is not valid for a stripe over nested nodes; valid: a multiple of 4KiB up to 256MiB"],
    );
    // A stripe over nested groups may take a unit that is not a power of two.
    let c = load(
        6,
        &format!("{head}tree = {{ stripe = [{{ raid5 = [\"m0\", \"m1\", \"m2\", \"m3\"] }}, {{ mirror = [\"m4\", \"m5\"] }}], strip = \"192KiB\" }}\n"),
    );
    let Node::Stripe(s) = c.volumes[0].geometry.root() else {
        panic!("a stripe")
    };
    assert_eq!(s.unit(), 192 << 10);
    let e = err(
        3,
        &format!("{head}tree = {{ mirror = [\"m0\", \"m1\"], strip = \"64KiB\" }}\n"),
    );
    expect(
        &e,
        ErrorKind::Option,
        (15, 33),
        &["tree: strip does not apply to mirror (it has no strips)"],
    );
    let e = err(
        3,
        &format!(
            "{head}tree = {{ concat = [\"m0\", \"m1\"], parity_layout = \"left-symmetric\" }}\n"
        ),
    );
    expect(
        &e,
        ErrorKind::Option,
        (15, 33),
        &["tree: parity_layout does not apply to concat (it has no parity)"],
    );
    let e = err(
        3,
        &format!(
            "{head}tree = {{ raid5 = [\"m0\", \"m1\", \"m2\"], parity_layout = \"diagonal\" }}\n"
        ),
    );
    expect(
        &e,
        ErrorKind::Option,
        (15, 54),
        &["tree: raid5: parity_layout: ", "left-symmetric"],
    );
}

#[test]
fn volume_keys_a_tree_has_no_use_for_are_refused() {
    let head = "[[volume]]\nname = \"v\"\n";
    let mirror = "tree = { mirror = [\"m0\", \"m1\"] }\n";
    let e = err(2, &format!("{head}{mirror}spans = 2\n"));
    expect(
        &e,
        ErrorKind::Members,
        (12, 9),
        &["spans does not apply to a declared tree"],
    );
    let e = err(2, &format!("{head}{mirror}strip_size = \"64KiB\"\n"));
    expect(
        &e,
        ErrorKind::Option,
        (12, 14),
        &["strip_size does not apply: every stripe and parity group in the tree gives its own strip"],
    );
    let e = err(
        2,
        &format!("{head}{mirror}parity_layout = \"left-symmetric\"\n"),
    );
    expect(
        &e,
        ErrorKind::Option,
        (12, 17),
        &["parity_layout does not apply"],
    );
    let e = err(
        3,
        &format!(
            "{head}tree = {{ raid5 = [\"m0\", \"m1\", \"m2\"] }}\nread_policy = \"nearest\"\n"
        ),
    );
    expect(
        &e,
        ErrorKind::Option,
        (16, 15),
        &["read_policy does not apply: the tree has no mirror"],
    );
}

/// A random tree: nodes of any kind (and a few misspelt ones), with or without a strip.
#[derive(Clone, Debug)]
enum T {
    Leaf,
    Node(&'static str, Vec<T>, Option<u64>),
}

fn random_tree() -> impl Strategy<Value = T> {
    let leaf = Just(T::Leaf);
    leaf.prop_recursive(4, 24, 5, |inner| {
        // Mostly good nodes: enough children, a strip only where one applies.
        let kinds = prop::sample::select(vec![
            "concat", "stripe", "mirror", "mirror", "raid5", "raid5", "raid6", "raid1", "mirorr",
        ]);
        let children = prop_oneof![1 => prop::collection::vec(inner.clone(), 0..3), 8 => prop::collection::vec(inner, 2..6)];
        let strip = prop_oneof![
            6 => Just(None),
            2 => (12u32..18).prop_map(|s| Some(1u64 << s)),
            1 => (1u64..(1 << 20)).prop_map(Some),
        ];
        (kinds, children, strip).prop_map(|(k, c, s)| {
            let takes_strip = matches!(k, "stripe" | "raid5" | "raid6");
            T::Node(k, c, s.filter(|s| takes_strip || s % 7 == 0))
        })
    })
}

/// TOML for `t`, leaves numbered in order (`dup`: a leaf repeats the one before it).
fn render_tree(t: &T, next: &mut usize, dup: Option<usize>) -> String {
    match t {
        T::Leaf => {
            let id = if dup == Some(*next) && *next > 0 {
                *next - 1
            } else {
                *next
            };
            *next += 1;
            format!("\"m{id}\"")
        }
        T::Node(kind, children, strip) => {
            let kids: Vec<String> = children.iter().map(|c| render_tree(c, next, dup)).collect();
            let strip = strip.map_or(String::new(), |s| format!(", strip = {s}"));
            format!("{{ {kind} = [{}]{strip} }}", kids.join(", "))
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        if std::env::var_os("NBRAID_SOAK").is_some() { 20_000 } else { 400 }
    ))]

    /// Whatever tree is written, the config either loads with sound regions and a tree over
    /// exactly its members, or fails with one located error; it never panics.
    #[test]
    fn random_trees_load_soundly_or_fail_located(
        t in random_tree(),
        member_mib in 2u64..64,
        size_mib in prop::option::of(1u64..256),
        dup in prop_oneof![4 => Just(None), 1 => (0usize..12).prop_map(Some)],
    ) {
        let mut next = 0;
        let tree = render_tree(&t, &mut next, dup);
        let mut text = members(next.max(1)).replace("1GiB", &format!("{member_mib}MiB"));
        text += &format!("[[volume]]\nname = \"v\"\ntree = {tree}\n");
        if let Some(s) = size_mib {
            text += &format!("size = \"{s}MiB\"\n");
        }
        let parsed = parse(&text);
        if std::env::var_os("NBRAID_PROPS_TRACE").is_some() {
            eprintln!("{tree} -> {}", parsed.as_ref().map_or_else(|e| format!("ERR {e}"), |c| format!("OK {}", c.volumes[0].capacity())));
        }
        match parsed {
            Err(ConfigError::Invalid { line, column, .. }) => {
                prop_assert!(line >= 1 && line <= text.lines().count() + 1 && column >= 1);
            }
            Err(e) => prop_assert!(false, "unlocated: {e}"),
            Ok(c) => {
                let v = &c.volumes[0];
                let mut leaves = v.geometry.root().member_indices();
                leaves.sort_unstable();
                prop_assert_eq!(leaves, (0..v.members.len()).collect::<Vec<_>>());
                let len = v.regions[0].len;
                // After the metadata area and the checksum reserve.
                let start = MIB + v.metadata.checksum_reserve_bytes.unwrap_or(0);
                prop_assert!(v.regions.iter().all(|r| r.len == len && r.start == start));
                prop_assert!(start + len <= member_mib * MIB);
                let cap = v.capacity();
                prop_assert!(cap > 0);
                if let Some(s) = size_mib {
                    prop_assert!(cap >= s * MIB, "{} < {} MiB", cap, s);
                }
                prop_assert!(v.geometry.map(cap - 1, 1).is_ok());
                let ft = v.geometry.fault_tolerance();
                prop_assert!(ft.worst <= ft.best);
            }
        }
    }
}
