//! The array's request path: every write-type request marks the records dirty and has its
//! regions' write-intent bits on disk before it reaches the volume; flushes clear what they
//! made durable; `mark_clean` records an orderly stop. (A child of `array` for its fields.)

use super::*;

impl Array {
    /// Writes the bitmap blocks that differ from the disk to every current member (FUA).
    pub(in crate::metadata) async fn write_bitmap(&self) -> VolumeResult<()> {
        let Some(intent) = &self.intent else {
            return Ok(());
        };
        let _g = self.bitmap_write.lock().await;
        let blocks = intent.dirty_blocks();
        if blocks.is_empty() {
            intent.written(&[]);
            return Ok(());
        }
        let mut writes = Vec::new();
        let areas = self.bitmap_areas.read().clone();
        for (r, area) in areas.iter().enumerate() {
            let Some(area) = area else { continue };
            if !self.volume.member_is_current(r) {
                continue;
            }
            for (at, bytes) in &blocks {
                let mut b = Buf::zeroed(bytes.len());
                b.copy_from_slice(bytes);
                writes.push((r, area.offset + at, b.freeze()));
            }
        }
        let results = join_all(writes.iter().map(|(r, at, b)| {
            let m = self.volume.member(*r);
            async move { m.write(*at, b.clone(), true).await }
        }))
        .await;
        self.bitmap_writes.fetch_add(1, SeqCst);
        let mut ok = false;
        for ((r, _, _), res) in writes.iter().zip(results) {
            match res {
                Ok(()) => ok = true,
                Err(e) => self.volume.fail_member(*r, &e.to_string()),
            }
        }
        if !ok {
            return Err(VolumeError::Unavailable {
                reason: "no member could take the write-intent bitmap".into(),
            });
        }
        intent.written(&blocks);
        Ok(())
    }

    /// Before a write-type request: the records say dirty and its regions' bits are on disk.
    async fn begin_write(&self, offset: u64, len: u64) -> VolumeResult<Option<Hold>> {
        self.inflight.fetch_add(1, SeqCst);
        if !self.dirty.load(SeqCst) {
            let mut rec = self.records.recorded.lock().await;
            if !self.dirty.load(SeqCst) {
                rec.clean = false;
                if let Err(e) = self.commit(&mut rec).await {
                    self.inflight.fetch_sub(1, SeqCst);
                    return Err(e);
                }
                self.dirty.store(true, SeqCst);
            }
        }
        let Some(intent) = &self.intent else {
            return Ok(None);
        };
        let (hold, missing) = intent.begin(offset, len);
        if missing {
            if let Err(e) = self.write_bitmap().await {
                intent.end(hold);
                self.inflight.fetch_sub(1, SeqCst);
                return Err(e);
            }
            debug_assert!(intent.covered(&hold));
        }
        Ok(Some(hold))
    }

