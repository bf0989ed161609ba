//! The least a member needs to hold a volume ([`Least`]): what comes before it on the
//! member (the metadata area, the volumes before it), the volume's reserves sized for its
//! least region, that region — from the volume's plan. A member below the least any volume
//! needs is refused with it (`member::Small`).

use crate::allocate::least_region_words;
use crate::model::{VolumeSize, JBOD_ALIGN, METADATA_RESERVED};
use crate::size::format_size;
use crate::tree_spec::Plan;
use crate::volume_meta::{checksum_reserve_bytes, default_log_reserve_bytes, MetadataOptions};
use nbraid_layout::Region;

/// What a member needs to hold a volume's least region: what comes before it (the metadata
/// area, earlier volumes), the volume's reserves, the region. Pure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Least {
    /// Taken before the volume: the metadata area and the volumes placed before it.
    pub before_bytes: u64,
    pub checksum_bytes: u64,
    pub log_bytes: u64,
    pub region_bytes: u64,
    /// The region in words: "one 64 KiB strip", "the 32 MiB region its size needs".
    pub region_what: String,
}

impl Least {
    pub fn new(before_bytes: u64, region_bytes: u64, region_what: &str) -> Least {
        Least {
            before_bytes,
            checksum_bytes: 0,
            log_bytes: 0,
            region_bytes,
            region_what: region_what.to_string(),
        }
    }

    /// What a member needs for a volume of `plan` over `members` members, sized
    /// `requested`, after the `before_bytes` the metadata area and the volumes before it
    /// take: its reserves sized for its least region (one strip; the region a fixed size
    /// needs; a JBOD's 4 KiB), that region.
    pub fn for_volume(
        plan: &Plan,
        requested: VolumeSize,
        members: usize,
        before_bytes: u64,
        metadata: &MetadataOptions,
    ) -> Least {
        let sizing = plan.sizing();
        let unit = sizing.unit();
        let (region_bytes, what) = match requested {
            _ if sizing.concatenates_members() => (JBOD_ALIGN, "one 4 KiB block".to_string()),
            VolumeSize::All => (unit, least_region_words(unit, sizing.has_strips())),
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
            .or_else(|| strip_log_reserve(plan, members, metadata, region_bytes))
            .unwrap_or(0);
        least
    }

    pub fn total_bytes(&self) -> u64 {
        self.before_bytes + self.checksum_bytes + self.log_bytes + self.region_bytes
    }

    /// "the 1 MiB metadata area, 1 MiB of block checksums, one 64 KiB strip".
    pub fn parts(&self) -> String {
        let before = match self.before_bytes.saturating_sub(METADATA_RESERVED) {
            0 => format!("the {} metadata area", format_size(METADATA_RESERVED)),
            more => format!(
                "the {} metadata area and the {} the volumes before it take",
                format_size(METADATA_RESERVED),
                format_size(more)
            ),
        };
        let mut parts = vec![before];
        if self.checksum_bytes > 0 {
            let sums = format_size(self.checksum_bytes);
            parts.push(format!("{sums} of block checksums before the region"));
        }
        if self.log_bytes > 0 {
            let log = format_size(self.log_bytes);
            parts.push(format!("the {log} reserve of its write-hole log"));
        }
        parts.push(self.region_what.clone());
        parts.join(", ")
    }
}

/// The write-hole log reserve of a volume of `plan` over `members` regions of
/// `region_bytes` (what its strips need, or the default over large regions); `None` with the
/// log off or in the metadata area.
fn strip_log_reserve(
    plan: &Plan,
    members: usize,
    metadata: &MetadataOptions,
    region_bytes: u64,
) -> Option<u64> {
    let region = Region {
        start: 0,
        len: region_bytes,
    };
    let g = plan.geometry(&vec![region; members]).ok()?;
    nbraid_layout::volume_log_ring_bytes(g.root()).filter(|_| metadata.ppl)?;
    default_log_reserve_bytes(nbraid_layout::log_reserve_bytes(g.root()), region_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_least_a_member_needs_adds_what_comes_before_the_reserves_and_the_region() {
        let mib = 1 << 20;
        let mut least = Least::new(mib, 64 << 10, "one 64 KiB strip");
        assert_eq!(least.total_bytes(), mib + (64 << 10));
        assert_eq!(least.parts(), "the 1 MiB metadata area, one 64 KiB strip");
        least.before_bytes = 5 * mib;
        least.checksum_bytes = mib;
        least.log_bytes = 2 * mib;
        assert_eq!(least.total_bytes(), 8 * mib + (64 << 10));
        assert_eq!(
            least.parts(),
            "the 1 MiB metadata area and the 4 MiB the volumes before it take, 1 MiB of block checksums before the region, the 2 MiB reserve of its write-hole log, one 64 KiB strip"
        );
    }
}
