//! The register abstraction the generic kernels are written against, and its two portable
//! implementations: `u8` (one byte, used for tails) and `u64` (eight bytes at once, SWAR; the
//! `Scalar` path). The x86 implementations live in `x86.rs`.

use super::gf;

/// A register of `WIDTH` independent GF(2⁸) bytes.
///
/// # Safety
/// Every method is `unsafe` because the SIMD implementations execute instructions the CPU may
/// lack: a caller must have checked that the CPU has the implementing type's features (the
/// dispatcher does, once). Pointers passed to `load`/`store`/`stream` must be valid for
/// `WIDTH` bytes; `stream` additionally needs `WIDTH`-byte alignment.
pub(super) trait Vector: Copy {
    /// Bytes per register.
    const WIDTH: usize;
    /// A prepared "multiply by constant c" (tables or a bit matrix).
    type Mul: Copy;

    /// Prepare multiplication by `c`.
    unsafe fn mul_const(c: u8) -> Self::Mul;
    unsafe fn zero() -> Self;
    unsafe fn load(p: *const u8) -> Self;
    unsafe fn store(self, p: *mut u8);
    /// Store bypassing the caches where the ISA allows (non-temporal); `fence` after a run.
    #[inline(always)]
    unsafe fn stream(self, p: *mut u8) {
        // SAFETY: same contract as `stream`, which is stronger than `store`'s.
        unsafe { self.store(p) }
    }
    /// The fewest sources for which the P+Q kernels prefetch (see `kernels::pf_distance`).
    const PF_MIN_K: usize = 1;
    /// Hint that the line at `p` will be read soon (any address; never faults).
    #[inline(always)]
    unsafe fn prefetch(_p: *const u8) {}
    /// Order non-temporal stores before what follows.
    #[inline(always)]
    unsafe fn fence() {}
    unsafe fn xor(self, o: Self) -> Self;
    #[inline(always)]
    unsafe fn xor3(self, a: Self, b: Self) -> Self {
        // SAFETY: forwarded contract.
        unsafe { self.xor(a).xor(b) }
    }
    unsafe fn or(self, o: Self) -> Self;
    unsafe fn is_zero(self) -> bool;
    /// Multiply every byte by g = 2.
    unsafe fn mul2(self) -> Self;
    /// `self · 2 ⊕ d`: one Horner step.
    #[inline(always)]
    unsafe fn mul2_xor(self, d: Self) -> Self {
        // SAFETY: forwarded contract.
        unsafe { self.mul2().xor(d) }
    }
    /// `(self · 2 ⊕ d1) · 2 ⊕ d0`: two Horner steps (GFNI does it in three instructions
    /// instead of four: self·4 ⊕ d1·2 ⊕ d0).
    #[inline(always)]
    unsafe fn horner2(self, d1: Self, d0: Self) -> Self {
        // SAFETY: forwarded contract.
        unsafe { self.mul2_xor(d1).mul2_xor(d0) }
    }
    /// Multiply every byte by the prepared constant.
    unsafe fn mul(self, m: &Self::Mul) -> Self;
}

impl Vector for u8 {
    const WIDTH: usize = 1;
    type Mul = u8;

    #[inline(always)]
    unsafe fn mul_const(c: u8) -> u8 {
        c
    }
    #[inline(always)]
    unsafe fn zero() -> Self {
        0
    }
    #[inline(always)]
    unsafe fn load(p: *const u8) -> Self {
        // SAFETY: the caller guarantees `p` is valid for one byte.
        unsafe { p.read() }
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut u8) {
        // SAFETY: the caller guarantees `p` is valid for one byte.
        unsafe { p.write(self) }
    }
    #[inline(always)]
    unsafe fn xor(self, o: Self) -> Self {
        self ^ o
    }
    #[inline(always)]
    unsafe fn or(self, o: Self) -> Self {
        self | o
    }
    #[inline(always)]
    unsafe fn is_zero(self) -> bool {
        self == 0
    }
    #[inline(always)]
    unsafe fn mul2(self) -> Self {
        gf::mul2(self)
    }
    #[inline(always)]
    unsafe fn mul(self, m: &u8) -> Self {
        gf::mul(self, *m)
    }
}

const LOW7: u64 = 0x7F7F_7F7F_7F7F_7F7F;
const HIGH: u64 = 0x8080_8080_8080_8080;

#[inline(always)]
fn swar_mul2(x: u64) -> u64 {
    let hi = (x & HIGH) >> 7;
    ((x & LOW7) << 1) ^ (hi * 0x1D)
}

impl Vector for u64 {
    const WIDTH: usize = 8;
    type Mul = u8;

    #[inline(always)]
    unsafe fn mul_const(c: u8) -> u8 {
        c
    }
    #[inline(always)]
    unsafe fn zero() -> Self {
        0
    }
    #[inline(always)]
    unsafe fn load(p: *const u8) -> Self {
        // SAFETY: the caller guarantees `p` is valid for 8 bytes; no alignment is assumed.
        unsafe { p.cast::<u64>().read_unaligned() }
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut u8) {
        // SAFETY: the caller guarantees `p` is valid for 8 bytes; no alignment is assumed.
        unsafe { p.cast::<u64>().write_unaligned(self) }
    }
    #[inline(always)]
    unsafe fn xor(self, o: Self) -> Self {
        self ^ o
    }
    #[inline(always)]
    unsafe fn or(self, o: Self) -> Self {
        self | o
    }
    #[inline(always)]
    unsafe fn is_zero(self) -> bool {
        self == 0
    }
    #[inline(always)]
    unsafe fn mul2(self) -> Self {
        swar_mul2(self)
    }
    #[inline(always)]
    unsafe fn mul(self, m: &u8) -> Self {
        // Shift and add over the bits of the constant.
        let (mut x, mut c, mut r) = (self, *m, 0u64);
        while c != 0 {
            if c & 1 != 0 {
                r ^= x;
            }
            x = swar_mul2(x);
            c >>= 1;
        }
        r
    }
}
