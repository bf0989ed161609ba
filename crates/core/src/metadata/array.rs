//! A volume that knows itself: the superblock life cycle around a [`Volume`].
//!
//! - [`Array::create`] writes every member's record (a fresh array id, member ids, the tree,
//!   the bitmap area) and brings copies and parity in sync, or trusts zeroed members.
//! - [`Array::open`] assembles by superblock ([`assemble`]: roles by member id, lost, stale
//!   and recorded-failed roles), then resyncs — only the regions the write-intent bitmap
//!   marks when it has one — what an unclean shutdown may have left inconsistent and what
//!   stale members missed, before anything is served.
//! - While serving, every state change bumps the event counter on every current member:
//!   clean → dirty before the first write after a clean point, a member failing (recorded
//!   before any further member write is issued, by whichever write comes next, so a member
//!   that missed writes is never trusted again: `records.rs`, `crate::failure_gate`), and
//!   dirty → clean in [`Array::mark_clean`]
//!   (orderly shutdown or idle). The fast path of a write is two atomic loads and the
//!   bitmap's lock; every metadata loop is O(members).

use super::intent::{self, Hold, Intent};
use super::member_meta::MemberMeta;
use super::records::{Recorded, Records};
use super::{
    assemble, Absence, Area, AssembleError, BitmapArea, MemberEntry, Probe, RecordedState,
    Superblock, Uuid, VolumeRecord, METADATA_AREA_BYTES, SLOT_BYTES,
};
use crate::absent::AbsentMember;
use crate::buf::Buf;
use crate::error::{VolumeError, VolumeResult};
use crate::failure_gate::FailureRecorder;
use crate::member::Member;
use crate::volume::{Volume, VolumeOptions};
use futures::future::join_all;
use futures::lock::Mutex as AsyncMutex;
use nbraid_layout::{Geometry, Node};
use parking_lot::RwLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;
use thiserror::Error;

/// Per-volume metadata areas start after the two superblock copies.
const AREAS_START: u64 = 2 * SLOT_BYTES;
/// Resync streams the volume in pieces of about this many bytes (whole full stripes).
const RESYNC_PIECE_BYTES: u64 = 1 << 20;

/// How an array is created and opened.
#[derive(Clone, Debug)]
pub struct ArrayOptions {
    pub volume: VolumeOptions,
    /// Bytes of the volume per write-intent bit (`None`: no bitmap; every unclean start
    /// resyncs the whole volume). Rounded up to a power of two ≥ 4 KiB.
    pub bitmap_chunk_bytes: Option<u64>,
    /// The partial-parity log of RAID 5/6/50/60 groups (`crate::ppl`; default on): closes the
    /// write hole. Off: an area is still reserved at create, but nothing is logged.
    pub ppl: bool,
    /// A region's bit is cleared by a flush only once no write touched the region for this
    /// long (md's bitmap daemon sleep): bits of regions in use stay set instead of being
    /// written clear at every flush and set again by the next write. Zero: at the first
    /// flush that covers the region's writes. A clean shutdown clears every bit regardless.
    pub bitmap_clear_delay: Duration,
    /// Create only: the partial-parity log takes the `n` bytes right before the volume's
    /// region on every member (a reserve the config leaves there: `write_hole_log_size`)
    /// instead of [`crate::ppl::DEFAULT_AREA_BYTES`] inside the 1 MiB metadata area. A larger
    /// ring settles its entries in fewer member flushes. Opening uses the recorded place.
    pub ppl_area_before_region_bytes: Option<u64>,
    /// Opening only: past the volume's tolerance, take back the freshest failed or stale
    /// members ([`super::assemble_forced`], mdadm's `--assemble --force`).
    pub force_assembly: bool,
}

impl Default for ArrayOptions {
    fn default() -> Self {
        ArrayOptions {
            volume: VolumeOptions::default(),
            bitmap_chunk_bytes: Some(intent::DEFAULT_CHUNK_BYTES),
            ppl: true,
            bitmap_clear_delay: intent::DEFAULT_CLEAR_DELAY,
            ppl_area_before_region_bytes: None,
            force_assembly: false,
        }
    }
}

