//! Listen addresses: `unix:/run/nbraid/nbd.sock` or `tcp:127.0.0.1:10809` / `tcp:[::1]:10809`.

use serde::Serialize;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// NBD's IANA port.
pub const NBD_PORT: u16 = 10809;

/// Where the daemon listens when the config says nothing: loopback only.
pub const DEFAULT_LISTEN: &str = "tcp:127.0.0.1:10809";

/// Longest Unix socket path a bind takes, in bytes: Linux's `sun_path` holds 108 with the
/// closing NUL.
pub const UNIX_PATH_BYTES_MAX: usize = 107;

/// Why `path` cannot be bound as a Unix socket (too long for its address), if it cannot.
/// `path` is what the bind receives: relative paths joined to the config's directory.
pub fn unix_path_problem(path: &Path) -> Option<String> {
    let len = path.as_os_str().len();
    (len > UNIX_PATH_BYTES_MAX).then(|| {
        format!(
            "the Unix socket path {} is {len} bytes; a Unix socket address holds at most \
             {UNIX_PATH_BYTES_MAX} (108 with its closing NUL on Linux), so the bind would fail — \
             give a shorter path",
            path.display()
        )
    })
}

/// What `listen` accepts, for error messages.
pub const LISTEN_HELP: &str = "valid: \"unix:/run/nbraid/nbd.sock\" (a Unix socket path; \
relative paths are relative to the config file), \"tcp:127.0.0.1:10809\", \"tcp:[::1]:10809\" \
(an IP address and port; host names are not resolved)";

/// One address the NBD server listens on.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(tag = "kind", content = "address", rename_all = "lowercase")]
pub enum Listener {
    Unix(PathBuf),
    Tcp(SocketAddr),
}

impl Listener {
    /// Parses `unix:PATH` (relative to `base`) or `tcp:IP:PORT`. The error says what is wrong.
    pub fn parse(text: &str, base: &Path) -> Result<Listener, String> {
        if let Some(path) = text.strip_prefix("unix:") {
            if path.is_empty() {
                return Err("the Unix socket path is empty".into());
            }
            let path = base.join(path);
            return match unix_path_problem(&path) {
                Some(why) => Err(why),
                None => Ok(Listener::Unix(path)),
            };
        }
        if let Some(addr) = text.strip_prefix("tcp:") {
            return addr.parse::<SocketAddr>().map(Listener::Tcp).map_err(|_| {
                if addr.parse::<std::net::IpAddr>().is_ok() {
                    format!("\"{addr}\" has no port (NBD's port is {NBD_PORT})")
                } else if addr.starts_with('*') || addr.is_empty() {
                    format!("\"{addr}\" is not an IP address and port (for every interface write 0.0.0.0:{NBD_PORT} or [::]:{NBD_PORT})")
                } else {
                    format!("\"{addr}\" is not an IP address and port")
                }
            });
        }
        Err("it does not start with \"unix:\" or \"tcp:\"".into())
    }

    /// Whether only this machine can connect (a Unix socket or a loopback address).
    pub fn is_local(&self) -> bool {
        match self {
            Listener::Unix(_) => true,
            Listener::Tcp(a) => a.ip().is_loopback(),
        }
    }
}

impl fmt::Display for Listener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Listener::Unix(p) => write!(f, "unix:{}", p.display()),
            Listener::Tcp(a) => write!(f, "tcp:{a}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_both_kinds() {
        let base = Path::new("/etc/nbraid");
        assert_eq!(
            Listener::parse("unix:/run/nbraid/nbd.sock", base),
            Ok(Listener::Unix("/run/nbraid/nbd.sock".into()))
        );
        assert_eq!(
            Listener::parse("unix:nbd.sock", base),
            Ok(Listener::Unix("/etc/nbraid/nbd.sock".into()))
        );
        assert_eq!(
            Listener::parse("tcp:127.0.0.1:10809", base),
            Ok(Listener::Tcp("127.0.0.1:10809".parse().unwrap()))
        );
        assert!(Listener::parse("tcp:[::1]:10809", base).unwrap().is_local());
        assert!(!Listener::parse("tcp:0.0.0.0:10809", base)
            .unwrap()
            .is_local());
        assert!(Listener::parse("tcp:127.0.0.1", base)
            .unwrap_err()
            .contains("no port"));
        assert!(Listener::parse("tcp:localhost:10809", base).is_err());
        assert!(Listener::parse("127.0.0.1:10809", base).is_err());
        assert!(Listener::parse("unix:", base).is_err());
    }

    #[test]
    fn a_unix_path_too_long_for_a_socket_address_is_refused_as_the_bind_would_see_it() {
        let base = Path::new("/etc/nbraid"); // 11 bytes and a slash before a relative name
        let fits = "x".repeat(UNIX_PATH_BYTES_MAX - 12);
        assert!(Listener::parse(&format!("unix:{fits}"), base).is_ok());
        let why = Listener::parse(&format!("unix:{fits}y"), base).unwrap_err();
        assert!(
            why.contains("is 108 bytes") && why.contains("at most 107"),
            "{why}"
        );
        assert!(why.contains(&format!("/etc/nbraid/{fits}y")), "{why}");
        let absolute = format!("unix:/{}", "y".repeat(UNIX_PATH_BYTES_MAX));
        assert!(Listener::parse(&absolute, base).is_err());
    }
}
