//! `nbraid check`'s look at the superblocks: the two superblock slots of every member and
//! spare file are read with plain reads (no lock: a running daemon is not disturbed, nothing
//! is written), assembly's own pure decision runs over them, and the daemon's own words say
//! what it means for the config — a spare now holding a role (with the `members = [...]`
//! line to write), an old member ignored, roles no member serves.

use nbraid_assembly::preflight::{read_probe, read_probe_of};
use nbraid_assembly::{added, adopt, records};
use nbraid_config::{Config, MemberStorage, Volume};
use nbraid_core::metadata::{assemble, Absence, Probe};
use serde::Serialize;

/// What the superblocks say about one volume.
#[derive(Clone, Debug, Serialize)]
pub struct Records {
    pub volume: String,
    /// `healthy`, `degraded: ...`, `no superblocks yet`, `not on files`, or why assembly
    /// would refuse.
    pub state: String,
    /// The config id serving each role by the superblocks (empty when they do not decide).
    pub members: Vec<String>,
    pub notes: Vec<String>,
}

/// The superblocks of every volume whose members are files or devices.
pub fn look(config: &Config) -> Vec<Records> {
    config.volumes.iter().map(|v| volume(config, v)).collect()
}

fn volume(config: &Config, v: &Volume) -> Records {
    let mut r = Records {
        volume: v.name.clone(),
        state: String::new(),
        members: Vec::new(),
        notes: Vec::new(),
    };
    let positions: Vec<usize> = v.members.iter().chain(&v.heal.spares).copied().collect();
    if positions.iter().any(|&m| {
        matches!(
            config.members[m].state,
            MemberStorage::Memory | MemberStorage::Remote
        )
    }) {
        r.state = "not on files (read at start only)".into();
        return r;
    }
    let n = v.members.len();
    let raw: Vec<Probe> = positions
        .iter()
        .map(|&m| read_probe(&config.members[m].path, &config.members[m].id))
        .collect();
    // Members added at run time, by the daemon's rules (`nbraid_assembly::added`): the paths
    // the newest record lists (following the lists of those read), no config member's.
    let named = |p: &str| {
        config
            .members
            .iter()
            .any(|m| m.path.as_os_str() == p || added::same_file(&m.path, std::path::Path::new(p)))
    };
    let config_probes: Vec<&Probe> = raw.iter().collect();
    let read = |p: String| async move { read_probe(std::path::Path::new(&p), &p) };
    let added = futures::executor::block_on(added::follow_added(
        &v.name,
        &config_probes,
        named,
        read,
        read_probe_of,
    ));
    // By array id, as the daemon: a file later used by another array's volume of the same
    // name is not this volume's.
    let this = records::this_array(config_probes.iter().copied(), &v.name);
    let has_this = |probe: &Probe| records::record_of(probe, &v.name, this).is_some();
    let only_this = |probe: &Probe| matches!(probe, Probe::Superblock(sb, _) if has_this(probe) && sb.volumes.iter().all(|x| x.name == v.name && this.is_none_or(|a| x.array == a)));
    // Config spares join assembly only with a record of this volume alone; added members
    // with one of this volume (the records list them).
    let mut probes: Vec<Probe> = raw
        .into_iter()
        .enumerate()
        .map(|(p, probe)| match probe {
            Probe::Superblock(..) if p >= n && !only_this(&probe) => Probe::Missing,
            probe => probe,
        })
        .collect();
    probes.extend(added.iter().map(|(_, probe)| match probe {
        Probe::Superblock(..) if !has_this(probe) => Probe::Missing,
        probe => probe.clone(),
    }));
    let added: Vec<String> = added.into_iter().map(|a| a.0).collect();
    if !probes.iter().any(|p| matches!(p, Probe::Superblock(..))) {
        r.state = "no superblocks yet (written at the first start)".into();
        return r;
    }
    let asm = match assemble(&v.name, v.geometry.root(), &probes) {
        Ok(a) => a,
        Err(e) => {
            r.state = format!("refused: {e}");
            return r;
        }
    };
    let ids = adopt::position_ids(config, v, &added);
    let record = |p: usize| match &probes[p] {
        Probe::Superblock(sb, _) if sb.volumes.iter().any(|x| x.name == v.name) => {
            Some(sb.volumes.iter().all(|x| x.name == v.name))
        }
        _ => None,
    };
    r.members = adopt::ids_by_role(&ids, n, &asm.roles);
    r.notes = adopt::role_notes(
        &v.name,
        (&ids, &added),
        (n, positions.len()),
        &asm.roles,
        &record,
    );
    let absent: Vec<String> = asm
        .absent()
        .map(|(role, a)| {
            let why = match a {
                Absence::Lost => "lost",
                Absence::Stale { .. } => "stale",
                Absence::Failed { .. } => "failed",
                Absence::Unreachable { .. } => "unreachable",
            };
            format!("role {role} {why}")
        })
        .collect();
    r.state = if absent.is_empty() {
        "healthy".into()
    } else {
        format!("degraded: {}", absent.join(", "))
    };
    r
}
