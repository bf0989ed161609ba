//! RAID 5 and RAID 6 (and every parity group of a tree: the spans of RAID 50/60, parity over
//! mirrors, …): one [`ParityNode`] over its children, which are usually members but may be
//! any node.
//!
//! # Ordering
//! Requests lock the stripes they touch in a range lock over stripe numbers: writes (and
//! destages of the cache) exclusively, reads shared. Overlapping writes to one stripe are
//! therefore ordered, writes to different stripes run in parallel, and a read sees a stripe
//! either before or after a write, never half-way (data written but parity not yet).
//!
//! # Writing one stripe (`ParityCore::write_stripe`)
//! The new bytes of a stripe cover some rows `[r0, r1)` (byte offsets within the chunks).
//! [`choose`] picks, by md's counting rule, the plan with the fewest member reads:
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
//! that merely returned a read error still receives its new data.
//!
//! A write that fails beyond the stripe's tolerance still puts its bytes on every data chunk
//! that takes writes, and marks the stripe's parity *stale*: nothing is rebuilt from it (a
//! clear error instead) until a whole-chunk write regenerates it. So a parity group that
//! failed a write never serves old bytes for it (a mirror above it relies on that).
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
//! (bounded in dirty bytes; the volume's bound is shared evenly by its parity groups) and
//! complete at once. The cache holds views of the writers' own buffers, no copy; a later
//! write trims the views it overlaps, so adjacent and overlapping writes merge. A stripe is
//! written to the members (destaged) when it becomes full (no reads), when the cache is over
//! its bound (least recently used first), on FLUSH (everything), at once for FUA writes, and
//! by a process-wide background thread once it has waited longer than the volume's
//! `cache_max_age` (default 1 s). Whole-stripe writes bypass the cache. Reads overlay cached
//! dirty bytes. A stripe that cannot be destaged stays cached (reads see it) and the next
//! flush reports the error. What is still cached when a volume is dropped without a flush is
//! lost, as on power loss.
//!
//! The write hole (a crash between a stripe's data and parity writes, or before a flush) is
//! not closed here: flushed and FUA writes survive power loss; unflushed ones may leave the
//! stripe's parity stale, which matters only if a member is then lost (a later issue:
//! journal or partial-parity log). Sync and stale knowledge lives in memory only (metadata
//! is a later issue).

use crate::buf::{Buf, SharedBuf};
use crate::error::{VolumeError, VolumeResult};
use crate::node::{child_runs, ArrayNode, ZeroKind};
use crate::parity::{self, Loss};
use crate::range_lock::RangeLock;
use futures::future::{join_all, BoxFuture};
use futures::FutureExt;
use nbraid_layout::{ChildPiece, ParityGroup, ParityPiece, StripeRoles};
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
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

/// How a volume's parity groups treat writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheMode {
    /// A write completes when it is on its members.
    WriteThrough,
    /// Partial-stripe writes wait in a stripe cache of at most `bytes` (for the whole volume,
    /// shared evenly by its parity groups) until the stripe fills, is evicted or flushed.
    WriteBack { bytes: u64 },
}

impl Default for CacheMode {
    fn default() -> Self {
        CacheMode::WriteBack { bytes: 32 << 20 }
    }
}

/// How a stripe write gets its parity (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plan {
    DataOnly,
    FullRows,
    Rmw,
    Rcw,
    Reconstruct,
}

/// md's counting rule over one stripe's data chunks. `touched[i]`: chunk `i` gets new bytes;
/// `covered[i]`: it gets new bytes over the whole row range; `lost[i]`: its member cannot be
/// read; `parity_alive`: P/Q chunks that can be read and written.
pub fn choose(
    touched: &[bool],
    covered: &[bool],
    lost: &[bool],
    parity_alive: usize,
    in_sync: bool,
) -> Plan {
    if parity_alive == 0 {
        return Plan::DataOnly;
    }
    if covered.iter().all(|&c| c) {
        return Plan::FullRows;
    }
    let n = touched.len();
    let rmw = (0..n)
        .all(|i| !(touched[i] && lost[i]))
        .then(|| touched.iter().filter(|&&t| t).count() + parity_alive);
    let rcw = (0..n)
        .all(|i| covered[i] || !lost[i])
        .then(|| covered.iter().filter(|&&c| !c).count());
    match (rmw, rcw) {
        (_, Some(_)) if !in_sync => Plan::Rcw,
        (_, None) if !in_sync => Plan::Reconstruct,
        (Some(r), Some(c)) if r < c => Plan::Rmw,
        (_, Some(_)) => Plan::Rcw,
        (Some(_), None) => Plan::Rmw,
        (None, None) => Plan::Reconstruct,
    }
}

/// The recovery for lost data slots (sorted) given which parity chunks survive; `None` when
/// beyond what the parity can rebuild. Returns (loss, needs P, needs Q).
fn recovery(lost_slots: &[usize], p_ok: bool, q_ok: bool) -> Option<(Loss, bool, bool)> {
    match *lost_slots {
        [] => None,
        [x] if p_ok => Some((Loss::Data(x), true, false)),
        [x] if q_ok => Some((Loss::DataP(x), false, true)),
        [a, b] if p_ok && q_ok => Some((Loss::TwoData(a, b), true, true)),
        _ => None,
    }
}

/// Sorted, disjoint byte ranges.
type Ranges = Vec<(u64, u64)>;

fn add_range(r: &mut Ranges, s: u64, e: u64) {
    let (mut s, mut e) = (s, e);
    r.retain(|&(a, b)| {
        if b < s || e < a {
            true
        } else {
            s = s.min(a);
            e = e.max(b);
            false
        }
    });
    let at = r.partition_point(|&(a, _)| a < s);
    r.insert(at, (s, e));
}

fn covers(r: &Ranges, s: u64, e: u64) -> bool {
    r.iter().any(|&(a, b)| a <= s && e <= b)
}

/// One cached stripe: its dirty bytes as segments of the writers' own buffers (no copy; a
/// later write trims the segments it overlaps), sorted and disjoint, in stripe offsets.
struct Entry {
    segs: Segs,
    /// Bytes in `segs`.
    bytes: u64,
    /// LRU tick of the last write.
    used: u64,
    /// Chosen by an evictor (so two do not pick the same stripe).
    busy: bool,
    /// When the stripe first became dirty.
    since: Instant,
}

impl Entry {
    /// Whether the segments cover `[s, e)` without a gap.
    fn covers(&self, s: u64, e: u64) -> bool {
        let mut at = s;
        for (o, d) in &self.segs {
            let end = o + d.len() as u64;
            if *o > at {
                break;
            }
            at = at.max(end);
            if at >= e {
                return true;
            }
        }
        at >= e
    }

    /// Puts `data` at `off`, trimming the older segments it overlaps.
    fn insert(&mut self, off: u64, data: SharedBuf) {
        let end = off + data.len() as u64;
        let mut out: Segs = Vec::with_capacity(self.segs.len() + 2);
        for (o, d) in self.segs.drain(..) {
            let e = o + d.len() as u64;
            if e <= off || end <= o {
                out.push((o, d));
                continue;
            }
            if o < off {
                out.push((o, d.slice(0..(off - o) as usize)));
            }
            if end < e {
                out.push((end, d.slice((end - o) as usize..d.len())));
            }
        }
        let at = out.partition_point(|(o, _)| *o < off);
        out.insert(at, (off, data));
        self.bytes = out.iter().map(|(_, d)| d.len() as u64).sum();
        self.segs = out;
    }

    /// Copies the cached bytes that fall in `[s, s + buf.len())` (stripe offsets) into `buf`.
    fn overlay(&self, s: u64, buf: &mut [u8]) {
        let e = s + buf.len() as u64;
        for (o, d) in &self.segs {
            let (a, z) = ((*o).max(s), (o + d.len() as u64).min(e));
            if a < z {
                buf[(a - s) as usize..(z - s) as usize]
                    .copy_from_slice(&d[(a - o) as usize..(z - o) as usize]);
            }
        }
    }
}

#[derive(Default)]
struct CacheState {
    entries: HashMap<u64, Entry>,
    /// LRU order: `used` tick → stripe, one per entry (eviction takes the oldest).
    lru: BTreeMap<u64, u64>,
    /// Dirty bytes of all entries.
    bytes: u64,
    /// Bytes of the allocations the entries' segments keep alive (what the cache really
    /// costs: a slice pins its writer's whole buffer). The bound applies to this.
    pinned_bytes: u64,
    /// Allocation → (its bytes, segments that view it).
    pins: HashMap<usize, (u64, u32)>,
    tick: u64,
}

impl CacheState {
    /// Removes stripe `s`'s entry, keeping `bytes`, `pinned_bytes` and `lru` in step.
    fn remove(&mut self, s: u64) -> Option<Entry> {
        let e = self.entries.remove(&s)?;
        self.bytes -= e.bytes;
        self.lru.remove(&e.used);
        for (_, d) in &e.segs {
            self.unpin(d);
        }
        Some(e)
    }

    fn pin(&mut self, d: &SharedBuf) {
        let p = self
            .pins
            .entry(d.alloc_id())
            .or_insert((d.alloc_len() as u64, 0));
        if p.1 == 0 {
            self.pinned_bytes += p.0;
        }
        p.1 += 1;
    }

