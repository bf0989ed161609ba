//! The byte-at-a-time definition of P and Q, written as directly from the formulas as possible
//! (Q = Σ gⁱ·Dᵢ by table multiplication, no Horner, no SIMD). It is slow and exists to check the
//! kernels: the tests and the benches compare every path against it.

use super::gf;

/// P = D₀ ⊕ D₁ ⊕ … (byte by byte).
///
/// # Panics
/// If the lengths differ.
pub fn xor_gen(data: &[&[u8]], p: &mut [u8]) {
    for d in data {
        assert_eq!(d.len(), p.len(), "reference::xor_gen: length mismatch");
    }
    for (j, out) in p.iter_mut().enumerate() {
        *out = data.iter().fold(0, |acc, d| acc ^ d[j]);
    }
}

/// P as [`xor_gen`], Q = Σ gⁱ·Dᵢ (i = index in `data`), GF(2⁸) with polynomial 0x11D.
///
/// # Panics
/// If the lengths differ.
pub fn pq_gen(data: &[&[u8]], p: &mut [u8], q: &mut [u8]) {
    xor_gen(data, p);
    assert_eq!(q.len(), p.len(), "reference::pq_gen: length mismatch");
    for (j, out) in q.iter_mut().enumerate() {
        *out = data
            .iter()
            .enumerate()
            .fold(0, |acc, (i, d)| acc ^ gf::mul(gf::exp2(i), d[j]));
    }
}
