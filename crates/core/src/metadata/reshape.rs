//! The reshape record: what a volume record carries while the volume is being reshaped —
//! the tree it is moving into, the checkpointed position (every logical byte below it is in
//! the new tree, the rest in the old one), and the critical-section backup
//! (`nbraid_layout::Reshape` decides which windows need one; docs/FORMAT.md, "Reshape").
//!
//! The bytes are `superblock/wire.rs`'s (format version 3); what a checksum cannot prove is
//! checked here, against the geometry: the new tree uses every member once and holds at
//! least the old capacity, the position and the backed-up window lie on whole stripes of
//! both trees, inside the volume. A record that fails is refused by name, never followed.

use super::MetadataError;
use super::{Area, VolumeRecord};
use nbraid_layout::{Node, Reshape};

/// A reshape in progress, as one member's record holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReshapeRecord {
    /// The tree the volume is moving into; leaves number the record's `members` (the old
    /// tree's roles keep their numbers, added members follow).
    pub new_tree: Node,
    /// Every logical byte below it lives in `new_tree`, every byte at or above it in the
    /// record's `tree`. A position of [`Reshape`] (whole stripes of both trees, or the end).
    pub position_bytes: u64,
    /// Where this member keeps its share of the critical-section backup (outside its
    /// regions, after the superblock copies, whole 4 KiB blocks), if it keeps one.
    pub backup_area: Option<Area>,
    /// The window whose old bytes the backup holds, while it holds one: a restart copies
    /// that window from the backup, not from the old tree.
    pub backup_window: Option<BackupWindow>,
}

/// `[start_bytes, start_bytes + len_bytes)` of the volume's logical address space.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackupWindow {
    pub start_bytes: u64,
    pub len_bytes: u64,
}

fn invalid(detail: String) -> MetadataError {
    MetadataError::Invalid {
        what: "reshape record",
        detail,
    }
}

impl ReshapeRecord {
    /// The two trees as a [`Reshape`] (refused when the new tree holds less).
    pub fn reshape(&self, old_tree: &Node) -> Result<Reshape, MetadataError> {
        Reshape::new(old_tree.clone(), self.new_tree.clone()).map_err(|e| invalid(e.to_string()))
    }

    /// What two records of one commit (one event count) must say alike: the position, the
    /// backed-up window and the new tree (the backup area is each member's own). Every
    /// change of them is a commit of its own, so records of one event that differ hold a
    /// value no commit wrote, and which of them is true cannot be told.
    pub fn differs_in_commit(&self, other: &ReshapeRecord) -> Option<String> {
        if self.position_bytes != other.position_bytes {
            return Some(format!(
                "position {} against {}",
                self.position_bytes, other.position_bytes
            ));
        }
        if self.backup_window != other.backup_window {
            return Some(format!(
                "backed-up window {:?} against {:?}",
                self.backup_window, other.backup_window
            ));
        }
        (self.new_tree != other.new_tree).then(|| "new tree".to_string())
    }

    /// What a checksum cannot prove, against the record's `old_tree` over `members` members:
    /// every member in the new tree once and in the old at most once, a position and a
    /// backed-up window of the reshape (a role without an area keeps its share in the pool on
    /// an added member: `reshape_backup.rs`).
    pub fn check(&self, old_tree: &Node, members: usize) -> Result<(), MetadataError> {
        let uses = |tree: &Node| {
            let mut n = vec![0u32; members];
            tree.visit_members(&mut |m| n[m.index] += 1);
            n
        };
        if let Some(i) = uses(&self.new_tree).iter().position(|&n| n != 1) {
            return Err(invalid(format!(
                "member {i} appears {} times in the new tree (exactly once)",
                uses(&self.new_tree)[i]
            )));
        }
        if let Some(i) = uses(old_tree).iter().position(|&n| n > 1) {
            return Err(invalid(format!(
                "member {i} appears more than once in the old tree"
            )));
        }
        let r = self.reshape(old_tree)?;
        if !r.is_position(self.position_bytes) {
            return Err(invalid(format!(
                "position {} is not one of the reshape's (multiples of {} bytes up to {})",
                self.position_bytes,
                r.unit(),
                r.capacity()
            )));
        }
        if let Some(w) = self.backup_window {
            let end = w.start_bytes.checked_add(w.len_bytes);
            let fits = w.start_bytes == self.position_bytes
                && w.len_bytes > 0
                && end.is_some_and(|e| r.is_position(e));
            if !fits {
                return Err(invalid(format!(
                    "backed-up window {}+{} is not the window at position {}",
                    w.start_bytes, w.len_bytes, self.position_bytes
                )));
            }
        }
        Ok(())
    }

