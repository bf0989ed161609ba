//! The superblock: what a member records about itself and each volume on it — the record
//! types here; their bytes in `superblock/wire.rs` (the header and volume records) and
//! `superblock/tree.rs` (the geometry tree); what a checksum cannot prove in
//! `superblock/validate.rs` (layout in `docs/FORMAT.md`).

use super::reshape::ReshapeRecord;
use crate::fail_cause::FailCause;
use nbraid_layout::Node;
use std::fmt;

mod tree;
mod validate;
mod wire;

use super::{MetadataError, MetadataResult};

pub const SUPERBLOCK_MAGIC: [u8; 8] = *b"NBRAIDSB";
/// The newest format this reads and writes. A superblock is written as version 5 only while
/// one of its records carries a replace under way ([`VolumeRecord::replacements`]), as
/// version 4 while one carries a checksum fill ([`VolumeRecord::checksum_fill`]), as version 3
/// while one carries a reshape ([`VolumeRecord::reshape`]), as version 2 when one
/// lists paths added at run time (see [`VolumeRecord::added_paths`]), else as version 1, byte
/// for byte as before: older readers refuse just the superblocks they cannot read.
pub const FORMAT_VERSION: u32 = 5;
/// The oldest format this reads.
pub const FIRST_FORMAT_VERSION: u32 = 1;
/// Paths added at run time one volume record lists at most.
pub const MAX_ADDED_PATHS: usize = 64;
/// Bytes of one added path at most.
pub const MAX_ADDED_PATH_BYTES: usize = 4096;
/// Bytes at the start of every member reserved for metadata (superblocks, bitmaps, logs).
pub const METADATA_AREA_BYTES: u64 = 1 << 20;
/// Bytes of one superblock copy; copy `g % 2` lives at `(g % 2) * SLOT_BYTES`.
pub const SLOT_BYTES: u64 = 64 << 10;

/// Bytes of the fixed header before the volume records.
const HEADER_BYTES: usize = 64;
/// Offset of the checksum field in the header (zero while the checksum is computed).
const CRC_AT: usize = 16;
const NAME_BYTES: usize = 64;
const MAX_VOLUMES: u32 = 64;
const MAX_MEMBERS: u32 = 1024;
const MAX_TREE_DEPTH: usize = 16;
/// No member region ends past 1 PiB, so capacities of 1024 of them fit a `u64`.
const MAX_REGION_END: u64 = 1 << 50;
/// Most bytes of a partial-parity log area (the config's largest `write_hole_log_size`; the
/// largest ring any geometry needs is far below it).
pub const MAX_PPL_AREA_BYTES: u64 = 1 << 30;
/// Most an event counter or a generation may be: both only count up by one per state
/// change or superblock write, so no member gets near it, and `+ 1` never overflows.
pub const MAX_COUNTER: u64 = 1 << 62;
/// Metadata areas are whole blocks of this size.
const AREA_BLOCK_BYTES: u64 = 4096;

/// A 128-bit random identity (RFC 4122 version 4 layout when generated here).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Uuid(pub [u8; 16]);

impl Uuid {
    /// A fresh random id from the kernel's generator.
    pub fn random() -> std::io::Result<Uuid> {
        let mut b = [0u8; 16];
        let mut got = 0;
        while got < b.len() {
            // SAFETY: the pointer and length describe the unfilled tail of `b`.
            let n = unsafe { libc::getrandom(b[got..].as_mut_ptr().cast(), b.len() - got, 0) };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            got += n as usize;
        }
        b[6] = (b[6] & 0x0f) | 0x40;
        b[8] = (b[8] & 0x3f) | 0x80;
        Ok(Uuid(b))
    }
}

