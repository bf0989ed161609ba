//! A reshape on an array: the records and backup areas behind the engine's hooks
//! ([`crate::reshape::ReshapeHooks`]), starting one, and picking one up after a restart.
//!
//! - **Starting** ([`start`]) is one commit (event counter +1), written with the volume
//!   quiet and flushed to every added member (its role after the old ones, the old tree,
//!   the reshape at position 0), then to the old members (the added members listed, the
//!   reshape). Each role gets a backup area in its metadata area, placed first-fit like the
//!   bitmap and the log (`areas.rs`). The volume is then opened again (`Array::open` with the
//!   new tree as the config). A power loss mid-way leaves old members one event behind with
//!   no reshape record: assembly takes them as current (`reshape::missed_only_the_start`) and
//!   [`restore`] places their backup areas again where the start placed them.
//! - **The backup** of a window: each member keeps its own rows at risk in its own area,
//!   behind a 4 KiB header (magic, the window, the rows' place and length, their CRC-32C),
//!   written and flushed before the records say the backup holds the window. A member that
//!   fails is failed (its rows are not needed: its role is then degraded in both trees).
//! - **The checkpoint** records the position on every member, as every state change is.
//! - **After a restart** whose records name a backed-up window, the rows are read back,
//!   checked against the header (a member whose copy fails its check is failed, never
//!   written back with bytes it cannot prove), and written over the members; the pass then
//!   copies the window again.

use super::areas::free_area;
use super::error::ArrayError;
use super::member_meta::MemberMeta;
use super::parts::Parts;
use super::reshape::{BackupWindow, RecordedReshape, ReshapeRecord};
use super::{Area, MemberEntry, RecordedState, Uuid, VolumeRecord};
use crate::buf::Buf;
use crate::error::{VolumeError, VolumeResult};
use crate::pass::{PassControl, PassState};
use crate::reshape::{MemberRows, ReshapeHooks, ReshapeNode};
use futures::future::BoxFuture;
use futures::FutureExt;
use nbraid_layout::{Node, Reshape, Window, WindowRule};
use std::sync::Arc;

/// The header before a member's backed-up rows.
const HEADER_BYTES: u64 = 4096;
const BACKUP_MAGIC: &[u8; 8] = b"NBRSHBK1";
/// The backup area a role gets unless one window's rows need more.
const BACKUP_AREA_BYTES: u64 = 256 << 10;
/// The longest window the pass copies unless told otherwise.
pub(super) const MAX_WINDOW_BYTES: u64 = 8 << 20;

/// The header of `row`'s backup for `window`.
fn encode_header(window: Window, row: &MemberRows) -> Vec<u8> {
    let mut h = Vec::with_capacity(HEADER_BYTES as usize);
    h.extend_from_slice(BACKUP_MAGIC);
    for v in [window.start, window.len, row.offset, row.bytes.len() as u64] {
        h.extend_from_slice(&v.to_le_bytes());
    }
    h.extend_from_slice(&super::codec::crc32c(&row.bytes).to_le_bytes());
    h.resize(HEADER_BYTES as usize, 0);
    h
}

/// Whether `header` is the backup of `bytes` at member offset `offset` for `window`.
fn check_backup(header: &[u8], window: BackupWindow, offset: u64, bytes: &[u8]) -> bool {
    let mut expect = Vec::new();
    expect.extend_from_slice(BACKUP_MAGIC);
    for v in [
        window.start_bytes,
        window.len_bytes,
        offset,
        bytes.len() as u64,
    ] {
        expect.extend_from_slice(&v.to_le_bytes());
    }
    expect.extend_from_slice(&super::codec::crc32c(bytes).to_le_bytes());
    header.get(..expect.len()) == Some(&expect[..])
}

