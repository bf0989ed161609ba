//! An orderly stop (SIGTERM) that lands while the idle marker (`clean_delay`) is recording
//! the volume clean: the stop used to abort that marker mid-way — after it had claimed the
//! clean point (the in-memory flag said clean) but before the records said so on disk — and
//! its own clean mark then found "already clean" and exited 0 with the records dirty: the
//! next start was unclean with nothing to resync (`checksum_refill_e2e.rs` failed so about
//! once in six full runs). Each stop here follows a write by about the marker's delay, many
//! times over: every next start must be clean. `nbraidd` is the one built beside `nbraid`.

mod common;

use common::*;
use std::time::Duration;

#[test]
fn a_stop_amid_the_idle_clean_mark_still_records_the_volume_clean() {
    let nbdcopy = require("nbdcopy");
    let dir = tempfile::tempdir().unwrap();
    let mut text = daemon_and_members("m", 2, "24MiB");
    text += "[[volume]]\nname = \"m\"\nlevel = \"raid1\"\nmembers = [\"m0\", \"m1\"]\n\
             clean_delay = \"10ms\"\nchecksums = \"off\"\n";
    let config = dir.path().join("arrays.toml");
    std::fs::write(&config, text).unwrap();
    let cfg = config.to_str().unwrap();
    let src = dir.path().join("block.bin");
    std::fs::write(&src, seeded_bytes(3, 256 << 10)).unwrap();
    let rounds = std::env::var("NBRAID_STOP_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(24u64);
    let mut unclean = Vec::new();
    for round in 0..rounds {
        let (mut d, uri) = serve(&config, "m");
        if round > 0 && status_of(cfg, "m")["metadata"]["clean_at_start"] != true {
            unclean.push(round - 1);
        }
        let o = std::process::Command::new(&nbdcopy)
            .arg(&src)
            .arg(&uri)
            .output()
            .unwrap();
        assert!(o.status.success(), "write");
        // Around the marker's delay (10 ms, looked at every 5 ms): the stop meets it
        // before, during or after its clean mark.
        std::thread::sleep(Duration::from_millis(round % 4 * 4));
        d.stop();
    }
    let (mut d, _) = serve(&config, "m");
    if status_of(cfg, "m")["metadata"]["clean_at_start"] != true {
        unclean.push(rounds - 1);
    }
    d.stop();
    assert!(
        unclean.is_empty(),
        "stops that exited 0 with the records dirty (rounds {unclean:?} of {rounds})"
    );
}
