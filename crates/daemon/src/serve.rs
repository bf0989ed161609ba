//! `nbraidd --config FILE`: load, assemble, listen, serve until SIGTERM/SIGINT, then drain
//! and flush. Shared by the `nbraidd` binary and `nbraid serve`.

use crate::control::{ConfigIds, ControlServer, ControlVolume, Controls, StartReport};
use crate::events::EventBus;
use crate::export::VolumeExport;
use crate::io_workers::IoWorkers;
use crate::nbd::{
    proto::MAX_PAYLOAD, Export, Limits, Listener, Server, ServerTls, TlsMode, DEFAULT_BUSY_POLL,
    DEFAULT_SPARE_WORKER_MIN_LEN,
};
use crate::served::ServedArray;
use crate::service::{
    hook::{HookQueue, HookRuns, HOOK_EXIT_GRACE},
    latency::Latencies,
    metrics,
    notify::Notifier,
    observe, reload,
};
use anyhow::{Context, Result};
use nbraid_assembly::assemble::{assemble_with, Assembled, StartOptions};
use nbraid_config::{self as config, Config, Listener as ConfigListener, ServerLimits};
use nbraid_core::metadata::CleanMark;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// How long in-flight requests may take to finish once a stop was asked for.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

// The config's least request memory (of the server, of a connection) is one maximal payload.
const _: () = assert!(config::IN_FLIGHT_MEMORY_MIN == MAX_PAYLOAD as u64);

/// The NBD server's bounds from the config's `[daemon]` values (validated, so none is raised
/// by [`Limits::normalized`]).
pub fn server_limits(config: &ServerLimits) -> Limits {
    let bytes = |b: u64| usize::try_from(b).unwrap_or(usize::MAX);
    Limits {
        max_connections: config.max_connections,
        max_handshakes: config.max_handshakes,
        max_bytes_in_flight: bytes(config.in_flight_bytes_per_connection),
        server_bytes_in_flight: bytes(config.in_flight_bytes),
        handshake_timeout: config.handshake_timeout,
        idle_timeout: config.idle_timeout,
        stall_timeout: config.stall_timeout,
        payload_min_bytes_per_s: config.payload_min_bytes_per_s,
        busy_poll: busy_poll_override().unwrap_or(DEFAULT_BUSY_POLL),
        spare_worker_min_len: spare_worker_override().unwrap_or(Some(DEFAULT_SPARE_WORKER_MIN_LEN)),
        ..Limits::default()
    }
}

/// `NBRAIDD_BUSY_POLL_US`: how long a connection's reader spins for the next request before
/// sleeping, in µs (0: never), instead of the default; for benchmarks (`scripts/bench-nbd`).
fn busy_poll_override() -> Option<Duration> {
    env_number("NBRAIDD_BUSY_POLL_US", "µs").map(Duration::from_micros)
}

/// `NBRAIDD_SPARE_WORKER_KIB`: reads and writes from this many KiB up run on a spare I/O
/// worker (0: never), instead of the default; for benchmarks (`scripts/bench-nbd`).
fn spare_worker_override() -> Option<Option<u32>> {
    let kib: u32 = env_number("NBRAIDD_SPARE_WORKER_KIB", "KiB")?;
    Some((kib > 0).then(|| kib.saturating_mul(1024)))
}

/// The number in the environment variable `name`, if set; one that does not parse is
/// reported (as not a number of `unit`) and ignored.
fn env_number<T: std::str::FromStr>(name: &str, unit: &str) -> Option<T> {
    let text = std::env::var(name).ok()?;
    let parsed = text.trim().parse().ok();
    if parsed.is_none() {
        tracing::warn!("{name}={text:?} is not a number of {unit}: ignored");
    }
    parsed
}

