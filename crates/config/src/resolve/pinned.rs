//! Placing a volume the records place (`crate::pins`): its regions start where they were
//! recorded, whatever reserves the config's settings would give a new volume today.

use super::cx::R;
use super::{claim_regions, Placement};
use crate::allocate::Usage;
use crate::error::{ErrorKind, Problem};
use crate::model::METADATA_RESERVED;
use crate::pins::{Pins, RecordedPlace};
use crate::raw::RawVolume;
use crate::volume_meta::{checksum_area_bytes, checksum_reserve_bytes, MetadataOptions};
use nbraid_layout::{Geometry, Region};

impl Placement<'_> {
    /// The regions of a volume whose records put member position `p`'s region at
    /// `starts[p]` (`None`: a member the records do not place gets the reserves a new
    /// volume's would): the bytes between the volumes before it and that start are its
    /// reserves. A `checksums = "on"` volume whose region outgrew the checksum area room
    /// before it gets that room right after its region instead (see [`tail_bytes`]).
    pub(super) fn pinned(
        &self,
        v: &RawVolume,
        name: &str,
        pins: &Pins,
        metadata: &mut MetadataOptions,
        usage: &mut [Usage],
    ) -> R<(Vec<Region>, Geometry)> {
        let starts = pins.starts(name).unwrap_or_default();
        // The log's reserve as recorded, even with `write_hole = "off"` now: its bytes are
        // the volume's.
        let recorded_log = pins.log_reserve_bytes(name).flatten();
        let log_bytes = recorded_log.or(metadata.ppl_log_bytes).unwrap_or(0);
        let mut room_before = Vec::with_capacity(self.idx.len());
        for (p, &m) in self.idx.iter().enumerate() {
            let u = &mut usage[m];
            let Some(start) = starts.get(p).copied().flatten() else {
                let reserves = metadata.checksum_reserve_bytes.unwrap_or(0) + log_bytes;
                u.cursor += reserves;
                u.users
                    .push((format!("the reserves of volume \"{name}\""), reserves));
                room_before.push(None);
                continue;
            };
            // The lowest byte the volume keeps before its region on this member: its log's
            // reserve, its checksum area when that lies before the region.
            let area = pins.place(name, p).and_then(|r| r.checksum_area);
            let below = area.filter(|&(o, _)| o >= METADATA_RESERVED && o < start);
            let floor = (start.saturating_sub(log_bytes)).min(below.map_or(start, |(o, _)| o));
            if floor < u.cursor {
                let member = &self.members[m];
                return Err(Problem::new(
                    v.name.span(),
                    ErrorKind::Fit,
                    format!(
                        "{}: its records keep it from byte {floor} of member \"{}\" on (its region at byte {start}, its reserves before it), but the config places the volumes before it up to byte {}: a member's data is never moved, so the volumes before it cannot grow into it (list a new volume after the existing ones)",
                        self.who, member.id, u.cursor
                    ),
                ));
            }
            room_before.push(Some((start - u.cursor).saturating_sub(log_bytes)));
            if start > u.cursor {
                let what = format!("the reserves before volume \"{name}\"");
                u.users.push((what, start - u.cursor));
            }
            u.cursor = start;
        }
        if reserved_checksums(metadata) && room_before.iter().flatten().all(|&r| r == 0) {
            return Err(Problem::new(
                v.name.span(),
                ErrorKind::Option,
                format!(
                    "{}: its records start its regions with no block-checksum reserve before them (it was created with checksums = \"off\" or \"enable\"), and checksums = \"on\" (the default) keeps the checksums in such a reserve, but a region never moves: set checksums = \"enable\" (an area where each member has room, and a background pass computes the checksums) or \"off\"",
                    self.who
                ),
            ));
        }
        let (mut regions, mut geometry) = self.regions(v, usage)?;
        let recorded: Vec<Option<RecordedPlace>> =
            (0..self.idx.len()).map(|p| pins.place(name, p)).collect();
        // First as if no region grew past a checksum area the records put after it; then,
        // where one did, with room for that area to move past the grown end.
        let mut tails = tail_bytes(metadata, &regions, &room_before, &recorded, &[]);
        for round in 0..2 {
            if tails.iter().all(|&t| t == 0) {
                break;
            }
            (self.idx.iter().zip(&tails)).for_each(|(&m, &t)| usage[m].tail_bytes = t);
            let again = self.regions(v, usage);
            self.idx.iter().for_each(|&m| usage[m].tail_bytes = 0);
            (regions, geometry) = again?;
            let grown: Vec<bool> = (regions.iter().zip(&recorded))
                .map(|(r, rec)| rec.is_some_and(|rec| r.len > rec.len))
                .collect();
            if round == 1 || !grown.contains(&true) {
                break;
            }
            tails = tail_bytes(metadata, &regions, &room_before, &recorded, &grown);
        }
        claim_regions(name, self.idx, &regions, usage);
        metadata.checksum_after_region_bytes = tails.iter().copied().max().unwrap_or(0);
        for (&m, &tail) in self.idx.iter().zip(&tails).filter(|(_, &t)| t > 0) {
            usage[m].cursor += tail;
            let what = format!("the block checksums of volume \"{name}\" (after its region)");
            usage[m].users.push((what, tail));
        }
        Ok((regions, geometry))
    }
}

