//! Copies added to a RAID 1 (`nbraid apply` with more members in a `raid1` volume, md's
//! `--grow --raid-devices`): each added member takes a new role of the mirror, recorded
//! *rebuilding* at checkpoint 0, and is rebuilt from the copies as a spare rebuilt into a
//! failed role is — nothing of the volume moves, so there is no reshape record and no
//! backup. It gets its areas where its peers keep theirs (`reshape_areas`: the bitmap's
//! bits, a cleared block-checksum area). Until the rebuild passes a byte, nothing reads it
//! from the new copy; writes go to every copy.
//!
//! **One commit** (event counter +1), with the volume quiet, recorded clean and flushed:
//! the old members first, then the added ones. A power loss mid-way leaves either old members
//! one event behind (stale: resynced from the others, which hold the same bytes — the volume
//! was clean) or an added member without its record (its role absent: it held nothing yet,
//! and the volume runs on the old copies, degraded by that role until it is replaced). Never
//! an added member's record ahead of every old one, which would make the copies that hold
//! the data look stale next to one that holds none.

use super::error::ArrayError;
use super::member_meta::MemberMeta;
use super::parts::Parts;
use super::{MemberEntry, RecordedState, VolumeRecord};
use nbraid_layout::{MemberRegion, Node};
use std::sync::Arc;

/// Records `new_tree` — the volume's mirror with the members of `added` as new copies after
/// the old ones — and the added roles rebuilding from 0. The volume must be quiet, recorded
/// clean, every role current; open it again afterwards (the open resumes the rebuilds).
pub(super) async fn start(
    p: Parts<'_>,
    new_tree: Node,
    added: Vec<Arc<MemberMeta>>,
) -> Result<(), ArrayError> {
    let mut rec = super::reshape_run::flushed_for_a_new_shape(p).await?;
    let old = p.volume.geometry().root().clone();
    let old_roles = rec.members.len();
    if let Some(why) = copies_only(&old, &new_tree, added.len()) {
        return Err(p.refuse(why));
    }
    for meta in &added {
        let sb = meta.sb.lock().await;
        if (sb.as_ref()).is_some_and(|sb| sb.volumes.iter().any(|v| v.name == p.name())) {
            return Err(p.refuse(format!(
                "`{}` already carries a record of this volume",
                meta.member().name()
            )));
        }
    }
    let mut metas = super::reshape_run::current_members(p, &rec.members)?;
    metas.extend(added.iter().cloned());
    let none = vec![None; metas.len()];
    let areas = super::reshape_areas::for_new_shape(p, &new_tree, &metas, old_roles, &none).await?;
    let mut members = rec.members.clone();
    for meta in &added {
        let uuid = super::heal::joining_id(p, meta, &members).await?;
        let state = RecordedState::Rebuilding {
            checkpoint_bytes: 0,
        };
        members.push(MemberEntry {
            uuid,
            state,
            unacked_since_failed: false,
            failed_cause: None,
        });
    }
    rec.events += 1;
    rec.scrub = None;
    // From the first old member's new record on, this array's records are stale.
    p.records.retire();
    for (r, meta) in metas.iter().enumerate().take(old_roles) {
        let (id, name) = (p.id(), p.name().to_string());
        let (events, members, tree, a) = (rec.events, members.clone(), new_tree.clone(), areas[r]);
        meta.update(move |sb| {
            let mine = |v: &&mut VolumeRecord| v.array == id && v.name == name;
            if let Some(v) = sb.volumes.iter_mut().find(mine) {
                (v.bitmap, v.ppl, v.checksums) = (a.bitmap, a.ppl, a.checksums);
                (v.events, v.members, v.tree, v.scrub) = (events, members, tree, None);
            }
        })
        .await
        .map_err(|e| p.refuse(format!("`{}`: {e}", meta.member().name())))?;
    }
    let mut next = rec.clone();
    (next.members, next.tree) = (members.clone(), new_tree.clone());
    for (i, meta) in added.iter().enumerate() {
        let role = old_roles + i;
        let a = areas[role];
        let record = next.for_newcomer((p.id(), p.name()), role, (a.bitmap, a.ppl, a.checksums));
        (meta.join(members[role].uuid, record).await)
            .map_err(|e| p.refuse(format!("`{}`: {e}", meta.member().name())))?;
    }
    Ok(())
}

