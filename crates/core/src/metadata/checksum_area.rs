//! The per-block checksum area of a volume's region on each member ([`crate::checksum`]):
//! placed and cleared at create (in the reserve the config leaves before the region, before
//! the log's reserve when there is one) or when an existing volume enables them (where the
//! member has room: [`enable`]), and turned into the engine's setup at open.

use super::member_meta::MemberMeta;
use super::{Area, ChecksumFill, RecordedState, Superblock, VolumeRecord};
use super::{METADATA_AREA_BYTES, SLOT_BYTES};
use crate::checksum::{area_bytes, place_for_existing, ChecksumArea, ChecksumSetup};
use crate::checksum::{LeafChecksums, MemberUse, NoRoomForChecksums};
use crate::member::Member;
use nbraid_layout::Node;
use std::sync::Arc;

/// Where role `role`'s checksum area goes: the `reserve_bytes` right before its region (and
/// before the log's `log_reserve_bytes`). Pure: create clears it once every record is known
/// to decode. `Err` names why it does not fit.
pub(super) fn place(
    tree: &Node,
    role: usize,
    reserve_bytes: u64,
    log_reserve_bytes: u64,
) -> Result<Area, String> {
    let mut region = None;
    tree.visit_members(&mut |m| {
        if m.index == role {
            region = Some((m.start, m.len));
        }
    });
    let (start, len) = region.ok_or_else(|| format!("role {role} has no region in the tree"))?;
    let need = area_bytes(len);
    if need > reserve_bytes {
        return Err(format!(
            "the checksum reserve of {reserve_bytes} bytes is smaller than the {need} bytes its region of {len} bytes needs"
        ));
    }
    let offset = start
        .checked_sub(log_reserve_bytes + reserve_bytes)
        .filter(|&o| o >= METADATA_AREA_BYTES && o % 4096 == 0)
        .ok_or_else(|| {
            format!(
                "no room for a {reserve_bytes}-byte checksum reserve before the region at {start}"
            )
        })?;
    Ok(Area { offset, len: need })
}

/// Enables checksums on existing volume `name` (`checksums = "enable"`): every role in
/// `roles` whose member's record has no checksum area gets one where the member has room
/// ([`place_for_existing`]: regions never move), cleared, recorded with a fill checkpoint at
/// 0 so the pass that computes the entries runs (`checksum_fill.rs`). Every place is
/// decided before anything is written; a crash half-way leaves records with and without
/// an area, and the next open places the rest. Returns the roles given an area.
pub(super) async fn enable(
    name: &str,
    roles: &[(usize, Arc<MemberMeta>)],
) -> Result<Vec<usize>, String> {
    let mut planned = Vec::new();
    for (role, meta) in roles {
        let sb = meta.sb.lock().await.clone();
        let Some(sb) = sb else { continue };
        let area = planned_area(name, &sb, meta.member.len())
            .map_err(|e| format!("member {role} (`{}`): {e}", meta.member.name()))?;
        if let Some(area) = area {
            planned.push((*role, meta.clone(), area));
        }
    }
    for (_, meta, a) in &planned {
        // Old bytes there could pass for entries: every block starts "no checksum".
        let m = &meta.member;
        (m.write_zeroes(a.offset_bytes, a.len_bytes).await).map_err(|e| e.to_string())?;
    }
    for (_, meta, a) in &planned {
        let area = Area {
            offset: a.offset_bytes,
            len: a.len_bytes,
        };
        let name = name.to_string();
        meta.update(move |sb| {
            for v in sb.volumes.iter_mut().filter(|v| v.name == name) {
                v.checksums = Some(area);
                v.checksum_fill
                    .get_or_insert(ChecksumFill { position_bytes: 0 });
            }
        })
        .await
        .map_err(|e| e.to_string())?;
    }
    Ok(planned.iter().map(|(r, _, _)| *r).collect())
}