impl fmt::Display for Uuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, b) in self.0.iter().enumerate() {
            if matches!(i, 4 | 6 | 8 | 10) {
                f.write_str("-")?;
            }
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

/// A member's state as recorded in the superblocks of its volume.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordedState {
    /// In the array, holding current data.
    Active,
    /// Failed: never read, its data is served by redundancy.
    Failed,
    /// A hot spare, holding nothing of the volume yet.
    Spare,
    /// Being rebuilt: bytes of the volume below `checkpoint_bytes` are current on it.
    Rebuilding { checkpoint_bytes: u64 },
}

/// One member of a volume, by role (its index in the tree).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemberEntry {
    pub uuid: Uuid,
    pub state: RecordedState,
    /// Failed, and no write was acknowledged durable since (no flush or FUA write completed
    /// after the commit that recorded it failed): it missed nothing the array promised, so
    /// a forced assembly takes it back as current. Set by that commit, cleared by a commit
    /// before the first such acknowledgement; false in records written before it existed.
    /// Meaningful only while `state` is [`RecordedState::Failed`] (see
    /// [`MemberEntry::missed_nothing_acked`]).
    pub unacked_since_failed: bool,
    /// Why it failed, as far as a restart needs it: whether it may come back by itself
    /// ([`FailCause::returns_by_itself`]). Set by the commit that records it failed (and by
    /// later ones, the operator's fail outranking the first cause); `None` when not failed,
    /// and in records written before it existed — read as [`FailCause::NotKept`], it stays
    /// out. Meaningful only while `state` is [`RecordedState::Failed`].
    pub failed_cause: Option<FailCause>,
}

impl MemberEntry {
    /// Recorded failed, and nothing was acknowledged durable since it failed.
    pub fn missed_nothing_acked(&self) -> bool {
        self.state == RecordedState::Failed && self.unacked_since_failed
    }
}

/// A byte range of the member holding some metadata structure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Area {
    pub offset: u64,
    pub len: u64,
}

/// Where a volume's write-intent bitmap lives on this member, and the bytes each bit covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BitmapArea {
    pub area: Area,
    pub chunk_bytes: u64,
}

/// One volume as recorded on one of its members.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VolumeRecord {
    pub array: Uuid,
    /// The export name (UTF-8, at most 64 bytes).
    pub name: String,
    /// Bumped on every state change of the volume; a member whose record has fewer events
    /// than its peers' is stale.
    pub events: u64,
    /// No write was in flight when this was written (a clean shutdown).
    pub clean: bool,
    /// This member's index in `members` and in the tree's member numbering.
    pub role: u32,
    pub members: Vec<MemberEntry>,
    /// The geometry: leaves name member indices and their regions.
    pub tree: Node,
    pub bitmap: Option<BitmapArea>,
    /// The partial-parity log (parity groups).
    pub ppl: Option<Area>,
    /// Reserved for per-block checksums.
    pub checksums: Option<Area>,
    /// An unfinished scrub (encoded only while there is one).
    pub scrub: Option<ScrubCheckpoint>,
    /// Members added at run time, by the path they were opened by: spares (`nbraid add`)
    /// standing by or holding the role they were rebuilt into, and replacements (`nbraid
    /// replace`). The config does not name them, so a restart opens them by these paths.
    /// Recorded from format version 2 on.
    pub added_paths: Vec<String>,
    /// A reshape in progress (format version 3): the tree the volume moves into and how far
    /// it got. `tree` is then the old tree, holding the bytes at and above the position.
    pub reshape: Option<ReshapeRecord>,
    /// Checksums being enabled on an existing volume (format version 4): how far the pass
    /// that computes them got (`crate::metadata::checksum_fill`).
    pub checksum_fill: Option<ChecksumFill>,
    /// Replaces under way (format version 5; written only while there is one): how far
    /// each replacement's copy got.
    pub replacements: Vec<ReplacementCheckpoint>,
    /// The logical block size the volume is served with, in bytes: 512 or 4096 (a byte of
    /// every member entry that was padding: readers before it skip it). A disk's sector size never changes under its data (a partition table is
    /// addressed in sectors), so a start serves this whatever the config asks. `None` in
    /// records written before it: the start takes the config's and its next commit records
    /// it.
    pub block_size: Option<u32>,
}

