//! Operating a running `nbraidd` through its control socket with the `nbraid` binary: the
//! socket is private (0600) and answers malformed requests with JSON errors; corruption of a
//! member file of a served RAID 6 volume is found and repaired by `nbraid scrub --repair`,
//! and the volume read through NBD (nbdcopy) is bit-exact; `nbraid fail` degrades the volume
//! and `nbraid status` says so; `nbraid fail` + `nbraid add SPARE` rebuild the failed member's
//! place onto the spare (`nbraid rebuild --rate` follows it), `nbraid replace` swaps a healthy
//! member without degrading, and the volume reads back bit-exact after each. `nbraidd` is the one built beside `nbraid` (`cargo test
//! --workspace`, as scripts/test runs it).

mod common;

use common::*;
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const STRIP: u64 = 64 << 10;

/// Sends raw lines on one connection; the replies, parsed.
fn exchange(control: &Path, lines: &[&[u8]]) -> Vec<Value> {
    let s = UnixStream::connect(control).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s);
    lines
        .iter()
        .map(|l| {
            // The daemon may close a connection whose line is too long before taking it all.
            let _ = w.write_all(l).and_then(|()| w.write_all(b"\n"));
            let mut reply = String::new();
            r.read_line(&mut reply).unwrap();
            serde_json::from_str(&reply).unwrap_or_else(|e| panic!("reply {reply:?}: {e}"))
        })
        .collect()
}

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
            "scrub", "r6", "--repair", "--rate", "100", "--config", cfg, "--json",
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

/// `nbraid status r6 --json`'s volume.
fn volume_status(cfg: &str) -> Value {
    let v: Value = serde_json::from_str(&ok(
        nbraid(&["status", "r6", "--json", "--config", cfg]),
        "status",
    ))
    .unwrap();
    v["volumes"][0].clone()
}

/// Polls status until `done` says so (60 s at most); the last status.
fn wait_for(cfg: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let v = volume_status(cfg);
        if done(&v) {
            return v;
        }
        assert!(Instant::now() < deadline, "waiting for {what}: {v:#}");
        std::thread::sleep(Duration::from_millis(100));
    }
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
    assert_eq!(volume_status(cfg)["spares"], serde_json::json!([spare]));
    d.stop();

    let (mut d, uri) = serve(&config, "r6");
    let v = volume_status(cfg);
    assert_eq!(v["spares"], serde_json::json!([spare]), "{v:#}");
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
    assert_eq!(volume_status(cfg)["spares"], serde_json::json!([extra]));
    let said = ok(
        nbraid(&["remove", "r6", &extra, "--config", cfg]),
        "remove a spare",
    );
    assert!(said.contains("spare"), "{said}");
    assert_eq!(volume_status(cfg)["spares"], serde_json::json!([]));
    reads_back(&nbdcopy, dir.path(), &uri, &data);
    d.stop();
}

/// A daemon restarted after a SIGKILL, serving volume `name` with its resync in the
/// background, and what the volume held.
struct UncleanStart {
    dir: tempfile::TempDir,
    config: PathBuf,
    uri: String,
    data: Vec<u8>,
    daemon: Daemon,
    nbdcopy: PathBuf,
}

