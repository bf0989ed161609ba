//! A remote spare (an NBD URI) added to the config and picked up by a reload (SIGHUP) is
//! opened then, as `nbraid add` opens a spare, and stands by — a failed role takes it. It was
//! refused ("opened at the next start"). A URI that already serves is refused as a spare: a
//! member serves one place at a time. Exports are files served by `nbdkit file`.

mod common;

use common::*;

/// `base` (the RAID 6 config, its volume table last) with spare `id` at `uri` declared.
fn with_remote_spare(base: &str, id: &str, uri: &str) -> String {
    format!(
        "{base}spares = [\"{id}\"]\n\n[[member]]\nid = \"{id}\"\npath = \"{uri}\"\nsize = \"9MiB\"\ntimeout = \"2s\"\n"
    )
}

#[test]
fn a_remote_spare_a_reload_adds_stands_by_and_takes_a_failed_role() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path());
    let cfg = config.to_str().unwrap();
    let base = std::fs::read_to_string(&config).unwrap();
    let mut d = Daemon::start(&config);
    let (_kit, uri) = served_file(dir.path(), "rs", 9 * MIB);
    std::fs::write(&config, with_remote_spare(&base, "rs", &uri)).unwrap();
    d.hangup();
    let v = wait_for(cfg, "the remote spare standing by", |v| {
        v["spares"] == serde_json::json!(["rs"])
    });
    assert_eq!(v["state"], "healthy", "{v:#}");

    ok(nbraid(&["fail", "r6", "d3", "--config", cfg]), "fail d3");
    let v = wait_for(cfg, "the remote spare in role 3, rebuilt", |v| {
        v["members"][3]["id"] == "rs" && v["rebuild"]["state"] == "done"
    });
    assert_eq!(v["members"][3]["path"], uri.as_str(), "{v:#}");
    assert_eq!(v["members"][3]["state"], "healthy", "{v:#}");
    assert_eq!(v["spares"], serde_json::json!([]), "{v:#}");
    d.stop();
}

/// The URI of a remote member serving a role, declared again under another id as a spare
/// (its old `[[member]]` renamed): refused, the member left as it serves.
#[test]
fn a_uri_already_serving_is_not_taken_as_a_spare_too() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path());
    let cfg = config.to_str().unwrap();
    let base = std::fs::read_to_string(&config).unwrap();
    let mut d = Daemon::start(&config);
    let (_kit, uri) = served_file(dir.path(), "rs", 9 * MIB);
    std::fs::write(&config, with_remote_spare(&base, "rs", &uri)).unwrap();
    d.hangup();
    wait_for(cfg, "the remote spare standing by", |v| {
        v["spares"] == serde_json::json!(["rs"])
    });
    ok(nbraid(&["fail", "r6", "d3", "--config", cfg]), "fail d3");
    wait_for(cfg, "the remote spare in role 3, rebuilt", |v| {
        v["members"][3]["id"] == "rs" && v["rebuild"]["state"] == "done"
    });
    // The same URI under a new id, among the spares: the member in role 3 is not a spare.
    std::fs::write(&config, with_remote_spare(&base, "again", &uri)).unwrap();
    d.hangup();
    std::thread::sleep(std::time::Duration::from_secs(2));
    let v = volume_status(cfg);
    assert_eq!(v["spares"], serde_json::json!([]), "{v:#}");
    // The config names it `again` now: the role goes by that id, still served by the URI.
    assert_eq!(v["members"][3]["path"], uri.as_str(), "{v:#}");
    assert_eq!(v["members"][3]["state"], "healthy", "{v:#}");
    let o = nbraid(&["add", "r6", &uri, "--config", cfg]);
    assert!(!o.status.success(), "the serving URI added again");
    d.stop();
}
