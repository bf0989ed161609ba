//! A `nbraid replace` cut short by a stop (SIGTERM or SIGKILL) while the volume takes writes:
//! the copy mirrors every write of the role onto the replacement, the role's write-hole log
//! too, which on small members lives in the first MiB. The replacement carries this array's
//! record before anything else is written to it, so the restart finds it this array's disk
//! (not "not blank"), and the copy goes on by itself (from its checkpoint after SIGTERM, from
//! the start after SIGKILL), finishes, and the replacement alone then reads back what was
//! written. RAID 5 and RAID 6 (log in the first MiB, the default for small members) and RAID
//! 1 (no log).
//! `nbraidd` is the one built beside `nbraid` (`cargo test --workspace`, as scripts/test runs
//! it).

mod common;

use common::nbd_model::client;
use common::*;
use serde_json::{json, Value};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the tests write: the capacity of the smallest volume here (RAID 1 of 9 MiB members).
const DATA_BYTES: u64 = 8 * MIB;

/// A volume `v` of `level` over `n` 9 MiB members, its rebuild slow enough that a stop
/// comes long before the copy is done.
fn config(dir: &Path, level: &str, n: usize) -> String {
    let mut text = daemon_and_members("d", n, "9MiB");
    let members: Vec<String> = (0..n).map(|i| format!("\"d{i}\"")).collect();
    text += &format!(
        "[[volume]]\nname = \"v\"\nlevel = \"{level}\"\nmembers = [{}]\nchecksums = \"off\"\nrebuild_rate = \"256KB\"\n",
        members.join(", ")
    );
    if level != "raid1" {
        text += "strip_size = \"64KiB\"\n";
    }
    let file = dir.join("arrays.toml");
    std::fs::write(&file, text).unwrap();
    file.to_str().unwrap().to_string()
}

/// Writes `data` at the volume's start through NBD.
fn write_data(nbdcopy: &Path, dir: &Path, uri: &str, data: &[u8]) {
    let src = dir.join("src.img");
    std::fs::write(&src, data).unwrap();
    ok(
        Command::new(nbdcopy).arg(&src).arg(uri).output().unwrap(),
        "nbdcopy into the volume",
    );
}

fn stop_mid_copy(level: &str, n: usize, killed: bool) {
    let nbdcopy = require("nbdcopy");
    let case = format!("{level} of {n}, killed {killed}");
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), level, n);
    let (mut d, uri) = serve(Path::new(&cfg), "v");
    let first = seeded_bytes(1, DATA_BYTES);
    write_data(&nbdcopy, dir.path(), &uri, &first);
    let new = blank_member(dir.path(), "new.img");
    ok(
        nbraid(&["replace", "v", "d1", &new, "--config", &cfg]),
        "replace",
    );
    // Written while the copy runs (64 KiB pieces, most of them partial stripes): mirrored
    // onto the replacement, with the role's write-hole log entries.
    let model = Arc::new(Mutex::new(first));
    let stop = Arc::new(AtomicBool::new(false));
    let busy = client(uri.clone(), model.clone(), DATA_BYTES, stop.clone());
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, SeqCst);
    assert!(busy.join().unwrap() > 0, "{case}: no writes");
    let data = model.lock().unwrap().clone();
    let v = status_of(&cfg, "v");
    assert_eq!(v["rebuild"]["state"], "running", "{case}: {v:#}");
    if killed {
        d.child.kill().unwrap();
        d.child.wait().unwrap();
    } else {
        d.stop();
    }

    let mut d = Daemon::start(Path::new(&cfg));
    let v = status_of(&cfg, "v");
    assert_eq!(v["degraded"], false, "{case}: {v:#}");
    assert_eq!(
        v["spares"],
        json!([]),
        "{case}: the replacement stands by: {v:#}"
    );
    // The daemon's watcher starts the copy within its next look.
    wait_until(&cfg, "v", "the copy going on", |v| {
        v["rebuild"]["roles"] == json!([1])
    });
    let done: Value = serde_json::from_str(&ok(
        nbraid(&[
            "rebuild", "v", "--rate", "200MB/s", "--config", &cfg, "--json",
        ]),
        "rebuild (replace)",
    ))
    .unwrap();
    assert_eq!(done["state"], "done", "{case}: {done}");
    let v = status_of(&cfg, "v");
    assert_eq!(v["degraded"], false, "{case}: {v:#}");
    assert_eq!(v["spares"], json!([]), "{case}: {v:#}");
    let path = v["members"][1]["path"].as_str().unwrap_or_default();
    assert!(path.ends_with("new.img"), "{case}: {v:#}");
    // The replacement alone serves role 1's bytes once another member is out.
    ok(
        nbraid(&["fail", "v", "d0", "--force", "--config", &cfg]),
        "fail d0",
    );
    let uri = format!(
        "nbd+unix:///v?socket={}",
        dir.path().join("nbd.sock").display()
    );
    prefix_reads_back(&nbdcopy, dir.path(), &uri, &data);
    d.stop();
}

#[test]
fn raid5_replace_stopped_mid_copy_under_writes_goes_on() {
    stop_mid_copy("raid5", 4, false);
    stop_mid_copy("raid5", 4, true);
}

#[test]
fn raid6_replace_stopped_mid_copy_under_writes_goes_on() {
    stop_mid_copy("raid6", 5, false);
    stop_mid_copy("raid6", 5, true);
}

#[test]
fn raid1_replace_stopped_mid_copy_under_writes_goes_on() {
    stop_mid_copy("raid1", 2, false);
    stop_mid_copy("raid1", 2, true);
}
