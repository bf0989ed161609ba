//! Background resync after an unclean start: `Array::open_background` serves at once and
//! `Array::background_resync` streams the regions the write-intent bitmap marks (and, for
//! mirrors, what stale members missed) on the pass machinery, rate-limited, pausable, with
//! progress (the daemon's `status` shows it). Mirror trees (RAID 1, 10, concats of mirrors),
//! trees of parity groups (RAID 5, 6, 50, 60) and mirrors of logged parity groups qualify,
//! under the conditions below (md's rules: serve during the resync, trust no parity that was
//! not resynced). A parity group over mirrors is never logged, so RAID 5 over mirrored pairs
//! resyncs before serving. (Mirrors of parity groups were left out for a while: their second
//! copy read back torn bytes once in three daemon runs; the crash simulator then found the
//! causes — a failed write's older cached bytes coming back, a read error's lost redundancy
//! noted only in memory, and a mirror's resync failing on a copy beyond its tolerance.)
//!
//! - **Mirrors: reads resync first.** A read touching a region not yet resynced first
//!   resyncs the pieces it touches (the first readable copy over the others, under the
//!   mirror's range lock: md's rule that the first copy is the truth), then reads: two reads
//!   of the same block never see different copies. Writes go to every copy as always.
//! - **Parity: reads go straight, writes resync first.** A healthy parity group reads data
//!   chunks directly; parity is not used, so a read needs nothing first. A write into a stripe not yet
//!   resynced must not carry untrusted parity forward (a read-modify-write updates old
//!   parity by a difference, so a wrong parity stays wrong — and the partial-parity log's
//!   entry for the write is computed from it). md writes by reconstruct-write above its
//!   resync point; we **resync the piece first** (whole full stripes, about 1 MiB), each
//!   stripe under its exclusive stripe lock, then write as usual. Why: our pending regions
//!   are the bitmap's scattered ranges, not one resync point, and the engine's per-stripe
//!   sync state is fixed at assembly (a per-stripe map over the whole volume plus a tree
//!   walk to clear it would be new engine surface); resyncing first reuses the mirror read
//!   path's machinery, leaves the piece trusted for every later write (plain RMW again),
//!   and is work the pass would do anyway. The cost: the first write into each unsynced
//!   piece waits for that piece's resync (a piece read and written once).
//! - **What a degraded read may return before the pass gets there.** The log is replayed at
//!   open, before serving, so every partially-written stripe is consistent by then; only a
//!   stripe torn by a full-row write (not logged: every data chunk of those rows was being
//!   written) can have parity that disagrees with its data. If a member is lost before the
//!   pass reaches such a stripe, its chunk rebuilt from that parity may be wrong — but only
//!   in rows every data chunk of which was being written at the crash: the write-hole
//!   promise excuses exactly those sectors (as it does for a member absent at the start
//!   with the resync in the foreground, which rebuilds from the same parity). Every other
//!   sector reads back exact; the crash simulator (`tests/sim/background.rs`) asserts both.
//!   (A group with a member missing at assembly is logged too, its ring for that member
//!   placed where its peers keep theirs: `ppl_area::areas_by_role`.)
//! - **Only logged parity groups, no stale members.** Without the log (a volume created
//!   before it, the log off, a group over mirrors or groups, which is never logged — or
//!   a dirty life before this start that did not log: its rings' marker says so) a torn
//!   partial-stripe write leaves parity wrong under data that was *not* being written; a
//!   member lost during a background pass would then rebuild wrong bytes nobody excused, so
//!   those volumes resync before serving. A stale member of a parity volume (offline during
//!   writes) is also resynced in the foreground: its chunks must be rebuilt from parity
//!   that, in a dirty array, may be torn in stripes whose writes it missed — left out of
//!   this change rather than argued safe.
//! - **No role being rebuilt.** A new member resumed from its rebuild checkpoint is trusted
//!   below it only once the open's resync rewrote the bitmap's regions onto it (writes it
//!   took there but did not flush at the crash); its rebuild may finish — and it be read —
//!   before a background pass gets there, so such a volume resyncs before serving (the
//!   crash simulator found a RAID 6 rebuilding one member with another failed serving a
//!   stale parity chunk that way).
//! - **Checkpointed by the bitmap.** Each bitmap chunk not yet resynced keeps a hold on its
//!   bit, so no flush clears it; when its last piece is resynced the hold goes and the next
//!   flush clears it. The records stay dirty until the pass is done (`Array::mark_clean`
//!   declines), so a restart (the log replayed again) resyncs exactly the chunks still set.
//!   Stale members stay write-only until the pass completes, then are recorded active.

