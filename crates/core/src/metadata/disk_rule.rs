//! When nbraid may write onto a disk it did not create: one rule for every path that does —
//! `nbraid create` and the daemon's `create = "auto"`, `nbraid add` and `nbraid replace`, a
//! spare or a recorded added path taken at start, a remote member that comes back blank.
//! `docs/FORMAT.md` ("When nbraid writes onto a disk") states it for operators.
//!
//! - **Blank** (no nbraid superblock, the first MiB all zero): written.
//! - **This array's own record** (a member removed or failed, coming back): written; other
//!   volumes' records beside it are its Matrix siblings, kept, their regions untouched.
//! - **Only records of sibling arrays** (the other volumes that share the member file): written
//!   beside them.
//! - **Anything else is refused, saying what was found**: another array's record (its id and
//!   volume name), a file system or volume signature (ext4, XFS, btrfs, LVM, md RAID, LUKS,
//!   swap, a partition table), or non-zero bytes where the superblock goes. `--force` (the
//!   operator's word, as mdadm's) overrides those — never an unreadable disk, whose contents
//!   are unknown.
//!
//! The decision is a pure function of what was found ([`DiskContents`]), so every caller and
//! the unit tests see the same rule; reading the disk is [`DiskContents::examine`]'s.

use super::{Probe, Superblock, Uuid, METADATA_AREA_BYTES};
use crate::buf::Buf;
use crate::member::Member;
use std::fmt;

/// One nbraid volume record found on a disk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordSeen {
    pub array: Uuid,
    pub volume: String,
}

impl fmt::Display for RecordSeen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "volume `{}` of array {}", self.volume, self.array)
    }
}

/// What a disk holds, as far as the rule cares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DiskContents {
    /// No nbraid superblock and the first MiB all zero.
    Blank,
    /// No nbraid superblock but non-zero bytes in the first MiB; `signature` names a file
    /// system or volume format recognised there.
    Data { signature: Option<&'static str> },
    /// An nbraid superblock with these volume records (possibly none).
    Records(Vec<RecordSeen>),
    /// It could not be read (or its server did not answer): what it holds is unknown.
    Unknown(String),
}

/// Who is about to write: the array (`None` while it is being created) and the arrays whose
/// records may stay beside its own on the disk (its Matrix siblings on that member file).
#[derive(Clone, Debug, Default)]
pub struct Writer {
    pub array: Option<Uuid>,
    pub siblings: Vec<Uuid>,
}

/// The operator's word on a disk offered to a running array (`nbraid add`, `nbraid replace`):
/// `force` overrides the rule's refusals; `siblings` are arrays that share the disk as a
/// member (Matrix), whose records may stay beside this array's.
#[derive(Clone, Debug, Default)]
pub struct Consent {
    pub force: bool,
    pub siblings: Vec<Uuid>,
}

/// Why a write is allowed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Allowed {
    Blank,
    /// It carries this array's record (and maybe its siblings'): it was this array's member.
    Ours,
    /// It carries only sibling arrays' records: written beside them.
    BesideSiblings,
    /// Refused by the rule, written because the operator said `--force`.
    Forced(Refused),
}

/// Why a write is refused: what was found. `Display` reads after the disk's name ("`d2.img`
/// belongs to another array (…)"); [`Refused::force_advice`] adds the way out where `--force`
/// exists.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refused {
    /// Records of arrays that are neither this one nor its siblings.
    Foreign(Vec<RecordSeen>),
    /// No nbraid superblock, data where it goes.
    Data { signature: Option<&'static str> },
    /// Unreadable: never written, even forced.
    Unknown(String),
}

impl Refused {
    /// Whether `--force` may override it.
    pub fn overridable(&self) -> bool {
        !matches!(self, Refused::Unknown(_))
    }
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refused::Foreign(records) => {
                let list: Vec<String> = records.iter().map(|r| r.to_string()).collect();
                write!(
                    f,
                    "belongs to another array ({}); refusing to overwrite it",
                    list.join(", ")
                )
            }
            Refused::Data {
                signature: Some(sig),
            } => write!(
                f,
                "holds {sig} (found in its first MiB, where nbraid's superblock goes); \
                 refusing to overwrite it"
            ),
            Refused::Data { signature: None } => f.write_str(
                "has no nbraid superblock but is not blank (non-zero bytes in its first \
                 MiB, where the superblock goes): it may hold someone else's data; refusing to \
                 overwrite it",
            ),
            Refused::Unknown(e) => write!(f, "cannot be read ({e}); refusing to write onto it"),
        }
    }
}

