//! `nbraid bench --config FILE --volume NAME` on arrays `nbraid create` and `nbraidd` made:
//! the bench assembles the volume as the daemon does (by superblock, not by config order),
//! writes through its records (dirty mark, bitmap, partial-parity log), refuses what the
//! daemon refuses, and leaves the volume recorded clean, so the next daemon start finds it
//! healthy, clean and consistent.

mod common;

use common::*;
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};

const STRIP: u64 = 64 << 10;

/// `nbraid bench rand-write` of 4 KiB requests on volume `r6` of `cfg`, `extra` args more.
fn bench(cfg: &str, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nbraid"))
        .args([
            "bench",
            "rand-write",
            "--config",
            cfg,
            "--volume",
            "r6",
            "--destroy-data",
        ])
        .args(["--bs", "4KiB", "--qd", "8", "--json"])
        .args(extra)
        .output()
        .expect("run nbraid")
}

/// `nbraid scrub r6` (check only) on the served volume: its report.
fn scrub(cfg: &str) -> Value {
    serde_json::from_str(&ok(
        nbraid(&["scrub", "r6", "--config", cfg, "--json"]),
        "scrub",
    ))
    .unwrap()
}

/// Rewrites the config at `path` with `from` replaced by `to` (each must be there).
fn edit(path: &Path, changes: &[(&str, &str)]) {
    let mut text = std::fs::read_to_string(path).unwrap();
    for (from, to) in changes {
        assert!(text.contains(from), "{from:?} in the config");
        text = text.replace(from, to);
    }
    std::fs::write(path, text).unwrap();
}

/// Two member paths swapped in the config: the daemon assembles by superblock, so each file
/// keeps its recorded role — and the bench must too. A bench that built the volume in config
/// order wrote data and parity into each other's roles: the next start found the records
/// clean (it never touched them), and the scrub found the parity of the stripes it wrote
/// wrong. The bytes outside the bench's span read back as they were.
#[test]
fn a_bench_writes_each_member_in_its_recorded_role_whatever_the_config_order() {
    let nbdcopy = require("nbdcopy");
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path());
    let cfg = config.to_str().unwrap();
    ok(nbraid(&["create", cfg]), "create");
    let (mut d, uri) = serve(&config, "r6");
    let data = fill(&nbdcopy, dir.path(), &uri, 0x2545_f491_4f6c_dd1d);
    // Members a daemon serves are refused, with the holder named.
    let o = bench(cfg, &["--bytes", "64KiB"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("is in use by") && err.contains("nbraidd"),
        "{err}"
    );
    d.stop();

    edit(
        &config,
        &[
            ("path = \"d1.img\"", "path = \"D1\""),
            ("path = \"d2.img\"", "path = \"d1.img\""),
            ("path = \"D1\"", "path = \"d2.img\""),
        ],
    );
    let span = 4 * MIB;
    let o = bench(cfg, &["--bytes", "2MiB", "--span", "4MiB", "--verify"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["cells"][0]["writes"], 512, "{r}");
    assert!(
        r["cells"][0]["verified_sectors"].as_u64().unwrap() > 0,
        "{r}"
    );

    let (mut d, uri) = serve(&config, "r6");
    let v = status_of(cfg, "r6");
    assert_eq!(v["state"], "healthy", "{v:#}");
    // Role 1 is d2.img, which the swapped config calls d2.
    assert_eq!(v["members"][1]["id"], "d2", "{v:#}");
    assert_eq!(v["members"][2]["id"], "d1", "{v:#}");
    assert_eq!(v["metadata"]["clean_at_start"], true, "{v:#}");
    let s = scrub(cfg);
    assert_eq!(
        (s["state"].as_str(), s["mismatches"].as_u64()),
        (Some("done"), Some(0)),
        "{s:#}"
    );
    let out = dir.path().join("out.img");
    ok(
        Command::new(&nbdcopy).arg(&uri).arg(&out).output().unwrap(),
        "nbdcopy out of the volume",
    );
    let got = std::fs::read(&out).unwrap();
    assert!(
        got[span as usize..] == data[span as usize..],
        "the bytes past the bench's span are as they were"
    );
    d.stop();
}

/// A volume left dirty (the daemon killed after writes, one member's first strip then torn
/// behind its back) is resynced by the bench before it runs, as the daemon would, and
/// recorded clean when it ends: the next start is clean with nothing to resync, and every
/// stripe's parity is right. A bench past the records left them dirty (and the torn strip's
/// parity wrong).
#[test]
fn a_bench_resyncs_a_dirty_volume_and_leaves_it_clean() {
    let nbdcopy = require("nbdcopy");
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path());
    let cfg = config.to_str().unwrap();
    let (mut d, uri) = serve(&config, "r6");
    fill(&nbdcopy, dir.path(), &uri, 0x9e37_79b9_7f4a_7c15);
    d.child.kill().unwrap();
    d.child.wait().unwrap();
    junk(&dir.path().join("d0.img"), 0, STRIP);

    let o = bench(cfg, &["--bytes", "1MiB"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));

    let mut d = Daemon::start(&config);
    let v = status_of(cfg, "r6");
    assert_eq!(v["state"], "healthy", "{v:#}");
    assert_eq!(v["metadata"]["clean_at_start"], true, "{v:#}");
    assert_eq!(v["metadata"]["resynced_bytes_at_start"], 0, "{v:#}");
    assert!(v["resync"].is_null(), "nothing resyncs: {v:#}");
    let s = scrub(cfg);
    assert_eq!(
        (s["checked"].as_u64(), s["mismatches"].as_u64()),
        (Some(8 * MIB / STRIP), Some(0)),
        "{s:#}"
    );
    d.stop();
}

