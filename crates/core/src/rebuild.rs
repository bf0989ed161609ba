//! Online rebuild and replace: a member slot gets a new member (in a failed member's place)
//! or a replacement (beside a member that still serves), and a [`crate::pass`] moves a
//! locked window across the volume, bringing it up to date while clients keep reading and
//! writing.
//!
//! # What the new member sees
//! From the moment it joins, the new member takes every write, like a current member, and is
//! read nowhere (it is *resyncing*: [`crate::node::MemberSlot::is_resyncing`]); a
//! replacement takes every write its member takes. Below the window it is therefore current,
//! above it the slot serves degraded (reads reconstruct, writes plan as if it were lost but
//! still write its new chunk), and the window itself is held exclusively by each node
//! ([`crate::node::NodeMaintenance::rebuild_range`]): mirrors copy a readable copy, parity groups reconstruct
//! (RAID 6 with two new members rebuilds both from one read of each stripe), a leaf with a
//! replacement copies its member onto it. Writing above the window costs one more member
//! write per user write but means no user write ever has to ask where the window is, and a
//! write crossing it cannot be half-routed. The member becomes readable only once the pass
//! has covered the whole volume (and, for an [`crate::metadata::Array`], that is committed
//! to the superblocks first).
//!
//! # Pieces
//! Windows of [`REBUILD_WINDOW_BYTES`] (rounded to whole full stripes), [`REBUILD_INFLIGHT`]
//! at a time: large sequential member I/O with several in flight, memory bounded by the
//! windows in flight (times the stripe's parity share). Rate limit, adaptive mode
//! ([`crate::pace`]: full speed while clients are idle, two windows always in flight while
//! they do I/O), pause, cancel and progress are the pass's
//! ([`PassControl`]).
//!
//! # What is rebuilt
//! The whole volume. The write-intent bitmap only knows regions written since the last clean
//! flush, not regions ever written, and there is no trim map: nothing proves a region of the
//! old member was zero, so every byte is rebuilt (a returning member that missed only some
//! writes is resynced over the bitmap's regions instead, see `metadata::Array::open`).

use crate::error::{VolumeError, VolumeResult};
use crate::member::Member;
use crate::pass::{Checkpoint, PassControl, PassState, PassWork};
use crate::volume::Volume;
use futures::FutureExt;
use std::sync::Arc;

/// Volume bytes a rebuild hands to the tree at a time (rounded to whole full stripes).
pub const REBUILD_WINDOW_BYTES: u64 = 4 << 20;

/// Rebuild windows in flight at once.
pub const REBUILD_INFLIGHT: usize = 4;

impl Volume {
    /// Bytes slot `index`'s member must have (the end of its last region).
    pub(crate) fn member_end(&self, index: usize) -> u64 {
        let mut end = 0;
        self.geometry().root().visit_members(&mut |m| {
            if m.index == index {
                end = end.max(m.start + m.len);
            }
        });
        end
    }

    /// Whether `member` can stand in slot `index`: the slot exists, redundancy covers it,
    /// and the member is large enough.
    fn check_newcomer(&self, index: usize, member: &dyn Member) -> VolumeResult<()> {
        let bad = |why: String| Err(VolumeError::Assembly(why));
        if index >= self.member_count() {
            return bad(format!(
                "member {index} does not exist (the volume has {})",
                self.member_count()
            ));
        }
        if !self.geometry().survives(&[index]) {
            return bad(format!(
                "member {index} has no redundancy over it: nothing to rebuild it from"
            ));
        }
        let need = self.member_end(index);
        if member.len() < need {
            return bad(format!(
                "`{}` has {} bytes; member {index}'s place needs {need}",
                member.name(),
                member.len()
            ));
        }
        Ok(())
    }

    /// Puts `member` in failed slot `index`: it takes writes at once and is rebuilt by the
    /// next [`Volume::rebuild`] (read only after that completes).
    pub fn install_member(&self, index: usize, member: Arc<dyn Member>) -> VolumeResult<()> {
        self.check_newcomer(index, &*member)?;
        if !self.member_is_failed(index) {
            return Err(VolumeError::Assembly(format!(
                "member {index} has not failed: replace it instead"
            )));
        }
        self.table().install(index, member);
        Ok(())
    }

    /// Takes failed slot `index`'s member out (the slot keeps `placeholder`, failed):
    /// returns the member.
    pub fn detach_member(
        &self,
        index: usize,
        placeholder: Arc<dyn Member>,
    ) -> VolumeResult<Arc<dyn Member>> {
        if index >= self.member_count() || !self.member_is_failed(index) {
            return Err(VolumeError::Assembly(format!(
                "member {index} has not failed: fail it before removing it"
            )));
        }
        Ok(self.table().detach(index, placeholder))
    }

    /// Starts replacing the member of slot `index` (current) by `member`: the next
    /// [`Volume::rebuild`] copies it over while the old member keeps serving, then swaps.
    pub fn start_replacement(&self, index: usize, member: Arc<dyn Member>) -> VolumeResult<()> {
        self.check_replacement(index, &*member)?;
        self.table().set_replacement(index, member);
        Ok(())
    }

