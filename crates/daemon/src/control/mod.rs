//! The control socket: a Unix socket (mode 0600, `[daemon] control`) on which `nbraid status`,
//! `fail`, `scrub`, `pause` and `resume` talk to the running daemon. The wire format (JSON
//! lines, versioned) is the `nbraid-control` crate, shared with the CLI.
//!
//! - `server` accepts connections and answers them one line at a time;
//! - `controls` holds the daemon's volumes; `dispatch` hands each request to its family:
//!   `members` (fail, add, replace, remove; `fail` asks `fail` whether data would be lost),
//!   `passes` (scrub, rebuild, cancel, pause, resume), `report` (status; its notes from
//!   `notes`, who holds which role decided afresh);
//! - `reshape_start` starts an online reshape (`nbraid apply --yes`), `reshape` runs its
//!   pass and opens the volume again when it is done (the array swapped in
//!   `crate::served`);
//! - `checksum_fill` starts and shows the pass computing the checksums of a volume that
//!   enabled them; `checksum_refill` the one giving back those an unclean start dropped;
//! - `volume` is one served volume: its members by id and its background passes;
//!   `departed` keeps the failed members a spare pushed out of their roles, until removed;
//!   `unrebuildable` says which failed roles no spare can help, and why.

mod checksum_fill;
mod checksum_refill;
mod controls;
mod departed;
mod dispatch;
mod fail;
mod known;
pub mod member_path;
mod members;
mod notes;
mod passes;
mod paths;
mod places;
pub mod readd;
mod remote_add;
mod report;
mod reshape;
mod reshape_start;
pub mod server;
pub mod task_slot;
mod unrebuildable;
mod volume;

pub use checksum_fill::start_checksum_fill;
pub use checksum_refill::start_checksum_refill;
pub use controls::Controls;
pub use notes::ConfigIds;
pub(crate) use paths::absolute_path;
pub use reshape::start_reshape_pass;
pub use server::ControlServer;
pub use volume::{ControlVolume, StartReport};
