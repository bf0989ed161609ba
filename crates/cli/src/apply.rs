//! `nbraid apply CONFIG`: the config is the shape the arrays should have; apply compares it with
//! what the running daemon's arrays record and prints the plan, per volume, the way `terraform
//! plan` does — what changes, how much data moves, how long it takes at the volume's rate, the
//! redundancy during the move — or why a change is not done online. The decision is
//! `nbraid_assembly::reshape_plan`'s, then the reshape's start's own over the superblocks
//! ([`crate::as_started`]: a backup with no room refuses the move, a log with no room is said); the
//! records are read as `nbraid check` reads them (plain reads of the superblock slots, which
//! the daemon keeps current; nothing is written). `--yes` fails on a refused move.
//!
//! `--yes` against a running daemon asks it to start each planned move **online** (the control
//! socket's `reshape`, [`start_online`]): the daemon checks the plan against its live array by
//! the same rules, writes the records that start it, opens the volume again over the old and
//! added members and copies on while serving (new copies of a RAID 1 are rebuilt). With no
//! daemon running ([`start_offline`]) it writes the records itself (`Array::start_reshape`,
//! `Array::add_copies`), and the daemon's next start goes on in the background while serving.

use crate::ops::{Client, Target};
use anyhow::{bail, Context, Result};
use nbraid_assembly::reshape_plan;
use nbraid_assembly::reshape_plan::{outline, Action, Change, Move, MoveKind, VolumePlan};
use nbraid_assembly::settings::{self, SettingChange};
use nbraid_config::format_size;
use nbraid_control::Request;
use nbraid_core::metadata::disk_rule::{Consent, DiskContents};
use nbraid_core::metadata::{Array, ArrayOptions, MemberMeta, Probe, ScrubCheckpoint};
use serde_json::{json, Value};
use std::fmt;
use std::path::Path;
use std::sync::Arc;

/// The plan printed, and a move `--yes` asked for not started: `.0` is the output, `.1`
/// why (the daemon's refusal).
#[derive(Debug)]
pub struct NotStarted(pub String, pub String);

impl fmt::Display for NotStarted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.1)
    }
}

impl std::error::Error for NotStarted {}

pub fn run(file: &Path, yes: bool, force: bool, json: bool) -> Result<String> {
    let config = nbraid_assembly::pins::load(file)?;
    let connected = Client::connect(&Target {
        config: Some(file.to_path_buf()),
        control: None,
    });
    let mut daemon = match connected {
        Ok(d) => d,
        Err(_) if yes => return start_offline(&config, force, json),
        Err(e) => return Err(e),
    };
    let status = daemon.call(&Request::Status { volume: None })?;
    let plans = served_plans(&config, &status);
    let settings: Vec<Vec<SettingChange>> = (config.volumes.iter())
        .map(|v| setting_changes(v, Some(&status)))
        .collect();
    let moves = plans
        .iter()
        .any(|(p, _)| matches!(p.action, Action::Online(_)));
    let started = match yes && moves {
        true => start_online(&mut daemon, file, &plans, force),
        false => Ok(Vec::new()),
    };
    let report = OnlineReport {
        plans: &plans,
        settings: &settings,
        started: started.as_ref().map_or(&[][..], |s| &s[..]),
    };
    let out = match json {
        true => report.json()?,
        false => report.text(&status, (moves && !yes).then_some(file)),
    };
    online_outcome(out, started, yes, &plans)
}

/// Every volume's plan ([`volume_plans`]) timed at the daemon's rate ([`at_daemon_rate`]),
/// with whether the daemon serves the volume.
fn served_plans(config: &nbraid_config::Config, status: &Value) -> Vec<(VolumePlan, bool)> {
    let served: Vec<&str> = status["volumes"]
        .as_array()
        .map(|vs| vs.iter().filter_map(|v| v["name"].as_str()).collect())
        .unwrap_or_default();
    let records = crate::records::look(config);
    (volume_plans(config, &records).into_iter())
        .map(|mut p| {
            let served = served.contains(&p.volume.as_str());
            at_daemon_rate(&mut p, status);
            (p, served)
        })
        .collect()
}

