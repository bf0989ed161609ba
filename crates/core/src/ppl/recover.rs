//! The dirty start: read every current member's log ring, replay each band's newest entry
//! (before the bitmap resync and before anything is served), then mark every ring with the
//! new life so nothing of the old one is ever replayed again, saying whether a crash of the
//! new life is covered by its log (`last_life`).

use super::codec::LOG_BLOCK_BYTES;
use super::codec::{declared_len, decode_batch, encode_marker, Batch, Cover, Entry};
use super::last_life::{last_life, LastLife};
use super::replay::{replay_sector, select, Replay, SectorState};
use super::{parity_groups, BAND_BYTES, SECTOR_BYTES};
use crate::buf::Buf;
use crate::error::VolumeResult;
use crate::member::{Member, MemberResult};
use nbraid_layout::{Node, StripeRoles};
use std::sync::Arc;

/// What the dirty start found and did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoverReport {
    /// Entries replayed (each one band of one stripe).
    pub entries: u64,
    /// Sectors whose parity was rewritten.
    pub sectors: u64,
    /// Entries that could not be used, and why (logged as warnings too).
    pub skipped: Vec<String>,
}

/// What the dirty start needs of the volume it recovers (implemented by [`crate::Volume`]):
/// the log lies below the volume and does not know it.
pub trait LogHost {
    /// Whether member `index` holds current data (neither failed nor resyncing).
    fn member_is_current(&self, index: usize) -> bool;
    /// The member serving slot `index`.
    fn member(&self, index: usize) -> Arc<dyn Member>;
    /// The volume's layout tree.
    fn root(&self) -> &Node;
    /// Marks member `index` failed.
    fn fail_member(&self, index: usize, why: &str);
}

/// Reads the log areas (`areas` by member index) of the current members; with `replay`
/// (an unclean shutdown), replays the newest entries; then marks every current member's
/// ring with `life` (block 0) saying `cover`, so none of it is replayed again and the next
/// start knows whether this life's crash is covered — even a ring that held nothing (a
/// life that does not log leaves only its marker to say so).
pub async fn recover<H: LogHost>(
    volume: &H,
    areas: &[Option<(u64, u64)>],
    (life, cover): (u64, Cover),
    replay: bool,
) -> VolumeResult<RecoverReport> {
    let mut report = RecoverReport::default();
    let mut rings: Vec<Vec<Batch>> = Vec::new();
    for (m, area) in areas.iter().enumerate() {
        let Some((offset, len)) = *area else { continue };
        if !volume.member_is_current(m) {
            continue;
        }
        match read_ring(volume.member(m).as_ref(), offset, len).await {
            Ok(batches) => rings.push(batches),
            Err(e) => tracing::warn!("member {m}: partial-parity log unreadable: {e}"),
        }
    }
    if replay && rings.iter().any(|r| !r.is_empty()) {
        let groups = parity_groups(volume.root());
        for r in select(&rings) {
            let e = &r.entry;
            match replay_band(volume, &groups, &r).await {
                Ok(n) => {
                    report.entries += 1;
                    report.sectors += n;
                }
                Err(why) => {
                    let why = format!(
                        "log entry {} (group {}, stripe {}, band {}): {why}",
                        e.seq, e.group, e.stripe, e.band
                    );
                    tracing::warn!("{why}");
                    report.skipped.push(why);
                }
            }
        }
    }
    mark(volume, areas, life, cover).await;
    Ok(report)
}

/// Writes the marker of `life` saying `cover` at block 0 of every current member's ring
/// (`areas` by member index); a member whose write fails is failed.
pub async fn mark<H: LogHost>(volume: &H, areas: &[Option<(u64, u64)>], life: u64, cover: Cover) {
    let marker = encode_marker(life, cover);
    for (m, area) in areas.iter().enumerate() {
        let Some((offset, _)) = *area else { continue };
        if !volume.member_is_current(m) {
            continue;
        }
        let mut b = Buf::zeroed(marker.len());
        b.copy_from_slice(&marker);
        if let Err(e) = volume.member(m).write(offset, b.freeze(), true).await {
            volume.fail_member(m, &format!("partial-parity log marker: {e}"));
        }
    }
}

/// A member and its log area (offset, length).
pub type Ring = (Arc<dyn Member>, (u64, u64));