impl UncleanStart {
    /// Volume `name` (`level`, 32 MiB, 1 MiB bitmap chunks, resync at 4 MiB/s, `extra` keys)
    /// over `members` files `{name}{i}.img` of `member_mib`: filled through NBD, the daemon
    /// SIGKILLed, `damage(dir)` done behind its back, restarted: it serves at once with all
    /// of it left to the background pass, running at the volume's rate.
    fn new(
        name: &str,
        level: &str,
        (members, member_mib): (usize, u64),
        extra: &str,
        damage: impl FnOnce(&Path),
    ) -> UncleanStart {
        let nbdcopy = require("nbdcopy");
        let dir = tempfile::tempdir().unwrap();
        let mut text = "[daemon]\nlisten = [\"unix:nbd.sock\"]\n\n".to_string();
        let ids: Vec<String> = (0..members).map(|i| format!("\"{name}{i}\"")).collect();
        for i in 0..members {
            text += &format!(
                "[[member]]\nid = \"{name}{i}\"\npath = \"{name}{i}.img\"\nsize = \"{member_mib}MiB\"\n\n"
            );
        }
        text += &format!(
            "[[volume]]\nname = \"{name}\"\nlevel = \"{level}\"\nmembers = [{}]\n\
             bitmap_chunk = \"1MiB\"\nrebuild_rate = \"4MiB\"\n{extra}",
            ids.join(", ")
        );
        let config = dir.path().join("arrays.toml");
        std::fs::write(&config, text).unwrap();
        let (mut d, uri) = serve(&config, name);
        let data = fill(&nbdcopy, dir.path(), &uri, 0x7777_1234_abcd_0001);
        d.child.kill().unwrap();
        d.child.wait().unwrap();
        damage(dir.path());
        let daemon = Daemon::start(&config);
        let v = status_of(config.to_str().unwrap(), name);
        assert_eq!(v["metadata"]["clean_at_start"], false, "{v:#}");
        assert_eq!(v["metadata"]["resynced_bytes_at_start"], 0, "{v:#}");
        assert_eq!(
            v["metadata"]["background_resync_bytes_at_start"],
            32 * MIB,
            "{v:#}"
        );
        assert_eq!(v["resync"]["state"], "running", "{v:#}");
        assert_eq!(v["resync"]["rate_limit_bytes_per_s"], 4 * MIB);
        UncleanStart {
            dir,
            config,
            uri,
            data,
            daemon,
            nbdcopy,
        }
    }

    fn cfg(&self) -> &str {
        self.config.to_str().unwrap()
    }

