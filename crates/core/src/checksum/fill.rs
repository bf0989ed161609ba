//! Computing the entries of blocks written before their volume had checksums (the second
//! half of enabling them on an existing volume: `metadata/checksum_fill.rs` walks every
//! region with [`cover`] once its scrub has made the redundancy agree), and of the blocks
//! whose entries an unclean start dropped (`metadata/checksum_refill.rs` walks the
//! [`dropped_ranges`] with [`cover`] once the start's resync has made the redundancy agree).
//!
//! A block gets the checksum of the bytes its member holds *now*, read with the block held
//! as a write holds it ([`LeafChecksums::write_lock`]), so no write is in flight on it and an
//! entry a write set is never overwritten (only "no checksum" entries are filled). Why that
//! survives a power loss without marking the header: a page group with no write since the
//! volume was opened has its bytes on the member's media, so its filled entries match them
//! whenever their page reaches the disk; a group written since is marked in the header and
//! dropped at an unclean start like any other.

use super::entry::ENTRIES_PER_PAGE;
use super::{BlockSum, LeafChecksums, BLOCK_BYTES};
use crate::buf::Buf;
use crate::member::{Member, MemberResult};

/// Fills the "no checksum" entries of the whole blocks of region bytes `offset..offset+len`
/// (both on 4 KiB blocks, inside the region) from what `m` holds there; returns how many.
pub async fn cover(cs: &LeafChecksums, m: &dyn Member, offset: u64, len: u64) -> MemberResult<u64> {
    assert!(
        offset.is_multiple_of(BLOCK_BYTES) && len.is_multiple_of(BLOCK_BYTES),
        "entries cover whole blocks"
    );
    assert!(offset + len <= cs.len_bytes, "inside the region");
    if len == 0 {
        return Ok(0);
    }
    let _held = cs.write_lock(offset, offset + len).await;
    let start = cs.first_block * BLOCK_BYTES;
    let bytes = m.read(start + offset, Buf::new(len as usize)).await?;
    let computed = cs.compute(offset, &[&bytes]);
    cs.store.open(m).await?;
    let first = offset / BLOCK_BYTES;
    let mut filled = 0;
    cs.store
        .each_page(m, first, first + computed.len() as u64, |t, blocks| {
            for block in blocks {
                if t.entry(block) == BlockSum::Unknown {
                    t.set_entry(block, computed[(block - first) as usize]);
                    filled += 1;
                }
            }
        })
        .await?;
    Ok(filled)
}

/// The region bytes (offset, length: whole blocks, in order, apart) whose entries this open
/// dropped: the page groups the header marked at an unclean start. Their pages are blanked
/// on the member first (what the volume's next flush would do), so that a page [`cover`]
/// fills and writes back is not blanked after it. Empty after a clean start.
pub(super) async fn dropped_ranges(
    cs: &LeafChecksums,
    m: &dyn Member,
) -> MemberResult<Vec<(u64, u64)>> {
    cs.store.open(m).await?;
    cs.store.blank_untrusted(m).await?;
    let per_group = cs.store.table().pages_per_group();
    let group_bytes = per_group * ENTRIES_PER_PAGE * BLOCK_BYTES;
    Ok(group_ranges(
        &cs.store.dropped_groups(),
        group_bytes,
        cs.len_bytes / BLOCK_BYTES * BLOCK_BYTES,
    ))
}

/// The bytes of `groups` (ascending) of `group_bytes` each in a region of `region_bytes`,
/// neighbours merged.
fn group_ranges(groups: &[u64], group_bytes: u64, region_bytes: u64) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for &g in groups {
        let a = (g * group_bytes).min(region_bytes);
        let b = ((g + 1) * group_bytes).min(region_bytes);
        match out.last_mut() {
            _ if a == b => {}
            Some((s, n)) if *s + *n == a => *n += b - a,
            _ => out.push((a, b - a)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dropped_groups_become_merged_ranges_inside_the_region() {
        let g = 8192;
        assert_eq!(group_ranges(&[], g, 5 * g), vec![]);
        assert_eq!(
            group_ranges(&[0, 1, 3], g, 5 * g),
            vec![(0, 2 * g), (3 * g, g)]
        );
        // The last group is cut at the region's end; groups past it are nothing.
        assert_eq!(
            group_ranges(&[4, 5, 9], g, 4 * g + 4096),
            vec![(4 * g, 4096)]
        );
    }
}
