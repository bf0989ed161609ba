//! systemd's notification protocol (`sd_notify(3)`): datagrams such as `READY=1` sent to the
//! socket `$NOTIFY_SOCKET` names (a path, or `@name` for an abstract socket). Without that
//! variable (not started by systemd with `Type=notify`) nothing is sent. Sending never fails
//! the daemon: a supervisor that went away is said at debug level.

use std::os::unix::net::UnixDatagram;
use std::sync::Arc;
use std::time::Duration;

/// Where notifications go, if anywhere.
pub struct Notifier {
    target: Option<(UnixDatagram, std::os::unix::net::SocketAddr)>,
}

impl Notifier {
    /// The notifier `$NOTIFY_SOCKET` asks for, or a silent one. The variable is removed so
    /// that programs the daemon runs (the event hook) cannot speak for it.
    pub fn from_env() -> Notifier {
        let Some(name) = std::env::var_os("NOTIFY_SOCKET") else {
            return Notifier { target: None };
        };
        std::env::remove_var("NOTIFY_SOCKET");
        let target = notify_address(&name.to_string_lossy()).and_then(|addr| {
            let sock = UnixDatagram::unbound().ok()?;
            Some((sock, addr))
        });
        if target.is_none() {
            tracing::warn!("NOTIFY_SOCKET {name:?} is not a usable socket address: systemd will not hear that nbraidd is ready");
        }
        Notifier { target }
    }

    /// Sends `state` (newline-separated `KEY=value` lines).
    pub fn send(&self, state: &str) {
        if let Some((sock, addr)) = &self.target {
            if let Err(e) = sock.send_to_addr(state.as_bytes(), addr) {
                tracing::debug!("sd_notify {state:?}: {e}");
            }
        }
    }

    /// `READY=1` with a status line.
    pub fn ready(&self, status: &str) {
        self.send(&format!("READY=1\nSTATUS={}", one_line(status)));
    }

    pub fn status(&self, status: &str) {
        self.send(&format!("STATUS={}", one_line(status)));
    }

    pub fn stopping(&self, status: &str) {
        self.send(&format!("STOPPING=1\nSTATUS={}", one_line(status)));
    }

    pub fn watchdog(&self) {
        self.send("WATCHDOG=1");
    }
}

/// A status text as one line (a newline would start a bogus `KEY=value`).
fn one_line(s: &str) -> String {
    s.replace(['\n', '\r'], " ")
}

/// The socket address `$NOTIFY_SOCKET` names: a path, or `@name` for an abstract socket.
fn notify_address(name: &str) -> Option<std::os::unix::net::SocketAddr> {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::SocketAddr;
    match name.strip_prefix('@') {
        Some(abstract_name) => SocketAddr::from_abstract_name(abstract_name.as_bytes()).ok(),
        None if name.starts_with('/') => SocketAddr::from_pathname(name).ok(),
        None => None,
    }
}

/// How often to send `WATCHDOG=1`: half the interval systemd set (`WATCHDOG_USEC`, for this
/// process when `WATCHDOG_PID` names one), as `sd_watchdog_enabled(3)` advises.
pub fn watchdog_interval(usec: Option<&str>, pid: Option<&str>, own_pid: u32) -> Option<Duration> {
    if let Some(pid) = pid {
        if pid.trim().parse::<u32>().ok()? != own_pid {
            return None;
        }
    }
    let usec: u64 = usec?.trim().parse().ok().filter(|&u| u > 0)?;
    Some(Duration::from_micros(usec / 2))
}

/// Pings the watchdog at the interval the environment asks for, if any, until the task is
/// dropped.
pub fn spawn_watchdog(notifier: &Arc<Notifier>) -> Option<tokio::task::JoinHandle<()>> {
    let every = watchdog_from_env()?;
    let n = notifier.clone();
    Some(tokio::spawn(async move {
        loop {
            n.watchdog();
            tokio::time::sleep(every).await;
        }
    }))
}

/// [`watchdog_interval`] from this process's environment.
pub fn watchdog_from_env() -> Option<Duration> {
    let usec = std::env::var("WATCHDOG_USEC").ok();
    let pid = std::env::var("WATCHDOG_PID").ok();
    watchdog_interval(usec.as_deref(), pid.as_deref(), std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watchdog_is_pinged_at_half_its_interval_for_this_process_only() {
        let half = Some(Duration::from_secs(15));
        assert_eq!(watchdog_interval(Some("30000000"), None, 7), half);
        assert_eq!(watchdog_interval(Some("30000000"), Some("7"), 7), half);
        assert_eq!(watchdog_interval(Some("30000000"), Some("8"), 7), None);
        assert_eq!(watchdog_interval(Some("0"), None, 7), None);
        assert_eq!(watchdog_interval(Some("soon"), None, 7), None);
        assert_eq!(watchdog_interval(None, None, 7), None);
    }

    #[test]
    fn notify_socket_names_a_path_or_an_abstract_socket() {
        assert!(notify_address("/run/systemd/notify").is_some());
        assert!(notify_address("@/org/freedesktop/systemd1/notify/1").is_some());
        assert!(notify_address("relative").is_none());
    }
}
