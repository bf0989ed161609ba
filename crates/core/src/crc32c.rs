//! CRC-32C (Castagnoli; reflected polynomial 0x82F63B78, initial value and final XOR all
//! ones): the checksum of every superblock, record and partial-parity log batch. A log batch
//! is written with every partial-stripe write, so the checksum must cost little next to the
//! parity work: x86-64 CPUs with SSE4.2 compute it with the `crc32` instruction (8 bytes per
//! instruction, three independent runs at a time); elsewhere a slicing-by-8 table walk
//! (about a byte per cycle). Both give the
//! same value for every input (tested against a bitwise reference).

/// A running CRC-32C over bytes given in pieces.
pub struct Crc(u32);

impl Crc {
    pub fn new() -> Crc {
        Crc(!0)
    }

    pub fn update(&mut self, bytes: &[u8]) {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("sse4.2") {
            // SAFETY: the CPU has SSE4.2 (checked just above).
            self.0 = unsafe { sse42::update(self.0, bytes) };
            return;
        }
        self.0 = scalar_update(self.0, bytes);
    }

    pub fn finish(&self) -> u32 {
        !self.0
    }
}

impl Default for Crc {
    fn default() -> Self {
        Crc::new()
    }
}

/// CRC-32C of `bytes`.
pub fn crc32c(bytes: &[u8]) -> u32 {
    let mut c = Crc::new();
    c.update(bytes);
    c.finish()
}

static TABLES: std::sync::OnceLock<[[u32; 256]; 8]> = std::sync::OnceLock::new();

fn tables() -> &'static [[u32; 256]; 8] {
    TABLES.get_or_init(|| {
        let mut t = [[0u32; 256]; 8];
        for i in 0..256u32 {
            let mut c = i;
            for _ in 0..8 {
                c = (c >> 1) ^ (0x82f6_3b78 & (c & 1).wrapping_neg());
            }
            t[0][i as usize] = c;
        }
        for i in 0..256 {
            for s in 1..8 {
                let prev = t[s - 1][i];
                t[s][i] = (prev >> 8) ^ t[0][(prev & 0xff) as usize];
            }
        }
        t
    })
}

/// The portable path: slicing by 8 over the running (not yet inverted) value `c`.
fn scalar_update(mut c: u32, bytes: &[u8]) -> u32 {
    let t = tables();
    let mut chunks = bytes.chunks_exact(8);
    for ch in &mut chunks {
        let lo = u32::from_le_bytes(ch[..4].try_into().expect("4")) ^ c;
        let hi = u32::from_le_bytes(ch[4..].try_into().expect("4"));
        c = t[7][(lo & 0xff) as usize]
            ^ t[6][((lo >> 8) & 0xff) as usize]
            ^ t[5][((lo >> 16) & 0xff) as usize]
            ^ t[4][(lo >> 24) as usize]
            ^ t[3][(hi & 0xff) as usize]
            ^ t[2][((hi >> 8) & 0xff) as usize]
            ^ t[1][((hi >> 16) & 0xff) as usize]
            ^ t[0][(hi >> 24) as usize];
    }
    for &b in chunks.remainder() {
        c = (c >> 8) ^ t[0][((c ^ u32::from(b)) & 0xff) as usize];
    }
    c
}

/// The running value `r` after `n` zero bytes, as a linear map of `r` (the register update
/// is linear over GF(2)): four tables of 256 values, one per byte of `r`.
struct Shift([[u32; 256]; 4]);

impl Shift {
    fn new(n: usize) -> Shift {
        let zeros = vec![0u8; n];
        // The image of each bit of the register; every other value is a XOR of these.
        let basis: Vec<u32> = (0..32).map(|b| scalar_update(1 << b, &zeros)).collect();
        let mut t = [[0u32; 256]; 4];
        for (k, table) in t.iter_mut().enumerate() {
            for (v, slot) in table.iter_mut().enumerate() {
                *slot = (0..8)
                    .filter(|i| v >> i & 1 == 1)
                    .fold(0, |a, i| a ^ basis[8 * k + i]);
            }
        }
        Shift(t)
    }

    fn apply(&self, r: u32) -> u32 {
        let t = &self.0;
        t[0][(r & 0xff) as usize]
            ^ t[1][(r >> 8 & 0xff) as usize]
            ^ t[2][(r >> 16 & 0xff) as usize]
            ^ t[3][(r >> 24) as usize]
    }
}

#[cfg(target_arch = "x86_64")]
mod sse42 {
    use super::Shift;
    use std::arch::x86_64::{_mm_crc32_u64, _mm_crc32_u8};
    use std::sync::OnceLock;

