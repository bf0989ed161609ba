//! A remote member's connection keys: `timeout` (a request with no reply by then fails like
//! a disk error and its connection is re-opened) and `connections` (how many to open when the
//! server offers multi-conn). Only NBD URI members take them; each is checked at its place.

use super::error::{ErrorKind, Problem};
use super::limits::{format_duration, parse_duration, DURATION_HELP};
use super::raw::{RawMember, RawSize};
use serde::Serialize;
use serde_spanned::Spanned;
use std::time::Duration;

/// Shortest `timeout`: below it a busy server's ordinary latency would fail members.
pub const REMOTE_TIMEOUT_MIN: Duration = Duration::from_millis(100);
/// Longest `timeout`.
pub const REMOTE_TIMEOUT_MAX: Duration = Duration::from_secs(3600);
/// Most `connections` to one export.
pub const REMOTE_CONNECTIONS_MAX: u32 = 16;

/// What the config says about a remote member's connections (`None`: the engine's default,
/// 30 s and 4).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RemoteSettings {
    pub timeout: Option<Duration>,
    pub connections: Option<u32>,
}

/// Checks member `who`'s `timeout` and `connections`; `remote` says whether its path is an
/// NBD URI (the keys mean nothing for a file, so they are refused there).
pub(crate) fn remote_settings(
    raw: &RawMember,
    who: &str,
    remote: bool,
) -> Result<RemoteSettings, Problem> {
    let only_remote = |key: &str, span| {
        Problem::new(
            span,
            ErrorKind::Option,
            format!("{who}: {key} applies to remote members (NBD URIs) only; remove it"),
        )
    };
    let timeout = match &raw.timeout {
        None => None,
        Some(t) if !remote => return Err(only_remote("timeout", t.span())),
        Some(t) => Some(timeout(t, who)?),
    };
    let connections = match &raw.connections {
        None => None,
        Some(c) if !remote => return Err(only_remote("connections", c.span())),
        Some(c) => {
            let n = *c.get_ref();
            if !(1..=i64::from(REMOTE_CONNECTIONS_MAX)).contains(&n) {
                return Err(Problem::new(
                    c.span(),
                    ErrorKind::Option,
                    format!(
                        "{who}: connections = {n} is out of range; give 1 to \
                         {REMOTE_CONNECTIONS_MAX} (more than one only helps when the server \
                         offers multi-conn)"
                    ),
                ));
            }
            Some(n as u32)
        }
    };
    Ok(RemoteSettings {
        timeout,
        connections,
    })
}

/// Why remote member `uri`'s `socket=` path cannot be connected to (too long for a Unix
/// socket address, like a listener's), if it cannot. Only `+unix` URIs have one; the NBD
/// client's own parser reads it (percent-decoded), so the check sees what a connect would.
pub(crate) fn socket_problem(uri: &str) -> Option<String> {
    match nbraid_nbd::client::uri::Uri::parse(uri.trim())
        .ok()?
        .address
    {
        nbraid_nbd::client::uri::Address::Unix(path) => crate::listen::unix_path_problem(&path),
        nbraid_nbd::client::uri::Address::Tcp { .. } => None,
    }
}

fn timeout(t: &Spanned<RawSize>, who: &str) -> Result<Duration, Problem> {
    let bad = |msg: String| {
        Problem::new(
            t.span(),
            ErrorKind::Option,
            format!(
                "{who}: timeout {msg}; give {} to {}",
                format_duration(REMOTE_TIMEOUT_MIN),
                format_duration(REMOTE_TIMEOUT_MAX)
            ),
        )
    };
    let d = match t.get_ref() {
        RawSize::Int(i) => return Err(bad(format!("{i} has no unit; {DURATION_HELP}"))),
        RawSize::Text(s) => parse_duration(s).map_err(bad)?,
    };
    if !(REMOTE_TIMEOUT_MIN..=REMOTE_TIMEOUT_MAX).contains(&d) {
        return Err(bad(format!("{} is out of range", t.get_ref().shown())));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use crate::{parse, ErrorKind, RemoteSettings};
    use std::path::Path;
    use std::time::Duration;

    fn member(path: &str, extra: &str) -> Result<crate::Config, crate::ConfigError> {
        let text = format!(
            "[[member]]\nid = \"a\"\npath = \"{path}\"\nsize = \"64MiB\"\n{extra}\n\
             [[member]]\nid = \"b\"\npath = \"memory:\"\nsize = \"64MiB\"\n\
             [[volume]]\nname = \"v\"\nlevel = \"raid1\"\nmembers = [\"a\", \"b\"]\n"
        );
        parse(&text, Path::new("/nonexistent/t.toml"))
    }

    #[test]
    fn remote_keys_are_read_with_defaults_left_to_the_engine() {
        let c = member("nbd://192.0.2.1/x", "").unwrap();
        assert_eq!(c.members[0].remote, RemoteSettings::default());
        let c = member("nbd://192.0.2.1/x", "timeout = \"5s\"\nconnections = 2").unwrap();
        assert_eq!(
            c.members[0].remote,
            RemoteSettings {
                timeout: Some(Duration::from_secs(5)),
                connections: Some(2)
            }
        );
    }

    #[test]
    fn remote_keys_are_refused_where_they_do_not_apply_or_are_out_of_range() {
        for (path, extra, kind, says) in [
            (
                "memory:",
                "timeout = \"5s\"",
                ErrorKind::Option,
                "remote members",
            ),
            (
                "memory:",
                "connections = 2",
                ErrorKind::Option,
                "remote members",
            ),
            ("nbd://h/x", "timeout = 5", ErrorKind::Option, "no unit"),
            (
                "nbd://h/x",
                "timeout = \"10ms\"",
                ErrorKind::Option,
                "out of range",
            ),
            ("nbd://h/x", "connections = 0", ErrorKind::Option, "1 to 16"),
            (
                "nbd://h/x",
                "connections = 99",
                ErrorKind::Option,
                "1 to 16",
            ),
        ] {
            let e = member(path, extra).expect_err(extra);
            assert_eq!(e.kind(), Some(kind), "{extra}: {e}");
            let text = e.to_string();
            assert!(text.contains(says), "{extra}: {text}");
            assert!(text.contains("member \"a\""), "{extra}: {text}");
            assert!(
                text.contains("t.toml:5:"),
                "{extra}: located at the key: {text}"
            );
        }
    }

    #[test]
    fn a_unix_socket_path_too_long_to_connect_to_is_refused() {
        let long = format!("/{}", "s".repeat(107)); // 108 bytes
        for path in [
            format!("nbd+unix:///x?socket={long}"),
            format!(
                "nbds+unix:///x?tls-certificates=/d&socket={}",
                long.replace('/', "%2F")
            ),
        ] {
            let e = member(&path, "").expect_err(&path);
            assert_eq!(e.kind(), Some(ErrorKind::MemberPath), "{e}");
            let text = e.to_string();
            assert!(
                text.contains("is 108 bytes") && text.contains("at most 107"),
                "{text}"
            );
            assert!(
                text.contains("member \"a\"") && text.contains("t.toml:3:"),
                "{text}"
            );
        }
        let fits = format!("/{}", "s".repeat(106)); // 107 bytes
        assert!(member(&format!("nbd+unix:///x?socket={fits}"), "").is_ok());
        // A TCP URI's query has no socket to check.
        assert!(member(&format!("nbd://h/x?socket={long}"), "").is_ok());
    }
}
