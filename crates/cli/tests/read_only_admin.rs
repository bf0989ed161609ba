//! Admin commands on a `read_only = true` volume tell the truth before anything runs:
//! `nbraid check` (and `nbraidd --check`) predict the refusals a read-only start makes, and
//! `nbraid remove --offline` is refused naming the volume and the setting (found by a hunt:
//! check said healthy where the start refused; remove --offline failed on the write).

mod common;

use common::{blank_member, fill, nbraid, ok, require, serve, write_config_with, Daemon};
use std::path::Path;

/// `nbraid check` and `nbraidd --check` on `cfg`: both fail, and say `words`.
fn check_refuses(cfg: &Path, words: &[&str]) {
    let cfg = cfg.to_str().unwrap();
    let o = nbraid(&["check", cfg]);
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(!o.status.success(), "nbraid check exited 0:\n{said}");
    assert!(said.contains("nbraidd would refuse to start"), "{said}");
    let o = std::process::Command::new(common::nbraidd_path())
        .args(["--config", cfg, "--check", "--log-level", "error"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "nbraidd --check exited 0: {err}");
    for w in words {
        assert!(said.contains(w), "nbraid check does not say {w:?}:\n{said}");
        assert!(err.contains(w), "nbraidd --check does not say {w:?}: {err}");
    }
}

/// The start on `cfg` is refused saying `words`.
fn start_refuses(cfg: &Path, words: &[&str]) {
    let o = std::process::Command::new(common::nbraidd_path())
        .args(["--config", cfg.to_str().unwrap(), "--log-level", "error"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "the start went on: {err}");
    for w in words {
        assert!(err.contains(w), "the start does not say {w:?}: {err}");
    }
}

#[test]
fn check_says_a_read_only_start_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config_with(dir.path(), &[], "read_only = true\n");
    let words = ["volume `r6` has read_only = true", "creates nothing"];
    check_refuses(&cfg, &words);
    start_refuses(&cfg, &words);
}

#[test]
fn check_says_a_read_only_start_refuses_an_unclean_parity_volume() {
    let dir = tempfile::tempdir().unwrap();
    let rw = write_config_with(dir.path(), &[], "");
    let (mut d, uri) = serve(&rw, "r6");
    fill(&require("nbdcopy"), dir.path(), &uri, 21);
    // Killed: the records stay dirty, the bitmap's bits set.
    d.child.kill().unwrap();
    d.child.wait().unwrap();
    drop(d);
    let text = std::fs::read_to_string(&rw).unwrap();
    let ro = dir.path().join("ro.toml");
    std::fs::write(&ro, format!("{text}read_only = true\n")).unwrap();
    let words = ["`r6` was not shut down cleanly", "read_only = true"];
    check_refuses(&ro, &words);
    start_refuses(&ro, &words);
    // Stopped clean once read-write, it starts read-only, and check says so.
    let mut d = Daemon::start(&rw);
    common::wait_for(rw.to_str().unwrap(), "the resync", |v| {
        v["resync"].is_null() || v["resync"]["state"] == "done"
    });
    d.stop();
    ok(
        nbraid(&["check", ro.to_str().unwrap()]),
        "check of a clean read-only volume",
    );
    Daemon::start(&ro).stop();
}

#[test]
fn remove_offline_is_refused_on_a_read_only_volume_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let rw = write_config_with(dir.path(), &[], "");
    let rw_s = rw.to_str().unwrap();
    ok(nbraid(&["create", rw_s]), "nbraid create");
    // A spare added at run time, recorded in the superblocks.
    let spare = blank_member(dir.path(), "extra.img");
    let mut d = Daemon::start(&rw);
    ok(nbraid(&["add", "r6", &spare, "--config", rw_s]), "add");
    d.stop();
    let text = std::fs::read_to_string(&rw).unwrap();
    let ro = dir.path().join("ro.toml");
    std::fs::write(&ro, format!("{text}read_only = true\n")).unwrap();
    let before: Vec<Vec<u8>> = (0..6)
        .map(|i| std::fs::read(dir.path().join(format!("d{i}.img"))).unwrap())
        .collect();
    let o = nbraid(&[
        "remove",
        "r6",
        &spare,
        "--offline",
        "--config",
        ro.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "remove --offline went on: {err}");
    assert!(
        err.contains("volume `r6` has read_only = true") && err.contains("remove --offline"),
        "{err}"
    );
    let after: Vec<Vec<u8>> = (0..6)
        .map(|i| std::fs::read(dir.path().join(format!("d{i}.img"))).unwrap())
        .collect();
    assert!(before == after, "a member changed");
    // Read-write it is forgotten as before.
    ok(
        nbraid(&["remove", "r6", &spare, "--offline", "--config", rw_s]),
        "remove --offline read-write",
    );
}
