//! What is timed on one shape: every operation on every path that passed the check, beside
//! ISA-L, reed-solomon-erasure and the memcpy / read references.

use crate::check::{expected, isal_survivors, verify, verify_isal};
use crate::data::{lost, read_sum, Buf, Pool};
use crate::filter::wanted;
use crate::{COLD_BYTES, KIB, MIB};
use nbraid_benches::isal::Isal;
use nbraid_core::parity::{Kernels, Path};
use rand::rngs::SmallRng;
use rand::SeedableRng;
use reed_solomon_erasure::galois_8::ReedSolomon;
use std::hint::black_box;
use std::sync::Arc;

/// The most data chunks a benched stripe has (stack arrays of chunk views, no allocation in
/// the timed loop).
pub(crate) const MAX_K: usize = 32;

/// Shared views of one stripe's data chunks.
pub(crate) fn views(data: &[Buf]) -> [&[u8]; MAX_K] {
    let mut v: [&[u8]; MAX_K] = [&[]; MAX_K];
    for (slot, b) in v.iter_mut().zip(data) {
        *slot = b.get();
    }
    v
}

/// Processes stripe `s` of the pool once.
pub(crate) type RunFn = Box<dyn Fn(&mut Pool, &mut Extra, usize)>;

/// One benchmarked operation.
pub(crate) struct Case {
    pub(crate) op: &'static str,
    pub(crate) imp: String,
    pub(crate) bytes: u64,
    pub(crate) run: RunFn,
}

/// What some cases need besides the pool: the memcpy destinations and the rse codec.
pub(crate) struct Extra {
    pub(crate) dst: Vec<Vec<Buf>>,
    pub(crate) rs: ReedSolomon,
}

/// ISA-L's cases for one shape, beside ours (see `isal.rs` for how each is done with ISA-L).
pub(crate) fn isal_cases(k: usize, len: usize, isal: &Arc<Isal>, v: &mut Vec<Case>) {
    let data_bytes = (k * len) as u64;
    let (a, b) = lost(k);
    let imp = isal.label();
    let lib = isal.clone();
    v.push(Case {
        op: "xor_gen",
        imp: imp.clone(),
        bytes: data_bytes,
        run: Box::new(move |pool, _, s| {
            let refs = views(&pool.data[s]);
            lib.xor_gen(&refs[..k], pool.parity[s][0].get_mut());
        }),
    });
    let lib = isal.clone();
    v.push(Case {
        op: "pq_gen",
        imp: imp.clone(),
        bytes: data_bytes,
        run: Box::new(move |pool, _, s| {
            let refs = views(&pool.data[s]);
            let [p, q] = &mut pool.parity[s];
            lib.pq_gen(&refs[..k], p.get_mut(), q.get_mut());
        }),
    });
    // In place, as ours: the lost slots are overwritten with what they held.
    let lib = isal.clone();
    let tables = isal.recovery_tables(k, a, b);
    v.push(Case {
        op: "rec2",
        imp: imp.clone(),
        bytes: data_bytes,
        run: Box::new(move |pool, _, s| {
            let (data, [p, q]) = (&mut pool.data[s], &pool.parity[s]);
            let mut outs: [&mut [u8]; 2] = [&mut [], &mut []];
            let mut refs: [&[u8]; MAX_K] = [&[]; MAX_K];
            for (i, d) in data.iter_mut().enumerate() {
                if i == a {
                    outs[0] = d.get_mut();
                } else if i == b {
                    outs[1] = d.get_mut();
                } else {
                    refs[i] = d.get();
                }
            }
            let surv = isal_survivors(&refs[..k], a, b, p.get(), q.get());
            let [out_a, out_b] = outs;
            lib.recover_two(&tables, &surv[..k], out_a, out_b);
        }),
    });
    let lib = isal.clone();
    let tables = isal.update_tables(k);
    v.push(Case {
        op: "rmw",
        imp,
        bytes: len as u64,
        run: Box::new(move |pool, _, s| {
            let (data, [p, q]) = (&pool.data[s], &mut pool.parity[s]);
            lib.pq_update(
                &tables,
                0,
                p.get_mut(),
                q.get_mut(),
                data[0].get(),
                data[1].get(),
            );
        }),
    });
}

