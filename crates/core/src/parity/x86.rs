//! x86-64 registers for the generic kernels: SSSE3 (16 B), AVX2 (32 B), AVX-512BW (64 B) and
//! AVX-512BW + GFNI (64 B, multiplications as one `vgf2p8affineqb`).
//!
//! Methods are `#[inline(always)]` without `#[target_feature]`: they are only ever inlined into
//! the `#[target_feature]` entry points of `mod.rs` (the pattern of the `memchr` crate), which
//! are only called after run-time detection.
//!
//! Multiplication by 2 without GFNI: shift left by one bit (`x + x`) and XOR 0x1D into the bytes
//! whose top bit was set. By a general constant: two 16-entry PSHUFB lookups, one per nibble.
//! With GFNI: GFNI's own multiply uses the AES polynomial 0x11B, so it is not usable; instead,
//! multiplication by a constant is GF(2)-linear and becomes an 8×8 bit-matrix affine transform.

#![allow(clippy::missing_safety_doc)]

use super::gf;
use super::vector::Vector;
use core::arch::x86_64::*;

/// SSSE3 register.
#[derive(Clone, Copy)]
pub(super) struct Sse(__m128i);
/// AVX2 register.
#[derive(Clone, Copy)]
pub(super) struct Avx2(__m256i);
/// AVX-512BW register (multiplication by PSHUFB tables).
#[derive(Clone, Copy)]
pub(super) struct Avx512(__m512i);
/// AVX-512BW register with GFNI multiplication.
#[derive(Clone, Copy)]
pub(super) struct Gfni(__m512i);

/// 16-byte nibble tables as an unaligned 128-bit load source.
#[inline(always)]
fn nibbles(c: u8) -> ([u8; 16], [u8; 16]) {
    gf::nibble_tables(c)
}

// The matrix of "multiply by 2" for `vgf2p8affineqb`, checked against gf::affine_matrix(2) in
// the tests.
pub(super) const AFFINE_MUL2: u64 = 0x8001_8284_8810_2040;
// … and of "multiply by 4".
pub(super) const AFFINE_MUL4: u64 = 0x4080_41C2_C488_1020;

impl Vector for Sse {
    const WIDTH: usize = 16;
    type Mul = (__m128i, __m128i);

    #[inline(always)]
    unsafe fn mul_const(c: u8) -> Self::Mul {
        let (lo, hi) = nibbles(c);
        // SAFETY: SSE2 is part of x86-64; the arrays are 16 bytes.
        unsafe {
            (
                _mm_loadu_si128(lo.as_ptr().cast()),
                _mm_loadu_si128(hi.as_ptr().cast()),
            )
        }
    }
    #[inline(always)]
    unsafe fn zero() -> Self {
        // SAFETY: SSE2 is part of x86-64.
        Sse(unsafe { _mm_setzero_si128() })
    }
    #[inline(always)]
    unsafe fn load(p: *const u8) -> Self {
        // SAFETY: the caller guarantees 16 readable bytes at `p`.
        Sse(unsafe { _mm_loadu_si128(p.cast()) })
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut u8) {
        // SAFETY: the caller guarantees 16 writable bytes at `p`.
        unsafe { _mm_storeu_si128(p.cast(), self.0) }
    }
    #[inline(always)]
    unsafe fn stream(self, p: *mut u8) {
        // SAFETY: the caller guarantees 16 writable, 16-aligned bytes at `p`.
        unsafe { _mm_stream_si128(p.cast(), self.0) }
    }
    #[inline(always)]
    unsafe fn fence() {
        // SAFETY: SSE is part of x86-64.
        unsafe { _mm_sfence() }
    }
    #[inline(always)]
    unsafe fn xor(self, o: Self) -> Self {
        // SAFETY: SSE2 is part of x86-64.
        Sse(unsafe { _mm_xor_si128(self.0, o.0) })
    }
    #[inline(always)]
    unsafe fn or(self, o: Self) -> Self {
        // SAFETY: SSE2 is part of x86-64.
        Sse(unsafe { _mm_or_si128(self.0, o.0) })
    }
    #[inline(always)]
    unsafe fn is_zero(self) -> bool {
        // SAFETY: SSE2 is part of x86-64.
        unsafe { _mm_movemask_epi8(_mm_cmpeq_epi8(self.0, _mm_setzero_si128())) == 0xFFFF }
    }
    #[inline(always)]
    unsafe fn mul2(self) -> Self {
        // SAFETY: SSE2 is part of x86-64.
        unsafe {
            let x = self.0;
            let top = _mm_cmpgt_epi8(_mm_setzero_si128(), x);
            let red = _mm_and_si128(top, _mm_set1_epi8(0x1D));
            Sse(_mm_xor_si128(_mm_add_epi8(x, x), red))
        }
    }
    #[inline(always)]
    unsafe fn mul(self, m: &Self::Mul) -> Self {
        // SAFETY: the caller guarantees SSSE3 (PSHUFB).
        unsafe {
            let nib = _mm_set1_epi8(0x0F);
            let lo = _mm_and_si128(self.0, nib);
            let hi = _mm_and_si128(_mm_srli_epi16::<4>(self.0), nib);
            Sse(_mm_xor_si128(
                _mm_shuffle_epi8(m.0, lo),
                _mm_shuffle_epi8(m.1, hi),
            ))
        }
    }
}

