//! Declared trees: a volume that gives `tree` instead of `level` says how its members nest.
//!
//! A node is a table with one *kind* key whose value is the list of its children; a child is a
//! member id or another node. Parity groups and stripes may give their own `strip`, parity
//! groups their own `parity_layout`:
//!
//! ```toml
//! tree = { raid5 = [{ mirror = ["d0", "d1"] }, { mirror = ["d2", "d3"] }, { mirror = ["d4", "d5"] }], strip = "64KiB" }
//! ```
//!
//! Kinds: `concat` (alias `jbod`), `stripe` (`raid0`), `mirror` (`raid1`), `raid5`, `raid6`.
//! Every member of the tree gets a region of the same length; each node's capacity follows from
//! its children's (mirror: the smallest child; stripe: children × the smallest, in whole units;
//! parity: data children × the smallest, in whole strips; concat: the sum). The checked tree
//! becomes the same layout [`Node`] a named level builds, so the engine, the superblock and
//! `nbraid check` see one kind of thing.

use super::error::{line_col, ErrorKind, Problem};
use super::field::{size_field, strip_field};
use super::raw::{RawNode, RawSize, RawTree, RawTreeValue, RawVolume};
use super::schema_error::edit_distance;
use super::size::format_size_exact;
use crate::model::{defined_members, Config, Member, Volume};
use crate::tree_spec::Spec;
use nbraid_layout::{Node, ParityLayout, STRIP_MIN};
use serde_spanned::Spanned;
use std::ops::Range;

/// Nodes nest at most this deep (the superblock allows 16 levels; no sensible volume needs 8).
pub const TREE_DEPTH_MAX: usize = 8;

/// Children of one node at most (the superblock's bound on members).
pub const TREE_CHILDREN_MAX: usize = 1024;

/// Largest `strip` of a stripe over nested nodes (a multiple of 4 KiB; over members a stripe's
/// strip is a power of two like `strip_size`).
pub const STRIPE_UNIT_MAX: u64 = 256 << 20;

/// What valid node kinds are, for messages.
const KINDS_HELP: &str =
    "concat, stripe, mirror, raid5, raid6 (raid0, raid1 and jbod name stripe, mirror and concat)";

/// A resolved `tree`: the checked spec, the volume's members (config indices by position) and
/// what the volume-wide options are used for.
pub(crate) struct Declared {
    pub spec: Spec,
    pub members: Vec<usize>,
    /// Some parity group or stripe takes the volume's `strip_size`.
    pub uses_strip_default: bool,
    /// Some parity group takes the volume's `parity_layout`.
    pub uses_layout_default: bool,
    pub has_mirror: bool,
}

/// What a tree is checked against.
pub(crate) struct TreeInput<'a> {
    pub text: &'a str,
    pub who: &'a str,
    pub members: &'a [Member],
    /// The volume's `members` list, if it gives one: (config index, span) in its order.
    pub listed: Option<Vec<(usize, Range<usize>)>>,
    pub strip_default: u64,
    pub layout_default: ParityLayout,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Concat,
    Stripe,
    Mirror,
    Parity(usize),
}

impl Kind {
    fn parse(key: &str) -> Option<Kind> {
        match key.to_ascii_lowercase().as_str() {
            "concat" | "jbod" => Some(Kind::Concat),
            "stripe" | "raid0" => Some(Kind::Stripe),
            "mirror" | "raid1" => Some(Kind::Mirror),
            "raid5" => Some(Kind::Parity(1)),
            "raid6" => Some(Kind::Parity(2)),
            _ => None,
        }
    }

    fn min_children(self) -> usize {
        match self {
            Kind::Parity(p) => p + 2,
            _ => 2,
        }
    }
}