impl Refused {
    /// The way out with `--force` (empty when nothing overrides it).
    pub fn force_advice(&self) -> &'static str {
        match self {
            Refused::Foreign(_) => " — add --force if that array is no longer wanted",
            Refused::Data { .. } => " — add --force if its data is no longer wanted",
            Refused::Unknown(_) => "",
        }
    }
}

/// The rule (see the module): may `writer` write onto a disk holding `found`? `force` is the
/// operator's `--force`.
pub fn may_write(found: &DiskContents, writer: &Writer, force: bool) -> Result<Allowed, Refused> {
    let refused = match found {
        DiskContents::Blank => return Ok(Allowed::Blank),
        DiskContents::Unknown(e) => return Err(Refused::Unknown(e.clone())),
        DiskContents::Data { signature } => Refused::Data {
            signature: *signature,
        },
        DiskContents::Records(records) => {
            if records.iter().any(|r| Some(r.array) == writer.array) {
                return Ok(Allowed::Ours);
            }
            let foreign: Vec<RecordSeen> = records
                .iter()
                .filter(|r| !writer.siblings.contains(&r.array))
                .cloned()
                .collect();
            if foreign.is_empty() {
                return Ok(Allowed::BesideSiblings);
            }
            Refused::Foreign(foreign)
        }
    };
    match force {
        true => Ok(Allowed::Forced(refused)),
        false => Err(refused),
    }
}

/// A file system or volume format recognised in a disk's first bytes (`None`: nothing known;
/// the rule still refuses non-zero bytes).
pub fn signature(first: &[u8]) -> Option<&'static str> {
    let at = |offset: usize, magic: &[u8]| first.get(offset..offset + magic.len()) == Some(magic);
    const KNOWN: &[(usize, &[u8], &str)] = &[
        (0, b"XFSB", "an XFS file system"),
        (1080, &[0x53, 0xef], "an ext2/3/4 file system"),
        (0x10040, b"_BHRfS_M", "a btrfs file system"),
        (512, b"LABELONE", "an LVM physical volume"),
        (
            4096,
            &[0xfc, 0x4e, 0x2b, 0xa9],
            "an md RAID member (superblock 1.2)",
        ),
        (
            0,
            &[0xfc, 0x4e, 0x2b, 0xa9],
            "an md RAID member (superblock 1.1)",
        ),
        (0, b"LUKS\xba\xbe", "a LUKS encrypted volume"),
        (4086, b"SWAPSPACE2", "a swap area"),
        (512, b"EFI PART", "a GPT partition table"),
        (3, b"NTFS    ", "an NTFS file system"),
    ];
    if let Some(&(_, _, what)) = KNOWN.iter().find(|(o, m, _)| at(*o, m)) {
        return Some(what);
    }
    // A DOS partition table: the boot signature and at least one partition entry.
    (at(510, &[0x55, 0xaa])
        && first
            .get(446..510)
            .is_some_and(|t| t.iter().any(|&b| b != 0)))
    .then_some("a DOS partition table")
}

impl DiskContents {
    /// The records of superblock `sb`.
    pub fn of_superblock(sb: &Superblock) -> DiskContents {
        DiskContents::Records(
            sb.volumes
                .iter()
                .map(|v| RecordSeen {
                    array: v.array,
                    volume: v.name.clone(),
                })
                .collect(),
        )
    }

    /// What `probe` (a superblock read) says, with `first_mib` (the disk's first MiB, read
    /// when no superblock was found) to tell blank from data.
    pub fn from_probe(probe: &Probe, first_mib: Option<&[u8]>) -> DiskContents {
        match probe {
            Probe::Superblock(sb, _) => DiskContents::of_superblock(sb),
            Probe::Blank => match first_mib {
                Some(b) if b.iter().all(|&x| x == 0) => DiskContents::Blank,
                Some(b) => DiskContents::Data {
                    signature: signature(b),
                },
                None => DiskContents::Unknown("its first MiB could not be read".into()),
            },
            Probe::Missing => DiskContents::Unknown("it is missing".into()),
            Probe::Unreadable(e) => DiskContents::Unknown(e.clone()),
            Probe::Unreachable(e) => DiskContents::Unknown(format!("unreachable: {e}")),
        }
    }
}