/// The longest window (whole units, at most `max_bytes` but at least one unit) whose backed-up rows fit
/// `area_bytes` on every member, checked on the first windows (where growth backs up, and
/// the same rows per window where the data members stay as many); `None` when not even one
/// unit fits. The backup hook refuses a window that would not fit, loudly.
pub(super) fn window_fitting(layout: &Reshape, area_bytes: u64, max_bytes: u64) -> Option<u64> {
    let room = area_bytes.checked_sub(HEADER_BYTES)?;
    let fits = |len: u64| {
        let mut at = 0;
        for _ in 0..4 {
            let Ok(Some(w)) = layout.window(at, len) else {
                return true;
            };
            if w.len < len.min(layout.capacity() - at) {
                return false; // a shorter window than asked: the pass's windows must be whole
            }
            if w.rule == WindowRule::Backup {
                let rows = layout.rows_at_risk(w).unwrap_or_default();
                if rows.iter().any(|r| r.len > room) {
                    return false;
                }
            }
            at += w.len;
        }
        true
    };
    let unit = layout.unit();
    if !fits(unit) {
        return None;
    }
    let mut len = unit;
    while len * 2 <= max_bytes && fits(len * 2) {
        len *= 2;
    }
    Some(len)
}

/// The records and backup areas behind the engine's copy.
pub(super) struct ArrayHooks<'a> {
    pub(super) parts: Parts<'a>,
}

impl ArrayHooks<'_> {
    async fn write_rows(&self, window: Window, rows: &[MemberRows]) -> VolumeResult<()> {
        let p = self.parts;
        let areas = match &p.records.lock().await.reshape {
            Some(r) => r.areas.clone(),
            None => return Err(unavailable("the records hold no reshape")),
        };
        for row in rows {
            let Some(meta) = p.records.meta(row.member) else {
                continue;
            };
            let area = areas.get(row.member).copied().flatten();
            let Some(area) = area.filter(|a| a.len >= HEADER_BYTES + row.bytes.len() as u64) else {
                return Err(unavailable(&format!(
                    "role {}: {} bytes of rows at risk do not fit its backup area {area:?}",
                    row.member,
                    row.bytes.len()
                )));
            };
            let mut bytes = encode_header(window, row);
            bytes.extend_from_slice(&row.bytes);
            let m = meta.member();
            let written = async {
                m.write(area.offset, Buf::copy_from(&bytes).freeze(), false)
                    .await?;
                m.flush().await
            };
            if let Err(e) = written.await {
                p.volume
                    .fail_member(row.member, &format!("reshape backup write failed: {e}"));
            }
        }
        Ok(())
    }
}

fn unavailable(reason: &str) -> VolumeError {
    VolumeError::Unavailable {
        reason: format!("reshape: {reason}"),
    }
}

impl ReshapeHooks for ArrayHooks<'_> {
    fn backup<'a>(
        &'a self,
        window: Window,
        rows: &'a [MemberRows],
    ) -> BoxFuture<'a, VolumeResult<()>> {
        async move {
            self.write_rows(window, rows).await?;
            let records = self.parts.records;
            let mut rec = records.lock().await;
            let r = rec.reshape.as_mut().expect("checked in write_rows");
            r.backup_window = Some(BackupWindow {
                start_bytes: window.start,
                len_bytes: window.len,
            });
            records.commit(&mut rec).await
        }
        .boxed()
    }

    fn checkpoint(&self, position: u64) -> BoxFuture<'_, VolumeResult<()>> {
        async move {
            let records = self.parts.records;
            let mut rec = records.lock().await;
            let Some(r) = rec.reshape.as_mut() else {
                return Err(unavailable("the records hold no reshape"));
            };
            r.position_bytes = position;
            r.backup_window = None;
            records.commit(&mut rec).await
        }
        .boxed()
    }
}

