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
//! engine moves the area when the volume grows in place). The block size a volume's records
//! keep is pinned the same way: the volume is served with it ([`Pins::block_size`]).

use std::collections::HashMap;

/// By volume name, each member's recorded region start, by the member's position in the
/// volume's `members` (`None`: a member the records do not place yet — one being added), and
/// the log's recorded reserve before the regions (`None`: the log lives in the metadata area,
/// or there is none).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pins {
    by_volume: HashMap<String, Pinned>,
    /// By volume name, the block size its records keep (bytes): a disk's sector size never
    /// changes under its data, so the volume is served with it whatever the config says.
    block_sizes: HashMap<String, u32>,
    /// By member id, the end of what the records keep on it (its regions, a checksum area
    /// after one): a member sized by its path that holds less is *short* — the config sizes
    /// it as the records need, and assembly leaves it out ([`crate::Member::short_len_bytes`])
    /// rather than shrinking every region with it.
    member_needs: HashMap<String, u64>,
    /// Read to find the records: a member file or device holding less than its `size` is
    /// taken as short rather than refused, whether or not records keep bytes on it.
    short_taken: bool,
    /// Place every volume's log as before the 8 MiB default reserve (in the metadata area
    /// unless its strips need more): the placement a config whose existing volumes no longer
    /// fit today's rules is read with, to find their records.
    before_default_log: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Pinned {
    starts: Vec<Option<u64>>,
    /// By position, what else the records say of the member's region (`None`: not known).
    places: Vec<Option<RecordedPlace>>,
    log_reserve_bytes: Option<u64>,
}

/// One member's region and block-checksum area as its record says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordedPlace {
    pub start: u64,
    pub len: u64,
    /// The checksum area (offset, length); `None` without one.
    pub checksum_area: Option<(u64, u64)>,
}

impl Pins {
    pub fn new() -> Pins {
        Pins::default()
    }

    /// Volume `name`'s members start their regions at `starts` (by position in its
    /// `members`); its log takes `log_reserve_bytes` right before them.
    pub fn pin(&mut self, name: &str, starts: Vec<Option<u64>>, log_reserve_bytes: Option<u64>) {
        let places = vec![None; starts.len()];
        let pinned = Pinned {
            starts,
            places,
            log_reserve_bytes,
        };
        self.by_volume.insert(name.to_string(), pinned);
    }

    /// [`Pins::pin`] from each member's record: its region and checksum area, so an area
    /// after the region stays reserved.
    pub fn pin_recorded(
        &mut self,
        name: &str,
        places: Vec<Option<RecordedPlace>>,
        log_reserve_bytes: Option<u64>,
    ) {
        let starts = places.iter().map(|p| p.map(|p| p.start)).collect();
        let pinned = Pinned {
            starts,
            places,
            log_reserve_bytes,
        };
        self.by_volume.insert(name.to_string(), pinned);
    }

    /// Volume `name`'s member at position `p` as recorded, if known.
    pub fn place(&self, name: &str, p: usize) -> Option<RecordedPlace> {
        self.by_volume.get(name)?.places.get(p).copied().flatten()
    }

    /// Volume `name`'s recorded starts, if pinned.
    pub fn starts(&self, name: &str) -> Option<&[Option<u64>]> {
        self.by_volume.get(name).map(|p| &p.starts[..])
    }

    /// Volume `name`'s recorded log reserve, if pinned.
    pub fn log_reserve_bytes(&self, name: &str) -> Option<Option<u64>> {
        self.by_volume.get(name).map(|p| p.log_reserve_bytes)
    }

    /// Volume `name` is served with `bytes`-byte blocks, as its records keep.
    pub fn pin_block_size(&mut self, name: &str, bytes: u32) {
        self.block_sizes.insert(name.to_string(), bytes);
    }

    /// The block size volume `name`'s records keep, if pinned.
    pub fn block_size(&self, name: &str) -> Option<u32> {
        self.block_sizes.get(name).copied()
    }

    pub fn is_empty(&self) -> bool {
        self.by_volume.is_empty() && self.block_sizes.is_empty() && self.member_needs.is_empty()
    }

    /// The records keep bytes up to `end_bytes` on member `id` (the largest pinned stays).
    pub fn pin_member_need(&mut self, id: &str, end_bytes: u64) {
        let need = self.member_needs.entry(id.to_string()).or_default();
        *need = (*need).max(end_bytes);
    }

    /// The end of what the records keep on member `id`, if pinned.
    pub fn member_need(&self, id: &str) -> Option<u64> {
        self.member_needs.get(id).copied()
    }

    /// No pins, and logs placed as before the default reserve (see the field).
    pub fn before_default_log() -> Pins {
        Pins {
            before_default_log: true,
            ..Pins::default()
        }
    }

    /// No pins, and members holding less than their `size` taken as short (see the field):
    /// the reading that finds a short member's records when the config alone refuses it.
    pub fn finding_short_members() -> Pins {
        Pins {
            short_taken: true,
            ..Pins::default()
        }
    }

    /// This reading takes members holding less than their `size` as short, to find records.
    pub fn is_finding_short_members(&self) -> bool {
        self.short_taken
    }

    /// Whether member `id`, holding less than its `size`, is short rather than refused:
    /// records keep bytes on it, or this reading finds them.
    pub fn takes_short(&self, id: &str) -> bool {
        self.short_taken || self.member_needs.contains_key(id)
    }

    /// Logs are placed as before the default reserve.
    pub fn is_before_default_log(&self) -> bool {
        self.before_default_log
    }
}
