//! What `[daemon]` says about running as a service: the program run on each event
//! (`on_event`, like mdadm's PROGRAM) and the Prometheus listener (`metrics_listen`).

use super::error::{ErrorKind, Problem};
use super::raw::RawDaemon;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};

/// `[daemon] on_event` and `metrics_listen`, resolved.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServiceSettings {
    /// A program run with each event's fields in its environment (`NBRAID_EVENT`, ...);
    /// resolved against the config's directory.
    pub on_event: Option<PathBuf>,
    /// Where `/metrics` is served (Prometheus text format); `None`: not served.
    pub metrics_listen: Option<SocketAddr>,
}

const METRICS_HELP: &str =
    "give \"HOST:PORT\" (\"127.0.0.1:9187\"), or a port alone for loopback (\"9187\")";

/// `metrics_listen` as written: `HOST:PORT`, `[V6]:PORT`, or a port alone (loopback).
pub fn parse_metrics_listen(text: &str) -> Result<SocketAddr, String> {
    if let Ok(port) = text.parse::<u16>() {
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port));
    }
    text.parse::<SocketAddr>()
        .map_err(|_| format!("\"{text}\" is not an address; {METRICS_HELP}"))
}

pub(super) fn resolve(raw: Option<&RawDaemon>, base: &Path) -> Result<ServiceSettings, Problem> {
    let Some(raw) = raw else {
        return Ok(ServiceSettings::default());
    };
    let metrics_listen = match &raw.metrics_listen {
        None => None,
        Some(t) => Some(parse_metrics_listen(t.get_ref()).map_err(|why| {
            Problem::new(
                t.span(),
                ErrorKind::Listen,
                format!("daemon: metrics_listen {why}"),
            )
        })?),
    };
    let on_event = match &raw.on_event {
        None => None,
        Some(p) => {
            let path = base.join(p.get_ref());
            executable(&path).map_err(|why| {
                Problem::new(
                    p.span(),
                    ErrorKind::Option,
                    format!("daemon: on_event \"{}\": {why}", p.get_ref()),
                )
            })?;
            Some(path)
        }
    };
    Ok(ServiceSettings {
        on_event,
        metrics_listen,
    })
}

/// Whether `path` is a program the daemon can run (said at load, not at the first event).
fn executable(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let m =
        std::fs::metadata(path).map_err(|e| format!("{} cannot be read: {e}", path.display()))?;
    if !m.is_file() {
        return Err(format!("{} is not a file", path.display()));
    }
    if m.permissions().mode() & 0o111 == 0 {
        return Err(format!(
            "{} is not executable (chmod +x it)",
            path.display()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_listen_takes_an_address_or_a_loopback_port() {
        assert_eq!(
            parse_metrics_listen("9187"),
            Ok("127.0.0.1:9187".parse().unwrap())
        );
        assert_eq!(
            parse_metrics_listen("[::1]:9100"),
            Ok("[::1]:9100".parse().unwrap())
        );
        assert!(parse_metrics_listen("localhost")
            .unwrap_err()
            .contains("HOST:PORT"));
    }
}
