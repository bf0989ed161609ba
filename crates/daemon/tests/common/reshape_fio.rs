//! A reshape of volume `v` under fio's writes, driven through the daemon's control socket:
//! the member files a move needs, the volume's status polled, fio SIGKILLing the daemon on a
//! trigger, members failed and added back, a scrub that must find nothing
//! (`fio_reshape_crash.rs`, `fio_reshape_degraded.rs`).

use super::fio_verify::{logged_job, write_config, Files, Geometry, Load, STREAM};
use super::Daemon;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

/// Bytes of a strip's text ("64KiB").
pub fn strip_bytes(strip: &str) -> u64 {
    nbraid_config::parse_size(strip).unwrap()
}

/// The larger strip of the two shapes, in bytes.
fn strip_max_bytes(old: &Geometry, new: &Geometry) -> u64 {
    strip_bytes(old.strip).max(strip_bytes(new.strip))
}

/// Each old member's region MiB: at least 12, and four strips of the larger shape (a
/// region cut to whole strips of the new shape must not hold less than the old one).
pub fn region_mib(old: &Geometry, new: &Geometry) -> u64 {
    (4 * strip_max_bytes(old, new).div_ceil(1 << 20)).max(12)
}

/// The member files of a move from `old` to `new`: the old members with their region and
/// 2 MiB for metadata and checksums; the added ones larger by every member's backup of three
/// strips and 1 MiB (a big strip's backups go to a pool after the added member's region).
pub fn files_mib(old: &Geometry, new: &Geometry) -> Vec<u64> {
    let base = region_mib(old, new) + 2;
    let members = old.members.max(new.members) as u64;
    let pool_mib = (members * 3 * strip_max_bytes(old, new)).div_ceil(1 << 20) + 1;
    (0..members as usize)
        .map(|i| match i < old.members {
            true => base,
            false => base + pool_mib,
        })
        .collect()
}

/// The reshape's rate while it is to be watched or killed: its pass about four seconds long.
pub fn slow_rate(old: &Geometry, new: &Geometry) -> String {
    let old_capacity_mib = region_mib(old, new) * old.data_members as u64;
    format!(
        "rebuild_rate = \"{}MiB\"\n",
        old_capacity_mib.div_ceil(4).max(2)
    )
}

/// `arrays.toml` in `dir` for the move `old` → `new`: every member file either needs,
/// volume `v` declared as `shape`, with `volume_extra` lines.
pub fn move_config(
    dir: &Path,
    (old, new): (&Geometry, &Geometry),
    shape: &Geometry,
    volume_extra: &str,
) -> PathBuf {
    let mib = files_mib(old, new);
    write_config(dir, shape, &Files { mib: &mib }, false, volume_extra)
}

/// One request line to the daemon's control socket in `dir`; its reply (within 30 s).
pub fn control(dir: &Path, request: Value) -> Value {
    let mut s = UnixStream::connect(dir.join("ctl.sock")).expect("the control socket");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut line = request.to_string();
    line.push('\n');
    s.write_all(line.as_bytes()).unwrap();
    let mut reply = String::new();
    BufReader::new(s).read_line(&mut reply).unwrap();
    serde_json::from_str(&reply).unwrap_or_else(|e| panic!("reply {reply:?} to {line}: {e}"))
}

/// Volume `v`'s status.
pub fn status(dir: &Path) -> Value {
    let reply = control(dir, json!({"v": 1, "op": "status", "volume": "v"}));
    assert_eq!(reply["ok"], true, "status: {reply}");
    reply["volumes"][0].clone()
}