impl Vector for Avx2 {
    const WIDTH: usize = 32;
    type Mul = (__m256i, __m256i);

    #[inline(always)]
    unsafe fn mul_const(c: u8) -> Self::Mul {
        let (lo, hi) = nibbles(c);
        // SAFETY: the caller guarantees AVX2; the arrays are 16 bytes.
        unsafe {
            (
                _mm256_broadcastsi128_si256(_mm_loadu_si128(lo.as_ptr().cast())),
                _mm256_broadcastsi128_si256(_mm_loadu_si128(hi.as_ptr().cast())),
            )
        }
    }
    #[inline(always)]
    unsafe fn zero() -> Self {
        // SAFETY: the caller guarantees AVX2.
        Avx2(unsafe { _mm256_setzero_si256() })
    }
    #[inline(always)]
    unsafe fn load(p: *const u8) -> Self {
        // SAFETY: the caller guarantees AVX2 and 32 readable bytes at `p`.
        Avx2(unsafe { _mm256_loadu_si256(p.cast()) })
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut u8) {
        // SAFETY: the caller guarantees AVX2 and 32 writable bytes at `p`.
        unsafe { _mm256_storeu_si256(p.cast(), self.0) }
    }
    #[inline(always)]
    unsafe fn stream(self, p: *mut u8) {
        // SAFETY: the caller guarantees AVX2 and 32 writable, 32-aligned bytes at `p`.
        unsafe { _mm256_stream_si256(p.cast(), self.0) }
    }
    #[inline(always)]
    unsafe fn fence() {
        // SAFETY: SSE is part of x86-64.
        unsafe { _mm_sfence() }
    }
    /// The P+Q kernels' software prefetch (see `kernels::pf_distance`): on an AMD EPYC with
    /// AVX2 only it lifts k = 8 `pq_gen` ~10% (hot and from DRAM) against ISA-L in the same run.
    #[inline(always)]
    unsafe fn prefetch(p: *const u8) {
        // SAFETY: PREFETCHT0 is part of x86-64 and never faults, whatever the address.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p.cast()) }
    }
    #[inline(always)]
    unsafe fn xor(self, o: Self) -> Self {
        // SAFETY: the caller guarantees AVX2.
        Avx2(unsafe { _mm256_xor_si256(self.0, o.0) })
    }
    #[inline(always)]
    unsafe fn or(self, o: Self) -> Self {
        // SAFETY: the caller guarantees AVX2.
        Avx2(unsafe { _mm256_or_si256(self.0, o.0) })
    }
    #[inline(always)]
    unsafe fn is_zero(self) -> bool {
        // SAFETY: the caller guarantees AVX2 (which implies AVX's VPTEST).
        unsafe { _mm256_testz_si256(self.0, self.0) != 0 }
    }
    #[inline(always)]
    unsafe fn mul2(self) -> Self {
        // SAFETY: the caller guarantees AVX2.
        unsafe {
            let x = self.0;
            let top = _mm256_cmpgt_epi8(_mm256_setzero_si256(), x);
            let red = _mm256_and_si256(top, _mm256_set1_epi8(0x1D));
            Avx2(_mm256_xor_si256(_mm256_add_epi8(x, x), red))
        }
    }
    #[inline(always)]
    unsafe fn mul(self, m: &Self::Mul) -> Self {
        // SAFETY: the caller guarantees AVX2.
        unsafe {
            let nib = _mm256_set1_epi8(0x0F);
            let lo = _mm256_and_si256(self.0, nib);
            let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(self.0), nib);
            Avx2(_mm256_xor_si256(
                _mm256_shuffle_epi8(m.0, lo),
                _mm256_shuffle_epi8(m.1, hi),
            ))
        }
    }
}

