//! A remote member that comes back and fails again partway through its re-add resync (nbdkit's
//! error filter answering EIO to every write once a file exists): `status` says the resync
//! failed and why, naming the member, and the event says failed. Before, it said "readd done
//! over 62 MiB", the log "resync of v's returning members done", the member still failed.

mod common;

use common::{
    fill, member_files, nbraid, ok, raid1_local_and_remote, require, serve, wait_until, Kit,
};
use serde_json::Value;
use std::path::Path;
use std::time::{Duration, Instant};

/// nbdkit serving `file` on `sock`, every write answering EIO while `errors` exists.
fn erring_kit(sock: &Path, file: &Path, errors: &Path) -> Kit {
    let when = format!("error-pwrite-file={}", errors.display());
    Kit::serve_with(
        sock,
        file,
        &["--filter=error"],
        &["error-pwrite=EIO", "error-pwrite-rate=100%", &when],
    )
}

#[test]
fn a_returning_member_that_fails_mid_resync_is_said_failed_not_done() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let [local, remote] = member_files(d, ["m0.img", "m1.img"]);
    let sock = d.join("m1.sock");
    let cfg = raid1_local_and_remote(d, &local, &sock, "3s");
    // Slow enough that the resync is seen under way before its writes fail.
    let text = std::fs::read_to_string(&cfg).unwrap() + "rebuild_rate = \"4MiB\"\n";
    std::fs::write(&cfg, text).unwrap();
    let c = cfg.to_str().unwrap();
    let nbdcopy = require("nbdcopy");
    let errors = d.join("m1.errors");
    let kit = erring_kit(&sock, &remote, &errors);
    let (mut daemon, uri) = serve(&cfg, "v");
    fill(&nbdcopy, d, &uri, 3);

    // Away while everything is written again, then back: re-added, resyncing.
    drop(kit);
    let data = fill(&nbdcopy, d, &uri, 4);
    let _kit = erring_kit(&sock, &remote, &errors);
    wait_until(c, "v", "the resync under way", |v| {
        v["readd"]["state"] == "running" && v["readd"]["position_bytes"].as_u64() > Some(0)
    });
    // Its writes fail from now on.
    std::fs::write(&errors, "").unwrap();
    let v = wait_until(c, "v", "the resync over", |v| {
        v["readd"]["state"] == "failed" || v["readd"]["state"] == "done"
    });
    assert_eq!(v["readd"]["state"], "failed", "{v:#}");
    let why = v["readd"]["error"].as_str().unwrap_or_default();
    assert!(
        why.contains("its target") && why.contains("m1.sock"),
        "{why}"
    );
    assert_eq!(v["state"], "degraded", "{v:#}");
    let text = ok(nbraid(&["status", "v", "--config", c]), "status");
    assert!(!text.contains("readd done"), "{text}");

    // The event says the resync failed.
    let deadline = Instant::now() + Duration::from_secs(10);
    let finished = loop {
        let events = ok(nbraid(&["events", "--json", "--config", c]), "events");
        let finished: Vec<Value> = (events.lines())
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|e| e["event"] == "resync-finished")
            .collect();
        if !finished.is_empty() || Instant::now() > deadline {
            break finished;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let last = finished.last().expect("a resync-finished event");
    assert!(last.to_string().contains("failed"), "{finished:#?}");
    common::prefix_reads_back(&nbdcopy, d, &uri, &data);
    daemon.stop();
}
