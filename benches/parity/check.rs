//! raidz_test's rule: a path (or an ISA-L) is timed only after it agrees with the
//! byte-at-a-time reference on a shape's first stripe.

use crate::cases::MAX_K;
use crate::data::{lost, Buf, Pool};
use nbraid_benches::isal::Isal;
use nbraid_core::parity::{reference, Kernels};
use rand::rngs::SmallRng;
use rand::SeedableRng;

/// The reference results for stripe 0 of a pool: its P and Q, and P and Q after chunk 0 is
/// replaced by chunk 1's content (the RMW check).
pub(crate) struct Expected {
    pub(crate) p: Vec<u8>,
    pub(crate) q: Vec<u8>,
    pub(crate) rmw_p: Vec<u8>,
    pub(crate) rmw_q: Vec<u8>,
}

pub(crate) fn expected(pool: &Pool) -> Expected {
    let len = pool.len;
    let refs: Vec<&[u8]> = pool.data[0].iter().map(Buf::get).collect();
    let (mut p, mut q) = (vec![0; len], vec![0; len]);
    reference::pq_gen(&refs, &mut p, &mut q);
    let mut new_refs = refs.clone();
    new_refs[0] = refs[1];
    let (mut rmw_p, mut rmw_q) = (vec![0; len], vec![0; len]);
    reference::pq_gen(&new_refs, &mut rmw_p, &mut rmw_q);
    Expected { p, q, rmw_p, rmw_q }
}

/// Check every benched operation of `kern` against the reference on stripe 0 of `pool`.
pub(crate) fn verify(kern: Kernels, pool: &Pool, exp: &Expected) -> Result<(), String> {
    let (k, len) = (pool.k, pool.len);
    let refs: Vec<&[u8]> = pool.data[0].iter().map(Buf::get).collect();
    // Outputs with the pool's alignment, so the streaming stores are exercised as in the bench.
    let mut rng = SmallRng::seed_from_u64(1);
    let (mut p, mut q) = (Buf::new(len, &mut rng), Buf::new(len, &mut rng));
    kern.pq_gen(&refs, p.get_mut(), q.get_mut());
    if p.get() != exp.p || q.get() != exp.q {
        return Err("pq_gen".into());
    }
    kern.xor_gen(&refs, p.get_mut());
    if p.get() != exp.p {
        return Err("xor_gen".into());
    }
    if !kern.check_pq(&refs, &exp.p, &exp.q) {
        return Err("check_pq".into());
    }
    let (a, b) = lost(k);
    let mut holes = refs.clone();
    holes[a] = &[];
    holes[b] = &[];
    kern.recover_two_data_into(&holes, &exp.p, &exp.q, a, b, p.get_mut(), q.get_mut());
    if p.get() != refs[a] || q.get() != refs[b] {
        return Err("recover_two_data".into());
    }
    let (mut up, mut uq) = (exp.p.clone(), exp.q.clone());
    kern.pq_update(&mut up, &mut uq, 0, refs[0], refs[1]);
    if up != exp.rmw_p || uq != exp.rmw_q {
        return Err("pq_update".into());
    }
    Ok(())
}

/// Check ISA-L's four benched operations against the reference on stripe 0 of `pool`.
pub(crate) fn verify_isal(isal: &Isal, pool: &Pool, exp: &Expected) -> Result<(), String> {
    let (k, len) = (pool.k, pool.len);
    let refs: Vec<&[u8]> = pool.data[0].iter().map(Buf::get).collect();
    let mut rng = SmallRng::seed_from_u64(1);
    let (mut p, mut q) = (Buf::new(len, &mut rng), Buf::new(len, &mut rng));
    isal.pq_gen(&refs, p.get_mut(), q.get_mut());
    if p.get() != exp.p || q.get() != exp.q {
        return Err("pq_gen".into());
    }
    isal.xor_gen(&refs, p.get_mut());
    if p.get() != exp.p {
        return Err("xor_gen".into());
    }
    let (a, b) = lost(k);
    let tables = isal.recovery_tables(k, a, b);
    let survivors = isal_survivors(&refs, a, b, &exp.p, &exp.q);
    isal.recover_two(&tables, &survivors[..k], p.get_mut(), q.get_mut());
    if p.get() != refs[a] || q.get() != refs[b] {
        return Err("recovery (ec_encode_data)".into());
    }
    let (mut up, mut uq) = (exp.p.clone(), exp.q.clone());
    let tables = isal.update_tables(k);
    isal.pq_update(&tables, 0, &mut up, &mut uq, refs[0], refs[1]);
    if up != exp.rmw_p || uq != exp.rmw_q {
        return Err("RMW (ec_encode_data_update)".into());
    }
    Ok(())
}

/// The k survivors of a two-data loss in ISA-L's recovery order: data slots but `a` and `b`,
/// then P, then Q.
pub(crate) fn isal_survivors<'a>(
    data: &[&'a [u8]],
    a: usize,
    b: usize,
    p: &'a [u8],
    q: &'a [u8],
) -> [&'a [u8]; MAX_K] {
    let mut v: [&[u8]; MAX_K] = [&[]; MAX_K];
    let present = data
        .iter()
        .enumerate()
        .filter(|&(i, _)| i != a && i != b)
        .map(|(_, d)| *d)
        .chain([p, q]);
    for (slot, d) in v.iter_mut().zip(present) {
        *slot = d;
    }
    v
}
