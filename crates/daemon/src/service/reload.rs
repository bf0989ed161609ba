//! Reload: SIGHUP (`systemctl reload`) reads the config again and applies what can change
//! while volumes are served — each volume's `rebuild_rate` (and the passes running at it),
//! its `spares`, the `on_event` hook, the `metrics_listen` listener — and says what it
//! changed and what waits for a restart (members, level, strip, size, policies, NBD
//! listeners, limits, TLS, the control socket): in the log, as a `config-reloaded` event,
//! and to systemd (`RELOADING=1` … `READY=1`). A config that no longer loads changes
//! nothing (a `config-refused` event says why).
//!
//! [`plan`] decides (a pure function of the config the daemon started with, the live
//! settings now, and the new config); [`Reloader::reload`] carries the plan out.

use super::hook::HookQueue;
use super::metrics::MetricsListener;
use super::notify::Notifier;
use crate::control::Controls;
use crate::events::{Event, EventBus, EventKind};
use nbraid_config::{self as config, Config};
use nbraid_control::Request;
use nbraid_core::PassRate;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

/// A spare as the config names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spare {
    pub id: String,
    pub path: PathBuf,
}

/// What of one volume may change while it is served.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveVolume {
    pub name: String,
    pub rebuild_rate: PassRate,
    pub spares: Vec<Spare>,
}

/// What of a config may change while the daemon serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Live {
    pub on_event: Option<PathBuf>,
    pub metrics_listen: Option<SocketAddr>,
    pub volumes: Vec<LiveVolume>,
}

impl Live {
    pub fn of(c: &Config) -> Live {
        let volumes = c
            .volumes
            .iter()
            .map(|v| LiveVolume {
                name: v.name.clone(),
                rebuild_rate: PassRate {
                    limit_bytes_per_s: v.heal.rebuild_rate_bytes_per_s,
                    adaptive: v.heal.rebuild_adaptive,
                },
                spares: v
                    .heal
                    .spares
                    .iter()
                    .map(|&m| Spare {
                        id: c.members[m].id.clone(),
                        path: c.members[m].path.clone(),
                    })
                    .collect(),
            })
            .collect();
        Live {
            on_event: c.service.on_event.clone(),
            metrics_listen: c.service.metrics_listen,
            volumes,
        }
    }

    fn volume(&self, name: &str) -> Option<&LiveVolume> {
        self.volumes.iter().find(|v| v.name == name)
    }
}

/// One change a reload makes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    RebuildRate { volume: String, rate: PassRate },
    AddSpare { volume: String, spare: Spare },
    RemoveSpare { volume: String, spare: Spare },
    Hook(Option<PathBuf>),
    Metrics(Option<SocketAddr>),
}

impl Change {
    pub fn describe(&self) -> String {
        match self {
            Change::RebuildRate { volume, rate } => {
                format!("{volume}: rebuild_rate now {}", rate_text(*rate))
            }
            Change::AddSpare { volume, spare } => format!("{volume}: spare {} added", spare.id),
            Change::RemoveSpare { volume, spare } => {
                format!("{volume}: spare {} removed", spare.id)
            }
            Change::Hook(Some(p)) => format!("on_event now runs {}", p.display()),
            Change::Hook(None) => "on_event: no hook any more".to_string(),
            Change::Metrics(Some(a)) => format!("metrics_listen now {a}"),
            Change::Metrics(None) => "metrics_listen: no listener any more".to_string(),
        }
    }
}

/// What a reload does: the changes to make, and what differs but needs a restart.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    pub changes: Vec<Change>,
    /// One sentence each: what differs and why it waits for a restart.
    pub at_restart: Vec<String>,
}