/// What `apply` prints against a running daemon: per volume, its plan, the settings its
/// config changes, whether the daemon serves it, whether its move was started.
struct OnlineReport<'a> {
    /// Each volume's plan, with whether the daemon serves the volume.
    plans: &'a [(VolumePlan, bool)],
    /// By volume, as `plans`.
    settings: &'a [Vec<SettingChange>],
    /// The volumes whose moves `--yes` started.
    started: &'a [String],
}

impl OnlineReport<'_> {
    fn json(&self) -> Result<String> {
        let volumes: Vec<_> = (self.plans.iter().zip(self.settings))
            .map(|((p, served), settings)| {
                let mut v = plan_json(p, settings);
                v["served"] = json!(served);
                v
            })
            .collect();
        let started = self.started;
        Ok(format!(
            "{}\n",
            serde_json::to_string_pretty(
                &json!({ "volumes": volumes, "started": !started.is_empty(), "started_volumes": started })
            )?
        ))
    }

    /// For people, each volume's reshape under way as the daemon's `status` shows it;
    /// `hint`: the config file, where moves are planned and not asked for (`--yes`).
    fn text(&self, status: &Value, hint: Option<&Path>) -> String {
        let mut out = String::new();
        for ((p, served), settings) in self.plans.iter().zip(self.settings) {
            out.push_str(&self.volume_text(p, *served, settings, status));
        }
        if let Some(file) = hint {
            out.push_str(&format!(
                "\n`nbraid apply {} --yes` starts the moves above, online while the volumes serve\n",
                file.display()
            ));
        }
        out
    }

    fn volume_text(
        &self,
        p: &VolumePlan,
        served: bool,
        settings: &[SettingChange],
        status: &Value,
    ) -> String {
        let mut out = plan_text(p);
        out.push_str(&settings_text(settings));
        if let Some(what) = reshape_in_words(&p.action) {
            out.push_str(&reshape_note(status, &p.volume, what));
        }
        if !served {
            out.push_str("  note: the daemon does not serve this volume\n");
        }
        if self.started.contains(&p.volume) {
            out.push_str(
                "  started online: copying into the new shape while serving (`nbraid status` shows it)\n",
            );
        }
        out
    }
}

/// How the note on a reshape still under way ([`reshape_note`]) names it, by the plan's
/// action: the reshape into the config's shape where the config leaves the volume as it is,
/// the daemon's where the plan is refused; no note beside a move of its own.
fn reshape_in_words(action: &Action) -> Option<&'static str> {
    match action {
        Action::Unchanged => Some("the reshape into this shape"),
        Action::Refused { .. } => Some("the daemon's reshape of it"),
        Action::Online(_) => None,
    }
}

/// What `apply` against a running daemon ends with, its output `out` printed either way:
/// the daemon's refusal of a move `--yes` asked for, else (with `--yes`) the plans refused,
/// else success.
fn online_outcome(
    out: String,
    started: Result<Vec<String>>,
    yes: bool,
    plans: &[(VolumePlan, bool)],
) -> Result<String> {
    match started {
        Err(why) => Err(NotStarted(out, format!("{why:#}")).into()),
        Ok(_) if yes => match refusals(plans.iter().map(|(p, _)| p)) {
            Some(why) => Err(NotStarted(out, why).into()),
            None => Ok(out),
        },
        Ok(_) => Ok(out),
    }
}

/// Every volume's plan by its records (`records::look`): the move into the config's shape,
/// unchanged, or refused where its records do not assemble.
fn volume_plans(
    config: &nbraid_config::Config,
    records: &[crate::records::Records],
) -> Vec<VolumePlan> {
    (config.volumes.iter().zip(records))
        .map(|(v, r)| {
            r.reshape.clone().unwrap_or_else(|| {
                let now = outline(v.geometry.root());
                VolumePlan {
                    volume: v.name.clone(),
                    from: now.clone(),
                    to: now,
                    changes: Vec::new(),
                    action: if r.state.starts_with("refused") {
                        // The state says "refused: why"; the plan prints "refused: ".
                        let why = r.state.strip_prefix("refused: ").unwrap_or(&r.state);
                        Action::Refused {
                            reason: why.to_string(),
                        }
                    } else {
                        Action::Unchanged
                    },
                    unlogged_parity_groups: Vec::new(),
                    write_hole_note: None,
                }
            })
        })
        .collect()
}

