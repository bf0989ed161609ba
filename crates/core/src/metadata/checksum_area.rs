//! The per-block checksum area of a volume's region on each member ([`crate::checksum`]):
//! placed and cleared at create (in the reserve the config leaves before the region, before
//! the log's reserve when there is one), and turned into the engine's setup at open.

use super::{Area, VolumeRecord, METADATA_AREA_BYTES};
use crate::checksum::{area_bytes, ChecksumArea, ChecksumSetup};
use crate::member::Member;
use nbraid_layout::Node;

/// Where role `role`'s checksum area goes: the `reserve_bytes` right before its region (and
/// before the log's `log_reserve_bytes`), cleared. `Err` names why it does not fit.
pub(super) async fn place(
    tree: &Node,
    role: usize,
    member: &dyn Member,
    reserve_bytes: u64,
    log_reserve_bytes: u64,
) -> Result<Area, String> {
    let mut region = None;
    tree.visit_members(&mut |m| {
        if m.index == role {
            region = Some((m.start, m.len));
        }
    });
    let (start, len) = region.ok_or_else(|| format!("role {role} has no region in the tree"))?;
    let need = area_bytes(len);
    if need > reserve_bytes {
        return Err(format!(
            "the checksum reserve of {reserve_bytes} bytes is smaller than the {need} bytes its region of {len} bytes needs"
        ));
    }
    let offset = start
        .checked_sub(log_reserve_bytes + reserve_bytes)
        .filter(|&o| o >= METADATA_AREA_BYTES && o % 4096 == 0)
        .ok_or_else(|| {
            format!(
                "no room for a {reserve_bytes}-byte checksum reserve before the region at {start}"
            )
        })?;
    // Old bytes there could pass for entries: the area starts blank (every block unknown).
    member
        .write_zeroes(offset, need)
        .await
        .map_err(|e| e.to_string())?;
    Ok(Area { offset, len: need })
}

/// The engine's checksum setup from the records by role (`None`: the volume keeps none).
/// `clean`: every record says the volume was shut down cleanly, so every entry is trusted.
pub(super) fn setup(name: &str, records: &[Option<VolumeRecord>]) -> Option<ChecksumSetup> {
    let areas: Vec<Option<ChecksumArea>> = records
        .iter()
        .map(|r| {
            let a = r.as_ref()?.checksums?;
            Some(ChecksumArea {
                offset_bytes: a.offset,
                len_bytes: a.len,
            })
        })
        .collect();
    if areas.iter().all(Option::is_none) {
        return None;
    }
    let clean = records.iter().flatten().all(|r| r.clean);
    Some(ChecksumSetup::new(name, areas, clean))
}
