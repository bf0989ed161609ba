//! CRC-32C (Castagnoli; reflected polynomial 0x82F63B78, initial value and final XOR all
//! ones): the checksum of every superblock, record, partial-parity log batch and 4 KiB
//! block (per-block checksums verify every member read), so it must cost little next to a
//! memory copy. Three paths, the fastest the CPU has, decided once: AVX-512 carry-less
//! multiplies folding 256 bytes a step ([`fold`]); the SSE4.2 `crc32` instruction, three
//! runs side by side ([`sse42`]); elsewhere a slicing-by-8 table walk (about a byte per
//! cycle). All give the same value for every input (tested against a bitwise reference).

/// A running CRC-32C over bytes given in pieces.
pub struct Crc(u32);

impl Crc {
    pub fn new() -> Crc {
        Crc(!0)
    }

    pub fn update(&mut self, bytes: &[u8]) {
        #[cfg(target_arch = "x86_64")]
        match x86_path() {
            X86Path::Fold => {
                // SAFETY: the CPU has AVX-512F, VPCLMULQDQ and SSE4.2 (`x86_path` checked).
                let (c, rest) = unsafe { fold::update(self.0, bytes) };
                // SAFETY: as above, SSE4.2.
                self.0 = unsafe { sse42::update(c, rest) };
                return;
            }
            X86Path::Sse42 => {
                // SAFETY: the CPU has SSE4.2 (`x86_path` checked).
                self.0 = unsafe { sse42::update(self.0, bytes) };
                return;
            }
            X86Path::Scalar => {}
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

/// The fastest x86-64 path this CPU runs, decided once.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum X86Path {
    Fold,
    Sse42,
    Scalar,
}

#[cfg(target_arch = "x86_64")]
fn x86_path() -> X86Path {
    static PATH: std::sync::OnceLock<X86Path> = std::sync::OnceLock::new();
    *PATH.get_or_init(|| {
        if fold::available() {
            X86Path::Fold
        } else if std::arch::is_x86_feature_detected!("sse4.2") {
            X86Path::Sse42
        } else {
            X86Path::Scalar
        }
    })
}

/// The CRC-32C of each `block_bytes`-long block of `bytes`, each block preceded by its number
/// (`first_number` + its index, 8 bytes little-endian), pushed to `out`: the per-block
/// checksums of a member read or write (see `checksum::block_crc`). The same values as a
/// [`Crc`] fed the number and then the block, with the path chosen once for all the blocks
/// rather than twice per block.
pub fn numbered_blocks(first_number: u64, bytes: &[u8], block_bytes: usize, out: &mut Vec<u32>) {
    assert!(
        block_bytes > 0 && bytes.len().is_multiple_of(block_bytes),
        "whole blocks of {block_bytes} bytes, not {}",
        bytes.len()
    );
    #[cfg(target_arch = "x86_64")]
    let path = x86_path();
    #[cfg(not(target_arch = "x86_64"))]
    let path = ();
    numbered_blocks_on(path, first_number, bytes, block_bytes, out);
}

#[cfg(target_arch = "x86_64")]
type Path = X86Path;
#[cfg(not(target_arch = "x86_64"))]
type Path = ();

/// [`numbered_blocks`] on `path` (tests run every path this CPU has).
fn numbered_blocks_on(
    path: Path,
    first_number: u64,
    bytes: &[u8],
    block_bytes: usize,
    out: &mut Vec<u32>,
) {
    out.reserve(bytes.len() / block_bytes);
    let numbered = bytes.chunks_exact(block_bytes).zip(first_number..);
    #[cfg(target_arch = "x86_64")]
    match path {
        X86Path::Fold => {
            // SAFETY: `path` is `Fold` only where the CPU has AVX-512F, VPCLMULQDQ and SSE4.2
            // (`x86_path`, or a test that checked `fold::available`).
            unsafe { numbered_blocks_folded(first_number, bytes, block_bytes, out) };
            return;
        }
        X86Path::Sse42 => {
            // SAFETY: `path` is `Sse42` only where the CPU has SSE4.2.
            out.extend(
                numbered
                    .map(|(block, n)| unsafe { !sse42::update(sse42::update_word(!0, n), block) }),
            );
            return;
        }
        X86Path::Scalar => {}
    }
    let _ = path;
    out.extend(
        numbered.map(|(block, n)| !scalar_update(scalar_update(!0, &n.to_le_bytes()), block)),
    );
}

/// [`numbered_blocks`] on the fold path: blocks two at a time, folded side by side.
///
/// # Safety
/// The CPU must have AVX-512F, VPCLMULQDQ and SSE4.2 (`fold::available`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,vpclmulqdq,sse4.2")]
unsafe fn numbered_blocks_folded(
    first_number: u64,
    bytes: &[u8],
    block_bytes: usize,
    out: &mut Vec<u32>,
) {
    let mut pairs = bytes.chunks_exact(2 * block_bytes);
    let mut n = first_number;
    for pair in &mut pairs {
        let (a, b) = pair.split_at(block_bytes);
        let seeds = [
            sse42::update_word(!0, n),
            sse42::update_word(!0, n.wrapping_add(1)),
        ];
        if block_bytes == fold::FUSED_BLOCK_BYTES {
            // The value over `fold run1 run2` is the fold's shifted past both runs, XOR the
            // first run's (from zero) shifted past the second, XOR the second's.
            let (past_one, past_two) = fused_shifts();
            for (folded, [one, two]) in fold::pair_fused(seeds, [a, b]) {
                out.push(!(past_two.apply(folded) ^ past_one.apply(one) ^ two));
            }
        } else {
            let (cs, rests) = fold::update_side_by_side(seeds, [a, b]);
            out.push(!sse42::update(cs[0], rests[0]));
            out.push(!sse42::update(cs[1], rests[1]));
        }
        n = n.wrapping_add(2);
    }
    if !pairs.remainder().is_empty() {
        let (c, rest) = fold::update(sse42::update_word(!0, n), pairs.remainder());
        out.push(!sse42::update(c, rest));
    }
}

/// Shifts past one and two of [`fold::pair_fused`]'s runs.
#[cfg(target_arch = "x86_64")]
fn fused_shifts() -> &'static (Shift, Shift) {
    static SHIFTS: std::sync::OnceLock<(Shift, Shift)> = std::sync::OnceLock::new();
    SHIFTS.get_or_init(|| {
        (
            Shift::new(fold::FUSED_RUN_BYTES),
            Shift::new(2 * fold::FUSED_RUN_BYTES),
        )
    })
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
mod fold;
#[cfg(target_arch = "x86_64")]
mod sse42;

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
        // Pseudo-random bytes (xorshift): a folding mistake cannot hide in a pattern.
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let data: Vec<u8> = (0..11_000)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state >> 32) as u8
            })
            .collect();
        // Around every multiple of three side-by-side pieces and of the fold's steps, too.
        let pieces = [
            255, 256, 257, 768, 3071, 3072, 3073, 3080, 4096, 6143, 6144, 6151, 10_000,
        ];
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
                #[cfg(target_arch = "x86_64")]
                if fold::available() {
                    // SAFETY: the CPU has what the fold path needs (checked just above).
                    let (c, rest) = unsafe { fold::update(!0, piece) };
                    // SAFETY: SSE4.2 is part of `fold::available`.
                    let folded = unsafe { sse42::update(c, rest) };
                    assert_eq!(!folded, want, "fold, start {start} len {len}");
                }
            }
        }
    }

    /// Every path's per-block sums against the bitwise reference over the number and the
    /// block, at the block sizes checksums use and at sizes around the fold's step.
    #[test]
    fn numbered_blocks_match_the_reference_on_every_path() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let data: Vec<u8> = (0..5 * 4096)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state >> 24) as u8
            })
            .collect();
        #[cfg(target_arch = "x86_64")]
        let paths: Vec<Path> = [X86Path::Scalar, X86Path::Sse42, X86Path::Fold]
            .into_iter()
            .filter(|p| match p {
                X86Path::Scalar => true,
                X86Path::Sse42 => std::arch::is_x86_feature_detected!("sse4.2"),
                X86Path::Fold => fold::available(),
            })
            .collect();
        #[cfg(not(target_arch = "x86_64"))]
        let paths: Vec<Path> = vec![()];
        for block_bytes in [4096, 1024, 520, 512, 256, 255, 8, 1] {
            let blocks = (data.len() / block_bytes).min(5);
            let bytes = &data[..blocks * block_bytes];
            let first = 0x0123_4567_89ab_cdefu64;
            let want: Vec<u32> = bytes
                .chunks_exact(block_bytes)
                .zip(first..)
                .map(|(b, n)| bitwise(&[&n.to_le_bytes()[..], b].concat()))
                .collect();
            for &path in &paths {
                let mut got = Vec::new();
                numbered_blocks_on(path, first, bytes, block_bytes, &mut got);
                assert_eq!(got, want, "{path:?}, blocks of {block_bytes}");
            }
            let mut got = vec![7];
            numbered_blocks(first, bytes, block_bytes, &mut got);
            assert_eq!(got[1..], want[..], "appended after what was there");
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
