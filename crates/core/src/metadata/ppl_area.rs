//! Where a volume's partial-parity log lives on each member (`crate::ppl`): allocated at
//! create in the per-volume metadata areas, recorded in the volume record (`ppl`), handed to
//! the engine at every open with a life above every earlier open's.

use super::areas::{free_area_avoiding, region_of};
use super::{Area, Superblock, VolumeRecord, METADATA_AREA_BYTES};
use crate::buf::Buf;
use crate::member::Member;
use crate::ppl::{self, LastLife, PplSetup};
use nbraid_layout::{volume_log_ring_bytes, Node};
use std::sync::Arc;

/// A log area for a volume over `tree` on a member holding `held`, avoiding `avoid` (areas
/// of this volume not recorded yet), in the metadata area: the default size, or the
/// smallest the log works with when the area is short. `Ok(None)`: no parity group to log;
/// `Err`: why there is no room (a ring too large for the metadata area belongs in a reserve
/// before the region, which the config leaves for such strips).
pub(super) fn allocate(
    held: Option<&Superblock>,
    tree: &Node,
    avoid: &[Area],
) -> Result<Option<Area>, String> {
    let (Some(want), Some(least)) = (ppl::area_bytes(tree), volume_log_ring_bytes(tree)) else {
        return Ok(None);
    };
    [want, least]
        .into_iter()
        .find_map(|len| free_area_avoiding(held, len, avoid).map(|offset| Area { offset, len }))
        .map(Some)
        .ok_or_else(|| {
            format!(
                "its partial-parity log needs {least} bytes and the {METADATA_AREA_BYTES}-byte metadata area has no such room left (its superblocks, bitmap and other volumes' areas): give the volume write_hole_log_size (a reserve before its region) or write_hole = \"off\""
            )
        })
}

/// The log area of `len` bytes that ends where member `role`'s region of `tree` starts (the
/// reserve the config leaves before a volume with `write_hole_log_size`), if it is outside
/// the metadata area, holds the log's smallest ring and touches nothing recorded on the
/// member (`held`): another volume's areas or regions. `Ok(None)`: no group to log.
pub(super) fn before_region(
    held: Option<&Superblock>,
    tree: &Node,
    role: usize,
    len: u64,
) -> Result<Option<Area>, String> {
    let Some(least) = volume_log_ring_bytes(tree) else {
        return Ok(None);
    };
    if len < least || !len.is_multiple_of(4096) {
        return Err(format!(
            "a {len}-byte partial-parity log area is too small or not whole 4 KiB blocks: this tree's log needs at least {least} bytes"
        ));
    }
    let (start, _) = region_of(tree, role).ok_or_else(|| format!("no region of role {role}"))?;
    let area = start
        .checked_sub(len)
        .filter(|&o| o >= METADATA_AREA_BYTES)
        .map(|offset| Area { offset, len })
        .ok_or_else(|| {
            format!(
                "a {len}-byte partial-parity log area before the region at byte {start} would reach into the {METADATA_AREA_BYTES}-byte metadata area"
            )
        })?;
    let overlaps = |o: u64, l: u64| o < area.offset + area.len && area.offset < o + l;
    for v in held.map(|sb| sb.volumes.as_slice()).unwrap_or_default() {
        let areas = [v.bitmap.map(|b| b.area), v.ppl, v.checksums];
        let region = region_of(&v.tree, v.role as usize);
        let taken = areas
            .into_iter()
            .flatten()
            .any(|u| overlaps(u.offset, u.len))
            || region.is_some_and(|(s, l)| overlaps(s, l));
        if taken {
            return Err(format!(
                "the partial-parity log area (bytes {}..{}) overlaps volume `{}` recorded on the member",
                area.offset,
                area.offset + area.len,
                v.name
            ));
        }
    }
    Ok(Some(area))
}

/// Zeroes a new log area (a member's earlier life must never be replayed).
pub(super) async fn clear(member: &dyn Member, area: Area) -> crate::member::MemberResult<()> {
    member
        .write(area.offset, Buf::zeroed(area.len as usize).freeze(), true)
        .await
}

/// Where each role keeps the partial-parity log, and the engine's log setup (`None`: none).
pub(super) struct PplPlaces {
    /// By role (a new member in the role gets the same place).
    areas: Vec<Option<Area>>,
    setup: Option<PplSetup>,
    /// Whether the volume wants its log (the options; none is written mid-reshape).
    enabled: bool,
    /// This open's life: above every earlier open's.
    life: u64,
    /// Whether every row the stop before this open may have torn is in the rings to
    /// replay: a clean stop tore none; after a dirty life that did not log
    /// (`ppl::last_life`) they are left to a resync before serving, whatever this open logs.
    torn_rows_logged: bool,
}

impl PplPlaces {
    /// From the records by role (see [`areas_by_role`], [`setup`]).
    pub(super) fn new(
        name: &str,
        tree: &Node,
        records: &[Option<VolumeRecord>],
        events: u64,
        enabled: bool,
    ) -> PplPlaces {
        PplPlaces {
            areas: areas_by_role(records),
            setup: setup(name, tree, records, events, enabled),
            enabled,
            life: events + 1,
            torn_rows_logged: true,
        }
    }

    /// Whether the replay alone covers the rows the stop before this open may have torn
    /// (see the field; the background resync asks).
    pub(super) fn torn_rows_logged(&self) -> bool {
        self.torn_rows_logged
    }

