//! The leaf of the tree: a member region. It adds the region start, calls the member, counts
//! errors and marks members failed, and holds every write back while a member failure is not
//! recorded yet ([`crate::failure_gate`]). With per-block checksums ([`crate::checksum`]) it
//! computes them for what it writes and checks what it reads: a block that does not match is
//! a read error of that block, which the nodes above repair like any other.

use super::members::{MemberSlot, MemberTable};
use super::{NodeIo, NodeMaintenance, ScrubPass, ZeroKind};
use crate::buf::{Buf, SharedBuf};
use crate::checksum::{self, BlockSum, LeafChecksums, WriteToken, BLOCK_BYTES};
use crate::error::{VolumeError, VolumeResult};
use crate::member::{Member, MemberResult};
use futures::future::BoxFuture;
use futures::FutureExt;
use std::sync::Arc;

mod scrub;

/// A member region: the leaf of the tree.
pub struct LeafNode {
    /// Index into the member table.
    index: usize,
    /// Byte on the member where this region begins.
    start: u64,
    /// Bytes in the region.
    len: u64,
    table: Arc<MemberTable>,
    /// The region's per-block checksums (`None`: the volume keeps none).
    checksums: Option<Arc<LeafChecksums>>,
}

/// One member write of `data` (consecutive pieces) at member byte `at`.
fn member_write<'m>(
    m: &'m Arc<dyn Member>,
    at: u64,
    data: &[SharedBuf],
    fua: bool,
) -> BoxFuture<'m, MemberResult<()>> {
    match data {
        [piece] => m.write(at, piece.clone(), fua),
        _ => m.write_vectored(at, data.to_vec(), fua),
    }
}

/// Blocks `[a, b)` (byte offsets on 4 KiB boundaries) that hold `[offset, offset+len)`.
fn whole_blocks(offset: u64, len: u64) -> (u64, u64) {
    (
        offset - offset % BLOCK_BYTES,
        (offset + len).next_multiple_of(BLOCK_BYTES),
    )
}

impl LeafNode {
    pub fn new(index: usize, start: u64, len: u64, table: Arc<MemberTable>) -> LeafNode {
        LeafNode {
            index,
            start,
            len,
            table,
            checksums: None,
        }
    }

    /// The leaf with its region's checksums.
    pub fn with_checksums(mut self, checksums: Option<Arc<LeafChecksums>>) -> LeafNode {
        self.checksums = checksums;
        self
    }

    fn slot(&self) -> &MemberSlot {
        self.table.slot(self.index)
    }

    fn unavailable(&self, offset: u64, len: u64) -> VolumeError {
        VolumeError::Unavailable {
            reason: format!(
                "member {} (`{}`) has failed; it held bytes {}..{} of the request",
                self.index,
                self.slot().member().name(),
                self.start + offset,
                self.start + offset + len
            ),
        }
    }

    /// Records a read error. A read error alone does not fail the member (md's choice): a
    /// mirror or parity group serves the bytes from the redundancy and repairs them, and
    /// only a failed repair write fails the member — or, counted by the node that corrected
    /// them, more corrected read errors than `max_read_errors` ([`crate::read_errors`]).
    fn read_error(&self, e: crate::member::MemberError) -> VolumeError {
        self.slot().count_read_error();
        tracing::warn!("{e}");
        VolumeError::Member {
            member: self.index,
            source: e,
        }
    }

