//! The areas a volume keeps beside its regions — the write-intent bitmap, the partial-parity
//! log, the block checksums — for the shape a reshape leads to. Decided and written by the
//! reshape's start, with the volume quiet and flushed, and recorded by the start's commit on
//! each member (the same record write that says a reshape runs, so a member has either its
//! old areas and no reshape, or its new areas and the reshape):
//!
//! - **The added members get all three**, where their peers keep them: in the metadata area
//!   at the peers' offset (first fit when that place is taken), or at the peers' distance
//!   from the region (the config's reserves). Refused, naming the member, where there is no
//!   room. Before this they carried none: every parity group spanning an added member ran
//!   without the log after the reshape, silently, and the bitmap vanished whenever the
//!   next open read an added member's record as the newest.
//! - **The log is sized for the new shape** (a larger strip or a wider stripe may need a
//!   larger ring; a RAID 1 becoming RAID 5 had no log at all) and **cleared on every member**:
//!   the rings hold only entries of writes the start's flush made durable, and none of them
//!   may ever be replayed against the new shape. Where some member has no room for the new
//!   ring (large strips: RAID 6's ring of 128 KiB strips is ~0.5 MiB, of 256 KiB ~1 MiB, and
//!   the old members' regions cannot move to make a reserve), no member records a log: the
//!   start says so, and every open after it warns that the write hole is open — never a
//!   shape that logs some groups and silently not others.
//! - **The bitmap grows with the volume**: a member whose area cannot hold a bit per chunk
//!   of the grown capacity gets a larger area holding the bits the members hold now (the
//!   next open would otherwise refuse the volume).

use super::areas::{free_area_avoiding, overlaps_recorded, region_of};
use super::error::ArrayError;
use super::intent;
use super::member_meta::MemberMeta;
use super::parts::Parts;
use super::{Area, BitmapArea, Superblock, METADATA_AREA_BYTES};
use crate::buf::Buf;
use crate::member::Member;
use nbraid_layout::Node;
use std::sync::Arc;

/// One role's areas in the new shape, as its record will say.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct RoleAreas {
    pub(super) bitmap: Option<BitmapArea>,
    pub(super) ppl: Option<Area>,
    pub(super) checksums: Option<Area>,
}

/// Every role's areas in `new_tree` (`metas` by role, the added ones from `old_roles` on),
/// placed, cleared or written; `backups`: the reshape's backup areas by role (avoided).
pub(super) async fn for_new_shape(
    p: Parts<'_>,
    new_tree: &Node,
    metas: &[Arc<MemberMeta>],
    old_roles: usize,
    backups: &[Option<Area>],
) -> Result<Vec<RoleAreas>, ArrayError> {
    let mut held = Vec::with_capacity(metas.len());
    for m in metas {
        held.push(m.sb.lock().await.clone());
    }
    let current: Vec<RoleAreas> = (held.iter().take(old_roles))
        .map(|sb| recorded(sb.as_ref(), p.name()))
        .collect();
    let peer = PeerPlaces::of(p.volume.geometry().root(), &current);
    let shape = NewShape {
        name: p.name(),
        old_tree: p.volume.geometry().root(),
        new_tree,
        held: held.iter().map(Option::as_ref).collect(),
        member_bytes: metas.iter().map(|m| m.member().len()).collect(),
        names: metas.iter().map(|m| m.member().name()).collect(),
        old_roles,
    };
    let logs = new_shape_logs(&shape, backups, p.ppl.enabled());
    let image = match p.bitmap {
        Some(b) => Some(bitmap_image(p, &current, b.intent().chunk_bytes()).await),
        None => None,
    };
    let mut out = Vec::with_capacity(metas.len());
    for (role, meta) in metas.iter().enumerate() {
        let member = meta.member();
        let refuse = |what: String| p.refuse(format!("`{}`: {what}", member.name()));
        let mut at = shape
            .placing(role, backups)
            .ok_or_else(|| refuse("no region".into()))?;
        // The log was placed first on this member (`new_shape_logs`).
        at.avoid.extend(logs[role].clone().ok().flatten());
        let now = current.get(role).copied().unwrap_or_default();
        let checksums = match now.checksums {
            Some(a) => Some(grown_checksum_area(&mut at, member.as_ref(), a).await)
                .transpose()
                .map_err(refuse)?,
            None if role < old_roles => None,
            None => checksum_area(p, &mut at, member.as_ref(), peer.checksums)
                .await
                .map_err(refuse)?,
        };
        let bitmap = match (&image, now.bitmap) {
            (None, _) => None,
            (Some((chunk_bytes, image)), now) => {
                let grown = (new_tree.capacity(), *chunk_bytes);
                Some(bitmap_area(&mut at, member.as_ref(), now, grown, image).await)
                    .transpose()
                    .map_err(refuse)?
            }
        };
        out.push(RoleAreas {
            bitmap,
            ppl: None,
            checksums,
        });
    }
    let logs = match logs.into_iter().collect::<Result<Vec<_>, String>>() {
        Ok(logs) => logs,
        Err(why) => {
            tracing::warn!(
                "volume `{}`: the reshape goes on, but its new shape will run without the partial-parity log (the RAID 5/6 write hole stays open after it): {why}",
                p.name()
            );
            return Ok(out);
        }
    };
    for ((areas, log), meta) in out.iter_mut().zip(logs).zip(metas) {
        areas.ppl = log;
        if let Some(a) = areas.ppl {
            let clear = super::ppl_area::clear(meta.member().as_ref(), a).await;
            clear.map_err(|e| p.refuse(format!("`{}`: {e}", meta.member().name())))?;
        }
    }
    Ok(out)
}

