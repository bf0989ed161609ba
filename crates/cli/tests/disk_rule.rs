//! When nbraid writes onto a disk (docs/FORMAT.md, "When nbraid writes onto a disk"), through
//! the real binaries: `nbraid add` and `nbraid replace` refuse data and another array's
//! member (bytes unchanged) unless `--force`; `nbraid fail` refuses to lose data unless
//! `--force`; a removed member of a Matrix volume comes back; a blank remote export is created
//! beside a new local file; a recorded spare later used by another array of the same volume
//! name does not stop the first daemon.

mod common;

use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn refused(o: Output, what: &str) -> String {
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(
        !o.status.success(),
        "{what} should be refused: {}{err}",
        String::from_utf8_lossy(&o.stdout)
    );
    err
}

/// A second config in `dir/other` with a RAID 1 volume named `name` over `paths` (9 MiB
/// each), created by `nbraid create`; the config and the new array's id.
fn other_array(dir: &Path, name: &str, paths: &[&str]) -> (PathBuf, String) {
    let other = dir.join("other");
    std::fs::create_dir_all(&other).unwrap();
    let mut text = String::new();
    for (i, p) in paths.iter().enumerate() {
        text += &format!("[[member]]\nid = \"o{i}\"\npath = \"{p}\"\nsize = \"9MiB\"\n\n");
    }
    let ids: Vec<String> = (0..paths.len()).map(|i| format!("\"o{i}\"")).collect();
    text += &format!(
        "[[volume]]\nname = \"{name}\"\nlevel = \"raid1\"\nmembers = [{}]\n",
        ids.join(", ")
    );
    let config = other.join("arrays.toml");
    std::fs::write(&config, text).unwrap();
    let v: Value = serde_json::from_str(&ok(
        nbraid(&["create", config.to_str().unwrap(), "--json"]),
        "nbraid create (the other array)",
    ))
    .unwrap();
    let id = v["volumes"][0]["array"].as_str().unwrap().to_string();
    (config, id)
}

