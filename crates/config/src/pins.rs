//! Where the records put existing volumes: the config places a new volume's regions (after
//! the volumes before it, behind the reserves its settings ask for), but an existing
//! volume's regions stay where its records put them — a member's data is never moved. Sizes
//! the config derives from the members (a `size = "all"` region, the block-checksum reserve
//! sized from it) change when the members grow; the region's start must not. [`Pins`] hands
//! the recorded starts to the placement (`nbraid_assembly` reads them from the
//! superblocks): a pinned region starts at its recorded byte, everything between the
//! volumes before it and that byte stays its reserves (the log's as recorded, whatever
//! today's default reserve is), and when the grown region needs a larger checksum area than
//! that reserve holds, the config leaves the room for it right after the region (where the
//! engine moves the area when the volume grows in place).

use std::collections::HashMap;

/// By volume name, each member's recorded region start, by the member's position in the
/// volume's `members` (`None`: a member the records do not place yet — one being added), and
/// the log's recorded reserve before the regions (`None`: the log lives in the metadata area,
/// or there is none).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pins {
    by_volume: HashMap<String, Pinned>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Pinned {
    starts: Vec<Option<u64>>,
    log_reserve_bytes: Option<u64>,
}

impl Pins {
    pub fn new() -> Pins {
        Pins::default()
    }

    /// Volume `name`'s members start their regions at `starts` (by position in its
    /// `members`); its log takes `log_reserve_bytes` right before them.
    pub fn pin(&mut self, name: &str, starts: Vec<Option<u64>>, log_reserve_bytes: Option<u64>) {
        let pinned = Pinned {
            starts,
            log_reserve_bytes,
        };
        self.by_volume.insert(name.to_string(), pinned);
    }

    /// Volume `name`'s recorded starts, if pinned.
    pub fn starts(&self, name: &str) -> Option<&[Option<u64>]> {
        self.by_volume.get(name).map(|p| &p.starts[..])
    }

    /// Volume `name`'s recorded log reserve, if pinned.
    pub fn log_reserve_bytes(&self, name: &str) -> Option<Option<u64>> {
        self.by_volume.get(name).map(|p| p.log_reserve_bytes)
    }

    pub fn is_empty(&self) -> bool {
        self.by_volume.is_empty()
    }
}
