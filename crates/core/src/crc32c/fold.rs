//! The carry-less-multiply path (AVX-512 with VPCLMULQDQ): 256 bytes per step in four
//! 512-bit registers, about three times the `crc32` instruction's rate. A CRC is linear, so
//! a 16-byte lane of the message can be replaced by its product with x^(8·distance) mod P
//! placed `distance` bytes further on without changing the remainder: the loop folds each
//! register onto the next 256 bytes, the tail folds the registers and lanes onto the last
//! lane, whose 16 bytes the `crc32` instruction finishes.
//!
//! Lanes are bit-reflected (a byte's lowest bit is the highest power), and a carry-less
//! product of two reflected operands is the reflected product times x: the multipliers are
//! taken one power lower to make up for it.

use std::arch::x86_64::*;

/// x^n mod P, P = CRC-32C's polynomial 0x1EDC6F41 in normal form (x^32 implied), with the
/// coefficient of x^j at bit j.
const fn xpow_mod(n: u32) -> u32 {
    const P: u32 = 0x1EDC_6F41;
    let mut r: u32 = 1;
    let mut i = 0;
    while i < n {
        let carry = r & 0x8000_0000 != 0;
        r <<= 1;
        if carry {
            r ^= P;
        }
        i += 1;
    }
    r
}

/// A 32-bit remainder as the reflected 64-bit operand of a carry-less multiply.
const fn reflected(k: u32) -> u64 {
    (k.reverse_bits() as u64) << 32
}

/// The multipliers that move a lane `distance_bytes` further: low qword for the lane's first
/// 8 bytes (its higher powers), high qword for its last 8.
const fn fold_keys(distance_bytes: u32) -> (u64, u64) {
    let bits = distance_bytes * 8;
    (
        reflected(xpow_mod(bits + 63)),
        reflected(xpow_mod(bits - 1)),
    )
}

/// Bytes folded per step of the main loop.
pub(super) const STEP_BYTES: usize = 256;

const K256: (u64, u64) = fold_keys(256);
const K192: (u64, u64) = fold_keys(192);
const K128: (u64, u64) = fold_keys(128);
const K64: (u64, u64) = fold_keys(64);
const K48: (u64, u64) = fold_keys(48);
const K32: (u64, u64) = fold_keys(32);
const K16: (u64, u64) = fold_keys(16);

/// Whether this CPU has what [`update`] needs.
pub(super) fn available() -> bool {
    std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("vpclmulqdq")
        && std::arch::is_x86_feature_detected!("sse4.2")
}

#[target_feature(enable = "avx512f")]
fn every_lane(k: (u64, u64)) -> __m512i {
    let (lo, hi) = (k.0 as i64, k.1 as i64);
    _mm512_set_epi64(hi, lo, hi, lo, hi, lo, hi, lo)
}

/// Each lane of `x` multiplied by its lane's keys, both halves summed, plus `next`: one
/// three-way XOR (fewer vector ALU slots beside the multiplies than two XORs).
#[target_feature(enable = "avx512f,vpclmulqdq")]
fn fold_onto(x: __m512i, keys: __m512i, next: __m512i) -> __m512i {
    _mm512_ternarylogic_epi64::<0x96>(
        _mm512_clmulepi64_epi128(x, keys, 0x00),
        _mm512_clmulepi64_epi128(x, keys, 0x11),
        next,
    )
}

/// Each lane of `x` multiplied by its lane's keys, both halves summed.
#[target_feature(enable = "avx512f,vpclmulqdq")]
fn fold(x: __m512i, keys: __m512i) -> __m512i {
    _mm512_xor_si512(
        _mm512_clmulepi64_epi128(x, keys, 0x00),
        _mm512_clmulepi64_epi128(x, keys, 0x11),
    )
}

/// How far ahead of the step being folded its bytes are fetched into the caches. The
/// hardware's prefetchers stop at each 4 KiB page, and blocks are checksummed a page at a
/// time from buffers a client filled long before (in the last-level cache or memory): without
/// this every page starts with a stall.
const PREFETCH_BYTES: usize = 1024;

/// Asks for the cache lines `PREFETCH_BYTES` past `step` (possibly past the slice: a prefetch
/// never faults and changes nothing but the caches).
#[target_feature(enable = "sse")]
fn prefetch_ahead(step: &[u8]) {
    let ahead = step.as_ptr().wrapping_add(PREFETCH_BYTES);
    for line in (0..STEP_BYTES).step_by(64) {
        _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(line).cast());
    }
}

