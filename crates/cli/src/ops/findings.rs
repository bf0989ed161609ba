//! A scrub's findings as text: per member, the blocks found bad and what was done with each
//! (`nbraid scrub`), or one line of counts (`nbraid status`).

use serde_json::Value;

/// The members with findings, in the daemon's order.
fn members(scrub: &Value) -> impl Iterator<Item = &Value> {
    scrub["findings"].as_array().into_iter().flatten()
}

/// A member's name in the text: its id, or its index when the daemon sent none.
fn member_name(m: &Value) -> String {
    match m["id"].as_str() {
        Some(id) => id.to_string(),
        None => format!("member {}", m["index"]),
    }
}

/// `nbraid scrub`'s lines after the summary: per member, its counts, then each listed
/// finding (member offset, length, what was wrong, what was done, and RAID 6's cross-check),
/// then how many more were counted than listed.
pub(super) fn finding_lines(scrub: &Value) -> String {
    let mut out = String::new();
    for m in members(scrub) {
        let total = m["total"].as_u64().unwrap_or(0);
        out += &format!(
            "  {} (member {}{}): {total} bad, {} repaired\n",
            member_name(m),
            m["index"],
            m["path"]
                .as_str()
                .map_or(String::new(), |p| format!(", {p}")),
            m["repaired"].as_u64().unwrap_or(0),
        );
        let first = m["first"].as_array().cloned().unwrap_or_default();
        for f in &first {
            let cross = f["cross_check"]
                .as_str()
                .map_or(String::new(), |c| format!(" ({c})"));
            out += &format!(
                "    member offset {} (+{}): {}; {}{cross}\n",
                f["member_offset_bytes"],
                f["len_bytes"],
                f["found"].as_str().unwrap_or("?"),
                f["action"].as_str().unwrap_or("?"),
            );
        }
        let more = total.saturating_sub(first.len() as u64);
        if more > 0 {
            out += &format!("    … {more} more not listed\n");
        }
    }
    out
}

/// `nbraid status`'s line under a volume whose scrub found something: per member, found
/// and repaired (empty when nothing was found).
pub(super) fn status_line(scrub: &Value) -> String {
    let parts: Vec<String> = members(scrub)
        .map(|m| {
            format!(
                "{} {} bad ({} repaired)",
                member_name(m),
                m["total"].as_u64().unwrap_or(0),
                m["repaired"].as_u64().unwrap_or(0)
            )
        })
        .collect();
    if parts.is_empty() {
        return String::new();
    }
    format!(
        "  scrub found: {} (`nbraid scrub --follow` lists where)\n",
        parts.join(", ")
    )
}

/// Why a scrub skipped what it skipped, for people: empty when it skipped nothing (or the
/// daemon sent no reasons), else " (N with no redundancy left: …; N whose parity is stale)".
/// A scrub of a RAID 5 with a member out skips every stripe: said bare, "0 checked, 120
/// skipped … no bad block found" read as a clean scrub.
pub(super) fn skipped_why(scrub: &Value) -> String {
    let n = |k: &str| scrub[k].as_u64().unwrap_or(0);
    let mut why = Vec::new();
    if n("skipped_no_redundancy") > 0 {
        why.push(format!(
            "{} with no redundancy left: failed members under them leave nothing to compare them against",
            n("skipped_no_redundancy")
        ));
    }
    if n("skipped_stale") > 0 {
        why.push(format!(
            "{} whose parity is stale (a write failed beyond what the group tolerates)",
            n("skipped_stale")
        ));
    }
    match why.is_empty() {
        true => String::new(),
        false => format!(" ({})", why.join("; ")),
    }
}

/// `nbraid status`'s line under a volume whose scrub skipped stripes or blocks (empty when
/// it skipped none): how many, and why.
pub(super) fn skipped_line(scrub: &Value) -> String {
    match scrub["skipped"].as_u64().unwrap_or(0) {
        0 => String::new(),
        n => format!(
            "  scrub skipped {n} parity stripes or mirror blocks, not checked{}\n",
            skipped_why(scrub)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn scrub() -> Value {
        json!({"findings": [
            {"index": 1, "id": "d1", "path": "/srv/d1.img", "total": 3, "repaired": 2,
             "first": [
                {"member_offset_bytes": 2113536, "len_bytes": 4096, "found": "checksum mismatch",
                 "action": "rebuilt from parity", "cross_check": "checksum and syndrome agree"},
                {"member_offset_bytes": 8192, "len_bytes": 4096, "found": "read error",
                 "action": "unrepairable", "cross_check": null},
             ]},
            {"index": 0, "id": null, "path": null, "total": 1, "repaired": 1,
             "first": [{"member_offset_bytes": 0, "len_bytes": 4096, "found": "copy differs",
                        "action": "repaired from another copy", "cross_check": null}]},
        ]})
    }

    #[test]
    fn scrub_lists_each_members_findings_and_what_was_not_listed() {
        assert_eq!(
            finding_lines(&scrub()),
            "  d1 (member 1, /srv/d1.img): 3 bad, 2 repaired\n\
             \x20   member offset 2113536 (+4096): checksum mismatch; rebuilt from parity (checksum and syndrome agree)\n\
             \x20   member offset 8192 (+4096): read error; unrepairable\n\
             \x20   … 1 more not listed\n\
             \x20 member 0 (member 0): 1 bad, 1 repaired\n\
             \x20   member offset 0 (+4096): copy differs; repaired from another copy\n"
        );
        assert_eq!(finding_lines(&json!({"findings": []})), "");
    }

    #[test]
    fn status_counts_findings_per_member() {
        assert_eq!(
            status_line(&scrub()),
            "  scrub found: d1 3 bad (2 repaired), member 0 1 bad (1 repaired) (`nbraid scrub --follow` lists where)\n"
        );
        assert_eq!(status_line(&Value::Null), "");
    }

    /// Skipped stripes say why: a degraded RAID 5 skips every stripe for want of
    /// redundancy, which must not read as a clean scrub.
    #[test]
    fn skipped_stripes_say_why() {
        let none = json!({"skipped": 0, "skipped_no_redundancy": 0, "skipped_stale": 0});
        assert_eq!(skipped_why(&none), "");
        assert_eq!(skipped_line(&none), "");
        let degraded = json!({"skipped": 120, "skipped_no_redundancy": 120, "skipped_stale": 0});
        assert_eq!(
            skipped_line(&degraded),
            "  scrub skipped 120 parity stripes or mirror blocks, not checked (120 with no redundancy left: failed members under them leave nothing to compare them against)\n"
        );
        let both = json!({"skipped": 3, "skipped_no_redundancy": 1, "skipped_stale": 2});
        assert!(
            skipped_why(&both).ends_with(
                "; 2 whose parity is stale (a write failed beyond what the group tolerates))"
            ),
            "{}",
            skipped_why(&both)
        );
        // An older daemon sends no reasons: the count alone.
        let old = json!({"skipped": 4});
        assert_eq!(
            skipped_line(&old),
            "  scrub skipped 4 parity stripes or mirror blocks, not checked\n"
        );
    }
}
