//! The superblock format: golden bytes pin the encoding, every field round-trips, every
//! corruption is named, and no byte string makes the decoder panic; assembly's rebuild
//! decisions.

use nbraid_core::fail_cause::FailCause;
use nbraid_core::metadata::{
    assemble, newest, newest_record, newest_record_checked, ran_apart_from, Absence, Area,
    BackupWindow, BitmapArea, ChecksumFill, MemberEntry, MetadataError, Probe, RecordedState,
    ReplacementCheckpoint, ReshapeRecord, ScrubCheckpoint, Superblock, Uuid, VolumeRecord,
    SLOT_BYTES,
};
use nbraid_layout::{Level, Node, ParityLayout, Region, Shape};
use proptest::prelude::*;

const MIB: u64 = 1 << 20;

fn uuid(b: u8) -> Uuid {
    Uuid([b; 16])
}

/// A RAID 5 of 4 members, 64 KiB strip, 1 GiB regions after the metadata area.
fn raid5_record(role: u32) -> VolumeRecord {
    let shape = Shape::new(Level::Raid5, 4, None, 64 << 10, ParityLayout::LeftSymmetric).unwrap();
    let regions = vec![
        Region {
            start: MIB,
            len: 1 << 30
        };
        4
    ];
    VolumeRecord {
        array: uuid(0xa5),
        name: "db".into(),
        events: 7,
        clean: true,
        role,
        members: (0..4)
            .map(|i| MemberEntry {
                uuid: uuid(0x10 + i),
                state: if i == 2 {
                    RecordedState::Rebuilding {
                        checkpoint_bytes: 3 * MIB,
                    }
                } else {
                    RecordedState::Active
                },
                unacked_since_failed: false,
                failed_cause: None,
            })
            .collect(),
        tree: shape.build(&regions).unwrap(),
        bitmap: Some(BitmapArea {
            area: Area {
                offset: 128 << 10,
                len: 4096,
            },
            chunk_bytes: 64 * MIB,
        }),
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

fn superblock() -> Superblock {
    Superblock {
        generation: 41,
        member: uuid(0x11),
        member_bytes: (1 << 30) + MIB,
        volumes: vec![raid5_record(1)],
    }
}

#[test]
fn round_trip() {
    let sb = superblock();
    let bytes = sb.encode().unwrap();
    assert_eq!(Superblock::decode(&bytes).unwrap(), sb);
    // A slot read whole (zero padded) decodes the same.
    let mut slot = bytes.clone();
    slot.resize(SLOT_BYTES as usize, 0);
    assert_eq!(Superblock::decode(&slot).unwrap(), sb);
    assert_eq!(
        sb.slot_offset(),
        SLOT_BYTES,
        "odd generations use the second copy"
    );
}

/// A failed member's "nothing acknowledged since" flag is byte 1 of its state (the first of
/// what was padding): it round-trips, only a failed member keeps it, and a record written
/// before it (the byte zero) reads as having missed acknowledged writes.
#[test]
fn the_failed_together_flag_is_the_byte_after_the_state() {
    let mut sb = superblock();
    sb.volumes[0].members[3].state = RecordedState::Failed;
    sb.volumes[0].members[3].unacked_since_failed = true;
    let bytes = sb.encode().unwrap();
    assert_eq!(Superblock::decode(&bytes).unwrap(), sb);
    // Member 3's entry: after the record's 160 bytes and three entries of 32; the superblock
    // header is 64 bytes.
    let entry = 64 + 160 + 3 * 32;
    assert_eq!(&bytes[entry..entry + 16], &[0x13; 16]);
    assert_eq!(&bytes[entry + 16..entry + 24], &[1, 1, 0, 0, 0, 0, 0, 0]);
    // An active member's flag is not written (nothing to say).
    let mut active = superblock();
    active.volumes[0].members[3].unacked_since_failed = true;
    let bytes = active.encode().unwrap();
    assert_eq!(&bytes[entry + 16..entry + 18], &[0, 0]);
    assert!(!Superblock::decode(&bytes).unwrap().volumes[0].members[3].unacked_since_failed);
    // Written before the flag: failed, the byte zero.
    let mut old = sb.clone();
    old.volumes[0].members[3].unacked_since_failed = false;
    let back = Superblock::decode(&old.encode().unwrap()).unwrap();
    assert!(!back.volumes[0].members[3].missed_nothing_acked());
}

/// Why a failed member failed is kept in bits 1 … 3 of that byte: each cause round-trips,
/// the bits sit beside the "nothing acknowledged since" bit, and a record written before
/// them (bits clear) reads as "not kept" — it stays out.
#[test]
fn the_failure_cause_is_kept_in_the_flags_byte() {
    let entry = 64 + 160 + 3 * 32;
    for (cause, bit, back) in [
        (FailCause::Unanswered, 2u8, FailCause::Unanswered),
        (FailCause::AbsentAtStart, 2, FailCause::Unanswered),
        (FailCause::Errors, 4, FailCause::Errors),
        (FailCause::Operator, 8, FailCause::Operator),
    ] {
        let mut sb = superblock();
        let m = &mut sb.volumes[0].members[3];
        m.state = RecordedState::Failed;
        m.unacked_since_failed = true;
        m.failed_cause = Some(cause);
        let bytes = sb.encode().unwrap();
        assert_eq!(bytes[entry + 17], 1 | bit, "{cause:?}");
        let read = Superblock::decode(&bytes).unwrap().volumes[0].members[3];
        assert_eq!(read.failed_cause, Some(back), "{cause:?}");
        assert!(read.unacked_since_failed, "{cause:?}");
        assert_eq!(back.returns_by_itself(), cause.returns_by_itself());
    }
    // Written before the bits: failed, flags zero.
    let mut old = superblock();
    old.volumes[0].members[3].state = RecordedState::Failed;
    let bytes = old.encode().unwrap();
    assert_eq!(bytes[entry + 17], 0);
    assert_eq!(
        Superblock::decode(&bytes).unwrap().volumes[0].members[3].failed_cause,
        None
    );
    // Only a failed member's cause is written.
    let mut active = superblock();
    active.volumes[0].members[3].failed_cause = Some(FailCause::Operator);
    let bytes = active.encode().unwrap();
    assert_eq!(bytes[entry + 17], 0);
}

#[test]
fn declared_trees_round_trip() {
    // A mirror of two RAID 5 groups and RAID 5 over mirrored pairs, with a concat.
    let leaf = |i: usize| Node::member(i, MIB, 64 * MIB);
    let r5 = |a: usize| {
        Node::parity(
            16 << 10,
            1,
            ParityLayout::RightAsymmetric,
            (a..a + 3).map(leaf).collect(),
        )
        .unwrap()
    };
    let trees = [
        Node::mirror(vec![r5(0), r5(3)]).unwrap(),
        Node::parity(
            64 << 10,
            2,
            ParityLayout::LeftAsymmetric,
            (0..4)
                .map(|m| Node::mirror(vec![leaf(2 * m), leaf(2 * m + 1)]).unwrap())
                .collect(),
        )
        .unwrap(),
        Node::concat(vec![
            Node::stripe(4096, vec![leaf(0), leaf(1)]).unwrap(),
            leaf(2),
        ])
        .unwrap(),
    ];
    for tree in trees {
        let n = tree.member_count();
        let mut sb = superblock();
        sb.volumes[0].tree = tree;
        sb.volumes[0].members = (0..n as u8)
            .map(|i| MemberEntry {
                uuid: uuid(i),
                state: RecordedState::Active,
                unacked_since_failed: false,
                failed_cause: None,
            })
            .collect();
        sb.volumes[0].role = 0;
        let bytes = sb.encode().unwrap();
        assert_eq!(Superblock::decode(&bytes).unwrap(), sb);
    }
}

/// The encoding is pinned: a change to it is a format change (bump the version, document it
/// in docs/FORMAT.md, keep reading version 1). Fields as docs/FORMAT.md lists them.
#[test]
fn golden_bytes() {
    let bytes = superblock().encode().unwrap();
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let mut at = 0;
    for (field, want) in GOLDEN {
        let got = &hex[at..at + want.len()];
        assert_eq!(got, *want, "field `{field}` at byte {}", at / 2);
        at += want.len();
    }
    assert_eq!(at, hex.len(), "bytes after the last pinned field");
}

const GOLDEN: &[(&str, &str)] = &[
    ("magic", "4e42524149445342"),
    ("version", "01000000"),
    ("length", "c3010000"),
    ("crc32c", "1ca4e6b0"),
    ("flags", "00000000"),
    ("generation", "2900000000000000"),
    ("member uuid", "11111111111111111111111111111111"),
    ("member size", "0000104000000000"),
    ("volume count", "01000000"),
    ("reserved", "00000000"),
    ("record length", "83010000"),
    ("array uuid", "a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5"),
    ("name (64 bytes)", "64620000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"),
    ("events", "0700000000000000"),
    ("clean", "01000000"),
    ("role", "01000000"),
    ("bitmap offset", "0000020000000000"),
    ("bitmap length", "0010000000000000"),
    ("bitmap chunk", "0000000400000000"),
    ("ppl offset", "0000000000000000"),
    ("ppl length", "0000000000000000"),
    ("checksum offset", "0000000000000000"),
    ("checksum length", "0000000000000000"),
    ("member count", "04000000"),
    ("member 0 uuid", "10101010101010101010101010101010"),
    ("member 0 state, pad", "0000000000000000"),
    ("member 0 checkpoint", "0000000000000000"),
    ("member 1 uuid", "11111111111111111111111111111111"),
    ("member 1 state, pad", "0000000000000000"),
    ("member 1 checkpoint", "0000000000000000"),
    ("member 2 uuid", "12121212121212121212121212121212"),
    ("member 2 state, pad", "0300000000000000"),
    ("member 2 checkpoint", "0000300000000000"),
    ("member 3 uuid", "13131313131313131313131313131313"),
    ("member 3 state, pad", "0000000000000000"),
    ("member 3 checkpoint", "0000000000000000"),
    ("tree: parity node", "04"),
    ("strip", "0000010000000000"),
    ("parity count", "01"),
    ("layout", "02"),
    ("children", "04000000"),
    ("leaf 0: kind", "00"),
    ("index", "00000000"),
    ("start", "0000100000000000"),
    ("len", "0000004000000000"),
    ("leaf 1: kind", "00"),
    ("index", "01000000"),
    ("start", "0000100000000000"),
    ("len", "0000004000000000"),
    ("leaf 2: kind", "00"),
    ("index", "02000000"),
    ("start", "0000100000000000"),
    ("len", "0000004000000000"),
    ("leaf 3: kind", "00"),
    ("index", "03000000"),
    ("start", "0000100000000000"),
    ("len", "0000004000000000"),
];

/// An unfinished scrub is 16 bytes after the tree, only while there is one; flags other
/// than repair are refused by name.
#[test]
fn a_scrub_checkpoint_round_trips_and_is_written_only_while_there_is_one() {
    let plain = superblock().encode().unwrap();
    let mut sb = superblock();
    sb.volumes[0].scrub = Some(ScrubCheckpoint {
        position_bytes: 5 * MIB,
        repair: true,
    });
    let bytes = sb.encode().unwrap();
    assert_eq!(bytes.len(), plain.len() + 16);
    assert_eq!(Superblock::decode(&bytes).unwrap(), sb);
    assert_eq!(
        bytes[bytes.len() - 16..bytes.len() - 8],
        (5 * MIB).to_le_bytes()
    );
    let mut bad = bytes.clone();
    let last = bad.len() - 1;
    bad[last] = 0x80;
    bad[16..20].fill(0);
    let crc = crc32c(&bad);
    bad[16..20].copy_from_slice(&crc.to_le_bytes());
    let e = Superblock::decode(&bad).unwrap_err();
    assert!(e.to_string().contains("scrub flags"), "{e}");
}

/// Spares added at run time are recorded in format version 2: a superblock listing none is
/// written as version 1, byte for byte as before (readers of version 1 read it); one that
/// lists some says version 2 (those readers refuse it, naming the version) and round-trips.
#[test]
fn added_paths_round_trip_and_only_they_bump_the_version() {
    let plain = superblock().encode().unwrap();
    assert_eq!(plain[8..12], 1u32.to_le_bytes());
    let mut sb = superblock();
    sb.volumes[0].added_paths = vec!["/dev/disk/by-id/spare-0".into(), "s1.img".into()];
    let bytes = sb.encode().unwrap();
    assert_eq!(bytes[8..12], 2u32.to_le_bytes());
    assert_eq!(bytes.len(), plain.len() + 4 + (4 + 23) + (4 + 6));
    assert_eq!(Superblock::decode(&bytes).unwrap(), sb);
    // With an unfinished scrub too: the checkpoint still ends the record.
    sb.volumes[0].scrub = Some(ScrubCheckpoint {
        position_bytes: 3 * MIB,
        repair: false,
    });
    assert_eq!(Superblock::decode(&sb.encode().unwrap()).unwrap(), sb);
    let mut bad = superblock();
    bad.volumes[0].added_paths = vec![String::new()];
    assert!(bad.encode().unwrap_err().to_string().contains("added path"));
    assert!(MetadataError::UnsupportedVersion { found: 6 }
        .to_string()
        .contains("versions 1 to 5"));
}

/// The superblock of member 1 of [`raid5_record`]'s volume while it is being reshaped onto a
/// fifth member, window `[3 MiB, 3 MiB + 192 KiB)` backed up.
fn reshaping() -> Superblock {
    let mut sb = superblock();
    let v = &mut sb.volumes[0];
    v.members.push(MemberEntry {
        uuid: uuid(0x14),
        state: RecordedState::Active,
        unacked_since_failed: false,
        failed_cause: None,
    });
    let shape = Shape::new(Level::Raid5, 5, None, 64 << 10, ParityLayout::LeftSymmetric).unwrap();
    let regions = vec![
        Region {
            start: MIB,
            len: 1 << 30
        };
        5
    ];
    // Whole stripes of both trees: 3 and 4 data strips of 64 KiB, so multiples of 768 KiB.
    v.reshape = Some(ReshapeRecord {
        new_tree: shape.build(&regions).unwrap(),
        position_bytes: 4 * (768 << 10),
        backup_area: Some(Area {
            offset: 256 << 10,
            len: 512 << 10,
        }),
        backup_window: Some(BackupWindow {
            start_bytes: 4 * (768 << 10),
            len_bytes: 768 << 10,
        }),
    });
    sb
}

/// A reshape in progress is written as version 3 (older readers refuse it by version: they
/// would misread a volume half in each shape), only while there is one; it round-trips
/// beside added paths and a scrub checkpoint; the bytes after the added paths are pinned.
#[test]
fn a_reshape_record_round_trips_as_version_3_only_while_there_is_one() {
    let plain = superblock().encode().unwrap();
    let sb = reshaping();
    let bytes = sb.encode().unwrap();
    assert_eq!(bytes[8..12], 3u32.to_le_bytes());
    assert_eq!(Superblock::decode(&bytes).unwrap(), sb);
    // Member 4's entry (16 + 16), the empty added-path list (4), the reshape: present (4),
    // position, flags, window start and length, area offset and length (6 × 8), the tree
    // (parity node 1 + 8 + 1 + 1 + 4, five leaves of 1 + 4 + 8 + 8).
    let reshape_bytes = 4 + 48 + 15 + 5 * 21;
    assert_eq!(bytes.len(), plain.len() + 32 + 4 + reshape_bytes);
    let hex: String = bytes[bytes.len() - reshape_bytes..]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let golden = [
        ("present", "01000000"),
        ("position", "0000300000000000"),
        ("flags: backed up", "0100000000000000"),
        ("window start", "0000300000000000"),
        ("window length", "00000c0000000000"),
        ("backup area offset", "0000040000000000"),
        ("backup area length", "0000080000000000"),
        ("new tree: parity node", "04"),
    ];
    let mut at = 0;
    for (field, want) in golden {
        assert_eq!(&hex[at..at + want.len()], want, "reshape field `{field}`");
        at += want.len();
    }
    // With a scrub checkpoint too: it still ends the record; another volume (Matrix) on the
    // member without a reshape writes its "absent" flag.
    let mut both = reshaping();
    both.volumes[0].scrub = Some(ScrubCheckpoint {
        position_bytes: MIB,
        repair: false,
    });
    let mut other = raid5_record(1);
    other.name = "logs".into();
    other.array = uuid(0xb6);
    other.bitmap = None;
    both.volumes.push(other);
    assert_eq!(Superblock::decode(&both.encode().unwrap()).unwrap(), both);
}

/// What a checksum cannot prove about a reshape is named: a position off the stripes of
/// both trees, a new tree that shrinks or misses a member, a window not at the position,
/// flags no version defines, a backup area over the member's region.
#[test]
fn an_impossible_reshape_record_is_named() {
    let refused = |f: &dyn Fn(&mut ReshapeRecord), what: &str| {
        let mut sb = reshaping();
        f(sb.volumes[0].reshape.as_mut().unwrap());
        let e = Superblock::decode(&sb.encode().unwrap()).unwrap_err();
        assert!(e.to_string().contains(what), "{what}: {e}");
    };
    refused(&|r| r.position_bytes += 4096, "is not one of the reshape's");
    refused(
        &|r| r.backup_window.as_mut().unwrap().start_bytes = 0,
        "is not the window at position",
    );
    refused(
        &|r| r.backup_area.as_mut().unwrap().offset = MIB,
        "reshape backup area",
    );
    refused(
        &|r| {
            let shape = Shape::new(Level::Raid5, 5, None, 64 << 10, ParityLayout::LeftSymmetric);
            r.new_tree = shape
                .unwrap()
                .build(
                    &[Region {
                        start: MIB,
                        len: 1 << 28,
                    }; 5],
                )
                .unwrap();
        },
        "would shrink the volume",
    );
    refused(
        &|r| r.new_tree = raid5_record(0).tree,
        "member 4 appears 0 times in the new tree",
    );
    // Flags past bit 0, with the checksum fixed up.
    let mut bytes = reshaping().encode().unwrap();
    let flags_at = bytes.len() - (48 + 15 + 5 * 21) + 8;
    bytes[flags_at] = 3;
    bytes[16..20].fill(0);
    let crc = crc32c(&bytes);
    bytes[16..20].copy_from_slice(&crc.to_le_bytes());
    let e = Superblock::decode(&bytes).unwrap_err();
    assert!(e.to_string().contains("reshape flags"), "{e}");
}

/// Checksums being enabled: the fill checkpoint is written (as version 4) only while a
/// record carries one, round-trips beside a scrub checkpoint, and a bad present flag or a
/// position past the pass's end is named.
#[test]
fn a_checksum_fill_round_trips_and_only_it_bumps_the_version_to_4() {
    let mut sb = superblock();
    let plain = sb.encode().unwrap();
    assert_eq!(u32::from_le_bytes(plain[8..12].try_into().unwrap()), 1);
    sb.volumes[0].checksum_fill = Some(ChecksumFill {
        position_bytes: 5 * MIB,
    });
    let bytes = sb.encode().unwrap();
    assert_eq!(u32::from_le_bytes(bytes[8..12].try_into().unwrap()), 4);
    assert_eq!(Superblock::decode(&bytes).unwrap(), sb);
    sb.volumes[0].scrub = Some(ScrubCheckpoint {
        position_bytes: 3 * MIB,
        repair: true,
    });
    assert_eq!(Superblock::decode(&sb.encode().unwrap()).unwrap(), sb);
    sb.volumes[0].checksum_fill = Some(ChecksumFill {
        position_bytes: u64::MAX / 2,
    });
    let e = Superblock::decode(&sb.encode().unwrap()).unwrap_err();
    assert!(e.to_string().contains("checksum fill position"), "{e}");
}

/// The superblock of [`superblock`] while role 2's member is being replaced, its copy at
/// 3 MiB.
fn replacing() -> Superblock {
    let mut sb = superblock();
    sb.volumes[0].replacements = vec![ReplacementCheckpoint {
        role: 2,
        member: uuid(0x77),
        checkpoint_bytes: 3 * MIB,
    }];
    sb
}

/// A replace under way is written (as version 5) only while a record carries one, and
/// round-trips beside the other checkpoints; a role the record lacks, a role twice, more
/// entries than roles and a checkpoint past the counters' range are refused, named.
/// Record `v` with a scrub checkpoint, a checksum fill and a path added at run time: a
/// round trip with them shows a field does not disturb the others.
fn with_other_tail_fields(v: &mut VolumeRecord) {
    v.scrub = Some(ScrubCheckpoint {
        position_bytes: 3 * MIB,
        repair: true,
    });
    v.checksum_fill = Some(ChecksumFill {
        position_bytes: MIB,
    });
    v.added_paths = vec!["/dev/disk/by-id/new".into()];
}

#[test]
fn a_replacement_checkpoint_round_trips_and_only_it_bumps_the_version_to_5() {
    let plain = superblock().encode().unwrap();
    let mut sb = replacing();
    let bytes = sb.encode().unwrap();
    assert_eq!(u32::from_le_bytes(bytes[8..12].try_into().unwrap()), 5);
    // The added paths (empty), the reshape and fill (absent), then one entry.
    assert_eq!(bytes.len(), plain.len() + 4 + 4 + 12 + 4 + 28);
    assert_eq!(Superblock::decode(&bytes).unwrap(), sb);
    with_other_tail_fields(&mut sb.volumes[0]);
    assert_eq!(Superblock::decode(&sb.encode().unwrap()).unwrap(), sb);
    let refused = |f: &dyn Fn(&mut Vec<ReplacementCheckpoint>), what: &str| {
        let mut sb = replacing();
        f(&mut sb.volumes[0].replacements);
        let e = Superblock::decode(&sb.encode().unwrap()).unwrap_err();
        assert!(e.to_string().contains(what), "{what}: {e}");
    };
    refused(&|x| x[0].role = 4, "replacement role");
    refused(&|x| x.push(x[0]), "replacement role");
    refused(&|x| x.extend([x[0]; 4]), "replacement count");
    refused(
        &|x| x[0].checkpoint_bytes = u64::MAX,
        "replacement checkpoint",
    );
}

/// [`superblock`] with its record holding its block size (`bytes`).
fn with_block_size(bytes: u32) -> Superblock {
    let mut sb = superblock();
    sb.volumes[0].block_size = Some(bytes);
    sb
}

/// `bytes` (an encoded superblock) with the checksum computed again, so the fields
/// themselves are decoded.
fn fix_crc(mut bytes: Vec<u8>) -> Vec<u8> {
    bytes[16..20].fill(0);
    let len = u32::from_le_bytes(bytes[12..16].try_into().unwrap()) as usize;
    let crc = crc32c(&bytes[..bytes.len().min(len)]);
    bytes[16..20].copy_from_slice(&crc.to_le_bytes());
    bytes
}

/// Where member entry `i`'s block size byte of [`superblock`]'s one record lies: the record
/// at 64, its member entries 160 bytes in, 32 each, the byte after the state and flags.
fn block_size_at(i: usize) -> usize {
    64 + 160 + 32 * i + 16 + 2
}

/// The block size a volume is served with is recorded in every member entry of its record,
/// in a byte that was padding (readers before it skip it): the record keeps its length and
/// the superblock its version, so an older nbraid still reads the members; it round-trips
/// beside every tail field; a record from before it (the byte 0) reads as not knowing it.
#[test]
fn the_block_size_round_trips_in_the_member_entries_and_keeps_the_version() {
    let plain = superblock().encode().unwrap();
    assert_eq!(u32::from_le_bytes(plain[8..12].try_into().unwrap()), 1);
    assert_eq!(
        Superblock::decode(&plain).unwrap().volumes[0].block_size,
        None
    );
    let entries = superblock().volumes[0].members.len();
    for (b, log2) in [(512, 9u8), (4096, 12)] {
        let mut sb = with_block_size(b);
        let bytes = sb.encode().unwrap();
        assert_eq!(u32::from_le_bytes(bytes[8..12].try_into().unwrap()), 1);
        assert_eq!(bytes.len(), plain.len());
        for i in 0..entries {
            assert_eq!(bytes[block_size_at(i)], log2, "entry {i}");
        }
        // Nothing else differs: an older reader, skipping the byte, reads the same record.
        let mut skipped = bytes.clone();
        for i in 0..entries {
            skipped[block_size_at(i)] = 0;
        }
        assert_eq!(fix_crc(skipped), plain);
        assert_eq!(Superblock::decode(&bytes).unwrap(), sb);
        with_other_tail_fields(&mut sb.volumes[0]);
        sb.volumes[0].replacements = replacing().volumes[0].replacements.clone();
        assert_eq!(Superblock::decode(&sb.encode().unwrap()).unwrap(), sb);
    }
    // A member shared with a volume whose record is from before the byte (another volume's
    // commit rewrote it): it stays not known, written as 0.
    let mut sb = with_block_size(512);
    let mut older = raid5_record(1);
    older.name = "old".into();
    older.array = uuid(0x5a);
    sb.volumes.push(older);
    let back = Superblock::decode(&sb.encode().unwrap()).unwrap();
    assert_eq!(back, sb);
    assert_eq!(back.volumes[1].block_size, None);
}

/// Block size bytes are hostile: anything but 9 (512), 12 (4096) or 0 (not recorded), or
/// entries that disagree, is refused, named; a record asked to hold another size is not
/// written.
#[test]
fn a_block_size_other_than_512_or_4096_is_refused_named() {
    let good = with_block_size(512).encode().unwrap();
    let entries = superblock().volumes[0].members.len();
    for b in (1..=255u8).filter(|b| ![9, 12].contains(b)) {
        let mut bad = good.clone();
        for i in 0..entries {
            bad[block_size_at(i)] = b;
        }
        let e = Superblock::decode(&fix_crc(bad)).unwrap_err();
        assert!(e.to_string().contains("block size"), "{b}: {e}");
        assert!(e.to_string().contains(&format!("log2 {b}")), "{b}: {e}");
    }
    let mut split = good.clone();
    split[block_size_at(entries - 1)] = 12;
    let e = Superblock::decode(&fix_crc(split)).unwrap_err();
    assert!(e.to_string().contains("disagree"), "{e}");
    let e = with_block_size(1024).encode().unwrap_err();
    assert!(e.to_string().contains("block size"), "{e}");
}

#[test]
fn every_corruption_is_named() {
    let good = superblock().encode().unwrap();
    let mut bad = good.clone();
    bad[0] = b'X';
    assert!(matches!(
        Superblock::decode(&bad),
        Err(MetadataError::BadMagic { .. })
    ));
    let mut bad = good.clone();
    bad[8] = 6;
    assert_eq!(
        Superblock::decode(&bad),
        Err(MetadataError::UnsupportedVersion { found: 6 })
    );
    let mut bad = good.clone();
    let last = bad.len() - 1;
    bad[last] ^= 1;
    assert!(matches!(
        Superblock::decode(&bad),
        Err(MetadataError::BadChecksum { .. })
    ));
    assert!(
        Superblock::decode(&good[..good.len() - 1]).is_err(),
        "truncated"
    );
    assert!(matches!(
        Superblock::decode(&[]),
        Err(MetadataError::Truncated { .. })
    ));
    // An impossible value with a correct checksum: a role past the member list.
    let mut sb = superblock();
    sb.volumes[0].role = 9;
    let e = Superblock::decode(&sb.encode().unwrap()).unwrap_err();
    assert!(e.to_string().contains("role"), "{e}");
}

/// A checksum proves the bytes were written so, not that they are sane: lengths, offsets
/// and checkpoints past the format's limits are named, whatever the recorded member size.
#[test]
fn values_past_the_formats_limits_are_named() {
    let refused = |f: &dyn Fn(&mut VolumeRecord), what: &str| {
        let mut sb = superblock();
        sb.member_bytes = 1 << 50;
        f(&mut sb.volumes[0]);
        let e = Superblock::decode(&sb.encode().unwrap()).unwrap_err();
        assert!(e.to_string().contains(what), "{what}: {e}");
    };
    let bitmap = |f: fn(&mut BitmapArea)| move |v: &mut VolumeRecord| f(v.bitmap.as_mut().unwrap());
    refused(&bitmap(|b| b.area.len = 16 << 40), "bitmap area");
    refused(&bitmap(|b| b.chunk_bytes = 4096), "bitmap area"); // 1 GiB needs 32 KiB of bits
    refused(&bitmap(|b| b.area.offset = 4096), "bitmap area"); // over the superblocks
    refused(&bitmap(|b| b.area.offset = MIB), "bitmap area"); // over the region
    let ppl = |offset, len| move |v: &mut VolumeRecord| v.ppl = Some(Area { offset, len });
    refused(&ppl(2 << 30, 2 << 30), "partial-parity log area");
    refused(&ppl(256 << 10, 1000), "partial-parity log area");
    refused(
        &|v| {
            v.members[2].state = RecordedState::Rebuilding {
                checkpoint_bytes: 1 << 40,
            }
        },
        "rebuild checkpoint",
    );
    refused(
        &|v| {
            v.scrub = Some(ScrubCheckpoint {
                position_bytes: 1 << 40,
                repair: false,
            })
        },
        "scrub checkpoint",
    );
}

#[test]
fn the_newest_valid_copy_serves() {
    let mut old = superblock();
    old.generation = 40;
    let new = superblock();
    let (sb, err) = newest([
        Superblock::decode(&old.encode().unwrap()),
        Superblock::decode(&new.encode().unwrap()),
    ])
    .unwrap();
    assert_eq!((sb.generation, err), (41, None));
    // A torn newest copy: the older one serves, and the damage is reported.
    let mut torn = new.encode().unwrap();
    torn[100] ^= 0xff;
    let (sb, err) = newest([
        Superblock::decode(&old.encode().unwrap()),
        Superblock::decode(&torn),
    ])
    .unwrap();
    assert_eq!(sb.generation, 40);
    assert!(matches!(err, Some(MetadataError::BadChecksum { .. })));
    assert!(newest([Superblock::decode(&[0; 64]), Superblock::decode(&torn)]).is_err());
}

#[test]
fn random_ids_differ_and_print_as_uuids() {
    let a = Uuid::random().unwrap();
    let b = Uuid::random().unwrap();
    assert_ne!(a, b);
    let s = a.to_string();
    assert_eq!(s.len(), 36);
    assert_eq!(&s[14..15], "4", "version 4: {s}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(if std::env::var_os("NBRAID_SOAK").is_some() { 200_000 } else { 4000 }))]

    /// Random bytes never panic the decoder.
    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        let _ = Superblock::decode(&bytes);
    }

    /// Mutations of a superblock mid-reshape (version 3), checksum fixed up, never panic.
    #[test]
    fn mutated_reshape_records_never_panic(edits in proptest::collection::vec((0usize..0x2a0, any::<u8>()), 1..8)) {
        let mut bytes = reshaping().encode().unwrap();
        for (at, b) in edits {
            if !(16..20).contains(&at) && at < bytes.len() {
                bytes[at] = b;
            }
        }
        bytes[16..20].fill(0);
        let crc = crc32c(&bytes[..bytes.len().min(u32::from_le_bytes(bytes[12..16].try_into().unwrap()) as usize)]);
        bytes[16..20].copy_from_slice(&crc.to_le_bytes());
        let _ = Superblock::decode(&bytes);
    }

    /// Mutations of a superblock mid-replace (version 5), checksum fixed up, never panic.
    #[test]
    fn mutated_replacement_records_never_panic(edits in proptest::collection::vec((0usize..0x1c0, any::<u8>()), 1..8)) {
        let mut bytes = replacing().encode().unwrap();
        for (at, b) in edits {
            if !(16..20).contains(&at) && at < bytes.len() {
                bytes[at] = b;
            }
        }
        bytes[16..20].fill(0);
        let crc = crc32c(&bytes[..bytes.len().min(u32::from_le_bytes(bytes[12..16].try_into().unwrap()) as usize)]);
        bytes[16..20].copy_from_slice(&crc.to_le_bytes());
        let _ = Superblock::decode(&bytes);
    }

    /// Mutations of a superblock that records its block size and a scrub checkpoint,
    /// checksum fixed up, never panic; any decode keeps the size 512, 4096 or not known.
    #[test]
    fn mutated_block_size_records_never_panic(edits in proptest::collection::vec((0usize..0x1e0, any::<u8>()), 1..8)) {
        let mut sb = with_block_size(4096);
        sb.volumes[0].scrub = Some(ScrubCheckpoint { position_bytes: MIB, repair: false });
        let mut bytes = sb.encode().unwrap();
        for (at, b) in edits {
            if !(16..20).contains(&at) && at < bytes.len() {
                bytes[at] = b;
            }
        }
        if let Ok(sb) = Superblock::decode(&fix_crc(bytes)) {
            for v in &sb.volumes {
                prop_assert!(matches!(v.block_size, None | Some(512) | Some(4096)), "{:?}", v.block_size);
            }
        }
    }

    /// Every value of the block size byte: 9 and 12 read as 512 and 4096, 0 as not known,
    /// anything else is refused naming the field.
    #[test]
    fn any_block_size_byte_decodes_only_as_512_4096_or_not_known(value in any::<u8>()) {
        let mut bytes = with_block_size(512).encode().unwrap();
        for i in 0..superblock().volumes[0].members.len() {
            bytes[block_size_at(i)] = value;
        }
        let got = Superblock::decode(&fix_crc(bytes)).map(|sb| sb.volumes[0].block_size);
        match value {
            0 => prop_assert_eq!(got, Ok(None)),
            9 => prop_assert_eq!(got, Ok(Some(512))),
            12 => prop_assert_eq!(got, Ok(Some(4096))),
            _ => {
                let e = got.expect_err("refused");
                prop_assert!(e.to_string().contains("block size"), "{}", e);
            }
        }
    }

    /// Mutations of a valid superblock, with the checksum fixed up so the fields themselves
    /// are decoded, never panic: each decodes or is refused with an error.
    #[test]
    fn mutated_fields_never_panic(edits in proptest::collection::vec((0usize..0x188, any::<u8>()), 1..8)) {
        let mut bytes = superblock().encode().unwrap();
        for (at, b) in edits {
            if !(16..20).contains(&at) {
                bytes[at] = b;
            }
        }
        bytes[16..20].fill(0);
        let crc = crc32c(&bytes[..bytes.len().min(u32::from_le_bytes(bytes[12..16].try_into().unwrap()) as usize)]);
        bytes[16..20].copy_from_slice(&crc.to_le_bytes());
        let _ = Superblock::decode(&bytes);
    }
}

/// CRC-32C, as the format defines it (an independent copy for the test).
fn crc32c(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = (crc >> 1) ^ (0x82f6_3b78 & (crc & 1).wrapping_neg());
        }
    }
    !crc
}

