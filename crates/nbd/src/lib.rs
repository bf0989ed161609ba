//! # nbraid-nbd: the NBD protocol (NetworkBlockDevice `doc/proto.md`) on tokio
//!
//! A server over any [`Export`] (below) and an async client with many requests in flight
//! ([`client::Client`]), sharing the wire format ([`proto`]). The daemon implements `Export`
//! for its volumes; benchmarks and remote members use the client.
//!
//! The server:
//!
//! * fixed-newstyle handshake with `NBD_OPT_GO`, `INFO`, `LIST`, `EXPORT_NAME`, `ABORT`,
//!   `STRUCTURED_REPLY`, `LIST_META_CONTEXT`/`SET_META_CONTEXT` (`base:allocation`); info
//!   replies `EXPORT`, `NAME`, `DESCRIPTION`, `BLOCK_SIZE` (minimum = the export's block,
//!   preferred = its preferred size rounded up to a power of two, maximum = 32 MiB);
//! * commands `READ`, `WRITE`, `FLUSH`, `TRIM`, `WRITE_ZEROES` (`NO_HOLE`, `FAST_ZERO`),
//!   `CACHE`, `BLOCK_STATUS`, `DISC`, with `FUA`; simple or structured replies;
//! * many requests in flight per connection, replies in completion order;
//! * every request validated before anything is allocated for it;
//! * server-wide bounds ([`Limits`]): connections (a client beyond them is refused during the
//!   handshake), request memory of all connections and of each, handshake, idle and stall
//!   timeouts.
//!
//! The server's pieces, in the order a connection meets them: `listener` (binding and
//! accepting), `server` (admission within the bounds, shutdown) over `shared` (what all
//! connections share) and `workers` (the runtimes connections are dealt to, and which is
//! spare), `connection` (one connection's life), `busy_poll` (its socket read
//! half, which spins briefly before sleeping), `handshake` (the options),
//! then the transmission phase: `transmission` (the reader loop: slot, validation, memory
//! shared out by `server_memory`, payload, dispatch) with `request` (headers and their validation), `payload` (receiving
//! write payloads), `execute` (one step per command), `write_gate` (aligned writes run
//! unlocked unless an unaligned read-modify-write is in flight), `unaligned`, `reply_head`
//! (reply encoding) and `replies` (the writer task).
//!
//! Plug storage in by implementing [`Export`]; serve with [`Server`]:
//!
//! ```no_run
//! use std::sync::Arc;
//! use nbraid_nbd::{Export, Listener, MemoryExport, Server};
//!
//! # async fn demo() -> anyhow::Result<()> {
//! let vol: Arc<dyn Export> = Arc::new(MemoryExport::new(1 << 30));
//! let server = Server::new(vec![("vol".to_string(), vol)])?;
//! // Bind first, so a taken port or socket is reported before serving anything.
//! let unix = Listener::bind_unix("/run/nbraid/nbd.sock")?;
//! let tcp = Listener::bind_tcp("127.0.0.1:10809".parse()?).await?;
//! for l in [&unix, &tcp] {
//!     println!("{}", l.uri("vol")); // nbd+unix:///vol?socket=… and nbd://127.0.0.1:10809/vol
//! }
//! let tasks = [unix, tcp].map(|l| {
//!     let s = server.clone();
//!     tokio::spawn(async move { s.serve(l).await })
//! });
//! tokio::signal::ctrl_c().await?;
//! // Stop accepting, finish requests in flight, flush every export.
//! server.shutdown_with_grace(std::time::Duration::from_secs(10)).await?;
//! for t in tasks {
//!     t.await?;
//! }
//! # Ok(())
//! # }
//! ```

mod accept_backoff;
mod admission;
mod busy_poll;
pub mod client;
mod connection;
mod error;
mod execute;
mod export;
mod handshake;
mod limits;
mod listener;
mod log_every;
mod payload;
pub mod proto;
mod replies;
mod reply_head;
mod request;
mod server;
mod server_memory;
mod shared;
#[doc(hidden)]
pub mod testing;
pub mod tls;
mod tls_validity;
pub use tls_validity::{now_unix_s, utc_text};
mod transmission;
mod unaligned;
mod workers;
mod write_gate;

#[cfg(test)]
mod tests;

pub use accept_backoff::{AcceptBackoff, BackoffStep};
pub use error::{ConnError, ServerError};
pub use export::{errno_for, Export, Extent, IncomingWrite, MemoryExport, ReadData, ZeroFlags};
pub use limits::{Limits, DEFAULT_BUSY_POLL, DEFAULT_SPARE_WORKER_MIN_LEN, REQUEST_COST_MIN};
pub use listener::Listener;
pub use server::{advertised_preferred, Server};
pub use tls::{ClientTls, ServerTls, TlsError, TlsMode};
