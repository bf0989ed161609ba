//! fio's writes against the real daemon, which is killed under them, and every write fio saw
//! completed checked afterwards with fio's own block format (`fio_crash.rs`,
//! `fio_reshape_crash.rs`).
//!
//! Which writes completed comes from fio's per-I/O completion log (`write_lat_log` with
//! `log_offset`: fio logs a completion only when the write succeeded), and each such block
//! is checked with fio's own block format (magic, its offset, header and data CRC-32C).
//! Not fio's `verify_state_save` + `verify_only`: after the kill fio's saved state can claim
//! writes it never issued (observed: `numberio` 16384 of 1265 issued, and blocks absent
//! from every member file, pristine copies included, expected by the verify pass).

use super::{require, run_output, Daemon};
use std::path::{Path, PathBuf};
use std::process::Command;

/// What fio writes: `rw` in blocks of `bs` bytes, `iodepth` in flight, over `size`.
#[derive(Clone, Copy, Debug)]
pub struct Load {
    pub rw: &'static str,
    pub bs: usize,
    pub iodepth: u32,
    pub size: &'static str,
    /// Each member file's MiB (of RAID 5 of four) without the log's reserve.
    pub member_mib: u64,
    /// A flush after every write (fio's `fsync=1`): with `iodepth` 1, every write but the
    /// last fio saw completed was flushed.
    pub flush_each: bool,
}

/// 4 KiB random writes, 16 in flight: partial-stripe writes that log.
pub const RANDOM: Load = Load {
    rw: "randwrite",
    bs: 4096,
    iodepth: 16,
    size: "64M",
    member_mib: 33,
    flush_each: false,
};

/// A 128 KiB sequential stream, 8 in flight, on 192 KiB stripes: write-through joins
/// neighbours into full stripes (`raid/join.rs`), the rest log. Large enough that the
/// second before the kill does not wrap around (checked).
pub const STREAM: Load = Load {
    rw: "write",
    bs: 128 << 10,
    iodepth: 8,
    size: "1G",
    member_mib: 400,
    flush_each: false,
};

/// The volume under test: a level over file members (created by the daemon).
#[derive(Clone, Copy, Debug)]
pub struct Geometry {
    /// A level's name, or a declared tree (`{ raid5 = [...] }`) over `d0`, `d1`, ...
    pub level: &'static str,
    pub members: usize,
    /// Members' worth of data a row holds (RAID 5 of four: 3).
    pub data_members: usize,
    /// raid10/50/60: the spans; else 0 (the level's own).
    pub spans: usize,
    pub strip: &'static str,
    /// The logical block size offered to clients (fio writes blocks of `Load::bs`).
    pub block_size: u32,
    pub checksums: bool,
    /// `cache`: "write-through" (a write fio saw completed is in the member files) or
    /// "write-back" (a flushed one is).
    pub cache: &'static str,
}

/// `level` over `members` (in `spans`, 0 for the level's own) at `strip`, write-through.
pub fn geometry(
    level: &'static str,
    members: usize,
    spans: usize,
    strip: &'static str,
    block_size: u32,
    checksums: bool,
) -> Geometry {
    let parity_per_span = match level {
        "raid5" | "raid50" => 1,
        "raid6" | "raid60" => 2,
        _ => 0,
    };
    Geometry {
        level,
        members,
        data_members: members - parity_per_span * spans.max(1),
        spans,
        strip,
        block_size,
        checksums,
        cache: "write-through",
    }
}

impl Geometry {
    /// The same geometry behind a write-back cache.
    pub fn write_back(self) -> Geometry {
        Geometry {
            cache: "write-back",
            ..self
        }
    }
}

/// The member files a config declares: `d0`, `d1`, ... of `mib` MiB each (some perhaps not
/// in the volume yet: the members a reshape adds).
pub struct Files<'a> {
    pub mib: &'a [u64],
}

/// `arrays.toml` in `dir`: `files`, volume `v` of `geometry` over the first
/// `geometry.members` of them, NBD on `dir/nbd.sock`, control on `dir/ctl.sock`; with
/// `log_reserve`, its write-hole log in an 8 MiB reserve before the region
/// (`write_hole_log_size`); `volume_extra`: more lines of the volume's.
pub fn write_config(
    dir: &Path,
    geometry: &Geometry,
    files: &Files,
    log_reserve: bool,
    volume_extra: &str,
) -> PathBuf {
    let config = dir.join("arrays.toml");
    let mut text = format!(
        "[daemon]\nlisten = [\"unix:{}\"]\ncontrol = \"{}\"\n\n",
        dir.join("nbd.sock").display(),
        dir.join("ctl.sock").display()
    );
    for (i, mib) in files.mib.iter().enumerate() {
        let mib = mib + if log_reserve { 8 } else { 0 };
        text += &format!("[[member]]\nid = \"d{i}\"\npath = \"d{i}.img\"\nsize = \"{mib}MiB\"\n\n");
    }
    let ids: Vec<String> = (0..geometry.members).map(|i| format!("\"d{i}\"")).collect();
    text += "[[volume]]\nname = \"v\"\n";
    text += &match geometry.level.strip_prefix('{') {
        Some(_) => format!("tree = {}\n", geometry.level),
        None => format!(
            "level = \"{}\"\nmembers = [{}]\n",
            geometry.level,
            ids.join(", ")
        ),
    };
    text += &format!(
        "strip_size = \"{}\"\ncache = \"{}\"\nbitmap_chunk = \"1MiB\"\nblock_size = {}\n",
        geometry.strip, geometry.cache, geometry.block_size
    );
    if geometry.spans > 0 {
        text += &format!("spans = {}\n", geometry.spans);
    }
    if !geometry.checksums {
        text += "checksums = \"off\"\n";
    }
    if log_reserve {
        text += "write_hole_log_size = \"8MiB\"\n";
    }
    text += volume_extra;
    std::fs::write(&config, text).unwrap();
    config
}

