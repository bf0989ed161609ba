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

    fn config(dir: &Path, daemon_keys: &str) -> Result<crate::Config, crate::ConfigError> {
        let text = format!(
            "[daemon]\n{daemon_keys}\n[[member]]\nid = \"a\"\npath = \"memory:\"\nsize = \"8MiB\"\n\
             [[volume]]\nname = \"v\"\nlevel = \"jbod\"\nmembers = [\"a\"]\n"
        );
        crate::parse(&text, &dir.join("arrays.toml"))
    }

    #[test]
    fn on_event_must_name_a_program_beside_the_config_or_elsewhere() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let err = config(dir.path(), "on_event = \"hook.sh\"")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("daemon: on_event \"hook.sh\"") && err.contains("cannot be read"),
            "{err}"
        );
        let hook = dir.path().join("hook.sh");
        std::fs::write(&hook, "#!/bin/sh\n").unwrap();
        let err = config(dir.path(), "on_event = \"hook.sh\"")
            .unwrap_err()
            .to_string();
        assert!(err.contains("not executable"), "{err}");
        std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
        let c = config(
            dir.path(),
            "on_event = \"hook.sh\"\nmetrics_listen = \"9187\"",
        )
        .unwrap();
        assert_eq!(c.service.on_event, Some(hook));
        assert_eq!(
            c.service.metrics_listen,
            Some("127.0.0.1:9187".parse().unwrap())
        );
        let err = config(dir.path(), "metrics_listen = \"somewhere\"")
            .unwrap_err()
            .to_string();
        assert!(err.contains("daemon: metrics_listen"), "{err}");
    }
}
