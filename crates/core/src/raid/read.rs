//! Reading a parity group: straight from the chunks where they are readable, otherwise
//! rebuilt stripe by stripe from the rest of the stripe; the few last rebuilt stripes kept for
//! sequential degraded reads; read repair of chunks that returned errors.

use super::plan::{recovery, Target};
use super::*;
use crate::checksum::BLOCK_BYTES;

mod rows;
mod sequential;
use rows::{RowGather, Rows};

/// Copies each piece's bytes out of a stripe's kept data chunks (all present).
pub(super) fn copy_pieces(rows: &[Option<SharedBuf>], pieces: Vec<(ParityPiece, Buf)>) -> Vec<Buf> {
    pieces
        .into_iter()
        .map(|(p, mut b)| {
            let at = p.in_chunk as usize;
            let src = rows[p.data_index].as_ref().expect("checked present");
            b.copy_from_slice(&src[at..at + p.len as usize]);
            b
        })
        .collect()
}

/// A child to treat as lost for one rebuild, and, when it failed with a member I/O error,
/// that read (then its rows are repaired afterwards).
pub(super) type Force = Option<(usize, Option<BadRead>)>;

/// A child whose read returned a member I/O error: its rows are repaired once the read is
/// served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct BadRead {
    pub(super) child: usize,
    /// The member whose read error it was, when it counts toward `max_read_errors`
    /// ([`crate::read_errors::counted_member`]; `None`: a checksum mismatch).
    pub(super) counted: Option<usize>,
}

impl BadRead {
    pub(super) fn of(child: usize, e: &VolumeError) -> BadRead {
        BadRead {
            child,
            counted: crate::read_errors::counted_member(e),
        }
    }
}

/// Rows of one child to rewrite after it returned a read error there.
pub(super) struct Repair {
    pub(super) stripe: u64,
    r0: u64,
    r1: u64,
    pub(super) child: usize,
    /// The member whose read error the rebuild corrected, when it counts toward
    /// `max_read_errors` ([`BadRead::counted`]).
    pub(super) counted: Option<usize>,
}

/// The read path over a group's stripes: row reads that rebuild what is lost, the
/// degraded read of a range, read repair. Borrowed per request ([`Stripes::reader`]).
#[derive(Clone, Copy)]
pub(super) struct Reader<'a> {
    pub(super) stripes: &'a Stripes,
}