/// Each listener's TLS from `[daemon]` (in the order of `config.listen`): certificates
/// loaded once, every listener checked against the safe default (non-loopback TCP needs TLS
/// required, or the config's explicit consent, which is printed as a warning).
pub fn server_tls(config: &Config) -> Result<Vec<ServerTls>> {
    let modes = &config.tls.listeners;
    anyhow::ensure!(
        modes.len() == config.listen.len(),
        "a TLS mode for every listener"
    );
    for (l, &mode) in config.listen.iter().zip(modes) {
        match config::listener_policy(l, mode, &config.tls) {
            Ok(None) => {}
            Ok(Some(warning)) => tracing::warn!("{warning}"),
            Err(why) => anyhow::bail!("{}: refusing to start: {why}", config.file.display()),
        }
    }
    let loaded = if config.tls.any_on() {
        let dir = config
            .tls
            .certificates
            .as_deref()
            .context("tls needs tls_certificates")?;
        let tls = ServerTls::from_dir(TlsMode::Required, dir, config.tls.verify_clients)
            .with_context(|| format!("loading the TLS certificates in {}", dir.display()))?;
        Some(tls)
    } else {
        None
    };
    Ok(modes
        .iter()
        .map(|m| match (m, &loaded) {
            (config::TlsMode::Optional, Some(t)) => t.with_mode(TlsMode::Optional),
            (config::TlsMode::Required, Some(t)) => t.with_mode(TlsMode::Required),
            _ => ServerTls::off(),
        })
        .collect())
}

/// What the start and `nbraidd --check` warn of in the TLS certificates the listeners would
/// present: a server certificate expired or not valid yet, which the server presents all the
/// same and every client refuses.
pub fn tls_warnings(config: &Config) -> Vec<String> {
    let Some(dir) = config.tls.certificates_in_use() else {
        return Vec::new();
    };
    nbraid_nbd::tls::server_certificate_out_of_date(dir, nbraid_nbd::now_unix_s())
        .into_iter()
        .collect()
}

/// Runs the daemon on the config at `path`; returns when stopped by a signal.
pub fn run(path: &Path) -> Result<()> {
    run_with(path, &StartOptions::default())
}

/// [`run`] with `opts` (volumes to assemble by force).
pub fn run_with(path: &Path, opts: &StartOptions) -> Result<()> {
    let config = nbraid_assembly::pins::load(path)?;
    // Before any thread starts: it takes NOTIFY_SOCKET out of the environment.
    let notifier = Arc::new(Notifier::from_env());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("nbraidd")
        .build()
        .context("starting the tokio runtime")?;
    let workers = IoWorkers::start(IoWorkers::count_wanted())?;
    let served = runtime.block_on(serve(config, opts, notifier.clone(), workers.handles()));
    // After the drain (or its failure, once nothing can record the volumes clean any more):
    // requests still on the workers are dropped with them.
    workers.stop();
    if let Err(e) = &served {
        notifier.stopping(&format!(
            "failed: {}",
            nbraid_assembly::error_text::error_text(e.as_ref())
        ));
    }
    served
}

/// `nbraidd` from start to stop, in order: assemble, bind everything, announce, start the
/// background tasks, serve until a stop signal, drain, record the volumes clean.
/// Connections run on `io_runtimes` (the I/O workers; none: this runtime).
async fn serve(
    config: Config,
    opts: &StartOptions,
    notifier: Arc<Notifier>,
    io_runtimes: Vec<tokio::runtime::Handle>,
) -> Result<()> {
    // Before anything is printed: a supervisor may send SIGTERM as soon as it sees the URIs.
    let mut stop = stop_signals()?;
    let hangup = reload::hangup_signal()?;
    let serving = Serving::start(&config, opts, &notifier, io_runtimes, hangup).await?;
    // Every volume assembled, every listener bound and accepting: ready.
    notifier.ready(&serving.background.summary_at_ready);
    let watchdog = crate::service::notify::spawn_watchdog(&notifier);
    wait_for_stop(&mut stop).await;
    serving.stop(stop, watchdog, &notifier).await
}

