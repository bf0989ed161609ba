//! The `on_event` program, run once per event the way mdadm runs its PROGRAM: arguments
//! `EVENT VOLUME [MEMBER]`, every field in the environment (`NBRAID_EVENT`,
//! `NBRAID_VOLUME`, `NBRAID_MEMBER`, `NBRAID_REPLACES`, `NBRAID_RESULT`, `NBRAID_COUNT`,
//! `NBRAID_DETAIL`, `NBRAID_TIME_UNIX_MS`). Events queue (up to [`QUEUE_LEN`]) for one task that runs them in
//! order, one at a time; publishing never waits for it. A run longer than [`HOOK_TIMEOUT`] is
//! killed with every process it started (it runs in its own process group: a shell script's
//! `sleep` goes too), and a failed or killed run is logged once; neither holds anything else
//! up. At exit the daemon waits [`HOOK_EXIT_GRACE`] at most for runs still going, then kills
//! their process groups ([`HookRuns::stop`]): outside systemd nothing else would, and a
//! hook's processes would outlive the daemon.

use crate::events::{Event, EventSink};
use parking_lot::Mutex;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// Events waiting for the hook; beyond, new ones are dropped (and said).
pub const QUEUE_LEN: usize = 256;

/// The longest one run of the hook may take.
pub const HOOK_TIMEOUT: Duration = Duration::from_secs(30);

/// Where events are offered to the hook.
pub struct HookQueue {
    tx: mpsc::Sender<Event>,
    dropped: Arc<AtomicU64>,
}

impl HookQueue {
    /// Starts the task that runs `program` (on the current runtime), its runs counted in
    /// `runs`.
    pub fn start(program: PathBuf, runs: Arc<HookRuns>) -> HookQueue {
        let (tx, rx) = mpsc::channel(QUEUE_LEN);
        let dropped = Arc::new(AtomicU64::new(0));
        tokio::spawn(run_queue(program, rx, runs));
        HookQueue { tx, dropped }
    }
}
/// How long the daemon waits at exit for hook runs still going before it kills them.
pub const HOOK_EXIT_GRACE: Duration = Duration::from_secs(3);

/// The hook runs not over yet, by process group, for every queue the daemon started (a
/// reload starts a new queue while the old one finishes its events): at exit the daemon
/// waits a little for them, then kills their groups ([`HookRuns::stop`]) — outside systemd
/// nothing else would, and a hook's `sleep` would outlive the daemon.
#[derive(Debug, Default)]
pub struct HookRuns {
    /// Process groups of the runs going on, and whether the daemon is exiting (no run
    /// starts then).
    state: Mutex<RunsState>,
}

#[derive(Debug, Default)]
struct RunsState {
    groups: Vec<libc::pid_t>,
    closed: bool,
}

/// A run's place in [`HookRuns`], given back when the run is over however it ends.
struct Registered<'a> {
    runs: &'a HookRuns,
    group: libc::pid_t,
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        self.runs.state.lock().groups.retain(|&g| g != self.group);
    }
}

impl HookRuns {
    /// Whether the daemon is exiting: queued events are no longer handed to the hook.
    fn closed(&self) -> bool {
        self.state.lock().closed
    }

    /// Counts process group `group` as running until the guard drops; `None` (and the group
    /// killed) when the daemon is exiting already.
    fn register(&self, group: libc::pid_t) -> Option<Registered<'_>> {
        let mut state = self.state.lock();
        if state.closed {
            kill_group(group);
            return None;
        }
        state.groups.push(group);
        Some(Registered { runs: self, group })
    }

    fn running(&self) -> usize {
        self.state.lock().groups.len()
    }

    /// At exit: no run starts any more; waits up to `grace` for those going on, then kills
    /// the process groups of those still running, and says so in the log. How many it
    /// killed.
    pub async fn stop(&self, grace: Duration) -> usize {
        let running = {
            let mut state = self.state.lock();
            state.closed = true;
            state.groups.len()
        };
        if running == 0 {
            return 0;
        }
        tracing::info!(
            "stopping: waiting up to {} ms for {running} on_event hook run(s)",
            grace.as_millis()
        );
        let deadline = tokio::time::Instant::now() + grace;
        while self.running() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(STOP_POLL).await;
        }
        let left = std::mem::take(&mut self.state.lock().groups);
        for &group in &left {
            kill_group(group);
        }
        if !left.is_empty() {
            tracing::warn!(
                "stopping: {} on_event hook run(s) still going after {} ms: killed, with the processes they started",
                left.len(),
                grace.as_millis()
            );
        }
        left.len()
    }
}