/// Checks `raw` (the volume's `tree`) into a [`Declared`].
pub(crate) fn resolve(input: TreeInput<'_>, raw: &Spanned<RawTree>) -> Result<Declared, Problem> {
    let mut walk = Walk {
        input: &input,
        placed: Vec::new(),
        uses_strip_default: false,
        uses_layout_default: false,
        has_mirror: false,
    };
    if let RawTree::Leaf(id) = raw.get_ref() {
        return Err(walk.problem(
            raw.span(),
            ErrorKind::Tree,
            format!("tree = \"{id}\" is a single member; the tree's root must be a node such as {{ mirror = [\"d0\", \"d1\"] }}"),
        ));
    }
    let spec = walk.node(raw, 1)?;
    let members = match &input.listed {
        Some(listed) => {
            if let Some((i, span)) = listed
                .iter()
                .find(|(i, _)| !walk.placed.iter().any(|p| p.0 == *i))
            {
                return Err(walk.problem(
                    span.clone(),
                    ErrorKind::Members,
                    format!(
                        "members: member \"{}\" is listed but the tree does not use it; place it in the tree or remove it from members",
                        input.members[*i].id
                    ),
                ));
            }
            listed.iter().map(|(i, _)| *i).collect()
        }
        None => walk.placed.iter().map(|p| p.0).collect(),
    };
    Ok(Declared {
        spec,
        members,
        uses_strip_default: walk.uses_strip_default,
        uses_layout_default: walk.uses_layout_default,
        has_mirror: walk.has_mirror,
    })
}

/// A node's keys, sorted out: its kind (and the key that named it) with its children, and
/// its own `strip` and `parity_layout` entries.
struct NodeKeys<'e> {
    kind: Kind,
    key: &'e Spanned<String>,
    children: &'e [Spanned<RawTree>],
    strip: Option<(&'e Spanned<String>, &'e Spanned<RawTreeValue>)>,
    layout: Option<(&'e Spanned<String>, &'e Spanned<RawTreeValue>)>,
}

struct Walk<'a> {
    input: &'a TreeInput<'a>,
    /// The members placed so far, in tree order: config index and the span of the leaf.
    placed: Vec<(usize, Range<usize>)>,
    uses_strip_default: bool,
    uses_layout_default: bool,
    has_mirror: bool,
}

