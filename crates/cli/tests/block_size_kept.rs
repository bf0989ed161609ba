//! A volume's block size is recorded, kept and told: a disk's sector size never changes
//! under its data (a partition table is addressed in sectors). A volume created and written
//! at 512-byte blocks whose config then says `block_size = 4096` is still served at 512 —
//! `nbraid check` (text and `--json`) and `nbraid apply`'s plan say the setting is not taken,
//! naming both sizes, the start warns so, and the data reads back. Before, the records did not hold the block size
//! and the start served the config's silently. Records from before the field do not know it:
//! the start takes the config's, and its commit records it.

mod common;

use common::{
    daemon_and_members, nbraid, nbraidd, ok, read_out, require, seeded_bytes, serve, Daemon,
};
use nbraid_core::metadata::{Superblock, SLOT_BYTES};
use serde_json::Value;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::process::Command;

/// A RAID 5 `r5` over three 32 MiB member files (no checksums, no log reserve: the test is
/// about the block size), served on `nbd.sock` beside the config; `block_size` as given.
fn write_config(dir: &Path, block_size: u32) -> String {
    let mut text = daemon_and_members("d", 3, "32MiB");
    text += "[[volume]]\nname = \"r5\"\nlevel = \"raid5\"\nmembers = [\"d0\", \"d1\", \"d2\"]\n";
    text += "checksums = \"off\"\n";
    text += &format!("block_size = {block_size}\n");
    let file = dir.join("arrays.toml");
    std::fs::write(&file, text).unwrap();
    file.to_str().unwrap().to_string()
}

/// The smallest block the export at `uri` accepts, as the NBD handshake says it.
fn minimum_block(uri: &str) -> u64 {
    let o = Command::new(require("nbdinfo"))
        .args(["--json", uri])
        .output()
        .unwrap();
    let info: Value = serde_json::from_str(&ok(o, "nbdinfo")).unwrap();
    info["exports"][0]["block_size_minimum"]
        .as_u64()
        .unwrap_or_else(|| panic!("no minimum block size: {info}"))
}

/// Both superblock copies of member file `path`, decoded (an unreadable copy: `None`).
fn superblocks(path: &Path) -> Vec<Option<Superblock>> {
    let mut f = std::fs::File::open(path).unwrap();
    let mut bytes = vec![0u8; 2 * SLOT_BYTES as usize];
    f.read_exact(&mut bytes).unwrap();
    [0, SLOT_BYTES as usize]
        .iter()
        .map(|&at| Superblock::decode(&bytes[at..]).ok())
        .collect()
}

/// The block size member `path`'s newest superblock records for its volume, and that
/// superblock's format version.
fn recorded_block_size(path: &Path) -> (Option<u32>, u32) {
    let newest = (superblocks(path).into_iter().flatten())
        .max_by_key(|sb| sb.generation)
        .expect("a superblock");
    let version = u32::from_le_bytes(newest.encode().unwrap()[8..12].try_into().unwrap());
    (newest.volumes[0].block_size, version)
}

/// Both superblock copies of member file `path` written as a writer from before the block
/// size was recorded left them: the byte cleared (byte for byte as that code wrote it).
fn strip_block_size(path: &Path) {
    let mut f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    for (slot, sb) in superblocks(path).into_iter().enumerate() {
        let Some(mut sb) = sb else { continue };
        sb.volumes.iter_mut().for_each(|v| v.block_size = None);
        let bytes = sb.encode().unwrap();
        assert_eq!(u32::from_le_bytes(bytes[8..12].try_into().unwrap()), 1);
        f.seek(SeekFrom::Start(slot as u64 * SLOT_BYTES)).unwrap();
        f.write_all(&bytes).unwrap();
    }
    f.sync_all().unwrap();
}