/// The daemon's status entry of volume `name`, if it serves it.
fn served_status<'a>(status: &'a Value, name: &str) -> Option<&'a Value> {
    (status["volumes"].as_array()?.iter()).find(|v| v["name"] == name)
}

/// A move of plan `p` timed at the rate the daemon runs volume `p.volume`'s passes at (its
/// status' `rebuild_rate`), not the config's: a reload or `nbraid rebuild --rate` may have set
/// it apart, and the daemon starts the reshape's pass at its own. Unchanged when the daemon
/// does not serve the volume.
fn at_daemon_rate(p: &mut VolumePlan, status: &Value) {
    let Action::Online(m) = &mut p.action else {
        return;
    };
    let Some(rate) = served_status(status, &p.volume).map(|v| &v["rebuild_rate"]) else {
        return;
    };
    if let Some(limit) = rate["limit_bytes_per_s"].as_u64() {
        m.at_rate(limit);
    }
    m.adaptive = rate["adaptive"].as_bool().unwrap_or(false);
}

/// The settings volume `v`'s config changes that are not taken as written
/// (`nbraid_assembly::settings`): against its records, and against the running daemon's
/// (`status`) where one serves it.
fn setting_changes(v: &nbraid_config::Volume, status: Option<&Value>) -> Vec<SettingChange> {
    let mut out = settings::fixed_at_create(v);
    let logged = status
        .and_then(|s| served_status(s, &v.name))
        .and_then(|s| s["metadata"]["write_hole_logged"].as_bool());
    if let Some(logged) = logged {
        out.extend(settings::against_daemon(v, logged));
    }
    out
}

/// A volume's plan as `--json` gives it, with its `settings`.
fn plan_json(p: &VolumePlan, settings: &[SettingChange]) -> Value {
    let mut v = serde_json::to_value(p).expect("a plan serializes");
    v["settings"] = json!(settings);
    v
}

/// The setting lines under a volume's plan.
fn settings_text(settings: &[SettingChange]) -> String {
    settings
        .iter()
        .map(|c| format!("  setting: {}\n", c.text()))
        .collect()
}

/// For `--yes`: the volumes whose plans are refused, with why, in one line (`None`: none) —
/// the command fails as when the daemon refuses a move, not quietly leave them as they were.
fn refusals<'a>(plans: impl Iterator<Item = &'a VolumePlan>) -> Option<String> {
    let refused: Vec<String> = plans
        .filter_map(|p| match &p.action {
            Action::Refused { reason } => {
                Some(format!("volume {}: not started: {reason}", p.volume))
            }
            _ => None,
        })
        .collect();
    (!refused.is_empty()).then(|| refused.join("; "))
}

/// `--yes` with the daemon running: asks it to start each planned move online, in config
/// order; the volumes started, or the first refusal (the moves before it are started).
fn start_online(
    daemon: &mut Client,
    file: &Path,
    plans: &[(VolumePlan, bool)],
    force: bool,
) -> Result<Vec<String>> {
    let config = std::fs::canonicalize(file)
        .with_context(|| format!("finding {}", file.display()))?
        .to_string_lossy()
        .into_owned();
    let mut started = Vec::new();
    for (p, served) in plans {
        if !matches!(p.action, Action::Online(_)) {
            continue;
        }
        if !served {
            bail!("volume {}: the daemon does not serve it", p.volume);
        }
        let req = Request::Reshape {
            volume: p.volume.clone(),
            config: config.clone(),
            force,
        };
        let reply = daemon.call(&req).with_context(|| {
            let before = match started.is_empty() {
                true => String::new(),
                false => format!(" (started: {})", started.join(", ")),
            };
            format!("volume {}: not started{before}", p.volume)
        })?;
        if reply["started"] == json!(true) {
            started.push(p.volume.clone());
        }
    }
    Ok(started)
}

