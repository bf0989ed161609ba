//! Reload: SIGHUP (`systemctl reload`) reads the config again and applies what can change
//! while volumes are served — each volume's `rebuild_rate` (and the passes running at it),
//! its `spares`, the `on_event` hook, the `metrics_listen` listener — and says what it
//! changed and what waits for a restart (members, level, strip, size, policies, NBD
//! listeners, limits, TLS, the control socket): in the log, as a `config-reloaded` event,
//! and to systemd (`RELOADING=1` … `READY=1`). A config that no longer loads changes
//! nothing (a `config-refused` event says why), nor do TLS certificates that no longer load;
//! certificates replaced since the start are said to wait for a restart (`reload_tls.rs`).
//!
//! [`plan`] decides (a pure function of the config the daemon started with, the volumes as
//! they run now, the live settings now, and the new config); [`Reloader::reload`] carries
//! the plan out. A volume is compared with what it is now, not with how it started: after
//! a spare took a failed member's role the config `nbraid status` advises (the spare among
//! the members) reloads cleanly, and the spare is not "removed" from the role it holds.

use super::hook::{HookQueue, HookRuns};
use super::metrics::MetricsListener;
use super::notify::Notifier;
use super::reload_tls::{files_at_restart, loads, TlsFiles};
use crate::control::{ControlVolume, Controls};
use crate::events::{Event, EventBus, EventKind};
use nbraid_config::{self as config, Config};
use nbraid_control::Request;
use nbraid_core::PassRate;
use nbraid_layout::Node;
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

/// A served volume as its records say it is now: who serves each role (a spare that took a
/// failed member's role, a member added at run time), its level and layout after an online
/// reshape, its size. What a new config's volume is compared with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunningVolume {
    pub name: String,
    /// By role: the id of what serves it and its file.
    pub members: Vec<(String, PathBuf)>,
    /// The level's name as the config writes it (`raid5`, `tree`).
    pub level: String,
    /// The layout by role (strips, regions; not who holds the roles).
    pub root: Node,
    pub capacity_bytes: u64,
    /// Opened again since the start (an online reshape): its layout and size are the
    /// records' now, no longer the started config's.
    pub reopened: bool,
}

impl RunningVolume {
    /// Volume `v` now.
    pub fn of(v: &ControlVolume) -> RunningVolume {
        let array = v.array();
        let vol = array.volume();
        let paths = (0..vol.member_count()).map(|r| PathBuf::from(v.member_path(r)));
        RunningVolume {
            name: v.name.clone(),
            members: v.member_ids().into_iter().zip(paths).collect(),
            level: v.level(),
            root: vol.geometry().root().clone(),
            capacity_bytes: vol.capacity(),
            reopened: v.served.swaps() > 0,
        }
    }

    /// The volumes of `c` as it declares them: what a daemon just started on it runs.
    pub fn declared(c: &Config) -> Vec<RunningVolume> {
        (c.volumes.iter())
            .map(|v| RunningVolume {
                name: v.name.clone(),
                members: (v.members.iter())
                    .map(|&m| (c.members[m].id.clone(), c.members[m].path.clone()))
                    .collect(),
                level: v.kind_name().to_string(),
                root: v.geometry.root().clone(),
                capacity_bytes: v.capacity(),
                reopened: false,
            })
            .collect()
    }

    fn ids(&self) -> Vec<&str> {
        self.members.iter().map(|(id, _)| id.as_str()).collect()
    }