/// Whether member record `r` missed only a copies commit that `newest` records (torn among
/// the old members: `start` writes them one by one): neither names a reshape, `r` is one
/// event behind, the newest member list extends `r`'s with roles rebuilding from 0, and the
/// newest tree is `r`'s mirror with those copies added. Such a member holds everything the
/// volume holds (it was clean and quiet): it is current, its list one commit short.
pub(super) fn missed_only_the_copies(newest: &VolumeRecord, r: &VolumeRecord) -> bool {
    let ids = |v: &VolumeRecord| v.members.iter().map(|m| m.uuid).collect::<Vec<_>>();
    let added = newest.members.len().saturating_sub(r.members.len());
    let fresh = RecordedState::Rebuilding {
        checkpoint_bytes: 0,
    };
    newest.reshape.is_none()
        && r.reshape.is_none()
        && r.events + 1 == newest.events
        && added > 0
        && ids(newest).starts_with(&ids(r))
        && newest.members[r.members.len()..]
            .iter()
            .all(|m| m.state == fresh)
        && copies_only(&r.tree, &newest.tree, added).is_none()
}

/// Why `new` is not `old` with `added` copies after its own (`None`: it is): both mirrors
/// of member regions, the old copies kept as they are (role, start, length), the added ones
/// numbered after them, of no less length. Pure.
pub(super) fn copies_only(old: &Node, new: &Node, added: usize) -> Option<String> {
    let (Node::Mirror(_), Node::Mirror(_)) = (old, new) else {
        return Some("copies are added to a RAID 1 only".into());
    };
    let leaves = |n: &Node| -> Option<Vec<MemberRegion>> {
        let mut out = Vec::new();
        for c in n.children() {
            let Node::Member(m) = c else { return None };
            out.push(m.clone());
        }
        Some(out)
    };
    let (Some(was), Some(now)) = (leaves(old), leaves(new)) else {
        return Some("copies are added to a mirror of member regions only".into());
    };
    if now.len() != was.len() + added || added == 0 {
        return Some(format!(
            "the new mirror has {} copies where {} and {} added make {}",
            now.len(),
            was.len(),
            added,
            was.len() + added
        ));
    }
    if now[..was.len()] != was[..] {
        return Some("the old copies must keep their roles and regions".into());
    }
    let len = was.iter().map(|m| m.len).min().unwrap_or(0);
    let fresh = &now[was.len()..];
    let misplaced = |(i, m): &(usize, &MemberRegion)| m.index != was.len() + i || m.len < len;
    if let Some((_, m)) = fresh.iter().enumerate().find(misplaced) {
        return Some(format!(
            "added copy role {} ({} bytes) must follow the old roles and hold {len} bytes",
            m.index, m.len
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use nbraid_layout::{Level, ParityLayout, Region, Shape};

    fn tree(level: Level, n: usize, len: u64) -> Node {
        let region = Region {
            start: 1 << 20,
            len,
        };
        let shape = Shape::new(level, n, None, 64 << 10, ParityLayout::default()).unwrap();
        shape.build(&vec![region; n]).unwrap()
    }

    #[test]
    fn a_mirror_with_copies_after_its_own_is_a_copy_move() {
        let (two, three) = (
            tree(Level::Raid1, 2, 8 << 20),
            tree(Level::Raid1, 3, 8 << 20),
        );
        assert_eq!(copies_only(&two, &three, 1), None);
        assert!(copies_only(&two, &three, 2).is_some(), "counts must agree");
        assert!(copies_only(&two, &two, 0).is_some(), "nothing added");
        let bigger = tree(Level::Raid1, 3, 16 << 20);
        assert!(copies_only(&two, &bigger, 1).is_some(), "old regions kept");
        let r5 = tree(Level::Raid5, 3, 8 << 20);
        assert!(copies_only(&two, &r5, 1).is_some(), "a mirror only");
    }
}
