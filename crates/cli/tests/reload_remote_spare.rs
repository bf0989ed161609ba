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

/// A RAID 6 daemon whose reload added spare `rs`, a served file, standing by; what each
/// test goes on from. Fields drop in order: the daemon and the server before the folder.
struct StandingBy {
    daemon: Daemon,
    _kit: Kit,
    uri: String,
    config: std::path::PathBuf,
    /// The config before the spare was declared.
    base: String,
    /// `status` once the spare stood by.
    status: serde_json::Value,
    _dir: tempfile::TempDir,
}

fn remote_spare_standing_by() -> StandingBy {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path());
    let base = std::fs::read_to_string(&config).unwrap();
    let daemon = Daemon::start(&config);
    let (_kit, uri) = served_file(dir.path(), "rs", 9 * MIB);
    std::fs::write(&config, with_remote_spare(&base, "rs", &uri)).unwrap();
    daemon.hangup();
    let status = wait_for(
        config.to_str().unwrap(),
        "the remote spare standing by",
        |v| v["spares"] == serde_json::json!(["rs"]),
    );
    StandingBy {
        daemon,
        _kit,
        uri,
        config,
        base,
        status,
        _dir: dir,
    }
}

/// d3 failed on `cfg`: the spare takes role 3 and is rebuilt; the status then.
fn fail_d3_into_the_spare(cfg: &str) -> serde_json::Value {
    ok(nbraid(&["fail", "r6", "d3", "--config", cfg]), "fail d3");
    wait_for(cfg, "the remote spare in role 3, rebuilt", |v| {
        v["members"][3]["id"] == "rs" && v["rebuild"]["state"] == "done"
    })
}

#[test]
fn a_remote_spare_a_reload_adds_stands_by_and_takes_a_failed_role() {
    let mut s = remote_spare_standing_by();
    let cfg = s.config.to_str().unwrap();
    assert_eq!(s.status["state"], "healthy", "{:#}", s.status);
    let v = fail_d3_into_the_spare(cfg);
    assert_eq!(v["members"][3]["path"], s.uri.as_str(), "{v:#}");
    assert_eq!(v["members"][3]["state"], "healthy", "{v:#}");
    assert_eq!(v["spares"], serde_json::json!([]), "{v:#}");
    s.daemon.stop();
}

/// The URI of a remote member serving a role, declared again under another id as a spare
/// (its old `[[member]]` renamed): refused, the member left as it serves.
#[test]
fn a_uri_already_serving_is_not_taken_as_a_spare_too() {
    let mut s = remote_spare_standing_by();
    let (cfg, uri) = (s.config.to_str().unwrap(), s.uri.as_str());
    fail_d3_into_the_spare(cfg);
    // The same URI under a new id, among the spares: the member in role 3 is not a spare.
    std::fs::write(&s.config, with_remote_spare(&s.base, "again", uri)).unwrap();
    s.daemon.hangup();
    std::thread::sleep(std::time::Duration::from_secs(2));
    let v = volume_status(cfg);
    assert_eq!(v["spares"], serde_json::json!([]), "{v:#}");
    // The config names it `again` now: the role goes by that id, still served by the URI.
    assert_eq!(v["members"][3]["path"], uri, "{v:#}");
    assert_eq!(v["members"][3]["state"], "healthy", "{v:#}");
    let o = nbraid(&["add", "r6", uri, "--config", cfg]);
    assert!(!o.status.success(), "the serving URI added again");
    s.daemon.stop();
}
