//! Connections that hold the control socket without asking anything (half a request line,
//! or nothing at all) give their places to new ones, so the operator's `nbraid status` and
//! `nbraid fail` answer while they are still open (found by a hunt: 64 half-sent lines
//! locked both out until the daemon's 10 s line timeout, the silent ones for its 60 s).

mod common;

use common::{nbraid, ok, write_config, Daemon};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

/// The daemon's default cap on control connections (README, `status`).
const CONNECTIONS_MAX: usize = 64;

/// `CONNECTIONS_MAX` connections, every other one with half a request line sent.
fn hold_every_place(control: &std::path::Path) -> Vec<UnixStream> {
    (0..CONNECTIONS_MAX)
        .map(|i| {
            let mut s = UnixStream::connect(control).unwrap();
            if i % 2 == 0 {
                s.write_all(b"{\"v\":1,\"op\":\"sta").unwrap();
            }
            s
        })
        .collect()
}

/// What the daemon told `s` before closing it, if it did.
fn told(s: &UnixStream) -> Option<serde_json::Value> {
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).ok()?;
    serde_json::from_str(&line).ok()
}

#[test]
fn half_sent_and_silent_connections_do_not_lock_the_operator_out() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(dir.path());
    let mut daemon = Daemon::start(&cfg);
    let cfg = cfg.to_str().unwrap();
    let held = hold_every_place(&daemon.control);

    let out = ok(nbraid(&["status", "r6", "--config", cfg]), "nbraid status");
    assert!(out.contains("d5"), "{out}");
    ok(
        nbraid(&["fail", "r6", "d5", "--config", cfg]),
        "nbraid fail",
    );
    let out = ok(nbraid(&["status", "r6", "--config", cfg]), "nbraid status");
    assert!(out.contains("degraded"), "{out}");

    // The oldest gave its place up to the first command, and was told why; that command's
    // place was free again for the next ones, so the others still wait.
    let said = told(&held[0]).expect("a line saying why");
    assert_eq!(said["error"]["code"], "busy", "{said}");
    let message = said["error"]["message"].as_str().unwrap();
    assert!(message.contains("waited longest"), "{message}");
    for s in &held[1..] {
        s.set_nonblocking(true).unwrap();
        let mut byte = [0u8; 1];
        let still = std::io::Read::read(&mut &*s, &mut byte);
        assert!(
            still.is_err_and(|e| e.kind() == std::io::ErrorKind::WouldBlock),
            "the others are still open and unanswered"
        );
    }
    drop(held);
    daemon.stop();
}
