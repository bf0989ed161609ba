//! The bytes of the partial-parity log (docs/FORMAT.md, "The RAID 5/6 write hole"): a log
//! area is a ring of batches, each a 64-byte header and entries, one CRC-32C over the batch.
//! Decoding is total: any bytes give a batch or `None`, never a panic (fuzzed in the tests).

use super::{BAND_BYTES, SECTOR_BYTES};

/// First bytes of every batch.
pub const BATCH_MAGIC: [u8; 8] = *b"NBRAIDPL";
/// The one log format version.
pub const LOG_VERSION: u32 = 1;
/// Bytes of a batch header.
pub const BATCH_HEADER_BYTES: usize = 64;
/// Bytes of an entry header (before its masks).
pub const ENTRY_HEADER_BYTES: usize = 32;
/// Batches start on, and are written in, blocks of this size.
pub const LOG_BLOCK_BYTES: u64 = 4096;

/// One logged band of a stripe: which sectors of which data chunks are being written, and the
/// partial parity of everything else.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Orders entries of one life: the newest entry of a band wins.
    pub seq: u64,
    /// The parity group (preorder number among the volume's parity groups).
    pub group: u32,
    pub stripe: u64,
    /// Rows `[band × 4096, band × 4096 + sectors × 512)` of every chunk of the stripe.
    pub band: u32,
    /// Sectors in the band (1 … 8).
    pub sectors: u8,
    /// Parity chunks of the stripe (1 or 2).
    pub parity: u8,
    /// Per data chunk (logical order): bit `s` set when sector `s` of the band is written.
    pub masks: Vec<u8>,
    /// Partial P (then partial Q for RAID 6) of the sectors [`Entry::stored`] names, in
    /// order: XOR (and md's Q syndrome) of the data chunks not written there.
    pub pp: Vec<u8>,
    pub pq: Vec<u8>,
}

impl Entry {
    /// Sectors some chunk writes.
    pub fn covered(&self) -> u8 {
        self.masks.iter().fold(0, |a, m| a | m)
    }

    /// Sectors where some chunk is written and some is not: the partial parity is stored
    /// for these only (where every chunk is written it is zero).
    pub fn stored(&self) -> u8 {
        let all = self.masks.iter().fold(0xff, |a, m| a & m);
        self.covered() & !all
    }

    fn masks_bytes(k: usize) -> usize {
        k.next_multiple_of(8)
    }

    /// Bytes of the encoded entry.
    pub fn encoded_len(&self) -> usize {
        let n = self.stored().count_ones() as usize * SECTOR_BYTES;
        ENTRY_HEADER_BYTES + Self::masks_bytes(self.masks.len()) + n * usize::from(self.parity)
    }
}

/// A batch as read back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Batch {
    /// The volume life that wrote it (a later open's batches supersede every earlier one).
    pub life: u64,
    /// Entries of this ring with a smaller sequence number are settled: never replayed.
    pub tail: u64,
    pub entries: Vec<Entry>,
}

/// Bytes of the batch of `entries` on the ring: header and entries, padded to whole log
/// blocks.
pub fn batch_bytes(entries: &[&Entry]) -> usize {
    let len = BATCH_HEADER_BYTES + entries.iter().map(|e| e.encoded_len()).sum::<usize>();
    (len as u64).next_multiple_of(LOG_BLOCK_BYTES) as usize
}

/// Encodes `entries` as one batch, padded to whole log blocks.
pub fn encode_batch(life: u64, tail: u64, entries: &[&Entry]) -> Vec<u8> {
    let mut b = vec![0; batch_bytes(entries)];
    encode_batch_into(life, tail, entries, &mut b);
    b
}

