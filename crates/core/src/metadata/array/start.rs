//! Starting an array: [`create`] (records written, then built) and the open sequence
//! ([`open`]), each step a function here, in the order they run:
//!
//! 1. **[`Assembled`]** — roles by the members' records, checked against the config
//!    (`assemble`), and the role plan: absent, stale and rebuilding roles (`open.rs`);
//!    then what the rings say of the life that stopped ([`Assembled::last_life`]).
//! 2. **Checksum areas** — `checksums = "enable"` carried out (not read-only).
//! 3. **[`build`]** — the engine volume over members in recorded roles, with its records,
//!    bitmap and log places (`start/build.rs`); failures recorded before any further member
//!    write from here.
//! 4. **Read-only check** — [`keep_in_memory`]: refused where it cannot serve right without
//!    writing; else records and bitmap stay in memory.
//! 5. **[`take_roles`]** — absent roles failed, stale ones resyncing, rebuilds resumed;
//!    then replaces under way resumed (`replace_resume.rs`).
//! 6. **Log replay** — the partial-parity log closes the write hole (not read-only); its
//!    rings' marker says whether the life that stopped logged (read before step 2: a dirty
//!    start after one that did not is judged as unlogged, and marks its own rings logged
//!    only once its resync is done).
//! 7. **[`adopt_assembly`]**, then a reshape cut off is restored.
//! 8. **[`resync_at_open`]** — what the bitmap marks, before serving or in the background.
//! 9. **[`settle`]** — recorded clean, the bitmap cleared when nothing is missing.

use super::Array;
use crate::error::VolumeResult;
use crate::fail_cause::Because;
use crate::metadata::assemble::{assemble_with, Names, Start};
use crate::metadata::checksum_area;
use crate::metadata::error::ArrayError;
use crate::metadata::member_meta::MemberMeta;
use crate::metadata::open::{plan_roles, RolePlan};
use crate::metadata::options::{ArrayOptions, OpenReport};
use crate::metadata::ppl_area;
use crate::metadata::replace_resume;
use crate::metadata::{Assembly, Probe, RecordedState, ResumedReplacement};
use crate::ppl::{codec::Cover, cover_of_open, LastLife};
use nbraid_layout::Node;
use std::sync::Arc;
use std::time::Duration;

mod build;

use build::build;

/// How [`open`] opens: resyncing before it serves, resyncing in the background
/// where it may, or writing nothing at all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Mode {
    Foreground,
    Background,
    ReadOnly,
}

/// Writes new records for volume `name` over `metas` (leaf `i` of `tree` is `metas[i]`)
/// and opens it. Regions must start after the metadata area. With `assume_clean`, the
/// members are trusted to agree (zero-filled); otherwise every copy and parity chunk is
/// rewritten from the data first (`progress(done, total)` bytes).
pub(super) async fn create(
    name: &str,
    tree: Node,
    metas: Vec<Arc<MemberMeta>>,
    opts: ArrayOptions,
    assume_clean: bool,
    progress: &(dyn Fn(u64, u64) + Sync),
) -> Result<(Array, OpenReport), ArrayError> {
    let id =
        crate::metadata::create::write_records(name, &tree, &metas, &opts, assume_clean).await?;
    // `checksums = "enable"` on a volume that is new: its regions were placed as without
    // checksums, so they get the areas and the pass an existing volume gets, now rather
    // than at the next open.
    if opts.enable_checksums && opts.checksum_area_before_region_bytes.is_none() {
        let roles: Vec<(usize, Arc<MemberMeta>)> = metas.iter().cloned().enumerate().collect();
        checksum_area::enable_at_create(name, &roles).await?;
    }
    let metas: Vec<Option<Arc<MemberMeta>>> = metas.into_iter().map(Some).collect();
    let array = build(name, id, tree, &metas, opts, !assume_clean, None).await?;
    let mut report = OpenReport {
        was_clean: assume_clean,
        roles: (0..array.volume.member_count()).map(Ok).collect(),
        ..OpenReport::default()
    };
    if !assume_clean {
        report.resynced_bytes = resync(&array, &[(0, array.volume.capacity())], progress).await?;
    }
    // Its rings say whether a crash of this first life is the log's to close.
    if let Some(p) = array.ppl.rings() {
        let cover = cover_of_open(array.ppl.setup().is_some(), true, LastLife::Unknown);
        crate::ppl::mark(&array.volume, &p.areas, p.life, cover).await;
    }
    settle(&array).await?;
    Ok((array, report))
}

