//! RAID 1, n-way: every child holds every byte. Survives the loss of all children but one.
//!
//! Reads go to one copy per piece, chosen by the volume's [`ReadPolicy`] (see
//! [`crate::read_policy`]); copies with a failed member under the range are never chosen.
//! When a copy returns a read error, the piece is read from the next copy, and the good bytes
//! are written back to the copy that failed (as md and SPDK do). Only if that rewrite fails is
//! the member marked failed (by the leaf). The repair holds its range exclusively in a
//! [`RangeLock`] and re-reads the good copy under it, so a user write cannot land between
//! the read and the write-back and leave the copies different. A read error another copy
//! corrected counts toward its member's `max_read_errors` ([`crate::read_errors`]).
//!
//! Writes go to every copy that is not failed, concurrently; the write succeeds when at least
//! one copy stored every byte (the others are now marked failed by their leaves).

use crate::buf::{Buf, SharedBuf};
use crate::error::{VolumeError, VolumeResult};
use crate::node::{
    all_ok, collect_bufs, first_error, ArrayNode, MemberTable, NodeIo, NodeMaintenance, ScrubPass,
    ZeroKind,
};
use crate::range_lock::RangeLock;
use crate::read_policy::{plan, views, CopyView, ReadPolicy};
use futures::future::{join_all, BoxFuture};
use futures::FutureExt;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A piece no copy could read whole is read again in pieces of this size (the checksums'
/// block): a bad block on one copy and another on the next still leave every block a copy.
const SPLIT_BYTES: usize = 4096;

mod scrub;

pub struct MirrorNode {
    /// Engines of the copies.
    children: Vec<Box<dyn ArrayNode>>,
    /// The smallest child's capacity.
    capacity: u64,
    policy: ReadPolicy,
    /// Sequential runs move to another copy after this many bytes (a multiple of 4 KiB).
    seq_piece: u64,
    /// Chooser state per copy (`usable` is refreshed per request).
    views: Mutex<Vec<CopyView>>,
    /// Rotates round-robin and tie-breaks.
    tick: AtomicU64,
    /// Exclusive for user writes (overlapping ones in order on every copy) and repairs.
    locks: RangeLock,
    /// Pieces whose bytes were written back to a copy after a read error there (shared with
    /// the volume's counters).
    repairs: Arc<AtomicU64>,
    /// The volume's members, which count the read errors another copy corrected (`None`: a
    /// mirror built alone counts none).
    members: Option<Arc<MemberTable>>,
}

impl MirrorNode {
    pub fn new(
        children: Vec<Box<dyn ArrayNode>>,
        capacity: u64,
        policy: ReadPolicy,
        seq_piece: u64,
        repairs: Arc<AtomicU64>,
    ) -> MirrorNode {
        let n = children.len();
        MirrorNode {
            children,
            capacity,
            policy,
            seq_piece: seq_piece.max(4096),
            views: Mutex::new(views(n, capacity)),
            tick: AtomicU64::new(0),
            locks: RangeLock::default(),
            repairs,
            members: None,
        }
    }

    /// The mirror in a volume: read errors another copy corrects count toward their
    /// members' read-error limit in `members`.
    pub fn with_members(mut self, members: Arc<MemberTable>) -> MirrorNode {
        self.members = Some(members);
        self
    }

    /// Counts the member read errors among `errors`, which another copy just corrected.
    fn count_corrected(&self, errors: &[VolumeError]) {
        if let Some(table) = &self.members {
            for m in errors.iter().filter_map(crate::read_errors::counted_member) {
                table.read_error_corrected(m);
            }
        }
    }

    /// Chooses the copies for a read (see [`plan`]); empty when no copy is usable.
    fn plan_read(&self, offset: u64, len: u64) -> Vec<(u64, u64, usize)> {
        let usable: Vec<bool> = self
            .children
            .iter()
            .map(|c| c.readable(offset, len))
            .collect();
        let tick = self.tick.fetch_add(1, Ordering::Relaxed);
        let mut views = self.views.lock();
        for (v, &u) in views.iter_mut().zip(&usable) {
            v.usable = u;
        }
        plan(self.policy, offset, len, &mut views, self.seq_piece, tick)
    }

    /// Counts a read sent to `copy` outside a plan (a plan counts its own).
    fn start_reading(&self, copy: usize) {
        self.views.lock()[copy].pending += 1;
    }

    fn done_reading(&self, copy: usize) {
        let mut v = self.views.lock();
        v[copy].pending = v[copy].pending.saturating_sub(1);
    }

    /// Reads one piece, starting with `first` and falling back over the other copies.
    async fn read_piece(&self, offset: u64, buf: Buf, first: usize) -> VolumeResult<Buf> {
        let len = buf.len();
        let r = self.children[first].read(offset, buf).await;
        self.done_reading(first);
        let first_err = match r {
            Ok(b) => return Ok(b),
            Err(e) => e,
        };
        let mut bad = Vec::new();
        if first_err.is_member_io() {
            bad.push(first);
        }
        let mut errors = vec![first_err];
        for c in (0..self.children.len()).filter(|&c| c != first) {
            if !self.children[c].readable(offset, len as u64) {
                continue;
            }
            match self.children[c].read(offset, Buf::new(len)).await {
                Ok(b) => {
                    for &copy in &bad {
                        self.repair(offset, len as u64, c, copy).await;
                    }
                    self.count_corrected(&errors);
                    return Ok(b);
                }
                Err(e) => {
                    if e.is_member_io() {
                        bad.push(c);
                    }
                    errors.push(e);
                }
            }
        }
        // Every copy failed somewhere in the piece, maybe in different blocks (checksum
        // errors are per block): each block may still have a good copy.
        if len > SPLIT_BYTES && errors.iter().any(VolumeError::is_member_io) {
            return Box::pin(self.read_blocks(offset, len, first)).await;
        }
        let detail: Vec<String> = errors.iter().map(ToString::to_string).collect();
        Err(VolumeError::Unavailable {
            reason: format!(
                "no copy of mirror bytes {offset}..{} could be read ({})",
                offset + len as u64,
                detail.join("; ")
            ),
        })
    }

    /// Reads `[offset, offset+len)` in pieces of at most [`SPLIT_BYTES`] on their boundaries,
    /// each with its own fallback over the copies.
    async fn read_blocks(&self, offset: u64, len: usize, first: usize) -> VolumeResult<Buf> {
        let end = offset + len as u64;
        let mut pieces = Vec::new();
        let mut at = offset;
        while at < end {
            let next = ((at / SPLIT_BYTES as u64) + 1) * SPLIT_BYTES as u64;
            let n = next.min(end) - at;
            pieces.push(self.read_piece(at, Buf::new(n as usize), first));
            at += n;
        }
        collect_bufs(join_all(pieces).await).map(Buf::join)
    }

    /// Writes the bytes of `good` back to `bad` under an exclusive range lock; a repair once
    /// they read back.
    async fn repair(&self, offset: u64, len: u64, good: usize, bad: usize) {
        // Whole checksum blocks: a rewrite of part of a bad block leaves the rest of it bad
        // and drops its checksum (a part write cannot vouch for the bytes it keeps), so the
        // next read of the rest would return those bytes unchecked.
        let block = crate::checksum::BLOCK_BYTES;
        let end = (offset + len).next_multiple_of(block).min(self.capacity);
        let offset = offset / block * block;
        let len = end - offset;
        let _guard = self.locks.lock(offset, len, true).await;
        let fresh = match self.children[good]
            .read(offset, Buf::new(len as usize))
            .await
        {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(
                    "mirror repair of bytes {offset}+{len}: re-reading copy {good} failed: {e}"
                );
                return;
            }
        };
        let fresh = fresh.freeze();
        match self.children[bad].write(offset, fresh.clone(), false).await {
            Ok(()) => {
                let back = crate::node::read_back(&*self.children[bad], offset, &fresh).await;
                if !back.holds() {
                    tracing::warn!("mirror repair of bytes {offset}+{len} of copy {bad}: {back}");
                    return;
                }
                self.repairs.fetch_add(1, Ordering::Relaxed);
                tracing::info!(
                    "mirror: repaired bytes {offset}+{len} of copy {bad} from copy {good}"
                );
            }
            Err(e) if e.is_read_only_refusal() => {
                tracing::debug!("mirror repair of copy {bad} not made: {e}")
            }
            // The leaf has marked the member failed.
            Err(e) => tracing::warn!("mirror repair of copy {bad} failed: {e}"),
        }
    }

    /// Writes a readable copy's bytes of `[offset, offset+len)` over the other copies that
    /// take writes and that `to` picks; the caller holds the range exclusively.
    async fn copy_over(
        &self,
        offset: u64,
        len: u64,
        to: impl Fn(usize) -> bool,
    ) -> VolumeResult<()> {
        debug_assert!(self.locks.holds(offset, len, true));
        if len <= COPY_PIECE_BYTES || self.children.iter().any(|c| c.intact(offset, len)) {
            return self.copy_piece(offset, len, &to).await;
        }
        // No copy is intact over the whole range (each lost a member somewhere in it): piece
        // by piece, each from a copy intact there if any — a RAID 5 copy that lost a member
        // holds the chunks on its other members as written, and rebuilding them from torn
        // parity instead would copy bytes nobody wrote over the other copy.
        let mut at = offset;
        while at < offset + len {
            let piece = (offset + len - at).min(COPY_PIECE_BYTES - at % COPY_PIECE_BYTES);
            self.copy_piece(at, piece, &to).await?;
            at += piece;
        }
        Ok(())
    }

    /// [`Self::copy_over`] of one piece.
    async fn copy_piece(
        &self,
        offset: u64,
        len: u64,
        to: &impl Fn(usize) -> bool,
    ) -> VolumeResult<()> {
        // The first readable copy that reads without an error, intact copies first: a copy
        // that rebuilds the range from parity gives bytes nobody wrote where a crash tore
        // a stripe being written (the write hole allows that for a lost member's bytes
        // being written; another copy still has them as written or as before).
        let mut got = None;
        let mut last = None;
        let mut order: Vec<usize> = (0..self.children.len()).collect();
        order.sort_by_key(|&i| !self.children[i].intact(offset, len));
        for i in order {
            let c = &self.children[i];
            if !c.readable(offset, len) {
                continue;
            }
            match c.read(offset, Buf::new(len as usize)).await {
                Ok(b) => {
                    got = Some((i, b.freeze()));
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        let Some((good, bytes)) = got else {
            return Err(last.unwrap_or_else(|| VolumeError::Unavailable {
                reason: format!("mirror bytes {offset}+{len}: no copy can be read"),
            }));
        };
        let results = join_all(
            self.children
                .iter()
                .enumerate()
                .filter(|&(i, c)| i != good && to(i) && c.writable(offset, len))
                .map(|(_, c)| c.write(offset, bytes.clone(), false)),
        )
        .await;
        // A copy that failed the write is marked failed by its leaf; the others agree.
        drop(results);
        Ok(())
    }

    /// Runs `op` on every copy that can take writes; Ok when at least one stored everything.
    /// Overlapping writes are serialized: two in flight together could land in different
    /// orders on different copies and leave them disagreeing where no bitmap bit says so.
    async fn on_all_copies<'a, F>(&'a self, offset: u64, len: u64, op: F) -> VolumeResult<()>
    where
        F: Fn(&'a dyn ArrayNode) -> BoxFuture<'a, VolumeResult<()>>,
    {
        let _guard = self.locks.lock(offset, len, true).await;
        let results = join_all(self.children.iter().map(|c| op(c.as_ref()))).await;
        let ok = results.iter().filter(|r| r.is_ok()).count();
        if ok > 0 {
            return Ok(());
        }
        let errors = results.into_iter().filter_map(Result::err).collect();
        Err(
            first_error(errors).unwrap_or_else(|| VolumeError::Unavailable {
                reason: "mirror has no copies".into(),
            }),
        )
    }
}

/// What one copy is to a rebuild of a range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CopyRole {
    /// Read (and rebuilds what is below it).
    Readable,
    /// Takes writes but is not read: gets a readable copy's bytes.
    Rebuilt,
    /// Takes writes but is not read, and is current over the range already (every member
    /// being rebuilt under it is ahead of the window): neither read nor written.
    Ahead,
    /// Takes nothing.
    Failed,
}

impl CopyRole {
    fn of(copy: &dyn ArrayNode, offset: u64, len: u64, ahead: &[usize]) -> CopyRole {
        if copy.readable(offset, len) {
            CopyRole::Readable
        } else if copy.writable(offset, len) {
            match copy.written_by_window(ahead) {
                true => CopyRole::Rebuilt,
                false => CopyRole::Ahead,
            }
        } else {
            CopyRole::Failed
        }
    }
}

/// The pieces a resync or rebuild copies when no copy is intact over its whole range (a
/// block: no strip is smaller).
const COPY_PIECE_BYTES: u64 = 4096;

impl NodeIo for MirrorNode {
    fn capacity(&self) -> u64 {
        self.capacity
    }

    fn readable(&self, offset: u64, len: u64) -> bool {
        self.children.iter().any(|c| c.readable(offset, len))
    }

    fn writable(&self, offset: u64, len: u64) -> bool {
        self.children.iter().any(|c| c.writable(offset, len))
    }

    fn intact(&self, offset: u64, len: u64) -> bool {
        self.children.iter().any(|c| c.intact(offset, len))
    }

    fn fail_unreadable(&self, offset: u64, len: u64, why: &str) {
        for c in &self.children {
            c.fail_unreadable(offset, len, why);
        }
    }

    fn read(&self, offset: u64, buf: Buf) -> BoxFuture<'_, VolumeResult<Buf>> {
        async move {
            let len = buf.len() as u64;
            let parts = self.plan_read(offset, len);
            if parts.is_empty() {
                return Err(VolumeError::Unavailable {
                    reason: format!(
                        "every copy of mirror bytes {offset}..{} has a failed member",
                        offset + len
                    ),
                });
            }
            if let [(_, _, copy)] = parts[..] {
                return self.read_piece(offset, buf, copy).await;
            }
            let lens: Vec<usize> = parts.iter().map(|p| p.1 as usize).collect();
            let bufs = buf.split_lengths(&lens);
            let results = join_all(
                parts
                    .iter()
                    .zip(bufs)
                    .map(|(&(off, _, copy), b)| self.read_piece(off, b, copy)),
            )
            .await;
            collect_bufs(results).map(Buf::join)
        }
        .boxed()
    }

    fn write(&self, offset: u64, data: SharedBuf, fua: bool) -> BoxFuture<'_, VolumeResult<()>> {
        async move {
            let len = data.len() as u64;
            self.on_all_copies(offset, len, |c| c.write(offset, data.clone(), fua))
                .await
        }
        .boxed()
    }

    fn read_vectored(&self, offset: u64, bufs: Vec<Buf>) -> BoxFuture<'_, VolumeResult<Vec<Buf>>> {
        async move {
            let len: u64 = bufs.iter().map(|b| b.len() as u64).sum();
            let lens: Vec<u64> = bufs.iter().map(|b| b.len() as u64).collect();
            // One copy for the whole run when the chooser keeps it in one piece.
            let parts = self.plan_read(offset, len);
            let mut failed_copy = None;
            if let [(_, _, copy)] = parts[..] {
                let r = self.children[copy].read_vectored(offset, bufs).await;
                self.done_reading(copy);
                match r {
                    Ok(got) => return Ok(got),
                    Err(_) => failed_copy = Some(copy),
                }
            } else {
                for &(_, _, copy) in &parts {
                    self.done_reading(copy);
                }
            }
            // Long runs, and any error: buffer by buffer, with fallback and repair. After an
            // error each buffer starts on the copy that failed: the buffer holding the bad
            // block fails there again and is repaired from another copy (a chooser free to
            // pick another copy first would serve good bytes and leave the bad ones).
            let futs: Vec<_> = lens
                .iter()
                .scan(offset, |at, &l| {
                    let o = *at;
                    *at += l;
                    let buf = Buf::new(l as usize);
                    Some(match failed_copy {
                        Some(copy) => {
                            self.start_reading(copy);
                            self.read_piece(o, buf, copy).boxed()
                        }
                        None => self.read(o, buf),
                    })
                })
                .collect();
            collect_bufs(join_all(futs).await)
        }
        .boxed()
    }

    fn write_vectored(
        &self,
        offset: u64,
        data: Vec<SharedBuf>,
        fua: bool,
    ) -> BoxFuture<'_, VolumeResult<()>> {
        async move {
            let len = data.iter().map(|d| d.len() as u64).sum();
            self.on_all_copies(offset, len, |c| c.write_vectored(offset, data.clone(), fua))
                .await
        }
        .boxed()
    }

    fn zero(&self, offset: u64, len: u64, kind: ZeroKind) -> BoxFuture<'_, VolumeResult<()>> {
        async move {
            self.on_all_copies(offset, len, |c| c.zero(offset, len, kind))
                .await
        }
        .boxed()
    }
}

