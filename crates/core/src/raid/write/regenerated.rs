//! Stage 5 of a stripe write that regenerates parity (full rows, reconstruct-write, RCW):
//! the data chunks' member writes go out first and P (and Q) are generated from the very
//! bytes they carry, while those bytes are still in the CPU cache — in one pass, or over a
//! wide stripe a group of chunks at a time ([`fold_group`]) — then parity is written.

use super::super::chunks::{ChildWrite, Chunks};
use super::super::plan::{Rows, Target, WritePlan};
use super::super::*;
use super::rows::RowsWrite;

/// Stage 5 of a plan that regenerates parity: the data chunks' member writes are issued
/// first, then P (and Q) are generated from `news` — the very bytes those writes carry —
/// and written. With members that copy on submission (memory, page cache) the data
/// writes pull the stripe into the CPU cache, so parity reads it from there instead of
/// from memory; with members that take time, parity is computed while they work.
/// Returns every write with its result, data first, in the plan's order.
pub(super) async fn write_regenerated(
    chunks: &Chunks,
    rows: &RowsWrite<'_>,
    plan: &WritePlan,
    data_writes: Vec<ChildWrite>,
    news: &[SharedBuf],
) -> (Vec<ChildWrite>, Vec<VolumeResult<()>>) {
    let rest = &plan.writes[data_writes.len()..];
    let row_bytes = (rows.r1 - rows.r0) as usize;
    let group = fold_group(row_bytes);
    if (2..chunks.k).contains(&group) {
        return write_folding_parity(chunks, rows, rest, data_writes, news, group).await;
    }
    let parity = async {
        let (p, q) = chunks.parity_of(rows.roles, news);
        let (mut p, mut q) = (Some(p.freeze()), q.map(Buf::freeze));
        let out = rest
            .iter()
            .map(|r| {
                let bytes = match r.target {
                    Target::P => p.take().expect("P written once"),
                    Target::Q => q.take().expect("Q generated and written once"),
                    Target::Data(_) => unreachable!("the plan writes data before parity"),
                };
                (r.target, bytes)
            })
            .collect();
        let writes = rows.follow_plan(rest, out);
        let results = chunks.write_all(&writes, rows.fua).await;
        (writes, results)
    };
    // `join!` polls the data writes first.
    let (data_results, (parity_writes, parity_results)) =
        futures::join!(chunks.write_all(&data_writes, rows.fua), parity);
    let mut writes = data_writes;
    writes.extend(parity_writes);
    let mut results = data_results;
    results.extend(parity_results);
    (writes, results)
}

/// Stage 5 of a plan that regenerates parity (`write_regenerated`) over a wide stripe:
/// the data writes are issued `group` data chunks at a time ([`fold_group`]) in parity-slot
/// order, each group polled once as it is issued and folded into P (and Q) right after —
/// a member that copies on submission (memory, page cache) has just pulled the group into
/// the CPU cache, where a single pass after the last write would find the first chunks of
/// a wide stripe evicted — then P (and Q) are written. The same writes as the plan's, data
/// first; each with its result.
async fn write_folding_parity(
    chunks: &Chunks,
    rows: &RowsWrite<'_>,
    rest: &[Rows],
    data_writes: Vec<ChildWrite>,
    news: &[SharedBuf],
    group: usize,
) -> (Vec<ChildWrite>, Vec<VolumeResult<()>>) {
    assert!(group >= 1, "a fold group holds a chunk");
    let order = chunks.slot_order(rows.roles);
    let slot_of: Vec<usize> = data_writes
        .iter()
        .map(|w| rows.roles.data_index_of(w.child).expect("a data write"))
        .map(|i| rows.roles.q_slot[i])
        .collect();
    let mut results: Vec<Option<VolumeResult<()>>> = data_writes.iter().map(|_| None).collect();
    let mut in_flight = Vec::new();
    let mut fold = chunks.parity_fold();
    for first in (0..chunks.k).step_by(group) {
        let slots = first..(first + group).min(chunks.k);
        let at: Vec<usize> = (0..data_writes.len())
            .filter(|&j| slots.contains(&slot_of[j]))
            .collect();
        let mut writes = join_all(at.iter().map(|&j| {
            let w = &data_writes[j];
            chunks.children[w.child].write(w.at, w.bytes.clone(), rows.fua)
        }));
        match futures::poll!(&mut writes) {
            std::task::Poll::Ready(done) => {
                for (&j, r) in at.iter().zip(done) {
                    results[j] = Some(r);
                }
            }
            std::task::Poll::Pending => in_flight.push((at, writes)),
        }
        let srcs: Vec<&[u8]> = slots.map(|s| &news[order[s]][..]).collect();
        fold.fold(first, &srcs);
    }
    // Parity is not written where its member failed (the plan then lists no such write).
    let (p, q) = fold.finish();
    let (mut p, mut q) = (Some(p.freeze()), q.map(Buf::freeze));
    let out = rest
        .iter()
        .map(|r| match r.target {
            Target::P => (Target::P, p.take().expect("P written once")),
            Target::Q => (Target::Q, q.take().expect("Q generated and written once")),
            t => unreachable!("the plan writes data, then parity, not {t:?}"),
        })
        .collect();
    let p_writes = rows.follow_plan(rest, out);
    let (p_results, finished) = futures::join!(
        chunks.write_all(&p_writes, rows.fua),
        join_all(
            in_flight
                .into_iter()
                .map(|(at, writes)| async move { (at, writes.await) })
        )
    );
    for (at, done) in finished {
        for (j, r) in at.into_iter().zip(done) {
            results[j] = Some(r);
        }
    }
    let mut writes = data_writes;
    writes.extend(p_writes);
    let mut all: Vec<VolumeResult<()>> = results
        .into_iter()
        .map(|r| r.expect("every data write done"))
        .collect();
    all.extend(p_results);
    (writes, all)
}

/// Bytes of data a write folds into P (and Q) at a time, right after issuing their member
/// writes: few enough to be still in the CPU cache when folded (measured on 24 members of
/// 64 KiB: one pass over the whole stripe after its writes reads much of it from memory),
/// and no fewer, since each group reads and rewrites P (and Q) once more (256 KiB groups
/// measured 0.02–0.04 of the ideal slower than 512 KiB on 8 and 24 members of 64 KiB).
const FOLD_BYTES: usize = 512 << 10;

/// Data chunks of `row_bytes` each folded into P at a time ([`FOLD_BYTES`]); below 2, a
/// single pass after every data write does as well.
pub(in crate::raid) fn fold_group(row_bytes: usize) -> usize {
    FOLD_BYTES / row_bytes.max(1)
}
