//! Where the server accepts connections: a Unix socket or a TCP listener, bound before
//! serving so a taken address is reported first.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use tokio::net::{TcpListener, UnixListener};

use crate::client::uri::{Address, Uri};
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
        self.export_uri(name, false)
    }

    /// The client URI of export `name` on this listener, `nbds` when `tls` (clients must
    /// upgrade). Built as a [`Uri`] so the name and socket path are percent-encoded: a raw
    /// space, `?`, `#` or `%` would give a URI no client reads back as this export.
    pub fn export_uri(&self, name: &str, tls: bool) -> String {
        let address = match self {
            Listener::Unix { path, .. } => Address::Unix(path.clone()),
            Listener::Tcp(l) => match l.local_addr() {
                Ok(a) => Address::Tcp {
                    host: a.ip().to_string(),
                    port: a.port(),
                },
                Err(_) => Address::Tcp {
                    host: "?".into(),
                    port: 0,
                },
            },
        };
        let uri = Uri {
            address,
            export: name.to_string(),
            tls,
            params: Vec::new(),
        };
        uri.to_string()
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

/// An accepted connection on its way to another runtime: a tokio stream is registered with
/// the reactor of the runtime that made it, so it crosses as a plain (non-blocking) socket
/// and is registered again where it will be served.
pub(crate) enum Moving {
    Unix(std::os::unix::net::UnixStream),
    Tcp(std::net::TcpStream),
}

impl Accepted {
    /// Leaves this runtime's reactor (the socket stays non-blocking).
    pub(crate) fn into_moving(self) -> io::Result<Moving> {
        Ok(match self {
            Accepted::Unix(s) => Moving::Unix(s.into_std()?),
            Accepted::Tcp(s) => Moving::Tcp(s.into_std()?),
        })
    }
}

impl Moving {
    /// Joins the reactor of the runtime this is called on.
    pub(crate) fn into_accepted(self) -> io::Result<Accepted> {
        Ok(match self {
            Moving::Unix(s) => Accepted::Unix(tokio::net::UnixStream::from_std(s)?),
            Moving::Tcp(s) => Accepted::Tcp(tokio::net::TcpStream::from_std(s)?),
        })
    }
}

pub(crate) async fn accept_one(l: &Listener) -> io::Result<Accepted> {
    match l {
        Listener::Unix { listener, .. } => listener.accept().await.map(|(s, _)| Accepted::Unix(s)),
        Listener::Tcp(listener) => listener.accept().await.map(|(s, _)| Accepted::Tcp(s)),
    }
}

/// The send buffer asked for on every accepted connection: a 1 MiB read's reply (and a few
/// more behind it) fits in one write, so the reader neither waits for the client to drain
/// the socket nor wakes once per 200 KiB (the usual default). The kernel caps it at
/// `net.core.wmem_max`.
pub(crate) const SEND_BUFFER_BYTES: usize = 4 << 20;

/// Asks for [`SEND_BUFFER_BYTES`] of send buffer on socket `fd`; a refusal leaves the
/// default (a slower reply, nothing worse).
pub(crate) fn widen_send_buffer(fd: std::os::fd::RawFd) {
    let bytes = SEND_BUFFER_BYTES as libc::c_int;
    // SAFETY: `fd` is an open socket, and the option value is a `c_int` that lives
    // across the call, its size given.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_SNDBUF,
            (&bytes as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        tracing::debug!(
            "widening a connection's send buffer: {}",
            io::Error::last_os_error()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::{AsRawFd, RawFd};

    fn send_buffer(fd: RawFd) -> usize {
        let mut v: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: `v` and `len` outlive the call and `len` is `v`'s size.
        let rc = unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_SNDBUF,
                (&mut v as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        assert_eq!(rc, 0, "{}", io::Error::last_os_error());
        v as usize
    }

    #[tokio::test]
    async fn export_names_and_socket_paths_are_percent_encoded_in_uris() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a b.sock");
        let l = Listener::bind_unix(&path).unwrap();
        let name = "my vol?#%é/x";
        let uri = l.uri(name);
        assert!(
            uri.starts_with("nbd+unix:///my%20vol%3F%23%25%C3%A9/x?socket="),
            "{uri}"
        );
        assert!(uri.ends_with("a%20b.sock"), "{uri}");
        let back = Uri::parse(&uri).unwrap();
        assert_eq!(back.export, name);
        assert_eq!(back.address, Address::Unix(path.canonicalize().unwrap()));
        assert!(l.export_uri("v", true).starts_with("nbds+unix:///v?"));

        let t = Listener::bind_tcp("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let port = t.tcp_addr().unwrap().port();
        assert_eq!(t.uri("a b"), format!("nbd://127.0.0.1:{port}/a%20b"));
        assert_eq!(Uri::parse(&t.uri(name)).unwrap().export, name);
        let v6 = Listener::bind_tcp("[::1]:0".parse().unwrap()).await;
        if let Ok(v6) = v6 {
            let port = v6.tcp_addr().unwrap().port();
            assert_eq!(v6.export_uri("r5", true), format!("nbds://[::1]:{port}/r5"));
        }
    }

    #[test]
    fn the_send_buffer_is_widened_as_far_as_the_kernel_allows() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        widen_send_buffer(a.as_raw_fd());
        let wmem_max = std::fs::read_to_string("/proc/sys/net/core/wmem_max")
            .ok()
            .and_then(|s| s.trim().parse::<usize>().ok())
            .unwrap_or(SEND_BUFFER_BYTES);
        // The kernel keeps twice what it grants (for its bookkeeping), capped at wmem_max.
        let granted = SEND_BUFFER_BYTES.min(wmem_max);
        assert!(send_buffer(a.as_raw_fd()) >= granted);
    }
}
