//! The control socket: a Unix socket (mode 0600, `[daemon] control`) on which `nbraid status`,
//! `fail`, `scrub`, `pause` and `resume` talk to the running daemon. `proto` is the wire
//! format (JSON lines, versioned), `ops` carries requests out on the daemon's volumes,
//! `server` accepts connections and answers them one line at a time.

mod fail;
pub mod ops;
pub mod proto;
pub mod server;

pub use ops::{ControlVolume, Controls, StartReport};
pub use server::ControlServer;
