//! Operating a running `nbraidd` through its control socket with the `nbraid` binary: the
//! socket is private (0600) and answers malformed requests with JSON errors; corruption of a
//! member file of a served RAID 6 volume is found and repaired by `nbraid scrub --repair`,
//! and the volume read through NBD (nbdcopy) is bit-exact; `nbraid fail` degrades the volume
//! and `nbraid status` says so; spares (config and `nbraid add`) take failed members' places
//! and are rebuilt, `nbraid remove`, pause and resume, following long operations from another
//! terminal; the volume reads back bit-exact after each. Starts after a crash are in
//! `unclean_start.rs`, `nbraid add`/`replace` across restarts in `added_members.rs`.
//! `nbraidd` is the one built beside `nbraid` (`cargo test --workspace`, as scripts/test runs
//! it).

mod common;

use common::*;
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

const STRIP: u64 = 64 << 10;

#[test]
fn control_socket_is_private_and_refuses_malformed_requests() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path());
    let mut d = Daemon::start(&config);
    assert_eq!(
        d.control,
        dir.path().join("arrays.ctl"),
        "default: beside the config"
    );
    let meta = std::fs::metadata(&d.control).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(
        meta.permissions().mode() & 0o777,
        0o600,
        "only the daemon's user"
    );

    let bad: [(&[u8], &str); 8] = [
        (b"hello", "malformed"),
        (b"\xff\xfe\x00", "malformed"),
        (b"[1,2,3]", "malformed"),
        (br#"{"op":"status"}"#, "bad-request"),
        (br#"{"v":7,"op":"status"}"#, "unsupported-version"),
        (br#"{"v":1,"op":"format-everything"}"#, "unknown-op"),
        (br#"{"v":1,"op":"fail","volume":"r6"}"#, "bad-request"),
        (br#"{"v":1,"op":"scrub","volume":"nope"}"#, "not-found"),
    ];
    let mut lines: Vec<&[u8]> = bad.iter().map(|b| b.0).collect();
    lines.push(br#"{"v":1,"op":"status"}"#);
    let replies = exchange(&d.control, &lines);
    for ((line, code), r) in bad.iter().zip(&replies) {
        assert_eq!(r["v"], 1);
        assert_eq!(r["ok"], false, "{}", String::from_utf8_lossy(line));
        assert_eq!(
            r["error"]["code"],
            *code,
            "{}: {r}",
            String::from_utf8_lossy(line)
        );
        assert!(r["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()));
    }
    // The same connection still serves a good request after the bad ones.
    let status = &replies[bad.len()];
    assert_eq!(status["ok"], true);
    assert_eq!(status["volumes"][0]["name"], "r6");
    assert_eq!(status["volumes"][0]["state"], "healthy");

    // Through the CLI: with `--json` a refusal is an error object on stdout, code and
    // message; the plain error is the message alone, a sentence with no code tail.
    let ctl = d.control.to_str().unwrap();
    let o = nbraid(&["status", "nope", "--json", "--control", ctl]);
    assert!(!o.status.success());
    let v: Value = serde_json::from_slice(&o.stdout).expect("JSON on stdout");
    assert_eq!(v["error"]["code"], "not-found", "{v}");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.starts_with("no volume \"nope\""), "{v}");
    let o = nbraid(&["status", "nope", "--control", ctl]);
    assert!(!o.status.success() && o.stdout.is_empty());
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.trim_end(), format!("error: {message}"));
    assert!(!err.contains("not-found"), "{err}");

    // An endless line is cut off with an error, and the daemon lives on.
    let long = vec![b'x'; 100 << 10];
    let r = exchange(&d.control, &[&long]);
    assert_eq!(r[0]["error"]["code"], "malformed");
    let again = exchange(&d.control, &[br#"{"v":1,"op":"status","volume":"r6"}"#]);
    assert_eq!(again[0]["ok"], true);
    d.stop();
}

#[test]
fn scrub_repairs_a_corrupt_raid6_member_and_fail_degrades() {
    let nbdcopy = require("nbdcopy");
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path());
    let cfg = config.to_str().unwrap();
    let (mut d, uri) = serve(&config, "r6");
    // Fill the volume with known bytes through NBD.
    let data = fill(&nbdcopy, dir.path(), &uri, 0x9e37_79b9_7f4a_7c15);

    // A clean scrub first: nothing to find.
    let clean: Value = serde_json::from_str(&ok(
        nbraid(&["scrub", "r6", "--config", cfg, "--json"]),
        "scrub",
    ))
    .unwrap();
    assert_eq!(clean["state"], "done");
    assert_eq!(clean["checked"], 8 * MIB / STRIP);
    assert_eq!(clean["mismatches"], 0);

    // Corrupt two bytes of one chunk of member d2 behind the daemon's back.
    let member = dir.path().join("d2.img");
    let at = RESERVED + 5 * STRIP + 1234;
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&member)
        .unwrap();
    let mut before = vec![0u8; STRIP as usize];
    f.seek(SeekFrom::Start(RESERVED + 5 * STRIP)).unwrap();
    f.read_exact(&mut before).unwrap();
    f.seek(SeekFrom::Start(at)).unwrap();
    f.write_all(&[before[1234] ^ 0xa5, before[1235] ^ 0x01])
        .unwrap();
    f.sync_all().unwrap();

    let found: Value = serde_json::from_str(&ok(
        nbraid(&["scrub", "r6", "--config", cfg, "--json"]),
        "scrub",
    ))
    .unwrap();
    assert_eq!(
        (found["mismatches"].as_u64(), found["repaired"].as_u64()),
        (Some(1), Some(0))
    );
    let fixed: Value = serde_json::from_str(&ok(
        nbraid(&[
            "scrub", "r6", "--repair", "--rate", "100MB/s", "--config", cfg, "--json",
        ]),
        "scrub --repair",
    ))
    .unwrap();
    assert_eq!(
        (fixed["mismatches"].as_u64(), fixed["repaired"].as_u64()),
        (Some(1), Some(1))
    );
    let mut after = vec![0u8; STRIP as usize];
    f.seek(SeekFrom::Start(RESERVED + 5 * STRIP)).unwrap();
    f.read_exact(&mut after).unwrap();
    assert!(after == before, "the member's chunk is restored bit-exact");

    // Read back through NBD: bit-exact.
    reads_back(&nbdcopy, dir.path(), &uri, &data);

    // fail: degraded, and status says so.
    let said = ok(nbraid(&["fail", "r6", "d1", "--config", cfg]), "fail");
    assert!(said.contains("degraded"), "{said}");
    let status: Value = serde_json::from_str(&ok(
        nbraid(&[
            "status",
            "r6",
            "--json",
            "--control",
            d.control.to_str().unwrap(),
        ]),
        "status --json",
    ))
    .unwrap();
    let v = &status["volumes"][0];
    assert_eq!(v["degraded"], true);
    assert_eq!(v["state"], "degraded");
    assert_eq!(v["members"][1]["id"], "d1");
    assert_eq!(v["members"][1]["state"], "failed");
    assert_eq!(v["scrub"]["repaired"], 1);
    let table = ok(nbraid(&["status", "--config", cfg]), "status");
    assert!(
        table.contains("r6") && table.contains("degraded") && table.contains("5/6"),
        "{table}"
    );
    d.stop();
}

/// Issue 11's hot spare end to end: a spare named in the config stands by; `nbraid fail`
/// makes the daemon rebuild the member's place onto it by itself (rate-limited, progress in
/// status) while NBD writes go on; the volume reads back bit-exact. Restarted on the
/// unchanged config (the old member still in `members`), the volume assembles healthy by
/// superblock with the spare in the role, says to update the config, resyncs nothing.
#[test]
fn a_config_spare_is_rebuilt_onto_by_itself_and_a_restart_keeps_it() {
    let nbdcopy = require("nbdcopy");
    let dir = tempfile::tempdir().unwrap();
    let config = write_config_with(
        dir.path(),
        &["s0"],
        "spares = [\"s0\"]\nrebuild_rate = \"8MiB\"\n",
    );
    let cfg = config.to_str().unwrap();
    let check = ok(nbraid(&["check", cfg]), "check");
    assert!(
        check.contains("spare of r6") && check.contains("spares s0"),
        "{check}"
    );
    let (mut d, uri) = serve(&config, "r6");
    assert_eq!(volume_status(cfg)["spares"], serde_json::json!(["s0"]));
    fill(&nbdcopy, dir.path(), &uri, 0x1234_5678_9abc_def1);
    ok(nbraid(&["fail", "r6", "d1", "--config", cfg]), "fail");
    // The rebuild starts by itself; at 8 MiB/s the 32 MiB pass takes ~4 s: write under it.
    let v = wait_for(cfg, "the automatic rebuild to start", |v| {
        v["rebuild"]["state"] == "running"
    });
    assert_eq!(v["rebuild"]["roles"], serde_json::json!([1]), "{v:#}");
    assert_eq!(v["members"][1]["id"], "s0", "{v:#}");
    assert_eq!(v["members"][1]["state"], "rebuilding", "{v:#}");
    assert_eq!(v["rebuild"]["rate_limit_bytes_per_s"], 8 << 20);
    let table = ok(nbraid(&["status", "r6", "--config", cfg]), "status table");
    assert!(table.contains("rebuild running"), "{table}");
    let data = fill(&nbdcopy, dir.path(), &uri, 0x0dd_ba11_cafe_f00d);
    let v = wait_for(cfg, "the rebuild to finish", |v| {
        v["rebuild"]["state"] == "done" && v["degraded"] == false
    });
    assert_eq!(v["members"][1]["state"], "healthy", "{v:#}");
    assert!(v["members"][1]["path"]
        .as_str()
        .unwrap()
        .ends_with("s0.img"));
    assert_eq!(v["spares"], serde_json::json!([]));
    reads_back(&nbdcopy, dir.path(), &uri, &data);
    d.stop();

    // The same config: s0 holds role 1 by its superblock, d1 is ignored.
    let mut d = Daemon::start(&config);
    let v = volume_status(cfg);
    assert_eq!(v["state"], "healthy", "{v:#}");
    assert_eq!(v["members"][1]["id"], "s0", "{v:#}");
    assert_eq!(v["metadata"]["clean_at_start"], true, "{v:#}");
    assert_eq!(v["metadata"]["resynced_bytes_at_start"], 0, "{v:#}");
    let notes = v["notes"].to_string();
    assert!(
        notes.contains("s0 (listed in spares) now holds role 1")
            && notes.contains(r#"members = [\"d0\", \"s0\", \"d2\""#)
            && notes.contains("member d1 no longer holds a role"),
        "{notes}"
    );
    assert!(
        v["rebuild"].is_null(),
        "nothing rebuilt at the restart: {v:#}"
    );
    reads_back(&nbdcopy, dir.path(), &uri, &data);
    d.stop();
}

/// A spare added at run time is recorded (format version 2): after a restart on the same
/// config (which does not name it) it still stands by, and a member failed then is rebuilt
/// onto it by itself; the volume reads back bit-exact.
#[test]
fn a_spare_added_at_run_time_survives_a_restart_and_takes_a_failed_role() {
    let nbdcopy = require("nbdcopy");
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path());
    let cfg = config.to_str().unwrap();
    let (mut d, uri) = serve(&config, "r6");
    let data = fill(&nbdcopy, dir.path(), &uri, 0x5eed_0f5a_4e5a_f00d);
    let spare = blank_member(dir.path(), "spare.img");
    ok(nbraid(&["add", "r6", &spare, "--config", cfg]), "add");
    // A member added at run time goes by an id made from its file name.
    assert_eq!(volume_status(cfg)["spares"], serde_json::json!(["spare"]));
    d.stop();

    let (mut d, uri) = serve(&config, "r6");
    let v = volume_status(cfg);
    assert_eq!(v["spares"], serde_json::json!(["spare"]), "{v:#}");
    assert_eq!(v["state"], "healthy", "{v:#}");
    ok(nbraid(&["fail", "r6", "d2", "--config", cfg]), "fail");
    let v = wait_for(cfg, "the rebuild onto the recorded spare", |v| {
        v["rebuild"]["state"] == "done" && v["degraded"] == false
    });
    assert!(
        v["members"][2]["path"]
            .as_str()
            .unwrap()
            .ends_with("spare.img"),
        "{v:#}"
    );
    assert_eq!(v["spares"], serde_json::json!([]), "{v:#}");
    reads_back(&nbdcopy, dir.path(), &uri, &data);
    d.stop();
}

/// mdadm --remove through `nbraid remove`: an active member is refused with the way out, a
/// failed one is taken out (status: removed, degraded), a spare added at run time is taken
/// back out of the spares, and the data reads back after each.
#[test]
fn remove_refuses_active_members_and_takes_out_failed_ones_and_spares() {
    let nbdcopy = require("nbdcopy");
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path());
    let cfg = config.to_str().unwrap();
    let (mut d, uri) = serve(&config, "r6");
    let data = fill(&nbdcopy, dir.path(), &uri, 0x5eed_0000_0000_0011);
    let refused = nbraid(&["remove", "r6", "d2", "--config", cfg]);
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains("active") && said.contains("fail it first"),
        "{said}"
    );
    ok(nbraid(&["fail", "r6", "d2", "--config", cfg]), "fail");
    let r: Value = serde_json::from_str(&ok(
        nbraid(&["remove", "r6", "d2", "--config", cfg, "--json"]),
        "remove",
    ))
    .unwrap();
    assert_eq!(
        (
            r["removed"].as_str(),
            r["index"].as_u64(),
            r["degraded"].as_bool()
        ),
        (Some("member"), Some(2), Some(true)),
        "{r}"
    );
    let v = volume_status(cfg);
    assert_eq!(v["members"][2]["state"], "removed", "{v:#}");
    reads_back(&nbdcopy, dir.path(), &uri, &data);
    // A spare added while no role wants it stands by; remove takes it back out.
    ok(nbraid(&["fail", "r6", "d4", "--config", cfg]), "fail");
    ok(
        nbraid(&["remove", "r6", "4", "--config", cfg]),
        "remove by index",
    );
    let spare = blank_member(dir.path(), "x.img");
    let s = blank_member(dir.path(), "y.img");
    ok(nbraid(&["add", "r6", &spare, "--config", cfg]), "add");
    ok(nbraid(&["add", "r6", &s, "--config", cfg]), "add");
    wait_for(cfg, "both roles rebuilt", |v| v["degraded"] == false);
    let extra = blank_member(dir.path(), "z.img");
    ok(
        nbraid(&["add", "r6", &extra, "--config", cfg]),
        "add a spare",
    );
    assert_eq!(volume_status(cfg)["spares"], serde_json::json!(["z"]));
    let said = ok(
        nbraid(&["remove", "r6", &extra, "--config", cfg]),
        "remove a spare",
    );
    assert!(said.contains("spare"), "{said}");
    assert_eq!(volume_status(cfg)["spares"], serde_json::json!([]));
    reads_back(&nbdcopy, dir.path(), &uri, &data);
    d.stop();
}

/// The volume's `rebuild_rate` holds for a rebuild `nbraid add` starts (it started unlimited),
/// and `nbraid rebuild VOLUME` without `--rate` follows a running rebuild from another
/// terminal without touching its rate (it made it unlimited); the data reads back bit-exact.
#[test]
fn add_rebuilds_at_the_volume_rate_and_following_a_rebuild_keeps_its_rate() {
    let nbdcopy = require("nbdcopy");
    let dir = tempfile::tempdir().unwrap();
    let config = write_config_with(dir.path(), &[], "rebuild_rate = \"8MiB\"\n");
    let cfg = config.to_str().unwrap();
    let (mut d, uri) = serve(&config, "r6");
    let data = fill(&nbdcopy, dir.path(), &uri, 0x0bad_cafe_0000_0011);
    ok(nbraid(&["fail", "r6", "d1", "--config", cfg]), "fail");
    let spare = blank_member(dir.path(), "spare.img");
    ok(nbraid(&["add", "r6", &spare, "--config", cfg]), "add");
    let v = volume_status(cfg);
    assert_eq!(
        v["rebuild"]["rate_limit_bytes_per_s"],
        8 << 20,
        "the volume's rate: {v:#}"
    );
    // Follow it from "another terminal"; at 8 MiB/s the 32 MiB pass takes ~4 s.
    let follower = Command::new(env!("CARGO_BIN_EXE_nbraid"))
        .args(["rebuild", "r6", "--json", "--config", cfg])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let v = volume_status(cfg);
    assert_eq!(v["rebuild"]["state"], "running", "{v:#}");
    assert_eq!(
        v["rebuild"]["rate_limit_bytes_per_s"],
        8 << 20,
        "following kept the rate: {v:#}"
    );
    let done: Value = serde_json::from_str(&ok(
        follower.wait_with_output().unwrap(),
        "rebuild (follow)",
    ))
    .unwrap();
    assert_eq!(done["state"], "done", "{done}");
    assert_eq!(volume_status(cfg)["degraded"], false);
    reads_back(&nbdcopy, dir.path(), &uri, &data);
    d.stop();
}

/// A file the daemon already uses is refused by `add` and `replace` with the reason — a
/// member (of this volume or another), a spare of another volume (a spare stands by for one
/// volume) — instead of "in use by process nbraidd"; mdadm's fail → remove → add of the same
/// member works (it is rebuilt whole), and the data reads back bit-exact.
#[test]
fn add_refuses_files_in_use_and_takes_back_a_removed_member() {
    let nbdcopy = require("nbdcopy");
    let dir = tempfile::tempdir().unwrap();
    let second = "\n[[volume]]\nname = \"m\"\nlevel = \"raid1\"\nmembers = [\"e0\", \"e1\"]\nspares = [\"s0\"]\n";
    let config = write_config_with(dir.path(), &["e0", "e1", "s0"], second);
    let cfg = config.to_str().unwrap();
    let (mut d, uri) = serve(&config, "r6");
    let data = fill(&nbdcopy, dir.path(), &uri, 0x00c0_ffee_0000_0012);
    let path = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    let refused = |args: &[&str], want: &str| {
        let o = nbraid(args);
        let said = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(
            !o.status.success() && said.contains(want),
            "{args:?}: {said}"
        );
    };
    refused(
        &["add", "r6", &path("s0.img"), "--config", cfg],
        "is a spare of volume \"m\"",
    );
    refused(
        &["add", "r6", &path("e1.img"), "--config", cfg],
        "is member e1 of volume \"m\"",
    );
    refused(
        &["add", "r6", &path("d3.img"), "--config", cfg],
        "is member d3 of volume \"r6\"",
    );
    refused(
        &["replace", "r6", "d2", &path("e0.img"), "--config", cfg],
        "is member e0 of volume \"m\"",
    );
    let extra = blank_member(dir.path(), "extra.img");
    ok(nbraid(&["add", "m", &extra, "--config", cfg]), "add to m");
    refused(
        &["add", "r6", &extra, "--config", cfg],
        "is a spare of volume \"m\"",
    );
    ok(nbraid(&["fail", "r6", "d2", "--config", cfg]), "fail");
    refused(
        &["add", "r6", &path("d2.img"), "--config", cfg],
        "`nbraid remove` it first",
    );
    ok(nbraid(&["remove", "r6", "d2", "--config", cfg]), "remove");
    let said = ok(
        nbraid(&["add", "r6", &path("d2.img"), "--config", cfg]),
        "add the removed member back",
    );
    assert!(said.contains("rebuilding role 2 (d2)"), "{said}");
    let v = wait_for(cfg, "the rebuild onto the member taken back", |v| {
        v["rebuild"]["state"] == "done" && v["degraded"] == false
    });
    assert_eq!(v["members"][2]["id"], "d2", "{v:#}");
    assert_eq!(v["members"][2]["state"], "healthy", "{v:#}");
    reads_back(&nbdcopy, dir.path(), &uri, &data);
    d.stop();
}

/// Long operations can be followed from another terminal: `nbraid scrub VOLUME --follow`
/// follows a scrub another `nbraid scrub` started, to the same final report, and
/// `nbraid status --watch --json` prints a fresh status line every second.
#[test]
fn a_scrub_and_the_status_can_be_followed_from_another_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path());
    let cfg = config.to_str().unwrap();
    let (mut d, _uri) = serve(&config, "r6");
    // 32 MiB at 8 MB/s: about 4 s.
    let starter = Command::new(env!("CARGO_BIN_EXE_nbraid"))
        .args(["scrub", "r6", "--rate", "8MB/s", "--json", "--config", cfg])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for(cfg, "the scrub to start", |v| {
        v["scrub"]["state"] == "running"
    });
    let mut watch = Command::new(env!("CARGO_BIN_EXE_nbraid"))
        .args(["status", "r6", "--watch", "--json", "--config", cfg])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(watch.stdout.take().unwrap()).lines();
    let positions: Vec<u64> = (0..2)
        .map(|_| {
            let l = lines.next().expect("a status line").unwrap();
            let v: Value = serde_json::from_str(&l).unwrap_or_else(|e| panic!("{l}: {e}"));
            assert_eq!(v["volumes"][0]["name"], "r6", "{v}");
            v["volumes"][0]["scrub"]["position_bytes"].as_u64().unwrap()
        })
        .collect();
    let _ = watch.kill();
    let _ = watch.wait();
    assert!(
        positions[1] > positions[0],
        "--watch shows the scrub moving: {positions:?}"
    );
    let followed: Value = serde_json::from_str(&ok(
        nbraid(&["scrub", "r6", "--follow", "--json", "--config", cfg]),
        "scrub --follow",
    ))
    .unwrap();
    let started: Value =
        serde_json::from_str(&ok(starter.wait_with_output().unwrap(), "scrub")).unwrap();
    assert_eq!(followed["state"], "done", "{followed}");
    assert_eq!(started["state"], "done", "{started}");
    assert_eq!(followed["checked"], started["checked"]);
    assert_eq!(followed["checked"], 8 * MIB / STRIP);
    d.stop();
}

/// Issue 11's first test, through NBD: a member fails while nbdcopy writes the volume
/// (three passes of different bytes, the member failed during the second), the daemon
/// rebuilds its place onto the config's spare by itself while the writes go on, and the
/// volume reads back bit-exact; a scrub then finds parity and data agreeing everywhere.
#[test]
fn a_member_failed_under_nbd_writes_is_rebuilt_onto_a_spare_bit_exact() {
    let nbdcopy = require("nbdcopy");
    let dir = tempfile::tempdir().unwrap();
    let config = write_config_with(dir.path(), &["s0"], "spares = [\"s0\"]\n");
    let cfg = config.to_str().unwrap();
    let (mut d, uri) = serve(&config, "r6");
    let mut srcs = Vec::new();
    for (i, seed) in [
        0x1111_2222_3333_4444u64,
        0x5555_6666_7777_8888,
        0x9999_aaaa_bbbb_cccc,
    ]
    .into_iter()
    .enumerate()
    {
        let data = seeded_bytes(seed, 32 * MIB);
        let src = dir.path().join(format!("src{i}.img"));
        std::fs::write(&src, &data).unwrap();
        srcs.push((src, data));
    }
    let copy = |src: &Path| {
        ok(
            Command::new(&nbdcopy).arg(src).arg(&uri).output().unwrap(),
            "nbdcopy into the volume",
        )
    };
    copy(&srcs[0].0);
    // The second pass streams from a pipe this test feeds, so the member fails while that
    // pass is certainly still writing, however fast the machine is.
    let mut writer = Command::new(&nbdcopy)
        .args(["-", &uri])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    let mut pipe = writer.stdin.take().unwrap();
    let (head, tail) = srcs[1].1.split_at(12 * MIB as usize);
    pipe.write_all(head).unwrap();
    let written = |v: &Value| v["io"]["write_bytes"].as_u64().unwrap_or(0);
    wait_for(cfg, "the second pass to be under way", |v| {
        written(v) > 40 * MIB
    });
    ok(nbraid(&["fail", "r6", "d1", "--config", cfg]), "fail");
    pipe.write_all(tail).unwrap();
    drop(pipe);
    assert!(writer.wait().unwrap().success(), "nbdcopy from the pipe");
    copy(&srcs[2].0);
    let v = wait_for(cfg, "the rebuild onto the spare", |v| {
        v["rebuild"]["state"] == "done" && v["degraded"] == false
    });
    assert_eq!(v["members"][1]["id"], "s0", "{v:#}");
    assert!(written(&v) >= 96 * MIB, "{v:#}");
    reads_back(&nbdcopy, dir.path(), &uri, &srcs[2].1);
    let scrub: Value = serde_json::from_str(&ok(
        nbraid(&["scrub", "r6", "--config", cfg, "--json"]),
        "scrub",
    ))
    .unwrap();
    assert_eq!(
        (scrub["mismatches"].as_u64(), scrub["skipped"].as_u64()),
        (Some(0), Some(0)),
        "{scrub}"
    );
    d.stop();
}

/// `nbraid pause` on an idle volume holds the rebuild that a failure starts later (md's
/// `frozen`): it waits at byte 0 until `nbraid resume` (it once ran at full speed while
/// "paused").
#[test]
fn pause_while_idle_holds_a_rebuild_that_starts_later() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config_with(dir.path(), &["s0"], "spares = [\"s0\"]\n");
    let cfg = config.to_str().unwrap();
    let (mut d, _uri) = serve(&config, "r6");
    let said = ok(nbraid(&["pause", "r6", "--config", cfg]), "pause");
    assert!(said.contains("held: r6"), "{said}");
    assert!(said.contains("no background work running now"), "{said}");
    assert_eq!(volume_status(cfg)["held"], true);
    let status = ok(nbraid(&["status", "--config", cfg]), "status");
    assert!(status.contains("background work held"), "{status}");
    ok(nbraid(&["fail", "r6", "d1", "--config", cfg]), "fail");
    let v = wait_for(cfg, "the rebuild to be there", |v| v["rebuild"].is_object());
    std::thread::sleep(Duration::from_millis(600));
    let v2 = volume_status(cfg);
    assert_eq!(v2["rebuild"]["state"], "paused", "{v:#}\n{v2:#}");
    assert_eq!(
        v2["rebuild"]["position_bytes"], 0,
        "the rebuild ran while held: {v2:#}"
    );
    let status = ok(nbraid(&["status", "--config", cfg]), "status");
    assert!(status.contains("rebuild paused 0% d1 → s0"), "{status}");
    let said = ok(nbraid(&["resume", "r6", "--config", cfg]), "resume");
    assert!(said.contains("resumed: r6"), "{said}");
    wait_for(cfg, "the rebuild to finish", |v| {
        v["rebuild"]["state"] == "done" && v["degraded"] == false && v["held"] == false
    });
    d.stop();
}

