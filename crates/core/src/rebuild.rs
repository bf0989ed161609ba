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
//! Each target once: a pass over several targets runs from the lowest of their positions,
//! and a window leaves out a target already current over it ([`roles_ahead`]).

use crate::error::{VolumeError, VolumeResult};
use crate::member::Member;
use crate::pass::{Checkpoint, PassControl, PassState, PassWork, Stale};
use crate::rebuild_narrow;
use crate::volume::Volume;
use futures::FutureExt;
use nbraid_layout::Node;
use std::sync::Arc;

/// Volume bytes a rebuild hands to the tree at a time (rounded to whole full stripes).
pub const REBUILD_WINDOW_BYTES: u64 = 4 << 20;

/// Rebuild windows in flight at once.
pub const REBUILD_INFLIGHT: usize = 4;

/// The node of `tree` a rebuild of lost member `role` takes its bytes from, with the members
/// for which `lost` is true gone (`role` is counted among them): the nearest node above it
/// that holds its bytes elsewhere and passes writes down to it ([`Node::rebuilds`]) — a
/// mirror with another copy that survives, a parity group within its tolerance. A whole
/// inner group lost (both copies of a pair under RAID 6) is rebuilt by the node above it,
/// never by the group itself. `None`: nothing redundant holds it, or a parity group beyond
/// its tolerance lies between (it takes no writes: a mirror of RAID 5 groups does not
/// regenerate a group that lost two members). The one rule behind spares, `replace` onto a
/// failed role and the rebuild pass.
pub fn rebuild_source<'a>(
    tree: &'a Node,
    role: usize,
    lost: &dyn Fn(usize) -> bool,
) -> Option<&'a Node> {
    let lost = |m: usize| m == role || lost(m);
    if !tree.rebuilds(role, &lost) {
        return None;
    }
    // Down the path to the member, while the child alone still rebuilds it.
    let mut node = tree;
    loop {
        let child = (node.children().iter()).find(|c| c.member_indices().contains(&role))?;
        if !child.rebuilds(role, &lost) {
            return Some(node);
        }
        node = child;
    }
}

/// The targets a rebuild window `[at, at+len)` leaves out, `starts` saying where each
/// target is current up to (volume bytes): those current over the whole window. A pass
/// that starts again over several targets (a spare took another role, a replace began)
/// sweeps once from the lowest start, and a target rebuilt up to `X` before is not written
/// again below `X`: its bytes there are current — a position becomes a checkpoint only
/// after a flush, and a member being rebuilt takes every write from the moment it joins
/// (md's recovery likewise skips a device whose recovery_offset is past its position). A
/// window that reaches past a target's start writes it (its nodes round the window out to
/// whole stripes); a node leaves out a child whose members being rebuilt are all left out
/// ([`crate::node::NodeMaintenance::written_by_window`]).
pub fn roles_ahead(starts: &[(usize, u64)], at: u64, len: u64) -> Vec<usize> {
    (starts.iter())
        .filter(|&&(_, start)| at + len <= start)
        .map(|&(role, _)| role)
        .collect()
}

/// Why no node can rebuild a lost member ([`rebuild_source`] finds none): no spare put in
/// its role could be filled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RebuildBlocker {
    /// The nearest group that holds the member's bytes elsewhere is a parity group beyond
    /// its tolerance: it takes no writes, so nothing above it reaches the member either.
    GroupBeyondTolerance {
        /// The group's members (roles), and those of them lost.
        members: Vec<usize>,
        lost: Vec<usize>,
        /// Children the group may lose (1: RAID 5, 2: RAID 6), and how many it lost.
        tolerates: usize,
        children_lost: usize,
    },
    /// Nothing redundant holds its bytes: no mirror copy or parity group above it, or every
    /// other copy lost too.
    NoRedundancy,
}