/// A volume about to change shape, by role (the added roles from `old_roles` on), as its
/// members' superblocks record it: what the start's placing decisions read.
pub struct NewShape<'a> {
    pub name: &'a str,
    pub old_tree: &'a Node,
    /// Leaves numbered by role, the added ones after the old ones.
    pub new_tree: &'a Node,
    /// Each role's member's superblock (`None`: blank).
    pub held: Vec<Option<&'a Superblock>>,
    pub member_bytes: Vec<u64>,
    /// How refusals name each role's member.
    pub names: Vec<&'a str>,
    pub old_roles: usize,
}

impl NewShape<'_> {
    /// Role `role`'s member being given its areas, its backup (of `backups`) avoided;
    /// `None` when the role has no region in the new tree.
    fn placing(&self, role: usize, backups: &[Option<Area>]) -> Option<Placing<'_>> {
        Some(Placing {
            held: self.held.get(role).copied().flatten(),
            region: region_of(self.new_tree, role)?,
            member_bytes: self.member_bytes.get(role).copied().unwrap_or(0),
            avoid: backups.get(role).copied().flatten().into_iter().collect(),
        })
    }
}

/// Each role's log area in the new shape ([`log_area`]; `ppl`: the volume keeps its log),
/// placed before any other of its areas, beside `backups`; `Err` why a role has no room (then
/// no role records a log: see the module docs). Pure: the reshape's start and `nbraid apply`'s
/// plan decide alike.
pub(super) fn new_shape_logs(
    shape: &NewShape<'_>,
    backups: &[Option<Area>],
    ppl: bool,
) -> Vec<Result<Option<Area>, String>> {
    let current: Vec<RoleAreas> = (shape.held.iter().take(shape.old_roles))
        .map(|sb| recorded(*sb, shape.name))
        .collect();
    let peer = PeerPlaces::of(shape.old_tree, &current);
    (0..shape.held.len())
        .map(|role| {
            let name = shape.names.get(role).copied().unwrap_or("?");
            let mut at = shape
                .placing(role, backups)
                .ok_or_else(|| format!("`{name}`: no region"))?;
            let now = current.get(role).copied().unwrap_or_default();
            log_area(shape.new_tree, ppl, &mut at, now.ppl, peer.ppl)
                .map_err(|why| format!("`{name}`: {why}"))
        })
        .collect()
}

/// Role's areas as `sb` records them for volume `name`.
fn recorded(sb: Option<&Superblock>, name: &str) -> RoleAreas {
    let v = sb.and_then(|sb| sb.volumes.iter().find(|v| v.name == name));
    v.map_or_else(RoleAreas::default, |v| RoleAreas {
        bitmap: v.bitmap,
        ppl: v.ppl,
        checksums: v.checksums,
    })
}

/// Where the old roles keep the log and the checksums: the first old role's area and its
/// region's start in the old tree (every member of a volume gets the same place).
#[derive(Clone, Copy, Default)]
struct PeerPlaces {
    ppl: Option<(Area, u64)>,
    checksums: Option<(Area, u64)>,
}

