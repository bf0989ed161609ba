//! A reshape through the real binaries, online: a RAID 5 of three members serving data grows
//! to four with `nbraid apply --yes` against the running daemon while an NBD client keeps
//! writing and reading (every read checked against a model of the volume); the new size is
//! what a new connection sees (nbdinfo). Then it moves to RAID 6 with a fifth member (a scrub
//! asked meanwhile is refused), the daemon is SIGKILLed mid-way; after the restart the reshape finishes, every byte reads back,
//! and two failed members are survived. Needs `nbdcopy` and `nbdinfo` (fails loudly
//! without); `nbraidd` is the one built beside `nbraid` (`cargo build --bin nbraidd`).

mod common;

use common::nbd_model::{client, size_seen};
use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Mutex};

/// `arrays.toml`: volume `db` of `level` over the first `members` of d0..d4 (9 MiB files: 1 MiB
/// of metadata, 1 MiB of block checksums, a 7 MiB region),
/// strip 64 KiB, reshaped at `rate`.
fn config(dir: &Path, level: &str, members: usize, rate: &str) -> PathBuf {
    let mut text = daemon_and_members("d", 5, "9MiB");
    let ids: Vec<String> = (0..members).map(|i| format!("\"d{i}\"")).collect();
    text += &format!(
        "[[volume]]\nname = \"db\"\nlevel = \"{level}\"\nstrip_size = \"64KiB\"\n\
         members = [{}]\nrebuild_rate = \"{rate}\"\n",
        ids.join(", ")
    );
    let file = dir.join("arrays.toml");
    std::fs::write(&file, text).unwrap();
    file
}

fn reshape_done_at(v: &Value, capacity: u64) -> bool {
    v["reshape"]["state"] == "done" && v["capacity_bytes"].as_u64() == Some(capacity)
}

#[test]
fn raid5_grows_online_then_moves_to_raid6_through_a_sigkill() {
    let (nbdcopy, nbdinfo) = (require("nbdcopy"), require("nbdinfo"));
    let dir = tempfile::tempdir().unwrap();
    let file = config(dir.path(), "raid5", 3, "4MiB");
    let cfg = file.to_str().unwrap();
    ok(nbraid(&["create", cfg]), "create");

    let (mut d, uri) = serve(&file, "db");
    let cap = status_of(cfg, "db")["capacity_bytes"].as_u64().unwrap();
    assert_eq!(cap, 14 * MIB);
    let data = seeded_bytes(5, cap);
    copy_in(&nbdcopy, dir.path(), &uri, &data);

    // RAID 5 of 3 → 4, online, while a client writes and reads.
    let model = Arc::new(Mutex::new(data));
    let stop = Arc::new(AtomicBool::new(false));
    let busy = client(uri.clone(), model.clone(), cap, stop.clone());
    config(dir.path(), "raid5", 4, "4MiB");
    let out = ok(nbraid(&["apply", cfg, "--yes"]), "apply --yes");
    assert!(out.contains("~ members 3 → 4"), "{out}");
    assert!(out.contains("started online"), "{out}");
    let v = status_of(cfg, "db");
    assert!(!v["reshape"].is_null(), "status shows the reshape: {v:#}");
    wait_until(cfg, "db", "the reshape to 4 members", |v| {
        reshape_done_at(v, 21 * MIB)
    });
    stop.store(true, SeqCst);
    let rounds = busy.join().expect("the client saw every byte it wrote");
    assert!(rounds > 0, "the client ran during the reshape");
    assert_eq!(
        size_seen(&nbdinfo, &uri),
        21 * MIB,
        "a new connection sees the new size"
    );
    let mut data = model.lock().unwrap().clone();
    prefix_reads_back(&nbdcopy, dir.path(), &uri, &data);
    data.extend(seeded_bytes(6, 7 * MIB));
    copy_in(&nbdcopy, dir.path(), &uri, &data);

    // RAID 5 of 4 → RAID 6 of 5, online and slowly enough to be killed mid-way.
    config(dir.path(), "raid6", 5, "1MiB");
    let out = ok(nbraid(&["apply", cfg, "--yes"]), "apply --yes to raid6");
    assert!(out.contains("~ level raid5 → raid6"), "{out}");
    assert!(out.contains("started online"), "{out}");
    wait_until(cfg, "db", "the reshape to move", |v| {
        v["reshape"]["position_bytes"].as_u64().unwrap_or(0) > 0
    });
    // A scrub walks one shape: refused, saying why (it used to check nothing and say done).
    let out = nbraid(&["scrub", "db", "--config", cfg]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "scrub during a reshape: {said}");
    assert!(said.contains("is being reshaped"), "{said}");
    d.child.kill().unwrap(); // SIGKILL
    d.child.wait().unwrap();
    config(dir.path(), "raid6", 5, "64MiB");
    let (mut d, uri) = serve(&file, "db");
    let v = status_of(cfg, "db");
    assert!(!v["reshape"].is_null(), "the restart carries on: {v:#}");
    wait_until(cfg, "db", "the reshape to RAID 6", |v| {
        reshape_done_at(v, 21 * MIB)
    });
    prefix_reads_back(&nbdcopy, dir.path(), &uri, &data);
    d.stop();

    let (mut d, uri) = serve(&file, "db");
    let v = status_of(cfg, "db");
    assert_eq!(v["level"], "raid6", "{v:#}");
    assert_eq!(v["capacity_bytes"].as_u64(), Some(21 * MIB));
    assert!(v["reshape"].is_null(), "no reshape left: {v:#}");
    ok(nbraid(&["fail", "db", "d1", "--config", cfg]), "fail d1");
    ok(nbraid(&["fail", "db", "d3", "--config", cfg]), "fail d3");
    reads_back(&nbdcopy, dir.path(), &uri, &data);
    d.stop();
}