/// [`Array::open`]; with [`Mode::Background`], a resync the volume may serve before is
/// left to [`Array::background_resync`]; with [`Mode::ReadOnly`], nothing is written.
pub(super) async fn open(
    name: &str,
    config_tree: &Node,
    metas: Vec<Option<Arc<MemberMeta>>>,
    opts: ArrayOptions,
    progress: &(dyn Fn(u64, u64) + Sync),
    mode: Mode,
) -> Result<(Array, OpenReport), ArrayError> {
    let assembled = Assembled::assemble(name, config_tree, &metas, &opts)?;
    let last_life = assembled.last_life(name, config_tree, &opts, mode).await?;
    let Assembled { asm, mut roles, .. } = assembled;
    enable_checksums(name, opts.enable_checksums, mode, &asm, &mut roles).await?;
    let dirty = mode.starts_dirty(asm.clean);
    let (tree, newest_role) = (asm.tree.clone(), Some(asm.newest_role));
    let built = build(
        name,
        asm.array,
        tree,
        &roles.by_role,
        opts,
        dirty,
        newest_role,
    );
    let mut array = built.await?;
    (array.ppl).set_torn_rows_logged(last_life.is_none_or(LastLife::logged));
    if !mode.writes() {
        keep_in_memory(&mut array, &asm)?;
    }
    let rebuilding_roles = take_roles(&array, &asm, &roles).await;
    // Before anything is written: a replacement resumed must miss no write.
    let replacing = match mode.writes() {
        false => Vec::new(),
        true => {
            let heal = (array.parts(), &array.heal, array.reshape.is_some());
            replace_resume::resume(heal, &asm, &metas, &mut roles.warnings).await
        }
    };
    let (ppl, cover) = replay_log(&array, &asm, last_life, mode.writes()).await?;
    adopt_assembly(&array, &asm).await;
    if let Some(node) = &array.reshape {
        crate::metadata::reshape_run::restore(array.parts(), node).await?;
    }
    let stale = roles.stale.clone();
    let mut report = open_report(name, &asm, roles, ppl, (rebuilding_roles, replacing));
    if !mode.writes() {
        // The stale roles stay resyncing: neither read nor (nothing writes) written.
        return Ok((array, report));
    }
    let resync = (asm.clean, &stale[..], cover, mode == Mode::Background);
    resync_then_settle(&array, resync, progress, &mut report).await?;
    Ok((array, report))
}

/// What assembly found for an open and the role plan drawn from it: who stands in each
/// role and what the open does about the others, decided from the members' records alone.
struct Assembled {
    asm: Assembly,
    roles: RolePlan,
    /// The members' records as assembly read them, by config position.
    probes: Vec<Probe>,
    /// What assembly was asked (forced, logging).
    start: Start,
}

impl Assembled {
    /// Volume `name` assembled from `metas` (by config position) against `config_tree`,
    /// and its roles planned.
    fn assemble(
        name: &str,
        config_tree: &Node,
        metas: &[Option<Arc<MemberMeta>>],
        opts: &ArrayOptions,
    ) -> Result<Assembled, ArrayError> {
        let probes: Vec<Probe> = metas
            .iter()
            .map(|m| m.as_ref().map_or(Probe::Missing, |m| m.probe().clone()))
            .collect();
        let start = Start {
            force: opts.force_assembly,
            write_hole_log: opts.ppl,
            ..Start::default()
        };
        let names = Names(&opts.member_ids);
        let asm = assemble_with(name, config_tree, &probes, start, &names)?;
        let roles = plan_roles(&asm, metas);
        Ok(Assembled {
            asm,
            roles,
            probes,
            start,
        })
    }

