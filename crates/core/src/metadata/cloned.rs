//! A disk copied from a serving member (`dd`, a cloned VM image) carries that member's id.
//! Taken beside the original — as a spare or a replacement — it stood by unwritten, and the
//! next start found two disks claiming one role and refused the volume ("members 1 and 3
//! both claim role 1") after `nbraid add` had said it was taken. It is refused when offered.

use super::error::ArrayError;
use super::member_meta::MemberMeta;
use super::parts::Parts;
use super::{Probe, Uuid};
use std::sync::Arc;

/// The role among `serving` (role, the id its disk carries) whose id is `id`: the disk
/// carrying `id` is a copy of that role's.
pub(super) fn copied_role(id: Uuid, serving: &[(usize, Uuid)]) -> Option<usize> {
    serving.iter().find(|(_, u)| *u == id).map(|(r, _)| *r)
}

/// The id `meta`'s superblock carries: as last written when no write holds it, else as
/// loaded.
fn carried_id(meta: &MemberMeta) -> Option<Uuid> {
    if let Some(sb) = meta.sb.try_lock() {
        return sb.as_ref().map(|sb| sb.member);
    }
    match meta.probe() {
        Probe::Superblock(sb, _) => Some(sb.member),
        _ => None,
    }
}

/// Refuses `meta` when it is a copy of a disk serving a role of this volume (another disk
/// carrying the same id).
pub(super) fn refuse_a_copy(p: Parts<'_>, meta: &MemberMeta) -> Result<(), ArrayError> {
    let Some(id) = carried_id(meta) else {
        return Ok(());
    };
    let serving: Vec<(usize, Uuid)> = (p.records.metas().iter().enumerate())
        .filter(|&(r, _)| p.volume.member_is_current(r))
        .filter_map(|(r, m)| m.as_ref().map(|m| (r, m)))
        .filter(|(_, m)| !Arc::ptr_eq(m.member(), meta.member()))
        .filter_map(|(r, m)| carried_id(m).map(|u| (r, u)))
        .collect();
    let Some(role) = copied_role(id, &serving) else {
        return Ok(());
    };
    let original = p.records.meta(role).map(|m| m.member().name().to_string());
    Err(p.refuse(format!(
        "`{}` is a copy of member {role} (`{}`): it carries that member's id, and two disks \
         with one id would stop the next start (both claim role {role}); blank its first MiB \
         to use it",
        meta.member().name(),
        original.unwrap_or_default()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_disk_carrying_a_serving_roles_id_is_that_roles_copy() {
        let (a, b, c) = (Uuid([1; 16]), Uuid([2; 16]), Uuid([3; 16]));
        let serving = [(0, a), (2, b)];
        assert_eq!(copied_role(b, &serving), Some(2));
        assert_eq!(copied_role(a, &serving), Some(0));
        assert_eq!(
            copied_role(c, &serving),
            None,
            "an id no serving disk carries"
        );
        assert_eq!(copied_role(a, &[]), None);
    }
}
