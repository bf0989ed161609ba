//! The write-intent bitmap (md's idea): one bit per `chunk_bytes` of the volume, set on disk
//! (FUA, every current member) before a write to a region whose bit is clear proceeds, and
//! cleared after flushes: a bit drops once a completed FLUSH covered every write to its region
//! and none is in flight; the flush then writes the changed blocks (off the write path). After an unclean shutdown only regions whose bit is set can hold
//! copies or parity that disagree, so only they are resynced.
//!
//! The cost on the write path is one short lock per request while the region's bit is set;
//! a disk write only when a region gets its first write since it was last cleared, so a
//! chunk much larger than a request (64 MiB by default) keeps it rare. A flush clears only
//! regions left alone for a while (the array's clear delay, md's bitmap daemon sleep): with a
//! flush every few writes (a database's commits) clearing at once would write the bitmap on
//! every flush and set the bits again with the next writes. Bits are never
//! cleared while some member is failed, absent or stale: a member that comes back later is
//! resynced over exactly the regions written without it.
//!
//! On disk: bit `r` (the region `[r × chunk, (r+1) × chunk)` of the volume) is bit `r % 8` of
//! byte `r / 8` of the area; the area is a whole number of 4 KiB blocks and only blocks that
//! changed are written.

use parking_lot::Mutex;
use std::time::{Duration, Instant};

/// Default bytes of the volume per bit: large enough that 4 KiB random writes set a new bit
/// rarely (md's cost with small chunks), small enough that a crash resyncs a few regions
/// rather than the whole array (64 MiB resyncs in well under a second on one SSD).
pub const DEFAULT_CHUNK_BYTES: u64 = 64 << 20;
/// Default clear delay: a region no write touched for this long has its bit cleared by the
/// next flush (md clears after its bitmap daemon's sleep of 5 s, twice).
pub const DEFAULT_CLEAR_DELAY: Duration = Duration::from_secs(5);
/// The bitmap is written in blocks of this size.
pub const BLOCK_BYTES: u64 = 4096;
/// Most bytes of bitmap per member and volume: the chunk grows for volumes so large that the
/// default chunk would need more (64 KiB × 8 bits × 64 MiB = 32 TiB).
pub const MAX_BITMAP_BYTES: u64 = 64 << 10;

/// The chunk a volume of `capacity` bytes uses when `wanted` bytes per bit were asked for: a
/// power of two ≥ 4 KiB, grown until the bitmap fits [`MAX_BITMAP_BYTES`].
pub fn chunk_for(capacity: u64, wanted: u64) -> u64 {
    let mut chunk = wanted.max(BLOCK_BYTES).next_power_of_two();
    while capacity.div_ceil(chunk).div_ceil(8) > MAX_BITMAP_BYTES {
        chunk *= 2;
    }
    chunk
}

/// Bytes of the on-disk bitmap of a volume of `capacity` bytes with `chunk` bytes per bit.
pub fn area_bytes(capacity: u64, chunk: u64) -> u64 {
    capacity
        .div_ceil(chunk)
        .div_ceil(8)
        .next_multiple_of(BLOCK_BYTES)
        .max(BLOCK_BYTES)
}

/// The regions whose bits are set in `bytes` (an on-disk bitmap), as byte ranges of a volume
/// of `capacity` bytes, adjacent regions merged.
pub fn dirty_ranges(bytes: &[u8], chunk: u64, capacity: u64) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    let regions = capacity.div_ceil(chunk);
    for (i, &b) in bytes.iter().enumerate() {
        if b == 0 {
            continue;
        }
        for bit in 0..8 {
            let r = i as u64 * 8 + bit;
            if b & (1 << bit) == 0 || r >= regions {
                continue;
            }
            let (s, e) = (r * chunk, ((r + 1) * chunk).min(capacity));
            match out.last_mut() {
                Some(last) if last.1 == s => last.1 = e,
                _ => out.push((s, e)),
            }
        }
    }
    out
}

/// The in-memory side of the bitmap. Decisions only: callers write the blocks it hands out.
pub struct Intent {
    chunk: u64,
    /// The zero of `State::last_end_ms`.
    start: Instant,
    state: Mutex<State>,
}

struct State {
    /// Bits that must be set on disk (as bytes, the on-disk encoding).
    want: Vec<u8>,
    /// The bits as last written (and known durable).
    on_disk: Vec<u8>,
    /// Bits known set on disk and not cleared in memory since: a request may proceed on
    /// them without a bitmap write. A bit cleared in memory may be on its way to the disk
    /// clear (a bitmap write in flight took it), so it is confirmed again only by a write
    /// that took it set.
    confirmed: Vec<u8>,
    /// Requests in flight per region.
    pending: Vec<u32>,
    /// Per region: the flush epoch in which its last write completed.
    written: Vec<u64>,
    /// Per region: when its last write completed, in ms since `Intent::start`.
    last_end_ms: Vec<u64>,
    /// Bumped when a flush starts: writes completed before then have a smaller epoch.
    epoch: u64,
}