impl Walk<'_> {
    fn problem(&self, span: Range<usize>, kind: ErrorKind, msg: String) -> Problem {
        Problem::new(span, kind, format!("{}: {msg}", self.input.who))
    }

    fn line(&self, span: &Range<usize>) -> String {
        let (l, c) = line_col(self.input.text, span.start);
        format!("line {l}, column {c}")
    }

    fn leaf(&mut self, id: &str, span: Range<usize>) -> Result<Spec, Problem> {
        let members = self.input.members;
        let Some(i) = members.iter().position(|m| m.id == id) else {
            return Err(self.problem(
                span,
                ErrorKind::UnknownMember,
                format!(
                    "tree: unknown member \"{id}\"; defined members: {}",
                    defined_members(members)
                ),
            ));
        };
        if let Some((_, first)) = self.placed.iter().find(|p| p.0 == i) {
            return Err(self.problem(
                span,
                ErrorKind::Duplicate,
                format!(
                    "tree: member \"{id}\" is used twice (first at {}); each member holds one place in the tree",
                    self.line(first)
                ),
            ));
        }
        let position = match &self.input.listed {
            Some(listed) => listed.iter().position(|(m, _)| *m == i).ok_or_else(|| {
                let names: Vec<String> = listed
                    .iter()
                    .map(|(m, _)| format!("\"{}\"", members[*m].id))
                    .collect();
                self.problem(
                    span.clone(),
                    ErrorKind::Members,
                    format!(
                        "tree: member \"{id}\" is not in the volume's members = [{}]; add it there (or leave members out: the tree names them)",
                        names.join(", ")
                    ),
                )
            })?,
            None => self.placed.len(),
        };
        self.placed.push((i, span));
        Ok(Spec::Member(position))
    }

    fn node(&mut self, raw: &Spanned<RawTree>, depth: usize) -> Result<Spec, Problem> {
        let entries = match raw.get_ref() {
            RawTree::Leaf(id) => return self.leaf(id, raw.span()),
            RawTree::Node(entries) => entries,
        };
        if depth > TREE_DEPTH_MAX {
            return Err(self.problem(
                raw.span(),
                ErrorKind::Tree,
                format!("tree: nodes nest more than {TREE_DEPTH_MAX} deep here; flatten the tree"),
            ));
        }
        let keys = self.node_keys(entries, raw.span())?;
        self.check_child_count(&keys)?;
        let kids = keys
            .children
            .iter()
            .map(|c| self.node(c, depth + 1))
            .collect::<Result<Vec<_>, _>>()?;
        self.check_node_options(&keys)?;
        let who = format!("{}: tree: {}", self.input.who, keys.key.get_ref());
        let strip = match keys.strip {
            Some((_, v)) => Some(self.strip(v, &who, &keys.kind, &kids)?),
            None => None,
        };
        let layout = keys.layout.map(|(_, v)| v);
        self.spec(keys.kind, kids, strip, layout, &who)
    }

    /// A node's keys: exactly one kind with its children, and optionally `strip` and
    /// `parity_layout`.
    fn node_keys<'e>(
        &self,
        entries: &'e RawNode,
        span: Range<usize>,
    ) -> Result<NodeKeys<'e>, Problem> {
        // The kind, its key (for messages) and its children.
        type KindEntry<'e> = (Kind, &'e Spanned<String>, &'e [Spanned<RawTree>]);
        let mut kind: Option<KindEntry> = None;
        let mut strip = None;
        let mut layout = None;
        for (key, value) in entries {
            let k = key.get_ref();
            if let Some(kd) = Kind::parse(k) {
                if let Some((_, first, _)) = kind {
                    return Err(self.problem(
                        key.span(),
                        ErrorKind::Tree,
                        format!(
                            "tree: a node has one kind, but this one says both `{}` and `{k}`; nest them: {{ {} = [{{ {k} = [...] }}, ...] }}",
                            first.get_ref(),
                            first.get_ref()
                        ),
                    ));
                }
                let RawTreeValue::Children(children) = value.get_ref() else {
                    return Err(self.problem(
                        value.span(),
                        ErrorKind::Tree,
                        format!("tree: `{k}` takes the list of its children, e.g. {k} = [\"d0\", \"d1\", \"d2\"]"),
                    ));
                };
                kind = Some((kd, key, children));
            } else if k == "strip" {
                strip = Some((key, value));
            } else if k == "parity_layout" {
                layout = Some((key, value));
            } else {
                return Err(self.unknown_node_key(key));
            }
        }
        let Some((kind, key, children)) = kind else {
            return Err(self.problem(
                span,
                ErrorKind::Tree,
                format!("tree: a node needs a kind with its children, e.g. {{ mirror = [\"d0\", \"d1\"] }}; kinds: {KINDS_HELP}"),
            ));
        };
        Ok(NodeKeys {
            kind,
            key,
            children,
            strip,
            layout,
        })
    }

    fn unknown_node_key(&self, key: &Spanned<String>) -> Problem {
        let k = key.get_ref();
        let known = [
            "concat",
            "stripe",
            "mirror",
            "raid5",
            "raid6",
            "strip",
            "parity_layout",
        ];
        let near = known
            .iter()
            .map(|w| (edit_distance(&k.to_ascii_lowercase(), w), *w))
            .filter(|(d, _)| *d <= 2)
            .min()
            .map_or(String::new(), |(_, w)| format!("; did you mean `{w}`?"));
        self.problem(
            key.span(),
            ErrorKind::Tree,
            format!("tree: unknown key `{k}` in a node; a node has one kind ({KINDS_HELP}) and may give strip and parity_layout{near}"),
        )
    }

    /// At least the kind's minimum of children, at most [`TREE_CHILDREN_MAX`].
    fn check_child_count(&self, keys: &NodeKeys) -> Result<(), Problem> {
        let (kind, name, n) = (&keys.kind, keys.key.get_ref(), keys.children.len());
        if n < kind.min_children() {
            return Err(self.problem(
                keys.key.span(),
                ErrorKind::Tree,
                format!(
                    "tree: {name} needs at least {} children, got {n}",
                    kind.min_children(),
                ),
            ));
        }
        if n > TREE_CHILDREN_MAX {
            return Err(self.problem(
                keys.key.span(),
                ErrorKind::Tree,
                format!("tree: {name} has {n} children; at most {TREE_CHILDREN_MAX}"),
            ));
        }
        Ok(())
    }

    /// `strip` only where the kind has strips, `parity_layout` only on parity.
    fn check_node_options(&self, keys: &NodeKeys) -> Result<(), Problem> {
        let (kind, name) = (&keys.kind, keys.key.get_ref());
        if let Some((k, _)) = keys.strip {
            if matches!(kind, Kind::Concat | Kind::Mirror) {
                return Err(self.problem(
                    k.span(),
                    ErrorKind::Option,
                    format!("tree: strip does not apply to {name} (it has no strips); give it to the stripe or parity group below"),
                ));
            }
        }
        if let Some((k, _)) = keys.layout {
            if !matches!(kind, Kind::Parity(_)) {
                return Err(self.problem(
                    k.span(),
                    ErrorKind::Option,
                    format!("tree: parity_layout does not apply to {name} (it has no parity); it applies to raid5 and raid6 nodes"),
                ));
            }
        }
        Ok(())
    }

    /// The node's spec over its children's, its strip and layout defaulted (and the
    /// defaults' use noted, so the volume's own options can be refused when nothing uses them).
    fn spec(
        &mut self,
        kind: Kind,
        kids: Vec<Spec>,
        strip: Option<u64>,
        layout: Option<&Spanned<RawTreeValue>>,
        who: &str,
    ) -> Result<Spec, Problem> {
        Ok(match kind {
            Kind::Concat => Spec::Concat(kids),
            Kind::Mirror => {
                self.has_mirror = true;
                Spec::Mirror(kids)
            }
            Kind::Stripe => {
                // Over nested groups the default unit is one of their full stripes (RAID 50's
                // choice: a full-width write stays whole in every group).
                let widths: Vec<Option<u64>> = kids.iter().map(Spec::width).collect();
                let unit = strip.unwrap_or_else(|| match widths[0] {
                    Some(w) if widths.iter().all(|x| *x == Some(w)) => w,
                    _ => {
                        self.uses_strip_default = true;
                        self.input.strip_default
                    }
                });
                Spec::Stripe {
                    unit,
                    children: kids,
                }
            }
            Kind::Parity(parity) => {
                let layout = match layout {
                    Some(v) => self.layout(v, who)?,
                    None => {
                        self.uses_layout_default = true;
                        self.input.layout_default
                    }
                };
                if strip.is_none() {
                    self.uses_strip_default = true;
                }
                Spec::Parity {
                    strip: strip.unwrap_or(self.input.strip_default),
                    parity,
                    layout,
                    children: kids,
                }
            }
        })
    }

    /// A node's own `strip`: a power of two like `strip_size` for parity groups and stripes
    /// of members; a multiple of 4 KiB for a stripe over nested nodes (e.g. one full stripe
    /// of RAID 5 groups of three, 128 KiB, or of four, 192 KiB).
    fn strip(
        &self,
        v: &Spanned<RawTreeValue>,
        who: &str,
        kind: &Kind,
        kids: &[Spec],
    ) -> Result<u64, Problem> {
        let RawTreeValue::Scalar(s) = v.get_ref() else {
            return Err(Problem::new(
                v.span(),
                ErrorKind::Strip,
                format!("{who}: strip takes a size such as \"64KiB\", not a list"),
            ));
        };
        let s = Spanned::new(v.span(), s.clone());
        let nested = *kind == Kind::Stripe && kids.iter().any(|k| !matches!(k, Spec::Member(_)));
        if !nested {
            return strip_field(&s, who, "strip");
        }
        let bytes = size_field(&s, who, "strip")?;
        if !bytes.is_multiple_of(STRIP_MIN) || bytes > STRIPE_UNIT_MAX {
            return Err(Problem::new(
                v.span(),
                ErrorKind::Strip,
                format!(
                    "{who}: strip {} is not valid for a stripe over nested nodes; valid: a multiple of 4KiB up to {} (e.g. {})",
                    s.get_ref().shown(),
                    format_size_exact(STRIPE_UNIT_MAX),
                    kids[0].width().map_or("\"64KiB\"".into(), |w| format!(
                        "\"{}\", one full stripe of its children",
                        format_size_exact(w)
                    ))
                ),
            ));
        }
        Ok(bytes)
    }

    fn layout(&self, v: &Spanned<RawTreeValue>, who: &str) -> Result<ParityLayout, Problem> {
        let parsed = match v.get_ref() {
            RawTreeValue::Scalar(RawSize::Text(t)) => t.parse::<ParityLayout>(),
            _ => "".parse::<ParityLayout>(),
        };
        parsed.map_err(|e| {
            Problem::new(
                v.span(),
                ErrorKind::Option,
                format!("{who}: parity_layout: {e}"),
            )
        })
    }
}

