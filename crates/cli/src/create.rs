//! `nbraid create --config FILE [--volume NAME] [--assume-clean] [--force] [--json]`: creates a config's
//! arrays — the member files that may be created (sparse), then every selected volume's
//! superblocks, syncing copies and parity from the members' data unless the members are known
//! zero (files just created) or `--assume-clean` says to trust them. Volumes that already
//! carry superblocks are left alone. Members are held exclusively while it runs (a daemon
//! serving them refuses it), and the daemon's own rules decide ([`nbraid_assembly::plan`]):
//! members of another array or with non-zero bytes where the superblock goes are refused,
//! never overwritten — unless `--force`, the operator's word as for `nbraid add --force`:
//! then they are written over, and another array's records are taken off first.

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use nbraid_assembly::plan::Plan;
use nbraid_assembly::{assemble, Opened};
use nbraid_config::{Config, CreatePolicy, MemberStorage};
use serde_json::{json, Value};
use std::path::Path;
use std::time::Instant;

/// What happened to one volume.
struct Outcome {
    name: String,
    /// "created", "exists" or "memory".
    state: &'static str,
    array: Option<String>,
    synced_bytes: u64,
    assume_clean: bool,
    seconds: f64,
}

/// What the operator asked of `nbraid create`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Asked {
    /// Trust the members to agree: no sync.
    pub assume_clean: bool,
    /// Write over members the disk write rule refuses (`--force`).
    pub force: bool,
    pub json: bool,
}

pub fn run(file: &Path, volume: Option<&str>, asked: Asked) -> Result<String> {
    let config = nbraid_assembly::pins::load(file)?;
    let selected: Vec<usize> = match volume {
        None => (0..config.volumes.len()).collect(),
        Some(name) => vec![config
            .volumes
            .iter()
            .position(|v| v.name == name)
            .with_context(|| {
                let names: Vec<_> = config.volumes.iter().map(|v| v.name.as_str()).collect();
                format!(
                    "{}: no volume `{name}` (volumes: {})",
                    file.display(),
                    names.join(", ")
                )
            })?],
    };
    futures::executor::block_on(create(&config, &selected, asked))
}

async fn create(config: &Config, selected: &[usize], asked: Asked) -> Result<String> {
    let mut opened = assemble::open_members(config).await?;
    // `nbraid create` is the operator's consent: `create = "never"` does not stop it. Only
    // the selected volumes are forced: the others are planned as a start would.
    let forced = assemble::plans(config, &opened, Some(CreatePolicy::Auto), asked.force);
    let unforced = assemble::plans(config, &opened, Some(CreatePolicy::Auto), false);
    let plans = chosen_plans(forced, unforced, selected)?;
    if asked.force {
        take_off_forced_records(config, &opened, &plans, selected).await?;
    }
    let files = assemble::create_members(config, &mut opened, &plans).await?;
    let mut outcomes = Vec::new();
    for &k in selected {
        outcomes.push(outcome(config, k, &opened, plans[k], asked).await?);
    }
    match asked.json {
        true => json_report(&files, &outcomes),
        false => Ok(text(config, &files, &outcomes)),
    }
}

/// Each volume's plan: the forced one for the `selected` volumes (whose plan must succeed),
/// the unforced one for the others (`None` when it fails: they are not created).
fn chosen_plans<P, E>(
    forced: Vec<Result<P, E>>,
    unforced: Vec<Result<P, E>>,
    selected: &[usize],
) -> Result<Vec<Option<P>>, E> {
    (forced.into_iter().zip(unforced).enumerate())
        .map(|(k, (f, u))| match selected.contains(&k) {
            true => f.map(Some),
            false => Ok(u.ok()),
        })
        .collect()
}

/// Another array's records come off a forced member of a selected volume to be created
/// before anything is written on it; what was taken off is said.
async fn take_off_forced_records(
    config: &Config,
    opened: &[Opened],
    plans: &[Option<Plan>],
    selected: &[usize],
) -> Result<()> {
    let mut said = Vec::new();
    for &k in selected {
        if matches!(plans[k], Some(Plan::Create { .. })) {
            let volume = &config.volumes[k];
            said.extend(assemble::take_off_forced_records(config, opened, volume).await?);
        }
    }
    for s in &said {
        eprintln!("nbraid: {s}");
    }
    Ok(())
}

