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
//!   The rows come checked against the block checksums, mended from the redundancy where
//!   they do not check (`reshape/copy.rs`): written back after a restart under fresh
//!   checksums, a bad block saved raw would become good data.
//! - **The checkpoint** records the position on every member, as every state change is.
//! - **After a restart** whose records name a backed-up window, the rows are read back,
//!   checked against the header (a member whose copy fails its check is failed, never
//!   written back with bytes it cannot prove), and written over the members; the pass then
//!   copies the window again.
//! - **Degraded**: a role recorded failed whose member is out (gone, or failed again at the
//!   open) has its share neither written nor restored, after a restart as in a live run
//!   ([`skipped_shares`]). The survivors' shares are enough: the rows at risk are all the
//!   rows the copy may have overwritten below old bytes still needed, so once the
//!   survivors' are written back every survivor holds the old tree's bytes of the window,
//!   and the failed role's chunks, never read, are rebuilt from them as on any degraded
//!   stripe. A role that is out but not recorded failed (missing at the start) stops the
//!   reshape instead: it may come back with its data (and its share), and the copy's writes
//!   it missed are unknown to the bitmap that resyncs it then.

use super::error::ArrayError;
use super::member_meta::MemberMeta;
use super::parts::Parts;
use super::records::RecordsGuard;
use super::reshape::{BackupWindow, RecordedReshape, ReshapeRecord};
use super::reshape_areas::NewShape;
use super::reshape_backup::{backup_areas, home, own_area, pool_untouched, HEADER_BYTES};
use super::{Area, MemberEntry, RecordedState, Superblock};
use crate::buf::Buf;
use crate::error::{VolumeError, VolumeResult};
use crate::pass::{PassControl, PassState};
use crate::reshape::{MemberRows, ReshapeHooks, ReshapeNode};
use futures::future::BoxFuture;
use futures::FutureExt;
use nbraid_layout::{Node, Reshape, Window, WindowRule};
use std::sync::Arc;

