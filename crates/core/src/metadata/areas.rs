//! Room in a member's metadata area: after the two superblock copies, each volume on the
//! member keeps its areas there (bitmap, partial-parity log), placed first-fit on 4 KiB
//! boundaries. Pure functions over the member's records.

use super::{Area, Superblock, METADATA_AREA_BYTES, SLOT_BYTES};
use nbraid_layout::Node;

/// Per-volume metadata areas start after the two superblock copies.
const AREAS_START: u64 = 2 * SLOT_BYTES;

/// The first gap of `len` bytes (4 KiB aligned) in the per-volume metadata areas that no
/// record on the member uses.
pub(super) fn free_area(sb: Option<&Superblock>, len: u64) -> Option<u64> {
    free_area_avoiding(sb, len, &[])
}

/// [`free_area`], also avoiding `avoid` (areas not recorded yet).
pub(super) fn free_area_avoiding(sb: Option<&Superblock>, len: u64, avoid: &[Area]) -> Option<u64> {
    let mut used: Vec<(u64, u64)> = sb
        .map(|sb| {
            sb.volumes
                .iter()
                .flat_map(|v| {
                    [v.bitmap.map(|b| b.area), v.ppl, v.checksums, backup_area(v)]
                        .into_iter()
                        .flatten()
                        .filter(|a| a.offset < METADATA_AREA_BYTES)
                        .map(|a| (a.offset, a.offset + a.len))
                })
                .collect()
        })
        .unwrap_or_default();
    used.extend(avoid.iter().map(|a| (a.offset, a.offset + a.len)));
    used.sort_unstable();
    let mut at = AREAS_START;
    for (s, e) in used {
        if s >= at + len {
            break;
        }
        at = at.max(e.next_multiple_of(4096));
    }
    (at + len <= METADATA_AREA_BYTES).then_some(at)
}

/// Role `role`'s region in `tree`: (start, length) (a role has one region per tree).
pub(super) fn region_of(tree: &Node, role: usize) -> Option<(u64, u64)> {
    let mut out = None;
    tree.visit_members(&mut |m| {
        if m.index == role {
            out.get_or_insert((m.start, m.len));
        }
    });
    out
}

/// The reshape's critical-section backup, while one runs.
fn backup_area(v: &super::VolumeRecord) -> Option<Area> {
    v.reshape.as_ref().and_then(|r| r.backup_area)
}

/// Whether `area` overlaps an area (bitmap, log, checksums, reshape backup) some record on the member uses.
pub(super) fn overlaps_recorded(sb: Option<&Superblock>, area: Area) -> bool {
    sb.is_some_and(|sb| {
        sb.volumes.iter().any(|v| {
            [v.bitmap.map(|b| b.area), v.ppl, v.checksums, backup_area(v)]
                .into_iter()
                .flatten()
                .any(|u| u.offset < area.offset + area.len && area.offset < u.offset + u.len)
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn areas_fit_first_gap_after_the_superblocks_on_4k_boundaries() {
        assert_eq!(free_area(None, 4096), Some(AREAS_START));
        let taken = Area {
            offset: AREAS_START,
            len: 5000,
        };
        let at = free_area_avoiding(None, 4096, &[taken]).unwrap();
        assert_eq!(at, (AREAS_START + 5000).next_multiple_of(4096));
        assert!(!overlaps_recorded(None, taken));
        assert_eq!(free_area(None, METADATA_AREA_BYTES), None);
    }
}
