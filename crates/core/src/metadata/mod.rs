//! On-disk metadata: what an array knows about itself, on its own members.
//!
//! Every member starts with a metadata area (`METADATA_AREA_BYTES`) holding two copies of the
//! member's superblock: one per volume on the member (Matrix RAID) — array id and name, the
//! whole geometry as a tree, the member's role in it, the event counter and clean/dirty flag,
//! and every member's recorded state. A superblock is written to the slot its generation
//! selects, alternately, so a torn write leaves the other copy (the previous state) intact;
//! assembly takes the valid copy with the highest generation. `docs/FORMAT.md` documents every
//! byte; this module is the only code that reads or writes them.
//!
//! Decoding is total: any byte string yields a superblock or a [`MetadataError`] naming what
//! is wrong — never a panic (fuzzed in the tests).

mod areas;
mod array;
mod assemble;
mod bitmap;
mod checksum_area;
mod checksum_fill;
mod checksum_refill;
mod cloned;
mod codec;
mod create;
pub mod disk_rule;
mod error;
mod failed_entry;
mod fill_control;
mod heal;
mod identity;
pub mod intent;
mod io;
mod member_meta;
mod mirror_copies;
mod open;
mod options;
mod parts;
mod ppl_area;
mod ranges;
mod read_only;
mod readd;
mod rebuilding;
mod records;
mod remove;
mod replace_resume;
mod reshape;
mod reshape_areas;
mod reshape_backup;
mod reshape_run;
mod resync;
mod scrub;
mod spare_list;
mod spares;
mod superblock;
mod unsynced;

pub use array::{Array, CleanMark};
pub use assemble::{
    assemble, assemble_as_started, assemble_forced, assemble_named, pick_forced, pick_forced_with,
    Absence, AssembleError, Assembly, ForcedRole, Probe,
};
pub use checksum_area::planned_area;
pub use checksum_refill::{RefillControl, RefillReport};
pub use error::ArrayError;
pub use fill_control::{FillControl, FillPhase, FillReport};
pub use heal::RebuildReport;
pub use identity::same_member;
pub use io::{read_superblock, write_superblock, Found, SuperblockIoError};
pub use member_meta::MemberMeta;
pub use options::{ArrayOptions, OpenReport};
pub use read_only::{refusal as read_only_refusal, Found as ReadOnlyFound};
pub use readd::Readd;
pub use replace_resume::{is_replacement, replace_at_start, ReplaceAtStart, ResumedReplacement};
pub use reshape::{BackupWindow, ReshapeRecord};
pub use reshape_areas::NewShape;
pub use reshape_run::start_preview as reshape_start_preview;
pub use resync::{resync_order, ResyncOrder};
pub use spare_list::forget_added_path_offline;
pub use spares::{assign_spares, SpareChoice};

pub use superblock::{
    newest, newest_record, newest_record_checked, ran_apart_from, Area, BitmapArea, ChecksumFill,
    HeldRecord, MemberEntry, RecordedState, ReplacementCheckpoint, ScrubCheckpoint, SplitRecords,
    Superblock, Uuid, VolumeRecord, BLOCK_SIZES, FIRST_FORMAT_VERSION, FORMAT_VERSION,
    MAX_ADDED_PATHS, MAX_PPL_AREA_BYTES, METADATA_AREA_BYTES, SLOT_BYTES, SUPERBLOCK_MAGIC,
};

use thiserror::Error;

/// Why bytes are not a superblock nbraid can use.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum MetadataError {
    #[error("no nbraid superblock (magic {found:02x?}, expected \"NBRAIDSB\")")]
    BadMagic { found: [u8; 8] },
    #[error("superblock format version {found} is not supported (this nbraid reads versions {FIRST_FORMAT_VERSION} to {FORMAT_VERSION})")]
    UnsupportedVersion { found: u32 },
    #[error("superblock checksum mismatch (stored {stored:#010x}, computed {computed:#010x}): torn or corrupted")]
    BadChecksum { stored: u32, computed: u32 },
    #[error("superblock truncated: {what} needs {need} bytes, {have} left")]
    Truncated {
        what: &'static str,
        need: usize,
        have: usize,
    },
    #[error("superblock field {what} is impossible: {detail}")]
    Invalid { what: &'static str, detail: String },
    #[error("superblock does not fit its {max}-byte slot: {len} bytes")]
    TooLarge { len: usize, max: usize },
}

pub type MetadataResult<T> = Result<T, MetadataError>;
