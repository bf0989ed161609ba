//! The array's request path, read top to bottom. A request is checked once, by the engine's
//! own check (`Volume::check`; zeroing, which has no length limit, is answered by the volume
//! when it falls outside: see [`Array::reaches_members`]). Then every write-type request
//! passes these stages, in this order, in [`Array::through_stages`]:
//!
//! 1. **Resync first** — pending background-resync pieces it touches are resynced
//!    (`resync.rs`: no write builds on untrusted parity).
//! 2. **Counted in flight** — before it looks at the records' flag, so a clean point never
//!    misses it ([`Array::mark_clean`]).
//! 3. **Records dirty** — committed once after each clean point (`records.rs`).
//! 4. **Intent bits on disk** — its regions' write-intent bits set on every current member
//!    before any of its bytes reach them (`bitmap.rs`).
//! 5. **The volume's I/O** — the engine (`crate::volume`).
//! 6. **Failures recorded** — members that failed under it are in the records before it is
//!    acknowledged; its hold on the bits is given back.
//!
//! A flush is the volume's flush, failures recorded, then the bits it made durable cleared
//! on disk, then — the first time after a member failed — the records say that member
//! missed an acknowledged write (as before a FUA write's acknowledgement); a forced assembly
//! reads that. [`Array::mark_clean`] records an orderly stop.

use super::{Array, CleanMark};
use crate::buf::Buf;
use crate::error::VolumeResult;
use crate::metadata::intent::{Hold, Intent};
use crate::metadata::records::{CleanClaim, Counted, RecordsGuard};
use std::future::Future;
use std::time::Duration;

/// A write-type request between stage 2 and stage 6.
struct Admitted<'a> {
    _counted: Counted<'a>,
    /// Its hold on the write-intent bits (`None`: no bitmap).
    hold: Option<Hold>,
}

impl Array {
    pub async fn read(&self, offset: u64, len: u64) -> VolumeResult<Buf> {
        self.before_read(offset, len).await?;
        self.volume.read(offset, len).await
    }

    /// [`Array::read`] into `buf` (`buf.len()` bytes), so a caller can reuse its buffers.
    pub async fn read_into(&self, offset: u64, buf: Buf) -> VolumeResult<Buf> {
        self.before_read(offset, buf.len() as u64).await?;
        self.volume.read_into(offset, buf).await
    }

    /// Before a read: the pending resync pieces it touches are done (a mirror's copies may
    /// disagree there after an unclean start).
    async fn before_read(&self, offset: u64, len: u64) -> VolumeResult<()> {
        if self.background.pending() && self.reaches_members(offset, len) {
            (self.background)
                .before_read(self.parts(), offset, len)
                .await?;
        }
        Ok(())
    }

    /// [`crate::volume::Volume::write`], through the stages (see the module).
    pub async fn write(&self, offset: u64, buf: Buf, fua: bool) -> VolumeResult<Buf> {
        let len = buf.len() as u64;
        let range = self.volume.check("write", offset, len)?;
        let done =
            (self.through_stages(offset, len, self.volume.write_checked(range, buf, fua))).await?;
        self.acknowledged_durable(fua).await?;
        Ok(done)
    }

    pub async fn trim(&self, offset: u64, len: u64) -> VolumeResult<()> {
        if !self.reaches_members(offset, len) {
            return self.volume.trim(offset, len).await;
        }
        self.through_stages(offset, len, self.volume.trim(offset, len))
            .await
    }

    pub async fn write_zeroes(&self, offset: u64, len: u64, fua: bool) -> VolumeResult<()> {
        if !self.reaches_members(offset, len) {
            return self.volume.write_zeroes(offset, len, fua).await;
        }
        (self.through_stages(offset, len, self.volume.write_zeroes(offset, len, fua))).await?;
        self.acknowledged_durable(fua).await
    }

    /// Before a FUA request is acknowledged: it is acknowledged durable
    /// ([`crate::metadata::records::Records::before_durable_ack`]).
    async fn acknowledged_durable(&self, fua: bool) -> VolumeResult<()> {
        if fua {
            self.records.before_durable_ack().await?;
        }
        Ok(())
    }

    /// A non-empty range inside the volume. Zeroing requests outside go straight to the
    /// volume, which refuses them or does nothing: its check is the one that answers.
    fn reaches_members(&self, offset: u64, len: u64) -> bool {
        len > 0
            && offset
                .checked_add(len)
                .is_some_and(|e| e <= self.volume.capacity())
    }

    /// The stages of a checked write-type request over `[offset, offset+len)`; `io` is the
    /// volume's I/O (stage 5), not started before the stages ahead of it are done.
    async fn through_stages<T>(
        &self,
        offset: u64,
        len: u64,
        io: impl Future<Output = VolumeResult<T>>,
    ) -> VolumeResult<T> {
        // 1. Resync first.
        if self.background.pending() {
            (self.background)
                .before_write(self.parts(), offset, len)
                .await?;
        }
        // 2.–4. Counted in flight, records dirty, intent bits on disk.
        let admitted = self.admit(offset, len).await?;
        // 5. The volume's I/O.
        let r = io.await;
        // 6. Failures recorded, the hold given back.
        self.leave(admitted, r).await
    }

