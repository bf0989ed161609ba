//! Background passes over a volume: `scrub` and `rebuild` (started, then followed with a
//! progress bar), `pause` and `resume`.

use super::client::{Client, Target};
use super::text::{bytes, count};
use anyhow::{bail, Result};
use indicatif::{ProgressBar, ProgressStyle};
use nbraid_control::Request;
use nbraid_core::PassRate;
use serde_json::{json, Value};
use std::time::Duration;

/// `nbraid scrub VOLUME`: `start` (repair, rate) starts one, `None` follows the running one.
pub(super) fn scrub(
    target: &Target,
    volume: String,
    start: Option<(bool, Option<PassRate>)>,
    json: bool,
) -> Result<String> {
    let mut c = Client::connect(target)?;
    if let Some((repair, rate)) = start {
        c.call(&Request::Scrub {
            volume: volume.clone(),
            repair,
            rate,
        })?;
    }
    let report = follow_pass(&mut c, &volume, "scrub", !json)?;
    Ok(if json {
        format!("{report:#}\n")
    } else {
        scrub_summary(&volume, &report) + &super::findings::finding_lines(&report)
    })
}

/// `nbraid rebuild VOLUME`: starts (or re-rates) the rebuild and follows it. Without a rate
/// a running rebuild keeps its own: following it from another terminal changes nothing.
pub(super) fn rebuild(
    target: &Target,
    volume: String,
    rate: Option<PassRate>,
    json: bool,
) -> Result<String> {
    let mut c = Client::connect(target)?;
    let reply = c.call(&Request::Rebuild {
        volume: volume.clone(),
        rate,
    })?;
    if reply["nothing_to_rebuild"] == json!(true) {
        return Ok(if json {
            format!("{:#}\n", nothing_to_rebuild_json(&reply))
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

/// `--rate`: a size per second as the config's `rebuild_rate` takes it (`200MB/s`,
/// `200MiB`), more than 0, or `adaptive`.
pub(super) fn parse_rate(s: &str) -> Result<PassRate, String> {
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

/// `nbraid cancel VOLUME`: stops its scrub (and re-add resync); what was stopped.
pub(super) fn cancel(target: &Target, volume: String, json: bool) -> Result<String> {
    let v = Client::connect(target)?.call(&Request::Cancel {
        volume: volume.clone(),
    })?;
    if json {
        return Ok(format!("{v:#}\n"));
    }
    Ok(cancel_text(&volume, &v))
}

/// What `nbraid cancel` stopped, for people: the scrub's position (it ends after the window
/// in flight, so the reply still says it runs) and the re-add resync.
fn cancel_text(volume: &str, reply: &Value) -> String {
    let mut out = String::new();
    let scrub = &reply["scrub"];
    if let Some(at) = scrub["position_bytes"].as_u64() {
        let total = scrub["total_bytes"].as_u64().unwrap_or(0);
        out += &format!(
            "scrub of {volume} cancelled at {} of {}: it stops after the window in flight; a restart does not resume it\n",
            bytes(at),
            bytes(total)
        );
    }
    if !reply["readd"].is_null() {
        out += &format!(
            "re-add resync of {volume} cancelled: the member it brings back is written but not read until `nbraid resume {volume}` runs it again\n"
        );
    }
    out
}

/// `nbraid pause` or `nbraid resume` (`op`), of one volume or all.
pub(super) fn pause_resume(target: &Target, op: &str, volume: Option<String>) -> Result<String> {
    let req = match op {
        "pause" => Request::Pause { volume },
        _ => Request::Resume { volume },
    };
    let v = Client::connect(target)?.call(&req)?;
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
        let asked = c.call(&Request::Status {
            volume: Some(volume.to_string()),
        });
        let v = asked.map_err(|e| not_followed(e, volume, what))?;
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
        if matches!(state.as_str(), "done" | "cancelled" | "failed") {
            if let Some(pb) = pb {
                pb.finish_and_clear();
            }
            // Stopped by an error: the command fails, saying why (scripts see the exit).
            if state == "failed" {
                let why = s["error"].as_str().unwrap_or("see the daemon's log");
                bail!(
                    "the {what} of {volume} failed at byte {}: {why}",
                    s["position_bytes"]
                );
            }
            return Ok(s);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A poll of a followed pass that failed: refused a follower's place (`busy`: every one is
/// held by watchers), the pass runs on unfollowed, and the error says so — it said only
/// `busy`, as if the scrub or rebuild had not started.
fn not_followed(e: anyhow::Error, volume: &str, what: &str) -> anyhow::Error {
    match e.downcast_ref::<super::client::Refused>() {
        Some(r) if r.0.code == "busy" => anyhow::anyhow!(
            "the {what} of {volume} runs, but following it was refused: {} (`nbraid status {volume}` shows its progress)",
            r.0.message
        ),
        _ => e,
    }
}

/// `nbraid rebuild` when nothing is being rebuilt: failed roles still waiting for a member,
/// or the last rebuild's end, if there was one.
fn nothing_to_rebuild(volume: &str, reply: &Value) -> String {
    let stuck = super::status::unrebuildable_lines(&reply["unrebuildable"]);
    let stuck_roles: Vec<&Value> = (reply["unrebuildable"].as_array().into_iter().flatten())
        .map(|u| &u["role"])
        .collect();
    // A spare helps only the failed roles something can rebuild.
    let waiting: Vec<String> = reply["roles_without_a_member"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| !stuck_roles.contains(r))
        .map(|r| r.to_string())
        .collect();
    if !waiting.is_empty() && reply["reshaping"] == json!(true) {
        return waiting_for_reshape(volume, &waiting, reply["spares"].as_u64().unwrap_or(0))
            + &stuck;
    }
    if !waiting.is_empty() {
        return format!(
            "{volume}: nothing to rebuild onto: role(s) {} failed with no spare to take them (`nbraid add` one)\n{stuck}",
            waiting.join(", ")
        );
    }
    if !stuck.is_empty() {
        return format!("{volume}: nothing to rebuild: no spare can help\n{stuck}");
    }
    match reply["rebuild"]["state"].as_str() {
        Some(state) => format!("rebuild of {volume} {state}; nothing left to rebuild\n"),
        None => format!(
            "{volume}: nothing to rebuild: every member is current (`nbraid replace` rebuilds one onto a new member)\n"
        ),
    }
}

/// Failed roles `waiting` for a member while a reshape runs: spares go into no role until
/// the volume is open in its new shape; then the daemon puts them in and starts the rebuild.
fn waiting_for_reshape(volume: &str, waiting: &[String], spares: u64) -> String {
    let roles = waiting.join(", ");
    match spares {
        0 => format!(
            "{volume}: a reshape is running; role(s) {roles} failed with no spare to take them (`nbraid add` one: spares go into failed roles when the reshape ends)\n"
        ),
        n => format!(
            "{volume}: a reshape is running: the {n} spare(s) standing by go into failed role(s) {roles} when it ends, and the rebuild starts then (`nbraid status` shows both)\n"
        ),
    }
}

/// `nbraid rebuild --json` when nothing is being rebuilt: the last rebuild's report (its
/// `state`), or `"state": "none"` if the volume never had one, with `nothing_to_rebuild` and
/// the failed roles still waiting for a member — never a bare `null`.
fn nothing_to_rebuild_json(reply: &Value) -> Value {
    let mut out = match &reply["rebuild"] {
        Value::Object(last) => Value::Object(last.clone()),
        _ => json!({ "state": "none" }),
    };
    out["nothing_to_rebuild"] = json!(true);
    // Spares wait for the reshape's end to go into failed roles.
    out["waits_for_reshape"] = json!(reply["reshaping"] == json!(true));
    out["roles_without_a_member"] = match &reply["roles_without_a_member"] {
        Value::Array(roles) => Value::Array(roles.clone()),
        _ => json!([]),
    };
    // Those no spare can help, and why.
    out["unrebuildable"] = match &reply["unrebuildable"] {
        Value::Array(roles) => Value::Array(roles.clone()),
        _ => json!([]),
    };
    out
}

/// Whether any listed finding is one no redundancy can mend.
fn unrepairable(members: &[Value]) -> bool {
    (members.iter())
        .filter_map(|m| m["first"].as_array())
        .flatten()
        .any(|f| f["action"] == json!("unrepairable"))
}

/// A scrub's end for people: how far it went, what it compared (parity stripes, mirror
/// blocks, and the blocks of members no redundancy covers, read through their checksums;
/// those under a failed member are skipped, not checked), what did not compare or
/// read, and then the bad blocks in the unit of the per-member lines that follow
/// ([`super::findings::finding_lines`]): found, repaired, left. The daemon's `unreadable`
/// counts chunks or copies that did not read at first (each is read again block by block, and
/// its bad blocks rebuilt) and its `repaired` counts stripes and blocks rewritten: printed as
/// "N repaired, N unreadable" beside "1 bad, 1 repaired" per member, it read as blocks still
/// unreadable after a repair that had mended every one.
fn scrub_summary(volume: &str, report: &Value) -> String {
    let members = report["findings"].as_array().map_or(&[][..], |m| &m[..]);
    let sum = |k: &str| members.iter().filter_map(|m| m[k].as_u64()).sum::<u64>();
    let bad = report["findings_total"]
        .as_u64()
        .unwrap_or_else(|| sum("total"));
    let repaired = sum("repaired");
    let left = bad.saturating_sub(repaired);
    let found = match bad {
        1 => "1 bad block found".to_string(),
        n => format!("{n} bad blocks found"),
    };
    let (checked, skipped) = (report["checked"].as_u64(), report["skipped"].as_u64());
    let outcome = match (bad, report["repair"] == json!(true)) {
        // Everything skipped (a RAID 5 with a member out): nothing was looked at.
        (0, _) if checked == Some(0) && skipped > Some(0) => {
            "nothing could be checked, so nothing was found".to_string()
        }
        (0, _) if skipped > Some(0) => "no bad block found in what was checked".to_string(),
        (0, _) => "no bad block found".to_string(),
        // A bare member's bad block (RAID 0, JBOD) has nothing to rebuild it from: a
        // `--repair` would not mend it, and the hint must not promise so.
        (_, false) if unrepairable(members) => format!(
            "{found}, not repaired (a check: `--repair` rewrites what the redundancy proves; those marked unrepairable have nothing to rebuild them from)"
        ),
        (_, false) => format!(
            "{found}, not repaired (a check: `--repair` rewrites what the redundancy proves)"
        ),
        (_, true) if left == 0 => format!("{found}, all repaired"),
        (_, true) => format!("{found}, {repaired} repaired, {left} not"),
    };
    // Resumed after a restart: the counts are of the bytes from its checkpoint only.
    let since = match report["counted_from_bytes"].as_u64() {
        Some(from) if from > 0 => format!(
            " (counts from {}, where it resumed after a restart: what it found before is not recorded)",
            bytes(from)
        ),
        _ => String::new(),
    };
    format!(
        "scrub of {volume} {} over {}{since}: {} parity stripes and mirror or member blocks checked, {} skipped{}; {} mismatched, {} chunks or copies did not read at first (a read error or a checksum mismatch); {outcome}\n",
        report["state"].as_str().unwrap_or("?"),
        bytes(report["position_bytes"].as_u64().unwrap_or(0)),
        count(&report["checked"]),
        count(&report["skipped"]),
        super::findings::skipped_why(report),
        count(&report["mismatches"]),
        count(&report["unreadable"]),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_to_rebuild_says_why() {
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

    /// A role beyond what any spare can rebuild is not asked a spare for: the reason is
    /// said instead (it said "no spare to take them (`nbraid add` one)").
    #[test]
    fn nothing_to_rebuild_says_when_no_spare_can_help_and_why() {
        let why =
            "its RAID 5 group (a0, a1, a2) lost 2 of its parts (a0, a1), beyond the 1 it tolerates";
        let stuck =
            json!([{"role": 0, "id": "a0", "reason": why}, {"role": 1, "id": "a1", "reason": why}]);
        let reply = json!({"roles_without_a_member": [0, 1], "unrebuildable": stuck});
        let text = nothing_to_rebuild("mm", &reply);
        assert!(!text.contains("nbraid add"), "{text}");
        assert!(
            text.starts_with("mm: nothing to rebuild: no spare can help\n"),
            "{text}"
        );
        assert!(
            text.contains(&format!("roles 0 (a0), 1 (a1) cannot be rebuilt: {why}")),
            "{text}"
        );
        let mut mixed = reply.clone();
        mixed["roles_without_a_member"] = json!([0, 1, 4]);
        let text = nothing_to_rebuild("mm", &mixed);
        assert!(text.contains("role(s) 4 failed with no spare"), "{text}");
        assert!(text.contains("cannot be rebuilt"), "{text}");
        assert_eq!(nothing_to_rebuild_json(&reply)["unrebuildable"], stuck);
    }

    /// During a reshape spares go into no role until it ends: the reply says so, not "no
    /// spare to take them" just after one was added.
    #[test]
    fn nothing_to_rebuild_during_a_reshape_says_the_rebuild_waits_for_it() {
        let reply = json!({"roles_without_a_member": [0], "reshaping": true, "spares": 1});
        let text = nothing_to_rebuild("db", &reply);
        assert!(
            text.starts_with("db: a reshape is running: the 1 spare(s) standing by go into failed role(s) 0 when it ends"),
            "{text}"
        );
        assert!(!text.contains("no spare"), "{text}");
        let none = json!({"roles_without_a_member": [0], "reshaping": true, "spares": 0});
        let text = nothing_to_rebuild("db", &none);
        assert!(
            text.contains("a reshape is running; role(s) 0 failed with no spare"),
            "{text}"
        );
        assert_eq!(nothing_to_rebuild_json(&reply)["waits_for_reshape"], true);
    }

    #[test]
    fn nothing_to_rebuild_in_json_is_an_object_with_a_state() {
        let never = nothing_to_rebuild_json(&json!({"rebuild": null, "nothing_to_rebuild": true}));
        assert_eq!(
            never,
            json!({"state": "none", "nothing_to_rebuild": true, "roles_without_a_member": [],
                   "unrebuildable": [], "waits_for_reshape": false})
        );
        let last = json!({"rebuild": {"state": "done", "roles": []},
                          "roles_without_a_member": [2]});
        let out = nothing_to_rebuild_json(&last);
        assert_eq!(out["state"], "done");
        assert_eq!(out["nothing_to_rebuild"], true);
        assert_eq!(out["roles_without_a_member"], json!([2]));
    }

    #[test]
    fn a_scrub_ends_with_bytes_and_counts() {
        let report = json!({"state": "done", "repair": true, "position_bytes": 384u64 << 20,
                            "total_bytes": 384u64 << 20, "checked": 2048, "mismatches": 1,
                            "repaired": 1, "unreadable": 0, "skipped": 0, "findings_total": 1,
                            "findings": [{"index": 2, "total": 1, "repaired": 1}]});
        assert_eq!(
            scrub_summary("r5", &report),
            "scrub of r5 done over 384 MiB: 2048 parity stripes and mirror or member blocks checked, 0 skipped; 1 mismatched, 0 chunks or copies did not read at first (a read error or a checksum mismatch); 1 bad block found, all repaired\n"
        );
    }

    /// A scrub that could check nothing (a RAID 5 with a member out) says so and why; it
    /// printed "0 … checked, 120 skipped; … no bad block found", which read as clean.
    #[test]
    fn a_scrub_that_skipped_says_why_and_does_not_read_as_clean() {
        let mut report = json!({"state": "done", "repair": false, "position_bytes": 8u64 << 20,
                                "checked": 0, "mismatches": 0, "repaired": 0, "unreadable": 0,
                                "skipped": 120, "skipped_no_redundancy": 120,
                                "skipped_stale": 0, "findings_total": 0, "findings": []});
        let text = scrub_summary("r5", &report);
        assert!(
            text.contains(" 0 parity stripes and mirror or member blocks checked, 120 skipped (120 with no redundancy left: failed members under them leave nothing to compare them against); "),
            "{text}"
        );
        assert!(
            text.ends_with("; nothing could be checked, so nothing was found\n"),
            "{text}"
        );
        report["checked"] = json!(60);
        report["skipped"] = json!(60);
        report["skipped_no_redundancy"] = json!(60);
        let text = scrub_summary("r60", &report);
        assert!(
            text.ends_with("; no bad block found in what was checked\n"),
            "{text}"
        );
    }

    /// Blocks that did not read and were rebuilt are not still unreadable: the summary
    /// counts bad blocks as the per-member lines do (the daemon's `unreadable` and
    /// `repaired` count chunks and stripes).
    #[test]
    fn a_scrub_summary_agrees_with_its_members_lines() {
        let findings = json!([{"index": 0, "total": 1, "repaired": 1},
                              {"index": 1, "total": 2, "repaired": 1}]);
        let mut report = json!({"state": "done", "repair": true, "position_bytes": 16u64 << 20,
                                "checked": 128, "mismatches": 0, "repaired": 3,
                                "unreadable": 3, "skipped": 0, "findings_total": 3,
                                "findings": findings});
        let text = scrub_summary("r5", &report);
        assert!(
            text.ends_with("3 chunks or copies did not read at first (a read error or a checksum mismatch); 3 bad blocks found, 2 repaired, 1 not\n"),
            "{text}"
        );
        assert!(!text.contains("3 unreadable"), "{text}");
        report["repair"] = json!(false);
        report["findings"] = json!([{"index": 0, "total": 3, "repaired": 0}]);
        assert!(scrub_summary("r5", &report).ends_with("3 bad blocks found, not repaired (a check: `--repair` rewrites what the redundancy proves)\n"));
        report["findings_total"] = json!(0);
        report["findings"] = json!([]);
        assert!(scrub_summary("r5", &report).ends_with("; no bad block found\n"));
    }

    /// A RAID 0's bad block, found by a check: the summary says found and not repaired, and
    /// does not promise that `--repair` would mend it (nothing to rebuild it from).
    #[test]
    fn a_bare_members_bad_block_is_found_and_not_promised_a_repair() {
        let first = json!([{"member_offset_bytes": 1056768, "len_bytes": 4096,
                            "found": "checksum mismatch", "action": "unrepairable",
                            "cross_check": null}]);
        let report = json!({"state": "done", "repair": false, "position_bytes": 12u64 << 20,
                            "checked": 192, "mismatches": 0, "repaired": 0, "unreadable": 1,
                            "skipped": 0, "findings_total": 1,
                            "findings": [{"index": 1, "total": 1, "repaired": 0,
                                          "first": first}]});
        let text = scrub_summary("v", &report);
        assert_eq!(
            text,
            "scrub of v done over 12 MiB: 192 parity stripes and mirror or member blocks checked, 0 skipped; 0 mismatched, 1 chunks or copies did not read at first (a read error or a checksum mismatch); 1 bad block found, not repaired (a check: `--repair` rewrites what the redundancy proves; those marked unrepairable have nothing to rebuild them from)\n"
        );
        let lines = super::super::findings::finding_lines(&report);
        assert!(
            lines.contains("member offset 1056768 (+4096): checksum mismatch; unrepairable\n"),
            "{lines}"
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