#[cfg(test)]
impl VolumeRecord {
    /// Role `role` of volume `name` (array `array`) over `members`, laid out by `tree`:
    /// event 1, not clean, no area, nothing under way, no added path — what a test changes.
    pub(crate) fn plain(
        array: Uuid,
        name: &str,
        role: u32,
        members: Vec<MemberEntry>,
        tree: Node,
    ) -> VolumeRecord {
        VolumeRecord {
            array,
            name: name.into(),
            events: 1,
            clean: false,
            role,
            members,
            tree,
            bitmap: None,
            ppl: None,
            checksums: None,
            scrub: None,
            added_paths: Vec::new(),
            reshape: None,
            checksum_fill: None,
            replacements: Vec::new(),
            block_size: None,
        }
    }
}

#[cfg(test)]
impl MemberEntry {
    /// An active member `uuid` (tests).
    pub(crate) fn active(uuid: Uuid) -> MemberEntry {
        MemberEntry {
            uuid,
            state: RecordedState::Active,
            unacked_since_failed: false,
            failed_cause: None,
        }
    }
}

/// Where the pass that computes an existing volume's checksums stopped: it resumes there.
/// Positions run over the volume (its scrub) and then over every member region in role
/// order (the entries): see `checksum_fill.rs`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChecksumFill {
    /// Everything below it is done.
    pub position_bytes: u64,
}

/// The block sizes a volume is served with, in bytes (`crate::VolumeOptions::block_size`).
pub const BLOCK_SIZES: [u32; 2] = [512, 4096];

/// A replace under way (`nbraid replace`): role `role`'s replacement, the member with id
/// `member`, holds every byte of the volume below `checkpoint_bytes` (flushed before this was
/// recorded) and took every write since. A start after a clean shutdown resumes the copy
/// there (`metadata/replace_resume.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplacementCheckpoint {
    pub role: u32,
    pub member: Uuid,
    pub checkpoint_bytes: u64,
}

/// Where an unfinished scrub stopped: it resumes there after a restart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScrubCheckpoint {
    /// Every byte of the volume below it was scrubbed.
    pub position_bytes: u64,
    /// The scrub rewrites what the redundancy proves wrong.
    pub repair: bool,
}

/// Scrub checkpoint flags: bit 0 = repair.
const SCRUB_REPAIR: u64 = 1;

/// A member's superblock: its identity and one record per volume that uses it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Superblock {
    /// Bumped on every write of this member's superblock; picks the copy slot.
    pub generation: u64,
    pub member: Uuid,
    /// The member's size when the superblock was written.
    pub member_bytes: u64,
    pub volumes: Vec<VolumeRecord>,
}

/// A member's record of a volume, with the member's own id (its superblock's).
pub type HeldRecord<'a> = (Uuid, &'a VolumeRecord);

/// Records of a volume's newest event that each deny another's member its place: two starts
/// ran on different members (split brain), and which holds the volume cannot be told.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SplitRecords {
    pub events: u64,
    /// The roles of the records of that event.
    pub roles: Vec<u32>,
}

