//! A restart mid-reshape of a dirty mirrored volume, through the real binaries: the start
//! resyncs the reshaping array in the background while the reshape copies on. When the copy
//! ended before the resync, the reshape's swap left the resync running on the array no longer
//! served: the new array's own resync never started (`status` said the resync done with all
//! of it left, `apply` was refused "a resync is running", a clean stop still started dirty).
//! Now the old array's resync is cancelled and waited for before the swap, and the new array
//! resyncs what the bitmap still marks. Needs `nbdcopy` (fails loudly without); `nbraidd` is
//! the one built beside `nbraid`.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;

/// `arrays.toml`: RAID 10 `db` over four 12 MiB files (20 MiB), strip `strip`, its passes at
/// 8 MiB/s.
fn config(dir: &Path, strip: &str) -> PathBuf {
    let mut text = daemon_and_members("d", 4, "12MiB");
    text += &format!(
        "[[volume]]\nname = \"db\"\nlevel = \"raid10\"\nstrip_size = \"{strip}\"\n\
         members = [\"d0\", \"d1\", \"d2\", \"d3\"]\nrebuild_rate = \"8MiB\"\n"
    );
    let file = dir.join("arrays.toml");
    std::fs::write(&file, text).unwrap();
    file
}

/// Copies `src` into the volume again and again (the same bytes: whatever a kill tears
/// reads back the same) until `stop` or the daemon goes away.
fn keep_writing(src: PathBuf, uri: String, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    let nbdcopy = require("nbdcopy");
    std::thread::spawn(move || {
        while !stop.load(SeqCst) {
            let copied = Command::new(&nbdcopy).arg(&src).arg(&uri).output();
            if !copied.is_ok_and(|o| o.status.success()) {
                return;
            }
        }
    })
}

/// The line of `log` saying `text` first, by index.
fn line_of(log: &[String], text: &str) -> Option<usize> {
    log.iter().position(|l| l.contains(text))
}

#[test]
fn a_resync_left_by_a_restart_mid_reshape_moves_to_the_new_shape_at_the_swap() {
    let nbdcopy = require("nbdcopy");
    let dir = tempfile::tempdir().unwrap();
    let file = config(dir.path(), "64KiB");
    let cfg = file.to_str().unwrap();
    ok(nbraid(&["create", cfg]), "create");
    let (mut d, uri) = serve(&file, "db");
    let data = fill_whole(&nbdcopy, dir.path(), &uri, (cfg, "db"), 11);
    let cap = data.len() as u64;
    assert_eq!(cap, 20 * MIB);
    let src = dir.path().join("src.img");

    // A strip change online, killed late in the copy while a client writes: the records are
    // dirty, and the restart resyncs the whole volume (one bitmap chunk) while the reshape
    // has only its last quarter left to copy.
    config(dir.path(), "128KiB");
    let stop = Arc::new(AtomicBool::new(false));
    let writer = keep_writing(src.clone(), uri.clone(), stop.clone());
    ok(nbraid(&["apply", cfg, "--yes"]), "apply --yes");
    wait_until(cfg, "db", "the copy's last quarter", |v| {
        v["reshape"]["position_bytes"].as_u64().unwrap_or(0) >= cap * 3 / 4
    });
    d.child.kill().unwrap(); // SIGKILL
    d.child.wait().unwrap();
    stop.store(true, SeqCst);
    writer.join().unwrap();

    let log = dir.path().join("nbraidd.log");
    let mut d = Daemon::start_logging(&file, &log, "info");
    let v = status_of(cfg, "db");
    assert!(!v["reshape"].is_null(), "the reshape carries on: {v:#}");
    assert!(
        !v["resync"].is_null(),
        "the start resyncs the dirty volume in the background: {v:#}"
    );
    wait_until(cfg, "db", "the reshape to end", |v| {
        v["reshape"]["state"] == "done"
    });
    // The old array's pass was stopped, the new array's ran: all of it resynced. (It used to
    // say done with all of it left: the pass that ran was the old array's.)
    let v = wait_until(cfg, "db", "the resync to end", |v| {
        v["resync"]["state"] == "done"
    });
    assert_eq!(
        v["resync"]["remaining_bytes"].as_u64(),
        Some(0),
        "nothing left to resync once it says done: {v:#}"
    );
    reads_back(&nbdcopy, dir.path(), &uri, &data);

    // The old array's resync returned before the new shape served (it used to end after).
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<String> = text.lines().map(str::to_string).collect();
    let swap = line_of(&lines, "the new shape serves alone").expect("the swap is logged");
    let cancelled = line_of(&lines, "background resync of db cancelled");
    assert!(
        cancelled.is_some_and(|c| c < swap),
        "the old array's resync was cancelled before the swap (the case under test: it was still running when the copy ended):\n{text}"
    );
    let done_after = lines[swap..]
        .iter()
        .filter(|l| l.contains("background resync of db done"))
        .count();
    assert_eq!(
        done_after, 1,
        "one resync after the swap, the new array's:\n{text}"
    );

    // `apply` is not refused for a resync that is not running. (The checksums the unclean
    // start dropped are computed again after the resync, and a reshape waits for that.)
    wait_until(cfg, "db", "the checksum refill to end", |v| {
        v["checksum_refill"].is_null() || v["checksum_refill"]["state"] == "done"
    });
    config(dir.path(), "64KiB");
    let out = ok(
        nbraid(&["apply", cfg, "--yes"]),
        "apply --yes after the resync",
    );
    assert!(out.contains("started online"), "{out}");
    wait_until(cfg, "db", "the second reshape to end", |v| {
        v["reshape"]["state"] == "done" && v["resync"]["state"] == "done"
    });
    reads_back(&nbdcopy, dir.path(), &uri, &data);
    d.stop();

    // Stopped cleanly, started clean: nothing to resync.
    let (mut d, uri) = serve(&file, "db");
    let v = status_of(cfg, "db");
    assert!(v["resync"].is_null(), "a clean stop starts clean: {v:#}");
    reads_back(&nbdcopy, dir.path(), &uri, &data);
    d.stop();
}
