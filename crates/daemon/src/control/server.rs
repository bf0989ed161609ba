//! Accepting control connections: the socket is created with mode 0600 (only the daemon's
//! user may operate it), a stale socket file left by a daemon that died is replaced, a live
//! one is refused. Each connection reads request lines (at most `MAX_LINE_BYTES`) and writes
//! one reply line each; a bad line gets an error reply, never a dropped daemon.
//!
//! A client holds a place only while it talks ([`ControlLimits`]): at most so many connections
//! at once, so idle clients cannot take the daemon's file descriptors, which NBD clients need
//! too. When all are taken, a new connection takes the place of the one that has waited
//! longest on its client (`places`: half-sent lines must not lock `nbraid fail` out); only
//! when every place runs a request or follows is it told `busy` and closed. A connection
//! that sends no request for a while, or stops in the middle of a line, is closed; a reply
//! the client does not read within a bound closes it too. `nbraid status --watch` and the passes' progress ask every
//! second or faster, and a followed `events` stream is not idle however quiet the daemon is:
//! only its writes are bounded.
//!
//! Such followers hold their place for as long as they like, so they get their own, smaller
//! cap ([`ControlLimits::followers_max`]): a connection becomes one when it asks for status
//! again after a first reply, or follows events ([`needs_follower_place`]), and one past the
//! cap is refused naming it. The places left over are always there for admin requests
//! (`fail`, `replace`, `remove`, `apply`'s status then reshape), however many dashboards
//! watch.

use super::controls::Controls;
use super::places::{Place, Places};
use crate::events::EventBus;
use anyhow::{bail, Context, Result};
use nbraid_control::{error_reply, ok_reply, parse, Refusal, Request, MAX_LINE_BYTES};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::Semaphore;
use tokio::time::timeout;

/// How long a control client may hold its place (see the module).
#[derive(Clone, Copy, Debug)]
pub struct ControlLimits {
    /// Connections served at once; one more is answered `busy` and closed.
    pub connections_max: usize,
    /// Of those, followers (watchers, followed events and passes) at once; below
    /// `connections_max`, so the rest stay for one-shot requests.
    pub followers_max: usize,
    /// How long a connection may wait with no byte of a next request.
    pub idle_timeout: Duration,
    /// How long a request line may take from its first byte to its newline.
    pub line_timeout: Duration,
    /// How long a reply (or a followed event) may wait for the client to take it.
    pub write_timeout: Duration,
}

impl Default for ControlLimits {
    fn default() -> ControlLimits {
        ControlLimits {
            // Far more than operators and their scripts open; far fewer than the descriptors
            // NBD's own `max_connections` needs.
            connections_max: 64,
            // 16 places no follower can take: admin commands get through any fleet of
            // dashboards.
            followers_max: 48,
            idle_timeout: Duration::from_secs(60),
            line_timeout: Duration::from_secs(10),
            write_timeout: Duration::from_secs(10),
        }
    }
}

pub struct ControlServer {
    listener: UnixListener,
    path: PathBuf,
    /// The socket this server bound (device, inode): what it removes when it stops, and
    /// nothing else put at the path since.
    bound_inode: Option<(u64, u64)>,
    /// What `events` reads and follows (none: `events` is refused).
    events: Option<Arc<EventBus>>,
    limits: ControlLimits,
}

impl ControlServer {
    /// Binds the control socket at `path` (mode 0600).
    pub fn bind(path: &Path) -> Result<ControlServer> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).with_context(|| {
                format!("creating the control socket's directory {}", dir.display())
            })?;
        }
        if let Ok(found) = std::fs::symlink_metadata(path) {
            // Only a stale socket is replaced: a control path mistyped onto a member or any
            // other file must never remove it.
            if !found.file_type().is_socket() {
                bail!(
                    "control socket {}: the path holds a file that is not a socket; nbraidd replaces only a stale socket there (set [daemon] control to a free path)",
                    path.display()
                );
            }
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
        let bound_inode = std::fs::symlink_metadata(path)
            .ok()
            .map(|m| (m.dev(), m.ino()));
        Ok(ControlServer {
            listener,
            path: path.to_path_buf(),
            bound_inode,
            events: None,
            limits: ControlLimits::default(),
        })
    }

    /// With the daemon's events, for `events` requests.
    pub fn with_events(mut self, events: Arc<EventBus>) -> ControlServer {
        self.events = Some(events);
        self
    }

    /// With other bounds than [`ControlLimits::default`] (tests use short ones).
    pub fn with_limits(mut self, limits: ControlLimits) -> ControlServer {
        self.limits = limits;
        self
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Serves connections until the task is dropped.
    pub async fn serve(self, controls: Arc<Controls>) {
        let places = Places::new(self.limits.connections_max);
        let follower_places = Arc::new(Semaphore::new(self.limits.followers_max));
        let mut backoff = nbraid_nbd::AcceptBackoff::new();
        let mut busy_warned: Option<std::time::Instant> = None;
        loop {
            let stream = match self.listener.accept().await {
                Ok((stream, _)) => stream,
                Err(e) => {
                    let what = format!("the control socket {}", self.path.display());
                    backoff.pause_after(&what, &e).await;
                    continue;
                }
            };
            backoff.succeeded();
            let Some(place) = places.admit() else {
                refuse_busy(&stream, self.limits.connections_max);
                if busy_warned.is_none_or(|t| t.elapsed() >= Duration::from_secs(10)) {
                    busy_warned = Some(std::time::Instant::now());
                    tracing::warn!(
                        "control socket {}: {} connections open, none free to give its place up (each runs a request, follows, or is closing), a new one refused",
                        self.path.display(),
                        self.limits.connections_max
                    );
                }
                continue; // dropped: closed
            };
            let served = Served {
                controls: controls.clone(),
                events: self.events.clone(),
                followers: follower_places.clone(),
                limits: self.limits,
            };
            tokio::spawn(async move {
                if let Err(e) = connection(stream, place, served).await {
                    tracing::debug!("control connection: {e}");
                }
            });
        }
    }
}

