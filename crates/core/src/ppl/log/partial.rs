//! A log entry's partial parity: per stored sector of a band, the parity of the data chunks
//! not written there, computed straight into the entry's buffers (pure; `GroupLog::prepare`
//! calls it under the log's lock).

use super::{masks::same_chunk_runs, Values};
use crate::parity;
use crate::ppl::{BAND_BYTES, SECTOR_BYTES};
use smallvec::SmallVec;

/// A sector run's sources, one per data chunk at most (plus P): inline for groups of up to
/// 16 data chunks (a vector was an allocation a run).
type Sources<'a> = SmallVec<[&'a [u8]; 16]>;

static ZERO: [u8; BAND_BYTES as usize] = [0; BAND_BYTES as usize];

/// The partial P (and Q) of band `b0`'s `stored` sectors, in order, where `now[i]` are the
/// sectors data chunk `i` writes: per sector, the parity of the chunks not written
/// there — from the new bytes of every other chunk (`Direct`), or from the old parity
/// minus the old bytes of the written chunks (`Delta`). Computed straight into the
/// entry's buffers, a run of sectors with the same written chunks at a time.
pub(super) fn partials(
    q_slot: &[usize],
    b0: u64,
    stored: u8,
    now: &[u8],
    values: &Values<'_>,
    (mut pp, mut pq): (Vec<u8>, Option<Vec<u8>>),
) -> (Vec<u8>, Option<Vec<u8>>) {
    // A mask per data chunk; a partial Q buffer for RAID 6 only (Q's run below then).
    let k = now.len();
    let n = stored.count_ones() as usize * SECTOR_BYTES;
    // Every byte is computed below: a reused buffer of the right length keeps its bytes.
    pp.resize(n, 0);
    if let Some(q) = pq.as_mut() {
        q.resize(n, 0);
    }
    let mut put = 0; // where the next run goes in the outputs
    for (x, end) in same_chunk_runs(stored, now) {
        let len = (end - x) * SECTOR_BYTES;
        let (op, oq) = (
            &mut pp[put..put + len],
            pq.as_mut().map(|q| &mut q[put..put + len]),
        );
        put += len;
        let bit = 1u8 << x;
        // Row `b0 + x sectors` in a buffer that starts at row `base`.
        let at = |base: u64| (b0 + (x * SECTOR_BYTES) as u64 - base) as usize;
        match values {
            Values::Direct { chunks, r0 } => {
                let a = at(*r0);
                let src = |i: usize| &chunks[i][a..a + len];
                match oq {
                    // Every slot, written chunks as zero: Q needs the slot order.
                    Some(oq) => {
                        let mut by_slot: Sources = SmallVec::from_elem(&ZERO[..len], k);
                        for i in (0..k).filter(|&i| now[i] & bit == 0) {
                            by_slot[q_slot[i]] = src(i);
                        }
                        parity::pq_gen(&by_slot, op, oq);
                    }
                    None => {
                        let srcs: Sources =
                            (0..k).filter(|&i| now[i] & bit == 0).map(src).collect();
                        parity::xor_gen(&srcs, op);
                    }
                }
            }
            Values::Delta {
                chunks: written,
                p,
                q,
                r0,
            } => {
                let a = at(*r0);
                let written_of = |i: usize| {
                    let (start, bytes) = written[i].expect("the written chunk's bytes");
                    let o = at(start);
                    &bytes[o..o + len]
                };
                let writes = (0..k).filter(|&i| now[i] & bit != 0);
                match oq {
                    Some(oq) => {
                        // (A kernel copy: glibc's `rep movsb` is slow on this CPU.)
                        parity::xor_gen(&[&p[a..a + len]], op);
                        // No Q read (its member failed): no ring takes the partial Q.
                        match q {
                            Some(q) => parity::xor_gen(&[&q[a..a + len]], oq),
                            None => oq.fill(0),
                        }
                        for i in writes {
                            parity::pq_update(op, oq, q_slot[i], &ZERO[..len], written_of(i));
                        }
                    }
                    None => {
                        let srcs: Sources = std::iter::once(&p[a..a + len])
                            .chain(writes.map(written_of))
                            .collect();
                        parity::xor_gen(&srcs, op);
                    }
                }
            }
        }
    }
    debug_assert_eq!(put, n, "every stored sector computed");
    (pp, pq)
}