/// [`encode_batch`] into `out` (of [`batch_bytes`] bytes, whatever it held: every byte is
/// written), so the log writes a batch from the buffer it was encoded in.
pub fn encode_batch_into(life: u64, tail: u64, entries: &[&Entry], out: &mut [u8]) {
    let len = BATCH_HEADER_BYTES + entries.iter().map(|e| e.encoded_len()).sum::<usize>();
    assert_eq!(out.len(), batch_bytes(entries), "batch buffer length");
    let mut w = Cursor { out, at: 0 };
    w.put(&BATCH_MAGIC);
    w.put(&LOG_VERSION.to_le_bytes());
    w.put(&0u32.to_le_bytes()); // CRC, filled below
    w.put(&(len as u32).to_le_bytes());
    w.put(&(entries.len() as u32).to_le_bytes());
    w.put(&life.to_le_bytes());
    w.put(&tail.to_le_bytes());
    w.zeros_to(BATCH_HEADER_BYTES);
    for e in entries {
        let at = w.at;
        w.put(&(e.encoded_len() as u32).to_le_bytes());
        w.put(&e.group.to_le_bytes());
        w.put(&e.seq.to_le_bytes());
        w.put(&e.stripe.to_le_bytes());
        w.put(&e.band.to_le_bytes());
        w.put(&(e.masks.len() as u16).to_le_bytes());
        w.put(&[e.parity, e.sectors]);
        w.put(&e.masks);
        w.zeros_to(at + ENTRY_HEADER_BYTES + Entry::masks_bytes(e.masks.len()));
        w.put(&e.pp);
        if e.parity == 2 {
            w.put(&e.pq);
        }
        debug_assert_eq!(w.at - at, e.encoded_len());
    }
    assert_eq!(w.at, len, "batch length");
    let end = w.out.len();
    w.zeros_to(end);
    let crc = crc32c(&out[..len]);
    out[12..16].copy_from_slice(&crc.to_le_bytes());
}

/// Writes bytes in order into a buffer.
struct Cursor<'a> {
    out: &'a mut [u8],
    at: usize,
}

impl Cursor<'_> {
    fn put(&mut self, bytes: &[u8]) {
        self.out[self.at..self.at + bytes.len()].copy_from_slice(bytes);
        self.at += bytes.len();
    }

    fn zeros_to(&mut self, end: usize) {
        self.out[self.at..end].fill(0);
        self.at = end;
    }
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// The batch starting at `bytes[0]`, and its length, or `None` (no batch, another version, a
/// bad checksum, or an impossible field).
pub fn decode_batch(bytes: &[u8]) -> Option<(Batch, usize)> {
    if bytes.get(..8)? != BATCH_MAGIC || u32_at(bytes, 8)? != LOG_VERSION {
        return None;
    }
    let stored = u32_at(bytes, 12)?;
    let len = u32_at(bytes, 16)? as usize;
    if len < BATCH_HEADER_BYTES || len > bytes.len() {
        return None;
    }
    let body = &bytes[..len];
    let mut crc = Crc::new();
    crc.update(&body[..12]);
    crc.update(&[0; 4]);
    crc.update(&body[16..]);
    if crc.finish() != stored {
        return None;
    }
    let count = u32_at(body, 20)? as usize;
    let life = u64_at(body, 24)?;
    let tail = u64_at(body, 32)?;
    let mut entries = Vec::new();
    let mut at = BATCH_HEADER_BYTES;
    for _ in 0..count {
        let e = decode_entry(body.get(at..)?)?;
        at += e.encoded_len();
        entries.push(e);
    }
    (at == len).then_some((
        Batch {
            life,
            tail,
            entries,
        },
        len,
    ))
}

fn decode_entry(b: &[u8]) -> Option<Entry> {
    let len = u32_at(b, 0)? as usize;
    let group = u32_at(b, 4)?;
    let seq = u64_at(b, 8)?;
    let stripe = u64_at(b, 16)?;
    let band = u32_at(b, 24)?;
    let k = usize::from(u16::from_le_bytes(b.get(28..30)?.try_into().ok()?));
    let parity = *b.get(30)?;
    let sectors = *b.get(31)?;
    let band_sectors = (BAND_BYTES / SECTOR_BYTES as u64) as u8;
    if k < 1 || !(1..=2).contains(&parity) || !(1..=band_sectors).contains(&sectors) {
        return None;
    }
    let m0 = ENTRY_HEADER_BYTES;
    let masks = b.get(m0..m0 + k)?.to_vec();
    let in_band = ((1u16 << sectors) - 1) as u8;
    if masks.iter().any(|m| m & !in_band != 0) {
        return None;
    }
    let mut e = Entry {
        seq,
        group,
        stripe,
        band,
        sectors,
        parity,
        masks,
        pp: Vec::new(),
        pq: Vec::new(),
    };
    let n = e.stored().count_ones() as usize * SECTOR_BYTES;
    if len != e.encoded_len() {
        return None;
    }
    let p0 = m0 + Entry::masks_bytes(k);
    e.pp = b.get(p0..p0 + n)?.to_vec();
    if parity == 2 {
        e.pq = b.get(p0 + n..p0 + 2 * n)?.to_vec();
    }
    Some(e)
}

/// Every batch found in a log area's bytes (at block boundaries).
pub fn scan(area: &[u8]) -> Vec<Batch> {
    let mut out = Vec::new();
    let mut at = 0usize;
    while at < area.len() {
        match decode_batch(&area[at..]) {
            Some((b, len)) => {
                out.push(b);
                at += (len as u64).next_multiple_of(LOG_BLOCK_BYTES) as usize;
            }
            None => at += LOG_BLOCK_BYTES as usize,
        }
    }
    out
}

