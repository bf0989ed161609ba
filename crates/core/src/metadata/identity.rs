//! Whether storage re-opened behind the volumes' back is still the member: a remote export
//! whose server restarted may come back on a blank file of the same size, on another
//! member's file or on a stale copy of its own, and nothing about the export says so. Its
//! superblock does: the member's records as last written (or read) are what it must hold
//! ([`same_member`]). [`HeldIdentity`] is the check `MemberMeta` gives its member
//! ([`crate::member::IdentityCheck`]): the storage runs it before serving on a re-opened
//! connection.

use super::{read_superblock, Found, Superblock, SuperblockIoError};
use crate::member::{IdentityCheck, IdentityFault, Member};
use futures::future::BoxFuture;
use futures::lock::Mutex as AsyncMutex;
use futures::FutureExt;
use parking_lot::Mutex;
use std::sync::Arc;

/// The check against a member's superblock as its records last wrote or read it (shared
/// with the member's `MemberMeta`s).
pub(super) struct HeldIdentity {
    pub(super) sb: Arc<AsyncMutex<Option<Superblock>>>,
    pub(super) lost: Arc<Mutex<Option<LostDisk>>>,
}

/// The member's storage was found not as its records last wrote it: what it held, and the
/// volumes on it that have not re-added it since. Their re-add rebuilds it whole: a stale
/// copy lacks writes made before it left, which no bitmap marks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct LostDisk {
    pub found: String,
    pub unjudged: Vec<String>,
}

impl LostDisk {
    /// Volume `name` re-adds the member: whether it was found not as written (why), and
    /// what is left for the other volumes on it (`None`: nothing).
    pub(super) fn judged(this: Option<LostDisk>, name: &str) -> (Option<String>, Option<LostDisk>) {
        let Some(mut lost) = this else {
            return (None, None);
        };
        let Some(i) = lost.unjudged.iter().position(|v| v == name) else {
            return (None, Some(lost));
        };
        lost.unjudged.remove(i);
        let found = Some(lost.found.clone());
        (found, (!lost.unjudged.is_empty()).then_some(lost))
    }
}

impl IdentityCheck for HeldIdentity {
    fn verify<'a>(&'a self, disk: &'a dyn Member) -> BoxFuture<'a, Result<(), IdentityFault>> {
        async move {
            // Held across the read: no update of the records lands between it and the
            // comparison (an update on another connection would look like a disk ahead).
            let held = self.sb.lock().await;
            // Nothing known yet (unreachable at start, blank until created): the re-add or
            // the creation reads it.
            let Some(held) = held.as_ref() else {
                return Ok(());
            };
            let verdict = match read_superblock(disk).await {
                Ok(found) => same_member(held, &found).map_err(IdentityFault::NotTheMember),
                Err(SuperblockIoError::Member(e)) => Err(IdentityFault::Unreadable(e.to_string())),
                Err(e) => Err(IdentityFault::NotTheMember(format!(
                    "a disk whose superblocks are unusable ({e})"
                ))),
            };
            match &verdict {
                Ok(()) => *self.lost.lock() = None,
                Err(IdentityFault::NotTheMember(found)) => {
                    *self.lost.lock() = Some(LostDisk {
                        found: found.clone(),
                        unjudged: held.volumes.iter().map(|v| v.name.clone()).collect(),
                    })
                }
                Err(IdentityFault::Unreadable(_)) => {}
            }
            verdict
        }
        .boxed()
    }
}

/// Whether `found` on a member's storage is the member whose superblock is `held` (as last
/// written or read): the same member id, each volume's record in the same role, and the
/// same generation — behind is a stale copy (it missed writes the array made), ahead was
/// written by someone else. `Err`: what it is instead, for the operator.
pub fn same_member(held: &Superblock, found: &Found) -> Result<(), String> {
    let sb = match found {
        Found::Blank => return Err("a blank disk (no nbraid superblock)".into()),
        Found::Superblock(sb, _) => sb,
    };
    if sb.member != held.member {
        return Err(another_disk(held, sb));
    }
    for h in &held.volumes {
        let Some(r) = sb.volumes.iter().find(|r| r.array == h.array) else {
            return Err(format!(
                "a stale copy of this member: no record of volume `{}`",
                h.name
            ));
        };
        if r.role != h.role {
            return Err(format!(
                "this member's id as role {} of volume `{}`, where it is role {}",
                r.role, h.name, h.role
            ));
        }
        if r.events < h.events {
            return Err(format!(
                "a stale copy of this member: volume `{}` at event {}, behind the array's {}",
                h.name, r.events, h.events
            ));
        }
    }
    if sb.generation < held.generation {
        return Err(format!(
            "a stale copy of this member: superblock generation {}, behind the {} last written",
            sb.generation, held.generation
        ));
    }
    if sb.generation > held.generation {
        return Err(format!(
            "this member written by someone else: superblock generation {}, ahead of the {} \
             last written here",
            sb.generation, held.generation
        ));
    }
    Ok(())
}

