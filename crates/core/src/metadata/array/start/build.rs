//! The array a start builds ([`build`]): the members' records read once ([`StartRecords`]),
//! the one the volume starts from chosen ([`newest_record`]), and from it the engine volume,
//! the bitmap, the log's places and the records the array keeps. The choices are pure
//! functions here; `start.rs` decides when to build and what to do with the array after.

use super::super::Array;
use crate::absent::AbsentMember;
use crate::error::VolumeResult;
use crate::failure_gate::FailureRecorder;
use crate::member::Member;
use crate::metadata::bitmap::Bitmap;
use crate::metadata::checksum_area;
use crate::metadata::checksum_refill::Refill;
use crate::metadata::error::ArrayError;
use crate::metadata::heal::Heal;
use crate::metadata::member_meta::MemberMeta;
use crate::metadata::options::ArrayOptions;
use crate::metadata::ppl_area::PplPlaces;
use crate::metadata::readd::Returning;
use crate::metadata::records::{Recorded, Records};
use crate::metadata::resync::BackgroundResync;
use crate::metadata::{Area, BitmapArea, ReshapeRecord, Uuid, VolumeRecord};
use crate::reshape::ReshapeNode;
use crate::volume::{Volume, VolumeOptions};
use nbraid_layout::{Geometry, Node};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

/// The engine volume over members in recorded roles (absent roles get stand-ins), with
/// its records, bitmap and log places; the volume's state is role `newest_role`'s record
/// (assembly's choice; `None` at create, where every record is the one just written).
pub(super) async fn build(
    name: &str,
    id: Uuid,
    tree: Node,
    by_role: &[Option<Arc<MemberMeta>>],
    opts: ArrayOptions,
    dirty: bool,
    newest_role: Option<usize>,
) -> Result<Array, ArrayError> {
    let records = StartRecords::read(name, by_role, newest_role).await?;
    let newest = &records.newest;
    // Mid-reshape neither tree is logged; the bitmap's resync covers both (`crate::reshape`).
    let logged = opts.ppl && newest.reshape.is_none();
    let ppl = PplPlaces::new(name, &tree, &records.by_role, newest.events, logged);
    // Parity is trusted: whatever may disagree (the bitmap's regions, stale members) is
    // resynced before anything is served, so the volume starts as in sync as zeroed members.
    let checksums = checksum_area::setup(name, &tree, &records.by_role, newest)
        .map(|s| s.with_fail_after_errors(opts.checksum_errors_to_fail));
    let block_size = served_block_size(name, newest.block_size, opts.volume.block_size);
    let vopts = VolumeOptions {
        members_known_zero: true,
        checksums,
        block_size: u64::from(block_size),
        ..opts.volume
    };
    let (volume, reshape) = engine_volume(tree, newest.reshape.as_ref(), by_role, vopts, &ppl)?;
    let bitmap = records
        .load_bitmap(name, &volume, opts.bitmap_clear_delay)
        .await?;
    let table = volume.shared_table();
    let recorded = records.recorded(block_size);
    let records = Records::new(id, name, table, by_role.to_vec(), recorded, dirty);
    let records = Arc::new(records);
    // From here on a member failure is recorded before any further member write.
    let recorder: Arc<dyn FailureRecorder> = records.clone();
    (volume.table().failure_gate()).install(Arc::downgrade(&recorder));
    Ok(Array {
        volume,
        records,
        bitmap,
        ppl,
        heal: Heal::default(),
        returning: Returning::default(),
        background: BackgroundResync::default(),
        refill: Refill::default(),
        reshape,
        reshape_window_bytes: AtomicU64::new(crate::metadata::reshape_run::MAX_WINDOW_BYTES),
    })
}

/// The engine volume over the members `by_role`: in `tree`'s geometry, or mid-reshape
/// (`reshape`) moving from `tree` into the recorded new tree from where it got to.
fn engine_volume(
    tree: Node,
    reshape: Option<&ReshapeRecord>,
    by_role: &[Option<Arc<MemberMeta>>],
    vopts: VolumeOptions,
    ppl: &PplPlaces,
) -> VolumeResult<(Volume, Option<ReshapeNode>)> {
    let Some(r) = reshape else {
        let members = members_by_role(&tree, by_role);
        let setup = ppl.setup().cloned();
        let v = Volume::with_ppl(Geometry::from_tree(tree), members, vopts, setup)?;
        return Ok((v, None));
    };
    let members = members_by_role(&r.new_tree, by_role);
    let new = Geometry::from_tree(r.new_tree.clone());
    let old = Geometry::from_tree(tree);
    let (v, node) = Volume::reshaping(old, &new, members, vopts, r.position_bytes)?;
    Ok((v, Some(node)))
}

