//! Removing a failed member from an [`Array`] (mdadm --remove).
//!
//! The records name no member in the role any more (a nil id, recorded failed) — committed,
//! so the event counter moves on — and the slot lets the member go (it keeps a placeholder
//! that fails every request), so the file or device can be pulled. The removed member's own
//! superblock is left as it was: the records no longer name its id, so assembly ignores it
//! if it comes back (wipe it to use it again, e.g. as a spare). Only a failed member can be
//! removed: taking out an active one (or one being rebuilt into its role) would take
//! redundancy away behind the operator's back — fail it first.

use super::array::{Array, ArrayError};
use super::member_meta::MemberMeta;
use super::{MemberEntry, RecordedState, Uuid};
use crate::absent::AbsentMember;
use std::sync::Arc;

impl Array {
    /// Whether a member stands in role `role` (false: missing at assembly, or removed).
    pub fn has_member(&self, role: usize) -> bool {
        self.records
            .metas
            .read()
            .get(role)
            .is_some_and(Option::is_some)
    }

    /// The member (and superblock) standing in role `role`: shared by every volume on the
    /// member file, so a volume that takes the file too writes through the same one.
    pub fn member_meta(&self, role: usize) -> Option<Arc<MemberMeta>> {
        self.records.metas.read().get(role).cloned().flatten()
    }

    /// Takes failed role `role`'s member out of the array (see the module); returns its name.
    pub async fn remove_member(&self, role: usize) -> Result<String, ArrayError> {
        let refuse = |detail: String| ArrayError::Metadata {
            volume: self.name().to_string(),
            detail,
        };
        let v = self.volume();
        if role >= v.member_count() {
            return Err(refuse(format!(
                "member {role} does not exist (the volume has {})",
                v.member_count()
            )));
        }
        let mut rec = self.records.recorded.lock().await;
        let name = v.member(role).name().to_string();
        if !v.member_is_failed(role) {
            let what = if v.member_is_current(role) {
                "active: removing it would take away redundancy the volume has now"
            } else {
                "being rebuilt into its place"
            };
            return Err(refuse(format!(
                "member {role} (`{name}`) is {what}; fail it first (nbraid fail), then remove it"
            )));
        }
        if self.records.metas.read()[role].is_none() {
            return Err(refuse(format!(
                "member {role} has no member to remove (missing, or removed already)"
            )));
        }
        let placeholder = Arc::new(AbsentMember::new(
            format!("role {role} (removed)"),
            v.member(role).len(),
        ));
        v.detach_member(role, placeholder)?;
        self.records.metas.write()[role] = None;
        self.bitmap_areas.write()[role] = None;
        self.heal.forget(role);
        rec.members[role] = MemberEntry {
            uuid: Uuid::default(),
            state: RecordedState::Failed,
        };
        // Added at run time: no longer a member, not to be opened at the next start.
        rec.added_paths.retain(|p| *p != name);
        self.commit(&mut rec).await?;
        tracing::warn!(
            "volume `{}`: member {role} (`{name}`) removed; the role waits for a new member",
            self.name()
        );
        Ok(name)
    }
}
