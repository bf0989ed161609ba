//! RAID 5 and RAID 6 (and every parity group of a tree: the spans of RAID 50/60, parity over
//! mirrors, …): one [`ParityNode`] over its children, which are usually members but may be
//! any node.
//!
//! # Parts
//! The group (`ParityCore`) holds parts that each own their state and its invariants, and
//! says in which order they are used:
//! - `Stripes` (this file) — what every path shares: `Chunks` (`chunks.rs`: the children and
//!   the geometry, immutable), the stripe locks, `StripeHealth` (`sync.rs`: which stripes'
//!   parity is known in sync, which stale), `RecentStripes` (`recent.rs`: stripes a degraded
//!   read rebuilt or is rebuilding across requests, kept a while) and the group's
//!   partial-parity log (`crate::ppl::GroupLog`).
//! - `cache.rs` — the write-back stripe cache (entries, pins, the bound) and `Destager`, which
//!   writes stripes over it (destage, eviction, drain).
//! - `join.rs` — the write-through joiner: bytes left on a stripe for the next writer.
//! - `plan.rs` — pure decisions ([`choose`], [`plan_write`], recovery patterns), unit tested.
//! - `write.rs` — `StripeWriter`: one stripe write as named stages (plan, read, compute,
//!   log, member I/O, settle), retries and salvage.
//! - `read.rs` — `Reader`: direct and degraded reads, row reads that rebuild, read repair.
//! - `rebuild.rs` — `Rebuilder`: resync and rebuild; `scrub.rs` — `Scrubber`: checking and
//!   repairing stripes; `flusher.rs` — the background destage thread.
//! - `requests.rs` — `ParityCore`'s request entry points (read, write, zero), which take the
//!   stripe lock and hand each stripe to the cache, the joiner or the paths above.
//!
//! The paths are small structs of references to `Stripes` (and the cache), made per request
//! on the stack: each path's code is in one file, and what it may touch is in its fields.
//!
//! # Path of one write (write-through, RAID 5, 4 KiB)
//! `ParityNode::write` (this file) → `ParityCore::write` (`requests.rs`: stripe lock, then
//! cache, joiner or members) → `join.rs` (`Joins::take`: write now or leave the bytes) →
//! `Destager::write_over_cache` (`cache.rs`: forgets cached bytes the write supersedes) →
//! `StripeWriter::write_stripe` (`write.rs`: rows, retries) → `write_rows` (`write.rs`: 1 plan
//! via `plan.rs`, 2 read, 3 compute parity, 4 log via `ppl/log.rs` and `ppl/log/rounds.rs`,
//! 5 member I/O, 6 settle) → `node/leaf.rs` (failure gate, member) → the member.
//!
//! # Path of one degraded read
//! `ParityNode::read` → `ParityCore::read` (`requests.rs`: shared stripe lock, cache overlay)
//! → `Reader::read_members` (`read.rs`: healthy runs straight through `node/fanout.rs`; a lost
//! piece's stripe through `read_folding` when P rebuilds its one lost data chunk — the
//! request's chunks folded into it, `recent.rs` — else `read_stripe_pieces`) → `read_rows_ex`
//! (decide the recovery, read what it needs, rebuild rows in place) → `Reader::repair` of
//! chunks that returned errors.
//!
//! # Ordering
//! Requests lock the stripes they touch in a fair range lock over stripe numbers (see
//! `range_lock`): writes (and destages of the cache) exclusively, reads shared. Overlapping
//! writes to one stripe are therefore ordered, writes to different stripes run in parallel,
//! a read sees a stripe either before or after a write, never half-way (data written but
//! parity not yet), and a stream of reads cannot starve a write waiting for a stripe.
//!
//! # Writing one stripe (`StripeWriter::write_stripe`, `write.rs`)
//! The new bytes of a stripe cover some rows (byte offsets within the chunks); rows 64 KiB
//! or more apart are written as separate runs (`plan::row_runs`), each a plan over its own
//! `[r0, r1)` — so two writes at both ends of a wide strip no longer make one whole-chunk
//! plan (nor mark the stripe in sync as one would).
//! Each chunk's state is one struct (its new bytes' hull and coverage, whether its member can
//! be read and written) and [`plan_write`] — a pure function — turns them into a plan: what
//! to read, what to rebuild, what to write (data chunk *i*, P or Q). The executor
//! (`write_rows`) only carries the plan out. [`choose`] picks, by md's counting rule, the
//! plan with the fewest member reads:
//! - `FullRows`: every data chunk is written over `[r0, r1)` (a full-stripe write when the rows
//!   are the whole chunk): no reads, parity generated from the new data.
//! - `Rmw`: read the old bytes of the written chunks (their written span only) and the old
//!   P (and Q) over `[r0, r1)`, update the parity with the difference.
//! - `Rcw`: read the data chunks not wholly written over `[r0, r1)`, generate parity.
//! - `Reconstruct`: a chunk the other plans need is lost: read every surviving chunk, rebuild
//!   the lost old data, then generate parity as `Rcw` does — so a write to a lost chunk still
//!   updates P/Q as if the chunk had been written, and the data stays recoverable.
//! - `DataOnly`: every parity chunk of the stripe is lost: just write the data.
//!
//! A lost member counts as unreadable (infinite cost); ties go to `Rcw` (md's default); a
//! stripe not known to be in sync ([`SyncState::Unknown`]) never uses `Rmw`, since old parity
//! may be stale. `Rcw`, `FullRows` and `Reconstruct` over whole chunks on a healthy stripe
//! make it known in sync. A read for a plan that fails re-plans without that child; a child
//! that merely returned a read error still receives its new data, and a parity chunk that
//! returned one is regenerated rather than updated by RMW (which would leave it stale).
//!
//! A write that fails beyond the stripe's tolerance still puts its bytes on every data chunk
//! that takes writes, and marks the stripe's parity *stale*: nothing is rebuilt from it (a
//! clear error instead) until a whole-chunk write regenerates it. So a parity group that
//! failed a write never serves old bytes for it (a mirror above it relies on that), and its
//! write-back cache forgets the older bytes it held there. The stale mark lives in memory
//! only: where read errors (not failed members) forced the salvage, the write first reads
//! those children again (`REREADS`), then fails them, so the records say it too.
//!
//! # Reading
//! Healthy data is read straight from its chunks (runs on one child merged). A chunk that is
//! lost (failed member, or a read error) is rebuilt from the rest of its stripe: the stripe's
//! rows are read once (data into the caller's buffer where it lines up) and the lost
//! chunk(s) rebuilt in place, stripe by stripe — not chunk by chunk. A request covering only
//! part of such a stripe rebuilds the whole stripe and keeps it (a few stripes, forgotten
//! as soon as the stripe is written), so sequential degraded reads in requests smaller than
//! a stripe read each stripe once. A chunk that returned a read error is rewritten from the
//! rebuilt bytes afterwards (read repair, under the stripe's exclusive lock, only where parity
//! is known in sync), as mirrors do; if that write fails the member is marked failed.
//!
//! # Write-back cache
//! With [`CacheMode::WriteBack`], partial-stripe writes are kept in a per-node stripe cache
//! and complete at once. The bound (the volume's, shared evenly by its parity groups)
//! counts the memory the cache really pins — whole allocations of the writers' buffers, a
//! small slice of a large buffer being copied out first — and a write that would pass it
//! first evicts for room, or is written through when eviction cannot make any (destaging
//! fails): the cache never acknowledges more than it may hold. The cache holds views of the
//! writers' own buffers, no copy; a later write trims the views it overlaps, so adjacent
//! and overlapping writes merge. A stripe is written to the members (destaged) when it
//! becomes full (no reads), when the cache is over its bound (the fullest among the least
//! recently used first), on FLUSH (everything), at once for FUA writes, and by a
//! process-wide background thread once it has waited longer than the volume's
//! `cache_max_age` (default 1 s). Whole-stripe writes bypass the cache. Reads overlay
//! cached dirty bytes. **An entry stays listed until the members have its bytes**,
//! whichever path writes it (destage, a write that fills it, a FUA write, a whole-stripe
//! write or zeroing that supersedes it): a FLUSH waits for it on the stripe lock instead of
//! missing it, and if the write fails the entry stays (reads see it, the next FLUSH retries
//! and reports the error), so acknowledged bytes never vanish silently. What is still
//! cached when a volume is dropped without a flush is lost, as on power loss.
//!
//! # Write-through joining
//! Without the cache, a partial-stripe write may leave its bytes on the stripe for the next
//! writer (`join.rs`): when a writer is already queued on the stripe's lock, or when it
//! belongs to a sequential stream, its bytes are one run short of the stripe and other writes
//! of the group are in flight (then it waits for its answer, a few more arrivals, or until
//! only such held writes remain). The next writer writes the union — a full stripe, with no
//! reads and no partial parity, when the stream fills it — and answers the writers whose
//! bytes it carried. A writer that finds its bytes still left when it holds the stripe again
//! writes them itself, so a lone writer never waits and nothing waits for a writer that may
//! not come.
//!
//! The write hole (a crash between a stripe's data and parity writes, or before a flush) is
//! closed by the partial-parity log (`crate::ppl`) when the volume has one: before a
//! partial-stripe write's member writes are issued, `write_rows` logs the partial parity of
//! what it does not write (computed from the reads its plan made), and zeroing whole stripes
//! settles what the log holds for them. Sync and stale knowledge lives in memory only; at
//! assembly the engine decides it from whether the members are known to be zero
//! ([`SyncState::at_assembly`]): zero data has zero parity (`metadata::Array` resyncs what
//! may disagree before serving).
//!
//! # One answer each
//! Tolerance is one rule (`tolerates` / `rebuildable`: no more lost children than parity
//! chunks), a range is cut into stripes by one splitter (`stripe_pieces`; chunks come from
//! `ParityGroup::split`), and which children are lost for some rows is one question
//! (`lost`), asked once per write attempt.

