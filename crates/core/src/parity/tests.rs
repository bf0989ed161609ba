//! Every path against the byte-at-a-time reference: golden stripes, random stripes for
//! k = 1..=64 and 253, every loss pattern, RMW updates, check, odd lengths and misaligned
//! buffers. `NBRAID_SOAK=1` multiplies the random rounds.

use super::*;
use rand::rngs::SmallRng;
use rand::{Rng, RngCore, SeedableRng};

/// The kernels of every available path; prints the skipped ones by name.
fn all_kernels() -> Vec<Kernels> {
    let mut ks = Vec::new();
    for path in Path::ALL {
        match Kernels::new(path) {
            Some(k) => ks.push(k),
            None => println!(
                "skipped: {path} ({})",
                path.unavailable_reason().unwrap_or_default()
            ),
        }
    }
    ks
}

fn soak() -> usize {
    match std::env::var("NBRAID_SOAK") {
        Ok(v) => v.parse().unwrap_or(10).max(1),
        Err(_) => 1,
    }
}

fn rng(seed: u64) -> SmallRng {
    SmallRng::seed_from_u64(seed)
}

/// `n` chunks of `len` random bytes, each placed at a random offset (0..64) inside its own
/// allocation so the kernels see misaligned buffers.
struct Stripe {
    bufs: Vec<Vec<u8>>,
    offs: Vec<usize>,
    len: usize,
}

impl Stripe {
    fn random(r: &mut SmallRng, n: usize, len: usize, misalign: bool) -> Stripe {
        let mut bufs = Vec::with_capacity(n);
        let mut offs = Vec::with_capacity(n);
        for _ in 0..n {
            let off = if misalign { r.gen_range(0..64) } else { 0 };
            let mut b = vec![0u8; len + off];
            r.fill_bytes(&mut b);
            bufs.push(b);
            offs.push(off);
        }
        Stripe { bufs, offs, len }
    }
    fn refs(&self) -> Vec<&[u8]> {
        self.bufs
            .iter()
            .zip(&self.offs)
            .map(|(b, &o)| &b[o..o + self.len])
            .collect()
    }
    fn muts(&mut self) -> Vec<&mut [u8]> {
        let len = self.len;
        self.bufs
            .iter_mut()
            .zip(&self.offs)
            .map(|(b, &o)| &mut b[o..o + len])
            .collect()
    }
    fn chunk(&self, i: usize) -> &[u8] {
        &self.bufs[i][self.offs[i]..self.offs[i] + self.len]
    }
    fn chunk_mut(&mut self, i: usize) -> &mut [u8] {
        let (o, len) = (self.offs[i], self.len);
        &mut self.bufs[i][o..o + len]
    }
}

fn reference_pq(data: &[&[u8]]) -> (Vec<u8>, Vec<u8>) {
    let len = data[0].len();
    let (mut p, mut q) = (vec![0; len], vec![0; len]);
    reference::pq_gen(data, &mut p, &mut q);
    (p, q)
}

fn garbage(buf: &mut [u8]) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(31) ^ 0xA5;
    }
}

// ----- golden vectors -----

/// Three chunks of four bytes, worked by hand:
/// col 1: P = 0x80 ⊕ 0x80 ⊕ 0x01 = 0x01; Q = 0x80 ⊕ 2·0x80 ⊕ 4·0x01 = 0x80 ⊕ 0x1D ⊕ 0x04 = 0x99.
/// col 3: Q = 2·0x10 = 0x20.
const GOLDEN_3: [[u8; 4]; 3] = [
    [0x01, 0x80, 0xFF, 0x00],
    [0x01, 0x80, 0x00, 0x10],
    [0x01, 0x01, 0x00, 0x00],
];
const GOLDEN_3_P: [u8; 4] = [0x01, 0x01, 0xFF, 0x10];
const GOLDEN_3_Q: [u8; 4] = [0x07, 0x99, 0xFF, 0x20];

/// Four chunks of the single byte 0x80: P = 0, Q = 0x80·(1 ⊕ 2 ⊕ 4 ⊕ 8)
/// = 0x80 ⊕ 0x1D ⊕ 0x3A ⊕ 0x74 = 0xD3 (2·0x80 = 0x100 ⊕ 0x11D = 0x1D).
const GOLDEN_4_Q: u8 = 0xD3;