    /// Writes `data` (consecutive pieces) at region `offset` to the member and to the
    /// replacement being built, if any, its blocks locked and their checksums taken before
    /// the member write or right after it started ([`SumPlan`]).
    async fn write_pieces(&self, offset: u64, data: Vec<SharedBuf>, fua: bool) -> VolumeResult<()> {
        self.table.failure_gate().wait_recorded().await?;
        let slot = self.slot();
        let len: u64 = data.iter().map(|d| d.len() as u64).sum();
        if slot.is_failed() {
            return Err(self.unavailable(offset, len));
        }
        let at = self.start + offset;
        let plan = self.checksums_before_write(offset, &data).await?;
        slot.count_write(len);
        let rep = slot.replacement();
        let copy = rep.as_ref().map(|r| member_write(r, at, &data, fua));
        let member = slot.member();
        let mut write = member_write(&member, at, &data, fua);
        // A memory-backed member copies the bytes on this first poll (a device starts its
        // transfer): checksums taken after it read the bytes from the cache.
        // Nothing awaits between this poll and the checksums entering the table: dropped
        // at any await, the write leaves no new bytes judged by old checksums alone.
        let started = futures::poll!(&mut write);
        let sums = self.checksums_once_started(offset, &data, plan);
        let r = match started {
            std::task::Poll::Ready(r) => r,
            std::task::Poll::Pending => write.await,
        };
        self.replacement_done(copy).await;
        self.written_with_sums(r, sums).await?;
        if !fua {
            slot.mark_dirty();
        }
        Ok(())
    }

    /// Waits for the replacement's copy of a write; a replacement that fails it is dropped
    /// (the member it was to replace still serves).
    async fn replacement_done(&self, copy: Option<BoxFuture<'_, MemberResult<()>>>) {
        if let Some(Err(e)) = match copy {
            Some(f) => Some(f.await),
            None => None,
        } {
            self.slot().drop_replacement(&e);
        }
    }

    /// Records a failed write-type op: the member's contents there are now stale — it is
    /// failed, unless the volume cannot do without it and the member still answers a read
    /// ([`crate::node::MemberTable::fail_for_write_error`]).
    async fn failed_write(&self, e: crate::member::MemberError) -> VolumeError {
        self.table.failed_write(self.index, &e, &e).await;
        VolumeError::Member {
            member: self.index,
            source: e,
        }
    }

    /// A data write's result and its checksums: an answered write's take effect; a failed
    /// one's blocks lose theirs (under the blocks' lock still) — or, refused by a read-only
    /// member before reaching it, get their old ones back —, then the error goes through
    /// [`Self::failed_write`].
    async fn written_with_sums(&self, r: MemberResult<()>, sums: Sums<'_>) -> VolumeResult<()> {
        let Err(e) = r else {
            self.checksums_after_write(sums);
            return Ok(());
        };
        if let (Some(cs), Some((token, _guard))) = (&self.checksums, sums) {
            let member = self.slot().member();
            if e.is_read_only_refusal() {
                cs.refused_write(&*member, token).await;
            } else {
                cs.forget_write(&*member, token).await;
            }
        }
        Err(self.failed_write(e).await)
    }

    /// A write-type op's result; an error goes through [`Self::failed_write`].
    async fn written<T>(&self, r: MemberResult<T>) -> VolumeResult<T> {
        match r {
            Ok(v) => Ok(v),
            Err(e) => Err(self.failed_write(e).await),
        }
    }
}

impl NodeIo for LeafNode {
    fn capacity(&self) -> u64 {
        self.len
    }

    fn readable(&self, _offset: u64, _len: u64) -> bool {
        self.slot().is_current()
    }

    fn writable(&self, _offset: u64, _len: u64) -> bool {
        !self.slot().is_failed()
    }

    fn fail_unreadable(&self, _offset: u64, _len: u64, why: &str) {
        self.table.fail(self.index, &why);
    }

