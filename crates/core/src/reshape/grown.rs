//! The new tree's space past the old capacity: made consistent before anyone may write it.
//!
//! A reshape that grows the volume (members added, regions grown) offers the old capacity
//! until its copy ends; the new tree's bytes past it are whatever the members' rows held —
//! stale rows of the old tree, an added member's zeros, a forced member's old data. Their
//! parity (or copies) do not agree with them: old RAID 6 rows of P and Q do not cancel as
//! RAID 5's do, a three-way mirror's copies XOR to one copy, not zero. A client's partial
//! write there would fold its delta into wrong parity, and the first member lost afterwards
//! would rebuild its bytes wrong. So after the copy the pass walks the grown space and
//! rewrites each stripe whole through the new tree (`resync_range`: parity regenerated,
//! copies made to agree), then flushes; only then do the records take the new tree and the
//! next open offer the grown size. Nothing records progress here: no client reaches the
//! grown space before the commit, so a restart simply walks all of it again.

use super::ReshapeNode;
use crate::error::VolumeResult;
use nbraid_layout::Side;

impl ReshapeNode {
    /// Logical bytes the new tree holds past the old capacity.
    pub fn grown_bytes(&self) -> u64 {
        let layout = &self.0.layout;
        layout.new_tree().capacity() - layout.capacity()
    }

    /// Rewrites the new tree's stripes over `[offset, offset+len)`, a range past the old
    /// capacity (the copy must have ended: the position is the old capacity).
    pub(super) async fn sync_grown(&self, offset: u64, len: u64) -> VolumeResult<()> {
        let capacity = self.0.layout.capacity();
        assert_eq!(
            self.position(),
            capacity,
            "the grown space follows the copy"
        );
        assert!(
            offset >= capacity && offset + len <= capacity + self.grown_bytes(),
            "{offset}+{len} lies in the grown space"
        );
        self.tree(Side::New).resync_range(offset, len).await
    }
}
