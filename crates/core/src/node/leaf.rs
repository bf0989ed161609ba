//! The leaf of the tree: a member region. It adds the region start, calls the member, counts
//! errors and marks members failed, and holds every write back while a member failure is not
//! recorded yet ([`crate::failure_gate`]).

use super::members::{MemberSlot, MemberTable};
use super::{NodeIo, NodeMaintenance, ZeroKind};
use crate::buf::{Buf, SharedBuf};
use crate::error::{VolumeError, VolumeResult};
use crate::member::{Member, MemberResult};
use futures::future::BoxFuture;
use futures::FutureExt;
use std::sync::Arc;

/// A member region: the leaf of the tree.
pub struct LeafNode {
    /// Index into the member table.
    index: usize,
    /// Byte on the member where this region begins.
    start: u64,
    /// Bytes in the region.
    len: u64,
    table: Arc<MemberTable>,
}

impl LeafNode {
    pub fn new(index: usize, start: u64, len: u64, table: Arc<MemberTable>) -> LeafNode {
        LeafNode {
            index,
            start,
            len,
            table,
        }
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
    /// mirror repairs the bytes, and only a failed repair write fails the member.
    fn read_error(&self, e: crate::member::MemberError) -> VolumeError {
        self.slot().count_read_error();
        tracing::warn!("{e}");
        VolumeError::Member {
            member: self.index,
            source: e,
        }
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

    /// Records a failed write-type op: the member's contents are now stale.
    fn failed_write(&self, e: crate::member::MemberError) -> VolumeError {
        self.table.fail(self.index, &e);
        VolumeError::Member {
            member: self.index,
            source: e,
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

    fn read(&self, offset: u64, buf: Buf) -> BoxFuture<'_, VolumeResult<Buf>> {
        async move {
            let slot = self.slot();
            if !slot.is_current() {
                return Err(self.unavailable(offset, buf.len() as u64));
            }
            slot.count_read(buf.len() as u64);
            slot.member()
                .read(self.start + offset, buf)
                .await
                .map_err(|e| self.read_error(e))
        }
        .boxed()
    }

    fn write(&self, offset: u64, data: SharedBuf, fua: bool) -> BoxFuture<'_, VolumeResult<()>> {
        async move {
            self.table.failure_gate().wait_recorded().await?;
            let slot = self.slot();
            if slot.is_failed() {
                return Err(self.unavailable(offset, data.len() as u64));
            }
            let at = self.start + offset;
            slot.count_write(data.len() as u64);
            let rep = slot.replacement();
            let copy = rep.as_ref().map(|r| r.write(at, data.clone(), fua));
            let r = slot.member().write(at, data, fua).await;
            self.replacement_done(copy).await;
            r.map_err(|e| self.failed_write(e))?;
            if !fua {
                slot.mark_dirty();
            }
            Ok(())
        }
        .boxed()
    }

    fn read_vectored(&self, offset: u64, bufs: Vec<Buf>) -> BoxFuture<'_, VolumeResult<Vec<Buf>>> {
        async move {
            let slot = self.slot();
            if !slot.is_current() {
                let len = bufs.iter().map(|b| b.len() as u64).sum();
                return Err(self.unavailable(offset, len));
            }
            slot.count_read(bufs.iter().map(|b| b.len() as u64).sum());
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
        async move {
            self.table.failure_gate().wait_recorded().await?;
            let slot = self.slot();
            if slot.is_failed() {
                let len = data.iter().map(|d| d.len() as u64).sum();
                return Err(self.unavailable(offset, len));
            }
            let at = self.start + offset;
            slot.count_write(data.iter().map(|d| d.len() as u64).sum());
            let rep = slot.replacement();
            let copy = rep
                .as_ref()
                .map(|r| r.write_vectored(at, data.clone(), fua));
            let r = slot.member().write_vectored(at, data, fua).await;
            self.replacement_done(copy).await;
            r.map_err(|e| self.failed_write(e))?;
            if !fua {
                slot.mark_dirty();
            }
            Ok(())
        }
        .boxed()
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
                        ZeroKind::Trim => m.trim(at, len).await,
                        ZeroKind::WriteZeroes => m.write_zeroes(at, len).await,
                    }
                }
                .boxed()
            };
            let copy = slot.replacement().map(op);
            let r = op(slot.member()).await;
            self.replacement_done(copy).await;
            r.map_err(|e| self.failed_write(e))?;
            slot.mark_dirty();
            Ok(())
        }
        .boxed()
    }
}

/// A leaf holds no cache and no redundancy; it only copies its member onto a replacement.
impl NodeMaintenance for LeafNode {
    /// Copies the member's bytes onto its replacement (the parent holds the range's lock).
    fn rebuild_range(&self, offset: u64, len: u64) -> BoxFuture<'_, VolumeResult<()>> {
        async move {
            let slot = self.slot();
            let Some(rep) = slot.replacement() else {
                return Ok(());
            };
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