/// The daemon while it serves: what its stop drains, flushes and records clean.
struct Serving {
    server: Server,
    slots: Vec<Arc<ServedArray>>,
    served: Vec<(Arc<ServedArray>, Arc<VolumeExport>)>,
    /// Each writable volume's idle clean mark.
    idle_tasks: Vec<tokio::task::JoinHandle<()>>,
    /// One per listener.
    listener_tasks: Vec<tokio::task::JoinHandle<()>>,
    background: Background,
    /// Every hook run, for the exit to wait for and stop (a reload's hook too).
    hooks: Arc<HookRuns>,
    /// The volumes' controls, held until the stop has recorded them clean (the background
    /// tasks' copies go when they are stopped, before that).
    _controls: Arc<Controls>,
}

impl Serving {
    /// Assembles the volumes, binds every listener (before serving anything, so a taken
    /// port fails the start), announces them and starts the background tasks.
    async fn start(
        config: &Config,
        opts: &StartOptions,
        notifier: &Arc<Notifier>,
        io_runtimes: Vec<tokio::runtime::Handle>,
        hangup: tokio::signal::unix::Signal,
    ) -> Result<Serving> {
        let tls = server_tls(config)?;
        for w in tls_warnings(config) {
            tracing::warn!("{w}");
        }
        let mut volumes = assemble_with(config, opts)?;
        let slots = served_arrays(config, &volumes, opts);
        let controls = Arc::new(controls(config, &mut volumes, &slots));
        let served: Vec<(Arc<ServedArray>, Arc<VolumeExport>)> = (volumes.iter().zip(&slots))
            .map(|(a, slot)| {
                let export = VolumeExport::served(slot.clone(), a.read_only, a.description.clone());
                (slot.clone(), Arc::new(export))
            })
            .collect();
        let idle_tasks = spawn_clean_when_idle(&volumes, &served);
        let exports: Vec<(String, Arc<dyn Export>)> = (volumes.iter().zip(&served))
            .map(|(a, (_, e))| (a.name.clone(), e.clone() as Arc<dyn Export>))
            .collect();
        let (exports, latencies) = Latencies::wrap(exports);
        let names: Vec<String> = exports.iter().map(|(n, _)| n.clone()).collect();
        let server = Server::with_limits(exports, server_limits(&config.limits))?;
        server.run_connections_on(io_runtimes);

        let listeners = bind_listeners(config).await?;
        let scraped = metrics::Scraped {
            controls: controls.clone(),
            latencies: Arc::new(latencies),
            connections: {
                let s = server.clone();
                Arc::new(move || s.connections())
            },
        };
        let metrics =
            metrics::MetricsListener::start(config.service.metrics_listen, scraped).await?;
        let hooks = Arc::new(HookRuns::default());
        let events = Arc::new(EventBus::new(
            (config.service.on_event.clone()).map(|p| HookQueue::start(p, hooks.clone())),
        ));
        let control = ControlServer::bind(&config.control)?.with_events(events.clone());
        announce(config, &names, &listeners, &tls);
        let mut background =
            Background::start(&controls, control, events.clone(), &metrics, notifier).await;
        let reloader = reload::Reloader::new(config, &controls, events, metrics, notifier, &hooks);
        background
            .service
            .push(tokio::spawn(reload::watch(hangup, reloader)));
        let listener_tasks = (listeners.into_iter().zip(tls))
            .map(|(l, tls)| {
                let s = server.clone();
                tokio::spawn(async move { s.serve_with_tls(l, tls).await })
            })
            .collect();
        Ok(Serving {
            server,
            slots,
            served,
            idle_tasks,
            listener_tasks,
            background,
            hooks,
            _controls: controls,
        })
    }

