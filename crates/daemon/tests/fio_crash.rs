//! The real daemon killed under fio's writes (a trigger that SIGKILLs nbraidd), restarted,
//! and every write fio saw completed read back — on a RAID 5 restarted whole, and on one
//! restarted with a member deleted, where the blocks of the lost member are rebuilt from
//! parity that the crash may have left mid-update (the write hole the partial-parity log
//! closes). Under 4 KiB random writes, and under a sequential stream of writes smaller than a
//! stripe (write-through joins them into full stripes where they meet).
//!
//! Which writes completed, and how each is checked: `common/fio_verify.rs`.

mod common;
use common::fio_verify::{
    acked_writes, geometry, logged_job, one_pass, read_back_problems, start, write_config, Files,
    Geometry, Load, RANDOM, STREAM,
};
use common::{require, run_output};

use std::path::{Path, PathBuf};

/// The RAID 5 of four members with 64 KiB strips and 4 KiB blocks the first tests use.
const RAID5: Geometry = Geometry {
    level: "raid5",
    members: 4,
    data_members: 3,
    spans: 0,
    strip: "64KiB",
    block_size: 4096,
    checksums: true,
    cache: "write-through",
};

/// `geometry` with its cache; each member `member_mib` MiB; with `log_reserve`, its write-hole
/// log in an 8 MiB reserve before the region (`write_hole_log_size`).
fn config(dir: &Path, geometry: &Geometry, log_reserve: bool, member_mib: u64) -> PathBuf {
    let mib = vec![member_mib; geometry.members];
    write_config(dir, geometry, &Files { mib: &mib }, log_reserve, "")
}

fn crash_and_verify(lose: Option<&str>, log_reserve: bool, load: &Load) {
    crash_and_verify_on(
        &RAID5,
        &lose.into_iter().collect::<Vec<_>>(),
        log_reserve,
        load,
    );
}

/// Each member's MiB for `load` on `geometry`: what RAID 5 of four needs, scaled to the data
/// members of a row, and room for a log reserve of large strips.
fn member_mib_for(geometry: &Geometry, load: &Load) -> u64 {
    let data_mib = (load.member_mib * 3).div_ceil(geometry.data_members as u64);
    let strip_mib = nbraid_config::parse_size(geometry.strip)
        .unwrap()
        .div_ceil(1 << 20);
    // A ring of about 1 MiB per 512 KiB of strip (more for RAID 6), and whole strips.
    data_mib + 8 * strip_mib + 8
}

/// SIGKILL under `load` on `geometry`, `lose` deleted, restart: every acknowledged write
/// reads back.
fn crash_and_verify_on(geometry: &Geometry, lose: &[&str], log_reserve: bool, load: &Load) {
    let fio = require("fio", "fio");
    let dir = tempfile::tempdir().unwrap();
    let config = config(
        dir.path(),
        geometry,
        log_reserve,
        member_mib_for(geometry, load),
    );
    let mut daemon = start(&config);
    // After 1 s fio runs the trigger (SIGKILL to nbraidd), saves which writes completed and
    // which were in flight, and exits.
    let kill = format!("kill -9 {}", daemon.child.id());
    let out = run_output(
        logged_job(&fio, dir.path(), load)
            .arg("--trigger-timeout=1")
            .arg(format!("--trigger={kill}")),
    );
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    let _ = daemon.child.wait();
    let acked = acked_writes(dir.path(), load, &text);
    if load.rw == "write" {
        assert!(one_pass(&acked), "fio wrapped around: raise the size");
    }
    if log_reserve {
        // The log's batches (magic `NBRAIDPL`) are in the reserve, none in the metadata area.
        let img = std::fs::read(dir.path().join("d0.img")).unwrap();
        let has_log = |r: std::ops::Range<usize>| img[r].windows(8).any(|w| w == b"NBRAIDPL");
        assert!(has_log(1 << 20..9 << 20), "no log batch in d0's reserve");
        assert!(!has_log(0..1 << 20), "a log batch in d0's metadata area");
    }
    for m in lose {
        std::fs::remove_file(dir.path().join(format!("{m}.img"))).unwrap();
    }
    let daemon = start(&config);
    let bad = read_back_problems(dir.path(), &acked, load.bs);
    assert!(
        bad.is_empty(),
        "{geometry:?}: {} of {} writes fio saw completed read back wrong after the restart without {lose:?}: {:?}\n--- the writing run:\n{text}",
        bad.len(),
        acked.len(),
        &bad[..bad.len().min(20)]
    );
    daemon.stop();
}

#[test]
fn sigkill_under_fio_writes_then_restart_keeps_every_completed_write() {
    crash_and_verify(None, false, &RANDOM);
}

#[test]
fn sigkill_under_fio_writes_then_a_member_lost_keeps_every_completed_write() {
    crash_and_verify(Some("d1"), false, &RANDOM);
}

/// The same with the log in a reserve before the region instead of the metadata area.
#[test]
fn sigkill_then_a_member_lost_with_the_log_before_the_region_keeps_every_completed_write() {
    crash_and_verify(Some("d1"), true, &RANDOM);
}