#[test]
fn golden_vectors_every_path() {
    for kern in all_kernels() {
        // As written, then tiled to lengths that reach the wide loops (every column is
        // independent, so P and Q tile the same way).
        for reps in [1usize, 3, 128, 1025] {
            let tile = |c: &[u8]| -> Vec<u8> { c.iter().copied().cycle().take(4 * reps).collect() };
            let data: Vec<Vec<u8>> = GOLDEN_3.iter().map(|c| tile(c)).collect();
            let refs: Vec<&[u8]> = data.iter().map(|d| d.as_slice()).collect();
            let (mut p, mut q) = (vec![0; 4 * reps], vec![0; 4 * reps]);
            kern.pq_gen(&refs, &mut p, &mut q);
            assert_eq!(p, tile(&GOLDEN_3_P), "{} P", kern.path());
            assert_eq!(q, tile(&GOLDEN_3_Q), "{} Q", kern.path());
            let mut p2 = vec![0; 4 * reps];
            kern.xor_gen(&refs, &mut p2);
            assert_eq!(p2, p, "{} xor_gen", kern.path());
            assert!(kern.check_pq(&refs, &p, &q));
        }
        for len in [1usize, 64, 4096] {
            let d = vec![0x80u8; len];
            let refs = [&d[..], &d[..], &d[..], &d[..]];
            let (mut p, mut q) = (vec![1; len], vec![1; len]);
            kern.pq_gen(&refs, &mut p, &mut q);
            assert!(p.iter().all(|&b| b == 0), "{} P", kern.path());
            assert!(q.iter().all(|&b| b == GOLDEN_4_Q), "{} Q", kern.path());
        }
    }
}

// ----- generation against the reference -----

fn lens_for(k: usize) -> &'static [usize] {
    const LENS: [&[usize]; 6] = [
        &[512],
        &[1, 4096],
        &[63, 1024 + 64],
        &[7, 2048],
        &[100, 512 * 3],
        &[4096 + 17, 0],
    ];
    LENS[k % LENS.len()]
}

#[test]
fn generate_matches_reference_k1_to_64_and_253() {
    let kernels = all_kernels();
    let mut r = rng(1);
    for round in 0..soak() {
        for k in (1..=64).chain([253]) {
            for &len in lens_for(k + round) {
                let s = Stripe::random(&mut r, k, len, true);
                let data = s.refs();
                let (rp, rq) = reference_pq(&data);
                for kern in &kernels {
                    let (mut p, mut q) = (vec![0xEE; len], vec![0xEE; len]);
                    kern.pq_gen(&data, &mut p, &mut q);
                    assert!(p == rp, "{} pq_gen P, k={k} len={len}", kern.path());
                    assert!(q == rq, "{} pq_gen Q, k={k} len={len}", kern.path());
                    let mut p2 = vec![0xEE; len];
                    kern.xor_gen(&data, &mut p2);
                    assert!(p2 == rp, "{} xor_gen, k={k} len={len}", kern.path());
                    let mut q2 = vec![0xEE; len];
                    kern.q_gen(&data, &mut q2);
                    assert!(q2 == rq, "{} q_gen, k={k} len={len}", kern.path());
                    // Accumulated in place: the first chunk's copy, then the rest folded in
                    // one or two passes.
                    let mut acc = data[0].to_vec();
                    let (a, b) = data[1..].split_at((k - 1) / 2);
                    for part in [a, b].into_iter().filter(|d| !d.is_empty()) {
                        kern.xor_into(&mut acc, part);
                    }
                    assert!(acc == rp, "{} xor_into, k={k} len={len}", kern.path());
                }
            }
        }
    }
}

