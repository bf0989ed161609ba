//! Hot spares and automatic rebuild in the daemon.
//!
//! - **Assembly over members and spares.** The config's spares that carry this volume's
//!   record join assembly after the members (positions `members.len()..`): a spare that took
//!   a role serves it by its superblock although the config still lists the member it
//!   replaced, and that old member (its id no longer named) is ignored. Both are said loudly,
//!   with the `members = [...]` line that matches the superblocks.
//! - **Standing by.** Spares no role claims are handed to the array
//!   ([`Array::add_spare`]) when they are blank (missing files were created sparse), or carry
//!   only an old record of this volume. So is a member listed in `members` that is blank and
//!   claims no role: a wiped old member, or a new disk put at a lost member's path.
//!   Anything else (another array's records, non-zero bytes where the superblock goes) is
//!   never overwritten: warned about and left alone.
//! - **Automatic rebuild.** A watcher per volume looks at the volume's failed count (one
//!   atomic load every [`WATCH_INTERVAL`]); when it changes — a member failed past the
//!   engine's tolerance of I/O errors, `nbraid fail`, a new member installed — failed roles
//!   take spares ([`Array::use_spares`]: the most endangered first, the smallest spare that
//!   fits) and the rebuild starts at the volume's `rebuild_rate`, logged loudly and shown by
//!   `nbraid status`. At start the same look resumes rebuilds left at a checkpoint and puts
//!   spares in roles lost before the start.

use crate::assemble::Opened;
use crate::control::{ControlVolume, Controls};
use nbraid_config::{self as config, Config};
use nbraid_core::metadata::{Absence, Array, MemberMeta, OpenReport, Probe};
use nbraid_core::Member;
use std::sync::Arc;
use std::time::Duration;

/// How often the watcher looks at a volume's failed count.
pub const WATCH_INTERVAL: Duration = Duration::from_millis(200);

/// A member or spare the daemon knows by its config id (or, added at run time, its path).
#[derive(Clone)]
pub struct Known {
    pub id: String,
    pub member: Arc<dyn Member>,
}

/// What volume `name`'s records say about member `o`: `None` when it carries none (blank,
/// missing, unreadable), else whether every record on it is this volume's.
fn only_this_volume(o: &Opened, name: &str) -> Option<bool> {
    match o.meta()?.probe() {
        Probe::Superblock(sb, _) if sb.volumes.iter().any(|v| v.name == name) => {
            Some(sb.volumes.iter().all(|v| v.name == name))
        }
        Probe::Superblock(..) => Some(false),
        _ => None,
    }
}

/// Volume `v`'s spares as assembly sees them (after the members): those carrying the
/// volume's record, the others as missing (a blank spare holds no role).
pub fn spares_for_assembly(v: &config::Volume, opened: &[Opened]) -> Vec<Option<Arc<MemberMeta>>> {
    v.heal
        .spares
        .iter()
        .map(|&m| match only_this_volume(&opened[m], &v.name) {
            Some(true) => opened[m].meta().cloned(),
            _ => None,
        })
        .collect()
}

/// The config id of assembly position `p` (members, then spares).
pub fn id_at(config: &Config, v: &config::Volume, p: usize) -> String {
    let m = v
        .members
        .get(p)
        .or_else(|| v.heal.spares.get(p - v.members.len()))
        .copied();
    m.map_or("?".into(), |m| config.members[m].id.clone())
}

/// Positions (members, then spares) that serve or are recorded in some role.
fn claimed(report: &OpenReport) -> Vec<usize> {
    report
        .roles
        .iter()
        .filter_map(|r| match r {
            Ok(p) | Err(Absence::Stale { member: p, .. } | Absence::Failed { member: p }) => {
                Some(*p)
            }
            Err(Absence::Lost) => None,
        })
        .collect()
}

