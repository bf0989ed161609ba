//! The real daemon killed under fio's writes (a trigger that SIGKILLs nbraidd), restarted,
//! and every write fio saw completed read back — on a RAID 5 restarted whole, and on one
//! restarted with a member deleted, where the blocks of the lost member are rebuilt from
//! parity that the crash may have left mid-update (the write hole the partial-parity log
//! closes). Under 4 KiB random writes, and under a sequential stream of writes smaller than a
//! stripe (write-through joins them into full stripes where they meet).
//!
//! Which writes completed comes from fio's per-I/O completion log (`write_lat_log` with
//! `log_offset`: fio logs a completion only when the write succeeded), and each such block
//! is checked with fio's own block format (magic, its offset, header and data CRC-32C).
//! Not fio's `verify_state_save` + `verify_only`: after the kill fio's saved state can claim
//! writes it never issued (observed: `numberio` 16384 of 1265 issued, and blocks absent
//! from every member file, pristine copies included, expected by the verify pass).

mod common;
use common::{require, run_output, Daemon};

use std::path::{Path, PathBuf};
use std::process::Command;

/// What fio writes: `rw` in blocks of `bs` bytes, `iodepth` in flight, over `size`.
struct Load {
    rw: &'static str,
    bs: usize,
    iodepth: u32,
    size: &'static str,
    /// Each member file's MiB without the log's reserve.
    member_mib: u64,
}

/// 4 KiB random writes, 16 in flight: partial-stripe writes that log.
const RANDOM: Load = Load {
    rw: "randwrite",
    bs: 4096,
    iodepth: 16,
    size: "64M",
    member_mib: 33,
};

/// A 128 KiB sequential stream, 8 in flight, on 192 KiB stripes: write-through joins
/// neighbours into full stripes (`raid/join.rs`), the rest log. Large enough that the
/// second before the kill does not wrap around (checked).
const STREAM: Load = Load {
    rw: "write",
    bs: 128 << 10,
    iodepth: 8,
    size: "1G",
    member_mib: 400,
};

/// A RAID 5 of four file members (created by the daemon), write-through so that a write the
/// client saw complete is in the member files when the process dies; with `log_reserve`,
/// its write-hole log in an 8 MiB reserve before the region (`write_hole_log_size`).
fn config(dir: &Path, log_reserve: bool, load: &Load) -> PathBuf {
    let config = dir.join("arrays.toml");
    let mut text = format!(
        "[daemon]\nlisten = [\"unix:{}\"]\n\n",
        dir.join("nbd.sock").display()
    );
    for i in 0..4 {
        let mib = load.member_mib + if log_reserve { 8 } else { 0 };
        text += &format!("[[member]]\nid = \"d{i}\"\npath = \"d{i}.img\"\nsize = \"{mib}MiB\"\n\n");
    }
    text += "[[volume]]\nname = \"r5\"\nlevel = \"raid5\"\nstrip_size = \"64KiB\"\n\
             members = [\"d0\", \"d1\", \"d2\", \"d3\"]\ncache = \"write-through\"\n\
             bitmap_chunk = \"1MiB\"\n";
    if log_reserve {
        text += "write_hole_log_size = \"8MiB\"\n";
    }
    std::fs::write(&config, text).unwrap();
    config
}

fn start(config: &Path) -> Daemon {
    Daemon::start(config, "warn", false, |l| {
        l.starts_with("nbraidd: control socket")
    })
}

/// fio's job over the volume: `load`, crc32c in every block.
fn job(fio: &Path, dir: &Path, load: &Load) -> Command {
    let mut c = Command::new(fio);
    c.current_dir(dir)
        .args(["--name=w", "--ioengine=nbd", "--verify=crc32c"])
        .arg(format!("--rw={}", load.rw))
        .arg(format!("--bs={}", load.bs))
        .arg(format!("--iodepth={}", load.iodepth))
        .arg(format!("--size={}", load.size))
        .arg(format!(
            "--uri=nbd+unix:///r5?socket={}",
            dir.join("nbd.sock").display()
        ));
    c
}

