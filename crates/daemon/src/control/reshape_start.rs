//! `reshape` (`nbraid apply CONFIG --yes` against a running daemon): volume `v` is reshaped
//! online into the shape the config declares, while it serves. In order:
//!
//! 1. **Plan** — the config's tree against the live array's, by the offline rules
//!    (`nbraid_assembly::reshape_plan`): the config's members are matched to roles by file;
//!    anything but a restripe, a grow in place or copies added to a RAID 1 is refused with
//!    the plan's reason.
//! 2. **Refusals** — by name: work running on the volume (scrub, rebuild, resync, a reshape,
//!    the checksum pass of `checksums = "enable"`),
//!    a member not current, a member shared with another volume (Matrix).
//! 3. **Added members** opened (a missing file created sparse at its config size); members
//!    the config gives more bytes (grown files or devices) take them.
//! 4. **Quiet** — the export's gate held: requests in flight finish, new ones wait.
//! 5. **Records** — the array recorded clean, then `Array::start_reshape` (copies added to a
//!    RAID 1: `Array::add_copies`; the disk write rule on every added member first, `--force`
//!    as consent).
//! 6. **Reopened** over the same members and the added ones, served from then on; the pass
//!    copies on in the background (`reshape.rs`), as after a restart — new copies are roles
//!    being rebuilt, and their rebuild starts.

use super::controls::{refused, Controls};
use super::members::{already_open, Offered};
use super::reshape::carry_spares;
use super::volume::ControlVolume;
use nbraid_assembly::reshape_plan::{self, Action, MoveKind};
use nbraid_config::{Config, MemberStorage};
use nbraid_control::Refusal;
use nbraid_core::metadata::disk_rule::Consent;
use nbraid_core::metadata::{Array, MemberMeta};
use nbraid_core::{Member, ScrubState, UringFile};
use serde_json::{json, Value};
use std::sync::Arc;

/// The text of the config a `reshape` names, read before the volume's lock is taken and off
/// the runtime's workers: the path is the client's (a FIFO, a device, a slow disk), and
/// [`nbraid_config::read_text`] refuses what is not a regular file of a config's size.
pub(super) async fn read_config(config_path: &str) -> Result<String, Refusal> {
    let path = std::path::PathBuf::from(config_path);
    let read = tokio::task::spawn_blocking(move || nbraid_config::read_text(&path)).await;
    match read {
        Ok(text) => text.map_err(|e| Refusal::new("bad-config", e.to_string())),
        Err(e) => Err(Refusal::new(
            "internal",
            format!("reading {config_path}: the reading task failed: {e}"),
        )),
    }
}

/// Config `text` (read from `config_path`, [`read_config`]) checked against the members'
/// records, which are read off the runtime's workers too.
async fn parse_config(config_path: &str, text: String) -> Result<Config, Refusal> {
    let path = std::path::PathBuf::from(config_path);
    let parsed =
        tokio::task::spawn_blocking(move || nbraid_assembly::pins::parse(&text, &path)).await;
    match parsed {
        Ok(config) => config.map_err(|e| Refusal::new("bad-config", format!("{config_path}: {e}"))),
        Err(e) => Err(Refusal::new(
            "internal",
            format!("checking {config_path}: the checking task failed: {e}"),
        )),
    }
}

/// `reshape`: starts reshaping `v` into the shape the config at `config_path` declares
/// (its `text`, [`read_config`]).
pub(super) async fn start(
    controls: &Controls,
    v: &ControlVolume,
    (config_path, text): (&str, String),
    force: bool,
) -> Result<Value, Refusal> {
    let config = parse_config(config_path, text).await?;
    let cv = (config.volumes.iter().find(|c| c.name == v.name)).ok_or_else(|| {
        Refusal::new(
            "not-found",
            format!("{config_path} declares no volume \"{}\"", v.name),
        )
    })?;
    let array = v.array();
    // Before any plan: mid-reshape the live roles include the members it adds, and the plan
    // of the old tree against the next one read as a bad tree, not as "one at a time".
    if let Some((position_bytes, total_bytes)) = array.reshape_progress() {
        let why = running_text(&v.name, position_bytes, total_bytes);
        return Err(Refusal::new("busy", why));
    }
    let roles = roles_of(&config, cv, &array)?;
    grow_members(&config, cv, &roles, &array)?;
    let recorded = array.volume().geometry().root().clone();
    let new_tree =
        reshape_plan::config_by_role(cv.geometry.root(), &roles, recorded.member_count());
    // At the rate the reshape's pass will run at: the volume's, not the config's (a reload or
    // `nbraid rebuild --rate` may have set it apart).
    let plan = reshape_plan::plan(
        &v.name,
        &recorded,
        &new_tree,
        v.rebuild_rate().limit_bytes_per_s,
    );
    let copies = match &plan.action {
        Action::Unchanged => {
            return Ok(json!({ "volume": v.name, "plan": plan, "started": false }))
        }
        Action::Refused { reason } => return Err(Refusal::new("refused", reason.clone())),
        Action::Online(m) => m.kind == MoveKind::Copy,
    };
    if let Some(why) = busy(controls, v, &array) {
        return Err(Refusal::new(
            "busy",
            format!("volume \"{}\": {why}", v.name),
        ));
    }
    drop(array);
    let added = open_added(controls, v, &config, cv, &roles).await?;
    let consent = Consent {
        force,
        siblings: Vec::new(),
    };
    let ids = ids_by_role(v, &config, cv, &roles);
    let newcomers: Vec<(String, Arc<dyn Member>)> = (ids.iter().skip(recorded.member_count()))
        .zip(&added)
        .map(|(id, meta)| (id.clone(), meta.member().clone()))
        .collect();
    let options = nbraid_assembly::assemble::array_options(cv, ids, false);
    let newcomers: Vec<(&str, &Arc<dyn Member>)> =
        newcomers.iter().map(|(id, m)| (id.as_str(), m)).collect();
    let swapped = swap_in(v, (new_tree, copies), added, &consent, options);
    v.joining(&newcomers, swapped).await?;
    v.set_level(cv.kind_name());
    match copies {
        // The new copies are roles being rebuilt, as after a restart mid-rebuild.
        true => drop(v.ensure_rebuild(v.rebuild_rate())),
        false => super::reshape::start_reshape_pass(v),
    }
    Ok(json!({
        "volume": v.name, "plan": plan, "started": true,
        "reshape": super::reshape::reshape_json(v, &v.array()),
    }))
}