/// `--yes` with no daemon running: for every volume whose plan is a restripe or a grow in place, opens it from
/// its records (every recorded member in place), writes the records that start the reshape
/// into the config's shape, the members the config adds taking the roles after the old ones.
/// The next start of `nbraidd` copies on while serving. A volume whose records name a scrub a
/// restart cut off is not started (see [`ScrubPending`]). With nothing to change it says so
/// (it printed nothing: the operator could not tell "done" from "did nothing").
fn start_offline(config: &nbraid_config::Config, force: bool, json: bool) -> Result<String> {
    let records = crate::records::look(config);
    let plans = volume_plans(config, &records);
    let moves = (plans.iter()).any(|p| matches!(p.action, Action::Online(_)));
    let opened = match moves {
        true => futures::executor::block_on(nbraid_assembly::assemble::open_members(config))
            .context("opening the members (no daemon answers on the control socket)")?,
        false => Vec::new(),
    };
    let mut out = String::new();
    let mut started = Vec::new();
    let settings: Vec<Vec<SettingChange>> = (config.volumes.iter())
        .map(|v| setting_changes(v, None))
        .collect();
    for ((v, plan), settings) in config.volumes.iter().zip(&plans).zip(&settings) {
        out.push_str(&plan_text(plan));
        out.push_str(&settings_text(settings));
        let Action::Online(m) = &plan.action else {
            continue;
        };
        if v.read_only {
            // Starting the move writes its records; nothing writes to a read-only volume.
            let why = format!(
                "volume `{}` has read_only = true: `apply --yes` would write its records, and \
                 nothing is written to a read-only volume's members; take read_only out to \
                 change its shape",
                v.name
            );
            return Err(NotStarted(out, why).into());
        }
        let copies = m.kind == MoveKind::Copy;
        if let Err(e) = start_volume(config, v, &opened, copies, force) {
            return match e.downcast::<ScrubPending>() {
                Ok(pending) => Err(NotStarted(out, pending.to_string()).into()),
                Err(e) => Err(e),
            };
        }
        started.push(v.name.clone());
        out.push_str(match copies {
            true => "  started: the records list the new copies, rebuilding; the next start of nbraidd rebuilds them while serving\n",
            false => "  started: the records say so; the next start of nbraidd copies on while serving\n",
        });
    }
    let nothing = nothing_to_do(&plans);
    if nothing {
        out.push_str("nothing to do: every volume already has the config's shape (no daemon running; nothing was written)\n");
    }
    if json {
        let volumes: Vec<Value> = (plans.iter().zip(&settings))
            .map(|(p, settings)| plan_json(p, settings))
            .collect();
        out = format!(
            "{}\n",
            serde_json::to_string_pretty(&json!({
                "volumes": volumes, "daemon_running": false, "nothing_to_do": nothing,
                "started": !started.is_empty(), "started_volumes": started,
            }))?
        );
    }
    match refusals(plans.iter()) {
        Some(why) => Err(NotStarted(out, why).into()),
        None => Ok(out),
    }
}

/// Every volume already has the config's shape: there is nothing for `apply` to do.
fn nothing_to_do(plans: &[VolumePlan]) -> bool {
    plans.iter().all(|p| p.action == Action::Unchanged)
}

/// The records of a volume name a scrub a restart cut off: the next start of `nbraidd`
/// resumes it where it stopped. The reshape's start would drop it (a scrub walks one shape),
/// so the move is not started offline, as the daemon refuses one while a scrub runs.
#[derive(Debug)]
struct ScrubPending {
    volume: String,
    checkpoint: ScrubCheckpoint,
}

impl fmt::Display for ScrubPending {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.checkpoint.repair {
            true => "scrub --repair",
            false => "scrub",
        };
        write!(
            f,
            "volume {}: not started: its records name a {what} a restart interrupted at {}, which the next start of nbraidd resumes — starting the reshape would drop it; start nbraidd, let the scrub finish (`nbraid scrub {} --follow`), then run `nbraid apply --yes` against it",
            self.volume,
            format_size(self.checkpoint.position_bytes),
            self.volume
        )
    }
}

impl std::error::Error for ScrubPending {}

