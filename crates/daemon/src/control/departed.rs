//! Failed members whose role a spare took ([`Departures`]): the volume no longer holds them,
//! but the admin must still see them (`failed (F)` in `status`, as /proc/mdstat shows a
//! faulty device) until `nbraid remove` takes them out, or `nbraid add` brings them back.
//!
//! Each is held open until then (md holds a faulty device until `mdadm --remove`): taken out
//! of the list, its file or device is closed. The volume's known members
//! (`ControlVolume::known`) name them but hold none open.

use nbraid_core::Member;
use parking_lot::Mutex;
use serde_json::{json, Value};
use std::sync::Arc;

/// One failed member whose role a spare took.
#[derive(Clone)]
pub(super) struct Departed {
    /// The id it went by in its role (a config id, or the one given at run time).
    pub id: String,
    /// The role it held.
    pub role: usize,
    /// Its path, absolute where it is a file.
    pub path: String,
    /// The member itself, to know it again when it is added back.
    pub member: Arc<dyn Member>,
}

/// A volume's departed members, in the order they left their roles; each id at most once.
#[derive(Default)]
pub(super) struct Departures {
    list: Mutex<Vec<Departed>>,
}

impl Departures {
    /// Records `d`; one it replaces (the same member, or the same id) leaves the list first.
    pub fn record(&self, d: Departed) {
        let mut list = self.list.lock();
        list.retain(|o| o.id != d.id && !Arc::ptr_eq(&o.member, &d.member));
        list.push(d);
    }

    /// Takes the departed member named `name` (its id, or its path) out; `None`: none is.
    pub fn take(&self, name: &str) -> Option<Departed> {
        let mut list = self.list.lock();
        let at = list.iter().position(|d| d.id == name || d.path == name)?;
        Some(list.remove(at))
    }

    /// Forgets `member` (added back: it is a spare or serves a role again).
    pub fn forget(&self, member: &Arc<dyn Member>) {
        self.list.lock().retain(|d| !Arc::ptr_eq(&d.member, member));
    }

    /// The list for `status --json`.
    pub fn to_json(&self) -> Vec<Value> {
        self.list
            .lock()
            .iter()
            .map(|d| json!({ "id": d.id, "role": d.role, "path": d.path, "state": "failed" }))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nbraid_core::MemoryMember;

    fn departed(id: &str, member: &Arc<dyn Member>) -> Departed {
        Departed {
            id: id.into(),
            role: 2,
            path: format!("/srv/{id}.img"),
            member: member.clone(),
        }
    }

    #[test]
    fn a_departed_member_stays_listed_until_taken_or_added_back() {
        let a: Arc<dyn Member> = Arc::new(MemoryMember::new("a", 1 << 20));
        let b: Arc<dyn Member> = Arc::new(MemoryMember::new("b", 1 << 20));
        let gone = Departures::default();
        gone.record(departed("d2", &a));
        gone.record(departed("d4", &b));
        // The same member departing again is listed once.
        gone.record(departed("d2", &a));
        let listed = gone.to_json();
        assert_eq!(listed.len(), 2);
        assert_eq!(listed[1]["id"], "d2");
        assert_eq!(listed[1]["state"], "failed");
        assert!(gone.take("nope").is_none());
        assert_eq!(gone.take("/srv/d4.img").map(|d| d.id), Some("d4".into()));
        gone.forget(&a);
        assert!(gone.to_json().is_empty());
    }
}