    /// Waits (up to a minute) for the background pass of `name` to be done.
    fn wait_done(&self, name: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while status_of(self.cfg(), name)["resync"]["state"] != "done" {
            assert!(
                Instant::now() < deadline,
                "the resync finishes: {:#}",
                status_of(self.cfg(), name)
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// After an orderly stop: the next start is clean, with nothing to resync, and serves
    /// `data`.
    fn starts_clean(&self, name: &str, data: &[u8]) {
        let mut d = Daemon::start(&self.config);
        let v = status_of(self.cfg(), name);
        assert_eq!(v["metadata"]["clean_at_start"], true, "{v:#}");
        assert!(v["resync"].is_null(), "{v:#}");
        reads_back(&self.nbdcopy, self.dir.path(), &self.uri, data);
        d.stop();
    }
}

/// Issue 11's background resync end to end: a RAID 1 killed after writes, one copy then
/// damaged behind its back (a torn mirror write), restarts serving at once with the resync
/// left to the background (rate-limited, progress in status); NBD reads return the first
/// copy, the pass leaves both copies equal, and after an orderly stop the next start is
/// clean.
#[test]
fn an_unclean_mirror_serves_at_once_and_resyncs_in_the_background() {
    // The second copy of the first and of the last MiB is torn; reads go round-robin.
    let mut u = UncleanStart::new(
        "m",
        "raid1",
        (2, 33),
        "read_policy = \"round-robin\"\n",
        |dir| {
            junk(&dir.join("m1.img"), 0, MIB);
            junk(&dir.join("m1.img"), 31 * MIB, MIB);
        },
    );
    // Served while the resync runs (4 MiB/s from the start: seconds from the last MiB): the
    // first copy is what reads see. 4 KiB reads of the last MiB, backwards so no sequential
    // run keeps them on one copy, alternate copies: each must resync what it touches first
    // (nbraidd's exports once read the engine volume directly, past that rule).
    let blocks = u.dir.path().join("blocks.bin");
    let script = format!(
        "import nbd\nh = nbd.NBD()\nh.connect_uri({:?})\nout = open({:?}, 'wb')\n\
         for off in range({}, {}, -4096):\n    out.write(h.pread(4096, off))\n\
         out.close()\nh.shutdown()\n",
        u.uri,
        blocks.display().to_string(),
        32 * MIB - 4096,
        31 * MIB - 4096,
    );
    // Debian's python3-libnbd, with the system interpreter (PATH may name another).
    ok(
        Command::new("/usr/bin/python3")
            .args(["-c", &script])
            .output()
            .unwrap(),
        "libnbd reads of the last MiB",
    );
    let got = std::fs::read(&blocks).unwrap();
    for (i, block) in got.chunks(4096).enumerate() {
        let at = (32 * MIB - 4096) as usize - i * 4096;
        assert!(
            block == &u.data[at..at + 4096],
            "block at byte {at}: the torn copy"
        );
    }
    assert_eq!(got.len() as u64, MIB);
    reads_back(&u.nbdcopy, u.dir.path(), &u.uri, &u.data);
    u.wait_done("m");
    u.daemon.stop();
    let copy = |p: &Path| {
        let mut b = vec![0; 32 * MIB as usize];
        let mut f = std::fs::File::open(p).unwrap();
        f.seek(SeekFrom::Start(RESERVED)).unwrap();
        f.read_exact(&mut b).unwrap();
        b
    };
    assert!(
        copy(&u.dir.path().join("m0.img")) == copy(&u.dir.path().join("m1.img")),
        "the copies agree"
    );
    u.starts_clean("m", &u.data);
}

/// The same for RAID 5 (with the partial-parity log): killed after writes, stripe 0's parity
/// then made junk behind its back (as a torn full-stripe write leaves it), the restart serves
/// at once with the resync in the background (progress in status); reads return the data
/// (parity unused) and a rewrite of the whole volume during the pass reads back; when the
/// pass is done a check-only scrub finds every stripe's parity right, and the next start
/// after an orderly stop is clean.
#[test]
fn an_unclean_raid5_serves_at_once_and_resyncs_in_the_background() {
    // Stripe 0's parity (left-symmetric, 3 members: on p2) is junk.
    let extra = "cache = \"write-through\"\n";
    let mut u = UncleanStart::new("p", "raid5", (3, 17), extra, |dir| {
        junk(&dir.join("p2.img"), 0, STRIP)
    });
    // Served while the resync runs: reads, then writes over everything.
    reads_back(&u.nbdcopy, u.dir.path(), &u.uri, &u.data);
    let data = fill(&u.nbdcopy, u.dir.path(), &u.uri, 0x5555_1234_abcd_0006);
    let v = status_of(u.cfg(), "p");
    assert_eq!(
        v["resync"]["state"], "running",
        "written during the pass: {v:#}"
    );
    reads_back(&u.nbdcopy, u.dir.path(), &u.uri, &data);
    u.wait_done("p");
    let scrub: Value = serde_json::from_str(&ok(
        nbraid(&["scrub", "--config", u.cfg(), "p", "--json"]),
        "scrub",
    ))
    .unwrap();
    assert_eq!(scrub["mismatches"], 0, "{scrub:#}");
    assert_eq!(scrub["state"], "done", "{scrub:#}");
    u.daemon.stop();
    u.starts_clean("p", &data);
}

/// Issue 11's resumable scrub end to end: a scrub killed with the daemon (after its first
/// checkpoint) is resumed by the next start from the checkpoint in the superblocks, at the
/// volume's rebuild_rate, and runs to the end; after that nothing is left to resume.
#[test]
fn a_scrub_cut_off_by_a_crash_resumes_after_the_restart() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config_with(dir.path(), &[], "rebuild_rate = \"8MiB\"\n");
    let cfg = config.to_str().unwrap();
    let mut d = Daemon::start(&config);
    let r = exchange(
        &d.control,
        &[br#"{"v":1,"op":"scrub","volume":"r6","rate_bytes_per_s":2000000}"#],
    );
    assert_eq!(r[0]["ok"], true, "{:#}", r[0]);
    // Two 4 MiB windows done: the first one's checkpoint is recorded.
    wait_for(cfg, "the scrub's second window", |v| {
        v["scrub"]["position_bytes"].as_u64().unwrap_or(0) >= 8 * MIB
    });
    d.child.kill().unwrap();
    d.child.wait().unwrap();

    let mut d = Daemon::start(&config);
    let v = volume_status(cfg);
    let at = v["scrub"]["position_bytes"].as_u64().unwrap_or(0);
    assert!(at >= 4 * MIB, "resumed from the checkpoint: {v:#}");
    assert_eq!(v["scrub"]["rate_limit_bytes_per_s"], 8 * MIB, "{v:#}");
    let v = wait_for(cfg, "the resumed scrub", |v| v["scrub"]["state"] == "done");
    assert_eq!(v["scrub"]["mismatches"], 0, "{v:#}");
    d.stop();
    let mut d = Daemon::start(&config);
    let v = volume_status(cfg);
    assert!(v["scrub"].is_null(), "nothing left to resume: {v:#}");
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
    assert!(said.contains("rebuilding member 2"), "{said}");
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
        .args(["scrub", "r6", "--rate", "8", "--json", "--config", cfg])
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
        .args(["scrub", "r6", "--rate", "8", "--json", "--config", cfg])
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