/// What reloading `new` does to a daemon that started with `started` and runs with `live`.
/// Live settings are compared with `live`; the rest with `started` (what the volumes were
/// assembled with), so a change that waits for a restart is said at every reload until then.
pub fn plan(started: &Config, live: &Live, new: &Config) -> Plan {
    let wanted = Live::of(new);
    let mut p = Plan::default();
    if wanted.on_event != live.on_event {
        p.changes.push(Change::Hook(wanted.on_event.clone()));
    }
    if wanted.metrics_listen != live.metrics_listen {
        p.changes.push(Change::Metrics(wanted.metrics_listen));
    }
    for w in &wanted.volumes {
        // A volume the daemon does not serve is said below; nothing of it is live.
        let Some(now) = live.volume(&w.name) else {
            continue;
        };
        if w.rebuild_rate != now.rebuild_rate {
            p.changes.push(Change::RebuildRate {
                volume: w.name.clone(),
                rate: w.rebuild_rate,
            });
        }
        for s in now.spares.iter().filter(|s| !w.spares.contains(s)) {
            p.changes.push(Change::RemoveSpare {
                volume: w.name.clone(),
                spare: s.clone(),
            });
        }
        for s in w.spares.iter().filter(|s| !now.spares.contains(s)) {
            p.changes.push(Change::AddSpare {
                volume: w.name.clone(),
                spare: s.clone(),
            });
        }
    }
    p.at_restart = at_restart(started, new);
    p
}

/// What differs between `started` and `new` that a running daemon cannot change.
fn at_restart(started: &Config, new: &Config) -> Vec<String> {
    let mut out = Vec::new();
    let restart = "takes effect at a restart";
    if started.listen != new.listen {
        out.push(format!("listen (the NBD listeners) {restart}"));
    }
    if started.tls != new.tls {
        out.push(format!("tls {restart}"));
    }
    if started.limits != new.limits {
        out.push(format!(
            "the server's limits (connections, in-flight memory, timeouts) {restart}"
        ));
    }
    if started.control != new.control {
        out.push(format!("control (the control socket) {restart}"));
    }
    for v in &new.volumes {
        match started.volumes.iter().find(|o| o.name == v.name) {
            None => out.push(format!("volume {} is new: a restart assembles it", v.name)),
            Some(o) => out.extend(volume_at_restart(started, o, new, v)),
        }
    }
    for o in &started.volumes {
        if !new.volumes.iter().any(|v| v.name == o.name) {
            out.push(format!(
                "volume {} is no longer in the config: it is served until a restart",
                o.name
            ));
        }
    }
    out
}

/// What differs in one volume that a running daemon cannot change.
fn volume_at_restart(
    started: &Config,
    old: &config::Volume,
    new: &Config,
    v: &config::Volume,
) -> Vec<String> {
    let name = &v.name;
    let mut out = Vec::new();
    let (old_ids, new_ids) = (old.member_ids(started), v.member_ids(new));
    let geometry = "the geometry is in the superblocks: a restart refuses a config that \
                    disagrees with them";
    if old_ids != new_ids {
        out.push(format!(
            "{name}: members [{}] → [{}]: a served volume's members change with `nbraid add`, \
             `replace` and `remove`; the config's list is read at a restart",
            old_ids.join(", "),
            new_ids.join(", ")
        ));
    } else {
        let moved: Vec<&str> = old
            .members
            .iter()
            .zip(&v.members)
            .filter(|(&a, &b)| {
                let (a, b) = (&started.members[a], &new.members[b]);
                a.path != b.path || a.size != b.size
            })
            .map(|(&a, _)| started.members[a].id.as_str())
            .collect();
        if !moved.is_empty() {
            out.push(format!(
                "{name}: the path or size of {} changed: members are opened at a restart",
                moved.join(", ")
            ));
        }
    }
    if old.kind_name() != v.kind_name() {
        out.push(format!(
            "{name}: level {} → {}: {geometry}",
            old.kind_name(),
            v.kind_name()
        ));
    } else if old_ids == new_ids && old.tree_text(started) != v.tree_text(new) {
        out.push(format!(
            "{name}: layout {} → {} (strip, tree): {geometry}",
            old.tree_text(started),
            v.tree_text(new)
        ));
    }
    if old.requested != v.requested || old.capacity() != v.capacity() {
        out.push(format!("{name}: size: {geometry}"));
    }
    let fields: [(&str, bool); 5] = [
        ("read_policy", old.read_policy != v.read_policy),
        ("cache", old.cache != v.cache),
        ("read_only", old.read_only != v.read_only),
        ("block_size", old.block_size != v.block_size),
        (
            "the metadata keys (create, bitmap_chunk, clean_delay, write_hole)",
            old.metadata != v.metadata,
        ),
    ];
    for (field, differs) in fields {
        if differs {
            out.push(format!("{name}: {field} takes effect at a restart"));
        }
    }
    out
}

