//! What a checksum cannot prove: a record's lengths and positions within the format's
//! limits, and a superblock that fits the member it is on.

use super::{
    RecordedState, Superblock, VolumeRecord, AREA_BLOCK_BYTES, MAX_ADDED_PATH_BYTES,
    MAX_PPL_AREA_BYTES, SLOT_BYTES,
};
use crate::metadata::intent::MAX_BITMAP_BYTES;
use crate::metadata::MetadataError;
use crate::metadata::MetadataResult;
use nbraid_layout::Node;

impl Superblock {
    /// Whether what the superblock places on its member fits the member as it is
    /// (`member_len` bytes, its real size, not the recorded one): every metadata area and
    /// this member's regions. A checksum proves the bytes were written so, not that they
    /// are sane (an older version's bug, a member moved from another machine or cut short).
    pub fn check_fits(&self, member_len: u64) -> MetadataResult<()> {
        for v in &self.volumes {
            let areas = [
                ("bitmap area", v.bitmap.map(|b| b.area)),
                ("partial-parity log area", v.ppl),
                ("checksum area", v.checksums),
                (
                    "reshape backup area",
                    v.reshape.as_ref().and_then(|r| r.backup_area),
                ),
            ];
            for (what, a) in areas {
                let Some(a) = a else { continue };
                if a.offset + a.len > member_len {
                    return Err(invalid(
                        what,
                        format!(
                            "bytes {}..{} of volume `{}` past the member's end ({member_len} bytes)",
                            a.offset,
                            a.offset + a.len,
                            v.name
                        ),
                    ));
                }
            }
            let mut past = None;
            v.tree.visit_members(&mut |m| {
                if m.index == v.role as usize && m.start + m.len > member_len {
                    past.get_or_insert((m.start, m.len));
                }
            });
            if let Some(r) = &v.reshape {
                let new = r.regions_of(v.role as usize).into_iter();
                past = past.or(new.into_iter().find(|(s, l)| s + l > member_len));
            }
            if let Some((start, len)) = past {
                return Err(invalid(
                    "tree",
                    format!(
                        "volume `{}`'s region {start}+{len} on this member past its end ({member_len} bytes)",
                        v.name
                    ),
                ));
            }
        }
        Ok(())
    }
}

pub(super) fn invalid(what: &'static str, detail: String) -> MetadataError {
    MetadataError::Invalid { what, detail }
}

/// Adds where a record started to an error found inside it.
pub(super) fn within(e: MetadataError, at: usize) -> MetadataError {
    match e {
        MetadataError::Invalid { what, detail } => MetadataError::Invalid {
            what,
            detail: format!("{detail} (in the volume record at byte {at})"),
        },
        other => other,
    }
}

/// The format's limits on a record's lengths and positions, checked before anything is
/// sized or read from them: areas are whole 4 KiB blocks after the superblock copies and
/// outside this member's regions; a bitmap holds a bit for every region of the volume
/// within [`MAX_BITMAP_BYTES`]; a log area at most [`MAX_PPL_AREA_BYTES`]; checkpoints
/// inside the volume.
pub(super) fn check_limits(v: &VolumeRecord) -> MetadataResult<()> {
    check_areas(v)?;
    check_positions(v)
}

/// Member `i` of `members` appears exactly once in `tree`.
pub(super) fn check_member_uses(tree: &Node, members: usize) -> MetadataResult<()> {
    let mut uses = vec![0u32; members];
    tree.visit_members(&mut |m| uses[m.index] += 1);
    if let Some(i) = uses.iter().position(|&n| n != 1) {
        return Err(invalid(
            "tree",
            format!("member {i} appears {} times (exactly once)", uses[i]),
        ));
    }
    Ok(())
}