    fn unpin(&mut self, d: &SharedBuf) {
        let id = d.alloc_id();
        let p = self.pins.get_mut(&id).expect("a cached segment is pinned");
        p.1 -= 1;
        if p.1 == 0 {
            self.pinned_bytes -= p.0;
            self.pins.remove(&id);
        }
    }

    /// Whether caching `d` keeps the cache within `bound` pinned bytes.
    fn admits(&self, d: &SharedBuf, bound: u64) -> bool {
        let extra = if self.pins.contains_key(&d.alloc_id()) {
            0
        } else {
            d.alloc_len() as u64
        };
        self.pinned_bytes + extra <= bound
    }

    /// Puts `data` at `off` of stripe `s`'s entry (created if needed), as the most recently
    /// used; returns whether the entry now covers the whole stripe of `width` bytes.
    fn insert(&mut self, s: u64, off: u64, data: SharedBuf, width: u64) -> bool {
        self.tick += 1;
        let tick = self.tick;
        let mut e = match self.remove(s) {
            Some(e) => e,
            None => Entry {
                segs: Segs::new(),
                bytes: 0,
                used: 0,
                busy: false,
                since: Instant::now(),
            },
        };
        e.insert(off, data);
        e.used = tick;
        for (_, d) in &e.segs {
            self.pin(d);
        }
        self.bytes += e.bytes;
        self.lru.insert(tick, s);
        let full = e.covers(0, width);
        self.entries.insert(s, e);
        full
    }

    fn usage(&self, bound: u64) -> CacheUsage {
        CacheUsage {
            dirty_bytes: self.bytes,
            pinned_bytes: self.pinned_bytes,
            bound_bytes: bound,
        }
    }
}

/// A segment that views only a small part of a large buffer is copied out, so a few cached
/// KiB never pin a writer's 32 MiB.
fn compact(d: SharedBuf) -> SharedBuf {
    if d.alloc_len() > 2 * d.len() + crate::buf::BUF_ALIGN {
        Buf::copy_from(&d).freeze()
    } else {
        d
    }
}

struct Cache {
    /// Most bytes the entries may pin (`CacheState::pinned_bytes`).
    bound: u64,
    /// A partial stripe older than this is destaged by the flusher thread (None: it waits
    /// for a flush, for eviction or to become full).
    max_age: Option<Duration>,
    state: Mutex<CacheState>,
}

impl Cache {
    fn over_bound(&self) -> bool {
        self.state.lock().pinned_bytes > self.bound
    }
}

/// What a write-back cache holds and may hold.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheUsage {
    /// Bytes written by clients and not yet on the members.
    pub dirty_bytes: u64,
    /// Memory those bytes keep alive (whole allocations of the writers' buffers).
    pub pinned_bytes: u64,
    /// The most `pinned_bytes` may reach.
    pub bound_bytes: u64,
}

impl CacheUsage {
    pub fn plus(self, o: CacheUsage) -> CacheUsage {
        CacheUsage {
            dirty_bytes: self.dirty_bytes + o.dirty_bytes,
            pinned_bytes: self.pinned_bytes + o.pinned_bytes,
            bound_bytes: self.bound_bytes + o.bound_bytes,
        }
    }
}

/// Stripes known to have parity matching data.
enum SyncMap {
    All,
    Some(Vec<AtomicU64>),
}

/// The parity group's state, shared with the cache flusher thread.
struct ParityCore {
    layout: ParityGroup,
    children: Vec<Box<dyn ArrayNode>>,
    capacity: u64,
    strip: u64,
    /// Data chunks per stripe.
    k: usize,
    /// Parity chunks per stripe (1 or 2).
    np: usize,
    /// Over stripe numbers: exclusive for writes and destages, shared for reads.
    locks: RangeLock,
    sync: SyncMap,
    /// Stripes whose parity is known not to match their data: a write failed beyond the
    /// stripe's tolerance after (or instead of) writing some chunks. Never rebuilt from until
    /// a whole-chunk reconstruct-write or full-stripe write makes them consistent again.
    stale: Mutex<HashSet<u64>>,
    cache: Option<Cache>,
    /// Set when some stripe ever lost a write beyond tolerance (for logs only).
    warned: AtomicBool,
    /// Set when the node is dropped: the flusher thread leaves it alone from then on.
    closed: AtomicBool,
    /// Held by the flusher thread while it destages this group (so a drop can wait for it).
    flushing: Mutex<()>,
    /// Chunk ranges rewritten after a read error (shared with the volume's counters).
    repairs: Arc<AtomicU64>,
    /// Recently rebuilt whole stripes (degraded reads): (stripe, data chunks), newest last.
    /// Filled under the stripe's shared lock, forgotten under its exclusive lock.
    /// Chunks handed straight to the reader that rebuilt the stripe are not kept (`None`).
    recent: Mutex<VecDeque<(u64, Vec<Option<SharedBuf>>)>>,
}

/// Rebuilt stripes kept for the next degraded sequential read.
const RECENT_STRIPES: usize = 4;

/// Copies each piece's bytes out of a stripe's kept data chunks (all present).
fn copy_pieces(rows: &[Option<SharedBuf>], pieces: Vec<(ParityPiece, Buf)>) -> Vec<Buf> {
    pieces
        .into_iter()
        .map(|(p, mut b)| {
            let at = p.in_chunk as usize;
            let src = rows[p.data_index].as_ref().expect("checked present");
            b.copy_from_slice(&src[at..at + p.len as usize]);
            b
        })
        .collect()
}

/// One stripe's new bytes, as (offset within the stripe's logical range, bytes), sorted.
type Segs = Vec<(u64, SharedBuf)>;

/// A child to treat as lost for one rebuild, and whether it failed with a member I/O error
/// (then its rows are repaired afterwards).
type Force = Option<(usize, bool)>;