mod cache;
mod chunks;
mod flusher;
mod join;
mod plan;
mod read;
mod rebuild;
mod recent;
mod requests;
mod scrub;
mod sync;
mod whole;
mod write;

pub use crate::node::CacheUsage;
pub use join::joined_writes;
pub use plan::{
    choose, plan_write, DataChunk, Health, NewBytes, Plan, Rows, StripeWrite, Target, WritePlan,
};
pub use write::split_stripe_writes;

use cache::{compact, Cache, CacheState, Destager, Entry};
use chunks::{Chunks, StripePiece};
use futures::channel::oneshot;
use futures::future::{select, Either};
use join::{joined, Answer, Joined, Wait};
use read::Reader;
use rebuild::Rebuilder;
use recent::RecentStripes;
use scrub::Scrubber;
use sync::StripeHealth;
use write::StripeWriter;

use crate::buf::{Buf, SharedBuf};
use crate::error::{VolumeError, VolumeResult};
use crate::node::{
    children_cache_usage, children_destage_aged, flush_children, read_runs, resync_children,
    ArrayNode, NodeIo, NodeMaintenance, ScrubPass, ZeroKind,
};
use crate::parity::{self, Loss};
use crate::range_lock::RangeLock;
use futures::future::{join_all, BoxFuture};
use futures::FutureExt;
use nbraid_layout::{ChildPiece, ParityGroup, ParityPiece, StripeRoles};
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

