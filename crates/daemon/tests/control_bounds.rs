//! The control socket against clients that would hold the daemon: a `reshape` naming a FIFO
//! or a device as its config, and more idle connections than the daemon has descriptors.
//! Meanwhile NBD clients are greeted and `status` is answered.

mod common;
use common::Daemon;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc;
use std::time::Duration;

/// A RAID 5 `r5` over three 64 MiB file members in `dir`, NBD and control sockets there.
fn config(dir: &Path) -> PathBuf {
    let mut text = format!(
        "[daemon]\nlisten = [\"unix:{0}/nbd.sock\"]\ncontrol = \"{0}/ctl.sock\"\n\n",
        dir.display()
    );
    for i in 0..3 {
        text += &format!("[[member]]\nid = \"d{i}\"\npath = \"d{i}.img\"\nsize = \"64MiB\"\n\n");
    }
    text += "[[volume]]\nname = \"r5\"\nlevel = \"raid5\"\nmembers = [\"d0\", \"d1\", \"d2\"]\n";
    let file = dir.join("arrays.toml");
    std::fs::write(&file, text).unwrap();
    file
}

fn ready(l: &str) -> bool {
    l.starts_with("nbraidd: control socket")
}

/// `f` on a thread: its result, or a test failure naming `what` after `limit`.
fn within<T: Send + 'static>(
    limit: Duration,
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || tx.send(f()));
    rx.recv_timeout(limit)
        .unwrap_or_else(|_| panic!("{what}: no answer within {limit:?}"))
}

/// One request line on a fresh connection; the reply line (within 5 s).
fn control(dir: &Path, request: &str) -> serde_json::Value {
    let (path, request) = (dir.join("ctl.sock"), format!("{request}\n"));
    within(Duration::from_secs(5), &request.clone(), move || {
        let mut s = UnixStream::connect(path).unwrap();
        s.write_all(request.as_bytes()).unwrap();
        let mut line = String::new();
        BufReader::new(s).read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap()
    })
}

/// A new NBD connection gets its greeting (NBDMAGIC, IHAVEOPT) within 5 s.
fn greeted(dir: &Path) {
    let path = dir.join("nbd.sock");
    let greeting = within(Duration::from_secs(5), "an NBD greeting", move || {
        let mut g = [0u8; 18];
        UnixStream::connect(path)
            .unwrap()
            .read_exact(&mut g)
            .unwrap();
        g
    });
    assert_eq!(&greeting[..8], b"NBDMAGIC");
}

#[test]
fn a_reshape_naming_a_fifo_or_a_device_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(&config(dir.path()), "warn", true, ready);
    let fifo = dir.path().join("fifo.toml");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());

    for (path, what) in [
        (fifo.to_str().unwrap(), "a FIFO, not a regular file"),
        ("/dev/zero", "a character device, not a regular file"),
    ] {
        let req = format!(r#"{{"v":1,"op":"reshape","volume":"r5","config":"{path}"}}"#);
        let reply = control(dir.path(), &req);
        assert_eq!(reply["error"]["code"], "bad-config", "{reply}");
        let message = reply["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(path) && message.contains(what),
            "{message}"
        );
    }
    // Nothing was left waiting: the volume takes changes, clients are served.
    let reply = control(dir.path(), r#"{"v":1,"op":"scrub","volume":"r5"}"#);
    assert_eq!(reply["ok"], true, "{reply}");
    greeted(dir.path());
    d.stop();
}

#[test]
fn idle_control_connections_beyond_the_cap_cannot_take_the_descriptors() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    // Fewer descriptors than the idle connections opened below.
    let mut cmd = Command::new("sh");
    cmd.args(["-c", "ulimit -n 160 && exec \"$0\" \"$@\""])
        .arg(env!("CARGO_BIN_EXE_nbraidd"))
        .arg("--config")
        .arg(&config)
        .args(["--log-level", "warn"]);
    let d = Daemon::spawn(&mut cmd, true, ready);

    let path = dir.path().join("ctl.sock");
    let idle = within(
        Duration::from_secs(20),
        "300 control connections",
        move || {
            (0..300)
                .map(|_| UnixStream::connect(&path).unwrap())
                .collect::<Vec<_>>()
        },
    );
    // The oldest gave its place to a newer one, saying why, and was closed.
    let mut first = String::new();
    let mut r = BufReader::new(idle[0].try_clone().unwrap());
    r.get_ref()
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    r.read_line(&mut first).unwrap();
    let told: serde_json::Value = serde_json::from_str(&first).unwrap();
    assert_eq!(told["error"]["code"], "busy", "{told}");
    // NBD clients are still greeted, and a status answered, while they are all open.
    greeted(dir.path());
    let reply = control(dir.path(), r#"{"v":1,"op":"status"}"#);
    assert_eq!(reply["ok"], true, "{reply}");
    drop(idle);
    let log = d.stop();
    assert!(!log.contains("Too many open files"), "{log}");
}