/// Rows of one child to rewrite after it returned a read error there.
struct Repair {
    stripe: u64,
    r0: u64,
    r1: u64,
    child: usize,
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
        let strip = layout.strip();
        let np = layout.parity();
        let k = layout.data_chunks();
        let sync = match sync {
            SyncState::Clean => SyncMap::All,
            SyncState::Unknown => SyncMap::Some(
                (0..layout.stripes().div_ceil(64))
                    .map(|_| AtomicU64::new(0))
                    .collect(),
            ),
        };
        let cache = match cache {
            CacheMode::WriteThrough => None,
            CacheMode::WriteBack { bytes } => Some(Cache {
                bound: bytes.max(layout.stripe_width()),
                max_age,
                state: Mutex::new(CacheState::default()),
            }),
        };
        ParityCore {
            layout,
            children,
            capacity,
            strip,
            k,
            np,
            locks: RangeLock::default(),
            sync,
            stale: Mutex::new(HashSet::new()),
            cache,
            warned: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            flushing: Mutex::new(()),
            repairs,
            recent: Mutex::new(VecDeque::new()),
        }
    }

    fn width(&self) -> u64 {
        self.layout.stripe_width()
    }

    fn in_sync(&self, stripe: u64) -> bool {
        match &self.sync {
            SyncMap::All => true,
            SyncMap::Some(bits) => {
                bits[(stripe / 64) as usize].load(Ordering::Acquire) & (1 << (stripe % 64)) != 0
            }
        }
    }

    fn mark_in_sync(&self, stripe: u64) {
        if let SyncMap::Some(bits) = &self.sync {
            bits[(stripe / 64) as usize].fetch_or(1 << (stripe % 64), Ordering::AcqRel);
        }
    }

    fn is_stale(&self, stripe: u64) -> bool {
        let st = self.stale.lock();
        !st.is_empty() && st.contains(&stripe)
    }

    fn any_stale(&self, first: u64, last: u64) -> bool {
        let st = self.stale.lock();
        !st.is_empty() && st.iter().any(|s| (first..=last).contains(s))
    }

    /// Stripes `[first, last]` touched by `[offset, offset+len)`.
    fn stripe_span(&self, offset: u64, len: u64) -> (u64, u64) {
        let w = self.width();
        (offset / w, (offset + len.max(1) - 1) / w)
    }

    fn lock_stripes(
        &self,
        offset: u64,
        len: u64,
        exclusive: bool,
    ) -> crate::range_lock::Acquire<'_> {
        let (a, b) = self.stripe_span(offset, len);
        self.locks.lock(a, b - a + 1, exclusive)
    }

    /// Which children cannot serve rows `[r0, r1)` of `stripe`.
    fn lost(&self, stripe: u64, r0: u64, r1: u64) -> Vec<bool> {
        let at = self.layout.chunk_offset(stripe) + r0;
        self.children
            .iter()
            .map(|c| !c.readable(at, r1 - r0))
            .collect()
    }

    fn unavailable(&self, stripe: u64, lost: &[bool], what: &str) -> VolumeError {
        let which: Vec<usize> = (0..lost.len()).filter(|&c| lost[c]).collect();
        VolumeError::Unavailable {
            reason: format!(
                "{what}: stripe {stripe} of a {}-member RAID {} group has lost children {which:?}, more than its {} parity chunk(s) can rebuild",
                self.children.len(),
                if self.np == 1 { 5 } else { 6 },
                self.np
            ),
        }
    }

    // -----------------------------------------------------------------------------------------
    // Reads

    /// Reads rows `[r0, r1)` of the data chunks of `stripe` that `want` names, rebuilding lost
    /// ones from the rest of the stripe. `bufs[i]`, when given, receives chunk `i` (so a
    /// caller's buffer is filled in place); the others are allocated. Every returned buffer
    /// whose `want` is set holds the chunk's bytes.
    async fn read_rows(
        &self,
        stripe: u64,
        r0: u64,
        r1: u64,
        want: &[bool],
        bufs: Vec<Option<Buf>>,
    ) -> VolumeResult<Vec<Buf>> {
        self.read_rows_ex(stripe, r0, r1, want, bufs, None)
            .await
            .map(|(b, _)| b)
    }

    /// [`Self::read_rows`], treating child `force_lost` as lost too (a repair rebuilds a
    /// chunk without trusting it), and also returning the children whose reads returned a
    /// member I/O error (candidates for repair).
    async fn read_rows_ex(
        &self,
        stripe: u64,
        r0: u64,
        r1: u64,
        want: &[bool],
        bufs: Vec<Option<Buf>>,
        force_lost: Option<usize>,
    ) -> VolumeResult<(Vec<Buf>, Vec<usize>)> {
        let roles = self.layout.roles(stripe);
        let base = self.layout.chunk_offset(stripe) + r0;
        let rows = (r1 - r0) as usize;
        let mut lost = self.lost(stripe, r0, r1);
        if let Some(c) = force_lost {
            lost[c] = true;
        }
        let mut bad: Vec<usize> = Vec::new();
        let mut data: Vec<Option<Buf>> = bufs;
        let mut have = vec![false; self.k];
        let mut p: Option<Buf> = None;
        let mut q: Option<Buf> = None;
        let mut errors: Vec<VolumeError> = Vec::new();
        loop {
            let lost_data: Vec<usize> = (0..self.k).filter(|&i| lost[roles.data[i]]).collect();
            let rebuild = lost_data.iter().any(|&i| want[i]);
            let mut plan = None;
            if rebuild && self.is_stale(stripe) {
                return Err(VolumeError::Unavailable {
                    reason: format!(
                        "stripe {stripe}: a chunk is lost and the stripe's parity is stale (an earlier write failed beyond tolerance)"
                    ),
                });
            }
            if rebuild {
                let mut slots: Vec<usize> = lost_data.iter().map(|&i| roles.q_slot[i]).collect();
                slots.sort_unstable();
                let q_ok = roles.q.is_some_and(|c| !lost[c]);
                match recovery(&slots, !lost[roles.p], q_ok) {
                    Some(r) => plan = Some(r),
                    None => {
                        let mut e = self.unavailable(stripe, &lost, "read");
                        if let Some(first) = errors.pop() {
                            e = VolumeError::Unavailable {
                                reason: format!("{e} (last member error: {first})"),
                            };
                        }
                        return Err(e);
                    }
                }
            }
            let (need_p, need_q) = plan.map_or((false, false), |(_, np, nq)| (np, nq));
            // Reads to issue: (child, target) where target is a data index or k (P) / k+1 (Q).
            let mut todo: Vec<(usize, usize, Buf)> = Vec::new();
            for i in 0..self.k {
                if !have[i] && !lost[roles.data[i]] && (want[i] || rebuild) {
                    let b = data[i].take().unwrap_or_else(|| Buf::new(rows));
                    todo.push((roles.data[i], i, b));
                }
            }
            if need_p && p.is_none() {
                todo.push((roles.p, self.k, Buf::new(rows)));
            }
            if need_q && q.is_none() {
                let qc = roles.q.expect("need_q only with Q");
                todo.push((qc, self.k + 1, Buf::new(rows)));
            }
            let meta: Vec<(usize, usize)> = todo.iter().map(|t| (t.0, t.1)).collect();
            let results = join_all(
                todo.into_iter()
                    .map(|(c, _, b)| self.children[c].read(base, b)),
            )
            .await;
            let mut failed = false;
            for ((c, target), r) in meta.into_iter().zip(results) {
                match r {
                    Ok(b) if target < self.k => {
                        data[target] = Some(b);
                        have[target] = true;
                    }
                    Ok(b) if target == self.k => p = Some(b),
                    Ok(b) => q = Some(b),
                    Err(e) => {
                        lost[c] = true;
                        failed = true;
                        if e.is_member_io() {
                            bad.push(c);
                        }
                        errors.push(e);
                    }
                }
            }
            if failed {
                continue;
            }
            let mut out: Vec<Buf> = data
                .into_iter()
                .map(|b| b.unwrap_or_else(|| Buf::new(rows)))
                .collect();
            if let Some((loss, _, _)) = plan {
                let mut pb = p.unwrap_or_else(|| Buf::new(rows));
                let mut order = vec![0usize; self.k];
                for i in 0..self.k {
                    order[roles.q_slot[i]] = i;
                }
                let mut refs: Vec<Option<&mut [u8]>> =
                    out.iter_mut().map(|b| Some(&mut b[..])).collect();
                let mut slots: Vec<&mut [u8]> = order
                    .iter()
                    .map(|&i| refs[i].take().expect("each index once"))
                    .collect();
                match loss {
                    Loss::Data(x) => parity::recover_data_p(&mut slots, &pb, x),
                    Loss::DataP(x) => {
                        let qb = q.as_ref().expect("read Q");
                        parity::recover_data_and_p(&mut slots, &mut pb, qb, x)
                    }
                    Loss::TwoData(a, b) => {
                        let qb = q.as_ref().expect("read Q");
                        parity::recover_two_data(&mut slots, &pb, qb, a, b)
                    }
                    _ => unreachable!("recovery() returns data losses only"),
                }
            }
            return Ok((out, bad));
        }
    }

    /// Reads one request's pieces from members: straight from their chunks (runs on one child
    /// merged) when every chunk is readable; pieces whose chunk is lost or whose read failed
    /// are rebuilt stripe by stripe. Returns the chunk ranges to repair (read errors).
    async fn read_members(&self, offset: u64, buf: Buf) -> VolumeResult<(Buf, Vec<Repair>)> {
        let len = buf.len() as u64;
        let pieces = self.layout.split(offset, len);
        let lens: Vec<usize> = pieces.iter().map(|p| p.len as usize).collect();
        let direct = pieces.iter().all(|p| {
            self.children[p.child].readable(self.layout.chunk_offset(p.stripe) + p.in_chunk, p.len)
        }) && !self.rebuild_ahead(offset, len, &pieces);
        let mut slots: Vec<Option<Buf>> = buf.split_lengths(&lens).into_iter().map(Some).collect();
        // Pieces to rebuild: (piece index, child whose read failed and whether with an I/O
        // error of a member — then its rows are repaired afterwards).
        let mut todo: Vec<(usize, Force)> = Vec::new();
        if direct {
            let cp: Vec<ChildPiece> = pieces
                .iter()
                .map(|p| ChildPiece {
                    logical: p.logical,
                    child: p.child,
                    offset: self.layout.chunk_offset(p.stripe) + p.in_chunk,
                    len: p.len,
                })
                .collect();
            let runs = child_runs(self.children.len(), &cp);
            let futs = runs.iter().map(|(child, at, idx)| {
                let mut mine: Vec<Buf> = idx
                    .iter()
                    .map(|&i| slots[i].take().expect("each piece in one run"))
                    .collect();
                let node = &self.children[*child];
                async move {
                    if mine.len() == 1 {
                        let b = mine.pop().expect("one");
                        node.read(*at, b).await.map(|b| vec![b])
                    } else {
                        node.read_vectored(*at, mine).await
                    }
                }
            });
            let results = join_all(futs).await;
            for ((child, _, idx), r) in runs.iter().zip(results) {
                match r {
                    Ok(bufs) => {
                        for (&i, b) in idx.iter().zip(bufs) {
                            slots[i] = Some(b);
                        }
                    }
                    // A member error, or a child (a mirror, say) with no readable copy.
                    Err(e) => {
                        tracing::warn!("parity read {offset}+{len}: {e}; rebuilding from parity");
                        let io = e.is_member_io();
                        todo.extend(idx.iter().map(|&i| (i, Some((*child, io)))));
                    }
                }
            }
            if todo.is_empty() {
                let got = slots.into_iter().map(|b| b.expect("read")).collect();
                return Ok((Buf::join(got), Vec::new()));
            }
            todo.sort_unstable_by_key(|t| t.0);
        } else {
            todo = (0..pieces.len()).map(|i| (i, None)).collect();
        }
        // Rebuild per stripe (and per failed child): the stripe's rows are read once.
        let mut groups: Vec<(u64, Force, Vec<usize>)> = Vec::new();
        for (i, force) in todo {
            let s = pieces[i].stripe;
            match groups.last_mut() {
                Some(g) if g.0 == s && g.1 == force => g.2.push(i),
                _ => groups.push((s, force, vec![i])),
            }
        }
        let futs: Vec<_> = groups
            .iter()
            .map(|(s, force, idx)| {
                let mine: Vec<(ParityPiece, Buf)> = idx
                    .iter()
                    .map(|&i| {
                        let b = slots[i]
                            .take()
                            .unwrap_or_else(|| Buf::new(pieces[i].len as usize));
                        (pieces[i], b)
                    })
                    .collect();
                self.read_stripe_pieces_recent(*s, mine, *force)
            })
            .collect();
        let mut repairs = Vec::new();
        let mut errors = Vec::new();
        for ((_, _, idx), r) in groups.iter().zip(join_all(futs).await) {
            match r {
                Ok((bufs, rep)) => {
                    for (&i, b) in idx.iter().zip(bufs) {
                        slots[i] = Some(b);
                    }
                    repairs.extend(rep);
                }
                Err(e) => errors.push(e),
            }
        }
        if let Some(e) = crate::node::first_error(errors) {
            return Err(e);
        }
        let got = slots.into_iter().map(|b| b.expect("filled")).collect();
        Ok((Buf::join(got), repairs))
    }

    /// Whether a read whose chunks are all readable should still rebuild some stripe whole:
    /// it reads at least one whole chunk of a stripe (a sequential read, not a small random
    /// one) that has a lost data chunk the read does not cover, so the next request will
    /// need that chunk rebuilt — from rows this read would otherwise fetch a second time.
    fn rebuild_ahead(&self, offset: u64, len: u64, pieces: &[ParityPiece]) -> bool {
        if len < self.strip {
            return false;
        }
        let (a, b) = self.stripe_span(offset, len);
        let at = self.layout.chunk_offset(a);
        let span = (b - a + 1) * self.strip;
        if self.children.iter().all(|c| c.readable(at, span)) {
            return false; // Healthy here: the common case costs one check per child.
        }
        let mut i = 0;
        while i < pieces.len() {
            let s = pieces[i].stripe;
            let mut j = i;
            let mut whole = 0;
            while j < pieces.len() && pieces[j].stripe == s {
                whole += usize::from(pieces[j].len == self.strip);
                j += 1;
            }
            if whole > 0 && whole < self.k {
                let roles = self.layout.roles(s);
                let lost = self.lost(s, 0, self.strip);
                let data_lost =
                    (0..lost.len()).any(|c| lost[c] && roles.data_index_of(c).is_some());
                if data_lost && lost.iter().filter(|&&l| l).count() <= self.np {
                    return true;
                }
            }
            i = j;
        }
        false
    }

    /// [`Self::read_stripe_pieces`] for a stripe with a lost data chunk, through the small
    /// cache of recently rebuilt stripes: a request covering only part of such a stripe
    /// rebuilds all of it once, so the next sequential request finds its part rebuilt
    /// instead of reading the whole stripe's rows again.
    async fn read_stripe_pieces_recent(
        &self,
        stripe: u64,
        pieces: Vec<(ParityPiece, Buf)>,
        force: Force,
    ) -> VolumeResult<(Vec<Buf>, Vec<Repair>)> {
        if force.is_none() {
            if let Some(rows) = self.recent_get(stripe) {
                if pieces.iter().all(|(p, _)| rows[p.data_index].is_some()) {
                    return Ok((copy_pieces(&rows, pieces), Vec::new()));
                }
            }
            let whole = pieces.len() == self.k
                && pieces
                    .iter()
                    .all(|(p, _)| p.in_chunk == 0 && p.len == self.strip);
            let roles = self.layout.roles(stripe);
            let lost = self.lost(stripe, 0, self.strip);
            let data_lost = (0..lost.len()).any(|c| lost[c] && roles.data_index_of(c).is_some());
            let rebuildable = lost.iter().filter(|&&l| l).count() <= self.np;
            if !whole && data_lost && rebuildable && !self.is_stale(stripe) {
                // Whole chunks the request wants are read (or rebuilt) straight into its
                // buffers; every other chunk is kept for the next request.
                let want = vec![true; self.k];
                let mut bufs: Vec<Option<Buf>> = (0..self.k).map(|_| None).collect();
                let mut outs: Vec<(ParityPiece, Option<Buf>)> = Vec::with_capacity(pieces.len());
                for (p, b) in pieces {
                    if p.in_chunk == 0 && p.len == self.strip {
                        bufs[p.data_index] = Some(b);
                        outs.push((p, None));
                    } else {
                        outs.push((p, Some(b)));
                    }
                }
                let rows = self.read_rows(stripe, 0, self.strip, &want, bufs).await?;
                let mut keep: Vec<Option<Buf>> = rows.into_iter().map(Some).collect();
                let mut handed = vec![false; self.k];
                for (p, b) in outs.iter_mut() {
                    if b.is_none() {
                        handed[p.data_index] = true;
                    }
                }
                let mut out = Vec::with_capacity(outs.len());
                for (p, b) in outs {
                    match b {
                        None => out.push(keep[p.data_index].take().expect("handed once")),
                        Some(mut b) => {
                            let at = p.in_chunk as usize;
                            let src = keep[p.data_index].as_ref().expect("kept");
                            b.copy_from_slice(&src[at..at + p.len as usize]);
                            out.push(b);
                        }
                    }
                }
                let kept: Vec<Option<SharedBuf>> = keep
                    .into_iter()
                    .zip(handed)
                    .map(|(b, h)| if h { None } else { b.map(Buf::freeze) })
                    .collect();
                self.recent_put(stripe, kept);
                return Ok((out, Vec::new()));
            }
        }
        self.read_stripe_pieces(stripe, pieces, force).await
    }

    fn recent_get(&self, stripe: u64) -> Option<Vec<Option<SharedBuf>>> {
        let r = self.recent.lock();
        r.iter()
            .find(|(s, _)| *s == stripe)
            .map(|(_, rows)| rows.clone())
    }

    fn recent_put(&self, stripe: u64, rows: Vec<Option<SharedBuf>>) {
        let mut r = self.recent.lock();
        r.retain(|(s, _)| *s != stripe);
        if r.len() >= RECENT_STRIPES {
            r.pop_front();
        }
        r.push_back((stripe, rows));
    }

    /// Forgets a rebuilt stripe (its data is about to change). Callers hold the stripe's
    /// exclusive lock, so no read can put it back before the change is on the members.
    fn recent_forget(&self, stripe: u64) {
        let mut r = self.recent.lock();
        if !r.is_empty() {
            r.retain(|(s, _)| *s != stripe);
        }
    }

    /// Reads the pieces of one stripe (any lost chunks rebuilt), filling their buffers.
    async fn read_stripe_pieces(
        &self,
        stripe: u64,
        pieces: Vec<(ParityPiece, Buf)>,
        force: Force,
    ) -> VolumeResult<(Vec<Buf>, Vec<Repair>)> {
        let r0 = pieces.iter().map(|(p, _)| p.in_chunk).min().expect("piece");
        let r1 = pieces
            .iter()
            .map(|(p, _)| p.in_chunk + p.len)
            .max()
            .expect("piece");
        let mut want = vec![false; self.k];
        let mut bufs: Vec<Option<Buf>> = (0..self.k).map(|_| None).collect();
        let mut outs: Vec<(ParityPiece, Option<Buf>)> = Vec::with_capacity(pieces.len());
        for (p, b) in pieces {
            want[p.data_index] = true;
            if p.in_chunk == r0 && p.in_chunk + p.len == r1 {
                // Lines up with the row range: read (or rebuild) straight into it.
                bufs[p.data_index] = Some(b);
                outs.push((p, None));
            } else {
                outs.push((p, Some(b)));
            }
        }
        let (mut rows, mut bad) = self
            .read_rows_ex(stripe, r0, r1, &want, bufs, force.map(|f| f.0))
            .await?;
        if let Some((c, true)) = force {
            bad.push(c);
        }
        bad.sort_unstable();
        bad.dedup();
        let repairs = bad
            .into_iter()
            .map(|child| Repair {
                stripe,
                r0,
                r1,
                child,
            })
            .collect();
        let mut result = Vec::with_capacity(outs.len());
        for (p, b) in outs {
            match b {
                None => result.push(std::mem::replace(&mut rows[p.data_index], Buf::new(0))),
                Some(mut b) => {
                    let at = (p.in_chunk - r0) as usize;
                    b.copy_from_slice(&rows[p.data_index][at..at + p.len as usize]);
                    result.push(b);
                }
            }
        }
        Ok((result, repairs))
    }

    /// Rewrites rows `[r0, r1)` of `child` in `stripe` from the rest of the stripe, after the
    /// child returned a read error there (md's and SPDK's read repair: a rewrite cures a
    /// transient media error; if the rewrite fails, the leaf marks the member failed). Runs
    /// under the stripe's exclusive lock and rebuilds afresh under it, so no write is undone.
    async fn repair(&self, r: Repair) {
        let _g = self.locks.lock(r.stripe, 1, true).await;
        let roles = self.layout.roles(r.stripe);
        let at = self.layout.chunk_offset(r.stripe) + r.r0;
        if !self.children[r.child].readable(at, r.r1 - r.r0) {
            return; // Failed meanwhile: nothing to repair.
        }
        if !self.in_sync(r.stripe) || self.is_stale(r.stripe) {
            // Parity not known to match: a rebuilt chunk could be wrong, and writing it back
            // would make that permanent. Leave the chunk as it is.
            return;
        }
        let want = vec![true; self.k];
        let none = (0..self.k).map(|_| None).collect();
        let rows = match self
            .read_rows_ex(r.stripe, r.r0, r.r1, &want, none, Some(r.child))
            .await
        {
            Ok((rows, _)) => rows,
            Err(e) => {
                tracing::warn!(
                    "parity repair of stripe {} child {}: cannot rebuild: {e}",
                    r.stripe,
                    r.child
                );
                return;
            }
        };
        let n = (r.r1 - r.r0) as usize;
        let fresh: SharedBuf = match roles.data_index_of(r.child) {
            Some(i) => {
                let mut rows = rows;
                rows.swap_remove(i).freeze()
            }
            None => {
                let mut order = vec![0usize; self.k];
                for i in 0..self.k {
                    order[roles.q_slot[i]] = i;
                }
                let srcs: Vec<&[u8]> = order.iter().map(|&i| &rows[i][..]).collect();
                let (mut p, mut q) = (Buf::new(n), Buf::new(n));
                if self.np == 2 {
                    parity::pq_gen(&srcs, &mut p, &mut q);
                } else {
                    parity::xor_gen(&srcs, &mut p);
                }
                if Some(r.child) == roles.q {
                    q.freeze()
                } else {
                    p.freeze()
                }
            }
        };
        self.recent_forget(r.stripe);
        match self.children[r.child].write(at, fresh, false).await {
            Ok(()) => {
                self.repairs.fetch_add(1, Ordering::Relaxed);
                tracing::info!(
                    "parity: repaired rows {}..{} of stripe {} on child {}",
                    r.r0,
                    r.r1,
                    r.stripe,
                    r.child
                );
            }
            Err(e) => tracing::warn!("parity repair of child {} failed: {e}", r.child),
        }
    }

    /// Overlays cached dirty bytes on `buf` (which holds `[offset, offset+len)`).
    fn overlay_cache(&self, offset: u64, buf: &mut [u8]) {
        let Some(cache) = &self.cache else { return };
        let st = cache.state.lock();
        if st.entries.is_empty() {
            return;
        }
        let w = self.width();
        let end = offset + buf.len() as u64;
        let (a, b) = self.stripe_span(offset, buf.len() as u64);
        for s in a..=b {
            let Some(e) = st.entries.get(&s) else {
                continue;
            };
            let sbase = s * w;
            let (gs, ge) = (sbase.max(offset), (sbase + w).min(end));
            e.overlay(
                gs - sbase,
                &mut buf[(gs - offset) as usize..(ge - offset) as usize],
            );
        }
    }

    /// Whether the cache alone holds every byte of the range.
    fn cache_covers(&self, offset: u64, len: u64) -> bool {
        let Some(cache) = &self.cache else {
            return false;
        };
        let w = self.width();
        let (a, b) = self.stripe_span(offset, len);
        let st = cache.state.lock();
        (a..=b).all(|s| {
            st.entries.get(&s).is_some_and(|e| {
                let s0 = (s * w).max(offset) - s * w;
                let s1 = ((s + 1) * w).min(offset + len) - s * w;
                e.covers(s0, s1)
            })
        })
    }

    // -----------------------------------------------------------------------------------------
    // Writes

    /// Writes new bytes of one stripe to the members (with parity), the caller holding the
    /// stripe's lock.
    async fn write_stripe(&self, stripe: u64, segs: Segs, fua: bool) -> VolumeResult<()> {
        self.recent_forget(stripe);
        let strip = self.strip;
        // Per data chunk: (in-chunk offset, bytes).
        let mut w: Vec<Vec<(u64, SharedBuf)>> = (0..self.k).map(|_| Vec::new()).collect();
        for (off, data) in segs {
            let mut at = 0u64;
            let len = data.len() as u64;
            while at < len {
                let o = off + at;
                let i = (o / strip) as usize;
                let ic = o % strip;
                let n = (strip - ic).min(len - at);
                w[i].push((ic, data.slice(at as usize..(at + n) as usize)));
                at += n;
            }
        }
        let mut r0 = u64::MAX;
        let mut r1 = 0;
        for (s, d) in w.iter().flatten() {
            r0 = r0.min(*s);
            r1 = r1.max(*s + d.len() as u64);
        }
        if r0 >= r1 {
            return Ok(());
        }
        let roles = self.layout.roles(stripe);
        let mut plan_lost = self.lost(stripe, r0, r1);
        let mut tries = 0;
        loop {
            tries += 1;
            match self
                .write_rows(stripe, &roles, r0, r1, &w, &plan_lost, fua, tries > 1)
                .await
            {
                Ok(()) => return Ok(()),
                // A read for the plan failed: treat that child as lost and plan again.
                Err(Retry::Read(c, e)) if tries <= self.children.len() => {
                    tracing::warn!("stripe {stripe}: read for a parity update failed: {e}");
                    plan_lost[c] = true;
                }
                Err(Retry::Read(_, e)) | Err(Retry::Fatal(e)) => {
                    self.salvage(stripe, &w, fua).await;
                    return Err(e);
                }
            }
        }
    }

    /// After a write failed beyond the stripe's tolerance: put the new bytes on every data
    /// chunk that still takes writes (so a direct read there is never stale) and mark the
    /// stripe's parity stale (so nothing is rebuilt from it).
    async fn salvage(&self, stripe: u64, w: &[Vec<(u64, SharedBuf)>], fua: bool) {
        self.stale.lock().insert(stripe);
        let roles = self.layout.roles(stripe);
        let base = self.layout.chunk_offset(stripe);
        let futs = (0..self.k).flat_map(|i| {
            let c = roles.data[i];
            w[i].iter()
                .filter(move |(ic, d)| self.children[c].readable(base + ic, d.len() as u64))
                .map(move |(ic, d)| self.children[c].write(base + ic, d.clone(), fua))
        });
        for r in join_all(futs).await {
            if let Err(e) = r {
                tracing::warn!("stripe {stripe}: salvaging a failed write: {e}");
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn write_rows(
        &self,
        stripe: u64,
        roles: &StripeRoles,
        r0: u64,
        r1: u64,
        w: &[Vec<(u64, SharedBuf)>],
        lost: &[bool],
        fua: bool,
        force_reconstruct: bool,
    ) -> Result<(), Retry> {
        let k = self.k;
        let rows = (r1 - r0) as usize;
        let base = self.layout.chunk_offset(stripe);
        let touched: Vec<bool> = w.iter().map(|v| !v.is_empty()).collect();
        let covered: Vec<bool> = w
            .iter()
            .map(|v| {
                let mut r = Ranges::new();
                for (s, d) in v {
                    add_range(&mut r, *s, *s + d.len() as u64);
                }
                covers(&r, r0, r1)
            })
            .collect();
        let hull: Vec<(u64, u64)> = w
            .iter()
            .map(|v| {
                let s = v.iter().map(|x| x.0).min().unwrap_or(0);
                let e = v.iter().map(|x| x.0 + x.1.len() as u64).max().unwrap_or(0);
                (s, e)
            })
            .collect();
        let data_lost: Vec<bool> = (0..k).map(|i| lost[roles.data[i]]).collect();
        let p_ok = !lost[roles.p];
        let q_ok = roles.q.map(|c| !lost[c]);
        let parity_alive = usize::from(p_ok) + usize::from(q_ok == Some(true));
        let stale = self.is_stale(stripe);
        let mut plan = choose(
            &touched,
            &covered,
            &data_lost,
            parity_alive,
            self.in_sync(stripe) && !stale,
        );
        // Children that merely returned a read error still take writes (skipping them would
        // leave stale data under fresh parity): writes go to every child not actually lost.
        let actual = self.lost(stripe, r0, r1);
        let p_live = !actual[roles.p];
        let q_live = roles.q.is_some_and(|c| !actual[c]);
        if force_reconstruct && matches!(plan, Plan::Rmw | Plan::Rcw) {
            plan = Plan::Reconstruct;
        }
        if plan == Plan::DataOnly && (p_live || q_live) {
            // Parity unreadable but writable: generate it afresh.
            plan = Plan::Reconstruct;
        }
        let mut writes: Vec<(usize, u64, SharedBuf)> = Vec::new();
        match plan {
            Plan::DataOnly => {
                if (0..k).any(|i| touched[i] && actual[roles.data[i]]) {
                    return Err(Retry::Fatal(self.unavailable(stripe, &actual, "write")));
                }
                for i in (0..k).filter(|&i| touched[i]) {
                    let (h0, h1) = hull[i];
                    let c = roles.data[i];
                    let d = if w[i].len() == 1 {
                        w[i][0].1.clone()
                    } else {
                        // Gaps: read the old bytes of the span.
                        let old = self.children[c]
                            .read(base + h0, Buf::new((h1 - h0) as usize))
                            .await
                            .map_err(Retry::Fatal)?;
                        assemble(h0, h1, &w[i], Some(&old))
                    };
                    writes.push((c, base + h0, d));
                }
            }
            Plan::Rmw => {
                // Old bytes of each written span, old P (and Q) over the rows.
                let mut reads: Vec<(usize, u64, usize)> = Vec::new();
                for i in (0..k).filter(|&i| touched[i]) {
                    let (h0, h1) = hull[i];
                    reads.push((roles.data[i], base + h0, (h1 - h0) as usize));
                }
                if p_ok {
                    reads.push((roles.p, base + r0, rows));
                }
                if q_ok == Some(true) {
                    reads.push((roles.q.expect("q"), base + r0, rows));
                }
                let mut got = self.read_all(&reads).await?;
                let mut q = if q_ok == Some(true) { got.pop() } else { None };
                let mut p = if p_ok { got.pop() } else { None };
                if self.np == 2 {
                    let mut ps = p.take().unwrap_or_else(|| Buf::zeroed(rows));
                    let mut qs = q.take().unwrap_or_else(|| Buf::zeroed(rows));
                    for (n, i) in (0..k).filter(|&i| touched[i]).enumerate() {
                        let (h0, h1) = hull[i];
                        let new = assemble(h0, h1, &w[i], Some(&got[n]));
                        let (a, b) = ((h0 - r0) as usize, (h1 - r0) as usize);
                        parity::pq_update(
                            &mut ps[a..b],
                            &mut qs[a..b],
                            roles.q_slot[i],
                            &got[n],
                            &new,
                        );
                        writes.push((roles.data[i], base + h0, new));
                    }
                    if p_ok {
                        writes.push((roles.p, base + r0, ps.freeze()));
                    }
                    if q_ok == Some(true) {
                        writes.push((roles.q.expect("q"), base + r0, qs.freeze()));
                    }
                } else {
                    let mut ps = p.take().expect("RMW on RAID 5 needs P");
                    for (n, i) in (0..k).filter(|&i| touched[i]).enumerate() {
                        let (h0, h1) = hull[i];
                        let new = assemble(h0, h1, &w[i], Some(&got[n]));
                        let (a, b) = ((h0 - r0) as usize, (h1 - r0) as usize);
                        parity::xor_update(&mut ps[a..b], &got[n], &new);
                        writes.push((roles.data[i], base + h0, new));
                    }
                    writes.push((roles.p, base + r0, ps.freeze()));
                }
            }
            Plan::FullRows | Plan::Rcw | Plan::Reconstruct => {
                let olds: Vec<Option<Buf>> = match plan {
                    Plan::FullRows => (0..k).map(|_| None).collect(),
                    Plan::Rcw => {
                        let need: Vec<usize> = (0..k).filter(|&i| !covered[i]).collect();
                        let reads: Vec<(usize, u64, usize)> = need
                            .iter()
                            .map(|&i| (roles.data[i], base + r0, rows))
                            .collect();
                        let mut got = self.read_all(&reads).await?.into_iter();
                        (0..k)
                            .map(|i| (!covered[i]).then(|| got.next().expect("read")))
                            .collect()
                    }
                    _ => {
                        // Rebuild the old rows of every chunk not wholly rewritten.
                        let want: Vec<bool> = covered.iter().map(|c| !c).collect();
                        let got = self
                            .read_rows(stripe, r0, r1, &want, (0..k).map(|_| None).collect())
                            .await
                            .map_err(Retry::Fatal)?;
                        got.into_iter()
                            .zip(&want)
                            .map(|(b, &wt)| wt.then_some(b))
                            .collect()
                    }
                };
                let news: Vec<SharedBuf> = (0..k)
                    .zip(olds)
                    .map(|(i, old)| match (touched[i], old) {
                        (false, Some(o)) => o.freeze(),
                        (_, o) => assemble(r0, r1, &w[i], o.as_deref()),
                    })
                    .collect();
                let mut order = vec![0usize; k];
                for i in 0..k {
                    order[roles.q_slot[i]] = i;
                }
                let srcs: Vec<&[u8]> = order.iter().map(|&i| &news[i][..]).collect();
                let mut p = Buf::new(rows);
                if self.np == 2 {
                    let mut q = Buf::new(rows);
                    parity::pq_gen(&srcs, &mut p, &mut q);
                    if q_live {
                        writes.push((roles.q.expect("q"), base + r0, q.freeze()));
                    }
                } else {
                    parity::xor_gen(&srcs, &mut p);
                }
                if p_live {
                    writes.push((roles.p, base + r0, p.freeze()));
                }
                for i in (0..k).filter(|&i| touched[i] && !actual[roles.data[i]]) {
                    let (h0, h1) = hull[i];
                    let d = news[i].slice((h0 - r0) as usize..(h1 - r0) as usize);
                    writes.push((roles.data[i], base + h0, d));
                }
            }
        }
        let results = join_all(
            writes
                .iter()
                .map(|(c, at, d)| self.children[*c].write(*at, d.clone(), fua)),
        )
        .await;
        let mut now_lost = actual;
        let mut errors = Vec::new();
        for ((c, _, _), r) in writes.iter().zip(results) {
            if let Err(e) = r {
                now_lost[*c] = true;
                errors.push(e);
            }
        }
        let lost_count = now_lost.iter().filter(|&&l| l).count();
        if lost_count > self.np {
            if !self.warned.swap(true, Ordering::Relaxed) {
                tracing::error!("stripe {stripe}: a write lost more chunks than parity covers");
            }
            return Err(Retry::Fatal(
                crate::node::first_error(errors)
                    .unwrap_or_else(|| self.unavailable(stripe, &now_lost, "write")),
            ));
        }
        let whole = r0 == 0 && r1 == self.strip;
        let regenerated = matches!(plan, Plan::FullRows | Plan::Rcw | Plan::Reconstruct);
        if whole && regenerated && errors.is_empty() {
            // Parity was generated from the whole stripe's data: it is consistent again.
            if stale {
                self.stale.lock().remove(&stripe);
            }
            if lost_count == 0 {
                self.mark_in_sync(stripe);
            }
        }
        Ok(())
    }

    /// Reads `(child, offset, len)` concurrently; the first failure names the child.
    async fn read_all(&self, reads: &[(usize, u64, usize)]) -> Result<Vec<Buf>, Retry> {
        let results = join_all(
            reads
                .iter()
                .map(|&(c, at, n)| self.children[c].read(at, Buf::new(n))),
        )
        .await;
        let mut out = Vec::with_capacity(reads.len());
        for (&(c, _, _), r) in reads.iter().zip(results) {
            match r {
                Ok(b) => out.push(b),
                Err(e) => return Err(Retry::Read(c, e)),
            }
        }
        Ok(out)
    }

    /// Splits `[offset, offset+len)` of `data` into per-stripe segments.
    fn per_stripe(&self, offset: u64, data: &SharedBuf) -> Vec<(u64, Segs)> {
        let w = self.width();
        let len = data.len() as u64;
        let mut out = Vec::new();
        let mut at = 0;
        while at < len {
            let o = offset + at;
            let s = o / w;
            let n = (w - o % w).min(len - at);
            out.push((s, vec![(o % w, data.slice(at as usize..(at + n) as usize))]));
            at += n;
        }
        out
    }

    async fn write_inner(&self, offset: u64, data: SharedBuf, fua: bool) -> VolumeResult<()> {
        let len = data.len() as u64;
        let w = self.width();
        if self.cache.as_ref().is_some_and(Cache::over_bound) {
            // Make room first, before this write holds stripe locks an eviction may need.
            if let Err(e) = self.evict().await {
                tracing::warn!("stripe cache eviction: {e}");
            }
        }
        let mut over_bound = false;
        {
            let _g = self.lock_stripes(offset, len, true).await;
            let mut futs = Vec::new();
            for (s, segs) in self.per_stripe(offset, &data) {
                let Some(cache) = &self.cache else {
                    futs.push(self.write_over_cache(s, segs, fua));
                    continue;
                };
                if segs[0].1.len() as u64 == w {
                    // A whole stripe bypasses the cache and supersedes its entry, which stays
                    // listed until this write is on the members.
                    futs.push(self.write_over_cache(s, segs, fua));
                    continue;
                }
                let (o, d) = segs.into_iter().next().expect("one segment");
                let d = compact(d);
                let mut st = cache.state.lock();
                if !st.admits(&d, cache.bound) {
                    // No room (destaging fails, or this stripe alone exceeds the bound): write
                    // it through rather than grow the cache past its bound.
                    let mut merged = Entry {
                        segs: st
                            .entries
                            .get(&s)
                            .map(|e| e.segs.clone())
                            .unwrap_or_default(),
                        bytes: 0,
                        used: 0,
                        busy: false,
                        since: Instant::now(),
                    };
                    merged.insert(o, d);
                    drop(st);
                    futs.push(self.write_over_cache(s, merged.segs, fua));
                    continue;
                }
                let full = st.insert(s, o, d, w);
                over_bound |= st.pinned_bytes > cache.bound;
                if full || fua {
                    let segs = st.entries[&s].segs.clone();
                    drop(st);
                    futs.push(self.write_over_cache(s, segs, fua));
                }
            }
            crate::node::all_ok(join_all(futs).await)?;
        }
        if over_bound {
            // This write is in the cache (or on the members) either way: a stripe that cannot
            // be destaged stays cached and dirty (reads see it) and the next flush reports it.
            if let Err(e) = self.evict().await {
                tracing::warn!("stripe cache eviction: {e}");
            }
        }
        Ok(())
    }

    /// Destages least recently used stripes until the cache is within its bound.
    async fn evict(&self) -> VolumeResult<()> {
        let Some(cache) = &self.cache else {
            return Ok(());
        };
        loop {
            let victim = {
                let mut st = cache.state.lock();
                if st.pinned_bytes <= cache.bound {
                    return Ok(());
                }
                let v = st
                    .lru
                    .values()
                    .copied()
                    .find(|s| st.entries.get(s).is_some_and(|e| !e.busy));
                match v {
                    Some(s) => {
                        st.entries.get_mut(&s).expect("listed").busy = true;
                        s
                    }
                    // Others are destaging everything there is.
                    None => return Ok(()),
                }
            };
            self.destage(victim, false).await?;
        }
    }

    /// Writes stripe `s`'s dirty bytes (if still cached) to the members.
    async fn destage(&self, s: u64, fua: bool) -> VolumeResult<()> {
        let Some(cache) = &self.cache else {
            return Ok(());
        };
        let _g = self.locks.lock(s, 1, true).await;
        // Cloned (cheap: shared buffers).
        let segs = match cache.state.lock().entries.get(&s) {
            None => return Ok(()),
            Some(e) => e.segs.clone(),
        };
        self.write_over_cache(s, segs, fua).await
    }

    /// Writes `segs` of stripe `s` to the members, the caller holding the stripe's exclusive
    /// lock, then forgets the stripe's cache entry, whose bytes `segs` include or supersede.
    /// The entry stays listed until the members have the bytes, so a concurrent FLUSH waits
    /// for them on the stripe lock instead of missing them; if the write fails it stays
    /// (reads still see it, the next FLUSH retries and reports the error), so bytes already
    /// acknowledged never vanish silently.
    async fn write_over_cache(&self, s: u64, segs: Segs, fua: bool) -> VolumeResult<()> {
        let r = self.write_stripe(s, segs, fua).await;
        if let Some(cache) = &self.cache {
            let mut st = cache.state.lock();
            if r.is_ok() {
                st.remove(s);
            } else if let Some(e) = st.entries.get_mut(&s) {
                e.busy = false;
                // The flusher retries after another `max_age`, not every tick.
                e.since = Instant::now();
            }
        }
        r
    }

    /// Destages the partial stripes that have waited longer than the cache's `max_age`.
    async fn destage_aged(&self) {
        let Some(cache) = &self.cache else { return };
        let Some(max_age) = cache.max_age else { return };
        let mut old: Vec<u64> = {
            let st = cache.state.lock();
            st.entries
                .iter()
                .filter(|(_, e)| !e.busy && e.since.elapsed() >= max_age)
                .map(|(&s, _)| s)
                .collect()
        };
        old.sort_unstable();
        for s in old {
            if let Err(e) = self.destage(s, false).await {
                tracing::warn!("stripe cache: destaging aged stripe {s}: {e}");
            }
        }
    }

    /// Destages every cached stripe.
    async fn drain(&self) -> VolumeResult<()> {
        let Some(cache) = &self.cache else {
            return Ok(());
        };
        let mut keys: Vec<u64> = cache.state.lock().entries.keys().copied().collect();
        keys.sort_unstable();
        let results = join_all(keys.into_iter().map(|s| self.destage(s, false))).await;
        crate::node::all_ok(results)
    }

    /// Recomputes parity of every stripe not known to be in sync.
    pub async fn resync(&self) -> VolumeResult<()> {
        for s in 0..self.layout.stripes() {
            if self.in_sync(s) {
                continue;
            }
            let _g = self.locks.lock(s, 1, true).await;
            let want = vec![true; self.k];
            let rows = self
                .read_rows(s, 0, self.strip, &want, (0..self.k).map(|_| None).collect())
                .await?;
            // Rewriting the stripe's data through the full-row plan regenerates parity.
            let w = self.width();
            let mut all = Buf::new(w as usize);
            for (i, r) in rows.iter().enumerate() {
                all[i * self.strip as usize..(i + 1) * self.strip as usize].copy_from_slice(r);
            }
            let mut segs = vec![(0, all.freeze())];
            if let Some(cache) = &self.cache {
                if let Some(e) = cache.state.lock().entries.get(&s) {
                    let mut b = Buf::new(w as usize);
                    b.copy_from_slice(&segs[0].1);
                    e.overlay(0, &mut b);
                    segs = vec![(0, b.freeze())];
                }
            }
            self.write_stripe(s, segs, false).await?;
            self.mark_in_sync(s);
        }
        Ok(())
    }
}

/// New bytes of `[s, e)` of one chunk: the written pieces over `old` (which covers `[s, e)`).
fn assemble(s: u64, e: u64, w: &[(u64, SharedBuf)], old: Option<&[u8]>) -> SharedBuf {
    if let [(o, d)] = w {
        if *o == s && d.len() as u64 == e - s {
            return d.clone();
        }
    }
    let mut b = match old {
        Some(old) => Buf::copy_from(old),
        None => Buf::zeroed((e - s) as usize),
    };
    for (o, d) in w {
        let (a, z) = ((*o).max(s), (*o + d.len() as u64).min(e));
        if a < z {
            b[(a - s) as usize..(z - s) as usize]
                .copy_from_slice(&d[(a - *o) as usize..(z - *o) as usize]);
        }
    }
    b.freeze()
}

enum Retry {
    /// A read of this child failed: plan again without it.
    Read(usize, VolumeError),
    Fatal(VolumeError),
}

impl ArrayNode for ParityCore {
    fn kind(&self) -> &'static str {
        "parity"
    }

    fn capacity(&self) -> u64 {
        self.capacity
    }

    fn losses_to_fail(&self) -> usize {
        let mut l: Vec<usize> = self.children.iter().map(|c| c.losses_to_fail()).collect();
        l.sort_unstable();
        l.iter().take(self.np + 1).sum()
    }

    fn readable(&self, offset: u64, len: u64) -> bool {
        if len == 0 {
            return true;
        }
        let (a, b) = self.stripe_span(offset, len);
        if b - a < 16 {
            // Exact: each piece's chunk, or its stripe within tolerance.
            return self.layout.split(offset, len).iter().all(|p| {
                let at = self.layout.chunk_offset(p.stripe);
                self.children[p.child].readable(at + p.in_chunk, p.len)
                    || (!self.is_stale(p.stripe)
                        && self
                            .lost(p.stripe, 0, self.strip)
                            .iter()
                            .filter(|&&l| l)
                            .count()
                            <= self.np)
            });
        }
        // Conservative over long ranges: children lost anywhere in the span.
        if self.any_stale(a, b) {
            return false;
        }
        let at = self.layout.chunk_offset(a);
        let span = (b - a + 1) * self.strip;
        self.children
            .iter()
            .filter(|c| !c.readable(at, span))
            .count()
            <= self.np
    }

    fn read(&self, offset: u64, buf: Buf) -> BoxFuture<'_, VolumeResult<Buf>> {
        async move {
            let len = buf.len() as u64;
            let g = self.lock_stripes(offset, len, false).await;
            if self.cache_covers(offset, len) {
                let mut buf = buf;
                self.overlay_cache(offset, &mut buf);
                return Ok(buf);
            }
            let (mut buf, repairs) = self.read_members(offset, buf).await?;
            self.overlay_cache(offset, &mut buf);
            drop(g);
            for r in repairs {
                self.repair(r).await;
            }
            Ok(buf)
        }
        .boxed()
    }

    fn write(&self, offset: u64, data: SharedBuf, fua: bool) -> BoxFuture<'_, VolumeResult<()>> {
        self.write_inner(offset, data, fua).boxed()
    }

    fn zero(&self, offset: u64, len: u64, kind: ZeroKind) -> BoxFuture<'_, VolumeResult<()>> {
        async move {
            // Whole stripes: zero every child over their chunks (zero data has zero P and Q);
            // the partial stripes at either end are written as zeroes.
            let w = self.width();
            let end = offset + len;
            let first_full = offset.div_ceil(w);
            let last_full = end / w; // exclusive
            let mut pieces: Vec<(u64, u64)> = Vec::new();
            // Zero data has zero parity, so whole stripes stay consistent even where some
            // child failed: the chunks that were zeroed and the parity agree.
            let mut full_err = None;
            if first_full < last_full {
                if offset < first_full * w {
                    pieces.push((offset, first_full * w - offset));
                }
                if last_full * w < end {
                    pieces.push((last_full * w, end - last_full * w));
                }
                {
                    let _g = self
                        .locks
                        .lock(first_full, last_full - first_full, true)
                        .await;
                    self.recent
                        .lock()
                        .retain(|(s, _)| !(first_full..last_full).contains(s));
                    let at = self.layout.chunk_offset(first_full);
                    let n = (last_full - first_full) * self.strip;
                    let results = join_all(self.children.iter().map(|c| c.zero(at, n, kind))).await;
                    let errors: Vec<VolumeError> =
                        results.into_iter().filter_map(Result::err).collect();
                    let failed_children = errors.len();
                    if failed_children > self.np {
                        full_err = crate::node::first_error(errors);
                    } else if let Some(cache) = &self.cache {
                        // The zeroes supersede cached bytes of these stripes; until they were
                        // on the members the entries stayed listed (a FLUSH waited for them).
                        let mut st = cache.state.lock();
                        let doomed: Vec<u64> = st
                            .entries
                            .keys()
                            .copied()
                            .filter(|s| (first_full..last_full).contains(s))
                            .collect();
                        for s in doomed {
                            st.remove(s);
                        }
                    }
                    if failed_children == 0 {
                        let mut stale = self.stale.lock();
                        for s in first_full..last_full {
                            self.mark_in_sync(s);
                            stale.remove(&s);
                        }
                    }
                }
            } else {
                pieces.push((offset, len));
            }
            // Every piece is attempted even if one fails, so no piece is left silently old.
            let mut results = Vec::new();
            for (o, l) in pieces {
                let mut at = o;
                while at < o + l {
                    let n = (o + l - at).min(w - at % w);
                    results.push(
                        self.write_inner(at, Buf::zeroed(n as usize).freeze(), false)
                            .await,
                    );
                    at += n;
                }
            }
            if let Some(e) = full_err {
                results.push(Err(e));
            }
            crate::node::all_ok(results)
        }
        .boxed()
    }

    fn cache_usage(&self) -> CacheUsage {
        let own = self
            .cache
            .as_ref()
            .map_or(CacheUsage::default(), |c| c.state.lock().usage(c.bound));
        own.plus(crate::node::children_cache_usage(&self.children))
    }

    fn flush(&self) -> BoxFuture<'_, VolumeResult<()>> {
        async move {
            self.drain().await?;
            crate::node::flush_children(&self.children).await
        }
        .boxed()
    }

    fn resync(&self) -> BoxFuture<'_, VolumeResult<()>> {
        async move {
            ParityCore::resync(self).await?;
            all_children_resync(&self.children).await
        }
        .boxed()
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
        let core = Arc::new(ParityCore::new(
            layout, children, capacity, sync, cache, max_age, repairs,
        ));
        if core.cache.as_ref().is_some_and(|c| c.max_age.is_some()) {
            flusher::register(Arc::downgrade(&core));
        }
        ParityNode { core }
    }

    /// Recomputes the parity of every stripe of this group not known to be in sync.
    pub async fn resync(&self) -> VolumeResult<()> {
        self.core.resync().await
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

impl ArrayNode for ParityNode {
    fn kind(&self) -> &'static str {
        "parity"
    }
    fn capacity(&self) -> u64 {
        self.core.capacity()
    }
    fn losses_to_fail(&self) -> usize {
        self.core.losses_to_fail()
    }
    fn readable(&self, offset: u64, len: u64) -> bool {
        self.core.readable(offset, len)
    }
    fn read(&self, offset: u64, buf: Buf) -> BoxFuture<'_, VolumeResult<Buf>> {
        self.core.read(offset, buf)
    }
    fn write(&self, offset: u64, data: SharedBuf, fua: bool) -> BoxFuture<'_, VolumeResult<()>> {
        self.core.write(offset, data, fua)
    }
    fn zero(&self, offset: u64, len: u64, kind: ZeroKind) -> BoxFuture<'_, VolumeResult<()>> {
        self.core.zero(offset, len, kind)
    }
    fn cache_usage(&self) -> CacheUsage {
        self.core.cache_usage()
    }
    fn flush(&self) -> BoxFuture<'_, VolumeResult<()>> {
        self.core.flush()
    }
    fn resync(&self) -> BoxFuture<'_, VolumeResult<()>> {
        ArrayNode::resync(&*self.core)
    }
}

