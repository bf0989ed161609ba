//! A flood of connections that hang up in the handshake (a port scanner, a client with the
//! wrong export) wrote one INFO line each: 40 connections, 40 lines. Now the first is said,
//! the rest counted and said as a count at most every 10 s; a client served meanwhile is
//! unaffected.

mod common;

use common::*;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

#[test]
fn connections_hanging_up_in_the_handshake_are_one_line_not_one_each() {
    let dir = tempfile::tempdir().unwrap();
    let mut text = daemon_and_members("m", 1, "8MiB");
    text += "[[volume]]\nname = \"v\"\nlevel = \"jbod\"\nmembers = [\"m0\"]\n";
    let config = dir.path().join("arrays.toml");
    std::fs::write(&config, text).unwrap();
    let log = dir.path().join("nbraidd.log");
    let mut d = Daemon::start_logging(&config, &log, "info");
    let sock = dir.path().join("nbd.sock");
    for _ in 0..40 {
        // The greeting read, half an option header sent, and gone.
        let mut s = UnixStream::connect(&sock).unwrap();
        let mut greeting = [0u8; 18];
        s.read_exact(&mut greeting).unwrap();
        s.write_all(&[0, 0, 0, 3, b'I', b'H']).unwrap();
    }
    let said = || {
        let text = std::fs::read_to_string(&log).unwrap();
        text.lines()
            .filter(|l| l.contains("connection ended"))
            .count()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while said() == 0 {
        assert!(Instant::now() < deadline, "the first hang-up is said");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(500));
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(said(), 1, "{text}");
    assert!(text.contains("in the handshake"), "{text}");
    // A client is served all the same.
    let info = std::process::Command::new(require("nbdinfo"))
        .arg(common::blocks::unix_uri(dir.path(), "v"))
        .output()
        .unwrap();
    assert!(info.status.success(), "{info:?}");
    let _ = d.terminate();
}
