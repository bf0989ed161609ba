//! What assembly's verdict means for opening a volume, as a pure decision: which member stands
//! in each role, which stale roles are resynced, which roles are served degraded.

use super::member_meta::MemberMeta;
use super::{Absence, Assembly, MemberEntry, RecordedState};
use crate::fail_cause::FailCause;
use std::sync::Arc;

/// Who serves each role at open, and what is done about the others.
pub(super) struct RolePlan {
    /// By role: the member standing there (a stale or rebuilding one too), if any.
    pub(super) by_role: Vec<Option<Arc<MemberMeta>>>,
    /// Stale roles a node above them can resync: written, not read, until resynced.
    pub(super) stale: Vec<usize>,
    /// Roles served degraded: lost, recorded failed, or stale with nothing to resync them.
    pub(super) absent: Vec<usize>,
    /// Assembly's warnings, and one per stale role left out.
    pub(super) warnings: Vec<String>,
}

/// The roles of `asm` over `metas` (the config's positions).
pub(super) fn plan_roles(asm: &Assembly, metas: &[Option<Arc<MemberMeta>>]) -> RolePlan {
    let by_role = asm
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
    let is_stale = |a: &Absence| matches!(a, Absence::Stale { .. });
    let resumed = |r: usize| asm.rebuilding.iter().any(|&(x, _)| x == r);
    let stale: Vec<usize> = asm
        .absent()
        .filter(|&(r, a)| is_stale(a) && !resumed(r))
        .map(|(r, _)| r)
        .collect();
    let mut absent: Vec<usize> = asm
        .absent()
        .filter(|(_, a)| !is_stale(a))
        .map(|(r, _)| r)
        .collect();
    let (stale, unreachable) = resyncable(asm, stale, &absent);
    let mut warnings = asm.warnings.clone();
    for (r, lost) in &unreachable {
        warnings.push(format!(
            "role {r}: stale, and nothing can resync it with roles {lost:?} lost: left out"
        ));
    }
    absent.extend(unreachable.into_iter().map(|(r, _)| r));
    RolePlan {
        by_role,
        stale,
        absent,
        warnings,
    }
}

/// Splits `stale` into roles a node above them can resync and those none reaches (with the
/// roles lost meanwhile). A stale member is resynced through a node above it that holds its
/// bytes; where none reaches it (a RAID 5 group under a mirror that lost another member takes
/// no writes) it stays out: made current unresynced, it would be read with the group's
/// parity as bytes nobody wrote.
fn resyncable(
    asm: &Assembly,
    stale: Vec<usize>,
    absent: &[usize],
) -> (Vec<usize>, Vec<(usize, Vec<usize>)>) {
    let lost: Vec<usize> = (stale.iter().chain(absent).copied())
        .chain(asm.rebuilding.iter().map(|&(r, _)| r))
        .collect();
    let (ok, out): (Vec<usize>, Vec<usize>) = stale
        .into_iter()
        .partition(|&r| asm.tree.rebuilds(r, &|m| lost.contains(&m)));
    (ok, out.into_iter().map(|r| (r, lost.clone())).collect())
}

/// Why an absent role is failed at open, and the words logged: a role its records say failed
/// keeps the cause they recorded (one that failed for errors or by the operator's word stays
/// out, one recorded before causes were kept too: [`FailCause::NotKept`]); any other role is
/// absent at this start only.
pub(super) fn absent_cause(recorded: Option<&MemberEntry>) -> (FailCause, String) {
    match recorded {
        Some(m) if m.state == RecordedState::Failed => {
            let cause = m.failed_cause.unwrap_or(FailCause::NotKept);
            (cause, format!("recorded failed: {cause}"))
        }
        _ => (FailCause::AbsentAtStart, "absent at assembly".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::Uuid;

    fn entry(state: RecordedState, failed_cause: Option<FailCause>) -> MemberEntry {
        MemberEntry {
            failed_cause,
            state,
            ..MemberEntry::active(Uuid([1; 16]))
        }
    }

    #[test]
    fn a_role_recorded_failed_keeps_its_recorded_cause() {
        let failed = |c| absent_cause(Some(&entry(RecordedState::Failed, c))).0;
        assert_eq!(failed(Some(FailCause::Operator)), FailCause::Operator);
        assert_eq!(failed(Some(FailCause::Errors)), FailCause::Errors);
        assert_eq!(failed(Some(FailCause::Unanswered)), FailCause::Unanswered);
        // Written before causes were kept: it stays out.
        assert_eq!(failed(None), FailCause::NotKept);
        assert!(!failed(None).returns_by_itself());
        let (_, why) = absent_cause(Some(&entry(
            RecordedState::Failed,
            Some(FailCause::Operator),
        )));
        assert!(why.contains("operator"), "{why}");
    }

    #[test]
    fn a_role_not_recorded_failed_is_absent_at_this_start() {
        let rebuilding = RecordedState::Rebuilding {
            checkpoint_bytes: 0,
        };
        for state in [RecordedState::Active, rebuilding] {
            let e = entry(state, Some(FailCause::Operator));
            assert_eq!(absent_cause(Some(&e)).0, FailCause::AbsentAtStart);
        }
        assert_eq!(absent_cause(None).0, FailCause::AbsentAtStart);
    }
}
