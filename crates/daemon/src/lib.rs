//! # nbraid-daemon: the NBD server
//!
//! Reads the TOML config through `nbraid-config`, assembles its volumes (`nbraid-assembly`,
//! shared with the CLI: members opened through `nbraid-core`'s io_uring, one `Volume` per
//! config volume) and serves them over NBD: the protocol lives in `nbraid-nbd` (re-exported here as [`nbd`]), whose `Export`
//! trait [`export`] implements for volumes; `serve` is `nbraidd`. It knows no parity details.
//! While volumes are served it answers the control socket ([`control`], its wire format the
//! `nbraid-control` crate), heals onto spares ([`heal`]) and re-adds returning members
//! ([`returning`]).
pub mod control;
pub mod events;
pub mod export;
pub mod heal;
pub mod io_workers;
pub mod logging;
pub mod returning;
pub mod serve;
pub mod served;
pub mod service;
pub mod zero_map;

/// The NBD protocol crate, under the name the daemon has always used for it.
pub use nbraid_nbd as nbd;