use super::error::ArrayError;
use super::intent::Hold;
use super::parts::Parts;
use super::ranges::{slice, total_bytes};
use super::unsynced::Unsynced;
use super::RecordedState;
use crate::error::VolumeResult;
use crate::member::Member;
use crate::pass::{PassControl, PassState, PassWork};
use futures::FutureExt;
use nbraid_layout::Node;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;

/// Pieces the pass has in flight.
const INFLIGHT: usize = 4;

/// The array's background resync, if one is pending.
#[derive(Default)]
pub(super) struct BackgroundResync {
    /// Set while `state` holds a resync (read on every request without the lock).
    pending: AtomicBool,
    state: Mutex<Option<Arc<Background>>>,
}

struct Background {
    /// The regions pending at open (what the pass walks) and the pieces resynced since.
    unsynced: Mutex<Unsynced>,
    /// Bitmap holds by chunk, given back when the chunk has nothing left to resync.
    holds: Mutex<BTreeMap<u64, Hold>>,
    /// Stale roles with the member each held at open, made current when everything is
    /// resynced — those still holding it (a spare put in a role since is not this pass's).
    stale: Vec<(usize, Arc<dyn Member>)>,
    /// Reads resync what they touch first (the tree has mirrors).
    before_reads: bool,
    /// Writes resync what they touch first (the tree has parity groups).
    before_writes: bool,
}

/// Whether the tree's redundancy is mirrors only.
fn mirrors_only(n: &Node) -> bool {
    !matches!(n, Node::Parity(_)) && n.children().iter().all(mirrors_only)
}

/// Whether the tree has a mirror somewhere.
fn has_mirror(n: &Node) -> bool {
    matches!(n, Node::Mirror(_)) || n.children().iter().any(has_mirror)
}

/// Whether the engine logs every parity group of `root` with the log `setup` (as
/// `GroupLog::new` decides: a group over members, each with a ring large enough).
pub(super) fn every_group_logged(root: &Node, setup: Option<&crate::ppl::PplSetup>) -> bool {
    let Some(setup) = setup else { return false };
    crate::ppl::parity_groups(root).iter().all(|(g, leaves)| {
        leaves.as_ref().is_some_and(|leaves| {
            leaves.iter().all(|&(m, _)| {
                setup
                    .areas
                    .get(m)
                    .copied()
                    .flatten()
                    .is_some_and(|(_, len)| len >= crate::ppl::min_ring_bytes(g))
            })
        })
    })
}

/// When a start that must resync (unclean, or a stale member) serves, and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResyncOrder {
    /// Serves at once; the resync runs in the background.
    Background,
    /// Resyncs first: a role is being rebuilt.
    BeforeServingRebuilding,
    /// Resyncs first: a parity group's torn rows are not all in the log (no log, a group
    /// it does not cover, or a life that did not log).
    BeforeServingUnlogged,
    /// Resyncs first: a stale member of a parity volume.
    BeforeServingStale,
}