#[derive(Debug, Error)]
pub enum ArrayError {
    #[error(transparent)]
    Assemble(#[from] AssembleError),
    #[error(transparent)]
    Volume(#[from] VolumeError),
    #[error("volume `{volume}`: {detail}")]
    Metadata { volume: String, detail: String },
}

/// What opening an array found and did.
#[derive(Clone, Debug, Default)]
pub struct OpenReport {
    /// Damaged superblock copies, lost, stale and failed roles (say them loudly).
    pub warnings: Vec<String>,
    /// Every current member recorded a clean shutdown.
    pub was_clean: bool,
    /// Roles whose member was stale and has been resynced.
    pub resynced_roles: Vec<usize>,
    /// Roles served degraded (lost or recorded failed).
    pub absent_roles: Vec<usize>,
    /// Bytes of the volume resynced before serving.
    pub resynced_bytes: u64,
    /// Bytes left to resync in the background ([`Array::open_background`]).
    pub background_bytes: u64,
    /// Per role: the position (in the `metas` given to [`Array::open`]) of the member that
    /// serves it, or why none does (as assembly found it; stale roles are resynced since).
    pub roles: Vec<Result<usize, Absence>>,
    /// Roles whose new member is being rebuilt, and the checkpoint it resumes from
    /// ([`Array::rebuild`] continues it while the volume serves).
    pub rebuilding_roles: Vec<(usize, u64)>,
    /// What replaying the partial-parity log did (nothing after a clean shutdown).
    pub ppl: crate::ppl::RecoverReport,
    /// Roles a forced assembly took back (their late bytes may be stale).
    pub forced: Vec<super::ForcedRole>,
}

pub struct Array {
    volume: Volume,
    /// The records and their writer, shared with the member table (see `records.rs`).
    pub(super) records: Arc<Records>,
    /// By role: where that member keeps the bitmap.
    pub(super) bitmap_areas: RwLock<Vec<Option<Area>>>,
    /// Rebuild and replace state (see `heal.rs`).
    pub(super) heal: Arc<super::heal::Heal>,
    /// The records say dirty (a write may be in flight since the last clean point).
    pub(super) dirty: AtomicBool,
    /// A resync left to the background at open (see `resync.rs`).
    pub(super) background: super::resync::BackgroundSlot,
    /// Failed members re-added and being resynced (see `readd.rs`).
    pub(super) returning: super::readd::Returning,
    /// Write-type requests in flight.
    inflight: AtomicU64,
    pub(super) intent: Option<Intent>,
    /// By role: where that member keeps the partial-parity log (a new member in the role
    /// gets the same place).
    pub(super) ppl_areas: Vec<Option<Area>>,
    /// See [`ArrayOptions::bitmap_clear_delay`].
    bitmap_clear_delay: Duration,
    /// Bitmap updates written (each a FUA write on every current member).
    bitmap_writes: AtomicU64,
    /// Serializes bitmap writes (callers waiting share the next one).
    pub(super) bitmap_write: AsyncMutex<()>,
    /// One [`Array::mark_clean`] at a time.
    cleaning: AsyncMutex<()>,
    /// The log the engine writes (`None`: none), for the replay at open.
    pub(super) ppl_setup: Option<crate::ppl::PplSetup>,
}

mod requests;

/// What [`Array::mark_clean`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CleanMark {
    /// The records say clean: the next start resyncs nothing.
    Recorded,
    /// Not recorded clean: the background resync is not done (the next start resumes it).
    ResyncPending,
    /// Not recorded clean: a write was in flight (the records stay dirty).
    WritesInFlight,
}

impl CleanMark {
    pub fn is_recorded(self) -> bool {
        self == CleanMark::Recorded
    }
}

impl std::fmt::Display for CleanMark {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CleanMark::Recorded => "recorded clean",
            CleanMark::ResyncPending => "the background resync is not finished",
            CleanMark::WritesInFlight => "a write was still in flight",
        })
    }
}

