//! The superblock: its types, encoding and decoding (layout in `docs/FORMAT.md`).

use super::codec::{crc32c, Reader, Writer};
use super::intent::MAX_BITMAP_BYTES;
use super::{MetadataError, MetadataResult};
use nbraid_layout::{Node, ParityLayout};
use std::fmt;

pub const SUPERBLOCK_MAGIC: [u8; 8] = *b"NBRAIDSB";
/// The newest format this reads and writes. A superblock is written as version 2 only when
/// one of its records lists paths added at run time (see [`VolumeRecord::added_paths`]),
/// else as version 1, byte for byte as before: readers of version 1 only refuse just the
/// superblocks they cannot read.
pub const FORMAT_VERSION: u32 = 2;
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

impl Superblock {
    /// Byte offset on the member of the copy this generation is written to.
    pub fn slot_offset(&self) -> u64 {
        (self.generation % 2) * SLOT_BYTES
    }

    /// The superblock's bytes (at most [`SLOT_BYTES`]).
    pub fn encode(&self) -> MetadataResult<Vec<u8>> {
        let mut w = Writer::default();
        w.bytes(&SUPERBLOCK_MAGIC);
        let version = if self.volumes.iter().any(|v| !v.added_paths.is_empty()) {
            FORMAT_VERSION
        } else {
            FIRST_FORMAT_VERSION
        };
        w.u32(version);
        w.u32(0); // length, patched below
        w.u32(0); // checksum, patched below
        w.u32(0); // flags
        w.u64(self.generation);
        w.bytes(&self.member.0);
        w.u64(self.member_bytes);
        w.u32(self.volumes.len() as u32);
        w.u32(0);
        debug_assert_eq!(w.len(), HEADER_BYTES);
        for v in &self.volumes {
            let at = w.len();
            w.u32(0); // record length, patched below
            encode_volume(&mut w, v, version)?;
            let len = (w.len() - at) as u32;
            w.patch_u32(at, len);
        }
        let len = w.len();
        if len as u64 > SLOT_BYTES {
            return Err(MetadataError::TooLarge {
                len,
                max: SLOT_BYTES as usize,
            });
        }
        w.patch_u32(12, len as u32);
        let crc = crc32c(&w.bytes);
        w.patch_u32(CRC_AT, crc);
        Ok(w.bytes)
    }