/// What `nbraid create` does with selected volume `k`, planned `plan`: nothing for one in
/// memory or one that exists, else its superblocks written ([`create_volume`]).
async fn outcome(
    config: &Config,
    k: usize,
    opened: &[Opened],
    plan: Option<Plan>,
    asked: Asked,
) -> Result<Outcome> {
    let v = &config.volumes[k];
    let in_memory = (v.members.iter()).any(|&m| config.members[m].state == MemberStorage::Memory);
    let left = |state, array, assume_clean| Outcome {
        name: v.name.clone(),
        state,
        array,
        synced_bytes: 0,
        assume_clean,
        seconds: 0.0,
    };
    Ok(match plan {
        _ if in_memory => left("memory", None, true),
        Some(Plan::Open) => left("exists", array_of(opened, v), false),
        Some(Plan::Create { assume_clean: zero }) => {
            let assume_clean = asked.assume_clean || zero;
            create_volume(config, k, opened, assume_clean, asked.json).await?
        }
        None => bail!("volume {} cannot be planned", v.name),
    })
}

/// The `--json` report: the member files created and every selected volume's outcome.
fn json_report(files: &[std::path::PathBuf], outcomes: &[Outcome]) -> Result<String> {
    let volumes: Vec<Value> = (outcomes.iter())
        .map(|o| {
            json!({
                "name": o.name,
                "state": o.state,
                "array": o.array,
                "synced_bytes": o.synced_bytes,
                "assume_clean": o.assume_clean,
                "seconds": o.seconds,
            })
        })
        .collect();
    let files: Vec<String> = files.iter().map(|p| p.display().to_string()).collect();
    let report = json!({ "files_created": files, "volumes": volumes });
    Ok(format!("{}\n", serde_json::to_string_pretty(&report)?))
}

fn array_of(opened: &[Opened], v: &nbraid_config::Volume) -> Option<String> {
    v.members
        .iter()
        .find_map(|&m| opened[m].array_of(&v.name))
        .map(|u| u.to_string())
}

/// Writes volume `k`'s superblocks, syncing first unless `assume_clean`, with a bar.
async fn create_volume(
    config: &Config,
    k: usize,
    opened: &[Opened],
    assume_clean: bool,
    json: bool,
) -> Result<Outcome> {
    let v = &config.volumes[k];
    let pb = (!json && !assume_clean).then(|| {
        let pb = ProgressBar::new(v.capacity());
        pb.set_style(
            ProgressStyle::with_template(
                "{msg} [{bar:40}] {bytes}/{total_bytes} {binary_bytes_per_sec} ETA {eta}",
            )
            .expect("template")
            .progress_chars("=> "),
        );
        pb.set_message(format!("sync {}", v.name));
        pb
    });
    let progress = |done: u64, total: u64| {
        if let Some(pb) = &pb {
            pb.set_length(total);
            pb.set_position(done);
        }
    };
    let start = Instant::now();
    let plan = Plan::Create { assume_clean };
    let a = assemble::start_volume(config, v, plan, opened, &progress).await?;
    if let Some(pb) = pb {
        pb.finish_and_clear();
    }
    Ok(Outcome {
        name: v.name.clone(),
        state: "created",
        array: Some(a.array.id().to_string()),
        synced_bytes: a.report.resynced_bytes,
        assume_clean,
        seconds: start.elapsed().as_secs_f64(),
    })
}

fn text(config: &Config, files: &[std::path::PathBuf], outcomes: &[Outcome]) -> String {
    let mut out = String::new();
    for p in files {
        out += &format!("created {}\n", p.display());
    }
    if files.is_empty() {
        let missing = config
            .members
            .iter()
            .filter(|m| m.state == MemberStorage::Missing)
            .count();
        if missing == 0 {
            out += &format!("all {} members exist\n", config.members.len());
        }
    }
    for o in outcomes {
        let array = o.array.as_deref().unwrap_or("-");
        out += &match o.state {
            "memory" => format!(
                "volume {}: in memory, created at every daemon start\n",
                o.name
            ),
            "exists" => format!("volume {}: exists (array {array}), left alone\n", o.name),
            _ if o.assume_clean => format!(
                "volume {}: created array {array} (members trusted to agree: not synced)\n",
                o.name
            ),
            _ => format!(
                "volume {}: created array {array}, synced {} in {:.1} s\n",
                o.name,
                nbraid_config::format_size(o.synced_bytes),
                o.seconds
            ),
        };
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A selected volume takes its forced plan and fails the create if it fails; the others
    /// take their unforced plan, a failing one only leaving them out.
    #[test]
    fn selected_volumes_are_forced_and_must_plan_the_others_may_not() {
        let forced = || vec![Ok(10), Err("f1"), Ok(12)];
        let unforced = || vec![Ok(0), Err("u1"), Err("u2")];
        assert_eq!(
            chosen_plans(forced(), unforced(), &[0]),
            Ok(vec![Some(10), None, None])
        );
        assert_eq!(
            chosen_plans(forced(), unforced(), &[2]),
            Ok(vec![Some(0), None, Some(12)])
        );
        assert_eq!(chosen_plans(forced(), unforced(), &[0, 1]), Err("f1"));
    }
}
