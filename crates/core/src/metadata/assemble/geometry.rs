//! The config's tree against the recorded one: the same shape, member for member, or the
//! volume is refused, naming what differs (and, for a region, the member it is on).

use super::{AssembleError, Names};
use crate::metadata::{Probe, VolumeRecord};
use nbraid_layout::Node;
use std::fmt;

/// How a message names role `role`: the member holding it by the records (its config id
/// where known), else the role.
pub(super) fn role_name(
    role: usize,
    newest: &VolumeRecord,
    records: &[Option<&VolumeRecord>],
    probes: &[Probe],
    names: &Names,
) -> String {
    let holder = newest.members.get(role).map(|m| m.uuid);
    let holds = |i: usize| match (&probes[i], records[i]) {
        (Probe::Superblock(sb, _), Some(r)) => r.role as usize == role && Some(sb.member) == holder,
        _ => false,
    };
    match (0..records.len().min(probes.len())).find(|&i| holds(i)) {
        Some(i) => format!("{} (role {role})", names.member(i)),
        None => format!("role {role}"),
    }
}

/// The config's tree must be the recorded one up to which member sits at which position.
pub(super) fn check_geometry(
    volume: &str,
    config: &Node,
    recorded: &Node,
    members: usize,
    role_name: &dyn Fn(usize) -> String,
) -> Result<(), AssembleError> {
    let changed = |what: &'static str, c: &dyn fmt::Display, r: &dyn fmt::Display| {
        AssembleError::GeometryChanged {
            volume: volume.to_string(),
            what,
            config: c.to_string(),
            recorded: r.to_string(),
        }
    };
    if config.member_count() != members {
        return Err(changed("member count", &config.member_count(), &members));
    }
    compare(config, recorded, &changed, role_name)
}

/// A config of another shape than the one a reshape under way (`reshaping`) moves into:
/// said as such, with the way on, rather than as a geometry changed by hand.
pub(super) fn mid_reshape(e: AssembleError, reshaping: bool) -> AssembleError {
    match e {
        AssembleError::GeometryChanged {
            volume,
            what,
            config,
            recorded,
        } if reshaping => AssembleError::ChangedMidReshape {
            volume,
            what,
            config,
            recorded,
        },
        e => e,
    }
}

/// What a node is, as messages say it.
pub(super) fn kind(n: &Node) -> &'static str {
    match n {
        Node::Member(_) => "a member",
        Node::Concat(_) => "a concat (JBOD)",
        Node::Stripe(_) => "a stripe (RAID 0)",
        Node::Mirror(_) => "a mirror (RAID 1)",
        Node::Parity(g) if g.parity() == 1 => "a parity group (RAID 5)",
        Node::Parity(_) => "a parity group (RAID 6)",
    }
}

type Changed<'a> = dyn Fn(&'static str, &dyn fmt::Display, &dyn fmt::Display) -> AssembleError + 'a;

fn compare(
    c: &Node,
    r: &Node,
    changed: &Changed,
    role_name: &dyn Fn(usize) -> String,
) -> Result<(), AssembleError> {
    match (c, r) {
        (Node::Member(a), Node::Member(b)) if (a.start, a.len) != (b.start, b.len) => {
            return Err(changed(
                "member region",
                &format!("{}+{}", a.start, a.len),
                &format!("{}+{} for {}", b.start, b.len, role_name(b.index)),
            ));
        }
        (Node::Stripe(a), Node::Stripe(b)) if a.unit() != b.unit() => {
            return Err(changed("stripe unit", &a.unit(), &b.unit()));
        }
        (Node::Parity(a), Node::Parity(b)) => {
            if a.strip() != b.strip() {
                return Err(changed("strip size", &a.strip(), &b.strip()));
            }
            if a.layout() != b.layout() {
                return Err(changed("parity layout", &a.layout(), &b.layout()));
            }
            if a.parity() != b.parity() {
                return Err(changed("level", &kind(c), &kind(r)));
            }
        }
        (a, b) if std::mem::discriminant(a) != std::mem::discriminant(b) => {
            return Err(changed("level", &kind(a), &kind(b)));
        }
        _ => {}
    }
    if c.children().len() != r.children().len() {
        return Err(changed(
            "member count",
            &c.member_count(),
            &r.member_count(),
        ));
    }
    c.children()
        .iter()
        .zip(r.children())
        .try_for_each(|(a, b)| compare(a, b, changed, role_name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use nbraid_layout::{Level, Region, Shape};

    fn raid5(starts: &[u64]) -> Node {
        let regions: Vec<Region> = (starts.iter())
            .map(|&start| Region {
                start,
                len: 1 << 20,
            })
            .collect();
        Shape::new(
            Level::Raid5,
            starts.len(),
            None,
            64 << 10,
            Default::default(),
        )
        .unwrap()
        .build(&regions)
        .unwrap()
    }

    #[test]
    fn a_region_that_differs_names_its_member() {
        let name = |role: usize| format!("member d{role} (role {role})");
        let config = raid5(&[5 << 20, 5 << 20, 2 << 20]);
        let recorded = raid5(&[5 << 20; 3]);
        let e = check_geometry("db", &config, &recorded, 3, &name).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("the config says member region 2097152+1048576, the superblocks record 5242880+1048576 for member d2 (role 2)"),
            "{text}"
        );
        assert!(check_geometry("db", &recorded, &recorded, 3, &name).is_ok());
    }
}