/// After the volume started: hands every usable spare (and blank unclaimed member) to the
/// array, and returns what the operator must hear (a spare holding a role, an old member
/// ignored, a spare that cannot be used) and every member and spare known by id.
/// `by_role` are the config ids by role, as they now stand.
pub fn adopt(
    array: &Array,
    config: &Config,
    v: &config::Volume,
    opened: &[Opened],
    report: &OpenReport,
    by_role: &[String],
) -> (Vec<String>, Vec<Known>) {
    let n = v.members.len();
    let claimed = claimed(report);
    let mut notes = Vec::new();
    let mut known = Vec::new();
    let positions = v.members.iter().chain(&v.heal.spares).enumerate();
    for (p, &m) in positions {
        let id = &config.members[m].id;
        let o = &opened[m];
        let Some(meta) = o.meta() else {
            if p >= n {
                notes.push(format!("spare {id} is missing: not standing by"));
            }
            continue;
        };
        known.push(Known {
            id: id.clone(),
            member: meta.member().clone(),
        });
        if claimed.contains(&p) {
            if let Some(role) = report.roles.iter().position(|r| r.as_ref() == Ok(&p)) {
                if p >= n {
                    notes.push(format!(
                        "member {id} (listed in spares) now holds role {role}; update the config: members = [{}]",
                        by_role.iter().map(|i| format!("\"{i}\"")).collect::<Vec<_>>().join(", ")
                    ));
                }
            }
            continue;
        }
        let blank = o.is_blank() || o.was_created();
        let usable = match only_this_volume(o, &v.name) {
            None if blank => true,
            None => {
                notes.push(format!(
                    "{} {id} has no nbraid superblock but is not blank (non-zero bytes in its first MiB): not used as a spare — wipe its first MiB if its data is no longer wanted",
                    if p < n { "member" } else { "spare" }
                ));
                false
            }
            Some(true) if p < n => {
                notes.push(format!(
                    "member {id} no longer holds a role in volume {} (rebuilt over, replaced or removed): ignored — remove it from the config, or wipe its first MiB to make it a spare",
                    v.name
                ));
                false
            }
            Some(true) => true,
            Some(false) => {
                notes.push(format!(
                    "spare {id} carries another volume's records: not used as a spare — wipe its first MiB if its data is no longer wanted"
                ));
                false
            }
        };
        if !usable {
            continue;
        }
        match array.add_spare(meta.clone()) {
            Ok(()) if p < n => notes.push(format!(
                "member {id} is blank and holds no role: it stands by as a spare (a lost role is rebuilt onto it)"
            )),
            Ok(()) => {}
            Err(e) => notes.push(format!("spare {id}: {e}")),
        }
    }
    (notes, known)
}

/// Puts spares in failed roles and makes sure a rebuild runs for whatever is being rebuilt
/// or replaced; says loudly what it started.
pub async fn heal_once(v: &ControlVolume) {
    let array = &v.array;
    let wanting = array.roles_wanting_a_member();
    if !wanting.is_empty() && array.spare_count() > 0 {
        let before = v.member_ids();
        match array.use_spares().await {
            Ok(roles) => {
                let after = v.member_ids();
                for r in roles {
                    let msg = format!(
                        "volume {}: member {} failed: rebuilding its role {r} onto spare {} ({})",
                        v.name,
                        before[r],
                        after[r],
                        rate_text(v.rebuild_rate_bytes_per_s)
                    );
                    tracing::warn!("{msg}");
                    eprintln!("nbraidd: {msg}");
                }
            }
            Err(e) => tracing::error!("volume {}: putting a spare in place: {e}", v.name),
        }
    }
    if !array.rebuilding().is_empty() {
        v.ensure_rebuild(v.rebuild_rate_bytes_per_s);
    }
}

fn rate_text(bytes_per_s: u64) -> String {
    match bytes_per_s {
        0 => "rate unlimited".into(),
        r => format!("at {}/s", config::format_size(r)),
    }
}

/// Watches every volume: on a change of its failed count, [`heal_once`].
pub async fn watch(controls: Arc<Controls>) {
    let mut seen: Vec<Option<usize>> = vec![None; controls.volumes.len()];
    loop {
        for (v, seen) in controls.volumes.iter().zip(seen.iter_mut()) {
            let now = v.array.volume().failed_count();
            if *seen != Some(now) {
                *seen = Some(now);
                heal_once(v).await;
            }
        }
        tokio::time::sleep(WATCH_INTERVAL).await;
    }
}