/// [`enable`] over the trusted roles of an assembly (`by_role`: the members standing in
/// them), when `wanted` (the config asks for it); logs what it did.
pub(super) async fn enable_at_open(
    name: &str,
    wanted: bool,
    asm: &super::Assembly,
    by_role: &[Option<Arc<MemberMeta>>],
) -> Result<(), super::ArrayError> {
    if !wanted {
        return Ok(());
    }
    let trusted: Vec<(usize, Arc<MemberMeta>)> = (asm.roles.iter().enumerate())
        .filter(|(_, r)| r.is_ok())
        .filter_map(|(role, _)| Some((role, by_role.get(role)?.clone()?)))
        .collect();
    let given = enable_or_refuse(name, &trusted).await?;
    if !given.is_empty() {
        tracing::warn!(
            "volume {name}: per-block checksums enabled on members {given:?}: a background pass computes them (blocks not reached yet read unchecked)"
        );
    }
    Ok(())
}

/// [`enable_at_open`] for a volume just created over `roles` (every role, by number).
pub(super) async fn enable_at_create(
    name: &str,
    roles: &[(usize, Arc<MemberMeta>)],
) -> Result<(), super::ArrayError> {
    enable_or_refuse(name, roles).await.map(|_| ())
}

/// [`enable`], its refusal an array error naming the volume.
async fn enable_or_refuse(
    name: &str,
    roles: &[(usize, Arc<MemberMeta>)],
) -> Result<Vec<usize>, super::ArrayError> {
    (enable(name, roles).await).map_err(|detail| super::ArrayError::Metadata {
        volume: name.to_string(),
        detail: format!("enabling per-block checksums: {detail}"),
    })
}

/// The fill checkpoint the records say: the lowest any role's record has (a crash while
/// [`enable`] or a commit wrote them leaves some without).
pub(super) fn fill_of(records: &[Option<VolumeRecord>]) -> Option<ChecksumFill> {
    (records.iter().flatten())
        .filter_map(|r| r.checksum_fill)
        .min_by_key(|f| f.position_bytes)
}

/// Where [`enable`] puts volume `name`'s checksum area on the member whose superblock is
/// `sb` (`member_len_bytes` long): `None` when its record has one already, is mid-reshape
/// or is not there; refused when the member has no room.
pub fn planned_area(
    name: &str,
    sb: &Superblock,
    member_len_bytes: u64,
) -> Result<Option<ChecksumArea>, NoRoomForChecksums> {
    let Some(v) = sb.volumes.iter().find(|v| v.name == name) else {
        return Ok(None);
    };
    let Some((start, len)) = own_region(v).filter(|_| v.checksums.is_none() && v.reshape.is_none())
    else {
        return Ok(None);
    };
    place_for_existing(&member_use(sb, member_len_bytes), start, len).map(Some)
}

/// The record's region of its own role (start, length).
fn own_region(v: &VolumeRecord) -> Option<(u64, u64)> {
    let mut region = None;
    v.tree.visit_members(&mut |m| {
        if m.index == v.role as usize {
            region = Some((m.start, m.len));
        }
    });
    region
}

/// What the member whose superblock is `sb` uses: every volume's region and areas on it.
fn member_use(sb: &Superblock, member_len_bytes: u64) -> MemberUse {
    let mut used = Vec::new();
    for v in &sb.volumes {
        let areas = [v.bitmap.map(|b| b.area), v.ppl, v.checksums];
        let backup = v.reshape.as_ref().and_then(|r| r.backup_area);
        for a in areas.into_iter().chain([backup]).flatten() {
            used.push((a.offset, a.offset + a.len));
        }
        used.extend(own_region(v).map(|(s, l)| (s, s + l)));
        if let Some(r) = &v.reshape {
            used.extend((r.regions_of(v.role as usize).into_iter()).map(|(s, l)| (s, s + l)));
        }
    }
    MemberUse {
        member_len_bytes,
        used,
        metadata_areas_start: 2 * SLOT_BYTES,
        metadata_area_bytes: METADATA_AREA_BYTES,
    }
}

