//! One 4 KiB block of a member file, read or overwritten behind the daemon's back (silent
//! corruption, as a disk that returns wrong bytes without an error would give).

use super::seeded_bytes;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

pub const BLOCK_BYTES: u64 = 4096;

/// The NBD URI of volume `v` served on the Unix socket `nbd.sock` in `dir`.
pub fn unix_uri(dir: &Path, v: &str) -> String {
    format!("nbd+unix:///{v}?socket={}", dir.join("nbd.sock").display())
}

/// Block `region_block` of the region starting at byte `region_start` of member file `path`.
pub fn block_of(path: &Path, region_start: u64, region_block: u64) -> Vec<u8> {
    let mut f = std::fs::File::open(path).unwrap();
    f.seek(SeekFrom::Start(region_start + region_block * BLOCK_BYTES))
        .unwrap();
    let mut b = vec![0u8; BLOCK_BYTES as usize];
    f.read_exact(&mut b).unwrap();
    b
}

/// Overwrites block `region_block` of the region at `region_start` of member file `path`
/// with random bytes (from `seed`), durably; returns its old bytes.
pub fn corrupt(path: &Path, region_start: u64, region_block: u64, seed: u64) -> Vec<u8> {
    let old = block_of(path, region_start, region_block);
    let mut f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.seek(SeekFrom::Start(region_start + region_block * BLOCK_BYTES))
        .unwrap();
    f.write_all(&seeded_bytes(seed, BLOCK_BYTES)).unwrap();
    f.sync_all().unwrap();
    old
}
