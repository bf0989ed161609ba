//! Operating a running daemon through its control socket: `status`, `fail`, `scrub`, `add`,
//! `remove`, `replace`, `rebuild`, `pause`, `resume`. The socket is found from the config
//! (`--config FILE`: its `[daemon] control`, default the config's path with `.ctl`) or named
//! outright (`--control PATH`).
//!
//! One module per command family, over one connection type:
//! - `client`: the connection; requests are `nbraid_control::Request`s, the protocol the
//!   daemon parses, so the two cannot drift apart.
//! - `status`: `status` and its table.
//! - `members`: `fail`, `add`, `remove`, `replace` — who serves the volume.
//! - `passes`: `scrub`, `rebuild`, `pause`, `resume` — background passes over it.
//! - `text`: sizes and counts as every command prints them.

mod client;
mod findings;
mod members;
mod offline_status;
mod pass_lines;
mod passes;
mod status;
mod text;

use anyhow::Result;
use clap::Subcommand;
use client::Refused;
pub(crate) use client::{Client, Target};
use nbraid_assembly::error_text::error_text;
use nbraid_core::PassRate;
pub use offline_status::NotServing;
use serde_json::json;
use std::fmt;

#[derive(Subcommand)]
pub enum OpsCommand {
    /// Show every volume and member of a running daemon: state, scrub progress, I/O, cache.
    /// With --config and no daemon running on it: what the members' superblocks say (each
    /// volume's state, who holds each role and who is out), and exit 1.
    Status {
        /// Only this volume.
        volume: Option<String>,
        #[command(flatten)]
        target: Target,
        /// Print the daemon's JSON.
        #[arg(long)]
        json: bool,
        /// Redraw every second until interrupted.
        #[arg(long)]
        watch: bool,
    },
    /// Mark a member failed (mdadm --fail): it is never read or written again. Refused when
    /// some data would be left without a readable copy (the last half of a mirror, a third
    /// member of a RAID 6), unless --force.
    Fail {
        volume: String,
        /// The member's config id (or its index in the volume).
        member: String,
        /// Fail it even if the volume loses data (it stops serving what has no copy left).
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        target: Target,
    },
    /// Check every stripe and copy of a volume; with --repair, rewrite what redundancy proves
    /// wrong. Shows progress until it is done (interrupting it leaves the scrub running).
    Scrub {
        volume: String,
        #[command(flatten)]
        target: Target,
        /// Rewrite what the redundancy proves wrong: a block whose checksum does not match is
        /// rebuilt from the others on every level; without a checksum to say, RAID 6 locates a
        /// single bad chunk, RAID 5 and two-way mirrors can only rewrite parity / copy the
        /// first copy. The report lists per member the blocks found bad and what was done.
        #[arg(long)]
        repair: bool,
        /// Limit the scrub to a rate (200MB/s, 100MiB/s: a unit is needed), or `adaptive`: full speed while
        /// clients are idle, yielding while they do I/O; unlimited by default.
        #[arg(long, value_name = "RATE|adaptive", value_parser = passes::parse_rate)]
        rate: Option<PassRate>,
        /// Follow the volume's running scrub instead of starting one.
        #[arg(long, conflicts_with_all = ["repair", "rate"])]
        follow: bool,
        /// Print the final report as JSON instead of a progress bar.
        #[arg(long)]
        json: bool,
    },
    /// Add a hot spare (an existing member file, at least as large as the members); a failed
    /// member's place takes it at once and is rebuilt in the background. Only a blank disk
    /// (first MiB zero) or one of this volume's own members is taken: data (a file system,
    /// non-zero bytes) or another array's records are refused unless --force.
    Add {
        volume: String,
        /// The spare's file or block device.
        path: String,
        /// Write onto it although it holds data or another array's records.
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        target: Target,
    },
    /// Take a failed member out of the volume, or a spare out of its spares (mdadm --remove).
    /// An active member is refused: fail it first. With --offline (no daemon serving the
    /// volume): forget a path the superblocks record (a member added at run time).
    Remove {
        volume: String,
        /// A failed member's config id (or index), or a spare's id or path.
        member: String,
        /// No daemon runs: take the path out of the superblocks' added paths (--config).
        #[arg(long, requires = "config")]
        offline: bool,
        #[command(flatten)]
        target: Target,
        /// Print the daemon's reply as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Rebuild a member onto PATH while it keeps serving, then swap them (redundancy never
    /// drops; md's want_replacement). PATH is taken by the same rule as `add`'s.
    Replace {
        volume: String,
        /// The member's config id (or its index in the volume).
        member: String,
        /// The replacement's file or block device.
        path: String,
        /// Write onto it although it holds data or another array's records.
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        target: Target,
    },
    /// Rebuild what the volume is rebuilding or replacing (spares go into failed places
    /// first) and follow it with a progress bar; a running rebuild only changes its rate, and
    /// without --rate not even that (follow it from another terminal). A rebuild started
    /// without --rate runs at the volume's `rebuild_rate`.
    Rebuild {
        volume: String,
        #[command(flatten)]
        target: Target,
        /// Limit the rebuild to a rate (200MB/s, 100MiB/s: a unit is needed), or `adaptive`: full speed while
        /// clients are idle, yielding while they do I/O; by default a running rebuild keeps
        /// its rate and a new one runs at the volume's `rebuild_rate`.
        #[arg(long, value_name = "RATE|adaptive", value_parser = passes::parse_rate)]
        rate: Option<PassRate>,
        /// Print the final report as JSON instead of a progress bar.
        #[arg(long)]
        json: bool,
    },
    /// Stop a volume's scrub (md's `idle`): it ends after the window in flight and is not
    /// resumed by a restart. A re-add resync cancelled this way runs again at `nbraid resume`.
    Cancel {
        volume: String,
        #[command(flatten)]
        target: Target,
        /// Print the reply as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Pause background work (scrubs, rebuilds) of one volume or all.
    Pause {
        volume: Option<String>,
        #[command(flatten)]
        target: Target,
    },
    /// Resume paused background work.
    Resume {
        volume: Option<String>,
        #[command(flatten)]
        target: Target,
    },
}

/// A command that asked for `--json` failed: `.0` is the error object to print on stdout,
/// `{"error": {"code": ..., "message": ...}}` (the daemon's refusal code, or `"error"` for one
/// the CLI met itself); the message still goes to stderr as for everyone else.
#[derive(Debug)]
pub struct JsonFailure(pub String, String);

impl fmt::Display for JsonFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.1)
    }
}