/// A request's hold on its regions (give it back with [`Intent::end`]).
#[derive(Debug)]
pub struct Hold {
    first: u64,
    last: u64,
}

impl Intent {
    /// An intent map over `capacity` bytes with `chunk` bytes per bit, starting from what the
    /// disk holds (`on_disk`, `area_bytes` long): those bits stay set until a flush clears them.
    /// Refused (the sizes come from a member's records): a chunk that is not a power of two
    /// of at least 4 KiB, or bytes with fewer bits than the volume has regions.
    pub fn new(capacity: u64, chunk: u64, on_disk: Vec<u8>) -> Result<Intent, String> {
        if !chunk.is_power_of_two() || chunk < BLOCK_BYTES {
            return Err(format!(
                "a write-intent bitmap chunk of {chunk} bytes (a power of two of at least {BLOCK_BYTES})"
            ));
        }
        let regions = capacity.div_ceil(chunk);
        if (on_disk.len() as u64).saturating_mul(8) < regions {
            return Err(format!(
                "a {}-byte write-intent bitmap cannot hold the {regions} regions of {chunk} bytes of a {capacity}-byte volume",
                on_disk.len()
            ));
        }
        let regions = regions as usize;
        // Bits past the last region mean nothing (a member may hold any there): dropped,
        // so no region index past the volume is ever looked up.
        let mut on_disk = on_disk;
        for (i, byte) in on_disk.iter_mut().enumerate() {
            let first_bit = i * 8;
            if first_bit + 8 > regions {
                *byte &= ((1u16 << regions.saturating_sub(first_bit).min(8)) - 1) as u8;
            }
        }
        Ok(Intent {
            chunk,
            start: Instant::now(),
            state: Mutex::new(State {
                want: on_disk.clone(),
                confirmed: on_disk.clone(),
                on_disk,
                pending: vec![0; regions],
                written: vec![0; regions],
                last_end_ms: vec![0; regions],
                epoch: 1,
            }),
        })
    }

    pub fn chunk_bytes(&self) -> u64 {
        self.chunk
    }

    /// A request over `[offset, offset+len)` begins: its regions stay set until it ends.
    /// Returns whether a bit it needs is not on disk yet (write [`Self::dirty_blocks`] first).
    pub fn begin(&self, offset: u64, len: u64) -> (Hold, bool) {
        let first = offset / self.chunk;
        let last = (offset + len.max(1) - 1) / self.chunk;
        let mut st = self.state.lock();
        let mut missing = false;
        for r in first..=last {
            let (byte, bit) = ((r / 8) as usize, 1u8 << (r % 8));
            st.pending[r as usize] += 1;
            st.want[byte] |= bit;
            missing |= st.confirmed[byte] & bit == 0;
        }
        (Hold { first, last }, missing)
    }

    /// The request holding `h` has completed (successfully or not).
    pub fn end(&self, h: Hold) {
        self.end_at(h, self.now_ms())
    }

    fn end_at(&self, h: Hold, now_ms: u64) {
        let mut st = self.state.lock();
        let epoch = st.epoch;
        for r in h.first..=h.last {
            st.pending[r as usize] -= 1;
            st.written[r as usize] = epoch;
            st.last_end_ms[r as usize] = now_ms;
        }
    }

    fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    /// Whether every bit of the hold's regions is confirmed on disk.
    pub fn covered(&self, h: &Hold) -> bool {
        let st = self.state.lock();
        (h.first..=h.last).all(|r| st.confirmed[(r / 8) as usize] & (1 << (r % 8)) != 0)
    }

    /// The 4 KiB blocks whose wanted bits differ from the disk: (byte offset in the area,
    /// bytes). Write them all, then call [`Self::written`] with the same list.
    pub fn dirty_blocks(&self) -> Vec<(u64, Vec<u8>)> {
        let st = self.state.lock();
        let b = BLOCK_BYTES as usize;
        (0..st.want.len().div_ceil(b))
            .filter(|&i| {
                let r = i * b..((i + 1) * b).min(st.want.len());
                st.want[r.clone()] != st.on_disk[r]
            })
            .map(|i| {
                let r = i * b..((i + 1) * b).min(st.want.len());
                ((i * b) as u64, st.want[r].to_vec())
            })
            .collect()
    }

    /// Bytes of the on-disk bitmap (every member's area is this long).
    pub fn image_bytes(&self) -> u64 {
        self.state.lock().want.len() as u64
    }

    /// What every current member's bitmap holds (for a member joining them; call it holding
    /// the bitmap writer's lock).
    pub fn on_disk_image(&self) -> Vec<u8> {
        self.state.lock().on_disk.clone()
    }

