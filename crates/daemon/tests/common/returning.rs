//! For tests of remote members that leave and come back: `nbdkit file` with its log filter
//! on a Unix socket, the control socket's status, nbdkit's request log, a model of the volume.

use super::{Daemon, Nbdkit};
use nbraid_daemon::nbd::client::Client;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

pub const MIB: u64 = 1 << 20;
/// The members' metadata area (superblocks, bitmap, log): the data starts after it.
pub const META: u64 = MIB;
pub const VOLUME: u64 = 32 * MIB;

/// `nbdkit file` over `file` on a Unix socket, every request logged to `log`; SIGKILLed on
/// drop.
pub struct Kit(pub Nbdkit);

impl Kit {
    pub fn start(sock: &Path, file: &Path, log: &Path) -> Kit {
        Kit(Nbdkit::start(
            sock,
            [
                "--filter=log".into(),
                "file".into(),
                file.as_os_str().to_owned(),
                format!("logfile={}", log.display()).into(),
            ] as [std::ffi::OsString; 4],
        ))
    }
}

pub fn status(config: &Path) -> serde_json::Value {
    control(config, "{\"v\": 1, \"op\": \"status\"}")["volumes"][0].clone()
}

/// One request on the daemon's control socket and its reply.
pub fn control(config: &Path, request: &str) -> serde_json::Value {
    let mut s = UnixStream::connect(config.with_extension("ctl")).unwrap();
    s.write_all(format!("{request}\n").as_bytes()).unwrap();
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).unwrap();
    serde_json::from_str(&line).unwrap()
}

pub fn member_state(v: &serde_json::Value, i: usize) -> String {
    v["members"][i]["state"].as_str().unwrap_or("?").to_string()
}