/// [`ResyncOrder`] of a volume over `root` (see the module docs): no role being rebuilt, and
/// mirrors only, or every parity group logged (`logged`) and no stale member (`stale`).
/// The one rule: the start decides by it and both checks say it.
pub fn resync_order(root: &Node, logged: bool, stale: bool, rebuilding: bool) -> ResyncOrder {
    if rebuilding {
        ResyncOrder::BeforeServingRebuilding
    } else if mirrors_only(root) {
        ResyncOrder::Background
    } else if !logged {
        ResyncOrder::BeforeServingUnlogged
    } else if stale {
        ResyncOrder::BeforeServingStale
    } else {
        ResyncOrder::Background
    }
}

/// Whether a volume over `root` may serve before its resync ([`resync_order`]).
fn serves_before_resync(root: &Node, logged: bool, stale: bool, rebuilding: bool) -> bool {
    resync_order(root, logged, stale, rebuilding) == ResyncOrder::Background
}

impl BackgroundResync {
    /// Whether a background resync is pending (the records stay dirty until it is done).
    pub(super) fn pending(&self) -> bool {
        self.pending.load(SeqCst)
    }

    fn get(&self) -> Option<Arc<Background>> {
        self.state.lock().clone()
    }

    /// Hands the resync of `ranges` (and of the stale roles) to the background when the
    /// volume may serve before it ([`serves_before_resync`]); whether it did. The records
    /// stay dirty.
    pub(super) async fn start(
        &self,
        p: Parts<'_>,
        ranges: &[(u64, u64)],
        stale: &[usize],
        rebuilding: bool,
    ) -> VolumeResult<bool> {
        let root = p.volume.geometry().root();
        // After a dirty life that did not log, nothing was replayed: its torn rows are
        // anywhere the bitmap marks, as without a log.
        let logged = every_group_logged(root, p.ppl.setup()) && p.ppl.torn_rows_logged();
        if !serves_before_resync(root, logged, !stale.is_empty(), rebuilding) {
            return Ok(false);
        }
        *self.state.lock() = Some(Arc::new(Background {
            // Pieces of whole full stripes, aligned.
            unsynced: Mutex::new(Unsynced::new(ranges, p.resync_piece().1)),
            holds: Mutex::new(hold_chunks(p, ranges)),
            stale: (stale.iter()).map(|&r| (r, p.volume.member(r))).collect(),
            before_reads: has_mirror(root),
            before_writes: !mirrors_only(root),
        }));
        self.pending.store(true, SeqCst);
        // Recorded dirty (no clean point until the pass is done), the bitmap as it is.
        if let Some(b) = p.bitmap {
            b.write(p.volume).await?;
        }
        let mut rec = p.records.lock().await;
        p.records.mark_dirty(&mut rec).await?;
        Ok(true)
    }

    /// Bytes still to resync in the background (0: none pending).
    pub(super) fn bytes(&self) -> u64 {
        self.get().map_or(0, |b| b.unsynced.lock().left_bytes())
    }

    /// Before a read of `[offset, offset+len)`: resyncs the pending pieces it touches, when
    /// the tree has mirrors.
    pub(super) async fn before_read(
        &self,
        p: Parts<'_>,
        offset: u64,
        len: u64,
    ) -> VolumeResult<()> {
        match self.get() {
            Some(bg) if bg.before_reads => sync_range(p, &bg, offset, offset + len).await,
            _ => Ok(()),
        }
    }

    /// Before a write-type request over `[offset, offset+len)`: resyncs the pending pieces
    /// it touches, when the tree has parity groups (no write builds on untrusted parity).
    pub(super) async fn before_write(
        &self,
        p: Parts<'_>,
        offset: u64,
        len: u64,
    ) -> VolumeResult<()> {
        match self.get() {
            Some(bg) if bg.before_writes => sync_range(p, &bg, offset, offset + len).await,
            _ => Ok(()),
        }
    }

