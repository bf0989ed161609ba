//! Whether a volume is opened by its superblocks or created, as a pure decision over what was
//! found on its members — the one place the daemon's `create = "auto"` rule lives.
//!
//! - Some member carries the volume's record: open it (assembly by superblock decides roles,
//!   stale and lost members; a missing file is never recreated).
//! - No member carries it: with `create = "auto"` the array is created when every member is
//!   new or blank — missing (created now, sparse), in memory, or an existing member whose
//!   metadata area is all zeroes and holds no superblock, or that holds only records of the
//!   config's other volumes on it (Matrix). A member holding anything else (another array's
//!   superblock, non-zero bytes where the superblock goes: a file system, a partition table)
//!   is refused, never overwritten: the write rule decides (`nbraid_core::metadata::
//!   disk_rule`, one for every path that writes onto a disk). Missing and existing local
//!   files mixed are refused too: an older nbraid's volume (no superblocks) would lose the
//!   missing member's data. A blank remote export is new, never "missing": it is created
//!   beside new local files.

use nbraid_config::{Config, CreatePolicy, MemberStorage, Volume};
use nbraid_core::metadata::disk_rule::{
    may_write, Allowed, DiskContents, RecordSeen, Refused, Writer,
};
use nbraid_core::metadata::{Probe, Uuid};
use std::fmt;

/// What one member of the volume holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Found {
    /// The file is not there.
    Missing,
    /// `path = "memory:"`: zeroes at every start.
    Memory,
    /// No superblock and an all-zero first MiB. `remote`: an export on an NBD server, which
    /// cannot be "missing" — a new export is blank.
    Blank { remote: bool },
    /// A superblock carrying this volume's record.
    HasThis,
    /// A superblock with only the config's other volumes' records on this member (Matrix),
    /// or no record at all: the write rule lets the array be written beside them.
    Siblings,
    /// What the write rule (`nbraid_core::metadata::disk_rule`) refuses to write onto:
    /// another array's records, data where the superblock goes, an unreadable member.
    Refused(Refused),
}

/// What to do with the volume.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plan {
    /// Assemble by superblock.
    Open,
    /// Write new superblocks; `assume_clean` when every member is known zero (just created or
    /// in memory), else copies and parity are synced from the data first.
    Create { assume_clean: bool },
}

/// Why the volume cannot start. `Display` names the volume, the member and the way out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal(pub String);

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One member as the decision sees it: config id, path (for messages), what it holds, and
/// whether it is a block device (advice for a file — remove it, truncate it — does not fit).
pub struct MemberFound<'a> {
    pub id: &'a str,
    pub path: &'a str,
    pub found: &'a Found,
    pub device: bool,
}

/// What config member `m`, whose superblock read gave `probe` (`contents`: what it holds as
/// the write rule sees it), is to volume `name`'s plan; `force` is `nbraid create --force`
/// (the rule's refusals overridden, as `nbraid add --force` does: [`forced_records`] names
/// the other arrays' records the create takes off). A member missing, created by this start
/// or in memory is decided by the caller, who knows.
pub fn found_on(
    config: &Config,
    m: usize,
    name: &str,
    probe: &Probe,
    contents: &DiskContents,
    force: bool,
) -> Found {
    let writer = match probe {
        Probe::Missing => return Found::Missing,
        Probe::Superblock(sb, _) if sb.volumes.iter().any(|v| v.name == name) => {
            return Found::HasThis
        }
        _ => creator(config, m, probe),
    };
    match may_write(contents, &writer, force) {
        Ok(Allowed::Blank) => Found::Blank {
            remote: config.members[m].state == MemberStorage::Remote,
        },
        Ok(_) => Found::Siblings,
        Err(r) => Found::Refused(r),
    }
}

/// Who writes when a volume of the config is created on member `m`: a new array, beside the
/// records of the config's other volumes on the member (Matrix siblings).
fn creator(config: &Config, m: usize, probe: &Probe) -> Writer {
    let siblings = match probe {
        Probe::Superblock(sb, _) => (sb.volumes.iter())
            .filter(|r| (config.volumes.iter()).any(|v| v.name == r.name && v.members.contains(&m)))
            .map(|r| r.array)
            .collect(),
        _ => Vec::new(),
    };
    Writer {
        array: None,
        siblings,
    }
}

/// The other arrays whose records a forced create of a volume takes off member `m` (what
/// the write rule refused there as another array's), so that array finds its member gone
/// rather than assembling over the new volume's bytes.
pub fn forced_records(
    config: &Config,
    m: usize,
    probe: &Probe,
    contents: &DiskContents,
) -> Vec<Uuid> {
    match may_write(contents, &creator(config, m, probe), false) {
        Err(Refused::Foreign(records)) => records.iter().map(|r| r.array).collect(),
        _ => Vec::new(),
    }
}