    /// Reads a superblock from the start of `bytes` (a slot's contents).
    pub fn decode(bytes: &[u8]) -> MetadataResult<Superblock> {
        let mut r = Reader::new(bytes);
        let magic: [u8; 8] = r.array("magic")?;
        if magic != SUPERBLOCK_MAGIC {
            return Err(MetadataError::BadMagic { found: magic });
        }
        let version = r.u32("version")?;
        if !(FIRST_FORMAT_VERSION..=FORMAT_VERSION).contains(&version) {
            return Err(MetadataError::UnsupportedVersion { found: version });
        }
        let len = r.u32("length")? as usize;
        if len < HEADER_BYTES || len as u64 > SLOT_BYTES || len > bytes.len() {
            return Err(invalid(
                "length",
                format!(
                    "{len} bytes (header {HEADER_BYTES}, slot {SLOT_BYTES}, given {})",
                    bytes.len()
                ),
            ));
        }
        let stored = r.u32("checksum")?;
        let mut copy = bytes[..len].to_vec();
        copy[CRC_AT..CRC_AT + 4].fill(0);
        let computed = crc32c(&copy);
        if stored != computed {
            return Err(MetadataError::BadChecksum { stored, computed });
        }
        let mut r = Reader::new(&bytes[..len]);
        r.take(20, "header")?;
        let flags = r.u32("flags")?;
        if flags != 0 {
            return Err(invalid(
                "flags",
                format!("{flags:#x} (no flags are defined)"),
            ));
        }
        let generation = r.u64("generation")?;
        if generation > MAX_COUNTER {
            return Err(invalid(
                "generation",
                format!("{generation} (at most {MAX_COUNTER})"),
            ));
        }
        let member = Uuid(r.array("member uuid")?);
        let member_bytes = r.u64("member size")?;
        let count = r.u32("volume count")?;
        if count > MAX_VOLUMES {
            return Err(invalid(
                "volume count",
                format!("{count} (at most {MAX_VOLUMES})"),
            ));
        }
        r.u32("reserved")?;
        let mut volumes = Vec::with_capacity(count as usize);
        for _ in 0..count {
            let start = r.position();
            let rec_len = r.u32("record length")? as usize;
            if rec_len < 4 || rec_len - 4 > r.remaining() {
                return Err(invalid(
                    "record length",
                    format!("{rec_len} bytes with {} left", r.remaining()),
                ));
            }
            let body = r.take(rec_len - 4, "volume record")?;
            let v = decode_volume(body, member_bytes, version).map_err(|e| within(e, start))?;
            volumes.push(v);
        }
        if r.remaining() != 0 {
            return Err(invalid(
                "length",
                format!("{} bytes after the last record", r.remaining()),
            ));
        }
        Ok(Superblock {
            generation,
            member,
            member_bytes,
            volumes,
        })
    }

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

/// Of a member's two copies, the valid one with the highest generation, and the error that
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

fn invalid(what: &'static str, detail: String) -> MetadataError {
    MetadataError::Invalid { what, detail }
}

/// Adds where a record started to an error found inside it.
fn within(e: MetadataError, at: usize) -> MetadataError {
    match e {
        MetadataError::Invalid { what, detail } => MetadataError::Invalid {
            what,
            detail: format!("{detail} (in the volume record at byte {at})"),
        },
        other => other,
    }
}

fn encode_state(w: &mut Writer, s: RecordedState) {
    let (code, checkpoint) = match s {
        RecordedState::Active => (0u8, 0),
        RecordedState::Failed => (1, 0),
        RecordedState::Spare => (2, 0),
        RecordedState::Rebuilding { checkpoint_bytes } => (3, checkpoint_bytes),
    };
    w.u8(code);
    w.bytes(&[0; 7]);
    w.u64(checkpoint);
}

fn decode_state(r: &mut Reader) -> MetadataResult<RecordedState> {
    let code = r.u8("member state")?;
    r.take(7, "member state padding")?;
    let checkpoint = r.u64("rebuild checkpoint")?;
    match (code, checkpoint) {
        (0, 0) => Ok(RecordedState::Active),
        (1, 0) => Ok(RecordedState::Failed),
        (2, 0) => Ok(RecordedState::Spare),
        (3, c) => Ok(RecordedState::Rebuilding {
            checkpoint_bytes: c,
        }),
        (c @ 0..=2, x) => Err(invalid(
            "rebuild checkpoint",
            format!("{x} on a member in state {c} (only rebuilding members have one)"),
        )),
        (c, _) => Err(invalid(
            "member state",
            format!("code {c} (0..=3 are defined)"),
        )),
    }
}

fn encode_area(w: &mut Writer, a: Option<Area>) {
    let a = a.unwrap_or(Area { offset: 0, len: 0 });
    w.u64(a.offset);
    w.u64(a.len);
}

fn decode_area(
    r: &mut Reader,
    what: &'static str,
    member_bytes: u64,
) -> MetadataResult<Option<Area>> {
    let offset = r.u64(what)?;
    let len = r.u64(what)?;
    if len == 0 {
        return if offset == 0 {
            Ok(None)
        } else {
            Err(invalid(what, format!("offset {offset} with no length")))
        };
    }
    if offset.checked_add(len).is_none_or(|end| end > member_bytes) {
        return Err(invalid(
            what,
            format!("bytes {offset}+{len} past the member's {member_bytes}"),
        ));
    }
    Ok(Some(Area { offset, len }))
}

fn encode_volume(w: &mut Writer, v: &VolumeRecord, version: u32) -> MetadataResult<()> {
    w.bytes(&v.array.0);
    let name = v.name.as_bytes();
    if name.is_empty() || name.len() > NAME_BYTES || name.contains(&0) {
        return Err(invalid(
            "volume name",
            format!("{:?}: 1 to {NAME_BYTES} bytes, no NUL", v.name),
        ));
    }
    let mut padded = [0u8; NAME_BYTES];
    padded[..name.len()].copy_from_slice(name);
    w.bytes(&padded);
    w.u64(v.events);
    w.u32(u32::from(v.clean));
    w.u32(v.role);
    encode_area(w, v.bitmap.map(|b| b.area));
    w.u64(v.bitmap.map_or(0, |b| b.chunk_bytes));
    encode_area(w, v.ppl);
    encode_area(w, v.checksums);
    w.u32(v.members.len() as u32);
    for m in &v.members {
        w.bytes(&m.uuid.0);
        encode_state(w, m.state);
    }
    encode_node(w, &v.tree);
    if version >= 2 {
        encode_added_paths(w, &v.added_paths)?;
    }
    if let Some(s) = v.scrub {
        w.u64(s.position_bytes);
        w.u64(if s.repair { SCRUB_REPAIR } else { 0 });
    }
    Ok(())
}

fn decode_volume(body: &[u8], member_bytes: u64, version: u32) -> MetadataResult<VolumeRecord> {
    let mut r = Reader::new(body);
    let array = Uuid(r.array("array uuid")?);
    let raw: [u8; NAME_BYTES] = r.array("volume name")?;
    let end = raw.iter().position(|&b| b == 0).unwrap_or(NAME_BYTES);
    if end == 0 || raw[end..].iter().any(|&b| b != 0) {
        return Err(invalid(
            "volume name",
            "empty, or bytes after its end".into(),
        ));
    }
    let name = std::str::from_utf8(&raw[..end])
        .map_err(|e| invalid("volume name", format!("not UTF-8: {e}")))?
        .to_string();
    let events = r.u64("event counter")?;
    if events > MAX_COUNTER {
        return Err(invalid(
            "event counter",
            format!("{events} (at most {MAX_COUNTER})"),
        ));
    }
    let clean = match r.u32("clean flag")? {
        0 => false,
        1 => true,
        x => return Err(invalid("clean flag", format!("{x} (0 or 1)"))),
    };
    let role = r.u32("role")?;
    let bitmap_area = decode_area(&mut r, "bitmap area", member_bytes)?;
    let chunk_bytes = r.u64("bitmap chunk")?;
    let bitmap = match (bitmap_area, chunk_bytes) {
        (None, 0) => None,
        (Some(area), c) if c >= 4096 && c.is_power_of_two() => Some(BitmapArea {
            area,
            chunk_bytes: c,
        }),
        (a, c) => {
            return Err(invalid(
                "bitmap chunk",
                format!(
                    "{c} bytes with area {a:?} (a power of two ≥ 4096 with an area, or 0 without)"
                ),
            ))
        }
    };
    let ppl = decode_area(&mut r, "partial-parity log area", member_bytes)?;
    let checksums = decode_area(&mut r, "checksum area", member_bytes)?;
    let count = r.u32("member count")?;
    if count == 0 || count > MAX_MEMBERS {
        return Err(invalid(
            "member count",
            format!("{count} (1..={MAX_MEMBERS})"),
        ));
    }
    if role >= count {
        return Err(invalid("role", format!("{role} of {count} members")));
    }
    let mut members = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let uuid = Uuid(r.array("member uuid")?);
        let state = decode_state(&mut r)?;
        members.push(MemberEntry { uuid, state });
    }
    let tree = decode_node(&mut r, count as usize, 0)?;
    let added_paths = if version >= 2 {
        decode_added_paths(&mut r)?
    } else {
        Vec::new()
    };
    let scrub = match r.remaining() {
        0 => None,
        _ => {
            let position_bytes = r.u64("scrub checkpoint")?;
            let flags = r.u64("scrub flags")?;
            if flags & !SCRUB_REPAIR != 0 {
                return Err(invalid(
                    "scrub flags",
                    format!("{flags:#x} (only bit 0, repair, is defined)"),
                ));
            }
            Some(ScrubCheckpoint {
                position_bytes,
                repair: flags & SCRUB_REPAIR != 0,
            })
        }
    };
    if r.remaining() != 0 {
        return Err(invalid(
            "volume record",
            format!("{} bytes after the tree", r.remaining()),
        ));
    }
    let mut uses = vec![0u32; count as usize];
    tree.visit_members(&mut |m| uses[m.index] += 1);
    if let Some(i) = uses.iter().position(|&n| n != 1) {
        return Err(invalid(
            "tree",
            format!("member {i} appears {} times (exactly once)", uses[i]),
        ));
    }
    check_limits(&tree, role, bitmap, ppl, checksums, &members, scrub)?;
    Ok(VolumeRecord {
        array,
        name,
        events,
        clean,
        role,
        members,
        tree,
        bitmap,
        ppl,
        checksums,
        scrub,
        added_paths,
    })
}