/// Writes the records that start volume `v`'s move into its config's shape (`copies`: new
/// copies of a RAID 1), from its members in `opened`; [`ScrubPending`] (nothing written)
/// where its records name an unfinished scrub.
fn start_volume(
    config: &nbraid_config::Config,
    v: &nbraid_config::Volume,
    opened: &[nbraid_assembly::Opened],
    copies: bool,
    force: bool,
) -> Result<()> {
    let metas: Vec<Arc<MemberMeta>> = (v.members.iter())
        .map(|&i| opened[i].meta().cloned())
        .collect::<Option<_>>()
        .with_context(|| format!("volume {}: a member did not open", v.name))?;
    let probes: Vec<Probe> = metas.iter().map(|m| m.probe().clone()).collect();
    let (recorded, roles) = reshape_plan::recorded(&v.name, &probes)
        .with_context(|| format!("volume {}: no records", v.name))?;
    let new_tree = reshape_plan::config_by_role(v.geometry.root(), &roles, recorded.member_count());
    let mut by_role = vec![None; recorded.member_count()];
    let mut ids = vec![String::new(); recorded.member_count()];
    let mut added = Vec::new();
    for (p, role) in roles.iter().enumerate() {
        match role {
            Some(r) => {
                by_role[*r] = Some(metas[p].clone());
                ids[*r] = config.members[v.members[p]].id.clone();
            }
            None => added.push(metas[p].clone()),
        }
    }
    let consent = Consent {
        force,
        siblings: siblings(config, v, &added),
    };
    let pending = futures::executor::block_on(async {
        // The config's options, as the daemon opens it: the defaults gave an added member a
        // write-hole log `write_hole = "off"` declines, and named members by position. But
        // `checksums = "enable"` is left to the daemon's start, as an online apply leaves it:
        // enabling here records a checksum pass, and the reshape is refused while one runs.
        let opts = ArrayOptions {
            enable_checksums: false,
            ..nbraid_assembly::assemble::array_options(v, ids, false)
        };
        let (array, _) = Array::open(&v.name, &recorded, by_role, opts, &|_, _| {}).await?;
        // The daemon resumes this scrub at its next start (`resume_scrub`), by the same call.
        if let Some(checkpoint) = array.scrub_checkpoint().await {
            return Ok(Some(checkpoint));
        }
        match copies {
            true => array.add_copies(new_tree, added, &consent).await,
            false => array.start_reshape(new_tree, added, &consent).await,
        }
        .map(|()| None)
    })
    .with_context(|| format!("volume {}: starting the reshape", v.name))?;
    match pending {
        Some(checkpoint) => Err(ScrubPending {
            volume: v.name.clone(),
            checkpoint,
        }
        .into()),
        None => Ok(()),
    }
}

/// The arrays whose records may stay beside this volume's on its added members: the other
/// volumes of the config that use the same member file (Matrix RAID), by the array id their
/// record there carries. Anything else on an added disk is for the write rule to refuse.
fn siblings(
    config: &nbraid_config::Config,
    v: &nbraid_config::Volume,
    added: &[Arc<MemberMeta>],
) -> Vec<nbraid_core::metadata::Uuid> {
    let mut out = Vec::new();
    for meta in added {
        let DiskContents::Records(seen) = meta.contents() else {
            continue;
        };
        for r in seen {
            let sibling = config.volumes.iter().any(|o| {
                o.name == r.volume
                    && o.name != v.name
                    && o.members.iter().any(|m| v.members.contains(m))
            });
            if sibling && !out.contains(&r.array) {
                out.push(r.array);
            }
        }
    }
    out
}