/// What the rings `rings` (each a member and its log area) say of the life that marked
/// them last ([`last_life`]), before the volume is built; a ring that cannot be read says
/// nothing (its peers carry the same marker).
pub async fn last_life_of(rings: &[Ring]) -> LastLife {
    let mut found = Vec::with_capacity(rings.len());
    for (member, (offset, len)) in rings {
        match read_ring(member.as_ref(), *offset, *len).await {
            Ok(batches) => found.push(batches),
            Err(e) => tracing::warn!("{}: partial-parity log unreadable: {e}", member.name()),
        }
    }
    last_life(&found)
}

/// The ring is read in pieces of this many bytes (a batch running past a piece is read
/// whole on its own: at most half the ring, as the writer sizes them).
pub const RING_PIECE_BYTES: u64 = 1 << 20;

/// Every batch in the ring at `offset` of `len` bytes on `member`, read a piece at a time:
/// memory stays one piece and one batch whatever the ring's recorded length.
async fn read_ring(member: &dyn Member, offset: u64, len: u64) -> MemberResult<Vec<Batch>> {
    let block = LOG_BLOCK_BYTES as usize;
    let mut batches = Vec::new();
    let mut at = 0u64;
    while at < len {
        let n = RING_PIECE_BYTES.min(len - at) as usize;
        let piece = member.read(offset + at, Buf::new(n)).await?;
        let mut p = 0usize;
        while p < n {
            let rest = &piece[p..];
            let left = (len - at - p as u64) as usize;
            let found = match declared_len(rest) {
                // Starts here, ends past the piece (but inside the ring): read it alone.
                Some(blen) if blen > rest.len() && blen <= left => {
                    let whole = blen.next_multiple_of(block);
                    let b = member.read(offset + at + p as u64, Buf::new(whole)).await?;
                    decode_batch(&b)
                }
                _ => decode_batch(rest),
            };
            p += match found {
                Some((b, blen)) => {
                    batches.push(b);
                    blen.next_multiple_of(block)
                }
                None => block,
            };
        }
        at += p as u64;
    }
    Ok(batches)
}

type Groups = Vec<super::LoggedGroup>;

/// Replays a band's entry, or its fallback where the entry's one partial parity does not
/// cover the chunks missing (RAID 6: see [`select`]).
async fn replay_band<H: LogHost>(volume: &H, groups: &Groups, r: &Replay) -> Result<u64, String> {
    match (replay_entry(volume, groups, &r.entry).await, &r.fallback) {
        (Err(Why::Uncovered), Some(older)) => replay_entry(volume, groups, older).await,
        (got, _) => got,
    }
    .map_err(|why| match why {
        Why::Uncovered => "more chunks missing than the partial parity covers".into(),
        Why::Other(s) => s,
    })
}

/// Why an entry could not be replayed.
enum Why {
    Uncovered,
    Other(String),
}

impl From<&str> for Why {
    fn from(s: &str) -> Why {
        Why::Other(s.into())
    }
}

/// Replays one entry; the number of sectors rewritten, or why it cannot be used.
async fn replay_entry<H: LogHost>(volume: &H, groups: &Groups, e: &Entry) -> Result<u64, Why> {
    let (g, leaves) = groups
        .get(e.group as usize)
        .ok_or("no such parity group in this volume")?;
    let leaves = leaves.as_ref().ok_or("the group is not logged")?;
    let b0 = u64::from(e.band) * BAND_BYTES;
    let len = u64::from(e.sectors) * SECTOR_BYTES as u64;
    if e.masks.len() != g.data_chunks()
        || usize::from(e.parity) != g.parity()
        || e.stripe >= g.stripes()
        || b0 + len > g.strip()
    {
        return Err("does not fit the volume's geometry".into());
    }
    let roles = g.roles(e.stripe);
    let at = g.chunk_offset(e.stripe) + b0;
    let band = BandBytes::read(volume, leaves, &roles, at, len).await;
    let replayed = replay_band_sectors(e, &band, &roles)?;
    let targets = [
        (roles.p, replayed.p),
        (roles.q.unwrap_or(usize::MAX), replayed.q),
    ];
    for (c, bytes) in targets {
        let Some(bytes) = bytes else { continue };
        let (m, start) = leaves[c];
        let mut b = Buf::zeroed(bytes.len());
        b.copy_from_slice(&bytes);
        volume
            .member(m)
            .write(start + at, b.freeze(), true)
            .await
            .map_err(|err| {
                Why::Other(format!("writing the replayed parity to member {m}: {err}"))
            })?;
    }
    Ok(replayed.sectors)
}