    /// Whether the life that stopped logged its writes. A quiet handover (the array this
    /// open replaces stopped with nothing in flight, its writes flushed): the life that
    /// ended tore no row, whatever it logged. Else a dirty start that logs, after a life
    /// that did not: no ring holds that life's torn rows, so it starts as a dirty start
    /// without the log would (a role out refused unless forced, the resync before
    /// serving). What the rings of the roles serving say (`ppl::last_life`), read before
    /// anything is written; `None`: not judged — clean, not logging now, mid-reshape or
    /// writing nothing, the rings could change nothing.
    async fn last_life(
        &self,
        name: &str,
        config_tree: &Node,
        opts: &ArrayOptions,
        mode: Mode,
    ) -> Result<Option<LastLife>, ArrayError> {
        if opts.quiet_handover {
            return Ok(Some(LastLife::Logged));
        }
        let asm = &self.asm;
        let (reshaping, logs) = (asm.reshape.is_some(), self.start.write_hole_log);
        if !LastLife::read_at_start(asm.clean, logs, reshaping, mode.writes()) {
            return Ok(None);
        }
        let not_current: Vec<usize> = (self.roles.stale.iter().copied())
            .chain(asm.rebuilding.iter().map(|&(r, _)| r))
            .collect();
        let last = ppl_area::last_life(name, &self.roles.by_role, &not_current).await;
        if !last.logged() {
            let unlogged = Start {
                last_life_logged: false,
                ..self.start
            };
            let names = Names(&opts.member_ids);
            assemble_with(name, config_tree, &self.probes, unlogged, &names)?;
        }
        Ok(Some(last))
    }
}

impl Mode {
    /// Whether this open writes to the members at all.
    fn writes(self) -> bool {
        self != Mode::ReadOnly
    }

    /// Whether the records start dirty (a write may be in flight): but for a read-only
    /// open of a volume that stopped clean, which writes nothing and so tears nothing.
    fn starts_dirty(self, clean: bool) -> bool {
        self.writes() || !clean
    }
}

/// What an open of `asm` with `roles` planned found and did, its warnings logged (the
/// resync's bytes are filled in by [`resync_then_settle`]): `ppl`, the log's replay;
/// `rebuilding_roles` with their checkpoints and the replaces `replacing`, resumed.
fn open_report(
    name: &str,
    asm: &Assembly,
    roles: RolePlan,
    ppl: crate::ppl::RecoverReport,
    (rebuilding_roles, replacing): (Vec<(usize, u64)>, Vec<ResumedReplacement>),
) -> OpenReport {
    for w in &roles.warnings {
        tracing::warn!("volume `{name}`: {w}");
    }
    OpenReport {
        ppl,
        warnings: roles.warnings,
        was_clean: asm.clean,
        resynced_roles: roles.stale,
        absent_roles: roles.absent,
        resynced_bytes: 0,
        background_bytes: 0,
        roles: asm.roles.clone(),
        rebuilding_roles,
        replacing,
        forced: asm.forced.clone(),
    }
}

/// `checksums = "enable"` carried out at the open (nothing on a read-only one: a warning).
async fn enable_checksums(
    name: &str,
    enable: bool,
    mode: Mode,
    asm: &Assembly,
    roles: &mut RolePlan,
) -> Result<(), ArrayError> {
    if mode.writes() {
        return checksum_area::enable_at_open(name, enable, asm, &roles.by_role).await;
    }
    if enable {
        roles.warnings.push(
            "checksums = \"enable\" is not carried out: read_only = true writes nothing".into(),
        );
    }
    Ok(())
}

