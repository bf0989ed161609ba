//! # nbraid-daemon: configs and the NBD server
//!
//! Owns the TOML config (parsing, located errors, member regions) and, in `nbd`, the protocol.
//! It builds volumes from `nbraid-layout` geometry and `nbraid-core` members; it knows no parity
//! details.
pub mod assemble;
pub mod config;
pub mod export;
pub mod logging;
pub mod nbd;
pub mod serve;
