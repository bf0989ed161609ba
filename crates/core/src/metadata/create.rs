//! Creating a volume's records: every member gets a record of the new volume (a fresh array
//! id, member ids, the tree, its bitmap, log and checksum areas) before the array is opened over them.
//! Nothing is written until every member has passed the checks and every new superblock
//! has been decoded back to what is to be written.

use super::areas::free_area;
use super::error::ArrayError;
use super::intent;
use super::member_meta::MemberMeta;
use super::options::ArrayOptions;
use super::{
    Area, BitmapArea, MemberEntry, Probe, RecordedState, Superblock, Uuid, VolumeRecord,
    METADATA_AREA_BYTES,
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
    /// The block size the volume is served with.
    block_size: u32,
}

/// Writes a record of new volume `name` over `metas` (leaf `i` of `tree` is `metas[i]`) on
/// every member; returns the array id. Every member's new superblock is decoded back
/// before anything is written: a record the next start could not read (a region of 0
/// bytes, a field past the format's limits) refuses the create instead of leaving an array
/// that never assembles again.
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
            unacked_since_failed: false,
            failed_cause: None,
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
        block_size: u32::try_from(opts.volume.block_size)
            .map_err(|_| bad(format!("block size {}", opts.volume.block_size)))?,
    };
    let mut records = Vec::with_capacity(metas.len());
    for (role, m) in metas.iter().enumerate() {
        let held = m.sb.lock().await.clone();
        let areas = place_areas(&new, role, held.as_ref(), capacity, opts)?;
        let record = new.record(role, areas);
        let next = m.next_superblock(held, |sb| {
            sb.member = new.members[role].uuid;
            sb.volumes.push(record.clone());
        });
        check_round_trip(name, role, m, &next)?;
        records.push(record);
    }
    for (m, record) in metas.iter().zip(records) {
        clear_areas(name, m, &record).await?;
        let uuid = new.members[record.role as usize].uuid;
        m.update(|sb| {
            sb.member = uuid;
            sb.volumes.push(record);
        })
        .await
        .map_err(|e| refuse(name, e.to_string()))?;
    }
    Ok(id)
}

/// Refuses a superblock that would not read back as written: the next start decodes it,
/// and one it cannot decode leaves the member (and every volume on it) unassemblable.
fn check_round_trip(
    name: &str,
    role: usize,
    m: &MemberMeta,
    next: &Superblock,
) -> Result<(), ArrayError> {
    let member = m.member.name();
    let why = match next.encode().and_then(|bytes| Superblock::decode(&bytes)) {
        Ok(read) if read == *next => return Ok(()),
        Ok(_) => "it decodes to different records".to_string(),
        Err(e) => e.to_string(),
    };
    Err(refuse(
        name,
        format!(
            "member {role} (`{member}`): the new superblock would not read back ({why}); nothing was written — this is a bug in nbraid: the geometry the config placed cannot be recorded"
        ),
    ))
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

/// Where role `role`'s areas go on a member holding `held`: the bitmap and the log in the
/// metadata area (or the log in the reserve before the region), the checksum area in its
/// reserve. Pure: nothing is cleared until every record is known to decode.
fn place_areas(
    new: &NewVolume<'_>,
    role: usize,
    held: Option<&Superblock>,
    capacity: u64,
    opts: &ArrayOptions,
) -> Result<Areas, ArrayError> {
    let bad = |detail: String| refuse(new.name, format!("member {role}: {detail}"));
    let bitmap = match new.chunk_bytes {
        None => None,
        Some(chunk_bytes) => {
            let len = intent::area_bytes(capacity, chunk_bytes);
            let offset = free_area(held, len).ok_or_else(|| {
                bad(format!(
                    "no room for a {len}-byte bitmap in the metadata area"
                ))
            })?;
            Some(BitmapArea {
                area: Area { offset, len },
                chunk_bytes,
            })
        }
    };
    let avoid: Vec<Area> = bitmap.map(|b| b.area).into_iter().collect();
    let ppl = match opts.ppl_area_before_region_bytes {
        None => super::ppl_area::allocate(held, new.tree, &avoid),
        Some(len) => super::ppl_area::before_region(held, new.tree, role, len),
    };
    // With the log off an area is kept where one fits (it may be switched on later).
    let ppl = match ppl {
        Ok(a) => a,
        Err(_) if !opts.ppl => None,
        Err(e) => return Err(bad(e)),
    };
    let checksums = match opts.checksum_area_before_region_bytes {
        None => None,
        Some(n) => {
            let log = opts.ppl_area_before_region_bytes.unwrap_or(0);
            Some(super::checksum_area::place(new.tree, role, n, log).map_err(bad)?)
        }
    };
    Ok(Areas {
        bitmap,
        ppl,
        checksums,
    })
}

/// Clears the areas `record` places on member `m`: a bitmap, log or checksum entries left
/// by older bytes there could pass for the new volume's.
async fn clear_areas(name: &str, m: &MemberMeta, record: &VolumeRecord) -> Result<(), ArrayError> {
    let failed = |e: crate::member::MemberError| refuse(name, e.to_string());
    if let Some(b) = record.bitmap {
        let zeroes = Buf::zeroed(b.area.len as usize).freeze();
        m.member
            .write(b.area.offset, zeroes, true)
            .await
            .map_err(failed)?;
    }
    if let Some(a) = record.ppl {
        super::ppl_area::clear(&*m.member, a)
            .await
            .map_err(failed)?;
    }
    if let Some(a) = record.checksums {
        m.member
            .write_zeroes(a.offset, a.len)
            .await
            .map_err(failed)?;
    }
    Ok(())
}

/// One role's areas of the new volume.
#[derive(Clone, Copy)]
struct Areas {
    bitmap: Option<BitmapArea>,
    ppl: Option<Area>,
    checksums: Option<Area>,
}

impl NewVolume<'_> {
    /// The record of the new volume in role `role`.
    fn record(&self, role: usize, areas: Areas) -> VolumeRecord {
        VolumeRecord {
            array: self.id,
            name: self.name.to_string(),
            events: 1,
            // Not clean until the sync after the open is done.
            clean: self.assume_clean,
            role: role as u32,
            members: self.members.clone(),
            tree: self.tree.clone(),
            bitmap: areas.bitmap,
            ppl: areas.ppl,
            checksums: areas.checksums,
            scrub: None,
            added_paths: Vec::new(),
            reshape: None,
            checksum_fill: None,
            replacements: Vec::new(),
            block_size: Some(self.block_size),
        }
    }
}