    /// Blocks from [`Self::dirty_blocks`] are durable on every current member (call it with
    /// none when there were none, still holding the bitmap writer's lock: it confirms what the
    /// disk holds). O(bitmap bytes), once per bitmap write.
    pub fn written(&self, blocks: &[(u64, Vec<u8>)]) {
        let mut st = self.state.lock();
        let st = &mut *st;
        for (at, bytes) in blocks {
            let at = *at as usize;
            st.on_disk[at..at + bytes.len()].copy_from_slice(bytes);
        }
        // No bitmap write is in flight now: a bit set on disk and wanted is confirmed.
        for ((c, w), d) in st.confirmed.iter_mut().zip(&st.want).zip(&st.on_disk) {
            *c = w & d;
        }
    }

    /// A flush starts: returns the epoch it covers (every write completed before now).
    pub fn flush_started(&self) -> u64 {
        let mut st = self.state.lock();
        st.epoch += 1;
        st.epoch - 1
    }

    /// A flush that covered epoch `e` succeeded with every member current: regions with no
    /// request in flight and no write completed since are durable, so their bits may go
    /// (lazily: they reach the disk with the next bitmap write) — those whose last write
    /// ended at least `min_idle` ago (a region in use keeps its bit rather than having it
    /// cleared and set again). O(bitmap bytes). Returns whether some bit was cleared.
    pub fn flushed(&self, e: u64, min_idle: Duration) -> bool {
        self.flushed_at(e, min_idle, self.now_ms())
    }

    fn flushed_at(&self, e: u64, min_idle: Duration, now_ms: u64) -> bool {
        // A region is idle when its last write ended at or before this (ms since `start`).
        let idle_before_ms = now_ms.checked_sub(min_idle.as_millis() as u64);
        let mut st = self.state.lock();
        let st = &mut *st;
        let mut cleared = false;
        for byte in 0..st.want.len() {
            if st.want[byte] == 0 {
                continue;
            }
            for bit in 0..8 {
                let r = byte * 8 + bit;
                // Only set bits are looked at: the bytes hold bits past the last region.
                if st.want[byte] & (1 << bit) != 0
                    && st.pending[r] == 0
                    && st.written[r] <= e
                    && idle_before_ms.is_some_and(|t| st.last_end_ms[r] <= t)
                {
                    st.want[byte] &= !(1 << bit);
                    st.confirmed[byte] &= !(1 << bit);
                    cleared = true;
                }
            }
        }
        cleared
    }

    /// Whether every region is idle and clear in memory (a clean shutdown may write the
    /// bitmap all clear).
    pub fn all_clear(&self) -> bool {
        self.state.lock().want.iter().all(|&b| b == 0)
    }