/// The 256 bytes of `slice` from `at` (one step) in four registers.
#[target_feature(enable = "avx512f")]
fn step_bytes(slice: &[u8], at: usize) -> [__m512i; 4] {
    let step = &slice[at..at + STEP_BYTES];
    // SAFETY: each load reads 64 of the step's 256 bytes (unaligned loads).
    std::array::from_fn(|i| unsafe { _mm512_loadu_si512(step.as_ptr().add(64 * i).cast()) })
}

/// The four registers of a slice's first step, from the running value `c`: starting from `c`
/// is starting from zero with `c` added to the first four bytes.
#[target_feature(enable = "avx512f")]
fn first_step(c: u32, slice: &[u8]) -> [__m512i; 4] {
    let [x0, x1, x2, x3] = step_bytes(slice, 0);
    let start = _mm512_zextsi128_si512(_mm_cvtsi32_si128(c as i32));
    [_mm512_xor_si512(x0, start), x1, x2, x3]
}

/// One step: each of a slice's registers folded onto its next 256 bytes, from `at` (the
/// bytes `PREFETCH_BYTES` further asked for meanwhile).
#[target_feature(enable = "avx512f,vpclmulqdq")]
fn fold_step(x: &mut [__m512i; 4], slice: &[u8], at: usize, k256: __m512i) {
    prefetch_ahead(&slice[at..]);
    for (xi, next) in x.iter_mut().zip(step_bytes(slice, at)) {
        *xi = fold_onto(*xi, k256, next);
    }
}

/// The running value `c` over the whole 256-byte steps of `bytes`, and the bytes left over
/// (fewer than 256) for the caller to finish.
///
/// # Safety
/// The CPU must have AVX-512F, VPCLMULQDQ and SSE4.2 ([`available`]).
#[target_feature(enable = "avx512f,vpclmulqdq,sse4.2")]
pub(super) unsafe fn update(c: u32, bytes: &[u8]) -> (u32, &[u8]) {
    let ([c], [rest]) = update_side_by_side([c], [bytes]);
    (c, rest)
}

/// [`update`] over `N` slices of one length at once, the running value of slice `i` starting
/// at `cs[i]`. The slices' folds are independent chains, so one slice's multiplies run while
/// another's wait: alone, a 4 KiB block's last steps and its reduction wait on each other
/// (about a sixth of the block's time), side by side they overlap the next block's.
///
/// # Safety
/// The CPU must have AVX-512F, VPCLMULQDQ and SSE4.2 ([`available`]).
#[target_feature(enable = "avx512f,vpclmulqdq,sse4.2")]
pub(super) unsafe fn update_side_by_side<const N: usize>(
    cs: [u32; N],
    slices: [&[u8]; N],
) -> ([u32; N], [&[u8]; N]) {
    let len = slices[0].len();
    assert!(
        slices.iter().all(|s| s.len() == len),
        "slices folded side by side are of one length"
    );
    if len < STEP_BYTES {
        return (cs, slices);
    }
    let whole = len / STEP_BYTES * STEP_BYTES;
    let mut x: [[__m512i; 4]; N] = std::array::from_fn(|n| first_step(cs[n], slices[n]));
    let k256 = every_lane(K256);
    for at in (STEP_BYTES..whole).step_by(STEP_BYTES) {
        for (xn, slice) in x.iter_mut().zip(slices) {
            fold_step(xn, slice, at, k256);
        }
    }
    let folded = std::array::from_fn(|n| reduce(x[n]));
    (folded, slices.map(|s| &s[whole..]))
}

/// Bytes of a block [`pair_fused`] takes: the checksums' 4 KiB.
pub(super) const FUSED_BLOCK_BYTES: usize = 4096;
/// The part of each block the carry-less multiplies fold: 13 steps.
pub(super) const FUSED_FOLD_BYTES: usize = 13 * STEP_BYTES;
/// Each of the two runs of the rest of a block the `crc32` instruction takes meanwhile.
pub(super) const FUSED_RUN_BYTES: usize = (FUSED_BLOCK_BYTES - FUSED_FOLD_BYTES) / 2;
/// Words of a run the `crc32` instruction takes in each fold step after the first.
const RUN_WORDS_PER_STEP: usize = FUSED_RUN_BYTES / 8 / (FUSED_FOLD_BYTES / STEP_BYTES - 1);