/// Requests of kind `what` ("Read", "Write", "Zero") in an nbdkit log: (offset, count).
pub fn logged(log: &Path, what: &str) -> Vec<(u64, u64)> {
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

pub fn pattern(seed: u64, len: u64) -> Vec<u8> {
    (0..len)
        .map(|i| ((i ^ seed).wrapping_mul(2654435761) >> 13) as u8)
        .collect()
}

pub async fn write(c: &Client, model: &mut [u8], at: u64, len: u64, seed: u64) {
    let b = pattern(seed ^ at, len);
    model[at as usize..(at + len) as usize].copy_from_slice(&b);
    c.write(at, b.into()).await.expect("write");
}

pub async fn read_all(c: &Client) -> Vec<u8> {
    let mut out = Vec::with_capacity(VOLUME as usize);
    for at in (0..VOLUME).step_by(MIB as usize) {
        out.extend_from_slice(&c.read(at, MIB as usize).await.expect("read"));
    }
    out
}

/// The whole volume written with pattern 1 (`model` follows) and flushed.
pub async fn fill(c: &Client, model: &mut [u8]) {
    for at in (0..VOLUME).step_by(MIB as usize) {
        write(c, model, at, MIB, 1).await;
    }
    c.flush().await.unwrap();
}

pub fn wait_for(what: &str, limit: Duration, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A RAID 1 of `local.img` and the export on `kit.sock` (timeout 2 s, 1 MiB bitmap chunks,
/// clean after 200 ms), both files created at the volume's size, in `dir`; returns the
/// config's path.
pub fn raid1_config(dir: &Path) -> std::path::PathBuf {
    for f in ["local.img", "far.img"] {
        let file = std::fs::File::create(dir.join(f)).unwrap();
        file.set_len(VOLUME + META).unwrap();
    }
    let config = dir.join("arrays.toml");
    std::fs::write(
        &config,
        format!(
            "[daemon]\nlisten = [\"unix:{}\"]\n\n\
             [[member]]\nid = \"local\"\npath = \"local.img\"\nsize = \"33MiB\"\n\n\
             [[member]]\nid = \"far\"\npath = \"nbd+unix:///?socket={}\"\nsize = \"33MiB\"\n\
             timeout = \"2s\"\n\n\
             [[volume]]\nname = \"m\"\nchecksums = \"off\"\nlevel = \"raid1\"\nmembers = [\"local\", \"far\"]\n\
             bitmap_chunk = \"1MiB\"\nclean_delay = \"200ms\"\n",
            dir.join("nbd.sock").display(),
            dir.join("kit.sock").display()
        ),
    )
    .unwrap();
    config
}

/// nbraidd on `config`, ready once it printed its control socket.
pub fn start_daemon(config: &Path, capture_stderr: bool) -> Daemon {
    Daemon::start(config, "warn", capture_stderr, |l| {
        l.starts_with("nbraidd: control socket")
    })
}

/// The volume's NBD URI for a config of [`raid1_config`].
pub fn volume_uri(dir: &Path) -> String {
    format!("nbd+unix:///m?socket={}", dir.join("nbd.sock").display())
}

/// Bytes of data (past the metadata area) nbdkit's log shows written or zeroed.
pub fn data_written(log: &Path) -> u64 {
    logged(log, "Write")
        .iter()
        .chain(&logged(log, "Zero"))
        .filter(|&&(at, _)| at >= META)
        .map(|&(_, n)| n)
        .sum()
}

/// Whether nbdkit's log shows reads of nothing but the metadata area, and at least one.
pub fn only_metadata_read(log: &Path) -> Result<(), String> {
    let reads = logged(log, "Read");
    if reads.is_empty() {
        return Err("the log shows no superblock read".into());
    }
    if reads.iter().any(|&(at, n)| at + n > META) {
        return Err(format!(
            "data was read from the returning member: {reads:?}"
        ));
    }
    Ok(())
}

/// Waits until member `i` of the volume is current again and nothing is returning.
/// Restarts the export of member 1 (`far` on `sock`, logged to `log`), waits until the
/// daemon has it current again, and checks what it asked the server meanwhile: nothing but
/// metadata was read from it, and only the three 1 MiB bitmap chunks written while it was away
/// were rewritten (between 1 MiB + 4 KiB and 4 MiB of data). The volume is healthy after.
pub fn returns_resynced_over_the_bitmap(config: &Path, sock: &Path, far: &Path, log: &Path) -> Kit {
    let kit = Kit::start(sock, far, log);
    wait_current(config, 1);
    // No client read has been served since it came back: the reads are the daemon's own.
    only_metadata_read(log).unwrap();
    let written = data_written(log);
    assert!(
        (MIB + 4096..=4 * MIB).contains(&written),
        "{written} bytes of data written to the returning member"
    );
    assert_eq!(status(config)["state"], "healthy");
    kit
}

pub fn wait_current(config: &Path, i: usize) {
    wait_for(
        "the member to be current again",
        Duration::from_secs(60),
        || {
            let s = status(config);
            member_state(&s, i) == "healthy"
                && s["returning"].as_array().is_some_and(|r| r.is_empty())
        },
    );
}

/// The local file and the export's file hold the same bytes past the metadata area, and
/// they are `model`'s.
pub fn copies_hold(dir: &Path, model: &[u8]) {
    let local = std::fs::read(dir.join("local.img")).unwrap();
    let remote = std::fs::read(dir.join("far.img")).unwrap();
    assert!(
        local[META as usize..] == remote[META as usize..],
        "the local and remote copies differ"
    );
    assert!(
        local[META as usize..] == model[..],
        "the copies hold other data"
    );
}

/// After a restart: both members active and healthy, every block `model`'s.
pub fn healthy_after_restart(config: &Path, rt: &tokio::runtime::Runtime, uri: &str, model: &[u8]) {
    let daemon = start_daemon(config, false);
    let s = status(config);
    assert_eq!(s["state"], "healthy", "{s}");
    for i in 0..2 {
        assert_eq!(s["members"][i]["at_start"], "active", "{s}");
        assert_eq!(member_state(&s, i), "healthy", "{s}");
    }
    let c = rt.block_on(Client::connect(uri)).expect("connect");
    assert!(
        rt.block_on(read_all(&c)) == model,
        "reads after the restart"
    );
    rt.block_on(c.disconnect());
    daemon.stop();
}