    /// A stop was asked for: drain the requests, stop the background tasks and the hooks,
    /// record every volume clean. `stop` still listens: a second signal cuts the drain short.
    async fn stop(
        self,
        mut stop: StopSignals,
        watchdog: Option<tokio::task::JoinHandle<()>>,
        notifier: &Notifier,
    ) -> Result<()> {
        notifier.stopping("stopping: draining requests and flushing volumes");
        tracing::info!(
            "stopping: draining requests and flushing volumes (a second SIGTERM/SIGINT exits at once)"
        );
        // A member that does not answer can hold the drain for long: a second signal must
        // not leave the operator only SIGKILL.
        let hooks_at_cut = self.hooks.clone();
        let slots_at_cut = self.slots.clone();
        let second_signal = tokio::spawn(async move {
            wait_for_stop(&mut stop).await;
            // No grace for the hooks either, but no orphans: their process groups go too.
            hooks_at_cut.stop(Duration::ZERO).await;
            exit_cut_short(dropped_writes(&cached_bytes(&slots_at_cut)))
        });
        let drained = self.server.shutdown_with_grace(SHUTDOWN_GRACE).await;
        // Whatever the drain's outcome, nothing may record a volume clean behind it (the
        // idle marker would, with requests still running).
        for t in watchdog.into_iter().chain(self.idle_tasks) {
            t.abort();
            let _ = t.await;
        }
        self.background.stop().await;
        // Outside systemd nothing else stops the hook's processes.
        self.hooks.stop(HOOK_EXIT_GRACE).await;
        for t in self.listener_tasks {
            t.await.context("listener task")?;
        }
        // A volume that could not be flushed (one failed beyond its redundancy) must not
        // keep the others from their clean record: each array's mark checks its own writes.
        let recorded = record_clean(&self.served, drained.is_ok()).await;
        second_signal.abort();
        stop_outcome(
            drained,
            recorded,
            dropped_writes(&cached_bytes(&self.slots)),
        )
    }
}

/// Each writable volume's idle clean mark, where its config asks for one.
fn spawn_clean_when_idle(
    volumes: &[Assembled],
    served: &[(Arc<ServedArray>, Arc<VolumeExport>)],
) -> Vec<tokio::task::JoinHandle<()>> {
    (volumes.iter().zip(served))
        .filter(|(v, _)| !v.read_only)
        .filter_map(|(v, (a, e))| {
            let delay = v.clean_delay?;
            Some(tokio::spawn(clean_when_idle(a.clone(), e.clone(), delay)))
        })
        .collect()
}

/// Each volume's acknowledged writes in its write-back cache, not on its members.
fn cached_bytes(slots: &[Arc<ServedArray>]) -> Vec<(String, u64)> {
    (slots.iter())
        .map(|slot| {
            let a = slot.get();
            (a.name().to_string(), a.volume().cache_usage().dirty_bytes)
        })
        .collect()
}

/// What the exit says of acknowledged writes still in a write-back cache once every flush
/// was tried (`cached`: each volume's dirty bytes): the members refused them, and they go
/// with the process. `None` when every cache was written back.
fn dropped_writes(cached: &[(String, u64)]) -> Option<String> {
    let lost: Vec<String> = (cached.iter())
        .filter(|(_, bytes)| *bytes > 0)
        .map(|(name, bytes)| format!("{name}: {bytes} bytes"))
        .collect();
    (!lost.is_empty()).then(|| {
        format!(
            "acknowledged writes are dropped ({}): their write-back cache could not write them to the members, and it ends with this process",
            lost.join(", ")
        )
    })
}

/// The stop's outcome from the drain's, the clean records' and the writes it drops.
fn stop_outcome(
    drained: std::io::Result<()>,
    recorded: Result<()>,
    dropped: Option<String>,
) -> Result<()> {
    let dropped = dropped.map_or(String::new(), |d| format!("; {d}"));
    match (drained, recorded) {
        (Ok(()), Ok(())) if dropped.is_empty() => Ok(()),
        (Ok(()), Ok(())) => Err(anyhow::anyhow!("stopping: every volume was recorded clean{dropped}")),
        (Ok(()), Err(unclean)) => Err(anyhow::anyhow!("{unclean:#}{dropped}")),
        (Err(e), Ok(())) => Err(anyhow::anyhow!(
            "stopping: draining and flushing the exports failed: {e} (every volume that could be was recorded clean){dropped}"
        )),
        (Err(e), Err(unclean)) => Err(anyhow::anyhow!(
            "stopping: draining and flushing the exports failed: {e}; {unclean:#}{dropped}"
        )),
    }
}

