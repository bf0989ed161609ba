//! nbraidd with members on NBD servers (`nbdkit memory` on loopback Unix sockets): a RAID 1
//! of a local file and a remote export, and a RAID 5 over four remote exports that loses one
//! under fio's writes and keeps serving, degraded, with every block fio wrote verified.

mod common;
use common::{require, run, run_output, Daemon, Nbdkit};

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const NBRAIDD: &str = env!("CARGO_BIN_EXE_nbraidd");

/// `nbdkit memory` of `size` on a Unix socket, killed on drop.
fn memory_kit(sock: &Path, size: &str) -> Nbdkit {
    Nbdkit::start(sock, ["memory", size])
}

fn start(config: &Path) -> Daemon {
    Daemon::start(config, "warn", false, |l| {
        l.starts_with("nbraidd: control socket")
    })
}

/// The control socket's `status` reply (JSON text).
fn status(config: &Path) -> String {
    let mut s = UnixStream::connect(config.with_extension("ctl")).unwrap();
    s.write_all(b"{\"v\": 1, \"op\": \"status\"}\n").unwrap();
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).unwrap();
    line
}

fn remote(sock: &Path) -> String {
    format!("nbd+unix:///?socket={}", sock.display())
}

/// A RAID 1 `m` of a blank local file and the export on `ksock` (its `[[member]]` gets
/// `far_keys`), served on `dir/nbd.sock`. Both members exist and are blank: a new file would
/// be refused next to an existing member (the array is created over blank members, never
/// over part of them).
fn raid1_config(dir: &Path, ksock: &Path, far_keys: &str) -> std::path::PathBuf {
    let config = dir.join("arrays.toml");
    std::fs::write(
        &config,
        format!(
            "[daemon]\nlisten = [\"unix:{}\"]\n\n\
             [[member]]\nid = \"local\"\npath = \"local.img\"\nsize = \"33MiB\"\n\n\
             [[member]]\nid = \"far\"\npath = \"{}\"\nsize = \"33MiB\"\n{far_keys}\n\
             [[volume]]\nname = \"m\"\nchecksums = \"off\"\nlevel = \"raid1\"\nmembers = [\"local\", \"far\"]\n",
            dir.join("nbd.sock").display(),
            remote(ksock)
        ),
    )
    .unwrap();
    let local = std::fs::File::create(dir.join("local.img")).unwrap();
    local.set_len(33 << 20).unwrap();
    config
}

/// A RAID 1 of a local file and an `nbdkit memory` export: data written through the volume
/// is on both copies (read back from the export itself with nbdcopy).
#[test]
fn raid1_of_a_local_file_and_a_remote_export() {
    let nbdcopy = require("nbdcopy", "libnbd-bin");
    let dir = tempfile::tempdir().unwrap();
    let ksock = dir.path().join("kit.sock");
    let _kit = memory_kit(&ksock, "40M");
    let sock = dir.path().join("nbd.sock");
    let config = raid1_config(dir.path(), &ksock, "");
    let check = run(Command::new(NBRAIDD)
        .arg("--config")
        .arg(&config)
        .arg("--check"));
    assert!(check.contains("remote NBD export"), "{check}");

    let daemon = start(&config);
    let data: Vec<u8> = (0..32u32 << 20)
        .map(|i| (i.wrapping_mul(2246822519) >> 9) as u8)
        .collect();
    let src = dir.path().join("src.bin");
    std::fs::write(&src, &data).unwrap();
    let uri = format!("nbd+unix:///m?socket={}", sock.display());
    run(Command::new(&nbdcopy).arg(&src).arg(&uri));
    let back = dir.path().join("back.bin");
    run(Command::new(&nbdcopy).arg(&uri).arg(&back));
    assert!(
        std::fs::read(&back).unwrap() == data,
        "the volume returned other data"
    );
    daemon.stop();

    // The remote copy holds the data at the volume's offset (after the 1 MiB metadata area;
    // these volumes keep no block checksums, whose reserve would come first).
    let far = dir.path().join("far.bin");
    run(Command::new(&nbdcopy).arg(remote(&ksock)).arg(&far));
    let far = std::fs::read(&far).unwrap();
    assert!(
        far[1 << 20..(1 << 20) + data.len()] == data[..],
        "the remote mirror copy differs"
    );
}

