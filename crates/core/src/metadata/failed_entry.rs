//! How a commit records a role failed in the running volume ([`record_failed`]): a pure
//! decision per role, so that every way a member leaves is answered in one place.

use super::{MemberEntry, RecordedState};
use crate::fail_cause::FailCause;

/// Updates `entry`, the record of a role failed in the running volume (`cause`: why, when
/// known), whose member is open (`present`) or not. True when the role was active with its
/// member until now: it is marked failed on its own superblock too (`Records::commit`).
///
/// - Present: recorded failed; what it missed since was not acknowledged yet.
/// - Missing (at a start, or gone since): rebuilding from 0, so that a member coming back
///   is resynced before it rejoins — unless the operator failed it: then recorded failed,
///   nothing waits for it (a reshape goes on without its share of a window's backup), and a
///   member coming back stays out until added back (`nbraid add`, `replace`).
pub(super) fn record_failed(
    entry: &mut MemberEntry,
    present: bool,
    cause: Option<FailCause>,
) -> bool {
    // Also for one recorded already: the operator's fail outranks the first cause.
    if let Some(cause) = cause {
        entry.failed_cause = Some(cause);
    }
    if entry.state == RecordedState::Failed {
        return false;
    }
    let was_active_here = present && entry.state == RecordedState::Active;
    let given_up = present || cause == Some(FailCause::Operator);
    entry.state = match given_up {
        true => RecordedState::Failed,
        false => RecordedState::Rebuilding {
            checkpoint_bytes: 0,
        },
    };
    // Failed now, present: whatever it missed since was not acknowledged yet. Missing, it
    // may have missed anything since it went.
    entry.unacked_since_failed = present;
    was_active_here
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::Uuid;

    fn entry(state: RecordedState) -> MemberEntry {
        MemberEntry {
            uuid: Uuid([7; 16]),
            state,
            unacked_since_failed: false,
            failed_cause: None,
        }
    }

    const REBUILD_FROM_0: RecordedState = RecordedState::Rebuilding {
        checkpoint_bytes: 0,
    };

    #[test]
    fn a_present_member_is_recorded_failed_and_marked_on_itself_if_it_was_active() {
        let mut e = entry(RecordedState::Active);
        assert!(record_failed(&mut e, true, Some(FailCause::Errors)));
        assert_eq!(e.state, RecordedState::Failed);
        assert!(e.unacked_since_failed);
        let mut e = entry(RecordedState::Rebuilding {
            checkpoint_bytes: 4096,
        });
        assert!(!record_failed(&mut e, true, Some(FailCause::Errors)));
        assert_eq!(e.state, RecordedState::Failed);
    }

    #[test]
    fn a_missing_member_waits_to_be_resynced_unless_the_operator_failed_it() {
        let mut e = entry(RecordedState::Active);
        assert!(!record_failed(
            &mut e,
            false,
            Some(FailCause::AbsentAtStart)
        ));
        assert_eq!(e.state, REBUILD_FROM_0);
        assert!(!e.unacked_since_failed);
        // The operator's fail of it, at the next commit: given up for good.
        assert!(!record_failed(&mut e, false, Some(FailCause::Operator)));
        assert_eq!(e.state, RecordedState::Failed);
        assert_eq!(e.failed_cause, Some(FailCause::Operator));
        assert!(
            !e.unacked_since_failed,
            "it missed what was written meanwhile"
        );
    }

    #[test]
    fn a_role_recorded_failed_keeps_its_state_and_takes_the_operators_cause() {
        let mut e = entry(RecordedState::Failed);
        e.unacked_since_failed = true;
        assert!(!record_failed(&mut e, true, Some(FailCause::Operator)));
        assert_eq!(e.state, RecordedState::Failed);
        assert_eq!(e.failed_cause, Some(FailCause::Operator));
        assert!(e.unacked_since_failed, "left to the commit's own rule");
        assert!(!record_failed(&mut e, false, None));
        assert_eq!(e.failed_cause, Some(FailCause::Operator));
    }
}