/// Binds every listener of the config (a Unix socket's directory created first).
async fn bind_listeners(config: &Config) -> Result<Vec<Listener>> {
    let mut listeners = Vec::new();
    for l in &config.listen {
        let bound = match l {
            ConfigListener::Unix(path) => {
                if let Some(dir) = path.parent() {
                    std::fs::create_dir_all(dir)
                        .with_context(|| format!("creating {}", dir.display()))?;
                }
                Listener::bind_unix(path)?
            }
            ConfigListener::Tcp(addr) => Listener::bind_tcp(*addr).await?,
        };
        listeners.push(bound);
    }
    Ok(listeners)
}

/// Says what is served and where: one line per volume with its URI on every listener.
fn announce(config: &Config, names: &[String], listeners: &[Listener], tls: &[ServerTls]) {
    say(format_args!(
        "nbraidd: serving {} from {}",
        names.len(),
        config.file.display()
    ));
    for name in names {
        let uris: Vec<String> = listeners
            .iter()
            .zip(tls)
            // Clients must upgrade: say so in the scheme (nbds://, nbds+unix://).
            .map(|(l, tls)| l.export_uri(name, tls.mode == TlsMode::Required))
            .collect();
        say(format_args!("  {name}: {}", uris.join("  ")));
    }
}

/// The tasks that run beside the NBD server: the control socket, the observer (events,
/// status line), the reload watcher, the returning-member probe and the heal watcher.
struct Background {
    control: tokio::task::JoinHandle<()>,
    heal: tokio::task::JoinHandle<()>,
    returning: tokio::task::JoinHandle<()>,
    /// The observer and the reload watcher (the metrics endpoint is the reloader's: a reload
    /// may move it).
    service: Vec<tokio::task::JoinHandle<()>>,
    /// The volumes' summary once started, for the service manager's "ready".
    summary_at_ready: String,
}

impl Background {
    /// Starts them, in the order a client can see: background resyncs and interrupted
    /// scrubs before the control socket is announced, so before spares are healed in.
    async fn start(
        controls: &Arc<Controls>,
        control: ControlServer,
        events: Arc<EventBus>,
        metrics: &metrics::MetricsListener,
        notifier: &Arc<Notifier>,
    ) -> Background {
        // Background resyncs start before the control socket is announced: a `status` asked
        // as soon as it is must already see them running.
        // A read-only volume runs none of them: each writes (`core::metadata::read_only`).
        let writable = || {
            controls
                .volumes
                .iter()
                .filter(|v| !v.array().is_read_only())
        };
        for v in writable() {
            crate::heal::start_background_resync(v);
            crate::control::start_reshape_pass(v);
            crate::control::start_checksum_fill(v).await;
            crate::control::start_checksum_refill(v);
        }
        // Before the control socket is announced too: an operator's `scrub` sent as soon as
        // it is records its own checkpoint, which this look must not take for one a restart
        // left (it queued a second scrub of the volume behind the operator's, unlimited).
        for v in writable() {
            crate::heal::resume_scrub(v).await;
        }
        say(format_args!(
            "nbraidd: control socket {}",
            control.path().display()
        ));
        let control_task = tokio::spawn(control.serve(controls.clone()));
        let status_notifier = notifier.clone();
        let service = vec![tokio::spawn(observe::watch(
            controls.clone(),
            events,
            move |line| status_notifier.status(line),
        ))];
        if let Some(addr) = metrics.local_addr() {
            say(format_args!("nbraidd: metrics http://{addr}/metrics"));
        }
        // Spares into failed roles, rebuilds started and resumed, by themselves.
        let returning = tokio::spawn(crate::returning::watch(controls.clone()));
        let summary_at_ready = observe::summary_of(controls);
        let heal = tokio::spawn(crate::heal::watch(controls.clone()));
        Background {
            control: control_task,
            heal,
            returning,
            service,
            summary_at_ready,
        }
    }

