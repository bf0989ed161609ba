//! Arrays that know themselves, end to end with real processes: README's quickstart starts on
//! a fresh directory with no step before it; a restart assembles by superblock with the
//! members listed in another order; `nbraidd` SIGKILLed while writers and flushes run through
//! NBD restarts dirty, resyncs only the bitmap's regions, and every block written before the
//! last acknowledged flush reads back — also with a member file deleted before the restart
//! (served degraded); members of another array or not blank are refused with the member named;
//! `nbraid create` writes superblocks with `--json`. `nbraidd` is the one built beside
//! `nbraid` (`cargo test --workspace`, as scripts/test runs it).

mod common;

use bytes::Bytes;
use common::daemon_and_members;
use nbraid_nbd::client::Client;
use serde_json::Value;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const BLOCK: u64 = 4 * KIB;
/// RAID 5 over 4 members of 1 MiB metadata + 16 MiB: 48 MiB, full stripes of 192 KiB.
const STRIPE: u64 = 192 * KIB;

fn nbraid(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nbraid"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run nbraid")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A RAID 5 `r5` over d0..d3 listed in `order`, on a Unix socket, with `extra` volume keys;
/// members of 18 MiB: 1 MiB of metadata, 1 MiB of block checksums, a 16 MiB region.
fn raid5_config(dir: &Path, order: [usize; 4], extra: &str) -> PathBuf {
    let mut t = daemon_and_members("d", 4, "18MiB");
    let ids: Vec<String> = order.iter().map(|i| format!("\"d{i}\"")).collect();
    t += &format!(
        "[[volume]]\nname = \"r5\"\nlevel = \"raid5\"\nstrip_size = \"64KiB\"\nmembers = [{}]\n{extra}\n",
        ids.join(", ")
    );
    let file = dir.join("arrays.toml");
    std::fs::write(&file, t).unwrap();
    file
}

struct Daemon {
    child: Child,
    uris: HashMap<String, String>,
    stderr: Arc<Mutex<String>>,
}