/// The volume-wide options a declared tree must have a use for: `strip_size` and
/// `parity_layout` are the defaults of its nodes, `read_policy` is for its mirrors.
pub(crate) fn check_volume_options(who: &str, v: &RawVolume, d: &Declared) -> Result<(), Problem> {
    let unused = [
        (
            &v.strip_size.as_ref().map(|s| s.span()),
            d.uses_strip_default,
            "strip_size",
            "every stripe and parity group in the tree gives its own strip",
        ),
        (
            &v.parity_layout.as_ref().map(|s| s.span()),
            d.uses_layout_default,
            "parity_layout",
            "the tree has no raid5 or raid6 node without its own parity_layout",
        ),
        (
            &v.read_policy.as_ref().map(|s| s.span()),
            d.has_mirror,
            "read_policy",
            "the tree has no mirror",
        ),
    ];
    for (span, used, key, why) in unused {
        if let (Some(span), false) = (span, used) {
            return Err(Problem::new(
                span.clone(),
                ErrorKind::Option,
                format!("{who}: {key} does not apply: {why}; remove it"),
            ));
        }
    }
    Ok(())
}

/// Whether `f` holds for some node of `root`.
pub(crate) fn any_node(root: &Node, f: &dyn Fn(&Node) -> bool) -> bool {
    f(root) || root.children().iter().any(|c| any_node(c, f))
}

