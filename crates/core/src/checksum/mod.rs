//! Per-block checksums: one CRC-32C per 4 KiB block of every member region — data and parity
//! chunks alike — kept in the region's checksum area on the same member, verified on every
//! read that reaches the member.
//!
//! # Where it sits
//! A leaf ([`crate::node::LeafNode`]) owns the [`LeafChecksums`] of its region: it computes
//! the checksums of what it writes and checks what it reads. A block that does not match is a
//! **read error of that block**, of its own kind ([`is_mismatch`]): the nodes above do what
//! they do for any read error — a mirror serves another copy and writes it back, a parity
//! group rebuilds the rows from the others and rewrites them — and a leaf without redundancy
//! above it returns the error (EIO), never the wrong bytes. The rewrite of a block found bad
//! is counted as a repair. Nothing above the leaves knows the checksums exist.
//!
//! # Crash consistency (dm-integrity's bitmap mode, per region)
//! Data and its checksum cannot land atomically. BlockSum pages are written back lazily (the
//! cache is bounded; pages are written before the member flush the volume's FLUSH does), and
//! the area's header holds one bit per page group, made durable (FUA) *before* the first data
//! write under that group since the volume was opened (a write into the group after one
//! written since the open marks at least 32 MiB ahead, in whole groups, so a sequential
//! stream pays one header write per 32 MiB of region, not one per group). After an unclean
//! shutdown the entries of every group whose bit is set are dropped (they read as "unknown", not as errors) and
//! come back as the blocks are written again; a clean start trusts them all. So a crash
//! never turns a lagging checksum into an error or a "repair" — it costs protection of the
//! blocks written since the last clean start until the pass that gives them back
//! (`metadata/checksum_refill.rs`: [`cover`] over those groups once the start's resync is
//! done) or a rewrite reaches them.
//!
//! # Files
//! `entry.rs` (the area's bytes and the verdict, pure), `table.rs` (the bounded page cache
//! and bookkeeping, no I/O), `store.rs` (the area's bytes on the member: the header read
//! and marked, pages loaded and written back), `mod.rs` (what a read and a write of the
//! region do with their checksums), `handover.rs` (a role's checksums when a spare or a replacement takes it), `enable.rs`
//! (where an existing volume's area goes, pure), `fill.rs` (entries computed for blocks
//! written before the volume had checksums).

mod enable;
mod entry;
mod fill;
mod handover;
mod setup;
mod store;
mod table;

pub use enable::{place_for_existing, MemberUse, NoRoomForChecksums};
pub use entry::{area_bytes, block_crc, BlockSum, Verdict, BLOCK_BYTES};
pub use fill::cover;
pub use setup::{ChecksumSetup, CACHE_PAGES_DEFAULT};
pub use store::PinnedPages;

use crate::member::{Member, MemberError, MemberOp, MemberResult};
use entry::{ENTRIES_PER_PAGE, HEADER_BYTES, PAGE_BYTES};
use std::io;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use store::EntryStore;
use table::WriteId;

/// Where a region's checksum area lies on its member.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChecksumArea {
    pub offset_bytes: u64,
    pub len_bytes: u64,
}

/// Per-member counts of what the checksums found.
#[derive(Debug, Default)]
pub struct ChecksumCounters {
    /// Blocks read whose bytes did not match their checksum.
    pub errors: AtomicU64,
    /// Blocks found bad and then rewritten (by a mirror, a parity group or a scrub).
    pub repairs: AtomicU64,
}

impl ChecksumCounters {
    /// A new member took the role: what was counted was its predecessor's (and the
    /// bad-block limit holds each member to its own).
    pub fn reset(&self) {
        self.errors.store(0, Relaxed);
        self.repairs.store(0, Relaxed);
    }
}

/// A block whose bytes do not match its checksum (inside the [`MemberError`] of the read).
#[derive(Debug, thiserror::Error)]
#[error("checksum mismatch in volume {volume}: block at member offset {member_offset} (stored {stored:#010x}, computed {computed:#010x}); {bad_blocks} bad block(s) in the read")]
pub struct ChecksumMismatch {
    pub volume: String,
    pub member_offset: u64,
    pub stored: u32,
    pub computed: u32,
    pub bad_blocks: u64,
}