/// What is known about parity when a volume is assembled.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SyncState {
    /// Every stripe's parity matches its data (freshly created zero-filled members: zero data
    /// has zero P and Q; or the operator asserts it, mdadm's `--assume-clean`).
    Clean,
    /// Parity may be stale anywhere: stripes become known in sync as whole-chunk
    /// reconstruct-writes, full-stripe writes or [`crate::Volume::resync`] cover them.
    #[default]
    Unknown,
}

impl SyncState {
    /// The engine's decision at assembly: members known to hold only zeroes (files just
    /// created sparse, RAM) have zero data under zero P and Q, so every stripe is in sync;
    /// anything else may hold stale parity (until on-disk metadata records more).
    pub fn at_assembly(members_known_zero: bool) -> SyncState {
        if members_known_zero {
            SyncState::Clean
        } else {
            SyncState::Unknown
        }
    }
}

pub use nbraid_layout::CacheMode;

/// One stripe's new bytes, as (offset within the stripe's logical range, bytes), sorted.
type Segs = Vec<(u64, SharedBuf)>;

/// The group's stripes and what every path over them shares: the geometry, the stripe locks,
/// what is known of the stripes' parity, the stripes a degraded read kept, the log. The paths
/// ([`Reader`], [`StripeWriter`], [`Destager`], [`Rebuilder`], [`Scrubber`]) borrow it.
struct Stripes {
    /// The children and the geometry (immutable).
    chunks: Chunks,
    /// Over stripe numbers: exclusive for writes and destages, shared for reads.
    locks: RangeLock,
    /// Which stripes' parity is known in sync, which known stale.
    health: StripeHealth,
    /// Recently rebuilt whole stripes (degraded reads put them, every writer forgets them).
    recent: RecentStripes,
    /// The partial-parity log (`crate::ppl`): partial-stripe writes log first.
    ppl: Option<crate::ppl::GroupLog>,
    /// The volume's members: whether it can do without some (a write that read errors left
    /// no redundancy fails them only then). `None` (a group built alone): it can.
    members: Option<Arc<crate::node::MemberTable>>,
}

