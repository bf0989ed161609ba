//! One window of a reshape's copy, in named stages: decide the window (the layout's rule),
//! hold it, save what it puts at risk, copy, make durable, checkpoint, move the position.

use super::grown::Grown;
use super::ReshapeNode;
use crate::buf::Buf;
use crate::error::{VolumeError, VolumeResult};
use crate::node::{ArrayNode, ScrubPass, ScrubStats};
use crate::pass::{PassControl, PassState, PassWork};
use futures::future::{try_join_all, BoxFuture};
use futures::FutureExt;
use nbraid_layout::{MemberRange, Side, Window, WindowRule};
use std::sync::atomic::Ordering::SeqCst;

/// Bytes one copy step reads and writes at most while clients are idle (rounded to whole
/// units of the reshape).
const COPY_PIECE_BYTES: u64 = 8 << 20;

/// Bytes one copy step reads and writes at most while clients do I/O (at least one unit):
/// a member serves a client's request after at most one such step's share, not a whole
/// window's.
const BUSY_PIECE_BYTES: u64 = 256 << 10;

/// The longest window the copy holds while clients do I/O, and its first one: a client
/// request that meets the window waits for its copy and checkpoint (`tests/reshape_speed.rs`).
const BUSY_WINDOW_BYTES: u64 = 1 << 20;

/// The next window's longest length, whole units and at least one (the layout cuts it to the
/// volume): while clients are `busy` at most [`BUSY_WINDOW_BYTES`]; idle, twice the last
/// window (`last_len`, 0 before the first) but at least that, up to `max_len` — so clients
/// that arrive just after the copy starts, or after a busy stretch, meet a short window, and
/// an idle copy still reaches the long windows an HDD streams in a few steps.
pub(super) fn window_len(unit: u64, max_len: u64, busy: bool, last_len: u64) -> u64 {
    let most = if busy {
        max_len.min(BUSY_WINDOW_BYTES)
    } else {
        max_len.min(last_len.saturating_mul(2).max(BUSY_WINDOW_BYTES))
    };
    (most / unit).max(1) * unit
}

/// The next copy step's length: whole units (`unit` bytes), at most `left`, and at most
/// [`BUSY_PIECE_BYTES`] while clients are `busy` (else [`COPY_PIECE_BYTES`]), but always at
/// least one unit (when `left` holds one).
pub(super) fn piece_len(unit: u64, left: u64, busy: bool) -> u64 {
    let most = if busy {
        BUSY_PIECE_BYTES
    } else {
        COPY_PIECE_BYTES
    };
    ((most / unit).max(1) * unit).min(left)
}

/// Bytes of one member, from byte `offset`: what the critical-section backup saves and
/// writes back (read checked against the old tree's block checksums, where it keeps them).
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
    /// The volume's name, for the errors that stop the copy.
    fn volume(&self) -> &str {
        "(unnamed)"
    }
}

fn layout_error(e: nbraid_layout::LayoutError) -> VolumeError {
    VolumeError::Assembly(format!("reshape: {e}"))
}

impl ReshapeNode {
    /// Copies the next window (at most `max_len` bytes, shorter while clients do I/O
    /// ([`window_len`]), at least one unit) into the new tree and checkpoints it; `None` when
    /// every byte is in the new tree.
    pub async fn copy_next(
        &self,
        max_len: u64,
        hooks: &dyn ReshapeHooks,
    ) -> VolumeResult<Option<Window>> {
        let layout = &self.0.layout;
        let busy = self.0.clients.busy();
        let last = self.0.last_window_bytes.load(SeqCst);
        let Some(w) = layout
            .window(
                self.position(),
                window_len(layout.unit(), max_len, busy, last),
            )
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
        // The old tree's cache holds no bytes of the window from here on (no request can
        // add any while it is held): none is written over the new tree's rows later.
        self.tree(Side::Old).flush_range(w.start, w.len).await?;
        if w.rule == WindowRule::Backup {
            let rows = self.rows_at_risk(w, hooks.volume()).await?;
            hooks.backup(w, &rows).await?;
        }
        self.copy_window(w, busy).await?;
        // The copy's writes of a partial stripe (a window ending at the old capacity, not on
        // a whole stripe of the new tree) wait in the new tree's cache: written back before
        // the checkpoint says the window is in the new tree.
        self.tree(Side::New).flush_range(w.start, w.len).await?;
        self.make_durable().await?;
        hooks.checkpoint(w.start + w.len).await?;
        self.0.position.store(w.start + w.len, SeqCst);
        self.0.last_window_bytes.store(w.len, SeqCst);
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
        let capacity = self.0.layout.capacity();
        assert!(
            ctl.position_bytes() == self.position()
                || (self.position() == capacity && ctl.position_bytes() >= capacity),
            "the pass resumes where the reshape is (or in the grown space after it)"
        );
        let unit = self.0.layout.unit();
        let grown = Grown::of(&self.0.layout);
        let work = PassWork {
            // The copy, then the grown space's sync (`grown.rs`).
            total_bytes: self.pass_bytes(),
            window_bytes: (window_bytes / unit).max(1) * unit,
            inflight: 1,
            // The pass's window in the copy's windows (shorter ones while clients are busy),
            // each checkpointed; past the old capacity, the grown space synced.
            window: Box::new(move |at, len| {
                async move {
                    let copy_end = (at + len).min(capacity);
                    while self.position() < copy_end {
                        let left = copy_end - self.position();
                        let w = self.copy_next(left, hooks).await?;
                        assert!(
                            w.is_some_and(|w| w.start + w.len <= copy_end),
                            "the copy's windows stay in the pass's window {at}+{len}"
                        );
                    }
                    if at + len > capacity {
                        assert_eq!(
                            self.position(),
                            capacity,
                            "the grown space follows the copy"
                        );
                        let from = at.max(capacity);
                        grown.sync(self, from, at + len - from).await?;
                        if at + len == capacity + grown.bytes() {
                            self.make_durable().await?;
                        }
                    }
                    Ok(())
                }
                .boxed()
            }),
            checkpoint_bytes: 0,
            checkpoint: Box::new(|_| futures::future::ready(Ok(())).boxed()),
            activity: None,
            stale: None,
        };
        crate::pass::run(ctl, work).await
    }