    /// The regions set in memory, as byte ranges of the volume.
    pub fn set_ranges(&self, capacity: u64) -> Vec<(u64, u64)> {
        dirty_ranges(&self.state.lock().want, self.chunk, capacity)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn chunk_grows_to_fit_and_area_is_whole_blocks() {
        assert_eq!(chunk_for(1 << 30, 64 * MIB), 64 * MIB);
        assert_eq!(chunk_for(1 << 30, 1000), 4096);
        // 64 TiB needs 128 MiB chunks to fit 64 KiB of bits.
        assert_eq!(chunk_for(64 << 40, 64 * MIB), 128 * MIB);
        assert_eq!(area_bytes(1 << 30, 64 * MIB), 4096);
        assert_eq!(area_bytes(8 << 40, 64 * MIB), 16 << 10);
    }

    #[test]
    fn a_new_region_needs_a_disk_write_once() {
        let cap = 256 * MIB;
        let i = Intent::new(cap, 64 * MIB, vec![0; 4096]).unwrap();
        let (h, missing) = i.begin(70 * MIB, 4096);
        assert!(missing);
        let blocks = i.dirty_blocks();
        assert_eq!(blocks.len(), 1);
        assert_eq!(blocks[0].1[0], 0b10);
        i.written(&blocks);
        assert!(i.covered(&h));
        i.end(h);
        let (h2, missing) = i.begin(65 * MIB, 4096);
        assert!(!missing, "the bit is on disk already");
        i.end(h2);
        // Cleared in memory (a bitmap write may be taking the clear to the disk): every
        // request there needs a bitmap write that took the bit set again.
        i.flushed(i.flush_started(), Duration::ZERO);
        let in_flight = i.dirty_blocks(); // a write of the clear, in flight
        let (h2, missing) = i.begin(65 * MIB, 4096);
        assert!(missing);
        let (h3, missing) = i.begin(66 * MIB, 4096);
        assert!(
            missing,
            "still not confirmed: the write in flight clears it"
        );
        i.written(&in_flight);
        assert!(!i.covered(&h2));
        i.written(&i.dirty_blocks());
        assert!(i.covered(&h2) && i.covered(&h3));
        i.end(h3);
        i.end(h2);
        // Cleared in memory (a write of the bitmap may be taking the clear to the disk):
        // the next write there writes the bit again.
        i.flushed(i.flush_started(), Duration::ZERO);
        let (h2, missing) = i.begin(65 * MIB, 4096);
        assert!(missing);
        i.written(&i.dirty_blocks());
        i.end(h2);
        assert!(i.dirty_blocks().is_empty());
    }

    #[test]
    fn bits_clear_only_after_a_flush_covering_every_write() {
        let i = Intent::new(256 * MIB, 64 * MIB, vec![0; 4096]).unwrap();
        let (a, _) = i.begin(0, 4096); // region 0, still in flight at the flush
        let (b, _) = i.begin(64 * MIB, 4096); // region 1, completes before the flush
        i.written(&i.dirty_blocks());
        i.end(b);
        let e = i.flush_started();
        let (c, _) = i.begin(128 * MIB, 4096); // region 2, completes after the flush started
        i.end(c);
        i.flushed(e, Duration::ZERO);
        assert_eq!(
            i.set_ranges(256 * MIB),
            vec![(0, 64 * MIB), (128 * MIB, 192 * MIB)]
        );
        i.end(a);
        let e = i.flush_started();
        i.flushed(e, Duration::ZERO);
        assert!(i.all_clear());
        // The clears reach the disk with the next bitmap write.
        assert_eq!(i.dirty_blocks()[0].1[0], 0);
    }

    #[test]
    fn a_region_in_use_keeps_its_bit_across_flushes_until_left_alone() {
        let i = Intent::new(256 * MIB, 64 * MIB, vec![0; 4096]).unwrap();
        let (a, _) = i.begin(0, 4096);
        i.written(&i.dirty_blocks());
        i.end(a);
        let hour = Duration::from_secs(3600);
        assert!(!i.flushed(i.flush_started(), hour), "written just now");
        assert_eq!(i.set_ranges(256 * MIB), vec![(0, 64 * MIB)]);
        let (b, missing) = i.begin(4096, 4096);
        assert!(
            !missing,
            "still on disk: no bitmap write for the next write"
        );
        i.end(b);
        // A clean shutdown (or an idle volume) clears whatever a flush covered.
        assert!(i.flushed(i.flush_started(), Duration::ZERO));
        assert!(i.all_clear());
    }

    #[test]
    fn a_bit_clears_at_the_first_flush_after_the_delay() {
        // 3 regions: bits 3..7 of the byte lie past the last one.
        let i = Intent::new(3 * 64 * MIB, 64 * MIB, vec![0; 4096]).unwrap();
        let delay = Duration::from_millis(100);
        let (a, _) = i.begin(0, 4096);
        let (b, _) = i.begin(2 * 64 * MIB, 4096);
        i.written(&i.dirty_blocks());
        i.end_at(a, 1000);
        i.end_at(b, 1050);
        assert!(!i.flushed_at(i.flush_started(), delay, 1099));
        assert!(
            i.flushed_at(i.flush_started(), delay, 1100),
            "region 0 idle 100 ms"
        );
        assert_eq!(i.set_ranges(3 * 64 * MIB), vec![(128 * MIB, 192 * MIB)]);
        assert!(i.flushed_at(i.flush_started(), delay, 1150));
        assert!(i.all_clear());
    }

    /// Sizes read from a member are refused, never asserted on.
    #[test]
    fn a_bitmap_too_short_for_the_volume_or_a_bad_chunk_is_refused() {
        let e = Intent::new(1 << 40, 4096, vec![0; 4096])
            .err()
            .expect("too short");
        assert!(e.contains("cannot hold"), "{e}");
        assert!(Intent::new(1 << 30, 5000, vec![0; 4096]).is_err());
    }

    /// Bits a member holds past the volume's last region are dropped, not indexed.
    #[test]
    fn bits_past_the_last_region_are_dropped() {
        let i = Intent::new(3 * 64 * MIB, 64 * MIB, vec![0xff; 4096]).unwrap();
        assert_eq!(i.set_ranges(3 * 64 * MIB), vec![(0, 3 * 64 * MIB)]);
        assert!(i.flushed(i.flush_started(), Duration::ZERO));
        assert!(i.all_clear());
    }

    #[test]
    fn dirty_ranges_merge_and_stop_at_capacity() {
        let bytes = [0b1000_0111u8, 0b1];
        let got = dirty_ranges(&bytes, 4096, 9 * 4096 - 512);
        assert_eq!(
            got,
            vec![(0, 3 * 4096), (7 * 4096, 9 * 4096 - 512)],
            "bit 8 is the last region, cut at the capacity"
        );
    }
}
