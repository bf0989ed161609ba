//! The reshape plan of `nbraid apply` and `nbraid check`, as a pure decision: the tree a
//! volume's superblocks record against the tree its config now declares, and what getting from
//! one to the other takes — the way `terraform plan` states a change before making it.
//!
//! Per volume: what changes (members added, level, strip, size), the kind of move, the bytes
//! the move walks and writes, its time at the volume's configured rate, and the redundancy
//! while it runs; or why it is refused online. The rules:
//!
//! - **Restripe** (members added to RAID 0/5/6 or to the stripe of RAID 10/50/60 spans;
//!   RAID 1 → 5; RAID 5 → 6 with a member added; a strip change): every logical byte of the
//!   old capacity is read in the old geometry and written in the new one. Redundancy during
//!   the move is the lower of the two shapes'.
//! - **Append** (regions grown, or members added to a JBOD at its end): the old bytes keep
//!   their places; the new space's parity or copies are synced.
//! - **Copy** (members added to a RAID 1): each new copy is rebuilt as a spare would be.
//! - **Refused**: members removed, a member's region moved or the volume shrunk (data would
//!   be lost or reinterpreted), a declared tree (only named levels reshape), a parity rotation
//!   change, a level change other than the two above, spans of a new width.
//!
//! Nothing here reads a member: [`recorded`] takes the probes assembly reads, and the config's
//! tree is renumbered by recorded role ([`config_by_role`]) before it is compared.

use crate::records;
use nbraid_core::metadata::Probe;
use nbraid_layout::{Level, MemberRegion, Node, ParityLayout};
use serde::Serialize;

/// A volume tree as a named level (or not).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Outline {
    /// The named level that builds this tree; `None` for a declared tree.
    pub level: Option<Level>,
    pub members: usize,
    /// Spans of RAID 10/50/60 (1 for the other levels).
    pub spans: usize,
    /// Strip bytes (RAID 0/10: the stripe unit); `None` for JBOD and RAID 1.
    pub strip_bytes: Option<u64>,
    /// Parity rotation of parity levels.
    pub parity_layout: Option<ParityLayout>,
    pub capacity_bytes: u64,
    /// Member losses survived whichever members fail.
    pub tolerance: usize,
}

impl Outline {
    /// `raid5 of 4 members, strip 64 KiB`: the shape in words.
    pub fn words(&self) -> String {
        let level = self.level.map_or("tree", Level::name);
        let spans = if self.spans > 1 {
            format!(" in {} spans", self.spans)
        } else {
            String::new()
        };
        let strip = self.strip_bytes.map_or(String::new(), |s| {
            format!(", strip {}", nbraid_config::format_size(s))
        });
        format!("{level} of {} members{spans}{strip}", self.members)
    }
}

/// The named level, spans, strip and rotation that build `tree`, if one does.
fn recognize(tree: &Node) -> Option<(Level, usize, Option<u64>, Option<ParityLayout>)> {
    let over_members = |n: &Node| n.children().iter().all(|c| matches!(c, Node::Member(_)));
    let parity_level = |p: usize, one: Level, two: Level| if p == 1 { one } else { two };
    match tree {
        Node::Concat(_) if over_members(tree) => Some((Level::Jbod, 1, None, None)),
        Node::Mirror(_) if over_members(tree) => Some((Level::Raid1, 1, None, None)),
        Node::Stripe(s) if over_members(tree) => Some((Level::Raid0, 1, Some(s.unit()), None)),
        Node::Parity(g) if over_members(tree) => Some((
            parity_level(g.parity(), Level::Raid5, Level::Raid6),
            1,
            Some(g.strip()),
            Some(g.layout()),
        )),
        Node::Stripe(s) => {
            let spans = s.children();
            let first = spans.first()?;
            let alike = |c: &Node| {
                over_members(c)
                    && c.children().len() == first.children().len()
                    && match (c, first) {
                        (Node::Mirror(_), Node::Mirror(_)) => true,
                        (Node::Parity(a), Node::Parity(b)) => {
                            (a.strip(), a.parity(), a.layout())
                                == (b.strip(), b.parity(), b.layout())
                        }
                        _ => false,
                    }
            };
            if spans.len() < 2 || !spans.iter().all(alike) {
                return None;
            }
            match first {
                Node::Mirror(_) => Some((Level::Raid10, spans.len(), Some(s.unit()), None)),
                Node::Parity(g) => Some((
                    parity_level(g.parity(), Level::Raid50, Level::Raid60),
                    spans.len(),
                    Some(g.strip()),
                    Some(g.layout()),
                )),
                _ => None,
            }
        }
        _ => None,
    }
}