pub(crate) fn cases(k: usize, len: usize, kernels: &[Kernels], isals: &[Arc<Isal>]) -> Vec<Case> {
    let data_bytes = (k * len) as u64;
    let (a, b) = lost(k);
    let mut v: Vec<Case> = Vec::new();
    for isal in isals {
        isal_cases(k, len, isal, &mut v);
    }
    for &kern in kernels {
        v.push(Case {
            op: "xor_gen",
            imp: kern.path().to_string(),
            bytes: data_bytes,
            run: Box::new(move |pool, _, s| {
                let refs = views(&pool.data[s]);
                kern.xor_gen(&refs[..k], pool.parity[s][0].get_mut());
            }),
        });
    }
    for &kern in kernels {
        v.push(Case {
            op: "pq_gen",
            imp: kern.path().to_string(),
            bytes: data_bytes,
            run: Box::new(move |pool, _, s| {
                let refs = views(&pool.data[s]);
                let [p, q] = &mut pool.parity[s];
                kern.pq_gen(&refs[..k], p.get_mut(), q.get_mut());
            }),
        });
    }
    // Two lost data chunks rebuilt in place (the recovered bytes equal the old ones, so the
    // stripes stay consistent from one iteration to the next).
    for &kern in kernels {
        v.push(Case {
            op: "rec2",
            imp: kern.path().to_string(),
            bytes: data_bytes,
            run: Box::new(move |pool, _, s| {
                let mut muts: [&mut [u8]; MAX_K] = std::array::from_fn(|_| &mut [][..]);
                for (slot, buf) in muts.iter_mut().zip(pool.data[s].iter_mut()) {
                    *slot = buf.get_mut();
                }
                let [p, q] = &pool.parity[s];
                kern.recover_two_data(&mut muts[..k], p.get(), q.get(), a, b);
            }),
        });
    }
    // Single-chunk read-modify-write: slot 0 goes from data[0] to data[1]'s content (the
    // parity toggles between two states; timing does not depend on the values).
    for &kern in kernels {
        v.push(Case {
            op: "rmw",
            imp: kern.path().to_string(),
            bytes: len as u64,
            run: Box::new(move |pool, _, s| {
                let (data, parity) = (&pool.data[s], &mut pool.parity[s]);
                let [p, q] = parity;
                kern.pq_update(p.get_mut(), q.get_mut(), 0, data[0].get(), data[1].get());
            }),
        });
    }
    // The baseline: reed-solomon-erasure k+2 (its parity rows are not md's Q: speed only).
    v.push(Case {
        op: "rse_encode",
        imp: "rse".into(),
        bytes: data_bytes,
        run: Box::new(move |pool, x, s| {
            let refs = views(&pool.data[s]);
            let [p, q] = &mut pool.parity[s];
            x.rs.encode_sep(&refs[..k], &mut [p.get_mut(), q.get_mut()])
                .expect("rse encode");
        }),
    });
    v.push(Case {
        op: "rse_rec2",
        imp: "rse".into(),
        bytes: data_bytes,
        run: Box::new(move |pool, x, s| {
            let mut shards: [(&mut [u8], bool); MAX_K + 2] =
                std::array::from_fn(|_| (&mut [][..], true));
            let (data, parity) = (&mut pool.data[s], &mut pool.parity[s]);
            for (j, (slot, buf)) in shards
                .iter_mut()
                .zip(data.iter_mut().chain(parity.iter_mut()))
                .enumerate()
            {
                *slot = (buf.get_mut(), j != a && j != b);
            }
            x.rs.reconstruct_data(&mut shards[..k + 2])
                .expect("rse reconstruct");
        }),
    });
    // Physical references: copy the stripe's bytes (to destinations that cycle like the
    // source, ≥ 64 MiB when cold), and read them.
    v.push(Case {
        op: "memcpy",
        imp: "ref".into(),
        bytes: data_bytes,
        run: Box::new(move |pool, x, s| {
            let d = s % x.dst.len();
            for (to, from) in x.dst[d].iter_mut().zip(&pool.data[s]) {
                to.get_mut().copy_from_slice(from.get());
            }
            black_box(&mut x.dst[d]);
        }),
    });
    v.push(Case {
        op: "read",
        imp: "ref".into(),
        bytes: data_bytes,
        run: Box::new(move |pool, _, s| {
            let refs = views(&pool.data[s]);
            black_box(read_sum(&refs[..k]));
        }),
    });
    v
}

pub(crate) const OPS: [&str; 8] = [
    "xor_gen",
    "pq_gen",
    "rec2",
    "rmw",
    "rse_encode",
    "rse_rec2",
    "memcpy",
    "read",
];

/// Set up one shape, check the paths, and return what to run (`None` when the filter
/// excludes the whole shape).
pub(crate) fn prepare(
    filter: &Option<String>,
    isals: &[Arc<Isal>],
    k: usize,
    len: usize,
) -> Option<(String, Pool, Extra, Vec<Case>)> {
    assert!(k <= MAX_K);
    let shape = if len >= MIB {
        format!("k{k}-{}M", len / MIB)
    } else {
        format!("k{k}-{}K", len / KIB)
    };
    let impls: Vec<String> = Path::ALL
        .iter()
        .map(|p| p.name().to_string())
        .chain(["rse".into(), "ref".into()])
        .chain(isals.iter().map(|i| i.label()))
        .collect();
    if !OPS.iter().any(|op| {
        impls
            .iter()
            .any(|i| wanted(filter, &format!("{shape}/{op}/{i}")))
    }) {
        return None;
    }
    let hot = len < MIB;
    let stripes = if hot { 1 } else { COLD_BYTES.div_ceil(k * len) };
    let pool = Pool::new(k, len, stripes);

    // raidz_test's rule: only paths that agree with the reference are timed.
    let exp = expected(&pool);
    let mut kernels = Vec::new();
    for path in Path::ALL {
        match Kernels::new(path) {
            None => println!(
                "skipped: {path} ({})",
                path.unavailable_reason().unwrap_or_default()
            ),
            Some(kern) => match verify(kern, &pool, &exp) {
                Ok(()) => kernels.push(kern),
                Err(op) => println!(
                    "REFUSED: {path} disagrees with the reference on {shape} ({op}); not benched"
                ),
            },
        }
    }
    let mut checked_isals = Vec::new();
    for isal in isals {
        match verify_isal(isal, &pool, &exp) {
            Ok(()) => checked_isals.push(isal.clone()),
            Err(op) => println!(
                "REFUSED: {} ({}) disagrees with the reference on {shape} ({op}); not benched",
                isal.label(),
                isal.lib
            ),
        }
    }
    let dst_stripes = if hot { 1 } else { (64 * MIB).div_ceil(k * len) };
    let mut rng = SmallRng::seed_from_u64(2);
    let extra = Extra {
        dst: (0..dst_stripes)
            .map(|_| (0..k).map(|_| Buf::new(len, &mut rng)).collect())
            .collect(),
        rs: ReedSolomon::new(k, 2).expect("reed-solomon-erasure codec"),
    };
    let cases = cases(k, len, &kernels, &checked_isals)
        .into_iter()
        .filter(|c| wanted(filter, &format!("{shape}/{}/{}", c.op, c.imp)))
        .collect();
    Some((shape, pool, extra, cases))
}
