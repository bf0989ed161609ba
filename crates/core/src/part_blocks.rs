//! Writes of part of a 4 KiB checksum block, on volumes of 512-byte blocks that keep
//! per-block checksums ([`crate::checksum`]). A leaf given part of a block reads the rest
//! from its member to checksum the block whole; when those old bytes are bad it cannot vouch
//! for them and drops the block's checksum, so the bad bytes the write kept would read back
//! as good. So before such a write the blocks it covers in part are read through the
//! redundancy — a bad copy is rebuilt and repaired whole — and the leaf finds good bytes.
//!
//! Why not widen the write to whole blocks (read, merge, write): it would write bytes the
//! request did not name, over a concurrent write of them (the block layer orders nothing
//! between writes in flight, but neither may undo the other's bytes outside their overlap).

use crate::buf::{Buf, SharedBuf};
use crate::checksum::BLOCK_BYTES;
use crate::error::VolumeResult;
use crate::node::{ArrayNode, ZeroKind};

/// One volume's rule: `on` for a volume of 512-byte blocks that keeps checksums, whose
/// last block ends at `capacity_bytes`.
#[derive(Clone, Copy)]
pub(crate) struct PartBlocks {
    pub(crate) on: bool,
    pub(crate) capacity_bytes: u64,
}

impl PartBlocks {
    /// The blocks a request of `[offset, offset + len)` covers in part, when the rule is on.
    fn in_part(&self, offset: u64, len: u64) -> Vec<(u64, u64)> {
        match self.on {
            true => blocks_in_part(offset, len, self.capacity_bytes),
            false => Vec::new(),
        }
    }

    /// Writes `data` at `offset` through `root`, the blocks it covers in part healed first.
    pub(crate) async fn write(
        &self,
        root: &dyn ArrayNode,
        offset: u64,
        data: SharedBuf,
        fua: bool,
    ) -> VolumeResult<()> {
        heal(root, &self.in_part(offset, data.len() as u64)).await?;
        root.write(offset, data, fua).await
    }

    /// Zeroes `[offset, offset + len)` through `root`: the pieces covering blocks in part
    /// healed and written as zero bytes (a leaf zeroing part of a block cannot checksum it
    /// and drops its entry, leaving the rest unchecked), the whole blocks zeroed as such.
    pub(crate) async fn zero(
        &self,
        root: &dyn ArrayNode,
        offset: u64,
        len: u64,
        kind: ZeroKind,
        fua: bool,
    ) -> VolumeResult<()> {
        if self.in_part(offset, len).is_empty() {
            return root.zero(offset, len, kind).await;
        }
        let pieces = zero_pieces(offset, len, self.capacity_bytes);
        for (start, end) in pieces.in_part {
            let zeroes = Buf::zeroed((end - start) as usize).freeze();
            self.write(root, start, zeroes, fua).await?;
        }
        match pieces.whole {
            Some((start, end)) => root.zero(start, end - start, kind).await,
            None => Ok(()),
        }
    }
}

/// The 4 KiB blocks (the last one ending at the volume's end, `capacity_bytes`) that
/// `[offset, offset + len)` covers in part: its first and its last block, or the one block
/// it lies in; none when it covers only whole blocks.
pub(crate) fn blocks_in_part(offset: u64, len: u64, capacity_bytes: u64) -> Vec<(u64, u64)> {
    let end = offset + len;
    let block = |at: u64| {
        let b0 = at / BLOCK_BYTES * BLOCK_BYTES;
        (b0, (b0 + BLOCK_BYTES).min(capacity_bytes))
    };
    let (first, last) = (block(offset), block(end - 1));
    let mut out = Vec::new();
    for b in [first, last] {
        let whole = offset <= b.0 && b.1 <= end;
        if !whole && !out.contains(&b) {
            out.push(b);
        }
    }
    out
}

/// `[offset, offset + len)` cut at 4 KiB block edges for zeroing: the pieces that cover
/// blocks in part (zeroed as writes of zero bytes, so their blocks keep checksums) and the
/// whole blocks between them (zeroed as such). A block ending at the volume's end
/// (`capacity_bytes`) is whole there.
pub(crate) fn zero_pieces(offset: u64, len: u64, capacity_bytes: u64) -> ZeroPieces {
    let end = offset + len;
    let a = offset.next_multiple_of(BLOCK_BYTES).min(end);
    let b = match end == capacity_bytes {
        true => end,
        false => end / BLOCK_BYTES * BLOCK_BYTES,
    };
    if a >= b {
        return ZeroPieces {
            in_part: vec![(offset, end)],
            whole: None,
        };
    }
    let in_part = [(offset, a), (b, end)].into_iter().filter(|(s, e)| s < e);
    ZeroPieces {
        in_part: in_part.collect(),
        whole: Some((a, b)),
    }
}

/// A zeroing cut at block edges ([`zero_pieces`]).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct ZeroPieces {
    pub(crate) in_part: Vec<(u64, u64)>,
    pub(crate) whole: Option<(u64, u64)>,
}

/// Reads `blocks` through `root`, so a copy whose bytes fail their checksum is repaired
/// whole before a write of part of them (the bytes read are dropped).
async fn heal(root: &dyn ArrayNode, blocks: &[(u64, u64)]) -> VolumeResult<()> {
    for &(b0, b1) in blocks {
        root.read(b0, Buf::new((b1 - b0) as usize)).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zeroing_is_cut_where_it_covers_blocks_in_part() {
        let cap = 1 << 20;
        let cut = |o, l| zero_pieces(o, l, cap);
        let pieces = |in_part: &[(u64, u64)], whole| ZeroPieces {
            in_part: in_part.to_vec(),
            whole,
        };
        assert_eq!(cut(4096, 8192), pieces(&[], Some((4096, 12288))));
        assert_eq!(
            cut(512, 1024),
            pieces(&[(512, 1536)], None),
            "inside one block"
        );
        assert_eq!(
            cut(3584, 1024),
            pieces(&[(3584, 4608)], None),
            "two blocks, in part"
        );
        assert_eq!(
            cut(3584, 4096 + 1024),
            pieces(&[(3584, 4096), (8192, 8704)], Some((4096, 8192)))
        );
        assert_eq!(cut(0, 4096 + 512), pieces(&[(4096, 4608)], Some((0, 4096))));
        // The volume's short last block is whole at its end.
        assert_eq!(
            zero_pieces(cap, 2048, cap + 2048),
            pieces(&[], Some((cap, cap + 2048)))
        );
    }

    #[test]
    fn only_the_blocks_a_write_covers_in_part_are_healed_first() {
        let cap = 1 << 20;
        assert!(blocks_in_part(0, 4096, cap).is_empty());
        assert!(blocks_in_part(8192, 3 * 4096, cap).is_empty());
        assert_eq!(blocks_in_part(512, 512, cap), [(0, 4096)], "one block");
        assert_eq!(
            blocks_in_part(4096 - 512, 1024, cap),
            [(0, 4096), (4096, 8192)],
            "across a block edge"
        );
        assert_eq!(
            blocks_in_part(4096, 4096 + 512, cap),
            [(8192, 12288)],
            "the tail only"
        );
        assert_eq!(blocks_in_part(512, 3584, cap), [(0, 4096)], "the head only");
        // A volume ending inside a block: its last block ends with the volume.
        assert!(blocks_in_part(cap, 2048, cap + 2048).is_empty());
        assert_eq!(
            blocks_in_part(cap + 512, 512, cap + 2048),
            [(cap, cap + 2048)]
        );
    }
}
