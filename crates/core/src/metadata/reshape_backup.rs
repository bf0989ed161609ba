//! Where a reshape's critical-section backup lives: pure decisions over the layout and the
//! members' records, used by `reshape_run.rs` when a reshape starts, when it is picked up
//! again, and before every backed-up window.
//!
//! A window's rows at risk grow with the strip: one unit of RAID 5 3→4 backs up two strips
//! per member, RAID 5 → 6 one strip per member (16 MiB at the largest strip), far more than
//! the 1 MiB metadata area holds. So each old role's share goes to one of two homes:
//! - **its own area** in its metadata area (first fit, at least [`BACKUP_AREA_BYTES`]) when
//!   the share fits there: a failed member's share is then never needed (its role is
//!   degraded in both trees);
//! - else **a slot of the pool**: one area on the first added member, split into equal
//!   slots, one per old role without an own area, in role order. The pool lies after every
//!   region on that member when the member has the room; else, when the reshape backs up
//!   only its first windows (more data members in the new tree), in the tail of the added
//!   member's new region, which the copy writes only near the end — long after the last
//!   backup. Each backed-up window checks that its writes on the pool's member stay below
//!   the pool ([`pool_untouched`]). With neither, the start is refused by name.
//!
//! Only the old tree's roles have rows at risk; the added members hold no old byte.

use super::areas::region_of;
use super::{Area, Superblock};
use nbraid_layout::{map, Node, Reshape, WindowRule};

/// The header before each backed-up share (`reshape_run.rs` writes it).
pub(super) const HEADER_BYTES: u64 = 4096;
/// The least own area a role gets (small strips back up bigger windows in it).
pub(super) const BACKUP_AREA_BYTES: u64 = 256 << 10;
/// Windows probed from the start to learn what the backups need: the backed-up windows of
/// a growth come first, and those of a same-width move repeat.
const PROBED_WINDOWS: usize = 8;

/// What the backups of a reshape need, learnt from its first windows of one unit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct BackupNeed {
    /// Per member index, the most rows of one backed-up window (0: none at risk).
    pub(super) rows_bytes: Vec<u64>,
    /// The end of the last backed-up window: the capacity when the windows probed all
    /// still back up (a move whose every window does).
    pub(super) until_bytes: u64,
}

/// [`BackupNeed`] of `layout`'s windows of `len` bytes.
pub(super) fn need(layout: &Reshape, len: u64) -> BackupNeed {
    let members = 1 + layout
        .old()
        .member_indices()
        .into_iter()
        .chain(layout.new_tree().member_indices())
        .max()
        .unwrap_or(0);
    let mut rows_bytes = vec![0; members];
    let (mut at, mut until_bytes) = (0, 0);
    for probe in 0..PROBED_WINDOWS {
        let Ok(Some(w)) = layout.window(at, len) else {
            break;
        };
        if w.rule == WindowRule::Backup {
            for r in layout.rows_at_risk(w).unwrap_or_default() {
                rows_bytes[r.member] = rows_bytes[r.member].max(r.len);
            }
            until_bytes = if probe + 1 == PROBED_WINDOWS {
                layout.capacity()
            } else {
                w.start + w.len
            };
        }
        at = w.start + w.len;
    }
    BackupNeed {
        rows_bytes,
        until_bytes,
    }
}

/// Bytes of a home for `rows_bytes` of rows: the header and the rows, whole 4 KiB blocks.
pub(super) fn home_bytes(rows_bytes: u64) -> u64 {
    (HEADER_BYTES + rows_bytes).next_multiple_of(4096)
}

/// The own area of a role needing `rows_bytes` in the metadata area of `sb`: the first fit
/// of [`BACKUP_AREA_BYTES`] or more, else of just what it needs; `None` when neither fits.
/// A function of the superblock, so a member that missed the start's commit gets the area
/// the start chose for it.
pub(super) fn own_area(sb: Option<&Superblock>, rows_bytes: u64) -> Option<Area> {
    let want = home_bytes(rows_bytes);
    [want.max(BACKUP_AREA_BYTES), want]
        .into_iter()
        .find_map(|len| {
            Some(Area {
                offset: super::areas::free_area(sb, len)?,
                len,
            })
        })
}

/// Where role `role`'s share of a backup lives: `(holder role, area)`. Own areas of the old
/// tree's roles first; a role of the old tree without one takes its slot of the pool (the
/// area of the first role the old tree lacks, split evenly among all the old tree's roles in
/// role order — a slot for every one, so where a slot lies never depends on which roles
/// have own areas: a missing member's record cannot say).
pub(super) fn home(old: &Node, areas: &[Option<Area>], role: usize) -> Option<(usize, Area)> {
    let mut olds = old.member_indices();
    olds.sort_unstable();
    olds.dedup();
    if !olds.contains(&role) {
        return None;
    }
    if let Some(a) = areas.get(role).copied().flatten() {
        return Some((role, a));
    }
    let holder = (0..areas.len()).find(|r| !olds.contains(r) && areas[*r].is_some())?;
    let pool = areas[holder]?;
    let slot = pool.len / olds.len() as u64 / 4096 * 4096;
    let i = olds.iter().position(|&r| r == role)? as u64;
    Some((
        holder,
        Area {
            offset: pool.offset + i * slot,
            len: slot,
        },
    ))
}

