//! # nbraid-daemon: configs and the NBD server
//!
//! Owns the TOML config (parsing, located errors, member regions) and assembly; the protocol
//! lives in `nbraid-nbd` (re-exported here as [`nbd`]), whose `Export` trait [`export`]
//! implements for volumes.
//! It builds volumes from `nbraid-layout` geometry and `nbraid-core` members; it knows no parity
//! details.
pub mod assemble;
pub mod config;
pub mod export;
pub mod logging;
pub mod serve;
pub mod zero_map;

/// The NBD protocol crate, under the name the daemon has always used for it.
pub use nbraid_nbd as nbd;