/// The open's resync of the stale roles and the rows a crash may have torn (`clean`: none),
/// or, `background`, left to [`Array::background_resync`] where the volume may serve first;
/// once it is done the rings say a crash from here on is the log's (`cover`: what the open
/// marked them) and the records say the stale roles are current.
async fn resync_then_settle(
    array: &Array,
    (clean, stale, cover, background): (bool, &[usize], Cover, bool),
    progress: &(dyn Fn(u64, u64) + Sync),
    report: &mut OpenReport,
) -> Result<(), ArrayError> {
    let rebuilding = !report.rebuilding_roles.is_empty();
    match (resync_at_open(array, clean, stale, rebuilding, background, progress)).await? {
        Resynced::Background => {
            report.background_bytes = array.background_bytes();
            return Ok(());
        }
        Resynced::Foreground(bytes) => report.resynced_bytes = bytes,
    }
    // The rows an unlogged life tore are resynced: a crash from here on is the log's.
    if let (Some(p), Cover::Unlogged) = (array.ppl.setup(), cover) {
        crate::ppl::mark(&array.volume, &p.areas, p.life, Cover::Logged).await;
    }
    let mut rec = array.records.lock().await;
    for &r in stale {
        array.volume.set_resyncing(r, false);
        rec.members[r].state = RecordedState::Active;
    }
    drop(rec);
    Ok(settle(array).await?)
}

/// The write hole: the partial-parity log replayed before the resync and before serving
/// (read-only, `!writes`: only a clean array starts, whose log has nothing to replay). Not logging
/// this open, its rings are marked with its life all the same: nothing is replayed. The
/// marker says whether a crash of this life is the log's to close ([`cover_of_open`]; the
/// word given is returned).
async fn replay_log(
    array: &Array,
    asm: &Assembly,
    last_life: Option<LastLife>,
    writes: bool,
) -> Result<(crate::ppl::RecoverReport, Cover), ArrayError> {
    let logs = array.ppl.setup().is_some();
    let cover = cover_of_open(logs, asm.clean, last_life.unwrap_or(LastLife::Unknown));
    let report = match array.ppl.rings() {
        _ if !writes => Default::default(),
        Some(p) => {
            let replay = logs && !asm.clean;
            crate::ppl::recover(&array.volume, &p.areas, (p.life, cover), replay).await?
        }
        None => Default::default(),
    };
    Ok((report, cover))
}

/// After an unclean start or with stale roles: resyncs what the bitmap marks (the whole
/// volume without one) before serving, or leaves it to the background when `background`
/// and the volume may serve first (`resync.rs`).
async fn resync_at_open(
    array: &Array,
    clean: bool,
    stale: &[usize],
    rebuilding: bool,
    background: bool,
    progress: &(dyn Fn(u64, u64) + Sync),
) -> Result<Resynced, ArrayError> {
    if clean && stale.is_empty() {
        return Ok(Resynced::Foreground(0));
    }
    let capacity = array.volume.capacity();
    let ranges = match &array.bitmap {
        Some(b) => b.intent().set_ranges(capacity),
        None => vec![(0, capacity)],
    };
    let p = array.parts();
    if background
        && array
            .background
            .start(p, &ranges, stale, rebuilding)
            .await?
    {
        return Ok(Resynced::Background);
    }
    Ok(Resynced::Foreground(
        resync(array, &ranges, progress).await?,
    ))
}

/// A read-only start: refused where it cannot serve right without writing
/// (`read_only.rs`); else the records and the bitmap are kept in memory from now on.
fn keep_in_memory(array: &mut Array, asm: &Assembly) -> Result<(), ArrayError> {
    let capacity = array.volume.capacity();
    let unsynced_bytes = match &array.bitmap {
        Some(b) => crate::metadata::ranges::total_bytes(&b.intent().set_ranges(capacity)),
        None => capacity,
    };
    let found = crate::metadata::read_only::Found {
        clean: asm.clean,
        unsynced_bytes,
        has_parity: !crate::ppl::parity_groups(array.volume.geometry().root()).is_empty(),
        reshaping: array.reshape.is_some(),
    };
    if let Some(why) = crate::metadata::read_only::refusal(array.name(), found) {
        return Err(ArrayError::ReadOnly(why));
    }
    array.records.keep_in_memory();
    if let Some(b) = &mut array.bitmap {
        b.keep_in_memory();
    }
    Ok(())
}

