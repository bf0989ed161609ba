//! One attempt at a stripe's rows, as every stage of [`super::StripeWriter::write_rows`]
//! reads it (which child a target lies on, the log's ranges, the data-only and planned
//! writes), and how a chunk's new bytes are assembled over its old ones.

use super::super::chunks::ChildWrite;
use super::super::plan::{Rows, StripeWrite, Target, WritePlan};
use super::super::*;
use smallvec::SmallVec;

/// Per data chunk, the rows a write puts new bytes on ([`RowsWrite::ranges`]): inline for a
/// few pieces of up to 8 chunks (vectors were an allocation a chunk and one more, a write).
type ChunkRanges = SmallVec<[SmallVec<[(u64, u64); 2]>; 8]>;

/// New bytes of `[s, e)` of one chunk: the written pieces over `old` (which covers `[s, e)`).
pub(super) fn assemble(s: u64, e: u64, w: &[(u64, SharedBuf)], old: Option<&[u8]>) -> SharedBuf {
    if let [(o, d)] = w {
        if *o == s && d.len() as u64 == e - s {
            return d.clone();
        }
    }
    let mut b = match old {
        Some(old) => Buf::copy_from(old),
        None => Buf::zeroed((e - s) as usize),
    };
    for (o, d) in w {
        let (a, z) = ((*o).max(s), (*o + d.len() as u64).min(e));
        if a < z {
            b[(a - s) as usize..(z - s) as usize]
                .copy_from_slice(&d[(a - *o) as usize..(z - *o) as usize]);
        }
    }
    b.freeze()
}

/// One attempt at writing rows `[r0, r1)` of a stripe: what every stage of
/// [`StripeWriter::write_rows`] reads.
pub(super) struct RowsWrite<'a> {
    pub(super) stripe: u64,
    pub(super) roles: &'a StripeRoles,
    pub(super) r0: u64,
    pub(super) r1: u64,
    /// Per data chunk: (in-chunk offset, new bytes).
    pub(super) w: &'a [Vec<(u64, SharedBuf)>],
    pub(super) fua: bool,
    /// Where the stripe's chunks begin on the children.
    pub(super) base: u64,
}

impl RowsWrite<'_> {
    /// The child a plan target lies on in this stripe.
    pub(super) fn child(&self, t: Target) -> usize {
        match t {
            Target::Data(i) => self.roles.data[i],
            Target::P => self.roles.p,
            Target::Q => self.roles.q.expect("Q only in a RAID 6 plan"),
        }
    }

    /// Per data chunk, the rows this write puts new bytes on (for the log).
    pub(super) fn ranges(&self) -> ChunkRanges {
        self.w
            .iter()
            .map(|c| c.iter().map(|(s, d)| (*s, *s + d.len() as u64)).collect())
            .collect()
    }

    /// Stage 3 of a data-only plan (every parity chunk lost): the data, nothing else.
    pub(super) fn data_only(
        &self,
        input: &StripeWrite,
        plan: &WritePlan,
        old: &HashMap<Target, Buf>,
    ) -> Vec<(Target, SharedBuf)> {
        plan.writes
            .iter()
            .map(|r| {
                let Target::Data(i) = r.target else {
                    unreachable!("data-only plans write data")
                };
                let (h0, h1) = input.data[i].new.hull;
                let before = old.get(&r.target).map(|b| &b[..]);
                (r.target, assemble(h0, h1, &self.w[i], before))
            })
            .collect()
    }

    /// The member writes of the computed bytes, asserting they are the planned ones (a run of
    /// the plan's writes), in their order and over their rows.
    pub(super) fn follow_plan(
        &self,
        planned: &[Rows],
        out: Vec<(Target, SharedBuf)>,
    ) -> Vec<ChildWrite> {
        assert_eq!(out.len(), planned.len(), "every planned write carried out");
        planned
            .iter()
            .zip(out)
            .map(|(r, (t, bytes))| {
                assert_eq!(r.target, t, "writes in plan order");
                assert_eq!(
                    bytes.len() as u64,
                    r.end - r.start,
                    "{t:?}: bytes match the planned rows"
                );
                ChildWrite {
                    child: self.child(t),
                    at: self.base + r.start,
                    bytes,
                }
            })
            .collect()
    }
}