/// What `tree` is, in the plan's terms.
pub fn outline(tree: &Node) -> Outline {
    let (level, spans, strip_bytes, parity_layout) = match recognize(tree) {
        Some((level, spans, strip, layout)) => (Some(level), spans, strip, layout),
        None => (None, 1, None, None),
    };
    Outline {
        level,
        members: tree.member_count(),
        spans,
        strip_bytes,
        parity_layout,
        capacity_bytes: tree.capacity(),
        tolerance: tree.losses_to_fail().saturating_sub(1),
    }
}

/// One thing the config changes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "change", rename_all = "snake_case")]
pub enum Change {
    Members { from: usize, to: usize },
    Level { from: String, to: String },
    Strip { from_bytes: u64, to_bytes: u64 },
    Size { from_bytes: u64, to_bytes: u64 },
}

/// How the data gets into the new shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MoveKind {
    /// Every logical byte is copied from the old geometry into the new one.
    Restripe,
    /// The old bytes stay; the new space is synced.
    Append,
    /// Each new mirror copy is rebuilt.
    Copy,
}

/// A change done online.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Move {
    pub kind: MoveKind,
    /// Logical bytes the pass walks (the old capacity for a restripe or a copy, the new
    /// space for an append).
    pub walked_bytes: u64,
    /// Bytes written onto members, parity and copies included.
    pub written_bytes: u64,
    /// The volume's rate (`rebuild_rate`), in logical bytes per second; 0: unlimited.
    pub rate_bytes_per_s: u64,
    /// Time the pass takes at that rate; `None` when the rate is unlimited.
    pub seconds_at_rate: Option<u64>,
    /// The rate is `rebuild_rate = "adaptive"`: full speed while clients are idle, yielding
    /// to their I/O — no time can be told ahead.
    pub adaptive: bool,
    /// Member losses survived while the pass runs, and after it.
    pub tolerance_during: usize,
    pub tolerance_after: usize,
}

impl Move {
    /// The move at `rate_bytes_per_s` (0: unlimited): the rate the daemon runs its passes
    /// at, which a reload or `nbraid rebuild --rate` may have set apart from the config's.
    pub fn at_rate(&mut self, rate_bytes_per_s: u64) {
        self.rate_bytes_per_s = rate_bytes_per_s;
        self.seconds_at_rate =
            (rate_bytes_per_s > 0).then(|| self.walked_bytes.div_ceil(rate_bytes_per_s));
    }
}

/// What the plan does about one volume.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum Action {
    /// The config declares the recorded tree.
    Unchanged,
    Online(Move),
    /// Not done online, and why.
    Refused {
        reason: String,
    },
}

/// One volume's plan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct VolumePlan {
    pub volume: String,
    pub from: Outline,
    pub to: Outline,
    pub changes: Vec<Change>,
    #[serde(flatten)]
    pub action: Action,
    /// The new shape's parity groups that will get no write-hole log, and what that risks
    /// (`nbraid check`'s words for a new volume): empty here, where no member's records are
    /// read; the CLI fills them from the start's own decision over the superblocks.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unlogged_parity_groups: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub write_hole_note: Option<String>,
}

/// The plan for volume `volume` from its `recorded` tree to the `config` tree (leaves numbered
/// by recorded role, new members after them: [`config_by_role`]), at `rate_bytes_per_s`.
pub fn plan(volume: &str, recorded: &Node, config: &Node, rate_bytes_per_s: u64) -> VolumePlan {
    let from = outline(recorded);
    let to = outline(config);
    let action = if recorded == config {
        Action::Unchanged
    } else {
        match decide(recorded, config, &from, &to) {
            Ok(kind) => Action::Online(moving(kind, config, &from, &to, rate_bytes_per_s)),
            Err(reason) => Action::Refused { reason },
        }
    };
    VolumePlan {
        volume: volume.to_string(),
        changes: changes(&from, &to),
        from,
        to,
        action,
        unlogged_parity_groups: Vec::new(),
        write_hole_note: None,
    }
}

