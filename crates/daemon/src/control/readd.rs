//! Re-adding a failed remote member, and the rule for when it may come back by itself:
//! the probe for returning members (`returning.rs`) and the operator's `nbraid add` of its
//! URI (`remote_add.rs`) share them.

use super::{ControlVolume, Controls};
use nbraid_config as config;
use nbraid_core::fail_cause::{FailCause, Failure};
use nbraid_core::metadata::{Readd, Uuid};
use std::sync::Arc;

/// Whether a failed member may come back by itself (probed, re-added once it answers), or
/// why it stays failed until the operator brings it back. The one rule every path asks:
/// a remote member whose cause [`FailCause::returns_by_itself`] (its cause as recorded, after
/// a restart too).
pub fn may_return(remote: bool, failure: Option<&Failure>) -> Result<(), String> {
    let Some(f) = failure else {
        return Err("failed for a reason not kept: it stays failed until the operator brings it back (nbraid add, nbraid replace)".into());
    };
    match f.cause {
        c if c.returns_by_itself() && remote => Ok(()),
        FailCause::Unanswered | FailCause::AbsentAtStart => Err(format!(
            "a local member that failed ({}) stays failed until the operator brings it back (nbraid add, nbraid replace)",
            f.why
        )),
        FailCause::Errors => Err(format!(
            "it answered with I/O errors ({}): it stays failed until the operator brings it back (nbraid add, nbraid replace)",
            f.why
        )),
        FailCause::Operator => Err(
            "the operator failed it: it stays failed until the operator brings it back (nbraid add, nbraid replace)".into(),
        ),
        FailCause::NotKept => Err(
            "its records say it failed, written by a version that did not keep why: it stays failed until the operator brings it back (nbraid add, nbraid replace)".into(),
        ),
    }
}

/// Why a failed remote member is not re-added while its volume is past its tolerance: a
/// re-add resyncs what the member missed from the others, and some of its data has no
/// readable copy among them (the resync failed, and the member stayed "rebuilding" for
/// good). A start reads every member's records instead: the member that went on alone
/// serves again, or `--force-assemble` takes back those that missed nothing acknowledged.
const PAST_TOLERANCE: &str = "its volume is past its tolerance, and a re-add could not resync it from the others; restart nbraidd: the start assembles the volume from the members' records (naming --force-assemble where they disagree)";

/// [`may_return`], now: while the volume is past its tolerance (not `available`) nothing
/// comes back by itself ([`PAST_TOLERANCE`]). What the probe does and `status` says.
pub fn may_return_now(
    available: bool,
    remote: bool,
    failure: Option<&Failure>,
) -> Result<(), String> {
    may_return(remote, failure)?;
    available
        .then_some(())
        .ok_or_else(|| PAST_TOLERANCE.to_string())
}

/// Whether a member's name is an NBD URI (a remote member).
pub fn is_remote(name: &str) -> bool {
    nbraid_nbd::client::Uri::parse(name).is_ok()
}

/// The arrays of the other volumes that member `r` of volume `k` also serves (Matrix): a
/// member back blank is rebuilt by whichever re-adds it first, and the others then find
/// only its record there — theirs to write beside, not another array's.
fn siblings_on(controls: &Controls, k: usize, r: usize) -> Vec<Uuid> {
    let member = controls.volumes[k].array().volume().member(r);
    let shares = |o: &ControlVolume| {
        let (array, name) = (o.array(), member.name());
        let vol = array.volume();
        (0..vol.member_count()).any(|i| {
            let m = vol.member(i);
            Arc::ptr_eq(&m, &member) || m.name() == name
        })
    };
    (controls.volumes.iter().enumerate())
        .filter(|&(i, o)| i != k && shares(o))
        .map(|(_, o)| o.array().id())
        .collect()
}

/// Re-adds failed member `r` of volume `k` (the probe's, or the operator's `nbraid add` of
/// its URI): resynced over what the bitmap marks, or rebuilt whole; said in the log.
/// `Unreachable` when it does not answer; an error when it answers but is refused.
pub async fn readd_role(controls: &Controls, k: usize, r: usize) -> Result<Readd, String> {
    let v = &controls.volumes[k];
    let id = v.member_ids()[r].clone();
    let siblings = siblings_on(controls, k, r);
    let done = v.array().readd_with_siblings(r, &siblings).await;
    match &done {
        Ok(Readd::Unreachable(_)) => {}
        Ok(Readd::Resync { bytes }) => {
            tracing::warn!("{}", format!(
                "volume {}: remote member {id} is back: resyncing the {} the write-intent bitmap marks before it is read again",
                v.name,
                config::format_size(*bytes)
            ));
            v.start_readd_resync();
        }
        Ok(Readd::Rebuild) => {
            tracing::warn!("{}", format!(
                "volume {}: remote member {id} is back but cannot be resynced from the bitmap (blank, no bitmap, or its record says it missed more than the bitmap marks: a reshape, a replaced peer, a start of its own elsewhere): rebuilding it whole",
                v.name
            ));
            v.ensure_rebuild(v.rebuild_rate());
        }
        Err(_) => {}
    }
    done.map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(cause: FailCause) -> Failure {
        Failure {
            cause,
            why: "write of 4096 bytes at offset 0 failed: Input/output error".into(),
        }
    }

    #[test]
    fn nothing_comes_back_by_itself_into_a_volume_past_its_tolerance() {
        let timeout = failure(FailCause::Unanswered);
        assert_eq!(may_return_now(true, true, Some(&timeout)), Ok(()));
        let past = may_return_now(false, true, Some(&timeout)).unwrap_err();
        assert!(
            past.contains("past its tolerance") && past.contains("restart"),
            "{past}"
        );
        // A member that stays out anyway says its own reason.
        let op = may_return_now(false, true, Some(&failure(FailCause::Operator)));
        assert!(op.unwrap_err().contains("operator failed it"));
    }

    #[test]
    fn only_a_remote_member_that_stopped_answering_comes_back_by_itself() {
        for cause in [FailCause::Unanswered, FailCause::AbsentAtStart] {
            assert_eq!(may_return(true, Some(&failure(cause))), Ok(()), "{cause:?}");
            assert!(
                may_return(false, Some(&failure(cause))).is_err(),
                "{cause:?}"
            );
        }
        let eio = may_return(true, Some(&failure(FailCause::Errors))).unwrap_err();
        assert!(
            eio.contains("I/O errors") && eio.contains("Input/output error"),
            "{eio}"
        );
        assert!(eio.contains("nbraid add"), "{eio}");
        let op = may_return(true, Some(&failure(FailCause::Operator))).unwrap_err();
        assert!(op.contains("operator failed it"), "{op}");
        let old = may_return(true, Some(&failure(FailCause::NotKept))).unwrap_err();
        assert!(old.contains("did not keep why"), "{old}");
        assert!(may_return(true, None).is_err());
    }

    #[test]
    fn remote_members_are_told_by_their_uri() {
        assert!(is_remote("nbd://host:10809/export"));
        assert!(is_remote("nbd+unix:///?socket=/run/kit.sock"));
        assert!(!is_remote("/var/lib/nbraid/d0.img"));
        assert!(!is_remote("d0.img"));
    }
}
