//! The generic kernels, written once against [`Vector`] and instantiated per path.
//!
//! Every kernel walks the chunks column by column: a block of `U` registers at the same offset
//! in every source is loaded once and folded into accumulators that stay in registers for the
//! whole stripe; Q uses Horner's rule from the highest slot down
//! (Q = ((D_{k-1}·g ⊕ D_{k-2})·g ⊕ …)·g ⊕ D₀), so each step is one multiply-by-2 and one XOR.
//! Two sources are folded per step where possible (P ^= D_{i+1} ⊕ D_i, Q = Q·4 ⊕ D_{i+1}·2 ⊕
//! D_i): with GFNI that is two affine transforms and two three-way XORs per pair, the fewest
//! instructions per source byte. Recovery and check fuse the syndrome computation with the
//! finishing step, so each stripe is read once and each output written once. Sources of
//! small stripes are software-prefetched (`pf_distance`).
//!
//! A length that is not a multiple of the block is finished with single registers and then
//! single bytes.

#![allow(clippy::needless_range_loop)] // p[u], q[u], … index parallel register arrays

use super::vector::Vector;

/// What a P+Q pass does with the syndromes P' and Q' it computes over the present sources.
pub(super) mod mode {
    /// out0 = P, out1 = Q.
    pub const GEN_PQ: u8 = 0;
    /// out1 = Q.
    pub const GEN_Q: u8 = 1;
    /// Data `skip[0]` and P lost: out0 = D = m0·(Q ⊕ Q'), out1 = P' ⊕ D (m0 = g^-x).
    pub const REC_DP: u8 = 2;
    /// Data `skip[0]` and Q lost: out0 = D = P ⊕ P', out1 = Q' ⊕ m0·D (m0 = g^x).
    pub const REC_DQ: u8 = 3;
    /// Data `skip[0]` = a and `skip[1]` = b lost: with Pxy = P ⊕ P', Qxy = Q ⊕ Q':
    /// out0 = Da = m0·Pxy ⊕ m1·Qxy, out1 = Db = Pxy ⊕ Da.
    pub const REC_DD: u8 = 4;
    /// Compare P', Q' with p_in, q_in.
    pub const CHECK: u8 = 5;
    /// Fold the sources into P and Q held elsewhere: out0 ^= P', out1 ^= m0·Q' (m0 = g^first
    /// slot: the sources' Q coefficients continue from there).
    pub const FOLD_PQ: u8 = 6;
}

/// Software prefetch distance in bytes for a stripe of `k` sources (0 = none). Measured on the
/// development machine (4 KiB-aligned chunks): 2 KiB ahead gains ~5% up to a dozen sources,
/// and costs up to 25% beyond (k = 16, 22), whatever the distance: there, the hardware
/// prefetchers do better alone. A register type may also set a floor (`Vector::PF_MIN_K`).
#[inline(always)]
fn pf_distance<V: Vector>(k: usize) -> usize {
    if (V::PF_MIN_K..=PF_MAX_K).contains(&k) {
        PF_DISTANCE
    } else {
        0
    }
}
const PF_MAX_K: usize = 12;
const PF_DISTANCE: usize = 2048;

/// One P+Q pass. Pointers are valid for `len` bytes where the mode uses them (else null);
/// sources at the `skip` slots are not read (any length), all others are `len` bytes long.
pub(super) struct PqJob<'a, 'b> {
    pub srcs: &'a [&'b [u8]],
    pub len: usize,
    pub skip: [usize; 2],
    pub m: [u8; 2],
    pub p_in: *const u8,
    pub q_in: *const u8,
    pub out0: *mut u8,
    pub out1: *mut u8,
}

/// One XOR pass: out = ⊕ srcs (`out` non-null), or out ^= ⊕ srcs (`acc`: `out` is read
/// first, in place), or compare ⊕ srcs with `cmp`.
pub(super) struct XorJob<'a, 'b> {
    pub srcs: &'a [&'b [u8]],
    pub len: usize,
    pub out: *mut u8,
    pub cmp: *const u8,
    /// `out` holds an input too (it overlaps no source).
    pub acc: bool,
}

/// One read-modify-write pass: P ^= ⊕ (old ⊕ new), Q ^= Σ g^slot·(old ⊕ new) (if `q` non-null).
pub(super) struct UpdJob<'a, 'b> {
    pub changes: &'a [super::Change<'b>],
    pub len: usize,
    pub p: *mut u8,
    pub q: *mut u8,
}

#[inline(always)]
unsafe fn store<V: Vector, const NT: bool>(v: V, p: *mut u8) {
    // SAFETY: forwarded contract; NT runs are only chosen for aligned outputs.
    unsafe {
        if NT {
            v.stream(p)
        } else {
            v.store(p)
        }
    }
}