/// Areas are whole 4 KiB blocks after the superblock copies and outside this member's
/// regions.
fn check_areas(v: &VolumeRecord) -> MetadataResult<()> {
    let mut regions = Vec::new();
    v.tree.visit_members(&mut |m| {
        if m.index == v.role as usize {
            regions.push((m.start, m.len));
        }
    });
    let old_regions = regions.len();
    // Mid-reshape, the member's region in the new tree too.
    if let Some(r) = &v.reshape {
        regions.extend(r.regions_of(v.role as usize));
    }
    // An added member's reshape backup pool may lie in the tail of its new region, which the
    // copy reaches only after the last backup (`metadata/reshape_backup.rs`).
    let added = old_regions == 0;
    let areas = [
        ("bitmap area", v.bitmap.map(|b| b.area)),
        ("partial-parity log area", v.ppl),
        ("checksum area", v.checksums),
        (
            "reshape backup area",
            v.reshape.as_ref().and_then(|r| r.backup_area),
        ),
    ];
    for (what, a) in areas {
        let Some(a) = a else { continue };
        let end = a.offset + a.len; // checked against the member size: no overflow
        if a.offset < 2 * SLOT_BYTES
            || !a.offset.is_multiple_of(AREA_BLOCK_BYTES)
            || !a.len.is_multiple_of(AREA_BLOCK_BYTES)
        {
            return Err(invalid(
                what,
                format!(
                    "bytes {}..{end}: whole 4 KiB blocks after the superblock copies (byte {})",
                    a.offset,
                    2 * SLOT_BYTES
                ),
            ));
        }
        let pool = added && what == "reshape backup area";
        let regions = if pool { &regions[..0] } else { &regions[..] };
        if let Some((s, l)) = regions.iter().find(|(s, l)| a.offset < s + l && *s < end) {
            return Err(invalid(
                what,
                format!(
                    "bytes {}..{end} overlap this member's region {s}+{l}",
                    a.offset
                ),
            ));
        }
    }
    Ok(())
}

/// Sizes and positions against the volume: a bitmap holds a bit for every region within
/// [`MAX_BITMAP_BYTES`]; a log area at most [`MAX_PPL_AREA_BYTES`]; checkpoints inside the
/// volume.
fn check_positions(v: &VolumeRecord) -> MetadataResult<()> {
    let capacity = v.tree.capacity();
    if let Some(b) = v.bitmap {
        let bits = capacity.div_ceil(b.chunk_bytes);
        if b.area.len > MAX_BITMAP_BYTES || b.area.len.saturating_mul(8) < bits {
            return Err(invalid(
                "bitmap area",
                format!(
                    "{} bytes for {bits} bits ({} bytes per bit over {capacity}): at least one bit per region, at most {MAX_BITMAP_BYTES} bytes",
                    b.area.len, b.chunk_bytes
                ),
            ));
        }
    }
    if let Some(a) = v.ppl.filter(|a| a.len > MAX_PPL_AREA_BYTES) {
        return Err(invalid(
            "partial-parity log area",
            format!("{} bytes (at most {MAX_PPL_AREA_BYTES})", a.len),
        ));
    }
    for (i, m) in v.members.iter().enumerate() {
        if let RecordedState::Rebuilding { checkpoint_bytes } = m.state {
            if checkpoint_bytes > capacity {
                return Err(invalid(
                    "rebuild checkpoint",
                    format!("{checkpoint_bytes} of member {i}, past the volume's {capacity} bytes"),
                ));
            }
        }
    }
    let mut regions_bytes = 0u64;
    v.tree
        .visit_members(&mut |m| regions_bytes = regions_bytes.saturating_add(m.len));
    let fill_end = capacity.saturating_add(regions_bytes);
    if let Some(f) = v.checksum_fill.filter(|f| f.position_bytes > fill_end) {
        return Err(invalid(
            "checksum fill position",
            format!(
                "{} past the pass's {fill_end} bytes (the volume, then its member regions)",
                f.position_bytes
            ),
        ));
    }
    if let Some(s) = v.scrub.filter(|s| s.position_bytes > capacity) {
        return Err(invalid(
            "scrub checkpoint",
            format!("{} past the volume's {capacity} bytes", s.position_bytes),
        ));
    }
    Ok(())
}

/// A path added at run time as recorded: 1 to [`MAX_ADDED_PATH_BYTES`] bytes of UTF-8, no NUL.
pub(super) fn check_added_path(path: &str) -> MetadataResult<()> {
    if path.is_empty() || path.len() > MAX_ADDED_PATH_BYTES || path.contains('\0') {
        return Err(invalid(
            "added path",
            format!("{path:?}: 1 to {MAX_ADDED_PATH_BYTES} bytes, no NUL"),
        ));
    }
    Ok(())
}