/// For a volume the config leaves as the records have it: the reshape toward that shape
/// still under way (or stopped), as the daemon's `status` shows it — "unchanged" alone read
/// as if nothing were moving; for one refused while a reshape runs, how far it is now
/// (`what`: the reshape, in words).
fn reshape_note(status: &Value, volume: &str, what: &str) -> String {
    let volumes = status["volumes"].as_array().map_or(&[][..], |v| &v[..]);
    let Some(v) = volumes.iter().find(|v| v["name"] == volume) else {
        return String::new();
    };
    let r = &v["reshape"];
    let state = r["state"].as_str().unwrap_or("done");
    if r.is_null() || state == "done" {
        return String::new();
    }
    let total = r["total_bytes"].as_u64().unwrap_or(0).max(1);
    let pct = r["position_bytes"].as_u64().unwrap_or(0) as f64 * 100.0 / total as f64;
    let why = r["error"]
        .as_str()
        .map_or(String::new(), |e| format!(": {e}"));
    format!("  note: {what} is {state} at {pct:.0}%{why} (`nbraid status`)\n")
}

/// One volume's plan for people: a head line, one line per change, then the move or the
/// refusal.
pub fn plan_text(p: &VolumePlan) -> String {
    if p.action == Action::Unchanged {
        return format!("volume {}: unchanged ({})\n", p.volume, p.from.words());
    }
    let mut out = format!(
        "volume {}: {} → {}\n",
        p.volume,
        p.from.words(),
        p.to.words()
    );
    for c in &p.changes {
        out.push_str(&format!("  ~ {}\n", change_text(c)));
    }
    match &p.action {
        Action::Unchanged => {}
        Action::Online(m) => out.push_str(&move_text(m)),
        Action::Refused { reason } => out.push_str(&format!("  refused: {reason}\n")),
    }
    if let Some(note) = &p.write_hole_note {
        out.push_str(&format!("  write hole: {note}\n"));
    }
    out
}

fn change_text(c: &Change) -> String {
    match c {
        Change::Members { from, to } => format!("members {from} → {to}"),
        Change::Level { from, to } => format!("level {from} → {to}"),
        Change::Strip {
            from_bytes,
            to_bytes,
        } => format!(
            "strip {} → {}",
            format_size(*from_bytes),
            format_size(*to_bytes)
        ),
        Change::Size {
            from_bytes,
            to_bytes,
        } => format!(
            "size {} → {}",
            format_size(*from_bytes),
            format_size(*to_bytes)
        ),
    }
}

fn move_text(m: &Move) -> String {
    let what = match m.kind {
        MoveKind::Restripe => "restripe online: every byte copied into the new shape",
        MoveKind::Append => "grow online: the data stays in place, the new space is synced",
        MoveKind::Copy => "new copies rebuilt online",
    };
    let time = match m.seconds_at_rate {
        Some(s) => format!(
            "{} at {}/s",
            duration_text(s),
            format_size(m.rate_bytes_per_s)
        ),
        None if m.adaptive => "at the adaptive rate (rebuild_rate = \"adaptive\"): full speed \
                               while clients are idle, yielding to their I/O"
            .into(),
        None => "at full speed (no rebuild_rate set)".into(),
    };
    let losses = |n: usize| {
        if n == 1 {
            "1 member loss".to_string()
        } else {
            format!("{n} member losses")
        }
    };
    format!(
        "  {what}\n  {} walked, {} written to members, {time}\n  redundancy: survives {} during the move, {} after\n",
        format_size(m.walked_bytes),
        format_size(m.written_bytes),
        losses(m.tolerance_during),
        losses(m.tolerance_after),
    )
}