/// RAID 5 over four `nbdkit memory` exports; fio writes with verification while one server
/// is killed: no write fails, the volume reports the member failed (degraded), and fio's
/// read-back verifies every block it wrote.
#[test]
fn raid5_over_four_remote_exports_survives_one_killed_under_writes() {
    let fio = require("fio", "fio");
    let dir = tempfile::tempdir().unwrap();
    let mut kits: Vec<Option<Nbdkit>> = Vec::new();
    let mut members = String::new();
    for i in 0..4 {
        let s = dir.path().join(format!("kit{i}.sock"));
        kits.push(Some(memory_kit(&s, "40M")));
        members += &format!(
            "[[member]]\nid = \"r{i}\"\npath = \"{}\"\nsize = \"33MiB\"\n\n",
            remote(&s)
        );
    }
    let sock = dir.path().join("nbd.sock");
    let config = dir.path().join("arrays.toml");
    std::fs::write(
        &config,
        format!(
            "[daemon]\nlisten = [\"unix:{}\"]\n\n{members}\
             [[volume]]\nname = \"r5\"\nchecksums = \"off\"\nlevel = \"raid5\"\nstrip_size = \"64KiB\"\n\
             members = [\"r0\", \"r1\", \"r2\", \"r3\"]\n",
            sock.display()
        ),
    )
    .unwrap();
    let daemon = start(&config);
    let uri = format!("nbd+unix:///r5?socket={}", sock.display());
    let mut job = Command::new(&fio);
    job.current_dir(dir.path())
        .args([
            "--name=w",
            "--ioengine=nbd",
            "--rw=randwrite",
            "--bs=4k",
            "--iodepth=16",
        ])
        .arg(format!("--uri={uri}"))
        .args([
            "--size=96M",
            "--verify=crc32c",
            "--do_verify=1",
            "--verify_fatal=1",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let writer = job.spawn().expect("start fio");
    std::thread::sleep(Duration::from_millis(700));
    kits[2] = None; // kills r2's server mid-run
    let out = writer.wait_with_output().unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "fio failed across the member loss: {text}"
    );
    assert!(!text.contains("verify:"), "fio found bad data: {text}");

    let status = status(&config);
    assert!(status.contains("\"ok\":true"), "{status}");
    assert!(
        status.contains("degraded") || status.contains("failed"),
        "the volume does not report the lost member: {status}"
    );
    // Still serving (degraded): a second verified pass.
    let again = run_output(
        Command::new(&fio)
            .current_dir(dir.path())
            .args([
                "--name=v",
                "--ioengine=nbd",
                "--rw=write",
                "--bs=64k",
                "--iodepth=8",
            ])
            .arg(format!("--uri={uri}"))
            .args([
                "--size=32M",
                "--verify=crc32c",
                "--do_verify=1",
                "--verify_fatal=1",
            ]),
    );
    assert!(
        again.status.success(),
        "degraded volume: {}",
        String::from_utf8_lossy(&again.stderr)
    );
    daemon.stop();
}

/// A member's `timeout` key is what the daemon waits for a silent server: with the server
/// stopped (SIGSTOP: the connection stays open, nothing answers), a write to a RAID 1 of a
/// local file and the remote export completes degraded after about `timeout = "1s"`, far
/// inside the 30 s default.
#[test]
fn a_remote_members_timeout_key_bounds_the_wait_for_a_silent_server() {
    let nbdcopy = require("nbdcopy", "libnbd-bin");
    let dir = tempfile::tempdir().unwrap();
    let ksock = dir.path().join("kit.sock");
    let kit = memory_kit(&ksock, "40M");
    let sock = dir.path().join("nbd.sock");
    let config = raid1_config(dir.path(), &ksock, "timeout = \"1s\"\nconnections = 1\n");
    let check = run(Command::new(NBRAIDD)
        .arg("--config")
        .arg(&config)
        .arg("--check"));
    assert!(
        check.contains("remote NBD export (timeout 1s, up to 1 connections)"),
        "{check}"
    );
    let daemon = start(&config);

    let pid = kit.0.id().to_string();
    run(Command::new("kill").args(["-STOP", &pid]));
    // SIGSTOP takes effect asynchronously: wait until every nbdkit thread is stopped.
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
        .any(|t| {
            let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
            !stat
                .rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('T')
        })
    {
        assert!(Instant::now() < deadline, "nbdkit did not stop");
        std::thread::sleep(Duration::from_millis(10));
    }
    let src = dir.path().join("src.bin");
    std::fs::write(&src, vec![0x5au8; 1 << 20]).unwrap();
    let uri = format!("nbd+unix:///m?socket={}", sock.display());
    let started = Instant::now();
    // --flush: the copy ends with a FLUSH, which needs every copy (or a failed member).
    run(Command::new(&nbdcopy).arg("--flush").arg(&src).arg(&uri));
    let waited = started.elapsed();
    run(Command::new("kill").args(["-CONT", &pid]));
    // Generous against load; the point is that it is not the 30 s default.
    assert!(
        waited < Duration::from_secs(20),
        "the write waited {waited:?} for the stopped server"
    );
    let s = status(&config);
    assert!(s.contains("\"degraded\":true"), "{s}");
    let back = dir.path().join("back.bin");
    run(Command::new(&nbdcopy).arg(&uri).arg(&back));
    let back = std::fs::read(&back).unwrap();
    assert!(
        back[..1 << 20] == vec![0x5au8; 1 << 20][..],
        "read back other data"
    );
    daemon.stop();
}