/// After a restart: gives every role its backup area, and where the records say the backup
/// holds the window at the position, reads each member's rows back, checks them, and writes
/// them over the members.
pub(super) async fn restore(p: Parts<'_>, node: &ReshapeNode) -> Result<(), ArrayError> {
    place_missing_areas(p).await?;
    let (window, areas) = match &p.records.lock().await.reshape {
        Some(RecordedReshape {
            backup_window: Some(w),
            areas,
            ..
        }) => (*w, areas.clone()),
        _ => return Ok(()),
    };
    let ranges = node
        .layout()
        .rows_at_risk(Window {
            start: window.start_bytes,
            len: window.len_bytes,
            rule: WindowRule::Backup,
        })
        .map_err(|e| p.refuse(format!("reshape backup: {e}")))?;
    let mut rows = Vec::new();
    for r in ranges {
        let (Some(meta), Some(area)) = (p.records.meta(r.member), areas[r.member]) else {
            continue;
        };
        if p.volume.member_is_failed(r.member) {
            continue;
        }
        match read_rows(&meta, area, window, r.offset, r.len).await {
            Ok(bytes) => rows.push(MemberRows {
                member: r.member,
                offset: r.offset,
                bytes,
            }),
            Err(why) => p
                .volume
                .fail_member(r.member, &format!("reshape backup unusable: {why}")),
        }
    }
    node.restore(&rows).await?;
    p.records.record_failures().await?;
    Ok(())
}

/// A role whose record names no backup area — its member missed the start's commit
/// (`assemble::missed_only_the_start`) — gets the one the start placed for it: the first fit
/// in its metadata area, chosen from the same superblock as then (the member took no write
/// since). The next commit records it.
async fn place_missing_areas(p: Parts<'_>) -> Result<(), ArrayError> {
    let mut rec = p.records.lock().await;
    let Some(reshape) = rec.reshape.as_mut() else {
        return Ok(());
    };
    for (role, area) in reshape.areas.iter_mut().enumerate() {
        let Some(meta) = p.records.meta(role).filter(|_| area.is_none()) else {
            continue;
        };
        let sb = meta.sb.lock().await.clone();
        let offset = free_area(sb.as_ref(), BACKUP_AREA_BYTES).ok_or_else(|| {
            p.refuse(format!(
                "`{}`: no room for a {BACKUP_AREA_BYTES}-byte reshape backup in its metadata area",
                meta.member().name()
            ))
        })?;
        *area = Some(Area {
            offset,
            len: BACKUP_AREA_BYTES,
        });
    }
    Ok(())
}

/// One member's backed-up rows, checked against their header.
async fn read_rows(
    meta: &MemberMeta,
    area: Area,
    window: BackupWindow,
    offset: u64,
    len: u64,
) -> Result<Vec<u8>, String> {
    if HEADER_BYTES + len > area.len {
        return Err(format!("{len} bytes of rows do not fit its area {area:?}"));
    }
    let buf = Buf::new((HEADER_BYTES + len) as usize);
    let all = meta
        .member()
        .read(area.offset, buf)
        .await
        .map_err(|e| e.to_string())?;
    let (header, bytes) = all.split_at(HEADER_BYTES as usize);
    if !check_backup(header, window, offset, bytes) {
        return Err("its header or checksum does not match the recorded window".into());
    }
    Ok(bytes.to_vec())
}

/// Runs the pass (windows as large as the backup areas allow), then records the new tree.
pub(super) async fn run(
    p: Parts<'_>,
    node: &ReshapeNode,
    ctl: &PassControl,
    max_window_bytes: u64,
) -> Result<PassState, ArrayError> {
    let area_bytes = match &p.records.lock().await.reshape {
        Some(r) => r.areas.iter().flatten().map(|a| a.len).min(),
        None => None,
    };
    let window = area_bytes
        .and_then(|a| window_fitting(node.layout(), a, max_window_bytes))
        .ok_or_else(|| p.refuse("no window of the reshape fits its backup areas"))?;
    let hooks = ArrayHooks { parts: p };
    let state = node.run_pass(ctl, window, &hooks).await?;
    if state != PassState::Done {
        return Ok(state);
    }
    assert_eq!(
        node.position(),
        node.layout().capacity(),
        "a done pass copied all"
    );
    let mut rec = p.records.lock().await;
    if let Some(r) = rec.reshape.take() {
        rec.tree = r.new_tree;
        p.records.commit(&mut rec).await?;
    }
    Ok(state)
}

