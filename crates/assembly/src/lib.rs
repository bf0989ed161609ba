//! # nbraid-assembly: from a config to running arrays
//!
//! What both binaries need to know about a config's members before anything is served:
//! `nbraidd` starts volumes with it, `nbraid create`, `check`, `remove --offline` and the
//! benchmark read and start volumes with the very same rules, so the two can never disagree
//! about which member holds which role, or whether a disk may be written.
//!
//! The modules stack from the bottom up; each uses only those above it in this list:
//!
//! - [`plan`]: opened or created — a pure decision over what was found on the members.
//! - [`member`]: one member as found at start ([`Opened`]; a short one left out) and why
//!   assembly failed ([`AssembleError`]).
//! - [`remote`]: members on NBD servers, and the one whose server does not answer.
//! - [`records`]: what a member's superblock says about one volume (its record, its array).
//! - [`added`]: members added at run time that the records list and the volume does not name.
//! - [`grown`]: members that grew under a config that does not pin their size: opened with
//!   the recorded regions, the growth left for `nbraid apply`.
//! - [`adopt`]: after a volume started, which member serves which role, the spares standing
//!   by, and the notes the operator must hear.
//! - [`describe`] and [`beyond_tolerance`]: a volume in one line; why it cannot start.
//! - [`assemble`]: the start itself, over all of the above.
//! - [`preflight`]: `nbraidd --check` and `nbraid check`: the same decision, read-only.
//! - [`error_text`]: an error (and its causes) as one line for a person.
//! - [`reshape_plan`]: the recorded tree against the config's: what `nbraid apply` would do.
//! - [`pins`]: the config read with existing volumes' regions where their records start them.
//! - [`settings`]: settings the config changes that a start does not take as written, said.
//!
//! **Boundaries.** No sockets, no NBD, no control protocol, no background tasks: what runs
//! while a volume is served (heal watchers, returning members) is the daemon's. Nothing here
//! writes onto a disk that the write rule (`nbraid_core::metadata::disk_rule`) refuses.
pub mod added;
pub mod adopt;
pub mod assemble;
pub mod beyond_tolerance;
pub mod describe;
pub mod error_text;
pub mod grown;
pub mod last_life;
pub mod member;
pub mod pins;
pub mod plan;
pub mod preflight;
pub mod read_only_check;
pub mod records;
pub mod remote;
pub mod replaces;
pub mod reshape_plan;
pub mod settings;

pub use member::{AssembleError, Opened};
