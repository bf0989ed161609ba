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
use std::ops::Range;

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
        let records = Recorded::of(pins, name, self.idx.len(), metadata);
        let room_before = self.keep_before_regions(v, &records, usage)?;
        if reserved_checksums(metadata) && room_before.iter().flatten().all(|&r| r == 0) {
            return Err(no_checksum_reserve(self.who, v));
        }
        let rule = TailRule {
            metadata,
            room_before,
            recorded: &records.places,
        };
        let (regions, geometry, tails) = self.regions_with_tails(v, &rule, usage)?;
        claim_regions(name, self.idx, &regions, usage);
        metadata.checksum_after_region_bytes = tails.iter().copied().max().unwrap_or(0);
        for (&m, &tail) in self.idx.iter().zip(&tails).filter(|(_, &t)| t > 0) {
            usage[m].cursor += tail;
            let what = format!("the block checksums of volume \"{name}\" (after its region)");
            usage[m].users.push((what, tail));
        }
        Ok((regions, geometry))
    }

    /// Takes on each member what the volume keeps before its region: the bytes up to its
    /// recorded start, or — on a member the records do not place — the reserves a new
    /// volume's would get. By position: the room before each recorded region for the
    /// checksums ([`room_before_region`]; `None`: not recorded).
    fn keep_before_regions(
        &self,
        v: &RawVolume,
        records: &Recorded,
        usage: &mut [Usage],
    ) -> R<Vec<Option<u64>>> {
        let name = records.name;
        let mut room_before = Vec::with_capacity(self.idx.len());
        for (p, &m) in self.idx.iter().enumerate() {
            let u = &mut usage[m];
            let Some(start) = records.start(p) else {
                let reserves = records.unrecorded_reserve_bytes;
                u.cursor += reserves;
                u.users
                    .push((format!("the reserves of volume \"{name}\""), reserves));
                room_before.push(None);
                continue;
            };
            let area = records.checksum_area(p);
            let room = room_before_region(start, u.cursor, records.log_bytes, area)
                .map_err(|o| o.problem(self.who, &self.members[m].id, v.name.span()))?;
            room_before.push(Some(room));
            if start > u.cursor {
                let what = format!("the reserves before volume \"{name}\"");
                u.users.push((what, start - u.cursor));
            }
            u.cursor = start;
        }
        Ok(room_before)
    }

    /// The regions, their geometry and the bytes kept after each region for its checksum
    /// area (`rule`): placed first as if no region grew past a checksum area the records put
    /// after it; then, where one did, with room for that area to move past the grown end.
    fn regions_with_tails(
        &self,
        v: &RawVolume,
        rule: &TailRule,
        usage: &mut [Usage],
    ) -> R<(Vec<Region>, Geometry, Vec<u64>)> {
        let (mut regions, mut geometry) = self.regions(v, usage)?;
        let mut tails = rule.tails(&regions, &[]);
        for round in 0..2 {
            if tails.iter().all(|&t| t == 0) {
                break;
            }
            (self.idx.iter().zip(&tails)).for_each(|(&m, &t)| usage[m].tail_bytes = t);
            let again = self.regions(v, usage);
            self.idx.iter().for_each(|&m| usage[m].tail_bytes = 0);
            (regions, geometry) = again?;
            let grown = grown_past_records(&regions, rule.recorded);
            if round == 1 || !grown.contains(&true) {
                break;
            }
            tails = rule.tails(&regions, &grown);
        }
        Ok((regions, geometry, tails))
    }
}

/// What the records keep of volume `name`, by member position.
struct Recorded<'a> {
    name: &'a str,
    /// Where each region starts (`None`, or past the end: a member the records do not place).
    starts: &'a [Option<u64>],
    /// Each region as recorded, with its checksum area.
    places: Vec<Option<RecordedPlace>>,
    /// The log's reserve before each region.
    log_bytes: u64,
    /// What a member the records do not place takes before the region: a new volume's
    /// reserves.
    unrecorded_reserve_bytes: u64,
}

impl<'a> Recorded<'a> {
    /// Volume `name`'s records over its `n` members, with the reserves `metadata` asks.
    fn of(pins: &'a Pins, name: &'a str, n: usize, metadata: &MetadataOptions) -> Recorded<'a> {
        // The log's reserve as recorded, even with `write_hole = "off"` now: its bytes are
        // the volume's.
        let recorded_log = pins.log_reserve_bytes(name).flatten();
        let log_bytes = recorded_log.or(metadata.ppl_log_bytes).unwrap_or(0);
        Recorded {
            name,
            starts: pins.starts(name).unwrap_or_default(),
            places: (0..n).map(|p| pins.place(name, p)).collect(),
            log_bytes,
            unrecorded_reserve_bytes: metadata.checksum_reserve_bytes.unwrap_or(0) + log_bytes,
        }
    }

    /// Where position `p`'s region starts; `None`: the records do not place it.
    fn start(&self, p: usize) -> Option<u64> {
        self.starts.get(p).copied().flatten()
    }

    /// Position `p`'s recorded checksum area (offset, length).
    fn checksum_area(&self, p: usize) -> Option<(u64, u64)> {
        self.places[p].and_then(|r| r.checksum_area)
    }
}

