//! What can go wrong talking to an NBD server.

use std::io;

use crate::proto;

/// An error of the client: connecting, negotiating, or one request.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("bad NBD URI {uri:?}: {why}")]
    BadUri { uri: String, why: String },
    #[error("connecting to {addr}: {source}")]
    Connect { addr: String, source: io::Error },
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),
    #[error("not an NBD server: {0}")]
    NotNbd(String),
    #[error("the server does not speak the fixed newstyle handshake")]
    NotFixedNewstyle,
    #[error("the server has no export {0:?}")]
    UnknownExport(String),
    #[error("the server requires TLS (NBD_REP_ERR_TLS_REQD): use an nbds:// URI")]
    TlsRequired,
    /// Our side of TLS could not be set up (the certificates' folder), or the URI lacks it.
    #[error("TLS: {0}")]
    Tls(String),
    /// The TLS handshake with a server that acknowledged `NBD_OPT_STARTTLS` failed: its
    /// certificate refused, ours refused by it, or the connection lost mid-handshake.
    #[error("TLS: {0}")]
    TlsHandshake(String),
    #[error("option {option} refused: {}{}", reply_name(*.reply), message_suffix(.message))]
    OptionRefused {
        option: &'static str,
        reply: u32,
        message: String,
    },
    #[error("protocol violation by the server: {0}")]
    Protocol(String),
    #[error("{cmd} at {offset}+{len}: server error {} ({errno}){}", errno_name(*.errno), message_suffix(.message))]
    Server {
        cmd: &'static str,
        offset: u64,
        len: u64,
        errno: u32,
        message: String,
    },
    #[error(
        "{cmd} at {offset}+{len} is not aligned to the export's minimum block of {min_block} bytes"
    )]
    Unaligned {
        cmd: &'static str,
        offset: u64,
        len: u64,
        min_block: u32,
    },
    #[error("{cmd} at {offset}+{len} reaches past the end of the export ({size} bytes)")]
    OutOfRange {
        cmd: &'static str,
        offset: u64,
        len: u64,
        size: u64,
    },
    #[error("{0} is not offered by this export")]
    Unsupported(&'static str),
    #[error("the export is read-only")]
    ReadOnly,
    #[error("the connection is closed: {0}")]
    Disconnected(String),
}

impl ClientError {
    /// The NBD error value of a request the server failed, if that is what this is.
    pub fn errno(&self) -> Option<u32> {
        match self {
            ClientError::Server { errno, .. } => Some(*errno),
            _ => None,
        }
    }
}

/// Errors as `io::Error`s (for callers that speak std I/O); server errors keep their errno.
impl From<ClientError> for io::Error {
    fn from(e: ClientError) -> io::Error {
        let kind = match &e {
            ClientError::Io(inner) | ClientError::Connect { source: inner, .. } => inner.kind(),
            ClientError::Server { errno, .. } => match *errno {
                proto::EPERM => io::ErrorKind::PermissionDenied,
                proto::EINVAL => io::ErrorKind::InvalidInput,
                proto::ENOTSUP => io::ErrorKind::Unsupported,
                proto::ENOMEM => io::ErrorKind::OutOfMemory,
                proto::ENOSPC => io::ErrorKind::StorageFull,
                _ => io::ErrorKind::Other,
            },
            ClientError::Unaligned { .. } | ClientError::OutOfRange { .. } => {
                io::ErrorKind::InvalidInput
            }
            ClientError::ReadOnly => io::ErrorKind::PermissionDenied,
            ClientError::Unsupported(_) => io::ErrorKind::Unsupported,
            ClientError::Disconnected(_) => io::ErrorKind::NotConnected,
            _ => io::ErrorKind::Other,
        };
        io::Error::new(kind, e)
    }
}

fn message_suffix(m: &str) -> String {
    if m.is_empty() {
        String::new()
    } else {
        format!(": {m}")
    }
}

/// Name of an `NBD_E*` value.
pub fn errno_name(e: u32) -> &'static str {
    match e {
        proto::EPERM => "EPERM",
        proto::EIO => "EIO",
        proto::ENOMEM => "ENOMEM",
        proto::EINVAL => "EINVAL",
        proto::ENOSPC => "ENOSPC",
        proto::EOVERFLOW => "EOVERFLOW",
        proto::ENOTSUP => "ENOTSUP",
        proto::ESHUTDOWN => "ESHUTDOWN",
        _ => "unknown error",
    }
}

/// Name of an option reply type.
pub fn reply_name(r: u32) -> &'static str {
    match r {
        proto::REP_ACK => "ACK",
        proto::REP_SERVER => "SERVER",
        proto::REP_INFO => "INFO",
        proto::REP_META_CONTEXT => "META_CONTEXT",
        proto::REP_ERR_UNSUP => "ERR_UNSUP",
        proto::REP_ERR_POLICY => "ERR_POLICY",
        proto::REP_ERR_INVALID => "ERR_INVALID",
        proto::REP_ERR_PLATFORM => "ERR_PLATFORM",
        proto::REP_ERR_TLS_REQD => "ERR_TLS_REQD",
        proto::REP_ERR_UNKNOWN => "ERR_UNKNOWN",
        proto::REP_ERR_SHUTDOWN => "ERR_SHUTDOWN",
        proto::REP_ERR_BLOCK_SIZE_REQD => "ERR_BLOCK_SIZE_REQD",
        proto::REP_ERR_TOO_BIG => "ERR_TOO_BIG",
        _ => "unknown reply",
    }
}
