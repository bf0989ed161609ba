//! Which file serves each role of a volume, as the daemon decides it: by the superblocks
//! (`records`), not by the config's order. After member paths are swapped in the config, or
//! a spare or replacement took a role, the config's order names the wrong file — and an admin
//! about to `dd` a region must not read or write the wrong disk (`mdadm --examine` shows a
//! device's real role the same way).

use crate::records::Records;
use anyhow::{bail, Result};
use nbraid_config::{Config, Volume};

/// The id and file of each role (volume member index) of one volume.
#[derive(Debug, PartialEq, Eq)]
pub struct Roles {
    /// Config member id by role; a member added at run time is named by its path.
    pub ids: Vec<String>,
    /// The file (or device, or URI) by role.
    pub paths: Vec<String>,
    /// Said when the superblocks' roles differ from the config's order.
    pub note: Option<String>,
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
    let by_superblocks = match record {
        Some(r) if r.state.starts_with("refused") => bail!(
            "volume {}: which file holds which role is the superblocks' to say, and they do not \
             assemble ({}); run nbraid check",
            v.name,
            r.state
        ),
        Some(r) if !r.members.is_empty() => r.members.clone(),
        _ => config_ids.clone(),
    };
    let paths: Vec<String> = by_superblocks.iter().map(|id| path_of(id)).collect();
    let note = (by_superblocks != config_ids).then(|| {
        let roles: Vec<String> = by_superblocks
            .iter()
            .zip(&paths)
            .enumerate()
            .map(|(role, (id, path))| format!("{role} = {id} ({path})"))
            .collect();
        format!(
            "note: roles follow the superblocks, not the config's order: {}",
            roles.join(", ")
        )
    });
    Ok(Roles {
        ids: by_superblocks,
        paths,
        note,
    })
}
