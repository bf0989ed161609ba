//! A volume past its tolerance with writes not yet recorded clean: the daemon tries to
//! record it clean at every idle tick and fails each time. The warning is said once (and
//! again when it changes, or every few minutes), not once per tick.

mod common;

use common::blocks::unix_uri;
use common::*;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

#[test]
fn a_volume_that_cannot_be_recorded_clean_says_so_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut text = daemon_and_members("m", 2, "40MiB");
    text += "[[volume]]\nname = \"v\"\nlevel = \"raid1\"\nmembers = [\"m0\", \"m1\"]\n";
    let config = dir.path().join("arrays.toml");
    std::fs::write(&config, text).unwrap();
    let cfg = config.to_str().unwrap();
    let log = dir.path().join("nbraidd.log");
    let mut d = Daemon::start_logging(&config, &log, "warn");
    let uri = unix_uri(dir.path(), "v");
    // A write leaves the volume dirty; both members fail before it is recorded clean.
    let qemu_io = require("qemu-io");
    let wrote = Command::new(qemu_io)
        .args(["-f", "raw", "-c", "write -P 0x55 0 64k", &uri])
        .output()
        .unwrap();
    assert!(wrote.status.success(), "{wrote:?}");
    ok(nbraid(&["fail", "v", "m1", "--config", cfg]), "fail m1");
    ok(
        nbraid(&["fail", "v", "m0", "--force", "--config", cfg]),
        "fail m0",
    );
    let said = |log: &Path| {
        let text = std::fs::read_to_string(log).unwrap();
        text.lines()
            .filter(|l| l.contains("recording the volume clean"))
            .count()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while said(&log) == 0 {
        assert!(Instant::now() < deadline, "the failing clean mark is said");
        std::thread::sleep(Duration::from_millis(100));
    }
    // Several idle ticks (1.25 s each by default) later: still said once.
    std::thread::sleep(Duration::from_secs(6));
    assert_eq!(said(&log), 1, "{}", std::fs::read_to_string(&log).unwrap());
    let _ = d.terminate();
}