/// The pool for `len_bytes` on the added member in role `holder` (`member_bytes` long, `sb`
/// its superblock): after every region and area recorded on it and its region in the new
/// tree; else, when the backups end at `until_bytes` before the capacity, in the tail of
/// its new region, above every write of the windows before. `Err` says why neither fits.
pub(super) fn place_pool(
    layout: &Reshape,
    until_bytes: u64,
    holder: usize,
    member_bytes: u64,
    sb: Option<&Superblock>,
    len_bytes: u64,
) -> Result<Area, String> {
    let region = region_of(layout.new_tree(), holder)
        .ok_or_else(|| format!("role {holder} has no region in the new tree"))?;
    let mut used_end = region.0 + region.1;
    for v in sb.map(|sb| sb.volumes.as_slice()).unwrap_or_default() {
        if let Some((s, l)) = region_of(&v.tree, v.role as usize) {
            used_end = used_end.max(s + l);
        }
        let areas = [v.bitmap.map(|b| b.area), v.ppl, v.checksums];
        for a in areas.into_iter().flatten() {
            used_end = used_end.max(a.offset + a.len);
        }
    }
    let after = used_end.next_multiple_of(4096);
    if after + len_bytes <= member_bytes {
        return Ok(Area {
            offset: after,
            len: len_bytes,
        });
    }
    let room_after = member_bytes.saturating_sub(after);
    let short = format!(
        "the reshape's backup needs {len_bytes} bytes on the added member beside its region ({room_after} free after it)"
    );
    if until_bytes >= layout.capacity() {
        return Err(format!(
            "{short}, and every window of this move is backed up: give the added member {} more bytes, or choose a smaller strip",
            len_bytes - room_after
        ));
    }
    let end = region.0 + region.1;
    let offset = end.saturating_sub(len_bytes) / 4096 * 4096;
    let area = Area {
        offset,
        len: len_bytes,
    };
    if offset >= region.0 && pool_untouched(layout, holder, area, 0, until_bytes) {
        Ok(area)
    } else {
        Err(format!(
            "{short}, and its region is too short to hold it past the first windows' writes: give the added member {} more bytes, or choose a smaller strip",
            len_bytes - room_after
        ))
    }
}

/// Every role's backup home for `layout` (`held`, `member_bytes` and `names` by role, the
/// roles from `old_roles` on added): an own area in the metadata area of each old role whose
/// share fits there ([`own_area`]), and for the others the pool on the first added member
/// ([`place_pool`]). `Err` says why neither fits, naming the members and the bytes. Pure: the
/// reshape's start and `nbraid apply`'s plan decide alike.
pub(super) fn backup_areas(
    layout: &Reshape,
    held: &[Option<&Superblock>],
    member_bytes: &[u64],
    names: &[&str],
    old_roles: usize,
) -> Result<Vec<Option<Area>>, String> {
    let need = need(layout, layout.unit());
    let rows = |r: usize| need.rows_bytes.get(r).copied().unwrap_or(0);
    let mut areas = vec![None; held.len()];
    for (r, sb) in held.iter().enumerate().take(old_roles) {
        areas[r] = own_area(*sb, rows(r));
    }
    let users: Vec<usize> = (0..old_roles).filter(|&r| areas[r].is_none()).collect();
    if users.is_empty() {
        return Ok(areas);
    }
    let slot = users
        .iter()
        .map(|&r| home_bytes(rows(r)))
        .max()
        .unwrap_or(0);
    let users_named: Vec<String> = users.iter().map(|&r| format!("`{}`", names[r])).collect();
    let users_named = users_named.join(", ");
    if held.len() <= old_roles {
        return Err(format!(
            "a window of this reshape backs up {slot} bytes per member, more than the metadata area of {users_named} holds, and no member is added to hold them: choose a smaller strip"
        ));
    }
    let pool = place_pool(
        layout,
        need.until_bytes,
        old_roles,
        member_bytes[old_roles],
        held[old_roles],
        slot * old_roles as u64, // a slot for every old role ([`home`])
    )
    .map_err(|why| {
        format!(
            "the backup of {users_named} ({slot} bytes each, more than their metadata areas hold) goes to `{}`: {why}",
            names[old_roles]
        )
    })?;
    areas[old_roles] = Some(pool);
    Ok(areas)
}