    /// Stages 2 to 4: counted in flight, then the records say dirty, then the request's
    /// regions' bits are on disk. An error leaves nothing held.
    async fn admit(&self, offset: u64, len: u64) -> VolumeResult<Admitted<'_>> {
        let counted = self.records.enter();
        self.records.ensure_dirty(&counted).await?;
        let Some(bitmap) = &self.bitmap else {
            return Ok(Admitted {
                _counted: counted,
                hold: None,
            });
        };
        let intent = bitmap.intent();
        let (hold, missing) = intent.begin(offset, len);
        if missing {
            if let Err(e) = bitmap.write(&self.volume).await {
                intent.end(hold);
                return Err(e);
            }
            assert!(intent.covered(&hold), "the bitmap write covers the hold");
        }
        Ok(Admitted {
            _counted: counted,
            hold: Some(hold),
        })
    }

    /// Stage 6: the hold is given back and members that failed under the request are
    /// recorded before it is acknowledged (it leaves the in-flight count last).
    async fn leave<T>(&self, admitted: Admitted<'_>, r: VolumeResult<T>) -> VolumeResult<T> {
        let Admitted { _counted, hold } = admitted;
        if let (Some(b), Some(h)) = (&self.bitmap, hold) {
            b.intent().end(h);
        }
        let recorded = self.record_failures().await;
        drop(_counted);
        let v = r?;
        recorded?;
        Ok(v)
    }

    fn intent(&self) -> Option<&Intent> {
        self.bitmap.as_ref().map(|b| b.intent())
    }

    /// [`crate::volume::Volume::flush`]; afterwards the bits of regions no write touched
    /// since are cleared, on disk too (so a crash later resyncs only what was written after
    /// this flush).
    pub async fn flush(&self) -> VolumeResult<()> {
        let epoch = self.intent().map(Intent::flush_started);
        let r = self.volume.flush().await;
        self.record_failures().await?;
        let delay = self
            .bitmap
            .as_ref()
            .map_or(Duration::ZERO, |b| b.clear_delay());
        if self.flushed(epoch, r, delay)? {
            self.write_bitmap().await?;
        }
        // Acknowledged durable from here: members failed before miss what it promised.
        self.records.before_durable_ack().await
    }

    async fn write_bitmap(&self) -> VolumeResult<()> {
        match &self.bitmap {
            Some(b) => b.write(&self.volume).await,
            None => Ok(()),
        }
    }

    /// After a volume flush that covered `epoch`: the bitmap drops what it made durable of
    /// the regions idle for `min_idle` (in memory; true when some bit went). Never while the
    /// volume is degraded: a member that comes back is resynced over the set regions.
    fn flushed(
        &self,
        epoch: Option<u64>,
        r: VolumeResult<()>,
        min_idle: Duration,
    ) -> VolumeResult<bool> {
        r?;
        Ok(match (self.intent(), epoch) {
            (Some(i), Some(e)) if !self.volume.is_degraded() => i.flushed(e, min_idle),
            _ => false,
        })
    }

    /// Flushes and records the volume clean (orderly shutdown, or idle), unless the
    /// background resync or the checksums' refill is not done or a write is in flight:
    /// then it stays dirty, and the answer says which.
    pub async fn mark_clean(&self) -> VolumeResult<CleanMark> {
        if self.background.pending() {
            // No clean point before the background resync is done: a restart resumes it.
            self.flush().await?;
            return Ok(CleanMark::ResyncPending);
        }
        if self.refill.pending() {
            // Nor before the dropped checksums are back: a restart drops them again.
            self.flush().await?;
            return Ok(CleanMark::ChecksumsPending);
        }
        let _one = self.records.one_clean_point().await;
        {
            let rec = self.records.lock().await;
            match self.records.claim_clean_point(&rec) {
                CleanClaim::AlreadyClean => return Ok(CleanMark::Recorded),
                CleanClaim::Busy => return Ok(CleanMark::WritesInFlight),
                CleanClaim::Claimed => {}
            }
        }
        // The flush runs without the records' lock: a member failing under the write-back
        // cache's destage is recorded by the next member write (`crate::failure_gate`),
        // which takes that lock.
        let epoch = self.intent().map(Intent::flush_started);
        let r = self.volume.flush().await;
        let r = r.and(self.record_failures().await);
        let mut rec = self.records.lock().await;
        if self.records.is_dirty() {
            // A write came meanwhile and recorded the volume dirty: it stays so.
            return r.map(|()| CleanMark::WritesInFlight);
        }
        let r = self.clean_locked(&mut rec, epoch, r).await;
        if r.is_err() {
            self.records.unclaim_clean_point(&rec);
        }
        r.map(|()| CleanMark::Recorded)
    }

    /// The flush that began at `epoch` (its result `flushed`) covered every write since the
    /// last clean point: the bitmap is cleared and the records say clean.
    async fn clean_locked(
        &self,
        rec: &mut RecordsGuard<'_>,
        epoch: Option<u64>,
        flushed: VolumeResult<()>,
    ) -> VolumeResult<()> {
        self.flushed(epoch, flushed, Duration::ZERO)?;
        self.write_bitmap().await?;
        rec.clean = true;
        self.records.commit(rec).await
    }
}
