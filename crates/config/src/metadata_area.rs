//! The 1 MiB metadata area at the start of every member, as the engine fills it when it
//! creates a volume (`nbraid-core`'s `metadata::create`, `areas::free_area`,
//! `ppl_area::allocate`; docs/FORMAT.md "The member"): two 64 KiB superblock copies, then
//! each volume's areas on the member — its write-intent bitmap, then its write-hole log
//! unless the log has a reserve before the volume's region — each placed at the first
//! 4 KiB-aligned gap no other area uses. The log takes 512 KiB (or its ring, if larger)
//! where that fits, else just its ring; no room for it refuses the create (with
//! `write_hole = "off"` the area is kept only where one fits). No room for the bitmap
//! refuses the create.
//!
//! Matrix volumes share their members' areas, so the config budgets them: this module is
//! the engine's rule as pure functions, over the areas a member already holds. The config
//! runs it over fresh members in file order (a log that would not fit gets a reserve before
//! the region instead; a bitmap that would not fit refuses the config), and `nbraid check`
//! over the areas the superblocks record.

use crate::model::{Volume, METADATA_RESERVED};
use crate::size::format_size;
use crate::volume_meta::MetadataOptions;
use nbraid_layout::Node;

/// Bytes of the metadata area at the start of every member (the engine's
/// `METADATA_AREA_BYTES`).
pub const METADATA_AREA_BYTES: u64 = METADATA_RESERVED;
/// Bytes of one superblock copy; the two copies come first.
pub const SUPERBLOCK_COPY_BYTES: u64 = 64 << 10;
/// Where the per-volume areas begin: after the two superblock copies.
pub const VOLUME_AREAS_START_BYTES: u64 = 2 * SUPERBLOCK_COPY_BYTES;
/// The write-hole log's area in the metadata area when it fits (the engine's
/// `ppl::DEFAULT_AREA_BYTES`); else just the ring its strips need.
pub const LOG_AREA_DEFAULT_BYTES: u64 = 512 << 10;
/// Most bytes of bitmap per member and volume: the bitmap chunk grows until it fits (the
/// engine's `intent::MAX_BITMAP_BYTES`).
pub const BITMAP_MAX_BYTES: u64 = 64 << 10;
/// Areas are whole blocks of this size, on its boundaries.
const AREA_BLOCK_BYTES: u64 = 4096;

/// The bitmap chunk a volume of `capacity_bytes` gets when `wanted_bytes` per bit was asked
/// for: a power of two of at least 4 KiB, doubled until the bitmap fits [`BITMAP_MAX_BYTES`]
/// (the engine's `intent::chunk_for`).
pub fn bitmap_chunk_bytes(capacity_bytes: u64, wanted_bytes: u64) -> u64 {
    let mut chunk = wanted_bytes.max(AREA_BLOCK_BYTES).next_power_of_two();
    while capacity_bytes.div_ceil(chunk).div_ceil(8) > BITMAP_MAX_BYTES {
        chunk *= 2;
    }
    chunk
}

/// Bytes of the bitmap of a volume of `capacity_bytes` with `chunk_bytes` per bit: a bit per
/// chunk in whole 4 KiB blocks, at least one (the engine's `intent::area_bytes`).
pub fn bitmap_area_bytes(capacity_bytes: u64, chunk_bytes: u64) -> u64 {
    capacity_bytes
        .div_ceil(chunk_bytes)
        .div_ceil(8)
        .next_multiple_of(AREA_BLOCK_BYTES)
        .max(AREA_BLOCK_BYTES)
}

/// What a new volume asks of each of its members' metadata areas, in the engine's order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AreaAsk {
    /// The write-intent bitmap's bytes (`None`: `bitmap_chunk = "off"`).
    pub bitmap_bytes: Option<u64>,
    /// The write-hole log, when it lives in the metadata area (`None`: no logged parity
    /// group, or the log has a reserve before the region).
    pub log: Option<LogAsk>,
}

/// A write-hole log area in the metadata area: `want_bytes` where that fits, else
/// `least_bytes` (its ring).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogAsk {
    pub want_bytes: u64,
    pub least_bytes: u64,
    /// `write_hole = "ppl"`: no room refuses the create. Off: the area is kept where it fits.
    pub required: bool,
}