/// The record a volume starts from among its members' records ([`HeldRecord`]s): of the
/// most events, one whose own member no record of another role of that event denies
/// ([`denies`]; two records of one role — a replacement's swap torn — are settled by the
/// winner's id at assembly), the lowest role's among those — so every reader takes the same record whatever order it
/// meets the members in. Records of one event differ when a commit was torn on some members
/// and a start ran without them: their record of that event trusts every member, the
/// start's records mark them rebuilding — theirs is the abandoned one (mdadm likewise sets
/// aside a member whose peers report it failed). None left: [`SplitRecords`].
pub fn newest_record_checked<'a>(
    held: impl IntoIterator<Item = HeldRecord<'a>>,
) -> Result<Option<&'a VolumeRecord>, SplitRecords> {
    let held: Vec<HeldRecord<'a>> = held.into_iter().collect();
    let Some(events) = held.iter().map(|(_, r)| r.events).max() else {
        return Ok(None);
    };
    let newest: Vec<HeldRecord<'a>> = held
        .into_iter()
        .filter(|(_, r)| r.events == events)
        .collect();
    let denied =
        |(id, r): &HeldRecord| (newest.iter()).any(|(_, s)| s.role != r.role && denies(s, *id, r));
    match newest
        .iter()
        .filter(|h| !denied(h))
        .min_by_key(|(_, r)| r.role)
    {
        Some((_, r)) => Ok(Some(*r)),
        None => Err(SplitRecords {
            events,
            roles: newest.iter().map(|(_, r)| r.role).collect(),
        }),
    }
}

/// [`newest_record_checked`] for readers that only describe a volume (`nbraid`, a reload's
/// plan): split records give the lowest role's (assembly refuses such a volume anyway).
pub fn newest_record<'a>(
    held: impl IntoIterator<Item = HeldRecord<'a>>,
) -> Option<&'a VolumeRecord> {
    let held: Vec<HeldRecord<'a>> = held.into_iter().collect();
    newest_record_checked(held.iter().copied()).unwrap_or_else(|_| {
        let events = held.iter().map(|(_, r)| r.events).max();
        (held.iter().map(|(_, r)| *r))
            .filter(|r| Some(r.events) == events)
            .min_by_key(|r| r.role)
    })
}

/// Whether record `s` denies member `id`, whose own record is `r`, its place: it lists
/// another member in `r`'s role, or records the role out (failed, rebuilding) where `r`
/// says it current.
fn denies(s: &VolumeRecord, id: Uuid, r: &VolumeRecord) -> bool {
    let role = r.role as usize;
    let own = r.members.get(role).map(|m| m.state);
    s.members.get(role).is_some_and(|m| {
        m.uuid != id || (m.state != RecordedState::Active && own == Some(RecordedState::Active))
    })
}

/// Whether the member holding `theirs` (set out of the array, now back) may have been written
/// by a start of its own since it left — split brain: it was assembled without the members
/// the array went on with. Its record then sets out one of them: a role `current` holds
/// active under the same id is failed or being rebuilt in `theirs` (a start records its absent
/// members so). Returns that role. Records only grow apart that way: a member set out gets
/// no commit of the array's (`Records::commit` writes current members only), so what its
/// record says of its peers is what it saw when it left — or what a start of its own said.
/// A member that left while a peer was out and that peer came back afterwards also answers
/// `Some`: the two cannot be told apart (a re-add rebuilds it whole either way).
pub fn ran_apart_from(current: &[MemberEntry], theirs: &VolumeRecord) -> Option<usize> {
    let own = theirs.role as usize;
    (theirs.members.iter().enumerate()).find_map(|(role, seen)| {
        let now = current.get(role)?;
        let set_out = matches!(
            seen.state,
            RecordedState::Failed | RecordedState::Rebuilding { .. }
        );
        (role != own && set_out && now.uuid == seen.uuid && now.state == RecordedState::Active)
            .then_some(role)
    })
}

/// Of a member's two superblock copies, the valid one of the higher generation, and the error that
/// disqualified the other, if any (a corrupted copy is reported, the other serves).
pub fn newest(
    copies: [MetadataResult<Superblock>; 2],
) -> MetadataResult<(Superblock, Option<MetadataError>)> {
    let [a, b] = copies;
    match (a, b) {
        (Ok(a), Ok(b)) => Ok(if a.generation >= b.generation {
            (a, None)
        } else {
            (b, None)
        }),
        (Ok(a), Err(e)) | (Err(e), Ok(a)) => Ok((a, Some(e))),
        (Err(e), Err(_)) => Err(e),
    }
}
