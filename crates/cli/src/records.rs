//! `nbraid check`'s look at the superblocks: the two superblock slots of every member and
//! spare file are read with plain reads (no lock: a running daemon is not disturbed, nothing
//! is written), assembly's own pure decision runs over them, and the daemon's own words say
//! what it means for the config — a spare now holding a role (with the `members = [...]`
//! line to write), an old member ignored, roles no member serves.

use nbraid_assembly::adopt;
use nbraid_assembly::preflight::probes_with_added;
use nbraid_assembly::reshape_plan::{self, VolumePlan};
use nbraid_config::{Config, Volume};
use nbraid_core::metadata::{assemble, Absence, AssembleError, Probe};
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
    /// Where the config declares another shape than the records: how `nbraid apply` would get
    /// there, or why it would not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reshape: Option<VolumePlan>,
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
        reshape: None,
    };
    let n = v.members.len();
    let Some((probes, added)) = probes_with_added(config, v) else {
        r.state = "not on files (read at start only)".into();
        return r;
    };
    if !probes.iter().any(|p| matches!(p, Probe::Superblock(..))) {
        r.state = "no superblocks yet (written at the first start)".into();
        return r;
    }
    let asm = match assemble(&v.name, v.geometry.root(), &probes) {
        Ok(a) => a,
        Err(e) => {
            if matches!(e, AssembleError::GeometryChanged { .. }) {
                r.reshape = reshape(v, &probes[..n]);
            }
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
        (n, n + v.heal.spares.len()),
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

/// The plan from the tree volume `v`'s records hold to the one its config declares (`probes`:
/// the config's members, by position).
fn reshape(v: &Volume, probes: &[Probe]) -> Option<VolumePlan> {
    let (recorded, roles) = reshape_plan::recorded(&v.name, probes)?;
    let config = reshape_plan::config_by_role(v.geometry.root(), &roles, recorded.member_count());
    Some(reshape_plan::plan(
        &v.name,
        &recorded,
        &config,
        v.heal.rebuild_rate_bytes_per_s,
    ))
}
