//! # nbraid-sim: simulated members and the one seeded RNG
//!
//! Everything here exists to test and measure the engine, never to serve data: the product
//! crates (daemon, cli) do not link it; core's integration tests, the benches and
//! `nbraid bench` do. It depends on `nbraid-core` for the `Member` trait, so core's own unit
//! tests cannot use it (a crate that depends on core is a distinct crate instance to them).
//!
//! A simulated member is chosen by the time it keeps and the faults it injects:
//!
//! - [`Faulty`] wraps any member on the wall clock: seeded I/O errors by range, count or
//!   death, added latency, and power loss (writes held until flush, [`Faulty::crash`] keeping a
//!   seeded subset, torn at 512 bytes). The fault and model tests use it.
//! - [`Corrupting`] wraps any member and returns wrong bytes without an error: flipped
//!   bytes, misdirected writes, reads of another block's bytes, seeded, only on the blocks
//!   the test allows (so a stripe's redundancy budget holds). The checksum tests use it.
//! - [`timed::SimMember`] keeps virtual time on a [`SimClock`] with a disk model
//!   ([`timed::SimModel`]: an HDD's seeks, rotation and reordering, or an SSD's caps), so a
//!   benchmark's figures are a function of its inputs alone. `nbraid bench --sim` runs on it.
//! - [`scheduled::ScheduledMember`] keeps no time at all: each operation waits in a
//!   [`scheduled::World`] until the crash simulator's seeded schedule completes it, in any
//!   order, possibly failing, and a crash drops or tears what was not durable.
//!
//! All three draw from one generator, [`Rng`], so every run replays exactly from its seed.

pub mod clock;
pub mod corrupt;
pub mod faulty;
pub mod rng;
pub mod scheduled;
pub mod timed;

pub use clock::{run_virtual, SimClock, Stalled};
pub use corrupt::{Corrupting, CorruptionLog, MayCorrupt, CORRUPT_BLOCK_BYTES};
pub use faulty::{CrashReport, FaultOps, Faulty};
pub use rng::Rng;
pub use scheduled::{DiskFaults, ScheduledMember, World, SECTOR_BYTES};
pub use timed::{SimMember, SimModel};