/// The slots as the role plan says: absent roles failed, stale ones resyncing, new
/// members being rebuilt written but not read (the rebuild resumes online). Returns the
/// roles being rebuilt and their checkpoints.
async fn take_roles(array: &Array, asm: &Assembly, roles: &RolePlan) -> Vec<(usize, u64)> {
    let recorded = array.records.lock().await.members.clone();
    for &r in &roles.absent {
        let (cause, why) = crate::metadata::open::absent_cause(recorded.get(r));
        array.volume.fail_member(r, &Because(cause, &why));
    }
    // Settled below (they were not there to miss anything since the records were written).
    let gate = array.volume.table().failure_gate();
    gate.recorded_up_to(gate.generation());
    for &r in &roles.stale {
        array.volume.set_resyncing(r, true);
    }
    let mut rebuilding = Vec::new();
    for &(r, checkpoint) in &asm.rebuilding {
        if array.volume.member_is_failed(r) {
            continue;
        }
        array.volume.set_resyncing(r, true);
        array.records.rebuilding.resume(r, checkpoint);
        rebuilding.push((r, checkpoint));
    }
    rebuilding
}

/// The records take assembly's event counter, and trust the roles a forced assembly took
/// back (the next commit records them current).
async fn adopt_assembly(array: &Array, asm: &Assembly) {
    let mut rec = array.records.lock().await;
    rec.events = asm.events;
    for f in &asm.forced {
        rec.members[f.role].state = RecordedState::Active;
    }
}

/// Rewrites copies and parity over `ranges`, piece by piece (whole full stripes, about
/// 1 MiB each: memory stays bounded whatever the ranges). Returns the bytes covered.
async fn resync(
    array: &Array,
    ranges: &[(u64, u64)],
    progress: &(dyn Fn(u64, u64) + Sync),
) -> Result<u64, ArrayError> {
    let capacity = array.volume.capacity();
    let (width, piece) = array.parts().resync_piece();
    let total = crate::metadata::ranges::total_bytes(ranges);
    let mut done = 0;
    for &(a, b) in ranges {
        let mut at = a / width * width;
        let end = b.div_ceil(width).saturating_mul(width).min(capacity);
        while at < end {
            let n = piece.min(end - at);
            array.volume.resync_range(at, n).await?;
            at += n;
            done += n;
            progress(done.min(total), total);
        }
    }
    array.volume.flush().await?;
    Ok(total)
}

/// After open or create: every current member records the volume clean, with what
/// failed recorded; the bitmap is cleared when no role is missing (else it keeps what
/// the missing members will need).
async fn settle(array: &Array) -> VolumeResult<()> {
    array.volume.flush().await?;
    if let Some(b) = &array.bitmap {
        let i = b.intent();
        if !array.volume.is_degraded() {
            i.flushed(i.flush_started(), Duration::ZERO);
        }
        b.write(&array.volume).await?;
    }
    let mut rec = array.records.lock().await;
    array.records.mark_clean(&mut rec).await
}

/// Where opening left the resync.
enum Resynced {
    /// Before serving: these bytes.
    Foreground(u64),
    /// Left to [`Array::background_resync`].
    Background,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only a read-only open writes nothing; it alone starts its records clean, and only
    /// over a volume that stopped clean (one that did not may have rows a crash tore).
    #[test]
    fn only_a_read_only_open_of_a_clean_volume_starts_its_records_clean() {
        assert!(Mode::Foreground.writes() && Mode::Background.writes());
        assert!(!Mode::ReadOnly.writes());
        for clean in [false, true] {
            assert!(Mode::Foreground.starts_dirty(clean));
            assert!(Mode::Background.starts_dirty(clean));
        }
        assert!(Mode::ReadOnly.starts_dirty(false));
        assert!(!Mode::ReadOnly.starts_dirty(true));
    }
}