impl std::error::Error for JsonFailure {}

impl JsonFailure {
    fn of(e: &anyhow::Error) -> JsonFailure {
        let message = error_text(e.as_ref());
        let code = e
            .downcast_ref::<Refused>()
            .map_or_else(|| "error".to_string(), |r| r.0.code.clone());
        let object = json!({"error": {"code": code, "message": message}});
        let out = serde_json::to_string_pretty(&object).unwrap_or_default() + "\n";
        JsonFailure(out, message)
    }
}

impl OpsCommand {
    /// The caller asked for JSON.
    fn wants_json(&self) -> bool {
        match self {
            OpsCommand::Status { json, .. }
            | OpsCommand::Scrub { json, .. }
            | OpsCommand::Remove { json, .. }
            | OpsCommand::Rebuild { json, .. }
            | OpsCommand::Cancel { json, .. } => *json,
            OpsCommand::Fail { .. }
            | OpsCommand::Add { .. }
            | OpsCommand::Replace { .. }
            | OpsCommand::Pause { .. }
            | OpsCommand::Resume { .. } => false,
        }
    }
}

/// Carries out `cmd`; what to print, or why not (for `--json`, a [`JsonFailure`]).
pub fn run(cmd: OpsCommand) -> Result<String> {
    let json = cmd.wants_json();
    carry_out(cmd).map_err(|e| match json && !e.is::<NotServing>() {
        true => JsonFailure::of(&e).into(),
        false => e,
    })
}

fn carry_out(cmd: OpsCommand) -> Result<String> {
    match cmd {
        OpsCommand::Status {
            volume,
            target,
            json,
            watch,
        } => status::run(&target, volume, json, watch),
        OpsCommand::Fail {
            volume,
            member,
            force,
            target,
        } => members::fail(&target, volume, member, force),
        OpsCommand::Scrub {
            volume,
            target,
            repair,
            rate,
            follow,
            json,
        } => {
            // Following: nothing is started, the running scrub is only watched.
            let start = (!follow).then_some((repair, rate));
            passes::scrub(&target, volume, start, json)
        }
        OpsCommand::Add {
            volume,
            path,
            force,
            target,
        } => members::add(&target, volume, &path, force),
        OpsCommand::Remove {
            volume,
            member,
            offline,
            target,
            json,
        } => members::remove(&target, volume, member, offline, json),
        OpsCommand::Replace {
            volume,
            member,
            path,
            force,
            target,
        } => members::replace(&target, volume, member, &path, force),
        OpsCommand::Rebuild {
            volume,
            target,
            rate,
            json,
        } => passes::rebuild(&target, volume, rate, json),
        OpsCommand::Cancel {
            volume,
            target,
            json,
        } => passes::cancel(&target, volume, json),
        OpsCommand::Pause { volume, target } => passes::pause_resume(&target, "pause", volume),
        OpsCommand::Resume { volume, target } => passes::pause_resume(&target, "resume", volume),
    }
}