    /// This member's regions in the new tree (role `role`): metadata areas must stay
    /// outside them as outside the old tree's.
    pub fn regions_of(&self, role: usize) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        self.new_tree.visit_members(&mut |m| {
            if m.index == role {
                out.push((m.start, m.len));
            }
        });
        out
    }
}

/// The reshape as the records hold it: shared by every role but its backup area.
#[derive(Clone, Debug)]
pub(super) struct RecordedReshape {
    pub(super) new_tree: Node,
    pub(super) position_bytes: u64,
    pub(super) backup_window: Option<BackupWindow>,
    /// By role (`None` for a role of the old tree: its share is in the pool, see
    /// `reshape_backup.rs`).
    pub(super) areas: Vec<Option<Area>>,
    /// By role: whether its record carries the reshape (not: its member missed the start).
    pub(super) recorded: Vec<bool>,
}

impl RecordedReshape {
    /// From the newest record, each role's area from its own record.
    pub(super) fn from_records(
        newest: &ReshapeRecord,
        by_role: &[Option<super::VolumeRecord>],
    ) -> RecordedReshape {
        RecordedReshape {
            new_tree: newest.new_tree.clone(),
            position_bytes: newest.position_bytes,
            backup_window: newest.backup_window,
            areas: by_role
                .iter()
                .map(|r| r.as_ref().and_then(|r| r.reshape.as_ref()?.backup_area))
                .collect(),
            recorded: by_role
                .iter()
                .map(|r| r.as_ref().is_some_and(|r| r.reshape.is_some()))
                .collect(),
        }
    }

    /// Role `role`'s record of the reshape.
    pub(super) fn record_for(&self, role: usize) -> ReshapeRecord {
        ReshapeRecord {
            new_tree: self.new_tree.clone(),
            position_bytes: self.position_bytes,
            backup_area: self.areas.get(role).copied().flatten(),
            backup_window: self.backup_window,
        }
    }
}

/// Whether `r` is one commit behind `newest` and that commit was the start of the reshape
/// `newest` records (a torn start: `reshape_run.rs` writes it to the added members, then to
/// the old ones). Its record names no reshape and the same tree, the newest one a reshape at
/// position 0 with nothing backed up — nothing has moved — and a member list that extends
/// `r`'s (the same ids by role, the added members after them). Such a member holds
/// everything the newest record covers: it is current, its list one commit short.
pub(super) fn missed_only_the_start(newest: &VolumeRecord, r: &VolumeRecord) -> bool {
    let started = newest
        .reshape
        .as_ref()
        .is_some_and(|s| s.position_bytes == 0 && s.backup_window.is_none());
    let ids = |v: &VolumeRecord| v.members.iter().map(|m| m.uuid).collect::<Vec<_>>();
    started
        && r.reshape.is_none()
        && r.events + 1 == newest.events
        && r.tree == newest.tree
        && newest.members.len() > r.members.len()
        && ids(newest).starts_with(&ids(r))
}

#[cfg(test)]
mod tests {
    use super::*;
    use nbraid_layout::{Level, ParityLayout, Region, Shape};

    fn raid5(members: usize) -> Node {
        Shape::new(Level::Raid5, members, None, 4096, ParityLayout::default())
            .unwrap()
            .build(&vec![
                Region {
                    start: 1 << 20,
                    len: 64 * 4096
                };
                members
            ])
            .unwrap()
    }

    fn record(position_bytes: u64) -> ReshapeRecord {
        ReshapeRecord {
            new_tree: raid5(4),
            position_bytes,
            backup_area: Some(Area {
                offset: 512 << 10,
                len: 64 << 10,
            }),
            backup_window: None,
        }
    }