/// The engine's checksum setup from the records by role (`None`: the volume keeps none),
/// opened clean as [`opened_clean`] says (`newest`: the record the volume starts from).
/// A role with no record (its member missing) gets the place its area has beside its region
/// on the others ([`inferred_area`]): a spare rebuilt into it carries the role's area there.
pub(super) fn setup(
    name: &str,
    tree: &Node,
    records: &[Option<VolumeRecord>],
    newest: &VolumeRecord,
) -> Option<ChecksumSetup> {
    let recorded: Vec<Option<Area>> = records
        .iter()
        .map(|r| r.as_ref().and_then(|r| r.checksums))
        .collect();
    if recorded.iter().all(Option::is_none) {
        return None;
    }
    let regions = regions_by_role(tree, records.len());
    for (role, r) in records.iter().enumerate() {
        if r.as_ref().is_some_and(|r| r.checksums.is_none()) {
            // A member added by a reshape (or a spare from before spares carried areas).
            tracing::warn!(
                "volume {name}: member {role} has no checksum area: its blocks are not checked (the others' are)"
            );
        }
    }
    let areas = (0..records.len())
        .map(|role| match &records[role] {
            Some(r) => r.checksums,
            None => inferred_area(&regions, &recorded, role),
        })
        .map(|a| {
            a.map(|a| ChecksumArea {
                offset_bytes: a.offset,
                len_bytes: a.len,
            })
        })
        .collect();
    Some(ChecksumSetup::new(
        name,
        areas,
        opened_clean(records, newest),
    ))
}

/// Whether every entry is trusted at this open: the record of every member still in the
/// volume says it was shut down cleanly. A member `newest` records failed does not count:
/// its record froze when it failed (mid-write: dirty) and its entries are never read again;
/// counting it distrusted — and blanked — the entries of every other member at every open
/// from then on, so their blocks went unchecked and a degraded read served rotten bytes.
fn opened_clean(records: &[Option<VolumeRecord>], newest: &VolumeRecord) -> bool {
    let failed =
        |role: usize| (newest.members.get(role)).is_some_and(|m| m.state == RecordedState::Failed);
    (records.iter().enumerate())
        .filter(|&(role, _)| !failed(role))
        .filter_map(|(_, r)| r.as_ref())
        .all(|r| r.clean)
}

/// Each role's region (start, length) in the tree.
fn regions_by_role(tree: &Node, roles: usize) -> Vec<Option<(u64, u64)>> {
    let mut regions = vec![None; roles];
    tree.visit_members(&mut |m| {
        if let Some(r) = regions.get_mut(m.index) {
            *r = Some((m.start, m.len));
        }
    });
    regions
}

/// Where role `role`'s area is when no record of it was read: every member's area lies the
/// same distance before its region (the config's reserves), so the first role with a
/// recorded area says where; its length is the one `role`'s region needs. `None` when no
/// role says, or the place would not be a valid area.
fn inferred_area(
    regions: &[Option<(u64, u64)>],
    recorded: &[Option<Area>],
    role: usize,
) -> Option<Area> {
    let (start, len) = regions.get(role).copied().flatten()?;
    let gap = recorded
        .iter()
        .zip(regions)
        .find_map(|(a, r)| r.as_ref()?.0.checked_sub(a.as_ref()?.offset))?;
    let offset = start.checked_sub(gap)?;
    let need = area_bytes(len);
    (offset >= METADATA_AREA_BYTES && offset % 4096 == 0 && offset + need <= start)
        .then_some(Area { offset, len: need })
}

/// Role `role`'s checksum area for a member taking the role (a spare rebuilt into it, a
/// replacement): where the role's area is on every member that plays it (the engine's
/// setup), so the leaf over the role's region finds it there. Refused by name when another
/// volume's record on `member` (`others`) uses the place; cleared when `blank` (a replacement
/// gets its member's entries copied instead: `handover.rs`). `None`: the role keeps none.
pub(super) async fn for_newcomer(
    setup: Option<&ChecksumSetup>,
    role: usize,
    member: &dyn Member,
    others: Option<&Superblock>,
    blank: bool,
) -> Result<Option<Area>, String> {
    let Some(a) = setup.and_then(|s| s.area(role)) else {
        return Ok(None);
    };
    let area = Area {
        offset: a.offset_bytes,
        len: a.len_bytes,
    };
    if super::areas::overlaps_recorded(others, area) || area.offset + area.len > member.len() {
        return Err(format!(
            "`{}`: the role's checksum area (bytes {}..{}) is taken by another volume's record or past the member's end",
            member.name(),
            area.offset,
            area.offset + area.len
        ));
    }
    if blank {
        // Old bytes there could pass for entries: every block starts "no checksum".
        (member.write_zeroes(area.offset, area.len).await).map_err(|e| e.to_string())?;
    }
    Ok(Some(area))
}