/// The AVX-512F/BW operations both 512-bit registers share.
macro_rules! avx512_common {
    ($t:ident) => {
        #[inline(always)]
        unsafe fn zero() -> Self {
            // SAFETY: the caller guarantees AVX-512F.
            $t(unsafe { _mm512_setzero_si512() })
        }
        #[inline(always)]
        unsafe fn load(p: *const u8) -> Self {
            // SAFETY: the caller guarantees AVX-512F and 64 readable bytes at `p`.
            $t(unsafe { _mm512_loadu_si512(p.cast()) })
        }
        #[inline(always)]
        unsafe fn store(self, p: *mut u8) {
            // SAFETY: the caller guarantees AVX-512F and 64 writable bytes at `p`.
            unsafe { _mm512_storeu_si512(p.cast(), self.0) }
        }
        #[inline(always)]
        unsafe fn stream(self, p: *mut u8) {
            // SAFETY: the caller guarantees AVX-512F and 64 writable, 64-aligned bytes at `p`.
            unsafe { _mm512_stream_si512(p.cast(), self.0) }
        }
        #[inline(always)]
        unsafe fn fence() {
            // SAFETY: SSE is part of x86-64.
            unsafe { _mm_sfence() }
        }
        #[inline(always)]
        unsafe fn prefetch(p: *const u8) {
            // SAFETY: PREFETCHT0 is part of x86-64 and never faults, whatever the address.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(p.cast()) }
        }
        #[inline(always)]
        unsafe fn xor(self, o: Self) -> Self {
            // SAFETY: the caller guarantees AVX-512F.
            $t(unsafe { _mm512_xor_si512(self.0, o.0) })
        }
        #[inline(always)]
        unsafe fn xor3(self, a: Self, b: Self) -> Self {
            // SAFETY: the caller guarantees AVX-512F (VPTERNLOG; 0x96 = a ^ b ^ c).
            $t(unsafe { _mm512_ternarylogic_epi64::<0x96>(self.0, a.0, b.0) })
        }
        #[inline(always)]
        unsafe fn or(self, o: Self) -> Self {
            // SAFETY: the caller guarantees AVX-512F.
            $t(unsafe { _mm512_or_si512(self.0, o.0) })
        }
        #[inline(always)]
        unsafe fn is_zero(self) -> bool {
            // SAFETY: the caller guarantees AVX-512F.
            unsafe { _mm512_test_epi64_mask(self.0, self.0) == 0 }
        }
    };
}

impl Vector for Avx512 {
    const WIDTH: usize = 64;
    type Mul = (__m512i, __m512i);

    avx512_common!(Avx512);