/// Polls `v`'s status (every 20 ms, at most `limit`) until `done` holds; that status.
pub fn wait_for(dir: &Path, what: &str, limit: Duration, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + limit;
    loop {
        let v = status(dir);
        if done(&v) {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not within {limit:?}: {v:#}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The share of its pass the reshape has walked (0 before it shows).
pub fn reshape_share(v: &Value) -> f64 {
    let r = &v["reshape"];
    let at = r["position_bytes"].as_u64().unwrap_or(0) as f64;
    at / r["total_bytes"].as_u64().unwrap_or(u64::MAX).max(1) as f64
}

pub fn reshape_done(v: &Value) -> bool {
    v["reshape"]["state"] == "done"
}

/// Asks the daemon in `dir` to reshape `v` into the shape `config` declares (what
/// `nbraid apply --yes` sends); the reply.
pub fn ask_reshape(dir: &Path, config: &Path) -> Value {
    control(
        dir,
        json!({"v": 1, "op": "reshape", "volume": "v", "config": config.to_str().unwrap()}),
    )
}

/// A sequential stream of 32 KiB writes, 8 in flight: paced to outlast the reshape without
/// wrapping around (one pass: no block rewritten, none caught torn), yet enough writes.
pub const STREAM_32K: Load = Load {
    bs: 32 << 10,
    ..STREAM
};

/// fio's load for `g` (of `base`): blocks of the volume's block size; on a write-back cache
/// one at a time, each flushed.
pub fn load_for(g: &Geometry, base: Load) -> Load {
    let write_back = g.cache == "write-back";
    Load {
        bs: match base.rw {
            "randwrite" => g.block_size as usize,
            _ => base.bs,
        },
        iodepth: if write_back { 1 } else { base.iodepth },
        flush_each: write_back,
        ..base
    }
}

/// fio writing; SIGKILLed if the test fails before its trigger ends it (with the daemon gone
/// it would spin on for ever).
pub struct Writer(Option<std::process::Child>);

/// When fio's trigger SIGKILLs the daemon.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KillWhen {
    /// At once, its writes in flight.
    InFlight,
    /// A second after fio stopped writing: every write it sent answered, none torn by the
    /// kill (the records still dirty: the volume is recorded clean only seconds later).
    Settled,
    /// Not killed: stopped (SIGTERM) a second after fio stopped writing, a clean stop.
    Stopped,
}

/// fio writing `load` over the `capacity_bytes` of volume `v` served by `daemon` in `dir`
/// until the daemon dies under it: random blocks over the whole volume, or one sequential
/// pass paced to outlast a reshape. It SIGKILLs the daemon itself once the test creates
/// `kill-now` ([`kill_now`], within about 20 ms), as `when` says (an external kill left fio
/// spinning on the dead connection); a write whose connection died is not logged as
/// completed.
pub fn writer(
    fio: &Path,
    dir: &Path,
    load: &Load,
    (capacity_bytes, when): (u64, KillWhen),
    daemon: &Daemon,
) -> Writer {
    let (pause, signal) = match when {
        KillWhen::InFlight => ("", "KILL"),
        KillWhen::Settled => ("sleep 1; ", "KILL"),
        KillWhen::Stopped => ("sleep 1; ", "TERM"),
    };
    let mut job = logged_job(fio, dir, load);
    job.args(["--time_based", "--runtime=120"])
        .arg(format!("--size={capacity_bytes}"))
        .arg(format!("--trigger-file={}", dir.join("kill-now").display()))
        .arg(format!(
            "--trigger={pause}kill -{signal} {}",
            daemon.child.id()
        ));
    if load.rw == "write" {
        job.arg(format!("--rate={}", capacity_bytes / 30));
    }
    Writer(Some(
        job.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start fio"),
    ))
}

/// Creates the trigger on which [`writer`]'s fio SIGKILLs (or stops) the daemon.
pub fn kill_now(dir: &Path) {
    std::fs::write(dir.join("kill-now"), b"").unwrap();
}

impl Drop for Writer {
    fn drop(&mut self) {
        if let Some(mut fio) = self.0.take() {
            let _ = fio.kill();
            let _ = fio.wait();
        }
    }
}

/// Waits for fio's trigger to SIGKILL (or stop) `daemon` and for fio (`writer`) to end (each within
/// 30 s); what fio printed.
pub fn killed(daemon: &mut Daemon, mut writer: Writer) -> String {
    let within = |child: &mut std::process::Child, what: &str| {
        let deadline = Instant::now() + Duration::from_secs(30);
        while child.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("{what} did not end within 30 s of the trigger");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    within(&mut daemon.child, "nbraidd (ended by fio's trigger)");
    let mut fio = writer.0.take().unwrap();
    within(&mut fio, "fio");
    let out = fio.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

/// nbraidd on `config` with `--force-assemble v`, once its control socket listens.
pub fn start_forced(config: &Path) -> Daemon {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_nbraidd"));
    cmd.arg("--config")
        .arg(config)
        .args(["--log-level", "warn", "--force-assemble", "v"]);
    Daemon::spawn(&mut cmd, false, |l| {
        l.starts_with("nbraidd: control socket")
    })
}

/// The bytes of the member files `d0.img` ... `d{count - 1}.img` in `dir` that exist.
pub fn member_files(dir: &Path, count: usize) -> Vec<Vec<u8>> {
    (0..count)
        .map(|i| dir.join(format!("d{i}.img")))
        .filter(|p| p.exists())
        .map(|p| std::fs::read(p).unwrap())
        .collect()
}

/// nbraidd on `config` in `dir`: `Ok(status)` of volume `v` if it came up (then stopped),
/// else `Err(what it printed)`.
pub fn start_or_refusal(dir: &Path, config: &Path) -> Result<Value, String> {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_nbraidd"))
        .arg("--config")
        .arg(config)
        .args(["--log-level", "warn"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start nbraidd");
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let serving =
        (stdout.lines().map_while(Result::ok)).any(|l| l.starts_with("nbraidd: control socket"));
    let v = serving.then(|| status(dir));
    if serving {
        // SAFETY: kill(2) on our own child's pid has no memory effects.
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    }
    let out = child.wait_with_output().unwrap();
    v.ok_or_else(|| String::from_utf8_lossy(&out.stderr).into_owned())
}

/// `members` failed through the control socket (`nbraid fail`).
pub fn fail_members(dir: &Path, members: &[&str], context: &str) {
    for m in members {
        let reply = control(
            dir,
            json!({"v": 1, "op": "fail", "volume": "v", "member": m}),
        );
        assert_eq!(reply["ok"], true, "{context}: fail {m}: {reply}");
    }
}

/// A scrub of the whole volume: it ends finding no mismatch and nothing unreadable.
pub fn scrub_finds_nothing(dir: &Path, context: &str) {
    let reply = control(dir, json!({"v": 1, "op": "scrub", "volume": "v"}));
    assert_eq!(reply["ok"], true, "{context}: scrub: {reply}");
    let v = wait_for(dir, "the scrub's end", Duration::from_secs(300), |v| {
        matches!(v["scrub"]["state"].as_str(), Some("done" | "failed"))
    });
    let s = &v["scrub"];
    assert_eq!(s["state"], "done", "{context}: scrub: {s:#}");
    assert_eq!(
        (s["mismatches"].as_u64(), s["unreadable"].as_u64()),
        (Some(0), Some(0)),
        "{context}: the scrub after the reshape: {s:#}"
    );
}

/// Runs each of `cells` whose `Debug` text holds `NBRAID_FIO_RESHAPE_ONLY` (every one when
/// unset) through `run`, each on its own (a panic fails that cell, the others still run),
/// printing each cell's time under `name`; then fails naming every cell that panicked or
/// whose move `run` says was refused at the start (`Err`).
pub fn run_cells<C: std::fmt::Debug>(
    name: &str,
    cells: Vec<C>,
    run: impl Fn(&C) -> Result<(), String>,
) {
    let only = std::env::var("NBRAID_FIO_RESHAPE_ONLY").unwrap_or_default();
    let (mut failed, mut refused) = (Vec::new(), Vec::new());
    let began = Instant::now();
    for cell in cells {
        if !format!("{cell:?}").contains(&only) {
            continue;
        }
        eprintln!("{name}: {cell:?}");
        let at = Instant::now();
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(&cell))) {
            Ok(Ok(())) => eprintln!("{name}: passed in {:?}", at.elapsed()),
            Ok(Err(why)) => refused.push(format!("{cell:?}: {why}")),
            Err(_) => failed.push(format!("{cell:?}")),
        }
    }
    eprintln!(
        "{name}: {:?} in all; refused at the start: {}",
        began.elapsed(),
        refused.len()
    );
    for r in &refused {
        eprintln!("  refused: {r}");
    }
    assert!(failed.is_empty(), "failed cells:\n{}", failed.join("\n"));
    assert!(refused.is_empty(), "moves refused:\n{}", refused.join("\n"));
}