/// The volume's records on the members standing in its roles, read once at the start, and
/// the one its state is taken from.
struct StartRecords {
    /// By role: the volume's record on the member there (`None`: no member stands there).
    by_role: Vec<Option<VolumeRecord>>,
    /// The record the volume starts from ([`newest_record`]).
    newest: VolumeRecord,
}

impl StartRecords {
    /// Reads volume `name`'s record from each member of `members` (by role); the volume
    /// starts from role `newest_role`'s (see [`newest_record`]), an error if it holds none.
    async fn read(
        name: &str,
        members: &[Option<Arc<MemberMeta>>],
        newest_role: Option<usize>,
    ) -> Result<StartRecords, ArrayError> {
        let mut by_role = Vec::with_capacity(members.len());
        for m in members {
            by_role.push(match m {
                Some(m) => m.record(name).await,
                None => None,
            });
        }
        let Some(newest) = newest_record(&by_role, newest_role).cloned() else {
            return Err(metadata_error(name, format!("role {newest_role:?}'s record, the one its records say it starts from, is not on the member placed in that role (its record names another member there)")));
        };
        Ok(StartRecords { by_role, newest })
    }

    /// The write-intent bitmap the newest record keeps, loaded from the members whose
    /// records keep it with the same chunk ([`bitmap_areas`]); `None` without one.
    async fn load_bitmap(
        &self,
        name: &str,
        volume: &Volume,
        clear_delay: Duration,
    ) -> Result<Option<Bitmap>, ArrayError> {
        let Some(kept) = self.newest.bitmap else {
            return Ok(None);
        };
        let areas = bitmap_areas(&self.by_role, kept);
        let loaded = Bitmap::load(volume, kept, areas, clear_delay).await;
        loaded
            .map(Some)
            .map_err(|detail| metadata_error(name, detail))
    }

    /// The records the array keeps, as the newest record says them, served with
    /// `block_size`-byte blocks; the checksum pass's and the reshape's progress as every
    /// role's record says it.
    fn recorded(&self, block_size: u32) -> Recorded {
        let mut recorded = recorded_as(&self.newest, block_size);
        recorded.checksum_fill = checksum_area::fill_of(&self.by_role);
        recorded.reshape = (self.newest.reshape.as_ref())
            .map(|r| crate::metadata::reshape::RecordedReshape::from_records(r, &self.by_role));
        recorded
    }
}

/// Volume `name`'s records are not what a start can build from: `detail` says why.
fn metadata_error(name: &str, detail: String) -> ArrayError {
    ArrayError::Metadata {
        volume: name.to_string(),
        detail,
    }
}

/// The record (of `records`, by role) the volume starts from: role `newest_role`'s,
/// assembly's choice; at create (`None`) the first there is, every record being the one just
/// written. `None` when the role chosen holds none.
fn newest_record(
    records: &[Option<VolumeRecord>],
    newest_role: Option<usize>,
) -> Option<&VolumeRecord> {
    match newest_role {
        Some(r) => records.get(r)?.as_ref(),
        None => records.iter().flatten().next(),
    }
}

/// By role, where the bitmap `kept` (the newest record's) lives on that member: only on one
/// whose record keeps a bitmap of the same chunk. A member whose bitmap has another chunk
/// (one that missed the commit of a reshape growing it) is neither read nor written: its
/// bits mean other regions.
fn bitmap_areas(records: &[Option<VolumeRecord>], kept: BitmapArea) -> Vec<Option<Area>> {
    let same_chunk = |x: &BitmapArea| x.chunk_bytes == kept.chunk_bytes;
    (records.iter())
        .map(|r| {
            r.as_ref()
                .and_then(|r| r.bitmap.filter(same_chunk).map(|b| b.area))
        })
        .collect()
}

/// The engine's members by role: the member standing there, or a stand-in as long as the
/// role's regions for a role none stands in.
fn members_by_role(tree: &Node, by_role: &[Option<Arc<MemberMeta>>]) -> Vec<Arc<dyn Member>> {
    let mut ends = vec![0u64; by_role.len()];
    tree.visit_members(&mut |m| ends[m.index] = ends[m.index].max(m.start + m.len));
    by_role
        .iter()
        .enumerate()
        .map(|(r, m)| match m {
            Some(m) => m.member.clone(),
            None => Arc::new(AbsentMember::new(format!("role {r} (missing)"), ends[r]))
                as Arc<dyn Member>,
        })
        .collect()
}

