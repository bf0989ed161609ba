//! The server's errors: building it and binding its listeners, and why a connection ended.

use std::io;

/// Why a connection ended other than by the client's clean disconnect.
#[derive(Debug, thiserror::Error)]
pub enum ConnError {
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// An I/O error before the handshake was done (a client that connects and hangs up).
    #[error("I/O error in the handshake: {0}")]
    HandshakeIo(std::io::Error),
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

impl ConnError {
    /// This error, met while negotiating: an I/O error says so ([`ConnError::HandshakeIo`]).
    pub(crate) fn in_handshake(self) -> ConnError {
        match self {
            ConnError::Io(e) => ConnError::HandshakeIo(e),
            e => e,
        }
    }

    /// Whether the connection ended before it was served: what a flood of connections (a
    /// port scanner, a client with the wrong CA or the wrong export) repeats, so its log
    /// lines are limited ([`crate::log_every`]). Pure.
    pub fn ended_in_handshake(&self) -> bool {
        match self {
            ConnError::HandshakeIo(_)
            | ConnError::UnknownClientFlags(_)
            | ConnError::BadOptionMagic(_)
            | ConnError::OptionTooLong { .. }
            | ConnError::TooManyOptions
            | ConnError::UnknownExport(_)
            | ConnError::HandshakeTimeout
            | ConnError::Refused(_)
            | ConnError::TlsRequired
            | ConnError::Tls(_) => true,
            ConnError::Io(_)
            | ConnError::BadRequestMagic(_)
            | ConnError::ShortHeader(_)
            | ConnError::PayloadTooLong(_)
            | ConnError::Stalled(..)
            | ConnError::PayloadTooSlow { .. } => false,
        }
    }
}

/// Errors building a server or binding its listeners.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("export name {0:?} is used twice")]
    DuplicateName(String),
    #[error("export name {0:?} is longer than 4096 bytes")]
    NameTooLong(String),
    #[error("export {name:?}: minimum block size {min} is not a power of two from 1 to 65536")]
    BadMinBlock { name: String, min: u32 },
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: String,
        #[source]
        source: io::Error,
    },
}