/// Bytes to keep free right after each member's region (by position) of a pinned volume for
/// its checksum area: 0 unless the volume keeps them in reserves (`checksums = "on"`) and the
/// member's recorded room before its region (`room_before`; `None`: not recorded) cannot hold
/// the area its region now needs — then the reserve a new volume of that region would get
/// (per member: a JBOD's members that did not grow keep their regions). Pure.
///
/// A checksum area the records put after the region (`recorded`, by position) stays kept
/// whatever the settings say: the bytes from the recorded region's end to its end, and —
/// where `grown[p]` (the region grew over it, so the start moves it past the grown end and
/// past itself) — a reserve of the grown region plus its own length.
pub(super) fn tail_bytes(
    metadata: &MetadataOptions,
    regions: &[Region],
    room_before: &[Option<u64>],
    recorded: &[Option<RecordedPlace>],
    grown: &[bool],
) -> Vec<u64> {
    let short = |len: u64, room: &Option<u64>| {
        reserved_checksums(metadata) && room.is_some_and(|room| checksum_area_bytes(len) > room)
    };
    let kept = |r: &Region, rec: Option<RecordedPlace>, grown: bool| {
        let rec = rec?;
        let (offset, len) = rec
            .checksum_area
            .filter(|&(o, _)| o >= rec.start + rec.len)?;
        Some(match grown {
            true => checksum_reserve_bytes(r.len) + len,
            false => (offset + len).saturating_sub(rec.start + rec.len),
        })
    };
    regions
        .iter()
        .zip(room_before)
        .enumerate()
        .map(|(p, (r, room))| {
            let rule = match short(r.len, room) {
                true => checksum_reserve_bytes(r.len),
                false => 0,
            };
            let grew = grown.get(p).copied().unwrap_or(false);
            let keep = kept(r, recorded.get(p).copied().flatten(), grew).unwrap_or(0);
            rule.max(keep)
        })
        .collect()
}

/// The volume keeps its checksums in a reserve before its regions (`checksums = "on"`).
fn reserved_checksums(metadata: &MetadataOptions) -> bool {
    metadata.checksums && !metadata.checksums_enable
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checksum_area_recorded_after_the_region_stays_kept_whatever_the_settings() {
        let off = MetadataOptions {
            checksums: false,
            ..MetadataOptions::default()
        };
        let at = region(100 * MIB);
        let rec = RecordedPlace {
            start: at.start,
            len: at.len,
            checksum_area: Some((at.start + at.len, 204800)),
        };
        assert_eq!(
            tail_bytes(&off, &[at], &[Some(0)], &[Some(rec)], &[]),
            [204800]
        );
        // Grown over it: the new area goes past the grown end and past the old one.
        let grown = region(200 * MIB);
        assert_eq!(
            tail_bytes(&off, &[grown], &[Some(0)], &[Some(rec)], &[true]),
            [MIB + 204800]
        );
    }

    const MIB: u64 = 1 << 20;

    fn region(len: u64) -> Region {
        Region {
            start: 3 * MIB,
            len,
        }
    }

    #[test]
    fn a_region_its_reserve_covers_needs_no_tail() {
        let on = MetadataOptions::default();
        assert_eq!(
            tail_bytes(&on, &[region(500 * MIB)], &[Some(MIB)], &[], &[]),
            [0]
        );
        assert_eq!(
            tail_bytes(&on, &[region(500 * MIB)], &[None], &[], &[]),
            [0]
        );
    }

    #[test]
    fn a_region_grown_past_its_reserve_gets_a_whole_mib_tail() {
        let on = MetadataOptions::default();
        let grown = [region(600 * MIB), region(600 * MIB)];
        assert_eq!(
            tail_bytes(&on, &grown, &[Some(MIB), Some(MIB)], &[], &[]),
            [2 * MIB, 2 * MIB]
        );
        // A concatenation: only the member that outgrew its reserve.
        let jbod = [region(100 * MIB), region(600 * MIB)];
        assert_eq!(
            tail_bytes(&on, &jbod, &[Some(MIB), Some(MIB)], &[], &[]),
            [0, 2 * MIB]
        );
        assert!(checksum_area_bytes(600 * MIB) <= 2 * MIB);
    }

    #[test]
    fn volumes_without_reserved_checksums_never_get_a_tail() {
        let off = MetadataOptions {
            checksums: false,
            ..MetadataOptions::default()
        };
        let enabled = MetadataOptions {
            checksums_enable: true,
            ..MetadataOptions::default()
        };
        for m in [off, enabled] {
            assert_eq!(
                tail_bytes(&m, &[region(600 * MIB)], &[Some(0)], &[], &[]),
                [0]
            );
        }
    }
}
