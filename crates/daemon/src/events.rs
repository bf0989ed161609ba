//! Events: the state changes an operator must hear of, one value each. The [`EventBus`]
//! logs each as one structured line, keeps the latest for `nbraid events`, streams them to
//! followers (`nbraid events --follow`) and hands them to an [`EventSink`] (the `on_event`
//! hook, `service::hook`).
//!
//! It sits below both `control` (which answers `nbraid events`) and `service` (which
//! publishes and runs the hook), and imports neither: the hook is reached through the
//! [`EventSink`] trait, so no module needs the other's to know what an event is.

use parking_lot::Mutex;
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::time::{SystemTime, UNIX_EPOCH};
use tokio::sync::broadcast;

/// What happened. Names (`member-failed`) are the `event` field of the JSON, the log line
/// and the hook's `NBRAID_EVENT`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// A member was marked failed (an I/O error, `nbraid fail`, or missing at start).
    MemberFailed,
    /// A failed remote member is not answering (its server is down or out of reach).
    MemberUnreachable,
    /// A failed member serves again in its role (a remote member re-added).
    MemberBack,
    /// A spare (or a replacement) took a role: `member` is the newcomer.
    SpareActive,
    /// Some member is failed; every byte is still readable.
    VolumeDegraded,
    /// More members failed than the volume tolerates: some data cannot be read.
    VolumeFailed,
    /// Every member serves again.
    VolumeOptimal,
    RebuildStarted,
    RebuildFinished,
    ResyncStarted,
    ResyncFinished,
    ScrubStarted,
    ScrubFinished,
    /// A volume started (or resumed) moving into a new shape (`nbraid apply`).
    ReshapeStarted,
    /// The move ended: done (the new shape serves, with its size), paused, cancelled or failed.
    ReshapeFinished,
    /// A scrub found copies or parity that disagreed with the data.
    MismatchesFound,
    /// A member answered write errors and was kept, not failed: the volume cannot do
    /// without it while it reads (RAID 0, JBOD, a last copy). `count`: the errors so far.
    WriteErrorsKept,
    /// A member went past its bad-block limit and was kept: it holds the only readable copy
    /// of some data.
    KeptPastBadBlockLimit,
    /// A file member's path no longer names the file it serves from (deleted, moved, made to
    /// name another file): the next start will not find it.
    MemberPathLost,
    /// A flush could not write the write-back cache's bytes to the members: acknowledged
    /// writes held in memory only. `count`: the flushes refused so far.
    DestageFailed,
    /// The config was read again (SIGHUP): what changed live, what waits for a restart.
    ConfigReloaded,
    /// The config was read again but no longer loads: nothing changed.
    ConfigRefused,
}

impl EventKind {
    pub fn name(self) -> &'static str {
        match self {
            EventKind::MemberFailed => "member-failed",
            EventKind::MemberUnreachable => "member-unreachable",
            EventKind::MemberBack => "member-back",
            EventKind::SpareActive => "spare-active",
            EventKind::VolumeDegraded => "volume-degraded",
            EventKind::VolumeFailed => "volume-failed",
            EventKind::VolumeOptimal => "volume-optimal",
            EventKind::RebuildStarted => "rebuild-started",
            EventKind::RebuildFinished => "rebuild-finished",
            EventKind::ResyncStarted => "resync-started",
            EventKind::ResyncFinished => "resync-finished",
            EventKind::ScrubStarted => "scrub-started",
            EventKind::ScrubFinished => "scrub-finished",
            EventKind::ReshapeStarted => "reshape-started",
            EventKind::ReshapeFinished => "reshape-finished",
            EventKind::MismatchesFound => "mismatches-found",
            EventKind::WriteErrorsKept => "write-errors-kept",
            EventKind::KeptPastBadBlockLimit => "kept-past-bad-block-limit",
            EventKind::MemberPathLost => "member-path-lost",
            EventKind::DestageFailed => "destage-failed",
            EventKind::ConfigReloaded => "config-reloaded",
            EventKind::ConfigRefused => "config-refused",
        }
    }

    /// Whether the event asks for the operator's attention (logged as a warning).
    pub fn is_alarm(self) -> bool {
        matches!(
            self,
            EventKind::MemberFailed
                | EventKind::MemberUnreachable
                | EventKind::VolumeDegraded
                | EventKind::VolumeFailed
                | EventKind::MismatchesFound
                | EventKind::WriteErrorsKept
                | EventKind::KeptPastBadBlockLimit
                | EventKind::MemberPathLost
                | EventKind::DestageFailed
                | EventKind::ConfigRefused
        )
    }
}

/// One event: what, on which volume (`-` for the daemon's own: a reload), which member
/// (its config id, or the id given to one added at run time), and a sentence for people.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    pub kind: EventKind,
    pub volume: String,
    pub member: Option<String>,
    /// The members `member`'s replacements replace (a replace's pass), if any.
    pub replaces: Option<String>,
    /// The outcome of a finished pass (`done`, `cancelled`, `failed`), if any.
    pub result: Option<String>,
    /// What a counting event counts so far (write errors, refused flushes), if any.
    pub count: Option<u64>,
    pub detail: String,
    /// Milliseconds since the Unix epoch, set when published.
    pub time_unix_ms: u64,
}

impl Event {
    pub fn new(kind: EventKind, volume: &str, detail: impl Into<String>) -> Event {
        Event {
            kind,
            volume: volume.to_string(),
            member: None,
            replaces: None,
            result: None,
            count: None,
            detail: detail.into(),
            time_unix_ms: 0,
        }
    }

    pub fn member(mut self, id: &str) -> Event {
        self.member = Some(id.to_string());
        self
    }