/// nbraidd on `config`, once its control socket listens (warnings to the test's stderr).
pub fn start(config: &Path) -> Daemon {
    Daemon::start(config, "warn", false, |l| {
        l.starts_with("nbraidd: control socket")
    })
}

/// fio's job over volume `v` on `dir/nbd.sock`: `load`, crc32c in every block.
pub fn job(fio: &Path, dir: &Path, load: &Load) -> Command {
    let mut c = Command::new(fio);
    c.current_dir(dir)
        .args(["--name=w", "--ioengine=nbd", "--verify=crc32c"])
        .arg(format!("--rw={}", load.rw))
        .arg(format!("--bs={}", load.bs))
        .arg(format!("--iodepth={}", load.iodepth))
        .arg(format!("--size={}", load.size))
        .arg(format!("--fsync={}", u32::from(load.flush_each)))
        .arg(format!(
            "--uri=nbd+unix:///v?socket={}",
            dir.join("nbd.sock").display()
        ));
    c
}

/// [`job`] with its completion log (`acked_clat.1.log` in `dir`) and no verify pass.
pub fn logged_job(fio: &Path, dir: &Path, load: &Load) -> Command {
    let mut c = job(fio, dir, load);
    c.args(["--do_verify=0", "--write_lat_log=acked", "--log_offset=1"]);
    c
}

/// The writes of a killed run of [`logged_job`] that count: those fio logged as completed,
/// less the last one when each is flushed (only it may be unflushed). `text`: fio's output,
/// for the failure messages.
pub fn acked_writes(dir: &Path, load: &Load, text: &str) -> Vec<u64> {
    let log = dir.join("acked_clat.1.log");
    assert!(log.exists(), "fio left no completion log: {text}");
    let mut acked = acked_offsets(&log);
    if load.flush_each {
        assert_eq!(
            load.iodepth, 1,
            "only one write in flight: each but the last flushed"
        );
        acked.pop();
    }
    assert!(
        acked.len() >= 100,
        "fio completed only {} writes before the kill: {text}",
        acked.len()
    );
    acked
}

/// Whether `acked` names no block twice: no block was rewritten, so none can be caught torn
/// by a later write.
pub fn one_pass(acked: &[u64]) -> bool {
    let mut seen = acked.to_vec();
    seen.sort_unstable();
    seen.dedup();
    seen.len() == acked.len()
}

/// Offsets of the writes fio logged as completed (`time, value, ddir, bs, offset, ...`).
pub fn acked_offsets(log: &Path) -> Vec<u64> {
    let text = std::fs::read_to_string(log)
        .unwrap_or_else(|e| panic!("fio's completion log {}: {e}", log.display()));
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(',').map(str::trim).collect();
            (f.len() >= 5 && f[2] == "1").then(|| f[4].parse().expect("offset"))
        })
        .collect()
}

/// Every block of `acked` (fio's of `bs` bytes) that reads back wrong from volume `v` served
/// on `dir/nbd.sock` (read whole with nbdcopy into `dir/read-back.img`, removed after): its
/// offset and what is wrong.
pub fn read_back_problems(dir: &Path, acked: &[u64], bs: usize) -> Vec<String> {
    let image = dir.join("read-back.img");
    let nbdcopy = require("nbdcopy", "libnbd-bin");
    run_output(
        Command::new(nbdcopy)
            .arg(format!(
                "nbd+unix:///v?socket={}",
                dir.join("nbd.sock").display()
            ))
            .arg(&image),
    );
    let volume = std::fs::read(&image).unwrap();
    let _ = std::fs::remove_file(&image);
    acked
        .iter()
        .filter_map(|&at| {
            let Some(block) = volume.get(at as usize..at as usize + bs) else {
                return Some(format!("{at}: past the volume's {} bytes", volume.len()));
            };
            fio_block_problem(block, at).map(|why| format!("{at}: {why}"))
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
pub fn fio_block_problem(block: &[u8], at: u64) -> Option<String> {
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