/// [`plan`] for config volume `v`, whose members (by position) hold `found`. A volume to
/// be created is refused when it is `read_only` (a read-only start creates nothing): one
/// rule for the start, `nbraidd --check` and `nbraid check`.
pub fn plan_volume(
    config: &Config,
    v: &Volume,
    policy: CreatePolicy,
    found: &[Found],
) -> Result<Plan, Refusal> {
    let members: Vec<MemberFound> = (v.members.iter().zip(found))
        .map(|(&m, f)| MemberFound {
            id: &config.members[m].id,
            path: &config.members[m].path_text,
            found: f,
            device: matches!(config.members[m].state, MemberStorage::BlockDevice { .. }),
        })
        .collect();
    let named = |n: &str| config.volumes.iter().any(|x| x.name == n);
    let file = config.file.display().to_string();
    if let Some(was) = renamed_from(found, named) {
        return Err(Refusal(format!(
            "volume `{}`: every member carries {was}, which the config no longer names: if the \
             volume was renamed in the config, write name = \"{}\" back — a volume's name is \
             recorded on its members (it is also its NBD export name) and does not change \
             there; nothing was written. If that array's data is no longer wanted, write over \
             it with `nbraid create {file} --volume {} --force`",
            v.name, was.volume, v.name
        )));
    }
    match plan(&v.name, &file, policy, &members)? {
        Plan::Create { .. } if v.read_only => {
            Err(Refusal(crate::read_only_check::create_refusal(&v.name)))
        }
        p => Ok(p),
    }
}

/// The one other volume every member carries alone, when the config (`named`) has no
/// volume of that name: most likely this volume, renamed in the config. Pure.
fn renamed_from(found: &[Found], named: impl Fn(&str) -> bool) -> Option<&RecordSeen> {
    fn only(f: &Found) -> Option<&RecordSeen> {
        match f {
            Found::Refused(Refused::Foreign(records)) if records.len() == 1 => Some(&records[0]),
            _ => None,
        }
    }
    let first = only(found.first()?)?;
    let all_same = found.iter().all(|f| only(f) == Some(first));
    (all_same && !named(&first.volume)).then_some(first)
}