/// P and Q folded a random number of chunks at a time (the first group generated, or folded
/// into zeroes) equal the reference's, on every path, for k = 1..=64 and 253.
#[test]
fn fold_in_groups_matches_reference() {
    let kernels = all_kernels();
    let mut r = rng(7);
    for round in 0..soak() {
        for k in (1..=64).chain([253]) {
            for &len in lens_for(k + round).iter().filter(|&&l| l > 0) {
                let s = Stripe::random(&mut r, k, len, true);
                let data = s.refs();
                let (rp, rq) = reference_pq(&data);
                for kern in &kernels {
                    let from_zero = r.gen_bool(0.5);
                    let (mut p, mut q) = (vec![0; len], vec![0; len]);
                    let mut first = 0;
                    while first < k {
                        let end = (first + r.gen_range(1..=8)).min(k);
                        if first == 0 && !from_zero {
                            kern.pq_gen(&data[..end], &mut p, &mut q);
                        } else {
                            kern.pq_fold(&data[first..end], first, &mut p, &mut q);
                        }
                        first = end;
                    }
                    let path = kern.path();
                    assert!(
                        p == rp,
                        "{path} pq_fold P, k={k} len={len} zero={from_zero}"
                    );
                    assert!(
                        q == rq,
                        "{path} pq_fold Q, k={k} len={len} zero={from_zero}"
                    );
                }
            }
        }
    }
}

/// Large aligned outputs (where generation streams) are folded with ordinary stores: P and Q
/// are read first.
#[test]
fn fold_large_aligned_outputs() {
    let len = STREAM_MIN_LEN;
    let s = Stripe::random(&mut rng(8), 6, len, false);
    let data = s.refs();
    let (rp, rq) = reference_pq(&data);
    for kern in all_kernels() {
        let (mut p, mut q) = (vec![0; len], vec![0; len]);
        kern.pq_gen(&data[..2], &mut p, &mut q);
        kern.pq_fold(&data[2..], 2, &mut p, &mut q);
        assert!(p == rp && q == rq, "{} pq_fold of {len} bytes", kern.path());
    }
}

/// Outputs long and aligned enough for the non-temporal stores, with and without them.
#[test]
fn generate_streaming_sizes() {
    let mut r = rng(2);
    let len = STREAM_MIN_LEN + 4096;
    let s = Stripe::random(&mut r, 5, len, false);
    let data = s.refs();
    let (rp, rq) = reference_pq(&data);
    let mut pb = vec![0u8; len + 64];
    let mut qb = vec![0u8; len + 64];
    let po = pb.as_ptr().align_offset(64);
    let qo = qb.as_ptr().align_offset(64);
    for kern in all_kernels() {
        for kern in [kern, kern.with_streaming(false)] {
            let (p, q) = (&mut pb[po..po + len], &mut qb[qo..qo + len]);
            kern.pq_gen(&data, p, q);
            assert!(*p == rp[..] && *q == rq[..], "{} pq_gen", kern.path());
            kern.xor_gen(&data, p);
            assert!(*p == rp[..], "{} xor_gen", kern.path());
            // In place, an output long and aligned enough: read before written.
            kern.xor_into(p, &data[..2]);
            let mut want = rp.clone();
            reference::xor_gen(&[&rp, data[0], data[1]], &mut want);
            assert!(*p == want[..], "{} xor_into", kern.path());
            // Two-data recovery into aligned outputs.
            let (oa, ob) = (p, q);
            let mut with_holes = data.clone();
            with_holes[1] = &[];
            with_holes[3] = &[];
            kern.recover_two_data_into(&with_holes, &rp, &rq, 1, 3, oa, ob);
            assert!(
                *oa == *data[1] && *ob == *data[3],
                "{} recover",
                kern.path()
            );
            let mut hole1 = data.clone();
            hole1[1] = &[];
            kern.recover_data_and_p_into(&hole1, &rq, 1, oa, ob);
            assert!(*oa == *data[1] && *ob == rp[..], "{} data+P", kern.path());
            kern.recover_data_and_q_into(&hole1, &rp, 1, oa, ob);
            assert!(*oa == *data[1] && *ob == rq[..], "{} data+Q", kern.path());
            kern.recover_data_p_into(&hole1, &rp, 1, ob);
            assert!(*ob == *data[1], "{} data via P", kern.path());
            kern.q_gen(&data, oa);
            assert!(*oa == rq[..], "{} q_gen", kern.path());
        }
    }
}

// ----- recovery -----

