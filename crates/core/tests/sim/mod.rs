//! A deterministic simulator of the engine (the kind TigerBeetle and FoundationDB test with):
//! a seeded scheduler decides which ready task runs and when each member operation completes
//! (out of order, with errors), clients issue random overlapping requests, and the run ends in
//! a crash that drops or tears what the members had not made durable. The volume is then
//! assembled again over what survived and read back. See `run.rs` for one schedule and
//! `history.rs` for the rules checked.
#![allow(dead_code)]

pub mod background;
pub mod corrupt_power;
pub mod crash;
pub mod executor;
pub mod history;
pub mod readd;
pub mod run;
pub mod scrub;
