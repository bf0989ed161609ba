//! The `crc32` instruction path: three runs of 1 KiB side by side, joined by linearity.

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

/// The running value `c` over the 8 bytes of `w` (little-endian).
///
/// # Safety
/// The CPU must support SSE4.2.
#[target_feature(enable = "sse4.2")]
pub(super) unsafe fn update_word(c: u32, w: u64) -> u32 {
    _mm_crc32_u64(u64::from(c), w) as u32
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
