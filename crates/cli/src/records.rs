//! `nbraid check`'s look at the superblocks: the two superblock slots of every member and
//! spare file are read with plain reads (no lock: a running daemon is not disturbed, nothing
//! is written), assembly's own pure decision runs over them, and the daemon's own words say
//! what it means for the config — a spare now holding a role (with the `members = [...]`
//! line to write), an old member ignored, roles no member serves.

use nbraid_assembly::adopt;
use nbraid_assembly::last_life;
use nbraid_assembly::plan::Plan;
use nbraid_assembly::preflight::{
    absence_word, member_ids, probes_with_remote, start_plan_with, RemoteRead,
};
use nbraid_assembly::replaces::{self, ReplaceUnderWay};
use nbraid_assembly::reshape_plan::{self, outline, Action, VolumePlan};
use nbraid_config::format_size;
use nbraid_config::{Config, MemberStorage, Volume};
use nbraid_core::metadata::{
    assemble_as_started, planned_area, AssembleError, Assembly, Probe, ReshapeRecord, Superblock,
};
use serde::Serialize;

/// What the superblocks say about one volume.
#[derive(Clone, Debug, Serialize)]
pub struct Records {
    pub volume: String,
    /// `healthy`, `degraded: ...`, `no superblocks yet`, `not created yet: ...`, `not on
    /// files` (in memory), `not read: ...` (on NBD servers not read), or why the start would
    /// refuse.
    pub state: String,
    /// The config id serving each role by the superblocks (empty when they do not decide);
    /// a member added at run time by the id it goes by, a missing member by its id too.
    pub members: Vec<String>,
    /// By role, the file of `members`: where it serves from, or is missing from (`?`: no
    /// member can be named).
    pub paths: Vec<String>,
    /// By role, why its member does not serve it (`lost`, `stale`, `failed`,
    /// `unreachable`, `unusable`: its server answers with an export it cannot use), `None`
    /// where it serves.
    pub absent: Vec<Option<&'static str>>,
    pub notes: Vec<String>,
    /// Where the config declares another shape than the records: how `nbraid apply` would get
    /// there, or why it would not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reshape: Option<VolumePlan>,
    /// The replaces under way at the last shutdown, and what the next start does with each.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub replaces: Vec<ReplaceUnderWay>,
}

/// The superblocks of every volume whose members are files or devices.
pub fn look(config: &Config) -> Vec<Records> {
    look_with(config, &[])
}

/// [`look`], the volumes with members on NBD servers too, as `remotes` read them
/// (`nbraid_assembly::preflight::read_remotes`: through NBD, as the start reads them).
pub fn look_with(config: &Config, remotes: &[Option<RemoteRead>]) -> Vec<Records> {
    let mut areas = crate::meta_budget::Areas::new(config);
    (config.volumes.iter())
        .map(|v| {
            let mut r = volume(config, v, remotes, &mut areas);
            unusable_roles(config, remotes, &mut r);
            let unavailable = (v.members.iter().chain(&v.heal.spares))
                .filter_map(|&m| remotes.get(m)?.as_ref()?.unavailable.as_deref());
            let notes: Vec<String> = unavailable
                .map(|why| unavailable_note(why, &r.state))
                .collect();
            r.notes.extend(notes);
            // A short member is left out as the start leaves it (`nbraid_assembly::member`).
            let short = (v.members.iter().chain(&v.heal.spares))
                .filter_map(|&m| nbraid_assembly::member::short_text(&config.members[m]));
            r.notes.extend(short);
            r
        })
        .collect()
}

/// Roles whose member is on an NBD server that answers with an export it cannot use (too
/// small, read-only): `unusable`, not `unreachable` — the note beside says what is wrong.
fn unusable_roles(config: &Config, remotes: &[Option<RemoteRead>], r: &mut Records) {
    // A short member (less than its records keep) answers too: it is unusable.
    let unusable = |id: &str| {
        let m = config.members.iter().position(|m| m.id == id);
        let short = m.is_some_and(|m| config.members[m].short_len_bytes().is_some());
        short
            || m.and_then(|m| remotes.get(m)?.as_ref())
                .is_some_and(|x| x.unusable)
    };
    let mut changed = false;
    for (role, why) in r.absent.iter_mut().enumerate() {
        let id = r.members.get(role).map_or("", String::as_str);
        if *why == Some("unreachable") && unusable(id) {
            *why = Some("unusable");
            changed = true;
        }
    }
    if changed && r.state.starts_with("degraded") {
        r.state = state(r, None);
    }
}