/// One band of a stripe as its members hold it: each data chunk's, P's and Q's bytes
/// (`None`: the child's member is not current, or the read failed).
struct BandBytes {
    data: Vec<Option<Buf>>,
    p: Option<Buf>,
    q: Option<Buf>,
}

impl BandBytes {
    /// The `len` bytes at `at` of every child of a stripe with `roles` (children on member
    /// regions `leaves`).
    async fn read<H: LogHost>(
        volume: &H,
        leaves: &[(usize, u64)],
        roles: &StripeRoles,
        at: u64,
        len: u64,
    ) -> BandBytes {
        let read = |c: usize| async move {
            let (m, start) = leaves[c];
            if !volume.member_is_current(m) {
                return None;
            }
            let member = volume.member(m);
            member.read(start + at, Buf::new(len as usize)).await.ok()
        };
        let mut data = Vec::with_capacity(roles.data.len());
        for &c in &roles.data {
            data.push(read(c).await);
        }
        let p = read(roles.p).await;
        let q = match roles.q {
            Some(c) => read(c).await,
            None => None,
        };
        BandBytes { data, p, q }
    }
}

/// The parity entry `e` makes consistent over `band`'s bytes (pure), or [`Why::Uncovered`]
/// when a sector misses more chunks than its partial parity covers.
fn replay_band_sectors(e: &Entry, band: &BandBytes, roles: &StripeRoles) -> Result<Replayed, Why> {
    // A partial's sector: stored ones in order, zero where every chunk is written.
    fn sector(v: &Option<Vec<u8>>, stored: bool, si: usize) -> Option<&[u8]> {
        static ZERO: [u8; SECTOR_BYTES] = [0; SECTOR_BYTES];
        let v = v.as_deref()?;
        Some(match stored {
            true => &v[si * SECTOR_BYTES..(si + 1) * SECTOR_BYTES],
            false => &ZERO,
        })
    }
    fn within<'a>(b: &'a Option<Buf>, r: &std::ops::Range<usize>) -> Option<&'a [u8]> {
        b.as_ref().map(|b| &b[r.clone()])
    }
    let stored = e.stored();
    let mut out_p = band.p.as_ref().map(|b| b.to_vec());
    let mut out_q = band.q.as_ref().map(|b| b.to_vec());
    let (mut n, mut si) = (0u64, 0usize);
    for x in 0..usize::from(e.sectors) {
        let bit = 1u8 << x;
        if e.covered() & bit == 0 {
            continue;
        }
        let r = x * SECTOR_BYTES..(x + 1) * SECTOR_BYTES;
        let here = stored & bit != 0;
        let (pp, pq) = (sector(&e.pp, here, si), sector(&e.pq, here, si));
        si += usize::from(here);
        let written: Vec<bool> = e.masks.iter().map(|m| m & bit != 0).collect();
        let st = SectorState {
            data: band.data.iter().map(|d| within(d, &r)).collect(),
            p: within(&band.p, &r),
            q: within(&band.q, &r),
            raid6: e.parity == 2,
            q_slot: &roles.q_slot,
        };
        let (np, nq) = replay_sector(&st, &written, pp, pq).ok_or(Why::Uncovered)?;
        if let Some(o) = out_p.as_mut() {
            o[r.clone()].copy_from_slice(&np);
        }
        if let (Some(o), Some(nq)) = (out_q.as_mut(), nq) {
            o[r].copy_from_slice(&nq);
        }
        n += 1;
    }
    Ok(Replayed {
        sectors: n,
        p: out_p,
        q: out_q,
    })
}

/// A band's parity made consistent by an entry ([`replay_band_sectors`]).
struct Replayed {
    sectors: u64,
    /// The band's new P and Q (`None` where the member is not current).
    p: Option<Vec<u8>>,
    q: Option<Vec<u8>>,
}