    /// Bytes of each of the three pieces checksummed side by side.
    pub(super) const PIECE_BYTES: usize = 1024;

    /// Shifts by one and by two pieces.
    fn shifts() -> &'static (Shift, Shift) {
        static SHIFTS: OnceLock<(Shift, Shift)> = OnceLock::new();
        SHIFTS.get_or_init(|| (Shift::new(PIECE_BYTES), Shift::new(2 * PIECE_BYTES)))
    }

    fn word(b: &[u8], at: usize) -> u64 {
        u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
    }

    /// The running value `c` over `bytes` with the `crc32` instruction. Three pieces at a
    /// time are checksummed side by side (the instruction's latency is three of its issue
    /// slots: one chain leaves two idle) and joined by linearity: the value over `a b c` is
    /// the value over `a` shifted past `b c`, XOR the value over `b` (from zero) shifted past
    /// `c`, XOR the value over `c` from zero.
    ///
    /// # Safety
    /// The CPU must support SSE4.2.
    #[target_feature(enable = "sse4.2")]
    pub(super) unsafe fn update(c: u32, bytes: &[u8]) -> u32 {
        let mut c = c;
        let mut rest = bytes;
        if rest.len() >= 3 * PIECE_BYTES {
            let (one, two) = shifts();
            while rest.len() >= 3 * PIECE_BYTES {
                let (a, tail) = rest.split_at(PIECE_BYTES);
                let (b, tail) = tail.split_at(PIECE_BYTES);
                let (d, tail) = tail.split_at(PIECE_BYTES);
                let (mut x, mut y, mut z) = (u64::from(c), 0u64, 0u64);
                for at in (0..PIECE_BYTES).step_by(8) {
                    x = _mm_crc32_u64(x, word(a, at));
                    y = _mm_crc32_u64(y, word(b, at));
                    z = _mm_crc32_u64(z, word(d, at));
                }
                c = two.apply(x as u32) ^ one.apply(y as u32) ^ z as u32;
                rest = tail;
            }
        }
        let mut c = u64::from(c);
        let mut chunks = rest.chunks_exact(8);
        for ch in &mut chunks {
            c = _mm_crc32_u64(c, u64::from_le_bytes(ch.try_into().expect("8")));
        }
        let mut c = c as u32;
        for &b in chunks.remainder() {
            c = _mm_crc32_u8(c, b);
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bitwise(bytes: &[u8]) -> u32 {
        let mut c = !0u32;
        for &b in bytes {
            c ^= u32::from(b);
            for _ in 0..8 {
                c = (c >> 1) ^ (0x82f6_3b78 & (c & 1).wrapping_neg());
            }
        }
        !c
    }

    #[test]
    fn the_check_value() {
        assert_eq!(crc32c(b"123456789"), 0xe306_9283);
        assert_eq!(!scalar_update(!0, b"123456789"), 0xe306_9283);
    }

    #[test]
    fn every_path_matches_the_bitwise_reference_at_every_length_and_alignment() {
        let data: Vec<u8> = (0..11_000u32)
            .map(|i| (i * 7 + 3 + i / 251) as u8)
            .collect();
        // Around every multiple of three side-by-side pieces, too.
        let pieces = [3071, 3072, 3073, 3080, 6143, 6144, 6151, 10_000];
        for start in 0..9 {
            for len in (0..300).chain([511, 512, 513, 591 - start]).chain(pieces) {
                let piece = &data[start..start + len];
                let want = bitwise(piece);
                assert_eq!(crc32c(piece), want, "start {start} len {len}");
                assert_eq!(
                    !scalar_update(!0, piece),
                    want,
                    "scalar, start {start} len {len}"
                );
                #[cfg(target_arch = "x86_64")]
                if std::arch::is_x86_feature_detected!("sse4.2") {
                    // SAFETY: the CPU has SSE4.2 (checked just above).
                    let fast = unsafe { sse42::update(!0, piece) };
                    assert_eq!(!fast, want, "sse4.2, start {start} len {len}");
                }
            }
        }
    }

    #[test]
    fn pieces_give_the_value_of_the_whole() {
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 13 + 1) as u8).collect();
        for cut in [0, 1, 7, 8, 13, 500, 999, 1000] {
            let mut c = Crc::new();
            c.update(&data[..cut]);
            c.update(&data[cut..]);
            assert_eq!(c.finish(), bitwise(&data), "cut at {cut}");
        }
    }
}