impl AreaAsk {
    /// The areas volume `v` asks for at create.
    pub fn of(v: &Volume) -> AreaAsk {
        AreaAsk::new(v.geometry.root(), v.capacity(), &v.metadata)
    }

    /// The areas a volume over `root` of `capacity_bytes` with `metadata` asks for.
    pub fn new(root: &Node, capacity_bytes: u64, metadata: &MetadataOptions) -> AreaAsk {
        let bitmap_bytes = metadata.bitmap_chunk_bytes.map(|wanted| {
            let chunk = bitmap_chunk_bytes(capacity_bytes, wanted);
            bitmap_area_bytes(capacity_bytes, chunk)
        });
        let ring = nbraid_layout::volume_log_ring_bytes(root);
        let log = match (metadata.ppl_log_bytes, ring) {
            (None, Some(ring)) => Some(LogAsk {
                want_bytes: ring.max(LOG_AREA_DEFAULT_BYTES),
                least_bytes: ring,
                required: metadata.ppl,
            }),
            _ => None,
        };
        AreaAsk { bitmap_bytes, log }
    }
}

/// What one area is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AreaKind {
    Bitmap,
    Log,
    /// Block checksums a volume that enabled them keeps there (where no other room was).
    Checksums,
    /// A running reshape's backup of its critical section.
    Backup,
}

impl AreaKind {
    pub fn name(self) -> &'static str {
        match self {
            AreaKind::Bitmap => "bitmap",
            AreaKind::Log => "write-hole log",
            AreaKind::Checksums => "block checksums",
            AreaKind::Backup => "reshape backup",
        }
    }
}

/// One area in a member's metadata area.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Area {
    pub kind: AreaKind,
    pub offset_bytes: u64,
    pub len_bytes: u64,
}

/// What [`place`] found no room for: the area and the bytes it needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shortfall {
    pub kind: AreaKind,
    pub need_bytes: u64,
}

/// Where an area of `len_bytes` goes on a member whose metadata area holds `taken`: the
/// first 4 KiB-aligned gap after the superblock copies that no area overlaps (areas past
/// the metadata area do not count); `None` when no gap holds it.
pub fn first_fit(taken: &[Area], len_bytes: u64) -> Option<u64> {
    let mut used: Vec<(u64, u64)> = (taken.iter())
        .filter(|a| a.offset_bytes < METADATA_AREA_BYTES)
        .map(|a| (a.offset_bytes, a.offset_bytes + a.len_bytes))
        .collect();
    used.sort_unstable();
    let mut at = VOLUME_AREAS_START_BYTES;
    for (start, end) in used {
        if start >= at + len_bytes {
            break;
        }
        at = at.max(end.next_multiple_of(AREA_BLOCK_BYTES));
    }
    (at + len_bytes <= METADATA_AREA_BYTES).then_some(at)
}

/// The areas the engine gives a new volume asking `ask` on a member whose metadata area
/// holds `taken`: the bitmap first, then the log (its wanted size, else its ring). `Err`:
/// what the create is refused for (nothing is placed).
pub fn place(taken: &[Area], ask: &AreaAsk) -> Result<Vec<Area>, Shortfall> {
    let mut placed = Vec::new();
    if let Some(len_bytes) = ask.bitmap_bytes {
        let offset_bytes = first_fit(taken, len_bytes).ok_or(Shortfall {
            kind: AreaKind::Bitmap,
            need_bytes: len_bytes,
        })?;
        placed.push(Area {
            kind: AreaKind::Bitmap,
            offset_bytes,
            len_bytes,
        });
    }
    if let Some(log) = ask.log {
        let with: Vec<Area> = taken.iter().chain(&placed).copied().collect();
        let fit = [log.want_bytes, log.least_bytes]
            .into_iter()
            .find_map(|len_bytes| first_fit(&with, len_bytes).map(|o| (o, len_bytes)));
        match fit {
            Some((offset_bytes, len_bytes)) => placed.push(Area {
                kind: AreaKind::Log,
                offset_bytes,
                len_bytes,
            }),
            None if !log.required => {}
            None => {
                return Err(Shortfall {
                    kind: AreaKind::Log,
                    need_bytes: log.least_bytes,
                })
            }
        }
    }
    Ok(placed)
}