impl NodeMaintenance for MirrorNode {
    fn children(&self) -> &[Box<dyn ArrayNode>] {
        &self.children
    }

    fn members_at(&self, offset: u64) -> Vec<(usize, u64)> {
        self.children
            .iter()
            .flat_map(|c| c.members_at(offset))
            .collect()
    }

    /// Each copy is made consistent in itself, then a readable copy's bytes are written over
    /// every copy (under the repair lock), so the copies agree.
    fn resync_range(&self, offset: u64, len: u64) -> BoxFuture<'_, VolumeResult<()>> {
        async move {
            let mut failed = None;
            for c in &self.children {
                if c.writable(offset, len) {
                    if let Err(e) = c.resync_range(offset, len).await {
                        // A copy beyond its tolerance cannot be made consistent in itself
                        // (a parity group that lost two members); a readable copy's bytes
                        // still go over what of it takes writes, below.
                        tracing::warn!("mirror bytes {offset}+{len}: a copy's resync: {e}");
                        failed.get_or_insert(e);
                    }
                }
            }
            let _guard = self.locks.lock(offset, len, true).await;
            if !self.readable(offset, len) {
                // Every copy lost (one a new member being rebuilt): nothing here to agree on;
                // the parity group above rebuilds the range and writes it to every copy.
                return failed.map_or(Ok(()), Err);
            }
            self.copy_over(offset, len, |_| true).await
        }
        .boxed()
    }

    /// Copies that take writes but are not read (being rebuilt) get a readable copy's bytes,
    /// unless current over the range already (every member being rebuilt under them
    /// `ahead`); readable copies rebuild what is below them — all under the range's
    /// exclusive lock.
    fn rebuild_range<'a>(
        &'a self,
        offset: u64,
        len: u64,
        ahead: &'a [usize],
    ) -> BoxFuture<'a, VolumeResult<()>> {
        async move {
            let _guard = self.locks.lock(offset, len, true).await;
            let roles: Vec<CopyRole> = self
                .children
                .iter()
                .map(|c| CopyRole::of(c.as_ref(), offset, len, ahead))
                .collect();
            all_ok(
                join_all(
                    self.children
                        .iter()
                        .zip(&roles)
                        .filter(|(_, &r)| r == CopyRole::Readable)
                        .map(|(c, _)| c.rebuild_range(offset, len, ahead)),
                )
                .await,
            )?;
            // Copies not read that take writes (a new member below); a failed copy takes
            // none, and reading the others for it would only risk their read errors.
            if !roles.contains(&CopyRole::Rebuilt) {
                return Ok(());
            }
            self.copy_over(offset, len, |c| roles[c] == CopyRole::Rebuilt)
                .await
        }
        .boxed()
    }

    fn flush(&self) -> BoxFuture<'_, VolumeResult<()>> {
        async move {
            // As for writes: done when at least one copy holds everything (a copy whose
            // parity group is beyond its tolerance cannot destage its cache, and is not read).
            let results = join_all(self.children.iter().map(|c| c.flush())).await;
            if results.iter().any(Result::is_ok) {
                return Ok(());
            }
            all_ok(results)
        }
        .boxed()
    }

    fn scrub_range<'a>(
        &'a self,
        offset: u64,
        len: u64,
        pass: &'a ScrubPass<'a>,
    ) -> BoxFuture<'a, VolumeResult<()>> {
        self.scrub_copies(offset, len, pass).boxed()
    }
}