    async fn end_write<T>(&self, hold: Option<Hold>, r: VolumeResult<T>) -> VolumeResult<T> {
        if let (Some(i), Some(h)) = (&self.intent, hold) {
            i.end(h);
        }
        let recorded = self.record_failures().await;
        self.inflight.fetch_sub(1, SeqCst);
        let v = r?;
        recorded?;
        Ok(v)
    }

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
        if self.background.pending() && self.in_range(offset, len) {
            self.sync_before_read(offset, len).await?;
        }
        Ok(())
    }

    /// [`Volume::write`], with the records dirty and the region's bit set first.
    pub async fn write(&self, offset: u64, buf: Buf, fua: bool) -> VolumeResult<Buf> {
        self.volume.check("write", offset, buf.len() as u64)?;
        if self.background.pending() {
            self.sync_before_write(offset, buf.len() as u64).await?;
        }
        let hold = self.begin_write(offset, buf.len() as u64).await?;
        let r = self.volume.write(offset, buf, fua).await;
        self.end_write(hold, r).await
    }

    pub async fn trim(&self, offset: u64, len: u64) -> VolumeResult<()> {
        if !self.in_range(offset, len) {
            return self.volume.trim(offset, len).await;
        }
        if self.background.pending() {
            self.sync_before_write(offset, len).await?;
        }
        let hold = self.begin_write(offset, len).await?;
        let r = self.volume.trim(offset, len).await;
        self.end_write(hold, r).await
    }

    pub async fn write_zeroes(&self, offset: u64, len: u64, fua: bool) -> VolumeResult<()> {
        if !self.in_range(offset, len) {
            return self.volume.write_zeroes(offset, len, fua).await;
        }
        if self.background.pending() {
            self.sync_before_write(offset, len).await?;
        }
        let hold = self.begin_write(offset, len).await?;
        let r = self.volume.write_zeroes(offset, len, fua).await;
        self.end_write(hold, r).await
    }

    /// A non-empty range inside the volume (others go straight to the volume, which refuses
    /// them or does nothing).
    fn in_range(&self, offset: u64, len: u64) -> bool {
        len > 0
            && offset
                .checked_add(len)
                .is_some_and(|e| e <= self.volume.capacity())
    }

    /// [`Volume::flush`]; afterwards the bits of regions no write touched since are cleared,
    /// on disk too (so a crash later resyncs only what was written after this flush).
    pub async fn flush(&self) -> VolumeResult<()> {
        let epoch = self.intent.as_ref().map(Intent::flush_started);
        let r = self.volume.flush().await;
        self.record_failures().await?;
        if self.flushed(epoch, r, self.bitmap_clear_delay)? {
            self.write_bitmap().await?;
        }
        Ok(())
    }

    /// After a volume flush that covered `epoch`: the bitmap drops what it made durable of
    /// the regions idle for `min_idle` (in memory; true when some bit went).
    fn flushed(
        &self,
        epoch: Option<u64>,
        r: VolumeResult<()>,
        min_idle: Duration,
    ) -> VolumeResult<bool> {
        r?;
        Ok(match (&self.intent, epoch) {
            (Some(i), Some(e)) if !self.volume.is_degraded() => i.flushed(e, min_idle),
            _ => false,
        })
    }

    /// Flushes and records the volume clean (orderly shutdown, or idle), unless the
    /// background resync is not done or a write is in flight: then it stays dirty, and the
    /// answer says which.
    pub async fn mark_clean(&self) -> VolumeResult<CleanMark> {
        if self.background.pending() {
            // No clean point before the background resync is done: a restart resumes it.
            self.flush().await?;
            return Ok(CleanMark::ResyncPending);
        }
        let _one = self.cleaning.lock().await;
        {
            let _rec = self.records.recorded.lock().await;
            if !self.dirty.load(SeqCst) {
                return Ok(CleanMark::Recorded);
            }
            // A writer counts itself in flight before it looks at `dirty`: once `dirty` is
            // false and nothing is in flight, every new writer records the volume dirty
            // again (under the records' lock) before it writes, and sets `dirty`.
            self.dirty.store(false, SeqCst);
            if self.inflight.load(SeqCst) > 0 {
                self.dirty.store(true, SeqCst);
                return Ok(CleanMark::WritesInFlight);
            }
        }
        // The flush runs without the records' lock: a member failing under the write-back
        // cache's destage is recorded by the next member write (`crate::failure_gate`),
        // which takes that lock.
        let epoch = self.intent.as_ref().map(Intent::flush_started);
        let r = self.volume.flush().await;
        let r = r.and(self.record_failures().await);
        let mut rec = self.records.recorded.lock().await;
        if self.dirty.load(SeqCst) {
            // A write came meanwhile and recorded the volume dirty: it stays so.
            return r.map(|()| CleanMark::WritesInFlight);
        }
        let r = self.clean_locked(&mut rec, epoch, r).await;
        if r.is_err() {
            self.dirty.store(true, SeqCst);
        }
        r.map(|()| CleanMark::Recorded)
    }

    /// The flush that began at `epoch` (its result `flushed`) covered every write since the
    /// last clean point: the bitmap is cleared and the records say clean.
    async fn clean_locked(
        &self,
        rec: &mut Recorded,
        epoch: Option<u64>,
        flushed: VolumeResult<()>,
    ) -> VolumeResult<()> {
        self.flushed(epoch, flushed, Duration::ZERO)?;
        self.write_bitmap().await?;
        rec.clean = true;
        self.commit(rec).await
    }
}