/// The largest gap left in a metadata area holding `taken` (for messages).
pub fn largest_gap_bytes(taken: &[Area]) -> u64 {
    let mut used: Vec<(u64, u64)> = (taken.iter())
        .filter(|a| a.offset_bytes < METADATA_AREA_BYTES)
        .map(|a| (a.offset_bytes, a.offset_bytes + a.len_bytes))
        .collect();
    used.sort_unstable();
    let (mut at, mut most) = (VOLUME_AREAS_START_BYTES, 0);
    for (start, end) in used {
        most = most.max(start.saturating_sub(at));
        at = at.max(end.next_multiple_of(AREA_BLOCK_BYTES));
    }
    most.max(METADATA_AREA_BYTES.saturating_sub(at))
}

/// Why member `member`'s metadata area, holding `areas` (each with its volume's name), has
/// no room for a new volume's `short`: what the volumes there take, the largest gap left,
/// and the ways out.
pub fn no_room_text(member: &str, short: Shortfall, areas: &[(String, Area)]) -> String {
    let what = match short.kind {
        AreaKind::Bitmap => "write-intent bitmap",
        _ => "write-hole log",
    };
    let taken: Vec<Area> = areas.iter().map(|(_, a)| *a).collect();
    let used: u64 = (taken.iter())
        .filter(|a| a.offset_bytes < METADATA_AREA_BYTES)
        .map(|a| a.len_bytes)
        .sum();
    format!(
        "the {} metadata area of member \"{member}\" has no room for its {what} ({}): after the two {} superblock copies, {} of the {} left hold the areas of the volumes already there ({}) and the largest gap is {}; {}",
        format_size(METADATA_AREA_BYTES),
        format_size(short.need_bytes),
        format_size(SUPERBLOCK_COPY_BYTES),
        format_size(used),
        format_size(METADATA_AREA_BYTES - VOLUME_AREAS_START_BYTES),
        areas_text(areas),
        format_size(largest_gap_bytes(&taken)),
        ways_out(areas, member, short.kind)
    )
}

/// `"a": bitmap 4 KiB + write-hole log 512 KiB; "b": bitmap 4 KiB`: the areas by volume, in
/// the order they were placed.
fn areas_text(areas: &[(String, Area)]) -> String {
    let mut by_volume: Vec<(&str, Vec<String>)> = Vec::new();
    for (name, a) in areas {
        let text = format!("{} {}", a.kind.name(), format_size(a.len_bytes));
        match by_volume.last_mut() {
            Some((n, list)) if n == name => list.push(text),
            _ => by_volume.push((name, vec![text])),
        }
    }
    let each: Vec<String> = (by_volume.iter())
        .map(|(n, list)| format!("\"{n}\": {}", list.join(" + ")))
        .collect();
    each.join("; ")
}

/// What frees room in a member's metadata area holding `areas` for an area of `kind`: the
/// logs there moved to reserves, smaller bitmaps, no bitmap, fewer volumes.
fn ways_out(areas: &[(String, Area)], member: &str, kind: AreaKind) -> String {
    let with = |kind: AreaKind, more_than_bytes: u64| {
        let mut names: Vec<String> = (areas.iter())
            .filter(|(_, a)| a.kind == kind && a.len_bytes > more_than_bytes)
            .map(|(n, _)| format!("\"{n}\""))
            .collect();
        names.dedup();
        names.join(", ")
    };
    let mut ways = Vec::new();
    let logs = with(AreaKind::Log, 0);
    if !logs.is_empty() {
        ways.push(format!("give volume(s) {logs} write_hole_log_size = \"1MiB\" (a write-hole log then takes a reserve before its volume's region, outside the metadata area)"));
    }
    let bitmaps = with(AreaKind::Bitmap, 4096);
    if !bitmaps.is_empty() {
        ways.push(format!("give volume(s) {bitmaps} a larger bitmap_chunk (a smaller bitmap), or bitmap_chunk = \"off\""));
    }
    if kind == AreaKind::Bitmap {
        ways.push(
            "give this volume bitmap_chunk = \"off\" (every unclean start then resyncs it whole)"
                .into(),
        );
    }
    ways.push(format!("put fewer volumes on member \"{member}\""));
    ways.join("; or ")
}

#[cfg(test)]
mod tests {
    use super::*;

    const KIB: u64 = 1 << 10;