/// Reads `member`'s first MiB (less when it is smaller); `None` when it cannot be read.
pub async fn read_first_mib(member: &dyn Member) -> Option<Vec<u8>> {
    let len = METADATA_AREA_BYTES.min(member.len());
    member
        .read(0, Buf::new(len as usize))
        .await
        .ok()
        .map(|b| b.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u8) -> Uuid {
        Uuid([n; 16])
    }

    fn rec(n: u8, volume: &str) -> RecordSeen {
        RecordSeen {
            array: id(n),
            volume: volume.into(),
        }
    }

    fn writer(array: Option<u8>, siblings: &[u8]) -> Writer {
        Writer {
            array: array.map(id),
            siblings: siblings.iter().map(|&n| id(n)).collect(),
        }
    }

    #[test]
    fn blank_disks_and_our_own_members_are_written() {
        let w = writer(Some(1), &[]);
        assert_eq!(
            may_write(&DiskContents::Blank, &w, false),
            Ok(Allowed::Blank)
        );
        // A removed member of this array, beside a Matrix sibling's record.
        let ours = DiskContents::Records(vec![rec(2, "r10"), rec(1, "r5")]);
        assert_eq!(may_write(&ours, &w, false), Ok(Allowed::Ours));
        // Only siblings' records: written beside them.
        let beside = DiskContents::Records(vec![rec(2, "r10")]);
        assert_eq!(
            may_write(&beside, &writer(Some(1), &[2]), false),
            Ok(Allowed::BesideSiblings)
        );
        // A superblock with no record left.
        assert_eq!(
            may_write(&DiskContents::Records(vec![]), &w, false),
            Ok(Allowed::BesideSiblings)
        );
    }

    #[test]
    fn foreign_records_are_refused_by_array_id_not_name() {
        // Another array whose volume has this one's name is still another array.
        let same_name = DiskContents::Records(vec![rec(9, "r5")]);
        let e = may_write(&same_name, &writer(Some(1), &[]), false).unwrap_err();
        assert_eq!(e, Refused::Foreign(vec![rec(9, "r5")]));
        let text = e.to_string();
        assert!(
            text.contains(&id(9).to_string()) && text.contains("`r5`"),
            "{text}"
        );
        assert!(e.force_advice().contains("--force"), "{text}");
        // While creating (no id yet) any record not a sibling's is foreign.
        assert!(may_write(&same_name, &writer(None, &[]), false).is_err());
        // Forced: written, the reason kept for the log.
        assert_eq!(
            may_write(&same_name, &writer(Some(1), &[]), true),
            Ok(Allowed::Forced(Refused::Foreign(vec![rec(9, "r5")])))
        );
    }

    #[test]
    fn data_is_refused_unless_forced_and_unreadable_always() {
        let w = writer(Some(1), &[]);
        let data = DiskContents::Data {
            signature: Some("an XFS file system"),
        };
        let e = may_write(&data, &w, false).unwrap_err();
        assert!(e.to_string().contains("an XFS file system"), "{e}");
        assert!(matches!(may_write(&data, &w, true), Ok(Allowed::Forced(_))));
        let unknown = DiskContents::Unknown("I/O error".into());
        let e = may_write(&unknown, &w, true).unwrap_err();
        assert!(!e.overridable());
    }

    #[test]
    fn signatures_are_recognised() {
        let mut b = vec![0u8; 1 << 20];
        assert_eq!(signature(&b), None);
        b[1080..1082].copy_from_slice(&[0x53, 0xef]);
        assert_eq!(signature(&b), Some("an ext2/3/4 file system"));
        let mut b = vec![0u8; 1 << 20];
        b[..4].copy_from_slice(b"XFSB");
        assert_eq!(signature(&b), Some("an XFS file system"));
        let mut b = vec![0u8; 1 << 20];
        b[512..520].copy_from_slice(b"LABELONE");
        assert_eq!(signature(&b), Some("an LVM physical volume"));
        let mut b = vec![0u8; 1 << 20];
        b[4096..4100].copy_from_slice(&[0xfc, 0x4e, 0x2b, 0xa9]);
        assert_eq!(signature(&b), Some("an md RAID member (superblock 1.2)"));
        let mut b = vec![0u8; 1 << 20];
        b[510..512].copy_from_slice(&[0x55, 0xaa]);
        assert_eq!(signature(&b), None, "a boot signature alone");
        b[450] = 0x83;
        assert_eq!(signature(&b), Some("a DOS partition table"));
        // Short disks are read as far as they go.
        assert_eq!(signature(b"XFSB"), Some("an XFS file system"));
        assert_eq!(signature(b"XF"), None);
    }

    #[test]
    fn contents_from_a_probe() {
        let zero = vec![0u8; 4096];
        assert_eq!(
            DiskContents::from_probe(&Probe::Blank, Some(&zero)),
            DiskContents::Blank
        );
        let mut xfs = zero.clone();
        xfs[..4].copy_from_slice(b"XFSB");
        assert_eq!(
            DiskContents::from_probe(&Probe::Blank, Some(&xfs)),
            DiskContents::Data {
                signature: Some("an XFS file system")
            }
        );
        assert!(matches!(
            DiskContents::from_probe(&Probe::Blank, None),
            DiskContents::Unknown(_)
        ));
    }
}