/// A rate as the config writes it.
fn rate_text(rate: PassRate) -> String {
    match (rate.limit_bytes_per_s, rate.adaptive) {
        (0, false) => "unlimited".into(),
        (0, true) => "adaptive".into(),
        (r, false) => format!("{}/s", config::format_size(r)),
        (r, true) => format!("adaptive, at most {}/s", config::format_size(r)),
    }
}

/// The outcome of one reload, in words.
#[derive(Debug, Default)]
pub struct Outcome {
    pub changed: Vec<String>,
    /// Changes refused while being made (a spare that cannot be added, a port taken).
    pub failed: Vec<String>,
    pub at_restart: Vec<String>,
}

impl Outcome {
    /// One line for the log, the event and systemd.
    pub fn summary(&self) -> String {
        let mut parts = Vec::new();
        match self.changed.is_empty() {
            true => parts.push("nothing changed live".to_string()),
            false => parts.push(format!("changed: {}", self.changed.join("; "))),
        }
        if !self.failed.is_empty() {
            parts.push(format!("not changed: {}", self.failed.join("; ")));
        }
        if !self.at_restart.is_empty() {
            parts.push(format!(
                "waiting for a restart: {}",
                self.at_restart.join("; ")
            ));
        }
        parts.join(". ")
    }
}

/// What a reload works on: the daemon's volumes, events and metrics listener.
pub struct Reloader {
    pub file: PathBuf,
    pub started: Config,
    pub live: Live,
    pub controls: Arc<Controls>,
    pub events: Arc<EventBus>,
    pub metrics: MetricsListener,
    pub notifier: Arc<Notifier>,
}

impl Reloader {
    pub fn new(
        started: &Config,
        controls: &Arc<Controls>,
        events: Arc<EventBus>,
        metrics: MetricsListener,
        notifier: &Arc<Notifier>,
    ) -> Reloader {
        Reloader {
            file: started.file.clone(),
            live: Live::of(started),
            started: started.clone(),
            controls: controls.clone(),
            events,
            metrics,
            notifier: notifier.clone(),
        }
    }

    /// Reads the config again and applies it; what it did.
    pub async fn reload(&mut self) -> Result<Outcome, String> {
        // Read off the runtime's workers: the config and the members' superblocks are disk
        // reads, and the workers serve NBD meanwhile.
        let file = self.file.clone();
        let loaded = tokio::task::spawn_blocking(move || nbraid_assembly::pins::load(&file)).await;
        let new =
            (loaded.map_err(|e| format!("reading the config: {e}"))?).map_err(|e| e.to_string())?;
        let p = plan(&self.started, &self.live, &new);
        let mut out = Outcome {
            at_restart: p.at_restart,
            ..Outcome::default()
        };
        for c in p.changes {
            match self.apply(&c).await {
                Ok(()) => out.changed.push(c.describe()),
                Err(why) => out.failed.push(format!("{}: {why}", c.describe())),
            }
        }
        Ok(out)
    }

    /// Makes one change, and records it in [`Self::live`] once made.
    async fn apply(&mut self, c: &Change) -> Result<(), String> {
        let volume = |name: &str| {
            let vol = self.controls.volumes.iter().find(|v| v.name == name);
            vol.ok_or_else(|| format!("no volume {name}"))
        };
        match c {
            Change::RebuildRate { volume: name, rate } => {
                let v = volume(name)?;
                v.set_rebuild_rate(*rate);
                self.live_volume(name).rebuild_rate = *rate;
            }
            Change::AddSpare {
                volume: name,
                spare,
            } => {
                let req = Request::Add {
                    volume: name.clone(),
                    path: spare.path.display().to_string(),
                    force: false,
                };
                self.controls.handle(req).await.map_err(|r| r.message)?;
                self.live_volume(name).spares.push(spare.clone());
            }
            Change::RemoveSpare {
                volume: name,
                spare,
            } => {
                let req = Request::Remove {
                    volume: name.clone(),
                    member: spare.id.clone(),
                };
                self.controls.handle(req).await.map_err(|r| r.message)?;
                self.live_volume(name).spares.retain(|s| s != spare);
            }
            Change::Hook(program) => {
                self.events.set_hook(program.clone().map(HookQueue::start));
                self.live.on_event = program.clone();
            }
            Change::Metrics(addr) => {
                self.metrics
                    .move_to(*addr)
                    .await
                    .map_err(|e| format!("{e:#}"))?;
                self.live.metrics_listen = *addr;
            }
        }
        Ok(())
    }

