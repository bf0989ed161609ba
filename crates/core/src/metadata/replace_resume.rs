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
//! the start on, as it did before the shutdown. What it resumes from is
//! [`resume_from`]'s decision.

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

/// Where a replacement's copy resumes: at its checkpoint after a clean shutdown (the
/// records were marked clean only after every write it took was flushed); from the start
/// after an unclean one, where a write in flight at the crash may have reached its member
/// and not it (and a resync rewrites parity and copies, not the replacement's data chunks).
pub(super) fn resume_from(checkpoint_bytes: u64, clean: bool) -> u64 {
    if clean {
        checkpoint_bytes
    } else {
        0
    }
}

/// Whether `probe` is the replacement with id `id` of volume `name` of array `array`: its
/// superblock carries that id and a record of the volume.
fn is_replacement(probe: &Probe, (array, name): (Uuid, &str), id: Uuid) -> bool {
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
        let from_bytes = resume_from(x.checkpoint_bytes, asm.clean);
        let outcome = match found {
            _ if reshaping => Err("a reshape is under way".to_string()),
            _ if !current => Err(format!("role {role}'s member is not current")),
            None => Err("the replacement was not found".to_string()),
            Some((position, meta)) => {
                (heal.resume_replacement(p, role, (meta, x.member), from_bytes))
                    .map(|()| position)
                    .map_err(|e| e.to_string())
            }
        };
        match outcome {
            Ok(position) => {
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

    #[test]
    fn a_clean_shutdown_keeps_the_checkpoint_and_an_unclean_one_copies_anew() {
        assert_eq!(resume_from(64 << 20, true), 64 << 20);
        assert_eq!(resume_from(64 << 20, false), 0);
        assert_eq!(resume_from(0, true), 0);
    }
}