    /// Stops them all; dropping the control server removes its socket.
    async fn stop(self) {
        for t in [self.control, self.heal, self.returning]
            .into_iter()
            .chain(self.service)
        {
            t.abort();
            let _ = t.await;
        }
    }
}

/// Records every served array clean after the drain; an error naming those that could not
/// be (they resync at the next start).
/// `drained`: the drain and flush went well (else nothing says "stopped cleanly").
async fn record_clean(
    served: &[(Arc<ServedArray>, Arc<VolumeExport>)],
    drained: bool,
) -> Result<()> {
    let mut unclean = Vec::new();
    for (slot, _) in served {
        let a = slot.get();
        if a.is_read_only() {
            // Nothing was written, nothing is recorded: its records stay as the start found them.
            continue;
        }
        let mut outcome = a.mark_clean().await;
        if matches!(outcome, Ok(CleanMark::ResyncPending)) && !a.background_pending() {
            // The background resync ended between mark_clean's look and now: there is a
            // clean point to record.
            outcome = a.mark_clean().await;
        }
        match outcome {
            Ok(CleanMark::Recorded) => {}
            Ok(why @ CleanMark::ResyncPending) => say(format_args!(
                "nbraidd: {}: {why}: it resumes at the next start",
                a.name()
            )),
            Ok(why @ CleanMark::ChecksumsPending) => say(format_args!(
                "nbraidd: {}: {why}: the next start computes them again",
                a.name()
            )),
            Ok(why @ CleanMark::WritesInFlight) => unclean.push(format!("{}: {why}", a.name())),
            Err(e) => unclean.push(format!("{}: {e}", a.name())),
        }
    }
    if !unclean.is_empty() {
        anyhow::bail!(
            "stopped, but not every volume could be recorded clean (it resyncs at the next start): {}",
            unclean.join("; ")
        );
    }
    if drained {
        say(format_args!("nbraidd: stopped cleanly"));
    }
    Ok(())
}

/// Each assembled volume's array where an online reshape can swap it, with the engine
/// options to open it again.
fn served_arrays(
    config: &Config,
    volumes: &[Assembled],
    opts: &StartOptions,
) -> Vec<Arc<ServedArray>> {
    let options = |a: &Assembled| {
        let v = config.volumes.iter().find(|v| v.name == a.name)?;
        let force = opts.force_assemble.contains(&a.name);
        Some(nbraid_assembly::assemble::array_options(
            v,
            a.members.clone(),
            force,
        ))
    };
    (volumes.iter())
        .map(|a| {
            let o = options(a).unwrap_or_default();
            Arc::new(ServedArray::new(a.array.clone(), o))
        })
        .collect()
}

/// The control socket's view of the assembled volumes (member ids by role). The start's
/// handles on members and spares (`known`) are taken out of `volumes`: only the arrays hold
/// members open, so one refused or let go later is closed.
fn controls(config: &Config, volumes: &mut [Assembled], slots: &[Arc<ServedArray>]) -> Controls {
    let volumes = (volumes.iter_mut().zip(slots))
        .map(|(a, slot)| {
            let cv = config.volumes.iter().find(|v| v.name == a.name);
            let level = cv.map_or(String::new(), |v| v.kind_name().to_string());
            ControlVolume::new(
                a.name.clone(),
                level,
                slot.clone(),
                a.members.clone(),
                a.at_start.clone(),
                StartReport {
                    created: a.created,
                    was_clean: a.report.was_clean,
                    resynced_bytes: a.report.resynced_bytes,
                    background_bytes: a.report.background_bytes,
                },
            )
            .with_heal(
                a.rebuild_rate,
                std::mem::take(&mut a.known),
                a.notes.clone(),
            )
            .with_start_paths(a.paths.clone())
            .with_config_ids(cv.map(|v| ConfigIds {
                ids: nbraid_assembly::adopt::position_ids(config, v, &[]),
                members: v.members.len(),
            }))
        })
        .collect();
    Controls {
        volumes,
        config: Some(Arc::new(config.clone())),
    }
}