/// `2 h 05 min`, `3 min 20 s`, `12 s`.
fn duration_text(seconds: u64) -> String {
    match seconds {
        s if s >= 3600 => format!("{} h {:02} min", s / 3600, s % 3600 / 60),
        s if s >= 60 => format!("{} min {:02} s", s / 60, s % 60),
        s => format!("{s} s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nbraid_assembly::reshape_plan::plan;
    use nbraid_layout::{Level, ParityLayout, Region, Shape};

    const INTO: &str = "the reshape into this shape";

    #[test]
    fn an_unchanged_volume_says_the_reshape_still_under_way_or_stopped() {
        let status = |reshape: Value| json!({"volumes": [{"name": "v", "reshape": reshape}]});
        let running = json!({"state": "running", "position_bytes": 41, "total_bytes": 100});
        assert_eq!(
            reshape_note(&status(running), "v", INTO),
            "  note: the reshape into this shape is running at 41% (`nbraid status`)\n"
        );
        let failed = json!({"state": "failed", "position_bytes": 52, "total_bytes": 100,
                            "error": "stripe 7 unreadable"});
        assert!(
            reshape_note(&status(failed), "v", INTO).contains("failed at 52%: stripe 7 unreadable")
        );
        assert_eq!(
            reshape_note(&status(json!({"state": "done"})), "v", INTO),
            ""
        );
        assert_eq!(reshape_note(&status(Value::Null), "v", INTO), "");
        assert_eq!(reshape_note(&status(Value::Null), "w", INTO), "");
    }

    #[test]
    fn the_note_on_a_reshape_under_way_is_named_by_the_plans_action() {
        let online = plan("db", &raid(Level::Raid5, 3), &raid(Level::Raid6, 5), 0);
        assert_eq!(reshape_in_words(&online.action), None);
        assert_eq!(reshape_in_words(&Action::Unchanged), Some(INTO));
        let refused = Action::Refused { reason: "x".into() };
        assert_eq!(
            reshape_in_words(&refused),
            Some("the daemon's reshape of it")
        );
    }

    #[test]
    fn apply_fails_on_the_daemons_refusal_and_with_yes_on_a_refused_plan() {
        let refused = plan("db", &raid(Level::Raid6, 5), &raid(Level::Raid6, 4), 0);
        let online = plan("ok", &raid(Level::Raid5, 3), &raid(Level::Raid6, 5), 0);
        let plans = [(online, true), (refused, true)];
        let not_started = |r: Result<String>| {
            let e = r.unwrap_err().downcast::<NotStarted>().unwrap();
            assert_eq!(e.0, "out", "the output printed either way");
            e.1
        };
        let daemon = Err(anyhow::anyhow!("busy"));
        assert_eq!(
            not_started(online_outcome("out".into(), daemon, true, &plans)),
            "busy"
        );
        let why = not_started(online_outcome("out".into(), Ok(vec![]), true, &plans));
        assert!(why.starts_with("volume db: not started: "), "{why}");
        // Without --yes a refused plan is only printed.
        let out = online_outcome("out".into(), Ok(vec![]), false, &plans).unwrap();
        assert_eq!(out, "out");
        let fine = &plans[..1];
        assert_eq!(
            online_outcome("out".into(), Ok(vec![]), true, fine).unwrap(),
            "out"
        );
    }

    fn raid(level: Level, members: usize) -> nbraid_layout::Node {
        Shape::new(level, members, None, 64 << 10, ParityLayout::default())
            .unwrap()
            .build(&vec![
                Region {
                    start: 1 << 20,
                    len: 64 << 20
                };
                members
            ])
            .unwrap()
    }

    #[test]
    fn a_plan_reads_as_what_changes_and_what_it_costs() {
        let p = plan(
            "db",
            &raid(Level::Raid5, 3),
            &raid(Level::Raid6, 5),
            4 << 20,
        );
        assert_eq!(
            plan_text(&p),
            "volume db: raid5 of 3 members, strip 64 KiB → raid6 of 5 members, strip 64 KiB\n  \
             ~ members 3 → 5\n  ~ level raid5 → raid6\n  ~ size 128 MiB → 192 MiB\n  \
             restripe online: every byte copied into the new shape\n  \
             128 MiB walked, 213.33 MiB written to members, 32 s at 4 MiB/s\n  \
             redundancy: survives 1 member loss during the move, 2 member losses after\n"
        );
        let mut p = plan("db", &raid(Level::Raid5, 3), &raid(Level::Raid6, 5), 0);
        assert!(plan_text(&p).contains(", at full speed (no rebuild_rate set)\n"));
        if let Action::Online(m) = &mut p.action {
            m.adaptive = true;
        }
        assert!(plan_text(&p).contains(", at the adaptive rate (rebuild_rate = \"adaptive\")"));
        let p = plan("db", &raid(Level::Raid6, 5), &raid(Level::Raid6, 4), 0);
        assert!(plan_text(&p).contains("  refused: the config names 4 members"));
        assert_eq!(duration_text(7500), "2 h 05 min");
        assert_eq!(duration_text(200), "3 min 20 s");
    }
}