impl Stripes {
    /// The read path over these stripes.
    fn reader(&self) -> Reader<'_> {
        Reader { stripes: self }
    }

    /// The stripe writer over these stripes.
    fn writer(&self) -> StripeWriter<'_> {
        StripeWriter { stripes: self }
    }

    /// The exclusive (writes) or shared (reads) lock of the stripes under `[offset, offset+len)`.
    fn lock_stripes(
        &self,
        offset: u64,
        len: u64,
        exclusive: bool,
    ) -> crate::range_lock::Acquire<'_> {
        let (a, b) = self.chunks.stripe_span(offset, len);
        self.locks.lock(a, b - a + 1, exclusive)
    }

    /// Splits `[offset, offset+len)` of `data` into per-stripe segments (as an iterator:
    /// a vector was an allocation a request).
    fn per_stripe<'a>(
        &'a self,
        offset: u64,
        data: &'a SharedBuf,
    ) -> impl Iterator<Item = (u64, Segs)> + 'a {
        let mut at = 0;
        self.chunks.stripe_pieces(offset, data.len() as u64).map(
            move |StripePiece {
                      stripe: s,
                      in_stripe,
                      len: n,
                  }| {
                let piece = data.slice(at..at + n as usize);
                at += n as usize;
                (s, vec![(in_stripe, piece)])
            },
        )
    }

    /// Contract of everything that changes a stripe's members or what is known of them.
    fn assert_exclusive(&self, stripe: u64, what: &str) {
        assert!(
            self.locks.holds(stripe, 1, true),
            "stripe {stripe}: {what} without the stripe's exclusive lock"
        );
    }

    /// [`Self::assert_exclusive`] where the same request already asserted it once on its way
    /// (checking costs the lock table's mutex: once per request in release builds).
    fn debug_assert_exclusive(&self, stripe: u64, what: &str) {
        debug_assert!(
            self.locks.holds(stripe, 1, true),
            "stripe {stripe}: {what} without the stripe's exclusive lock"
        );
        let _ = what;
    }

    /// Contract of everything that reads a stripe's members.
    fn assert_locked(&self, stripe: u64, what: &str) {
        assert!(
            self.locks.holds(stripe, 1, false),
            "stripe {stripe}: {what} without the stripe's lock"
        );
    }
}

/// The parity group: its stripes, the parts only requests use (cache, joiner, repair
/// counter), and the flusher thread's handshake. Shared with the cache flusher thread. Its
/// request entry points are in `requests.rs`.
struct ParityCore {
    /// What every path over the stripes shares.
    stripes: Stripes,
    /// The write-back stripe cache (`None`: write-through).
    cache: Option<Cache>,
    /// Write-through: bytes partial-stripe writers left to the writers queued behind them.
    joins: join::Joins,
    /// Chunk ranges rewritten after a read error (shared with the volume's counters).
    repairs: Arc<AtomicU64>,
    /// Set when the node is dropped: the flusher thread leaves it alone from then on.
    closed: AtomicBool,
    /// Held by the flusher thread while it destages this group (so a drop can wait for it).
    flushing: Mutex<()>,
}

