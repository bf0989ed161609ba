//! The least a member needs to hold a volume (`member::Least`), from the volume's geometry:
//! what comes before it on the member, its reserves sized for its least region, that region.
//! A member below the least any volume needs is refused with it ([`member::Small`]).

use super::cx::R;
use super::member::{Least, Small};
use super::Placement;
use crate::allocate::Usage;
use crate::model::{VolumeSize, JBOD_ALIGN};
use crate::size::format_size;
use crate::volume_meta::{checksum_reserve_bytes, default_log_reserve_bytes, MetadataOptions};
use nbraid_layout::Region;

impl Placement<'_> {
    /// Refuses the volume's first member in `small`, naming what the volume needs of it.
    pub(super) fn refuse_small(
        &self,
        small: &[Small],
        metadata: &MetadataOptions,
        usage: &[Usage],
    ) -> R<()> {
        for &m in self.idx {
            if let Some(s) = small.iter().find(|s| s.member == m) {
                let least = self.least(usage[m].cursor, metadata);
                return Err(s.too_small_for(self.who, &least));
            }
        }
        Ok(())
    }

    /// What a member needs for the volume after `before_bytes`: its reserves sized for its
    /// least region (one strip; the region a fixed size needs; a JBOD's 4 KiB), that region.
    fn least(&self, before_bytes: u64, metadata: &MetadataOptions) -> Least {
        let sizing = self.plan.sizing();
        let unit = sizing.unit();
        let (region_bytes, what) = match self.requested {
            _ if sizing.concatenates_members() => (JBOD_ALIGN, "one 4 KiB block".to_string()),
            VolumeSize::All => (unit, format!("one {} strip", format_size(unit))),
            VolumeSize::Bytes(b) => {
                let len = sizing.member_len_for(b);
                (
                    len,
                    format!("the {} region its size needs", format_size(len)),
                )
            }
        };
        let mut least = Least::new(before_bytes, region_bytes, &what);
        if metadata.checksums {
            least.checksum_bytes = checksum_reserve_bytes(region_bytes);
        }
        least.log_bytes = (metadata.ppl_log_bytes)
            .or_else(|| self.strip_log_reserve(metadata, region_bytes))
            .unwrap_or(0);
        least
    }

    /// The write-hole log reserve of the volume over regions of `region_bytes` (what its
    /// strips need, or the default over large regions); `None` with the log off or in the
    /// metadata area.
    fn strip_log_reserve(&self, metadata: &MetadataOptions, region_bytes: u64) -> Option<u64> {
        let region = Region {
            start: 0,
            len: region_bytes,
        };
        let g = self.plan.geometry(&vec![region; self.idx.len()]).ok()?;
        nbraid_layout::volume_log_ring_bytes(g.root()).filter(|_| metadata.ppl)?;
        default_log_reserve_bytes(nbraid_layout::log_reserve_bytes(g.root()), region_bytes)
    }
}
