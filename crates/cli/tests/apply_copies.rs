//! Copies added to a RAID 1 online, through the real binaries: a two-way mirror of 9 MiB files
//! serving data; the config lists a third member; `nbraid apply` plans new copies rebuilt
//! online and `--yes` starts them while an NBD client writes and reads (every read checked
//! against a model); the new copy is rebuilt, then both old members are failed and every
//! byte reads back from it, and again after a restart. Needs `nbdcopy` (fails loudly
//! without).

mod common;

use common::nbd_model::client;
use common::*;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Mutex};

/// `arrays.toml`: volume `m`, RAID 1 over the first `copies` of d0..d2 (9 MiB each), rebuilt
/// at 2 MiB/s (a few seconds: the client's writes meet the rebuild).
fn config(dir: &Path, copies: usize) -> PathBuf {
    let mut text = daemon_and_members("d", 3, "9MiB");
    let members: Vec<String> = (0..copies).map(|i| format!("\"d{i}\"")).collect();
    text += &format!(
        "[[volume]]\nname = \"m\"\nlevel = \"raid1\"\nmembers = [{}]\nsize = \"all\"\n\
         rebuild_rate = \"2MiB\"\n",
        members.join(", ")
    );
    let file = dir.join("arrays.toml");
    std::fs::write(&file, text).unwrap();
    file
}

#[test]
fn copies_added_to_a_mirror_online_are_rebuilt_and_hold_every_byte() {
    let nbdcopy = require("nbdcopy");
    let dir = tempfile::tempdir().unwrap();
    let file = config(dir.path(), 2);
    let cfg = file.to_str().unwrap();
    ok(nbraid(&["create", cfg]), "create");
    let (_d, uri) = serve(&file, "m");
    let data = fill_whole(&nbdcopy, dir.path(), &uri, (cfg, "m"), 11);

    config(dir.path(), 3);
    let plan = ok(nbraid(&["apply", cfg]), "apply (plan)");
    assert!(plan.contains("new copies rebuilt online"), "{plan}");
    let capacity_bytes = data.len() as u64;
    let model = Arc::new(Mutex::new(data));
    let stop = Arc::new(AtomicBool::new(false));
    let busy = client(uri.clone(), model.clone(), capacity_bytes, stop.clone());
    let out = ok(nbraid(&["apply", cfg, "--yes"]), "apply --yes");
    assert!(out.contains("started online"), "{out}");
    let v = status_of(cfg, "m");
    assert_eq!(v["members"][2]["state"], "rebuilding", "{v:#}");
    let v = wait_until(cfg, "m", "the new copy rebuilt", |v| {
        v["rebuild"]["state"] == "done" && v["degraded"] == false
    });
    assert_eq!(v["members"][2]["state"], "healthy", "{v:#}");
    stop.store(true, SeqCst);
    assert!(busy.join().expect("the client saw every byte it wrote") > 0);
    let data = model.lock().unwrap().clone();

    ok(nbraid(&["fail", "m", "d0", "--config", cfg]), "fail d0");
    ok(nbraid(&["fail", "m", "d1", "--config", cfg]), "fail d1");
    assert!(
        read_out(&nbdcopy, dir.path(), &uri) == data,
        "the new copy alone holds every byte"
    );
    drop(_d);
    let (mut d, uri) = serve(&file, "m");
    assert!(
        read_out(&nbdcopy, dir.path(), &uri) == data,
        "and again after a restart"
    );
    d.stop();
}