/// Records the served array clean once no write has begun for `delay` (md's
/// safe_mode_delay), so a crash while idle needs no resync at the next start.
async fn clean_when_idle(slot: Arc<ServedArray>, export: Arc<VolumeExport>, delay: Duration) {
    let tick = (delay / 4).max(Duration::from_millis(5));
    let mut seen = export.writes_begun();
    let mut quiet_since = tokio::time::Instant::now();
    let mut failing = Repeated::new(REPEAT_WARNING_EVERY);
    loop {
        tokio::time::sleep(tick).await;
        let now = export.writes_begun();
        if now != seen {
            (seen, quiet_since) = (now, tokio::time::Instant::now());
            continue;
        }
        // Through the gate: never the array an online reshape is swapping out.
        let Ok(entered) = slot.enter().await else {
            continue;
        };
        let array = &entered.array;
        if array.is_dirty() && quiet_since.elapsed() >= delay {
            // Run to its end even when the stop aborts this loop: a mark cut off after its
            // claim left the flag clean and the records dirty, and the stop's own mark then
            // found "already clean" and exited 0 (`tests/stop_amid_idle_clean.rs`). The
            // stop's mark waits for it (one clean point at a time).
            let marking = array.clone();
            let marked = tokio::spawn(async move { marking.mark_clean().await }).await;
            let Ok(marked) = marked else { continue };
            // Retried each tick while it fails (a volume past its tolerance fails every
            // time): said when it starts, when it changes, and every few minutes.
            match marked {
                Err(e) if failing.should_say(&e.to_string(), std::time::Instant::now()) => {
                    tracing::warn!(volume = %array.name(), "recording the volume clean: {e} (said again if it changes, else every {} s while it lasts)", REPEAT_WARNING_EVERY.as_secs());
                }
                Err(_) => {}
                Ok(_) if failing.clear() => {
                    tracing::warn!(volume = %array.name(), "recording the volume clean: recorded again");
                }
                Ok(_) => {}
            }
        }
    }
}

/// How often a warning that stands unchanged is said again.
const REPEAT_WARNING_EVERY: Duration = Duration::from_secs(300);

/// A warning a loop meets again and again: said the first time, when its text changes, and
/// again once `every` has passed while it stands — never once per tick.
struct Repeated {
    /// The text said last, and when; `None`: none stands.
    last: Option<(String, std::time::Instant)>,
    every: Duration,
}

impl Repeated {
    fn new(every: Duration) -> Self {
        Repeated { last: None, every }
    }

    /// Whether to say `text` at `now`; if so, it is remembered as said then.
    fn should_say(&mut self, text: &str, now: std::time::Instant) -> bool {
        let due = match &self.last {
            Some((said, at)) => said != text || now.duration_since(*at) >= self.every,
            None => true,
        };
        if due {
            self.last = Some((text.to_string(), now));
        }
        due
    }

    /// The condition is over; whether a warning stood (to say it ended).
    fn clear(&mut self) -> bool {
        self.last.take().is_some()
    }
}

/// SIGTERM and SIGINT.
type StopSignals = (tokio::signal::unix::Signal, tokio::signal::unix::Signal);

/// SIGTERM and SIGINT, installed.
fn stop_signals() -> Result<StopSignals> {
    use tokio::signal::unix::{signal, SignalKind};
    let term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    Ok((term, int))
}