/// Whether a member error is a checksum mismatch (not an I/O error).
pub fn is_mismatch(e: &MemberError) -> bool {
    e.source
        .get_ref()
        .is_some_and(|inner| inner.is::<ChecksumMismatch>())
}

/// What a write that began must hand back when it is answered.
pub struct WriteToken {
    id: Option<WriteId>,
    first_block: u64,
    blocks: u64,
}

/// One region's checksums (see the module docs). Offsets are in the region (the leaf's own
/// address space); every method takes the member to do its I/O on.
pub struct LeafChecksums {
    volume: Arc<str>,
    index: usize,
    /// The region's first block on the member (mixed into every checksum).
    first_block: u64,
    /// Bytes in the region.
    len_bytes: u64,
    /// The area's header and entry pages, cached, on the member.
    store: EntryStore,
    /// Writes hold their blocks exclusively until answered: of two writes to one block the
    /// one the member completes last is the one whose checksum stays (and a write of part of
    /// a block reads the rest of it with no other write in between).
    writes: crate::range_lock::RangeLock,
    counters: Arc<[ChecksumCounters]>,
    fail_after_errors: Option<u64>,
}

impl LeafChecksums {
    pub fn counters(&self) -> &ChecksumCounters {
        &self.counters[self.index]
    }

    /// Whether the member has returned more bad blocks than the threshold allows.
    pub fn past_threshold(&self) -> bool {
        self.fail_after_errors
            .is_some_and(|n| self.counters().errors.load(Relaxed) > n)
    }