/// What the start does about a member on an NBD server it could not use (`why`: which, at
/// which URI, and why), by the volume's `state` as the check found it.
fn unavailable_note(why: &str, state: &str) -> String {
    let outcome = if state.starts_with("refused") {
        "a start now refuses the volume (above)"
    } else if state.starts_with("degraded") {
        "a start now serves the volume degraded without it, and re-adds it (resynced) once it answers as it should"
    } else {
        "a start now goes on without it, and re-adds it once it answers as it should"
    };
    format!("{why}; {outcome}")
}

/// One volume's records: read (or why not), the start's plan, the assembly as the start
/// decides it, and who holds each role.
fn volume(
    config: &Config,
    v: &Volume,
    remotes: &[Option<RemoteRead>],
    areas: &mut crate::meta_budget::Areas,
) -> Records {
    let mut r = Records::of(&v.name);
    let n = v.members.len();
    let Some((probes, added)) = probes_with_remote(config, v, remotes) else {
        (r.state, r.notes) = not_read(&unread_members(config, v, remotes));
        return r;
    };
    if let Some(state) = not_opened(config, v, &probes[..n], remotes, areas) {
        r.state = state;
        return r;
    }
    // Members grown under a config that does not pin their size: the start opens the
    // recorded regions, and `nbraid apply` plans the grow into the rest.
    let (tree, grown) = nbraid_assembly::grown::start_tree(config, v, &probes);
    if !grown.is_empty() {
        r.reshape = reshape(config, v, &probes[..n]);
    }
    let ids = member_ids(config, v);
    // A dirty start that logs reads its rings' word on the life that stopped: after one
    // that did not log, it is assembled as a start without the log.
    let assembled = assemble_as_started(&v.name, &tree, &probes, &ids, v.metadata.ppl)
        .and_then(|asm| last_life::as_started(config, v, (&tree, &probes, &added), &ids, asm));
    let (asm, word) = match assembled {
        Ok(a) => a,
        Err(e) => {
            refused_assembly(config, v, (&probes, &added), &e, &mut r);
            return r;
        }
    };
    roles(config, v, (&probes, &added), &asm, &mut r);
    r.replaces = replaces::under_way(config, v, &asm, (&probes, &added));
    r.notes.extend(r.replaces.iter().map(ReplaceUnderWay::text));
    r.notes
        .extend(last_life::resync_note(config, v, (&asm, &probes), &word));
    r.notes.extend(checksum_note(v, &probes[..n]));
    // A setting the records keep otherwise (the config is loaded pinned to them).
    let fixed = nbraid_assembly::settings::fixed_at_create(v);
    r.notes
        .extend(fixed.iter().map(|c| format!("setting: {}", c.text())));
    r.notes.extend(grown);
    let read_only = v.read_only.then(|| {
        nbraid_assembly::read_only_check::open_refusal(config, v, &asm, (&probes, &added))
    });
    r.state = state(&r, read_only.flatten());
    r
}

impl Records {
    /// Nothing known yet of volume `name`.
    fn of(name: &str) -> Records {
        Records {
            volume: name.to_string(),
            state: String::new(),
            members: Vec::new(),
            paths: Vec::new(),
            absent: Vec::new(),
            notes: Vec::new(),
            reshape: None,
            replaces: Vec::new(),
        }
    }
}

/// The volume's members then spares, as far as this look can read them.
fn unread_members(config: &Config, v: &Volume, remotes: &[Option<RemoteRead>]) -> Vec<Unread> {
    (v.members.iter().chain(&v.heal.spares))
        .map(|&m| {
            let remote_read = remotes.get(m).is_some_and(Option::is_some);
            unread(&config.members[m], remote_read)
        })
        .collect()
}

/// The state of a volume the start would not open (`None`: it opens it): refused, or
/// created — the daemon's rule: a volume no member carries a record of is created (beside
/// the config's other volumes' records, Matrix), one some member carries is assembled.
fn not_opened(
    config: &Config,
    v: &Volume,
    probes: &[Probe],
    remotes: &[Option<RemoteRead>],
    areas: &mut crate::meta_budget::Areas,
) -> Option<String> {
    match start_plan_with(config, v, probes, remotes) {
        Err(refusal) => Some(format!("refused: {refusal}")),
        Ok(Plan::Create { .. }) => Some(match areas.create(config, v, probes) {
            Ok(()) => to_be_created(probes),
            Err(why) => format!("refused: {why}"),
        }),
        Ok(Plan::Open) => None,
    }
}