#[test]
fn add_and_replace_refuse_data_and_another_arrays_member_unless_forced() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path());
    let cfg = config.to_str().unwrap();
    let (mut d, _) = serve(&config, "r6");
    ok(nbraid(&["fail", "r6", "d1", "--config", cfg]), "fail d1");

    // A file full of data.
    let data_path = dir.path().join("data.img");
    let data = seeded_bytes(7, 9 * MIB);
    std::fs::write(&data_path, &data).unwrap();
    let data_arg = data_path.to_str().unwrap();
    let err = refused(
        nbraid(&["add", "r6", data_arg, "--config", cfg]),
        "add data",
    );
    assert!(
        err.contains("is not blank") && err.contains("--force"),
        "{err}"
    );
    // A file system is named.
    let fs_path = dir.path().join("fs.img");
    let mut fs = vec![0u8; 9 * MIB as usize];
    fs[1080..1082].copy_from_slice(&[0x53, 0xef]);
    std::fs::write(&fs_path, &fs).unwrap();
    let err = refused(
        nbraid(&["add", "r6", fs_path.to_str().unwrap(), "--config", cfg]),
        "add a file system",
    );
    assert!(err.contains("an ext2/3/4 file system"), "{err}");

    // Another array's member, its volume even named like this one: refused by array id.
    let o0 = dir.path().join("o0.img");
    let o1 = dir.path().join("o1.img");
    let (_, theirs) = other_array(
        dir.path(),
        "r6",
        &[o0.to_str().unwrap(), o1.to_str().unwrap()],
    );
    let before = std::fs::read(&o0).unwrap();
    let err = refused(
        nbraid(&["add", "r6", o0.to_str().unwrap(), "--config", cfg]),
        "add another array's member",
    );
    assert!(
        err.contains("belongs to another array")
            && err.contains(&format!("volume `r6` of array {theirs}")),
        "{err}"
    );
    let err = refused(
        nbraid(&["replace", "r6", "d3", o1.to_str().unwrap(), "--config", cfg]),
        "replace onto another array's member",
    );
    assert!(err.contains("belongs to another array"), "{err}");
    assert!(std::fs::read(&o0).unwrap() == before, "o0.img unchanged");
    assert!(
        std::fs::read(&data_path).unwrap() == data,
        "data.img unchanged"
    );
    assert!(std::fs::read(&fs_path).unwrap() == fs, "fs.img unchanged");
    let v = status_of(cfg, "r6");
    assert_eq!(v["spares"].as_array().map(Vec::len), Some(0), "{v}");

    // The operator's word: --force writes onto it.
    let said = ok(
        nbraid(&["add", "r6", data_arg, "--force", "--config", cfg]),
        "add --force",
    );
    assert!(said.contains("rebuilding role 1 ("), "{said}");
    let done: Value = serde_json::from_str(&ok(
        nbraid(&["rebuild", "r6", "--config", cfg, "--json"]),
        "rebuild",
    ))
    .unwrap();
    assert_eq!(done["state"], "done", "{done}");
    assert_eq!(status_of(cfg, "r6")["degraded"], false);
    // Forced onto another array's member: its record is taken off, so that array finds its
    // member gone instead of assembling over what this one writes.
    let other = dir.path().join("other/arrays.toml");
    let other = other.to_str().unwrap();
    assert!(ok(nbraid(&["check", other]), "check").contains("r6: healthy"));
    ok(
        nbraid(&[
            "add",
            "r6",
            o0.to_str().unwrap(),
            "--force",
            "--config",
            cfg,
        ]),
        "add --force another array's member",
    );
    // Its start would now be refused: `nbraid check` says so and exits 1.
    let checked = nbraid(&["check", other]);
    let said = String::from_utf8_lossy(&checked.stdout);
    assert!(!checked.status.success(), "{said}");
    assert!(
        !said.contains("r6: healthy") && said.contains("r6: refused"),
        "{said}"
    );
    // The member taken holds no record of that volume now: it is named, by its id.
    assert!(
        said.contains(
            "member o0 carries no record of this volume (its superblock holds no volume at all)"
        ),
        "{said}"
    );
    d.stop();
}

#[test]
fn fail_refuses_to_lose_the_last_copy_unless_forced() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("arrays.toml");
    std::fs::write(
        &config,
        "[daemon]\nlisten = [\"unix:nbd.sock\"]\n\n\
         [[member]]\nid = \"a\"\npath = \"a.img\"\nsize = \"9MiB\"\n\n\
         [[member]]\nid = \"b\"\npath = \"b.img\"\nsize = \"9MiB\"\n\n\
         [[volume]]\nname = \"m\"\nlevel = \"raid1\"\nmembers = [\"a\", \"b\"]\n",
    )
    .unwrap();
    let cfg = config.to_str().unwrap();
    let (d, _) = serve(&config, "m");
    ok(nbraid(&["fail", "m", "a", "--config", cfg]), "fail a");
    let err = refused(
        nbraid(&["fail", "m", "b", "--config", cfg]),
        "fail the last copy",
    );
    assert!(
        err.contains("would lose data") && err.contains("--force"),
        "{err}"
    );
    // Members by id, as the admin named them, not by index.
    assert!(
        err.contains("failing b beside a (failed or being rebuilt)"),
        "{err}"
    );
    let v = status_of(cfg, "m");
    assert_eq!(v["members"][1]["state"], "healthy", "{v}");
    let said = ok(
        nbraid(&["fail", "m", "b", "--force", "--config", cfg]),
        "fail --force",
    );
    assert!(said.contains("FAILED"), "{said}");
    // A volume with nothing left to write to cannot stop cleanly: dropped (killed).
    drop(d);
}

