//! Computing the entries of blocks written before their volume had checksums (the second
//! half of enabling them on an existing volume: `metadata/checksum_fill.rs` walks every
//! region with [`cover`] once its scrub has made the redundancy agree).
//!
//! A block gets the checksum of the bytes its member holds *now*, read with the block held
//! as a write holds it ([`LeafChecksums::write_lock`]), so no write is in flight on it and an
//! entry a write set is never overwritten (only "no checksum" entries are filled). Why that
//! survives a power loss without marking the header: a page group with no write since the
//! volume was opened has its bytes on the member's media, so its filled entries match them
//! whenever their page reaches the disk; a group written since is marked in the header and
//! dropped at an unclean start like any other.

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