    /// What the open found: the rows the stop before it may have torn are (not) logged.
    pub(super) fn set_torn_rows_logged(&mut self, logged: bool) {
        self.torn_rows_logged = logged;
    }

    /// The rings this open marks with its life: the log it writes, or the rings its records
    /// place when it does not log ([`PplPlaces::unlogged_rings`]).
    pub(super) fn rings(&self) -> Option<PplSetup> {
        self.setup.clone().or_else(|| self.unlogged_rings())
    }

    /// Role `r`'s log area.
    pub(super) fn area(&self, r: usize) -> Option<Area> {
        self.areas.get(r).copied().flatten()
    }

    /// Whether the volume keeps a log where its tree has parity groups to log.
    pub(super) fn enabled(&self) -> bool {
        self.enabled
    }

    /// The log the engine writes, for the replay at open.
    pub(super) fn setup(&self) -> Option<&PplSetup> {
        self.setup.as_ref()
    }

    /// The rings of a volume that does not log this open (`write_hole = "off"`, or
    /// mid-reshape) yet whose records place them: the open marks them with its life, as a
    /// logged open does after its replay, so no batch of an earlier life is ever replayed
    /// over what this life writes unlogged (`tests/log_off_life.rs`). `None`: it logs, or
    /// has no ring.
    pub(super) fn unlogged_rings(&self) -> Option<PplSetup> {
        if self.setup.is_some() {
            return None;
        }
        let areas: Vec<Option<(u64, u64)>> = (self.areas.iter())
            .map(|a| a.map(|a| (a.offset, a.len)))
            .collect();
        (areas.iter().any(Option::is_some)).then_some(PplSetup {
            life: self.life,
            areas,
        })
    }
}

/// What the rings of the members serving at a dirty start say of the life that marked them
/// last (`ppl::last_life`), read before anything is written: `by_role`, the member in each
/// role, but not the roles in `not_current` (stale or being rebuilt: their rings may be of
/// an older life).
pub(super) async fn last_life(
    name: &str,
    by_role: &[Option<Arc<super::MemberMeta>>],
    not_current: &[usize],
) -> LastLife {
    let mut rings = Vec::new();
    for (r, m) in by_role.iter().enumerate() {
        let Some(m) = m.as_ref().filter(|_| !not_current.contains(&r)) else {
            continue;
        };
        if let Some(area) = m.record(name).await.and_then(|rec| rec.ppl) {
            rings.push((m.member.clone(), (area.offset, area.len)));
        }
    }
    ppl::last_life_of(&rings).await
}

/// Where each role keeps the log, from the records by role. A role no member carries
/// (missing at assembly) keeps it where its peers do (every member of a volume gets the same
/// place): its parity groups are then still logged on their other members (the log skips a
/// failed member) — without it a group with a missing member wrote no log at all, and a
/// crash tearing a degraded write corrupted the missing member's chunks when it came back
/// (found by the background resync's crash simulator) — and a new member rebuilt into the
/// role gets that place.
fn areas_by_role(records: &[Option<VolumeRecord>]) -> Vec<Option<Area>> {
    let peers = records.iter().flatten().find_map(|r| r.ppl);
    records
        .iter()
        .map(|r| match r {
            Some(r) => r.ppl,
            None => peers,
        })
        .collect()
}

/// The engine's log setup from the records by role (`None` for a volume without a log: one
/// created before logs existed, or with the log switched off). `events`: the newest record's
/// event counter (every open bumps it, so `events + 1` is above every earlier life).
fn setup(
    name: &str,
    tree: &Node,
    records: &[Option<VolumeRecord>],
    events: u64,
    enabled: bool,
) -> Option<PplSetup> {
    let logged = ppl::parity_groups(tree).iter().any(|(_, l)| l.is_some());
    if !enabled || !logged {
        return None;
    }
    let areas: Vec<Option<(u64, u64)>> = areas_by_role(records)
        .into_iter()
        .map(|a| a.map(|a| (a.offset, a.len)))
        .collect();
    if areas.iter().all(Option::is_none) {
        // Every volume created since has its log (or its create was refused): this one was
        // created by an nbraid without the log, or with write_hole = "off" where none fit.
        tracing::warn!(
            "volume `{name}`: its records hold no partial-parity log area (created by an older nbraid or with write_hole = \"off\", or reshaped into stripes whose log its members had no room for): the RAID 5/6 write hole stays open. A volume created now gets its log: copy the data off, recreate the volume, copy it back; or set write_hole = \"off\" to say the hole is accepted"
        );
        return None;
    }
    Some(PplSetup {
        life: events + 1,
        areas,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(ppl: Option<Area>) -> VolumeRecord {
        VolumeRecord {
            ppl,
            ..VolumeRecord::plain(
                super::super::Uuid([0; 16]),
                "v",
                0,
                Vec::new(),
                Node::member(0, 0, 1 << 20),
            )
        }
    }

    /// A role no member carries keeps the log where its peers do (so its groups stay
    /// logged); a member whose own record has no log keeps none.
    #[test]
    fn a_missing_role_keeps_the_log_where_its_peers_do() {
        let a = Area {
            offset: 8192,
            len: 512 << 10,
        };
        let records = [Some(record(Some(a))), None, Some(record(Some(a)))];
        assert_eq!(areas_by_role(&records), vec![Some(a); 3]);
        let old = [Some(record(None)), None];
        assert_eq!(areas_by_role(&old), vec![None, None]);
    }
}
