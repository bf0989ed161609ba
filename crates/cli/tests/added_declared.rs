//! A member added at run time (`nbraid add`) whose file the config declares as a member the
//! volume does not list: its superblock says which role it holds, and a restart gives it that
//! role — never a volume started degraded while the rebuilt copy sits unused.

mod common;

use common::*;
use serde_json::Value;

#[test]
fn a_restart_gives_an_added_member_the_config_declares_elsewhere_its_role() {
    let nbdcopy = require("nbdcopy");
    let dir = tempfile::tempdir().unwrap();
    // d0..d5 serve r6; member `n` (n.img) is declared, listed by no volume.
    let config = write_config_with(dir.path(), &["n"], "");
    let cfg = config.to_str().unwrap();
    let file = blank_member(dir.path(), "n.img");
    let (mut d, uri) = serve(&config, "r6");
    let data = fill(&nbdcopy, dir.path(), &uri, 0x9e37_79b9_7f4a_7c15);
    ok(nbraid(&["fail", "r6", "d1", "--config", cfg]), "fail");
    let said = ok(nbraid(&["add", "r6", &file, "--config", cfg]), "add");
    assert!(said.contains("rebuilding role 1"), "{said}");
    let done: Value = serde_json::from_str(&ok(
        nbraid(&["rebuild", "r6", "--config", cfg, "--json"]),
        "rebuild",
    ))
    .unwrap();
    assert_eq!(done["state"], "done", "{done}");
    d.stop();

    let (mut d, uri) = serve(&config, "r6");
    let v = volume_status(cfg);
    assert_eq!(
        v["degraded"], false,
        "n.img's superblock gives it role 1: {v:#}"
    );
    let path = v["members"][1]["path"].as_str().unwrap_or_default();
    assert!(path.ends_with("/n.img"), "role 1 on n.img: {v:#}");
    assert_eq!(v["members"][1]["state"], "healthy", "{v:#}");
    // By the config's id, not one made up for a member the config does not name ("n-2").
    assert_eq!(v["members"][1]["id"], "n", "{v:#}");
    reads_back(&nbdcopy, dir.path(), &uri, &data);
    d.stop();
}