    /// Checks the whole blocks of `bytes` against the checksums; a member that is not
    /// current (its checksums may be as lost as its data) or whose pages do not read cannot
    /// say, and passes.
    fn verify_rebuilt<'a>(&'a self, offset: u64, bytes: &'a [u8]) -> BoxFuture<'a, bool> {
        async move {
            let Some(cs) = &self.checksums else {
                return true;
            };
            if !self.slot().is_current() {
                return true;
            }
            let (a, b) = whole_blocks(offset, bytes.len() as u64);
            // Only the blocks the bytes cover whole.
            let lo = if a < offset { a + BLOCK_BYTES } else { a };
            let end = offset + bytes.len() as u64;
            let hi = if b > end { b - BLOCK_BYTES } else { b };
            if lo >= hi {
                return true;
            }
            let part = &bytes[(lo - offset) as usize..(hi - offset) as usize];
            let m = self.slot().member();
            if cs.matches(&*m, lo, part).await.unwrap_or(true) {
                return true;
            }
            // The member's entries disagree with the bytes the rest of the stripe rebuilds.
            // Those come from blocks that matched their own entries; when the member holds
            // exactly them too, the stripe is consistent and the entries alone are wrong (a
            // damaged or lying entry): accept — the caller's repair rewrites the blocks, and
            // with them right entries. Refusing would leave good bytes unreadable for good.
            let held = m.read(self.start + lo, Buf::new(part.len())).await;
            let consistent = held.is_ok_and(|b| b[..] == *part);
            if consistent {
                tracing::warn!(
                    "member {} (`{}`): the checksum entries of bytes {}..{} disagree with the bytes it holds, which the redundancy confirms: the entries are rewritten",
                    self.index,
                    m.name(),
                    self.start + lo,
                    self.start + hi
                );
            }
            consistent
        }
        .boxed()
    }

    fn read(&self, offset: u64, buf: Buf) -> BoxFuture<'_, VolumeResult<Buf>> {
        async move {
            let slot = self.slot();
            if !slot.is_current() {
                return Err(self.unavailable(offset, buf.len() as u64));
            }
            slot.count_read(buf.len() as u64);
            if let Some(cs) = &self.checksums {
                return self.read_checked_one(cs, offset, buf).await;
            }
            slot.member()
                .read(self.start + offset, buf)
                .await
                .map_err(|e| self.read_error(e))
        }
        .boxed()
    }

    fn write(&self, offset: u64, data: SharedBuf, fua: bool) -> BoxFuture<'_, VolumeResult<()>> {
        self.write_pieces(offset, vec![data], fua).boxed()
    }

    fn read_vectored(&self, offset: u64, bufs: Vec<Buf>) -> BoxFuture<'_, VolumeResult<Vec<Buf>>> {
        async move {
            let slot = self.slot();
            if !slot.is_current() {
                let len = bufs.iter().map(|b| b.len() as u64).sum();
                return Err(self.unavailable(offset, len));
            }
            slot.count_read(bufs.iter().map(|b| b.len() as u64).sum());
            if let Some(cs) = &self.checksums {
                return self.read_checked(cs, offset, bufs).await;
            }
            slot.member()
                .read_vectored(self.start + offset, bufs)
                .await
                .map_err(|e| self.read_error(e))
        }
        .boxed()
    }

    fn write_vectored(
        &self,
        offset: u64,
        data: Vec<SharedBuf>,
        fua: bool,
    ) -> BoxFuture<'_, VolumeResult<()>> {
        self.write_pieces(offset, data, fua).boxed()
    }

    fn zero(&self, offset: u64, len: u64, kind: ZeroKind) -> BoxFuture<'_, VolumeResult<()>> {
        async move {
            self.table.failure_gate().wait_recorded().await?;
            let slot = self.slot();
            if slot.is_failed() {
                return Err(self.unavailable(offset, len));
            }
            let at = self.start + offset;
            let op = |m: Arc<dyn Member>| {
                async move {
                    match kind {
                        ZeroKind::Trim => trim_or_zero(&*m, at, len).await,
                        ZeroKind::WriteZeroes => m.write_zeroes(at, len).await,
                    }
                }
                .boxed()
            };
            let sums = self.checksums_before_zero(offset, len).await?;
            let copy = slot.replacement().map(op);
            let r = op(slot.member()).await;
            self.replacement_done(copy).await;
            self.written_with_sums(r, sums).await?;
            slot.mark_dirty();
            Ok(())
        }
        .boxed()
    }
}

