//! The checksum area's bytes and the decisions over them, as pure functions: where a block's
//! entry lives, what a block's checksum is, whether a block read matches. No I/O here.
//!
//! The area on a member, for one volume region of `region_len_bytes`:
//! ```text
//! 0        4 KiB                                  4 KiB + 8 × blocks (rounded up to 4 KiB)
//! | header | entries: 8 bytes per 4 KiB block of the region, in block order |
//! ```
//! The header is a bitmap: bit *g* set means the entries of page group *g* may lag their data
//! (written since the last clean start), so after an unclean shutdown they are not trusted.
//! An entry is `crc: u32` then `tag: u32`, little-endian; `tag == ENTRY_TAG` means the crc is
//! known, any other tag (a blank area reads zero) means "no checksum": the block is not
//! verified until it is written again.

use crate::crc32c::Crc;

/// Bytes of data each entry covers.
pub const BLOCK_BYTES: u64 = 4096;
/// Bytes of one entry.
pub const ENTRY_BYTES: u64 = 8;
/// Bytes of one page of entries (the unit of caching and writing back).
pub const PAGE_BYTES: u64 = 4096;
/// Entries per page: one page covers 2 MiB of the region.
pub const ENTRIES_PER_PAGE: u64 = PAGE_BYTES / ENTRY_BYTES;
/// Bytes of the header bitmap at the start of the area.
pub const HEADER_BYTES: u64 = 4096;
/// Bits in the header.
pub const HEADER_BITS: u64 = HEADER_BYTES * 8;
/// Marks an entry whose crc is known ("CSUM").
pub const ENTRY_TAG: u32 = 0x4d55_5343;

/// Bytes of the checksum area a region of `region_len_bytes` needs: the header and one entry
/// per 4 KiB block, in whole pages.
pub fn area_bytes(region_len_bytes: u64) -> u64 {
    let blocks = region_len_bytes.div_ceil(BLOCK_BYTES);
    HEADER_BYTES + (blocks * ENTRY_BYTES).next_multiple_of(PAGE_BYTES)
}

/// Pages of entries for a region of `region_len_bytes`.
pub fn pages(region_len_bytes: u64) -> u64 {
    region_len_bytes
        .div_ceil(BLOCK_BYTES)
        .div_ceil(ENTRIES_PER_PAGE)
}

/// Pages per header bit: one page per bit while the header has room, more for large regions.
pub fn pages_per_group(region_len_bytes: u64) -> u64 {
    pages(region_len_bytes).div_ceil(HEADER_BITS).max(1)
}

/// Region bytes (at least; in whole page groups) a write that continues a forward stream
/// marks past the groups it needs: a sequential writer then pays one header write (FUA, on
/// the critical path) per 32 MiB of each member's region instead of one per group. Marking
/// more only costs protection after an unclean shutdown, of blocks the stream is about to
/// write anyway.
pub const MARK_AHEAD_BYTES: u64 = 32 << 20;

/// The header bits to set for a write needing groups `first..=last` (not all durable yet)
/// in a header of `groups` bits, `streaming` whether group `first - 1` was written since
/// the open: a write continuing a stream marks [`MARK_AHEAD_BYTES`] more, rounded up to
/// whole groups (a single group of more than 32 MiB on regions past 1 TiB); any other
/// marks what it needs.
pub fn groups_to_mark(
    first: u64,
    last: u64,
    streaming: bool,
    groups: u64,
    pages_per_group: u64,
) -> std::ops::RangeInclusive<u64> {
    assert!(first <= last && last < groups, "groups within the header");
    if !streaming {
        return first..=last;
    }
    let group_bytes = pages_per_group * ENTRIES_PER_PAGE * BLOCK_BYTES;
    let ahead = MARK_AHEAD_BYTES.div_ceil(group_bytes);
    first..=(last + ahead).min(groups - 1)
}

/// The checksum of one block: CRC-32C of the block's absolute number on the member (8 bytes,
/// little-endian) and its bytes. Mixing in the place catches a misdirected write and a
/// member returning another block's bytes, not only flipped bits.
pub fn block_crc(member_block: u64, data: &[u8]) -> u32 {
    debug_assert_eq!(data.len() as u64, BLOCK_BYTES);
    let mut c = Crc::new();
    c.update(&member_block.to_le_bytes());
    c.update(data);
    c.finish()
}

/// One entry as stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockSum {
    /// No checksum known: never written since the area was made, or untrusted after a crash.
    Unknown,
    Known(u32),
}