    fn raid5_ask() -> AreaAsk {
        // A RAID 5 of 64 KiB strips (ring 140 KiB) with the default 64 MiB bitmap chunk.
        AreaAsk {
            bitmap_bytes: Some(4 * KIB),
            log: Some(LogAsk {
                want_bytes: 512 * KIB,
                least_bytes: 140 * KIB,
                required: true,
            }),
        }
    }

    /// Every volume's areas placed on one member, in order; the first refusal ends it.
    fn fill(asks: &[AreaAsk]) -> Result<Vec<Area>, (usize, Shortfall)> {
        let mut taken = Vec::new();
        for (i, ask) in asks.iter().enumerate() {
            taken.extend(place(&taken, ask).map_err(|s| (i, s))?);
        }
        Ok(taken)
    }

    #[test]
    fn bitmaps_grow_their_chunk_to_stay_within_64_kib() {
        assert_eq!(bitmap_chunk_bytes(1 << 30, 64 << 20), 64 << 20);
        assert_eq!(bitmap_area_bytes(1 << 30, 64 << 20), 4 * KIB);
        assert_eq!(bitmap_chunk_bytes(1 << 30, 1000), 4 * KIB);
        // 1 GiB at 4 KiB per bit: 32 KiB of bitmap.
        assert_eq!(bitmap_area_bytes(1 << 30, 4 * KIB), 32 * KIB);
        // 1 TiB at 4 KiB per bit would be 32 MiB: the chunk doubles until 64 KiB holds it.
        let chunk = bitmap_chunk_bytes(1 << 40, 4 * KIB);
        assert_eq!(bitmap_area_bytes(1 << 40, chunk), BITMAP_MAX_BYTES);
    }

    /// The first volume's log takes 512 KiB, the next ones their 140 KiB ring: the fourth
    /// default RAID 5 finds no room (the daemon refused it after creating three).
    #[test]
    fn three_default_raid5_logs_fit_and_a_fourth_does_not() {
        let taken = fill(&[raid5_ask(); 3]).unwrap();
        let logs: Vec<u64> = (taken.iter())
            .filter(|a| a.kind == AreaKind::Log)
            .map(|a| a.len_bytes)
            .collect();
        assert_eq!(logs, [512 * KIB, 140 * KIB, 140 * KIB]);
        assert_eq!(largest_gap_bytes(&taken), 92 * KIB);
        let refused = fill(&[raid5_ask(); 4]).unwrap_err();
        let need = Shortfall {
            kind: AreaKind::Log,
            need_bytes: 140 * KIB,
        };
        assert_eq!(refused, (3, need));
    }

    #[test]
    fn a_log_that_is_not_required_is_left_out_where_it_does_not_fit() {
        let off = AreaAsk {
            log: raid5_ask().log.map(|l| LogAsk {
                required: false,
                ..l
            }),
            ..raid5_ask()
        };
        let taken = fill(&[raid5_ask(), raid5_ask(), raid5_ask(), off]).unwrap();
        assert_eq!(taken.len(), 7, "the fourth keeps its bitmap alone");
    }

    #[test]
    fn areas_go_to_the_first_aligned_gap_and_a_full_area_refuses_the_bitmap() {
        let at = |offset_bytes, len_bytes| Area {
            kind: AreaKind::Backup,
            offset_bytes,
            len_bytes,
        };
        assert_eq!(first_fit(&[], 4 * KIB), Some(VOLUME_AREAS_START_BYTES));
        let taken = [at(128 * KIB, 5000), at(200 * KIB, 4 * KIB)];
        assert_eq!(first_fit(&taken, 4 * KIB), Some(136 * KIB));
        assert_eq!(
            first_fit(&taken, 64 * KIB),
            Some(136 * KIB),
            "a gap just large enough"
        );
        assert_eq!(first_fit(&taken, 68 * KIB), Some(204 * KIB));
        // Areas past the metadata area (a reserve before a region) take none of it.
        assert_eq!(
            first_fit(&[at(1 << 20, 1 << 20)], 896 * KIB),
            Some(128 * KIB)
        );
        assert_eq!(first_fit(&[], 897 * KIB), None);
        let full = [at(128 * KIB, 896 * KIB)];
        let bitmap = Shortfall {
            kind: AreaKind::Bitmap,
            need_bytes: 4 * KIB,
        };
        assert_eq!(place(&full, &raid5_ask()), Err(bitmap));
        assert_eq!(largest_gap_bytes(&full), 0);
    }
}
