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

mod admission;
pub mod client;
mod export;
mod handshake;
mod limits;
pub mod proto;
mod replies;
mod server;
#[doc(hidden)]
pub mod testing;
pub mod tls;
mod transmission;
mod unaligned;
mod write_gate;

#[cfg(test)]
mod tests;

pub use export::{errno_for, Export, Extent, MemoryExport, PayloadBuf, ReadData, ZeroFlags};
pub use limits::{Limits, REQUEST_COST_MIN};
pub use server::{advertised_preferred, Listener, Server, ServerError};
pub use tls::{ClientTls, ServerTls, TlsError, TlsMode};

/// Why a connection ended other than by the client's clean disconnect.
#[derive(Debug, thiserror::Error)]
pub enum ConnError {
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    #[error("client sent unknown flags {0:#x}")]
    UnknownClientFlags(u32),
    #[error("bad option magic {0:#x}")]
    BadOptionMagic(u64),
    #[error("option {option} carries {len} bytes of data, too many")]
    OptionTooLong { option: u32, len: u32 },
    #[error("client sent too many options")]
    TooManyOptions,
    #[error("NBD_OPT_EXPORT_NAME asked for unknown export {0:?}")]
    UnknownExport(String),
    #[error("bad request magic {0:#x}")]
    BadRequestMagic(u32),
    #[error("connection closed after {0} bytes of a request header")]
    ShortHeader(usize),
    #[error("write payload of {0} bytes is too long")]
    PayloadTooLong(u32),
    #[error("the client did not finish the handshake in time")]
    HandshakeTimeout,
    #[error("the client sent no byte of {0} for {1} s")]
    Stalled(&'static str, u64),
    #[error(
        "the client sent a {len_bytes}-byte write payload too slowly: not all of it in \
         {allowed_ms} ms (at least {min_bytes_per_s} bytes/s after the stall timeout)"
    )]
    PayloadTooSlow {
        len_bytes: u64,
        allowed_ms: u64,
        min_bytes_per_s: u64,
    },
    #[error("refused: {0}")]
    Refused(String),
    #[error("the client asked for an export without TLS on a listener that requires it")]
    TlsRequired,
    #[error("TLS handshake: {0}")]
    Tls(String),
}
