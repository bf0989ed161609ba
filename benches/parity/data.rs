//! The benched bytes: 4 KiB-aligned chunk buffers, a pool of stripes (one hot stripe, or
//! enough to leave the caches), and the plain read the throughput is compared with.

use nbraid_core::parity::Kernels;
use rand::rngs::SmallRng;
use rand::{RngCore, SeedableRng};

/// A buffer aligned to 4 KiB, as the engine's O_DIRECT buffers are.
pub(crate) struct Buf {
    pub(crate) v: Vec<u8>,
    pub(crate) off: usize,
    pub(crate) len: usize,
}

impl Buf {
    pub(crate) fn new(len: usize, rng: &mut SmallRng) -> Buf {
        let mut v = vec![0u8; len + 4096];
        let off = v.as_ptr().align_offset(4096);
        rng.fill_bytes(&mut v[off..off + len]);
        Buf { v, off, len }
    }
    pub(crate) fn get(&self) -> &[u8] {
        &self.v[self.off..self.off + self.len]
    }
    pub(crate) fn get_mut(&mut self) -> &mut [u8] {
        &mut self.v[self.off..self.off + self.len]
    }
}

/// `n` stripes of `k` data chunks with their P and Q (md convention, correct after `new`).
pub(crate) struct Pool {
    pub(crate) k: usize,
    pub(crate) len: usize,
    pub(crate) data: Vec<Vec<Buf>>,
    pub(crate) parity: Vec<[Buf; 2]>,
}

impl Pool {
    pub(crate) fn new(k: usize, len: usize, stripes: usize) -> Pool {
        let mut rng = SmallRng::seed_from_u64(0x5eed + k as u64);
        let data: Vec<Vec<Buf>> = (0..stripes)
            .map(|_| (0..k).map(|_| Buf::new(len, &mut rng)).collect())
            .collect();
        let mut parity: Vec<[Buf; 2]> = (0..stripes)
            .map(|_| [Buf::new(len, &mut rng), Buf::new(len, &mut rng)])
            .collect();
        let kern = Kernels::best();
        for (d, [p, q]) in data.iter().zip(parity.iter_mut()) {
            let refs: Vec<&[u8]> = d.iter().map(Buf::get).collect();
            kern.pq_gen(&refs, p.get_mut(), q.get_mut());
        }
        Pool {
            k,
            len,
            data,
            parity,
        }
    }
}

/// The two lost data slots of the recovery benches.
pub(crate) fn lost(k: usize) -> (usize, usize) {
    (1, k - 2)
}

/// Plain read of the bytes: a sum of 64-bit words, as wide as the CPU allows.
pub(crate) fn read_sum(chunks: &[&[u8]]) -> u64 {
    chunks.iter().fold(0u64, |acc, c| acc.wrapping_add(sum(c)))
}

pub(crate) fn sum(b: &[u8]) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx512f") {
        // SAFETY: AVX-512F was just detected.
        return unsafe { sum_avx512(b) };
    }
    let words = b.chunks_exact(8);
    let tail = words.remainder().iter().map(|&x| x as u64).sum::<u64>();
    // Plain u64 adds, which the compiler vectorises for the build's target.
    words.fold(tail, |acc, w| {
        acc.wrapping_add(u64::from_ne_bytes(w.try_into().expect("8 bytes")))
    })
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn sum_avx512(b: &[u8]) -> u64 {
    use std::arch::x86_64::*;
    let mut acc = [_mm512_setzero_si512(); 4];
    let blocks = b.chunks_exact(256);
    let tail = blocks.remainder();
    for blk in blocks {
        for (i, a) in acc.iter_mut().enumerate() {
            // SAFETY: `blk` is 256 bytes long, so [64 i, 64 i + 64) is in bounds.
            let v = unsafe { _mm512_loadu_si512(blk.as_ptr().add(64 * i).cast()) };
            *a = _mm512_add_epi64(*a, v);
        }
    }
    let s = _mm512_add_epi64(
        _mm512_add_epi64(acc[0], acc[1]),
        _mm512_add_epi64(acc[2], acc[3]),
    );
    let mut t = _mm512_reduce_add_epi64(s) as u64;
    for &x in tail {
        t = t.wrapping_add(x as u64);
    }
    t
}
