//! The superblock's bytes: the header, the volume records and their fields (layout in
//! `docs/FORMAT.md`). Decoding is total: any bytes give a superblock or an error naming the
//! field.

use super::tree::{decode_node, encode_node};
use super::validate::{check_added_path, check_limits, check_member_uses, invalid, within};
use super::{
    Area, BitmapArea, ChecksumFill, MemberEntry, RecordedState, ReplacementCheckpoint,
    ScrubCheckpoint, Superblock, Uuid, VolumeRecord, BLOCK_SIZES, CRC_AT, FIRST_FORMAT_VERSION,
    FORMAT_VERSION, HEADER_BYTES, MAX_ADDED_PATHS, MAX_ADDED_PATH_BYTES, MAX_COUNTER, MAX_MEMBERS,
    MAX_VOLUMES, NAME_BYTES, SCRUB_REPAIR, SLOT_BYTES, SUPERBLOCK_MAGIC,
};
use crate::fail_cause::FailCause;
use crate::metadata::codec::{crc32c, ByteReader, Writer};
use crate::metadata::reshape::{BackupWindow, ReshapeRecord};
use crate::metadata::{MetadataError, MetadataResult};

/// The version that added the list of paths added at run time.
const ADDED_PATHS_VERSION: u32 = 2;
/// The version that added the reshape record (written only while a record carries one).
const RESHAPE_VERSION: u32 = 3;
/// The version that added the checksum fill (written only while a record carries one).
const CHECKSUM_FILL_VERSION: u32 = 4;
/// The version that added the replaces under way (written only while a record carries one).
const REPLACEMENTS_VERSION: u32 = 5;
/// The block size byte of a member entry's padding in a record that does not know it
/// (written before the byte, or by a writer that does not know it).
const BLOCK_SIZE_UNKNOWN: u8 = 0;
/// Reshape flags: bit 0 = the backup holds the window at the position.
const RESHAPE_BACKED_UP: u64 = 1;

impl Superblock {
    /// Byte offset on the member of the copy this generation is written to.
    pub fn slot_offset(&self) -> u64 {
        (self.generation % 2) * SLOT_BYTES
    }

