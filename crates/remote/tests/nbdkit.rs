//! Remote members against real `nbdkit` servers on loopback: every member operation checked
//! against a model, several connections where nbdkit offers multi-conn, a killed server
//! failing requests at once and the member re-opening its connections once a server is
//! back (and failing its requests instead while it is back changed in a way that could lose
//! data), a stopped server failing requests by the timeout, and a TLS export.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nbraid_core::{Buf, Member};
use nbraid_remote::{RemoteMember, RemoteOptions};

const MIB: u64 = 1 << 20;

/// Finds `tool` or fails naming the Debian package.
fn require(tool: &str, package: &str) {
    let found = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .any(|d| d.join(tool).is_file());
    assert!(
        found,
        "required tool `{tool}` is not installed: install the Debian package `{package}` \
         (scripts/test installs it)"
    );
}

/// An `nbdkit memory` server, killed on drop.
struct Nbdkit {
    child: Child,
    /// Where it listens: the socket's path, or the TCP port.
    uri: String,
}

impl Nbdkit {
    fn start(args: &[&str], uri: String, ready: &dyn Fn() -> bool) -> Nbdkit {
        require("nbdkit", "nbdkit");
        let child = Command::new("nbdkit")
            .args(["--foreground", "--exit-with-parent"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start nbdkit");
        let deadline = Instant::now() + Duration::from_secs(20);
        while !ready() {
            assert!(Instant::now() < deadline, "nbdkit did not start: {args:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
        Nbdkit { child, uri }
    }

    fn unix(sock: &Path, size: &str) -> Nbdkit {
        Nbdkit::unix_with(sock, &["memory", size])
    }

    /// Listening on `sock`, with `args` after the socket's (filters, the plugin and its
    /// arguments).
    fn unix_with(sock: &Path, args: &[&str]) -> Nbdkit {
        let _ = std::fs::remove_file(sock);
        let s = sock.to_path_buf();
        let all: Vec<&str> = ["--unix", sock.to_str().unwrap()]
            .into_iter()
            .chain(args.iter().copied())
            .collect();
        Nbdkit::start(
            &all,
            format!("nbd+unix:///?socket={}", sock.display()),
            // The socket file appears at bind(), before listen(): wait for a connect.
            &move || std::os::unix::net::UnixStream::connect(&s).is_ok(),
        )
    }

    /// Waits until every thread of the server is stopped (SIGSTOP takes effect
    /// asynchronously; a request sent before that may still be answered).
    fn wait_stopped(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        let task_dir = format!("/proc/{}/task", self.child.id());
        let stopped = || {
            std::fs::read_dir(&task_dir).unwrap().all(|t| {
                let stat =
                    std::fs::read_to_string(t.unwrap().path().join("stat")).unwrap_or_default();
                // The state follows the command name in parentheses.
                stat.rsplit_once(") ")
                    .is_some_and(|(_, rest)| rest.starts_with('T'))
            })
        };
        while !stopped() {
            assert!(Instant::now() < deadline, "nbdkit did not stop");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child's pid has no memory effects.
        assert_eq!(
            unsafe { libc::kill(self.child.id() as libc::pid_t, sig) },
            0
        );
    }
}

impl Drop for Nbdkit {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len as u64)
        .map(|i| (i.wrapping_add(seed).wrapping_mul(2654435761) >> 11) as u8)
        .collect()
}

async fn read(m: &RemoteMember, offset: u64, len: usize) -> Vec<u8> {
    m.read(offset, Buf::new(len)).await.unwrap().to_vec()
}

async fn write(m: &RemoteMember, offset: u64, data: &[u8], fua: bool) {
    m.write(offset, Buf::copy_from(data).freeze(), fua)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_operation_against_a_model_on_several_connections() {
    let dir = tempfile::tempdir().unwrap();
    let kit = Nbdkit::unix(&dir.path().join("m.sock"), "64M");
    let m = RemoteMember::connect(&kit.uri, None, &RemoteOptions::default())
        .await
        .unwrap();
    assert_eq!(m.len(), 64 * MIB);
    let p = m.probe().unwrap();
    assert!(p.multi_conn && !p.read_only && !p.tls, "{p:?}");
    assert_eq!(m.connections_open(), RemoteOptions::default().connections);

    let mut model = vec![0u8; (64 * MIB) as usize];
    // Many writes in flight at once, over every connection.
    let writes: Vec<(u64, Vec<u8>)> = (0..64u64)
        .map(|i| {
            (
                (i * 997 % 16000) * 4096,
                pattern(i, 4096 * (1 + i as usize % 8)),
            )
        })
        .collect();
    futures::future::join_all(
        writes
            .iter()
            .enumerate()
            .map(|(i, (o, d))| write(&m, *o, d, i % 3 == 0)),
    )
    .await;
    for (o, d) in &writes {
        model[*o as usize..*o as usize + d.len()].copy_from_slice(d);
    }
    m.flush().await.unwrap();
    // A write longer than nbdkit's maximum payload is split by the client.
    let big = pattern(99, (40 * MIB) as usize);
    write(&m, 8 * MIB, &big, false).await;
    model[(8 * MIB) as usize..(48 * MIB) as usize].copy_from_slice(&big);
    m.trim(8 * MIB, 4 * MIB).await.unwrap();
    model[(8 * MIB) as usize..(12 * MIB) as usize].fill(0);
    m.write_zeroes(20 * MIB + 4096, 8192).await.unwrap();
    model[(20 * MIB + 4096) as usize..(20 * MIB + 12288) as usize].fill(0);
    let back = read(&m, 0, (64 * MIB) as usize).await;
    assert!(back == model, "the export differs from the model");
    let c = m.counters().snapshot();
    assert_eq!(c.errors, 0);
    assert!(c.writes >= 65 && c.flushes >= 1, "{c:?}");

    // A request past the end fails as a member error naming the export.
    let e = m.read(64 * MIB - 4096, Buf::new(8192)).await.unwrap_err();
    assert!(e.to_string().contains(&kit.uri), "{e}");
}

/// A killed server fails requests at once (not by the timeout); a server back on the same
/// socket is found again by the background re-opening, and the member serves again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_server_fails_requests_and_the_member_reconnects() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("m.sock");
    let kit = Nbdkit::unix(&sock, "16M");
    let opts = RemoteOptions {
        timeout: Duration::from_secs(20),
        ..RemoteOptions::default()
    };
    let m = RemoteMember::connect(&kit.uri, Some(8 * MIB), &opts)
        .await
        .unwrap();
    write(&m, 0, &pattern(1, 4096), false).await;
    drop(kit);
    let started = Instant::now();
    for _ in 0..8 {
        assert!(m.read(0, Buf::new(4096)).await.is_err());
    }
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "requests to a dead server waited {:?}",
        started.elapsed()
    );
    assert_eq!(m.connections_open(), 0);

    // Back (empty: nbdkit memory keeps nothing): the member re-opens by itself.
    let _kit = Nbdkit::unix(&sock, "16M");
    let deadline = Instant::now() + Duration::from_secs(30);
    while m.connections_open() == 0 {
        assert!(Instant::now() < deadline, "the member never reconnected");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    write(&m, 4096, &pattern(2, 4096), true).await;
    assert_eq!(read(&m, 4096, 4096).await, pattern(2, 4096));
}

/// A member on an `nbdkit memory 16M` that is killed and comes back as `back` (filters, the
/// plugin and its arguments) on the same socket: what its requests fail with once it has tried
/// to re-open. Panics if it re-opens a connection to it; once the server is back as it was,
/// checks that the member serves again.
async fn back_changed(opts: &RemoteOptions, back: &[&str], what: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("m.sock");
    let kit = Nbdkit::unix(&sock, "16M");
    let uri = kit.uri.clone();
    let m = RemoteMember::connect(&uri, Some(8 * MIB), opts)
        .await
        .unwrap();
    assert_eq!(m.connections_open(), opts.connections);
    write(&m, 0, &pattern(1, 4096), true).await;
    drop(kit);
    let changed = Nbdkit::unix_with(&sock, back);
    let deadline = Instant::now() + Duration::from_secs(30);
    let refused = loop {
        assert_eq!(
            m.connections_open(),
            0,
            "the member re-opened to an export that {what}"
        );
        let e = m.flush().await.expect_err("a flush to a changed export");
        let e = e.to_string();
        if e.contains("changed") {
            break e;
        }
        assert!(Instant::now() < deadline, "never refused: {e}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(refused.contains(&uri), "{refused}");
    // Still refused on the attempts that follow.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(m.connections_open(), 0);
    let e = m.read(0, Buf::new(4096)).await.unwrap_err();
    assert!(e.to_string().contains("changed"), "{e}");

    // Back as it was: the member serves again.
    drop(changed);
    let _kit = Nbdkit::unix(&sock, "16M");
    let deadline = Instant::now() + Duration::from_secs(30);
    while m.connections_open() == 0 {
        assert!(Instant::now() < deadline, "the member never reconnected");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    write(&m, 4096, &pattern(2, 4096), true).await;
    assert_eq!(read(&m, 4096, 4096).await, pattern(2, 4096));
    refused
}

/// A server back without multi-conn, while the member uses several connections: a flush on
/// one would no longer cover writes on the others. The member's requests fail instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_back_without_multi_conn_fails_the_member() {
    let back = [
        "--filter=multi-conn",
        "memory",
        "16M",
        "multi-conn-mode=disable",
    ];
    let e = back_changed(&RemoteOptions::default(), &back, "lost multi-conn").await;
    assert!(
        e.contains("multi-conn") && e.contains("4 connections"),
        "{e}"
    );
}

/// A server back without FUA: the member's FUA writes would not be taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_back_without_fua_fails_the_member() {
    // The filter's default mode advertises no FUA.
    let back = ["--filter=fua", "memory", "16M"];
    let e = back_changed(&RemoteOptions::default(), &back, "lost FUA").await;
    assert!(e.contains("FUA"), "{e}");
}

/// A server back with another size (another disk behind the same name, perhaps).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_back_with_another_size_fails_the_member() {
    let e = back_changed(&RemoteOptions::default(), &["memory", "32M"], "grew").await;
    assert!(e.contains("33554432") && e.contains("16777216"), "{e}");
}

/// A change the member does not rely on is accepted: one connection (multi-conn unused) to a
/// server back without multi-conn and with FUA it did not have.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_back_with_harmless_changes_is_used_again() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("m.sock");
    let kit = Nbdkit::unix_with(&sock, &["--filter=fua", "memory", "16M"]);
    let opts = RemoteOptions {
        connections: 1,
        ..RemoteOptions::default()
    };
    let m = RemoteMember::connect(&kit.uri, Some(8 * MIB), &opts)
        .await
        .unwrap();
    assert!(m.probe().unwrap().multi_conn);
    drop(kit);
    // A request finds the connection gone and starts re-opening it.
    assert!(m.read(0, Buf::new(4096)).await.is_err());
    let _kit = Nbdkit::unix_with(
        &sock,
        &[
            "--filter=multi-conn",
            "memory",
            "16M",
            "multi-conn-mode=disable",
        ],
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while m.connections_open() == 0 {
        assert!(Instant::now() < deadline, "the member never reconnected");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    write(&m, 4096, &pattern(3, 4096), true).await;
    assert_eq!(read(&m, 4096, 4096).await, pattern(3, 4096));
}

/// A server that stops answering (SIGSTOP) fails requests by the timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_server_fails_requests_by_the_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let kit = Nbdkit::unix(&dir.path().join("m.sock"), "16M");
    let opts = RemoteOptions {
        timeout: Duration::from_millis(500),
        ..RemoteOptions::default()
    };
    let m = RemoteMember::connect(&kit.uri, None, &opts).await.unwrap();
    kit.signal(libc::SIGSTOP);
    kit.wait_stopped();
    let started = Instant::now();
    let e = m.read(0, Buf::new(4096)).await.unwrap_err();
    kit.signal(libc::SIGCONT);
    assert!(e.to_string().contains("no reply within"), "{e}");
    assert!(started.elapsed() < Duration::from_secs(10));
}

/// `nbds://` with `tls-certificates`: nbdkit with TLS required (certificates made at test
/// time), and a plain URI refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_remote_member() {
    let dir = tempfile::tempdir().unwrap();
    let pki: PathBuf = dir.path().join("pki");
    std::fs::create_dir(&pki).unwrap();
    nbraid_nbd::testing::make_test_certificates(&pki);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let tls_dir = format!("--tls-certificates={}", pki.display());
    let port_s = port.to_string();
    let _kit = Nbdkit::start(
        &[
            "--tls=require",
            &tls_dir,
            "-i",
            "127.0.0.1",
            "-p",
            &port_s,
            "memory",
            "16M",
        ],
        String::new(),
        &|| std::net::TcpStream::connect(("127.0.0.1", port)).is_ok(),
    );
    let uri = format!(
        "nbds://127.0.0.1:{port}/?tls-certificates={}",
        pki.display()
    );
    let m = RemoteMember::connect(&uri, None, &RemoteOptions::default())
        .await
        .unwrap();
    assert!(m.probe().unwrap().tls);
    write(&m, 8192, &pattern(5, 65536), true).await;
    assert_eq!(read(&m, 8192, 65536).await, pattern(5, 65536));
    let plain = format!("nbd://127.0.0.1:{port}/");
    let e = RemoteMember::connect(&plain, None, &RemoteOptions::default())
        .await
        .err()
        .expect("plain NBD to a TLS-only server");
    assert!(e.to_string().contains("TLS"), "{e}");
}