impl Array {
    /// Writes new records for volume `name` over `metas` (leaf `i` of `tree` is `metas[i]`)
    /// and opens it. Regions must start after the metadata area. With `assume_clean`, the
    /// members are trusted to agree (zero-filled); otherwise every copy and parity chunk is
    /// rewritten from the data first (`progress(done, total)` bytes).
    pub async fn create(
        name: &str,
        tree: Node,
        metas: Vec<Arc<MemberMeta>>,
        opts: ArrayOptions,
        assume_clean: bool,
        progress: &(dyn Fn(u64, u64) + Sync),
    ) -> Result<(Array, OpenReport), ArrayError> {
        let bad = |detail: String| ArrayError::Metadata {
            volume: name.to_string(),
            detail,
        };
        if metas.len() != tree.member_count() {
            return Err(bad(format!(
                "the tree has {} members, {} were given",
                tree.member_count(),
                metas.len()
            )));
        }
        let mut low = None;
        tree.visit_members(&mut |m| {
            if m.start < METADATA_AREA_BYTES {
                low.get_or_insert(m.index);
            }
        });
        if let Some(i) = low {
            return Err(bad(format!(
                "member {i}'s region starts inside the first {METADATA_AREA_BYTES} bytes (nbraid's metadata area)"
            )));
        }
        for (i, m) in metas.iter().enumerate() {
            match m.probe() {
                Probe::Superblock(sb, _) if sb.volumes.iter().any(|v| v.name == name) => {
                    return Err(bad(format!(
                        "member {i} (`{}`) already carries volume `{name}`: open it, or wipe the member to create it anew",
                        m.member.name()
                    )))
                }
                Probe::Unreadable(e) | Probe::Unreachable(e) => {
                    return Err(bad(format!(
                        "member {i} (`{}`): {e}; refusing to overwrite it",
                        m.member.name()
                    )))
                }
                _ => {}
            }
        }
        let capacity = Geometry::from_tree(tree.clone()).capacity();
        let chunk = opts
            .bitmap_chunk_bytes
            .map(|c| intent::chunk_for(capacity, c));
        let id = Uuid::random().map_err(|e| bad(format!("random id: {e}")))?;
        let mut member_ids = Vec::with_capacity(metas.len());
        for m in &metas {
            let existing = m.sb.lock().await.as_ref().map(|sb| sb.member);
            member_ids.push(match existing {
                Some(u) => u,
                None => Uuid::random().map_err(|e| bad(format!("random id: {e}")))?,
            });
        }
        let members: Vec<MemberEntry> = member_ids
            .iter()
            .map(|&uuid| MemberEntry {
                uuid,
                state: RecordedState::Active,
            })
            .collect();
        for (role, m) in metas.iter().enumerate() {
            let bitmap = match chunk {
                None => None,
                Some(c) => {
                    let len = intent::area_bytes(capacity, c);
                    let held = m.sb.lock().await.clone();
                    let offset = free_area(held.as_ref(), len).ok_or_else(|| {
                        bad(format!(
                            "member {role}: no room for a {len}-byte bitmap in the metadata area"
                        ))
                    })?;
                    m.member
                        .write(offset, Buf::zeroed(len as usize).freeze(), true)
                        .await
                        .map_err(|e| bad(e.to_string()))?;
                    Some(BitmapArea {
                        area: Area { offset, len },
                        chunk_bytes: c,
                    })
                }
            };
            let avoid: Vec<Area> = bitmap.map(|b| b.area).into_iter().collect();
            let held = m.sb.lock().await.clone();
            let ppl = match opts.ppl_area_before_region_bytes {
                None => super::ppl_area::allocate(held.as_ref(), &tree, &avoid),
                Some(len) => super::ppl_area::before_region(held.as_ref(), &tree, role, len),
            };
            // With the log off an area is kept where one fits (it may be switched on later).
            let ppl = match ppl {
                Ok(a) => a,
                Err(_) if !opts.ppl => None,
                Err(e) => return Err(bad(format!("member {role}: {e}"))),
            };
            if let Some(a) = ppl {
                super::ppl_area::clear(&*m.member, a)
                    .await
                    .map_err(|e| bad(e.to_string()))?;
            }
            let record = VolumeRecord {
                array: id,
                name: name.to_string(),
                events: 1,
                // Not clean until the sync below is done.
                clean: assume_clean,
                role: role as u32,
                members: members.clone(),
                tree: tree.clone(),
                bitmap,
                ppl,
                checksums: None,
                scrub: None,
                added_paths: Vec::new(),
            };
            let uuid = member_ids[role];
            m.update(|sb| {
                sb.member = uuid;
                sb.volumes.push(record);
            })
            .await
            .map_err(|e| bad(e.to_string()))?;
        }
        let metas: Vec<Option<Arc<MemberMeta>>> = metas.into_iter().map(Some).collect();
        let array = Array::build(name, id, tree, &metas, opts, !assume_clean).await?;
        let mut report = OpenReport {
            was_clean: assume_clean,
            roles: (0..array.volume.member_count()).map(Ok).collect(),
            ..OpenReport::default()
        };
        if !assume_clean {
            report.resynced_bytes = array
                .resync(&[(0, array.volume.capacity())], progress)
                .await?;
        }
        array.settle().await?;
        Ok((array, report))
    }

