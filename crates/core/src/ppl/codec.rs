//! The bytes of the partial-parity log (docs/FORMAT.md, "The RAID 5/6 write hole"): a log
//! area is a ring of batches, each a 64-byte header and entries, one CRC-32C over the batch.
//! Decoding is total: any bytes give a batch or `None`, never a panic (fuzzed in the tests).

use super::{BAND_BYTES, SECTOR_BYTES};

/// First bytes of every batch.
pub const BATCH_MAGIC: [u8; 8] = *b"NBRAIDPL";
/// The log format version written for batches holding a RAID 6 entry (one partial parity
/// per ring); batches of RAID 5 entries only are written as version 1, byte for byte as
/// before, so an older reader still reads them.
pub const LOG_VERSION: u32 = 2;
/// The first version: every RAID 6 entry carries partial P and Q (on both rings). Still read.
pub const LOG_VERSION_1: u32 = 1;
/// Bytes of a batch header.
pub const BATCH_HEADER_BYTES: usize = nbraid_layout::LOG_BATCH_HEADER_BYTES as usize;
/// Bytes of an entry header (before its masks).
pub const ENTRY_HEADER_BYTES: usize = nbraid_layout::LOG_ENTRY_HEADER_BYTES as usize;
/// Batches start on, and are written in, blocks of this size.
pub const LOG_BLOCK_BYTES: u64 = nbraid_layout::LOG_BLOCK_BYTES;

/// Which partial parity an entry carries on a ring: the P ring of a stripe its partial P,
/// the Q ring its partial Q.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Part {
    P,
    Q,
}

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
    /// Partial P and (RAID 6) partial Q of the sectors [`Entry::stored`] names, in order:
    /// XOR and md's Q syndrome of the data chunks not written there. `None`: not carried
    /// (an entry read from a ring carries its ring's part; the writer holds both).
    pub pp: Option<Vec<u8>>,
    pub pq: Option<Vec<u8>>,
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

    /// Bytes of an entry encoded that marks every chunk of a stripe of `k` data chunks
    /// written (no partial parity stored).
    pub fn whole_encoded_len(k: usize) -> usize {
        ENTRY_HEADER_BYTES + Self::masks_bytes(k)
    }

    /// Bytes of the entry encoded (version 2) with one partial parity.
    pub fn encoded_len(&self) -> usize {
        self.encoded_len_parts(1)
    }

    fn encoded_len_parts(&self, parts: usize) -> usize {
        let n = self.stored().count_ones() as usize * SECTOR_BYTES;
        ENTRY_HEADER_BYTES + Self::masks_bytes(self.masks.len()) + n * parts
    }

    /// The entry carries every partial parity its stripe has (P, and Q for RAID 6).
    pub fn complete(&self) -> bool {
        self.pp.is_some() && (self.parity == 1 || self.pq.is_some())
    }

    /// Byte 30 of an entry of version 2: which partial it carries.
    fn kind(&self, part: Part) -> u8 {
        match (self.parity, part) {
            (1, _) => 1,
            (_, Part::P) => 2,
            (_, Part::Q) => 3,
        }
    }
}

/// A batch as read back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Batch {
    /// The volume life that wrote it (a later open's batches supersede every earlier one).
    pub life: u64,
    /// Entries of this ring with a smaller sequence number are settled: never replayed.
    pub tail: u64,
    /// What a life's marker says of a crash of that life ([`Cover::Unsaid`] in batches of
    /// entries).
    pub cover: Cover,
    pub entries: Vec<Entry>,
}

/// Header byte of a life's marker saying whether the replay covers a crash of that life
/// (a byte of the reserve before 2026-12-07: an older reader ignores it).
pub const COVER_AT: usize = 40;

