//! Hash maps keyed by numbers the engine derives (block, page, stripe and band numbers,
//! sequence numbers, tickets), hashed with one multiply per word. Hot paths look such keys
//! up several times per request — the checksum table per 4 KiB block, the write-hole log per
//! band — where the default SipHash cost more than the work around it (the CRC of the
//! block's bytes; a log round's bookkeeping). The keys are numbers the engine derives
//! (from client offsets too, but dense and bounded by the device's size): keys that differ
//! only in bits past 2^39 share buckets, far beyond any device's block or stripe numbers.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// One multiply per word written (see the module's docs).
#[derive(Default)]
pub struct NumHasher(u64);

impl Hasher for NumHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ b as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u64(&mut self, n: u64) {
        // The high bits of a product mix every bit of `n`; hashbrown takes its bucket from
        // the low bits and its tag from the top seven, so fold the high half down.
        let x = (self.0 ^ n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.0 = x ^ (x >> 29);
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(n as u64);
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
}

pub type NumBuild = BuildHasherDefault<NumHasher>;
pub type NumMap<K, V> = HashMap<K, V, NumBuild>;
pub type NumSet<K> = HashSet<K, NumBuild>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    fn spread(hashes: &[u64]) -> (usize, usize) {
        let low: HashSet<u64> = hashes.iter().map(|h| h & 1023).collect();
        let top: HashSet<u64> = hashes.iter().map(|h| h >> 57).collect();
        (low.len(), top.len())
    }

    #[test]
    fn dense_numbers_spread_over_buckets_and_tags() {
        let b = NumBuild::default();
        let hashes: Vec<u64> = (0..4096u64).map(|k| b.hash_one(k)).collect();
        let (low, top) = spread(&hashes);
        assert!(low > 900, "low bits pick the bucket: {low} of 1024");
        assert_eq!(top, 128, "the top seven bits are the tag");
    }

    #[test]
    fn bands_of_dense_stripes_spread_too() {
        // (stripe, band) keys: a few bands in each of many stripes, as the log keeps them.
        let b = NumBuild::default();
        let hashes: Vec<u64> = (0..1024u64)
            .flat_map(|s| (0..4u32).map(move |band| (s, band)))
            .map(|k| b.hash_one(k))
            .collect();
        let (low, top) = spread(&hashes);
        assert!(low > 900, "low bits pick the bucket: {low} of 1024");
        assert_eq!(top, 128, "the top seven bits are the tag");
        let distinct: HashSet<u64> = hashes.iter().copied().collect();
        assert_eq!(distinct.len(), hashes.len(), "no two keys hash alike");
    }
}