    #[test]
    fn positions_and_windows_lie_on_whole_stripes_of_both_trees() {
        let old = raid5(3);
        let unit = 6 * 4096;
        assert_eq!(record(0).check(&old, 4), Ok(()));
        assert_eq!(record(5 * unit).check(&old, 4), Ok(()));
        assert_eq!(record(old.capacity()).check(&old, 4), Ok(()));
        let e = record(4096).check(&old, 4).unwrap_err().to_string();
        assert!(
            e.contains("position 4096 is not one of the reshape's"),
            "{e}"
        );
        let e = record(old.capacity() + unit).check(&old, 4).unwrap_err();
        assert!(e.to_string().contains("position"), "{e}");

        let mut r = record(unit);
        r.backup_window = Some(BackupWindow {
            start_bytes: unit,
            len_bytes: 2 * unit,
        });
        assert_eq!(r.check(&old, 4), Ok(()));
        r.backup_window = Some(BackupWindow {
            start_bytes: 0,
            len_bytes: unit,
        });
        assert!(r
            .check(&old, 4)
            .unwrap_err()
            .to_string()
            .contains("backed-up window"));
        r.backup_window = Some(BackupWindow {
            start_bytes: unit,
            len_bytes: u64::MAX,
        });
        assert!(r.check(&old, 4).is_err(), "an overflowing window is named");
        r.backup_window = Some(BackupWindow {
            start_bytes: unit,
            len_bytes: unit,
        });
        r.backup_area = None;
        assert_eq!(r.check(&old, 4), Ok(()), "its share is in the pool");
    }

    #[test]
    fn the_new_tree_uses_every_member_once_and_does_not_shrink() {
        let old = raid5(3);
        let e = record(0).check(&old, 5).unwrap_err().to_string();
        assert!(
            e.contains("member 4 appears 0 times in the new tree"),
            "{e}"
        );
        let mut r = record(0);
        r.new_tree = raid5(3);
        let e = r.check(&raid5(4), 4).unwrap_err().to_string();
        assert!(
            e.contains("member 3 appears 0 times in the new tree"),
            "{e}"
        );
        let mut r = record(0);
        r.new_tree = Shape::new(Level::Raid5, 4, None, 4096, ParityLayout::default())
            .unwrap()
            .build(
                &[Region {
                    start: 1 << 20,
                    len: 16 * 4096,
                }; 4],
            )
            .unwrap();
        let e = r.check(&old, 4).unwrap_err().to_string();
        assert!(e.contains("would shrink the volume"), "{e}");
    }

    /// Role 0's record of a RAID 5 volume over `members` members (ids 1, 2, …).
    fn volume_record(members: usize, events: u64, reshape: Option<ReshapeRecord>) -> VolumeRecord {
        use crate::metadata::{MemberEntry, Uuid};
        let members = (0..members)
            .map(|i| MemberEntry::active(Uuid([i as u8 + 1; 16])))
            .collect();
        VolumeRecord {
            events,
            clean: true,
            reshape,
            ..VolumeRecord::plain(Uuid([9; 16]), "vol", 0, members, raid5(3))
        }
    }

    #[test]
    fn a_member_that_missed_only_the_start_of_a_reshape_is_recognised() {
        let started = volume_record(4, 6, Some(record(0)));
        let missed = volume_record(3, 5, None);
        assert!(missed_only_the_start(&started, &missed));

        let two_behind = volume_record(3, 4, None);
        assert!(!missed_only_the_start(&started, &two_behind), "stale");
        let mut moved = started.clone();
        moved.reshape = Some(record(6 * 4096));
        assert!(
            !missed_only_the_start(&moved, &missed),
            "past position 0 a checkpoint was missed too"
        );
        let mut backed_up = started.clone();
        backed_up.reshape.as_mut().unwrap().backup_window = Some(BackupWindow {
            start_bytes: 0,
            len_bytes: 6 * 4096,
        });
        assert!(
            !missed_only_the_start(&backed_up, &missed),
            "a backup commit"
        );
        let mut replaced = missed.clone();
        replaced.members[1].uuid = crate::metadata::Uuid([7; 16]);
        assert!(
            !missed_only_the_start(&started, &replaced),
            "another member in role 1"
        );
        let same_list = volume_record(4, 5, None);
        assert!(
            !missed_only_the_start(&started, &same_list),
            "no members added"
        );
        let own_reshape = volume_record(3, 5, Some(record(0)));
        assert!(!missed_only_the_start(&started, &own_reshape));
        let mut other_tree = missed.clone();
        other_tree.tree = raid5(4);
        assert!(!missed_only_the_start(&started, &other_tree));
        let plain = volume_record(4, 6, None);
        assert!(
            !missed_only_the_start(&plain, &missed),
            "no reshape recorded"
        );
    }
}