/// Steps 4 to 6 (see the module): on a refusal before the records change, the volume
/// serves on as it was.
async fn swap_in(
    v: &ControlVolume,
    (new_tree, copies): (nbraid_layout::Node, bool),
    added: Vec<Arc<MemberMeta>>,
    consent: &Consent,
    options: nbraid_core::metadata::ArrayOptions,
) -> Result<(), Refusal> {
    let mut quiet = v.served.quiet().await;
    let old = v.array();
    let clean = old.mark_clean().await.map_err(refused)?;
    if !clean.is_recorded() {
        return Err(Refusal::new(
            "busy",
            format!(
                "volume \"{}\": not recorded clean ({clean}); try again",
                v.name
            ),
        ));
    }
    let mut members = super::super::served::members_by_role(&old);
    members.extend(added.iter().cloned().map(Some));
    let started = match copies {
        true => old.add_copies(new_tree, added, consent).await,
        false => old.start_reshape(new_tree, added, consent).await,
    };
    started.map_err(refused)?;
    let spares = old.spares();
    drop(old);
    let new = (v.served.reopen(&mut quiet, &members, Some(options)).await).map_err(refused)?;
    drop(quiet);
    carry_spares(&new, spares);
    let what = match copies {
        true => "copies added online (nbraid apply): rebuilding them while serving",
        false => "reshape started online (nbraid apply): copying into the new shape while serving",
    };
    tracing::warn!("volume {}: {what}", v.name);
    Ok(())
}

/// Per config position of `cv`, the live role of the member there (by file; `None`: a
/// member the config adds). Members in memory or on other hosts are refused: their files
/// cannot be matched.
fn roles_of(
    config: &Config,
    cv: &nbraid_config::Volume,
    array: &Array,
) -> Result<Vec<Option<usize>>, Refusal> {
    let vol = array.volume();
    let mut roles = Vec::with_capacity(cv.members.len());
    for &m in &cv.members {
        let member = &config.members[m];
        if matches!(member.state, MemberStorage::Memory | MemberStorage::Remote) {
            return Err(Refusal::new(
                "unsupported",
                format!(
                    "member {} ({}) is not a file or device: reshape with nbraidd stopped",
                    member.id, member.path_text
                ),
            ));
        }
        let here = std::fs::metadata(&member.path).ok();
        let role = (0..vol.member_count()).find(|&r| {
            here.as_ref()
                .is_some_and(|h| super::members::same_file(vol.member(r).name(), h))
        });
        roles.push(role);
    }
    Ok(roles)
}

/// The members the config now gives more bytes (files or devices grown since they were
/// opened, for a volume growing in place) take their config sizes; refused, naming the
/// member, where the file or device does not hold them.
fn grow_members(
    config: &Config,
    cv: &nbraid_config::Volume,
    roles: &[Option<usize>],
    array: &Array,
) -> Result<(), Refusal> {
    let vol = array.volume();
    for (&m, role) in cv.members.iter().zip(roles) {
        let (Some(r), member) = (*role, &config.members[m]) else {
            continue;
        };
        if member.size > vol.member(r).len() {
            vol.member(r).grow_to(member.size).map_err(|why| {
                Refusal::new(
                    "bad-request",
                    format!(
                        "member {}: the config gives it {} bytes: {why}",
                        member.id, member.size
                    ),
                )
            })?;
        }
    }
    Ok(())
}

/// Why volume `name` cannot take another reshape while one runs (`position_bytes` of
/// `total_bytes` moved), and what to do.
fn running_text(name: &str, position_bytes: u64, total_bytes: u64) -> String {
    let pct = position_bytes as f64 * 100.0 / total_bytes.max(1) as f64;
    format!(
        "volume \"{name}\": a reshape is already running ({pct:.0}%: {} of {} in the new \
         shape); a volume takes one reshape at a time — wait until `nbraid status {name}` shows \
         it done, then apply the next shape",
        nbraid_config::format_size(position_bytes),
        nbraid_config::format_size(total_bytes)
    )
}