    /// Assembles volume `name` from `metas` (config position `i`; `None`: missing), checking
    /// them against `config_tree` (leaves are config positions), resyncs what needs it, and
    /// returns the array ready to serve.
    pub async fn open(
        name: &str,
        config_tree: &Node,
        metas: Vec<Option<Arc<MemberMeta>>>,
        opts: ArrayOptions,
        progress: &(dyn Fn(u64, u64) + Sync),
    ) -> Result<(Array, OpenReport), ArrayError> {
        Array::open_with(name, config_tree, metas, opts, progress, false).await
    }

    /// [`Array::open`]; with `background`, a resync a mirrors-only volume needs is left to
    /// [`Array::background_resync`] ([`Array::open_background`]).
    pub(super) async fn open_with(
        name: &str,
        config_tree: &Node,
        metas: Vec<Option<Arc<MemberMeta>>>,
        opts: ArrayOptions,
        progress: &(dyn Fn(u64, u64) + Sync),
        background: bool,
    ) -> Result<(Array, OpenReport), ArrayError> {
        let probes: Vec<Probe> = metas
            .iter()
            .map(|m| m.as_ref().map_or(Probe::Missing, |m| m.probe().clone()))
            .collect();
        let asm = if opts.force_assembly {
            super::assemble_forced(name, config_tree, &probes)?
        } else {
            assemble(name, config_tree, &probes)?
        };
        let by_role: Vec<Option<Arc<MemberMeta>>> = asm
            .roles
            .iter()
            .map(|r| {
                let pos = match r {
                    Ok(i) => Some(*i),
                    Err(a) => a.member(),
                };
                pos.and_then(|i| metas[i].clone())
            })
            .collect();
        let resumed = |r: usize| asm.rebuilding.iter().any(|&(x, _)| x == r);
        let stale: Vec<usize> = asm
            .absent()
            .filter(|&(r, a)| matches!(a, Absence::Stale { .. }) && !resumed(r))
            .map(|(r, _)| r)
            .collect();
        let mut absent: Vec<usize> = asm
            .absent()
            .filter(|(_, a)| !matches!(a, Absence::Stale { .. }))
            .map(|(r, _)| r)
            .collect();
        // A stale member is resynced through a node above it that holds its bytes; where
        // none reaches it (a RAID 5 group under a mirror that lost another member takes no
        // writes) it stays out: made current unresynced, it would be read with the group's
        // parity as bytes nobody wrote.
        let lost: Vec<usize> = (stale.iter().chain(&absent).copied())
            .chain(asm.rebuilding.iter().map(|&(r, _)| r))
            .collect();
        let (stale, unreachable): (Vec<usize>, Vec<usize>) = stale
            .into_iter()
            .partition(|&r| asm.tree.rebuilds(r, &|m| lost.contains(&m)));
        let mut warnings = asm.warnings.clone();
        for &r in &unreachable {
            warnings.push(format!(
                "role {r}: stale, and nothing can resync it with roles {lost:?} lost: left out"
            ));
        }
        absent.extend(unreachable);
        let array = Array::build(name, asm.array, asm.tree.clone(), &by_role, opts, true).await?;
        for &r in &absent {
            array.volume.fail_member(r, "absent at assembly");
        }

        // Settled below (they were not there to miss anything since the records were written).
        let gate = array.volume.table().failure_gate();
        gate.recorded_up_to(gate.generation());
        for &r in &stale {
            array.volume.set_resyncing(r, true);
        }
        // New members being rebuilt: written, not read; the rebuild resumes online.
        let mut rebuilding_roles = Vec::new();
        for &(r, checkpoint) in &asm.rebuilding {
            if array.volume.member_is_failed(r) {
                continue;
            }
            array.volume.set_resyncing(r, true);
            array.heal.resume(r, checkpoint);
            rebuilding_roles.push((r, checkpoint));
        }
        // The write hole: replay the partial-parity log before the resync and before serving.
        let ppl = match &array.ppl_setup {
            Some(p) => crate::ppl::recover(&array.volume, &p.areas, p.life, !asm.clean).await?,
            None => Default::default(),
        };
        {
            let mut rec = array.records.recorded.lock().await;
            rec.events = asm.events;
            // Trusted from now on: the next commit records them current.
            for f in &asm.forced {
                rec.members[f.role].state = RecordedState::Active;
            }
        }
        for w in &warnings {
            tracing::warn!("volume `{name}`: {w}");
        }
        let mut report = OpenReport {
            ppl,
            warnings,
            was_clean: asm.clean,
            resynced_roles: stale.clone(),
            absent_roles: absent,
            resynced_bytes: 0,
            background_bytes: 0,
            roles: asm.roles.clone(),
            rebuilding_roles,
            forced: asm.forced.clone(),
        };
        if !asm.clean || !stale.is_empty() {
            let capacity = array.volume.capacity();
            let ranges = match &array.intent {
                Some(i) => i.set_ranges(capacity),
                None => vec![(0, capacity)],
            };
            let rebuilding = !report.rebuilding_roles.is_empty();
            if background && array.start_background(&ranges, &stale, rebuilding).await? {
                report.background_bytes = array.background_bytes();
                return Ok((array, report));
            }
            report.resynced_bytes = array.resync(&ranges, progress).await?;
        }
        {
            let mut rec = array.records.recorded.lock().await;
            for &r in &stale {
                array.volume.set_resyncing(r, false);
                rec.members[r].state = RecordedState::Active;
            }
        }
        array.settle().await?;
        Ok((array, report))
    }

