//! Removing a failed member from an `Array` (mdadm --remove).
//!
//! The records name no member in the role any more (a nil id, recorded failed) — committed,
//! so the event counter moves on — and the slot lets the member go (it keeps a placeholder
//! that fails every request), so the file or device can be pulled. The removed member's own
//! superblock is left as it was: the records no longer name its id, so assembly ignores it
//! if it comes back (wipe it to use it again, e.g. as a spare). Only a failed member can be
//! removed: taking out an active one (or one being rebuilt into its role) would take
//! redundancy away behind the operator's back — fail it first.

use super::error::ArrayError;
use super::heal::Heal;
use super::parts::Parts;
use super::{MemberEntry, RecordedState, Uuid};
use crate::absent::AbsentMember;
use std::sync::Arc;

/// Takes failed role `role`'s member out of the array (see the module); returns its name.
pub(super) async fn remove_member(
    p: Parts<'_>,
    heal: &Heal,
    role: usize,
) -> Result<String, ArrayError> {
    let v = p.volume;
    if role >= v.member_count() {
        return Err(p.refuse(format!(
            "member {role} does not exist (the volume has {})",
            v.member_count()
        )));
    }
    let mut rec = p.records.lock().await;
    let name = v.member(role).name().to_string();
    if !v.member_is_failed(role) {
        let what = if v.member_is_current(role) {
            "active: removing it would take away redundancy the volume has now"
        } else {
            "being rebuilt into its place"
        };
        return Err(p.refuse(format!(
            "member {role} (`{name}`) is {what}; fail it first (nbraid fail), then remove it"
        )));
    }
    if p.records.meta(role).is_none() {
        return Err(p.refuse(format!(
            "member {role} has no member to remove (missing, or removed already)"
        )));
    }
    let placeholder = Arc::new(AbsentMember::new(
        format!("role {role} (removed)"),
        v.member(role).len(),
    ));
    v.detach_member(role, placeholder)?;
    p.records.set_meta(&rec, role, None);
    if let Some(b) = p.bitmap {
        b.set_area(role, None);
    }
    heal.forget(p, role);
    rec.members[role] = MemberEntry {
        uuid: Uuid::default(),
        state: RecordedState::Failed,
        unacked_since_failed: false,
        failed_cause: None,
    };
    // Added at run time: no longer a member, not to be opened at the next start.
    rec.added_paths.retain(|p| *p != name);
    p.records.commit(&mut rec).await?;
    tracing::warn!(
        "volume `{}`: member {role} (`{name}`) removed; the role waits for a new member",
        p.name()
    );
    Ok(name)
}
