//! # nbraid-core: the array engine
//!
//! Turns a volume request into member I/O and completes it. It knows members (files, block
//! devices, memory, fault injection), io_uring, parity math and stripes; it knows nothing of
//! sockets, NBD or TOML text (see `docs/ARCHITECTURE.md`).

pub mod parity;
