//! The partial-parity log (md's PPL): closes the RAID 5/6 write hole.
//!
//! A crash between a stripe's data and parity writes leaves parity that matches neither the
//! old nor the new data; if a member that was *not* being written is then lost, rebuilding
//! its chunk from that parity gives wrong bytes — data nobody wrote is corrupted. Before a
//! partial-stripe write reaches the members, its parity group logs, for each 4 KiB band of
//! rows it touches, which sectors of which data chunks are in flux and the partial parity
//! of every other chunk, with FUA: the partial P (XOR) on the stripe's P member and, for
//! RAID 6, the partial Q (md's syndrome) on its Q member — one partial per ring is enough
//! for every loss RAID 6 tolerates (`GroupLog::targets`, `replay::select`). At a dirty start
//! each band's newest entry is replayed before anything is served: parity := partial parity
//! ⊕ the written chunks as found, so the unwritten chunks — present or lost — are exact
//! whatever the crash tore (`replay`).
//!
//! What "in flux" means: every sector written since the band's writes were last known
//! durable (a completed flush of the group's members covered them), not only the current
//! write's — an earlier acknowledged but unflushed write may still be torn. So a band holds
//! one write at a time (`log::Band`): a write to a band whose earlier write is not yet known
//! durable waits for it (flushing the group's members when that is what it lacks), and an
//! entry names its own write's sectors alone — except when the new entry covers
//! everything the earlier one left in flux (a rewrite; sequential writes meeting in a
//! stripe): see `log::needs_no_flush`. The partial parity comes from bytes the write
//! has anyway: the old parity minus the old bytes of the chunks it writes (read-modify-write),
//! or the new bytes of the chunks it does not write (reconstruct-write).
//!
//! Entries are never replayed stale: each ring batch carries a tail (entries below it are
//! settled) and the volume's life (every open starts a new one and marks every ring, so a
//! previous life's entries are never replayed; the marker also says whether the life logs,
//! so a dirty start after one that did not resyncs as any unlogged dirty start); a band whose last entry a ring may still
//! replay gets a new entry even from a write that needs no partial parity (every chunk
//! written). Full-stripe writes to bands with nothing logged write no entry at all.
//!
//! Files: `codec.rs` (the bytes, docs/FORMAT.md), `replay.rs` (pure: which entries count,
//! the parity of a sector), `log.rs` (the writer: bands, rings, what an entry holds),
//! `log/rounds.rs` (batches: who writes them, numbering, how a writer learns its end),
//! `log/masks.rs` (pure: a write's sector masks per band, when a band may skip its flush),
//! `log/partial.rs` (pure: an entry's partial parity),
//! `recover.rs` (the dirty start: read the rings, replay, mark the new life), `last_life.rs`
//! (pure: whether the life a dirty start recovers from logged its writes), `stats.rs`
//! (counters for benchmarks).

pub mod codec;
mod last_life;
mod log;
mod recover;
pub mod replay;
mod stats;

pub use last_life::{cover_of_open, last_life, LastLife};
pub(crate) use log::{GroupLog, Hold, LogFailed, PerChunk, Prepared, Settled, Values};
pub use recover::{last_life_of, mark, recover, LogHost, RecoverReport};
pub use stats::{stats, LogStats};

use nbraid_layout::{Node, ParityGroup};

/// Rows per log band: an entry covers one band of one stripe (md's 4 KiB stripe unit).
pub const BAND_BYTES: u64 = nbraid_layout::LOG_BAND_BYTES;
/// Sector granularity of an entry's masks.
pub const SECTOR_BYTES: usize = 512;
/// Log area per member and volume (a ring of batches; at least two of the largest stripe
/// write's entries must fit, see [`area_bytes`]).
pub const DEFAULT_AREA_BYTES: u64 = 512 << 10;

/// Where each member keeps the volume's log, and the life the log writes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PplSetup {
    /// A number larger than any earlier open's (the event counter at assembly + 1).
    pub life: u64,
    /// By member index: (offset, length) of the log area; `None`: no log on that member.
    pub areas: Vec<Option<(u64, u64)>>,
}

/// A parity group and, when every child is a member region, each child's (member index,
/// region start).
pub type LoggedGroup = (ParityGroup, Option<Vec<(usize, u64)>>);

/// A parity group of a volume's tree, in preorder (the group number entries carry), with its
/// children's (member index, region start) when every child is a member region — only such
/// groups are logged (a group over mirrors or groups keeps parity on no single member).
pub fn parity_groups(root: &Node) -> Vec<LoggedGroup> {
    fn walk(n: &Node, out: &mut Vec<LoggedGroup>) {
        if let Node::Parity(g) = n {
            let leaves = n
                .children()
                .iter()
                .map(|c| match c {
                    Node::Member(m) => Some((m.index, m.start)),
                    _ => None,
                })
                .collect();
            out.push((g.clone(), leaves));
        }
        for c in n.children() {
            walk(c, out);
        }
    }
    let mut out = Vec::new();
    walk(root, &mut out);
    out
}

/// Bytes of log area a volume needs per member: two of its largest stripe write's entries
/// (every band of a strip) plus a marker block, at least [`DEFAULT_AREA_BYTES`]; `None` for
/// a tree without logged parity groups.
pub fn area_bytes(root: &Node) -> Option<u64> {
    parity_groups(root)
        .iter()
        .filter(|(_, leaves)| leaves.is_some())
        .map(|(g, _)| min_ring_bytes(g))
        .max()
        .map(|need| need.max(DEFAULT_AREA_BYTES))
}

/// The smallest ring a group's log works with (the geometry's figure, which the config
/// also uses to leave room for the log: [`nbraid_layout::log_ring_bytes`]).
pub fn min_ring_bytes(g: &ParityGroup) -> u64 {
    nbraid_layout::log_ring_bytes(g)
}