/// Trims `[at, at+len)` of `m`; a trim the member refuses (a device without discard, a
/// file system without hole punching, an error) is done as write-zeroes instead. The
/// volume's trim promises zeroes, not a discard, and a refused discard says nothing of the
/// disk's health (md fails no member for one either); a failed write of zeroes does.
async fn trim_or_zero(m: &dyn Member, at: u64, len: u64) -> MemberResult<()> {
    match m.trim(at, len).await {
        Ok(()) => Ok(()),
        Err(e) => {
            tracing::debug!("{e}: writing zeroes instead");
            m.write_zeroes(at, len).await
        }
    }
}

/// A leaf holds no cache and no redundancy; it copies its member onto a replacement and
/// writes its checksums back before the volume flushes the member.
impl NodeMaintenance for LeafNode {
    fn members_at(&self, offset: u64) -> Vec<(usize, u64)> {
        vec![(self.index, self.start + offset)]
    }

    /// A leaf no parity group or mirror owns reads itself through its checksums.
    fn scrub_range<'a>(
        &'a self,
        offset: u64,
        len: u64,
        pass: &'a ScrubPass<'a>,
    ) -> BoxFuture<'a, VolumeResult<()>> {
        self.scrub_bare(offset, len, pass).boxed()
    }

    fn flush(&self) -> BoxFuture<'_, VolumeResult<()>> {
        async move {
            let Some(cs) = &self.checksums else {
                return Ok(());
            };
            let slot = self.slot();
            if slot.is_failed() {
                return Ok(());
            }
            self.table.failure_gate().wait_recorded().await?;
            match cs.flush(&*slot.member()).await {
                Ok(0) => {}
                Ok(_) => slot.mark_dirty(),
                // A failed write goes a data write's way ([`Self::failed_write`]); whether
                // the volume still holds its data is the volume's flush to say (its
                // tolerance).
                Err(e) => {
                    self.failed_write(e).await;
                }
            }
            Ok(())
        }
        .boxed()
    }

    fn rebuilt_members(&self, out: &mut Vec<usize>) {
        let slot = self.slot();
        if (slot.is_resyncing() && !slot.is_failed()) || slot.replacement().is_some() {
            out.push(self.index);
        }
    }

    /// Copies the member's bytes onto its replacement (the parent holds the range's lock),
    /// unless the replacement is current over the range already (`ahead`).
    fn rebuild_range<'a>(
        &'a self,
        offset: u64,
        len: u64,
        ahead: &'a [usize],
    ) -> BoxFuture<'a, VolumeResult<()>> {
        async move {
            let slot = self.slot();
            let Some(rep) = slot.replacement() else {
                return Ok(());
            };
            if ahead.contains(&self.index) {
                return Ok(());
            }
            if !slot.is_current() {
                return Err(self.unavailable(offset, len));
            }
            let at = self.start + offset;
            let bytes = slot
                .member()
                .read(at, Buf::new(len as usize))
                .await
                .map_err(|e| self.read_error(e))?;
            match rep.write(at, bytes.freeze(), false).await {
                // The next flush of the slot must reach the replacement too.
                Ok(()) => slot.mark_dirty(),
                Err(e) => slot.drop_replacement(&e),
            }
            Ok(())
        }
        .boxed()
    }
}

/// Member bytes from `at` into `bufs` (consecutive), one member read.
async fn member_read(m: &dyn Member, at: u64, mut bufs: Vec<Buf>) -> MemberResult<Vec<Buf>> {
    if bufs.len() == 1 {
        let one = bufs.pop().expect("one buffer");
        m.read(at, one).await.map(|b| vec![b])
    } else {
        m.read_vectored(at, bufs).await
    }
}

/// Checksummed writes hold this while the member writes: the token, and their blocks
/// locked ([`LeafChecksums::write_lock`]).
type Sums<'a> = Option<(WriteToken, crate::range_lock::RangeGuard<'a>)>;

