//! A role whose member was removed (`nbraid remove`) is named after a restart as it was
//! before it: by the config's member for the role, its id and its file, marked missing —
//! in `status`, in `status --json` and in the `members = [...]` line the notes suggest. It
//! was `?`, at `<cwd>/role 2 (missing)`, and `?` in the line. Through the real binaries.

mod common;

use common::*;

/// RAID 6 d0..d5 with spare s0: d1 fails and s0 takes its role; d2 fails and is removed
/// (its file keeps its old record). After a restart role 2 is d2 at d2.img, missing, and the
/// suggested line is the config's members with s0 in role 1 and d2 in role 2.
#[test]
fn a_removed_role_keeps_the_config_s_id_and_path_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config_with(dir.path(), &["s0"], "spares = [\"s0\"]\n");
    let cfg = config.to_str().unwrap();
    let mut d = Daemon::start(&config);
    ok(nbraid(&["fail", "r6", "d1", "--config", cfg]), "fail d1");
    wait_for(cfg, "the spare to take role 1 and be rebuilt", |v| {
        v["members"][1]["id"] == "s0" && v["rebuild"]["state"] == "done"
    });
    ok(nbraid(&["fail", "r6", "d2", "--config", cfg]), "fail d2");
    ok(
        nbraid(&["remove", "r6", "d2", "--config", cfg]),
        "remove d2",
    );
    let before = volume_status(cfg);
    assert_eq!(before["members"][2]["id"], "d2", "{before:#}");
    let path = before["members"][2]["path"].as_str().unwrap().to_string();
    assert!(path.starts_with('/') && path.ends_with("/d2.img"), "{path}");
    d.stop();

    let mut d = Daemon::start(&config);
    let v = volume_status(cfg);
    let role = &v["members"][2];
    assert_eq!(role["id"], "d2", "{v:#}");
    assert_eq!(role["path"], path.as_str(), "{v:#}");
    assert_eq!(role["state"], "missing", "{v:#}");
    let line = r#"members = ["d0", "s0", "d2", "d3", "d4", "d5"]"#;
    let notes: Vec<&str> = (v["notes"].as_array().unwrap().iter())
        .filter_map(|n| n.as_str())
        .collect();
    assert!(
        notes
            .iter()
            .any(|n| n.contains("s0 (listed in spares)") && n.ends_with(line)),
        "{notes:#?}"
    );
    assert!(
        !notes.iter().any(|n| n.starts_with("member d2 ")),
        "d2 is named for its role, not told to leave the config: {notes:#?}"
    );
    let table = ok(nbraid(&["status", "r6", "--config", cfg]), "status");
    assert!(table.contains(line), "{table}");
    assert!(
        !table.contains("(missing)") && !table.contains(" ? "),
        "{table}"
    );
    assert!(
        table
            .lines()
            .any(|l| l.contains(" d2 ") && l.contains(&path)),
        "{table}"
    );
    d.stop();
}