/// The format's limits on a record's lengths and positions, checked before anything is
/// sized or read from them: areas are whole 4 KiB blocks after the superblock copies and
/// outside this member's regions; a bitmap holds a bit for every region of the volume
/// within [`MAX_BITMAP_BYTES`]; a log area at most [`MAX_PPL_AREA_BYTES`]; checkpoints
/// inside the volume.
fn check_limits(
    tree: &Node,
    role: u32,
    bitmap: Option<BitmapArea>,
    ppl: Option<Area>,
    checksums: Option<Area>,
    members: &[MemberEntry],
    scrub: Option<ScrubCheckpoint>,
) -> MetadataResult<()> {
    let mut regions = Vec::new();
    tree.visit_members(&mut |m| {
        if m.index == role as usize {
            regions.push((m.start, m.len));
        }
    });
    let areas = [
        ("bitmap area", bitmap.map(|b| b.area)),
        ("partial-parity log area", ppl),
        ("checksum area", checksums),
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
    let capacity = tree.capacity();
    if let Some(b) = bitmap {
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
    if let Some(a) = ppl.filter(|a| a.len > MAX_PPL_AREA_BYTES) {
        return Err(invalid(
            "partial-parity log area",
            format!("{} bytes (at most {MAX_PPL_AREA_BYTES})", a.len),
        ));
    }
    for (i, m) in members.iter().enumerate() {
        if let RecordedState::Rebuilding { checkpoint_bytes } = m.state {
            if checkpoint_bytes > capacity {
                return Err(invalid(
                    "rebuild checkpoint",
                    format!("{checkpoint_bytes} of member {i}, past the volume's {capacity} bytes"),
                ));
            }
        }
    }
    if let Some(s) = scrub.filter(|s| s.position_bytes > capacity) {
        return Err(invalid(
            "scrub checkpoint",
            format!("{} past the volume's {capacity} bytes", s.position_bytes),
        ));
    }
    Ok(())
}

/// A path added at run time as recorded: 1 to [`MAX_ADDED_PATH_BYTES`] bytes of UTF-8, no NUL.
fn check_added_path(path: &str) -> MetadataResult<()> {
    if path.is_empty() || path.len() > MAX_ADDED_PATH_BYTES || path.contains('\0') {
        return Err(invalid(
            "added path",
            format!("{path:?}: 1 to {MAX_ADDED_PATH_BYTES} bytes, no NUL"),
        ));
    }
    Ok(())
}

fn encode_added_paths(w: &mut Writer, paths: &[String]) -> MetadataResult<()> {
    if paths.len() > MAX_ADDED_PATHS {
        return Err(invalid(
            "added path count",
            format!("{} (at most {MAX_ADDED_PATHS})", paths.len()),
        ));
    }
    w.u32(paths.len() as u32);
    for p in paths {
        check_added_path(p)?;
        w.u32(p.len() as u32);
        w.bytes(p.as_bytes());
    }
    Ok(())
}

fn decode_added_paths(r: &mut Reader) -> MetadataResult<Vec<String>> {
    let count = r.u32("added path count")? as usize;
    if count > MAX_ADDED_PATHS {
        return Err(invalid(
            "added path count",
            format!("{count} (at most {MAX_ADDED_PATHS})"),
        ));
    }
    let mut paths = Vec::with_capacity(count);
    for _ in 0..count {
        let len = r.u32("added path length")? as usize;
        if len == 0 || len > MAX_ADDED_PATH_BYTES {
            return Err(invalid(
                "added path length",
                format!("{len} (1 to {MAX_ADDED_PATH_BYTES})"),
            ));
        }
        let raw = r.take(len, "added path")?;
        let path = std::str::from_utf8(raw)
            .map_err(|e| invalid("added path", format!("not UTF-8: {e}")))?;
        check_added_path(path)?;
        paths.push(path.to_string());
    }
    Ok(paths)
}

const NODE_MEMBER: u8 = 0;
const NODE_CONCAT: u8 = 1;
const NODE_STRIPE: u8 = 2;
const NODE_MIRROR: u8 = 3;
const NODE_PARITY: u8 = 4;

fn layout_code(l: ParityLayout) -> u8 {
    // md's algorithm numbers (ALGORITHM_LEFT_ASYMMETRIC = 0 … RIGHT_SYMMETRIC = 3).
    match l {
        ParityLayout::LeftAsymmetric => 0,
        ParityLayout::RightAsymmetric => 1,
        ParityLayout::LeftSymmetric => 2,
        ParityLayout::RightSymmetric => 3,
    }
}

fn encode_children(w: &mut Writer, children: &[Node]) {
    w.u32(children.len() as u32);
    for c in children {
        encode_node(w, c);
    }
}

fn encode_node(w: &mut Writer, n: &Node) {
    match n {
        Node::Member(m) => {
            w.u8(NODE_MEMBER);
            w.u32(m.index as u32);
            w.u64(m.start);
            w.u64(m.len);
        }
        Node::Concat(c) => {
            w.u8(NODE_CONCAT);
            encode_children(w, c.children());
        }
        Node::Stripe(s) => {
            w.u8(NODE_STRIPE);
            w.u64(s.unit());
            encode_children(w, s.children());
        }
        Node::Mirror(m) => {
            w.u8(NODE_MIRROR);
            encode_children(w, m.children());
        }
        Node::Parity(g) => {
            w.u8(NODE_PARITY);
            w.u64(g.strip());
            w.u8(g.parity() as u8);
            w.u8(layout_code(g.layout()));
            encode_children(w, g.children());
        }
    }
}

fn decode_children(r: &mut Reader, members: usize, depth: usize) -> MetadataResult<Vec<Node>> {
    let n = r.u32("child count")?;
    if n == 0 || n > MAX_MEMBERS {
        return Err(invalid("child count", format!("{n} (1..={MAX_MEMBERS})")));
    }
    (0..n).map(|_| decode_node(r, members, depth + 1)).collect()
}

fn decode_node(r: &mut Reader, members: usize, depth: usize) -> MetadataResult<Node> {
    if depth > MAX_TREE_DEPTH {
        return Err(invalid(
            "tree",
            format!("nested deeper than {MAX_TREE_DEPTH}"),
        ));
    }
    let layout_err = |e: nbraid_layout::LayoutError| invalid("tree", e.to_string());
    match r.u8("node kind")? {
        NODE_MEMBER => {
            let index = r.u32("member index")? as usize;
            let start = r.u64("region start")?;
            let len = r.u64("region length")?;
            if index >= members {
                return Err(invalid(
                    "tree",
                    format!("member index {index} of {members}"),
                ));
            }
            if len == 0
                || start
                    .checked_add(len)
                    .is_none_or(|end| end > MAX_REGION_END)
            {
                return Err(invalid(
                    "tree",
                    format!("member {index} region {start}+{len}"),
                ));
            }
            Ok(Node::member(index, start, len))
        }
        NODE_CONCAT => Node::concat(decode_children(r, members, depth)?).map_err(layout_err),
        NODE_STRIPE => {
            let unit = r.u64("stripe unit")?;
            if unit == 0 || !unit.is_multiple_of(512) {
                return Err(invalid("stripe unit", format!("{unit} bytes")));
            }
            Node::stripe(unit, decode_children(r, members, depth)?).map_err(layout_err)
        }
        NODE_MIRROR => Node::mirror(decode_children(r, members, depth)?).map_err(layout_err),
        NODE_PARITY => {
            let strip = r.u64("strip")?;
            let parity = r.u8("parity count")?;
            let layout = match r.u8("parity layout")? {
                0 => ParityLayout::LeftAsymmetric,
                1 => ParityLayout::RightAsymmetric,
                2 => ParityLayout::LeftSymmetric,
                3 => ParityLayout::RightSymmetric,
                x => return Err(invalid("parity layout", format!("code {x} (0..=3)"))),
            };
            if strip == 0 || !strip.is_multiple_of(512) {
                return Err(invalid("strip", format!("{strip} bytes")));
            }
            if parity != 1 && parity != 2 {
                return Err(invalid("parity count", format!("{parity} (1 or 2)")));
            }
            let children = decode_children(r, members, depth)?;
            Node::parity(strip, parity as usize, layout, children).map_err(layout_err)
        }
        k => Err(invalid("node kind", format!("{k} (0..=4)"))),
    }
}
