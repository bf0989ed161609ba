//! `nbraid check` says which parity groups get no write-hole log: a group whose children
//! are not member regions (RAID 5 over mirrors, a group over groups) is not logged by the
//! engine, and with `write_hole = "off"` none is. Check was silent about both.

mod common;

use common::{nbraid, ok};
use serde_json::Value;

const CONFIG: &str = r#"[daemon]
listen = ["unix:nbd.sock"]

[[member]]
id = "m0"
path = "memory:"
size = "64MiB"
[[member]]
id = "m1"
path = "memory:"
size = "64MiB"
[[member]]
id = "m2"
path = "memory:"
size = "64MiB"
[[member]]
id = "m3"
path = "memory:"
size = "64MiB"
[[member]]
id = "m4"
path = "memory:"
size = "64MiB"
[[member]]
id = "m5"
path = "memory:"
size = "64MiB"

[[volume]]
name = "vault"
tree = { raid5 = [{ mirror = ["m0", "m1"] }, { mirror = ["m2", "m3"] }, { mirror = ["m4", "m5"] }] }
size = "8MiB"

[[volume]]
name = "twins"
tree = { mirror = [{ raid5 = ["m0", "m1", "m2"] }, { raid5 = ["m3", "m4", "m5"] }] }
size = "8MiB"

[[volume]]
name = "open"
level = "raid5"
members = ["m0", "m1", "m2"]
size = "8MiB"
write_hole = "off"
"#;

#[test]
fn check_names_the_parity_groups_without_a_write_hole_log() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("arrays.toml");
    std::fs::write(&file, CONFIG).unwrap();
    let cfg = file.to_str().unwrap();
    let out = ok(nbraid(&["check", cfg]), "nbraid check");
    let over_mirrors = "raid5:64KiB(mirror(m0 m1), mirror(m2 m3), mirror(m4 m5))";
    assert!(
        out.contains(&format!("\nvault: 1 of its 1 parity group(s) get no write-hole log — {over_mirrors} — their children are not member regions")),
        "{out}"
    );
    assert!(out.contains("the volume resyncs before it serves"), "{out}");
    assert!(
        !out.contains("twins: 1 of"),
        "a mirror of logged groups: {out}"
    );
    assert!(
        out.contains("\nopen: write_hole = \"off\": none of its 1 parity group(s) is logged"),
        "{out}"
    );
    let json: Value =
        serde_json::from_str(&ok(nbraid(&["check", "--json", cfg]), "--json")).unwrap();
    let volume = |name: &str| {
        let all = json["volumes"].as_array().unwrap();
        all.iter().find(|v| v["name"] == name).unwrap().clone()
    };
    assert_eq!(
        volume("vault")["unlogged_parity_groups"],
        serde_json::json!([over_mirrors])
    );
    assert!(volume("vault")["write_hole_note"]
        .as_str()
        .unwrap()
        .contains("no write-hole log"));
    assert_eq!(
        volume("twins")["unlogged_parity_groups"],
        serde_json::json!([])
    );
    assert_eq!(volume("twins")["write_hole_note"], Value::Null);
    assert_eq!(
        volume("open")["unlogged_parity_groups"],
        serde_json::json!(["raid5:64KiB(m0 m1 m2)"])
    );
}
