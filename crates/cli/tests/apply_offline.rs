//! `nbraid apply --yes` with no daemon running starts the reshape as the daemon would: over
//! the array opened with the config's options (write hole, blocks, cache), so the records it
//! leaves say what the config says, and the daemon's next start copies on and reads back
//! every byte. `nbraidd` is the one built beside `nbraid`.

mod common;

use common::*;
use std::path::{Path, PathBuf};

/// `arrays.toml`: a RAID 5 `v` over the first `members` of d0..d3 (24 MiB files) with the
/// write-hole log off, 4096-byte blocks, a write-through cache and `checksums` ("off",
/// "enable").
fn config(dir: &Path, members: usize, checksums: &str) -> PathBuf {
    let mut text = daemon_and_members("d", 4, "24MiB");
    let ids: Vec<String> = (0..members).map(|i| format!("\"d{i}\"")).collect();
    text += &format!(
        "[[volume]]\nname = \"v\"\nlevel = \"raid5\"\nstrip_size = \"64KiB\"\n\
         members = [{}]\nchecksums = \"{checksums}\"\nwrite_hole = \"off\"\nblock_size = 4096\n\
         cache = \"write-through\"\n",
        ids.join(", ")
    );
    let file = dir.join("arrays.toml");
    std::fs::write(&file, text).unwrap();
    file
}

/// Volume `v`'s record on each member of the config, by config position (`None`: the
/// member carries no record of it).
fn records(file: &Path) -> Vec<Option<nbraid_core::metadata::VolumeRecord>> {
    let config = nbraid_assembly::pins::load(file).unwrap();
    let opened =
        futures::executor::block_on(nbraid_assembly::assemble::open_members(&config)).unwrap();
    opened
        .iter()
        .map(|o| match o.meta()?.probe() {
            nbraid_core::metadata::Probe::Superblock(sb, _) => {
                sb.volumes.iter().find(|v| v.name == "v").cloned()
            }
            _ => None,
        })
        .collect()
}

#[test]
fn an_offline_apply_starts_the_reshape_with_the_configs_options() {
    let nbdcopy = require("nbdcopy");
    let dir = tempfile::tempdir().unwrap();
    let file = config(dir.path(), 3, "off");
    let cfg = file.to_str().unwrap();
    ok(nbraid(&["create", cfg]), "create");
    let (mut d, uri) = serve(&file, "v");
    let data = fill(&nbdcopy, dir.path(), &uri, 7);
    d.stop();

    config(dir.path(), 4, "off");
    let out = ok(nbraid(&["apply", cfg, "--yes"]), "apply --yes (offline)");
    assert!(out.contains("started: the records say so"), "{out}");
    // write_hole = "off": the added member gets no log area (the daemon's online start gives
    // it none either); it was given one, cleared, as if the config logged the write hole.
    let recs = records(&file);
    let added = recs[3].as_ref().expect("d3 carries the volume's record");
    assert!(added.reshape.is_some(), "the record says a reshape runs");
    assert_eq!(
        added.ppl, None,
        "the added member's log area, with write_hole = \"off\""
    );

    let (mut d, uri) = serve(&file, "v");
    let v = wait_until(cfg, "v", "the reshape to 4 members", |v| {
        v["reshape"]["state"] == "done"
    });
    assert_eq!(v["metadata"]["write_hole_logged"], false, "{v:#}");
    prefix_reads_back(&nbdcopy, dir.path(), &uri, &data);
    d.stop();
}

/// `checksums = "enable"` with the new member: the offline apply leaves the enabling to the
/// daemon's start, as an online apply does. Enabling it at the apply's open recorded a
/// checksum pass, and the reshape it then started was refused ("its checksum pass ... has
/// not finished"), the areas already written.
#[test]
fn an_offline_apply_with_checksums_to_enable_starts_the_reshape() {
    let nbdcopy = require("nbdcopy");
    let dir = tempfile::tempdir().unwrap();
    let file = config(dir.path(), 3, "off");
    let cfg = file.to_str().unwrap();
    ok(nbraid(&["create", cfg]), "create");
    let (mut d, uri) = serve(&file, "v");
    let data = fill(&nbdcopy, dir.path(), &uri, 11);
    d.stop();

    config(dir.path(), 4, "enable");
    let out = ok(nbraid(&["apply", cfg, "--yes"]), "apply --yes (offline)");
    assert!(out.contains("started: the records say so"), "{out}");
    let recs = records(&file);
    assert!(
        recs.iter().flatten().all(|r| r.checksum_fill.is_none()),
        "no checksum pass recorded by the apply"
    );

    let (mut d, uri) = serve(&file, "v");
    wait_until(cfg, "v", "the reshape to 4 members", |v| {
        v["reshape"]["state"] == "done"
    });
    prefix_reads_back(&nbdcopy, dir.path(), &uri, &data);
    d.stop();
}

/// An offline `apply --yes` with nothing to change says so (it printed nothing, and `--json`
/// nothing either: "done" and "did nothing" looked alike).
#[test]
fn an_offline_apply_with_nothing_to_change_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let file = config(dir.path(), 3, "off");
    let cfg = file.to_str().unwrap();
    ok(nbraid(&["create", cfg]), "create");
    let out = ok(nbraid(&["apply", cfg, "--yes"]), "apply --yes (offline)");
    assert!(
        out.contains("volume v: unchanged (raid5 of 3 members")
            && out.contains("nothing to do: every volume already has the config's shape"),
        "{out}"
    );
    let out = ok(
        nbraid(&["apply", cfg, "--yes", "--json"]),
        "apply --yes --json",
    );
    let v: serde_json::Value = serde_json::from_str(&out).expect(&out);
    assert_eq!(v["nothing_to_do"], true, "{v:#}");
    assert_eq!(v["started"], false, "{v:#}");
    assert_eq!(v["volumes"][0]["action"], "unchanged", "{v:#}");
}