    /// Runs the background resync to the end (or until the control cancels it), while the
    /// volume serves; then stale members are recorded active and the records may go clean
    /// again. Nothing pending: done at once.
    pub(super) async fn run(
        &self,
        p: Parts<'_>,
        ctl: &PassControl,
    ) -> Result<PassState, ArrayError> {
        let Some(bg) = self.get() else {
            ctl.nothing_to_do();
            return Ok(PassState::Done);
        };
        let this = &bg;
        let (plan, piece_bytes) = {
            let u = bg.unsynced.lock();
            (u.plan().to_vec(), u.piece_bytes())
        };
        let total = total_bytes(&plan);
        let window = move |at: u64, len: u64| {
            // Virtual offsets `at..at+len` of the plan's ranges laid end to end.
            let real = slice(&plan, at, len);
            async move {
                for (a, b) in real {
                    sync_range(p, this, a, b).await?;
                }
                Ok(())
            }
            .boxed()
        };
        let state = crate::pass::run(
            ctl,
            PassWork {
                total_bytes: total,
                window_bytes: piece_bytes,
                inflight: INFLIGHT,
                window: Box::new(window),
                checkpoint_bytes: 0,
                checkpoint: Box::new(|_| futures::future::ready(Ok(())).boxed()),
                activity: Some(Box::new(|| p.volume.client_ops())),
                stale: None,
            },
        )
        .await?;
        if state == PassState::Done {
            self.finish(p, &bg).await?;
        }
        Ok(state)
    }

    /// Everything is resynced: durable, stale members current and recorded active.
    async fn finish(&self, p: Parts<'_>, bg: &Background) -> VolumeResult<()> {
        // Pieces that failed to resync would still be on the map: not done then.
        if bg.unsynced.lock().left_bytes() > 0 {
            return Ok(());
        }
        p.volume.flush().await?;
        let mut rec = p.records.lock().await;
        for &(r, ref member) in &bg.stale {
            let same = p.volume.table().slot(r).holds(member);
            if same && !p.volume.member_is_failed(r) && !p.records.rebuilding.contains(r) {
                p.volume.set_resyncing(r, false);
                rec.members[r].state = RecordedState::Active;
            }
        }
        p.records.commit(&mut rec).await?;
        *self.state.lock() = None;
        self.pending.store(false, SeqCst);
        tracing::info!("volume `{}`: background resync done", p.name());
        Ok(())
    }
}

/// A bitmap hold on every chunk `ranges` touch, by chunk: their bits stay set until the
/// chunk is resynced.
fn hold_chunks(p: Parts<'_>, ranges: &[(u64, u64)]) -> BTreeMap<u64, Hold> {
    let mut holds = BTreeMap::new();
    let Some(intent) = p.intent() else {
        return holds;
    };
    let (chunk, capacity) = (intent.chunk_bytes(), p.volume.capacity());
    for &(a, b) in ranges {
        for c in a / chunk..b.div_ceil(chunk) {
            let (h, _) = intent.begin(c * chunk, chunk.min(capacity - c * chunk));
            if let Some(old) = holds.insert(c, h) {
                intent.end(old);
            }
        }
    }
    holds
}

/// Resyncs every pending piece overlapping `[a, b)`.
async fn sync_range(p: Parts<'_>, bg: &Background, a: u64, b: u64) -> VolumeResult<()> {
    loop {
        let (piece, parts) = {
            let u = bg.unsynced.lock();
            match u.first_piece(a, b) {
                Some(i) => (i, u.parts(i)),
                None => return Ok(()),
            }
        };
        for (s, e) in parts {
            p.volume.resync_range(s, e - s).await?;
        }
        synced(p, bg, piece);
    }
}