    /// The engine volume over members in recorded roles (absent roles get stand-ins).
    async fn build(
        name: &str,
        id: Uuid,
        tree: Node,
        by_role: &[Option<Arc<MemberMeta>>],
        opts: ArrayOptions,
        dirty: bool,
    ) -> Result<Array, ArrayError> {
        let mut ends = vec![0u64; by_role.len()];
        tree.visit_members(&mut |m| ends[m.index] = ends[m.index].max(m.start + m.len));
        let mut records = Vec::with_capacity(by_role.len());
        for m in by_role {
            records.push(match m {
                Some(m) => m.record(name).await,
                None => None,
            });
        }
        let members: Vec<Arc<dyn Member>> = by_role
            .iter()
            .enumerate()
            .map(|(r, m)| match m {
                Some(m) => m.member.clone(),
                None => Arc::new(AbsentMember::new(format!("role {r} (missing)"), ends[r]))
                    as Arc<dyn Member>,
            })
            .collect();
        // Parity is trusted: whatever may disagree (the bitmap's regions, stale members) is
        // resynced before anything is served, so the volume starts as in sync as zeroed members.
        let vopts = VolumeOptions {
            members_known_zero: true,
            ..opts.volume
        };
        let newest_events = records
            .iter()
            .flatten()
            .map(|r| r.events)
            .max()
            .unwrap_or(0);
        let ppl_setup = super::ppl_area::setup(name, &tree, &records, newest_events, opts.ppl);
        let volume =
            Volume::with_ppl(Geometry::from_tree(tree), members, vopts, ppl_setup.clone())?;
        let newest = records
            .iter()
            .flatten()
            .max_by_key(|r| r.events)
            .ok_or_else(|| ArrayError::Metadata {
                volume: name.to_string(),
                detail: "no member carries a record".into(),
            })?;
        let bitmap_areas: Vec<Option<Area>> = records
            .iter()
            .map(|r| r.as_ref().and_then(|r| r.bitmap.map(|b| b.area)))
            .collect();
        let intent = match newest.bitmap {
            None => None,
            Some(b) => {
                // The union of every readable member's bitmap: a member that missed an
                // update never hides a set bit.
                let len = b.area.len as usize;
                let mut union = vec![0u8; len];
                for (r, area) in bitmap_areas.iter().enumerate() {
                    let Some(area) = area else { continue };
                    if !volume.member_is_current(r) || area.len != b.area.len {
                        continue;
                    }
                    if let Ok(bytes) = volume.member(r).read(area.offset, Buf::new(len)).await {
                        union
                            .iter_mut()
                            .zip(bytes.iter())
                            .for_each(|(u, b)| *u |= b);
                    }
                }
                let intent = Intent::new(volume.capacity(), b.chunk_bytes, union);
                Some(intent.map_err(|detail| ArrayError::Metadata {
                    volume: name.to_string(),
                    detail,
                })?)
            }
        };
        let heal: Arc<super::heal::Heal> = Default::default();
        let shared = Arc::new(Records {
            id,
            name: name.to_string(),
            table: volume.shared_table(),
            metas: RwLock::new(by_role.to_vec()),
            recorded: AsyncMutex::new(Recorded {
                events: newest.events,
                clean: newest.clean,
                members: newest.members.clone(),
                scrub: newest.scrub,
                added_paths: newest.added_paths.clone(),
            }),
            heal: heal.clone(),
        });
        // From here on a member failure is recorded before any further member write.
        let recorder: Arc<dyn FailureRecorder> = shared.clone();
        volume
            .table()
            .failure_gate()
            .install(Arc::downgrade(&recorder));
        Ok(Array {
            volume,
            records: shared,
            bitmap_areas: RwLock::new(bitmap_areas),
            ppl_areas: super::ppl_area::areas_by_role(&records),
            ppl_setup,
            heal,
            dirty: AtomicBool::new(dirty),
            background: Default::default(),
            returning: Default::default(),
            inflight: AtomicU64::new(0),
            intent,
            bitmap_clear_delay: opts.bitmap_clear_delay,
            bitmap_writes: AtomicU64::new(0),
            bitmap_write: AsyncMutex::new(()),
            cleaning: AsyncMutex::new(()),
        })
    }

