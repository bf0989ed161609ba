//! Why a volume does not assemble ([`AssembleError`]): each refusal names the volume, what
//! was found and, where one exists, what the operator can do. Nothing was written.

use super::Absence;
use thiserror::Error;

#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum AssembleError {
    /// No member carries a superblock: a new volume (create it) or not nbraid's.
    #[error("volume `{volume}`: no member carries an nbraid superblock")]
    Uninitialized { volume: String },
    #[error("volume `{volume}`: {member} carries no record of this volume (its superblock holds {theirs}), while {ours}: it was taken by another array, or the config names another disk — not started, nothing written (point the config at this volume's disk; or, when the disk really went to the other array, `--force-assemble {volume}` starts the volume without it, degraded, until `nbraid add` or `replace` gives the role a new disk)")]
    Foreign {
        volume: String,
        /// `member <id>`.
        member: String,
        ours: String,
        theirs: String,
    },
    /// The members' records of the volume name different arrays: a disk was taken by another
    /// array, or a config path names another array's disk. Which is this volume cannot be
    /// told (the disk taken holds the newer record; a majority may be the other array's).
    #[error("volume `{volume}`: its members hold records of different arrays — {sides}: a disk was taken by another array (`--force`) or a config path names another array's disk; which array this volume is cannot be told from the records, so it is not started and nothing was written (point the config's paths at one array's members; `nbraid check` shows what each holds)")]
    ArraysDisagree { volume: String, sides: String },
    #[error("volume `{volume}`: the config says {what} {config}, the superblocks record {recorded}; data is never reinterpreted — `nbraid check` / `nbraid apply` show whether the change is a reshape done online, else fix the config")]
    GeometryChanged {
        volume: String,
        what: &'static str,
        config: String,
        recorded: String,
    },
    /// [`AssembleError::GeometryChanged`] while a reshape is under way: most likely the
    /// config of the shape the volume is moving out of (from before `nbraid apply`).
    #[error("volume `{volume}`: a reshape is under way, and the config says {what} {config} where the superblocks record {recorded} for the shape the data is moving into: start with the config of the new shape (the one `nbraid apply` was given), and the reshape goes on from where it stopped; the old shape is never served over moved data — not started, nothing written")]
    ChangedMidReshape {
        volume: String,
        what: &'static str,
        config: String,
        recorded: String,
    },
    #[error("volume `{volume}`: the config places a member region at {config}, the superblocks record {recorded} and no block-checksum area: the volume was created without per-block checksums (before nbraid had them, or with checksums = \"off\"), and the config now reserves their area before each region. Add `checksums = \"enable\"` to the volume's table to give it checksums (its regions stay where they are; the area goes where each member has room and a background pass computes them), or `checksums = \"off\"` to serve it as it is; data is never reinterpreted")]
    PlacedWithoutChecksums {
        volume: String,
        config: String,
        recorded: String,
    },
    #[error("volume `{volume}`: the config asks for member region {config}, the superblocks record {recorded}: the region grew {grown_bytes} bytes at the same start, and a start never grows a volume — `nbraid apply` shows the grow and, with nbraidd stopped, `nbraid apply --yes` records it (the next start grows the volume in place while serving); or give the member and volume their recorded sizes back to start it as it is")]
    RegionGrown {
        volume: String,
        config: String,
        recorded: String,
        grown_bytes: u64,
    },
    #[error("volume `{volume}`: members {a} and {b} both claim role {role}")]
    DuplicateRole {
        volume: String,
        role: usize,
        a: usize,
        b: usize,
    },
    #[error("volume `{volume}`: the records of its newest event ({events}), on {members}, each set another's member out of the volume: starts ran on different members (split brain), and which holds the volume cannot be told — not started (start with only the members whose writes are to be kept, then `nbraid add` the others back: rebuilt whole, never resynced as they are)")]
    RecordsSplit {
        volume: String,
        events: u64,
        members: String,
    },
    #[error("volume `{volume}`: members {a} and {b} record the same event ({events}) with different reshapes ({detail}); no commit writes that, and which record is true cannot be told — not started (leave out the member whose record is wrong: the others start degraded and resync it when it returns)")]
    ReshapeRecordsDisagree {
        volume: String,
        a: usize,
        b: usize,
        events: u64,
        detail: String,
    },
    #[error("volume `{volume}`: the records of {members} disagree on where the volume's bytes live: {detail}; every commit writes one geometry to every member, so one record is wrong and which cannot be told — not started, nothing read or written (leave out the member whose record is wrong: the others start degraded and resync it when it returns)")]
    RecordsDisagree {
        volume: String,
        /// The two members, named.
        members: String,
        detail: String,
    },
    #[error("volume `{volume}`: member {newer}'s record (event {events}) puts the reshape at byte {newer_position}, behind member {older}'s one commit older at byte {older_position}; a reshape only moves forward, so the newer record is wrong — not started (leave member {newer} out: the others start degraded and resync it when it returns)")]
    ReshapeWentBack {
        volume: String,
        newer: usize,
        older: usize,
        events: u64,
        newer_position: u64,
        older_position: u64,
    },
    /// Not shut down clean mid-reshape with a role out that parity rebuilds (see
    /// `assemble/torn_rows.rs`): refused unless forced.
    #[error("volume `{volume}`: not shut down clean during a reshape, with {roles} out: neither shape is logged while a reshape runs, so a row written at the crash may hold new data beside old parity, and the out member's block there, rebuilt from that parity, may read wrong though no client wrote it (md refuses such a dirty degraded start too) — not started, nothing written; {way_back}")]
    DirtyDegradedReshape {
        volume: String,
        roles: String,
        /// What the operator can do ([`torn_rows::way_back`](super::torn_rows)).
        way_back: String,
    },
    /// Not shut down clean, with a role out that a parity group without a write-hole log
    /// rebuilds from parity (see `assemble/torn_rows.rs`): refused unless forced.
    #[error("volume `{volume}`: not shut down clean, with {roles} out, and {unlogged}: a row written at the crash may hold new data beside old parity, and the out member's block there, rebuilt from that parity, may read wrong though no client wrote it (md refuses such a dirty degraded start too) — not started, nothing written; {way_back}")]
    DirtyDegradedUnlogged {
        volume: String,
        roles: String,
        /// What the operator can do ([`torn_rows::way_back`](super::torn_rows)).
        way_back: String,
        /// Why the hole is open: the log off at this start, or which groups it leaves out.
        unlogged: String,
    },
    #[error(
        "volume `{volume}`: roles {absent} have no trusted member, more than the volume tolerates"
    )]
    BeyondTolerance {
        volume: String,
        absent: String,
        /// Each absent role and why (a failed or stale member may be taken back by force).
        why: Vec<(usize, Absence)>,
    },
}
