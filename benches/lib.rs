//! Shared helpers for the criterion benches (see `parity.rs`, `layout.rs`).