/// How often [`HookRuns::stop`] looks whether the runs are over.
const STOP_POLL: Duration = Duration::from_millis(20);

/// Kills process group `group` (a hook run and every process it started).
fn kill_group(group: libc::pid_t) {
    // SAFETY: kill(2) has no memory effects; -group names the group a hook run leads
    // (process_group(0)), which only its own processes are in.
    unsafe { libc::kill(-group, libc::SIGKILL) };
}

impl EventSink for HookQueue {
    /// Queues `event` for the hook; never waits.
    fn offer(&self, event: &Event) {
        if self.tx.try_send(event.clone()).is_err() {
            let n = self.dropped.fetch_add(1, Relaxed) + 1;
            tracing::warn!(
                "on_event: {QUEUE_LEN} events wait for the hook already; {} on {} not handed to it ({n} dropped so far)",
                event.kind.name(),
                event.volume
            );
        }
    }
}

async fn run_queue(program: PathBuf, mut rx: mpsc::Receiver<Event>, runs: Arc<HookRuns>) {
    while let Some(event) = rx.recv().await {
        // The daemon is exiting: what is still queued is not run.
        if runs.closed() {
            return;
        }
        if let Err(why) = run_once(&program, &event, &runs).await {
            tracing::warn!(
                "on_event {} for {} on {}: {why}",
                program.display(),
                event.kind.name(),
                event.volume
            );
        }
    }
}

/// Runs the hook for `event`; why it did not succeed.
async fn run_once(program: &PathBuf, event: &Event, runs: &HookRuns) -> Result<(), String> {
    let mut cmd = tokio::process::Command::new(program);
    cmd.arg(event.kind.name()).arg(&event.volume);
    if let Some(m) = &event.member {
        cmd.arg(m);
    }
    cmd.envs(event.env())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let child = cmd.spawn().map_err(|e| format!("cannot be run: {e}"))?;
    let group = child.id().and_then(|p| libc::pid_t::try_from(p).ok());
    let _registered = match group.map(|g| runs.register(g)) {
        Some(None) => return Err("the daemon is stopping: killed".into()),
        Some(registered) => registered,
        None => None,
    };
    let out = match tokio::time::timeout(HOOK_TIMEOUT, child.wait_with_output()).await {
        Err(_) => {
            if let Some(pgid) = group {
                kill_group(pgid);
            }
            return Err(format!(
                "still running after {}s: killed, with the processes it started; later events run it again",
                HOOK_TIMEOUT.as_secs()
            ));
        }
        Ok(r) => r.map_err(|e| format!("waiting for it: {e}"))?,
    };
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last = stderr.lines().last().unwrap_or("").trim();
    Err(match last.is_empty() {
        true => format!("{}", out.status),
        false => format!("{}: {last}", out.status),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;

    /// Whether a process of group `group` still runs (a zombie nobody reaped yet does not).
    fn group_runs(group: libc::pid_t) -> bool {
        let stats = std::fs::read_dir("/proc").unwrap().filter_map(|e| {
            let path = e.ok()?.path().join("stat");
            std::fs::read_to_string(path).ok()
        });
        stats.into_iter().any(|stat| {
            // pid (comm) state ppid pgrp ...
            let Some((_, rest)) = stat.rsplit_once(") ") else {
                return false;
            };
            let fields: Vec<&str> = rest.split(' ').collect();
            fields.first() != Some(&"Z") && fields.get(2) == Some(&group.to_string().as_str())
        })
    }

    /// At exit a run still going after the grace is killed with the processes it started;
    /// none starts afterwards.
    #[tokio::test]
    async fn runs_still_going_at_exit_are_killed_with_their_groups() {
        let runs = HookRuns::default();
        assert_eq!(runs.stop(Duration::from_millis(10)).await, 0, "none ran");
        let runs = HookRuns::default();
        let mut child = std::process::Command::new("/bin/sh")
            .args(["-c", "sleep 600 & wait"])
            .process_group(0)
            .spawn()
            .unwrap();
        let group = libc::pid_t::try_from(child.id()).unwrap();
        let registered = runs.register(group).expect("not stopping yet");
        assert_eq!(runs.stop(Duration::from_millis(100)).await, 1);
        assert!(!child.wait().unwrap().success(), "killed");
        for _ in 0..50 {
            if !group_runs(group) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(!group_runs(group), "the hook's sleep outlived the stop");
        drop(registered);
        assert!(runs.closed() && runs.register(group).is_none());
    }
}