/// A Matrix member failed, removed and added back to one of its volumes (the quickstart's
/// r5 d0) is rebuilt in that volume's region only: the other volume keeps serving from it,
/// and both are healthy after a restart.
#[test]
fn a_removed_member_of_a_matrix_volume_comes_back() {
    let nbdcopy = require("nbdcopy");
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("arrays.toml");
    // 1 MiB of metadata, 1 MiB of block checksums per volume, 8 + 16 MiB of regions.
    let mut text = daemon_and_members("d", 4, "28MiB");
    text += "[[volume]]\nname = \"r5\"\nlevel = \"raid5\"\nstrip_size = \"64KiB\"\n\
             members = [\"d0\", \"d1\", \"d2\", \"d3\"]\nsize = \"24MiB\"\n\n\
             [[volume]]\nname = \"r10\"\nlevel = \"raid10\"\nstrip_size = \"64KiB\"\n\
             members = [\"d0\", \"d1\", \"d2\", \"d3\"]\nsize = \"32MiB\"\n";
    std::fs::write(&config, text).unwrap();
    let cfg = config.to_str().unwrap();
    let (mut d, r10) = serve(&config, "r10");
    let data = fill(&nbdcopy, dir.path(), &r10, 0x5eed_0037);
    ok(nbraid(&["fail", "r5", "d0", "--config", cfg]), "fail r5 d0");
    ok(
        nbraid(&["remove", "r5", "d0", "--config", cfg]),
        "remove it",
    );
    let d0 = dir.path().join("d0.img");
    let said = ok(
        nbraid(&["add", "r5", d0.to_str().unwrap(), "--config", cfg]),
        "add it back",
    );
    // Whether the daemon's watcher or the add itself puts it in the failed role, the reply
    // says where it went.
    assert!(said.contains("added to r5: rebuilding role 0"), "{said}");
    let done: Value = serde_json::from_str(&ok(
        nbraid(&["rebuild", "r5", "--config", cfg, "--json"]),
        "rebuild",
    ))
    .unwrap();
    assert_eq!(done["state"], "done", "{done}");
    let v = status_of(cfg, "r5");
    assert_eq!(v["degraded"], false, "{v}");
    assert!(v["members"][0].to_string().contains("d0"), "{v}");
    assert_eq!(status_of(cfg, "r10")["degraded"], false);
    reads_back(&nbdcopy, dir.path(), &r10, &data);
    d.stop();

    let (mut d, r10) = serve(&config, "r10");
    let v = status_of(cfg, "r5");
    assert_eq!(v["degraded"], false, "{v}");
    assert_eq!(v["members"][0]["id"], "d0", "{v}");
    assert_eq!(status_of(cfg, "r10")["degraded"], false);
    reads_back(&nbdcopy, dir.path(), &r10, &data);
    let scrub: Value = serde_json::from_str(&ok(
        nbraid(&["scrub", "r5", "--config", cfg, "--json"]),
        "scrub r5",
    ))
    .unwrap();
    assert_eq!(scrub["mismatches"], 0, "{scrub}");
    d.stop();
}