    fn live_volume(&mut self, name: &str) -> &mut LiveVolume {
        let at = self.live.volumes.iter().position(|v| v.name == name);
        &mut self.live.volumes[at.expect("a volume the plan named is live")]
    }

    /// One reload as SIGHUP asks: systemd told (`RELOADING=1` … `READY=1` with the volumes'
    /// summary line), the outcome logged and published.
    pub async fn on_hangup(&mut self) {
        self.notifier
            .send(&format!("RELOADING=1\nMONOTONIC_USEC={}", monotonic_usec()));
        let file = self.file.display().to_string();
        match self.reload().await {
            Ok(out) => {
                let result = match (out.failed.is_empty(), out.changed.is_empty()) {
                    (false, _) => "partial",
                    (true, true) => "unchanged",
                    (true, false) => "applied",
                };
                let detail = format!("reloaded {file}: {}", out.summary());
                self.events
                    .publish(Event::new(EventKind::ConfigReloaded, "-", detail).result(result));
            }
            Err(why) => {
                let detail = format!("{file} no longer loads; nothing changed: {why}");
                self.events
                    .publish(Event::new(EventKind::ConfigRefused, "-", detail).result("refused"));
            }
        }
        self.notifier
            .ready(&super::observe::summary_of(&self.controls));
    }
}

/// `CLOCK_MONOTONIC` in microseconds, which `RELOADING=1` carries (systemd 253's
/// `Type=notify-reload` wants it; older ones ignore it).
fn monotonic_usec() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call's duration.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    if rc != 0 {
        return 0;
    }
    (ts.tv_sec as u64) * 1_000_000 + (ts.tv_nsec as u64) / 1_000
}

/// SIGHUP, installed (before the daemon says it is ready: unhandled, it would stop it).
pub fn hangup_signal() -> anyhow::Result<tokio::signal::unix::Signal> {
    use anyhow::Context;
    use tokio::signal::unix::{signal, SignalKind};
    signal(SignalKind::hangup()).context("installing the SIGHUP handler")
}

