//! `nbraid status`: every volume and member of a running daemon, as a table (or the
//! daemon's JSON), once or redrawn every second.

use super::client::{Client, Target};
use super::offline_status;
use super::pass_lines::pass_lines;
use super::text::{ago_text, bytes, count, share_text, utc};
use anyhow::Result;
use nbraid_control::Request;
use serde_json::{json, Value};
use std::io::Write;
use std::time::Duration;

/// `nbraid status [VOLUME]`; with `watch`, redrawn every second until interrupted.
pub(super) fn run(
    target: &Target,
    volume: Option<String>,
    json: bool,
    watch: bool,
) -> Result<String> {
    let mut c = match Client::connect(target) {
        Ok(c) => c,
        Err(e) => {
            return Err(match &target.config {
                Some(file) if offline_status::nobody_listens(&e) => {
                    offline_status::not_serving(file, volume.as_deref(), json, &e)
                }
                _ => e,
            })
        }
    };
    let req = Request::Status { volume };
    // The config at hand, to word the daemon's notes as it names the members.
    let config = (target.config.as_deref()).and_then(|f| nbraid_assembly::pins::load(f).ok());
    let call = |c: &mut Client| -> Result<Value> {
        let mut v = c.call(&req)?;
        if let Some(config) = &config {
            for vol in v["volumes"].as_array_mut().into_iter().flatten() {
                as_config_names(vol, config);
            }
        }
        Ok(v)
    };
    if !watch {
        let v = call(&mut c)?;
        return Ok(if json {
            format!("{v:#}\n")
        } else {
            status_table(&v)
        });
    }
    loop {
        let v = call(&mut c)?;
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

/// Volume `vol`'s notes as `config` names its members. The daemon takes a role holder its
/// volume does not list for a member added at run time, and its note says to add a
/// `[[member]]` with that id and path — wrong where the config already declares that file
/// (by a relative path, or under another id): pasting it repeats an id, and a start on this
/// config opens the file as that config member, not for this volume. Such a note is replaced
/// by one that names the config's member and the `members` line to set. A holder whose file
/// is one of the volume's own spares in the config (a spare a reload added, which the daemon
/// named after its file, e.g. `loop1`) is the start's case: it goes by its config id, and the
/// note is the start's ("listed in spares ... now holds role"), for a start gives it the role.
fn as_config_names(vol: &mut Value, config: &nbraid_config::Config) {
    let Some(cv) = config
        .volumes
        .iter()
        .find(|cv| vol["name"] == cv.name.as_str())
    else {
        return;
    };
    let listed: Vec<&str> = (cv.members.iter().chain(&cv.heal.spares))
        .map(|&m| config.members[m].id.as_str())
        .collect();
    let holders: Vec<(&str, &str)> = (vol["members"].as_array().into_iter().flatten())
        .map(|m| {
            let field = |k: &str| m[k].as_str().unwrap_or("?");
            (field("id"), field("path"))
        })
        .collect();
    // The daemon's note for a holder it took as added at run time.
    let run_time_note = |role: usize, (id, path): &(&str, &str)| {
        format!("member {id} (added at run time: {path}) holds role {role}")
    };
    let notes_say = |said: &str| {
        (vol["notes"].as_array().into_iter().flatten())
            .any(|n| n.as_str().is_some_and(|n| n.starts_with(said)))
    };
    // Per role, the config's member declaring the file of a holder the volume does not list
    // — or lists only since a reload (a spare it added goes by its config id, but the
    // daemon's notes take it as added at run time: its start's config did not list it).
    let declared: Vec<Option<&nbraid_config::Member>> = (holders.iter().enumerate())
        .map(|(role, h)| {
            let path = std::path::Path::new(h.1);
            let same = |m: &&nbraid_config::Member| {
                m.path == path || nbraid_assembly::added::same_file(&m.path, path)
            };
            match listed.contains(&h.0) && !notes_say(&run_time_note(role, h)) {
                true => None,
                false => config.members.iter().find(same),
            }
        })
        .collect();
    if declared.iter().all(Option::is_none) {
        return;
    }
    let line: Vec<String> = (holders.iter().zip(&declared))
        .map(|((id, _), c)| format!("\"{}\"", c.map_or(*id, |c| c.id.as_str())))
        .collect();
    let line = line.join(", ");
    let holders: Vec<(String, String)> = (holders.iter())
        .map(|(id, path)| (id.to_string(), path.to_string()))
        .collect();
    let mut notes: Vec<Value> = vol["notes"].as_array().cloned().unwrap_or_default();
    for (role, ((id, path), c)) in holders.iter().zip(&declared).enumerate() {
        let Some(c) = c else { continue };
        let said = run_time_note(role, &(id.as_str(), path.as_str()));
        let listed_as = |of: &[usize]| of.iter().any(|&m| config.members[m].id == c.id);
        let note = if listed_as(&cv.heal.spares) {
            vol["members"][role]["id"] = json!(c.id);
            format!(
                "member {} (listed in spares) now holds role {role}; update the config: members = [{line}]",
                c.id
            )
        } else if listed_as(&cv.members) {
            // One of its members by another path: a start gives it its role and says nothing.
            vol["members"][role]["id"] = json!(c.id);
            notes.retain(|n| !n.as_str().is_some_and(|n| n.starts_with(&said)));
            continue;
        } else {
            format!(
                "member {id} holds role {role}; its file {path} is the config's member {} (path = \"{}\"), which volume {} does not list, so a start on this config does not give it the role: set members = [{line}] (no [[member]] to add)",
                c.id, c.path_text, cv.name
            )
        };
        let at = notes
            .iter()
            .position(|n| n.as_str().is_some_and(|n| n.starts_with(&said)));
        match at {
            Some(i) => notes[i] = json!(note),
            None => notes.push(json!(note)),
        }
    }
    vol["notes"] = json!(notes);
}

/// Since when the volume's counts count (the reads, writes, errors and repairs below live
/// in memory: a restart or reopen starts them again), when the daemon says.
fn counted_since_line(since: &Value) -> String {
    let Some(at) = since["unix_s"].as_u64() else {
        return String::new();
    };
    let ago = since["s_ago"]
        .as_u64()
        .map_or(String::new(), |s| format!(", {} ago", ago_text(s)));
    format!(
        "  counts since {} ({}{ago}): reads, writes, errors and checksum repairs are not kept across restarts\n",
        utc(at),
        since["by"].as_str().unwrap_or("?"),
    )
}

/// What a scrub found bad: its findings (blocks whose copies or parity disagree, and blocks
/// that did not read or failed their checksums), repaired or not — not only the mismatches,
/// which leave out every block a checksum caught.
fn scrub_bad(s: &Value) -> u64 {
    let counted = s["mismatches"].as_u64().unwrap_or(0) + s["unreadable"].as_u64().unwrap_or(0);
    s["findings_total"].as_u64().unwrap_or(counted).max(counted)
}

/// The status reply as a table: one line per volume, what runs in the background, its
/// spares and notes, then one line per member.
pub fn status_table(v: &Value) -> String {
    let mut out = format!(
        "{:<12} {:<7} {:<9} {:>10}  {:<8} {:<34} {:>9} {:>9}  {}\n",
        "VOLUME", "LEVEL", "STATE", "SIZE", "MEMBERS", "SCRUB", "READS", "WRITES", "CACHE"
    );
    for vol in v["volumes"].as_array().into_iter().flatten() {
        out += &volume_line(vol);
        // The array's id (mdadm --detail's UUID), when the daemon says it.
        if let Some(id) = vol["metadata"]["array"].as_str() {
            out += &format!("  array {id}\n");
        }
        out += &counted_since_line(&vol["counted_since"]);
        out += &pass_lines(vol);
        out += &super::findings::status_line(&vol["scrub"]);
        out += &super::findings::skipped_line(&vol["scrub"]);
        if vol["metadata"]["write_hole_logged"] == json!(false) {
            out += "  write hole open: the partial-parity log does not cover every parity group (a reshape runs, the log is off, or a member has no room for its ring: the daemon's start warnings say which)\n";
        }
        if vol["read_only"] == json!(true) {
            out += "  read-only (read_only = true): nothing is written to its members; writes, spares, rebuilds and repairs are refused\n";
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
        out += &unrebuildable_lines(&vol["unrebuildable"]);
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
        for m in vol["members"].as_array().into_iter().flatten() {
            out += &member_line(m);
        }
        for m in vol["departed"].as_array().into_iter().flatten() {
            out += &departed_line(m);
        }
    }
    out
}

/// Failed roles nothing can rebuild (`unrebuildable` of `status` or `rebuild`), those with
/// the same reason on one line: "roles 0 (a0), 1 (a1) cannot be rebuilt: its RAID 5 group
/// ... beyond the 1 it tolerates ...; no spare can help".
pub(super) fn unrebuildable_lines(list: &Value) -> String {
    let mut by_reason: Vec<(&str, Vec<String>)> = Vec::new();
    for u in list.as_array().into_iter().flatten() {
        let reason = u["reason"].as_str().unwrap_or("?");
        let role = format!("{} ({})", u["role"], u["id"].as_str().unwrap_or("?"));
        match by_reason.iter_mut().find(|(r, _)| *r == reason) {
            Some((_, roles)) => roles.push(role),
            None => by_reason.push((reason, vec![role])),
        }
    }
    by_reason
        .iter()
        .map(|(reason, roles)| {
            let s = if roles.len() == 1 { "" } else { "s" };
            format!(
                "  role{s} {} cannot be rebuilt: {reason}; no spare can help\n",
                roles.join(", ")
            )
        })
        .collect()
}

/// A failed member whose role a spare took, after the role holders (/proc/mdstat's `(F)`),
/// until `nbraid remove` takes it out.
fn departed_line(m: &Value) -> String {
    // The path lines up with the role holders' (their counters take 51 columns).
    format!(
        "  {:<10} {:<10} {:<47} {}\n",
        m["id"].as_str().unwrap_or("?"),
        "failed (F)",
        format!("role {} taken by a spare; nbraid remove it", m["role"]),
        m["path"].as_str().unwrap_or("")
    )
}

/// A volume's line under the table's headings.
fn volume_line(vol: &Value) -> String {
    let members = vol["members"].as_array().cloned().unwrap_or_default();
    let healthy = members.iter().filter(|m| m["state"] == "healthy").count();
    let scrub = match &vol["scrub"] {
        Value::Null => "-".to_string(),
        s => {
            let pct = share_text(s.get("position_bytes"), s.get("total_bytes"));
            let eta = s["eta_s"]
                .as_u64()
                .map_or(String::new(), |e| format!(" eta {e}s"));
            // A scrub resumed after a restart counts from where it resumed.
            let since = match s["counted_from_bytes"].as_u64() {
                Some(from) if from > 0 => {
                    let total = s["total_bytes"].as_u64().unwrap_or(0).max(1);
                    format!(" since {:.0}%", from as f64 * 100.0 / total as f64)
                }
                _ => String::new(),
            };
            format!(
                "{} {pct} {} bad{since}{}",
                s["state"].as_str().unwrap_or("?"),
                scrub_bad(s),
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
    format!(
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
    )
}

/// A member's line under its volume.
fn member_line(m: &Value) -> String {
    let state = m["state"].as_str().unwrap_or("?");
    // The state now; what the superblocks said at start only as its history (a role
    // recorded failed at start may have been rebuilt since, onto another member too).
    let state = match m["at_start"].as_str() {
        Some("stale") if state == "healthy" => "healthy (was stale: resynced)".into(),
        Some("failed") if state == "failed" => "failed (recorded failed)".into(),
        _ => state.to_string(),
    };
    // Shown when the volume keeps checksums (null otherwise).
    let sums = match (
        m["checksum_errors"].as_u64(),
        m["checksum_repairs"].as_u64(),
    ) {
        (Some(e), Some(r)) => format!(" checksum errors {e:>4} repaired {r:>4}"),
        _ => String::new(),
    };
    // The engine fails a member past its bad-block limit only when the volume does without it.
    let kept = match m["kept_past_bad_block_limit"].as_bool() {
        Some(true) => "    past its bad-block limit, kept: it holds the only readable copy of some data (its bad blocks answer read errors)\n",
        _ => "",
    };
    // Nor fails one it cannot do without for a write error while it still reads (said only
    // while it serves: one failed since, by a later error, was not kept).
    let write_errors = match m["write_errors_kept_through"].as_u64() {
        Some(n) if n > 0 && m["state"] != "failed" => format!("    {n} write errors, kept: the volume cannot do without it (those writes answered errors)\n"),
        _ => String::new(),
    };
    // Its path no longer names the file it serves from: what that means and the way out.
    let path_problem = match m["path_problem"]["message"].as_str() {
        Some(message) => format!("    {message}\n"),
        None => String::new(),
    };
    format!(
        "  {:<10} {:<8} reads {:>9} writes {:>9} read errors {:>4}{sums}  {}\n{}{kept}{write_errors}{path_problem}",
        m["id"].as_str().unwrap_or("?"),
        state,
        count(&m["reads"]),
        count(&m["writes"]),
        count(&m["read_errors"]),
        m["path"].as_str().unwrap_or(""),
        failure_line(&m["failure"])
    )
}

/// Under a failed member: why, and whether it comes back by itself or stays out until the
/// operator decides (the daemon's rule; nothing while it is not failed).
fn failure_line(f: &Value) -> String {
    if !f.is_object() {
        return String::new();
    }
    let why = f["why"].as_str().unwrap_or("?");
    match f["stays_out"].as_str() {
        _ if f["returns_by_itself"] == true => match f["refused_now"].as_str() {
            Some(refused) => {
                format!("    failed ({why}): its server answers again but is not used: {refused}\n")
            }
            None => format!("    failed ({why}): re-added by itself once it answers\n"),
        },
        // The daemon's sentence may give the reason itself ("it answered with I/O errors
        // (...)"): said once.
        Some(stays) if stays.contains(why) => format!("    failed: {stays}\n"),
        Some(stays) => format!("    failed ({why}): {stays}\n"),
        None => format!("    failed ({why})\n"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Blocks a checksum caught are findings too (a scrub that repaired three rotten blocks
    /// showed "0 bad").
    #[test]
    fn a_scrubs_bad_blocks_count_what_the_checksums_caught() {
        let s = json!({"mismatches": 0, "unreadable": 3, "repaired": 3, "findings_total": 3});
        assert_eq!(scrub_bad(&s), 3);
        assert_eq!(scrub_bad(&json!({"mismatches": 2, "unreadable": 1})), 3);
        assert_eq!(scrub_bad(&json!({"mismatches": 0})), 0);
    }

    #[test]
    fn member_lines_show_checksum_errors_and_repairs_when_kept() {
        let m = json!({"id": "d0", "state": "healthy", "reads": 5, "writes": 6,
                       "read_errors": 0, "checksum_errors": 3, "checksum_repairs": 2,
                       "path": "d0.img"});
        let line = member_line(&m);
        assert!(
            line.contains("checksum errors    3 repaired    2"),
            "{line}"
        );
        let off = json!({"id": "d0", "state": "healthy", "reads": 5, "writes": 6,
                         "read_errors": 0, "checksum_errors": null, "path": "d0.img"});
        assert!(!member_line(&off).contains("checksum"));
    }

    /// A member kept past its bad-block limit says so on a line of its own.
    #[test]
    fn a_member_kept_past_its_bad_block_limit_says_why() {
        let m = |kept: bool| {
            json!({"id": "d0", "state": "healthy", "read_errors": 0,
                       "checksum_errors": 30, "checksum_repairs": 0,
                       "kept_past_bad_block_limit": kept, "path": "d0.img"})
        };
        let line = member_line(&m(true));
        assert!(
            line.ends_with("d0.img\n    past its bad-block limit, kept: it holds the only readable copy of some data (its bad blocks answer read errors)\n"),
            "{line}"
        );
        assert!(!member_line(&m(false)).contains("kept"));
    }

    /// A member kept through write errors says how many, on a line of its own.
    #[test]
    fn a_member_kept_through_write_errors_says_how_many() {
        let m = |n: u64| json!({"id": "d1", "state": "healthy", "write_errors_kept_through": n, "path": "d1.img"});
        let line = member_line(&m(3));
        assert!(
            line.ends_with("d1.img\n    3 write errors, kept: the volume cannot do without it (those writes answered errors)\n"),
            "{line}"
        );
        assert!(!member_line(&m(0)).contains("kept"));
        let failed = json!({"id": "d1", "state": "failed", "write_errors_kept_through": 2, "path": "d1.img"});
        assert!(
            !member_line(&failed).contains("kept"),
            "a failed member was not kept"
        );
    }

    /// A role recorded failed at start and rebuilt since reads as it is now.
    #[test]
    fn a_member_line_gives_the_state_now_not_the_start_s() {
        let m = |state: &str| json!({"id": "new1", "state": state, "at_start": "failed", "path": "/x/new1.img"});
        assert!(member_line(&m("healthy")).starts_with("  new1       healthy "));
        assert!(member_line(&m("rebuilding")).starts_with("  new1       rebuilding "));
        assert!(member_line(&m("failed")).contains(" failed (recorded failed) "));
    }

    #[test]
    fn a_failed_member_says_whether_it_comes_back_by_itself() {
        let m = |failure: Value| json!({"id": "d0", "state": "failed", "path": "d0", "failure": failure});
        let back = member_line(&m(
            json!({"why": "timeout", "returns_by_itself": true, "stays_out": null}),
        ));
        assert!(
            back.contains("failed (timeout): re-added by itself once it answers"),
            "{back}"
        );
        let op = json!({"why": "nbraid fail", "returns_by_itself": false, "stays_out": "the operator failed it: it stays failed"});
        let out = member_line(&m(op));
        assert!(
            out.contains("failed (nbraid fail): the operator failed it"),
            "{out}"
        );
        assert_eq!(member_line(&m(Value::Null)).lines().count(), 1);
        // Its server answers again, but the export is not used: said, not "once it answers".
        let refused = json!({"why": "timeout", "returns_by_itself": true, "stays_out": null,
            "refused_now": "the export has 33554432 bytes but the member needs 41943040"});
        let out = member_line(&m(refused));
        assert!(
            out.contains("failed (timeout): its server answers again but is not used: the export has 33554432 bytes"),
            "{out}"
        );
    }

    /// Found by an events hunt: a member failed by I/O errors said its reason twice
    /// ("failed (EIO): it answered with I/O errors (EIO): it stays failed ...").
    #[test]
    fn a_failed_member_says_its_reason_once() {
        let why = "write of 4096 bytes at offset 0 failed: Input/output error";
        let stays = format!("it answered with I/O errors ({why}): it stays failed until the operator brings it back (nbraid add, nbraid replace)");
        let m = json!({"id": "d1", "state": "failed", "path": "d1.img", "failure":
            {"why": why, "returns_by_itself": false, "stays_out": stays}});
        let line = member_line(&m);
        assert_eq!(line.matches(why).count(), 1, "{line}");
        assert!(
            line.ends_with(&format!("d1.img\n    failed: {stays}\n")),
            "{line}"
        );
    }

    /// A scrub resumed after a restart counts its findings from where it resumed, and says
    /// so (its "0 bad" read as the whole scrub's); with no total yet, no share of 0 bytes.
    #[test]
    fn a_resumed_scrub_says_where_its_counts_begin() {
        let vol = |scrub: Value| {
            status_table(&json!({"volumes": [{"name": "r5", "members": [], "scrub": scrub}]}))
        };
        let t = vol(
            json!({"state": "running", "position_bytes": 36u64, "total_bytes": 100u64,
                           "mismatches": 0, "counted_from_bytes": 30u64}),
        );
        assert!(t.contains(" running 36% 0 bad since 30% "), "{t}");
        let t = vol(json!({"state": "running", "position_bytes": 36u64 << 20,
                           "total_bytes": 0u64, "mismatches": 0}));
        assert!(t.contains(" running at 36 MiB 0 bad "), "{t}");
    }

    /// A scrub that skipped stripes says so under its volume, and why (its "0 bad" alone
    /// read as a clean scrub of a RAID 5 with a member out, which checked nothing).
    #[test]
    fn a_scrub_that_skipped_stripes_says_why_under_its_volume() {
        let scrub = json!({"state": "done", "position_bytes": 100u64, "total_bytes": 100u64,
                           "mismatches": 0, "skipped": 120, "skipped_no_redundancy": 120,
                           "skipped_stale": 0});
        let t = status_table(&json!({"volumes": [{"name": "r5", "members": [], "scrub": scrub}]}));
        assert!(
            t.contains("\n  scrub skipped 120 parity stripes or mirror blocks, not checked (120 with no redundancy left: "),
            "{t}"
        );
    }

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
            "reshape": pass(10 << 20), "checksum_fill": pass(40 << 20),
            "checksum_refill": {"state": "running", "position_bytes": 30u64 << 20,
                "total_bytes": 100u64 << 20, "rate_bytes_per_s": 10u64 << 20, "eta_s": 7,
                "unchecked_blocks": 17920},
        }]});
        let t = status_table(&status);
        assert!(t.contains("  spares: none\n"), "{t}");
        for line in [
            "rebuild running 25% of roles [1] at 10 MiB/s, eta 5s",
            "resync running 50% at 10 MiB/s, eta 5s",
            "readd running 75% of roles [1] at 10 MiB/s, eta 5s",
            "reshape running 10% at 10 MiB/s, eta 5s",
            "checksum_fill running 40% at 10 MiB/s, eta 5s",
            "checksum_refill running 30% at 10 MiB/s, eta 7s",
            "    17920 blocks without checksums until it is done",
        ] {
            assert!(t.contains(line), "{line:?} not in\n{t}");
        }
    }

    /// A pass names who held each role and who is written now; a finished one says how
    /// long ago and leaves the table after an hour; the array id is shown.
    #[test]
    fn a_departed_member_is_shown_failed_after_the_role_holders() {
        let t = status_table(&json!({"volumes": [{
            "name": "db", "level": "raid6", "state": "degraded", "capacity_bytes": 1u64 << 30,
            "members": [{"id": "s0", "state": "rebuilding", "path": "/srv/s0.img"}],
            "scrub": null, "io": {}, "cache": {}, "spares": [],
            "departed": [{"id": "d2", "role": 2, "path": "/srv/d2.img", "state": "failed"}],
        }]}));
        let holder = t.find("  s0 ").expect("the role holder");
        let gone = t
            .find("  d2         failed (F) ")
            .expect("the departed member");
        assert!(holder < gone, "{t}");
        assert!(t.contains("/srv/d2.img\n"), "{t}");
    }

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
        assert!(
            t.contains("rebuild running 50% d1 → s1 (rate not measured yet)\n"),
            "{t}"
        );
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

    /// Failed roles nothing can rebuild say so and why, under the volume, before its
    /// spares (the table said nothing, and `rebuild` asked for a spare).
    #[test]
    fn roles_no_spare_can_help_are_said_with_their_reason() {
        let why =
            "its RAID 5 group (a0, a1, a2) lost 2 of its parts (a0, a1), beyond the 1 it tolerates";
        let t = status_table(&json!({"volumes": [{
            "name": "mm", "level": "tree", "state": "degraded", "members": [], "spares": [],
            "unrebuildable": [{"role": 0, "id": "a0", "reason": why},
                              {"role": 1, "id": "a1", "reason": why}],
        }]}));
        let line = format!("  roles 0 (a0), 1 (a1) cannot be rebuilt: {why}; no spare can help\n");
        assert!(t.contains(&line), "{t}");
        assert!(t.find(&line) < t.find("  spares: "), "{t}");
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
    fn an_open_write_hole_is_said_and_a_logged_or_absent_one_is_not() {
        let with = |logged: Value| {
            let v = json!({"volumes": [{"name": "v", "metadata": {"write_hole_logged": logged}}]});
            status_table(&v).contains("write hole open")
        };
        assert!(with(json!(false)));
        assert!(!with(json!(true)));
        assert!(!with(Value::Null), "no parity group, no write hole");
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
    }

    /// The counts say since when they count: they reset at a restart, and read as the
    /// volume's totals.
    #[test]
    fn the_counts_say_since_when() {
        let t = status_table(&json!({"volumes": [{
            "name": "r5", "level": "raid5", "state": "healthy", "members": [],
            "counted_since": {"unix_s": 1_798_761_599u64, "s_ago": 300, "by": "daemon start"},
        }]}));
        assert!(
            t.contains("  counts since 2026-12-31 23:59:59 UTC (daemon start, 5 min ago): reads, writes, errors and checksum repairs are not kept across restarts\n"),
            "{t}"
        );
    }
}