/// `nbdkit memory` on a Unix socket in `dir`; the process and its NBD URI.
fn nbdkit_memory(dir: &Path, name: &str) -> (Child, String) {
    let sock = dir.join(format!("{name}.sock"));
    let kit = Command::new("nbdkit")
        .args(["--foreground", "--exit-with-parent", "--unix"])
        .arg(&sock)
        .args(["memory", "9M"])
        .stdin(Stdio::null())
        .spawn()
        .expect("nbdkit is required (apt-get install nbdkit; scripts/test installs it)");
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::os::unix::net::UnixStream::connect(&sock).is_err() {
        assert!(Instant::now() < deadline, "nbdkit did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    (kit, format!("nbd+unix:///?socket={}", sock.display()))
}

/// A RAID 1 of a new local file and a blank remote export `uri`, in `dir`.
fn mirror_with_remote(dir: &Path, uri: &str) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let config = dir.join("arrays.toml");
    std::fs::write(
        &config,
        format!(
            "[daemon]\nlisten = [\"unix:nbd.sock\"]\n\n\
             [[member]]\nid = \"local\"\npath = \"local.img\"\nsize = \"9MiB\"\n\n\
             [[member]]\nid = \"remote\"\npath = \"{uri}\"\nsize = \"9MiB\"\n\n\
             [[volume]]\nname = \"m\"\nlevel = \"raid1\"\nmembers = [\"local\", \"remote\"]\n"
        ),
    )
    .unwrap();
    config
}

#[test]
fn a_fresh_mirror_with_a_blank_remote_member_is_created() {
    let dir = tempfile::tempdir().unwrap();
    // By nbraid create.
    let (mut kit, uri) = nbdkit_memory(dir.path(), "a");
    let config = mirror_with_remote(&dir.path().join("a"), &uri);
    let said = ok(
        nbraid(&["create", config.to_str().unwrap()]),
        "nbraid create",
    );
    assert!(said.contains("volume m: created array"), "{said}");
    let (mut d, _) = serve(&config, "m");
    assert_eq!(status_of(config.to_str().unwrap(), "m")["degraded"], false);
    d.stop();
    // By the daemon's first start.
    let (mut kit_b, uri) = nbdkit_memory(dir.path(), "b");
    let config = mirror_with_remote(&dir.path().join("b"), &uri);
    let (mut d, _) = serve(&config, "m");
    assert_eq!(status_of(config.to_str().unwrap(), "m")["degraded"], false);
    d.stop();
    for k in [&mut kit, &mut kit_b] {
        let _ = k.kill();
        let _ = k.wait();
    }
}

/// A spare added at run time (recorded), later made a member of another array whose volume
/// has the same name: the first daemon still starts (the records are matched by array id),
/// says why the file is not its spare, and `nbraid remove --offline` forgets it while no
/// daemon runs.
#[test]
fn a_recorded_spare_taken_by_another_array_of_the_same_name_does_not_stop_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path());
    let cfg = config.to_str().unwrap();
    let (mut d, _) = serve(&config, "r6");
    let spare = blank_member(dir.path(), "spare.img");
    ok(
        nbraid(&["add", "r6", &spare, "--config", cfg]),
        "add a spare",
    );
    d.stop();
    // Wiped and made a member of another array's volume "r6".
    std::fs::write(&spare, vec![0u8; 9 * MIB as usize]).unwrap();
    let o1 = blank_member(dir.path(), "o1.img");
    let (_, theirs) = other_array(dir.path(), "r6", &[&spare, &o1]);

    let (mut d, _) = serve(&config, "r6");
    let v = status_of(cfg, "r6");
    assert_eq!(v["degraded"], false, "{v}");
    assert_eq!(v["spares"].as_array().map(Vec::len), Some(0), "{v}");
    let notes = v["notes"].to_string();
    assert!(
        notes.contains(
            "spare.img (added at run time, recorded) holds no role and belongs to another array"
        ) && notes.contains(&theirs),
        "{v}"
    );
    // Forgotten without a daemon: refused while one serves the members, done once stopped.
    let forget = ["remove", "r6", &spare, "--offline", "--config", cfg];
    let err = refused(nbraid(&forget), "remove --offline while served");
    assert!(err.contains("without --offline"), "{err}");
    d.stop();
    let said = ok(nbraid(&forget), "remove --offline");
    assert!(said.contains("no longer recorded"), "{said}");
    let err = refused(nbraid(&forget), "remove --offline again");
    assert!(err.contains("list no path"), "{err}");
    let (mut d, _) = serve(&config, "r6");
    let v = status_of(cfg, "r6");
    assert!(!v["notes"].to_string().contains("spare.img"), "{v}");
    d.stop();
    // The other array is untouched: still its member.
    let checked = ok(
        nbraid(&[
            "check",
            dir.path().join("other/arrays.toml").to_str().unwrap(),
        ]),
        "check the other array",
    );
    assert!(
        checked.contains("r6: healthy"),
        "{checked} (array {theirs})"
    );
}