/// One process-wide thread that destages partial stripes older than their cache's
/// `max_age`, for every write-back parity group (runtime-agnostic: it drives the destage
/// futures with `block_on`; member futures complete on their own threads).
mod flusher {
    use super::*;

    /// How often the thread looks for aged stripes.
    const TICK: Duration = Duration::from_millis(100);

    static GROUPS: OnceLock<Mutex<Vec<Weak<ParityCore>>>> = OnceLock::new();

    pub(super) fn register(core: Weak<ParityCore>) {
        let mut started = false;
        let groups = GROUPS.get_or_init(|| {
            started = true;
            Mutex::new(Vec::new())
        });
        groups.lock().push(core);
        if started {
            let spawned = std::thread::Builder::new()
                .name("nbraid-destage".into())
                .spawn(run);
            if let Err(e) = spawned {
                tracing::error!("cannot start the stripe cache flusher thread: {e}; partial stripes wait for flush or eviction");
            }
        }
    }

    fn run() {
        let groups = GROUPS.get().expect("initialized before the thread starts");
        loop {
            std::thread::sleep(TICK);
            let live: Vec<Arc<ParityCore>> = {
                let mut g = groups.lock();
                g.retain(|w| w.strong_count() > 0);
                g.iter().filter_map(Weak::upgrade).collect()
            };
            for core in live {
                let _busy = core.flushing.lock();
                if !core.closed.load(Ordering::Acquire) {
                    futures::executor::block_on(core.destage_aged());
                }
            }
        }
    }
}

