//! `nbraid add` never creates a member behind the operator's back (mdadm --add never
//! creates a device): a bare name is a member or spare id of the volume, a path that does
//! not exist is refused naming it — under /dev above all, where a regular file lives in RAM
//! — unless the config declares it, and then it is the file a start creates.

mod common;

use common::*;
use std::path::Path;
use std::process::{Command, Output};

/// `nbraid ARGS` run from `dir` (a bare name is the caller's, in their directory).
fn nbraid_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nbraid"))
        .current_dir(dir)
        .args(args)
        .output()
        .expect("run nbraid")
}

fn refused(o: Output, what: &str) -> String {
    let said = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(!o.status.success(), "{what} is refused: {said}");
    said
}

#[test]
fn a_typo_is_refused_and_creates_nothing_even_under_dev() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path());
    let cfg = config.to_str().unwrap();
    let (mut d, _) = serve(&config, "r6");
    ok(nbraid(&["fail", "r6", "d1", "--config", cfg]), "fail");

    let typo = &format!("/dev/nbraid-typo-sdq-{}", std::process::id());
    let o = nbraid(&["add", "r6", typo, "--config", cfg]);
    // Taken away before any assertion: /dev is the machine's, not the test's.
    let created = Path::new(typo).exists();
    if created {
        std::fs::remove_file(typo).unwrap();
    }
    assert!(!created, "a regular file was created in /dev");
    let said = refused(o, "add of /dev typo");
    assert!(said.contains(&format!("`{typo}` does not exist")), "{said}");

    // A name that is no id of the volume: no ./m9 made in the caller's directory.
    let said = refused(
        nbraid_in(dir.path(), &["add", "r6", "m9", "--config", cfg]),
        "add m9",
    );
    assert!(!dir.path().join("m9").exists(), "./m9 was created");
    assert!(said.contains("`m9` is no id"), "{said}");

    let v = volume_status(cfg);
    assert_eq!(
        v["members"][1]["state"], "failed",
        "nothing took role 1: {v:#}"
    );
    assert_eq!(v["spares"], serde_json::json!([]), "{v:#}");
    d.stop();
}

#[test]
fn a_member_id_names_its_file_and_a_declared_missing_file_is_created_as_a_start_would() {
    let nbdcopy = require("nbdcopy");
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path());
    let cfg = config.to_str().unwrap();
    let (mut d, uri) = serve(&config, "r6");
    let data = fill(&nbdcopy, dir.path(), &uri, 0x3c6e_f372_fe94_f82b);
    // d1 failed, removed, and added back by its id: its own file, not ./d1.
    ok(nbraid(&["fail", "r6", "d1", "--config", cfg]), "fail");
    ok(nbraid(&["remove", "r6", "d1", "--config", cfg]), "remove");
    let said = ok(
        nbraid_in(dir.path(), &["add", "r6", "d1", "--config", cfg]),
        "add d1",
    );
    assert!(said.contains("rebuilding role 1"), "{said}");
    assert!(!dir.path().join("d1").exists(), "./d1 was created");
    let v = wait_for(cfg, "d1 rebuilt", |v| v["degraded"] == false);
    let path = v["members"][1]["path"].as_str().unwrap_or_default();
    assert!(path.ends_with("/d1.img"), "role 1 on d1.img: {v:#}");
    assert_eq!(v["members"][1]["id"], "d1", "{v:#}");
    reads_back(&nbdcopy, dir.path(), &uri, &data);
    d.stop();

    // d5.img gone while stopped: the volume starts degraded without it, and its declared
    // path (given by path or by id) is created and rebuilt.
    let d5 = dir.path().join("d5.img");
    std::fs::remove_file(&d5).unwrap();
    let (mut d, uri) = serve(&config, "r6");
    let said = ok(
        nbraid_in(dir.path(), &["add", "r6", "d5", "--config", cfg]),
        "add d5",
    );
    assert!(said.contains("rebuilding role 5"), "{said}");
    assert!(d5.exists());
    wait_for(cfg, "d5 rebuilt", |v| v["degraded"] == false);
    reads_back(&nbdcopy, dir.path(), &uri, &data);
    d.stop();
}