/// The assembly refused `e`, beyond tolerance: the start's own words (which member, why,
/// what forces it), and where the config declares another shape, how `apply` gets there.
fn refused_assembly(
    config: &Config,
    v: &Volume,
    (probes, added): (&[Probe], &[String]),
    e: &AssembleError,
    r: &mut Records,
) {
    let changed = matches!(
        e,
        AssembleError::GeometryChanged { .. }
            | AssembleError::ChangedMidReshape { .. }
            | AssembleError::RegionGrown { .. }
    );
    if changed {
        r.reshape = reshape(config, v, &probes[..v.members.len()]);
    }
    let ids = adopt::position_ids(config, v, added);
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    let why = nbraid_assembly::beyond_tolerance::check_text(config, v, probes, &ids, e);
    let shrunk = changed
        .then(|| nbraid_assembly::pins::shrunk_members(config, v, probes))
        .flatten();
    r.state = match shrunk {
        Some(shrunk) => format!("refused: {shrunk} ({why})"),
        None => format!("refused: {why}"),
    };
}

/// Who holds each role by the records' identities, as the daemon's start decides it: the
/// ids, their files, the notes on roles and why a role is not served.
fn roles(
    config: &Config,
    v: &Volume,
    (probes, added): (&[Probe], &[String]),
    asm: &Assembly,
    r: &mut Records,
) {
    let ids = adopt::position_ids(config, v, added);
    let record = |p: usize| match &probes[p] {
        Probe::Superblock(sb, _) if sb.volumes.iter().any(|x| x.name == v.name) => {
            Some(sb.volumes.iter().all(|x| x.name == v.name))
        }
        _ => None,
    };
    let n = v.members.len();
    let configured = n + v.heal.spares.len();
    let unidentified: Vec<bool> = probes
        .iter()
        .map(|p| adopt::unidentified(Some(p)))
        .collect();
    let holders = adopt::holders(&asm.roles, (n, configured), &unidentified);
    let paths: Vec<&str> = (v.members.iter().chain(&v.heal.spares))
        .map(|&m| config.members[m].path_text.as_str())
        .chain(added.iter().map(String::as_str))
        .collect();
    r.members = adopt::ids_by_role(&ids, &holders);
    r.paths = (holders.iter())
        .map(|h| {
            h.and_then(|p| paths.get(p))
                .map_or("?".into(), |p| p.to_string())
        })
        .collect();
    r.notes = adopt::role_notes(
        &v.name,
        (&ids, added),
        (n, configured),
        (&asm.roles, &holders),
        &record,
    );
    r.absent = (asm.roles.iter())
        .map(|role| role.as_ref().err().map(absence_word))
        .collect();
}

/// The volume's state as the start would find it: refused read-only (`read_only`: why),
/// else healthy or degraded naming which member is out, by its id and the file it was last
/// known at.
fn state(r: &Records, read_only: Option<String>) -> String {
    if let Some(why) = read_only {
        return format!("refused: {why}");
    }
    let absent: Vec<String> = (r.absent.iter().enumerate())
        .filter_map(|(role, why)| {
            let who = match r.members[role].as_str() {
                "?" => String::new(),
                id => format!(" ({id}: {})", r.paths[role]),
            };
            Some(format!("role {role} {}{who}", (*why)?))
        })
        .collect();
    match absent.is_empty() {
        true => "healthy".into(),
        false => format!("degraded: {}", absent.join(", ")),
    }
}

/// A member whose superblock this look could not read, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Unread {
    /// On an NBD server not read here (its id, its URI).
    Remote(String, String),
    /// In memory: nothing survives its daemon.
    Memory,
    /// Read (a file or device, or a remote read through NBD).
    Read,
}

fn unread(m: &nbraid_config::Member, remote_read: bool) -> Unread {
    match m.state {
        MemberStorage::Remote if !remote_read => Unread::Remote(m.id.clone(), m.path_text.clone()),
        MemberStorage::Memory => Unread::Memory,
        _ => Unread::Read,
    }
}

