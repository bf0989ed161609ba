//! Accepting control connections: the socket is created with mode 0600 (only the daemon's
//! user may operate it), a stale socket file left by a daemon that died is replaced, a live
//! one is refused. Each connection reads request lines (at most `MAX_LINE_BYTES`) and writes
//! one reply line each; a bad line gets an error reply, never a dropped daemon.

use super::controls::Controls;
use crate::events::EventBus;
use anyhow::{bail, Context, Result};
use nbraid_control::{error_reply, ok_reply, parse, Refusal, Request, MAX_LINE_BYTES};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};

pub struct ControlServer {
    listener: UnixListener,
    path: PathBuf,
    /// What `events` reads and follows (none: `events` is refused).
    events: Option<Arc<EventBus>>,
}

impl ControlServer {
    /// Binds the control socket at `path` (mode 0600).
    pub fn bind(path: &Path) -> Result<ControlServer> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).with_context(|| {
                format!("creating the control socket's directory {}", dir.display())
            })?;
        }
        if path.exists() {
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                bail!(
                    "control socket {} is in use: another nbraidd serves this config",
                    path.display()
                );
            }
            std::fs::remove_file(path)
                .with_context(|| format!("removing the stale control socket {}", path.display()))?;
        }
        // No moment at which others could connect: the socket is born 0600.
        // SAFETY: umask only swaps the process's file mode mask; it cannot fail.
        let old = unsafe { libc::umask(0o177) };
        let bound = UnixListener::bind(path);
        // SAFETY: as above, restoring the previous mask.
        unsafe { libc::umask(old) };
        let listener =
            bound.with_context(|| format!("binding the control socket {}", path.display()))?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
            .with_context(|| format!("setting the mode of {}", path.display()))?;
        Ok(ControlServer {
            listener,
            path: path.to_path_buf(),
            events: None,
        })
    }

    /// With the daemon's events, for `events` requests.
    pub fn with_events(mut self, events: Arc<EventBus>) -> ControlServer {
        self.events = Some(events);
        self
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Serves connections until the task is dropped.
    pub async fn serve(self, controls: Arc<Controls>) {
        loop {
            match self.listener.accept().await {
                Ok((stream, _)) => {
                    let c = controls.clone();
                    let events = self.events.clone();
                    tokio::spawn(async move {
                        if let Err(e) = connection(stream, c, events).await {
                            tracing::debug!("control connection: {e}");
                        }
                    });
                }
                Err(e) => {
                    tracing::warn!("control socket accept: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            }
        }
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

async fn connection(
    stream: UnixStream,
    controls: Arc<Controls>,
    events: Option<Arc<EventBus>>,
) -> std::io::Result<()> {
    let (r, mut w) = stream.into_split();
    let mut reader = BufReader::new(r);
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = (&mut reader)
            .take(MAX_LINE_BYTES as u64)
            .read_until(b'\n', &mut line)
            .await?;
        if n == 0 {
            return Ok(());
        }
        let too_long = line.last() != Some(&b'\n') && n == MAX_LINE_BYTES;
        let reply = if too_long {
            error_reply(&Refusal::new(
                "malformed",
                format!("request line longer than {MAX_LINE_BYTES} bytes"),
            ))
        } else if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        } else {
            let handled = match parse(&line) {
                Ok(Request::Events { follow }) => match &events {
                    Some(bus) if follow => return follow_events(bus, reader, w).await,
                    Some(bus) => Ok(events_reply(&bus.follow().0)),
                    None => Err(Refusal::new("unsupported", "this daemon keeps no events")),
                },
                Ok(req) => controls.handle(req).await,
                Err(r) => Err(r),
            };
            match handled {
                Ok(v) => v,
                Err(r) => error_reply(&r),
            }
        };
        let mut out = reply.to_string().into_bytes();
        out.push(b'\n');
        w.write_all(&out).await?;
        if too_long {
            // The rest of that line cannot be told from the next request.
            return Ok(());
        }
    }
}

fn events_reply(events: &[crate::events::Event]) -> serde_json::Value {
    let list: Vec<_> = events.iter().map(|e| e.to_json()).collect();
    ok_reply(serde_json::json!({ "events": list }))
}

/// `events` with `follow`: the reply with the events kept so far, then one line per event
/// until the client closes its side (or stops reading and falls too far behind: then a
/// `lagged` line says how many it missed).
async fn follow_events(
    bus: &EventBus,
    mut reader: BufReader<tokio::net::unix::OwnedReadHalf>,
    mut w: tokio::net::unix::OwnedWriteHalf,
) -> std::io::Result<()> {
    use tokio::sync::broadcast::error::RecvError;
    let (kept, mut rx) = bus.follow();
    let mut first = events_reply(&kept);
    first["following"] = true.into();
    let mut out = first.to_string().into_bytes();
    out.push(b'\n');
    w.write_all(&out).await?;
    let mut sink = [0u8; 256];
    loop {
        let line = tokio::select! {
            got = rx.recv() => match got {
                Ok(e) => {
                    let mut v = e.to_json();
                    v["v"] = nbraid_control::VERSION.into();
                    v
                }
                Err(RecvError::Lagged(n)) => serde_json::json!({"v": nbraid_control::VERSION, "lagged": n}),
                Err(RecvError::Closed) => return Ok(()),
            },
            read = reader.read(&mut sink) => match read? {
                0 => return Ok(()),
                _ => continue, // nothing more is asked on a followed connection
            },
        };
        let mut out = line.to_string().into_bytes();
        out.push(b'\n');
        w.write_all(&out).await?;
    }
}
