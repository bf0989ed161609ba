//! GF(2^8) arithmetic with the RAID-6 field of Linux md and ISA-L: reduction polynomial
//! x^8 + x^4 + x^3 + x^2 + 1 (0x11D), generator g = 2 (order 255).
//!
//! Tables are built at compile time. These scalar functions are the ground truth the SIMD
//! kernels are tested against; the kernels only use them to prepare per-call constants.

/// The reduction polynomial (with the x^8 term).
pub const POLY: u16 = 0x11D;

/// `EXP[i] = g^i` for `i` in `0..512` (the period is 255, the table is doubled so that
/// `EXP[LOG[a] + LOG[b]]` needs no reduction).
pub static EXP: [u8; 512] = build_exp();

/// `LOG[a]` = the `i` with `g^i = a`, for `a != 0`; `LOG[0]` is unused (0).
pub static LOG: [u8; 256] = build_log();

const fn build_exp() -> [u8; 512] {
    let mut t = [0u8; 512];
    let mut x: u16 = 1;
    let mut i = 0;
    while i < 512 {
        t[i] = x as u8;
        x <<= 1;
        if x & 0x100 != 0 {
            x ^= POLY;
        }
        i += 1;
    }
    t
}

const fn build_log() -> [u8; 256] {
    let exp = build_exp();
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 255 {
        t[exp[i] as usize] = i as u8;
        i += 1;
    }
    t
}

/// `a · 2` in the field.
#[inline(always)]
pub const fn mul2(a: u8) -> u8 {
    (a << 1)
        ^ if a & 0x80 != 0 {
            (POLY & 0xFF) as u8
        } else {
            0
        }
}

/// `a · b` in the field.
#[inline]
pub fn mul(a: u8, b: u8) -> u8 {
    if a == 0 || b == 0 {
        0
    } else {
        EXP[LOG[a as usize] as usize + LOG[b as usize] as usize]
    }
}

/// Bit-serial multiplication (shift and add), independent of the tables; used by the tests.
pub const fn mul_slow(mut a: u8, mut b: u8) -> u8 {
    let mut r = 0u8;
    while b != 0 {
        if b & 1 != 0 {
            r ^= a;
        }
        a = mul2(a);
        b >>= 1;
    }
    r
}

/// `g^i` (any `i`; the exponent is taken modulo 255).
#[inline]
pub fn exp2(i: usize) -> u8 {
    EXP[i % 255]
}

/// The multiplicative inverse of `a`.
///
/// # Panics
/// If `a == 0`.
#[inline]
pub fn inv(a: u8) -> u8 {
    assert!(a != 0, "gf::inv(0): zero has no inverse");
    EXP[255 - LOG[a as usize] as usize]
}

/// The 8×8 bit matrix of "multiply by `c`", laid out for `gf2p8affineqb` (byte `7 - i` of
/// the qword is row `i`: the input bits that feed output bit `i`).
pub fn affine_matrix(c: u8) -> u64 {
    // Column j is c·2^j (the image of input bit j).
    let mut cols = [0u8; 8];
    let mut x = c;
    for col in cols.iter_mut() {
        *col = x;
        x = mul2(x);
    }
    let mut m = 0u64;
    for i in 0..8 {
        let mut row = 0u8;
        for (j, col) in cols.iter().enumerate() {
            row |= ((col >> i) & 1) << j;
        }
        m |= (row as u64) << (8 * (7 - i));
    }
    m
}

/// Apply an affine matrix (as laid out by [`affine_matrix`]) to one byte, the way
/// `gf2p8affineqb` does with a zero constant; used by the tests.
pub fn affine_apply(m: u64, x: u8) -> u8 {
    let mut r = 0u8;
    for i in 0..8 {
        let row = (m >> (8 * (7 - i))) as u8;
        if (row & x).count_ones() & 1 == 1 {
            r |= 1 << i;
        }
    }
    r
}

/// Products of `c` with every low nibble and every high nibble: `mul(c, x) = lo[x & 15] ^
/// hi[x >> 4]`. The shuffle-based (PSHUFB) kernels use these.
pub fn nibble_tables(c: u8) -> ([u8; 16], [u8; 16]) {
    let mut lo = [0u8; 16];
    let mut hi = [0u8; 16];
    for n in 0..16u8 {
        lo[n as usize] = mul(c, n);
        hi[n as usize] = mul(c, n << 4);
    }
    (lo, hi)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_match_bit_serial_multiplication() {
        for a in 0..=255u8 {
            for b in 0..=255u8 {
                assert_eq!(mul(a, b), mul_slow(a, b), "{a:#x} * {b:#x}");
            }
        }
    }

    #[test]
    fn generator_has_order_255() {
        let mut seen = [false; 256];
        for i in 0..255 {
            let x = exp2(i);
            assert!(!seen[x as usize], "g^{i} repeats");
            seen[x as usize] = true;
        }
        assert_eq!(exp2(255), 1);
        assert!(!seen[0]);
    }

    #[test]
    fn inverses() {
        for a in 1..=255u8 {
            assert_eq!(mul(a, inv(a)), 1);
        }
        // Hand-checkable: 2 · 0x8E = 0x11C ^ 0x11D = 1.
        assert_eq!(inv(2), 0x8E);
    }

    #[test]
    fn affine_and_nibble_forms_agree_with_mul() {
        for c in 0..=255u8 {
            let m = affine_matrix(c);
            let (lo, hi) = nibble_tables(c);
            for x in 0..=255u8 {
                assert_eq!(affine_apply(m, x), mul(c, x));
                assert_eq!(lo[(x & 15) as usize] ^ hi[(x >> 4) as usize], mul(c, x));
            }
        }
    }
}