    /// Rewrites copies and parity over `ranges`, piece by piece (whole full stripes, about
    /// 1 MiB each: memory stays bounded whatever the ranges). Returns the bytes covered.
    async fn resync(
        &self,
        ranges: &[(u64, u64)],
        progress: &(dyn Fn(u64, u64) + Sync),
    ) -> Result<u64, ArrayError> {
        let capacity = self.volume.capacity();
        let (width, piece) = self.resync_piece_bytes();
        let total: u64 = ranges.iter().map(|(a, b)| b - a).sum();
        let mut done = 0;
        for &(a, b) in ranges {
            let mut at = a / width * width;
            let end = b.div_ceil(width).saturating_mul(width).min(capacity);
            while at < end {
                let n = piece.min(end - at);
                self.volume.resync_range(at, n).await?;
                at += n;
                done += n;
                progress(done.min(total), total);
            }
        }
        self.volume.flush().await?;
        Ok(total)
    }

    /// The full stripe (at least a block) and the resync's piece: whole full stripes,
    /// about [`RESYNC_PIECE_BYTES`].
    pub(super) fn resync_piece_bytes(&self) -> (u64, u64) {
        let width = self
            .volume
            .geometry()
            .full_stripe_width()
            .unwrap_or(RESYNC_PIECE_BYTES)
            .max(self.volume.block_size());
        (width, (RESYNC_PIECE_BYTES / width).max(1) * width)
    }

