//! `nbraidd` as a person runs it: start on a config, print the URIs, serve, stop on SIGTERM with
//! exit 0 and data flushed; refuse bad configs, taken ports and unusable members with a clear
//! message and a non-zero exit.

mod common;
use common::{require, run, run_output};

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const NBRAIDD: &str = env!("CARGO_BIN_EXE_nbraidd");

/// A RAID 10 and a RAID 0 on four 64 MiB file members, listening on `listen`.
fn write_config(dir: &Path, listen: &str) -> std::path::PathBuf {
    write_config_with(
        dir,
        listen,
        "[[volume]]\nname = \"r10\"\nlevel = \"raid10\"\nmembers = [\"d0\", \"d1\", \"d2\", \"d3\"]\nsize = \"32MiB\"\n\n\
         [[volume]]\nname = \"r0\"\nlevel = \"raid0\"\nmembers = [\"d0\", \"d1\", \"d2\", \"d3\"]\n",
    )
}

/// Four 64 MiB file members d0..d3 and the given volumes.
fn write_config_with(dir: &Path, listen: &str, volumes: &str) -> std::path::PathBuf {
    let mut text = format!("[daemon]\nlisten = [{listen}]\n\n");
    for i in 0..4 {
        text += &format!("[[member]]\nid = \"d{i}\"\npath = \"d{i}.img\"\nsize = \"64MiB\"\n\n");
    }
    text += volumes;
    let file = dir.join("arrays.toml");
    std::fs::write(&file, text).unwrap();
    file
}

/// A running daemon and the lines it printed up to the export list.
struct Daemon {
    child: Child,
    printed: Vec<String>,
}

impl Daemon {
    /// Starts nbraidd and waits until it lists `exports` exports.
    fn start(config: &Path, exports: usize) -> Daemon {
        Self::start_logging_to(config, exports, Stdio::inherit())
    }

    /// [`Daemon::start`] with the daemon's stderr (its log) sent to `log`.
    fn start_logging_to(config: &Path, exports: usize, log: Stdio) -> Daemon {
        Self::start_with_env(config, exports, log, &[])
    }