/// What a life's marker says of a crash of that life: whether every row it may have torn
/// is in the rings to replay, or only a resync finds them (`super::last_life`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cover {
    /// Nothing said (byte 0): a batch of entries, or a marker written before the byte was.
    Unsaid,
    /// Byte 1: the life logs every partial-stripe write and started with parity in sync (a
    /// clean start, a replay of a logged crash, or the resync of an unlogged one done).
    Logged,
    /// Byte 2 (any other byte reads so too: the safe reading): the life does not log
    /// (`write_hole = "off"`, mid-reshape), or an unlogged crash's rows are still to resync.
    Unlogged,
}

impl Cover {
    fn byte(self) -> u8 {
        match self {
            Cover::Unsaid => 0,
            Cover::Logged => 1,
            Cover::Unlogged => 2,
        }
    }

    fn from_byte(b: u8) -> Cover {
        match b {
            0 => Cover::Unsaid,
            1 => Cover::Logged,
            _ => Cover::Unlogged,
        }
    }
}

/// The marker of life `life` (a batch without entries, tail 0), saying `cover`.
pub fn encode_marker(life: u64, cover: Cover) -> Vec<u8> {
    let mut b = encode_batch(life, 0, &[]);
    b[COVER_AT] = cover.byte();
    b[12..16].fill(0);
    let crc = crc32c(&b[..BATCH_HEADER_BYTES]);
    b[12..16].copy_from_slice(&crc.to_le_bytes());
    b
}

/// Bytes of the batch of `entries` on the ring (each with the part it carries there):
/// header and entries, padded to whole log blocks.
pub fn batch_bytes(entries: &[(&Entry, Part)]) -> usize {
    let len = BATCH_HEADER_BYTES + entries.iter().map(|e| e.0.encoded_len()).sum::<usize>();
    (len as u64).next_multiple_of(LOG_BLOCK_BYTES) as usize
}

/// Encodes `entries` as one batch, padded to whole log blocks.
pub fn encode_batch(life: u64, tail: u64, entries: &[(&Entry, Part)]) -> Vec<u8> {
    let mut b = vec![0; batch_bytes(entries)];
    encode_batch_into(life, tail, entries, &mut b);
    b
}