/// The state and notes of a volume whose records were not all read (`members`: the config's
/// members then spares): what can and cannot be told of it without connecting to its
/// servers. Members in memory keep nothing once their daemon is gone; the superblocks of
/// members on NBD servers are read through NBD, by a start and by `nbraid check`.
fn not_read(members: &[Unread]) -> (String, Vec<String>) {
    let remote: Vec<(&str, &str)> = (members.iter())
        .filter_map(|m| match m {
            Unread::Remote(id, uri) => Some((id.as_str(), uri.as_str())),
            _ => None,
        })
        .collect();
    if remote.is_empty() {
        return (
            "not on files (in memory: nothing is kept once its daemon stops)".into(),
            Vec::new(),
        );
    }
    let ids: Vec<&str> = remote.iter().map(|(id, _)| *id).collect();
    let state = format!(
        "not read: {} ({}); their superblocks are read through NBD, by a start and by `nbraid check`",
        match remote.len() {
            1 => "a member is on an NBD server",
            _ => "members are on NBD servers",
        },
        ids.join(", ")
    );
    let mut notes: Vec<String> = (remote.iter())
        .map(|(id, uri)| {
            format!("{id} at {uri}: not connected to here, so whether its server answers, which role it holds and whether it is current are not known")
        })
        .collect();
    if members.contains(&Unread::Memory) {
        notes.push("its members in memory keep nothing once the daemon stops".into());
    }
    (state, notes)
}

/// The state of a volume the next start creates: beside the other volumes whose records its
/// members (`probes`) carry, if any.
fn to_be_created(probes: &[Probe]) -> String {
    let mut beside: Vec<&str> = (probes.iter())
        .filter_map(|p| match p {
            Probe::Superblock(sb, _) => Some(sb.volumes.iter().map(|x| x.name.as_str())),
            _ => None,
        })
        .flatten()
        .collect();
    beside.sort_unstable();
    beside.dedup();
    match beside.is_empty() {
        true => "no superblocks yet (written at the first start)".into(),
        false => format!(
            "not created yet: created at the next start beside volume(s) {}",
            beside.join(", ")
        ),
    }
}

/// What the next start does about per-block checksums the records do not have yet
/// (`checksums = "enable"`), or a pass computing them left unfinished.
fn checksum_note(v: &Volume, probes: &[Probe]) -> Option<String> {
    let sbs: Vec<&Superblock> = (probes.iter())
        .filter_map(|p| match p {
            Probe::Superblock(sb, _) => Some(sb),
            _ => None,
        })
        .collect();
    let records = sbs
        .iter()
        .filter_map(|sb| sb.volumes.iter().find(|x| x.name == v.name));
    if let Some(f) = records
        .filter_map(|x| x.checksum_fill)
        .min_by_key(|f| f.position_bytes)
    {
        return Some(format!(
            "a pass computing the per-block checksums stopped at {}: the next start resumes it in the background",
            nbraid_config::format_size(f.position_bytes)
        ));
    }
    if !v.metadata.checksums_enable {
        return None;
    }
    let mut places = Vec::new();
    for sb in &sbs {
        match planned_area(&v.name, sb, sb.member_bytes) {
            Ok(Some(a)) => places.push(format!("{} bytes at {}", a.len_bytes, a.offset_bytes)),
            Ok(None) => {}
            Err(e) => {
                return Some(format!(
                    "checksums = \"enable\" would be refused at the start: {e}"
                ))
            }
        }
    }
    (!places.is_empty()).then(|| {
        format!(
            "checksums = \"enable\": the next start gives the volume per-block checksums — an area on each member where it has room ({}; its regions stay where they are) and a background pass that computes them (`nbraid status` shows it)",
            places.join(", ")
        )
    })
}

/// The plan from the tree volume `v`'s records hold to the one its config declares (`probes`:
/// the config's members, by position), as the reshape's start would carry it out
/// ([`crate::as_started::as_started`]).
fn reshape(config: &Config, v: &Volume, probes: &[Probe]) -> Option<VolumePlan> {
    let (recorded, roles) = reshape_plan::recorded(&v.name, probes)?;
    // Mid-reshape the records' roles include the members it added: planned from the old
    // tree, the next shape numbered one twice ("member 3 appears 2 times in the new tree").
    let newest = nbraid_assembly::records::newest_record(probes, &v.name);
    if let Some(running) = newest.and_then(|r| r.reshape.as_ref()) {
        return Some(under_way(&v.name, &recorded, running, v.geometry.root()));
    }
    let tree = reshape_plan::config_by_role(v.geometry.root(), &roles, recorded.member_count());
    let mut plan = reshape_plan::plan(&v.name, &recorded, &tree, v.heal.rebuild_rate_bytes_per_s);
    if let reshape_plan::Action::Online(m) = &mut plan.action {
        m.adaptive = v.heal.rebuild_adaptive;
    }
    let by_role = crate::as_started::ByRole {
        recorded: &recorded,
        new_tree: &tree,
        roles: &roles,
    };
    Some(crate::as_started::as_started(
        config, v, probes, by_role, plan,
    ))
}