    pub fn replaces(mut self, ids: &str) -> Event {
        self.replaces = Some(ids.to_string());
        self
    }

    pub fn result(mut self, result: &str) -> Event {
        self.result = Some(result.to_string());
        self
    }

    pub fn count(mut self, count: u64) -> Event {
        self.count = Some(count);
        self
    }

    pub fn to_json(&self) -> Value {
        json!({
            "event": self.kind.name(),
            "volume": self.volume,
            "member": self.member,
            "replaces": self.replaces,
            "result": self.result,
            "count": self.count,
            "detail": self.detail,
            "time_unix_ms": self.time_unix_ms,
        })
    }

    /// The environment the hook runs with (`NBRAID_EVENT`, `NBRAID_VOLUME`, ...); absent
    /// fields are left out.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        let mut env = vec![
            ("NBRAID_EVENT", self.kind.name().to_string()),
            ("NBRAID_VOLUME", self.volume.clone()),
            ("NBRAID_DETAIL", self.detail.clone()),
            ("NBRAID_TIME_UNIX_MS", self.time_unix_ms.to_string()),
        ];
        if let Some(m) = &self.member {
            env.push(("NBRAID_MEMBER", m.clone()));
        }
        if let Some(r) = &self.replaces {
            env.push(("NBRAID_REPLACES", r.clone()));
        }
        if let Some(r) = &self.result {
            env.push(("NBRAID_RESULT", r.clone()));
        }
        if let Some(n) = self.count {
            env.push(("NBRAID_COUNT", n.to_string()));
        }
        env
    }
}

/// Events kept for `nbraid events` without `--follow`.
pub const HISTORY_LEN: usize = 256;

/// Where the bus hands each event besides the log, the history and the followers (the
/// `on_event` hook). `offer` must never wait: publishing happens on the daemon's tasks.
pub trait EventSink: Send + Sync {
    fn offer(&self, event: &Event);
}

/// Where events are published: the log, the history, the followers, the hook.
pub struct EventBus {
    history: Mutex<VecDeque<Event>>,
    followers: broadcast::Sender<Event>,
    /// Swapped by a reload; the old queue's task ends once it has run what it holds.
    hook: Mutex<Option<Box<dyn EventSink>>>,
}

impl EventBus {
    pub fn new<S: EventSink + 'static>(hook: Option<S>) -> EventBus {
        let bus = EventBus::unhooked();
        bus.set_hook(hook);
        bus
    }

    /// A bus that hands events to no hook.
    pub fn unhooked() -> EventBus {
        EventBus {
            history: Mutex::new(VecDeque::new()),
            followers: broadcast::channel(HISTORY_LEN).0,
            hook: Mutex::new(None),
        }
    }

    /// Hands later events to `hook` instead (a reload changed `on_event`).
    pub fn set_hook<S: EventSink + 'static>(&self, hook: Option<S>) {
        *self.hook.lock() = hook.map(|h| Box::new(h) as Box<dyn EventSink>);
    }

    /// Logs `event` as one line, keeps it and hands it on. Never waits.
    pub fn publish(&self, mut event: Event) {
        event.time_unix_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        log(&event);
        if let Some(hook) = &*self.hook.lock() {
            hook.offer(&event);
        }
        let mut history = self.history.lock();
        if history.len() == HISTORY_LEN {
            history.pop_front();
        }
        history.push_back(event.clone());
        // Under the history's lock: a follower that took the history and subscribed under
        // it neither misses this event nor sees it twice.
        let _ = self.followers.send(event);
    }

    /// The events kept so far, and a subscription to every later one.
    pub fn follow(&self) -> (Vec<Event>, broadcast::Receiver<Event>) {
        let history = self.history.lock();
        (
            history.iter().cloned().collect(),
            self.followers.subscribe(),
        )
    }
}

/// The event's one log line, its fields structured (`event=member-failed volume=db ...`).
fn log(e: &Event) {
    let member = e.member.as_deref().unwrap_or("-");
    let result = e.result.as_deref().unwrap_or("-");
    if e.kind.is_alarm() {
        tracing::warn!(event = %e.kind.name(), volume = %e.volume, member = %member, result = %result, "{}", e.detail);
    } else {
        tracing::info!(event = %e.kind.name(), volume = %e.volume, member = %member, result = %result, "{}", e.detail);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn followers_get_the_history_then_every_later_event_once() {
        let bus = EventBus::unhooked();
        bus.publish(Event::new(EventKind::MemberFailed, "db", "x").member("d1"));
        let (history, mut rx) = bus.follow();
        assert_eq!(history.len(), 1);
        bus.publish(Event::new(EventKind::VolumeDegraded, "db", "y"));
        let next = rx.try_recv().unwrap();
        assert_eq!(next.kind, EventKind::VolumeDegraded);
        assert!(rx.try_recv().is_err());
        assert!(next.time_unix_ms > 0);
    }

    #[test]
    fn the_hook_environment_names_the_event_and_its_member() {
        let e = Event::new(EventKind::RebuildFinished, "db", "done")
            .member("d1")
            .result("done");
        let env = e.env();
        assert!(env.contains(&("NBRAID_EVENT", "rebuild-finished".into())));
        assert!(env.contains(&("NBRAID_MEMBER", "d1".into())));
        assert!(env.contains(&("NBRAID_RESULT", "done".into())));
        assert!(!env.iter().any(|(k, _)| *k == "NBRAID_COUNT"));
        let e = Event::new(EventKind::WriteErrorsKept, "db", "x").count(4);
        assert!(e.env().contains(&("NBRAID_COUNT", "4".into())));
        assert_eq!(e.to_json()["count"], 4);
    }
}
