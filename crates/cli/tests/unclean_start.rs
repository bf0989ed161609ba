//! A daemon killed under writes (SIGKILL) and restarted: it serves at once and resyncs in the
//! background (RAID 1, and RAID 5 with the partial-parity log), at the volume's rate with
//! progress in status, and a scrub the kill cut off resumes from its checkpoint. `nbraidd` is
//! the one built beside `nbraid` (`cargo test --workspace`, as scripts/test runs it).

mod common;

use common::*;
use serde_json::Value;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const STRIP: u64 = 64 << 10;

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
        // Checksums off: these tests size members to hold 32 MiB after the metadata area and
        // compare member bytes from there (the checksums' own restarts: checksum_e2e.rs and
        // core's checksum_array.rs, crash_checksum.rs).
        text += &format!(
            "[[volume]]\nname = \"{name}\"\nlevel = \"{level}\"\nmembers = [{}]\n\
             bitmap_chunk = \"1MiB\"\nrebuild_rate = \"4MiB\"\nchecksums = \"off\"\n{extra}",
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
        let mut v = status_of(config.to_str().unwrap(), name);
        assert_eq!(v["metadata"]["clean_at_start"], false, "{v:#}");
        assert_eq!(v["metadata"]["resynced_bytes_at_start"], 0, "{v:#}");
        assert_eq!(
            v["metadata"]["background_resync_bytes_at_start"],
            32 * MIB,
            "{v:#}"
        );
        // The daemon spawns the pass at the start; a status taken before its first window
        // still finds it "idle" (seen under the test suite's load).
        let deadline = Instant::now() + Duration::from_secs(10);
        while v["resync"]["state"] == "idle" && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
            v = status_of(config.to_str().unwrap(), name);
        }
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
