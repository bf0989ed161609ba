//! A write-back RAID 5 that loses two members while a write is still cached: the flush the
//! members refuse is an event (`destage-failed`, with its count), and the stop says that
//! those acknowledged writes are dropped, and how many bytes (found by an events hunt: the
//! events said nothing, and the stop said only that the flush failed).

mod common;

use common::*;
use nbraid_nbd::client::Client;
use serde_json::Value;
use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The daemon's kept events of `kind`.
fn events_of(cfg: &str, kind: &str) -> Vec<Value> {
    let out = ok(
        nbraid(&["events", "--json", "--config", cfg]),
        "nbraid events",
    );
    (out.lines())
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["event"] == kind)
        .collect()
}

#[test]
fn a_refused_destage_is_an_event_and_the_stop_says_the_bytes_it_drops() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("arrays.toml");
    let text = daemon_and_members("d", 4, "24MiB")
        + "[[volume]]\nname = \"db\"\nlevel = \"raid5\"\nmembers = [\"d0\", \"d1\", \"d2\", \"d3\"]\n\
           cache = \"write-back\"\nchecksums = \"off\"\n";
    std::fs::write(&config, text).unwrap();
    let cfg = config.to_str().unwrap();
    // Started as `Daemon::start` does, its stderr kept for the stop's words; a `Daemon`,
    // so a failed test does not leave it running.
    let mut child = Command::new(nbraidd_path())
        .args(["--config", cfg, "--log-level", "warn"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start nbraidd");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let control = (lines.by_ref().map_while(Result::ok))
        .find_map(|l| Some(PathBuf::from(l.strip_prefix("nbraidd: control socket ")?)));
    let mut daemon = Daemon {
        child,
        control: control.unwrap_or_default(),
    };
    assert!(
        daemon.control.exists(),
        "nbraidd exited early: {:?}",
        daemon.child.try_wait()
    );
    std::thread::spawn(move || for _ in lines.by_ref() {});
    let uri = format!(
        "nbd+unix:///db?socket={}",
        dir.path().join("nbd.sock").display()
    );

    ok(nbraid(&["fail", "db", "d0", "--config", cfg]), "fail d0");
    // One write cached, then the second member out before the flusher's first try (1 s):
    // the flush cannot write it back.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = rt.block_on(Client::connect(&uri)).expect("connect");
    rt.block_on(client.write(0, vec![7u8; 4096].into()))
        .unwrap();
    ok(
        nbraid(&["fail", "db", "d1", "--force", "--config", cfg]),
        "fail d1",
    );
    assert!(
        rt.block_on(client.flush()).is_err(),
        "the flush went through"
    );
    drop(client);

    let deadline = Instant::now() + Duration::from_secs(10);
    let refused = loop {
        let found = events_of(cfg, "destage-failed");
        if !found.is_empty() {
            break found;
        }
        assert!(Instant::now() < deadline, "no destage-failed event");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(refused.len(), 1, "{refused:#?}");
    assert_eq!(refused[0]["volume"], "db");
    assert!(refused[0]["count"].as_u64() >= Some(1), "{refused:#?}");
    let detail = refused[0]["detail"].as_str().unwrap_or("");
    assert!(detail.contains("held in memory only"), "{detail}");

    // SAFETY: kill(2) on our own child's pid has no memory effects.
    unsafe { libc::kill(daemon.child.id() as libc::pid_t, libc::SIGTERM) };
    let status = daemon.child.wait().unwrap();
    let mut stderr = String::new();
    daemon
        .child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(!status.success(), "{stderr}");
    assert!(
        stderr.contains("acknowledged writes are dropped"),
        "{stderr}"
    );
    let bytes: u64 = (stderr.split("(db: ").nth(1))
        .and_then(|rest| rest.split(" bytes").next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(bytes >= 4096, "{stderr}");
}
