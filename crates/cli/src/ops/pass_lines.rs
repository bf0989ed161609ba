//! The lines `nbraid status` gives a volume's background passes: a rebuild (or replace),
//! the resyncs, a reshape, the checksum passes — each running, stopped, or done (and for how
//! long that is worth saying).

use super::text::{ago_text, bytes, share_text};
use serde_json::{Map, Value};

/// How long a finished pass stays in the plain status.
const DONE_SHOWN_S: u64 = 3600;

/// A pass's moves as "d2 → s1, d4 into role 3" (who held each role, who is written now);
/// with several, each with its own share when it has one ("d1 → s0 9%, d2 → r 47%"): a
/// role the pass started again for is not as far as the others.
fn moves_text(moves: Option<&Value>, total: Option<&Value>) -> String {
    let moves = moves
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    moves
        .iter()
        .map(|m| {
            let share = match m.get("position_bytes") {
                Some(at) if moves.len() > 1 => format!(" {}", share_text(Some(at), total)),
                _ => String::new(),
            };
            format!("{}{share}", move_text(m))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// One role's move: "d1 → s0" only when another member held it before; a member written
/// into a role with no other holder known (a rebuild resumed after a restart, a member back
/// in its own role, a daemon that says `from` is the same) is "s0 into role 1", never
/// "s0 → s0".
fn move_text(m: &Value) -> String {
    let to = m["to"].as_str().unwrap_or("?");
    match m["from"].as_str() {
        Some(from) if from != to => format!("{from} → {to}"),
        _ => match m["role"].as_u64() {
            Some(r) => format!("{to} into role {r}"),
            None => to.to_string(),
        },
    }
}

/// Background passes: a rebuild (or replace), the resync after an unclean start, the
/// resync of re-added members, a reshape, the pass computing the checksums of a volume that
/// enabled them, the one giving back those an unclean start dropped; one line each.
pub(super) fn pass_lines(vol: &Value) -> String {
    let mut out = String::new();
    for (what, roles) in [
        ("rebuild", "of roles "),
        ("resync", ""),
        ("readd", "of roles "),
        ("reshape", ""),
        ("checksum_fill", ""),
        ("checksum_refill", ""),
    ] {
        if let Some(r) = vol[what].as_object() {
            out += &pass_line(what, roles, r);
        }
    }
    if let Some(r) = vol["checksum_refill"].as_object() {
        out += &unchecked_line(r);
    }
    out
}

/// Under the checksum refill until it is done: how many blocks read unchecked meanwhile
/// (at most: a block written since has its checksum again).
fn unchecked_line(r: &Map<String, Value>) -> String {
    match r.get("unchecked_blocks").and_then(Value::as_u64) {
        Some(n) if n > 0 && r["state"] != "done" => format!(
            "    {n} blocks without checksums until it is done (dropped at the unclean start; read unchecked)\n"
        ),
        _ => String::new(),
    }
}

/// Pass `what`'s line (`roles`: how its roles are introduced, empty: not shown); a finished
/// pass says how far it went and how long ago, and an hour on it is history (`--json` keeps
/// it).
fn pass_line(what: &str, roles: &str, r: &Map<String, Value>) -> String {
    if r["state"] == "done" {
        // Its counters said all they had to say; its roles are current unless it says
        // which failed since.
        let ago = r.get("done_s_ago").and_then(Value::as_u64);
        if ago.is_some_and(|s| s >= DONE_SHOWN_S) {
            return String::new();
        }
        let over = match r["total_bytes"].as_u64().unwrap_or(0) {
            0 => String::new(),
            total => format!(" over {}", bytes(total)),
        };
        let ago = ago.map_or(String::new(), |s| format!(", {} ago", ago_text(s)));
        return format!("  {what} done{over}{ago}{}\n", failed_since_text(r));
    }
    let moves = moves_text(r.get("moves"), r.get("total_bytes"));
    let roles = match r.get("roles") {
        _ if !moves.is_empty() => format!(" {moves}"),
        // A failed rebuild's roles left the list with their target: none to name.
        Some(list) if !roles.is_empty() && list.as_array().is_none_or(|l| !l.is_empty()) => {
            format!(" {roles}{list}")
        }
        _ => String::new(),
    };
    // A rate only while it moves (a stopped pass went at 0 B/s "now"), measured over this
    // run; none yet right after it (re)started.
    let rate = match r["rate_bytes_per_s"].as_u64() {
        _ if r["state"] != "running" => String::new(),
        Some(0) | None => " (rate not measured yet)".to_string(),
        Some(rate) => format!(" at {}/s", bytes(rate)),
    };
    format!(
        "  {what} {} {}{roles}{rate}{}{}\n",
        r["state"].as_str().unwrap_or("?"),
        share_text(r.get("position_bytes"), r.get("total_bytes")),
        if r.get("adaptive") == Some(&Value::Bool(true)) {
            " (adaptive)"
        } else {
            ""
        },
        r.get("eta_s")
            .and_then(Value::as_u64)
            .map_or(String::new(), |e| format!(", eta {e}s"))
    ) + &r
        .get("error")
        .and_then(Value::as_str)
        .map_or(String::new(), |e| format!("    stopped by an error: {e}\n"))
}

/// A finished rebuild whose rebuilt roles failed since: its "done" is history, not the
/// roles' state ("…, but role 1 (s1) it rebuilt has failed since: why").
fn failed_since_text(r: &Map<String, Value>) -> String {
    let failed = r.get("failed_since").and_then(Value::as_array);
    let named = |f: &Value| format!("{} ({})", f["role"], f["id"].as_str().unwrap_or("?"));
    match failed.map(Vec::as_slice).unwrap_or_default() {
        [] => String::new(),
        [f] => format!(
            ", but role {} it rebuilt has failed since: {}",
            named(f),
            f["why"].as_str().unwrap_or("see the member")
        ),
        many => format!(
            ", but roles {} it rebuilt have failed since",
            many.iter().map(named).collect::<Vec<_>>().join(", ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_move_line_names_two_members_only_for_a_real_move() {
        let line = |m: Value| move_text(&m);
        assert_eq!(
            line(json!({"role": 1, "from": "d1", "to": "s0"})),
            "d1 → s0"
        );
        // After a restart the daemon knows no earlier holder (null), or an older one says
        // the same member: no move from a member to itself.
        assert_eq!(
            line(json!({"role": 1, "from": null, "to": "s0"})),
            "s0 into role 1"
        );
        assert_eq!(
            line(json!({"role": 1, "from": "s0", "to": "s0"})),
            "s0 into role 1"
        );
        let moves = json!([{"role": 1, "from": "s0", "to": "s0"}]);
        assert_eq!(moves_text(Some(&moves), None), "s0 into role 1");
    }

    #[test]
    fn a_pass_stopped_by_an_error_says_so_and_why() {
        let r = json!({"state": "failed", "position_bytes": 52u64, "total_bytes": 100u64,
                       "rate_bytes_per_s": 0, "error": "stripe 7 unreadable"});
        let line = pass_line("reshape", "", r.as_object().unwrap());
        assert!(line.starts_with("  reshape failed 52%"), "{line}");
        assert!(
            line.contains("stopped by an error: stripe 7 unreadable"),
            "{line}"
        );
    }

    /// A done rebuild says which of the roles it rebuilt have failed since (it said "done"
    /// over a failed member), and nothing more while they serve.
    #[test]
    fn a_failed_rebuild_whose_roles_left_names_none() {
        let r = json!({"state": "failed", "position_bytes": 1u64 << 20,
                       "total_bytes": 3u64 << 20, "roles": [], "rate_bytes_per_s": 0});
        let line = pass_line("rebuild", "of roles ", r.as_object().unwrap());
        assert!(!line.contains("of roles"), "{line}");
        let r = json!({"state": "running", "position_bytes": 1u64 << 20,
                       "total_bytes": 3u64 << 20, "roles": [1], "rate_bytes_per_s": 0});
        let line = pass_line("rebuild", "of roles ", r.as_object().unwrap());
        assert!(line.contains("of roles [1]"), "{line}");
    }

    #[test]
    fn a_done_rebuild_names_the_roles_it_rebuilt_that_failed_since() {
        let r = |failed: Value| {
            let r = json!({"state": "done", "total_bytes": 32u64 << 20, "done_s_ago": 5,
                           "rebuilt_roles": [1, 3], "failed_since": failed});
            pass_line("rebuild", "of roles ", r.as_object().unwrap())
        };
        assert_eq!(r(json!([])), "  rebuild done over 32 MiB, 5s ago\n");
        assert_eq!(
            r(json!([{"role": 1, "id": "s1", "why": "failed by the operator"}])),
            "  rebuild done over 32 MiB, 5s ago, but role 1 (s1) it rebuilt has failed since: failed by the operator\n"
        );
        let both =
            r(json!([{"role": 1, "id": "s1", "why": "x"}, {"role": 3, "id": "s3", "why": "y"}]));
        assert!(
            both.ends_with(", but roles 1 (s1), 3 (s3) it rebuilt have failed since\n"),
            "{both}"
        );
    }
}