impl Reader<'_> {
    /// Reads rows `[r0, r1)` of the data chunks of `stripe` that `want` names, rebuilding lost
    /// ones from the rest of the stripe. `bufs[i]`, when given, receives chunk `i` (so a
    /// caller's buffer is filled in place); the others are allocated. Every returned buffer
    /// whose `want` is set holds the chunk's bytes.
    pub(super) async fn read_rows(
        &self,
        stripe: u64,
        r0: u64,
        r1: u64,
        want: &[bool],
        bufs: Vec<Option<Buf>>,
    ) -> VolumeResult<Vec<Buf>> {
        match self.read_rows_ex(stripe, r0, r1, want, bufs, None).await {
            Ok((rows, _)) => Ok(rows),
            // As in a client read: bad blocks of many children may lie in different blocks.
            Err(e) if r1 - r0 > BLOCK_BYTES => self
                .read_rows_by_block(stripe, r0, r1, want)
                .await
                .map(|(rows, _)| rows)
                .map_err(|_| e),
            Err(e) => Err(e),
        }
    }

    /// [`Self::read_rows`], treating child `force_lost` as lost too (a repair rebuilds a
    /// chunk without trusting it), and also returning the children whose reads returned a
    /// member I/O error (candidates for repair). Each round decides how to rebuild what is
    /// lost, reads what that needs and it has not yet; a read that fails marks its child
    /// lost and starts another round.
    pub(super) async fn read_rows_ex(
        &self,
        stripe: u64,
        r0: u64,
        r1: u64,
        want: &[bool],
        bufs: Vec<Option<Buf>>,
        force_lost: Option<usize>,
    ) -> VolumeResult<(Vec<Buf>, Vec<BadRead>)> {
        let (k, strip) = (self.stripes.chunks.k, self.stripes.chunks.strip);
        assert!(
            r0 < r1 && r1 <= strip,
            "rows {r0}..{r1} outside a {strip}-byte strip"
        );
        assert_eq!(want.len(), k, "one wish per data chunk");
        self.stripes.assert_locked(stripe, "a read of its rows");
        let roles = self.stripes.chunks.layout.roles(stripe);
        let base = self.stripes.chunks.layout.chunk_offset(stripe) + r0;
        let mut lost = self.stripes.chunks.lost(stripe, r0, r1);
        if let Some(c) = force_lost {
            lost[c] = true;
        }
        let mut g = RowGather::new(lost, bufs, (r1 - r0) as usize);
        loop {
            let plan = match g.rebuilds(&roles, want) {
                true => Some(self.recovery_plan(stripe, &roles, &g.lost, g.errors.last())?),
                false => None,
            };
            let todo = g.reads(&roles, want, plan);
            let issued: Vec<(usize, Target)> = todo.iter().map(|t| (t.0, t.1)).collect();
            let children = &self.stripes.chunks.children;
            let reads = todo.into_iter().map(|(c, _, b)| children[c].read(base, b));
            if !g.take(issued, join_all(reads).await) {
                continue;
            }
            let Some((loss, _, _)) = plan else {
                return Ok((g.take_rows(None).data, g.bad));
            };
            // The chunk P rebuilds alone takes P's buffer, unless the caller gave it one.
            let fold_x = g.fold_target(&roles, loss);
            let Rows { mut data, p, q } = g.take_rows(fold_x);
            match fold_x {
                Some(x) => fold_into_p(&mut data, x),
                None => {
                    let p = p.unwrap_or_else(|| Buf::new((r1 - r0) as usize));
                    self.rebuild_rows(&roles, &mut data, p, q.as_ref(), loss);
                }
            }
            self.check_rebuilt(stripe, base, &roles, &g.lost, want, &data)
                .await?;
            return Ok((data, g.bad));
        }
    }

    /// The data chunks rebuilt for `stripe` (rows at child offset `base`) match the checksums
    /// their children keep ([`crate::node::NodeIo::verify_rebuilt`]): never wrong bytes.
    async fn check_rebuilt(
        &self,
        stripe: u64,
        base: u64,
        roles: &StripeRoles,
        lost: &[bool],
        want: &[bool],
        out: &[Buf],
    ) -> VolumeResult<()> {
        let children = &self.stripes.chunks.children;
        for (i, b) in out.iter().enumerate() {
            let c = roles.data[i];
            if want[i] && lost[c] && !children[c].verify_rebuilt(base, b).await {
                return Err(VolumeError::Unavailable {
                    reason: format!("stripe {stripe}: the bytes rebuilt for child {c} do not match their checksum"),
                });
            }
        }
        Ok(())
    }

    /// How to rebuild the lost data chunks of `stripe` from what survives: (loss, needs P,
    /// needs Q), or why it cannot (`last_error`: the latest member error of this read).
    fn recovery_plan(
        &self,
        stripe: u64,
        roles: &StripeRoles,
        lost: &[bool],
        last_error: Option<&VolumeError>,
    ) -> VolumeResult<(Loss, bool, bool)> {
        if self.stripes.health.is_stale(stripe) {
            return Err(VolumeError::Unavailable {
                reason: format!(
                    "stripe {stripe}: a chunk is lost and the stripe's parity is stale (an earlier write failed beyond tolerance)"
                ),
            });
        }
        let mut slots: Vec<usize> = (0..self.stripes.chunks.k)
            .filter(|&i| lost[roles.data[i]])
            .map(|i| roles.q_slot[i])
            .collect();
        slots.sort_unstable();
        let q_ok = roles.q.is_some_and(|c| !lost[c]);
        recovery(&slots, !lost[roles.p], q_ok).ok_or_else(|| {
            let e = self.stripes.chunks.unavailable(stripe, lost, "read");
            match (last_error, e) {
                (Some(first), VolumeError::Unavailable { reason }) => VolumeError::Unavailable {
                    reason: format!("{reason} (last member error: {first})"),
                },
                (_, e) => e,
            }
        })
    }

    /// Rebuilds the lost data rows in `out` (data order) in place from the others and P
    /// (and Q).
    fn rebuild_rows(
        &self,
        roles: &StripeRoles,
        out: &mut [Buf],
        mut p: Buf,
        q: Option<&Buf>,
        loss: Loss,
    ) {
        let mut refs: Vec<Option<&mut [u8]>> = out.iter_mut().map(|b| Some(&mut b[..])).collect();
        let mut slots: Vec<&mut [u8]> = self
            .stripes
            .chunks
            .slot_order(roles)
            .iter()
            .map(|&i| refs[i].take().expect("each index once"))
            .collect();
        match loss {
            Loss::Data(x) => parity::recover_data_p(&mut slots, &p, x),
            Loss::DataP(x) => {
                let qb = q.expect("read Q");
                parity::recover_data_and_p(&mut slots, &mut p, qb, x)
            }
            Loss::TwoData(a, b) => {
                let qb = q.expect("read Q");
                parity::recover_two_data(&mut slots, &p, qb, a, b)
            }
            _ => unreachable!("recovery() returns data losses only"),
        }
    }

    /// Reads one request's pieces from members: straight from their chunks (runs on one child
    /// merged) when every chunk is readable; pieces whose chunk is lost or whose read failed
    /// are rebuilt stripe by stripe. Returns the chunk ranges to repair (read errors).
    pub(super) async fn read_members(
        &self,
        offset: u64,
        buf: Buf,
    ) -> VolumeResult<(Buf, Vec<Repair>)> {
        let len = buf.len() as u64;
        let pieces = self.stripes.chunks.layout.split(offset, len);
        let lens: Vec<usize> = pieces.iter().map(|p| p.len as usize).collect();
        let direct = pieces.iter().all(|p| {
            self.stripes.chunks.children[p.child].readable(
                self.stripes.chunks.layout.chunk_offset(p.stripe) + p.in_chunk,
                p.len,
            )
        }) && !self.rebuild_ahead(offset, len, &pieces);
        let mut slots: Vec<Option<Buf>> = buf.split_lengths(&lens).into_iter().map(Some).collect();
        let todo = match direct {
            true => self.read_direct((offset, len), &pieces, &mut slots).await,
            false => (0..pieces.len()).map(|i| (i, None)).collect(),
        };
        let repairs = match todo.is_empty() {
            true => Vec::new(),
            false => {
                let groups = rebuild_groups(&pieces, todo);
                self.rebuild_pieces(&pieces, &groups, &mut slots).await?
            }
        };
        let got = slots.into_iter().map(|b| b.expect("filled")).collect();
        Ok((Buf::join(got), repairs))
    }

    /// Reads `pieces` (of the request `offset`+`len`) straight from their chunks into
    /// `slots`, runs on one child merged; the pieces to rebuild instead, in order — those of
    /// runs whose reads failed, each with the child to treat as lost ([`Force`]).
    async fn read_direct(
        &self,
        (offset, len): (u64, u64),
        pieces: &[ParityPiece],
        slots: &mut [Option<Buf>],
    ) -> Vec<(usize, Force)> {
        let layout = &self.stripes.chunks.layout;
        let cp: Vec<ChildPiece> = (pieces.iter())
            .map(|p| ChildPiece {
                logical: p.logical,
                child: p.child,
                offset: layout.chunk_offset(p.stripe) + p.in_chunk,
                len: p.len,
            })
            .collect();
        let mut todo = Vec::new();
        read_runs(&self.stripes.chunks.children, &cp, slots, |run, e| {
            // A member error, or a child (a mirror, say) with no readable copy.
            tracing::warn!("parity read {offset}+{len}: {e}; rebuilding from parity");
            let bad = e.is_member_io().then(|| BadRead::of(run.child, &e));
            // A bad block fails the whole run, though it lies in one stripe: across
            // stripes the child is read again per stripe, not taken as lost in all (a
            // bad block of another child in one of them would be beyond tolerance).
            let many = (run.pieces.windows(2)).any(|w| pieces[w[0]].stripe != pieces[w[1]].stripe);
            let force = (!(many && is_mismatch_error(&e))).then_some((run.child, bad));
            todo.extend(run.pieces.iter().map(|&i| (i, force)));
        })
        .await;
        todo.sort_unstable_by_key(|t| t.0);
        todo
    }

    /// Rebuilds the pieces of each group ([`rebuild_groups`]) from its stripe, into `slots`;
    /// the chunk ranges to repair (read errors), or the first error.
    async fn rebuild_pieces(
        &self,
        pieces: &[ParityPiece],
        groups: &[RebuildGroup],
        slots: &mut [Option<Buf>],
    ) -> VolumeResult<Vec<Repair>> {
        let futs: Vec<_> = (groups.iter())
            .map(|g| {
                let mine: Vec<(ParityPiece, Buf)> = (g.pieces.iter())
                    .map(|&i| {
                        let b = slots[i].take();
                        (
                            pieces[i],
                            b.unwrap_or_else(|| Buf::new(pieces[i].len as usize)),
                        )
                    })
                    .collect();
                self.read_stripe_pieces_recent(g.stripe, mine, g.force)
            })
            .collect();
        let mut repairs = Vec::new();
        let mut errors = Vec::new();
        for (g, r) in groups.iter().zip(join_all(futs).await) {
            match r {
                Ok((bufs, rep)) => {
                    for (&i, b) in g.pieces.iter().zip(bufs) {
                        slots[i] = Some(b);
                    }
                    repairs.extend(rep);
                }
                Err(e) => errors.push(e),
            }
        }
        match crate::node::first_error(errors) {
            Some(e) => Err(e),
            None => Ok(repairs),
        }
    }

    /// Reads the pieces of one stripe (any lost chunks rebuilt), filling their buffers.
    pub(super) async fn read_stripe_pieces(
        &self,
        stripe: u64,
        pieces: Vec<(ParityPiece, Buf)>,
        force: Force,
    ) -> VolumeResult<(Vec<Buf>, Vec<Repair>)> {
        let r0 = pieces.iter().map(|(p, _)| p.in_chunk).min().expect("piece");
        let r1 = pieces
            .iter()
            .map(|(p, _)| p.in_chunk + p.len)
            .max()
            .expect("piece");
        let mut want = vec![false; self.stripes.chunks.k];
        let mut bufs: Vec<Option<Buf>> = (0..self.stripes.chunks.k).map(|_| None).collect();
        let mut outs: Vec<(ParityPiece, Option<Buf>)> = Vec::with_capacity(pieces.len());
        for (p, b) in pieces {
            want[p.data_index] = true;
            if p.in_chunk == r0 && p.in_chunk + p.len == r1 {
                // Lines up with the row range: read (or rebuild) straight into it.
                bufs[p.data_index] = Some(b);
                outs.push((p, None));
            } else {
                outs.push((p, Some(b)));
            }
        }
        let first = self
            .read_rows_ex(stripe, r0, r1, &want, bufs, force.map(|f| f.0))
            .await;
        let (mut rows, mut bad) = match first {
            Ok(got) => got,
            // Bad blocks of more children than parity rebuilds may lie in different blocks
            // of the rows: each block rebuilds alone (else the first error stands).
            Err(e) if r1 - r0 > BLOCK_BYTES => self
                .read_rows_by_block(stripe, r0, r1, &want)
                .await
                .map_err(|_| e)?,
            Err(e) => return Err(e),
        };
        bad.extend(force.and_then(|(_, b)| b));
        bad.sort_unstable_by_key(|b| b.child);
        bad.dedup_by_key(|b| b.child);
        let repairs = bad
            .into_iter()
            .map(|b| Repair {
                stripe,
                r0,
                r1,
                child: b.child,
                counted: b.counted,
            })
            .collect();
        let mut result = Vec::with_capacity(outs.len());
        for (p, b) in outs {
            match b {
                None => result.push(std::mem::replace(&mut rows[p.data_index], Buf::new(0))),
                Some(mut b) => {
                    let at = (p.in_chunk - r0) as usize;
                    b.copy_from_slice(&rows[p.data_index][at..at + p.len as usize]);
                    result.push(b);
                }
            }
        }
        Ok((result, repairs))
    }

    /// [`Self::read_rows_ex`] one checksum block at a time, no child forced lost.
    async fn read_rows_by_block(
        &self,
        stripe: u64,
        r0: u64,
        r1: u64,
        want: &[bool],
    ) -> VolumeResult<(Vec<Buf>, Vec<BadRead>)> {
        let k = self.stripes.chunks.k;
        let mut rows: Vec<Buf> = (0..k).map(|_| Buf::new((r1 - r0) as usize)).collect();
        let mut bad = Vec::new();
        let mut a = r0;
        while a < r1 {
            let b = ((a / BLOCK_BYTES + 1) * BLOCK_BYTES).min(r1);
            let none = (0..k).map(|_| None).collect();
            let (got, mut bad_here) = self.read_rows_ex(stripe, a, b, want, none, None).await?;
            let at = (a - r0) as usize;
            for (row, g) in rows.iter_mut().zip(&got) {
                let n = g.len().min((b - a) as usize);
                row[at..at + n].copy_from_slice(&g[..n]);
            }
            bad.append(&mut bad_here);
            a = b;
        }
        Ok((rows, bad))
    }

    /// Counts toward `max_read_errors` the member read errors a request's rebuild corrected
    /// (`repairs`: what it left to rewrite): each member once per request, as md counts
    /// once a read it had to fix ([`crate::read_errors`]).
    pub(super) fn count_corrected(&self, repairs: &[Repair]) {
        let Some(table) = &self.stripes.members else {
            return;
        };
        let mut members: Vec<usize> = repairs.iter().filter_map(|r| r.counted).collect();
        members.sort_unstable();
        members.dedup();
        for m in members {
            table.read_error_corrected(m);
        }
    }

    /// Rewrites rows `[r0, r1)` of `child` in `stripe` from the rest of the stripe, after the
    /// child returned a read error there (md's and SPDK's read repair: a rewrite cures a
    /// transient media error; if the rewrite fails, the leaf marks the member failed). Runs
    /// under the stripe's exclusive lock and rebuilds afresh under it, so no write is undone.
    /// True when the rows were rewritten and read back as written.
    pub(super) async fn repair(&self, r: Repair) -> bool {
        // Whole checksum blocks: a rewrite of part of a bad block leaves the rest of it bad
        // and drops its checksum (a part write cannot vouch for the bytes it keeps), so the
        // next read of the rest would return those bytes unchecked.
        let strip = self.stripes.chunks.strip;
        let r = Repair {
            r0: r.r0 / BLOCK_BYTES * BLOCK_BYTES,
            r1: r.r1.next_multiple_of(BLOCK_BYTES).min(strip),
            ..r
        };
        let _g = self.stripes.locks.lock(r.stripe, 1, true).await;
        let roles = self.stripes.chunks.layout.roles(r.stripe);
        let at = self.stripes.chunks.layout.chunk_offset(r.stripe) + r.r0;
        if !self.stripes.chunks.children[r.child].readable(at, r.r1 - r.r0) {
            return false; // Failed meanwhile: nothing to repair.
        }
        if !self.stripes.health.in_sync(r.stripe) || self.stripes.health.is_stale(r.stripe) {
            // Parity not known to match: a rebuilt chunk could be wrong, and writing it back
            // would make that permanent. Leave the chunk as it is.
            return false;
        }
        let want = vec![true; self.stripes.chunks.k];
        let none = (0..self.stripes.chunks.k).map(|_| None).collect();
        let rows = match self
            .read_rows_ex(r.stripe, r.r0, r.r1, &want, none, Some(r.child))
            .await
        {
            Ok((rows, _)) => rows,
            Err(e) => {
                tracing::warn!(
                    "parity repair of stripe {} child {}: cannot rebuild: {e}",
                    r.stripe,
                    r.child
                );
                return false;
            }
        };
        let rows: Vec<SharedBuf> = rows.into_iter().map(Buf::freeze).collect();
        let fresh = self.stripes.chunks.chunk_from_rows(&roles, &rows, r.child);
        self.stripes.recent.forget(r.stripe);
        let child = &self.stripes.chunks.children[r.child];
        match child.write(at, fresh.clone(), false).await {
            Ok(()) => {
                let back = crate::node::read_back(&**child, at, &fresh).await;
                if !back.holds() {
                    let (s, c) = (r.stripe, r.child);
                    tracing::warn!("parity repair of stripe {s} child {c}: {back}");
                    return false;
                }
                tracing::info!(
                    "parity: repaired rows {}..{} of stripe {} on child {}",
                    r.r0,
                    r.r1,
                    r.stripe,
                    r.child
                );
                true
            }
            Err(e) if e.is_read_only_refusal() => {
                tracing::debug!("parity repair of child {} not made: {e}", r.child);
                false
            }
            Err(e) => {
                tracing::warn!("parity repair of child {} failed: {e}", r.child);
                false
            }
        }
    }
}