/// The bytes a member keeps free before its recorded region at `start` for the volume's
/// checksums, once the config's volumes before it end at `cursor`: those between them, less
/// the log's reserve (`log_bytes`). A member's data never moves, so the lowest byte the
/// volume keeps (its log's reserve, or its checksum `area` where that lies before the
/// region) must not lie below `cursor`. Pure.
fn room_before_region(
    start: u64,
    cursor: u64,
    log_bytes: u64,
    area: Option<(u64, u64)>,
) -> Result<u64, Overlap> {
    let below = area.filter(|&(o, _)| o >= METADATA_RESERVED && o < start);
    let floor = (start.saturating_sub(log_bytes)).min(below.map_or(start, |(o, _)| o));
    if floor < cursor {
        return Err(Overlap {
            floor,
            start,
            cursor,
        });
    }
    Ok((start - cursor).saturating_sub(log_bytes))
}

/// A recorded region whose reserves begin (`floor`) below where the config places the
/// volumes before it up to (`cursor`).
#[derive(Debug, PartialEq, Eq)]
struct Overlap {
    floor: u64,
    /// Where the recorded region starts.
    start: u64,
    cursor: u64,
}

impl Overlap {
    /// Volume `who` refused, naming the member (`member_id`) it overlaps on.
    fn problem(&self, who: &str, member_id: &str, span: Range<usize>) -> Problem {
        let Overlap {
            floor,
            start,
            cursor,
        } = self;
        Problem::new(
            span,
            ErrorKind::Fit,
            format!(
                "{who}: its records keep it from byte {floor} of member \"{member_id}\" on (its region at byte {start}, its reserves before it), but the config places the volumes before it up to byte {cursor}: a member's data is never moved, so the volumes before it cannot grow into it (list a new volume after the existing ones)",
            ),
        )
    }
}

/// Volume `who` keeps its checksums in a reserve before its regions, which its records
/// never made room for.
fn no_checksum_reserve(who: &str, v: &RawVolume) -> Problem {
    Problem::new(
        v.name.span(),
        ErrorKind::Option,
        format!(
            "{who}: its records start its regions with no block-checksum reserve before them (it was created with checksums = \"off\" or \"enable\"), and checksums = \"on\" (the default) keeps the checksums in such a reserve, but a region never moves: set checksums = \"enable\" (an area where each member has room, and a background pass computes the checksums) or \"off\"",
        ),
    )
}

/// What decides the bytes kept after each region of a pinned volume ([`tail_bytes`]).
struct TailRule<'a> {
    metadata: &'a MetadataOptions,
    /// By position: the room recorded before each region (`None`: not recorded).
    room_before: Vec<Option<u64>>,
    /// By position: each region as recorded.
    recorded: &'a [Option<RecordedPlace>],
}

impl TailRule<'_> {
    /// The tails of `regions`, where `grown[p]` says position `p`'s grew over its area.
    fn tails(&self, regions: &[Region], grown: &[bool]) -> Vec<u64> {
        tail_bytes(
            self.metadata,
            regions,
            &self.room_before,
            self.recorded,
            grown,
        )
    }
}

/// By position: whether each region is longer than the records keep it. Pure.
fn grown_past_records(regions: &[Region], recorded: &[Option<RecordedPlace>]) -> Vec<bool> {
    (regions.iter().zip(recorded))
        .map(|(r, rec)| rec.is_some_and(|rec| r.len > rec.len))
        .collect()
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

    #[test]
    fn the_room_before_a_recorded_region_is_what_the_log_leaves_of_the_gap() {
        let start = 10 * MIB;
        assert_eq!(room_before_region(start, 4 * MIB, MIB, None), Ok(5 * MIB));
        // A volume right behind it leaves no room; nor does a log that fills the gap.
        assert_eq!(room_before_region(start, start, 0, None), Ok(0));
        assert_eq!(room_before_region(start, 4 * MIB, 6 * MIB, None), Ok(0));
        // A checksum area after the region, or inside the metadata area, lowers nothing.
        let after = Some((start + 100 * MIB, MIB));
        assert_eq!(room_before_region(start, 4 * MIB, 0, after), Ok(6 * MIB));
    }

    #[test]
    fn reserves_recorded_below_the_volumes_before_are_an_overlap() {
        let start = 10 * MIB;
        // The log's reserve reaches below the cursor.
        let log = room_before_region(start, 8 * MIB, 3 * MIB, None);
        let floor = 7 * MIB;
        let want = Overlap {
            floor,
            start,
            cursor: 8 * MIB,
        };
        assert_eq!(log, Err(want));
        // So does a checksum area recorded before the region.
        let area = room_before_region(start, 8 * MIB, 0, Some((5 * MIB, MIB)));
        assert_eq!(area.map_err(|o| o.floor), Err(5 * MIB));
        let text = Overlap {
            floor,
            start,
            cursor: 8 * MIB,
        }
        .problem("volume \"v\"", "d1", 0..1)
        .message;
        assert!(
            text.starts_with("volume \"v\": its records keep it from byte 7340032 of member \"d1\" on (its region at byte 10485760"),
            "{text}"
        );
    }

    #[test]
    fn a_region_has_grown_only_past_what_its_records_keep() {
        let rec = |len| {
            Some(RecordedPlace {
                start: 3 * MIB,
                len,
                checksum_area: None,
            })
        };
        let regions = [region(100 * MIB), region(200 * MIB), region(300 * MIB)];
        let recorded = [rec(100 * MIB), rec(150 * MIB), None];
        assert_eq!(
            grown_past_records(&regions, &recorded),
            [false, true, false]
        );
    }

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