impl PeerPlaces {
    fn of(old_tree: &Node, current: &[RoleAreas]) -> PeerPlaces {
        let first = |pick: fn(&RoleAreas) -> Option<Area>| {
            current.iter().enumerate().find_map(|(role, a)| {
                let area = pick(a)?;
                Some((area, region_of(old_tree, role)?.0))
            })
        };
        PeerPlaces {
            ppl: first(|a| a.ppl),
            checksums: first(|a| a.checksums),
        }
    }
}

/// One member being given its areas: what it holds, where its region will be, and the
/// areas of this volume placed on it so far (plus its reshape backup).
struct Placing<'a> {
    held: Option<&'a Superblock>,
    region: (u64, u64),
    member_bytes: u64,
    avoid: Vec<Area>,
}

impl Placing<'_> {
    /// `area` as the place the member keeps it at: past nothing, over no record's area or
    /// region and none placed here, outside the new region. Taken into `avoid` when free.
    fn take(&mut self, area: Area) -> bool {
        let free = is_free(area, self.held, self.region, self.member_bytes, &self.avoid);
        if free {
            self.avoid.push(area);
        }
        free
    }

    /// The first free `len` bytes of the metadata area, taken.
    fn first_fit(&mut self, len: u64) -> Option<Area> {
        let offset = free_area_avoiding(self.held, len, &self.avoid)?;
        let area = Area { offset, len };
        self.avoid.push(area);
        Some(area)
    }

    /// Where a peer keeps `peer` beside its region starting at `peer_region_start`: the same
    /// offset in the metadata area, or the same distance from this member's region; `len`
    /// bytes there. `None` when that place is not free.
    fn like_peer(&mut self, (peer, peer_region_start): (Area, u64), len: u64) -> Option<Area> {
        let offset = if peer.offset + peer.len <= METADATA_AREA_BYTES {
            peer.offset
        } else {
            let from_region = peer.offset.checked_sub(peer_region_start);
            match from_region {
                Some(after) => self.region.0.checked_add(after)?,
                None => self.region.0.checked_sub(peer_region_start - peer.offset)?,
            }
        };
        let area = Area { offset, len };
        self.take(area).then_some(area)
    }
}

/// Whether `area` lies in a member of `member_bytes`, on 4 KiB blocks, outside the new
/// `region`, the metadata area's superblocks, every area and region `held` records and
/// `avoid`. Pure.
fn is_free(
    area: Area,
    held: Option<&Superblock>,
    region: (u64, u64),
    member_bytes: u64,
    avoid: &[Area],
) -> bool {
    let end = area.offset.saturating_add(area.len);
    let meets = |o: u64, l: u64| o < end && area.offset < o.saturating_add(l);
    let regions_held = held
        .into_iter()
        .flat_map(|sb| &sb.volumes)
        .any(|v| region_of(&v.tree, v.role as usize).is_some_and(|(s, l)| meets(s, l)));
    area.len > 0
        && area.offset.is_multiple_of(4096)
        && area.offset >= 2 * super::SLOT_BYTES
        && end <= member_bytes
        && !meets(region.0, region.1)
        && !overlaps_recorded(held, area)
        && !regions_held
        && !avoid.iter().any(|a| meets(a.offset, a.len))
}

/// The role's log area for the new shape: `None` without a log (switched off, or nothing to
/// log in the new tree). An area the role has that holds the new shape's ring stays; an
/// added role takes its peers' place; else the first fit in the metadata area.
fn log_area(
    new_tree: &Node,
    ppl: bool,
    at: &mut Placing<'_>,
    now: Option<Area>,
    peer: Option<(Area, u64)>,
) -> Result<Option<Area>, String> {
    let (Some(want), Some(least)) = (
        crate::ppl::area_bytes(new_tree),
        nbraid_layout::volume_log_ring_bytes(new_tree),
    ) else {
        return Ok(now);
    };
    if !ppl {
        return Ok(now);
    }
    if let Some(a) = now.filter(|a| a.len >= least) {
        return Ok(Some(a));
    }
    let peer = peer.filter(|(a, _)| a.len >= least);
    if let Some(a) = peer.and_then(|peer| at.like_peer(peer, peer.0.len)) {
        return Ok(Some(a));
    }
    (at.first_fit(want).or_else(|| at.first_fit(least)))
        .map(Some)
        .ok_or_else(|| {
            format!(
                "the new shape's partial-parity log needs {least} bytes per member and the {METADATA_AREA_BYTES}-byte metadata area has no such room left (its superblocks, bitmap, the reshape's backup and other volumes' areas)"
            )
        })
}

