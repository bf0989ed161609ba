//! The write-intent bitmap on the members: the in-memory decisions ([`Intent`]) and the
//! areas each role keeps it in, written by one writer at a time.
//!
//! Lock order: the records' lock before the bitmap writer's, as everywhere (a commit never
//! waits for a bitmap write that waits for a commit). Holders of both take the records' lock
//! first and hand its guard in as the proof (`catch_up`, `write_image_locked`).

use super::intent::Intent;
use super::records::RecordsGuard;
use super::{Area, BitmapArea};
use crate::buf::Buf;
use crate::error::{VolumeError, VolumeResult};
use crate::volume::Volume;
use futures::future::join_all;
use futures::lock::{Mutex as AsyncMutex, MutexGuard};
use parking_lot::RwLock;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::time::Duration;

pub(super) struct Bitmap {
    intent: Intent,
    /// By role: where that member keeps the bitmap (`None`: no member, or none recorded).
    areas: RwLock<Vec<Option<Area>>>,
    /// Serializes bitmap writes (callers waiting share the next one).
    writer: AsyncMutex<()>,
    /// Bitmap updates written (each a FUA write on every current member).
    writes: AtomicU64,
    /// A region's bit is cleared only once no write touched it for this long.
    clear_delay: Duration,
    /// A read-only start: the bitmap lives in memory only ([`Bitmap::keep_in_memory`]).
    read_only: bool,
}

impl Bitmap {
    /// The bitmap of `newest`'s geometry over `volume`: the union of every current member's
    /// copy (by role in `areas`), so a member that missed an update never hides a set bit.
    pub(super) async fn load(
        volume: &Volume,
        newest: BitmapArea,
        areas: Vec<Option<Area>>,
        clear_delay: Duration,
    ) -> Result<Bitmap, String> {
        let len = newest.area.len as usize;
        let mut union = vec![0u8; len];
        for (r, area) in areas.iter().enumerate() {
            let Some(area) = area else { continue };
            if !volume.member_is_current(r) || area.len != newest.area.len {
                continue;
            }
            if let Ok(bytes) = volume.member(r).read(area.offset, Buf::new(len)).await {
                union
                    .iter_mut()
                    .zip(bytes.iter())
                    .for_each(|(u, b)| *u |= b);
            }
        }
        let intent = Intent::new(volume.capacity(), newest.chunk_bytes, union)?;
        Ok(Bitmap {
            intent,
            areas: RwLock::new(areas),
            writer: AsyncMutex::new(()),
            writes: AtomicU64::new(0),
            clear_delay,
            read_only: false,
        })
    }

    pub(super) fn intent(&self) -> &Intent {
        &self.intent
    }

    pub(super) fn clear_delay(&self) -> Duration {
        self.clear_delay
    }

    /// Bitmap updates written since open.
    pub(super) fn writes(&self) -> u64 {
        self.writes.load(SeqCst)
    }

    /// Role `r`'s area (`None`: none recorded, or no such role).
    pub(super) fn area(&self, r: usize) -> Option<Area> {
        self.areas.read().get(r).copied().flatten()
    }

    /// Role `r` keeps its bitmap at `area` now (a new member, a re-added one, none).
    pub(super) fn set_area(&self, r: usize, area: Option<Area>) {
        self.areas.write()[r] = area;
    }

    /// Bytes of a role's area: the bitmap's (an area of another size is neither read nor
    /// written; a member joining gets one of this size).
    pub(super) fn area_bytes(&self) -> Option<u64> {
        Some(self.intent.image_bytes())
    }

    /// From now on nothing is written (a read-only start, `read_only.rs`).
    pub(super) fn keep_in_memory(&mut self) {
        self.read_only = true;
    }

    /// Writes the bitmap blocks that differ from the disk to every current member (FUA);
    /// nothing on a read-only volume.
    pub(super) async fn write(&self, volume: &Volume) -> VolumeResult<()> {
        if self.read_only {
            return Ok(());
        }
        let _g = self.writer.lock().await;
        let blocks = self.intent.dirty_blocks();
        if blocks.is_empty() {
            self.intent.written(&[]);
            return Ok(());
        }
        let mut writes = Vec::new();
        let areas = self.areas.read().clone();
        for (r, area) in areas.iter().enumerate() {
            let Some(area) = area else { continue };
            // An area of another size (a member that missed the commit growing the bitmap
            // with a reshape) is not read at open either: never written past its end.
            if !volume.member_is_current(r) || area.len != self.intent.image_bytes() {
                continue;
            }
            for (at, bytes) in &blocks {
                let mut b = Buf::zeroed(bytes.len());
                b.copy_from_slice(bytes);
                writes.push((r, area.offset + at, b.freeze()));
            }
        }
        let results = join_all(writes.iter().map(|(r, at, b)| {
            let m = volume.member(*r);
            async move { m.write(*at, b.clone(), true).await }
        }))
        .await;
        self.writes.fetch_add(1, SeqCst);
        let mut ok = false;
        for ((r, _, _), res) in writes.iter().zip(results) {
            match res {
                Ok(()) => ok = true,
                Err(e) => {
                    volume.failed_write(*r, &e, &e).await;
                }
            }
        }
        if !ok {
            return Err(VolumeError::Unavailable {
                reason: "no member could take the write-intent bitmap".into(),
            });
        }
        self.intent.written(&blocks);
        Ok(())
    }

    /// Gives role `r`'s member the current bitmap (it missed updates while it was not
    /// current); a member that cannot take it is failed. The records' lock is held (`_held`).
    pub(super) async fn catch_up(&self, volume: &Volume, _held: &RecordsGuard<'_>, r: usize) {
        let _bitmap = self.writer.lock().await;
        let Some(area) = self.area(r) else { return };
        let image = self.intent.on_disk_image();
        let mut b = Buf::zeroed(area.len as usize);
        b.copy_from_slice(&image[..area.len as usize]);
        if let Err(e) = volume.member(r).write(area.offset, b.freeze(), true).await {
            volume.failed_write(r, &e, &e).await;
        }
    }

    /// The bitmap as on disk, with the writer held until the guard goes: a member given this
    /// image misses no update. The records' lock is held (`_held`).
    pub(super) async fn image_locked(
        &self,
        _held: &RecordsGuard<'_>,
    ) -> (MutexGuard<'_, ()>, Vec<u8>) {
        let g = self.writer.lock().await;
        (g, self.intent.on_disk_image())
    }
}
