//! Where the server accepts connections: a Unix socket or a TCP listener, bound before
//! serving so a taken address is reported first.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use tokio::net::{TcpListener, UnixListener};

use crate::error::ServerError;

/// A bound listener, ready for [`Server::serve`].
#[derive(Debug)]
pub enum Listener {
    Unix {
        listener: UnixListener,
        path: PathBuf,
    },
    Tcp(TcpListener),
}

impl Listener {
    /// Binds a Unix socket; a stale socket file nobody listens on is replaced, a live one is an
    /// error (`AddrInUse`).
    pub fn bind_unix(path: impl AsRef<Path>) -> Result<Self, ServerError> {
        let path = absolute(path.as_ref());
        let err = |source| ServerError::Bind {
            addr: format!("unix:{}", path.display()),
            source,
        };
        match UnixListener::bind(&path) {
            Ok(listener) => Ok(Listener::Unix { listener, path }),
            Err(e) if e.kind() == io::ErrorKind::AddrInUse => {
                use std::os::unix::fs::FileTypeExt;
                let is_socket = std::fs::symlink_metadata(&path)
                    .map(|m| m.file_type().is_socket())
                    .unwrap_or(false);
                if !is_socket || std::os::unix::net::UnixStream::connect(&path).is_ok() {
                    return Err(err(e));
                }
                std::fs::remove_file(&path).map_err(err)?;
                let listener = UnixListener::bind(&path).map_err(err)?;
                Ok(Listener::Unix { listener, path })
            }
            Err(e) => Err(err(e)),
        }
    }

    /// Binds a TCP listener.
    pub async fn bind_tcp(addr: SocketAddr) -> Result<Self, ServerError> {
        TcpListener::bind(addr)
            .await
            .map(Listener::Tcp)
            .map_err(|source| ServerError::Bind {
                addr: format!("tcp:{addr}"),
                source,
            })
    }

    /// The TCP address actually bound (useful with port 0).
    pub fn tcp_addr(&self) -> Option<SocketAddr> {
        match self {
            Listener::Tcp(l) => l.local_addr().ok(),
            Listener::Unix { .. } => None,
        }
    }

    /// The client URI of export `name` on this listener.
    pub fn uri(&self, name: &str) -> String {
        match self {
            Listener::Unix { path, .. } => {
                format!("nbd+unix:///{name}?socket={}", path.display())
            }
            Listener::Tcp(l) => match l.local_addr() {
                Ok(a) => format!("nbd://{a}/{name}"),
                Err(_) => format!("nbd://?/{name}"),
            },
        }
    }
}

/// `path` made absolute (its folder resolved, `..` and links gone), so the URI printed works
/// from any directory; unchanged where the folder cannot be resolved (binding reports it).
fn absolute(path: &Path) -> PathBuf {
    let resolved = match (path.parent(), path.file_name()) {
        (Some(dir), Some(name)) => {
            let dir = if dir.as_os_str().is_empty() {
                Path::new(".")
            } else {
                dir
            };
            dir.canonicalize().ok().map(|d| d.join(name))
        }
        _ => None,
    };
    resolved
        .or_else(|| std::path::absolute(path).ok())
        .unwrap_or_else(|| path.to_path_buf())
}

impl fmt::Display for Listener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Listener::Unix { path, .. } => write!(f, "unix:{}", path.display()),
            Listener::Tcp(l) => match l.local_addr() {
                Ok(a) => write!(f, "tcp:{a}"),
                Err(_) => write!(f, "tcp:?"),
            },
        }
    }
}

/// A connection accepted on a [`Listener`].
pub(crate) enum Accepted {
    Unix(tokio::net::UnixStream),
    Tcp(tokio::net::TcpStream),
}

pub(crate) async fn accept_one(l: &Listener) -> io::Result<Accepted> {
    match l {
        Listener::Unix { listener, .. } => listener.accept().await.map(|(s, _)| Accepted::Unix(s)),
        Listener::Tcp(listener) => listener.accept().await.map(|(s, _)| Accepted::Tcp(s)),
    }
}