    fn holds_a_role(&self, id: &str) -> bool {
        self.members.iter().any(|(m, _)| m == id)
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

/// What reloading `new` does to a daemon that started with `started`, whose volumes are
/// `running` now, and that runs with `live`. Live settings are compared with `live`; who
/// holds the roles, the level, the layout and the size with `running` (what the records
/// say); the rest with `started` (what the volumes were assembled with), so a change that
/// waits for a restart is said at every reload until then.
pub fn plan(started: &Config, running: &[RunningVolume], live: &Live, new: &Config) -> Plan {
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
        // A spare that took a role is a member now: neither removed nor added as a spare.
        let serving = |s: &Spare| {
            (running.iter().find(|r| r.name == w.name)).is_some_and(|r| r.holds_a_role(&s.id))
        };
        for s in now
            .spares
            .iter()
            .filter(|s| !w.spares.contains(s) && !serving(s))
        {
            p.changes.push(Change::RemoveSpare {
                volume: w.name.clone(),
                spare: s.clone(),
            });
        }
        for s in w
            .spares
            .iter()
            .filter(|s| !now.spares.contains(s) && !serving(s))
        {
            p.changes.push(Change::AddSpare {
                volume: w.name.clone(),
                spare: s.clone(),
            });
        }
    }
    p.at_restart = at_restart(started, running, new);
    p
}

/// What differs between `started` and `new` that a running daemon cannot change.
fn at_restart(started: &Config, running: &[RunningVolume], new: &Config) -> Vec<String> {
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
        let old = started.volumes.iter().find(|o| o.name == v.name);
        match (old, running.iter().find(|r| r.name == v.name)) {
            (Some(o), Some(now)) => out.extend(volume_at_restart((started, o), now, (new, v))),
            _ => out.push(format!("volume {} is new: a restart assembles it", v.name)),
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

/// What differs in one volume that a running daemon cannot change: who holds the roles,
/// the level, the layout and the size as `now` runs, the rest as `old` started.
fn volume_at_restart(
    (started, old): (&Config, &config::Volume),
    now: &RunningVolume,
    (new, v): (&Config, &config::Volume),
) -> Vec<String> {
    let name = &v.name;
    let mut out = Vec::new();
    let (now_ids, new_ids) = (now.ids(), v.member_ids(new));
    let geometry = "the geometry is in the superblocks: a restart refuses a config that \
                    disagrees with them";
    // The records put each member in its role whatever order the config lists it in, and a
    // spare that took a role serves it listed among the members or still among the spares
    // (a restart says to move it): the members change when one serving now is listed in
    // neither, or the roles are more or fewer.
    let listed =
        |id: &&str| new_ids.contains(id) || v.heal.spares.iter().any(|&s| new.members[s].id == *id);
    let same_members = now_ids.len() == new_ids.len() && now_ids.iter().all(listed);
    if !same_members {
        out.push(format!(
            "{name}: members [{}] → [{}]: a served volume's members change with `nbraid add`, \
             `replace` and `remove`; the config's list is read at a restart",
            now_ids.join(", "),
            new_ids.join(", ")
        ));
    } else {
        let moved = moved_members(started, now, (new, v));
        if !moved.is_empty() {
            out.push(format!(
                "{name}: the path or size of {} changed: members are opened at a restart",
                moved.join(", ")
            ));
        }
    }
    if now.level != v.kind_name() {
        out.push(format!(
            "{name}: level {} → {}: {geometry}",
            now.level,
            v.kind_name()
        ));
    } else if same_members && layout_differs(old, now, v, now_ids == new_ids) {
        out.push(format!(
            "{name}: layout {} → {} (strip, tree): {geometry}",
            old.tree_text(started),
            v.tree_text(new)
        ));
    }
    let resized = match now.reopened {
        true => now.capacity_bytes != v.capacity(),
        false => old.requested != v.requested || old.capacity() != v.capacity(),
    };
    if resized {
        out.push(format!("{name}: size: {geometry}"));
    }
    let fields: [(&str, bool); 4] = [
        ("read_policy", old.read_policy != v.read_policy),
        ("cache", old.cache != v.cache),
        ("read_only", old.read_only != v.read_only),
        (
            "the metadata keys (create, bitmap_chunk, clean_delay, write_hole)",
            old.metadata.without_log_size() != v.metadata.without_log_size(),
        ),
    ];
    // The log's reserve is placed at create: no restart takes a new size (`nbraid check`
    // and `nbraid apply` say what the records keep).
    if old.metadata.ppl_log_bytes_written != v.metadata.ppl_log_bytes_written {
        out.push(format!(
            "{name}: write_hole_log_size is never taken by an existing array: its records keep the reserve it was created with (nbraid check says which)"
        ));
    }
    // The records keep the block size the volume is served with: a disk's sector size
    // never changes under its data (`nbraid_assembly::settings::block_size_kept`).
    if old.block_size_written != v.block_size_written {
        out.push(format!(
            "{name}: block_size is never taken by an existing array: its records keep {}-byte blocks, the size it is served with (nbraid check says so)",
            old.block_size
        ));
    }
    for (field, differs) in fields {
        if differs {
            out.push(format!("{name}: {field} takes effect at a restart"));
        }
    }
    out
}

/// The members of `v` (in `new`) whose path or size differs from what serves now: a
/// member of the started config compared with its entry there (path and size), one added
/// at run time with the file it is served from.
fn moved_members<'a>(
    started: &Config,
    now: &RunningVolume,
    (new, v): (&'a Config, &config::Volume),
) -> Vec<&'a str> {
    (v.members.iter().map(|&m| &new.members[m]))
        .filter(|m| match started.members.iter().find(|o| o.id == m.id) {
            Some(o) => o.path != m.path || o.size != m.size,
            None => (now.members.iter()).any(|(id, path)| *id == m.id && *path != m.path),
        })
        .map(|m| m.id.as_str())
        .collect()
}

/// Whether `v`'s layout (strips, tree, regions; not who holds the roles) differs from the
/// running one: the one `old` started with, or the records' once a reshape opened the
/// volume again — compared when `v` lists the members in their roles' order (the records'
/// tree is by role).
fn layout_differs(
    old: &config::Volume,
    now: &RunningVolume,
    v: &config::Volume,
    by_role: bool,
) -> bool {
    match now.reopened && by_role {
        true => *v.geometry.root() != now.root,
        false => v.geometry.root() != old.geometry.root(),
    }
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
    /// Where every hook queue counts its runs (a reload's new hook too).
    pub hooks: Arc<HookRuns>,
    /// The TLS certificates' files as the start read them (what the server presents).
    pub tls_files: TlsFiles,
}

impl Reloader {
    pub fn new(
        started: &Config,
        controls: &Arc<Controls>,
        events: Arc<EventBus>,
        metrics: MetricsListener,
        notifier: &Arc<Notifier>,
        hooks: &Arc<HookRuns>,
    ) -> Reloader {
        Reloader {
            file: started.file.clone(),
            live: Live::of(started),
            started: started.clone(),
            controls: controls.clone(),
            events,
            metrics,
            notifier: notifier.clone(),
            hooks: hooks.clone(),
            tls_files: TlsFiles::read(&started.tls),
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
        // The certificates as a start would read them: refused if they no longer load.
        let tls = new.tls.clone();
        let read = tokio::task::spawn_blocking(move || (loads(&tls), TlsFiles::read(&tls)));
        let (tls_loads, tls_files) = read
            .await
            .map_err(|e| format!("reading the TLS files: {e}"))?;
        tls_loads?;
        let running: Vec<RunningVolume> = self
            .controls
            .volumes
            .iter()
            .map(RunningVolume::of)
            .collect();
        let p = plan(&self.started, &running, &self.live, &new);
        let mut out = Outcome {
            at_restart: p.at_restart,
            ..Outcome::default()
        };
        let tls_changed = self.started.tls != new.tls;
        out.at_restart
            .extend(files_at_restart(&self.tls_files, &tls_files, tls_changed));
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
                let path = spare.path.display().to_string();
                // By its config id, as a start names it (not `loop1` for /dev/loop1).
                (self.controls)
                    .add_config_spare(name, &path, &spare.id)
                    .await
                    .map_err(|r| r.message)?;
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
                let hooks = &self.hooks;
                let queue = program.clone().map(|p| HookQueue::start(p, hooks.clone()));
                self.events.set_hook(queue);
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
#[path = "reload_tests.rs"]
mod tests;
