//! How an array is created and opened ([`ArrayOptions`]), and what opening found
//! ([`OpenReport`]).

use super::{intent, Absence};
use crate::volume::VolumeOptions;
use std::time::Duration;

/// How an array is created and opened.
#[derive(Clone, Debug)]
pub struct ArrayOptions {
    pub volume: VolumeOptions,
    /// Bytes of the volume per write-intent bit (`None`: no bitmap; every unclean start
    /// resyncs the whole volume). Rounded up to a power of two ≥ 4 KiB.
    pub bitmap_chunk_bytes: Option<u64>,
    /// The partial-parity log of RAID 5/6/50/60 groups (`crate::ppl`; default on): closes the
    /// write hole. Off: an area is still reserved at create, but nothing is logged.
    pub ppl: bool,
    /// A region's bit is cleared by a flush only once no write touched the region for this
    /// long (md's bitmap daemon sleep): bits of regions in use stay set instead of being
    /// written clear at every flush and set again by the next write. Zero: at the first
    /// flush that covers the region's writes. A clean shutdown clears every bit regardless.
    pub bitmap_clear_delay: Duration,
    /// Create only: the partial-parity log takes the `n` bytes right before the volume's
    /// region on every member (a reserve the config leaves there: `write_hole_log_size`)
    /// instead of [`crate::ppl::DEFAULT_AREA_BYTES`] inside the 1 MiB metadata area. A larger
    /// ring settles its entries in fewer member flushes. Opening uses the recorded place.
    pub ppl_area_before_region_bytes: Option<u64>,
    /// Create only: per-block checksums ([`crate::checksum`]) in the `n` bytes the config
    /// reserves before the volume's region (before the log's reserve) on every member; `None`:
    /// the volume keeps none. Opening uses the recorded place.
    pub checksum_area_before_region_bytes: Option<u64>,
    /// Fail a member once it has returned more than this many blocks whose checksum did not
    /// match (`None`: checksum errors alone never fail a member).
    pub checksum_errors_to_fail: Option<u64>,
    /// Opening only: a volume recorded without per-block checksums gets them — an area
    /// where each member has room (its regions never move) and a background pass that
    /// computes them ([`super::Array::fill_checksums`]).
    pub enable_checksums: bool,
    /// Opening only: past the volume's tolerance, take back the freshest failed or stale
    /// members ([`super::assemble_forced`], mdadm's `--assemble --force`).
    pub force_assembly: bool,
    /// Opening only: the config's member ids by position, so assembly's warnings name
    /// members as the operator does ("member d0"); empty: by position ("member 0").
    pub member_ids: Vec<String>,
    /// Opening only: the array this open replaces stopped quiet — no request in flight, its
    /// writes flushed (a daemon opening a volume again after a reshape, under its requests'
    /// hold) — so the life that ended tore no row, whatever it logged, and a dirty open is
    /// not judged as after an unlogged crash (`ppl::last_life`; a reshape's life does not log).
    pub quiet_handover: bool,
}

impl Default for ArrayOptions {
    fn default() -> Self {
        ArrayOptions {
            volume: VolumeOptions::default(),
            bitmap_chunk_bytes: Some(intent::DEFAULT_CHUNK_BYTES),
            ppl: true,
            bitmap_clear_delay: intent::DEFAULT_CLEAR_DELAY,
            ppl_area_before_region_bytes: None,
            checksum_area_before_region_bytes: None,
            checksum_errors_to_fail: None,
            enable_checksums: false,
            force_assembly: false,
            member_ids: Vec::new(),
            quiet_handover: false,
        }
    }
}

/// What opening an array found and did.
#[derive(Clone, Debug, Default)]
pub struct OpenReport {
    /// Damaged superblock copies, lost, stale and failed roles (say them loudly).
    pub warnings: Vec<String>,
    /// Every current member recorded a clean shutdown.
    pub was_clean: bool,
    /// Roles whose member was stale and has been resynced.
    pub resynced_roles: Vec<usize>,
    /// Roles served degraded (lost or recorded failed).
    pub absent_roles: Vec<usize>,
    /// Bytes of the volume resynced before serving.
    pub resynced_bytes: u64,
    /// Bytes left to resync in the background (`Array::open_background`).
    pub background_bytes: u64,
    /// Per role: the position (in the `metas` given to `Array::open`) of the member that
    /// serves it, or why none does (as assembly found it; stale roles are resynced since).
    pub roles: Vec<Result<usize, Absence>>,
    /// Roles whose new member is being rebuilt, and the checkpoint it resumes from
    /// (`Array::rebuild` continues it while the volume serves).
    pub rebuilding_roles: Vec<(usize, u64)>,
    /// Replaces under way at the last shutdown that go on (`Array::rebuild` continues them),
    /// each replacement's position in the `metas` given (it holds no role: not a spare).
    pub replacing: Vec<super::ResumedReplacement>,
    /// What replaying the partial-parity log did (nothing after a clean shutdown).
    pub ppl: crate::ppl::RecoverReport,
    /// Roles a forced assembly took back (their late bytes may be stale).
    pub forced: Vec<super::ForcedRole>,
}