    /// [`Daemon::start_logging_to`] with `env` added to the daemon's environment.
    fn start_with_env(config: &Path, exports: usize, log: Stdio, env: &[(&str, &str)]) -> Daemon {
        let mut child = Command::new(NBRAIDD)
            .envs(env.iter().copied())
            .arg("--config")
            .arg(config)
            .args(["--log-level", "warn"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .expect("start nbraidd");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut printed = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        while printed
            .iter()
            .filter(|l: &&String| l.starts_with("  "))
            .count()
            < exports
        {
            assert!(
                Instant::now() < deadline,
                "nbraidd did not list its exports: {printed:?}"
            );
            match lines.next() {
                Some(Ok(l)) => printed.push(l),
                _ => panic!(
                    "nbraidd exited early: {:?}, printed {printed:?}",
                    child.wait()
                ),
            }
        }
        // Keep draining stdout so the daemon never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines.by_ref() {});
        Daemon { child, printed }
    }

    /// The URI printed for `export` with the given scheme prefix.
    fn uri(&self, export: &str, scheme: &str) -> String {
        let line = self
            .printed
            .iter()
            .find(|l| l.trim_start().starts_with(&format!("{export}:")))
            .unwrap_or_else(|| panic!("no line for {export} in {:?}", self.printed));
        line.split_whitespace()
            .find(|w| w.starts_with(scheme))
            .unwrap_or_else(|| panic!("no {scheme} URI in {line:?}"))
            .to_string()
    }

    /// SIGTERM, then the exit status.
    fn stop(mut self) -> std::process::ExitStatus {
        // SAFETY: kill(2) on our own child's pid has no memory effects.
        let r = unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        assert_eq!(r, 0, "kill failed");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s;
            }
            assert!(Instant::now() < deadline, "nbraidd ignored SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Daemon {
    /// A failed test does not leave its daemon running (a stopped one was waited for).
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[test]
fn serves_stops_cleanly_and_keeps_data_across_restarts() {
    let nbdinfo = require("nbdinfo", "libnbd-bin");
    let nbdcopy = require("nbdcopy", "libnbd-bin");
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("nbd.sock");
    let config = write_config(
        dir.path(),
        &format!("\"unix:{}\", \"tcp:127.0.0.1:0\"", sock.display()),
    );
    let daemon = Daemon::start(&config, 2);
    let unix = daemon.uri("r10", "nbd+unix://");
    let tcp = daemon.uri("r0", "nbd://127.0.0.1:");
    assert_eq!(unix, format!("nbd+unix:///r10?socket={}", sock.display()));

    // Both listeners answer, with the sizes the config promised.
    let size = run(Command::new(&nbdinfo).args(["--size", &unix]));
    assert_eq!(size.trim(), (32u64 << 20).to_string());
    let list = run(Command::new(&nbdinfo).args(["--list", &tcp]));
    assert!(list.contains("r10") && list.contains("r0"), "{list}");

    // Data written before SIGTERM is there after a restart.
    let src = dir.path().join("src.bin");
    let data: Vec<u8> = (0..32u32 << 20)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    std::fs::write(&src, &data).unwrap();
    run(Command::new(&nbdcopy).arg(&src).arg(&unix));
    let status = daemon.stop();
    assert!(status.success(), "nbraidd exited with {status}");

    let daemon = Daemon::start(&config, 2);
    let back = dir.path().join("back.bin");
    run(Command::new(&nbdcopy)
        .arg(daemon.uri("r10", "nbd+unix://"))
        .arg(&back));
    assert!(
        std::fs::read(&back).unwrap() == data,
        "data changed across a restart"
    );
    assert!(daemon.stop().success());
}

/// Clients on many connections at once, each writing its own slice of the RAID 10 while
/// reading the others': with the connections dealt over three I/O workers (each driving its
/// own io_uring) and with none (the shared runtime and the engine's ring threads), every
/// byte reads back, the daemon stops cleanly, and what one served the other finds.
#[test]
fn many_connections_on_io_workers_and_without_them_keep_every_byte() {
    use nbraid_nbd::client::Client;
    const CLIENTS: u64 = 6;
    const SLICE: u64 = 4 << 20;
    const PIECE: u64 = 64 << 10;
    let dir = tempfile::tempdir().unwrap();
    let (config, rt) = unix_config_and_client_runtime(dir.path());
    let slice = |client: u64, round: u64| -> Vec<u8> {
        (0..SLICE)
            .map(|i| ((i ^ (client << 40) ^ (round << 50)).wrapping_mul(2654435761) >> 17) as u8)
            .collect()
    };
    for (round, workers) in [(1u64, "3"), (2, "0"), (3, "2")] {
        let daemon = Daemon::start_with_env(
            &config,
            2,
            Stdio::inherit(),
            &[("NBRAIDD_IO_WORKERS", workers)],
        );
        let uri = daemon.uri("r10", "nbd+unix://");
        rt.block_on(async {
            let tasks: Vec<_> = (0..CLIENTS)
                .map(|c| {
                    let uri = uri.clone();
                    let before = slice(c, round - 1);
                    let data = slice(c, round);
                    tokio::spawn(async move {
                        let client = Client::connect(&uri).await.expect("connect");
                        let base = c * SLICE;
                        if round > 1 {
                            let got = client.read(base, SLICE as usize).await.expect("read");
                            assert!(got[..] == before[..], "client {c}: the last daemon's bytes");
                        }
                        // Writes and reads of the neighbour's slice in flight together.
                        let neighbour = ((c + 1) % CLIENTS) * SLICE;
                        let writes = (0..SLICE / PIECE).map(|k| {
                            let at = k * PIECE;
                            let bytes = data[at as usize..(at + PIECE) as usize].to_vec();
                            client.write(base + at, bytes.into())
                        });
                        let reads = (0..SLICE / PIECE)
                            .map(|k| client.read(neighbour + k * PIECE, PIECE as usize));
                        let (w, r) = futures::join!(
                            futures::future::join_all(writes),
                            futures::future::join_all(reads)
                        );
                        assert!(w.iter().all(|x| x.is_ok()), "client {c}: writes");
                        assert!(r.iter().all(|x| x.is_ok()), "client {c}: reads");
                        client.flush().await.expect("flush");
                        let got = client.read(base, SLICE as usize).await.expect("read back");
                        assert!(got[..] == data[..], "client {c}: its slice reads back");
                    })
                })
                .collect();
            let all = futures::future::join_all(tasks);
            // A ring nobody turns would leave its requests hanging: fail instead.
            let done = tokio::time::timeout(Duration::from_secs(120), all)
                .await
                .unwrap_or_else(|_| panic!("{workers} I/O workers: requests never finished"));
            for t in done {
                t.expect("client task");
            }
        });
        let status = daemon.stop();
        assert!(
            status.success(),
            "nbraidd ({workers} I/O workers) exited with {status}"
        );
    }
}

/// One client alone on a daemon with two I/O workers: its 1 MiB reads and writes run on
/// the worker serving no connection (its own io_uring under the file members) while the
/// connection's worker receives the next; writes and reads in flight together, every byte
/// reads back, and the daemon stops cleanly. With the spare worker off, the same.
#[test]
fn a_lone_clients_long_requests_on_the_spare_worker_keep_every_byte() {
    use nbraid_nbd::client::Client;
    const SLICE: u64 = 12 << 20;
    const PIECE: u64 = 1 << 20;
    let dir = tempfile::tempdir().unwrap();
    let (config, rt) = unix_config_and_client_runtime(dir.path());
    let bytes = |round: u64| -> Vec<u8> {
        (0..SLICE)
            .map(|i| ((i ^ (round << 50)).wrapping_mul(2654435761) >> 13) as u8)
            .collect()
    };
    for (round, spare_kib) in [(1u64, "1024"), (2, "0")] {
        let env = [
            ("NBRAIDD_IO_WORKERS", "2"),
            ("NBRAIDD_SPARE_WORKER_KIB", spare_kib),
        ];
        let daemon = Daemon::start_with_env(&config, 2, Stdio::inherit(), &env);
        let uri = daemon.uri("r10", "nbd+unix://");
        let (before, data) = (bytes(round - 1), bytes(round));
        rt.block_on(async {
            let client = Client::connect(&uri).await.expect("connect");
            if round > 1 {
                // What the first daemon wrote, past the slice being rewritten now.
                let got = client.read(SLICE, SLICE as usize).await.expect("read");
                assert!(
                    got[..] == before[..],
                    "round {round}: the last daemon's bytes"
                );
            }
            let writes = (0..SLICE / PIECE).map(|k| {
                let at = (k * PIECE) as usize;
                let piece = data[at..at + PIECE as usize].to_vec();
                client.write(k * PIECE, piece.into())
            });
            let copies = (0..SLICE / PIECE).map(|k| {
                let at = (k * PIECE) as usize;
                let piece = data[at..at + PIECE as usize].to_vec();
                client.write(SLICE + k * PIECE, piece.into())
            });
            let reads = (0..SLICE / PIECE).map(|k| client.read(k * PIECE, PIECE as usize));
            let work = async {
                let (w, c, r) = futures::join!(
                    futures::future::join_all(writes),
                    futures::future::join_all(copies),
                    futures::future::join_all(reads)
                );
                assert!(
                    w.iter().chain(&c).all(|x| x.is_ok()),
                    "round {round}: writes"
                );
                assert!(r.iter().all(|x| x.is_ok()), "round {round}: reads");
                client.flush().await.expect("flush");
                let got = client.read(0, 2 * SLICE as usize).await.expect("read back");
                assert!(
                    got[..SLICE as usize] == data[..],
                    "round {round}: the slice"
                );
                assert!(got[SLICE as usize..] == data[..], "round {round}: its copy");
            };
            tokio::time::timeout(Duration::from_secs(120), work)
                .await
                .unwrap_or_else(|_| panic!("round {round}: requests never finished"));
        });
        let status = daemon.stop();
        assert!(
            status.success(),
            "nbraidd (round {round}) exited with {status}"
        );
    }
}

/// The default volumes served on a Unix socket in `dir`, and a runtime for the clients.
fn unix_config_and_client_runtime(dir: &Path) -> (std::path::PathBuf, tokio::runtime::Runtime) {
    let sock = dir.join("nbd.sock");
    let config = write_config(dir, &format!("\"unix:{}\"", sock.display()));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    (config, rt)
}

/// Runs nbraidd to completion; returns (success, stderr).
fn run_to_exit(config: &Path) -> (bool, String) {
    let o = run_output(Command::new(NBRAIDD).arg("--config").arg(config));
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn refuses_a_bad_config_with_its_location() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("bad.toml");
    std::fs::write(
        &config,
        "[[member]]\nid = \"d0\"\npath = \"d0.img\"\nsize = \"64MiB\"\n\n[[volume]]\nname = \"v\"\nlevel = \"raid7\"\nmembers = [\"d0\"]\n",
    )
    .unwrap();
    let (ok, err) = run_to_exit(&config);
    assert!(!ok);
    assert!(
        err.contains("bad.toml:8:9:") && err.contains("raid7"),
        "{err}"
    );
}

#[test]
fn refuses_a_taken_port() {
    let dir = tempfile::tempdir().unwrap();
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let config = write_config(dir.path(), &format!("\"tcp:127.0.0.1:{port}\""));
    let (ok, err) = run_to_exit(&config);
    assert!(!ok);
    assert!(err.contains(&format!("127.0.0.1:{port}")), "{err}");
}

#[test]
fn refuses_an_unusable_member() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "\"unix:nbd.sock\"");
    // d2 is a directory, not a file or block device.
    std::fs::create_dir(dir.path().join("d2.img")).unwrap();
    let (ok, err) = run_to_exit(&config);
    assert!(!ok);
    assert!(err.contains("d2"), "{err}");
}

/// A member file of an existing RAID 5 disappears: the volume serves degraded with the same
/// data (reconstructed), the file is not recreated; a second loss refuses to start.
#[test]
fn missing_members_start_degraded_or_not_at_all() {
    let nbdcopy = require("nbdcopy", "libnbd-bin");
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("nbd.sock");
    let config = write_config_with(
        dir.path(),
        &format!("\"unix:{}\"", sock.display()),
        "[[volume]]\nname = \"r5\"\nlevel = \"raid5\"\nstrip_size = \"16KiB\"\nmembers = [\"d0\", \"d1\", \"d2\", \"d3\"]\nsize = \"48MiB\"\n",
    );
    let daemon = Daemon::start(&config, 1);
    let uri = daemon.uri("r5", "nbd+unix://");
    let src = dir.path().join("src.bin");
    let data: Vec<u8> = (0..48u32 << 20)
        .map(|i| (i.wrapping_mul(40503) >> 7) as u8)
        .collect();
    std::fs::write(&src, &data).unwrap();
    run(Command::new(&nbdcopy).arg(&src).arg(&uri));
    assert!(daemon.stop().success());

    let d1 = dir.path().join("d1.img");
    std::fs::remove_file(&d1).unwrap();
    let daemon = Daemon::start(&config, 1);
    let back = dir.path().join("back.bin");
    run(Command::new(&nbdcopy).arg(&uri).arg(&back));
    assert!(
        std::fs::read(&back).unwrap() == data,
        "degraded RAID 5 returned other data"
    );
    assert!(daemon.stop().success());
    assert!(
        !d1.exists(),
        "a missing member of an existing volume was recreated"
    );

    std::fs::remove_file(dir.path().join("d2.img")).unwrap();
    let (ok, err) = run_to_exit(&config);
    assert!(!ok);
    assert!(
        err.contains("volume r5: more members are out than raid5 can lose")
            && err.contains("missing, blank or carrying no record of it: d1, d2"),
        "{err}"
    );
}

/// A log that is not a terminal (a file here, a journal or a pipe in real life) is plain text:
/// no colour codes around the levels of the warnings a degraded start logs.
#[test]
fn a_log_to_a_file_has_no_colour_codes() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config_with(
        dir.path(),
        "\"unix:nbd.sock\"",
        "[[volume]]\nname = \"r10\"\nlevel = \"raid10\"\nmembers = [\"d0\", \"d1\", \"d2\", \"d3\"]\n",
    );
    assert!(Daemon::start(&config, 1).stop().success());
    std::fs::remove_file(dir.path().join("d1.img")).unwrap();
    let path = dir.path().join("nbraidd.log");
    let file = std::fs::File::create(&path).unwrap();
    let daemon = Daemon::start_logging_to(&config, 1, Stdio::from(file));
    assert!(daemon.stop().success());
    let log = std::fs::read_to_string(&path).unwrap();
    assert!(
        !log.contains('\u{1b}'),
        "colour codes in a log file: {log:?}"
    );
    assert!(log.contains(" WARN ") && log.contains("DEGRADED"), "{log}");
}

/// A second daemon on the members a running one holds refuses to start, naming the member and
/// the process holding it; the first keeps serving and, once stopped, frees its members.
#[test]
fn a_second_daemon_on_the_same_members_is_refused() {
    let nbdinfo = require("nbdinfo", "libnbd-bin");
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "\"unix:nbd.sock\"");
    let first = Daemon::start(&config, 2);
    let pid = first.child.id();
    let (ok, err) = run_to_exit(&config);
    assert!(!ok, "a second nbraidd started on held members");
    assert!(err.contains("member d0 ("), "{err}");
    assert!(err.contains("d0.img is in use by"), "{err}");
    assert!(err.contains(&format!("process {pid} (nbraidd")), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(first.stop().success());
    // Released with the daemon: a new one starts and serves.
    let again = Daemon::start(&config, 2);
    let size = run(Command::new(&nbdinfo).args(["--size", &again.uri("r10", "nbd+unix://")]));
    assert_eq!(size.trim(), (32u64 << 20).to_string());
    assert!(again.stop().success());
}