/// Reloads at every SIGHUP until the task is dropped.
pub async fn watch(mut hangup: tokio::signal::unix::Signal, mut reloader: Reloader) {
    while hangup.recv().await.is_some() {
        reloader.on_hangup().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    const BASE: &str = "[daemon]\nlisten = [\"unix:nbd.sock\"]\n\
        [[member]]\nid = \"d0\"\npath = \"memory:\"\nsize = \"64MiB\"\n\
        [[member]]\nid = \"d1\"\npath = \"memory:\"\nsize = \"64MiB\"\n\
        [[member]]\nid = \"d2\"\npath = \"memory:\"\nsize = \"64MiB\"\n\
        [[member]]\nid = \"s0\"\npath = \"memory:\"\nsize = \"64MiB\"\n\
        [[volume]]\nname = \"db\"\nlevel = \"raid5\"\nmembers = [\"d0\", \"d1\", \"d2\"]\n";

    fn parse(text: &str) -> Config {
        config::parse(text, Path::new("/etc/nbraid/t.toml")).unwrap()
    }

    fn plan_of(old: &str, new: &str) -> Plan {
        let old = parse(old);
        plan(&old, &Live::of(&old), &parse(new))
    }

    #[test]
    fn the_same_config_changes_nothing() {
        assert_eq!(plan_of(BASE, BASE), Plan::default());
    }

    #[test]
    fn a_new_rebuild_rate_is_live() {
        let new = format!("{BASE}rebuild_rate = \"200MiB\"\n");
        let p = plan_of(BASE, &new);
        assert_eq!(
            p.changes,
            [Change::RebuildRate {
                volume: "db".into(),
                rate: PassRate::limit(200 << 20)
            }]
        );
        assert!(p.at_restart.is_empty(), "{:?}", p.at_restart);
        assert_eq!(p.changes[0].describe(), "db: rebuild_rate now 200 MiB/s");
    }

    #[test]
    fn the_hook_and_the_metrics_listener_are_live() {
        let new = BASE.replace(
            "[daemon]\n",
            "[daemon]\nmetrics_listen = \"9187\"\non_event = \"/bin/true\"\n",
        );
        let p = plan_of(BASE, &new);
        assert_eq!(
            p.changes,
            [
                Change::Hook(Some("/bin/true".into())),
                Change::Metrics(Some("127.0.0.1:9187".parse().unwrap())),
            ]
        );
        assert!(p.at_restart.is_empty());
        let back = plan_of(&new, BASE);
        assert_eq!(back.changes, [Change::Hook(None), Change::Metrics(None)]);
    }

    #[test]
    fn spares_listed_or_unlisted_are_added_or_removed() {
        let with = format!("{BASE}spares = [\"s0\"]\n");
        let p = plan_of(BASE, &with);
        assert!(
            matches!(&p.changes[..], [Change::AddSpare { volume, spare }] if volume == "db" && spare.id == "s0"),
            "{:?}",
            p.changes
        );
        let p = plan_of(&with, BASE);
        assert!(
            matches!(&p.changes[..], [Change::RemoveSpare { spare, .. }] if spare.id == "s0"),
            "{:?}",
            p.changes
        );
        assert!(p.at_restart.is_empty());
    }

    #[test]
    fn geometry_members_and_listeners_wait_for_a_restart_and_nothing_of_them_changes() {
        let new = BASE.replace("unix:nbd.sock", "unix:other.sock").replace(
            "level = \"raid5\"",
            "level = \"raid5\"\nstrip_size = \"128KiB\"",
        );
        let p = plan_of(BASE, &new);
        assert!(p.changes.is_empty(), "{:?}", p.changes);
        let text = p.at_restart.join("\n");
        assert!(
            text.contains("listen (the NBD listeners) takes effect at a restart"),
            "{text}"
        );
        assert!(
            text.contains("db: layout") && text.contains("superblocks"),
            "{text}"
        );
        let fewer = BASE.replace("\"d0\", \"d1\", \"d2\"", "\"d0\", \"d1\", \"s0\"");
        let text = plan_of(BASE, &fewer).at_restart.join("\n");
        assert!(
            text.contains("db: members [d0, d1, d2] → [d0, d1, s0]"),
            "{text}"
        );
        let policy = BASE.replace("level = \"raid5\"", "level = \"raid1\"");
        let text = plan_of(BASE, &policy).at_restart.join("\n");
        assert!(text.contains("db: level raid5 → raid1"), "{text}");
    }

    #[test]
    fn a_change_waiting_for_a_restart_is_said_again_while_live_ones_are_made_once() {
        let old = parse(BASE);
        let new = parse(&format!(
            "{}rebuild_rate = \"10MiB\"\n",
            BASE.replace("unix:nbd.sock", "unix:other.sock")
        ));
        let first = plan(&old, &Live::of(&old), &new);
        assert_eq!(first.changes.len(), 1);
        // Once made, the live settings are the new config's.
        let again = plan(&old, &Live::of(&new), &new);
        assert!(again.changes.is_empty());
        assert_eq!(again.at_restart, first.at_restart);
    }

    #[test]
    fn a_volume_added_or_gone_waits_for_a_restart() {
        let more = format!(
            "{}[[volume]]\nname = \"scratch\"\nlevel = \"raid0\"\nmembers = [\"d0\", \"d1\"]\n",
            BASE.replace(
                "members = [\"d0\", \"d1\", \"d2\"]\n",
                "members = [\"d0\", \"d1\", \"d2\"]\nsize = \"32MiB\"\n"
            )
        );
        let text = plan_of(BASE, &more).at_restart.join("\n");
        assert!(text.contains("volume scratch is new"), "{text}");
        let text = plan_of(&more, BASE).at_restart.join("\n");
        assert!(
            text.contains("volume scratch is no longer in the config"),
            "{text}"
        );
    }

    #[test]
    fn the_outcome_says_what_changed_what_failed_and_what_waits() {
        let out = Outcome {
            changed: vec!["db: rebuild_rate now 10 MiB/s".into()],
            failed: vec!["db: spare s1 added: in use".into()],
            at_restart: vec!["listen (the NBD listeners) takes effect at a restart".into()],
        };
        assert_eq!(
            out.summary(),
            "changed: db: rebuild_rate now 10 MiB/s. not changed: db: spare s1 added: in use. \
             waiting for a restart: listen (the NBD listeners) takes effect at a restart"
        );
        assert_eq!(Outcome::default().summary(), "nothing changed live");
    }
}
