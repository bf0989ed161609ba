//! Devices a running daemon takes out of service are let go at once, as `mdadm --remove`
//! lets go of them: a member failed and removed, a config spare refused, a device whose
//! `add` failed. They stayed open (O_EXCL and locked) until nbraidd exited before: `mkfs`,
//! `mount` or another array could not take them. And a failed `add` tried again opened the
//! device afresh: it used the first try's handle, whose failed write failed every later
//! flush, so the retried member failed at once.
//!
//! The devices are loop devices over files (`losetup`, `blockdev`: util-linux; the test runs
//! as root, as CI does).

mod common;

use common::loops::{tool, Loop};
use common::{nbraid, ok, status_of, wait_until, Daemon};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Three loop devices and a config: a mirror of the first `members` of them, the rest
/// spares; the config's path.
fn setup(dir: &Path, members: usize) -> (Vec<Loop>, PathBuf) {
    let devs: Vec<Loop> = (0..3)
        .map(|i| Loop::attach(&dir.join(format!("d{i}.img")), 24 << 20))
        .collect();
    let mut text = format!(
        "[daemon]\nlisten = [\"unix:{}\"]\n\n",
        dir.join("nbd.sock").display()
    );
    for (i, d) in devs.iter().enumerate() {
        text += &format!("[[member]]\nid = \"m{i}\"\npath = \"{}\"\n\n", d.path());
    }
    let ids: Vec<String> = (0..3).map(|i| format!("\"m{i}\"")).collect();
    text += &format!(
        "[[volume]]\nname = \"v\"\nlevel = \"raid1\"\nmembers = [{}]\nspares = [{}]\n",
        ids[..members].join(", "),
        ids[members..].join(", ")
    );
    let file = dir.join("a.toml");
    std::fs::write(&file, text).unwrap();
    (devs, file)
}

#[test]
fn a_member_failed_and_removed_is_let_go() {
    let dir = tempfile::tempdir().unwrap();
    let (devs, file) = setup(dir.path(), 3);
    let cfg = file.to_str().unwrap();
    let mut d = Daemon::start(&file);
    assert!(!devs[2].is_free(), "a serving member is held");
    ok(nbraid(&["fail", "v", "m2", "--config", cfg]), "fail");
    ok(nbraid(&["remove", "v", "m2", "--config", cfg]), "remove");
    assert!(devs[2].is_free(), "a removed member is let go");
    d.stop();
}

#[test]
fn a_refused_spare_is_let_go() {
    let dir = tempfile::tempdir().unwrap();
    let (devs, file) = setup(dir.path(), 2);
    let out = Command::new(tool("mkfs.ext4"))
        .args(["-q", "-F"])
        .arg(&devs[2].path)
        .output();
    ok(out.unwrap(), "mkfs.ext4");
    let cfg = file.to_str().unwrap();
    let mut d = Daemon::start(&file);
    let v = status_of(cfg, "v");
    let notes = v["notes"].to_string();
    assert!(notes.contains("not used as a spare"), "{v:#}");
    assert!(devs[2].is_free(), "a refused spare is let go");
    d.stop();
}

#[test]
fn a_failed_add_leaves_nothing_behind_and_a_retry_opens_the_device_afresh() {
    let dir = tempfile::tempdir().unwrap();
    let (devs, file) = setup(dir.path(), 2);
    // Not a spare of the config: only added at run time.
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, text.replace("spares = [\"m2\"]", "spares = []")).unwrap();
    let cfg = file.to_str().unwrap();
    let mut d = Daemon::start(&file);
    ok(nbraid(&["fail", "v", "m1", "--config", cfg]), "fail");
    ok(nbraid(&["remove", "v", "m1", "--config", cfg]), "remove");
    devs[2].set_read_only(true);
    let refused = nbraid(&["add", "v", devs[2].path(), "--config", cfg]);
    assert!(
        !refused.status.success(),
        "an add of a read-only device fails"
    );
    devs[2].set_read_only(false);
    assert!(devs[2].is_free(), "a failed add leaves the device closed");
    ok(
        nbraid(&["add", "v", devs[2].path(), "--config", cfg]),
        "add after setrw",
    );
    let v = wait_until(cfg, "v", "the rebuild onto the retried member", |v| {
        v["state"] != "degraded" || v["members"].to_string().contains("failed")
    });
    assert_eq!(v["state"], "healthy", "{v:#}");
    d.stop();
}