/// An added role's checksum area: at its peers' place, sized for its region, cleared (every
/// block starts "no checksum"; the reshape's copy writes each one's entry). `None` when the
/// volume keeps no checksums.
async fn checksum_area(
    p: Parts<'_>,
    at: &mut Placing<'_>,
    member: &dyn Member,
    peer: Option<(Area, u64)>,
) -> Result<Option<Area>, String> {
    if p.volume.options().checksums.is_none() {
        return Ok(None);
    }
    let len = crate::checksum::area_bytes(at.region.1);
    let Some(area) = peer.and_then(|peer| at.like_peer(peer, len)) else {
        return Err(format!(
            "no room for the {len}-byte block-checksum area its region needs where the other members keep theirs"
        ));
    };
    (member.write_zeroes(area.offset, area.len).await).map_err(|e| e.to_string())?;
    Ok(Some(area))
}

/// An old role's checksum area for its region in the new shape: the same area while it
/// covers the region (a restripe keeps every region), else — the region grew in place —
/// extended at its end over free bytes, the new entries cleared ("no checksum": the pass's
/// sync of the grown space writes them); where the bytes after it are taken (a reserve sized
/// for the old region, with the log's reserve right after it), **moved** right after the
/// grown region (the config leaves that room: see `nbraid_config::pins`): the old entries
/// copied, the rest cleared, flushed before the start's commit names it. Refused, naming the
/// bytes, where neither place is free: the region is never moved. The header stays: the
/// start's flush made every entry durable, so no bit there still names lagging entries.
async fn grown_checksum_area(
    at: &mut Placing<'_>,
    member: &dyn Member,
    now: Area,
) -> Result<Area, String> {
    let need = crate::checksum::area_bytes(at.region.1);
    let (start, len) = at.region;
    let in_region = now.offset < start + len && start < now.offset + now.len;
    // An area after the old region (moved there by an earlier grow, or placed there by
    // `checksums = "enable"`) that the grown region now covers must move, whatever its size.
    if now.len >= need && !in_region {
        return Ok(now);
    }
    let more = Area {
        offset: now.offset + now.len,
        len: need.saturating_sub(now.len),
    };
    if !in_region && at.take(more) {
        (member.write_zeroes(more.offset, more.len).await).map_err(|e| e.to_string())?;
        return Ok(Area {
            offset: now.offset,
            len: need,
        });
    }
    // Never over the old area: the records name it until the start's commit, so a power
    // loss mid-copy must find it whole. A grown end inside it puts the new one past it.
    let past_old = (now.offset + now.len).next_multiple_of(4096);
    let after = Area {
        offset: if in_region {
            (start + len).max(past_old)
        } else {
            start + len
        },
        len: need.max(now.len),
    };
    if !at.take(after) {
        return Err(format!(
            "the block-checksum area (bytes {}..{}) cannot grow to the {need} bytes the grown region of {len} bytes needs: bytes {}..{} after it are taken or inside the region (the checksum reserve before the region was sized for the old region, about 510 MiB of region per MiB), and so are bytes {}..{} right after the grown region, where it would move: the region is never moved, so this volume does not grow in place by that much",
            now.offset,
            now.offset + now.len,
            more.offset,
            more.offset + more.len,
            after.offset,
            after.offset + after.len,
        ));
    }
    moved_checksum_area(member, now, after)
        .await
        .map_err(|e| e.to_string())?;
    Ok(after)
}

/// Copies checksum area `from` (header and entries) to the start of `to`, clears the rest of
/// `to`, and flushes, in pieces of at most 4 MiB: the records may name `to` after this.
async fn moved_checksum_area(
    member: &dyn Member,
    from: Area,
    to: Area,
) -> Result<(), crate::member::MemberError> {
    const PIECE_BYTES: u64 = 4 << 20;
    assert!(to.len >= from.len, "an area moves to a larger one");
    let mut done = 0;
    while done < from.len {
        let len = PIECE_BYTES.min(from.len - done);
        let bytes = member
            .read(from.offset + done, Buf::new(len as usize))
            .await?;
        member
            .write(to.offset + done, bytes.freeze(), false)
            .await?;
        done += len;
    }
    member
        .write_zeroes(to.offset + from.len, to.len - from.len)
        .await?;
    member.flush().await
}

