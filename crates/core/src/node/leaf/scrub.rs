//! Scrubbing a bare leaf: a member region no parity group or mirror stands over (a RAID 0
//! or JBOD member, or a bare leaf beside parity groups under a stripe). Nothing reads it for
//! the scrub but the leaf itself, so it reads its piece of each window through its checksums:
//! a block that does not match, or does not read, is found and counted unreadable; with no
//! redundancy there is nothing to repair it from. Without checksums only read errors can be
//! found. Leaves under an owner ([`ScrubPass::owner_above`]) read nothing: the owner does.

use super::LeafNode;
use crate::buf::Buf;
use crate::error::VolumeResult;
use crate::node::scrub_findings::{ScrubAction, ScrubFinding, ScrubFound};
use crate::node::{NodeIo, ScrubPass, SkipReason, MIRROR_SCRUB_BLOCK_BYTES};

/// The unit a range that failed to read is read again in (the checksums' block).
const UNIT_BYTES: u64 = crate::checksum::BLOCK_BYTES;

/// Blocks of [`MIRROR_SCRUB_BLOCK_BYTES`] a leaf counts for `len_bytes` it read (as a
/// mirror counts the blocks it compares).
fn counted_blocks(len_bytes: u64) -> u64 {
    len_bytes.div_ceil(MIRROR_SCRUB_BLOCK_BYTES)
}

impl LeafNode {
    /// Reads `[offset, offset+len)` of the region for a scrub (see the module docs).
    pub(super) async fn scrub_bare(
        &self,
        offset: u64,
        len: u64,
        pass: &ScrubPass<'_>,
    ) -> VolumeResult<()> {
        if pass.owner_above || len == 0 {
            return Ok(());
        }
        if !self.slot().is_current() {
            // A failed bare member: nothing under it can be read or checked.
            for _ in 0..counted_blocks(len) {
                pass.skip(SkipReason::NoRedundancy);
            }
            return Ok(());
        }
        pass.bump(|s| &s.checked, counted_blocks(len));
        if self.read(offset, Buf::new(len as usize)).await.is_ok() {
            return Ok(());
        }
        // Block by block: each bad one costs only itself.
        let mut lo = 0;
        while lo < len {
            let n = UNIT_BYTES.min(len - lo);
            if let Err(e) = self.read(offset + lo, Buf::new(n as usize)).await {
                pass.bump(|s| &s.unreadable, 1);
                pass.found(ScrubFinding {
                    member: self.index,
                    member_offset_bytes: self.start + offset + lo,
                    len_bytes: n,
                    found: ScrubFound::of_read_error(&e),
                    action: ScrubAction::Unrepairable,
                    cross_check: None,
                });
            }
            lo += n;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_leaf_counts_its_bytes_in_mirror_blocks() {
        assert_eq!(counted_blocks(0), 0);
        assert_eq!(counted_blocks(4096), 1);
        assert_eq!(counted_blocks(MIRROR_SCRUB_BLOCK_BYTES), 1);
        assert_eq!(counted_blocks(2 << 20), 32);
    }
}
