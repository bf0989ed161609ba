//! Online reshapes of a degraded volume through the real daemon, under fio's writes (every
//! write fio saw completed checked with fio's CRCs, `common/fio_verify.rs`):
//!
//! - **Started degraded**: members failed (`nbraid fail`) while fio writes, then the
//!   `reshape` (`nbraid apply --yes`) is refused, saying which members are not current and
//!   what to do; they are added back (`nbraid remove`, `nbraid add`), rebuilt, and the
//!   reshape asked again runs, is SIGKILLed mid-copy and finishes after the restart.
//! - **A member lost mid-copy**: failed through the control socket while the reshape
//!   copies, or (`FileGone`) failed and its file removed while the daemon is down, or
//!   (`WritesFail`) a member file whose writes fail with EIO (on nbdfuse, over nbdkit's
//!   error filter), failed by the daemon. The daemon is SIGKILLed a second after fio's last
//!   write (the bitmap dirty: a resync pending): the restart is refused (dirty, degraded,
//!   mid-reshape: no log covers either shape), saying so and naming `--force-assemble`,
//!   nothing written, and forced; or (`StoppedMidCopy`) it is stopped cleanly, and the
//!   restart simply carries on. Degraded, the reshape ends, and the array opened again in
//!   its new shape (`served.rs`'s `open_again`, a quiet handover) serves degraded; every
//!   write reads back, and again after another restart. The member is then added back and
//!   rebuilt, and a scrub finds nothing.
//!
//! Moves: RAID 5 4 → 5, RAID 6 5 → 6, RAID 5 → RAID 6, RAID 5 64 KiB → 256 KiB strips (with
//! a member added and without); write-through and write-back, checksums on and off. Three
//! cells by default; `NBRAID_SOAK=1` runs the sweep, `NBRAID_FIO_RESHAPE_ONLY=text` the
//! cells whose description holds the text.

mod common;
use common::fio_verify::{
    acked_writes, geometry, one_pass, read_back_problems, start, Geometry, Load, RANDOM,
};
use common::reshape_fio::{
    self, ask_reshape, control, fail_members, files_mib, kill_now, killed, load_for, member_files,
    move_config, reshape_done, reshape_share, scrub_finds_nothing, slow_rate, start_forced,
    start_or_refusal, status, wait_for, writer, KillWhen, STREAM_32K,
};
use common::{require, Nbdkit};

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How the members of [`Cell::out`] go out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Case {
    /// Failed before the reshape is asked: it is refused, and runs once they are back.
    StartDegraded,
    /// Failed (`nbraid fail`) a third into the copy; SIGKILL a little later.
    FailMidCopy,
    /// As [`Case::FailMidCopy`], but the daemon stopped cleanly (SIGTERM), not killed: the
    /// restart is not refused, the reshape goes on degraded.
    StoppedMidCopy,
    /// As [`Case::FailMidCopy`], and their files removed while the daemon is down (a disk
    /// gone for good after it failed).
    FileGone,
    /// The first of them a member file whose writes all fail with EIO from a third into the
    /// copy ([`ErringFile`]): failed by the daemon itself, not by the operator. Its writes
    /// succeed again after the kill; it stays failed.
    WritesFail,
}

/// One run: `old` reshaped into `new` under `load`, the members `out` lost as `case` says.
#[derive(Clone, Copy, Debug)]
struct Cell {
    old: Geometry,
    new: Geometry,
    load: Load,
    case: Case,
    out: &'static [&'static str],
}

/// Where [`Case::WritesFail`]'s member file is mounted (nbdfuse), in `dir`.
const FUSE_DIR: &str = "fuse";

/// `arrays.toml` for the move with volume `v` as `shape` (see `move_config`); for
/// [`Case::WritesFail`], the first member of `out` on its FUSE mount.
fn cell_config(dir: &Path, cell: &Cell, shape: &Geometry, extra: &str) -> PathBuf {
    let config = move_config(dir, (&cell.old, &cell.new), shape, extra);
    if cell.case == Case::WritesFail {
        let m = cell.out[0];
        let text = std::fs::read_to_string(&config).unwrap();
        let local = format!("path = \"{m}.img\"");
        assert!(text.contains(&local), "{text}");
        let text = text.replace(&local, &format!("path = \"{FUSE_DIR}/{m}.img\""));
        std::fs::write(&config, text).unwrap();
    }
    config
}

