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
    acked_writes, geometry, one_pass, read_back_problems, start, Geometry, Load, RANDOM,
};
use common::require;
use common::reshape_fio::{
    self, ask_reshape, fail_members, kill_now, killed, load_for, member_files, move_config,
    reshape_done, reshape_share, scrub_finds_nothing, slow_rate, start_or_refusal, status,
    wait_for, writer, KillWhen, STREAM_32K,
};

use std::path::{Path, PathBuf};
use std::time::Duration;

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

/// The member files, as both shapes need them.
fn cell_config(dir: &Path, cell: &Cell, geometry: &Geometry, volume_extra: &str) -> PathBuf {
    move_config(dir, (&cell.old, &cell.new), geometry, volume_extra)
}

/// Runs `cell`; `Err`: the move was refused at its start (the reason), so nothing to check.
fn kill_mid_reshape_and_verify(cell: &Cell) -> Result<(), String> {
    let fio = require("fio", "fio");
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let slow = slow_rate(&cell.old, &cell.new);
    let config = cell_config(dir, cell, &cell.old, &slow);
    let mut daemon = start(&config);
    let old_capacity = status(dir)["capacity_bytes"].as_u64().unwrap();

    let writer = writer(
        &fio,
        dir,
        &cell.load,
        (old_capacity, KillWhen::InFlight),
        &daemon,
    );
    // Writes before the reshape as well as during it (fio takes a while to start on a busy
    // machine: a fixed pause saw none completed).
    wait_for(dir, "fio's first writes", Duration::from_secs(60), |v| {
        v["io"]["writes"].as_u64().unwrap_or(0) >= 150
    });

    let new_config = cell_config(dir, cell, &cell.new, &slow);
    let reply = ask_reshape(dir, &new_config);
    if reply["ok"] != true || reply["started"] == false {
        kill_now(dir);
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
    kill_now(dir);
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

/// A start mid-reshape after a kill (the bitmap dirty) with the first member the new shape
/// can lose moved away: refused, naming the role out and `--force-assemble`; nothing written
/// (the other members' files unchanged). The file goes back.
fn member_away_start(dir: &Path, cell: &Cell, context: &str) {
    let config = cell_config(dir, cell, &cell.new, "");
    let away = dir.join(format!("{}.img", cell.lose[0]));
    let aside = dir.join("away.img");
    std::fs::rename(&away, &aside).unwrap();
    let before = member_files(dir, cell.new.members);
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
        before == member_files(dir, cell.new.members),
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

#[test]
fn sigkill_mid_reshape_keeps_every_completed_write_and_parity() {
    let cells = match std::env::var_os("NBRAID_SOAK") {
        Some(_) => matrix(),
        None => few(),
    };
    reshape_fio::run_cells("fio_reshape_crash", cells, kill_mid_reshape_and_verify);
}

/// RAID 5 4 → 5 killed while copying, refused to start without a member, a member failed
/// while the restart copies on; RAID 5 → RAID 6 behind a write-back cache with 512-byte blocks, killed right after the start and
/// started with the old config first, two members failed after the end; RAID 6 6 → 7 to
/// 256 KiB strips under a sequential stream, killed near the end.
fn few() -> Vec<Cell> {
    let r5 = geometry("raid5", 4, 0, "64KiB", 4096, true);
    let r5_512 = geometry("raid5", 4, 0, "64KiB", 512, false).write_back();
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
            new: geometry("raid6", 5, 0, "64KiB", 512, false).write_back(),
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
