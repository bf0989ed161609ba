//! Operating a running daemon through its control socket (see the daemon's `control` module
//! for the protocol): `status`, `fail`, `scrub`, `pause`, `resume`. The socket is found from
//! the config (`--config FILE`: its `[daemon] control`, default the config's path with `.ctl`)
//! or named outright (`--control PATH`).

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use nbraid_core::PassRate;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

/// Where the daemon's control socket is.
#[derive(Args, Clone, Debug)]
pub struct Target {
    /// The daemon's config: its control socket is read from it.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// The control socket itself.
    #[arg(long, value_name = "PATH", conflicts_with = "config")]
    control: Option<PathBuf>,
}

#[derive(Subcommand)]
pub enum OpsCommand {
    /// Show every volume and member of a running daemon: state, scrub progress, I/O, cache.
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
        /// Rewrite what the redundancy proves wrong (RAID 6 locates a single bad chunk; RAID 5
        /// and two-way mirrors can only rewrite parity / copy the first copy).
        #[arg(long)]
        repair: bool,
        /// Limit the scrub to a rate (200MB/s, 100MiB/s: a unit is needed), or `adaptive`: full speed while
        /// clients are idle, yielding while they do I/O; unlimited by default.
        #[arg(long, value_name = "RATE|adaptive", value_parser = parse_rate)]
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
        #[arg(long, value_name = "RATE|adaptive", value_parser = parse_rate)]
        rate: Option<PassRate>,
        /// Print the final report as JSON instead of a progress bar.
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

/// A connection to the control socket.
pub(crate) struct Client {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

impl Client {
    pub(crate) fn connect(t: &Target) -> Result<Client> {
        let path = match (&t.control, &t.config) {
            (Some(p), _) => p.clone(),
            (None, Some(c)) => nbraid_config::load(c)?.control,
            (None, None) => bail!(
                "say where the daemon is: --config FILE (its config) or --control PATH (its control socket)"
            ),
        };
        let s = UnixStream::connect(&path).with_context(|| {
            format!(
                "connecting to the control socket {} (is nbraidd running on this config?)",
                path.display()
            )
        })?;
        Ok(Client {
            reader: BufReader::new(s.try_clone()?),
            writer: s,
        })
    }

    /// The next line the daemon sends unasked (`events` with `follow`); `None` when it
    /// closed the connection.
    pub(crate) fn next_line(&mut self) -> Result<Option<Value>> {
        let mut line = String::new();
        if self.reader.read_line(&mut line)? == 0 {
            return Ok(None);
        }
        Ok(Some(
            serde_json::from_str(&line).context("the daemon's line is not JSON")?,
        ))
    }

