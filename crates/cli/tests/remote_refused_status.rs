//! A remote member whose server comes back with an export too small for it is not used (its
//! requests fail, the start leaves it out), and `status` says why: before, it said only the
//! old failure ("stopped answering") and "re-added by itself once it answers", while the
//! server did answer and only the log named the size. Once the export is as large as the
//! member again, it is re-added.

mod common;

use common::{
    fill, member_files, nbraid, ok, prefix_reads_back, raid1_local_and_remote, require, serve,
    wait_until, Kit,
};

#[test]
fn a_remote_export_back_too_small_is_named_in_status() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let [local, remote] = member_files(d, ["m0.img", "m1.img"]);
    let sock = d.join("m1.sock");
    let kit = Kit::serve(&sock, &remote);
    let cfg = raid1_local_and_remote(d, &local, &sock, "2s");
    let c = cfg.to_str().unwrap();
    let nbdcopy = require("nbdcopy");
    let (mut daemon, uri) = serve(&cfg, "v");
    let data = fill(&nbdcopy, d, &uri, 9);
    daemon.stop();

    // The server comes back with the export cut to 32 MiB (its bytes kept on the file).
    drop(kit);
    let kit = Kit::serve_with(&sock, &remote, &["--filter=truncate"], &["truncate=32M"]);
    let (mut daemon, uri) = serve(&cfg, "v");
    let v = wait_until(c, "v", "the refusal said", |v| {
        v["members"][1]["failure"]["refused_now"].is_string()
    });
    let refused = v["members"][1]["failure"]["refused_now"].as_str().unwrap();
    assert!(
        refused.contains("33554432 bytes but the member needs"),
        "{refused}"
    );
    assert_eq!(v["state"], "degraded", "{v:#}");
    let text = ok(nbraid(&["status", "v", "--config", c]), "status");
    assert!(
        text.contains("its server answers again but is not used"),
        "{text}"
    );
    prefix_reads_back(&nbdcopy, d, &uri, &data);

    // As large as the member again: re-added, and the refusal is gone.
    drop(kit);
    let _kit = Kit::serve(&sock, &remote);
    let v = wait_until(c, "v", "the member back", |v| v["state"] == "healthy");
    assert!(v["members"][1]["failure"].is_null(), "{v:#}");
    ok(nbraid(&["fail", "v", "m0", "--config", c]), "fail m0");
    prefix_reads_back(&nbdcopy, d, &uri, &data);
    daemon.stop();
}