/// Two 4 KiB blocks at once, on both of the CPU's ways to a CRC: the multiplies (one port)
/// fold each block's first 3328 bytes side by side while the `crc32` instruction (another
/// port) takes the last 768 as two runs of 384 — four chains, so its latency is hidden.
/// The multiplies alone bound the fold at 32 bytes a cycle; the instruction adds its 8.
/// Returns, per block, the running value over its folded part (from `cs`) and over each of
/// its two runs (from zero), for the caller to join by linearity.
///
/// # Safety
/// The CPU must have AVX-512F, VPCLMULQDQ and SSE4.2 ([`available`]).
#[target_feature(enable = "avx512f,vpclmulqdq,sse4.2")]
pub(super) unsafe fn pair_fused(cs: [u32; 2], blocks: [&[u8]; 2]) -> [(u32, [u32; 2]); 2] {
    const { assert!(FUSED_FOLD_BYTES + 2 * FUSED_RUN_BYTES == FUSED_BLOCK_BYTES) };
    const { assert!(RUN_WORDS_PER_STEP * 8 * (FUSED_FOLD_BYTES / STEP_BYTES - 1) == FUSED_RUN_BYTES) };
    assert!(
        blocks.iter().all(|b| b.len() == FUSED_BLOCK_BYTES),
        "fused blocks are of {FUSED_BLOCK_BYTES} bytes"
    );
    let word = |block: &[u8], at: usize| -> u64 {
        u64::from_le_bytes(block[at..at + 8].try_into().expect("8 bytes"))
    };
    let mut x: [[__m512i; 4]; 2] = std::array::from_fn(|n| first_step(cs[n], blocks[n]));
    // runs[n][r]: block n's run r, from zero.
    let mut runs = [[0u64; 2]; 2];
    let k256 = every_lane(K256);
    for (step, at) in (STEP_BYTES..FUSED_FOLD_BYTES)
        .step_by(STEP_BYTES)
        .enumerate()
    {
        for (n, block) in blocks.iter().enumerate() {
            fold_step(&mut x[n], &block[..FUSED_FOLD_BYTES], at, k256);
            for (r, run) in runs[n].iter_mut().enumerate() {
                let from = FUSED_FOLD_BYTES + r * FUSED_RUN_BYTES + step * RUN_WORDS_PER_STEP * 8;
                for w in 0..RUN_WORDS_PER_STEP {
                    *run = _mm_crc32_u64(*run, word(block, from + 8 * w));
                }
            }
        }
    }
    std::array::from_fn(|n| (reduce(x[n]), runs[n].map(|r| r as u32)))
}

/// The running value of the four registers of one slice's last step.
#[target_feature(enable = "avx512f,vpclmulqdq,sse4.2")]
fn reduce(x: [__m512i; 4]) -> u32 {
    let last = _mm512_xor_si512(
        _mm512_xor_si512(fold(x[0], every_lane(K192)), fold(x[1], every_lane(K128))),
        _mm512_xor_si512(fold(x[2], every_lane(K64)), x[3]),
    );
    // Lanes 0, 1, 2 of `last` are 48, 32, 16 bytes before lane 3.
    let lane_keys = _mm512_set_epi64(
        0,
        0,
        K16.1 as i64,
        K16.0 as i64,
        K32.1 as i64,
        K32.0 as i64,
        K48.1 as i64,
        K48.0 as i64,
    );
    let moved = fold(last, lane_keys);
    let lane = _mm_xor_si128(
        _mm_xor_si128(
            _mm512_extracti32x4_epi32::<0>(moved),
            _mm512_extracti32x4_epi32::<1>(moved),
        ),
        _mm_xor_si128(
            _mm512_extracti32x4_epi32::<2>(moved),
            _mm512_extracti32x4_epi32::<3>(last),
        ),
    );
    let lo = _mm_cvtsi128_si64(lane) as u64;
    let hi = _mm_extract_epi64::<1>(lane) as u64;
    _mm_crc32_u64(_mm_crc32_u64(0, lo), hi) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn powers_of_x_below_the_degree_are_themselves_and_x32_is_the_polynomial() {
        assert_eq!(xpow_mod(0), 1);
        assert_eq!(xpow_mod(31), 1 << 31);
        assert_eq!(xpow_mod(32), 0x1EDC_6F41);
    }
}
