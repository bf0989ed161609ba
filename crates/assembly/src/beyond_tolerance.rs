//! Why a volume cannot start: more members are out than its tree can lose. The text names
//! each absent role and why, and what can bring the volume back.

use nbraid_config::{Config, MemberStorage, Volume};
use nbraid_core::metadata::{Absence, AssembleError, Probe};

/// Why a volume cannot start: each absent role and why, and what can bring it back — a
/// forced assembly when members that missed writes are there, else the lost members.
pub struct BeyondTolerance<'a> {
    pub name: &'a str,
    pub kind: &'a str,
    /// The member losses it survives at worst.
    pub worst: usize,
    pub why: &'a [(usize, Absence)],
    /// Config ids of the members missing, blank or without its record.
    pub no_record: &'a [&'a str],
    /// Already worded: "; unreachable …" or empty.
    pub unreachable: &'a str,
    /// Config ids by the volume's member position (members, then spares).
    pub ids: &'a [&'a str],
    /// This start was a forced assembly already.
    pub forced: bool,
}

impl BeyondTolerance<'_> {
    pub fn text(&self) -> String {
        let id = |pos: usize| self.ids.get(pos).copied().unwrap_or("?");
        let roles: Vec<String> = self
            .why
            .iter()
            .map(|(role, a)| match a {
                Absence::Failed { member } => {
                    format!("role {role}: {} recorded failed", id(*member))
                }
                Absence::Stale { member, events } => format!(
                    "role {role}: {} stale (its records stop at event {events})",
                    id(*member)
                ),
                Absence::Unreachable { member } => {
                    format!("role {role}: {} unreachable", id(*member))
                }
                Absence::Lost => format!("role {role}: no member carries it"),
                Absence::Rebuilding {
                    member,
                    checkpoint_bytes,
                } => format!(
                    "role {role}: {} being rebuilt (current below byte {checkpoint_bytes} of the volume; not read until done)",
                    id(*member)
                ),
            })
            .collect();
        let takeable = self
            .why
            .iter()
            .any(|(_, a)| matches!(a, Absence::Failed { .. } | Absence::Stale { .. }));
        let mut text = format!(
            "volume {}: more members are out than {} can lose (it survives {} lost member(s) at \
             worst): {}",
            self.name,
            self.kind,
            self.worst,
            roles.join("; ")
        );
        if !self.no_record.is_empty() {
            text += &format!(
                "; missing, blank or carrying no record of it: {}",
                self.no_record.join(", ")
            );
        }
        text += self.unreachable;
        text += &if self.forced {
            "; even by force there are not enough failed or stale members to take back: \
             bring the members back (their files or devices at their paths, or their \
             servers started)"
                .to_string()
        } else if takeable {
            format!(
                "; restore the lost members, or assemble by force (`nbraidd --force-assemble {}`, \
                 as mdadm --assemble --force): the freshest failed or stale members are taken \
                 back as current, and bytes written after they dropped out may be stale on them",
                self.name
            )
        } else {
            "; bring the members back (their files or devices at their paths, or their servers \
             started), or remove the volume from the config"
                .to_string()
        };
        text
    }
}

/// The remote members a volume beyond tolerance goes without (`members`: each member's
/// config position and what was found there), each with why, after the words that say they
/// were not used — at the start and in the checks alike (one whose server answers with an
/// export too small did not "not answer"); then the short members left out (a file or
/// device holding less than its records keep: `member::short_text` says it all); empty
/// when every member answered.
pub(crate) fn not_used<'a>(
    config: &Config,
    members: impl Iterator<Item = (usize, &'a Probe)>,
) -> String {
    let (mut remote, mut short) = (Vec::new(), Vec::new());
    for (m, p) in members {
        let Probe::Unreachable(e) = p else { continue };
        let member = &config.members[m];
        match member.state {
            MemberStorage::Remote => {
                remote.push(format!("{} ({}): {e}", member.id, member.path_text))
            }
            _ => short.push(e.clone()),
        }
    }
    let mut text = String::new();
    if !remote.is_empty() {
        text += &format!(
            "; not used (their servers did not answer, or answered with an export they cannot use): {}",
            remote.join("; ")
        );
    }
    if !short.is_empty() {
        text += &format!("; left out: {}", short.join("; "));
    }
    text
}

/// For `nbraid check` and `nbraidd --check`: assembly's refusal `e` of volume `v` over the
/// superblocks they read (`probes` by position: members, spares, members added at run time;
/// `ids` by the same positions) in the start's own words — each absent role, which member and
/// why, and the command that would force it — or `e` as it is when it is not a refusal
/// beyond tolerance.
pub fn check_text(
    config: &Config,
    v: &Volume,
    probes: &[Probe],
    ids: &[&str],
    e: &AssembleError,
) -> String {
    let AssembleError::BeyondTolerance { why, .. } = e else {
        return e.to_string();
    };
    let carries = |p: &Probe| match p {
        Probe::Superblock(sb, _) => sb.volumes.iter().any(|x| x.name == v.name),
        _ => false,
    };
    let member_probes = v.members.iter().zip(probes);
    // A short member carries its record; it is left out (said below), not without one.
    let no_record: Vec<&str> = (member_probes.clone())
        .filter(|(&m, p)| !carries(p) && config.members[m].short_len_bytes().is_none())
        .map(|(&m, _)| config.members[m].id.as_str())
        .collect();
    let unreachable = not_used(config, member_probes.map(|(&m, p)| (m, p)));
    BeyondTolerance {
        name: &v.name,
        kind: v.kind_name(),
        worst: v.geometry.fault_tolerance().worst,
        why,
        no_record: &no_record,
        unreachable: &unreachable,
        ids,
        forced: false,
    }
    .text()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A member may be a block device: the way back is worded for files and devices alike
    /// (it said "restore the member files").
    #[test]
    fn the_way_back_fits_devices_too() {
        let why = [(1, Absence::Lost)];
        let mut b = BeyondTolerance {
            name: "v",
            kind: "raid0",
            worst: 0,
            why: &why,
            no_record: &["d1"],
            unreachable: "",
            ids: &["d0", "d1"],
            forced: false,
        };
        for forced in [false, true] {
            b.forced = forced;
            let text = b.text();
            assert!(!text.contains("member files"), "{text}");
            assert!(
                text.contains("their files or devices at their paths"),
                "{text}"
            );
        }
    }
}