    /// Whether [`Self::start_replacement`] would take `member` for slot `index` now.
    pub fn check_replacement(&self, index: usize, member: &dyn Member) -> VolumeResult<()> {
        self.check_newcomer(index, member)?;
        if !self.member_is_current(index) {
            return Err(VolumeError::Assembly(format!(
                "member {index} is not current: rebuild onto a new member instead of replacing it"
            )));
        }
        if self.table().slot(index).replacement().is_some() {
            return Err(VolumeError::Assembly(format!(
                "member {index} is already being replaced"
            )));
        }
        Ok(())
    }

    /// The replacement being rebuilt beside slot `index`'s member, if any.
    pub fn replacement(&self, index: usize) -> Option<Arc<dyn Member>> {
        self.table().slots().get(index)?.replacement()
    }

    /// Slots the next rebuild pass brings up to date: new members (resyncing, not failed)
    /// and members with a replacement.
    pub fn rebuild_targets(&self) -> Vec<usize> {
        let slots = self.table().slots();
        (0..slots.len())
            .filter(|&i| {
                let s = &slots[i];
                (s.is_resyncing() && !s.is_failed()) || s.replacement().is_some()
            })
            .collect()
    }

    /// Client requests completed so far (what an adaptive pass yields to).
    pub(crate) fn client_ops(&self) -> u64 {
        let c = self.counters();
        c.reads + c.writes + c.flushes + c.trims + c.write_zeroes + c.errors
    }

    /// A rebuild window of about `wanted` bytes, rounded to whole full stripes.
    pub(crate) fn rebuild_window_bytes(&self, wanted: u64) -> u64 {
        let width = self
            .geometry()
            .full_stripe_width()
            .unwrap_or(wanted)
            .max(self.block_size());
        (wanted / width).max(1) * width
    }

    /// Why a new member being rebuilt cannot be, with the members not current now (checked
    /// before each window: a member lost during the pass stops it). Without the check, a
    /// new member in a RAID 5 group that lost another member under a mirror got none of
    /// the other copy's bytes (the group takes no writes) and was made current all the same.
    fn unrebuildable(&self) -> Option<VolumeError> {
        let n = self.member_count();
        let lost: Vec<usize> = (0..n).filter(|&m| !self.member_is_current(m)).collect();
        let slots = self.table().slots();
        let stuck = lost.iter().find(|&&m| {
            slots[m].is_resyncing() && !slots[m].is_failed() && !self.geometry().rebuilds(m, &lost)
        })?;
        Some(VolumeError::Unavailable {
            reason: format!(
                "member {stuck} cannot be rebuilt with members {lost:?} not current: no node above it holds its bytes and takes writes (a parity group beyond its tolerance lies between)"
            ),
        })
    }

    /// Runs the rebuild pass in windows of about `window_bytes` from the control's position
    /// to the end; every `checkpoint_bytes` (0: never) `checkpoint(position)` runs with no
    /// window in flight, everything below `position` rebuilt.
    pub(crate) async fn rebuild_pass<'a>(
        &'a self,
        ctl: &PassControl,
        window_bytes: u64,
        checkpoint_bytes: u64,
        checkpoint: Checkpoint<'a>,
    ) -> VolumeResult<PassState> {
        let root = self.root_node();
        crate::pass::run(
            ctl,
            PassWork {
                total_bytes: root.capacity(),
                window_bytes: self.rebuild_window_bytes(window_bytes),
                inflight: REBUILD_INFLIGHT,
                window: Box::new(move |at, len| match self.unrebuildable() {
                    Some(e) => futures::future::ready(Err(e)).boxed(),
                    None => root.rebuild_range(at, len),
                }),
                checkpoint_bytes,
                checkpoint,
                activity: Some(Box::new(move || self.client_ops())),
            },
        )
        .await
    }

    /// Marks rebuilt target `index` current: a new member becomes readable, a replacement
    /// takes its member's place (the old member is returned). Call only after a pass that
    /// covered the whole volume with `index` a target from its start, and a flush.
    pub fn complete_rebuild(&self, index: usize) -> Option<Arc<dyn Member>> {
        let slot = self.table().slot(index);
        if slot.is_failed() {
            return None;
        }
        if slot.replacement().is_some() {
            return self.table().finish_replacement(index);
        }
        self.set_resyncing(index, false);
        None
    }

    /// Rebuilds every target ([`Volume::rebuild_targets`] when it starts) over the whole
    /// volume from the control's position (resuming a cancelled pass: the caller vouches
    /// that the targets are current below it), flushes, and makes those still standing
    /// current. Returns the pass's state and the slots completed (none unless `Done`).
    /// Without metadata nothing is recorded: [`crate::metadata::Array::rebuild`] is the
    /// durable one.
    pub async fn rebuild(&self, ctl: &PassControl) -> VolumeResult<(PassState, Vec<usize>)> {
        let targets: Vec<(usize, bool)> = self
            .rebuild_targets()
            .into_iter()
            .map(|i| (i, self.table().slot(i).replacement().is_some()))
            .collect();
        let state = self
            .rebuild_pass(
                ctl,
                REBUILD_WINDOW_BYTES,
                0,
                Box::new(|_| futures::future::ready(Ok(())).boxed()),
            )
            .await?;
        if state != PassState::Done {
            return Ok((state, Vec::new()));
        }
        self.flush().await?;
        let done = targets
            .into_iter()
            .filter(|&(i, replacing)| {
                let standing = !self.member_is_failed(i)
                    && replacing == self.table().slot(i).replacement().is_some();
                if standing {
                    self.complete_rebuild(i);
                }
                standing
            })
            .map(|(i, _)| i)
            .collect();
        Ok((state, done))
    }
}