impl Drop for Daemon {
    /// A failed test does not leave its daemon running.
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn nbraidd() -> PathBuf {
    let p = Path::new(env!("CARGO_BIN_EXE_nbraid")).with_file_name("nbraidd");
    assert!(
        p.is_file(),
        "{} is not built: run `cargo build --bin nbraidd` (or `cargo test --workspace`)",
        p.display()
    );
    p
}

impl Daemon {
    /// Starts nbraidd on `config` and waits until it serves; `Err(stderr)` if it exits first.
    fn try_start(config: &Path) -> Result<Daemon, String> {
        let mut child = Command::new(nbraidd())
            .arg("--config")
            .arg(config)
            .args(["--log-level", "warn"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start nbraidd");
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut err_pipe = child.stderr.take().unwrap();
        let sink = stderr.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = err_pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut uris = HashMap::new();
        loop {
            match lines.next() {
                Some(Ok(l)) if l.starts_with("nbraidd: control socket ") => break,
                Some(Ok(l)) => {
                    if let Some((name, uri)) = l.trim().split_once(": ") {
                        if uri.starts_with("nbd") {
                            uris.insert(name.to_string(), uri.split("  ").next().unwrap().into());
                        }
                    }
                }
                _ => {
                    let _ = child.wait();
                    std::thread::sleep(Duration::from_millis(100));
                    let e = stderr.lock().unwrap().clone();
                    return Err(e);
                }
            }
        }
        std::thread::spawn(move || for _ in lines.by_ref() {});
        Ok(Daemon {
            child,
            uris,
            stderr,
        })
    }

    fn start(config: &Path) -> Daemon {
        Daemon::try_start(config).unwrap_or_else(|e| panic!("nbraidd did not start: {e}"))
    }

    fn uri(&self, name: &str) -> String {
        self.uris
            .get(name)
            .unwrap_or_else(|| panic!("no URI for {name} in {:?}", self.uris))
            .clone()
    }

    fn stop(&mut self) {
        // SAFETY: kill(2) on our own child's pid has no memory effects.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let status = self.child.wait().unwrap();
        assert!(
            status.success(),
            "nbraidd exited with {status}: {}",
            self.stderr.lock().unwrap()
        );
    }

    fn kill(&mut self) {
        // SAFETY: as above.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

fn status(dir: &Path, config: &Path) -> Value {
    let o = nbraid(
        &["status", "--config", config.to_str().unwrap(), "--json"],
        dir,
    );
    assert!(o.status.success(), "status: {}", text(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Block `b` as version `v` wrote it (version 0: never written, zeroes).
fn block(b: u64, v: u64) -> Vec<u8> {
    if v == 0 {
        return vec![0; BLOCK as usize];
    }
    let mut x = (b << 32 ^ v).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(BLOCK as usize);
    out.extend_from_slice(&b.to_le_bytes());
    out.extend_from_slice(&v.to_le_bytes());
    while out.len() < BLOCK as usize {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(BLOCK as usize);
    out
}

/// What the writers did, per 4 KiB block: every version issued (in order: writers own
/// disjoint slices, so one block never has two writes in flight), how many were acknowledged,
/// and how many the last completed flush covered.
struct History {
    issued: Vec<Vec<u64>>,
    acked: Vec<usize>,
    durable: Vec<usize>,
}

impl History {
    /// Versions block `b` may hold after a crash: the one the last flush covered, or any
    /// issued after it.
    fn candidates(&self, b: usize) -> Vec<u64> {
        let d = self.durable[b];
        let mut c = vec![if d == 0 { 0 } else { self.issued[b][d - 1] }];
        c.extend_from_slice(&self.issued[b][d..]);
        c
    }
}

/// Writes to `uri` from 6 tasks (each its own slice; runs of 4–64 KiB, or whole stripes
/// when `stripes`) with a flush every ~20 ms, until the connection dies.
async fn write_until_killed(uri: String, capacity: u64, stripes: bool) -> History {
    const TASKS: u64 = 6;
    let blocks = (capacity / BLOCK) as usize;
    let hist = Arc::new(Mutex::new(History {
        issued: vec![Vec::new(); blocks],
        acked: vec![0; blocks],
        durable: vec![0; blocks],
    }));
    let client = Client::connect(&uri).await.expect("connect");
    let version = Arc::new(AtomicU64::new(1));
    let dead = Arc::new(AtomicBool::new(false));
    let slice = capacity / TASKS / STRIPE * STRIPE;
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let (client, hist, version, dead) =
            (client.clone(), hist.clone(), version.clone(), dead.clone());
        tasks.push(tokio::spawn(async move {
            let mut rng = t.wrapping_mul(0x2545_F491_4F6C_DD1D) | 1;
            let mut next = move |n: u64| {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                rng % n
            };
            while !dead.load(Ordering::Relaxed) {
                let (offset, len) = if stripes {
                    let n = 1 + next(2);
                    (t * slice + next(slice / STRIPE - n) * STRIPE, n * STRIPE)
                } else {
                    let n = 1 + next(16);
                    (t * slice + next(slice / BLOCK - n) * BLOCK, n * BLOCK)
                };
                let v = version.fetch_add(1, Ordering::Relaxed);
                let first = (offset / BLOCK) as usize;
                let count = (len / BLOCK) as usize;
                let mut data = Vec::with_capacity(len as usize);
                {
                    let mut h = hist.lock().unwrap();
                    for b in first..first + count {
                        h.issued[b].push(v);
                        data.extend_from_slice(&block(b as u64, v));
                    }
                }
                if client.write(offset, Bytes::from(data)).await.is_err() {
                    dead.store(true, Ordering::Relaxed);
                    break;
                }
                let mut h = hist.lock().unwrap();
                for b in first..first + count {
                    h.acked[b] += 1;
                }
            }
        }));
    }
    while !dead.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let covered = hist.lock().unwrap().acked.clone();
        if client.flush().await.is_err() {
            dead.store(true, Ordering::Relaxed);
            break;
        }
        let mut h = hist.lock().unwrap();
        for (d, c) in h.durable.iter_mut().zip(covered) {
            *d = (*d).max(c);
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    Arc::try_unwrap(hist)
        .ok()
        .expect("writers done")
        .into_inner()
        .unwrap()
}

/// Reads the whole volume and checks every block against `hist`: a block no write touched
/// since the last flush holds exactly what the flush covered; others hold one of their
/// candidates (`strict`) or anything (a degraded RAID 5 after a crash may rebuild a stripe in
/// flight from parity that did not match: md's write hole). Returns blocks checked exactly.
async fn verify(uri: &str, hist: &History, strict: bool) -> usize {
    let client = Client::connect(uri).await.expect("connect after restart");
    let piece = 4 * MIB;
    let mut exact = 0;
    let mut at = 0;
    while at < client.size() {
        let bytes = client.read(at, piece as usize).await.expect("read back");
        for (i, got) in bytes.chunks(BLOCK as usize).enumerate() {
            let b = (at / BLOCK) as usize + i;
            let c = hist.candidates(b);
            if c.len() == 1 {
                exact += 1;
            } else if !strict {
                continue;
            }
            assert!(
                c.iter().any(|&v| got == block(b as u64, v)),
                "block {b} (byte {}) holds none of versions {c:?} (first bytes {:?})",
                b as u64 * BLOCK,
                &got[..16]
            );
        }
        at += piece;
    }
    exact
}

/// Starts `r5`, writes under flushes, SIGKILLs nbraidd mid-write, optionally deletes member
/// `lose` before restarting, then checks the data and what the restart did.
fn crash_and_restart(stripes: bool, lose: Option<&str>) {
    let dir = tempfile::tempdir().unwrap();
    let config = raid5_config(
        dir.path(),
        [0, 1, 2, 3],
        // A short clean_delay: regions left alone that long are cleared by the next flush.
        "bitmap_chunk = \"256KiB\"\ncache = \"write-through\"\nclean_delay = \"100ms\"",
    );
    let mut daemon = Daemon::start(&config);
    let uri = daemon.uri("r5");
    let rt = runtime();
    let capacity = 48 * MIB;
    let writer = rt.spawn(write_until_killed(uri.clone(), capacity, stripes));
    std::thread::sleep(Duration::from_millis(1500));
    daemon.kill();
    let hist = rt.block_on(writer).unwrap();
    let flushed: usize = hist.durable.iter().filter(|&&d| d > 0).count();
    let after: usize = (0..hist.issued.len())
        .filter(|&b| hist.issued[b].len() > hist.durable[b])
        .count();
    assert!(flushed > 100, "the writers got {flushed} blocks flushed");
    if let Some(m) = lose {
        std::fs::remove_file(dir.path().join(format!("{m}.img"))).unwrap();
    }
    let started = Instant::now();
    let mut daemon = Daemon::start(&config);
    let s = status(dir.path(), &config);
    let vol = &s["volumes"][0];
    let meta = &vol["metadata"];
    assert_eq!(meta["clean_at_start"], false, "{s}");
    assert_eq!(meta["created_at_start"], false, "{s}");
    // RAID 5 with the log serves at once and resyncs in the background.
    let resynced = meta["resynced_bytes_at_start"].as_u64().unwrap()
        + meta["background_resync_bytes_at_start"].as_u64().unwrap();
    if lose.is_none() {
        // Only the regions written since the last flush: never the whole volume.
        assert!(
            resynced > 0 && resynced < capacity,
            "resynced {resynced}: {s}"
        );
        assert_eq!(vol["state"], "healthy", "{s}");
    } else {
        assert_eq!(vol["state"], "degraded", "{s}");
        let m = vol["members"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["id"] == lose.unwrap())
            .unwrap_or_else(|| panic!("{s}"));
        assert_eq!(m["state"], "missing", "{s}");
        assert!(
            daemon.stderr.lock().unwrap().contains("DEGRADED"),
            "no loud warning: {}",
            daemon.stderr.lock().unwrap()
        );
    }
    let exact = rt.block_on(verify(&daemon.uri("r5"), &hist, lose.is_none()));
    assert!(exact > 0);
    eprintln!(
        "crash test: {flushed} blocks flushed, {after} written after the last flush, {exact} checked exactly, {resynced} bytes resynced at restart ({:?} to start)",
        started.elapsed()
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while status(dir.path(), &config)["volumes"][0]["resync"]["state"] == "running" {
        assert!(Instant::now() < deadline, "the background resync finishes");
        std::thread::sleep(Duration::from_millis(100));
    }
    if lose.is_none() {
        // Copies and parity agree after the resync: a check-only scrub finds nothing.
        let o = nbraid(
            &[
                "scrub",
                "--config",
                config.to_str().unwrap(),
                "r5",
                "--json",
            ],
            dir.path(),
        );
        let out = text(&o);
        assert!(o.status.success(), "{out}");
        let report: Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(report["mismatches"], 0, "{out}");
        assert_eq!(report["state"], "done", "{out}");
    }
    daemon.stop();
    if let Some(m) = lose {
        assert!(
            !dir.path().join(format!("{m}.img")).exists(),
            "a lost member was recreated"
        );
    }
}

#[test]
fn sigkill_under_writes_and_flushes_resyncs_only_dirty_regions_and_keeps_flushed_data() {
    crash_and_restart(false, None);
}

#[test]
fn sigkill_then_a_member_deleted_starts_degraded_with_flushed_data() {
    crash_and_restart(true, Some("d1"));
}

/// README's first command on a fresh directory: the quickstart creates its members and
/// arrays with no step before it; the next start assembles them by superblock, clean.
#[test]
fn quickstart_starts_with_no_step_and_restarts_clean() {
    let dir = tempfile::tempdir().unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/quickstart.toml");
    let text = std::fs::read_to_string(src).unwrap().replace(
        "listen = [\"tcp:127.0.0.1:10809\"]",
        "listen = [\"unix:nbd.sock\"]",
    );
    assert!(
        text.contains("unix:nbd.sock"),
        "the quickstart's listen line moved"
    );
    let config = dir.path().join("quickstart.toml");
    std::fs::write(&config, text).unwrap();
    let mut daemon = Daemon::start(&config);
    let rt = runtime();
    let uri = daemon.uri("r5");
    let size = rt.block_on(async {
        let c = Client::connect(&uri).await.unwrap();
        c.write(0, Bytes::from(block(0, 7))).await.unwrap();
        c.flush().await.unwrap();
        c.size()
    });
    assert_eq!(size, 384 * MIB);
    // What `nbraid check` says each volume offers is what the daemon serves (the superblocks
    // and bitmaps live in the reserved first MiB).
    let o = nbraid(&["check", "quickstart.toml", "--json"], dir.path());
    let check: Value = serde_json::from_slice(&o.stdout).unwrap();
    for v in check["volumes"].as_array().unwrap() {
        let name = v["name"].as_str().unwrap();
        let served =
            rt.block_on(async { Client::connect(&daemon.uri(name)).await.unwrap().size() });
        assert_eq!(v["capacity_bytes"].as_u64(), Some(served), "{name}");
    }
    let s = status(dir.path(), &config);
    for v in s["volumes"].as_array().unwrap() {
        assert_eq!(v["metadata"]["created_at_start"], true, "{s}");
    }
    daemon.stop();
    let mut daemon = Daemon::start(&config);
    let s = status(dir.path(), &config);
    for v in s["volumes"].as_array().unwrap() {
        assert_eq!(v["metadata"]["created_at_start"], false, "{s}");
        assert_eq!(v["metadata"]["clean_at_start"], true, "{s}");
        assert_eq!(v["metadata"]["resynced_bytes_at_start"], 0, "{s}");
    }
    let got = rt.block_on(async {
        let c = Client::connect(&daemon.uri("r5")).await.unwrap();
        c.read(0, BLOCK as usize).await.unwrap()
    });
    assert!(got[..] == block(0, 7)[..]);
    daemon.stop();
}

/// Members listed in another order still take their recorded roles; a changed strip size is
/// refused with both values named.
#[test]
fn restart_assembles_by_superblock_with_members_reordered() {
    let dir = tempfile::tempdir().unwrap();
    let config = raid5_config(dir.path(), [0, 1, 2, 3], "");
    let mut daemon = Daemon::start(&config);
    let rt = runtime();
    let uri = daemon.uri("r5");
    let blocks = 3 * MIB / BLOCK;
    rt.block_on(async {
        let c = Client::connect(&uri).await.unwrap();
        let data: Vec<u8> = (0..blocks).flat_map(|b| block(b, 1)).collect();
        c.write(5 * MIB, Bytes::from(data)).await.unwrap();
        c.flush().await.unwrap();
    });
    daemon.stop();

    let config = raid5_config(dir.path(), [2, 0, 3, 1], "");
    let mut daemon = Daemon::start(&config);
    let got = rt.block_on(async {
        let c = Client::connect(&daemon.uri("r5")).await.unwrap();
        c.read(5 * MIB, (blocks * BLOCK) as usize).await.unwrap()
    });
    for (b, chunk) in got.chunks(BLOCK as usize).enumerate() {
        assert!(
            chunk == block(b as u64, 1),
            "block {b} differs after reordering"
        );
    }
    let s = status(dir.path(), &config);
    let ids: Vec<&str> = s["volumes"][0]["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["d0", "d1", "d2", "d3"], "roles as recorded: {s}");
    daemon.stop();

    let config = raid5_config(dir.path(), [0, 1, 2, 3], "");
    let t = std::fs::read_to_string(&config)
        .unwrap()
        .replace("64KiB", "128KiB");
    std::fs::write(&config, t).unwrap();
    let e = Daemon::try_start(&config)
        .err()
        .expect("a changed strip size started");
    assert!(
        e.contains("strip size") && e.contains("65536") && e.contains("131072"),
        "{e}"
    );
}

/// A member of another array, or with bytes where the superblock goes, is refused with the
/// member named, never overwritten; `create = "never"` waits for `nbraid create`, whose JSON
/// says what it did.
#[test]
fn foreign_and_non_blank_members_are_refused_and_create_writes_superblocks() {
    let other = tempfile::tempdir().unwrap();
    let other_config = raid5_config(other.path(), [0, 1, 2, 3], "");
    let t = std::fs::read_to_string(&other_config)
        .unwrap()
        .replace("name = \"r5\"", "name = \"other\"");
    std::fs::write(&other_config, t).unwrap();
    let o = nbraid(
        &["create", "--config", "arrays.toml", "--json"],
        other.path(),
    );
    assert!(o.status.success(), "{}", text(&o));
    let created: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(created["volumes"][0]["state"], "created", "{created}");
    assert_eq!(created["volumes"][0]["assume_clean"], true, "{created}");
    assert_eq!(created["files_created"].as_array().unwrap().len(), 4);
    let other_id = created["volumes"][0]["array"].as_str().unwrap().to_string();

    // A fresh config whose d2 is the other array's member.
    let dir = tempfile::tempdir().unwrap();
    let config = raid5_config(dir.path(), [0, 1, 2, 3], "create = \"never\"");
    std::fs::copy(other.path().join("d2.img"), dir.path().join("d2.img")).unwrap();
    let e = Daemon::try_start(&config)
        .err()
        .expect("started on a foreign member");
    assert!(
        e.contains("member d2 (d2.img) belongs to another array")
            && e.contains(&format!("volume `other` of array {other_id}")),
        "{e}"
    );
    let o = nbraid(&["create", "arrays.toml"], dir.path());
    assert!(!o.status.success(), "create overwrote a foreign member");
    assert!(
        text(&o).contains("belongs to another array"),
        "{}",
        text(&o)
    );

    // Bytes where the superblock goes (a file system, say): refused too.
    let mut junk = vec![0u8; 18 << 20];
    junk[1024..1030].copy_from_slice(b"\x53\xef\x01\x00ab");
    std::fs::write(dir.path().join("d2.img"), &junk).unwrap();
    let e = Daemon::try_start(&config)
        .err()
        .expect("started on a non-blank member");
    assert!(
        e.contains("member d2 (d2.img) has no nbraid superblock but is not blank"),
        "{e}"
    );

    // Blank members and create = "never": refused until `nbraid create`.
    for i in 0..4 {
        std::fs::write(dir.path().join(format!("d{i}.img")), vec![0u8; 18 << 20]).unwrap();
    }
    let e = Daemon::try_start(&config)
        .err()
        .expect("started without superblocks");
    assert!(
        e.contains("nbraid create") && e.contains("--volume r5"),
        "{e}"
    );
    let o = nbraid(
        &[
            "create",
            "--config",
            "arrays.toml",
            "--volume",
            "r5",
            "--json",
        ],
        dir.path(),
    );
    assert!(o.status.success(), "{}", text(&o));
    let created: Value = serde_json::from_slice(&o.stdout).unwrap();
    // The members existed (zeroes, but not made by this command): synced, not trusted.
    assert_eq!(created["volumes"][0]["assume_clean"], false, "{created}");
    assert_eq!(created["volumes"][0]["synced_bytes"], 48 * MIB, "{created}");
    let mut daemon = Daemon::start(&config);
    let s = status(dir.path(), &config);
    assert_eq!(
        s["volumes"][0]["metadata"]["created_at_start"], false,
        "{s}"
    );
    daemon.stop();
    let o = nbraid(&["create", "arrays.toml"], dir.path());
    assert!(
        text(&o).contains("volume r5: exists (array"),
        "{}",
        text(&o)
    );

    // Same volume name, another array: assembly names both arrays.
    let third = tempfile::tempdir().unwrap();
    let third_config = raid5_config(third.path(), [0, 1, 2, 3], "");
    let o = nbraid(
        &["create", third_config.to_str().unwrap(), "--json"],
        third.path(),
    );
    assert!(o.status.success(), "{}", text(&o));
    let created: Value = serde_json::from_slice(&o.stdout).unwrap();
    let third_id = created["volumes"][0]["array"].as_str().unwrap().to_string();
    std::fs::copy(third.path().join("d3.img"), dir.path().join("d3.img")).unwrap();
    let e = Daemon::try_start(&config)
        .err()
        .expect("started with another r5's member");
    assert!(
        e.contains("its members hold records of different arrays")
            && e.contains("3 = d3 (d3.img)")
            && e.contains(&format!("array {third_id} on member d3 ")),
        "{e}"
    );
}

/// `clean_delay`: a volume left without writes is recorded clean, so a SIGKILL while idle
/// needs no resync at the next start; one killed right after a write is dirty.
#[test]
fn an_idle_volume_is_recorded_clean_before_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let config = raid5_config(dir.path(), [0, 1, 2, 3], "clean_delay = \"200ms\"");
    let rt = runtime();
    for idle in [true, false] {
        let mut daemon = Daemon::start(&config);
        let uri = daemon.uri("r5");
        rt.block_on(async {
            let c = Client::connect(&uri).await.unwrap();
            c.write(MIB, Bytes::from(block(256, 3))).await.unwrap();
            c.flush().await.unwrap();
        });
        if idle {
            std::thread::sleep(Duration::from_millis(1500));
            let s = status(dir.path(), &config);
            assert_eq!(s["volumes"][0]["metadata"]["dirty"], false, "{s}");
        }
        // Not idle: killed at once, well inside the 200 ms.
        daemon.kill();
        let mut daemon = Daemon::start(&config);
        let s = status(dir.path(), &config);
        assert_eq!(s["volumes"][0]["metadata"]["clean_at_start"], idle, "{s}");
        daemon.stop();
    }
}