/// The notes `nbraid check --json` gives volume `r5`'s superblocks.
fn json_notes(cfg: &str) -> Vec<String> {
    let out = ok(nbraid(&["check", "--json", cfg]), "nbraid check --json");
    let json: Value = serde_json::from_str(&out).unwrap();
    let r5 = &json["superblocks"][0];
    assert_eq!(r5["volume"], "r5", "{json}");
    (r5["notes"].as_array().unwrap().iter())
        .map(|n| n.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_volume_written_at_512_is_served_at_512_whatever_the_config_says_and_said_so() {
    let nbdcopy = require("nbdcopy");
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(dir.path(), 512);
    let (mut daemon, uri) = serve(Path::new(&cfg), "r5");
    assert_eq!(minimum_block(&uri), 512);
    // A recognisable block at an odd 512-byte sector (LBA 7, as a partition table might).
    let block = seeded_bytes(7, 512);
    let mut data = read_out(&nbdcopy, dir.path(), &uri);
    data[7 * 512..8 * 512].copy_from_slice(&block);
    common::copy_in(&nbdcopy, dir.path(), &uri, &data);
    daemon.stop();
    for m in ["d0.img", "d1.img", "d2.img"] {
        assert_eq!(
            recorded_block_size(&dir.path().join(m)),
            (Some(512), 1),
            "{m}"
        );
    }

    // The operator edits the config.
    let cfg = write_config(dir.path(), 4096);
    let said = "setting: block_size = 4096 (now 512-byte blocks): not taken: volume r5's records keep 512-byte blocks";
    let out = ok(nbraid(&["check", &cfg]), "nbraid check");
    assert!(out.contains(said), "{out}");
    assert!(out.contains("write block_size = 512 to say so"), "{out}");
    let notes = json_notes(&cfg);
    assert!(
        notes
            .iter()
            .any(|n| n.starts_with(said) && n.contains("write block_size = 512")),
        "{notes:?}"
    );
    let checked = ok(nbraidd(&["--config", &cfg, "--check"]), "nbraidd --check");
    assert!(
        checked.contains(&format!("warning: volume r5: {said}")),
        "{checked}"
    );
    // The start serves the recorded 512 and says so loudly.
    let log = dir.path().join("nbraidd.log");
    let mut daemon = Daemon::start_logging(Path::new(&cfg), &log, "warn");
    let uri = format!(
        "nbd+unix:///r5?socket={}",
        dir.path().join("nbd.sock").display()
    );
    assert_eq!(minimum_block(&uri), 512);
    let got = read_out(&nbdcopy, dir.path(), &uri);
    assert_eq!(got[7 * 512..8 * 512], block[..], "the block at LBA 7");
    assert!(got == data, "the volume reads back what was written");
    // `nbraid apply`'s plan against the running daemon says it too.
    let plan: Value = serde_json::from_str(&ok(
        nbraid(&["apply", "--json", &cfg]),
        "nbraid apply --json",
    ))
    .unwrap();
    let settings = &plan["volumes"][0]["settings"];
    let kept = (settings.as_array().unwrap().iter())
        .find(|s| s["key"] == "block_size")
        .unwrap_or_else(|| panic!("no block_size setting: {plan}"));
    assert_eq!(
        (&kept["config"], &kept["now"], &kept["taken"]),
        (&"4096".into(), &"512-byte blocks".into(), &"never".into()),
        "{kept}"
    );
    daemon.stop();
    let logged = std::fs::read_to_string(&log).unwrap();
    let warning = logged
        .lines()
        .find(|l| l.contains("block_size = 4096"))
        .unwrap_or_else(|| panic!("no warning of the block size: {logged}"));
    for part in ["WARN", "r5", "512-byte blocks", "write block_size = 512"] {
        assert!(warning.contains(part), "{part}: {warning}");
    }
    assert_eq!(
        recorded_block_size(&dir.path().join("d0.img")),
        (Some(512), 1)
    );

    // Saying so quiets it.
    let cfg = write_config(dir.path(), 512);
    let out = ok(nbraid(&["check", &cfg]), "nbraid check");
    assert!(!out.contains("block_size"), "{out}");
}

#[test]
fn records_from_before_the_field_start_at_the_configs_size_and_then_record_it() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(dir.path(), 4096);
    ok(nbraid(&["create", &cfg]), "nbraid create");
    let members: Vec<_> = ["d0.img", "d1.img", "d2.img"]
        .iter()
        .map(|m| dir.path().join(m))
        .collect();
    members.iter().for_each(|m| strip_block_size(m));
    assert_eq!(recorded_block_size(&members[0]), (None, 1));
    // Not known: nothing to say, whatever the config asks.
    let cfg = write_config(dir.path(), 512);
    let out = ok(nbraid(&["check", &cfg]), "nbraid check");
    assert!(!out.contains("block_size"), "{out}");
    // The start takes the config's 512 and records it.
    let (mut daemon, uri) = serve(Path::new(&cfg), "r5");
    assert_eq!(minimum_block(&uri), 512);
    daemon.stop();
    for m in &members {
        // Recorded without a new format version: an older nbraid still reads the member.
        assert_eq!(recorded_block_size(m), (Some(512), 1), "{}", m.display());
    }
    // From then on it is kept.
    let cfg = write_config(dir.path(), 4096);
    let notes = json_notes(&cfg);
    assert!(
        notes
            .iter()
            .any(|n| n.starts_with("setting: block_size = 4096 (now 512-byte blocks)")),
        "{notes:?}"
    );
}
