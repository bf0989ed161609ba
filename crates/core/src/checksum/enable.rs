//! Where a checksum area goes when an existing volume — created without per-block checksums —
//! turns them on: its regions stay where they are (data is never moved or reinterpreted), so
//! the area goes into room the member does not use. A pure decision; the first step of
//! enabling checksums on an existing volume (`metadata/checksum_area.rs` records the places,
//! `metadata/checksum_fill.rs` runs the pass that fills the entries).
//!
//! Preference: right after the region (a member larger than its region; the area then sits
//! beside the blocks it covers), else the first gap after the metadata area, else the first
//! gap in the metadata area past the superblocks (it holds bitmaps and logs of every volume
//! on the member: taken last). No room anywhere is refused with the bytes wanted and the
//! ways out.

use super::entry::area_bytes;
use super::ChecksumArea;

/// No room on a member for the checksum area of its region.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("no room for a {need_bytes}-byte checksum area for the region of {region_len_bytes} bytes at {region_start}: nothing free after the region, on the rest of the member or in its metadata area (the region is not moved); give the member {need_bytes} more bytes after its region, or keep checksums = \"off\"")]
pub struct NoRoomForChecksums {
    pub need_bytes: u64,
    pub region_start: u64,
    pub region_len_bytes: u64,
}

/// What a member holds, for [`place_for_existing`].
#[derive(Clone, Debug)]
pub struct MemberUse {
    pub member_len_bytes: u64,
    /// Bytes `[start, end)` in use: every volume's regions and areas on the member.
    pub used: Vec<(u64, u64)>,
    /// Where per-volume areas may start in the metadata area (past the superblock copies).
    pub metadata_areas_start: u64,
    /// End of the metadata area (regions start at or after it).
    pub metadata_area_bytes: u64,
}

/// The checksum area for the region `start..start+len` of an existing volume on a member
/// used as `m` says, without moving anything.
pub fn place_for_existing(
    m: &MemberUse,
    start: u64,
    len: u64,
) -> Result<ChecksumArea, NoRoomForChecksums> {
    let need = area_bytes(len);
    let after_region = (start + len).next_multiple_of(4096);
    let candidates = [
        fits_at(m, after_region, need, m.member_len_bytes),
        first_fit(m, need, m.metadata_area_bytes, m.member_len_bytes),
        first_fit(m, need, m.metadata_areas_start, m.metadata_area_bytes),
    ];
    candidates
        .into_iter()
        .flatten()
        .next()
        .map(|offset| ChecksumArea {
            offset_bytes: offset,
            len_bytes: need,
        })
        .ok_or(NoRoomForChecksums {
            need_bytes: need,
            region_start: start,
            region_len_bytes: len,
        })
}

/// `at` when `[at, at+need)` lies below `limit` and overlaps nothing used.
fn fits_at(m: &MemberUse, at: u64, need: u64, limit: u64) -> Option<u64> {
    let end = at.checked_add(need)?;
    let free = end <= limit && m.used.iter().all(|&(s, e)| e <= at || end <= s);
    free.then_some(at)
}

/// The first 4 KiB-aligned place for `need` bytes in `[from, to)` that overlaps nothing used.
fn first_fit(m: &MemberUse, need: u64, from: u64, to: u64) -> Option<u64> {
    let mut used: Vec<(u64, u64)> = m.used.clone();
    used.sort_unstable();
    let mut at = from.next_multiple_of(4096);
    for (s, e) in used {
        if fits_at(m, at, need, to).is_some() {
            return Some(at);
        }
        if e > at && s < at.saturating_add(need) {
            at = e.next_multiple_of(4096);
        }
    }
    fits_at(m, at, need, to)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn member(len: u64, used: Vec<(u64, u64)>) -> MemberUse {
        MemberUse {
            member_len_bytes: len,
            used,
            metadata_areas_start: 128 << 10,
            metadata_area_bytes: MIB,
        }
    }

    #[test]
    fn after_the_region_when_the_member_is_larger() {
        let region = (MIB, 64 * MIB);
        let m = member(70 * MIB, vec![(MIB, 65 * MIB), (128 << 10, 192 << 10)]);
        let a = place_for_existing(&m, region.0, region.1).expect("room");
        assert_eq!(a.offset_bytes, 65 * MIB);
        assert_eq!(a.len_bytes, area_bytes(64 * MIB));
    }

    #[test]
    fn in_a_gap_or_the_metadata_area_when_the_region_ends_the_member() {
        // Another volume's region right after this one; a gap before it.
        let next = 66 * MIB + (64 << 10);
        let used = vec![
            (2 * MIB, 66 * MIB),
            (next, 80 * MIB),
            (128 << 10, 192 << 10),
        ];
        let m = member(80 * MIB, used);
        let a = place_for_existing(&m, 2 * MIB, 64 * MIB).expect("room");
        assert_eq!(a.offset_bytes, MIB, "the gap before the region");
        // A member the region fills: the metadata area, past what is used there.
        let m = member(65 * MIB, vec![(MIB, 65 * MIB), (128 << 10, 200 << 10)]);
        let a = place_for_existing(&m, MIB, 64 * MIB).expect("room");
        assert_eq!(a.offset_bytes, 200 << 10);
        assert!(a.offset_bytes + a.len_bytes <= MIB);
    }

    #[test]
    fn no_room_is_refused_with_the_bytes_and_the_way_out() {
        // 1 GiB needs 2 MiB + 4 KiB: more than the metadata area holds.
        let m = member(MIB + (1 << 30), vec![(MIB, MIB + (1 << 30))]);
        let e = place_for_existing(&m, MIB, 1 << 30).unwrap_err();
        assert_eq!(e.need_bytes, area_bytes(1 << 30));
        let text = e.to_string();
        assert!(text.contains("checksums = \"off\"") && text.contains("more bytes"));
    }
}