/// Resyncs every child (nodes below a parity group may hold parity groups too).
pub(crate) async fn all_children_resync(children: &[Box<dyn ArrayNode>]) -> VolumeResult<()> {
    for c in children {
        c.resync().await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choose_follows_md_counting() {
        let f = false;
        let t = true;
        // RAID 5 of 4 (3 data): 4K into chunk 0 → RMW 1+1 = 2, RCW 2: tie goes to RCW.
        assert_eq!(choose(&[t, f, f], &[t, f, f], &[f; 3], 1, true), Plan::Rcw);
        // RAID 5 of 8 (7 data): RMW 2 < RCW 6.
        let mut touched = [f; 7];
        touched[3] = t;
        assert_eq!(choose(&touched, &touched, &[f; 7], 1, true), Plan::Rmw);
        // Not in sync: never RMW.
        assert_eq!(choose(&touched, &touched, &[f; 7], 1, false), Plan::Rcw);
        // RAID 6 of 6 (4 data): RMW 1+2 = 3, RCW 3 → RCW; of 7: RMW 3 < RCW 4.
        assert_eq!(
            choose(&[t, f, f, f], &[t, f, f, f], &[f; 4], 2, true),
            Plan::Rcw
        );
        assert_eq!(
            choose(&[t, f, f, f, f], &[t, f, f, f, f], &[f; 5], 2, true),
            Plan::Rmw
        );
        // Full rows: no reads.
        assert_eq!(choose(&[t; 3], &[t; 3], &[f; 3], 1, false), Plan::FullRows);
        // Written chunk lost: RMW impossible, RCW possible (it is covered).
        assert_eq!(choose(&touched, &touched, &touched, 1, true), Plan::Rcw);
        // An unwritten chunk lost and the written one lost too: reconstruct.
        let mut lost = touched;
        lost[0] = t;
        assert_eq!(
            choose(&touched, &touched, &lost, 1, true),
            Plan::Reconstruct
        );
        // Unwritten chunk lost, RMW possible.
        let mut lost = [f; 7];
        lost[0] = t;
        assert_eq!(choose(&touched, &touched, &lost, 1, true), Plan::Rmw);
        // Parity lost.
        assert_eq!(choose(&touched, &touched, &[f; 7], 0, true), Plan::DataOnly);
    }

    #[test]
    fn ranges_merge() {
        let mut r = Ranges::new();
        add_range(&mut r, 10, 20);
        add_range(&mut r, 30, 40);
        add_range(&mut r, 20, 30);
        assert_eq!(r, vec![(10, 40)]);
        add_range(&mut r, 0, 5);
        assert_eq!(r, vec![(0, 5), (10, 40)]);
        assert!(covers(&r, 12, 40));
        assert!(!covers(&r, 4, 11));
    }

    #[test]
    fn cache_entry_segments_merge_and_trim() {
        let seg = |byte: u8, n: usize| Buf::copy_from(&vec![byte; n]).freeze();
        let mut e = Entry {
            segs: Segs::new(),
            bytes: 0,
            used: 0,
            busy: false,
            since: Instant::now(),
        };
        e.insert(100, seg(1, 100));
        e.insert(300, seg(2, 100));
        assert!(!e.covers(100, 400));
        e.insert(150, seg(3, 200)); // overlaps both: trims them
        assert_eq!(e.bytes, 300);
        assert!(e.covers(100, 400));
        assert!(!e.covers(99, 400));
        let mut out = vec![0u8; 300];
        e.overlay(100, &mut out);
        assert!(out[..50].iter().all(|&b| b == 1));
        assert!(out[50..250].iter().all(|&b| b == 3));
        assert!(out[250..].iter().all(|&b| b == 2));
        let offs: Vec<(u64, usize)> = e.segs.iter().map(|(o, d)| (*o, d.len())).collect();
        assert_eq!(offs, vec![(100, 50), (150, 200), (350, 50)]);
    }

    #[test]
    fn recovery_patterns() {
        assert_eq!(
            recovery(&[1], true, false),
            Some((Loss::Data(1), true, false))
        );
        assert_eq!(
            recovery(&[1], false, true),
            Some((Loss::DataP(1), false, true))
        );
        assert_eq!(
            recovery(&[0, 2], true, true),
            Some((Loss::TwoData(0, 2), true, true))
        );
        assert_eq!(recovery(&[0, 2], true, false), None);
        assert_eq!(recovery(&[1], false, false), None);
    }
}
