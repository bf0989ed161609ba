//! Followers of the control socket (`status --watch`, followed events and passes) have a cap
//! of their own below the socket's, so a fleet of dashboards (or a leak of watchers) never
//! locks admin commands out (found by a hunt: 64 watchers made `nbraid fail` fail to connect).

mod common;

use common::{nbraid, ok, write_config, Daemon};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The daemon's default cap on followers (README, `status`).
const FOLLOWERS_MAX: usize = 48;

/// A watcher as `status --watch` is one: a connection that asked twice and keeps its place.
fn watcher(control: &std::path::Path) -> UnixStream {
    let s = UnixStream::connect(control).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    for _ in 0..2 {
        (&s).write_all(b"{\"v\":1,\"op\":\"status\"}\n").unwrap();
        let mut reply = String::new();
        r.read_line(&mut reply).unwrap();
        assert!(
            reply.contains("\"ok\":true"),
            "a watcher within the cap: {reply}"
        );
    }
    s
}

/// `nbraid status --watch` on `cfg`, killed if it still runs after 10 s (a watcher that is
/// not refused runs until interrupted).
fn bounded_watch(cfg: &str) -> std::process::Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_nbraid"))
        .args(["status", "--watch", "--config", cfg])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run nbraid status --watch");
    let deadline = Instant::now() + Duration::from_secs(10);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    child.wait_with_output().unwrap()
}

#[test]
fn a_watcher_past_the_followers_cap_is_refused_and_admin_commands_still_answer() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(dir.path());
    let mut daemon = Daemon::start(&cfg);
    let cfg = cfg.to_str().unwrap();
    let watchers: Vec<UnixStream> = (0..FOLLOWERS_MAX)
        .map(|_| watcher(&daemon.control))
        .collect();
    // One more, as an operator starts it: its first screen, then the refusal naming the cap.
    let o = bounded_watch(cfg);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "a watcher past the cap went on");
    assert!(
        err.contains(&format!("at most {FOLLOWERS_MAX} followers at once"))
            && err.contains("kept for one-shot requests"),
        "{err}"
    );
    // A scrub is started (a one-shot request), then following it needs a follower's place:
    // refused, it says the scrub runs (it said only `busy`, as if nothing had started).
    let o = nbraid(&["scrub", "r6", "--rate", "1MiB", "--config", cfg]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "following was refused");
    assert!(
        err.contains("the scrub of r6 runs, but following it was refused")
            && err.contains(&format!("at most {FOLLOWERS_MAX} followers")),
        "{err}"
    );
    let o = nbraid(&["cancel", "r6", "--config", cfg]);
    assert!(o.status.success(), "the scrub was running: {o:?}");
    // The admin commands find their places.
    ok(
        nbraid(&["fail", "r6", "d5", "--config", cfg]),
        "nbraid fail",
    );
    let out = ok(nbraid(&["status", "r6", "--config", cfg]), "nbraid status");
    assert!(out.contains("d5"), "{out}");
    drop(watchers);
    daemon.stop();
}