/// Apply one loss pattern to a copy of the stripe, recover in place, compare.
fn check_loss(kern: &Kernels, s: &Stripe, p: &[u8], q: &[u8], loss: Loss, into: bool) {
    let k = s.bufs.len();
    let len = s.len;
    let mut t = Stripe {
        bufs: s.bufs.clone(),
        offs: s.offs.clone(),
        len,
    };
    let (mut tp, mut tq) = (p.to_vec(), q.to_vec());
    let lost: Vec<usize> = match loss {
        Loss::Data(x) | Loss::DataP(x) | Loss::DataQ(x) => vec![x],
        Loss::TwoData(a, b) => vec![a, b],
        _ => vec![],
    };
    for &x in &lost {
        garbage(t.chunk_mut(x));
    }
    if matches!(loss, Loss::P | Loss::DataP(_) | Loss::PQ) {
        garbage(&mut tp);
    }
    if matches!(loss, Loss::Q | Loss::DataQ(_) | Loss::PQ) {
        garbage(&mut tq);
    }
    if into && !lost.is_empty() {
        // Survivors shared, lost slots as empty slices, separate outputs.
        let mut outs = vec![vec![0x5Au8; len]; 2];
        {
            let mut refs = t.refs();
            for &x in &lost {
                refs[x] = &[];
            }
            let [o0, o1] = &mut outs[..] else {
                unreachable!()
            };
            match loss {
                Loss::Data(x) => kern.recover_data_p_into(&refs, &tp, x, o0),
                Loss::DataP(x) => {
                    kern.recover_data_and_p_into(&refs, &tq, x, o0, o1);
                    tp.copy_from_slice(o1);
                }
                Loss::DataQ(x) => {
                    kern.recover_data_and_q_into(&refs, &tp, x, o0, o1);
                    tq.copy_from_slice(o1);
                }
                Loss::TwoData(a, b) => kern.recover_two_data_into(&refs, &tp, &tq, a, b, o0, o1),
                _ => unreachable!(),
            }
        }
        for (i, &x) in lost.iter().enumerate() {
            t.chunk_mut(x).copy_from_slice(&outs[i]);
        }
    } else {
        let mut muts = t.muts();
        kern.recover(&mut muts, &mut tp, Some(&mut tq), loss);
    }
    for i in 0..k {
        assert!(
            t.chunk(i) == s.chunk(i),
            "{} {loss:?} (into={into}): data[{i}] wrong, k={k} len={len}",
            kern.path()
        );
    }
    assert!(
        tp == p,
        "{} {loss:?}: P wrong, k={k} len={len}",
        kern.path()
    );
    assert!(
        tq == q,
        "{} {loss:?}: Q wrong, k={k} len={len}",
        kern.path()
    );
}

fn patterns(r: &mut SmallRng, k: usize) -> Vec<Loss> {
    let x = r.gen_range(0..k);
    let mut v = vec![
        Loss::Data(x),
        Loss::DataP(x),
        Loss::DataQ(x),
        Loss::P,
        Loss::Q,
        Loss::PQ,
        Loss::Data(k - 1),
        Loss::DataP(0),
        Loss::DataQ(k - 1),
    ];
    if k >= 2 {
        let a = r.gen_range(0..k);
        let b = (a + r.gen_range(1..k)) % k;
        v.extend([
            Loss::TwoData(a, b),
            Loss::TwoData(0, k - 1),
            Loss::TwoData(k - 1, 0),
        ]);
    }
    v
}

#[test]
fn recover_every_pattern_k1_to_64_and_253() {
    let kernels = all_kernels();
    let mut r = rng(3);
    for round in 0..soak() {
        for k in (1..=64).chain([253]) {
            for &len in lens_for(k + round) {
                let len = len.max(1);
                let s = Stripe::random(&mut r, k, len, true);
                let (p, q) = reference_pq(&s.refs());
                let pats = patterns(&mut r, k);
                for kern in &kernels {
                    for (i, &loss) in pats.iter().enumerate() {
                        check_loss(kern, &s, &p, &q, loss, i % 2 == 1);
                    }
                }
            }
        }
    }
}

#[test]
fn recover_all_pairs_small_stripe() {
    recover_all_pairs(7, 1024 + 5);
}

/// A wide stripe (no software prefetch), several blocks and a tail.
#[test]
fn recover_all_pairs_wide_stripe() {
    recover_all_pairs(21, 3 * 1024 + 256 + 3);
}