/// Whether the new tree's writes of logical `[start, start+len)` on role `holder` all stay
/// below `pool` (or lie wholly above it).
pub(super) fn pool_untouched(
    layout: &Reshape,
    holder: usize,
    pool: Area,
    start: u64,
    len: u64,
) -> bool {
    let Ok(writes) = map(layout.new_tree(), start, len) else {
        return false;
    };
    writes
        .data
        .iter()
        .chain(&writes.parity)
        .filter(|e| e.member == holder)
        .all(|e| e.offset + e.len <= pool.offset || e.offset >= pool.offset + pool.len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nbraid_layout::{Level, ParityLayout, Region, Shape};

    const MIB: u64 = 1 << 20;

    fn tree(level: Level, members: usize, strip: u64, region: u64) -> Node {
        Shape::new(level, members, None, strip, ParityLayout::default())
            .unwrap()
            .build(&vec![
                Region {
                    start: MIB,
                    len: region
                };
                members
            ])
            .unwrap()
    }

    #[test]
    fn growth_backs_up_its_first_windows_and_a_same_width_move_every_one() {
        let grow = Reshape::new(
            tree(Level::Raid5, 3, MIB, 16 * MIB),
            tree(Level::Raid5, 4, MIB, 16 * MIB),
        )
        .unwrap();
        let n = need(&grow, grow.unit());
        assert_eq!(n.rows_bytes, vec![2 * MIB, 2 * MIB, 2 * MIB, 0]);
        assert!(n.until_bytes > 0 && n.until_bytes < grow.capacity());
        let widen = Reshape::new(
            tree(Level::Raid5, 4, MIB, 16 * MIB),
            tree(Level::Raid6, 5, MIB, 16 * MIB),
        )
        .unwrap();
        let n = need(&widen, widen.unit());
        assert_eq!(n.rows_bytes, vec![MIB, MIB, MIB, MIB, 0]);
        assert_eq!(n.until_bytes, widen.capacity());
    }

    #[test]
    fn roles_without_an_own_area_share_the_pool_in_role_order() {
        let old = tree(Level::Raid5, 3, MIB, 16 * MIB);
        let own = Area {
            offset: 256 << 10,
            len: 256 << 10,
        };
        let pool = Area {
            offset: 40 * MIB,
            len: 6 * MIB,
        };
        let areas = [None, Some(own), None, Some(pool)];
        assert_eq!(home(&old, &areas, 1), Some((1, own)));
        let slot = |offset| Area {
            offset,
            len: 2 * MIB,
        };
        assert_eq!(home(&old, &areas, 0), Some((3, slot(40 * MIB))));
        assert_eq!(home(&old, &areas, 2), Some((3, slot(44 * MIB))));
        assert_eq!(home(&old, &areas, 3), None, "an added role holds no rows");
        assert_eq!(home(&old, &[None, Some(own), None, None], 0), None);
        // Role 1's member missing (no record, no area): the others' slots stay put.
        let missing = [None, None, None, Some(pool)];
        assert_eq!(home(&old, &missing, 2), Some((3, slot(44 * MIB))));
        assert_eq!(home(&old, &missing, 1), Some((3, slot(42 * MIB))));
    }

    #[test]
    fn the_pool_goes_after_the_region_or_into_a_growths_tail() {
        let grow = Reshape::new(
            tree(Level::Raid5, 3, MIB, 16 * MIB),
            tree(Level::Raid5, 4, MIB, 16 * MIB),
        )
        .unwrap();
        let n = need(&grow, grow.unit());
        let len = 3 * home_bytes(2 * MIB);
        let after = place_pool(&grow, n.until_bytes, 3, 40 * MIB, None, len).unwrap();
        assert_eq!(after.offset, 17 * MIB, "after the region");
        let tail = place_pool(&grow, n.until_bytes, 3, 17 * MIB, None, len).unwrap();
        assert!(tail.offset >= MIB && tail.offset + tail.len <= 17 * MIB);
        assert!(pool_untouched(&grow, 3, tail, 0, n.until_bytes));
        assert!(!pool_untouched(&grow, 3, tail, 0, grow.capacity()));

        let widen = Reshape::new(
            tree(Level::Raid5, 4, MIB, 16 * MIB),
            tree(Level::Raid6, 5, MIB, 16 * MIB),
        )
        .unwrap();
        let n = need(&widen, widen.unit());
        let len = 4 * home_bytes(MIB);
        let e = place_pool(&widen, n.until_bytes, 4, 17 * MIB, None, len).unwrap_err();
        assert!(e.contains("every window of this move is backed up"), "{e}");
        assert!(e.contains(&format!("{len} more bytes")), "{e}");
        assert!(place_pool(&widen, n.until_bytes, 4, 17 * MIB + len, None, len).is_ok());
    }

    #[test]
    fn an_own_area_is_at_least_the_least_size_and_first_fit() {
        let a = own_area(None, 64 << 10).unwrap();
        assert_eq!(a.len, BACKUP_AREA_BYTES);
        let b = own_area(None, 300 << 10).unwrap();
        assert_eq!(b.len, home_bytes(300 << 10));
        assert_eq!(a.offset, b.offset, "the first gap either way");
        assert_eq!(own_area(None, MIB), None, "more than the metadata area");
    }
}