/// Why lost member `role` cannot be rebuilt with the members for which `lost` is true gone
/// (`role` counted among them); `None` when it can ([`rebuild_source`] finds a node). Walks
/// up from the member as [`Node::rebuilds`] decides: the first mirror with another copy
/// that survives or parity group within its tolerance rebuilds it; a parity group beyond
/// its tolerance met first blocks it.
pub fn rebuild_blocker(
    tree: &Node,
    role: usize,
    lost: &dyn Fn(usize) -> bool,
) -> Option<RebuildBlocker> {
    if rebuild_source(tree, role, lost).is_some() {
        return None;
    }
    let gone = |m: usize| m == role || lost(m);
    let mut path = vec![tree];
    while let Some(c) =
        (path.last()?.children().iter()).find(|c| c.member_indices().contains(&role))
    {
        path.push(c);
    }
    for node in path.iter().rev() {
        let Node::Parity(g) = node else { continue };
        if node.survives(&gone) {
            break; // not reached: it would rebuild the member
        }
        let members = node.member_indices();
        return Some(RebuildBlocker::GroupBeyondTolerance {
            lost: members.iter().copied().filter(|&m| gone(m)).collect(),
            members,
            tolerates: g.parity(),
            children_lost: g.children().iter().filter(|c| !c.survives(&gone)).count(),
        });
    }
    Some(RebuildBlocker::NoRedundancy)
}

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
        let bad = |why: String| Err(VolumeError::Refused(why));
        if index >= self.member_count() {
            return bad(format!(
                "member {index} does not exist (the volume has {})",
                self.member_count()
            ));
        }
        if rebuild_source(self.geometry().root(), index, &|_| false).is_none() {
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
            return Err(VolumeError::Refused(format!(
                "member {index} has not failed: replace it instead"
            )));
        }
        self.table().install(index, member);
        self.checksums_count_anew(index);
        Ok(())
    }

    /// A new member took role `index`: its checksum counts start from zero, as the table's
    /// do (`MemberSlot::count_anew`).
    fn checksums_count_anew(&self, index: usize) {
        let sums = self.options().checksums.as_ref();
        if let Some(c) = sums.and_then(|s| s.counters(index)) {
            c.reset();
        }
    }

    /// Takes failed slot `index`'s member out (the slot keeps `placeholder`, failed):
    /// returns the member.
    pub fn detach_member(
        &self,
        index: usize,
        placeholder: Arc<dyn Member>,
    ) -> VolumeResult<Arc<dyn Member>> {
        if index >= self.member_count() || !self.member_is_failed(index) {
            return Err(VolumeError::Refused(format!(
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
            return Err(VolumeError::Refused(format!(
                "member {index} is not current: rebuild onto a new member instead of replacing it"
            )));
        }
        if self.table().slot(index).replacement().is_some() {
            return Err(VolumeError::Refused(format!(
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
            let nothing_rebuilds =
                || rebuild_source(self.geometry().root(), m, &|x| lost.contains(&x)).is_none();
            slots[m].is_resyncing() && !slots[m].is_failed() && nothing_rebuilds()
        })?;
        Some(VolumeError::Unavailable {
            reason: format!(
                "member {stuck} cannot be rebuilt with members {lost:?} not current: no node above it holds its bytes and takes writes (a parity group beyond its tolerance lies between)"
            ),
        })
    }

    /// Runs the rebuild pass in windows of about `window_bytes` from the control's position
    /// to the end; every `checkpoint_bytes` (0: never) `checkpoint(position)` runs with no
    /// window in flight, everything below `position` rebuilt. A window leaves out the
    /// targets current over it already, `starts` saying where each is current up to
    /// ([`roles_ahead`]; a target not listed: from the control's position). Once `stale`
    /// says the targets changed, it stops at the next window (`Cancelled`, the control left
    /// running).
    pub(crate) async fn rebuild_pass<'a>(
        &'a self,
        ctl: &PassControl,
        (window_bytes, checkpoint_bytes): (u64, u64),
        starts: Vec<(usize, u64)>,
        checkpoint: Checkpoint<'a>,
        stale: Option<Stale<'a>>,
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
                    None => {
                        let ahead = roles_ahead(&starts, at, len);
                        async move { self.rebuild_window(at, len, &ahead).await }.boxed()
                    }
                }),
                checkpoint_bytes,
                checkpoint,
                activity: Some(Box::new(move || self.client_ops())),
                stale,
            },
        )
        .await
    }

    /// Rebuilds `[at, at + len)` but the targets `ahead`; after a read error, piece by
    /// piece ([`crate::rebuild_narrow`]): the pass stops only for bytes that cannot be
    /// rebuilt, and names them. A member that failed meanwhile is said as such, not as
    /// unreadable bytes.
    async fn rebuild_window(&self, at: u64, len: u64, ahead: &[usize]) -> VolumeResult<()> {
        let root = self.root_node();
        let first = match root.rebuild_range(at, len, ahead).await {
            Err(e) if rebuild_narrow::worth_narrowing(&e) => e,
            r => return r,
        };
        let r = rebuild_narrow::rebuild_in_pieces(root, (at, len, ahead), first).await;
        match (r, self.unrebuildable()) {
            (Err(_), Some(blocker)) => Err(blocker),
            (r, _) => r,
        }
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
            let old = self.table().finish_replacement(index);
            self.checksums_count_anew(index);
            return old;
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
                (REBUILD_WINDOW_BYTES, 0),
                Vec::new(),
                Box::new(|_| futures::future::ready(Ok(())).boxed()),
                None,
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

#[cfg(test)]
mod tests {
    use super::*;
    use nbraid_layout::ParityLayout;

    const MIB: u64 = 1 << 20;

    fn leaf(i: usize) -> Node {
        Node::member(i, MIB, MIB)
    }

    fn pair(first: usize) -> Node {
        Node::mirror(vec![leaf(first), leaf(first + 1)]).unwrap()
    }

    fn parity(p: usize, children: Vec<Node>) -> Node {
        Node::parity(64 << 10, p, ParityLayout::default(), children).unwrap()
    }

    fn stripe(children: Vec<Node>) -> Node {
        Node::stripe(64 << 10, children).unwrap()
    }

    /// RAID 6 over four pairs; RAID 5 over three pairs; a mirror of RAID 5 groups; RAID 50
    /// over pairs; a mirror of RAID 10 copies; RAID 60; RAID 10; RAID 5 over RAID 5 groups.
    fn trees() -> Vec<Node> {
        let raid5 = |f: usize| parity(1, (f..f + 3).map(leaf).collect());
        vec![
            parity(2, (0..4).map(|k| pair(2 * k)).collect()),
            parity(1, (0..3).map(|k| pair(2 * k)).collect()),
            Node::mirror(vec![raid5(0), raid5(3)]).unwrap(),
            stripe(vec![
                parity(1, (0..3).map(|k| pair(2 * k)).collect()),
                parity(1, (3..6).map(|k| pair(2 * k)).collect()),
            ]),
            Node::mirror(vec![
                stripe(vec![pair(0), pair(2)]),
                stripe(vec![pair(4), pair(6)]),
            ])
            .unwrap(),
            stripe(vec![
                parity(2, (0..4).map(leaf).collect()),
                parity(2, (4..8).map(leaf).collect()),
            ]),
            stripe((0..3).map(|k| pair(2 * k)).collect()),
            parity(1, vec![raid5(0), raid5(3), raid5(6)]),
        ]
    }

    fn source<'a>(tree: &'a Node, role: usize, lost: &[usize]) -> Option<&'a Node> {
        rebuild_source(tree, role, &|m| lost.contains(&m))
    }

    fn is(found: Option<&Node>, want: &Node) -> bool {
        found.is_some_and(|f| std::ptr::eq(f, want))
    }

    #[test]
    fn a_lost_inner_group_is_rebuilt_by_the_node_above_it() {
        let t = trees();
        // RAID 6 over pairs: one copy from its pair; both from the RAID 6; with two other
        // pairs lost too, the RAID 6 is beyond its tolerance.
        let r6 = &t[0];
        assert!(is(source(r6, 4, &[4]), &r6.children()[2]));
        assert!(is(source(r6, 4, &[4, 5]), r6));
        assert!(is(source(r6, 5, &[4, 5, 0, 1]), r6));
        assert!(source(r6, 4, &[4, 5, 0, 1, 2, 3]).is_none());
        // RAID 5 over pairs.
        assert!(is(source(&t[1], 2, &[2, 3]), &t[1]));
        assert!(source(&t[1], 2, &[2, 3, 0, 1]).is_none());
        // RAID 50 over pairs: the span rebuilds its pair; the other span's losses do not
        // matter to it.
        let span = &t[3].children()[0];
        assert!(is(source(&t[3], 3, &[2, 3]), span));
        assert!(is(source(&t[3], 3, &[2, 3, 8, 9]), span));
        // A mirror of RAID 10 copies: a pair lost in one copy comes from the other copy.
        assert!(is(source(&t[4], 0, &[0, 1]), &t[4]));
        assert!(source(&t[4], 0, &[0, 1, 4, 5]).is_none());
        // RAID 60: the span within its tolerance.
        assert!(is(source(&t[5], 1, &[1, 2]), &t[5].children()[0]));
        assert!(source(&t[5], 1, &[0, 1, 2]).is_none());
    }

    #[test]
    fn never_from_a_node_that_takes_no_writes_or_holds_nothing() {
        let t = trees();
        // A mirror of RAID 5 groups: a group down two is beyond its tolerance and takes no
        // writes, though the other copy survives.
        assert!(is(source(&t[2], 0, &[0]), &t[2].children()[0]));
        assert!(source(&t[2], 0, &[0, 1]).is_none());
        assert!(source(&t[2], 1, &[0, 1]).is_none());
        // Nothing redundant above: RAID 10 with a whole pair lost, a lone leaf.
        assert!(source(&t[6], 0, &[0, 1]).is_none());
        assert!(source(&leaf(0), 0, &[0]).is_none());
        // RAID 5 over RAID 5 groups: a group down two takes no writes from the outer one.
        assert!(source(&t[7], 0, &[0, 1]).is_none());
        assert!(is(source(&t[7], 0, &[0, 4]), &t[7].children()[0]));
    }

    /// A mirror of two RAID 5 groups with two members of one lost: no spare can help, and
    /// the group beyond its tolerance is the reason (said only "no spare").
    #[test]
    fn what_blocks_a_rebuild_is_the_group_beyond_its_tolerance() {
        let t = trees();
        let gone = |lost: &'static [usize]| move |m: usize| lost.contains(&m);
        assert_eq!(rebuild_blocker(&t[2], 0, &gone(&[0])), None);
        let beyond = RebuildBlocker::GroupBeyondTolerance {
            members: vec![0, 1, 2],
            lost: vec![0, 1],
            tolerates: 1,
            children_lost: 2,
        };
        assert_eq!(
            rebuild_blocker(&t[2], 0, &gone(&[0, 1])),
            Some(beyond.clone())
        );
        assert_eq!(rebuild_blocker(&t[2], 1, &gone(&[0, 1])), Some(beyond));
        // RAID 10 with a whole pair lost, a lone leaf: nothing redundant.
        let none = Some(RebuildBlocker::NoRedundancy);
        assert_eq!(rebuild_blocker(&t[6], 0, &gone(&[0, 1])), none);
        assert_eq!(rebuild_blocker(&leaf(0), 0, &gone(&[0])), none);
        // Every lost member of every tree: a blocker exactly when there is no source.
        for tree in trees() {
            for set in 0u32..1 << tree.member_count() {
                let lost = |m: usize| set >> m & 1 == 1;
                for role in (0..tree.member_count()).filter(|&m| lost(m)) {
                    let source = rebuild_source(&tree, role, &lost);
                    assert_eq!(
                        rebuild_blocker(&tree, role, &lost).is_some(),
                        source.is_none()
                    );
                }
            }
        }
    }

    /// Over every set of lost members of every tree, against a walk up from the member: the
    /// first node that holds its bytes elsewhere (a mirror with another copy that survives,
    /// a parity group that survives) is the source, unless a parity group beyond its
    /// tolerance comes first. The source is never lost itself.
    #[test]
    fn the_source_is_the_nearest_node_that_can_reconstruct() {
        for tree in trees() {
            let n = tree.member_count();
            for set in 0u32..1 << n {
                let lost: Vec<usize> = (0..n).filter(|&m| set >> m & 1 == 1).collect();
                let gone = |m: usize| lost.contains(&m);
                for &role in &lost {
                    let want = walk_up(&tree, role, &gone);
                    let got = rebuild_source(&tree, role, &gone);
                    assert_eq!(got.map(|g| g as *const Node), want, "{role} of {lost:?}");
                    assert!(got.is_none_or(|g| g.survives(&gone)), "{role} of {lost:?}");
                }
            }
        }
    }

    /// A window below a target's start leaves it out; one that reaches past it (or starts
    /// above it) writes it; a target starting at 0 is never left out.
    #[test]
    fn a_window_leaves_out_the_targets_current_over_it() {
        let starts = [(1, 24 * MIB), (3, 0), (5, 8 * MIB)];
        assert_eq!(roles_ahead(&starts, 0, 4 * MIB), vec![1, 5]);
        assert_eq!(roles_ahead(&starts, 4 * MIB, 4 * MIB), vec![1, 5]);
        // Ends at 5's start: 5 is current over all of it.
        assert_eq!(roles_ahead(&starts, 6 * MIB, 2 * MIB), vec![1, 5]);
        // Reaches past 5's start: written, whole.
        assert_eq!(roles_ahead(&starts, 6 * MIB, 4 * MIB), vec![1]);
        assert_eq!(roles_ahead(&starts, 20 * MIB, 4 * MIB), vec![1]);
        assert_eq!(roles_ahead(&starts, 22 * MIB, 4 * MIB), Vec::<usize>::new());
        assert_eq!(roles_ahead(&starts, 24 * MIB, 4 * MIB), Vec::<usize>::new());
        assert_eq!(roles_ahead(&[], 0, MIB), Vec::<usize>::new());
    }

    /// The oracle: the path from the root to `role`, then up it.
    fn walk_up(tree: &Node, role: usize, gone: &dyn Fn(usize) -> bool) -> Option<*const Node> {
        let mut path = vec![tree];
        while let Some(c) =
            (path.last()?.children().iter()).find(|c| c.member_indices().contains(&role))
        {
            path.push(c);
        }
        for w in path.windows(2).rev() {
            let (node, child) = (w[0], w[1]);
            match node {
                Node::Mirror(_) => {
                    let other = node.children().iter().filter(|c| !std::ptr::eq(*c, child));
                    if other.into_iter().any(|c| c.survives(gone)) {
                        return Some(node);
                    }
                }
                Node::Parity(_) if node.survives(gone) => return Some(node),
                Node::Parity(_) => return None,
                _ => {}
            }
        }
        None
    }
}