/// The syndromes of the block at `off`: P' = ⊕ Dᵢ and Q' = Σ gⁱ·Dᵢ over the present sources
/// (a lost source counts as zero), by Horner's rule from the top source down, two sources per
/// step where neither is lost.
#[inline(always)]
unsafe fn syndromes<V: Vector, const U: usize>(
    holes: bool,
    job: &PqJob,
    p: &mut [V; U],
    q: &mut [V; U],
    off: usize,
    pf: usize,
) {
    let [s0, s1] = job.skip;
    let lost = |i: usize| holes && (i == s0 || i == s1);
    let top = job.srcs.len() - 1;
    // SAFETY: the caller guarantees the CPU features of `V` and that present sources are valid
    // at `off .. off + U * V::WIDTH`; prefetches never fault.
    unsafe {
        if lost(top) {
            *p = [V::zero(); U];
            *q = [V::zero(); U];
        } else {
            let s = job.srcs[top].as_ptr().add(off);
            for u in 0..U {
                p[u] = V::load(s.add(u * V::WIDTH));
                q[u] = p[u];
            }
        }
        let mut i = top;
        while i > 0 {
            let hi = i - 1;
            if i >= 2 && !lost(hi) && !lost(hi - 1) {
                let src1 = job.srcs[hi].as_ptr().add(off);
                let src0 = job.srcs[hi - 1].as_ptr().add(off);
                for u in 0..U {
                    if pf != 0 {
                        V::prefetch(src1.wrapping_add(pf + u * V::WIDTH));
                        V::prefetch(src0.wrapping_add(pf + u * V::WIDTH));
                    }
                    let d1 = V::load(src1.add(u * V::WIDTH));
                    let d0 = V::load(src0.add(u * V::WIDTH));
                    p[u] = p[u].xor3(d1, d0);
                    q[u] = q[u].horner2(d1, d0);
                }
                i -= 2;
            } else if lost(hi) {
                for qu in q.iter_mut() {
                    *qu = qu.mul2();
                }
                i -= 1;
            } else {
                let s = job.srcs[hi].as_ptr().add(off);
                for u in 0..U {
                    if pf != 0 {
                        V::prefetch(s.wrapping_add(pf + u * V::WIDTH));
                    }
                    let d = V::load(s.add(u * V::WIDTH));
                    p[u] = p[u].xor(d);
                    q[u] = q[u].mul2_xor(d);
                }
                i -= 1;
            }
        }
    }
}

/// Turn the syndromes P', Q' of the block at `off` into the mode's outputs. Returns false when
/// a CHECK finds a difference.
#[inline(always)]
unsafe fn finish<V: Vector, const U: usize, const MODE: u8, const NT: bool>(
    job: &PqJob,
    p: &[V; U],
    q: &[V; U],
    m0: &V::Mul,
    m1: &V::Mul,
    off: usize,
) -> bool {
    use mode::*;
    // SAFETY: the caller guarantees the CPU features of `V` and that the mode's pointers are
    // valid at `off .. off + U * V::WIDTH`.
    unsafe {
        let w = |base: *const u8, u: usize| base.add(off + u * V::WIDTH);
        let o = |base: *mut u8, u: usize| base.add(off + u * V::WIDTH);
        match MODE {
            GEN_PQ => {
                for u in 0..U {
                    store::<V, NT>(p[u], o(job.out0, u));
                    store::<V, NT>(q[u], o(job.out1, u));
                }
            }
            GEN_Q => {
                for u in 0..U {
                    store::<V, NT>(q[u], o(job.out1, u));
                }
            }
            REC_DP => {
                for u in 0..U {
                    let d = V::load(w(job.q_in, u)).xor(q[u]).mul(m0);
                    store::<V, NT>(d, o(job.out0, u));
                    store::<V, NT>(p[u].xor(d), o(job.out1, u));
                }
            }
            REC_DQ => {
                for u in 0..U {
                    let d = V::load(w(job.p_in, u)).xor(p[u]);
                    store::<V, NT>(d, o(job.out0, u));
                    store::<V, NT>(q[u].xor(d.mul(m0)), o(job.out1, u));
                }
            }
            REC_DD => {
                for u in 0..U {
                    let pxy = V::load(w(job.p_in, u)).xor(p[u]);
                    let qxy = V::load(w(job.q_in, u)).xor(q[u]);
                    let da = pxy.mul(m0).xor(qxy.mul(m1));
                    store::<V, NT>(da, o(job.out0, u));
                    store::<V, NT>(pxy.xor(da), o(job.out1, u));
                }
            }
            FOLD_PQ => {
                for u in 0..U {
                    let (pp, qq) = (o(job.out0, u), o(job.out1, u));
                    V::load(pp).xor(p[u]).store(pp);
                    V::load(qq).xor(q[u].mul(m0)).store(qq);
                }
            }
            _ => {
                let mut diff = V::zero();
                for u in 0..U {
                    let dp = V::load(w(job.p_in, u)).xor(p[u]);
                    let dq = V::load(w(job.q_in, u)).xor(q[u]);
                    diff = diff.or(dp.or(dq));
                }
                return diff.is_zero();
            }
        }
    }
    true
}