/// The bits the old roles' bitmap areas hold now (their union, as an open reads them), with
/// the chunk: the start's flush made every write they cover durable, and a resync still due
/// must keep its bits.
async fn bitmap_image(p: Parts<'_>, current: &[RoleAreas], chunk_bytes: u64) -> (u64, Vec<u8>) {
    let mut union: Vec<u8> = Vec::new();
    for (role, areas) in current.iter().enumerate() {
        let Some(b) = areas.bitmap else { continue };
        if !p.volume.member_is_current(role) {
            continue;
        }
        let member = p.volume.member(role);
        if let Ok(bytes) = member
            .read(b.area.offset, Buf::new(b.area.len as usize))
            .await
        {
            union.resize(union.len().max(bytes.len()), 0);
            union
                .iter_mut()
                .zip(bytes.iter())
                .for_each(|(u, b)| *u |= b);
        }
    }
    (chunk_bytes, union)
}

/// The role's bitmap area for the grown capacity: its own when it holds a bit per chunk of
/// it, else a new one (first fit) holding `image` (bits of `chunk_bytes` each) in the
/// grown geometry ([`grown_bitmap`]).
async fn bitmap_area(
    at: &mut Placing<'_>,
    member: &dyn Member,
    now: Option<BitmapArea>,
    (capacity, chunk_bytes): (u64, u64),
    image: &[u8],
) -> Result<BitmapArea, String> {
    let (len, chunk) = grown_bitmap(capacity, chunk_bytes);
    if let Some(b) = now.filter(|b| b.area.len >= len && b.chunk_bytes == chunk) {
        return Ok(b);
    }
    let area = at.first_fit(len).ok_or_else(|| {
        format!("no room for a {len}-byte write-intent bitmap in the metadata area")
    })?;
    let folded = fold_bits(image, chunk / chunk_bytes);
    let mut bytes = Buf::zeroed(len as usize);
    let n = folded.len().min(bytes.len());
    bytes[..n].copy_from_slice(&folded[..n]);
    (member.write(area.offset, bytes.freeze(), true).await).map_err(|e| e.to_string())?;
    Ok(BitmapArea {
        area,
        chunk_bytes: chunk,
    })
}

/// The bitmap of a volume grown to `capacity` that had `chunk_bytes` per bit: (area bytes,
/// bytes per bit). The chunk doubles while the bitmap would pass [`intent::MAX_BITMAP_BYTES`]
/// (the records refuse a larger one), as at create. Pure.
fn grown_bitmap(capacity: u64, chunk_bytes: u64) -> (u64, u64) {
    let chunk = intent::chunk_for(capacity, chunk_bytes);
    (intent::area_bytes(capacity, chunk), chunk)
}