/// Writes the records that start reshaping the volume into `new_tree` over its members and
/// `added` (roles after the old ones, in order), with every member's backup area (see the
/// module docs). The volume must be quiet, every role current; open it again afterwards.
pub(super) async fn start(
    p: Parts<'_>,
    new_tree: Node,
    added: Vec<Arc<MemberMeta>>,
) -> Result<(), ArrayError> {
    p.volume.flush().await?;
    let mut rec = p.records.lock().await;
    let old = p.volume.geometry().root().clone();
    let old_roles = rec.members.len();
    let total = old_roles + added.len();
    if rec.reshape.is_some() {
        return Err(p.refuse("a reshape is already in progress"));
    }
    let mut metas = Vec::with_capacity(total);
    for r in 0..old_roles {
        match p.records.meta(r) {
            Some(m) if !p.volume.member_is_failed(r) && rec.members[r].state == RecordedState::Active => {
                metas.push(m)
            }
            _ => {
                return Err(p.refuse(format!(
                    "role {r} is not current: a reshape starts only with every member in place (rebuild first)"
                )))
            }
        }
    }
    metas.extend(added.iter().cloned());
    let probe = ReshapeRecord {
        new_tree: new_tree.clone(),
        position_bytes: 0,
        backup_area: None,
        backup_window: None,
    };
    probe
        .check(&old, total)
        .map_err(|e| p.refuse(e.to_string()))?;
    let layout = probe.reshape(&old).map_err(|e| p.refuse(e.to_string()))?;
    if window_fitting(&layout, BACKUP_AREA_BYTES, MAX_WINDOW_BYTES).is_none() {
        return Err(p.refuse(format!(
            "one reshape unit ({} bytes) backs up more rows than a {BACKUP_AREA_BYTES}-byte backup area in the metadata area holds: choose a smaller strip",
            layout.unit()
        )));
    }
    let areas = place_backup_areas(p, &metas, old_roles).await?;
    let mut members = rec.members.clone();
    for _ in &added {
        let uuid = Uuid::random().map_err(|e| p.refuse(format!("random id: {e}")))?;
        members.push(MemberEntry {
            uuid,
            state: RecordedState::Active,
        });
    }
    let rr = RecordedReshape {
        new_tree,
        position_bytes: 0,
        backup_window: None,
        areas,
    };
    // The start is one commit (event counter +1), written to the added members first, then
    // to the old ones: every record is then at the same event, none left behind to become
    // stale at the next torn commit. An old member that missed it is one behind with no
    // reshape record, which assembly recognises (`assemble::missed_only_the_start`).
    rec.events += 1;
    rec.scrub = None;
    for (i, meta) in added.iter().enumerate() {
        let role = old_roles + i;
        let record = VolumeRecord {
            array: p.id(),
            name: p.name().to_string(),
            events: rec.events,
            clean: rec.clean,
            role: role as u32,
            members: members.clone(),
            tree: old.clone(),
            bitmap: None,
            ppl: None,
            checksums: None,
            scrub: None,
            added_paths: rec.added_paths.clone(),
            reshape: Some(rr.record_for(role)),
            checksum_fill: rec.checksum_fill,
        };
        let (uuid, name) = (members[role].uuid, p.name().to_string());
        meta.update(move |sb| {
            sb.member = uuid;
            sb.volumes.retain(|v| v.name != name);
            sb.volumes.push(record);
        })
        .await
        .map_err(|e| p.refuse(format!("`{}`: {e}", meta.member().name())))?;
        // Both slots: a blank second copy would be reported damaged at the next start.
        (meta.update(|_| {}).await)
            .map_err(|e| p.refuse(format!("`{}`: {e}", meta.member().name())))?;
    }
    for (r, meta) in metas.iter().enumerate().take(old_roles) {
        let (id, name) = (p.id(), p.name().to_string());
        let (events, members, reshape) = (rec.events, members.clone(), rr.record_for(r));
        meta.update(move |sb| {
            if let Some(v) = sb
                .volumes
                .iter_mut()
                .find(|v| v.array == id && v.name == name)
            {
                v.events = events;
                v.members = members;
                v.scrub = None;
                v.reshape = Some(reshape);
            }
        })
        .await
        .map_err(|e| p.refuse(format!("`{}`: {e}", meta.member().name())))?;
    }
    Ok(())
}