    /// The superblock's bytes (at most [`SLOT_BYTES`]).
    pub fn encode(&self) -> MetadataResult<Vec<u8>> {
        let mut w = Writer::default();
        w.bytes(&SUPERBLOCK_MAGIC);
        let version = if self.volumes.iter().any(|v| !v.replacements.is_empty()) {
            REPLACEMENTS_VERSION
        } else if self.volumes.iter().any(|v| v.checksum_fill.is_some()) {
            CHECKSUM_FILL_VERSION
        } else if self.volumes.iter().any(|v| v.reshape.is_some()) {
            RESHAPE_VERSION
        } else if self.volumes.iter().any(|v| !v.added_paths.is_empty()) {
            ADDED_PATHS_VERSION
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
        let mut r = ByteReader::new(bytes);
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
        let mut r = ByteReader::new(&bytes[..len]);
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
}

/// Bit 0 of the byte after the state code: [`MemberEntry::unacked_since_failed`]. Readers
/// before it skipped these bytes (written zero), so records stay readable both ways.
const UNACKED_SINCE_FAILED: u8 = 1;
/// Bits 1 … 3 of that byte: why a failed member failed ([`MemberEntry::failed_cause`]), at
/// most one set. Stopped answering (it may come back by itself); answered with errors; failed
/// by the operator. None set (every record before them): not kept, it stays out.
const FAILED_UNANSWERED: u8 = 1 << 1;
const FAILED_ERRORS: u8 = 1 << 2;
const FAILED_BY_OPERATOR: u8 = 1 << 3;

/// Member entry `m` of a record whose volume is served with `block_size` bytes.
fn encode_state(w: &mut Writer, m: &MemberEntry, block_size: u8) {
    let (code, checkpoint) = match m.state {
        RecordedState::Active => (0u8, 0),
        RecordedState::Failed => (1, 0),
        RecordedState::Spare => (2, 0),
        RecordedState::Rebuilding { checkpoint_bytes } => (3, checkpoint_bytes),
    };
    w.u8(code);
    w.u8(member_flags(m));
    w.u8(block_size);
    w.bytes(&[0; 5]);
    w.u64(checkpoint);
}

/// The flags byte of member entry `m` (only a failed member's are ever set).
fn member_flags(m: &MemberEntry) -> u8 {
    if m.state != RecordedState::Failed {
        return 0;
    }
    let unacked = if m.unacked_since_failed {
        UNACKED_SINCE_FAILED
    } else {
        0
    };
    let cause = match m.failed_cause {
        Some(FailCause::Unanswered | FailCause::AbsentAtStart) => FAILED_UNANSWERED,
        Some(FailCause::Errors) => FAILED_ERRORS,
        Some(FailCause::Operator) => FAILED_BY_OPERATOR,
        Some(FailCause::NotKept) | None => 0,
    };
    unacked | cause
}

/// Why a failed member failed, as its flags say (the operator's word first, should a
/// writer set more than one bit).
fn failed_cause_of(flags: u8) -> Option<FailCause> {
    if flags & FAILED_BY_OPERATOR != 0 {
        Some(FailCause::Operator)
    } else if flags & FAILED_ERRORS != 0 {
        Some(FailCause::Errors)
    } else if flags & FAILED_UNANSWERED != 0 {
        Some(FailCause::Unanswered)
    } else {
        None
    }
}

/// A member's state, whether it missed nothing acknowledged, and why it failed (only a
/// failed one can say either; the bits on any other state, or other bits, are ignored as
/// the padding they were).
/// With the entry's block size byte.
fn decode_state(
    r: &mut ByteReader,
) -> MetadataResult<(RecordedState, bool, Option<FailCause>, u8)> {
    let code = r.u8("member state")?;
    let flags = r.u8("member flags")?;
    let block_size = r.u8("block size")?;
    r.take(5, "member state padding")?;
    let checkpoint = r.u64("rebuild checkpoint")?;
    let failed = code == 1;
    let unacked = failed && flags & UNACKED_SINCE_FAILED != 0;
    let cause = if failed { failed_cause_of(flags) } else { None };
    decode_state_code(code, checkpoint).map(|s| (s, unacked, cause, block_size))
}

fn decode_state_code(code: u8, checkpoint: u64) -> MetadataResult<RecordedState> {
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
    r: &mut ByteReader,
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
    let block_size = block_size_byte(v.block_size)?;
    for m in &v.members {
        w.bytes(&m.uuid.0);
        encode_state(w, m, block_size);
    }
    encode_node(w, &v.tree);
    if version >= ADDED_PATHS_VERSION {
        encode_added_paths(w, &v.added_paths)?;
    }
    if version >= RESHAPE_VERSION {
        encode_reshape(w, v.reshape.as_ref());
    }
    if version >= CHECKSUM_FILL_VERSION {
        encode_fill(w, v.checksum_fill);
    }
    if version >= REPLACEMENTS_VERSION {
        encode_replacements(w, &v.replacements);
    }
    if let Some(s) = v.scrub {
        w.u64(s.position_bytes);
        w.u64(if s.repair { SCRUB_REPAIR } else { 0 });
    }
    Ok(())
}

fn decode_volume(body: &[u8], member_bytes: u64, version: u32) -> MetadataResult<VolumeRecord> {
    let mut r = ByteReader::new(body);
    let array = Uuid(r.array("array uuid")?);
    let name = decode_name(&mut r)?;
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
    let bitmap = decode_bitmap(&mut r, member_bytes)?;
    let ppl = decode_area(&mut r, "partial-parity log area", member_bytes)?;
    let checksums = decode_area(&mut r, "checksum area", member_bytes)?;
    let (members, block_size) = decode_members(&mut r, role)?;
    let tree = decode_node(&mut r, members.len(), 0)?;
    let added_paths = if version >= ADDED_PATHS_VERSION {
        decode_added_paths(&mut r)?
    } else {
        Vec::new()
    };
    let reshape = if version >= RESHAPE_VERSION {
        decode_reshape(&mut r, members.len(), member_bytes)?
    } else {
        None
    };
    let checksum_fill = if version >= CHECKSUM_FILL_VERSION {
        decode_fill(&mut r)?
    } else {
        None
    };
    let replacements = if version >= REPLACEMENTS_VERSION {
        decode_replacements(&mut r, members.len())?
    } else {
        Vec::new()
    };
    let scrub = decode_scrub(&mut r)?;
    if r.remaining() != 0 {
        return Err(invalid(
            "volume record",
            format!("{} bytes after the tree", r.remaining()),
        ));
    }
    match &reshape {
        // Mid-reshape, the old tree may leave out the members being added.
        Some(reshape) => reshape.check(&tree, members.len())?,
        None => check_member_uses(&tree, members.len())?,
    }
    let record = VolumeRecord {
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
        reshape,
        checksum_fill,
        replacements,
        block_size,
    };
    check_limits(&record)?;
    Ok(record)
}

/// The volume name: 1 to [`NAME_BYTES`] bytes of UTF-8, NUL-padded.
fn decode_name(r: &mut ByteReader) -> MetadataResult<String> {
    let raw: [u8; NAME_BYTES] = r.array("volume name")?;
    let end = raw.iter().position(|&b| b == 0).unwrap_or(NAME_BYTES);
    if end == 0 || raw[end..].iter().any(|&b| b != 0) {
        return Err(invalid(
            "volume name",
            "empty, or bytes after its end".into(),
        ));
    }
    let name = std::str::from_utf8(&raw[..end])
        .map_err(|e| invalid("volume name", format!("not UTF-8: {e}")))?;
    Ok(name.to_string())
}

/// The bitmap's area and chunk: both, or neither.
fn decode_bitmap(r: &mut ByteReader, member_bytes: u64) -> MetadataResult<Option<BitmapArea>> {
    let bitmap_area = decode_area(r, "bitmap area", member_bytes)?;
    let chunk_bytes = r.u64("bitmap chunk")?;
    match (bitmap_area, chunk_bytes) {
        (None, 0) => Ok(None),
        (Some(area), c) if c >= 4096 && c.is_power_of_two() => Ok(Some(BitmapArea {
            area,
            chunk_bytes: c,
        })),
        (a, c) => Err(invalid(
            "bitmap chunk",
            format!("{c} bytes with area {a:?} (a power of two ≥ 4096 with an area, or 0 without)"),
        )),
    }
}

/// Every member's id and state; `role` must be one of them.
/// The member entries, and the block size they record (every entry the same).
fn decode_members(
    r: &mut ByteReader,
    role: u32,
) -> MetadataResult<(Vec<MemberEntry>, Option<u32>)> {
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
    let mut block_sizes = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let uuid = Uuid(r.array("member uuid")?);
        let (state, unacked_since_failed, failed_cause, block_size) = decode_state(r)?;
        members.push(MemberEntry {
            uuid,
            state,
            unacked_since_failed,
            failed_cause,
        });
        block_sizes.push(block_size);
    }
    Ok((members, block_size_of(&block_sizes)?))
}

/// Version 4: a present flag (4: 0 or 1), then the fill's position (8).
fn encode_fill(w: &mut Writer, fill: Option<ChecksumFill>) {
    w.u32(u32::from(fill.is_some()));
    w.u64(fill.map_or(0, |f| f.position_bytes));
}

fn decode_fill(r: &mut ByteReader) -> MetadataResult<Option<ChecksumFill>> {
    let present = r.u32("checksum fill present")?;
    let position_bytes = r.u64("checksum fill position")?;
    match (present, position_bytes) {
        (0, 0) => Ok(None),
        (1, position_bytes) => Ok(Some(ChecksumFill { position_bytes })),
        (p, at) => Err(invalid(
            "checksum fill present",
            format!("{p} with position {at} (1, or 0 with position 0)"),
        )),
    }
}

/// Version 5: a count (4), then per replace under way its role (4), the replacement's id
/// (16) and its checkpoint (8).
fn encode_replacements(w: &mut Writer, replacements: &[ReplacementCheckpoint]) {
    w.u32(replacements.len() as u32);
    for x in replacements {
        w.u32(x.role);
        w.bytes(&x.member.0);
        w.u64(x.checkpoint_bytes);
    }
}

/// At most one replace per role, each of a role the record has.
fn decode_replacements(
    r: &mut ByteReader,
    members: usize,
) -> MetadataResult<Vec<ReplacementCheckpoint>> {
    let count = r.u32("replacement count")? as usize;
    if count > members {
        return Err(invalid(
            "replacement count",
            format!("{count} (at most one per role: {members})"),
        ));
    }
    let mut replacements: Vec<ReplacementCheckpoint> = Vec::with_capacity(count);
    for _ in 0..count {
        let role = r.u32("replacement role")?;
        let member = Uuid(r.array("replacement id")?);
        let checkpoint_bytes = r.u64("replacement checkpoint")?;
        if role as usize >= members || replacements.iter().any(|x| x.role == role) {
            return Err(invalid(
                "replacement role",
                format!("{role} (a role of the {members}, once)"),
            ));
        }
        if checkpoint_bytes > MAX_COUNTER {
            return Err(invalid(
                "replacement checkpoint",
                format!("{checkpoint_bytes} (at most {MAX_COUNTER})"),
            ));
        }
        replacements.push(ReplacementCheckpoint {
            role,
            member,
            checkpoint_bytes,
        });
    }
    Ok(replacements)
}

/// The block size byte every member entry of a record carries (in what was padding, which
/// readers before it skip): the size's log2, 9 for 512 and 12 for 4096; 0 where the record
/// does not know it.
fn block_size_byte(block_size: Option<u32>) -> MetadataResult<u8> {
    match block_size {
        None => Ok(BLOCK_SIZE_UNKNOWN),
        Some(b) if BLOCK_SIZES.contains(&b) => Ok(b.trailing_zeros() as u8),
        Some(b) => Err(invalid("block size", format!("{b} bytes (512 or 4096)"))),
    }
}

/// The block size the member entries' bytes (`bytes`, one per entry) record: every entry
/// the same byte, 9 (512), 12 (4096) or 0 (not known); anything else refused, named.
fn block_size_of(bytes: &[u8]) -> MetadataResult<Option<u32>> {
    let first = bytes.first().copied().unwrap_or(BLOCK_SIZE_UNKNOWN);
    if let Some(other) = bytes.iter().find(|&&b| b != first) {
        return Err(invalid(
            "block size",
            format!("member entries disagree (log2 {first} and {other})"),
        ));
    }
    match first {
        BLOCK_SIZE_UNKNOWN => Ok(None),
        b if b < 32 && BLOCK_SIZES.contains(&(1u32 << b)) => Ok(Some(1 << b)),
        b => Err(invalid(
            "block size",
            format!("log2 {b} (9 for 512 bytes or 12 for 4096, or 0: not recorded)"),
        )),
    }
}

/// The scrub checkpoint, present when bytes are left after the tree (and added paths).
fn decode_scrub(r: &mut ByteReader) -> MetadataResult<Option<ScrubCheckpoint>> {
    if r.remaining() == 0 {
        return Ok(None);
    }
    let position_bytes = r.u64("scrub checkpoint")?;
    let flags = r.u64("scrub flags")?;
    if flags & !SCRUB_REPAIR != 0 {
        return Err(invalid(
            "scrub flags",
            format!("{flags:#x} (only bit 0, repair, is defined)"),
        ));
    }
    Ok(Some(ScrubCheckpoint {
        position_bytes,
        repair: flags & SCRUB_REPAIR != 0,
    }))
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

fn decode_added_paths(r: &mut ByteReader) -> MetadataResult<Vec<String>> {
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

/// Version 3: a present flag (4: 0 or 1), then the reshape: position (8), flags (8: bit 0
/// the backup holds the window), the backed-up window's start and length (8 + 8, zero without
/// one), this member's backup area (8 + 8, zero for none), the new tree.
fn encode_reshape(w: &mut Writer, reshape: Option<&ReshapeRecord>) {
    let Some(r) = reshape else {
        w.u32(0);
        return;
    };
    w.u32(1);
    w.u64(r.position_bytes);
    w.u64(if r.backup_window.is_some() {
        RESHAPE_BACKED_UP
    } else {
        0
    });
    let window = r
        .backup_window
        .map_or((0, 0), |b| (b.start_bytes, b.len_bytes));
    w.u64(window.0);
    w.u64(window.1);
    encode_area(w, r.backup_area);
    encode_node(w, &r.new_tree);
}

fn decode_reshape(
    r: &mut ByteReader,
    members: usize,
    member_bytes: u64,
) -> MetadataResult<Option<ReshapeRecord>> {
    match r.u32("reshape present")? {
        0 => return Ok(None),
        1 => {}
        x => return Err(invalid("reshape present", format!("{x} (0 or 1)"))),
    }
    let position_bytes = r.u64("reshape position")?;
    let flags = r.u64("reshape flags")?;
    if flags & !RESHAPE_BACKED_UP != 0 {
        return Err(invalid(
            "reshape flags",
            format!("{flags:#x} (only bit 0, backed up, is defined)"),
        ));
    }
    let start_bytes = r.u64("reshape backup window start")?;
    let len_bytes = r.u64("reshape backup window length")?;
    let backup_window = if flags & RESHAPE_BACKED_UP != 0 {
        Some(BackupWindow {
            start_bytes,
            len_bytes,
        })
    } else if (start_bytes, len_bytes) != (0, 0) {
        return Err(invalid(
            "reshape backup window",
            format!("{start_bytes}+{len_bytes} without the backed-up flag"),
        ));
    } else {
        None
    };
    let backup_area = decode_area(r, "reshape backup area", member_bytes)?;
    let new_tree = decode_node(r, members, 0)?;
    Ok(Some(ReshapeRecord {
        new_tree,
        position_bytes,
        backup_area,
        backup_window,
    }))
}