/// The differences a person reads first.
fn changes(from: &Outline, to: &Outline) -> Vec<Change> {
    let mut out = Vec::new();
    if from.members != to.members {
        out.push(Change::Members {
            from: from.members,
            to: to.members,
        });
    }
    if from.level != to.level {
        let name = |o: &Outline| o.level.map_or("tree", Level::name).to_string();
        out.push(Change::Level {
            from: name(from),
            to: name(to),
        });
    }
    if let (Some(a), Some(b)) = (from.strip_bytes, to.strip_bytes) {
        if a != b {
            out.push(Change::Strip {
                from_bytes: a,
                to_bytes: b,
            });
        }
    }
    if from.capacity_bytes != to.capacity_bytes {
        out.push(Change::Size {
            from_bytes: from.capacity_bytes,
            to_bytes: to.capacity_bytes,
        });
    }
    out
}

fn moving(kind: MoveKind, config: &Node, from: &Outline, to: &Outline, rate: u64) -> Move {
    let walked_bytes = match kind {
        MoveKind::Restripe | MoveKind::Copy => from.capacity_bytes,
        MoveKind::Append => to.capacity_bytes - from.capacity_bytes,
    };
    // Each logical byte lands on members × (members / data members) bytes: parity and copies.
    let data = config.data_members().max(1) as u64;
    let written_bytes = match kind {
        MoveKind::Copy => walked_bytes * (to.members - from.members) as u64,
        _ => (u128::from(walked_bytes) * to.members as u128 / u128::from(data)) as u64,
    };
    let tolerance_during = match kind {
        MoveKind::Restripe => from.tolerance.min(to.tolerance),
        MoveKind::Append | MoveKind::Copy => from.tolerance,
    };
    Move {
        kind,
        walked_bytes,
        written_bytes,
        rate_bytes_per_s: rate,
        seconds_at_rate: (rate > 0).then(|| walked_bytes.div_ceil(rate)),
        adaptive: false,
        tolerance_during,
        tolerance_after: to.tolerance,
    }
}

/// Whether the move is done online, and how.
fn decide(
    recorded: &Node,
    config: &Node,
    from: &Outline,
    to: &Outline,
) -> Result<MoveKind, String> {
    let (Some(old), Some(new)) = (from.level, to.level) else {
        return Err(
            "declared trees are not reshaped online, only the named levels \
                    (jbod, raid0, raid1, raid5, raid6, raid10, raid50, raid60)"
                .into(),
        );
    };
    if to.members < from.members {
        return Err(format!(
            "the config names {} members where the records have {}: removing members is not \
             done online (a failed member is replaced with `nbraid replace`)",
            to.members, from.members
        ));
    }
    same_places(recorded, config)?;
    if from.parity_layout.is_some()
        && to.parity_layout.is_some()
        && from.parity_layout != to.parity_layout
    {
        return Err("changing the parity rotation is not done online".into());
    }
    let kind = if old == new {
        same_level(old, (recorded, config), from, to)?
    } else {
        level_change(old, new, from, to)?
    };
    if to.capacity_bytes < from.capacity_bytes {
        return Err(format!(
            "the new shape holds {} where the volume has {}: shrinking is not done online \
             (the bytes past the new end would be lost)",
            nbraid_config::format_size(to.capacity_bytes),
            nbraid_config::format_size(from.capacity_bytes)
        ));
    }
    Ok(kind)
}

/// Every recorded role is in the config and starts where it did: a member's data is never
/// moved to another offset of that member, and a role never silently disappears.
fn same_places(recorded: &Node, config: &Node) -> Result<(), String> {
    let regions = |n: &Node| {
        let mut out: Vec<MemberRegion> = Vec::new();
        n.visit_members(&mut |m| out.push(m.clone()));
        out
    };
    let new = regions(config);
    for old in regions(recorded) {
        let Some(now) = new.iter().find(|m| m.index == old.index) else {
            return Err(format!(
                "role {} has no member in the config: removing members is not done online",
                old.index
            ));
        };
        if now.start != old.start {
            // The config keeps a recorded start (`pins.rs`) only where it can read the
            // records: without them, a grown member's larger reserves move the start.
            let why = match now.start > old.start {
                true => " (the reserves the config leaves before a new region grew with the member: the block-checksum reserve is sized from the region; the config keeps a recorded region's start only where it reads the records — members on files and devices)",
                false => "",
            };
            return Err(format!(
                "role {}'s region starts at byte {} in the config and at byte {} in the \
                 records{why}: a member's data is never moved to another offset",
                old.index, now.start, old.start
            ));
        }
    }
    Ok(())
}

