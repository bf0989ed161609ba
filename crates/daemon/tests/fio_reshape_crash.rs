//! The real daemon SIGKILLed mid-reshape under fio's writes: a volume serving fio is asked
//! to reshape online (the control socket's `reshape`, what `nbraid apply --yes` sends), the
//! daemon is killed right after the reshape starts, while it copies, or near its end;
//! restarted with the new config (some cells first with the old config, which is refused
//! naming what the records hold, or with a member's file away, which is refused as a dirty
//! start mid-reshape with a role out, nothing written), it finishes the reshape, and every
//! write fio saw
//! completed reads back (fio's own CRCs, `common/fio_verify.rs`); a scrub then finds parity
//! consistent (0 mismatches), and with as many members failed as the new shape tolerates
//! every write still reads back — from parity the crash may have torn mid-update, which the
//! restart's resync of the bitmap's regions must have made whole (the write hole mid-reshape).
//!
//! Moves: RAID 5 4 → 5 members, RAID 5 → RAID 6, RAID 6 6 → 7, strip changes (64 KiB →
//! 256 KiB, → 4 KiB, → 1 MiB, → 16 MiB, 256 KiB → 64 KiB, with a member added and without),
//! RAID 50 growing by a span; 512-byte and 4 KiB blocks, checksums on and off, write-through
//! and write-back (each write flushed). By default three cells; `NBRAID_SOAK=1` runs the
//! whole sweep, `NBRAID_FIO_RESHAPE_ONLY=text` the cells whose description holds the text.

mod common;
use common::fio_verify::{
    acked_writes, geometry, logged_job, one_pass, read_back_problems, start, write_config, Files,
    Geometry, Load, RANDOM, STREAM,
};
use common::require;

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

/// When the daemon is killed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum KillAt {
    /// As soon as the `reshape` request is answered: the records that start it written.
    Started,
    /// Once the copy has walked a third of its pass.
    Copying,
    /// Once it has walked 85% of its pass (the copy's end, or the new space being zeroed).
    NearEnd,
    /// Once the pass is done, while the volume is opened again in its new shape alone (or
    /// just after, when that is over before a poll sees it).
    Finishing,
}

/// How the daemon comes back after the kill.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Restart {
    /// With the new config.
    New,
    /// With the old config first (the records say a reshape into the new shape runs: the
    /// start must not serve the old shape over moved data), then with the new one.
    OldFirst,
    /// With the new config but a member's file moved away first: a dirty start mid-reshape
    /// with a role out is refused, nothing written (the rows the kill tore would be rebuilt
    /// from parity); then with the file back.
    MemberAwayFirst,
}

/// What is lost after the restart: the members the new shape tolerates losing, failed
/// (`fail` on the control socket) while the reshape still copies, or after it ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lose {
    WhileCopying,
    AfterTheEnd,
}

/// One run: `old` reshaped into `new` under `load`, killed at `kill`, restarted as
/// `restart`; then `lose` members failed `when`.
#[derive(Clone, Copy, Debug)]
struct Cell {
    old: Geometry,
    new: Geometry,
    load: Load,
    kill: KillAt,
    restart: Restart,
    lose: &'static [&'static str],
    when: Lose,
}

/// MiB of a strip's text ("64KiB": 1/16).
fn strip_bytes(strip: &str) -> u64 {
    nbraid_config::parse_size(strip).unwrap()
}

/// The larger strip of the two shapes, in bytes.
fn strip_max_bytes(cell: &Cell) -> u64 {
    strip_bytes(cell.old.strip).max(strip_bytes(cell.new.strip))
}

/// Each old member's region MiB: at least 12, and four strips of the larger shape (a
/// region cut to whole strips of the new shape must not hold less than the old one).
fn region_mib(cell: &Cell) -> u64 {
    (4 * strip_max_bytes(cell).div_ceil(1 << 20)).max(12)
}

/// The member files: the old members with their region and 2 MiB for metadata and checksums;
/// the added ones larger by every member's backup of three strips and 1 MiB (a big strip's
/// backups go to a pool after the added member's region).
fn files_mib(cell: &Cell) -> Vec<u64> {
    let base = region_mib(cell) + 2;
    let members = cell.old.members.max(cell.new.members) as u64;
    let pool_mib = (members * 3 * strip_max_bytes(cell)).div_ceil(1 << 20) + 1;
    (0..members as usize)
        .map(|i| match i < cell.old.members {
            true => base,
            false => base + pool_mib,
        })
        .collect()
}