/// Decides how volume `name` starts (`config_file` names the config in hints).
pub fn plan(
    name: &str,
    config_file: &str,
    policy: CreatePolicy,
    members: &[MemberFound],
) -> Result<Plan, Refusal> {
    let who = |m: &MemberFound| format!("member {} ({})", m.id, m.path);
    if members.iter().any(|m| *m.found == Found::HasThis) {
        // Foreign members among its own are assembly's business (it names both arrays).
        return Ok(Plan::Open);
    }
    for m in members {
        match m.found {
            Found::Refused(Refused::Unknown(e)) => {
                return Err(Refusal(format!(
                    "volume `{name}`: {}: {e}; no member carries the volume's superblock, so \
                     it cannot be assembled",
                    who(m)
                )))
            }
            Found::Refused(r) => {
                return Err(Refusal(format!(
                    "volume `{name}`: {} {r} — remove it from the volume, or, if its data is \
                     no longer wanted, write over it with `nbraid create {config_file} \
                     --volume {name} --force`",
                    who(m)
                )))
            }
            _ => {}
        }
    }
    if policy == CreatePolicy::Never {
        return Err(Refusal(format!(
            "volume `{name}`: no member carries an nbraid superblock and the volume says \
             create = \"never\"; run `nbraid create {config_file} --volume {name}` first"
        )));
    }
    let missing: Vec<&MemberFound> = members
        .iter()
        .filter(|m| *m.found == Found::Missing)
        .collect();
    // Local files that exist: with a missing one they may be an older nbraid's volume (no
    // superblocks). A blank remote export is new whatever the local files are.
    let local_on_disk: Vec<&MemberFound> = members
        .iter()
        .filter(|m| matches!(m.found, Found::Blank { remote: false } | Found::Siblings))
        .collect();
    if let (Some(gone), Some(there)) = (missing.first(), local_on_disk.first()) {
        // A device cannot be removed to start anew: the missing file is made instead, and
        // the array is created over the members as they are (synced from their data).
        let anew = if local_on_disk.iter().any(|m| m.device) {
            format!(
                "to start anew over the devices as they are, create {} empty at its size \
                 (truncate -s SIZE {})",
                gone.path, gone.path
            )
        } else {
            "remove the other member files to start anew".to_string()
        };
        return Err(Refusal(format!(
            "volume `{name}`: no member carries its superblock, {} is missing while {} \
             exists: refusing to create the array over part of its members (a volume of an \
             older nbraid would lose that member's data); restore the missing file, or {anew}",
            who(gone),
            who(there)
        )));
    }
    let existing = members
        .iter()
        .any(|m| matches!(m.found, Found::Blank { .. } | Found::Siblings));
    Ok(Plan::Create {
        assume_clean: !existing,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use nbraid_core::metadata::disk_rule::{RecordSeen, Refused::*};
    use nbraid_core::metadata::Uuid;

    fn run(policy: CreatePolicy, found: &[Found]) -> Result<Plan, Refusal> {
        let ids: Vec<String> = (0..found.len()).map(|i| format!("d{i}")).collect();
        let members: Vec<MemberFound> = found
            .iter()
            .zip(&ids)
            .map(|(f, id)| MemberFound {
                id,
                path: "p",
                found: f,
                device: false,
            })
            .collect();
        plan("v", "c.toml", policy, &members)
    }

    const BLANK: Found = Found::Blank { remote: false };

    fn foreign() -> Found {
        Found::Refused(Refused::Foreign(vec![RecordSeen {
            array: Uuid([1; 16]),
            volume: "x".into(),
        }]))
    }

    #[test]
    fn members_all_carrying_one_volume_the_config_no_longer_names_were_renamed() {
        let (x, other) = (foreign(), Found::Refused(Refused::Foreign(vec![])));
        let seen = |f: &Found| match f {
            Found::Refused(Refused::Foreign(r)) => r.first().cloned(),
            _ => None,
        };
        let none = |_: &str| false;
        assert_eq!(
            renamed_from(&[x.clone(), x.clone()], none),
            seen(&x).as_ref()
        );
        // The config still names it: another volume's members, not a rename.
        assert_eq!(renamed_from(&[x.clone(), x.clone()], |n| n == "x"), None);
        // Not every member: a blank one, or another array's.
        assert_eq!(renamed_from(&[x.clone(), BLANK], none), None);
        assert_eq!(renamed_from(&[x.clone(), other], none), None);
        assert_eq!(renamed_from(&[], none), None);
    }

    #[test]
    fn new_members_are_created_known_zero() {
        use Found::*;
        let auto = CreatePolicy::Auto;
        assert_eq!(
            run(auto, &[Missing, Missing, Memory]),
            Ok(Plan::Create { assume_clean: true })
        );
        // Existing blank members (or siblings' records only) are synced, not trusted.
        assert_eq!(
            run(auto, &[BLANK, Siblings, BLANK]),
            Ok(Plan::Create {
                assume_clean: false
            })
        );
    }

    #[test]
    fn a_blank_remote_export_is_created_beside_a_new_file() {
        use Found::*;
        assert_eq!(
            run(CreatePolicy::Auto, &[Missing, Blank { remote: true }]),
            Ok(Plan::Create {
                assume_clean: false
            })
        );
    }

    #[test]
    fn a_record_anywhere_opens() {
        use Found::*;
        for policy in [CreatePolicy::Auto, CreatePolicy::Never] {
            assert_eq!(
                run(
                    policy,
                    &[Missing, HasThis, Refused(Data { signature: None })]
                ),
                Ok(Plan::Open)
            );
        }
    }

    #[test]
    fn refusals_name_the_member() {
        use Found::*;
        let auto = CreatePolicy::Auto;
        for (found, says) in [
            (
                vec![BLANK, foreign()],
                "member d1 (p) belongs to another array (volume `x`",
            ),
            (
                vec![BLANK, Refused(Data { signature: None })],
                "member d1 (p) has no nbraid superblock but is not blank",
            ),
            (
                vec![
                    BLANK,
                    Refused(Data {
                        signature: Some("an XFS file system"),
                    }),
                ],
                "member d1 (p) holds an XFS file system",
            ),
            (
                vec![Refused(Unknown("EIO".into())), BLANK],
                "member d0 (p): EIO",
            ),
            (
                vec![BLANK, Missing],
                "member d1 (p) is missing while member d0 (p) exists",
            ),
        ] {
            let e = run(auto, &found).expect_err(says).0;
            assert!(e.contains(says), "{e}");
        }
        let e = run(CreatePolicy::Never, &[Missing, Missing]).unwrap_err().0;
        assert!(e.contains("nbraid create c.toml --volume v"), "{e}");
    }
}
