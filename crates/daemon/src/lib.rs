//! # nbraid-daemon: the NBD server
//!
//! Reads the TOML config through `nbraid-config`, assembles its volumes (`assemble`: members
//! opened through `nbraid-core`'s io_uring, one `Volume` per config volume) and serves them
//! over NBD (`nbd`: the protocol; `export`: a volume as an export; `serve`: `nbraidd`). It knows
//! no parity details.
pub mod assemble;
pub mod export;
pub mod logging;
pub mod nbd;
pub mod serve;