/// The reshape's rate while it is to be killed: its pass about four seconds long.
fn slow_rate(cell: &Cell) -> String {
    let old_capacity_mib = region_mib(cell) * cell.old.data_members as u64;
    format!(
        "rebuild_rate = \"{}MiB\"\n",
        old_capacity_mib.div_ceil(4).max(2)
    )
}

fn cell_config(dir: &Path, cell: &Cell, geometry: &Geometry, volume_extra: &str) -> PathBuf {
    let mib = files_mib(cell);
    write_config(dir, geometry, &Files { mib: &mib }, false, volume_extra)
}

/// One request line to the daemon's control socket in `dir`; its reply (within 30 s).
fn control(dir: &Path, request: Value) -> Value {
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
fn status(dir: &Path) -> Value {
    let reply = control(dir, json!({"v": 1, "op": "status", "volume": "v"}));
    assert_eq!(reply["ok"], true, "status: {reply}");
    reply["volumes"][0].clone()
}

/// Polls `v`'s status (every 20 ms, at most `limit`) until `done` holds; that status.
fn wait_for(dir: &Path, what: &str, limit: Duration, done: impl Fn(&Value) -> bool) -> Value {
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
fn reshape_share(v: &Value) -> f64 {
    let r = &v["reshape"];
    let at = r["position_bytes"].as_u64().unwrap_or(0) as f64;
    at / r["total_bytes"].as_u64().unwrap_or(u64::MAX).max(1) as f64
}

fn reshape_done(v: &Value) -> bool {
    v["reshape"]["state"] == "done"
}

/// A sequential stream of 32 KiB writes, 8 in flight: paced to outlast the reshape without
/// wrapping around (one pass: no block rewritten, none caught torn), yet enough writes.
const STREAM_32K: Load = Load {
    bs: 32 << 10,
    ..STREAM
};

/// fio's load for `g` (of `base`): blocks of the volume's block size; on a write-back cache
/// one at a time, each flushed.
fn load_for(g: &Geometry, base: Load) -> Load {
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

/// Runs `cell`; `Err`: the move was refused at its start (the reason), so nothing to check.
fn kill_mid_reshape_and_verify(cell: &Cell) -> Result<(), String> {
    let fio = require("fio", "fio");
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let slow = slow_rate(cell);
    let config = cell_config(dir, cell, &cell.old, &slow);
    let mut daemon = start(&config);
    let old_capacity = status(dir)["capacity_bytes"].as_u64().unwrap();

    // fio writes until the daemon dies under it: random blocks over the whole volume, or one
    // sequential pass paced to outlast the reshape. It SIGKILLs the daemon itself once the
    // test creates `kill-now` (within about 20 ms), its writes in flight (an external kill
    // left fio spinning on the dead connection); a write whose connection died is not logged
    // as completed.
    let mut job = logged_job(&fio, dir, &cell.load);
    job.args(["--time_based", "--runtime=120"])
        .arg(format!("--size={old_capacity}"))
        .arg(format!("--trigger-file={}", dir.join("kill-now").display()))
        .arg(format!("--trigger=kill -9 {}", daemon.child.id()));
    if cell.load.rw == "write" {
        job.arg(format!("--rate={}", old_capacity / 30));
    }
    let writer = Writer(Some(
        job.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start fio"),
    ));
    // Writes before the reshape as well as during it (fio takes a while to start on a busy
    // machine: a fixed pause saw none completed).
    wait_for(dir, "fio's first writes", Duration::from_secs(60), |v| {
        v["io"]["writes"].as_u64().unwrap_or(0) >= 150
    });

    let new_config = cell_config(dir, cell, &cell.new, &slow);
    let reply = control(
        dir,
        json!({"v": 1, "op": "reshape", "volume": "v", "config": new_config.to_str().unwrap()}),
    );
    if reply["ok"] != true || reply["started"] == false {
        std::fs::write(dir.join("kill-now"), b"").unwrap();
        killed(&mut daemon, writer);
        return Err(format!("not started: {reply}"));
    }
    match cell.kill {
        KillAt::Started => {}
        KillAt::Copying => {
            wait_for(dir, "a third of the copy", Duration::from_secs(60), |v| {
                reshape_share(v) >= 0.33
            });
        }
        KillAt::NearEnd => {
            wait_for(dir, "85% of the copy", Duration::from_secs(60), |v| {
                reshape_share(v) >= 0.85
            });
        }
        KillAt::Finishing => {
            wait_for(dir, "the pass's end", Duration::from_secs(60), |v| {
                matches!(v["reshape"]["state"].as_str(), Some("finishing" | "done"))
            });
        }
    }
    let at_kill = status(dir)["reshape"].clone();
    std::fs::write(dir.join("kill-now"), b"").unwrap();
    let text = killed(&mut daemon, writer);
    let acked = acked_writes(dir, &cell.load, &text);
    if cell.load.rw == "write" {
        assert!(one_pass(&acked), "fio wrapped around: slow it down");
    }
    let context = format!("{cell:?}, killed at {at_kill}");

    match cell.restart {
        Restart::OldFirst => old_config_start(dir, cell, &context),
        Restart::MemberAwayFirst => member_away_start(dir, cell, &context),
        Restart::New => {}
    }
    let fast = match cell.when {
        Lose::WhileCopying => slow.as_str(),
        Lose::AfterTheEnd => "",
    };
    cell_config(dir, cell, &cell.new, fast);
    let daemon = start(&config);
    let v = status(dir);
    assert!(
        cell.kill == KillAt::Finishing || !v["reshape"].is_null(),
        "{context}: the restart carries on: {v:#}"
    );
    if cell.when == Lose::WhileCopying {
        fail_members(dir, cell.lose, &context);
    }
    let v = wait_for(dir, "the reshape's end", Duration::from_secs(300), |v| {
        let state = &v["reshape"]["state"];
        reshape_done(v) || state == "failed" || state.is_null()
    });
    // No reshape left at the restart (killed as it ended): `null`.
    assert!(
        reshape_done(&v) || (v["reshape"].is_null() && cell.kill == KillAt::Finishing),
        "{context}: the reshape did not end: {v:#}"
    );
    let bad = read_back_problems(dir, &acked, cell.load.bs);
    assert!(
        bad.is_empty(),
        "{context}: {} of {} writes fio saw completed read back wrong after the reshape: {:?}\n--- the writing run:\n{text}",
        bad.len(),
        acked.len(),
        &bad[..bad.len().min(20)]
    );
    if cell.when == Lose::AfterTheEnd {
        scrub_finds_nothing(dir, &context);
        fail_members(dir, cell.lose, &context);
        let bad = read_back_problems(dir, &acked, cell.load.bs);
        assert!(
            bad.is_empty(),
            "{context}: {} of {} writes fio saw completed read back wrong without {:?}: {:?}",
            bad.len(),
            acked.len(),
            cell.lose,
            &bad[..bad.len().min(20)]
        );
    }
    daemon.stop();
    Ok(())
}

/// fio writing; SIGKILLed if the test fails before its trigger ends it (with the daemon gone
/// it would spin on for ever).
struct Writer(Option<std::process::Child>);

impl Drop for Writer {
    fn drop(&mut self) {
        if let Some(mut fio) = self.0.take() {
            let _ = fio.kill();
            let _ = fio.wait();
        }
    }
}

/// Waits for fio's trigger to SIGKILL `daemon` and for fio (`writer`) to end (each within
/// 30 s); what fio printed.
fn killed(daemon: &mut common::Daemon, mut writer: Writer) -> String {
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
    within(&mut daemon.child, "nbraidd (killed by fio's trigger)");
    let mut fio = writer.0.take().unwrap();
    within(&mut fio, "fio");
    let out = fio.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

/// nbraidd on `config` in `dir`: `Ok(status)` of volume `v` if it came up (then stopped),
/// else `Err(what it printed)`.
fn start_or_refusal(dir: &Path, config: &Path) -> Result<Value, String> {
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

/// A start mid-reshape after a kill (the bitmap dirty) with the first member the new shape
/// can lose moved away: refused, naming the role out and `--force-assemble`; nothing written
/// (the other members' files unchanged). The file goes back.
fn member_away_start(dir: &Path, cell: &Cell, context: &str) {
    let config = cell_config(dir, cell, &cell.new, "");
    let away = dir.join(format!("{}.img", cell.lose[0]));
    let aside = dir.join("away.img");
    std::fs::rename(&away, &aside).unwrap();
    let others = |dir: &Path| -> Vec<Vec<u8>> {
        (0..cell.new.members)
            .map(|i| dir.join(format!("d{i}.img")))
            .filter(|p| p.exists())
            .map(|p| std::fs::read(p).unwrap())
            .collect()
    };
    let before = others(dir);
    match start_or_refusal(dir, &config) {
        Ok(v) => panic!(
            "{context}: a dirty start without {} served: {v:#}",
            cell.lose[0]
        ),
        Err(said) => {
            eprintln!("fio_reshape_crash: without {}: {said}", cell.lose[0]);
            assert!(
                said.contains("--force-assemble"),
                "{context}: the refusal names no way on: {said}"
            );
        }
    }
    assert!(
        before == others(dir),
        "{context}: the refused start wrote to the members"
    );
    std::fs::rename(&aside, &away).unwrap();
}

/// A start with the old config mid-reshape: the records say the data is moving into the new
/// shape. The daemon must not serve the old shape over moved data: it refuses the start
/// (naming what the records hold), or serves the volume as the records say.
fn old_config_start(dir: &Path, cell: &Cell, context: &str) {
    let config = cell_config(dir, cell, &cell.old, "");
    match start_or_refusal(dir, &config) {
        Ok(v) => assert!(
            !v["reshape"].is_null(),
            "{context}: the old config served the volume as if no reshape ran: {v:#}"
        ),
        Err(said) => {
            eprintln!("fio_reshape_crash: with the old config: {said}");
            assert!(
                said.contains("the superblocks record"),
                "{context}: the old config's start failed without naming the records: {said}"
            );
        }
    }
}

/// `members` failed through the control socket (`nbraid fail`).
fn fail_members(dir: &Path, members: &[&str], context: &str) {
    for m in members {
        let reply = control(
            dir,
            json!({"v": 1, "op": "fail", "volume": "v", "member": m}),
        );
        assert_eq!(reply["ok"], true, "{context}: fail {m}: {reply}");
    }
}

/// A scrub of the whole volume: it ends finding no mismatch and nothing unreadable.
fn scrub_finds_nothing(dir: &Path, context: &str) {
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

fn run_cells(cells: Vec<Cell>) {
    let only = std::env::var("NBRAID_FIO_RESHAPE_ONLY").unwrap_or_default();
    let (mut failed, mut refused) = (Vec::new(), Vec::new());
    let began = Instant::now();
    for cell in cells {
        if !format!("{cell:?}").contains(&only) {
            continue;
        }
        eprintln!("fio_reshape_crash: {cell:?}");
        let at = Instant::now();
        match std::panic::catch_unwind(|| kill_mid_reshape_and_verify(&cell)) {
            Ok(Ok(())) => eprintln!("fio_reshape_crash: passed in {:?}", at.elapsed()),
            Ok(Err(why)) => refused.push(format!("{cell:?}: {why}")),
            Err(_) => failed.push(format!("{cell:?}")),
        }
    }
    eprintln!(
        "fio_reshape_crash: {:?} in all; refused at the start: {}",
        began.elapsed(),
        refused.len()
    );
    for r in &refused {
        eprintln!("  refused: {r}");
    }
    assert!(failed.is_empty(), "failed cells:\n{}", failed.join("\n"));
    assert!(refused.is_empty(), "moves refused:\n{}", refused.join("\n"));
}

#[test]
fn sigkill_mid_reshape_keeps_every_completed_write_and_parity() {
    let cells = match std::env::var_os("NBRAID_SOAK") {
        Some(_) => matrix(),
        None => few(),
    };
    run_cells(cells);
}

/// RAID 5 4 → 5 killed while copying, refused to start without a member, a member failed
/// while the restart copies on; RAID 5 → RAID 6 behind a write-back cache with 512-byte blocks, killed right after the start and
/// started with the old config first, two members failed after the end; RAID 6 6 → 7 to
/// 256 KiB strips under a sequential stream, killed near the end.
fn few() -> Vec<Cell> {
    let r5 = geometry("raid5", 4, 0, "64KiB", 4096, true);
    let wb = |g: Geometry| Geometry {
        cache: "write-back",
        ..g
    };
    let r5_512 = wb(geometry("raid5", 4, 0, "64KiB", 512, false));
    let r6 = geometry("raid6", 6, 0, "64KiB", 4096, true);
    vec![
        Cell {
            old: r5,
            new: geometry("raid5", 5, 0, "64KiB", 4096, true),
            load: load_for(&r5, RANDOM),
            kill: KillAt::Copying,
            restart: Restart::MemberAwayFirst,
            lose: &["d1"],
            when: Lose::WhileCopying,
        },
        Cell {
            old: r5_512,
            new: wb(geometry("raid6", 5, 0, "64KiB", 512, false)),
            load: load_for(&r5_512, RANDOM),
            kill: KillAt::Started,
            restart: Restart::OldFirst,
            lose: &["d0", "d4"],
            when: Lose::AfterTheEnd,
        },
        Cell {
            old: r6,
            new: geometry("raid6", 7, 0, "256KiB", 4096, true),
            load: load_for(&r6, STREAM_32K),
            kill: KillAt::NearEnd,
            restart: Restart::New,
            lose: &["d2", "d6"],
            when: Lose::AfterTheEnd,
        },
    ]
}

/// The soak's sweep: every move at both block sizes, checksums on and off, write-through and
/// write-back; the kill point, the restart, the load and when members are lost rotate
/// through the cells.
fn matrix() -> Vec<Cell> {
    // (old level, members, spans, strip) → (new level, members, spans, strip); the members
    // the new shape can lose.
    type Shape = (&'static str, usize, usize, &'static str);
    let moves: [(Shape, Shape, &[&str]); 11] = [
        (("raid5", 4, 0, "64KiB"), ("raid5", 5, 0, "64KiB"), &["d4"]),
        (
            ("raid5", 4, 0, "64KiB"),
            ("raid6", 5, 0, "64KiB"),
            &["d1", "d4"],
        ),
        (
            ("raid6", 6, 0, "64KiB"),
            ("raid6", 7, 0, "64KiB"),
            &["d0", "d6"],
        ),
        (("raid5", 4, 0, "64KiB"), ("raid5", 5, 0, "256KiB"), &["d2"]),
        (("raid5", 4, 0, "256KiB"), ("raid5", 5, 0, "64KiB"), &["d3"]),
        (("raid5", 4, 0, "64KiB"), ("raid5", 5, 0, "4KiB"), &["d0"]),
        (("raid5", 4, 0, "64KiB"), ("raid5", 5, 0, "1MiB"), &["d1"]),
        (("raid5", 4, 0, "1MiB"), ("raid5", 5, 0, "16MiB"), &["d4"]),
        (("raid5", 4, 0, "64KiB"), ("raid5", 4, 0, "256KiB"), &["d2"]),
        (("raid5", 4, 0, "256KiB"), ("raid5", 4, 0, "64KiB"), &["d1"]),
        (
            ("raid50", 6, 2, "64KiB"),
            ("raid50", 9, 3, "64KiB"),
            &["d0", "d4", "d8"],
        ),
    ];
    let kills = [
        KillAt::Copying,
        KillAt::Started,
        KillAt::NearEnd,
        KillAt::Finishing,
    ];
    let mut cells = Vec::new();
    for (old, new, lose) in moves {
        for block_size in [512, 4096] {
            for checksums in [true, false] {
                for cache in ["write-through", "write-back"] {
                    let n = cells.len();
                    let g = |(level, members, spans, strip): Shape| Geometry {
                        cache,
                        ..geometry(level, members, spans, strip, block_size, checksums)
                    };
                    let (old, new) = (g(old), g(new));
                    // Cache alternates fastest, then checksums, then the block size: the
                    // stream on half the write-through cells (behind write-back each write
                    // is flushed, too few for a stream paced to outlast the reshape), the
                    // members lost while copying or after the end on both caches.
                    let stream = cache == "write-through" && (n / 2 + n / 8) % 2 == 1;
                    let base = if stream { STREAM_32K } else { RANDOM };
                    // Every kill point on both caches (the move shifts them).
                    let kill = kills[(n + n / 8) % 4];
                    cells.push(Cell {
                        old,
                        new,
                        load: load_for(&old, base),
                        kill,
                        // Killed as the pass ends, the records may already hold the new
                        // shape alone: neither refusal applies.
                        restart: match n % 5 {
                            _ if kill == KillAt::Finishing => Restart::New,
                            1 => Restart::OldFirst,
                            3 => Restart::MemberAwayFirst,
                            _ => Restart::New,
                        },
                        when: match (n + n / 2) % 2 {
                            0 => Lose::WhileCopying,
                            _ => Lose::AfterTheEnd,
                        },
                        lose,
                    });
                }
            }
        }
    }
    cells
}