/// The trigger file: while it exists, the FUSE member's writes fail with EIO.
fn eio_trigger(dir: &Path) -> PathBuf {
    dir.join("eio")
}

/// A member file whose writes can be made to fail: `nbdkit file` over a backing file
/// behind its error filter, mounted as a file by nbdfuse. Unmounted and stopped on drop.
struct ErringFile {
    mount: PathBuf,
    fuse: std::process::Child,
    _kit: Nbdkit,
}

impl Drop for ErringFile {
    fn drop(&mut self) {
        let _ = std::process::Command::new("fusermount3")
            .arg("-u")
            .arg(&self.mount)
            .status();
        let _ = self.fuse.kill();
        let _ = self.fuse.wait();
    }
}

/// For [`Case::WritesFail`]: the first member of `out` as an [`ErringFile`] at
/// `dir/fuse/<id>.img`, as large as the config declares, every write failing with EIO
/// while [`eio_trigger`] exists.
fn erring_member(dir: &Path, cell: &Cell) -> Option<ErringFile> {
    if cell.case != Case::WritesFail {
        return None;
    }
    let nbdfuse = require("nbdfuse", "nbdfuse");
    let m = cell.out[0];
    let role: usize = m[1..].parse().unwrap();
    let backing = dir.join(format!("{m}-backing.img"));
    let mib = files_mib(&cell.old, &cell.new);
    let blank = |path: &Path, mib: u64| {
        (std::fs::File::create(path).unwrap())
            .set_len(mib << 20)
            .unwrap()
    };
    blank(&backing, mib[role]);
    // The array is created over blank members, never over part of them: the old members'
    // files all made.
    for (i, &mib) in mib.iter().enumerate().take(cell.old.members) {
        if i != role {
            blank(&dir.join(format!("d{i}.img")), mib);
        }
    }
    let sock = dir.join(format!("{m}.sock"));
    let kit = Nbdkit::start(
        &sock,
        [
            "--filter=error".into(),
            "file".into(),
            backing.into_os_string(),
            "error=EIO".into(),
            "error-pwrite-rate=100%".into(),
            format!("error-pwrite-file={}", eio_trigger(dir).display()).into(),
        ] as [std::ffi::OsString; 6],
    );
    let mount = dir.join(FUSE_DIR);
    std::fs::create_dir(&mount).unwrap();
    let file = mount.join(format!("{m}.img"));
    let fuse = std::process::Command::new(nbdfuse)
        .arg(&file)
        .arg("--unix")
        .arg(&sock)
        .stdin(std::process::Stdio::null())
        .spawn()
        .expect("start nbdfuse");
    let erring = ErringFile {
        mount,
        fuse,
        _kit: kit,
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while !file.exists() {
        assert!(Instant::now() < deadline, "nbdfuse did not mount {file:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    Some(erring)
}

/// `out` lost a third into the copy, as `cell.case` says; returns once the volume is
/// degraded.
fn lose_mid_copy(dir: &Path, cell: &Cell, context: &str) {
    match cell.case {
        Case::StartDegraded => return,
        Case::FailMidCopy | Case::StoppedMidCopy | Case::FileGone => {
            fail_members(dir, cell.out, context)
        }
        Case::WritesFail => {
            std::fs::write(eio_trigger(dir), b"").unwrap();
            fail_members(dir, &cell.out[1..], context);
        }
    }
    let v = wait_for(dir, "degraded", Duration::from_secs(60), |v| {
        v["degraded"] == true
    });
    for m in cell.out {
        let member = (v["members"].as_array().unwrap().iter()).find(|x| x["id"] == *m);
        assert!(
            member.is_some_and(|x| x["state"] == "failed"),
            "{context}: {m} failed: {v:#}"
        );
    }
    if cell.case == Case::WritesFail {
        // Its writes succeed from here on.
        std::fs::remove_file(eio_trigger(dir)).unwrap();
    }
}

/// Every write of `acked` reads back from the volume served in `dir` (`when`, for the
/// message).
fn all_read_back(dir: &Path, cell: &Cell, acked: &[u64], context: &str, when: &str) {
    let bad = read_back_problems(dir, acked, cell.load.bs);
    assert!(
        bad.is_empty(),
        "{context}: {} of {} writes fio saw completed read back wrong {when}: {:?}",
        bad.len(),
        acked.len(),
        &bad[..bad.len().min(20)]
    );
}

/// No rebuild and no resync left to run (neither shown, or each ended).
fn settled(v: &Value) -> bool {
    let ended = |p: &Value| p.is_null() || matches!(p["state"].as_str(), Some("done" | "failed"));
    ended(&v["rebuild"]) && ended(&v["resync"]) && v["reshape"]["state"] != "running"
}

/// `out` brought back into their roles: each taken out of its role where its file is still
/// there (`nbraid remove`), then offered again by its id (`nbraid add`: a file gone is
/// created as the config declares it), and rebuilt; the volume whole again.
fn add_back(dir: &Path, cell: &Cell, context: &str) {
    for (i, m) in cell.out.iter().enumerate() {
        let on_fuse = i == 0 && cell.case == Case::WritesFail;
        if on_fuse || dir.join(format!("{m}.img")).exists() {
            let reply = control(
                dir,
                json!({"v": 1, "op": "remove", "volume": "v", "member": m}),
            );
            assert_eq!(reply["ok"], true, "{context}: remove {m}: {reply}");
        }
        let reply = control(dir, json!({"v": 1, "op": "add", "volume": "v", "path": m}));
        assert_eq!(reply["ok"], true, "{context}: add {m} back: {reply}");
    }
    let v = wait_for(dir, "the rebuild", Duration::from_secs(300), |v| {
        v["degraded"] == false && settled(v)
    });
    assert_eq!(v["state"], "healthy", "{context}: after the rebuild: {v:#}");
}

/// A reshape asked while `out` are failed: refused, naming them, why (not current) and the
/// way on (rebuild); the volume keeps serving its old shape.
fn refused_while_degraded(dir: &Path, cell: &Cell, config: &Path, context: &str) {
    fail_members(dir, cell.out, context);
    let reply = ask_reshape(dir, config);
    assert_eq!(reply["ok"], false, "{context}: a degraded reshape: {reply}");
    let said = reply["error"]["message"].as_str().unwrap_or_default();
    eprintln!(
        "fio_reshape_degraded: a reshape without {:?}: {said}",
        cell.out
    );
    for m in cell.out {
        assert!(said.contains(m), "{context}: the refusal names {m}: {said}");
    }
    assert!(
        said.contains("not current") && said.contains("rebuild"),
        "{context}: the refusal says why and what to do: {said}"
    );
    let v = status(dir);
    assert!(
        v["reshape"].is_null() && v["degraded"] == true,
        "{context}: {v:#}"
    );
}

/// The start after a kill mid-reshape with `out` failed: refused (dirty, degraded, mid-
/// reshape: the rows the kill tore cannot be told), naming the role out and
/// `--force-assemble v` (a member recorded failed stays out even with its file back: not
/// "bring it back"), nothing written; then forced.
fn refused_dirty_then_forced(
    dir: &Path,
    cell: &Cell,
    config: &Path,
    context: &str,
) -> common::Daemon {
    let before = member_files(dir, cell.new.members);
    match start_or_refusal(dir, config) {
        Ok(v) => panic!(
            "{context}: a dirty start without {:?} served: {v:#}",
            cell.out
        ),
        Err(said) => {
            eprintln!("fio_reshape_degraded: without {:?}: {said}", cell.out);
            assert!(
                said.contains("--force-assemble v") && said.contains("during a reshape"),
                "{context}: the refusal says why and the way on: {said}"
            );
            // Every case's member out is recorded failed: bringing it back cannot help.
            assert!(
                said.contains("recorded failed stays out") && said.contains("nbraid remove v"),
                "{context}: the refusal offers a way that does not work: {said}"
            );
        }
    }
    assert!(
        before == member_files(dir, cell.new.members),
        "{context}: the refused start wrote to the members"
    );
    start_forced(config)
}

/// Runs `cell` (see the module).
fn reshape_degraded_and_verify(cell: &Cell) {
    let fio = require("fio", "fio");
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let slow = slow_rate(&cell.old, &cell.new);
    let _kit = erring_member(dir, cell);
    let config = cell_config(dir, cell, &cell.old, &slow);
    let mut daemon = start(&config);
    let capacity = status(dir)["capacity_bytes"].as_u64().unwrap();
    // Lost mid-copy, the kill comes once fio's writes are answered: the start after it is
    // refused as dirty and degraded mid-reshape, and forced; a write torn by the kill could
    // leave an out member's block rebuilt wrong from stale parity (the refusal's reason),
    // which no product can prevent without a log.
    let when = match cell.case {
        Case::StartDegraded => KillWhen::InFlight,
        Case::StoppedMidCopy => KillWhen::Stopped,
        _ => KillWhen::Settled,
    };
    let writer = writer(&fio, dir, &cell.load, (capacity, when), &daemon);
    wait_for(dir, "fio's first writes", Duration::from_secs(60), |v| {
        v["io"]["writes"].as_u64().unwrap_or(0) >= 150
    });
    let context = format!("{cell:?}");
    let new_config = dir.join("new.toml");
    std::fs::copy(cell_config(dir, cell, &cell.new, &slow), &new_config).unwrap();
    cell_config(dir, cell, &cell.old, &slow);
    if cell.case == Case::StartDegraded {
        refused_while_degraded(dir, cell, &new_config, &context);
        add_back(dir, cell, &context);
    }
    let reply = ask_reshape(dir, &new_config);
    assert!(
        reply["ok"] == true && reply["started"] == true,
        "{context}: the reshape: {reply}"
    );
    wait_for(dir, "a third of the copy", Duration::from_secs(60), |v| {
        reshape_share(v) >= 0.33
    });
    lose_mid_copy(dir, cell, &context);
    if cell.case != Case::StartDegraded {
        std::thread::sleep(Duration::from_millis(300));
    }
    let at_kill = status(dir)["reshape"].clone();
    kill_now(dir);
    let text = killed(&mut daemon, writer);
    let acked = acked_writes(dir, &cell.load, &text);
    if cell.load.rw == "write" {
        assert!(one_pass(&acked), "fio wrapped around: slow it down");
    }
    let context = format!("{context}, ended at {at_kill}");
    if cell.case == Case::FileGone {
        for m in cell.out {
            std::fs::remove_file(dir.join(format!("{m}.img"))).unwrap();
        }
    }

    // The new config, at full speed: the pass carries on, degraded where members are out.
    let config = cell_config(dir, cell, &cell.new, "");
    let daemon = match cell.case {
        Case::StartDegraded | Case::StoppedMidCopy => start(&config),
        _ => refused_dirty_then_forced(dir, cell, &config, &context),
    };
    let v = status(dir);
    assert!(
        !v["reshape"].is_null(),
        "{context}: the restart carries on: {v:#}"
    );
    let v = wait_for(dir, "the reshape's end", Duration::from_secs(300), |v| {
        let state = &v["reshape"]["state"];
        reshape_done(v) || state == "failed" || state.is_null()
    });
    assert!(
        reshape_done(&v),
        "{context}: the reshape did not end: {v:#}"
    );
    let degraded = cell.case != Case::StartDegraded;
    // Opened again in its new shape at the end (`served.rs`'s `open_again`, a quiet
    // handover), serving (degraded where members are out).
    let v = wait_for(
        dir,
        "the new shape served",
        Duration::from_secs(60),
        settled,
    );
    assert!(
        v["available"] == true
            && v["degraded"] == degraded
            && v["level"] == cell.new.level
            && v["counted_since"]["by"] == "volume opened again",
        "{context}: after the reshape: {v:#}"
    );
    all_read_back(dir, cell, &acked, &context, "after the reshape");
    daemon.stop();

    // Started again: the records hold the new shape alone.
    let daemon = start(&config);
    let v = wait_for(dir, "the start settled", Duration::from_secs(60), settled);
    assert!(
        v["reshape"].is_null() && v["available"] == true && v["degraded"] == degraded,
        "{context}: started again after the reshape: {v:#}"
    );
    all_read_back(dir, cell, &acked, &context, "after another restart");
    if degraded {
        add_back(dir, cell, &context);
        all_read_back(dir, cell, &acked, &context, "after the rebuild");
    }
    scrub_finds_nothing(dir, &context);
    daemon.stop();
}

#[test]
fn a_degraded_reshape_keeps_every_completed_write() {
    let cells = match std::env::var_os("NBRAID_SOAK") {
        Some(_) => matrix(),
        None => few(),
    };
    reshape_fio::run_cells("fio_reshape_degraded", cells, |cell| {
        reshape_degraded_and_verify(cell);
        Ok(())
    });
}

/// RAID 5 4 → 5 with a member failed mid-copy and its file gone; RAID 6 5 → 6 behind a
/// write-back cache, refused with two members out and run once they are back; RAID 5 →
/// RAID 6 under a sequential stream, checksums off, a member file's writes failing
/// mid-copy.
fn few() -> Vec<Cell> {
    let r5 = geometry("raid5", 4, 0, "64KiB", 4096, true);
    let r6 = geometry("raid6", 5, 0, "64KiB", 4096, true).write_back();
    let r5_off = geometry("raid5", 4, 0, "64KiB", 4096, false);
    vec![
        Cell {
            old: r5,
            new: geometry("raid5", 5, 0, "64KiB", 4096, true),
            load: load_for(&r5, RANDOM),
            case: Case::FileGone,
            out: &["d1"],
        },
        Cell {
            old: r6,
            new: geometry("raid6", 6, 0, "64KiB", 4096, true).write_back(),
            load: load_for(&r6, RANDOM),
            case: Case::StartDegraded,
            out: &["d0", "d3"],
        },
        Cell {
            old: r5_off,
            new: geometry("raid6", 5, 0, "64KiB", 4096, false),
            load: load_for(&r5_off, STREAM_32K),
            case: Case::WritesFail,
            out: &["d2"],
        },
    ]
}

/// The soak's sweep: every move with every case, on both caches, checksums alternating;
/// RAID 6 loses one member or two.
fn matrix() -> Vec<Cell> {
    type Shape = (&'static str, usize, &'static str);
    let moves: [(Shape, Shape, &[&str], &[&str]); 5] = [
        (
            ("raid5", 4, "64KiB"),
            ("raid5", 5, "64KiB"),
            &["d1"],
            &["d4"],
        ),
        (
            ("raid6", 5, "64KiB"),
            ("raid6", 6, "64KiB"),
            &["d0", "d3"],
            &["d2"],
        ),
        (
            ("raid5", 4, "64KiB"),
            ("raid6", 5, "64KiB"),
            &["d2"],
            &["d0"],
        ),
        (
            ("raid5", 4, "64KiB"),
            ("raid5", 5, "256KiB"),
            &["d3"],
            &["d0"],
        ),
        (
            ("raid5", 4, "64KiB"),
            ("raid5", 4, "256KiB"),
            &["d0"],
            &["d2"],
        ),
    ];
    let mut cells = Vec::new();
    for (old, new, out, other_out) in moves {
        for case in [
            Case::StartDegraded,
            Case::FailMidCopy,
            Case::StoppedMidCopy,
            Case::FileGone,
            Case::WritesFail,
        ] {
            for cache in ["write-through", "write-back"] {
                let n = cells.len();
                let checksums = n % 3 != 1;
                let g = |(level, members, strip): Shape| Geometry {
                    cache,
                    ..geometry(level, members, 0, strip, 4096, checksums)
                };
                let (old, new) = (g(old), g(new));
                let stream = cache == "write-through" && n % 4 == 2;
                let base = if stream { STREAM_32K } else { RANDOM };
                cells.push(Cell {
                    old,
                    new,
                    load: load_for(&old, base),
                    case,
                    // An added member lost mid-copy on some cells; only old ones before (RAID 6
                    // then one member out or two).
                    out: match (n + n / 2) % 2 {
                        1 if case != Case::StartDegraded || !other_out.contains(&"d4") => other_out,
                        _ => out,
                    },
                });
            }
        }
    }
    cells
}