/// A sequential stream in writes smaller than a stripe (joined into full stripes where they
/// meet, logged where not), killed, then restarted without a member.
#[test]
fn sigkill_under_a_sequential_stream_then_a_member_lost_keeps_every_completed_write() {
    crash_and_verify(Some("d1"), false, &STREAM);
}

/// Levels that log, at strips from 4 KiB to 16 MiB, 512-byte and 4 KiB blocks, with and
/// without checksums, and two declared trees, behind a write-through and a write-back cache
/// (each write flushed), killed and restarted without as many members as they tolerate (one
/// per span). By default a few cells the RAID 5 tests above do not cover; `NBRAID_SOAK=1`
/// runs all 212 (about 14 minutes), `NBRAID_FIO_CRASH_ONLY=mirror` those whose description
/// holds the text.
#[test]
fn geometries_keep_every_completed_write_through_a_kill_and_lost_members() {
    let cells = if std::env::var_os("NBRAID_SOAK").is_some() {
        matrix()
    } else {
        few()
    };
    let only = std::env::var("NBRAID_FIO_CRASH_ONLY").unwrap_or_default();
    let mut failed = Vec::new();
    for (geometry, lose) in cells {
        if !format!("{geometry:?}").contains(&only) {
            continue;
        }
        eprintln!("fio_crash: {geometry:?} without {lose:?}");
        let cell = std::panic::catch_unwind(|| {
            crash_and_verify_on(&geometry, &lose, false, &load_for(&geometry))
        });
        if cell.is_err() {
            failed.push(format!("{geometry:?} without {lose:?}"));
        }
    }
    assert!(failed.is_empty(), "failed cells:\n{}", failed.join("\n"));
}

/// RAID 6 losing two members at 256 KiB strips (its log outside the metadata area), RAID 5
/// with 512-byte blocks at 1 MiB strips behind a write-back cache, RAID 50 without checksums
/// losing one member per span.
fn few() -> Vec<(Geometry, Vec<&'static str>)> {
    let write_back = geometry("raid5", 4, 0, "1MiB", 512, true).write_back();
    vec![
        (
            geometry("raid6", 6, 0, "256KiB", 4096, true),
            vec!["d1", "d4"],
        ),
        (write_back, vec!["d2"]),
        (
            geometry("raid50", 6, 2, "64KiB", 4096, false),
            vec!["d0", "d4"],
        ),
    ]
}

/// Random writes of the geometry's block size; on a write-back cache one at a time, each
/// flushed.
fn load_for(g: &Geometry) -> Load {
    let write_back = g.cache == "write-back";
    Load {
        bs: g.block_size as usize,
        iodepth: if write_back { 1 } else { RANDOM.iodepth },
        flush_each: write_back,
        ..RANDOM
    }
}

/// The soak's cells: each geometry with the members it loses.
fn matrix() -> Vec<(Geometry, Vec<&'static str>)> {
    let mut cells = Vec::new();
    let shapes: [(&str, usize, usize, Vec<&str>); 5] = [
        ("raid5", 4, 0, vec!["d1"]),
        ("raid5", 5, 0, vec!["d4"]),
        ("raid6", 6, 0, vec!["d0", "d3"]),
        ("raid50", 6, 2, vec!["d1", "d5"]),
        ("raid60", 8, 2, vec!["d0", "d2", "d5", "d7"]),
    ];
    // Declared trees: RAID 5 over mirrored pairs (a pair and one more member lost), a mirror
    // of two RAID 5s (one side lost whole, one member of the other).
    let trees = [
        (
            "{ raid5 = [{ mirror = [\"d0\", \"d1\"] }, { mirror = [\"d2\", \"d3\"] }, \
             { mirror = [\"d4\", \"d5\"] }] }",
            6,
            2,
            vec!["d0", "d1", "d3"],
        ),
        (
            "{ mirror = [{ raid5 = [\"d0\", \"d1\", \"d2\"] }, { raid5 = [\"d3\", \"d4\", \"d5\"] }] }",
            6,
            2,
            vec!["d0", "d1", "d5"],
        ),
    ];
    for (tree, members, data_members, lose) in trees {
        for strip in ["4KiB", "64KiB", "1MiB"] {
            for cache in ["write-through", "write-back"] {
                let g = Geometry {
                    data_members,
                    cache,
                    ..geometry(tree, members, 0, strip, 4096, true)
                };
                cells.push((g, lose.clone()));
            }
        }
    }
    for (level, members, spans, lose) in shapes {
        for strip in ["4KiB", "64KiB", "256KiB", "1MiB", "16MiB"] {
            for block_size in [512, 4096] {
                for checksums in [true, false] {
                    let g = geometry(level, members, spans, strip, block_size, checksums);
                    cells.push((g, lose.clone()));
                    let cache = "write-back";
                    cells.push((Geometry { cache, ..g }, lose.clone()));
                }
            }
        }
    }
    cells
}