/// The move within one level.
fn same_level(
    level: Level,
    (recorded, config): (&Node, &Node),
    from: &Outline,
    to: &Outline,
) -> Result<MoveKind, String> {
    let added = to.members > from.members;
    match level {
        Level::Jbod => jbod_grows(recorded, config),
        Level::Raid1 if added => Ok(MoveKind::Copy),
        _ if level.has_spans() && from.members / from.spans != to.members / to.spans => {
            Err(format!(
                "members join a {level} as whole spans of {}: {} members make spans of another \
                 width",
                from.members / from.spans,
                to.members
            ))
        }
        _ if added || from.strip_bytes != to.strip_bytes => Ok(MoveKind::Restripe),
        // The roles in another order (paths swapped in the config beside a growth): the new
        // tree puts bytes elsewhere, so they are copied, never assumed in place.
        _ if !same_order(recorded, config) => Ok(MoveKind::Restripe),
        _ => Ok(MoveKind::Append),
    }
}

/// Every recorded role sits at the same leaf position of the config's tree.
fn same_order(recorded: &Node, config: &Node) -> bool {
    let old = recorded.member_indices();
    config.member_indices().get(..old.len()) == Some(&old[..])
}

/// A concatenation grows at its end only: a longer member before the last would shift every
/// byte after it.
fn jbod_grows(recorded: &Node, config: &Node) -> Result<MoveKind, String> {
    let leaves = |n: &Node| {
        let mut out = Vec::new();
        n.visit_members(&mut |m| out.push((m.index, m.len)));
        out
    };
    let old = leaves(recorded);
    let last = old.len().saturating_sub(1);
    for (i, (was, now)) in old.iter().zip(leaves(config)).enumerate() {
        if was.0 != now.0 {
            return Err(
                "a jbod grows at its end: new members come after the recorded ones, \
                        which keep their order"
                    .into(),
            );
        }
        if i < last && was.1 != now.1 {
            return Err(format!(
                "a jbod grows at its end: only its last member's region may change (role {} \
                 goes from {} to {} bytes)",
                was.0, was.1, now.1
            ));
        }
    }
    Ok(MoveKind::Append)
}

/// The level changes done online: RAID 1 → 5, RAID 5 → 6 with a member added.
fn level_change(old: Level, new: Level, from: &Outline, to: &Outline) -> Result<MoveKind, String> {
    if to.tolerance < from.tolerance {
        return Err(format!(
            "{old} → {new} lowers the redundancy from {} to {} member losses: not done online",
            from.tolerance, to.tolerance
        ));
    }
    match (old, new) {
        (Level::Raid1, Level::Raid5) => Ok(MoveKind::Restripe),
        (Level::Raid5, Level::Raid6) if to.members > from.members => Ok(MoveKind::Restripe),
        (Level::Raid5, Level::Raid6) => Err(format!(
            "raid5 → raid6 needs a member added for the Q chunks (the config keeps {} members)",
            to.members
        )),
        _ => Err(format!(
            "{old} → {new} is not done online; the online level changes are raid1 → raid5 and \
             raid5 → raid6 with a member added"
        )),
    }
}

/// What the superblocks record of volume `name`: its newest record's tree and, per config
/// position of `probes`, the recorded role of the member there (`None`: no record of this
/// array in a role it still holds — a new member). `None` when no member carries a record.
pub fn recorded(name: &str, probes: &[Probe]) -> Option<(Node, Vec<Option<usize>>)> {
    let array = records::this_array(probes.iter(), name);
    let newest = records::newest_record(probes, name)?;
    let roles = probes
        .iter()
        .map(|p| {
            let Probe::Superblock(sb, _) = p else {
                return None;
            };
            let r = records::record_of(p, name, array)?;
            let role = r.role as usize;
            newest
                .members
                .get(role)
                .is_some_and(|m| m.uuid == sb.member)
                .then_some(role)
        })
        .collect();
    Some((newest.tree.clone(), roles))
}

/// The config's tree (leaves numbered by config position) with each leaf numbered by the
/// recorded role of the member there; members without one take the numbers after
/// `recorded_members`, in config order.
pub fn config_by_role(config: &Node, roles: &[Option<usize>], recorded_members: usize) -> Node {
    let mut next = recorded_members;
    let numbers: Vec<usize> = (0..config.member_count())
        .map(|p| match roles.get(p).copied().flatten() {
            Some(role) => role,
            None => {
                next += 1;
                next - 1
            }
        })
        .collect();
    config.renumbered(&|p| numbers[p])
}

#[cfg(test)]
mod tests;