/// What the daemon refuses, the bench refuses with the daemon's words, before writing: a
/// config whose strip size disagrees with the superblocks (both sizes named), and a volume
/// no member carries yet whose config says `create = "never"` (pointing at `nbraid create`).
#[test]
fn a_bench_refuses_a_changed_geometry_and_an_uncreated_volume() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path());
    let cfg = config.to_str().unwrap();
    ok(nbraid(&["create", cfg]), "create");
    let before = std::fs::read(dir.path().join("d0.img")).unwrap();
    edit(
        &config,
        &[("strip_size = \"64KiB\"", "strip_size = \"32KiB\"")],
    );
    let o = bench(cfg, &["--bytes", "64KiB"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success()
            && err.contains("the config says strip size 32768")
            && err.contains("the superblocks record 65536"),
        "{err}"
    );
    assert!(
        std::fs::read(dir.path().join("d0.img")).unwrap() == before,
        "nothing written"
    );

    let fresh = tempfile::tempdir().unwrap();
    let config = write_config_with(fresh.path(), &[], "create = \"never\"\n");
    let cfg = config.to_str().unwrap();
    let o = bench(cfg, &["--bytes", "64KiB"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains(&format!("run `nbraid create {cfg} --volume r6`")),
        "{err}"
    );
}

/// A volume no member carries yet, with `create = "auto"` (the default), is created by the
/// bench as the daemon would create it: superblocks written, so `nbraid create` then finds
/// it, and the daemon opens it clean.
#[test]
fn a_bench_creates_a_new_volume_as_the_daemon_would() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path());
    let cfg = config.to_str().unwrap();
    let o = bench(cfg, &["--bytes", "256KiB"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let said = ok(nbraid(&["create", cfg]), "create");
    assert!(said.contains("volume r6: exists"), "{said}");
    let mut d = Daemon::start(&config);
    let v = status_of(cfg, "r6");
    assert_eq!(v["state"], "healthy", "{v:#}");
    assert_eq!(v["metadata"]["clean_at_start"], true, "{v:#}");
    d.stop();
}