/// Piece `piece` is resynced: chunks with nothing left give their holds back.
fn synced(p: Parts<'_>, bg: &Background, piece: u64) {
    let mut u = bg.unsynced.lock();
    u.mark_done(piece);
    let Some(intent) = p.intent() else { return };
    let chunk = intent.chunk_bytes();
    let (a, b) = u.piece_range(piece);
    let mut holds = bg.holds.lock();
    for c in a / chunk..b.div_ceil(chunk) {
        if !u.any_left(c * chunk, (c + 1) * chunk) {
            if let Some(h) = holds.remove(&c) {
                intent.end(h);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mirrors_and_logged_parity_without_stale_members_resync_in_the_background() {
        use nbraid_layout::ParityLayout;
        let m = |i| Node::member(i, 1 << 20, 4 << 20);
        let pair = |i| Node::mirror(vec![m(i), m(i + 1)]).unwrap();
        let raid5 = |kids| Node::parity(64 << 10, 1, ParityLayout::default(), kids).unwrap();
        let raid10 = Node::stripe(64 << 10, vec![pair(0), pair(2)]).unwrap();
        assert!(mirrors_only(&raid10) && has_mirror(&raid10));
        // Mirrors: always, stale members too, log or none.
        assert!(serves_before_resync(&raid10, false, true, false));
        assert!(
            !serves_before_resync(&raid10, false, false, true),
            "a role being rebuilt"
        );
        let r5 = raid5(vec![m(0), m(1), m(2)]);
        assert!(!mirrors_only(&r5) && !has_mirror(&r5));
        assert!(serves_before_resync(&r5, true, false, false));
        assert!(!serves_before_resync(&r5, false, false, false), "no log");
        assert!(
            !serves_before_resync(&r5, true, true, false),
            "a stale member"
        );
        // Logged: every group over members, each member with a ring large enough.
        let setup = |n: usize, len: u64| crate::ppl::PplSetup {
            life: 1,
            areas: (0..n).map(|_| Some((4096, len))).collect(),
        };
        let r50 = Node::stripe(
            128 << 10,
            vec![raid5(vec![m(0), m(1), m(2)]), raid5(vec![m(3), m(4), m(5)])],
        )
        .unwrap();
        assert!(every_group_logged(&r50, Some(&setup(6, 1 << 20))));
        assert!(
            !every_group_logged(&r50, Some(&setup(6, 4096))),
            "rings too small"
        );
        let mut one_missing = setup(6, 1 << 20);
        one_missing.areas[4] = None;
        assert!(!every_group_logged(&r50, Some(&one_missing)));
        assert!(!every_group_logged(&r50, None));
        let over_mirrors = raid5(vec![pair(0), pair(2), pair(4)]);
        assert!(!every_group_logged(&over_mirrors, Some(&setup(6, 1 << 20))));
        // A mirror of logged groups serves first too; a stale member still resyncs first.
        let mirrored = Node::mirror(vec![
            raid5(vec![m(0), m(1), m(2)]),
            raid5(vec![m(3), m(4), m(5)]),
        ])
        .unwrap();
        assert!(every_group_logged(&mirrored, Some(&setup(6, 1 << 20))));
        assert!(serves_before_resync(&mirrored, true, false, false));
        assert!(!serves_before_resync(&mirrored, true, true, false));
    }

    #[test]
    fn the_order_names_why_a_resync_comes_before_serving() {
        use nbraid_layout::ParityLayout;
        let m = |i| Node::member(i, 1 << 20, 4 << 20);
        let r5 =
            Node::parity(64 << 10, 1, ParityLayout::default(), vec![m(0), m(1), m(2)]).unwrap();
        let r1 = Node::mirror(vec![m(0), m(1)]).unwrap();
        use ResyncOrder::*;
        assert_eq!(resync_order(&r5, true, false, false), Background);
        assert_eq!(resync_order(&r5, false, true, false), BeforeServingUnlogged);
        assert_eq!(resync_order(&r5, true, true, false), BeforeServingStale);
        assert_eq!(
            resync_order(&r5, true, false, true),
            BeforeServingRebuilding
        );
        assert_eq!(resync_order(&r1, false, true, false), Background);
        assert_eq!(
            resync_order(&r1, false, false, true),
            BeforeServingRebuilding
        );
    }
}
