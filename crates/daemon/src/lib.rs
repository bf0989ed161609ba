//! # nbraid-daemon: the NBD server
//!
//! Reads the TOML config through `nbraid-config`, assembles its volumes (`assemble`: members
//! opened through `nbraid-core`'s io_uring, one `Volume` per config volume) and serves them
//! over NBD: the protocol lives in `nbraid-nbd` (re-exported here as [`nbd`]), whose `Export`
//! trait [`export`] implements for volumes; `serve` is `nbraidd`. It knows no parity details.
pub mod added;
pub mod assemble;
pub mod control;
pub mod error_text;
pub mod export;
pub mod heal;
pub mod logging;
pub mod plan;
pub mod preflight;
pub mod returning;
pub mod serve;
pub mod service;
pub mod unreachable;
pub mod zero_map;

/// The NBD protocol crate, under the name the daemon has always used for it.
pub use nbraid_nbd as nbd;