/// The plan of volume `volume` whose records say a reshape is under way from `recorded`
/// (`running`) while the config declares `config_tree`: refused, saying from what to what
/// and how far it is, and what to do — one reshape at a time.
fn under_way(
    volume: &str,
    recorded: &nbraid_layout::Node,
    running: &ReshapeRecord,
    config_tree: &nbraid_layout::Node,
) -> VolumePlan {
    let (from, into) = (outline(recorded), outline(&running.new_tree));
    let to = outline(config_tree);
    // The position stops at the old capacity: the copy's share of it.
    let total_bytes = recorded.capacity().max(1);
    let pct = running.position_bytes.min(total_bytes) as f64 * 100.0 / total_bytes as f64;
    let reason = format!(
        "a reshape is under way on it: {} → {}, {pct:.0}% copied ({} of {}, its last \
         checkpoint); a volume takes one reshape at a time — wait until it is done (`nbraid \
         status {volume}` shows its progress; the reshape reads done), then run `nbraid apply` \
         again to go on to {}",
        from.words(),
        into.words(),
        format_size(running.position_bytes.min(total_bytes)),
        format_size(total_bytes),
        to.words()
    );
    VolumePlan {
        volume: volume.to_string(),
        from,
        to,
        changes: Vec::new(),
        action: Action::Refused { reason },
        unlogged_parity_groups: Vec::new(),
        write_hole_note: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nbraid_layout::{Level, ParityLayout, Region, Shape};

    #[test]
    fn a_read_only_refusal_is_the_state_over_health() {
        let r = Records {
            volume: "v".into(),
            state: String::new(),
            members: vec!["d0".into(), "d1".into()],
            paths: vec!["d0.img".into(), "d1.img".into()],
            absent: vec![None, Some("stale")],
            notes: vec![],
            reshape: None,
            replaces: Vec::new(),
        };
        assert_eq!(state(&r, None), "degraded: role 1 stale (d1: d1.img)");
        let why = "volume `v` was not shut down cleanly".to_string();
        assert_eq!(state(&r, Some(why.clone())), format!("refused: {why}"));
    }

    fn raid(level: Level, members: usize) -> nbraid_layout::Node {
        Shape::new(level, members, None, 64 << 10, ParityLayout::default())
            .unwrap()
            .build(&vec![
                Region {
                    start: 1 << 20,
                    len: 8 << 20
                };
                members
            ])
            .unwrap()
    }

    /// Found by an events hunt: with no daemon running, `nbraid status` said "not on files"
    /// of a volume whose members are all on NBD servers.
    #[test]
    fn a_volume_on_nbd_servers_says_what_is_not_read_and_where_to_read_it() {
        let remote = |i: usize| Unread::Remote(format!("r{i}"), format!("nbd://h{i}/x"));
        let (state, notes) = not_read(&[remote(0), remote(1)]);
        assert!(!state.contains("not on files"), "{state}");
        assert_eq!(
            state,
            "not read: members are on NBD servers (r0, r1); their superblocks are read through NBD, by a start and by `nbraid check`"
        );
        assert_eq!(notes.len(), 2);
        assert!(
            notes[1].starts_with("r1 at nbd://h1/x: not connected to here"),
            "{}",
            notes[1]
        );
        let (state, notes) = not_read(&[Unread::Read, remote(1)]);
        assert!(
            state.contains("a member is on an NBD server (r1);"),
            "{state}"
        );
        assert_eq!(notes.len(), 1);
        let (state, notes) = not_read(&[Unread::Memory, Unread::Memory]);
        assert!(state.starts_with("not on files"), "{state}");
        assert!(notes.is_empty());
    }

    #[test]
    fn a_second_shape_while_a_reshape_is_under_way_says_so() {
        let running = ReshapeRecord {
            new_tree: raid(Level::Raid5, 4),
            position_bytes: 4 << 20,
            backup_area: None,
            backup_window: None,
        };
        let p = under_way(
            "db",
            &raid(Level::Raid5, 3),
            &running,
            &raid(Level::Raid6, 5),
        );
        let Action::Refused { reason } = &p.action else {
            panic!("refused: {p:?}");
        };
        assert!(
            reason.starts_with(
                "a reshape is under way on it: raid5 of 3 members, strip 64 KiB → raid5 of 4 \
                 members, strip 64 KiB, 25% copied (4 MiB of 16 MiB"
            ),
            "{reason}"
        );
        assert!(reason.contains("`nbraid status db`"), "{reason}");
        assert!(
            reason.ends_with("go on to raid6 of 5 members, strip 64 KiB"),
            "{reason}"
        );
    }
}