/// The pieces of one stripe rebuilt together, treating the same child as lost: the
/// stripe's rows are read once for them.
#[derive(Debug, PartialEq, Eq)]
struct RebuildGroup {
    stripe: u64,
    force: Force,
    pieces: Vec<usize>,
}

/// `todo` (piece indices in order, each with the child to treat as lost) grouped by stripe
/// and lost child, consecutive pieces together.
fn rebuild_groups(pieces: &[ParityPiece], todo: Vec<(usize, Force)>) -> Vec<RebuildGroup> {
    let mut groups: Vec<RebuildGroup> = Vec::new();
    for (i, force) in todo {
        let stripe = pieces[i].stripe;
        match groups.last_mut() {
            Some(g) if g.stripe == stripe && g.force == force => g.pieces.push(i),
            _ => groups.push(RebuildGroup {
                stripe,
                force,
                pieces: vec![i],
            }),
        }
    }
    groups
}

/// Rebuilds data chunk `x` of `rows` (data order) in place: it holds P, and every other
/// chunk is folded into it in one pass (P ⊕ the survivors = the lost chunk).
fn fold_into_p(rows: &mut [Buf], x: usize) {
    let (before, rest) = rows.split_at_mut(x);
    let (lost, after) = rest.split_first_mut().expect("x is a data index");
    let survivors: Vec<&[u8]> = before.iter().chain(after.iter()).map(|b| &b[..]).collect();
    if !survivors.is_empty() {
        parity::xor_into(lost, &survivors);
    }
}

/// Whether `e` is a member's checksum mismatch (a bad block, not a failed read).
fn is_mismatch_error(e: &VolumeError) -> bool {
    matches!(e, VolumeError::Member { source, .. } if crate::checksum::is_mismatch(source))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_are_rebuilt_together_by_stripe_and_lost_child() {
        let piece = |stripe| ParityPiece {
            logical: 0,
            stripe,
            data_index: 0,
            child: 0,
            in_chunk: 0,
            len: 512,
        };
        let pieces = [piece(3), piece(3), piece(3), piece(4), piece(4)];
        let lost = Some((
            1,
            Some(BadRead {
                child: 1,
                counted: Some(1),
            }),
        ));
        let todo = vec![(0, None), (1, None), (2, lost), (3, lost), (4, lost)];
        let group = |stripe, force, pieces: &[usize]| RebuildGroup {
            stripe,
            force,
            pieces: pieces.to_vec(),
        };
        assert_eq!(
            rebuild_groups(&pieces, todo),
            [
                group(3, None, &[0, 1]),
                group(3, lost, &[2]),
                group(4, lost, &[3, 4])
            ]
        );
        assert!(rebuild_groups(&pieces, Vec::new()).is_empty());
    }
}