impl BlockSum {
    pub fn decode(bytes: &[u8]) -> BlockSum {
        let crc = u32::from_le_bytes(bytes[0..4].try_into().expect("4 bytes"));
        let tag = u32::from_le_bytes(bytes[4..8].try_into().expect("4 bytes"));
        if tag == ENTRY_TAG {
            BlockSum::Known(crc)
        } else {
            BlockSum::Unknown
        }
    }

    pub fn encode(self, out: &mut [u8]) {
        let (crc, tag) = match self {
            BlockSum::Unknown => (0, 0),
            BlockSum::Known(c) => (c, ENTRY_TAG),
        };
        out[0..4].copy_from_slice(&crc.to_le_bytes());
        out[4..8].copy_from_slice(&tag.to_le_bytes());
    }
}

/// What a block read says against its entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The checksum matches (or a write in flight explains the bytes).
    Good,
    /// Nothing to check against.
    Unchecked,
    /// The bytes are not what was written: a read error of this block.
    Bad { stored: u32, computed: u32 },
}

/// Decides a block read: `entry` as stored, `computed` the crc of the bytes read, `in_flight`
/// the checksums of writes to the block not yet answered (their bytes may or may not have
/// landed, and the bytes they replace are as good).
pub fn verdict(entry: BlockSum, computed: u32, in_flight: &[u32]) -> Verdict {
    match entry {
        BlockSum::Unknown => Verdict::Unchecked,
        BlockSum::Known(c) if c == computed || in_flight.contains(&computed) => Verdict::Good,
        BlockSum::Known(stored) => Verdict::Bad { stored, computed },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn area_holds_header_and_an_entry_per_block_in_whole_pages() {
        assert_eq!(area_bytes(4096), 8192);
        assert_eq!(area_bytes(2 << 20), 8192);
        assert_eq!(area_bytes((2 << 20) + 4096), 12288);
        // 1 GiB of region: 2 MiB of entries.
        assert_eq!(area_bytes(1 << 30), 4096 + (2 << 20));
        assert_eq!(pages(1 << 30), 512);
        assert_eq!(pages_per_group(1 << 30), 1);
        // 64 GiB per bit once the header is full: 32768 pages of 2 MiB.
        assert_eq!(pages_per_group(64 << 30), 1);
        assert_eq!(pages_per_group((64 << 30) + 1), 2);
    }

    #[test]
    fn entries_round_trip_and_blank_bytes_mean_unknown() {
        let mut b = [0u8; 8];
        assert_eq!(BlockSum::decode(&b), BlockSum::Unknown);
        BlockSum::Known(0xdead_beef).encode(&mut b);
        assert_eq!(BlockSum::decode(&b), BlockSum::Known(0xdead_beef));
        BlockSum::Unknown.encode(&mut b);
        assert_eq!(b, [0; 8]);
        // A crc of zero is still known (the tag says so).
        BlockSum::Known(0).encode(&mut b);
        assert_eq!(BlockSum::decode(&b), BlockSum::Known(0));
    }

    #[test]
    fn the_place_is_part_of_the_checksum() {
        let data = vec![7u8; 4096];
        assert_ne!(block_crc(1, &data), block_crc(2, &data));
        assert_eq!(block_crc(3, &data), block_crc(3, &data));
        let mut flipped = data.clone();
        flipped[100] ^= 1;
        assert_ne!(block_crc(1, &data), block_crc(1, &flipped));
    }

    #[test]
    fn a_stream_marks_ahead_and_a_lone_write_marks_what_it_needs() {
        // 2 MiB groups: 16 more; a lone write or the first of a stream: only its own.
        assert_eq!(groups_to_mark(5, 6, false, 100, 1), 5..=6);
        assert_eq!(groups_to_mark(5, 6, true, 100, 1), 5..=22);
        assert_eq!(groups_to_mark(0, 0, true, 100, 1), 0..=16);
        // Never past the header's last bit.
        assert_eq!(groups_to_mark(90, 91, true, 100, 1), 90..=99);
        // Groups of 64 MiB (large regions): one more.
        assert_eq!(groups_to_mark(5, 5, true, 100, 32), 5..=6);
    }

    #[test]
    fn verdicts() {
        assert_eq!(verdict(BlockSum::Unknown, 5, &[]), Verdict::Unchecked);
        assert_eq!(verdict(BlockSum::Known(5), 5, &[]), Verdict::Good);
        assert_eq!(verdict(BlockSum::Known(5), 6, &[6]), Verdict::Good);
        assert_eq!(
            verdict(BlockSum::Known(5), 6, &[7]),
            Verdict::Bad {
                stored: 5,
                computed: 6
            }
        );
    }
}