/// A backup area for every role (`metas` by role; those from `old_roles` on are added and
/// must not carry a record of this volume yet).
async fn place_backup_areas(
    p: Parts<'_>,
    metas: &[Arc<MemberMeta>],
    old_roles: usize,
) -> Result<Vec<Option<Area>>, ArrayError> {
    let mut areas = Vec::with_capacity(metas.len());
    for (r, meta) in metas.iter().enumerate() {
        let mut sb = meta.sb.lock().await.clone();
        if r >= old_roles {
            if let Some(sb) = sb.as_mut() {
                if sb.volumes.iter().any(|v| v.name == p.name()) {
                    return Err(p.refuse(format!(
                        "`{}` already carries a record of this volume",
                        meta.member().name()
                    )));
                }
            }
        }
        let offset = free_area(sb.as_ref(), BACKUP_AREA_BYTES).ok_or_else(|| {
            p.refuse(format!(
                "`{}`: no room for a {BACKUP_AREA_BYTES}-byte reshape backup in its metadata area",
                meta.member().name()
            ))
        })?;
        areas.push(Some(Area {
            offset,
            len: BACKUP_AREA_BYTES,
        }));
    }
    Ok(areas)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nbraid_layout::{Level, ParityLayout, Region, Shape};

    #[test]
    fn a_backup_is_taken_back_only_for_its_window_and_bytes() {
        let row = MemberRows {
            member: 1,
            offset: 1 << 20,
            bytes: vec![7; 8192],
        };
        let w = Window {
            start: 0,
            len: 24576,
            rule: WindowRule::Backup,
        };
        let h = encode_header(w, &row);
        let bw = BackupWindow {
            start_bytes: 0,
            len_bytes: 24576,
        };
        assert!(check_backup(&h, bw, 1 << 20, &row.bytes));
        let other = BackupWindow {
            start_bytes: 24576,
            ..bw
        };
        assert!(!check_backup(&h, other, 1 << 20, &row.bytes));
        assert!(!check_backup(&h, bw, 0, &row.bytes));
        let mut torn = row.bytes.clone();
        torn[4000] = 0;
        assert!(!check_backup(&h, bw, 1 << 20, &torn));
        assert!(!check_backup(&[], bw, 1 << 20, &row.bytes), "no panic");
    }

    fn tree(level: Level, members: usize, strip: u64) -> Node {
        Shape::new(level, members, None, strip, ParityLayout::default())
            .unwrap()
            .build(&vec![
                Region {
                    start: 1 << 20,
                    len: 64 << 20
                };
                members
            ])
            .unwrap()
    }

    #[test]
    fn windows_fit_the_backup_area_for_every_strip() {
        for strip in [4 << 10, 64 << 10, 1 << 20] {
            for (old, new) in [
                (tree(Level::Raid5, 3, strip), tree(Level::Raid5, 4, strip)),
                (tree(Level::Raid5, 4, strip), tree(Level::Raid6, 5, strip)),
                (tree(Level::Raid0, 2, strip), tree(Level::Raid0, 3, strip)),
            ] {
                let layout = Reshape::new(old, new).unwrap();
                let need = layout.unit();
                for area in [BACKUP_AREA_BYTES, 8 << 20] {
                    if let Some(len) = window_fitting(&layout, area, MAX_WINDOW_BYTES) {
                        assert!(len.is_multiple_of(need) && len <= MAX_WINDOW_BYTES.max(need));
                        let w = layout.window(0, len).unwrap().unwrap();
                        let rows = layout.rows_at_risk(w).unwrap();
                        assert!(rows.iter().all(|r| r.len + HEADER_BYTES <= area));
                    }
                }
                assert!(
                    window_fitting(&layout, 64 << 20, MAX_WINDOW_BYTES).is_some(),
                    "strip {strip}: a big enough area always fits a unit"
                );
            }
        }
    }
}