/// Process `[start, end)` (a multiple of `U * V::WIDTH` long) of a P+Q job. Returns false as
/// soon as a CHECK finds a difference.
#[inline(always)]
unsafe fn pq_range<V: Vector, const U: usize, const MODE: u8, const NT: bool>(
    job: &PqJob,
    m0: &V::Mul,
    m1: &V::Mul,
    start: usize,
    end: usize,
) -> bool {
    use mode::*;
    // A compile-time constant per instantiation: the hole checks vanish from the other modes.
    let holes = matches!(MODE, REC_DP | REC_DQ | REC_DD);
    let step = U * V::WIDTH;
    // SAFETY: the caller has checked the CPU features of `V`.
    let (mut p, mut q) = unsafe { ([V::zero(); U], [V::zero(); U]) };
    let pf = pf_distance::<V>(job.srcs.len());
    let mut off = start;
    while off < end {
        // SAFETY: the caller has checked the CPU features of `V` and that every present source
        // and every non-null pointer of the job is valid for `job.len >= end` bytes.
        unsafe {
            syndromes::<V, U>(holes, job, &mut p, &mut q, off, pf);
            if !finish::<V, U, MODE, NT>(job, &p, &q, m0, m1, off) {
                return false;
            }
        }
        off += step;
    }
    true
}

#[inline(always)]
unsafe fn pq_all<V: Vector, const U: usize, const MODE: u8, const NT: bool>(job: &PqJob) -> bool {
    let len = job.len;
    let main_end = len - len % (U * V::WIDTH);
    let vec_end = len - len % V::WIDTH;
    // SAFETY: forwarded contract (CPU features of `V`, valid job); each range is a whole
    // number of its blocks.
    unsafe {
        let (a0, a1) = (V::mul_const(job.m[0]), V::mul_const(job.m[1]));
        let ok = pq_range::<V, U, MODE, NT>(job, &a0, &a1, 0, main_end)
            && pq_range::<V, 1, MODE, false>(job, &a0, &a1, main_end, vec_end)
            && pq_range::<u8, 1, MODE, false>(job, &job.m[0], &job.m[1], vec_end, len);
        if NT {
            V::fence();
        }
        ok
    }
}

/// Run a P+Q job of the given mode; `nt` selects non-temporal stores for the outputs (which
/// must then be `V::WIDTH`-aligned).
///
/// # Safety
/// The CPU has the features of `V`; the job's pointers and sources are valid as documented on
/// [`PqJob`]; outputs do not overlap inputs or each other.
#[inline(always)]
pub(super) unsafe fn pq<V: Vector, const U: usize>(job: &PqJob, mode: u8, nt: bool) -> bool {
    use mode::*;
    // SAFETY: forwarded contract.
    unsafe {
        match (mode, nt) {
            (GEN_PQ, false) => pq_all::<V, U, GEN_PQ, false>(job),
            (GEN_PQ, true) => pq_all::<V, U, GEN_PQ, true>(job),
            (GEN_Q, _) => pq_all::<V, U, GEN_Q, false>(job),
            (REC_DP, _) => pq_all::<V, U, REC_DP, false>(job),
            (REC_DQ, _) => pq_all::<V, U, REC_DQ, false>(job),
            (REC_DD, false) => pq_all::<V, U, REC_DD, false>(job),
            (REC_DD, true) => pq_all::<V, U, REC_DD, true>(job),
            (FOLD_PQ, _) => pq_all::<V, U, FOLD_PQ, false>(job),
            _ => pq_all::<V, U, CHECK, false>(job),
        }
    }
}

