//! A remote member the operator failed and removed comes back with `nbraid add VOLUME URI`
//! (or its config id): opened again with the settings the config declares for it and
//! rebuilt whole into its role — before, only a member still in its role matched the URI,
//! and the refusal said to declare in the config a member the config declares.

mod common;

use common::*;

fn healthy(cfg: &str) {
    wait_until(cfg, "v", "both members healthy", |v| {
        v["degraded"] == false
            && v["members"]
                .as_array()
                .is_some_and(|m| m.iter().all(|m| m["state"] == "healthy"))
    });
}

/// m0 failed: what the volume reads comes from the remote member alone.
fn remote_alone_reads_back(cfg: &str, uri: &str, dir: &std::path::Path, data: &[u8]) {
    let nbdcopy = require("nbdcopy");
    ok(nbraid(&["fail", "v", "m0", "--config", cfg]), "fail m0");
    // The volume's first 32 MiB were written.
    prefix_reads_back(&nbdcopy, dir, uri, data);
    ok(nbraid(&["remove", "v", "m0", "--config", cfg]), "remove m0");
    ok(nbraid(&["add", "v", "m0", "--config", cfg]), "add m0 back");
    healthy(cfg);
}

#[test]
fn a_removed_remote_member_is_added_back_by_its_uri_or_id() {
    let nbdcopy = require("nbdcopy");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let [local, remote] = member_files(d, ["m0.img", "m1.img"]);
    let sock = d.join("m1.sock");
    let _kit = Kit::serve(&sock, &remote);
    let config = raid1_local_and_remote(d, &local, &sock, "1s");
    let cfg = config.to_str().unwrap();
    let member_uri = format!("nbd+unix:///?socket={}", sock.display());

    let (mut daemon, uri) = serve(&config, "v");
    let data = fill(&nbdcopy, d, &uri, 0x1f83_d9ab_fb41_bd6b);
    ok(nbraid(&["fail", "v", "m1", "--config", cfg]), "fail m1");
    ok(nbraid(&["remove", "v", "m1", "--config", cfg]), "remove m1");
    let said = ok(
        nbraid(&["add", "v", &member_uri, "--config", cfg]),
        "add the removed remote member by its URI",
    );
    assert!(
        said.contains("m1") && said.contains("rebuilding it whole"),
        "{said}"
    );
    healthy(cfg);
    let v = status_of(cfg, "v");
    assert_eq!(v["members"][1]["id"], "m1", "{v:#}");
    assert_eq!(v["members"][1]["path"], member_uri.as_str(), "{v:#}");
    remote_alone_reads_back(cfg, &uri, d, &data);

    // Removed, then a restart (the records no longer name it in role 1): by its id.
    ok(nbraid(&["fail", "v", "m1", "--config", cfg]), "fail m1");
    ok(nbraid(&["remove", "v", "m1", "--config", cfg]), "remove m1");
    daemon.stop();
    let (mut daemon, uri) = serve(&config, "v");
    let said = ok(nbraid(&["add", "v", "m1", "--config", cfg]), "add m1");
    assert!(said.contains(&member_uri), "{said}");
    healthy(cfg);
    remote_alone_reads_back(cfg, &uri, d, &data);
    daemon.stop();
}

/// A remote member failed and rebuilt over by a spare (departed, still listed): its URI
/// added back makes it a spare again, and it takes a role when the next member fails.
#[test]
fn a_departed_remote_member_is_added_back_as_a_spare() {
    let nbdcopy = require("nbdcopy");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let [local, remote, spare] = member_files(d, ["m0.img", "m1.img", "s.img"]);
    let sock = d.join("m1.sock");
    let _kit = Kit::serve(&sock, &remote);
    let config = raid1_local_and_remote(d, &local, &sock, "1s");
    let text = std::fs::read_to_string(&config).unwrap().replace(
        "[[volume]]",
        &format!(
            "[[member]]\nid = \"s\"\npath = \"{}\"\nsize = \"40MiB\"\n\n[[volume]]",
            spare.display()
        ),
    ) + "spares = [\"s\"]\n";
    std::fs::write(&config, text).unwrap();
    let cfg = config.to_str().unwrap();
    let member_uri = format!("nbd+unix:///?socket={}", sock.display());

    let (mut daemon, uri) = serve(&config, "v");
    let data = fill(&nbdcopy, d, &uri, 0x5be0_cd19_137e_2179);
    ok(nbraid(&["fail", "v", "m1", "--config", cfg]), "fail m1");
    healthy(cfg);
    let v = status_of(cfg, "v");
    assert_eq!(v["members"][1]["id"], "s", "{v:#}");
    assert_eq!(v["departed"][0]["id"], "m1", "{v:#}");
    let said = ok(
        nbraid(&["add", "v", &member_uri, "--config", cfg]),
        "add the departed remote member by its URI",
    );
    assert!(said.contains("hot spare"), "{said}");
    let v = status_of(cfg, "v");
    assert_eq!(v["spares"], serde_json::json!(["m1"]), "{v:#}");
    assert_eq!(v["departed"], serde_json::json!([]), "{v:#}");
    ok(nbraid(&["fail", "v", "s", "--config", cfg]), "fail s");
    healthy(cfg);
    let v = status_of(cfg, "v");
    assert_eq!(v["members"][1]["id"], "m1", "{v:#}");
    remote_alone_reads_back(cfg, &uri, d, &data);
    daemon.stop();
}
