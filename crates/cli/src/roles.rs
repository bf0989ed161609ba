//! Which file serves each role of a volume, as the daemon decides it: by the superblocks
//! (`records`), not by the config's order. After member paths are swapped in the config, or
//! a spare or replacement took a role, the config's order names the wrong file — and an admin
//! about to `dd` a region must not read or write the wrong disk (`mdadm --examine` shows a
//! device's real role the same way).
//!
//! Who holds a role is decided once, by the records' member identities
//! (`nbraid_assembly::adopt::holders`, which the daemon's start uses too); `records` keeps
//! the id and file of each holder, and this module only words them for `map` and `check`.

use crate::records::Records;
use anyhow::{bail, Result};
use nbraid_config::{Config, Volume};

/// The id and file of each role (volume member index) of one volume.
#[derive(Debug, PartialEq, Eq)]
pub struct Roles {
    /// Config member id by role; a member added at run time by the id it goes by.
    pub ids: Vec<String>,
    /// The file (or device, or URI) by role: where its member serves from, or is missing
    /// from.
    pub paths: Vec<String>,
    /// Said when the superblocks' roles differ from the config's order, and for each role
    /// whose member does not serve it (its bytes there are not the volume's).
    pub notes: Vec<String>,
}

/// The roles of volume `v` by its superblocks' record `record` (config order when there are
/// none yet, or the members are read at start only); refused while assembly refuses them.
pub fn of(config: &Config, v: &Volume, record: Option<&Records>) -> Result<Roles> {
    let config_ids: Vec<String> = v.member_ids(config).iter().map(|s| s.to_string()).collect();
    let path_of = |id: &str| {
        config
            .members
            .iter()
            .find(|m| m.id == id)
            .map_or(id.to_string(), |m| m.path_text.clone())
    };
    let (ids, paths, absent) = match record {
        Some(r) if r.state.starts_with("refused") => bail!(
            "volume {}: which file holds which role is the superblocks' to say, and they do not \
             assemble ({}); run nbraid check",
            v.name,
            r.state
        ),
        Some(r) if !r.members.is_empty() && r.paths.len() == r.members.len() => {
            (r.members.clone(), r.paths.clone(), r.absent.clone())
        }
        _ => {
            let paths = config_ids.iter().map(|id| path_of(id)).collect();
            (config_ids.clone(), paths, Vec::new())
        }
    };
    let mut notes = Vec::new();
    if ids != config_ids {
        let roles: Vec<String> = (ids.iter().zip(&paths).enumerate())
            .map(|(role, (id, path))| format!("{role} = {id} ({path})"))
            .collect();
        notes.push(format!(
            "note: roles follow the superblocks, not the config's order: {}",
            roles.join(", ")
        ));
    }
    for (role, why) in absent.iter().enumerate() {
        let Some(why) = why else { continue };
        let state = match *why {
            "lost" => "missing",
            "failed" => "recorded failed",
            other => other,
        };
        notes.push(format!(
            "note: role {role}'s member {} ({}) is {state}: its bytes there are not the volume's (it serves them from the other members)",
            ids[role], paths[role]
        ));
    }
    Ok(Roles { ids, paths, notes })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    const CONFIG: &str = r#"
[[member]]
id = "d0"
path = "d0.img"
size = "12MiB"
[[member]]
id = "d1"
path = "d1.img"
size = "12MiB"
[[member]]
id = "d2"
path = "d2.img"
size = "12MiB"
[[volume]]
name = "v"
level = "raid5"
members = ["d0", "d1", "d2"]
"#;

    fn records(members: &[&str], paths: &[&str], absent: Vec<Option<&'static str>>) -> Records {
        Records {
            volume: "v".into(),
            state: "degraded".into(),
            members: members.iter().map(|s| s.to_string()).collect(),
            paths: paths.iter().map(|s| s.to_string()).collect(),
            absent,
            notes: Vec::new(),
            reshape: None,
            replaces: Vec::new(),
        }
    }

    /// A member added at run time is named by its id and its file (not its id twice); a
    /// missing member is named with the file it is missing from.
    #[test]
    fn roles_name_each_holder_s_file_and_say_which_is_missing() {
        let config = nbraid_config::parse(CONFIG, Path::new("/x/c.toml")).unwrap();
        let v = &config.volumes[0];
        let r = records(
            &["d0", "new1", "d2"],
            &["d0.img", "/x/new1.img", "d2.img"],
            vec![None, None, Some("lost")],
        );
        let roles = of(&config, v, Some(&r)).unwrap();
        assert_eq!(roles.ids, ["d0", "new1", "d2"]);
        assert_eq!(roles.paths, ["d0.img", "/x/new1.img", "d2.img"]);
        assert_eq!(roles.notes.len(), 2, "{:?}", roles.notes);
        assert!(roles.notes[0].contains("1 = new1 (/x/new1.img), 2 = d2 (d2.img)"));
        assert!(
            roles.notes[1].starts_with("note: role 2's member d2 (d2.img) is missing: "),
            "{:?}",
            roles.notes
        );
    }

    #[test]
    fn without_records_the_config_s_order_is_taken_and_refused_records_are_not_guessed() {
        let config = nbraid_config::parse(CONFIG, Path::new("/x/c.toml")).unwrap();
        let v = &config.volumes[0];
        let roles = of(&config, v, None).unwrap();
        assert_eq!(roles.paths, ["d0.img", "d1.img", "d2.img"]);
        assert!(roles.notes.is_empty());
        let mut refused = records(&[], &[], Vec::new());
        refused.state = "refused: split brain".into();
        assert!(of(&config, v, Some(&refused)).is_err());
    }
}
