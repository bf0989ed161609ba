//! A reshape plan as the reshape's start will carry it out: the start's own decision
//! (`nbraid_core::metadata::reshape_start_preview`) run over the superblocks the members hold,
//! so `nbraid apply` and `nbraid check` refuse what `--yes` would refuse and say when the new
//! shape goes without the write-hole log.

use nbraid_assembly::reshape_plan::{Action, MoveKind, VolumePlan};
use nbraid_config::write_hole;
use nbraid_core::metadata::{reshape_start_preview, NewShape, Probe};
use nbraid_layout::Node;

/// The recorded tree of a volume, the config's tree numbered by recorded role, and per config
/// position the recorded role of the member there (`None`: added), as
/// `reshape_plan::recorded` and `config_by_role` give them.
pub struct ByRole<'a> {
    pub recorded: &'a Node,
    pub new_tree: &'a Node,
    pub roles: &'a [Option<usize>],
}

/// `plan` of volume `v` as the reshape's start will carry it out, by the start's own decision
/// over the superblocks the members hold (`probes`, by config position;
/// `nbraid_core::metadata::reshape_start_preview`): refused where the start refuses (no room
/// for the copy's backup), and the new shape's parity groups that get no write-hole log (the
/// log switched off, or no room for its ring), in `nbraid check`'s words. The plan said
/// "restripe online" for moves `--yes` then refused, and never said a new shape went unlogged.
pub fn as_started(
    config: &nbraid_config::Config,
    v: &nbraid_config::Volume,
    probes: &[Probe],
    by: ByRole<'_>,
    mut plan: VolumePlan,
) -> VolumePlan {
    let Action::Online(m) = &plan.action else {
        return plan;
    };
    // New copies of a RAID 1 take no backup and no log.
    if m.kind == MoveKind::Copy {
        return plan;
    }
    let old_roles = by.recorded.member_count();
    let mut positions: Vec<Option<usize>> = vec![None; old_roles];
    for (p, role) in by.roles.iter().enumerate() {
        match role {
            Some(r) if *r < old_roles => positions[*r] = Some(p),
            _ => positions.push(Some(p)),
        }
    }
    // Every recorded role has a member in the config (else the plan refused already).
    let Some(positions) = positions.into_iter().collect::<Option<Vec<usize>>>() else {
        return plan;
    };
    let member = |p: usize| &config.members[v.members[p]];
    let names: Vec<String> = (positions.iter())
        .map(|&p| member(p).path.display().to_string())
        .collect();
    let shape = NewShape {
        name: &v.name,
        old_tree: by.recorded,
        new_tree: by.new_tree,
        held: (positions.iter())
            .map(|&p| match &probes[p] {
                Probe::Superblock(sb, _) => Some(sb),
                _ => None,
            })
            .collect(),
        member_bytes: positions.iter().map(|&p| member(p).size).collect(),
        names: names.iter().map(String::as_str).collect(),
        old_roles,
    };
    let ppl = v.metadata.ppl;
    let no_room = match reshape_start_preview(&shape, ppl) {
        Ok(no_room) => no_room,
        Err(reason) => {
            plan.action = Action::Refused { reason };
            return plan;
        }
    };
    let (root, ids) = (v.geometry.root(), v.member_ids(config));
    let groups = write_hole::parity_groups(root);
    let (unlogged, note) = match no_room {
        Some(why) if ppl && groups > 0 => (
            write_hole::unlogged_groups(root, false, &ids),
            Some(write_hole::no_room_note(groups, &why)),
        ),
        _ => {
            let unlogged = write_hole::unlogged_groups(root, ppl, &ids);
            let note = write_hole::note(&unlogged, groups, ppl);
            (unlogged, note)
        }
    };
    plan.unlogged_parity_groups = unlogged;
    plan.write_hole_note = note;
    plan
}