async fn wait_for_stop((term, int): &mut StopSignals) {
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

/// What a second stop signal during the drain does: exits now, as a crash would leave the
/// volumes (not recorded clean), without waiting on anything the drain may be stuck on.
/// `dropped`: what it says of the acknowledged writes still cached ([`dropped_writes`]).
fn exit_cut_short(dropped: Option<String>) -> ! {
    let dropped = dropped.map_or(String::new(), |d| format!("; {d}"));
    let why = format!(
        "a second stop signal cut the drain short: exiting without flushing or recording \
         the volumes clean; the next start resyncs them as after a crash (the regions \
         the write-intent bitmap marks, the write-hole log replayed){dropped}"
    );
    tracing::error!("{why}");
    eprintln!("nbraidd: error: {why}");
    std::process::exit(EXIT_CUT_SHORT)
}

/// The exit status after [`exit_cut_short`]: a failed stop's, as `main` returns for one.
const EXIT_CUT_SHORT: i32 = 1;

/// A line on stdout; a closed stdout (the reader went away) does not stop the daemon.
fn say(line: std::fmt::Arguments) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = out
        .write_fmt(line)
        .and_then(|()| out.write_all(b"\n"))
        .and_then(|()| out.flush());
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The config's defaults are the server's, and validated limits need no raising.
    #[test]
    fn config_limits_are_the_servers() {
        assert_eq!(server_limits(&ServerLimits::default()), Limits::default());
        let text = "[daemon]\nin_flight_memory = \"32MiB\"\n\
                    in_flight_memory_per_connection = \"32MiB\"\nmax_connections = 1\n\
                    [[member]]\nid = \"a\"\npath = \"memory:\"\nsize = \"8MiB\"\n\
                    [[volume]]\nname = \"v\"\nlevel = \"jbod\"\nmembers = [\"a\"]\n";
        let c = config::parse(text, Path::new("t.toml")).unwrap();
        let limits = server_limits(&c.limits);
        assert_eq!(limits, limits.normalized());
        assert_eq!(limits.max_bytes_in_flight, MAX_PAYLOAD as usize);
    }

    /// Found by an events hunt: a stop with acknowledged writes pinned in a write-back
    /// cache (its destage refused) said the flush failed, never that those writes are
    /// dropped. Now it says so, with the bytes, whatever else the stop says.
    #[test]
    fn a_stop_says_which_acknowledged_writes_it_drops_and_how_many_bytes() {
        let cached = [("ok".to_string(), 0), ("db".to_string(), 8 << 20)];
        let dropped = dropped_writes(&cached);
        let eio = || Err(std::io::Error::other("flushing db: data unavailable"));
        let e = stop_outcome(eio(), Ok(()), dropped.clone()).unwrap_err();
        let said = format!("{e:#}");
        assert!(
            said.contains("acknowledged writes are dropped")
                && said.contains("(db: 8388608 bytes)"),
            "{said}"
        );
        assert!(said.contains("flushing db: data unavailable"), "{said}");
        assert!(!said.contains("ok:"), "{said}");
        let unclean = || Err(anyhow::anyhow!("db: not recorded clean"));
        let said = format!(
            "{:#}",
            stop_outcome(eio(), unclean(), dropped.clone()).unwrap_err()
        );
        assert!(
            said.contains("dropped") && said.contains("not recorded clean"),
            "{said}"
        );
        let said = format!("{:#}", stop_outcome(Ok(()), Ok(()), dropped).unwrap_err());
        assert!(said.contains("8388608 bytes"), "{said}");
        assert_eq!(dropped_writes(&[("ok".to_string(), 0)]), None);
        assert!(stop_outcome(Ok(()), Ok(()), None).is_ok());
    }

    #[test]
    fn a_standing_warning_is_said_once_then_when_it_changes_or_every_few_minutes() {
        let every = Duration::from_secs(300);
        let mut w = Repeated::new(every);
        let t0 = std::time::Instant::now();
        assert!(w.should_say("data unavailable", t0));
        for tick in 1..200 {
            let now = t0 + Duration::from_millis(1250) * tick;
            assert!(!w.should_say("data unavailable", now), "tick {tick}");
        }
        assert!(w.should_say("data unavailable: stripe 3", t0 + Duration::from_secs(250)));
        assert!(!w.should_say("data unavailable: stripe 3", t0 + Duration::from_secs(500)));
        assert!(w.should_say("data unavailable: stripe 3", t0 + Duration::from_secs(550)));
        assert!(w.clear());
        assert!(!w.clear());
        assert!(w.should_say("data unavailable: stripe 3", t0 + Duration::from_secs(551)));
    }
}