impl ParityCore {
    fn new(
        layout: ParityGroup,
        children: Vec<Box<dyn ArrayNode>>,
        capacity: u64,
        sync: SyncState,
        cache: CacheMode,
        max_age: Option<Duration>,
        repairs: Arc<AtomicU64>,
    ) -> ParityCore {
        let health = StripeHealth::new(sync, layout.stripes());
        let cache = match cache {
            CacheMode::WriteThrough => None,
            CacheMode::WriteBack { bytes } => Some(Cache {
                bound: bytes.max(layout.stripe_width()),
                max_age,
                state: Mutex::new(CacheState::default()),
                failed_destages: AtomicU64::new(0),
            }),
        };
        ParityCore {
            stripes: Stripes {
                chunks: Chunks::new(layout, children, capacity),
                locks: RangeLock::default(),
                health,
                recent: RecentStripes::default(),
                ppl: None,
                members: None,
            },
            cache,
            joins: join::Joins::default(),
            repairs,
            closed: AtomicBool::new(false),
            flushing: Mutex::new(()),
        }
    }

    /// Stripe writes over the cache (write-through without one): destage, eviction, drain.
    fn destager(&self) -> Destager<'_> {
        Destager {
            cache: self.cache.as_ref(),
            stripes: &self.stripes,
        }
    }
}

/// A RAID 5/6 group: the engine node (see the module docs).
pub struct ParityNode {
    core: Arc<ParityCore>,
}

impl ParityNode {
    /// `max_age`: how long a partial stripe may wait in the write-back cache before a
    /// background thread writes it (`None`: until flush, eviction or it fills up).
    /// `repairs` counts chunk ranges rewritten after read errors.
    pub fn new(
        layout: ParityGroup,
        children: Vec<Box<dyn ArrayNode>>,
        capacity: u64,
        sync: SyncState,
        cache: CacheMode,
        max_age: Option<Duration>,
        repairs: Arc<AtomicU64>,
    ) -> ParityNode {
        Self::started(ParityCore::new(
            layout, children, capacity, sync, cache, max_age, repairs,
        ))
    }

    /// [`ParityNode::new`] in a volume: with its members' table and, if it has one, its
    /// partial-parity log (`crate::ppl`).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn in_volume(
        layout: ParityGroup,
        children: Vec<Box<dyn ArrayNode>>,
        capacity: u64,
        sync: SyncState,
        cache: CacheMode,
        max_age: Option<Duration>,
        repairs: Arc<AtomicU64>,
        (ppl, members): (Option<crate::ppl::GroupLog>, Arc<crate::node::MemberTable>),
    ) -> ParityNode {
        let mut core = ParityCore::new(layout, children, capacity, sync, cache, max_age, repairs);
        core.stripes.ppl = ppl;
        core.stripes.members = Some(members);
        Self::started(core)
    }

    /// The node over `core`, its cache's ageing handed to the flusher thread.
    fn started(core: ParityCore) -> ParityNode {
        let core = Arc::new(core);
        if core.cache.as_ref().is_some_and(|c| c.max_age.is_some()) {
            flusher::register(Arc::downgrade(&core));
        }
        ParityNode { core }
    }
}

impl ParityNode {
    fn rebuilder(&self) -> Rebuilder<'_> {
        Rebuilder {
            stripes: &self.core.stripes,
        }
    }
}

impl Drop for ParityNode {
    /// No background write reaches the members after the node is gone (what is still in
    /// the cache is lost, as on power loss: volumes are flushed before they are dropped).
    fn drop(&mut self) {
        self.core.closed.store(true, Ordering::Release);
        drop(self.core.flushing.lock());
    }
}

impl NodeIo for ParityNode {
    fn capacity(&self) -> u64 {
        self.core.stripes.chunks.capacity
    }

    fn readable(&self, offset: u64, len: u64) -> bool {
        let (g, health) = (&self.core.stripes.chunks, &self.core.stripes.health);
        if len == 0 {
            return true;
        }
        let (a, b) = g.stripe_span(offset, len);
        if b - a < 16 {
            // Exact: each piece's chunk, or its stripe within tolerance.
            return g.layout.split(offset, len).iter().all(|p| {
                let at = g.layout.chunk_offset(p.stripe);
                g.children[p.child].readable(at + p.in_chunk, p.len)
                    || (!health.is_stale(p.stripe) && g.rebuildable(&g.lost(p.stripe, 0, g.strip)))
            });
        }
        // Conservative over long ranges: children lost anywhere in the span.
        if health.any_stale(a, b) {
            return false;
        }
        let at = g.layout.chunk_offset(a);
        let span = (b - a + 1) * g.strip;
        g.tolerates(g.children.iter().filter(|c| !c.readable(at, span)).count())
    }

