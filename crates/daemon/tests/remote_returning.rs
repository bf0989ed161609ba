//! A remote member whose server dies and comes back with the same data (`nbdkit file` on
//! loopback, killed with SIGKILL and restarted on the same file): the volume serves degraded
//! meanwhile; once the server answers, the daemon re-adds the member and resyncs only the
//! regions the write-intent bitmap marks before it is read again (nbdkit's log filter shows
//! every request it got), then every block reads back bit-exact, the two copies are equal
//! byte for byte, and a restart finds the volume healthy.

mod common;
use common::{require, Daemon};

use nbraid_daemon::nbd::client::Client;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;
/// The members' metadata area (superblocks, bitmap, log): the data starts after it.
const META: u64 = MIB;
const VOLUME: u64 = 32 * MIB;

/// `nbdkit file` over `file` on a Unix socket, every request logged to `log`; SIGKILLed on
/// drop.
struct Kit(Child);

impl Kit {
    fn start(sock: &Path, file: &Path, log: &Path) -> Kit {
        require("nbdkit", "nbdkit");
        let _ = std::fs::remove_file(sock);
        let child = Command::new("nbdkit")
            .args(["--foreground", "--exit-with-parent", "--unix"])
            .arg(sock)
            .args(["--filter=log", "file"])
            .arg(file)
            .arg(format!("logfile={}", log.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("start nbdkit");
        let deadline = Instant::now() + Duration::from_secs(20);
        while UnixStream::connect(sock).is_err() {
            assert!(Instant::now() < deadline, "nbdkit did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        Kit(child)
    }
}

impl Drop for Kit {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn status(config: &Path) -> serde_json::Value {
    let mut s = UnixStream::connect(config.with_extension("ctl")).unwrap();
    s.write_all(b"{\"v\": 1, \"op\": \"status\"}\n").unwrap();
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).unwrap();
    let v: serde_json::Value = serde_json::from_str(&line).unwrap();
    v["volumes"][0].clone()
}

fn member_state(v: &serde_json::Value, i: usize) -> String {
    v["members"][i]["state"].as_str().unwrap_or("?").to_string()
}

/// Requests of kind `what` ("Read", "Write", "Zero") in an nbdkit log: (offset, count).
fn logged(log: &Path, what: &str) -> Vec<(u64, u64)> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let hex = |line: &str, key: &str| {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(key))
            .and_then(|h| u64::from_str_radix(h.trim_start_matches("0x"), 16).ok())
    };
    text.lines()
        .filter(|l| l.split_whitespace().any(|w| w == what))
        .filter_map(|l| Some((hex(l, "offset=")?, hex(l, "count=")?)))
        .collect()
}

fn pattern(seed: u64, len: u64) -> Vec<u8> {
    (0..len)
        .map(|i| ((i ^ seed).wrapping_mul(2654435761) >> 13) as u8)
        .collect()
}

async fn write(c: &Client, model: &mut [u8], at: u64, len: u64, seed: u64) {
    let b = pattern(seed ^ at, len);
    model[at as usize..(at + len) as usize].copy_from_slice(&b);
    c.write(at, b.into()).await.expect("write");
}

async fn read_all(c: &Client) -> Vec<u8> {
    let mut out = Vec::with_capacity(VOLUME as usize);
    for at in (0..VOLUME).step_by(MIB as usize) {
        out.extend_from_slice(&c.read(at, MIB as usize).await.expect("read"));
    }
    out
}

fn wait_for(what: &str, limit: Duration, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_remote_member_that_comes_back_is_resynced_before_it_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let (ksock, far) = (dir.path().join("kit.sock"), dir.path().join("far.img"));
    for f in ["local.img", "far.img"] {
        let file = std::fs::File::create(dir.path().join(f)).unwrap();
        file.set_len(VOLUME + META).unwrap();
    }
    let config = dir.path().join("arrays.toml");
    std::fs::write(
        &config,
        format!(
            "[daemon]\nlisten = [\"unix:{}\"]\n\n\
             [[member]]\nid = \"local\"\npath = \"local.img\"\nsize = \"33MiB\"\n\n\
             [[member]]\nid = \"far\"\npath = \"nbd+unix:///?socket={}\"\nsize = \"33MiB\"\n\
             timeout = \"2s\"\n\n\
             [[volume]]\nname = \"m\"\nlevel = \"raid1\"\nmembers = [\"local\", \"far\"]\n\
             bitmap_chunk = \"1MiB\"\nclean_delay = \"200ms\"\n",
            dir.path().join("nbd.sock").display(),
            ksock.display()
        ),
    )
    .unwrap();
    let kit = Kit::start(&ksock, &far, &dir.path().join("kit1.log"));
    let start = || {
        Daemon::start(&config, "warn", false, |l| {
            l.starts_with("nbraidd: control socket")
        })
    };
    let daemon = start();
    let uri = format!(
        "nbd+unix:///m?socket={}",
        dir.path().join("nbd.sock").display()
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    let c = rt.block_on(Client::connect(&uri)).expect("connect");

    // The whole volume written and flushed; then quiet, so the bitmap is clear.
    let mut model = vec![0u8; VOLUME as usize];
    rt.block_on(async {
        for at in (0..VOLUME).step_by(MIB as usize) {
            write(&c, &mut model, at, MIB, 1).await;
        }
        c.flush().await.unwrap();
        tokio::time::sleep(Duration::from_millis(700)).await;
        c.flush().await.unwrap();
    });
    assert_eq!(status(&config)["state"], "healthy");

    // The server dies; writes and a flush go on, degraded.
    drop(kit);
    rt.block_on(async {
        write(&c, &mut model, 5 * MIB + 4096, 4096, 2).await;
        write(&c, &mut model, 20 * MIB, 64 << 10, 3).await;
        write(&c, &mut model, 31 * MIB, MIB, 4).await;
        c.flush().await.expect("flush, degraded");
    });
    let s = status(&config);
    assert_eq!(member_state(&s, 1), "failed", "{s}");
    assert_eq!(s["state"], "degraded", "{s}");
    assert!(rt.block_on(read_all(&c)) == model, "degraded reads");

    // Back with the same data. From here the log shows what the daemon asks it.
    let log2 = dir.path().join("kit2.log");
    let kit = Kit::start(&ksock, &far, &log2);
    wait_for(
        "the member to be current again",
        Duration::from_secs(60),
        || {
            let s = status(&config);
            member_state(&s, 1) == "healthy"
                && s["returning"].as_array().is_some_and(|r| r.is_empty())
        },
    );
    // (a) Nothing but metadata was read from it before it was current (no client read has
    // been served since it came back: these are the daemon's own).
    let reads = logged(&log2, "Read");
    assert!(
        !reads.is_empty(),
        "the log shows no superblock read: {reads:?}"
    );
    assert!(
        reads.iter().all(|&(at, n)| at + n <= META),
        "data was read from the returning member: {reads:?}"
    );
    // Only the regions written while it was away (3 bitmap chunks) were rewritten on it.
    let written: u64 = logged(&log2, "Write")
        .iter()
        .chain(&logged(&log2, "Zero"))
        .filter(|&&(at, _)| at >= META)
        .map(|&(_, n)| n)
        .sum();
    assert!(
        (MIB + 4096..=4 * MIB).contains(&written),
        "{written} bytes of data written to the returning member"
    );
    assert_eq!(status(&config)["state"], "healthy");

    // (b) Every block reads back; both copies hold the same bytes.
    assert!(rt.block_on(read_all(&c)) == model, "reads after the resync");
    rt.block_on(c.disconnect());
    daemon.stop();
    let local = std::fs::read(dir.path().join("local.img")).unwrap();
    let remote = std::fs::read(&far).unwrap();
    assert!(
        local[META as usize..] == remote[META as usize..],
        "the local and remote copies differ"
    );
    assert!(
        local[META as usize..] == model[..],
        "the copies hold other data"
    );

    // (c) A restart finds both members active and the volume healthy.
    let daemon = start();
    let s = status(&config);
    assert_eq!(s["state"], "healthy", "{s}");
    for i in 0..2 {
        assert_eq!(s["members"][i]["at_start"], "active", "{s}");
        assert_eq!(member_state(&s, i), "healthy", "{s}");
    }
    let c = rt.block_on(Client::connect(&uri)).expect("connect");
    assert!(
        rt.block_on(read_all(&c)) == model,
        "reads after the restart"
    );
    rt.block_on(c.disconnect());
    daemon.stop();
    drop(kit);
}