const BACKUP_MAGIC: &[u8; 8] = b"NBRSHBK1";
/// The longest window the pass copies unless told otherwise (idle: while clients do I/O
/// the copy takes 1 MiB windows, `reshape/copy.rs`). A client arriving while a long window is
/// in flight waits for it; with 4 MiB the idle copy moves 0.52-0.70 of an HDD's sequential
/// read (8 MiB: 0.57-0.85), `tests/reshape_speed.rs`.
pub(super) const MAX_WINDOW_BYTES: u64 = 4 << 20;

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
/// every member's home (`room_bytes(member)`: rows it holds, the header apart), checked on
/// the first windows (where growth backs up, and the same rows per window where the data
/// members stay as many); `None` when not even one unit fits. The backup hook refuses a
/// window that would not fit, loudly.
pub(super) fn window_fitting(
    layout: &Reshape,
    room_bytes: &dyn Fn(usize) -> u64,
    max_bytes: u64,
) -> Option<u64> {
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
                if rows.iter().any(|r| r.len > room_bytes(r.member)) {
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

/// The rows each member's home holds (see [`window_fitting`]): its own area or pool slot,
/// the header apart; unbounded for a role whose share is not backed up (`skipped`, by role:
/// see [`skipped_shares`]).
fn rooms(layout: &Reshape, areas: &[Option<Area>], skipped: &[bool]) -> impl Fn(usize) -> u64 {
    let rooms: Vec<u64> = (0..areas.len())
        .map(|r| match skipped.get(r).copied().unwrap_or(false) {
            true => u64::MAX,
            false => {
                home(layout.old(), areas, r).map_or(0, |(_, a)| a.len.saturating_sub(HEADER_BYTES))
            }
        })
        .collect();
    move |m| rooms.get(m).copied().unwrap_or(0)
}

/// The records and backup areas behind the engine's copy.
pub(super) struct ArrayHooks<'a> {
    pub(super) parts: Parts<'a>,
    pub(super) layout: &'a Reshape,
}

impl ArrayHooks<'_> {
    /// Writes each member's rows to its home (see `reshape_backup.rs`) and flushes it. A
    /// member whose own area fails is failed (its rows are then not needed); a pool that
    /// fails fails its member and stops the copy (the rows of members still serving are
    /// not saved).
    async fn write_rows(&self, window: Window, rows: &[MemberRows]) -> VolumeResult<()> {
        let p = self.parts;
        let areas = match &p.records.lock().await.reshape {
            Some(r) => r.areas.clone(),
            None => return Err(unavailable("the records hold no reshape")),
        };
        for row in rows {
            let home = home(self.layout.old(), &areas, row.member);
            let fits = |a: &Area| a.len >= HEADER_BYTES + row.bytes.len() as u64;
            let Some((holder, area)) = home.filter(|(_, a)| fits(a)) else {
                return Err(unavailable(&format!(
                    "role {}: {} bytes of rows at risk fit no backup home {home:?}",
                    row.member,
                    row.bytes.len()
                )));
            };
            let pooled = holder != row.member;
            if pooled && !pool_untouched(self.layout, holder, area, window.start, window.len) {
                return Err(unavailable(&format!(
                    "window {}+{} would write over the backup pool on role {holder}: this move cannot go on in place",
                    window.start, window.len
                )));
            }
            let Some(meta) = p.records.meta(holder) else {
                if pooled {
                    return Err(unavailable(&format!(
                        "the backup pool's role {holder} has no member"
                    )));
                }
                continue;
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
                    .fail_member(holder, &format!("reshape backup write failed: {e}"));
                if pooled {
                    return Err(unavailable(&format!(
                        "the backup pool on role {holder} failed: {e}"
                    )));
                }
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

    fn volume(&self) -> &str {
        self.parts.name()
    }
}

/// After a restart: gives every role its backup area, and where the records say the backup
/// holds the window at the position, reads each member's rows back from its home, checks
/// them, and writes them over the members.
pub(super) async fn restore(p: Parts<'_>, node: &ReshapeNode) -> Result<(), ArrayError> {
    place_missing_areas(p, node.layout()).await?;
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
        if p.volume.member_is_failed(r.member) || p.records.meta(r.member).is_none() {
            continue;
        }
        let read = match home(node.layout().old(), &areas, r.member) {
            Some((holder, area)) => match p.records.meta(holder) {
                Some(meta) if !p.volume.member_is_failed(holder) => {
                    read_rows(&meta, area, window, r.offset, r.len).await
                }
                _ => Err(format!("its backup's member (role {holder}) is missing")),
            },
            None => Err("it has no backup home".to_string()),
        };
        match read {
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

/// A role of the old tree whose member missed the start's commit
/// (`assemble::missed_only_the_start`) gets the area the start chose for it: the same
/// decision ([`own_area`]) over the same superblock (the member took no write since), so an
/// own area where it fitted, the pool where not. The next commit records it.
async fn place_missing_areas(p: Parts<'_>, layout: &Reshape) -> Result<(), ArrayError> {
    let mut rec = p.records.lock().await;
    let Some(reshape) = rec.reshape.as_mut() else {
        return Ok(());
    };
    let rows = super::reshape_backup::need(layout, layout.unit()).rows_bytes;
    let olds = layout.old().member_indices();
    for role in olds {
        let missed = !reshape.recorded.get(role).copied().unwrap_or(true);
        let Some(meta) = p.records.meta(role).filter(|_| missed) else {
            continue;
        };
        let sb = meta.sb.lock().await.clone();
        reshape.areas[role] = own_area(sb.as_ref(), rows.get(role).copied().unwrap_or(0));
        reshape.recorded[role] = true;
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

/// The roles whose share of a window's backup is neither written nor restored (by role):
/// those recorded failed (`failed`) and out of the volume (`out`: failed there, or missing).
/// Such a role is degraded in both trees: its chunks are never read, but rebuilt from the
/// redundancy of whichever tree serves them, so its share is never needed — as when a
/// member fails during a live run. `Err` says why the reshape cannot go on instead:
/// - a role out but not recorded failed (missing at the start): it may come back with its
///   data (an old role with its share of a backed-up window too), and copying on without it
///   would leave its chunks of the new tree unwritten, unknown to the bitmap that resyncs it
///   when it comes back — an added role as much as an old one;
/// - more roles out than either tree survives (the volume is down anyway).
fn skipped_shares(layout: &Reshape, failed: &[bool], out: &[bool]) -> Result<Vec<bool>, String> {
    let is_out = |r: usize| out.get(r).copied().unwrap_or(false);
    let missing: Vec<String> = (0..out.len())
        .filter(|&r| is_out(r) && !failed.get(r).copied().unwrap_or(false))
        .map(|r| r.to_string())
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "the reshape cannot go on without role {0}: each member keeps its share of a window's backup — start the volume again with its member (resynced first, then the reshape resumes); its disk gone for good, `nbraid fail` it (role {0}) and the reshape goes on without it",
            missing.join(", ")
        ));
    }
    if !layout.old().survives(&is_out) || !layout.new_tree().survives(&is_out) {
        let roles: Vec<String> = (0..out.len())
            .filter(|&r| is_out(r))
            .map(|r| r.to_string())
            .collect();
        return Err(format!(
            "the reshape cannot go on without roles {}: more than the old or the new shape survives",
            roles.join(", ")
        ));
    }
    Ok((0..out.len()).map(is_out).collect())
}

/// Why no window fits the backup homes of the roles whose shares are kept (`skipped`: see
/// [`skipped_shares`]): a role of the old tree without a home keeps its share in the pool
/// on the first added member, and that member is out of the volume (its record, which
/// places the pool, with it).
fn no_window_why(layout: &Reshape, areas: &[Option<Area>], skipped: &[bool]) -> String {
    let homeless: Vec<String> = (layout.old().member_indices().into_iter())
        .filter(|&r| !skipped.get(r).copied().unwrap_or(false))
        .filter(|&r| home(layout.old(), areas, r).is_none())
        .map(|r| r.to_string())
        .collect();
    if homeless.is_empty() {
        return "no window of the reshape fits its backup areas".into();
    }
    let (roles, keep) = match homeless.len() {
        1 => ("role", "keeps its"),
        _ => ("roles", "keep their"),
    };
    format!(
        "the reshape cannot go on: {roles} {} {keep} share of a window's backup in the pool on the first added member, which is out of the volume — start the volume again with it; until then the volume serves degraded in both shapes",
        homeless.join(", ")
    )
}

/// Runs the pass (windows as large as the backup areas allow), then records the new tree.
/// A role recorded failed and out of the volume is skipped ([`skipped_shares`]): the
/// reshape goes on degraded, and ends degraded in the new shape, to be rebuilt there.
pub(super) async fn run(
    p: Parts<'_>,
    node: &ReshapeNode,
    ctl: &PassControl,
    max_window_bytes: u64,
) -> Result<PassState, ArrayError> {
    // A member failed since the last commit (present: recorded failed) is not taken for
    // one missing at the start.
    p.records.record_failures().await?;
    let (areas, failed) = {
        let rec = p.records.lock().await;
        let failed: Vec<bool> = (rec.members.iter())
            .map(|m| m.state == RecordedState::Failed)
            .collect();
        match &rec.reshape {
            Some(r) => (r.areas.clone(), failed),
            None => return Err(p.refuse("the records hold no reshape")),
        }
    };
    let layout = node.layout();
    let out: Vec<bool> = (0..areas.len())
        .map(|r| p.volume.member_is_failed(r))
        .collect();
    let copied = node.position() == layout.capacity();
    let skipped = match copied {
        true => out.clone(), // no window is backed up any more
        false => skipped_shares(layout, &failed, &out).map_err(|why| p.refuse(why))?,
    };
    // A pool was placed for windows of one unit (`reshape_backup::place_pool`).
    let pooled = layout
        .old()
        .member_indices()
        .iter()
        .any(|&r| areas.get(r) == Some(&None) && skipped.get(r) != Some(&true));
    let max = if pooled {
        layout.unit()
    } else {
        max_window_bytes
    };
    let window = match copied {
        // Only the grown space is left (a grow in place has no backup areas at all).
        true => max.max(layout.unit()),
        false => window_fitting(layout, &rooms(layout, &areas, &skipped), max)
            .ok_or_else(|| p.refuse(no_window_why(layout, &areas, &skipped)))?,
    };
    let hooks = ArrayHooks { parts: p, layout };
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
    let mut rec = flushed_for_a_new_shape(p).await?;
    let old = p.volume.geometry().root().clone();
    let old_roles = rec.members.len();
    let mut metas = current_members(p, &rec.members)?;
    metas.extend(added.iter().cloned());
    let mut held = Vec::with_capacity(metas.len());
    for meta in &metas {
        held.push(meta.sb.lock().await.clone());
    }
    let shape = NewShape {
        name: p.name(),
        old_tree: &old,
        new_tree: &new_tree,
        held: held.iter().map(Option::as_ref).collect(),
        member_bytes: metas.iter().map(|m| m.member().len()).collect(),
        names: metas.iter().map(|m| m.member().name()).collect(),
        old_roles,
    };
    let (layout, areas) = decide_start(&shape).map_err(|why| p.refuse(why))?;
    let in_place = nbraid_layout::grows_in_place(&old, &new_tree);
    let position_bytes = if in_place { layout.capacity() } else { 0 };
    let kept = super::reshape_areas::for_new_shape(p, &new_tree, &metas, old_roles, &areas).await?;
    let mut members = rec.members.clone();
    for meta in &added {
        let uuid = super::heal::joining_id(p, meta, &members).await?;
        members.push(MemberEntry {
            uuid,
            state: RecordedState::Active,
            unacked_since_failed: false,
            failed_cause: None,
        });
    }
    let rr = RecordedReshape {
        new_tree,
        position_bytes,
        backup_window: None,
        recorded: vec![true; areas.len()],
        areas,
    };
    // The start is one commit (event counter +1), written to the added members first, then
    // to the old ones: every record is then at the same event, none left behind to become
    // stale at the next torn commit. An old member that missed it is one behind with no
    // reshape record, which assembly recognises (`assemble::missed_only_the_start`).
    rec.events += 1;
    rec.scrub = None;
    let mut next = rec.clone();
    next.members = members.clone();
    next.reshape = Some(rr.clone());
    for (i, meta) in added.iter().enumerate() {
        let role = old_roles + i;
        let k = kept[role];
        let record = next.for_newcomer((p.id(), p.name()), role, (k.bitmap, k.ppl, k.checksums));
        (meta.join(members[role].uuid, record).await)
            .map_err(|e| p.refuse(format!("`{}`: {e}", meta.member().name())))?;
    }
    // From the first old member's new record on, this array's records are stale.
    p.records.retire();
    for (r, meta) in metas.iter().enumerate().take(old_roles) {
        let (id, name) = (p.id(), p.name().to_string());
        let (events, members, reshape) = (rec.events, members.clone(), rr.record_for(r));
        let areas = kept[r];
        meta.update(move |sb| {
            if let Some(v) = sb
                .volumes
                .iter_mut()
                .find(|v| v.array == id && v.name == name)
            {
                (v.bitmap, v.ppl, v.checksums) = (areas.bitmap, areas.ppl, areas.checksums);
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

/// The volume flushed and its records held, for a commit that changes its shape (a reshape's
/// start, new RAID 1 copies); refused while a reshape or the checksum pass runs.
pub(super) async fn flushed_for_a_new_shape<'a>(
    p: Parts<'a>,
) -> Result<RecordsGuard<'a>, ArrayError> {
    p.volume.flush().await?;
    let rec = p.records.lock().await;
    if rec.reshape.is_some() {
        return Err(p.refuse("a reshape is already in progress"));
    }
    // The pass computing the checksums walks the regions of the shape it started on.
    if rec.checksum_fill.is_some() {
        return Err(p.refuse(
            "its checksum pass (checksums = \"enable\") has not finished: let it finish first (nbraid status shows checksum_fill)",
        ));
    }
    Ok(rec)
}

/// The member of every recorded role (`members`), refused by role where one is not current:
/// a reshape starts only with every member in place.
pub(super) fn current_members(
    p: Parts<'_>,
    members: &[MemberEntry],
) -> Result<Vec<Arc<MemberMeta>>, ArrayError> {
    let mut metas = Vec::with_capacity(members.len());
    for (r, entry) in members.iter().enumerate() {
        match p.records.meta(r) {
            Some(m) if !p.volume.member_is_failed(r) && entry.state == RecordedState::Active => {
                metas.push(m)
            }
            _ => {
                return Err(p.refuse(format!(
                    "role {r} is not current: a reshape starts only with every member in place (rebuild first)"
                )))
            }
        }
    }
    Ok(metas)
}

/// What a reshape's start decides before it writes anything: the copy's layout, and each
/// role's backup home ([`backup_areas`]; none for a grow in place: nothing is copied, the
/// position starts at the end and the pass syncs the new space). `Err`: why the start is
/// refused. Pure, so `nbraid apply`'s plan says what `--yes` will do ([`start_preview`]).
fn decide_start(shape: &NewShape<'_>) -> Result<(Reshape, Vec<Option<Area>>), String> {
    let (old, new_tree) = (shape.old_tree, shape.new_tree);
    let probe = ReshapeRecord {
        new_tree: new_tree.clone(),
        position_bytes: 0,
        backup_area: None,
        backup_window: None,
    };
    probe
        .check(old, shape.held.len())
        .map_err(|e| e.to_string())?;
    let layout = probe.reshape(old).map_err(|e| e.to_string())?;
    if nbraid_layout::grows_in_place(old, new_tree) {
        return Ok((layout, vec![None; shape.held.len()]));
    }
    let added = shape.held.iter().enumerate().skip(shape.old_roles);
    let carries = |sb: &Option<&Superblock>| {
        sb.is_some_and(|sb| sb.volumes.iter().any(|v| v.name == shape.name))
    };
    if let Some((r, _)) = added.clone().find(|(_, sb)| carries(sb)) {
        return Err(format!(
            "`{}` already carries a record of this volume",
            shape.names[r]
        ));
    }
    let areas = backup_areas(
        &layout,
        &shape.held,
        &shape.member_bytes,
        &shape.names,
        shape.old_roles,
    )?;
    Ok((layout, areas))
}

/// What starting the reshape of `shape`'s volume will do, decided before anything is written
/// by the functions the start runs over the same superblocks: `Err` why the start refuses;
/// `Ok(Some(why))` it starts, and the new shape runs without the write-hole log (`ppl`: the
/// volume keeps one) because some member has no room for it; `Ok(None)` it starts, logged as
/// the options say. Pure: `nbraid apply` shows this as its plan.
pub fn start_preview(shape: &NewShape<'_>, ppl: bool) -> Result<Option<String>, String> {
    let (_, backups) = decide_start(shape)?;
    let logs = super::reshape_areas::new_shape_logs(shape, &backups, ppl);
    Ok(logs.into_iter().find_map(Result::err))
}

#[cfg(test)]
mod tests {
    use super::super::reshape_backup::BACKUP_AREA_BYTES;
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
    fn only_roles_recorded_failed_and_out_are_skipped_within_the_tolerance() {
        let layout = Reshape::new(
            tree(Level::Raid5, 3, 64 << 10),
            tree(Level::Raid5, 4, 64 << 10),
        )
        .unwrap();
        let (t, f) = (true, false);
        let skip = |failed: [bool; 4], out: [bool; 4]| skipped_shares(&layout, &failed, &out);
        assert_eq!(skip([f; 4], [f; 4]), Ok(vec![f; 4]));
        assert_eq!(skip([f, t, f, f], [f, t, f, f]), Ok(vec![f, t, f, f]));
        assert_eq!(skip([f, f, f, t], [f, f, f, t]), Ok(vec![f, f, f, t]));
        // Missing at the start, an old role or an added one: the reshape waits for it.
        let e = skip([f; 4], [f, t, f, f]).unwrap_err();
        assert!(e.contains("without role 1:"), "{e}");
        let e = skip([f; 4], [f, f, f, t]).unwrap_err();
        assert!(e.contains("without role 3:"), "{e}");
        let e = skip([f, t, f, t], [f, t, f, t]).unwrap_err();
        assert!(e.contains("roles 1, 3: more than"), "{e}");
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
                    let room = |_| area - HEADER_BYTES;
                    if let Some(len) = window_fitting(&layout, &room, MAX_WINDOW_BYTES) {
                        assert!(len.is_multiple_of(need) && len <= MAX_WINDOW_BYTES.max(need));
                        let w = layout.window(0, len).unwrap().unwrap();
                        let rows = layout.rows_at_risk(w).unwrap();
                        assert!(rows.iter().all(|r| r.len + HEADER_BYTES <= area));
                    }
                }
                assert!(
                    window_fitting(&layout, &|_| 64 << 20, MAX_WINDOW_BYTES).is_some(),
                    "strip {strip}: a big enough area always fits a unit"
                );
            }
        }
    }
}