fn recover_all_pairs(k: usize, len: usize) {
    let mut r = rng(4);
    let s = Stripe::random(&mut r, k, len, true);
    let (p, q) = reference_pq(&s.refs());
    for kern in all_kernels() {
        for a in 0..k {
            for b in 0..k {
                if a != b {
                    check_loss(&kern, &s, &p, &q, Loss::TwoData(a, b), (a + b) % 2 == 0);
                }
            }
            check_loss(&kern, &s, &p, &q, Loss::Data(a), a % 2 == 0);
            check_loss(&kern, &s, &p, &q, Loss::DataP(a), a % 2 == 0);
            check_loss(&kern, &s, &p, &q, Loss::DataQ(a), a % 2 == 1);
        }
    }
}

#[test]
fn raid5_recover_without_q() {
    let mut r = rng(5);
    let s = Stripe::random(&mut r, 4, 4096, false);
    let mut p = vec![0; 4096];
    reference::xor_gen(&s.refs(), &mut p);
    for kern in all_kernels() {
        for loss in [Loss::Data(2), Loss::P] {
            let mut t = Stripe {
                bufs: s.bufs.clone(),
                offs: s.offs.clone(),
                len: s.len,
            };
            let mut tp = p.clone();
            match loss {
                Loss::Data(x) => garbage(t.chunk_mut(x)),
                _ => garbage(&mut tp),
            }
            kern.recover(&mut t.muts(), &mut tp, None, loss);
            assert!(t.bufs == s.bufs && tp == p, "{} {loss:?}", kern.path());
        }
    }
}

#[test]
#[should_panic(expected = "needs Q")]
fn recover_two_without_q_panics() {
    let mut a = [0u8; 8];
    let mut b = [0u8; 8];
    let mut p = [0u8; 8];
    recover(
        &mut [&mut a[..], &mut b[..]],
        &mut p,
        None,
        Loss::TwoData(0, 1),
    );
}

// ----- read-modify-write -----

#[test]
fn update_matches_regeneration() {
    let kernels = all_kernels();
    let mut r = rng(6);
    for _ in 0..soak() {
        for (k, len) in [
            (1, 512),
            (3, 100),
            (8, 4096),
            (22, 1024 + 3),
            (40, 512),
            (253, 64),
        ] {
            let s = Stripe::random(&mut r, k, len, true);
            let old = s.refs();
            let (p0, q0) = reference_pq(&old);
            // 1, a few, and more than one group (16) of changed chunks.
            for nchg in [1usize, 3.min(k), 20.min(k)] {
                let mut slots: Vec<usize> = (0..k).collect();
                for i in 0..nchg {
                    let j = r.gen_range(i..k);
                    slots.swap(i, j);
                }
                slots.truncate(nchg);
                let news: Vec<Vec<u8>> = slots
                    .iter()
                    .map(|_| {
                        let mut v = vec![0; len];
                        r.fill_bytes(&mut v);
                        v
                    })
                    .collect();
                let mut new_data = old.clone();
                for (&sl, n) in slots.iter().zip(&news) {
                    new_data[sl] = n;
                }
                let (p1, q1) = reference_pq(&new_data);
                let changes: Vec<Change> = slots
                    .iter()
                    .zip(&news)
                    .map(|(&slot, n)| Change {
                        slot,
                        old: old[slot],
                        new: n,
                    })
                    .collect();
                for kern in &kernels {
                    let (mut p, mut q) = (p0.clone(), q0.clone());
                    kern.pq_update_many(&mut p, &mut q, &changes);
                    assert!(
                        p == p1 && q == q1,
                        "{} pq_update_many k={k} n={nchg}",
                        kern.path()
                    );
                    let mut p = p0.clone();
                    kern.xor_update_many(&mut p, &changes);
                    assert!(p == p1, "{} xor_update_many k={k} n={nchg}", kern.path());
                    if nchg == 1 {
                        let c = changes[0];
                        let (mut p, mut q) = (p0.clone(), q0.clone());
                        kern.pq_update(&mut p, &mut q, c.slot, c.old, c.new);
                        assert!(p == p1 && q == q1, "{} pq_update k={k}", kern.path());
                        let mut p = p0.clone();
                        kern.xor_update(&mut p, c.old, c.new);
                        assert!(p == p1, "{} xor_update k={k}", kern.path());
                    }
                }
            }
        }
    }
}

// ----- check -----

