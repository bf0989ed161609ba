//! Failed roles no spare can help: nothing can rebuild them (core's
//! [`nbraid_core::rebuild::rebuild_blocker`], the rule spares and the rebuild pass follow), so
//! `status` and `rebuild` say why — which group is beyond its tolerance — rather than ask for
//! a spare that would stand by unused.

use super::volume::ControlVolume;
use nbraid_core::rebuild::{rebuild_blocker, RebuildBlocker};
use serde_json::{json, Value};

/// Every failed role of volume `v` nothing can rebuild: its role and id, and why (the group
/// beyond its tolerance, by roles and ids), as `status` and `rebuild` give them.
pub(super) fn unrebuildable_json(v: &ControlVolume) -> Vec<Value> {
    let array = v.array();
    let vol = array.volume();
    let tree = vol.geometry().root();
    let failed = |r: usize| vol.member_is_failed(r);
    let ids = v.member_ids();
    let id = |r: usize| ids.get(r).cloned().unwrap_or_else(|| format!("role {r}"));
    (0..vol.member_count())
        .filter(|&r| failed(r))
        .filter_map(|r| rebuild_blocker(tree, r, &failed).map(|b| (r, b)))
        .map(|(r, b)| blocker_json(r, &id(r), &b, &id))
        .collect()
}

/// One role nothing can rebuild (`id`: its member's), and why in words (`reason`).
fn blocker_json(
    role: usize,
    id: &str,
    b: &RebuildBlocker,
    id_of: &dyn Fn(usize) -> String,
) -> Value {
    match b {
        RebuildBlocker::GroupBeyondTolerance {
            members,
            lost,
            tolerates,
            children_lost,
        } => {
            let names = |rs: &[usize]| rs.iter().map(|&r| id_of(r)).collect::<Vec<_>>();
            let level = match tolerates {
                1 => "RAID 5",
                2 => "RAID 6",
                _ => "parity",
            };
            let reason = format!(
                "its {level} group ({}) lost {children_lost} of its parts ({}), beyond the {tolerates} it tolerates: the group takes no writes, so nothing can rebuild its members (bring lost ones back until it is within its tolerance; then a spare can rebuild the rest)",
                names(members).join(", "),
                names(lost).join(", "),
            );
            json!({
                "role": role, "id": id, "reason": reason,
                "group": {
                    "roles": members, "ids": names(members),
                    "lost_roles": lost, "lost_ids": names(lost),
                    "tolerates": tolerates, "lost": children_lost,
                },
            })
        }
        RebuildBlocker::NoRedundancy => json!({
            "role": role, "id": id, "group": null,
            "reason": "nothing redundant holds its bytes (no mirror copy or parity group over it survives)",
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_beyond_its_tolerance_is_named_by_its_members() {
        let b = RebuildBlocker::GroupBeyondTolerance {
            members: vec![0, 1, 2],
            lost: vec![0, 1],
            tolerates: 1,
            children_lost: 2,
        };
        let ids = ["a0", "a1", "a2"];
        let v = blocker_json(0, "a0", &b, &|r| ids[r].to_string());
        assert_eq!(v["group"]["lost_ids"], json!(["a0", "a1"]));
        let reason = v["reason"].as_str().unwrap();
        assert!(
            reason.starts_with("its RAID 5 group (a0, a1, a2) lost 2 of its parts (a0, a1), beyond the 1 it tolerates"),
            "{reason}"
        );
    }
}