#[inline(always)]
unsafe fn xor_range<V: Vector, const U: usize, const NT: bool>(
    job: &XorJob,
    start: usize,
    end: usize,
) -> bool {
    let k = job.srcs.len();
    let step = U * V::WIDTH;
    let mut off = start;
    // SAFETY: the caller has checked the CPU features of `V` and that every source and the
    // non-null pointer of the job are valid for `job.len >= end` bytes.
    unsafe {
        while off < end {
            let s = job.srcs[0].as_ptr().add(off);
            let mut acc = [V::zero(); U];
            for (u, a) in acc.iter_mut().enumerate() {
                *a = V::load(s.add(u * V::WIDTH));
            }
            let mut i = 1;
            while i + 1 < k {
                let s1 = job.srcs[i].as_ptr().add(off);
                let s2 = job.srcs[i + 1].as_ptr().add(off);
                for (u, a) in acc.iter_mut().enumerate() {
                    let x = V::load(s1.add(u * V::WIDTH));
                    let y = V::load(s2.add(u * V::WIDTH));
                    *a = a.xor3(x, y);
                }
                i += 2;
            }
            if i < k {
                let s1 = job.srcs[i].as_ptr().add(off);
                for (u, a) in acc.iter_mut().enumerate() {
                    *a = a.xor(V::load(s1.add(u * V::WIDTH)));
                }
            }
            if job.acc {
                for (u, a) in acc.iter_mut().enumerate() {
                    *a = a.xor(V::load(job.out.add(off + u * V::WIDTH)));
                }
            }
            if job.out.is_null() {
                let mut diff = V::zero();
                for (u, a) in acc.iter().enumerate() {
                    diff = diff.or(a.xor(V::load(job.cmp.add(off + u * V::WIDTH))));
                }
                if !diff.is_zero() {
                    return false;
                }
            } else {
                for (u, a) in acc.iter().enumerate() {
                    store::<V, NT>(*a, job.out.add(off + u * V::WIDTH));
                }
            }
            off += step;
        }
    }
    true
}

/// Run an XOR job.
///
/// # Safety
/// As [`pq`], for an [`XorJob`] (exactly one of `out` / `cmp` non-null; at least one source).
#[inline(always)]
pub(super) unsafe fn xor<V: Vector, const U: usize>(job: &XorJob, nt: bool) -> bool {
    let len = job.len;
    let main_end = len - len % (U * V::WIDTH);
    let vec_end = len - len % V::WIDTH;
    // SAFETY: forwarded contract; each range is a whole number of its blocks.
    unsafe {
        let ok = if nt {
            xor_range::<V, U, true>(job, 0, main_end)
        } else {
            xor_range::<V, U, false>(job, 0, main_end)
        } && xor_range::<V, 1, false>(job, main_end, vec_end)
            && xor_range::<u8, 1, false>(job, vec_end, len);
        if nt {
            V::fence();
        }
        ok
    }
}

/// How many changes one update pass folds (their multipliers stay in registers/stack).
const UPD_GROUP: usize = 16;

#[inline(always)]
unsafe fn upd_range<V: Vector, const U: usize>(
    job: &UpdJob,
    ms: &[V::Mul],
    start: usize,
    end: usize,
) {
    let step = U * V::WIDTH;
    let with_q = !job.q.is_null();
    let mut off = start;
    // SAFETY: the caller has checked the CPU features of `V` and that every old/new chunk and
    // p (and q when non-null) are valid for `job.len >= end` bytes.
    unsafe {
        while off < end {
            let mut dp = [V::zero(); U];
            let mut dq = [V::zero(); U];
            for (c, m) in job.changes.iter().zip(ms) {
                let so = c.old.as_ptr().add(off);
                let sn = c.new.as_ptr().add(off);
                for u in 0..U {
                    let d = V::load(so.add(u * V::WIDTH)).xor(V::load(sn.add(u * V::WIDTH)));
                    dp[u] = dp[u].xor(d);
                    if with_q {
                        dq[u] = dq[u].xor(d.mul(m));
                    }
                }
            }
            for u in 0..U {
                let pp = job.p.add(off + u * V::WIDTH);
                V::load(pp).xor(dp[u]).store(pp);
                if with_q {
                    let qq = job.q.add(off + u * V::WIDTH);
                    V::load(qq).xor(dq[u]).store(qq);
                }
            }
            off += step;
        }
    }
}

/// Run an update job.
///
/// # Safety
/// The CPU has the features of `V`; `p` (and `q` when non-null) are valid for `len` bytes and
/// do not overlap the old/new chunks, which are all `len` bytes long.
#[inline(always)]
pub(super) unsafe fn update<V: Vector, const U: usize>(job: &UpdJob) {
    let len = job.len;
    let main_end = len - len % (U * V::WIDTH);
    let vec_end = len - len % V::WIDTH;
    for group in job.changes.chunks(UPD_GROUP) {
        let sub = UpdJob {
            changes: group,
            len,
            p: job.p,
            q: job.q,
        };
        let mut ms = [0u8; UPD_GROUP];
        for (m, c) in ms.iter_mut().zip(group) {
            *m = super::gf::exp2(c.slot);
        }
        // SAFETY: forwarded contract; each range is a whole number of its blocks.
        unsafe {
            let unused = V::mul_const(0);
            let mut vm = [unused; UPD_GROUP];
            for (v, &m) in vm.iter_mut().zip(&ms[..group.len()]) {
                *v = V::mul_const(m);
            }
            upd_range::<V, U>(&sub, &vm, 0, main_end);
            upd_range::<V, 1>(&sub, &vm, main_end, vec_end);
            upd_range::<u8, 1>(&sub, &ms, vec_end, len);
        }
    }
}