/// [`encode_batch`] into `out` (of [`batch_bytes`] bytes, whatever it held: every byte is
/// written), so the log writes a batch from the buffer it was encoded in. Each entry is
/// written with the partial parity `part` names (it must carry it).
pub fn encode_batch_into(life: u64, tail: u64, entries: &[(&Entry, Part)], out: &mut [u8]) {
    let len = BATCH_HEADER_BYTES + entries.iter().map(|e| e.0.encoded_len()).sum::<usize>();
    assert_eq!(out.len(), batch_bytes(entries), "batch buffer length");
    // Version 1 where the bytes are the same (RAID 5 entries only): older readers read them.
    let version = if entries.iter().any(|e| e.0.parity == 2) {
        LOG_VERSION
    } else {
        LOG_VERSION_1
    };
    let mut w = Cursor { out, at: 0 };
    w.put(&BATCH_MAGIC);
    w.put(&version.to_le_bytes());
    w.put(&0u32.to_le_bytes()); // CRC, filled below
    w.put(&(len as u32).to_le_bytes());
    w.put(&(entries.len() as u32).to_le_bytes());
    w.put(&life.to_le_bytes());
    w.put(&tail.to_le_bytes());
    w.zeros_to(BATCH_HEADER_BYTES);
    for &(e, part) in entries {
        let at = w.at;
        w.put(&(e.encoded_len() as u32).to_le_bytes());
        w.put(&e.group.to_le_bytes());
        w.put(&e.seq.to_le_bytes());
        w.put(&e.stripe.to_le_bytes());
        w.put(&e.band.to_le_bytes());
        w.put(&(e.masks.len() as u16).to_le_bytes());
        w.put(&[e.kind(part), e.sectors]);
        w.put(&e.masks);
        w.zeros_to(at + ENTRY_HEADER_BYTES + Entry::masks_bytes(e.masks.len()));
        let pp = match part {
            Part::P => &e.pp,
            Part::Q => &e.pq,
        };
        w.put(
            pp.as_deref()
                .expect("the entry carries the part its ring takes"),
        );
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
    let version = u32_at(bytes, 8)?;
    if bytes.get(..8)? != BATCH_MAGIC || !(LOG_VERSION_1..=LOG_VERSION).contains(&version) {
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
    let cover = Cover::from_byte(*body.get(COVER_AT)?);
    let mut entries = Vec::new();
    let mut at = BATCH_HEADER_BYTES;
    for _ in 0..count {
        let (e, elen) = decode_entry(body.get(at..)?, version)?;
        at += elen;
        entries.push(e);
    }
    (at == len).then_some((
        Batch {
            life,
            tail,
            cover,
            entries,
        },
        len,
    ))
}

/// One entry of a batch of `version`, and its length.
fn decode_entry(b: &[u8], version: u32) -> Option<(Entry, usize)> {
    let len = u32_at(b, 0)? as usize;
    let group = u32_at(b, 4)?;
    let seq = u64_at(b, 8)?;
    let stripe = u64_at(b, 16)?;
    let band = u32_at(b, 24)?;
    let k = usize::from(u16::from_le_bytes(b.get(28..30)?.try_into().ok()?));
    // Version 1: byte 30 is the stripe's parity chunks, and a RAID 6 entry carries partial
    // P then Q. Version 2: 1 = RAID 5 partial P, 2 = RAID 6 partial P, 3 = RAID 6 partial Q.
    let (parity, p, q) = match (version, *b.get(30)?) {
        (_, 1) => (1, true, false),
        (LOG_VERSION_1, 2) => (2, true, true),
        (LOG_VERSION, 2) => (2, true, false),
        (LOG_VERSION, 3) => (2, false, true),
        _ => return None,
    };
    let sectors = *b.get(31)?;
    let band_sectors = (BAND_BYTES / SECTOR_BYTES as u64) as u8;
    if k < 1 || !(1..=band_sectors).contains(&sectors) {
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
        pp: None,
        pq: None,
    };
    let n = e.stored().count_ones() as usize * SECTOR_BYTES;
    if len != e.encoded_len_parts(usize::from(p) + usize::from(q)) {
        return None;
    }
    let p0 = m0 + Entry::masks_bytes(k);
    let p1 = p0 + if p { n } else { 0 };
    if p {
        e.pp = Some(b.get(p0..p1)?.to_vec());
    }
    if q {
        e.pq = Some(b.get(p1..p1 + n)?.to_vec());
    }
    Some((e, len))
}

/// The length a batch starting at `bytes[0]` declares (its header's magic and version
/// right), unchecked otherwise: how many bytes to read to decode it.
pub fn declared_len(bytes: &[u8]) -> Option<usize> {
    let version = u32_at(bytes, 8)?;
    if bytes.get(..8)? != BATCH_MAGIC || !(LOG_VERSION_1..=LOG_VERSION).contains(&version) {
        return None;
    }
    let len = u32_at(bytes, 16)? as usize;
    (len >= BATCH_HEADER_BYTES).then_some(len)
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
            pp: None,
            pq: None,
        };
        assert_eq!(e.masks.len(), k);
        let n = e.stored().count_ones() as usize * SECTOR_BYTES;
        e.pp = Some(vec![fill; n]);
        if parity == 2 {
            e.pq = Some(vec![fill ^ 0x5a; n]);
        }
        e
    }

    /// `e` as read back from a ring that takes `part` of it.
    fn on_ring(e: &Entry, part: Part) -> Entry {
        let mut e = e.clone();
        match part {
            Part::P => e.pq = None,
            Part::Q => e.pp = None,
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
        let c = entry(2, 2, vec![0b11, 0], 4);
        assert_eq!(a.stored(), 0b1111_0001);
        assert_eq!(b.stored(), 0);
        assert_eq!(a.encoded_len(), 32 + 8 + 5 * 512);
        assert_eq!(b.encoded_len(), 32 + 8);
        assert_eq!(c.encoded_len(), 32 + 8 + 2 * 512); // one partial per ring
        let parts = [(&a, Part::P), (&b, Part::P), (&c, Part::Q)];
        let bytes = encode_batch(5, 2, &parts);
        assert_eq!(bytes.len() % LOG_BLOCK_BYTES as usize, 0);
        assert_eq!(u32_at(&bytes, 8), Some(LOG_VERSION));
        let (got, len) = decode_batch(&bytes).expect("decodes");
        assert_eq!(
            len,
            64 + a.encoded_len() + b.encoded_len() + c.encoded_len()
        );
        let want = parts.iter().map(|&(e, p)| on_ring(e, p)).collect();
        assert_eq!(
            got,
            Batch {
                life: 5,
                tail: 2,
                cover: Cover::Unsaid,
                entries: want
            }
        );
    }

    /// The bytes of docs/FORMAT.md, written out field by field.
    fn golden(version: u32, entry_kind: u8, partials: &[&[u8]]) -> Vec<u8> {
        let mut e = Vec::new();
        let body: usize = partials.iter().map(|p| p.len()).sum();
        e.extend_from_slice(&(32 + 8 + body as u32).to_le_bytes()); // entry length
        e.extend_from_slice(&1u32.to_le_bytes()); // group
        e.extend_from_slice(&9u64.to_le_bytes()); // seq
        e.extend_from_slice(&40u64.to_le_bytes()); // stripe
        e.extend_from_slice(&2u32.to_le_bytes()); // band
        e.extend_from_slice(&3u16.to_le_bytes()); // k
        e.extend_from_slice(&[entry_kind, 8]); // kind (v1: parity chunks), sectors
        e.extend_from_slice(&[0b0000_0001, 0, 0, 0, 0, 0, 0, 0]); // masks, padded to 8
        for p in partials {
            e.extend_from_slice(p);
        }
        let len = 64 + e.len();
        let mut b = Vec::new();
        b.extend_from_slice(b"NBRAIDPL");
        b.extend_from_slice(&version.to_le_bytes());
        b.extend_from_slice(&[0; 4]); // CRC
        b.extend_from_slice(&(len as u32).to_le_bytes());
        b.extend_from_slice(&1u32.to_le_bytes()); // entries
        b.extend_from_slice(&6u64.to_le_bytes()); // life
        b.extend_from_slice(&4u64.to_le_bytes()); // tail
        b.resize(64, 0);
        b.extend_from_slice(&e);
        let crc = crc32c(&b);
        b[12..16].copy_from_slice(&crc.to_le_bytes());
        b.resize(len.next_multiple_of(4096), 0);
        b
    }

    fn golden_entry(parity: u8, pp: Option<u8>, pq: Option<u8>) -> Entry {
        Entry {
            seq: 9,
            group: 1,
            stripe: 40,
            band: 2,
            sectors: 8,
            parity,
            masks: vec![1, 0, 0],
            pp: pp.map(|x| vec![x; 512]),
            pq: pq.map(|x| vec![x; 512]),
        }
    }

    #[test]
    fn the_bytes_are_those_of_the_format_document() {
        let (p, q) = ([0x11u8; 512], [0x22u8; 512]);
        let e5 = golden_entry(1, Some(0x11), None);
        let e6 = golden_entry(2, Some(0x11), Some(0x22));
        // RAID 5: version 1, as before the per-ring parts (older readers read it).
        assert_eq!(encode_batch(6, 4, &[(&e5, Part::P)]), golden(1, 1, &[&p]));
        // RAID 6: version 2, the P ring takes the partial P (kind 2), the Q ring the Q (3).
        assert_eq!(encode_batch(6, 4, &[(&e6, Part::P)]), golden(2, 2, &[&p]));
        assert_eq!(encode_batch(6, 4, &[(&e6, Part::Q)]), golden(2, 3, &[&q]));
        let one = |b: Vec<u8>| decode_batch(&b).expect("decodes").0.entries.remove(0);
        assert_eq!(one(golden(1, 1, &[&p])), e5);
        assert_eq!(one(golden(2, 2, &[&p])), golden_entry(2, Some(0x11), None));
        assert_eq!(one(golden(2, 3, &[&q])), golden_entry(2, None, Some(0x22)));
    }

    #[test]
    fn a_version_1_raid6_entry_is_read_with_both_partials_and_nothing_is_misread() {
        let (p, q) = ([0x11u8; 512], [0x22u8; 512]);
        let v1 = golden(1, 2, &[&p, &q]);
        let got = decode_batch(&v1).expect("version 1 is read").0;
        assert_eq!(got.entries, vec![golden_entry(2, Some(0x11), Some(0x22))]);
        assert!(got.entries[0].complete());
        // A version 1 RAID 6 entry with one partial, a version 2 one with two, kinds a
        // version does not have, an unknown version: refused, never misread.
        assert!(decode_batch(&golden(1, 2, &[&p])).is_none());
        assert!(decode_batch(&golden(2, 2, &[&p, &q])).is_none());
        assert!(decode_batch(&golden(1, 3, &[&q])).is_none());
        assert!(decode_batch(&golden(2, 4, &[&q])).is_none());
        assert!(decode_batch(&golden(3, 2, &[&p])).is_none());
    }

    #[test]
    fn every_flipped_bit_is_refused() {
        let a = entry(2, 2, vec![0b11, 0b100], 1);
        let bytes = encode_batch(1, 0, &[(&a, Part::Q)]);
        let len = decode_batch(&bytes).expect("valid").1;
        for bit in 0..len * 8 {
            let mut b = bytes.clone();
            b[bit / 8] ^= 1 << (bit % 8);
            assert!(decode_batch(&b).is_none(), "bit {bit} flipped was accepted");
        }
    }

    /// A marker's word sits in byte 40 (the reserve an older reader ignores): the rest is
    /// the marker as before, so an older nbraid still reads it as one; a batch of entries
    /// says nothing, and a byte no nbraid writes reads as the safe word.
    #[test]
    fn a_marker_says_whether_its_life_logged_in_a_byte_older_readers_ignore() {
        for (cover, byte) in [(Cover::Logged, 1u8), (Cover::Unlogged, 2)] {
            let m = encode_marker(9, cover);
            let plain = encode_batch(9, 0, &[]);
            assert_eq!(m.len(), plain.len());
            assert_eq!(m[COVER_AT], byte);
            let differ: Vec<usize> = (0..m.len()).filter(|&i| m[i] != plain[i]).collect();
            assert!(differ
                .iter()
                .all(|&i| i == COVER_AT || (12..16).contains(&i)));
            let (got, _) = decode_batch(&m).expect("decodes");
            assert_eq!((got.life, got.tail, got.cover), (9, 0, cover));
            assert!(got.entries.is_empty());
        }
        let a = entry(3, 1, vec![1, 0, 0], 3);
        let got = decode_batch(&encode_batch(2, 0, &[(&a, Part::P)])).expect("decodes");
        assert_eq!(got.0.cover, Cover::Unsaid);
        assert_eq!(Cover::from_byte(7), Cover::Unlogged);
    }

    #[test]
    fn scan_finds_batches_at_block_boundaries_and_skips_torn_ones() {
        let a = entry(3, 1, vec![1, 0, 0], 3);
        let mut area = vec![0u8; 6 * LOG_BLOCK_BYTES as usize];
        let one = encode_batch(2, 0, &[(&a, Part::P)]);
        area[..one.len()].copy_from_slice(&one);
        let two = encode_batch(2, 1, &[(&a, Part::P), (&a, Part::P)]);
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
            version in 1u32..=2,
        ) {
            // A correct checksum over garbage entries: the structure checks must hold alone.
            let len = BATCH_HEADER_BYTES + body.len();
            let mut b = Vec::new();
            b.extend_from_slice(&BATCH_MAGIC);
            b.extend_from_slice(&version.to_le_bytes());
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