/// When a write's checksums are taken. Before the member write, the CRC is the first pass
/// over the bytes and reads them from memory; once the member has started (a memory-backed
/// member copies them on submission) it reads them from the cache the copy just filled.
/// That order is kept for whole blocks whose groups' header bits are durable already:
/// marking a group may skip its header write for a rewrite of the stored checksums (a
/// repair), and that test needs the checksums before the data is written.
enum SumPlan<'a> {
    /// The volume keeps no checksums.
    Off,
    /// Taken: the write's token, and its blocks locked.
    Begun(WriteToken, crate::range_lock::RangeGuard<'a>),
    /// Whole blocks under durable header bits, their entry pages pinned in the cache, and
    /// locked (dropped in that order: the pins go while the blocks are still locked): taken
    /// once the write has started.
    OnceStarted(
        crate::checksum::PinnedPages<'a>,
        crate::range_lock::RangeGuard<'a>,
    ),
}

/// Most bytes zeroed at once whose checksums are computed (larger zeroings leave their
/// blocks unchecked until written again, rather than checksum gigabytes of zeroes).
const ZERO_CHECKSUM_MAX_BYTES: u64 = 64 << 20;

/// The checksum side of the leaf's requests (see [`crate::checksum`]).
impl LeafNode {
    /// A member error of a read: a checksum mismatch is its own kind (counted by the
    /// checksums; the member fails past their threshold unless the volume cannot do without
    /// it), anything else a read error. Every checked read of the member's blocks comes here:
    /// client reads, degraded reads, the reads that rebuild or resync others, every scrub.
    fn read_failed(&self, e: crate::member::MemberError) -> VolumeError {
        match &self.checksums {
            Some(cs) if checksum::is_mismatch(&e) => {
                if cs.past_threshold() {
                    let why = format!("more bad blocks than the checksum threshold allows: {e}");
                    self.table.fail_for_bad_blocks(self.index, &why);
                }
                VolumeError::Member {
                    member: self.index,
                    source: e,
                }
            }
            _ => self.read_error(e),
        }
    }

    /// Reads region bytes from `offset` into `buf` and checks every block: whole blocks
    /// (nearly every read) are checked in the buffer they were read into, first without the
    /// blocks' lock ([`Self::vouched`]), again under it where that does not vouch for them.
    async fn read_checked_one(
        &self,
        cs: &LeafChecksums,
        offset: u64,
        mut buf: Buf,
    ) -> VolumeResult<Buf> {
        let len = buf.len() as u64;
        if whole_blocks(offset, len) == (offset, offset + len)
            && cs.prefetch_held(offset, offset + len)
        {
            let m = self.slot().member();
            buf = match m.read(self.start + offset, buf).await {
                Ok(got) if self.vouched(cs, &m, offset, &[&got]) => return Ok(got),
                Ok(got) => got,
                Err(_) => Buf::new(len as usize),
            };
        }
        let mut got = self.read_checked_locked(cs, offset, vec![buf]).await?;
        Ok(got.pop().expect("one buffer in, one out"))
    }

    /// [`Self::read_checked_one`] for consecutive pieces (a member's run of a request): one
    /// member read, whole blocks checked without the lock first.
    async fn read_checked(
        &self,
        cs: &LeafChecksums,
        offset: u64,
        mut bufs: Vec<Buf>,
    ) -> VolumeResult<Vec<Buf>> {
        let len: u64 = bufs.iter().map(|b| b.len() as u64).sum();
        if whole_blocks(offset, len) == (offset, offset + len)
            && cs.prefetch_held(offset, offset + len)
        {
            let lens: Vec<usize> = bufs.iter().map(|b| b.len()).collect();
            let m = self.slot().member();
            bufs = match member_read(&*m, self.start + offset, bufs).await {
                Ok(got) => {
                    let pieces: Vec<&[u8]> = got.iter().map(|b| &b[..]).collect();
                    if self.vouched(cs, &m, offset, &pieces) {
                        return Ok(got);
                    }
                    got
                }
                Err(_) => lens.into_iter().map(Buf::new).collect(),
            };
        }
        self.read_checked_locked(cs, offset, bufs).await
    }