/// `mirror(raid5:64KiB(d0 d1 d2), raid5:64KiB(d3 d4 d5))`: a tree on one line, members by
/// id (`ids[i]` names volume member `i`).
impl Volume {
    /// The volume's tree on one line, members by id:
    /// `mirror(raid5:64KiB(d0 d1 d2), raid5:64KiB(d3 d4 d5))`.
    pub fn tree_text(&self, config: &Config) -> String {
        tree_text(self.geometry.root(), &self.member_ids(config))
    }
}

pub fn tree_text(root: &Node, ids: &[&str]) -> String {
    let kids = |n: &Node, sep: &str| {
        n.children()
            .iter()
            .map(|c| tree_text(c, ids))
            .collect::<Vec<_>>()
            .join(sep)
    };
    let sep = |n: &Node| {
        if n.children().iter().all(|c| matches!(c, Node::Member(_))) {
            " "
        } else {
            ", "
        }
    };
    match root {
        Node::Member(m) => ids
            .get(m.index)
            .map_or(format!("#{}", m.index), |s| s.to_string()),
        Node::Concat(_) => format!("concat({})", kids(root, sep(root))),
        Node::Mirror(_) => format!("mirror({})", kids(root, sep(root))),
        Node::Stripe(s) => format!(
            "stripe:{}({})",
            format_size_exact(s.unit()),
            kids(root, sep(root))
        ),
        Node::Parity(g) => format!(
            "raid{}:{}({})",
            if g.parity() == 1 { 5 } else { 6 },
            format_size_exact(g.strip()),
            kids(root, sep(root))
        ),
    }
}
