//! What a crash schedule runs on and counts: its case (the tree, the members, the log's
//! place), the array options drawn for it, and the stats the harnesses add up.

use nbraid_core::metadata::ArrayOptions;
use nbraid_core::{CacheMode, ReadPolicy, VolumeOptions};
use nbraid_layout::Node;
use nbraid_sim::Rng;
use std::time::Duration;

pub struct CrashCase {
    pub name: &'static str,
    /// Leaves start after the metadata area.
    pub tree: Node,
    pub members: usize,
    pub member_len: u64,
    /// The partial-parity log on (the write-hole check on) or off (write-hole sectors only
    /// counted, and checked when `strict`: the guard that the check is real).
    pub ppl: bool,
    pub strict: bool,
    /// The log in this many bytes right before the leaves' regions (config
    /// `write_hole_log_size`; the tree leaves that room) instead of in the metadata area (0).
    pub log_reserve: u64,
    /// One request in three is a sequential writer's next write (whole 4 KiB blocks, up to a
    /// stripe, starting where its previous one ended), so writes meet in stripes: the ones a
    /// partial-parity log may write without flushing first.
    pub sequential: bool,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CrashStats {
    pub runs: u64,
    pub requests: u64,
    pub crashes_mid_flight: u64,
    pub reopened_dirty: u64,
    pub reopened_with_stale: u64,
    pub reopened_degraded: u64,
    pub resynced_bytes: u64,
    /// What full resyncs would have covered (capacity per dirty reopen).
    pub full_resync_bytes: u64,
    pub sectors_checked: u64,
    pub sectors_write_hole: u64,
    /// Sectors in the write hole (rebuilt from parity in a stripe a crash may have torn) that
    /// were not being written, checked exactly (the log's promise).
    pub sectors_write_hole_checked: u64,
    /// Entries the log replayed at reopens.
    pub ppl_entries_replayed: u64,
    pub redundancy_views: u64,
    /// Schedules where a spare was put in a pulled member's role.
    pub rebuilds_started: u64,
    /// Reopens that resumed a rebuild from a checkpoint above 0.
    pub rebuilds_resumed: u64,
    /// Rebuilds that completed (before the crash or after the reopen).
    pub rebuilds_completed: u64,
    /// Schedules that replaced a healthy member, and reopens that found the replacement in
    /// its role.
    pub replaces_started: u64,
    pub replaced_at_reopen: u64,
    /// Reopens that left the resync to the background (mirrors), power losses during it and
    /// member deaths scheduled during it (`background.rs`).
    pub background_resyncs: u64,
    pub background_crashes: u64,
    pub background_member_deaths: u64,
    /// Of those: parity volumes, and requests issued during the pass.
    pub background_parity: u64,
    pub background_requests: u64,
    /// Schedules that scrubbed the reopened array, power losses during it, and reopens that
    /// resumed it from the recorded checkpoint (`scrub.rs`).
    pub scrubs: u64,
    pub scrub_crashes: u64,
    pub scrubs_resumed: u64,
}

impl CrashStats {
    pub fn add(&mut self, o: &CrashStats) {
        self.runs += o.runs;
        self.requests += o.requests;
        self.crashes_mid_flight += o.crashes_mid_flight;
        self.reopened_dirty += o.reopened_dirty;
        self.reopened_with_stale += o.reopened_with_stale;
        self.reopened_degraded += o.reopened_degraded;
        self.resynced_bytes += o.resynced_bytes;
        self.full_resync_bytes += o.full_resync_bytes;
        self.sectors_checked += o.sectors_checked;
        self.sectors_write_hole += o.sectors_write_hole;
        self.sectors_write_hole_checked += o.sectors_write_hole_checked;
        self.ppl_entries_replayed += o.ppl_entries_replayed;
        self.redundancy_views += o.redundancy_views;
        self.rebuilds_started += o.rebuilds_started;
        self.rebuilds_resumed += o.rebuilds_resumed;
        self.rebuilds_completed += o.rebuilds_completed;
        self.replaces_started += o.replaces_started;
        self.replaced_at_reopen += o.replaced_at_reopen;
        self.background_resyncs += o.background_resyncs;
        self.background_crashes += o.background_crashes;
        self.background_member_deaths += o.background_member_deaths;
        self.background_parity += o.background_parity;
        self.background_requests += o.background_requests;
        self.scrubs += o.scrubs;
        self.scrub_crashes += o.scrub_crashes;
        self.scrubs_resumed += o.scrubs_resumed;
    }
}

/// A schedule's array options: write-through or a small write-back cache, a read policy,
/// a bitmap chunk of 4-16 KiB, the case's log, and the most eager bitmap clearing (the most
/// bitmap writes racing the data).
pub(super) fn array_options(rng: &mut Rng, case: &CrashCase, width: u64) -> ArrayOptions {
    let cache = if rng.chance(500) {
        CacheMode::WriteThrough
    } else {
        CacheMode::WriteBack {
            bytes: width * (1 + rng.below(4)),
        }
    };
    ArrayOptions {
        volume: VolumeOptions {
            read_policy: *rng.pick(&ReadPolicy::ALL),
            cache,
            cache_max_age: None,
            ..VolumeOptions::default()
        },
        bitmap_chunk_bytes: Some(4096 << rng.below(3)),
        ppl: case.ppl,
        bitmap_clear_delay: Duration::ZERO,
        ppl_area_before_region_bytes: (case.log_reserve > 0).then_some(case.log_reserve),
        checksum_area_before_region_bytes: checksum_reserve(case),
        force_assembly: false,
        member_ids: Vec::new(),
        ..ArrayOptions::default()
    }
}

/// Per-block checksums in the room a case's tree leaves before its regions beyond the
/// metadata area and the log's reserve (`crash_checksum.rs`); none when there is none.
fn checksum_reserve(case: &CrashCase) -> Option<u64> {
    let mut start = u64::MAX;
    case.tree.visit_members(&mut |m| start = start.min(m.start));
    let room = start.checked_sub(nbraid_core::metadata::METADATA_AREA_BYTES + case.log_reserve)?;
    (room > 0).then_some(room)
}