/// What a connection's task serves with.
struct Served {
    controls: Arc<Controls>,
    events: Option<Arc<EventBus>>,
    /// The followers' places ([`ControlLimits::followers_max`]).
    followers: Arc<Semaphore>,
    limits: ControlLimits,
}

/// Tells a client beyond the cap why it is closed.
fn refuse_busy(stream: &UnixStream, max: usize) {
    let refusal = Refusal::new(
        "busy",
        format!("the control socket serves at most {max} connections at once, and none can give its place up now (each runs a request, follows, or is closing); try again"),
    );
    say_and_close(stream, &refusal);
}

/// Tells a client waiting on its side that its place went to a new connection.
fn say_given_up(w: &OwnedWriteHalf, max: usize) {
    let refusal = Refusal::new(
        "busy",
        format!("closed to give its place to a new connection: all {max} places of the control socket were taken and this connection had waited longest on its client"),
    );
    say_and_close(w.as_ref(), &refusal);
}

/// Writes `refusal` without waiting: a send buffer with room takes one short line, and if it
/// has none the close says enough.
fn say_and_close(stream: &UnixStream, refusal: &Refusal) {
    let mut out = error_reply(refusal).to_string().into_bytes();
    out.push(b'\n');
    let _ = stream.try_write(&out);
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        let now = std::fs::symlink_metadata(&self.path).ok();
        if now.is_some_and(|m| Some((m.dev(), m.ino())) == self.bound_inode) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Whether a connection asking `req` after `answered` replies is a follower from now on: it
/// follows events, or polls status after a first reply (a watcher, a scrub or rebuild
/// followed) and so keeps its place. An admin command's few requests (`apply`: status,
/// then a reshape per volume) are not following.
pub(super) fn needs_follower_place(answered: u64, req: &Request) -> bool {
    match req {
        Request::Events { follow } => *follow,
        Request::Status { .. } => answered >= 1,
        _ => false,
    }
}

/// Why a would-be follower is closed: the followers' cap is reached.
fn followers_refusal(limits: &ControlLimits) -> Refusal {
    Refusal::new(
        "busy",
        format!(
            "the control socket serves at most {} followers at once (status --watch, events --follow, a pass followed); the other {} places are kept for one-shot requests. Close a watcher, or try again",
            limits.followers_max,
            limits.connections_max.saturating_sub(limits.followers_max)
        ),
    )
}

/// One request line read ([`next_line`]), or why there is none.
enum Line {
    /// In the buffer, newline included (but at the end of the stream).
    Read,
    /// The client closed its side between requests.
    Closed,
    /// Longer than `MAX_LINE_BYTES`: the rest cannot be told from the next request.
    TooLong,
    /// No request, or no end of one, in time: what to tell the client.
    TimedOut(String),
}

/// The next request line into `line` (cleared first), within `limits`.
async fn next_line(
    reader: &mut BufReader<OwnedReadHalf>,
    line: &mut Vec<u8>,
    limits: &ControlLimits,
) -> std::io::Result<Line> {
    line.clear();
    // Idle until a first byte comes; from then on the line has its own, shorter bound.
    match timeout(limits.idle_timeout, reader.fill_buf()).await {
        Err(_) => {
            return Ok(Line::TimedOut(format!(
                "no request for {} s: the connection is closed",
                limits.idle_timeout.as_secs_f64()
            )))
        }
        Ok(Err(e)) => return Err(e),
        Ok(Ok([])) => return Ok(Line::Closed),
        Ok(Ok(_)) => {}
    }
    let mut limited = (&mut *reader).take(MAX_LINE_BYTES as u64);
    let n = match timeout(limits.line_timeout, limited.read_until(b'\n', line)).await {
        Err(_) => {
            return Ok(Line::TimedOut(format!(
                "a request line unfinished after {} s: the connection is closed",
                limits.line_timeout.as_secs_f64()
            )))
        }
        Ok(n) => n?,
    };
    Ok(match line.last() != Some(&b'\n') && n == MAX_LINE_BYTES {
        true => Line::TooLong,
        false => Line::Read,
    })
}

/// Writes `reply` as one line, failing with `TimedOut` if the client has not taken it within
/// `limits.write_timeout` (a client that never reads must not hold its task and place).
async fn send(
    w: &mut OwnedWriteHalf,
    reply: &serde_json::Value,
    limits: &ControlLimits,
) -> std::io::Result<()> {
    let mut out = reply.to_string().into_bytes();
    out.push(b'\n');
    match timeout(limits.write_timeout, w.write_all(&out)).await {
        Ok(written) => written,
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!(
                "the client took no reply for {} s",
                limits.write_timeout.as_secs_f64()
            ),
        )),
    }
}