/// `image` with every `factor` consecutive bits ORed into one (a power of two: the chunk
/// grew by it), so a region set before stays set in the coarser bitmap. Pure.
fn fold_bits(image: &[u8], factor: u64) -> Vec<u8> {
    assert!(factor.is_power_of_two(), "chunks grow by doubling");
    if factor == 1 {
        return image.to_vec();
    }
    let bits = image.len() as u64 * 8;
    let mut out = vec![0u8; bits.div_ceil(factor).div_ceil(8) as usize];
    let set = (0..bits).filter(|&i| image[(i / 8) as usize] & (1 << (i % 8)) != 0);
    for i in set {
        let j = i / factor;
        out[(j / 8) as usize] |= 1 << (j % 8);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::{Uuid, VolumeRecord};

    const MIB: u64 = 1 << 20;

    /// A member holding another volume `w` with its log at `ppl` and its region at `region`.
    fn holding(ppl: Area, region: (u64, u64)) -> Superblock {
        Superblock {
            generation: 1,
            member: Uuid([1; 16]),
            member_bytes: 64 * MIB,
            volumes: vec![VolumeRecord {
                array: Uuid([2; 16]),
                name: "w".into(),
                events: 1,
                clean: true,
                role: 0,
                members: Vec::new(),
                tree: Node::member(0, region.0, region.1),
                bitmap: None,
                ppl: Some(ppl),
                checksums: None,
                scrub: None,
                added_paths: Vec::new(),
                reshape: None,
                checksum_fill: None,
                replacements: Vec::new(),
                block_size: None,
            }],
        }
    }

    fn placing(held: Option<&Superblock>, region: (u64, u64)) -> Placing<'_> {
        Placing {
            held,
            region,
            member_bytes: 64 * MIB,
            avoid: Vec::new(),
        }
    }

    #[test]
    fn an_added_member_takes_its_peers_place_in_the_metadata_area_when_free() {
        let peer = (
            Area {
                offset: 256 << 10,
                len: 256 << 10,
            },
            MIB,
        );
        let mut blank = placing(None, (MIB, 8 * MIB));
        assert_eq!(blank.like_peer(peer, 256 << 10), Some(peer.0));
        assert_eq!(blank.like_peer(peer, 256 << 10), None, "taken by the first");
        let theirs = Area {
            offset: 384 << 10,
            len: 4096,
        };
        let other = holding(theirs, (40 * MIB, MIB));
        let mut taken = placing(Some(&other), (MIB, 8 * MIB));
        assert_eq!(
            taken.like_peer(peer, 256 << 10),
            None,
            "another volume's log is there"
        );
        let fit = taken.first_fit(256 << 10).expect("first fit");
        let meets = fit.offset < theirs.offset + theirs.len && theirs.offset < fit.offset + fit.len;
        assert!(
            !meets && fit.offset + fit.len <= METADATA_AREA_BYTES,
            "{fit:?}"
        );
    }

    #[test]
    fn a_reserve_keeps_its_distance_from_the_region() {
        // The peers keep the log in the MiB before a region at 3 MiB; the added member's
        // region starts at 5 MiB.
        let peer = (
            Area {
                offset: 2 * MIB,
                len: MIB,
            },
            3 * MIB,
        );
        let mut at = placing(None, (5 * MIB, 8 * MIB));
        assert_eq!(
            at.like_peer(peer, MIB),
            Some(Area {
                offset: 4 * MIB,
                len: MIB
            })
        );
        // After the region: the same distance past its start.
        let after = (
            Area {
                offset: 12 * MIB,
                len: MIB,
            },
            3 * MIB,
        );
        let mut at = placing(None, (5 * MIB, 8 * MIB));
        assert_eq!(
            at.like_peer(after, MIB),
            Some(Area {
                offset: 14 * MIB,
                len: MIB
            })
        );
        // Over another volume's region on the member: refused.
        let other = holding(
            Area {
                offset: 128 << 10,
                len: 4096,
            },
            (4 * MIB, MIB),
        );
        let mut at = placing(Some(&other), (5 * MIB, 8 * MIB));
        assert_eq!(at.like_peer(peer, MIB), None);
    }

    #[test]
    fn a_grown_bitmap_keeps_its_chunk_until_it_would_pass_the_largest_area() {
        let max = intent::MAX_BITMAP_BYTES;
        // 128 MiB at 4 KiB a bit: one block; grown to 192 MiB: two, same chunk.
        assert_eq!(grown_bitmap(192 * MIB, 4096), (8192, 4096));
        // Already at the largest bitmap: 1.5 times the volume doubles the chunk.
        let full = max * 8 * 4096;
        assert_eq!(grown_bitmap(full, 4096), (max, 4096));
        let (len, chunk) = grown_bitmap(full / 2 * 3, 4096);
        assert_eq!(chunk, 8192);
        assert!(len <= max && len * 8 * chunk >= full / 2 * 3);
    }

    #[test]
    fn folding_keeps_every_set_region_set() {
        // Bits 0, 9 and 15 set; by 2: regions 0, 4 and 7; by 8: regions 0 and 1.
        let image = [0b0000_0001, 0b1000_0010];
        assert_eq!(fold_bits(&image, 1), image.to_vec());
        assert_eq!(fold_bits(&image, 2), vec![0b1001_0001]);
        assert_eq!(fold_bits(&image, 8), vec![0b0000_0011]);
        assert_eq!(fold_bits(&[0, 0, 0, 0], 4), vec![0]);
    }

    #[test]
    fn a_free_place_is_whole_blocks_inside_the_member_and_outside_everything_used() {
        let region = (4 * MIB, 8 * MIB);
        let free = |offset, len| is_free(Area { offset, len }, None, region, 64 * MIB, &[]);
        assert!(free(2 * MIB, MIB));
        assert!(!free(2 * MIB + 1, 4096), "not on a 4 KiB block");
        assert!(!free(0, 4096), "the superblock copies");
        assert!(!free(3 * MIB, 2 * MIB), "into the new region");
        assert!(!free(63 * MIB, 2 * MIB), "past the member's end");
        assert!(!free(2 * MIB, 0), "empty");
        let avoid = [Area {
            offset: 2 * MIB,
            len: 4096,
        }];
        assert!(!is_free(
            Area {
                offset: 2 * MIB,
                len: MIB
            },
            None,
            region,
            64 * MIB,
            &avoid
        ));
    }
}
