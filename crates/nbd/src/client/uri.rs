//! NBD URIs (the NBD project's `doc/uri.md`, as libnbd and qemu read them):
//! `nbd://host[:port]/export`, `nbds://…` (TLS), `nbd+unix:///export?socket=PATH` and
//! `nbds+unix:///export?socket=PATH`. Export names and socket paths may be percent-encoded.

use std::fmt;
use std::path::PathBuf;

use super::ClientError;

/// The port NBD servers listen on when a URI names none.
pub const DEFAULT_PORT: u16 = 10809;

/// Where a server is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Address {
    /// A host name or address literal (IPv6 without brackets) and port.
    Tcp { host: String, port: u16 },
    /// A Unix socket path.
    Unix(PathBuf),
}

/// A parsed NBD URI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Uri {
    pub address: Address,
    /// The export's name (empty: the server's default export).
    pub export: String,
    /// `nbds` schemes: the connection must be upgraded with `NBD_OPT_STARTTLS`.
    pub tls: bool,
    /// Query parameters other than `socket`, in order, percent-decoded (e.g.
    /// `tls-certificates`, `tls-hostname`).
    pub params: Vec<(String, String)>,
}

impl Uri {
    /// Parses `s`; errors name what is wrong with it.
    pub fn parse(s: &str) -> Result<Uri, ClientError> {
        let bad = |why: &str| ClientError::BadUri {
            uri: s.to_string(),
            why: why.to_string(),
        };
        let (scheme, rest) = s.split_once("://").ok_or_else(|| bad("no scheme"))?;
        let (tls, unix) = match scheme {
            "nbd" => (false, false),
            "nbds" => (true, false),
            "nbd+unix" => (false, true),
            "nbds+unix" => (true, true),
            _ => {
                return Err(bad(
                    "unknown scheme (nbd, nbds, nbd+unix and nbds+unix are known)",
                ))
            }
        };
        let (rest, query) = match rest.split_once('?') {
            Some((r, q)) => (r, Some(q)),
            None => (rest, None),
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i + 1..]),
            None => (rest, ""),
        };
        let export = decode(path).ok_or_else(|| bad("bad percent-encoding in the export name"))?;
        let mut socket = None;
        let mut params = Vec::new();
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let v = decode(v).ok_or_else(|| bad("bad percent-encoding in the query"))?;
            if k == "socket" {
                socket = Some(v);
            } else {
                params.push((k.to_string(), v));
            }
        }
        let address = if unix {
            if !authority.is_empty() {
                return Err(bad(
                    "a Unix socket URI names no host (nbd+unix:///export?socket=PATH)",
                ));
            }
            let path = socket.ok_or_else(|| bad("no socket=PATH in the query"))?;
            Address::Unix(PathBuf::from(path))
        } else {
            if socket.is_some() {
                return Err(bad("socket= belongs to nbd+unix:// URIs"));
            }
            let (host, port) = split_host_port(authority).ok_or_else(|| bad("bad host or port"))?;
            Address::Tcp {
                host: host.to_string(),
                port: port.unwrap_or(DEFAULT_PORT),
            }
        };
        Ok(Uri {
            address,
            export,
            tls,
            params,
        })
    }

    /// The value of query parameter `key`, if given.
    pub fn param(&self, key: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

impl fmt::Display for Uri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = if self.tls { "nbds" } else { "nbd" };
        let export = encode(&self.export);
        let mut query: Vec<String> = Vec::new();
        match &self.address {
            Address::Tcp { host, port } if host.contains(':') => {
                write!(f, "{s}://[{host}]:{port}/{export}")?
            }
            Address::Tcp { host, port } => write!(f, "{s}://{host}:{port}/{export}")?,
            Address::Unix(p) => {
                write!(f, "{s}+unix:///{export}")?;
                query.push(format!("socket={}", encode(&p.to_string_lossy())));
            }
        }
        query.extend(
            self.params
                .iter()
                .map(|(k, v)| format!("{k}={}", encode(v))),
        );
        if !query.is_empty() {
            write!(f, "?{}", query.join("&"))?;
        }
        Ok(())
    }
}

/// `host`, `host:port`, `[v6]` or `[v6]:port`; an empty host is refused.
fn split_host_port(a: &str) -> Option<(&str, Option<u16>)> {
    let (host, port) = if let Some(rest) = a.strip_prefix('[') {
        let (h, after) = rest.split_once(']')?;
        match after {
            "" => (h, None),
            p => (h, Some(p.strip_prefix(':')?)),
        }
    } else {
        match a.rsplit_once(':') {
            Some((h, p)) if !h.contains(':') => (h, Some(p)),
            Some(_) => return None,
            None => (a, None),
        }
    };
    if host.is_empty() {
        return None;
    }
    let port = match port {
        Some(p) => Some(p.parse().ok()?),
        None => None,
    };
    Some((host, port))
}

fn decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/:".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp(host: &str, port: u16) -> Address {
        Address::Tcp {
            host: host.into(),
            port,
        }
    }

    #[test]
    fn parses_the_schemes() {
        let u = Uri::parse("nbd://127.0.0.1:10900/vol").unwrap();
        assert_eq!(
            (u.address, u.export, u.tls),
            (tcp("127.0.0.1", 10900), "vol".into(), false)
        );
        let u = Uri::parse("nbd://example.org").unwrap();
        assert_eq!(
            (u.address, u.export),
            (tcp("example.org", DEFAULT_PORT), String::new())
        );
        let u = Uri::parse("nbds://[::1]:99/a%20b").unwrap();
        assert_eq!(
            (u.address, u.export, u.tls),
            (tcp("::1", 99), "a b".into(), true)
        );
        let u = Uri::parse("nbd+unix:///r5?socket=/run/nbraid/nbd.sock").unwrap();
        assert_eq!(u.address, Address::Unix("/run/nbraid/nbd.sock".into()));
        assert_eq!(u.export, "r5");
        let u = Uri::parse("nbds+unix://?socket=%2Ftmp%2Fs&tls-certificates=/etc/pki").unwrap();
        assert_eq!(u.address, Address::Unix("/tmp/s".into()));
        assert!(u.tls);
        assert_eq!(u.param("tls-certificates"), Some("/etc/pki"));
    }

    #[test]
    fn refuses_what_it_cannot_reach() {
        for bad in [
            "vol",
            "http://x/y",
            "nbd+unix:///x",
            "nbd+unix://host/x?socket=/s",
            "nbd://:10809/x",
            "nbd://h:port/x",
            "nbd://h:99999/x",
            "nbd://h/x?socket=/s",
            "nbd://h/%zz",
        ] {
            let e = Uri::parse(bad).unwrap_err();
            assert!(e.to_string().contains(bad), "{e}");
        }
    }

    #[test]
    fn display_round_trips() {
        for s in [
            "nbd://127.0.0.1:10809/vol",
            "nbds://[::1]:99/a%20b",
            "nbd+unix:///r5?socket=/run/x.sock",
            "nbds+unix:///?socket=/s&tls-certificates=/d",
        ] {
            let u = Uri::parse(s).unwrap();
            assert_eq!(Uri::parse(&u.to_string()).unwrap(), u);
        }
    }
}