/// What a superblock of another member id is, as seen from `held`'s volumes.
fn another_disk(held: &Superblock, sb: &Superblock) -> String {
    let ours = sb.volumes.iter().find_map(|r| {
        let h = held.volumes.iter().find(|h| h.array == r.array)?;
        Some((r, h))
    });
    match ours {
        Some((r, h)) => format!(
            "another member of volume `{}`: role {} (member id {}), where this member is role {}",
            h.name, r.role, sb.member, h.role
        ),
        None => {
            let names: Vec<String> = sb.volumes.iter().map(|r| format!("`{}`", r.name)).collect();
            format!(
                "another disk: member id {} with records of {}, none of this member's volumes",
                sb.member,
                match names.is_empty() {
                    true => "no volume".to_string(),
                    false => names.join(", "),
                }
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{MemberEntry, Uuid, VolumeRecord};
    use super::*;
    use nbraid_layout::Node;

    const MIB: u64 = 1 << 20;

    fn record(array: u8, name: &str, role: u32, events: u64) -> VolumeRecord {
        let leaves = (0..2).map(|i| Node::member(i, MIB, 8 * MIB)).collect();
        let members = (0..2)
            .map(|i| MemberEntry::active(Uuid([10 + i; 16])))
            .collect();
        let tree = Node::mirror(leaves).unwrap();
        VolumeRecord {
            events,
            clean: true,
            ..VolumeRecord::plain(Uuid([array; 16]), name, role, members, tree)
        }
    }

    fn sb(member: u8, generation: u64, volumes: Vec<VolumeRecord>) -> Superblock {
        Superblock {
            generation,
            member: Uuid([member; 16]),
            member_bytes: 9 * MIB,
            volumes,
        }
    }

    fn found(s: Superblock) -> Found {
        Found::Superblock(s, None)
    }

    /// Member 11, role 1 of volumes `v` (array 1) and `w` (array 2): a Matrix member.
    fn held() -> Superblock {
        sb(11, 7, vec![record(1, "v", 1, 5), record(2, "w", 1, 3)])
    }

    #[test]
    fn the_member_as_last_written_is_the_member() {
        assert_eq!(same_member(&held(), &found(held())), Ok(()));
    }

    #[test]
    fn a_blank_disk_is_not_the_member() {
        let e = same_member(&held(), &Found::Blank).unwrap_err();
        assert!(e.contains("blank"), "{e}");
    }

    #[test]
    fn another_member_of_the_array_is_named_by_its_role() {
        let other = sb(10, 7, vec![record(1, "v", 0, 5), record(2, "w", 0, 3)]);
        let e = same_member(&held(), &found(other)).unwrap_err();
        assert!(e.contains("another member of volume `v`: role 0"), "{e}");
        assert!(e.contains("this member is role 1"), "{e}");
    }

    #[test]
    fn a_disk_of_other_arrays_is_named_by_their_volumes() {
        let other = sb(42, 7, vec![record(9, "x", 0, 5)]);
        let e = same_member(&held(), &found(other)).unwrap_err();
        assert!(e.contains("another disk") && e.contains("`x`"), "{e}");
    }

    #[test]
    fn a_stale_copy_is_not_the_member() {
        // Behind in one volume's events (and so in generation).
        let stale = sb(11, 6, vec![record(1, "v", 1, 4), record(2, "w", 1, 3)]);
        let e = same_member(&held(), &found(stale)).unwrap_err();
        assert!(e.contains("stale") && e.contains("behind"), "{e}");
        // The same events, an older superblock (a clean mark since).
        let older = sb(11, 6, held().volumes);
        let e = same_member(&held(), &found(older)).unwrap_err();
        assert!(e.contains("generation 6, behind the 7"), "{e}");
        // From before it joined the Matrix's second volume.
        let before = sb(11, 7, vec![record(1, "v", 1, 5)]);
        let e = same_member(&held(), &found(before)).unwrap_err();
        assert!(e.contains("no record of volume `w`"), "{e}");
    }

    #[test]
    fn a_disk_written_by_someone_else_since_is_not_the_member() {
        let ahead = sb(11, 8, held().volumes);
        let e = same_member(&held(), &found(ahead)).unwrap_err();
        assert!(e.contains("ahead"), "{e}");
    }

    #[test]
    fn every_volume_on_a_lost_disk_rebuilds_it_whole_once() {
        let lost = Some(LostDisk {
            found: "a stale copy".into(),
            unjudged: vec!["v".into(), "w".into()],
        });
        let (why, left) = LostDisk::judged(lost, "v");
        assert_eq!(why.as_deref(), Some("a stale copy"));
        // Judged once only: a later re-add of `v` is back to the rules.
        let (again, left) = LostDisk::judged(left, "v");
        assert_eq!(again, None);
        let (why, left) = LostDisk::judged(left, "w");
        assert_eq!(why.as_deref(), Some("a stale copy"));
        assert_eq!(left, None);
        assert_eq!(LostDisk::judged(None, "v"), (None, None));
    }

    #[test]
    fn the_same_id_in_another_role_is_not_the_member() {
        let moved = sb(11, 7, vec![record(1, "v", 0, 5), record(2, "w", 1, 3)]);
        let e = same_member(&held(), &found(moved)).unwrap_err();
        assert!(e.contains("role 0 of volume `v`"), "{e}");
    }
}
