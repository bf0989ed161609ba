//! A replace under way at the last shutdown goes on at the next start, from where its copy
//! had come (md resumes a replacement at its `recovery_offset` likewise).
//!
//! The records list each replace with the replacement's id and checkpoint
//! ([`super::ReplacementCheckpoint`]): every byte of the volume below it was on the
//! replacement and flushed before it was recorded, and the replacement took every write
//! since. Every commit drops the entry of a replacement no longer in its slot (it failed or
//! was given up: it has missed writes since), so an entry read at a start names one that
//! was still replacing at the last commit.
//!
//! The open looks for the replacement among the members no role claims (by the id its own
//! record holds) before anything is written: the replacement then takes every write from
//! the start on, as it did before the shutdown. Whether it goes on, and from where, is
//! [`replace_at_start`]'s decision.

use super::heal::Heal;
use super::member_meta::MemberMeta;
use super::parts::Parts;
use super::{Assembly, Probe, ReplacementCheckpoint, Uuid};
use std::sync::Arc;

/// A replace the start resumed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResumedReplacement {
    pub role: usize,
    /// The replacement's position among the members the start was given.
    pub position: usize,
    /// The volume's bytes below this are current on it; the rebuild copies the rest.
    pub from_bytes: u64,
}

/// What a start does with a replace the records list: one rule for the open ([`resume`])
/// and for the checks that say beforehand what a start will do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReplaceAtStart {
    /// The copy goes on: the volume's bytes below `from_bytes` are current on the
    /// replacement.
    GoesOn { from_bytes: u64 },
    /// The replace is dropped from the records, for this reason; its replacement, if found,
    /// stands by as a spare.
    Dropped(String),
}

/// What the replace of a role goes on with at a start. `reshaping`: a reshape is under way
/// (none goes on then); `role_current`: the role's member is current (the copy reads
/// through it); `found`: the replacement is among the members no role claims;
/// `checkpoint_bytes`: the records' checkpoint; `clean`: the last shutdown was clean. The
/// copy resumes at the checkpoint after a clean shutdown (the records were marked clean only
/// after every write it took was flushed), from the start after an unclean one, where a
/// write in flight at the crash may have reached its member and not it (and a resync
/// rewrites parity and copies, not the replacement's data chunks).
pub fn replace_at_start(
    reshaping: bool,
    (role, role_current): (usize, bool),
    found: bool,
    (checkpoint_bytes, clean): (u64, bool),
) -> ReplaceAtStart {
    let why = if reshaping {
        "a reshape is under way".to_string()
    } else if !role_current {
        format!("role {role}'s member is not current")
    } else if !found {
        "the replacement was not found".to_string()
    } else {
        let from_bytes = if clean { checkpoint_bytes } else { 0 };
        return ReplaceAtStart::GoesOn { from_bytes };
    };
    ReplaceAtStart::Dropped(why)
}

/// Whether `probe` is the replacement of volume `name` of array `array` with id `id`: its
/// superblock carries that id and a record of the volume (how the open and the checks find
/// it among the members no role claims).
pub fn is_replacement(probe: &Probe, (array, name): (Uuid, &str), id: Uuid) -> bool {
    match probe {
        Probe::Superblock(sb, _) => {
            sb.member == id && (sb.volumes.iter()).any(|v| v.name == name && v.array == array)
        }
        _ => false,
    }
}

/// The position and meta of the replacement with id `id` among `metas`, of those at
/// positions no role claims (`claimed`).
fn find_replacement(
    metas: &[Option<Arc<MemberMeta>>],
    claimed: &[usize],
    (array, name): (Uuid, &str),
    id: Uuid,
) -> Option<(usize, Arc<MemberMeta>)> {
    (0..metas.len())
        .filter(|p| !claimed.contains(p))
        .find_map(|p| {
            let m = metas[p].as_ref()?;
            is_replacement(m.probe(), (array, name), id).then(|| (p, m.clone()))
        })
}

/// Step 5 of the open (after the roles are taken, before anything is written): each
/// replace the records list goes on when its role's member is current and its replacement
/// is found unclaimed among `metas`; the others are dropped from the records, said in
/// `warnings`. Returns the replaces resumed. None goes on while a reshape is under way.
pub(super) async fn resume(
    (p, heal, reshaping): (Parts<'_>, &Heal, bool),
    asm: &Assembly,
    metas: &[Option<Arc<MemberMeta>>],
    warnings: &mut Vec<String>,
) -> Vec<ResumedReplacement> {
    let claimed: Vec<usize> = asm.roles.iter().filter_map(|r| r.clone().ok()).collect();
    let mut rec = p.records.lock().await;
    let mut resumed = Vec::new();
    for x in std::mem::take(&mut rec.replacements) {
        let role = x.role as usize;
        let current = role < p.volume.member_count() && p.volume.member_is_current(role);
        let found = find_replacement(metas, &claimed, (asm.array, p.name()), x.member);
        let at_start = replace_at_start(
            reshaping,
            (role, current),
            found.is_some(),
            (x.checkpoint_bytes, asm.clean),
        );
        let outcome = match (at_start, found) {
            (ReplaceAtStart::GoesOn { from_bytes }, Some((position, meta))) => (heal
                .resume_replacement(p, role, (meta, x.member), from_bytes))
            .map(|()| (position, from_bytes))
            .map_err(|e| e.to_string()),
            (ReplaceAtStart::Dropped(why), _) => Err(why),
            (ReplaceAtStart::GoesOn { .. }, None) => Err("the replacement was not found".into()),
        };
        match outcome {
            Ok((position, from_bytes)) => {
                tracing::info!(
                    "volume `{}`: the replace of role {role} under way at the last shutdown goes on {}",
                    p.name(),
                    match asm.clean {
                        true => format!("from its checkpoint, byte {from_bytes} of the volume"),
                        false => "from the start (the shutdown was not clean)".to_string(),
                    }
                );
                rec.replacements.push(ReplacementCheckpoint {
                    checkpoint_bytes: from_bytes,
                    ..x
                });
                resumed.push(ResumedReplacement {
                    role,
                    position,
                    from_bytes,
                });
            }
            Err(why) => warnings.push(format!(
                "the replace of role {role} under way at the last shutdown does not go on ({why}): its replacement, if found, stands by as a spare; `nbraid replace` starts it again"
            )),
        }
    }
    resumed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at_start(reshaping: bool, current: bool, found: bool, clean: bool) -> ReplaceAtStart {
        replace_at_start(reshaping, (3, current), found, (64 << 20, clean))
    }

    #[test]
    fn a_clean_shutdown_keeps_the_checkpoint_and_an_unclean_one_copies_anew() {
        let goes_on = |from_bytes| ReplaceAtStart::GoesOn { from_bytes };
        assert_eq!(at_start(false, true, true, true), goes_on(64 << 20));
        assert_eq!(at_start(false, true, true, false), goes_on(0));
    }

    #[test]
    fn a_reshape_a_role_not_current_or_a_replacement_not_found_drops_the_replace() {
        let dropped = |why: &str| ReplaceAtStart::Dropped(why.to_string());
        assert_eq!(
            at_start(true, true, true, true),
            dropped("a reshape is under way")
        );
        assert_eq!(
            at_start(false, false, true, true),
            dropped("role 3's member is not current")
        );
        assert_eq!(
            at_start(false, true, false, true),
            dropped("the replacement was not found")
        );
    }
}