/// Why a reshape cannot start now (`None`: it can).
fn busy(controls: &Controls, v: &ControlVolume, array: &Array) -> Option<String> {
    let vol = array.volume();
    if array.reshape_progress().is_some() {
        return Some("a reshape is already running (nbraid status shows it)".into());
    }
    // Idle: started, its task not running yet.
    let ended = |s: ScrubState| {
        matches!(
            s,
            ScrubState::Done | ScrubState::Cancelled | ScrubState::Failed
        )
    };
    if (v.scrub()).is_some_and(|c| !ended(c.state())) {
        let name = &v.name;
        return Some(format!(
            "a scrub is running: let it finish or cancel it first (nbraid cancel {name})"
        ));
    }
    if v.rebuild_running() || !array.rebuilding().is_empty() {
        return Some("a rebuild is running: let it finish first".into());
    }
    if array.background_pending() || !array.returning().is_empty() {
        return Some("a resync is running: let it finish first".into());
    }
    // The pass walks the regions of the shape it started on (paused or stopped by an error,
    // it resumes at the next start): a reshape would move them under it.
    let fill = v.checksum_fill.latest();
    if fill.is_some_and(|c| c.report().state != nbraid_core::PassState::Done) {
        return Some("its checksum pass (checksums = \"enable\") has not finished: let it finish first (nbraid status shows checksum_fill)".into());
    }
    if v.checksum_refill.task_alive() {
        return Some("the per-block checksums an unclean start dropped are being computed again: let that finish first (nbraid status shows checksum_refill)".into());
    }
    let ids = v.member_ids();
    let out: Vec<&str> = (0..vol.member_count())
        .filter(|&r| !vol.member_is_current(r) || !array.has_member(r))
        .map(|r| ids[r].as_str())
        .collect();
    if !out.is_empty() {
        let name = &v.name;
        return Some(format!(
            "member(s) {} not current: a reshape starts with every member in place — let a rebuild make them current first (a failed member with no spare: nbraid add {name} <spare>, or nbraid remove {name} <member> then nbraid add {name} <member>, or nbraid replace)",
            out.join(", ")
        ));
    }
    let shared = controls
        .volumes
        .iter()
        .filter(|o| o.name != v.name)
        .find(|o| {
            let other = o.array();
            let ov = other.volume();
            (0..vol.member_count())
                .any(|r| (0..ov.member_count()).any(|k| Arc::ptr_eq(&vol.member(r), &ov.member(k))))
        });
    shared.map(|o| {
        format!(
            "its members are shared with volume \"{}\" (Matrix): reshape it with nbraidd stopped",
            o.name
        )
    })
}

/// The members the config adds (positions without a role), opened: a missing file is
/// created sparse at its config size; one this daemon uses elsewhere is refused.
async fn open_added(
    controls: &Controls,
    v: &ControlVolume,
    config: &Config,
    cv: &nbraid_config::Volume,
    roles: &[Option<usize>],
) -> Result<Vec<Arc<MemberMeta>>, Refusal> {
    let mut added = Vec::new();
    for (&m, role) in cv.members.iter().zip(roles) {
        if role.is_some() {
            continue;
        }
        let member = &config.members[m];
        let path = member.path.to_string_lossy().to_string();
        match already_open(controls, &v.name, &path)? {
            // Opened afresh, as `add` does (`members.rs`).
            Offered::Departed(m) => super::members::let_go_departed(controls, &m),
            Offered::New => {}
            Offered::Shared(_, other) => {
                return Err(Refusal::new(
                    "in-use",
                    format!(
                        "member {} (`{path}`) is {other}: reshape with nbraidd stopped",
                        member.id
                    ),
                ))
            }
        }
        let open: Arc<dyn Member> = Arc::new(
            UringFile::open_or_create(&member.path, member.size).map_err(|e| {
                Refusal::new(
                    "bad-request",
                    format!("member {} (`{path}`): {e}", member.id),
                )
            })?,
        );
        added.push(MemberMeta::load(open).await);
    }
    Ok(added)
}

/// Member ids by role after the reshape: the live roles' ids, then the config ids of the
/// members the config adds, in config order.
fn ids_by_role(
    v: &ControlVolume,
    config: &Config,
    cv: &nbraid_config::Volume,
    roles: &[Option<usize>],
) -> Vec<String> {
    let mut ids = v.member_ids();
    for (&m, role) in cv.members.iter().zip(roles) {
        if role.is_none() {
            ids.push(config.members[m].id.clone());
        }
    }
    ids
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_reshape_asked_while_one_runs_says_how_far_it_is_and_what_to_do() {
        assert_eq!(
            super::running_text("db", 7 << 20, 28 << 20),
            "volume \"db\": a reshape is already running (25%: 7 MiB of 28 MiB in the new \
             shape); a volume takes one reshape at a time — wait until `nbraid status db` \
             shows it done, then apply the next shape"
        );
    }
}