async fn connection(stream: UnixStream, place: Place, served: Served) -> std::io::Result<()> {
    let (r, mut w) = stream.into_split();
    let mut reader = BufReader::new(r);
    let mut line = Vec::new();
    let mut answered: u64 = 0;
    let limits = &served.limits;
    // Held from the request that makes this connection a follower until it closes.
    let mut follower_place = None;
    // Waiting from its admission on (stamped then, not when this task first runs: the
    // longest-waiting is the first admitted); again after each request.
    loop {
        let read = tokio::select! {
            read = next_line(&mut reader, &mut line, limits) => read?,
            () = place.told_to_give_up() => {
                say_given_up(&w, limits.connections_max);
                return Ok(());
            }
        };
        match last_words(read) {
            Ok(()) => {}
            Err(None) => return Ok(()),
            Err(Some(refusal)) => return send(&mut w, &error_reply(&refusal), limits).await,
        }
        let parsed = request_of(&line);
        if follower_place.is_none()
            && matches!(&parsed, Ok(req) if needs_follower_place(answered, req))
        {
            let Ok(p) = served.followers.clone().try_acquire_owned() else {
                tracing::debug!("control socket: a follower past the cap refused");
                return send(&mut w, &error_reply(&followers_refusal(limits)), limits).await;
            };
            follower_place = Some(p);
            place.following();
        }
        if !place.working() {
            say_given_up(&w, limits.connections_max);
            return Ok(());
        }
        answered += u64::from(!is_blank(&line));
        let handled = match parsed {
            Ok(Request::Events { follow }) => match &served.events {
                Some(bus) if follow => return follow_events(bus, reader, w, limits).await,
                Some(bus) => Ok(events_reply(&bus.follow().0)),
                None => Err(Refusal::new("unsupported", "this daemon keeps no events")),
            },
            Ok(req) => served.controls.handle(req).await,
            Err(r) => Err(r),
        };
        let reply = handled.unwrap_or_else(|r| error_reply(&r));
        place.waiting();
        tokio::select! {
            sent = send(&mut w, &reply, limits) => sent?,
            () = place.told_to_give_up() => return Err(std::io::Error::other(
                "its place given to a new connection while its reply waited to be taken",
            )),
        }
    }
}

/// The request on `line`. A blank line is answered like any bad one: a client that sent only
/// a newline waits for a reply.
fn request_of(line: &[u8]) -> Result<Request, Refusal> {
    match is_blank(line) {
        true => Err(Refusal::new(
            "malformed",
            "an empty request line: a request is one JSON object on one line",
        )),
        false => parse(line),
    }
}

fn is_blank(line: &[u8]) -> bool {
    line.iter().all(u8::is_ascii_whitespace)
}

/// Whether the connection goes on after `read`: `Err(None)` the client closed, `Err(Some)`
/// what to tell it before closing.
fn last_words(read: Line) -> Result<(), Option<Refusal>> {
    match read {
        Line::Read => Ok(()),
        Line::Closed => Err(None),
        Line::TooLong => Err(Some(Refusal::new(
            "malformed",
            format!("request line longer than {MAX_LINE_BYTES} bytes"),
        ))),
        Line::TimedOut(why) => Err(Some(Refusal::new("timeout", why))),
    }
}

fn events_reply(events: &[crate::events::Event]) -> serde_json::Value {
    let list: Vec<_> = events.iter().map(|e| e.to_json()).collect();
    ok_reply(serde_json::json!({ "events": list }))
}

/// `events` with `follow`: the reply with the events kept so far, then one line per event
/// until the client closes its side (or stops reading and falls too far behind: then a
/// `lagged` line says how many it missed; one that takes no line within the write timeout
/// is closed).
async fn follow_events(
    bus: &EventBus,
    mut reader: BufReader<OwnedReadHalf>,
    mut w: OwnedWriteHalf,
    limits: &ControlLimits,
) -> std::io::Result<()> {
    use tokio::sync::broadcast::error::RecvError;
    let (kept, mut rx) = bus.follow();
    let mut first = events_reply(&kept);
    first["following"] = true.into();
    send(&mut w, &first, limits).await?;
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
        send(&mut w, &line, limits).await?;
    }
}

#[cfg(test)]
#[path = "server_tests.rs"]
mod tests;