pub use crate::crc32c::{crc32c, Crc};

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(k: usize, parity: u8, masks: Vec<u8>, fill: u8) -> Entry {
        let mut e = Entry {
            seq: 7,
            group: 1,
            stripe: 123_456,
            band: 3,
            sectors: 8,
            parity,
            masks,
            pp: Vec::new(),
            pq: Vec::new(),
        };
        assert_eq!(e.masks.len(), k);
        let n = e.stored().count_ones() as usize * SECTOR_BYTES;
        e.pp = vec![fill; n];
        if parity == 2 {
            e.pq = vec![fill ^ 0x5a; n];
        }
        e
    }

    #[test]
    fn crc_matches_the_check_value_and_the_bitwise_reference() {
        assert_eq!(crc32c(b"123456789"), 0xe306_9283);
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7 + 3) as u8).collect();
        let mut split = Crc::new();
        split.update(&data[..13]);
        split.update(&data[13..]);
        let mut slow = !0u32;
        for &b in &data {
            slow ^= u32::from(b);
            for _ in 0..8 {
                slow = (slow >> 1) ^ (0x82f6_3b78 & (slow & 1).wrapping_neg());
            }
        }
        assert_eq!(split.finish(), !slow);
        assert_eq!(crc32c(&data), !slow);
    }

    #[test]
    fn batches_round_trip_and_pad_to_blocks() {
        let a = entry(3, 1, vec![0b1111_0000, 0, 0b0000_0001], 9);
        let b = entry(4, 2, vec![0xff, 0xff, 0xff, 0xff], 0); // full: nothing stored
        assert_eq!(a.stored(), 0b1111_0001);
        assert_eq!(b.stored(), 0);
        assert_eq!(a.encoded_len(), 32 + 8 + 5 * 512);
        assert_eq!(b.encoded_len(), 32 + 8);
        let bytes = encode_batch(5, 2, &[&a, &b]);
        assert_eq!(bytes.len() % LOG_BLOCK_BYTES as usize, 0);
        let (got, len) = decode_batch(&bytes).expect("decodes");
        assert_eq!(len, 64 + a.encoded_len() + b.encoded_len());
        assert_eq!(
            got,
            Batch {
                life: 5,
                tail: 2,
                entries: vec![a, b]
            }
        );
    }

    #[test]
    fn every_flipped_bit_is_refused() {
        let a = entry(2, 2, vec![0b11, 0b100], 1);
        let bytes = encode_batch(1, 0, &[&a]);
        let len = decode_batch(&bytes).expect("valid").1;
        for bit in 0..len * 8 {
            let mut b = bytes.clone();
            b[bit / 8] ^= 1 << (bit % 8);
            assert!(decode_batch(&b).is_none(), "bit {bit} flipped was accepted");
        }
    }

    #[test]
    fn scan_finds_batches_at_block_boundaries_and_skips_torn_ones() {
        let a = entry(3, 1, vec![1, 0, 0], 3);
        let mut area = vec![0u8; 6 * LOG_BLOCK_BYTES as usize];
        let one = encode_batch(2, 0, &[&a]);
        area[..one.len()].copy_from_slice(&one);
        let two = encode_batch(2, 1, &[&a, &a]);
        let at = 3 * LOG_BLOCK_BYTES as usize;
        area[at..at + two.len()].copy_from_slice(&two);
        area[at + 100] ^= 1; // torn
        let got = scan(&area);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].tail, 0);
    }

    proptest::proptest! {
        #[test]
        fn the_decoder_never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..9000)) {
            let _ = decode_batch(&bytes);
            let _ = scan(&bytes);
        }

        #[test]
        fn a_valid_header_over_random_entries_never_panics(
            body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..6000),
            count in 0u32..5,
        ) {
            // A correct checksum over garbage entries: the structure checks must hold alone.
            let len = BATCH_HEADER_BYTES + body.len();
            let mut b = Vec::new();
            b.extend_from_slice(&BATCH_MAGIC);
            b.extend_from_slice(&LOG_VERSION.to_le_bytes());
            b.extend_from_slice(&0u32.to_le_bytes());
            b.extend_from_slice(&(len as u32).to_le_bytes());
            b.extend_from_slice(&count.to_le_bytes());
            b.resize(BATCH_HEADER_BYTES, 0);
            b.extend_from_slice(&body);
            let crc = crc32c(&b);
            b[12..16].copy_from_slice(&crc.to_le_bytes());
            let _ = decode_batch(&b);
        }
    }
}