#[test]
fn check_detects_any_flipped_byte() {
    let kernels = all_kernels();
    let mut r = rng(7);
    for _ in 0..soak() {
        for (k, len) in [(1, 64), (4, 4096 + 9), (8, 512), (22, 2048), (253, 100)] {
            let mut s = Stripe::random(&mut r, k, len, true);
            let (mut p, mut q) = reference_pq(&s.refs());
            for kern in &kernels {
                assert!(kern.check_p(&s.refs(), &p), "{}", kern.path());
                assert!(kern.check_pq(&s.refs(), &p, &q), "{}", kern.path());
            }
            for _ in 0..8 {
                let at = r.gen_range(0..len);
                let bit = 1u8 << r.gen_range(0..8);
                let target = r.gen_range(0..k + 2);
                let flip = |s: &mut Stripe, p: &mut Vec<u8>, q: &mut Vec<u8>| match target {
                    t if t < k => s.chunk_mut(t)[at] ^= bit,
                    t if t == k => p[at] ^= bit,
                    _ => q[at] ^= bit,
                };
                flip(&mut s, &mut p, &mut q);
                for kern in &kernels {
                    assert!(
                        !kern.check_pq(&s.refs(), &p, &q),
                        "{} check_pq missed a flip in #{target} at {at}",
                        kern.path()
                    );
                    assert_eq!(
                        kern.check_p(&s.refs(), &p),
                        target > k,
                        "{} check_p, flip in #{target} at {at}",
                        kern.path()
                    );
                }
                flip(&mut s, &mut p, &mut q);
            }
        }
    }
}

// ----- programmer errors -----

#[test]
#[should_panic(expected = "data[1] is 100 bytes but data[0] is 512")]
fn mismatched_data_lengths_panic() {
    let (a, b) = (vec![0u8; 512], vec![0u8; 100]);
    let mut p = vec![0u8; 512];
    xor_gen(&[&a, &b], &mut p);
}

#[test]
#[should_panic(expected = "q is 511 bytes but the data chunks are 512")]
fn mismatched_parity_length_panics() {
    let a = vec![0u8; 512];
    let (mut p, mut q) = (vec![0u8; 512], vec![0u8; 511]);
    pq_gen(&[&a], &mut p, &mut q);
}

#[test]
#[should_panic(expected = "the lost slots must differ")]
fn same_lost_slots_panic() {
    let mut a = [0u8; 8];
    let mut b = [0u8; 8];
    let (p, q) = ([0u8; 8], [0u8; 8]);
    recover_two_data(&mut [&mut a[..], &mut b[..]], &p, &q, 1, 1);
}

#[test]
#[should_panic(expected = "out of range")]
fn lost_slot_out_of_range_panics() {
    let mut a = [0u8; 8];
    let p = [0u8; 8];
    recover_data_p(&mut [&mut a[..]], &p, 1);
}

#[test]
#[should_panic(expected = "no data chunks")]
fn empty_stripe_panics() {
    let mut p = [0u8; 8];
    xor_gen(&[], &mut p);
}

#[test]
#[should_panic(expected = "at most 255")]
fn oversized_stripe_panics() {
    let mut bufs = vec![[0u8; 4]; MAX_DATA + 1];
    let mut data: Vec<&mut [u8]> = bufs.iter_mut().map(|b| &mut b[..]).collect();
    let (p, q) = ([0u8; 4], [0u8; 4]);
    recover_two_data(&mut data, &p, &q, 0, 1);
}

#[test]
#[should_panic(expected = "parity::pq_fold: 256 data chunks, at most 255")]
fn fold_past_the_last_slot_panics() {
    let a = [0u8; 4];
    let (mut p, mut q) = ([0u8; 4], [0u8; 4]);
    pq_fold(&[&a, &a], MAX_DATA - 1, &mut p, &mut q);
}

#[test]
fn paths_report() {
    assert!(Path::Scalar.is_available());
    assert!(Path::available().contains(&Path::best()));
    assert_eq!(Kernels::best().path(), Path::best());
    for path in Path::ALL {
        assert_eq!(path.is_available(), Kernels::new(path).is_some());
        assert_eq!(path.is_available(), path.unavailable_reason().is_none());
    }
    println!("best path: {}", Path::best());
}