    /// Holds region bytes `[a, b)` (whole blocks) for one read and its check: bytes read while
    /// a write to them was in flight are judged before that write's old checksum is dropped.
    /// A read of whole blocks takes it only when its unlocked check failed ([`Self::match_known`]).
    pub(crate) async fn read_lock(&self, a: u64, b: u64) -> crate::range_lock::RangeGuard<'_> {
        self.writes.lock(a, b - a, false).await
    }

    /// Holds region bytes `[a, b)` (whole blocks) for one write until it is answered.
    pub(crate) async fn write_lock(&self, a: u64, b: u64) -> crate::range_lock::RangeGuard<'_> {
        self.writes.lock(a, b - a, true).await
    }

    /// Before a read of region bytes `[a, b)` (whole blocks): the blocks' entry pages loaded and their entries' cache
    /// lines asked for, so the check after the read finds them at hand. A random read's
    /// entry is otherwise a cache miss that costs as much as the CRC of its block; fetched
    /// now it arrives while the member reads.
    pub async fn expect_read(&self, m: &dyn Member, a: u64, b: u64) -> MemberResult<()> {
        let (first, last) = (a / BLOCK_BYTES, b.div_ceil(BLOCK_BYTES));
        if first >= last {
            return Ok(());
        }
        self.store.open(m).await?;
        self.store
            .each_page(m, first, last, |t, blocks| t.prefetch(blocks))
            .await
    }

    /// Whether a write of the whole blocks of region bytes `[a, b)` finds their header bits
    /// durable already: its checksums may then be taken while the member writes, as no
    /// header write has to come first. Asked under the blocks' write lock: only a blank
    /// start (`handover.rs`, under the whole region's lock) clears bits of an open region.
    pub(crate) fn groups_marked(&self, a: u64, b: u64) -> bool {
        a < b
            && self
                .store
                .groups_durable(a / BLOCK_BYTES, b.div_ceil(BLOCK_BYTES))
    }

    /// Loads the entry pages of region bytes `[a, b)` (whole blocks) and pins them in the
    /// cache until the returned [`PinnedPages`] is given to [`LeafChecksums::begin_write_pinned`]
    /// or dropped: a write that takes its checksums once its member write has started then
    /// updates them with no await in between, so it cannot be dropped with new bytes on the
    /// member and the old checksums alone in the table.
    pub(crate) async fn pin_pages(
        &self,
        m: &dyn Member,
        a: u64,
        b: u64,
    ) -> MemberResult<PinnedPages<'_>> {
        let (first, last) = (a / BLOCK_BYTES, b.div_ceil(BLOCK_BYTES));
        self.store.pin_pages(m, first, last).await
    }

    /// The table's part of [`LeafChecksums::begin_write`] (its header bits durable, its entry
    /// pages held by `pinned`): the entries take `entries`, the old ones stay accepted until
    /// the write is answered. No I/O, no await.
    pub(crate) fn begin_write_pinned(
        &self,
        offset: u64,
        entries: &[BlockSum],
        pinned: PinnedPages<'_>,
    ) -> WriteToken {
        let first = offset / BLOCK_BYTES;
        assert_eq!(
            first / ENTRIES_PER_PAGE,
            pinned.first_page,
            "the pages pinned for these blocks"
        );
        let id = self.store.table().begin_write(first, entries);
        drop(pinned);
        WriteToken {
            id: Some(id),
            first_block: first,
            blocks: entries.len() as u64,
        }
    }

    /// The checksums of the blocks from region offset `offset` held by `pieces` (consecutive
    /// bytes, whole blocks in all).
    pub fn compute(&self, offset: u64, pieces: &[&[u8]]) -> Vec<BlockSum> {
        self.crcs(offset, pieces)
            .into_iter()
            .map(BlockSum::Known)
            .collect()
    }

    /// [`LeafChecksums::compute`]'s values as CRCs: pieces of whole blocks (every member
    /// read and nearly every write) in one pass per piece, others block by block across
    /// the pieces.
    fn crcs(&self, offset: u64, pieces: &[&[u8]]) -> Vec<u32> {
        assert!(
            offset.is_multiple_of(BLOCK_BYTES),
            "checksums cover whole blocks"
        );
        let total_bytes: u64 = pieces.iter().map(|p| p.len() as u64).sum();
        let mut out = Vec::with_capacity((total_bytes / BLOCK_BYTES) as usize);
        let mut block = self.first_block + offset / BLOCK_BYTES;
        if pieces
            .iter()
            .all(|p| (p.len() as u64).is_multiple_of(BLOCK_BYTES))
        {
            for piece in pieces {
                crate::crc32c::numbered_blocks(block, piece, BLOCK_BYTES as usize, &mut out);
                block += piece.len() as u64 / BLOCK_BYTES;
            }
            return out;
        }
        let mut crc = crate::crc32c::Crc::new();
        let mut filled = 0u64;
        crc.update(&block.to_le_bytes());
        for piece in pieces {
            let mut rest: &[u8] = piece;
            while !rest.is_empty() {
                let take = rest.len().min((BLOCK_BYTES - filled) as usize);
                crc.update(&rest[..take]);
                rest = &rest[take..];
                filled += take as u64;
                if filled == BLOCK_BYTES {
                    out.push(crc.finish());
                    block += 1;
                    filled = 0;
                    crc = crate::crc32c::Crc::new();
                    crc.update(&block.to_le_bytes());
                }
            }
        }
        assert_eq!(filled, 0, "checksums cover whole blocks");
        out
    }

    /// Checks whole blocks read from region offset `offset`. A mismatch is a read error of
    /// the first bad block (counted, logged with volume, member and member offset).
    pub async fn verify(&self, m: &dyn Member, offset: u64, pieces: &[&[u8]]) -> MemberResult<()> {
        let computed = self.crcs(offset, pieces);
        if computed.is_empty() {
            return Ok(());
        }
        let first = offset / BLOCK_BYTES;
        self.store.open(m).await?;
        // Nearly every read: every entry held and matching, one lock and one lookup per page.
        if self.store.table().all_match(first, &computed) == Some(true) {
            return Ok(());
        }
        self.judge_read(m, first, &computed).await
    }

    /// Before a read of region bytes `[a, b)` (whole blocks) checked without the blocks'
    /// lock: the entries' cache lines asked for, when every entry page is held and the
    /// header has been read (`false` otherwise: the read goes under the lock, where pages
    /// are loaded — a page load must not straddle a blank start, which holds the region's
    /// lock while it replaces the table).
    pub(crate) fn prefetch_held(&self, a: u64, b: u64) -> bool {
        let (first, last) = (a / BLOCK_BYTES, b.div_ceil(BLOCK_BYTES));
        first < last && self.store.is_open() && self.store.table().prefetch_held(first..last)
    }

    /// Whether every whole block of `pieces` (from region offset `offset`, read without the
    /// blocks' lock) has a known checksum in the table now and matches it. `false` (a
    /// mismatch, a block without a known checksum, an entry page not held) judges nothing
    /// and counts nothing: the caller reads again under the lock and verifies.
    pub(crate) fn match_known(&self, offset: u64, pieces: &[&[u8]]) -> bool {
        let computed = self.crcs(offset, pieces);
        !computed.is_empty()
            && self.store.is_open()
            && self
                .store
                .table()
                .all_known_match(offset / BLOCK_BYTES, &computed)
                == Some(true)
    }

    /// [`LeafChecksums::verify`] past its fast path: each block judged (writes in flight
    /// considered, bad blocks noted and counted once), the first bad one the error.
    async fn judge_read(&self, m: &dyn Member, first: u64, computed: &[u32]) -> MemberResult<()> {
        let last = first + computed.len() as u64;
        let mut bad: Vec<(u64, u32, u32)> = Vec::new();
        let mut new = Vec::new();
        self.store
            .each_page(m, first, last, |t, blocks| {
                for block in blocks {
                    let c = computed[(block - first) as usize];
                    if let (Verdict::Bad { stored, computed }, fresh) = t.judge(block, c) {
                        bad.push((block, stored, computed));
                        if fresh {
                            new.push((block, stored, computed));
                        }
                    }
                }
            })
            .await?;
        let Some(&(block, stored, computed)) = bad.first() else {
            return Ok(());
        };
        self.counters().errors.fetch_add(new.len() as u64, Relaxed);
        let member_offset = (self.first_block + block) * BLOCK_BYTES;
        for (b, s, c) in &new {
            tracing::warn!(
                "volume {}: member {} (`{}`): checksum mismatch at member offset {} (stored {s:#010x}, computed {c:#010x}); served from the redundancy where there is some",
                self.volume,
                self.index,
                m.name(),
                (self.first_block + b) * BLOCK_BYTES
            );
        }
        let why = ChecksumMismatch {
            volume: self.volume.to_string(),
            member_offset,
            stored,
            computed,
            bad_blocks: bad.len() as u64,
        };
        Err(MemberError::new(
            m.name(),
            MemberOp::Read,
            member_offset,
            BLOCK_BYTES,
            io::Error::new(io::ErrorKind::InvalidData, why),
        ))
    }

    /// Whether bytes rebuilt from the redundancy for the whole blocks from region offset
    /// `offset` match their checksums (blocks without one pass; nothing is counted).
    pub async fn matches(&self, m: &dyn Member, offset: u64, bytes: &[u8]) -> MemberResult<bool> {
        let computed = self.compute(offset, &[bytes]);
        if computed.is_empty() {
            return Ok(true);
        }
        let first = offset / BLOCK_BYTES;
        let last = first + computed.len() as u64;
        self.store.open(m).await?;
        let mut all = true;
        self.store
            .each_page(m, first, last, |t, blocks| {
                for block in blocks {
                    if let BlockSum::Known(c) = computed[(block - first) as usize] {
                        all &= !matches!(t.peek(block, c), Verdict::Bad { .. });
                    }
                }
            })
            .await?;
        Ok(all)
    }

    /// Before a write of `entries` (from [`LeafChecksums::compute`], or `Unknown` for blocks
    /// written only in part whose old bytes were bad) at region offset `offset`: the header
    /// bit durable, the entries updated with the old ones still accepted. A rewrite whose
    /// every entry equals the stored one (a read's or a scrub's repair) leaves its groups
    /// unmarked: whichever bytes a power loss leaves, the entry on disk is the right one for
    /// the new bytes, so it need not be dropped at an unclean start.
    pub async fn begin_write(
        &self,
        m: &dyn Member,
        offset: u64,
        entries: &[BlockSum],
    ) -> MemberResult<WriteToken> {
        let first = offset / BLOCK_BYTES;
        if entries.is_empty() {
            return Ok(WriteToken {
                id: None,
                first_block: first,
                blocks: 0,
            });
        }
        let last = first + entries.len() as u64;
        self.store.open(m).await?;
        // The entry comparison only matters where a group would be marked: most writes land
        // in groups already durable and skip it.
        if !self.store.groups_durable(first, last)
            && !self.stored_already(m, first, entries).await?
        {
            self.store.mark_groups(m, first, last).await?;
        }
        let pinned = self.pin_pages(m, offset, last * BLOCK_BYTES).await?;
        Ok(self.begin_write_pinned(offset, entries, pinned))
    }

    /// Whether every one of `entries` (from block `first` on) is known and the one stored.
    async fn stored_already(
        &self,
        m: &dyn Member,
        first: u64,
        entries: &[BlockSum],
    ) -> MemberResult<bool> {
        let mut same = entries.iter().all(|e| matches!(e, BlockSum::Known(_)));
        if same {
            let last = first + entries.len() as u64;
            self.store
                .each_page(m, first, last, |t, blocks| {
                    same &= blocks
                        .into_iter()
                        .all(|b| t.entry(b) == entries[(b - first) as usize]);
                })
                .await?;
        }
        Ok(same)
    }

    /// The write begun with `token` was answered (either way: a failed write fails the
    /// member). Rewrites of blocks found bad count as repairs.
    pub fn end_write(&self, token: WriteToken) {
        let Some(id) = token.id else {
            return;
        };
        let repaired = self
            .store
            .table()
            .end_write(id, token.first_block, token.blocks);
        if repaired > 0 {
            self.counters().repairs.fetch_add(repaired as u64, Relaxed);
            tracing::info!(
                "volume {}: member {}: {repaired} bad block(s) rewritten",
                self.volume,
                self.index
            );
        }
    }

    /// The write begun with `token` failed and its member is kept: what its blocks hold now
    /// is unknown (the old bytes, the new, or a mix), so their entries say "no checksum"
    /// until written again — else the old bytes would fail the new checksums, read as EIO
    /// and count as bad blocks.
    pub async fn forget_write(&self, m: &dyn Member, token: WriteToken) {
        let Some(id) = token.id else {
            return;
        };
        self.store.table().abandon_write(id);
        let (first, last) = (token.first_block, token.first_block + token.blocks);
        let r = (self.store)
            .each_page(m, first, last, |t, blocks| {
                blocks.for_each(|b| t.set_entry(b, BlockSum::Unknown));
            })
            .await;
        if let Err(e) = r {
            tracing::warn!("{e}: the checksums of a failed write's blocks could not be dropped");
        }
    }

    /// The write begun with `token` was refused before it reached the member (a read-only
    /// member's refusal, [`crate::member::MemberError::is_read_only_refusal`]): its blocks
    /// hold what they held, so their entries go back to what they were. Dropping them, as
    /// after a failed write, would serve unchecked the very bytes a refused repair was for.
    pub async fn refused_write(&self, m: &dyn Member, token: WriteToken) {
        let Some(id) = token.id else {
            return;
        };
        let olds = self.store.table().take_refused(id);
        let first = token.first_block;
        let r = (self.store)
            .each_page(m, first, first + token.blocks, |t, blocks| {
                for b in blocks {
                    let old = olds.get((b - first) as usize).copied().flatten();
                    t.set_entry(b, old.map_or(BlockSum::Unknown, BlockSum::Known));
                }
            })
            .await;
        if let Err(e) = r {
            tracing::warn!("{e}: the checksums of a refused write's blocks could not be put back");
        }
    }

    /// Writes the changed entry pages back (before the member flush that makes them
    /// durable), and after an unclean start blanks the pages of the groups it distrusts
    /// (so a clean shutdown leaves no stale entry to be trusted); returns how many pages. A
    /// page that fails to write stays dirty and the error is returned.
    pub async fn flush(&self, m: &dyn Member) -> MemberResult<usize> {
        self.store.open(m).await?;
        let blanked = self.store.blank_untrusted(m).await?;
        Ok(blanked + self.store.flush(m).await?)
    }
}