    /// Whether bytes of whole blocks read from `m` without the blocks' lock stand: `m` is
    /// still the slot's member and every block has a known checksum held now that they
    /// match. A write holds the lock while its bytes and checksums change, so such bytes are
    /// bytes some write left (old or new, as any read beside a write may get). Otherwise —
    /// a mismatch (a read racing a write, or a bad block), a block without a known checksum,
    /// a member swapped in, or a failed read (not counted here) — the caller reads again
    /// under the lock, where the bytes are judged; the unlocked attempt loads no entry page
    /// (`prefetch_held`), so none straddles a blank start.
    fn vouched(
        &self,
        cs: &LeafChecksums,
        m: &Arc<dyn Member>,
        offset: u64,
        pieces: &[&[u8]],
    ) -> bool {
        self.slot().holds(m) && cs.match_known(offset, pieces)
    }

    /// Reads region bytes from `offset` into `bufs` (consecutive) under the blocks' lock from
    /// the member in the slot now, and judges every block; parts of blocks are read as
    /// whole blocks.
    async fn read_checked_locked(
        &self,
        cs: &LeafChecksums,
        offset: u64,
        mut bufs: Vec<Buf>,
    ) -> VolumeResult<Vec<Buf>> {
        let len: u64 = bufs.iter().map(|b| b.len() as u64).sum();
        let (a, b) = whole_blocks(offset, len);
        let _held = cs.read_lock(a, b).await;
        if !self.slot().is_current() {
            return Err(self.unavailable(offset, len));
        }
        let m = self.slot().member();
        cs.expect_read(&*m, a, b)
            .await
            .map_err(|e| self.read_failed(e))?;
        if (a, b) == (offset, offset + len) {
            let got = member_read(&*m, self.start + offset, bufs)
                .await
                .map_err(|e| self.read_error(e))?;
            let pieces: Vec<&[u8]> = got.iter().map(|b| &b[..]).collect();
            cs.verify(&*m, offset, &pieces)
                .await
                .map_err(|e| self.read_failed(e))?;
            return Ok(got);
        }
        let wide = m
            .read(self.start + a, Buf::new((b - a) as usize))
            .await
            .map_err(|e| self.read_error(e))?;
        cs.verify(&*m, a, &[&wide])
            .await
            .map_err(|e| self.read_failed(e))?;
        let mut at = (offset - a) as usize;
        for buf in &mut bufs {
            let n = buf.len();
            buf.copy_from_slice(&wide[at..at + n]);
            at += n;
        }
        Ok(bufs)
    }