/// Runs `install` (a new member, its area cleared, goes into role `role`) with the role's
/// checksums started blank: nothing of the old member's entries or header carries over.
pub(super) async fn install_blank<T>(
    setup: Option<&ChecksumSetup>,
    role: usize,
    install: impl FnOnce() -> T,
) -> T {
    let regions = setup.map_or(Vec::new(), |s| s.regions_of(role));
    let Some((first, rest)) = regions.split_first() else {
        return install();
    };
    for r in rest {
        r.start_blank(|| ()).await;
    }
    first.start_blank(install).await
}

/// Role `role`'s checksum area being carried over to its replacement: copied (or not) by
/// [`copy_to_replacement`], handed over by [`swap_in_replacement`]. Dropped in between (an
/// error on the way to the swap), it ends the copy's noting of the pages written back, which
/// would otherwise grow for the rest of the run for a hand-over that never comes.
#[must_use = "hand it to swap_in_replacement"]
pub(super) struct AreaCopy {
    /// The area is on the replacement (or there is none to copy).
    copied: bool,
    /// Regions whose write-backs are noted for the hand-over.
    noting: Vec<Arc<LeafChecksums>>,
}

impl AreaCopy {
    pub(super) fn copied(&self) -> bool {
        self.copied
    }
}

impl Drop for AreaCopy {
    fn drop(&mut self) {
        for region in self.noting.drain(..) {
            region.abandon_copy();
        }
    }
}

/// Copies role `role`'s checksum area from `old` to its replacement `new` while the volume
/// serves (`handover.rs`); not copied when it could not be (the caller clears the area
/// instead and the role's blocks go unchecked until written again).
pub(super) async fn copy_to_replacement(
    setup: Option<&ChecksumSetup>,
    role: usize,
    old: &dyn Member,
    new: &dyn Member,
) -> AreaCopy {
    let regions = setup.map_or(Vec::new(), |s| s.regions_of(role));
    let copied = match regions.as_slice() {
        [] => true,
        [one] => match one.copy_to(old, new).await {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!("role {role}: the checksum area was not copied to `{}` ({e}); the role's blocks are unchecked until written again", new.name());
                false
            }
        },
        _ => false,
    };
    AreaCopy {
        copied,
        noting: regions,
    }
}

