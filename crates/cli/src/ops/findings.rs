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
}
