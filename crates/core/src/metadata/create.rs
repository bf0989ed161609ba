//! Creating a volume's records: every member gets a record of the new volume (a fresh array
//! id, member ids, the tree, its bitmap, log and checksum areas) before the array is opened over them.
//! Nothing is written until every member has passed the checks.

use super::areas::free_area;
use super::error::ArrayError;
use super::intent;
use super::member_meta::MemberMeta;
use super::options::ArrayOptions;
use super::{
    Area, BitmapArea, MemberEntry, Probe, RecordedState, Uuid, VolumeRecord, METADATA_AREA_BYTES,
};
use crate::buf::Buf;
use nbraid_layout::{Geometry, Node};
use std::sync::Arc;

/// What every member's record of a new volume shares.
struct NewVolume<'a> {
    name: &'a str,
    tree: &'a Node,
    id: Uuid,
    members: Vec<MemberEntry>,
    /// Bytes per write-intent bit (`None`: no bitmap).
    chunk_bytes: Option<u64>,
    assume_clean: bool,
}

/// Writes a record of new volume `name` over `metas` (leaf `i` of `tree` is `metas[i]`) on
/// every member; returns the array id.
pub(super) async fn write_records(
    name: &str,
    tree: &Node,
    metas: &[Arc<MemberMeta>],
    opts: &ArrayOptions,
    assume_clean: bool,
) -> Result<Uuid, ArrayError> {
    let bad = |detail: String| refuse(name, detail);
    check_members(name, tree, metas)?;
    let capacity = Geometry::from_tree(tree.clone()).capacity();
    let id = Uuid::random().map_err(|e| bad(format!("random id: {e}")))?;
    let mut members = Vec::with_capacity(metas.len());
    for m in metas {
        let existing = m.sb.lock().await.as_ref().map(|sb| sb.member);
        let uuid = match existing {
            Some(u) => u,
            None => Uuid::random().map_err(|e| bad(format!("random id: {e}")))?,
        };
        members.push(MemberEntry {
            uuid,
            state: RecordedState::Active,
        });
    }
    let new = NewVolume {
        name,
        tree,
        id,
        members,
        chunk_bytes: opts
            .bitmap_chunk_bytes
            .map(|c| intent::chunk_for(capacity, c)),
        assume_clean,
    };
    for (role, m) in metas.iter().enumerate() {
        let bitmap = place_bitmap(&new, role, m, capacity).await?;
        let ppl = place_log(&new, role, m, bitmap, opts).await?;
        let checksums = match opts.checksum_area_before_region_bytes {
            None => None,
            Some(n) => {
                let log = opts.ppl_area_before_region_bytes.unwrap_or(0);
                let placed = super::checksum_area::place(tree, role, &*m.member, n, log).await;
                Some(placed.map_err(|e| refuse(name, format!("member {role}: {e}")))?)
            }
        };
        write_record(&new, role, m, (bitmap, ppl, checksums)).await?;
    }
    Ok(id)
}

fn refuse(name: &str, detail: String) -> ArrayError {
    ArrayError::Metadata {
        volume: name.to_string(),
        detail,
    }
}

/// Refuses a create the tree and members cannot take: a count that differs, a region inside
/// the metadata area, a member that carries the volume already or cannot be read.
fn check_members(name: &str, tree: &Node, metas: &[Arc<MemberMeta>]) -> Result<(), ArrayError> {
    let bad = |detail: String| refuse(name, detail);
    if metas.len() != tree.member_count() {
        return Err(bad(format!(
            "the tree has {} members, {} were given",
            tree.member_count(),
            metas.len()
        )));
    }
    let mut low = None;
    tree.visit_members(&mut |m| {
        if m.start < METADATA_AREA_BYTES {
            low.get_or_insert(m.index);
        }
    });
    if let Some(i) = low {
        return Err(bad(format!(
            "member {i}'s region starts inside the first {METADATA_AREA_BYTES} bytes (nbraid's metadata area)"
        )));
    }
    for (i, m) in metas.iter().enumerate() {
        match m.probe() {
            Probe::Superblock(sb, _) if sb.volumes.iter().any(|v| v.name == name) => {
                return Err(bad(format!(
                    "member {i} (`{}`) already carries volume `{name}`: open it, or wipe the member to create it anew",
                    m.member.name()
                )))
            }
            Probe::Unreadable(e) | Probe::Unreachable(e) => {
                return Err(bad(format!(
                    "member {i} (`{}`): {e}; refusing to overwrite it",
                    m.member.name()
                )))
            }
            _ => {}
        }
    }
    Ok(())
}

