//! # nbraid-core: the array engine
//!
//! Turns a volume request into member I/O and completes it. It knows members (files, block
//! devices, memory), io_uring, parity math and stripes; it knows nothing of
//! sockets, NBD or TOML text (see `docs/ARCHITECTURE.md`).

pub mod parity;

mod absent;
pub mod buf;
pub mod checksum;
pub mod concat;
pub mod crc32c;
pub mod error;
pub mod fail_cause;
pub mod failure_gate;
pub mod flush_gate;
pub mod member;
pub mod memory;
pub mod metadata;
pub mod mirror;
pub mod node;
pub mod num_hash;
pub mod pace;
mod part_blocks;
pub mod pass;
pub mod ppl;
pub mod raid;
mod range_lock;
pub mod read_errors;
pub mod read_only_member;
pub mod read_policy;
pub mod rebuild;
pub mod rebuild_narrow;
pub mod reshape;
pub mod scrub;
pub mod split;
pub mod stripe;
#[cfg(test)]
mod testutil;
pub mod timer;
pub mod uring;
pub mod volume;

pub use absent::AbsentMember;
pub use buf::{Buf, SharedBuf};
pub use error::{VolumeError, VolumeResult};
pub use flush_gate::FlushGate;
pub use member::{
    CounterSnapshot, IdentityCheck, IdentityFault, Member, MemberCounters, MemberError, MemberOp,
    MemberResult, OpenFile,
};
pub use memory::MemoryMember;
pub use node::{ArrayNode, MemberState, NodeIo, NodeMaintenance, ZeroKind};
pub use pace::PassRate;
pub use pass::{PassControl, PassState};
pub use raid::{CacheMode, CacheUsage, SyncState};
pub use read_only_member::ReadOnlyMember;
pub use read_policy::ReadPolicy;
pub use scrub::{ScrubControl, ScrubReport, ScrubState};
pub use uring::exclusive;
pub use uring::{DirectIo, Engine, FileOptions, UringError, UringFile};
pub use volume::{RefusedFlushes, Volume, VolumeCounters, VolumeOptions, MAX_REQUEST_BYTES};