    /// Sends a request; the reply, or its error as an error.
    pub(crate) fn call(&mut self, mut req: Value) -> Result<Value> {
        req["v"] = json!(1);
        let mut line = req.to_string();
        line.push('\n');
        self.writer.write_all(line.as_bytes())?;
        let mut reply = String::new();
        if self.reader.read_line(&mut reply)? == 0 {
            bail!("the daemon closed the control connection");
        }
        let v: Value = serde_json::from_str(&reply).context("the daemon's reply is not JSON")?;
        if v["ok"] != json!(true) {
            // The message is for the admin; the protocol's code ("bad-request") is for programs.
            bail!(
                "{}",
                v["error"]["message"].as_str().unwrap_or("unknown error")
            );
        }
        Ok(v)
    }
}

pub fn run(cmd: OpsCommand) -> Result<String> {
    match cmd {
        OpsCommand::Status {
            volume,
            target,
            json,
            watch,
        } => {
            let mut c = Client::connect(&target)?;
            let req = json!({"op": "status", "volume": volume});
            if !watch {
                let v = c.call(req)?;
                return Ok(if json {
                    format!("{v:#}\n")
                } else {
                    status_table(&v)
                });
            }
            loop {
                let v = c.call(req.clone())?;
                let out = if json {
                    format!("{v}\n")
                } else {
                    format!("\x1b[2J\x1b[H{}", status_table(&v))
                };
                print!("{out}");
                std::io::stdout().flush()?;
                std::thread::sleep(Duration::from_secs(1));
            }
        }
        OpsCommand::Fail {
            volume,
            member,
            force,
            target,
        } => {
            let v = Client::connect(&target)?
                .call(json!({"op": "fail", "volume": volume, "member": member, "force": force}))?;
            Ok(format!(
                "member {} of {volume} marked failed; the volume is {}\n",
                v["member"].as_str().unwrap_or(&member),
                if v["available"] == json!(false) {
                    "FAILED (beyond its tolerance)"
                } else {
                    "degraded"
                }
            ))
        }
        OpsCommand::Scrub {
            volume,
            target,
            repair,
            rate,
            follow,
            json,
        } => {
            let mut c = Client::connect(&target)?;
            if !follow {
                let r = rate.unwrap_or_default();
                c.call(json!({"op": "scrub", "volume": volume, "repair": repair,
                              "rate_bytes_per_s": r.limit_bytes_per_s, "adaptive": r.adaptive}))?;
            }
            let report = follow_pass(&mut c, &volume, "scrub", !json)?;
            Ok(if json {
                format!("{report:#}\n")
            } else {
                scrub_summary(&volume, &report)
            })
        }
        OpsCommand::Add {
            volume,
            path,
            force,
            target,
        } => {
            let path = absolute(&path)?;
            let v = Client::connect(&target)?
                .call(json!({"op": "add", "volume": volume, "path": path, "force": force}))?;
            Ok(match v["rebuilding_roles"].as_array() {
                Some(r) if !r.is_empty() => {
                    format!("{path} added to {volume}: rebuilding member {}\n", r[0])
                }
                _ => format!("{path} added to {volume} as a hot spare\n"),
            })
        }
        OpsCommand::Remove {
            volume,
            member,
            offline,
            target,
            json,
        } => {
            if offline {
                let config = target
                    .config
                    .as_deref()
                    .context("--offline needs --config")?;
                return crate::offline::forget_offline(config, &volume, &absolute(&member)?);
            }
            let v = Client::connect(&target)?
                .call(json!({"op": "remove", "volume": volume, "member": member}))?;
            Ok(if json {
                format!("{v:#}\n")
            } else if v["removed"] == "spare" {
                format!("spare {member} removed from {volume}\n")
            } else if v["removed"] == "recorded path" {
                format!("{member} is no longer recorded in {volume}: no start opens it\n")
            } else {
                format!(
                    "member {} (role {}) removed from {volume}; the volume is {}\n",
                    v["member"].as_str().unwrap_or(&member),
                    v["index"],
                    if v["degraded"] == json!(true) {
                        "degraded until a spare takes the role (nbraid add)"
                    } else {
                        "not degraded"
                    }
                )
            })
        }
        OpsCommand::Replace {
            volume,
            member,
            path,
            force,
            target,
        } => {
            let path = absolute(&path)?;
            Client::connect(&target)?.call(json!({"op": "replace", "volume": volume,
                "member": member, "path": path, "force": force}))?;
            Ok(format!(
                "replacing {member} of {volume} by {path}; follow with `nbraid rebuild {volume}`\n"
            ))
        }
        OpsCommand::Rebuild {
            volume,
            target,
            rate,
            json,
        } => {
            let mut c = Client::connect(&target)?;
            let mut req = json!({"op": "rebuild", "volume": volume});
            // Without --rate a running rebuild keeps its rate: following it from another
            // terminal changes nothing.
            if let Some(r) = rate {
                req["rate_bytes_per_s"] = json!(r.limit_bytes_per_s);
                req["adaptive"] = json!(r.adaptive);
            }
            let reply = c.call(req)?;
            if reply["nothing_to_rebuild"] == json!(true) {
                return Ok(if json {
                    format!("{:#}\n", reply["rebuild"])
                } else {
                    nothing_to_rebuild(&volume, &reply)
                });
            }
            let report = follow_pass(&mut c, &volume, "rebuild", !json)?;
            Ok(if json {
                format!("{report:#}\n")
            } else {
                format!(
                    "rebuild of {volume} {}\n",
                    report["state"].as_str().unwrap_or("?")
                )
            })
        }
        OpsCommand::Pause { volume, target } => pause_resume(&target, "pause", volume),
        OpsCommand::Resume { volume, target } => pause_resume(&target, "resume", volume),
    }
}

/// A member path as the daemon must open it: relative paths are the caller's (the daemon's
/// working directory is its own), and the records keep the path for every later start.
fn absolute(path: &str) -> Result<String> {
    let abs = std::path::absolute(path)
        .with_context(|| format!("{path}: cannot make the path absolute"))?;
    abs.into_os_string()
        .into_string()
        .map_err(|p| anyhow::anyhow!("{}: the path is not UTF-8", p.to_string_lossy()))
}

/// `--rate`: a size per second as the config's `rebuild_rate` takes it (`200MB/s`,
/// `200MiB`), more than 0, or `adaptive`.
fn parse_rate(s: &str) -> Result<PassRate, String> {
    if s.trim().eq_ignore_ascii_case("adaptive") {
        return Ok(PassRate {
            limit_bytes_per_s: 0,
            adaptive: true,
        });
    }
    match nbraid_config::parse_rate(s) {
        Ok(0) => Err(format!(
            "`{s}` is zero: give a rate such as 200MB/s, or `adaptive`"
        )),
        Ok(bytes_per_s) => Ok(PassRate::limit(bytes_per_s)),
        Err(e) => Err(format!(
            "{e}; a rate is a size per second (200MB/s, 200MiB/s) or `adaptive`"
        )),
    }
}

fn pause_resume(target: &Target, op: &str, volume: Option<String>) -> Result<String> {
    let v = Client::connect(target)?.call(json!({"op": op, "volume": volume}))?;
    let names: Vec<&str> = v["volumes"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let selected: Vec<&str> = v["selected"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    Ok(pause_text(op, &names, &selected))
}

/// What `pause`/`resume` did: the volumes whose passes it touched, and the volumes it
/// holds (or lets go) for passes that start later.
fn pause_text(op: &str, touched: &[&str], selected: &[&str]) -> String {
    let mut out = if touched.is_empty() {
        "no background work running now\n".to_string()
    } else {
        format!("{op}d: {}\n", touched.join(", "))
    };
    if !selected.is_empty() {
        let list = selected.join(", ");
        out += &if op == "pause" {
            format!("held: {list} (rebuilds, resyncs and scrubs that start later wait for `nbraid resume`)\n")
        } else {
            format!("no longer held: {list}\n")
        };
    }
    out
}

/// How long a finished pass stays in the plain status.
const DONE_SHOWN_S: u64 = 3600;

/// "42s", "5 min", "2 h".
fn ago_text(s: u64) -> String {
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{} min", s / 60),
        _ => format!("{} h", s / 3600),
    }
}

/// A pass's moves as "d2 → s1, d4 → d4" (who held each role, who is written now).
fn moves_text(moves: Option<&Value>) -> String {
    moves
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|m| {
            format!(
                "{} → {}",
                m["from"].as_str().unwrap_or("?"),
                m["to"].as_str().unwrap_or("?")
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Polls the volume's scrub or rebuild (`what`) until it stops, with a progress bar; its
/// last report.
fn follow_pass(c: &mut Client, volume: &str, what: &str, bar: bool) -> Result<Value> {
    let pb = bar.then(|| {
        let pb = ProgressBar::new(0);
        pb.set_style(
            ProgressStyle::with_template(
                "{msg} [{bar:40}] {bytes}/{total_bytes} {binary_bytes_per_sec} ETA {eta}",
            )
            .expect("template")
            .progress_chars("=> "),
        );
        pb
    });
    loop {
        let v = c.call(json!({"op": "status", "volume": volume}))?;
        let s = v["volumes"][0][what].clone();
        if s.is_null() {
            bail!("volume {volume} has no {what} to follow");
        }
        let state = s["state"].as_str().unwrap_or("?").to_string();
        if let Some(pb) = &pb {
            pb.set_length(s["total_bytes"].as_u64().unwrap_or(0));
            pb.set_position(s["position_bytes"].as_u64().unwrap_or(0));
            pb.set_message(match what {
                "scrub" => format!("scrub {volume} {state}, {} mismatches", s["mismatches"]),
                _ => format!("{what} {volume} {state}"),
            });
        }
        if matches!(state.as_str(), "done" | "cancelled") {
            if let Some(pb) = pb {
                pb.finish_and_clear();
            }
            return Ok(s);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Sizes as every command prints them (`nbraid check` too): one formatter.
fn bytes(n: u64) -> String {
    nbraid_config::format_size(n)
}

/// `nbraid rebuild` when nothing is being rebuilt: failed roles still waiting for a member,
/// or the last rebuild's end, if there was one.
fn nothing_to_rebuild(volume: &str, reply: &Value) -> String {
    let waiting: Vec<String> = reply["roles_without_a_member"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| r.to_string())
        .collect();
    if !waiting.is_empty() {
        return format!(
            "{volume}: nothing to rebuild onto: role(s) {} failed with no spare to take them (`nbraid add` one)\n",
            waiting.join(", ")
        );
    }
    match reply["rebuild"]["state"].as_str() {
        Some(state) => format!("rebuild of {volume} {state}; nothing left to rebuild\n"),
        None => format!(
            "{volume}: nothing to rebuild: every member is current (`nbraid replace` rebuilds one onto a new member)\n"
        ),
    }
}

/// A scrub's end for people: how far it went, what it compared (parity stripes, mirror
/// blocks) and what it found. Stripes under a failed member are skipped, not checked.
fn scrub_summary(volume: &str, report: &Value) -> String {
    format!(
        "scrub of {volume} {} over {}: {} parity stripes and mirror blocks checked, {} mismatches, {} repaired, {} unreadable, {} skipped\n",
        report["state"].as_str().unwrap_or("?"),
        bytes(report["position_bytes"].as_u64().unwrap_or(0)),
        count(&report["checked"]),
        count(&report["mismatches"]),
        count(&report["repaired"]),
        count(&report["unreadable"]),
        count(&report["skipped"]),
    )
}

/// A count of the status reply as text ("-" where the daemon sent none). A JSON value's own
/// `Display` ignores widths, which left the table's columns unaligned.
fn count(v: &Value) -> String {
    v.as_u64().map_or_else(|| "-".into(), |n| n.to_string())
}

/// The status reply as a table: one line per volume, one per member below it.
pub fn status_table(v: &Value) -> String {
    let mut out = format!(
        "{:<12} {:<7} {:<9} {:>10}  {:<8} {:<34} {:>9} {:>9}  {}\n",
        "VOLUME", "LEVEL", "STATE", "SIZE", "MEMBERS", "SCRUB", "READS", "WRITES", "CACHE"
    );
    for vol in v["volumes"].as_array().into_iter().flatten() {
        let members = vol["members"].as_array().cloned().unwrap_or_default();
        let healthy = members.iter().filter(|m| m["state"] == "healthy").count();
        let scrub = match &vol["scrub"] {
            Value::Null => "-".to_string(),
            s => {
                let total = s["total_bytes"].as_u64().unwrap_or(0).max(1);
                let pct = s["position_bytes"].as_u64().unwrap_or(0) as f64 * 100.0 / total as f64;
                let eta = s["eta_s"]
                    .as_u64()
                    .map_or(String::new(), |e| format!(" eta {e}s"));
                format!(
                    "{} {pct:.0}% {} bad{}",
                    s["state"].as_str().unwrap_or("?"),
                    s["mismatches"],
                    eta
                )
            }
        };
        let io = &vol["io"];
        // Dirty / bound; "-" for a volume without a stripe cache (no parity, or write-through).
        let cache = match vol["cache"]["bound_bytes"].as_u64().unwrap_or(0) {
            0 => "-".to_string(),
            bound => format!(
                "{}/{}",
                bytes(vol["cache"]["dirty_bytes"].as_u64().unwrap_or(0)),
                bytes(bound)
            ),
        };
        out += &format!(
            "{:<12} {:<7} {:<9} {:>10}  {:<8} {:<34} {:>9} {:>9}  {}\n",
            vol["name"].as_str().unwrap_or("?"),
            vol["level"].as_str().unwrap_or("?"),
            vol["state"].as_str().unwrap_or("?"),
            bytes(vol["capacity_bytes"].as_u64().unwrap_or(0)),
            format!("{healthy}/{}", members.len()),
            scrub,
            count(&io["reads"]),
            count(&io["writes"]),
            cache,
        );
        // The array's id (mdadm --detail's UUID), when the daemon says it.
        if let Some(id) = vol["metadata"]["array"].as_str() {
            out += &format!("  array {id}\n");
        }
        // Background passes: a rebuild (or replace), the resync after an unclean start, the
        // resync of re-added members.
        for (what, roles) in [
            ("rebuild", "of roles "),
            ("resync", ""),
            ("readd", "of roles "),
        ] {
            let Some(r) = vol[what].as_object() else {
                continue;
            };
            if r["state"] == "done" {
                // Its roles are current and its counters said all they had to say; an hour
                // on, it is history (`--json` keeps it).
                let ago = r.get("done_s_ago").and_then(Value::as_u64);
                if ago.is_some_and(|s| s >= DONE_SHOWN_S) {
                    continue;
                }
                let over = match r["total_bytes"].as_u64().unwrap_or(0) {
                    0 => String::new(),
                    total => format!(" over {}", bytes(total)),
                };
                let ago = ago.map_or(String::new(), |s| format!(", {} ago", ago_text(s)));
                out += &format!("  {what} done{over}{ago}\n");
                continue;
            }
            let total = r["total_bytes"].as_u64().unwrap_or(0).max(1);
            let pct = r["position_bytes"].as_u64().unwrap_or(0) as f64 * 100.0 / total as f64;
            let moves = moves_text(r.get("moves"));
            let roles = match r.get("roles") {
                _ if !moves.is_empty() => format!(" {moves}"),
                Some(list) if !roles.is_empty() => format!(" {roles}{list}"),
                _ => String::new(),
            };
            out += &format!(
                "  {what} {} {pct:.0}%{roles} at {}/s{}{}\n",
                r["state"].as_str().unwrap_or("?"),
                bytes(r["rate_bytes_per_s"].as_u64().unwrap_or(0)),
                if r.get("adaptive") == Some(&Value::Bool(true)) {
                    " (adaptive)"
                } else {
                    ""
                },
                r.get("eta_s")
                    .and_then(Value::as_u64)
                    .map_or(String::new(), |e| format!(", eta {e}s"))
            );
        }
        if vol["held"] == json!(true) {
            out += "  background work held (nbraid pause): it waits for `nbraid resume`\n";
        }
        let spares: Vec<&str> = vol["spares"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        out += &format!(
            "  spares: {}\n",
            if spares.is_empty() {
                "none".to_string()
            } else {
                spares.join(" ")
            }
        );
        for n in vol["notes"].as_array().into_iter().flatten() {
            out += &format!("  note: {}\n", n.as_str().unwrap_or("?"));
        }
        for m in &members {
            let state = m["state"].as_str().unwrap_or("?");
            // What the superblocks said at start, when it is news.
            let state = match m["at_start"].as_str() {
                Some("stale") if state == "healthy" => "healthy (was stale: resynced)".into(),
                Some("failed") => "failed (recorded failed)".into(),
                _ => state.to_string(),
            };
            out += &format!(
                "  {:<10} {:<8} reads {:>9} writes {:>9} read errors {:>4}  {}\n",
                m["id"].as_str().unwrap_or("?"),
                state,
                count(&m["reads"]),
                count(&m["writes"]),
                count(&m["read_errors"]),
                m["path"].as_str().unwrap_or("")
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_shows_every_background_pass_with_progress_rate_and_eta() {
        let pass = |pos: u64| {
            json!({"state": "running", "roles": [1], "position_bytes": pos,
                   "total_bytes": 100u64 << 20, "rate_bytes_per_s": 10u64 << 20,
                   "adaptive": false, "eta_s": 5})
        };
        let status = json!({"volumes": [{
            "name": "db", "level": "raid6", "state": "degraded", "capacity_bytes": 100u64 << 20,
            "members": [], "scrub": null, "io": {}, "cache": {},
            "rebuild": pass(25 << 20), "resync": pass(50 << 20), "readd": pass(75 << 20),
        }]});
        let t = status_table(&status);
        assert!(t.contains("  spares: none\n"), "{t}");
        for line in [
            "rebuild running 25% of roles [1] at 10 MiB/s, eta 5s",
            "resync running 50% at 10 MiB/s, eta 5s",
            "readd running 75% of roles [1] at 10 MiB/s, eta 5s",
        ] {
            assert!(t.contains(line), "{line:?} not in\n{t}");
        }
    }

    /// A pass names who held each role and who is written now; a finished one says how
    /// long ago and leaves the table after an hour; the array id is shown.
    #[test]
    fn passes_name_their_moves_and_finished_ones_age() {
        let status = |rebuild: Value| {
            json!({"volumes": [{
                "name": "db", "level": "raid6", "state": "degraded", "capacity_bytes": 1u64 << 30,
                "members": [], "scrub": null, "io": {}, "cache": {}, "spares": ["s2"],
                "metadata": {"array": "0f3c0a9e-5b1d-4e0c-9a53-1c2d3e4f5a6b"},
                "rebuild": rebuild,
            }]})
        };
        let t = status_table(&status(json!({
            "state": "running", "roles": [1], "position_bytes": 1u64 << 29,
            "total_bytes": 1u64 << 30, "rate_bytes_per_s": 0,
            "moves": [{"role": 1, "from": "d1", "to": "s1"}],
        })));
        assert!(t.contains("rebuild running 50% d1 → s1 at"), "{t}");
        assert!(!t.contains("roles [1]"), "{t}");
        assert!(
            t.contains("  array 0f3c0a9e-5b1d-4e0c-9a53-1c2d3e4f5a6b\n"),
            "{t}"
        );
        assert!(t.contains("  spares: s2\n"), "{t}");
        let done = |ago: u64| {
            status_table(&status(json!({
                "state": "done", "roles": [], "position_bytes": 1u64 << 30,
                "total_bytes": 1u64 << 30, "done_s_ago": ago,
            })))
        };
        assert!(
            done(300).contains("  rebuild done over 1 GiB, 5 min ago\n"),
            "{}",
            done(300)
        );
        assert!(!done(7200).contains("rebuild"), "{}", done(7200));
    }

    #[test]
    fn the_counts_line_up_under_their_headings() {
        let status = json!({"volumes": [{
            "name": "r5", "level": "raid5", "state": "healthy", "capacity_bytes": 1u64 << 30,
            "members": [{"id": "d0", "state": "healthy", "reads": 7, "writes": 12345,
                         "read_errors": 0, "path": "d0.img"}],
            "scrub": null, "io": {"reads": 123, "writes": 45},
            "cache": {"dirty_bytes": 0, "bound_bytes": 0},
        }]});
        let t = status_table(&status);
        let lines: Vec<&str> = t.lines().collect();
        let end = |line: &str, word: &str| line.find(word).map(|i| i + word.len());
        let row = lines[1];
        assert_eq!(end(lines[0], "READS"), end(row, " 123"), "\n{t}");
        assert_eq!(end(lines[0], "WRITES"), end(row, " 45"), "\n{t}");
        assert!(row.ends_with("  -"), "no cache shown as -:\n{t}");
        assert!(
            t.contains("reads         7 writes     12345 read errors    0"),
            "\n{t}"
        );
    }

    #[test]
    fn a_finished_pass_says_done_and_how_far() {
        let status = json!({"volumes": [{
            "name": "r5", "level": "raid5", "state": "healthy", "capacity_bytes": 1u64 << 30,
            "members": [], "scrub": null, "io": {}, "cache": {},
            "rebuild": {"state": "done", "roles": [], "position_bytes": 128u64 << 20,
                        "total_bytes": 128u64 << 20, "rate_bytes_per_s": 0},
        }]});
        let t = status_table(&status);
        assert!(t.contains("\n  rebuild done over 128 MiB\n"), "{t}");
        assert!(!t.contains("roles []"), "{t}");
        assert_eq!(
            nothing_to_rebuild("r5", &json!({"rebuild": {"state": "done"}})),
            "rebuild of r5 done; nothing left to rebuild\n"
        );
        assert!(nothing_to_rebuild("r5", &json!({})).starts_with("r5: nothing to rebuild: "));
        let waiting = json!({"rebuild": {"state": "done"}, "roles_without_a_member": [2]});
        assert!(
            nothing_to_rebuild("r5", &waiting)
                .starts_with("r5: nothing to rebuild onto: role(s) 2 failed"),
            "{}",
            nothing_to_rebuild("r5", &waiting)
        );
    }

    #[test]
    fn a_scrub_ends_with_bytes_and_counts() {
        let report = json!({"state": "done", "position_bytes": 384u64 << 20,
                            "total_bytes": 384u64 << 20, "checked": 2048, "mismatches": 1,
                            "repaired": 1, "unreadable": 0, "skipped": 0});
        assert_eq!(
            scrub_summary("r5", &report),
            "scrub of r5 done over 384 MiB: 2048 parity stripes and mirror blocks checked, 1 mismatches, 1 repaired, 0 unreadable, 0 skipped\n"
        );
    }

    #[test]
    fn rates_parse_as_sizes_per_second_or_adaptive() {
        assert_eq!(parse_rate("200MB/s"), Ok(PassRate::limit(200_000_000)));
        assert_eq!(parse_rate("0.5MB"), Ok(PassRate::limit(500_000)));
        assert_eq!(parse_rate("100MiB/s"), Ok(PassRate::limit(100 << 20)));
        assert!(parse_rate("200").unwrap_err().contains("no unit"));
        let adaptive = parse_rate("Adaptive").expect("a rate");
        assert!(adaptive.adaptive);
        assert_eq!(adaptive.limit_bytes_per_s, 0);
        for bad in ["0", "-3", "fast", "inf", ""] {
            assert!(parse_rate(bad).is_err(), "{bad}");
        }
    }
}
