//! The `on_event` program, run once per event the way mdadm runs its PROGRAM: arguments
//! `EVENT VOLUME [MEMBER]`, every field in the environment (`NBRAID_EVENT`,
//! `NBRAID_VOLUME`, `NBRAID_MEMBER`, `NBRAID_RESULT`, `NBRAID_DETAIL`,
//! `NBRAID_TIME_UNIX_MS`). Events queue (up to [`QUEUE_LEN`]) for one task that runs them in
//! order, one at a time; publishing never waits for it. A run longer than [`HOOK_TIMEOUT`] is
//! killed with every process it started (it runs in its own process group: a shell script's
//! `sleep` goes too), and a failed or killed run is logged once; neither holds anything else
//! up.

use crate::events::{Event, EventSink};
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
    /// Starts the task that runs `program` (on the current runtime).
    pub fn start(program: PathBuf) -> HookQueue {
        let (tx, rx) = mpsc::channel(QUEUE_LEN);
        let dropped = Arc::new(AtomicU64::new(0));
        tokio::spawn(run_queue(program, rx));
        HookQueue { tx, dropped }
    }
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

async fn run_queue(program: PathBuf, mut rx: mpsc::Receiver<Event>) {
    while let Some(event) = rx.recv().await {
        if let Err(why) = run_once(&program, &event).await {
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
async fn run_once(program: &PathBuf, event: &Event) -> Result<(), String> {
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
    let group = child.id();
    let out = match tokio::time::timeout(HOOK_TIMEOUT, child.wait_with_output()).await {
        Err(_) => {
            if let Some(pgid) = group.and_then(|p| libc::pid_t::try_from(p).ok()) {
                // SAFETY: kill(2) has no memory effects; -pgid names the group the hook
                // leads (process_group(0)), which only its own processes are in.
                unsafe { libc::kill(-pgid, libc::SIGKILL) };
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