    /// Before a write of `data` at `offset`: how its blocks' checksums are taken (see
    /// [`SumPlan`]). A write of parts of blocks reads the rest of them; an edge block whose
    /// old bytes are bad gets no checksum (what is kept of it is unknown).
    async fn checksums_before_write(
        &self,
        offset: u64,
        data: &[SharedBuf],
    ) -> VolumeResult<SumPlan<'_>> {
        let Some(cs) = &self.checksums else {
            return Ok(SumPlan::Off);
        };
        let m = self.slot().member();
        let len: u64 = data.iter().map(|d| d.len() as u64).sum();
        let (a, b) = whole_blocks(offset, len);
        let guard = cs.write_lock(a, b).await;
        if (a, b) == (offset, offset + len) {
            if cs.groups_marked(a, b) {
                let pinned = self.written(cs.pin_pages(&*m, a, b).await).await?;
                return Ok(SumPlan::OnceStarted(pinned, guard));
            }
            let pieces: Vec<&[u8]> = data.iter().map(|d| &d[..]).collect();
            let entries = cs.compute(offset, &pieces);
            let token = self
                .written(cs.begin_write(&*m, offset, &entries).await)
                .await?;
            return Ok(SumPlan::Begun(token, guard));
        }
        let mut wide = self
            .written(m.read(self.start + a, Buf::new((b - a) as usize)).await)
            .await?;
        let mut edges = vec![a, b - BLOCK_BYTES];
        edges.dedup();
        edges.retain(|&e| e < offset || e + BLOCK_BYTES > offset + len);
        let mut bad = Vec::new();
        for e in edges {
            let i = (e - a) as usize;
            let old = &wide[i..i + BLOCK_BYTES as usize];
            if cs.verify(&*m, e, &[old]).await.is_err() {
                bad.push(((e - a) / BLOCK_BYTES) as usize);
            }
        }
        let mut at = (offset - a) as usize;
        for d in data {
            wide[at..at + d.len()].copy_from_slice(d);
            at += d.len();
        }
        let mut entries = cs.compute(a, &[&wide]);
        bad.into_iter().for_each(|i| entries[i] = BlockSum::Unknown);
        let token = self.written(cs.begin_write(&*m, a, &entries).await).await?;
        Ok(SumPlan::Begun(token, guard))
    }

    /// Once the member write of `data` at `offset` has started: the checksums a
    /// [`SumPlan::OnceStarted`] left for now, computed from the bytes the member's copy has
    /// just read into the cache, into the table's pinned pages — no await, so no drop in
    /// between; the blocks stay locked until the write is answered, so no read judges them
    /// in between either (a read checked without the lock that finds bytes and checksums
    /// apart reads again under it).
    fn checksums_once_started<'a>(
        &'a self,
        offset: u64,
        data: &[SharedBuf],
        plan: SumPlan<'a>,
    ) -> Sums<'a> {
        let (cs, guard, pinned) = match (&self.checksums, plan) {
            (_, SumPlan::Off) => return None,
            (_, SumPlan::Begun(token, guard)) => return Some((token, guard)),
            (Some(cs), SumPlan::OnceStarted(pinned, guard)) => (cs, guard, pinned),
            (None, SumPlan::OnceStarted(..)) => unreachable!("a plan with sums has checksums"),
        };
        let pieces: Vec<&[u8]> = data.iter().map(|d| &d[..]).collect();
        let entries = cs.compute(offset, &pieces);
        Some((cs.begin_write_pinned(offset, &entries, pinned), guard))
    }

    /// Before zeroing `[offset, offset+len)`: whole blocks take the checksum of zeroes, parts
    /// of blocks none.
    async fn checksums_before_zero(&self, offset: u64, len: u64) -> VolumeResult<Sums<'_>> {
        let Some(cs) = &self.checksums else {
            return Ok(None);
        };
        let (a, b) = whole_blocks(offset, len);
        let guard = cs.write_lock(a, b).await;
        let n = ((b - a) / BLOCK_BYTES) as usize;
        let mut entries = if b - a <= ZERO_CHECKSUM_MAX_BYTES {
            let zeroes = vec![0u8; BLOCK_BYTES as usize];
            cs.compute(a, &vec![&zeroes[..]; n])
        } else {
            vec![BlockSum::Unknown; n]
        };
        if a < offset {
            entries[0] = BlockSum::Unknown;
        }
        if b > offset + len {
            entries[n - 1] = BlockSum::Unknown;
        }
        let m = self.slot().member();
        let token = self.written(cs.begin_write(&*m, a, &entries).await).await?;
        Ok(Some((token, guard)))
    }

    /// The member write is answered: the old checksums are no longer accepted.
    fn checksums_after_write(&self, sums: Sums<'_>) {
        if let (Some(cs), Some((token, _guard))) = (&self.checksums, sums) {
            cs.end_write(token);
        }
    }
}