/// Swaps the replacement `new` in (`swap`) with role `role`'s checksums handed over from
/// `old` ([`copy_to_replacement`] done), or, when they were not copied or the hand-over
/// fails, with its area cleared and the checksums started blank.
pub(super) async fn swap_in_replacement<T>(
    setup: Option<&ChecksumSetup>,
    role: usize,
    (old, new): (&dyn Member, &dyn Member),
    mut copy: AreaCopy,
    swap: impl FnOnce() -> T,
) -> T {
    // From here the hand-over (or the blank start) ends the noting.
    let regions = std::mem::take(&mut copy.noting);
    let mut swap = Some(swap);
    if let ([one], true) = (regions.as_slice(), copy.copied) {
        let run = || (swap.take().expect("swapped once"))();
        match one.hand_over(old, new, run).await {
            Ok(t) => return t,
            Err(e) => tracing::warn!("role {role}: the checksum area was not handed over to `{}` ({e}); the role's blocks are unchecked until written again", new.name()),
        }
    }
    if let Some(a) = setup.and_then(|s| s.area(role)) {
        if let Err(e) = new.write_zeroes(a.offset_bytes, a.len_bytes).await {
            tracing::warn!(
                "role {role}: clearing the checksum area of `{}`: {e}",
                new.name()
            );
        }
    }
    install_blank(setup, role, swap.take().expect("not swapped yet")).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::{MemberEntry, Uuid};

    const MIB: u64 = 1 << 20;

    /// Role `role`'s record of a three-member volume whose members are in `states`.
    fn record(role: u32, clean: bool, states: &[RecordedState]) -> VolumeRecord {
        VolumeRecord {
            array: Uuid([1; 16]),
            name: "v".into(),
            events: 7,
            clean,
            role,
            members: (states.iter())
                .map(|&state| MemberEntry {
                    uuid: Uuid([2; 16]),
                    state,
                    unacked_since_failed: false,
                    failed_cause: None,
                })
                .collect(),
            tree: Node::member(0, MIB, 8 * MIB),
            bitmap: None,
            ppl: None,
            checksums: None,
            scrub: None,
            added_paths: Vec::new(),
            reshape: None,
            checksum_fill: None,
            replacements: Vec::new(),
            block_size: None,
        }
    }

    #[test]
    fn a_failed_members_frozen_dirty_record_does_not_make_every_open_unclean() {
        use RecordedState::{Active, Failed};
        let states = [Active, Failed, Active];
        let newest = record(0, true, &states);
        // Role 1 failed mid-write: its own record stayed dirty, from before its failure.
        let frozen = record(1, false, &[Active, Active, Active]);
        let records = vec![
            Some(newest.clone()),
            Some(frozen),
            Some(record(2, true, &states)),
        ];
        assert!(
            opened_clean(&records, &newest),
            "clean shutdown of the others"
        );
        // The others dirty (a crash): distrusted.
        let crashed = record(0, false, &states);
        let records = vec![Some(crashed.clone()), None, Some(record(2, false, &states))];
        assert!(!opened_clean(&records, &crashed));
        // A member still in the volume with a dirty record (stale, back): distrusted.
        let all_in = [Active, Active, Active];
        let newest = record(0, true, &all_in);
        let stale = record(1, false, &all_in);
        let records = vec![Some(newest.clone()), Some(stale), None];
        assert!(!opened_clean(&records, &newest));
    }

    #[test]
    fn an_area_copy_abandoned_before_the_swap_stops_noting_write_backs() {
        use crate::memory::MemoryMember;
        use futures::executor::block_on;
        let area = ChecksumArea {
            offset_bytes: MIB,
            len_bytes: area_bytes(8 * MIB),
        };
        let setup = ChecksumSetup::new("v", vec![Some(area)], true);
        let region = setup.for_region(0, 4 * MIB, 8 * MIB).expect("an area");
        let (old, new) = (
            MemoryMember::new("old", 16 * MIB),
            MemoryMember::new("new", 16 * MIB),
        );
        let copy = block_on(copy_to_replacement(Some(&setup), 0, &old, &new));
        assert!(copy.copied() && region.is_noting());
        drop(copy); // an error on the way to the swap
        assert!(!region.is_noting(), "abandoned: nothing noted any more");
        let copy = block_on(copy_to_replacement(Some(&setup), 0, &old, &new));
        let swapped = block_on(swap_in_replacement(
            Some(&setup),
            0,
            (&old, &new),
            copy,
            || 7,
        ));
        assert_eq!(swapped, 7);
        assert!(!region.is_noting(), "handed over");
    }

    #[test]
    fn a_missing_roles_area_lies_as_far_before_its_region_as_the_others() {
        let start = METADATA_AREA_BYTES + 2 * MIB;
        let regions = vec![Some((start, 8 * MIB)); 3];
        let at = Area {
            offset: METADATA_AREA_BYTES,
            len: area_bytes(8 * MIB),
        };
        // Role 0's record is missing, role 1 has none read either, role 2 says where.
        let recorded = vec![None, None, Some(at)];
        assert_eq!(inferred_area(&regions, &recorded, 0), Some(at));
        // A region elsewhere on its member: the same distance before it.
        let moved = vec![Some((start + MIB, 8 * MIB)), None, Some((start, 8 * MIB))];
        let want = Area {
            offset: at.offset + MIB,
            len: at.len,
        };
        assert_eq!(inferred_area(&moved, &recorded, 0), Some(want));
        // Nothing recorded, or a place inside the metadata area: none.
        assert_eq!(inferred_area(&regions, &[None, None, None], 0), None);
        let early = vec![
            Some((METADATA_AREA_BYTES + 4096, 8 * MIB)),
            None,
            Some((start, 8 * MIB)),
        ];
        assert_eq!(inferred_area(&early, &recorded, 0), None);
    }
}