fn crash_and_verify(lose: Option<&str>, log_reserve: bool, load: &Load) {
    let fio = require("fio", "fio");
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), log_reserve, load);
    let mut daemon = start(&config);
    // After 1 s fio runs the trigger (SIGKILL to nbraidd), saves which writes completed and
    // which were in flight, and exits.
    let kill = format!("kill -9 {}", daemon.child.id());
    let out = run_output(
        job(&fio, dir.path(), load)
            .args([
                "--do_verify=0",
                "--write_lat_log=acked",
                "--log_offset=1",
                "--trigger-timeout=1",
            ])
            .arg(format!("--trigger={kill}")),
    );
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    let _ = daemon.child.wait();
    let acked = acked_offsets(&dir.path().join("acked_clat.1.log"));
    assert!(
        acked.len() >= 100,
        "fio completed only {} writes before the kill: {text}",
        acked.len()
    );
    if load.rw == "write" {
        // One pass: no block was rewritten, so none can be caught torn by a later write.
        let mut seen = acked.clone();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(
            seen.len(),
            acked.len(),
            "fio wrapped around: raise the size"
        );
    }
    if log_reserve {
        // The log's batches (magic `NBRAIDPL`) are in the reserve, none in the metadata area.
        let img = std::fs::read(dir.path().join("d0.img")).unwrap();
        let has_log = |r: std::ops::Range<usize>| img[r].windows(8).any(|w| w == b"NBRAIDPL");
        assert!(has_log(1 << 20..9 << 20), "no log batch in d0's reserve");
        assert!(!has_log(0..1 << 20), "a log batch in d0's metadata area");
    }
    if let Some(m) = lose {
        std::fs::remove_file(dir.path().join(format!("{m}.img"))).unwrap();
    }
    let daemon = start(&config);
    let image = dir.path().join("read-back.img");
    let nbdcopy = require("nbdcopy", "libnbd-bin");
    run_output(
        Command::new(nbdcopy)
            .arg(format!(
                "nbd+unix:///r5?socket={}",
                dir.path().join("nbd.sock").display()
            ))
            .arg(&image),
    );
    let volume = std::fs::read(&image).unwrap();
    let bad: Vec<String> = acked
        .iter()
        .filter_map(|&at| {
            let block = volume.get(at as usize..at as usize + load.bs)?;
            fio_block_problem(block, at).map(|why| format!("{at}: {why}"))
        })
        .collect();
    assert!(
        bad.is_empty(),
        "{} of {} writes fio saw completed read back wrong after the restart{}: {:?}\n--- the writing run:\n{text}",
        bad.len(),
        acked.len(),
        lose.map_or(String::new(), |m| format!(" without {m}")),
        &bad[..bad.len().min(20)]
    );
    daemon.stop();
}

/// Offsets of the writes fio logged as completed (`time, value, ddir, bs, offset, ...`).
fn acked_offsets(log: &Path) -> Vec<u64> {
    let text = std::fs::read_to_string(log)
        .unwrap_or_else(|e| panic!("fio's completion log {}: {e}", log.display()));
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(',').map(str::trim).collect();
            (f.len() >= 5 && f[2] == "1").then(|| f[4].parse().expect("offset"))
        })
        .collect()
}

/// fio's CRC-32C: the standard one without its final inversion.
fn fio_crc(bytes: &[u8]) -> u32 {
    !nbraid_core::ppl::codec::crc32c(bytes)
}

/// What is wrong with a block fio wrote at `at` (`verify=crc32c`): its header (magic 0xacca,
/// length, offset, CRC of the header's first 36 bytes) and the CRC of the data after the
/// header and its 4-byte checksum. `None`: intact.
fn fio_block_problem(block: &[u8], at: u64) -> Option<String> {
    let u16_at = |i: usize| u16::from_le_bytes(block[i..i + 2].try_into().unwrap());
    let u32_at = |i: usize| u32::from_le_bytes(block[i..i + 4].try_into().unwrap());
    let u64_at = |i: usize| u64::from_le_bytes(block[i..i + 8].try_into().unwrap());
    if u16_at(0) != 0xacca {
        let zero = block.iter().all(|&b| b == 0);
        return Some(format!(
            "no fio header (magic {:#x}, zeros: {zero})",
            u16_at(0)
        ));
    }
    if u32_at(4) as usize != block.len() || u64_at(16) != at {
        return Some(format!(
            "header of another write (len {}, offset {})",
            u32_at(4),
            u64_at(16)
        ));
    }
    if fio_crc(&block[..36]) != u32_at(36) {
        return Some("header checksum wrong".into());
    }
    if fio_crc(&block[44..]) != u32_at(40) {
        return Some("data checksum wrong".into());
    }
    None
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