/// `nbraid pause` holds a running rebuild and a running scrub where they are (status says
/// paused, the position stays), `nbraid resume` lets them run to the end.
#[test]
fn pause_and_resume_hold_and_restart_a_rebuild_and_a_scrub() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config_with(
        dir.path(),
        &["s0"],
        "spares = [\"s0\"]\nrebuild_rate = \"8MiB\"\n",
    );
    let cfg = config.to_str().unwrap();
    let (mut d, _uri) = serve(&config, "r6");
    let held = |what: &str| {
        let said = ok(nbraid(&["pause", "r6", "--config", cfg]), "pause");
        assert!(said.contains("paused: r6"), "{said}");
        let v = wait_for(cfg, "the pause", |v| v[what]["state"] == "paused");
        let at = v[what]["position_bytes"].as_u64().unwrap();
        std::thread::sleep(Duration::from_millis(600));
        let v = volume_status(cfg);
        assert_eq!(v[what]["state"], "paused", "{v:#}");
        assert_eq!(v[what]["position_bytes"], at, "{what} moved while paused");
        let said = ok(nbraid(&["resume", "r6", "--config", cfg]), "resume");
        assert!(said.contains("resumed: r6"), "{said}");
    };
    ok(nbraid(&["fail", "r6", "d1", "--config", cfg]), "fail");
    wait_for(cfg, "the rebuild to start", |v| {
        v["rebuild"]["state"] == "running"
    });
    held("rebuild");
    wait_for(cfg, "the rebuild to finish", |v| {
        v["rebuild"]["state"] == "done" && v["degraded"] == false
    });
    let scrub = Command::new(env!("CARGO_BIN_EXE_nbraid"))
        .args(["scrub", "r6", "--rate", "8MB/s", "--json", "--config", cfg])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for(cfg, "the scrub to start", |v| {
        v["scrub"]["state"] == "running"
    });
    held("scrub");
    let r: Value = serde_json::from_str(&ok(scrub.wait_with_output().unwrap(), "scrub")).unwrap();
    assert_eq!(
        (
            r["state"].as_str(),
            r["checked"].as_u64(),
            r["mismatches"].as_u64()
        ),
        (Some("done"), Some(8 * MIB / STRIP), Some(0)),
        "{r}"
    );
    d.stop();
}
