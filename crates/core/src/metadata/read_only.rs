//! A read-only start (md's `--assemble --readonly`): the volume is assembled by its
//! superblocks and served, and not one byte is written to any member — no records, no
//! bitmap, no log replay, no resync. What such a start would have written is decided here:
//! either it is safe to leave undone (kept in memory, or never needed by a read), or the
//! start is refused, saying why.
//!
//! - A stale role (it missed writes) stays out: it is written by nothing and read by
//!   nothing, its bytes come from its peers as if it were missing.
//! - An unclean array with parity groups is refused where the write-intent bitmap marks a
//!   region (or, without a bitmap, anywhere): its parity there may not match its data, so a
//!   degraded read — or any read error corrected from parity — could return bytes nobody
//!   wrote, and only a resync or the log's replay (both writes) can make it right.
//! - An unclean array of mirrors (or stripes, or a concatenation) is served: copies can
//!   differ only where writes were in flight at the crash, none of them acknowledged durable,
//!   so either copy is an answer that write allowed.
//! - A volume in the middle of a reshape is refused: its window is restored by writing.
//!
//! `nbraid check` reads what a start would, writing nothing: besides the superblocks, the
//! write-hole log rings' word on the life that stopped ([`LastLife::assemble_after`]).

use super::assemble::{assemble_with, Names, Start};
use super::{AssembleError, Assembly, Probe};
use crate::ppl::LastLife;
use nbraid_layout::Node;

impl LastLife {
    /// Volume `name`'s assembly (`config_tree`, `probes` by config position, `ids` their
    /// config ids) as a start that keeps the log (`logs`) decides it once its rings said
    /// this of the life that stopped ([`LastLife::read_at_start`]): after one that did not
    /// log, as a dirty start without the log — a role out that parity rebuilds refused
    /// (`AssembleError::DirtyDegradedUnlogged`). Not forced (`nbraid check` has no
    /// `--force-assemble`). Assembly's own decision, the one the start asks
    /// (`array/start.rs`), for a reader that has the rings' word.
    pub fn assemble_after(
        self,
        name: &str,
        config_tree: &Node,
        probes: &[Probe],
        ids: &[String],
        logs: bool,
    ) -> Result<Assembly, AssembleError> {
        let start = Start {
            write_hole_log: logs,
            last_life_logged: self.logged(),
            ..Start::default()
        };
        assemble_with(name, config_tree, probes, start, &Names(ids))
    }
}

/// What a read-only start found, for [`refusal`] (also told by `nbraid check`, from the
/// superblocks and bitmaps it reads).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Found {
    /// The records say the array was shut down cleanly.
    pub clean: bool,
    /// Bytes of the volume its parity may disagree with after an unclean stop: those the
    /// write-intent bitmap marks, the whole volume without one.
    pub unsynced_bytes: u64,
    /// The tree has parity groups (RAID 5/6 and their nestings).
    pub has_parity: bool,
    /// A reshape is recorded in progress.
    pub reshaping: bool,
}

/// Why volume `name` cannot start read-only (`None`: it can, writing nothing).
pub fn refusal(name: &str, f: Found) -> Option<String> {
    if f.reshaping {
        return Some(format!(
            "volume `{name}` is in the middle of a reshape, which a start carries on by \
             writing (its window is restored): it cannot start with read_only = true; start \
             it read-write to finish the reshape"
        ));
    }
    if !f.clean && f.has_parity && f.unsynced_bytes > 0 {
        return Some(format!(
            "volume `{name}` was not shut down cleanly: its parity may disagree with its data \
             in {} bytes the write-intent bitmap marks, so a degraded read (or a read error \
             corrected from parity) there could return bytes nobody wrote; only a resync or \
             the write-hole log's replay, both writes, can make it right, and read_only = true \
             writes nothing — start it read-write once, or start copies of its members \
             read-write",
            f.unsynced_bytes
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLEAN: Found = Found {
        clean: true,
        unsynced_bytes: 0,
        has_parity: true,
        reshaping: false,
    };

    #[test]
    fn a_clean_array_starts_read_only() {
        assert_eq!(refusal("v", CLEAN), None);
        // Clean: whatever bits the bitmap keeps for a missing member do not matter.
        let kept = Found {
            unsynced_bytes: 1 << 20,
            ..CLEAN
        };
        assert_eq!(refusal("v", kept), None);
    }

    #[test]
    fn an_unclean_parity_array_is_refused_where_the_bitmap_marks_regions() {
        let unclean = Found {
            clean: false,
            unsynced_bytes: 4 << 20,
            ..CLEAN
        };
        let why = refusal("r5", unclean).expect("refused");
        for part in [
            "`r5` was not shut down cleanly",
            "4194304 bytes",
            "read_only = true",
        ] {
            assert!(why.contains(part), "{why}");
        }
        // Nothing marked: nothing can disagree.
        let nothing = Found {
            unsynced_bytes: 0,
            ..unclean
        };
        assert_eq!(refusal("r5", nothing), None);
    }

    #[test]
    fn an_unclean_mirror_starts_and_a_reshape_is_refused() {
        let mirror = Found {
            clean: false,
            unsynced_bytes: 1 << 30,
            has_parity: false,
            reshaping: false,
        };
        assert_eq!(refusal("r1", mirror), None);
        let reshaping = Found {
            reshaping: true,
            ..CLEAN
        };
        let why = refusal("r1", reshaping).expect("refused");
        assert!(why.contains("reshape"), "{why}");
    }
}
