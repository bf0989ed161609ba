//! A deterministic simulator of the engine (the kind TigerBeetle and FoundationDB test with):
//! a seeded scheduler decides which ready task runs and when each member operation completes
//! (out of order, with errors), clients issue random overlapping requests, and the run ends in
//! a crash that drops or tears what the members had not made durable. The volume is then
//! assembled again over what survived and read back. See `run.rs` for one schedule and
//! `history.rs` for the rules checked.
//!
//! The pieces the harnesses share: `case.rs` (a crash schedule's shape, options and stats),
//! `executor.rs` (scheduling), `faults.rs` (what fails),
//! `clients.rs` (the requests and their history), `array.rs` (an array created, read back
//! and reopened over the disks' crash images) and `checks.rs` (the rules after a power
//! loss). The harnesses: `run.rs` (a plain volume), `crash.rs` (an array with superblocks,
//! with `background.rs` and `scrub.rs` for what may follow its reopen), `readd.rs`,
//! `corrupt_power.rs`.
#![allow(dead_code)]

pub mod array;
pub mod background;
pub mod case;
pub mod checks;
pub mod clients;
pub mod corrupt_power;
pub mod crash;
pub mod executor;
pub mod faults;
pub mod history;
pub mod readd;
pub mod run;
pub mod scrub;