    #[inline(always)]
    unsafe fn mul_const(c: u8) -> Self::Mul {
        let (lo, hi) = nibbles(c);
        // SAFETY: the caller guarantees AVX-512F; the arrays are 16 bytes.
        unsafe {
            (
                _mm512_broadcast_i32x4(_mm_loadu_si128(lo.as_ptr().cast())),
                _mm512_broadcast_i32x4(_mm_loadu_si128(hi.as_ptr().cast())),
            )
        }
    }
    #[inline(always)]
    unsafe fn mul2(self) -> Self {
        // SAFETY: the caller guarantees AVX-512BW.
        unsafe {
            let x = self.0;
            let top = _mm512_movepi8_mask(x);
            let red = _mm512_maskz_mov_epi8(top, _mm512_set1_epi8(0x1D));
            Avx512(_mm512_xor_si512(_mm512_add_epi8(x, x), red))
        }
    }
    #[inline(always)]
    unsafe fn mul2_xor(self, d: Self) -> Self {
        // SAFETY: the caller guarantees AVX-512BW.
        unsafe {
            let x = self.0;
            let top = _mm512_movepi8_mask(x);
            let red = _mm512_maskz_mov_epi8(top, _mm512_set1_epi8(0x1D));
            Avx512(_mm512_ternarylogic_epi64::<0x96>(
                _mm512_add_epi8(x, x),
                red,
                d.0,
            ))
        }
    }
    #[inline(always)]
    unsafe fn mul(self, m: &Self::Mul) -> Self {
        // SAFETY: the caller guarantees AVX-512BW.
        unsafe {
            let nib = _mm512_set1_epi8(0x0F);
            let lo = _mm512_and_si512(self.0, nib);
            let hi = _mm512_and_si512(_mm512_srli_epi16::<4>(self.0), nib);
            Avx512(_mm512_xor_si512(
                _mm512_shuffle_epi8(m.0, lo),
                _mm512_shuffle_epi8(m.1, hi),
            ))
        }
    }
}

impl Vector for Gfni {
    const WIDTH: usize = 64;
    type Mul = __m512i;

    avx512_common!(Gfni);

    #[inline(always)]
    unsafe fn mul_const(c: u8) -> Self::Mul {
        // SAFETY: the caller guarantees AVX-512F.
        unsafe { _mm512_set1_epi64(gf::affine_matrix(c) as i64) }
    }
    #[inline(always)]
    unsafe fn mul2(self) -> Self {
        // SAFETY: the caller guarantees AVX-512F and GFNI.
        unsafe {
            let m = _mm512_set1_epi64(AFFINE_MUL2 as i64);
            Gfni(_mm512_gf2p8affine_epi64_epi8::<0>(self.0, m))
        }
    }
    #[inline(always)]
    unsafe fn mul2_xor(self, d: Self) -> Self {
        // SAFETY: the caller guarantees AVX-512F and GFNI.
        unsafe { self.mul2().xor(d) }
    }
    #[inline(always)]
    unsafe fn horner2(self, d1: Self, d0: Self) -> Self {
        // SAFETY: the caller guarantees AVX-512F and GFNI.
        unsafe {
            let m4 = _mm512_set1_epi64(AFFINE_MUL4 as i64);
            let m2 = _mm512_set1_epi64(AFFINE_MUL2 as i64);
            Gfni(_mm512_ternarylogic_epi64::<0x96>(
                _mm512_gf2p8affine_epi64_epi8::<0>(self.0, m4),
                _mm512_gf2p8affine_epi64_epi8::<0>(d1.0, m2),
                d0.0,
            ))
        }
    }
    #[inline(always)]
    unsafe fn mul(self, m: &Self::Mul) -> Self {
        // SAFETY: the caller guarantees AVX-512F and GFNI.
        Gfni(unsafe { _mm512_gf2p8affine_epi64_epi8::<0>(self.0, *m) })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn mul2_matrix_constant() {
        assert_eq!(super::AFFINE_MUL2, super::gf::affine_matrix(2));
        assert_eq!(super::AFFINE_MUL4, super::gf::affine_matrix(4));
    }
}