    /// Reads the window from the old tree and writes it into the new one, a piece at a time:
    /// short pieces while clients do I/O ([`piece_len`]; `busy` for the first).
    async fn copy_window(&self, w: Window, mut busy: bool) -> VolumeResult<()> {
        let unit = self.0.layout.unit();
        let end = w.start + w.len;
        let mut at = w.start;
        while at < end {
            let n = piece_len(unit, end - at, busy);
            let data = self.tree(Side::Old).read(at, Buf::new(n as usize)).await?;
            self.tree(Side::New).write(at, data.freeze(), false).await?;
            at += n;
            busy = self.0.clients.busy();
        }
        Ok(())
    }

    /// Every write of the window on every member that has not failed reaches the disk. The
    /// caches stay (what clients wrote is theirs to flush): only the leaves write back what
    /// they keep (checksums), then the members flush.
    async fn make_durable(&self) -> VolumeResult<()> {
        try_join_all(self.0.children.iter().map(|t| flush_leaves(t.as_ref()))).await?;
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
    /// above the position live there (`Reshape::rows_at_risk`), read as the old tree's leaves
    /// read them: checked against the blocks' checksums. The restart writes a backup back
    /// through the leaves, under fresh checksums, so a bad block saved here would come back
    /// as good data. Rows that do not check are mended from the redundancy (a repairing
    /// scrub of the window in the old tree, as a scrub pass would) and read again; rows
    /// that still do not are an error naming the volume, the member and its bytes, and the
    /// window is not backed up.
    pub(crate) async fn rows_at_risk(
        &self,
        w: Window,
        volume: &str,
    ) -> VolumeResult<Vec<MemberRows>> {
        let ranges = self.0.layout.rows_at_risk(w).map_err(layout_error)?;
        let first = match self.read_rows(&ranges).await {
            Ok(rows) => return Ok(rows),
            Err((r, _)) => r,
        };
        let stats = ScrubStats::default();
        let pass = ScrubPass {
            repair: true,
            stats: &stats,
            volume,
            owner_above: false,
        };
        let mended = self
            .tree(Side::Old)
            .scrub_range(w.start, w.len, &pass)
            .await;
        let again = match mended {
            Ok(()) => self.read_rows(&ranges).await,
            Err(e) => Err((first, e)),
        };
        again.map_err(|(r, e)| VolumeError::Unavailable {
            reason: format!(
                "reshape of volume `{volume}`: the rows at risk of window {}+{} on member {} (member bytes {}..{}) do not read back whole (a block failing its checksum, or a read error) and its redundancy did not mend them, so the window is not backed up and the reshape stops: {e}",
                w.start,
                w.len,
                r.member,
                r.offset,
                r.offset + r.len
            ),
        })
    }

    /// `ranges` read through the old tree's leaf that holds each (checked; raw where no
    /// leaf holds one, or its member is resyncing: never read, its bytes only written back),
    /// skipping failed members. `Err` names the range that did not read.
    async fn read_rows(
        &self,
        ranges: &[MemberRange],
    ) -> Result<Vec<MemberRows>, (MemberRange, VolumeError)> {
        let slots = self.0.members.slots();
        let old = self.tree(Side::Old);
        let reads = ranges
            .iter()
            .filter(|r| !slots[r.member].is_failed())
            .map(|&r| async move {
                let buf = Buf::new(r.len as usize);
                let held = leaf_holding(old, r.member, r.offset, r.len);
                let read = match held {
                    Some((leaf, start)) if slots[r.member].is_current() => {
                        leaf.read(r.offset - start, buf).await
                    }
                    _ => (slots[r.member].member().read(r.offset, buf).await).map_err(|source| {
                        VolumeError::Member {
                            member: r.member,
                            source,
                        }
                    }),
                };
                match read {
                    Ok(bytes) => Ok(MemberRows {
                        member: r.member,
                        offset: r.offset,
                        bytes: bytes.to_vec(),
                    }),
                    Err(e) => Err((r, e)),
                }
            });
        try_join_all(reads).await
    }

    /// After a restart whose records say the backup holds the window at the position: writes
    /// the saved rows back over the members (the old tree's window whole again) and flushes,
    /// so the copy can be redone from the old tree.
    ///
    /// Each row goes through the old tree's leaf that holds it, so its checksums follow the
    /// bytes: the interrupted copy's new-tree writes may have left their checksums on disk
    /// (a flush, or the open adopting a torn write's blocks), and old bytes written under
    /// them raw read as corrupt on every member of the window.
    pub async fn restore(&self, rows: &[MemberRows]) -> VolumeResult<()> {
        let slots = self.0.members.slots();
        let old = self.tree(Side::Old);
        let writes = rows
            .iter()
            .filter(|r| !slots[r.member].is_failed())
            .map(|r| async move {
                let data = Buf::copy_from(&r.bytes).freeze();
                let len = r.bytes.len() as u64;
                match leaf_holding(old, r.member, r.offset, len) {
                    Some((leaf, start)) => leaf.write(r.offset - start, data, false).await,
                    None => slots[r.member]
                        .member()
                        .write(r.offset, data, false)
                        .await
                        .map_err(|source| VolumeError::Member {
                            member: r.member,
                            source,
                        }),
                }
            });
        try_join_all(writes).await?;
        self.make_durable().await
    }
}

/// The leaf under `node` whose region on `member` holds `[offset, offset+len)`, and the
/// region's first member byte.
fn leaf_holding(
    node: &dyn ArrayNode,
    member: usize,
    offset: u64,
    len: u64,
) -> Option<(&dyn ArrayNode, u64)> {
    if node.children().is_empty() {
        let (index, start) = *node.members_at(0).first()?;
        let holds = index == member && start <= offset && offset + len <= start + node.capacity();
        return holds.then_some((node, start));
    }
    node.children()
        .iter()
        .find_map(|c| leaf_holding(c.as_ref(), member, offset, len))
}

/// Flushes the leaves under `node` (what they keep: checksums), not the caches above them.
fn flush_leaves(node: &dyn ArrayNode) -> BoxFuture<'_, VolumeResult<()>> {
    async move {
        if node.children().is_empty() {
            return node.flush().await;
        }
        try_join_all(node.children().iter().map(|c| flush_leaves(c.as_ref())))
            .await
            .map(|_| ())
    }
    .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_are_whole_units_and_short_while_clients_are_busy() {
        for unit in [4 << 10, 384 << 10, 3 << 20, 48 << 20] {
            for max_len in [unit, 4 << 20, 64 << 20, 1000 * unit] {
                for last in [0, unit, 1 << 20, 4 << 20, 64 << 20] {
                    for busy in [false, true] {
                        let n = window_len(unit, max_len, busy, last);
                        assert!(n >= unit && n.is_multiple_of(unit) && n <= max_len.max(unit));
                    }
                    let busy = window_len(unit, max_len, true, last);
                    assert!(busy <= BUSY_WINDOW_BYTES.max(unit));
                    assert!(busy <= window_len(unit, max_len, false, last));
                }
            }
        }
    }

