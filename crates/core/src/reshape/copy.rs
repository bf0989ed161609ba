//! One window of a reshape's copy, in named stages: decide the window (the layout's rule),
//! hold it, save what it puts at risk, copy, make durable, checkpoint, move the position.

use super::ReshapeNode;
use crate::buf::Buf;
use crate::error::{VolumeError, VolumeResult};
use crate::node::NodeMaintenance;
use crate::pass::{PassControl, PassState, PassWork};
use futures::future::{try_join_all, BoxFuture};
use futures::FutureExt;
use nbraid_layout::{Side, Window, WindowRule};
use std::sync::atomic::Ordering::SeqCst;

/// Bytes one copy step reads and writes at most (rounded to whole units of the reshape).
const COPY_PIECE_BYTES: u64 = 8 << 20;

/// Raw bytes of one member, from byte `offset`: what the critical-section backup saves and
/// writes back.
#[derive(Clone, Debug)]
pub struct MemberRows {
    pub member: usize,
    pub offset: u64,
    pub bytes: Vec<u8>,
}

/// Where a reshape's state is made durable: the caller's (the superblocks and backup areas
/// for an array; memory in tests).
pub trait ReshapeHooks: Send + Sync {
    /// Saves `rows` — the old bytes the copy of `window` is about to overwrite — durably,
    /// and records that the backup holds `window`, before returning. Called with the window
    /// held, before its first write.
    fn backup<'a>(
        &'a self,
        window: Window,
        rows: &'a [MemberRows],
    ) -> BoxFuture<'a, VolumeResult<()>>;
    /// Records `position` durably (the bytes below it copied and flushed; any backup no
    /// longer needed). Called with the window still held, before the position moves, so no
    /// request reaches the new tree's copy of the window before a restart would find it.
    fn checkpoint(&self, position: u64) -> BoxFuture<'_, VolumeResult<()>>;
}

fn layout_error(e: nbraid_layout::LayoutError) -> VolumeError {
    VolumeError::Assembly(format!("reshape: {e}"))
}

impl ReshapeNode {
    /// Copies the next window (at most `max_len` bytes, at least one unit) into the new tree
    /// and checkpoints it; `None` when every byte is in the new tree.
    pub async fn copy_next(
        &self,
        max_len: u64,
        hooks: &dyn ReshapeHooks,
    ) -> VolumeResult<Option<Window>> {
        let layout = &self.0.layout;
        let Some(w) = layout
            .window(self.position(), max_len)
            .map_err(layout_error)?
        else {
            return Ok(None);
        };
        if w.rule == WindowRule::Overtakes {
            return Err(VolumeError::Unavailable {
                reason: format!(
                    "reshape window {}+{} would overwrite bytes not yet copied: this move cannot be done in place",
                    w.start, w.len
                ),
            });
        }
        let _held = self.0.window.lock(w.start, w.len, true).await;
        assert_eq!(
            self.position(),
            w.start,
            "only the copier moves the position"
        );
        if w.rule == WindowRule::Backup {
            let rows = self.rows_at_risk(w).await?;
            hooks.backup(w, &rows).await?;
        }
        self.copy_window(w).await?;
        self.make_durable().await?;
        hooks.checkpoint(w.start + w.len).await?;
        self.0.position.store(w.start + w.len, SeqCst);
        Ok(Some(w))
    }

    /// Runs the reshape as one more background pass ([`crate::pass`], as rebuild and scrub
    /// are): windows of about `window_bytes` (whole units) one at a time, at the control's
    /// rate, paused and cancelled through it, progress in it; every window checkpointed
    /// through `hooks`. The control starts where the reshape is
    /// ([`PassControl::resume_at`] its position).
    pub async fn run_pass(
        &self,
        ctl: &PassControl,
        window_bytes: u64,
        hooks: &dyn ReshapeHooks,
    ) -> VolumeResult<PassState> {
        assert_eq!(
            ctl.position_bytes(),
            self.position(),
            "the pass resumes where the reshape is"
        );
        let unit = self.0.layout.unit();
        let work = PassWork {
            total_bytes: self.0.layout.capacity(),
            window_bytes: (window_bytes / unit).max(1) * unit,
            inflight: 1,
            window: Box::new(move |at, len| {
                async move {
                    let w = self.copy_next(len, hooks).await?;
                    assert_eq!(
                        w.map(|w| (w.start, w.len)),
                        Some((at, len)),
                        "the pass's windows are the layout's"
                    );
                    Ok(())
                }
                .boxed()
            }),
            checkpoint_bytes: 0,
            checkpoint: Box::new(|_| futures::future::ready(Ok(())).boxed()),
            activity: None,
        };
        crate::pass::run(ctl, work).await
    }

    /// Reads the window from the old tree and writes it into the new one, a piece at a time.
    async fn copy_window(&self, w: Window) -> VolumeResult<()> {
        let unit = self.0.layout.unit();
        let piece = (COPY_PIECE_BYTES / unit).max(1) * unit;
        let end = w.start + w.len;
        let mut at = w.start;
        while at < end {
            let n = piece.min(end - at);
            let data = self.tree(Side::Old).read(at, Buf::new(n as usize)).await?;
            self.tree(Side::New).write(at, data.freeze(), false).await?;
            at += n;
        }
        Ok(())
    }

    /// Every write of the window on every member that has not failed reaches the disk.
    async fn make_durable(&self) -> VolumeResult<()> {
        self.flush().await?;
        let slots = self.0.members.slots();
        let flushes = (0..slots.len())
            .filter(|&i| !slots[i].is_failed())
            .map(|i| async move {
                slots[i]
                    .member()
                    .flush()
                    .await
                    .map_err(|source| VolumeError::Member { member: i, source })
            });
        try_join_all(flushes).await.map(|_| ())
    }

    /// The member rows the new tree's writes of `w` may overwrite while old bytes at or
    /// above the position live there (`Reshape::rows_at_risk`), read raw.
    pub(crate) async fn rows_at_risk(&self, w: Window) -> VolumeResult<Vec<MemberRows>> {
        let ranges = self.0.layout.rows_at_risk(w).map_err(layout_error)?;
        let slots = self.0.members.slots();
        let reads = ranges
            .into_iter()
            .filter(|r| !slots[r.member].is_failed())
            .map(|r| async move {
                let buf = Buf::new(r.len as usize);
                let bytes =
                    slots[r.member]
                        .member()
                        .read(r.offset, buf)
                        .await
                        .map_err(|source| VolumeError::Member {
                            member: r.member,
                            source,
                        })?;
                Ok::<_, VolumeError>(MemberRows {
                    member: r.member,
                    offset: r.offset,
                    bytes: bytes.to_vec(),
                })
            });
        try_join_all(reads).await
    }

    /// After a restart whose records say the backup holds the window at the position: writes
    /// the saved rows back over the members (the old tree's window whole again) and flushes,
    /// so the copy can be redone from the old tree.
    pub async fn restore(&self, rows: &[MemberRows]) -> VolumeResult<()> {
        let slots = self.0.members.slots();
        let writes = rows
            .iter()
            .filter(|r| !slots[r.member].is_failed())
            .map(|r| async move {
                let data = Buf::copy_from(&r.bytes).freeze();
                slots[r.member]
                    .member()
                    .write(r.offset, data, false)
                    .await
                    .map_err(|source| VolumeError::Member {
                        member: r.member,
                        source,
                    })
            });
        try_join_all(writes).await?;
        self.make_durable().await
    }
}