mod on_members {
    use super::*;
    use futures::executor::block_on;
    use nbraid_core::metadata::{read_superblock, write_superblock, Found};
    use nbraid_core::{Member, MemoryMember};

    /// Room for [`raid5_record`]'s region (a superblock placing bytes past its member's end
    /// is refused); memory members are sparse.
    const MEMBER_BYTES: u64 = MIB + (1 << 30);

    #[test]
    fn blank_member_then_alternating_copies() {
        let m = MemoryMember::new("m0", MEMBER_BYTES);
        assert!(matches!(
            block_on(read_superblock(&m)).unwrap(),
            Found::Blank
        ));
        let mut sb = superblock();
        for generation in 1..=3 {
            sb.generation = generation;
            block_on(write_superblock(&m, &sb)).unwrap();
            match block_on(read_superblock(&m)).unwrap() {
                Found::Superblock(got, None) if generation > 1 => assert_eq!(got, sb),
                Found::Superblock(got, Some(MetadataError::BadMagic { .. })) if generation == 1 => {
                    assert_eq!(got, sb, "the second copy is still blank")
                }
                other => panic!("generation {generation}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_corrupted_copy_is_survived_and_reported() {
        let m = MemoryMember::new("m0", MEMBER_BYTES);
        let mut sb = superblock();
        sb.generation = 4;
        block_on(write_superblock(&m, &sb)).unwrap();
        sb.generation = 5;
        block_on(write_superblock(&m, &sb)).unwrap();
        // Scribble over the newest copy (generation 5 lives in copy 1).
        m.poke(SLOT_BYTES + 40, &[0xee; 8]);
        match block_on(read_superblock(&m)).unwrap() {
            Found::Superblock(got, Some(MetadataError::BadChecksum { .. })) => {
                assert_eq!(got.generation, 4)
            }
            other => panic!("{other:?}"),
        }
        m.poke(40, &[0xee; 8]);
        let e = block_on(read_superblock(&m)).unwrap_err();
        assert!(
            e.to_string()
                .contains("both superblock copies are unusable"),
            "{e}"
        );
        assert_eq!(m.len(), MEMBER_BYTES);
    }
}

mod assembly {
    use super::*;
    use nbraid_core::metadata::{
        assemble, assemble_forced, pick_forced, Absence, AssembleError, ForcedRole, Probe,
    };

    /// Superblocks of the RAID 5 of 4 as written at `events`, one per role.
    fn members(events: u64) -> Vec<Superblock> {
        (0..4u32)
            .map(|role| {
                let mut v = raid5_record(role);
                v.events = events;
                v.members[2].state = RecordedState::Active;
                Superblock {
                    generation: 1,
                    member: uuid(0x10 + role as u8),
                    member_bytes: (1 << 30) + MIB,
                    volumes: vec![v],
                }
            })
            .collect()
    }

    fn probes(sbs: &[Superblock]) -> Vec<Probe> {
        sbs.iter()
            .map(|s| Probe::Superblock(s.clone(), None))
            .collect()
    }

    fn config_tree(strip: u64, level: Level) -> Node {
        let shape = Shape::new(level, 4, None, strip, ParityLayout::LeftSymmetric).unwrap();
        let region = Region {
            start: MIB,
            len: 1 << 30,
        };
        shape.build(&[region; 4]).unwrap()
    }

    fn roles(a: &nbraid_core::metadata::Assembly) -> Vec<Result<usize, Absence>> {
        a.roles.clone()
    }

    #[test]
    fn healthy_and_swapped() {
        let tree = config_tree(64 << 10, Level::Raid5);
        let a = assemble("db", &tree, &probes(&members(7))).unwrap();
        assert_eq!(roles(&a), vec![Ok(0), Ok(1), Ok(2), Ok(3)]);
        assert!(a.clean && a.warnings.is_empty());
        // Paths of members 0 and 3 swapped in the config: they keep their recorded roles.
        let mut sbs = members(7);
        sbs.swap(0, 3);
        let a = assemble("db", &tree, &probes(&sbs)).unwrap();
        assert_eq!(roles(&a), vec![Ok(3), Ok(1), Ok(2), Ok(0)]);
    }

    #[test]
    fn lost_stale_and_failed_members_start_degraded_within_tolerance() {
        let tree = config_tree(64 << 10, Level::Raid5);
        let mut p = probes(&members(7));
        p[1] = Probe::Missing;
        let a = assemble("db", &tree, &p).unwrap();
        assert_eq!(a.roles[1], Err(Absence::Lost));
        assert!(!a.warnings.is_empty(), "a lost member is said loudly");
        // A member that was offline while the others took writes.
        let mut sbs = members(9);
        sbs[2].volumes[0].events = 7;
        let a = assemble("db", &tree, &probes(&sbs)).unwrap();
        assert_eq!(
            a.roles[2],
            Err(Absence::Stale {
                member: 2,
                events: 7
            })
        );
        assert_eq!(a.events, 9);
        // One event behind: the last commit's write was torn on it; no write followed.
        let mut sbs = members(9);
        sbs[2].volumes[0].events = 8;
        let a = assemble("db", &tree, &probes(&sbs)).unwrap();
        assert_eq!(a.roles[2], Ok(2));
        // ... unless its peers recorded it being rebuilt (it was missing when they started).
        for s in &mut sbs {
            s.volumes[0].members[2].state = RecordedState::Rebuilding {
                checkpoint_bytes: 0,
            };
        }
        let a = assemble("db", &tree, &probes(&sbs)).unwrap();
        assert!(matches!(a.roles[2], Err(Absence::Stale { member: 2, .. })));
        // Its peers recorded it failed.
        let mut sbs = members(9);
        for s in &mut sbs {
            s.volumes[0].members[3].state = RecordedState::Failed;
        }
        let a = assemble("db", &tree, &probes(&sbs)).unwrap();
        assert_eq!(a.roles[3], Err(Absence::Failed { member: 3 }));
    }

    /// Each superblock's record of `db` with the member's own id.
    fn held(sbs: &[Superblock]) -> Vec<(Uuid, &VolumeRecord)> {
        sbs.iter().map(|s| (s.member, &s.volumes[0])).collect()
    }

    /// Records of one event that disagree. A commit torn on member 0 alone, then a start
    /// without it: member 0's record trusts every member, its peers' (same event) record it
    /// rebuilding — it missed what they did, so their record wins and member 0 is stale,
    /// whatever order the config names the members in (the lowest role's record, member
    /// 0's, was taken before). The open and the tools pick by the same rule.
    #[test]
    fn a_record_whose_own_member_its_peers_set_out_is_not_the_one_a_volume_starts_from() {
        let tree = config_tree(64 << 10, Level::Raid5);
        let mut sbs = members(9);
        for s in &mut sbs[1..] {
            s.volumes[0].members[0].state = RecordedState::Rebuilding {
                checkpoint_bytes: 0,
            };
        }
        // The torn commit's start had run without member 3: its record says so.
        sbs[0].volumes[0].members[3].state = RecordedState::Rebuilding {
            checkpoint_bytes: 0,
        };
        for order in [[0, 1, 2, 3], [1, 0, 2, 3], [3, 2, 1, 0]] {
            let placed: Vec<Superblock> = order.iter().map(|&r| sbs[r].clone()).collect();
            let a = assemble("db", &tree, &probes(&placed)).unwrap();
            let at = |role: usize| order.iter().position(|&r| r == role).unwrap();
            let stale = Err(Absence::Stale {
                member: at(0),
                events: 9,
            });
            assert_eq!(a.roles[0], stale, "config order {order:?}");
            for r in 1..4 {
                assert_eq!(a.roles[r], Ok(at(r)), "config order {order:?}");
            }
            assert_eq!(newest_record(held(&placed)).unwrap().role, 1);
        }
    }

    /// A lying record (its checksum right) that sets a peer out, or differs otherwise: the
    /// lowest role's record its peers do not set out wins, in any config order; records
    /// that each set the other's member out (starts on different members: split brain) are
    /// refused, naming them.
    #[test]
    fn lying_or_split_records_of_one_event() {
        let tree = config_tree(64 << 10, Level::Raid5);
        let mut sbs = members(9);
        sbs[1].volumes[0].members[3].state = RecordedState::Failed;
        sbs[2].volumes[0].added_paths = vec!["/lie".into()];
        for order in [[0, 1, 2, 3], [1, 0, 2, 3], [3, 2, 1, 0]] {
            let placed: Vec<Superblock> = order.iter().map(|&r| sbs[r].clone()).collect();
            assert_eq!(newest_record(held(&placed)).unwrap().role, 0, "{order:?}");
            let a = assemble("db", &tree, &probes(&placed)).unwrap();
            let at = |role: usize| order.iter().position(|&r| r == role).unwrap();
            assert_eq!(a.roles[3], Ok(at(3)), "the lie is not taken: {order:?}");
        }
        // Two lives at one event: roles 0 and 1 ran without 2 and 3, and 2 and 3 without 0.
        let mut sbs = members(9);
        for (s, out) in sbs.iter_mut().zip([[2, 3], [2, 3], [0, 1], [0, 1]]) {
            for r in out {
                s.volumes[0].members[r].state = RecordedState::Failed;
            }
        }
        let e = assemble("db", &tree, &probes(&sbs)).unwrap_err();
        assert!(
            matches!(e, AssembleError::RecordsSplit { events: 9, .. }),
            "{e}"
        );
        assert!(e.to_string().contains("split brain"), "{e}");
        assert!(newest_record_checked(held(&sbs)).is_err());
        // More events win over everything else.
        let mut sbs = members(9);
        sbs[2].volumes[0].events = 10;
        assert_eq!(newest_record(held(&sbs)).unwrap().role, 2);
    }

    /// A replacement's swap torn (its record names it in the old member's role, at the
    /// old member's event) with no other role's record at that event (a 4-way mirror whose
    /// other members are stale or gone): not split brain — the winner's id says which
    /// member holds the role, the other is ignored.
    #[test]
    fn two_records_of_one_role_are_not_split_brain() {
        let tree = config_tree(64 << 10, Level::Raid1);
        let mut sbs = members(9);
        for s in &mut sbs {
            s.volumes[0].tree = tree.clone();
        }
        for s in &mut sbs[1..3] {
            s.volumes[0].events = 7;
        }
        // Position 3 holds the replacement of role 0 (role 3's member is gone).
        let mut replacement = sbs[0].clone();
        replacement.member = uuid(0x30);
        replacement.volumes[0].members[0].uuid = uuid(0x30);
        sbs[3] = replacement;
        let a = assemble("db", &tree, &probes(&sbs)).unwrap();
        let holder = a.roles[0].clone().expect("role 0 held");
        assert!(holder == 0 || holder == 3, "{:?}", a.roles);
        assert!(
            a.warnings.iter().any(|w| w.contains("ignored")),
            "{:?}",
            a.warnings
        );
    }

    /// A member set out and back: whether its record says a start of its own set out a
    /// member the array kept serving (`ran_apart_from`), the sign of split brain.
    #[test]
    fn a_record_that_set_out_a_member_the_array_kept_ran_apart() {
        let current = members(12)[0].volumes[0].members.clone();
        let theirs = |out: &[(usize, RecordedState)]| {
            let mut v = members(9)[2].volumes[0].clone();
            for &(r, state) in out {
                v.members[r].state = state;
            }
            v
        };
        let rebuilding = RecordedState::Rebuilding {
            checkpoint_bytes: 0,
        };
        // As it left, its peers all current: it only went away.
        assert_eq!(ran_apart_from(&current, &theirs(&[])), None);
        // Its own role out in its own record says nothing of a life apart.
        let own_out = theirs(&[(2, RecordedState::Failed)]);
        assert_eq!(ran_apart_from(&current, &own_out), None);
        // Role 0 failed or being rebuilt in its record, active in the array's.
        for state in [RecordedState::Failed, rebuilding] {
            assert_eq!(ran_apart_from(&current, &theirs(&[(0, state)])), Some(0));
        }
        // Role 1 out in both: they agree.
        let mut out_too = current.clone();
        out_too[1].state = RecordedState::Failed;
        let one_out = theirs(&[(1, RecordedState::Failed)]);
        assert_eq!(ran_apart_from(&out_too, &one_out), None);
        // Role 1 given another member since: the one it saw fail is gone.
        let mut replaced = current.clone();
        replaced[1].uuid = uuid(0x51);
        assert_eq!(ran_apart_from(&replaced, &one_out), None);
    }

    #[test]
    fn an_unreachable_member_is_presumed_in_its_role_never_blank() {
        let tree = config_tree(64 << 10, Level::Raid5);
        let down = || Probe::Unreachable("connection refused".into());
        let mut p = probes(&members(7));
        p[2] = down();
        let a = assemble("db", &tree, &p).unwrap();
        assert_eq!(a.roles[2], Err(Absence::Unreachable { member: 2 }));
        assert!(
            a.warnings
                .iter()
                .any(|w| w.contains("unreachable (connection refused)")),
            "{:?}",
            a.warnings
        );
        // Paths swapped in the config: the one role left is the unreachable member's.
        let mut sbs = members(7);
        sbs.swap(0, 2);
        let mut p = probes(&sbs);
        p[0] = down();
        let a = assemble("db", &tree, &p).unwrap();
        assert_eq!(roles(&a)[0], Ok(2));
        assert_eq!(a.roles[2], Err(Absence::Unreachable { member: 0 }));
        // Two down: beyond a RAID 5's tolerance.
        let mut p = probes(&members(7));
        p[1] = down();
        p[3] = down();
        let e = assemble("db", &tree, &p).unwrap_err();
        assert!(e.to_string().contains("1, 3"), "{e}");
        // None answers with a record: nothing to assemble (never created over them).
        let p: Vec<Probe> = (0..4).map(|_| down()).collect();
        assert!(matches!(
            assemble("db", &tree, &p),
            Err(AssembleError::Uninitialized { .. })
        ));
    }

    #[test]
    fn beyond_tolerance_is_refused() {
        let tree = config_tree(64 << 10, Level::Raid5);
        let mut p = probes(&members(7));
        p[0] = Probe::Missing;
        p[3] = Probe::Blank;
        let e = assemble("db", &tree, &p).unwrap_err();
        assert!(matches!(e, AssembleError::BeyondTolerance { .. }), "{e}");
        assert!(e.to_string().contains("0, 3"), "{e}");
    }

    /// Past tolerance, a forced assembly takes back the freshest stale or failed member
    /// (mdadm --assemble --force) and says so; an ordinary one refuses naming each role.
    #[test]
    fn forced_assembly_takes_back_the_freshest_member_that_missed_writes() {
        let tree = config_tree(64 << 10, Level::Raid5);
        // Role 1 dropped out at event 5, role 3 at 7; the others went on to 9.
        let mut sbs = members(9);
        sbs[1].volumes[0].events = 5;
        sbs[3].volumes[0].events = 7;
        let e = assemble("db", &tree, &probes(&sbs)).unwrap_err();
        let AssembleError::BeyondTolerance { why, .. } = &e else {
            panic!("{e}")
        };
        assert_eq!(
            why,
            &vec![
                (
                    1,
                    Absence::Stale {
                        member: 1,
                        events: 5
                    }
                ),
                (
                    3,
                    Absence::Stale {
                        member: 3,
                        events: 7
                    }
                )
            ]
        );
        let a = assemble_forced("db", &tree, &probes(&sbs)).unwrap();
        assert_eq!(a.roles[3], Ok(3), "the freshest is taken back");
        assert!(matches!(a.roles[1], Err(Absence::Stale { member: 1, .. })));
        assert_eq!(
            a.forced,
            vec![ForcedRole {
                role: 3,
                member: 3,
                events: 7,
                newest_events: 9,
                was_failed: false,
                missed_nothing_acked: false
            }]
        );
        assert!(
            a.warnings.iter().any(|w| w.contains("FORCED")),
            "{:?}",
            a.warnings
        );
        // Within tolerance, force changes nothing.
        let mut sbs = members(9);
        sbs[1].volumes[0].events = 5;
        let a = assemble_forced("db", &tree, &probes(&sbs)).unwrap();
        assert!(a.forced.is_empty());
        // Lost members (no record) are never taken: still refused.
        let mut p = probes(&members(9));
        p[0] = Probe::Missing;
        p[2] = Probe::Blank;
        assert!(assemble_forced("db", &tree, &p).is_err());
    }

    #[test]
    fn pick_forced_takes_the_fewest_freshest_roles() {
        let raid6 = config_tree(64 << 10, Level::Raid6);
        // Three of four out: one must come back, the freshest.
        assert_eq!(
            pick_forced(&raid6, &[0, 1, 2], &[(0, 4), (1, 8), (2, 6)]),
            Some(vec![1])
        );
        // Ties go to the lower role, so the choice repeats.
        assert_eq!(
            pick_forced(&raid6, &[0, 1, 2], &[(2, 8), (1, 8)]),
            Some(vec![1])
        );
        // Nothing to take back, or not enough.
        assert_eq!(pick_forced(&raid6, &[0, 1, 2], &[]), None);
        let raid5 = config_tree(64 << 10, Level::Raid5);
        assert_eq!(pick_forced(&raid5, &[0, 1, 2], &[(0, 3)]), None);
        assert_eq!(
            pick_forced(&raid5, &[0, 1, 2], &[(0, 3), (2, 5)]),
            Some(vec![2, 0])
        );
        // Surviving already: nothing taken.
        assert_eq!(pick_forced(&raid5, &[1], &[(1, 3)]), Some(vec![]));
    }

    #[test]
    fn changed_geometry_is_refused_naming_both_values() {
        let e = assemble(
            "db",
            &config_tree(128 << 10, Level::Raid5),
            &probes(&members(7)),
        )
        .unwrap_err();
        assert!(
            matches!(
                e,
                AssembleError::GeometryChanged {
                    what: "strip size",
                    ..
                }
            ),
            "{e}"
        );
        assert!(
            e.to_string().contains("131072") && e.to_string().contains("65536"),
            "{e}"
        );
        let e = assemble(
            "db",
            &config_tree(64 << 10, Level::Raid6),
            &probes(&members(7)),
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("RAID 6") && e.to_string().contains("RAID 5"),
            "{e}"
        );
        let e = assemble(
            "db",
            &config_tree(64 << 10, Level::Raid10),
            &probes(&members(7)),
        )
        .unwrap_err();
        assert!(
            matches!(e, AssembleError::GeometryChanged { what: "level", .. }),
            "{e}"
        );
    }

    /// A volume created before per-block checksums (its records have no checksum area) under
    /// a config that now reserves their area before each region: refused (never
    /// reinterpreted), with the way to serve it as it is.
    #[test]
    fn a_volume_placed_before_checksums_is_told_to_say_checksums_off() {
        let shape = Shape::new(Level::Raid5, 4, None, 64 << 10, ParityLayout::LeftSymmetric);
        let shifted = Region {
            start: 2 * MIB,
            len: 1 << 30,
        };
        let tree = shape.unwrap().build(&[shifted; 4]).unwrap();
        let sbs = members(7);
        assert!(sbs[0].volumes[0].checksums.is_none());
        let e = assemble("db", &tree, &probes(&sbs)).unwrap_err();
        assert!(
            matches!(e, AssembleError::PlacedWithoutChecksums { .. }),
            "{e}"
        );
        assert!(e.to_string().contains("checksums = \"off\""), "{e}");
        // With a checksum area recorded, a moved region is the plain refusal.
        let mut sbs = members(7);
        for sb in &mut sbs {
            sb.volumes[0].checksums = Some(Area {
                offset: 128 << 10,
                len: 4096,
            });
        }
        let e = assemble("db", &tree, &probes(&sbs)).unwrap_err();
        assert!(
            matches!(
                e,
                AssembleError::GeometryChanged {
                    what: "member region",
                    ..
                }
            ),
            "{e}"
        );
    }

    /// A config that asks for a larger region than recorded at the same start (members grown
    /// and their size pinned to match): refused, naming the bytes and `nbraid apply` (offline:
    /// `--yes`) as the way — not "fix the config", which did ask for the growth.
    #[test]
    fn a_region_the_config_grows_is_refused_naming_nbraid_apply() {
        let shape = Shape::new(Level::Raid5, 4, None, 64 << 10, ParityLayout::LeftSymmetric);
        let grown = Region {
            start: MIB,
            len: (1 << 30) + 8 * MIB,
        };
        let tree = shape.unwrap().build(&[grown; 4]).unwrap();
        let e = assemble("db", &tree, &probes(&members(7))).unwrap_err();
        assert!(
            matches!(
                e,
                AssembleError::RegionGrown {
                    grown_bytes: 8388608,
                    ..
                }
            ),
            "{e}"
        );
        let text = e.to_string();
        for part in [
            "grew 8388608 bytes",
            "`nbraid apply`",
            "`nbraid apply --yes`",
        ] {
            assert!(text.contains(part), "{text}");
        }
    }

    #[test]
    fn foreign_members_are_refused_naming_both_arrays() {
        let tree = config_tree(64 << 10, Level::Raid5);
        let mut sbs = members(7);
        sbs[1].volumes[0].array = uuid(0xbb);
        let e = assemble("db", &tree, &probes(&sbs)).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains(&uuid(0xbb).to_string()) && msg.contains(&uuid(0xa5).to_string()),
            "{msg}"
        );
        let mut sbs = members(7);
        sbs[2].volumes[0].name = "other".into();
        let e = assemble("db", &tree, &probes(&sbs)).unwrap_err();
        assert!(e.to_string().contains("volume `other`"), "{e}");
    }

    /// `--force-assemble` is the operator's word that a disk went to another array: the
    /// volume starts without it (its role lost) within its tolerance, and past it is refused.
    #[test]
    fn a_forced_start_leaves_a_member_of_another_volume_out() {
        let tree = config_tree(64 << 10, Level::Raid5);
        let mut sbs = members(7);
        sbs[2].volumes[0].name = "other".into();
        let a = assemble_forced("db", &tree, &probes(&sbs)).unwrap();
        assert!(matches!(a.roles[2], Err(Absence::Lost)), "{:?}", a.roles);
        assert!(a.warnings.iter().any(|w| w.contains("started without it")));
        sbs[3].volumes[0].name = "other".into();
        let e = assemble_forced("db", &tree, &probes(&sbs)).unwrap_err();
        assert!(matches!(e, AssembleError::BeyondTolerance { .. }), "{e}");
    }

    /// Once another disk holds its role (added at run time, offered after the config's
    /// members), the config's disk of another array is not this volume's missing one: left
    /// out without `--force`.
    #[test]
    fn a_member_of_another_volume_whose_role_another_disk_holds_is_left_out() {
        let tree = config_tree(64 << 10, Level::Raid5);
        let mut sbs = members(7);
        for sb in &mut sbs {
            sb.volumes[0].members[2].uuid = uuid(0x77);
        }
        let mut added = sbs[2].clone();
        added.member = uuid(0x77);
        sbs[2].volumes[0].name = "other".into();
        assert!(assemble("db", &tree, &probes(&sbs)).is_err());
        sbs.push(added);
        let a = assemble("db", &tree, &probes(&sbs)).unwrap();
        assert_eq!(a.roles[2], Ok(4), "{:?}", a.roles);
        assert!(a
            .warnings
            .iter()
            .any(|w| w.contains("held by another member")));
    }

    #[test]
    fn uninitialized_volume_and_dirty_shutdown() {
        let tree = config_tree(64 << 10, Level::Raid5);
        let blank = vec![Probe::Blank, Probe::Blank, Probe::Missing, Probe::Blank];
        assert!(matches!(
            assemble("db", &tree, &blank),
            Err(AssembleError::Uninitialized { .. })
        ));
        let mut sbs = members(7);
        sbs[0].volumes[0].clean = false;
        assert!(!assemble("db", &tree, &probes(&sbs)).unwrap().clean);
    }
}

/// What member `role` of `raid5_record` holds: its own record (with `own` as its role's
/// state) at `events`.
fn member_probe(role: u32, events: u64, own: RecordedState, id: u8) -> Probe {
    let mut r = raid5_record(role);
    r.events = events;
    r.members[role as usize].state = own;
    r.members[role as usize].uuid = uuid(id);
    Probe::Superblock(
        Superblock {
            generation: 1,
            member: uuid(id),
            member_bytes: (1 << 30) + MIB,
            volumes: vec![r],
        },
        None,
    )
}

/// Assembly's rebuild decisions: a member being rebuilt into its role resumes at the
/// checkpoint (from 0 when it missed a commit); a member that went missing and returns is
/// stale, not resumed; a member whose id the records no longer name in its role is ignored.
#[test]
fn assembly_resumes_rebuilds_and_ignores_replaced_members() {
    let tree = raid5_record(0).tree;
    let rebuilding = RecordedState::Rebuilding {
        checkpoint_bytes: 3 * MIB,
    };
    let current = |role: u32| member_probe(role, 7, RecordedState::Active, 0x10 + role as u8);
    // Members 0, 1 and 3 current, role 2's member as given.
    let with = |two: Probe| vec![current(0), current(1), two, current(3)];
    // Role 2's new member carries the records' id and says rebuilding: it resumes at 3 MiB.
    let probes = with(member_probe(2, 7, rebuilding, 0x12));
    let a = assemble("db", &tree, &probes).expect("assembles");
    assert_eq!(a.rebuilding, vec![(2, 3 * MIB)]);
    assert_eq!(a.roles[2], Ok(2));
    // Its record two events behind (it missed commits): resumes from 0.
    let probes = with(member_probe(2, 5, rebuilding, 0x12));
    let a = assemble("db", &tree, &probes).expect("assembles");
    assert_eq!(a.rebuilding, vec![(2, 0)]);
    // A member that was missing (its own record says active) is stale, not resumed.
    let probes = with(member_probe(2, 5, RecordedState::Active, 0x12));
    let a = assemble("db", &tree, &probes).expect("assembles");
    assert!(a.rebuilding.is_empty());
    assert!(matches!(a.roles[2], Err(Absence::Stale { member: 2, .. })));
    // A member with another id in role 2 (the one it replaced, say): ignored, role lost.
    let probes = with(member_probe(2, 7, RecordedState::Active, 0x99));
    let a = assemble("db", &tree, &probes).expect("assembles degraded");
    assert_eq!(a.roles[2], Err(Absence::Lost));
    assert!(a
        .warnings
        .iter()
        .any(|w| w.contains("belongs to another member")));
}

/// A volume whose records carry a reshape assembles against the shape it is moving into
/// (the config, `nbraid apply`'s), with the reshape in the assembly; a config of the old shape
/// is refused by what differs, said as a reshape under way, and the tolerance is both trees'.
#[test]
fn a_volume_mid_reshape_assembles_against_the_new_shape() {
    let sb = reshaping();
    let record = sb.volumes[0].clone();
    let new_tree = record.reshape.as_ref().unwrap().new_tree.clone();
    let mut probes = vec![Probe::Missing; 5];
    probes[1] = Probe::Superblock(sb, None);
    let e = assemble("db", &new_tree, &probes).unwrap_err();
    assert!(
        matches!(
            e,
            nbraid_core::metadata::AssembleError::BeyondTolerance { .. }
        ),
        "{e}"
    );
    let e = assemble("db", &record.tree, &probes).unwrap_err();
    assert!(
        matches!(
            e,
            nbraid_core::metadata::AssembleError::ChangedMidReshape { .. }
        ),
        "{e}"
    );
}