    /// Idle, the windows grow from the busy length to the pass's, doubling.
    #[test]
    fn idle_windows_start_short_and_double_up_to_the_longest() {
        let (unit, max_len) = (64 << 10, 4 << 20);
        let mut last = 0;
        let mut seen = Vec::new();
        for _ in 0..5 {
            last = window_len(unit, max_len, false, last);
            seen.push(last >> 20);
        }
        assert_eq!(seen, [1, 2, 4, 4, 4]);
        assert_eq!(window_len(unit, max_len, true, 4 << 20), 1 << 20);
        assert_eq!(
            window_len(unit, 256 << 10, false, 0),
            256 << 10,
            "never past the pass's"
        );
    }

    #[test]
    fn pieces_are_whole_units_and_short_while_clients_are_busy() {
        for unit in [4 << 10, 384 << 10, 3 << 20, 48 << 20] {
            for left in [unit, 5 * unit, 1000 * unit] {
                for busy in [false, true] {
                    let n = piece_len(unit, left, busy);
                    assert!(
                        n >= unit && n <= left && n.is_multiple_of(unit),
                        "{unit} {left} {busy}"
                    );
                }
                assert!(piece_len(unit, left, true) <= piece_len(unit, left, false));
                assert!(piece_len(unit, left, true) <= BUSY_PIECE_BYTES.max(unit));
            }
        }
    }
}