    /// After open or create: every current member records the volume clean, with what
    /// failed recorded; the bitmap is cleared when no role is missing (else it keeps what
    /// the missing members will need).
    async fn settle(&self) -> VolumeResult<()> {
        self.volume.flush().await?;
        if let Some(i) = &self.intent {
            if !self.volume.is_degraded() {
                i.flushed(i.flush_started(), Duration::ZERO);
            }
            self.write_bitmap().await?;
        }
        let mut rec = self.records.recorded.lock().await;
        rec.clean = true;
        self.commit(&mut rec).await?;
        self.dirty.store(false, SeqCst);
        Ok(())
    }

    pub fn volume(&self) -> &Volume {
        &self.volume
    }

    pub fn name(&self) -> &str {
        &self.records.name
    }

    pub fn id(&self) -> Uuid {
        self.records.id
    }

    /// The event counter as last recorded.
    pub async fn events(&self) -> u64 {
        self.records.recorded.lock().await.events
    }

    /// Bytes of the volume per write-intent bit, if the volume has a bitmap.
    /// Bitmap updates written since open (each a FUA write on every current member): what
    /// the write-intent bitmap costs in member writes.
    pub fn bitmap_writes(&self) -> u64 {
        self.bitmap_writes.load(SeqCst)
    }

    pub fn bitmap_chunk_bytes(&self) -> Option<u64> {
        self.intent.as_ref().map(Intent::chunk_bytes)
    }

    /// See [`Records::commit`].
    pub(super) async fn commit(&self, rec: &mut Recorded) -> VolumeResult<()> {
        self.records.commit(rec).await
    }

    /// Whether the records say dirty (a write since the last clean point).
    pub fn is_dirty(&self) -> bool {
        self.dirty.load(SeqCst)
    }

    /// Records members failed since the last commit, before a request that may have seen
    /// them fail is acknowledged (also after an operator fails one). Member writes wait for
    /// it too (`crate::failure_gate`).
    pub async fn record_failures(&self) -> VolumeResult<()> {
        self.records.record_failures().await
    }
}

/// The first gap of `len` bytes (4 KiB aligned) in the per-volume metadata areas that no
/// record on the member uses.
pub(super) fn free_area(sb: Option<&Superblock>, len: u64) -> Option<u64> {
    free_area_avoiding(sb, len, &[])
}

/// [`free_area`], also avoiding `avoid` (areas not recorded yet).
pub(super) fn free_area_avoiding(sb: Option<&Superblock>, len: u64, avoid: &[Area]) -> Option<u64> {
    let mut used: Vec<(u64, u64)> = sb
        .map(|sb| {
            sb.volumes
                .iter()
                .flat_map(|v| {
                    [v.bitmap.map(|b| b.area), v.ppl, v.checksums]
                        .into_iter()
                        .flatten()
                        .filter(|a| a.offset < METADATA_AREA_BYTES)
                        .map(|a| (a.offset, a.offset + a.len))
                })
                .collect()
        })
        .unwrap_or_default();
    used.extend(avoid.iter().map(|a| (a.offset, a.offset + a.len)));
    used.sort_unstable();
    let mut at = AREAS_START;
    for (s, e) in used {
        if s >= at + len {
            break;
        }
        at = at.max(e.next_multiple_of(4096));
    }
    (at + len <= METADATA_AREA_BYTES).then_some(at)
}