/// The block size volume `name` is served with: the one its records keep (`recorded`; a
/// disk's sector size never changes under its data), else — records from before the field —
/// the one asked (`asked`, the config's), which the next commit records. Assembly loads the
/// config pinned to the records (`nbraid_assembly::pins`) and says a change there; this
/// catches a start that could not read the records first (members on NBD servers).
fn served_block_size(name: &str, recorded: Option<u32>, asked: u64) -> u32 {
    match recorded {
        Some(r) if u64::from(r) != asked => {
            tracing::warn!(
                "volume `{name}`: block_size = {asked} is not taken: its records keep {r}-byte blocks (a disk's sector size never changes under its data); serving {r} — write block_size = {r} to say so"
            );
            r
        }
        Some(r) => r,
        // Checked by the config and by `Volume::new`: 512 or 4096.
        None => u32::try_from(asked).unwrap_or(u32::MAX),
    }
}

/// The records as the newest record says them, served with `block_size`-byte blocks.
fn recorded_as(newest: &VolumeRecord, block_size: u32) -> Recorded {
    Recorded {
        block_size,
        events: newest.events,
        clean: newest.clean,
        members: newest.members.clone(),
        scrub: newest.scrub,
        added_paths: newest.added_paths.clone(),
        reshape: None,
        tree: newest.tree.clone(),
        checksum_fill: newest.checksum_fill,
        replacements: newest.replacements.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::MemberEntry;

    const MIB: u64 = 1 << 20;

    /// Role `role`'s record of a two-way mirror, `events` events in, with a bitmap of
    /// `chunk_bytes` (none for 0) at `MIB * (role + 1)`.
    fn record(role: u32, events: u64, chunk_bytes: u64) -> VolumeRecord {
        let leaves = (0..2).map(|i| Node::member(i, MIB, 8 * MIB)).collect();
        let members = (0..2u8)
            .map(|i| MemberEntry::active(Uuid([10 + i; 16])))
            .collect();
        let tree = Node::mirror(leaves).unwrap();
        let area = Area {
            offset: MIB * u64::from(role + 1),
            len: 4096,
        };
        VolumeRecord {
            events,
            bitmap: (chunk_bytes > 0).then_some(BitmapArea { area, chunk_bytes }),
            ..VolumeRecord::plain(Uuid([1; 16]), "v", role, members, tree)
        }
    }

    /// Assembly's role is the one started from, even when another role's record is newer;
    /// at create the first record there is; a chosen role holding none is no start.
    #[test]
    fn the_volume_starts_from_the_record_of_the_role_assembly_chose() {
        let records = vec![None, Some(record(1, 5, 0)), Some(record(2, 9, 0))];
        assert_eq!(newest_record(&records, Some(1)).map(|r| r.events), Some(5));
        assert_eq!(newest_record(&records, Some(2)).map(|r| r.events), Some(9));
        assert_eq!(newest_record(&records, None).map(|r| r.events), Some(5));
        assert_eq!(newest_record(&records, Some(0)), None);
        assert_eq!(newest_record(&records, Some(7)), None);
        assert_eq!(newest_record(&[None, None], None), None);
    }

    /// The bitmap is read and written only where a record keeps one of the newest record's
    /// chunk: not on a member without a record, without a bitmap, or with another chunk.
    #[test]
    fn the_bitmap_lives_only_where_a_record_keeps_it_with_the_same_chunk() {
        let kept = record(0, 5, 64 * 1024).bitmap.expect("a bitmap");
        let records = vec![
            Some(record(0, 5, 64 * 1024)),
            None,
            Some(record(2, 5, 0)),
            Some(record(3, 4, 32 * 1024)),
            Some(record(4, 5, 64 * 1024)),
        ];
        let areas = bitmap_areas(&records, kept);
        let at = |role: u64| Area {
            offset: MIB * (role + 1),
            len: 4096,
        };
        assert_eq!(areas, vec![Some(at(0)), None, None, None, Some(at(4))]);
    }

    /// The records' block size is served whatever the config asks; records from before
    /// the field are served the config's.
    #[test]
    fn the_recorded_block_size_is_served_over_the_asked_one() {
        assert_eq!(served_block_size("v", Some(4096), 512), 4096);
        assert_eq!(served_block_size("v", Some(512), 512), 512);
        assert_eq!(served_block_size("v", None, 4096), 4096);
    }
}