    /// Every child under the range's chunks is there.
    fn intact(&self, offset: u64, len: u64) -> bool {
        let g = &self.core.stripes.chunks;
        if len == 0 {
            return true;
        }
        // The chunks a read uses, each on a child intact there: a lost member elsewhere in
        // the stripe rebuilds nothing of this range.
        g.layout.split(offset, len).iter().all(|p| {
            let at = g.layout.chunk_offset(p.stripe);
            g.children[p.child].intact(at + p.in_chunk, p.len)
        })
    }

    fn read(&self, offset: u64, buf: Buf) -> BoxFuture<'_, VolumeResult<Buf>> {
        self.core.read(offset, buf).boxed()
    }

    fn write(&self, offset: u64, data: SharedBuf, fua: bool) -> BoxFuture<'_, VolumeResult<()>> {
        self.core.write(offset, data, fua).boxed()
    }

    fn zero(&self, offset: u64, len: u64, kind: ZeroKind) -> BoxFuture<'_, VolumeResult<()>> {
        self.core.zero_range(offset, len, kind).boxed()
    }
}

/// The group's own maintenance (its cache, its stripes' parity), then its children's.
impl NodeMaintenance for ParityNode {
    fn children(&self) -> &[Box<dyn ArrayNode>] {
        &self.core.stripes.chunks.children
    }

    fn members_at(&self, offset: u64) -> Vec<(usize, u64)> {
        let g = &self.core.stripes.chunks;
        (g.layout.split(offset, 1).iter())
            .flat_map(|p| {
                g.children[p.child].members_at(g.layout.chunk_offset(p.stripe) + p.in_chunk)
            })
            .collect()
    }

    fn cache_usage(&self) -> CacheUsage {
        let own = self
            .core
            .cache
            .as_ref()
            .map_or(CacheUsage::default(), Cache::usage);
        own.plus(children_cache_usage(self.children()))
    }

    fn waits(&self, out: &mut String) {
        let stripes = &self.core.stripes;
        let (held, waiting) = stripes.locks.counts();
        out.push_str(&format!(
            "parity group of {} children: stripe locks {held} held, {waiting} waiting; {:?}\n",
            stripes.chunks.children.len(),
            self.cache_usage()
        ));
        if let Some(log) = &stripes.ppl {
            out.push_str(&format!("  log: {}\n", log.waits()));
        }
        for child in self.children() {
            child.waits(out);
        }
    }

    fn destage_aged(&self, older_than: Duration) -> BoxFuture<'_, ()> {
        async move {
            self.core.destager().destage_older_than(older_than).await;
            children_destage_aged(self.children(), older_than).await;
        }
        .boxed()
    }

    fn flush(&self) -> BoxFuture<'_, VolumeResult<()>> {
        async move {
            self.core.destager().drain().await?;
            flush_children(self.children()).await
        }
        .boxed()
    }

    fn flush_range(&self, offset: u64, len: u64) -> BoxFuture<'_, VolumeResult<()>> {
        async move {
            let w = self.core.stripes.chunks.width();
            let stripes = offset / w..(offset + len).div_ceil(w);
            self.core.destager().drain_stripes(stripes).await?;
            flush_children(self.children()).await
        }
        .boxed()
    }

    fn resync(&self) -> BoxFuture<'_, VolumeResult<()>> {
        async move {
            self.rebuilder().resync().await?;
            resync_children(self.children()).await
        }
        .boxed()
    }

    fn resync_range(&self, offset: u64, len: u64) -> BoxFuture<'_, VolumeResult<()>> {
        async move { self.rebuilder().resync_range(offset, len).await }.boxed()
    }

    fn rebuild_range<'a>(
        &'a self,
        offset: u64,
        len: u64,
        ahead: &'a [usize],
    ) -> BoxFuture<'a, VolumeResult<()>> {
        async move { self.rebuilder().rebuild_range(offset, len, ahead).await }.boxed()
    }

    fn scrub_range<'a>(
        &'a self,
        offset: u64,
        len: u64,
        pass: &'a ScrubPass<'a>,
    ) -> BoxFuture<'a, VolumeResult<()>> {
        async move {
            let scrubber = Scrubber {
                stripes: &self.core.stripes,
            };
            scrubber.scrub_stripes(offset, len, pass).await
        }
        .boxed()
    }
}