/// A zeroed bitmap area on member `m` (role `role`), if the volume has a bitmap.
async fn place_bitmap(
    new: &NewVolume<'_>,
    role: usize,
    m: &MemberMeta,
    capacity: u64,
) -> Result<Option<BitmapArea>, ArrayError> {
    let Some(chunk_bytes) = new.chunk_bytes else {
        return Ok(None);
    };
    let len = intent::area_bytes(capacity, chunk_bytes);
    let held = m.sb.lock().await.clone();
    let offset = free_area(held.as_ref(), len).ok_or_else(|| {
        refuse(
            new.name,
            format!("member {role}: no room for a {len}-byte bitmap in the metadata area"),
        )
    })?;
    m.member
        .write(offset, Buf::zeroed(len as usize).freeze(), true)
        .await
        .map_err(|e| refuse(new.name, e.to_string()))?;
    Ok(Some(BitmapArea {
        area: Area { offset, len },
        chunk_bytes,
    }))
}

/// The partial-parity log's area on member `m` (role `role`), cleared: in the metadata area
/// beside `bitmap`, or in the reserve before the region when the options say so.
async fn place_log(
    new: &NewVolume<'_>,
    role: usize,
    m: &MemberMeta,
    bitmap: Option<BitmapArea>,
    opts: &ArrayOptions,
) -> Result<Option<Area>, ArrayError> {
    let avoid: Vec<Area> = bitmap.map(|b| b.area).into_iter().collect();
    let held = m.sb.lock().await.clone();
    let ppl = match opts.ppl_area_before_region_bytes {
        None => super::ppl_area::allocate(held.as_ref(), new.tree, &avoid),
        Some(len) => super::ppl_area::before_region(held.as_ref(), new.tree, role, len),
    };
    // With the log off an area is kept where one fits (it may be switched on later).
    let ppl = match ppl {
        Ok(a) => a,
        Err(_) if !opts.ppl => None,
        Err(e) => return Err(refuse(new.name, format!("member {role}: {e}"))),
    };
    if let Some(a) = ppl {
        super::ppl_area::clear(&*m.member, a)
            .await
            .map_err(|e| refuse(new.name, e.to_string()))?;
    }
    Ok(ppl)
}

/// Member `m`'s record of the new volume in role `role`.
async fn write_record(
    new: &NewVolume<'_>,
    role: usize,
    m: &MemberMeta,
    (bitmap, ppl, checksums): (Option<BitmapArea>, Option<Area>, Option<Area>),
) -> Result<(), ArrayError> {
    let record = VolumeRecord {
        array: new.id,
        name: new.name.to_string(),
        events: 1,
        // Not clean until the sync after the open is done.
        clean: new.assume_clean,
        role: role as u32,
        members: new.members.clone(),
        tree: new.tree.clone(),
        bitmap,
        ppl,
        checksums,
        scrub: None,
        added_paths: Vec::new(),
        reshape: None,
        checksum_fill: None,
    };
    let uuid = new.members[role].uuid;
    m.update(|sb| {
        sb.member = uuid;
        sb.volumes.push(record);
    })
    .await
    .map_err(|e| refuse(new.name, e.to_string()))
}
