//! A run's attempts (`StripeWriter::write_run`): what each failed attempt teaches the next —
//! a child whose read failed is planned around, read errors that leave no plan are read
//! again ([`REREADS`] times) — and when the attempts are over. Pure: the state and its
//! decision, no I/O.

use super::super::chunks::Retry;
use crate::VolumeError;

/// How many more times a write reads the children whose read errors left it no plan
/// before it gives the stripe's redundancy up (and fails them).
pub(in crate::raid) const REREADS: u32 = 3;

/// What a run's attempts know so far.
pub(super) struct Attempts {
    /// Children the next plan treats as lost: failed members, and children whose reads
    /// failed during this write.
    pub(super) plan_lost: Vec<bool>,
    /// Children whose reads for this write failed (not failed members).
    pub(super) unreadable: Vec<usize>,
    rereads: u32,
    tries: usize,
}

/// How the next attempt differs.
#[derive(Debug)]
pub(super) enum Again {
    /// Planned without this child, whose read failed with this error.
    Without(usize, VolumeError),
    /// The children whose reads failed are read again.
    ReadAgain,
}

/// Why a run's attempts ended without writing the run with its redundancy.
pub(super) struct Exhausted {
    pub(super) error: VolumeError,
    /// A read error while rebuilding the plan's lost chunks (whose, not known).
    pub(super) rebuild_failed: bool,
    /// Member writes went out: the stripe's parity no longer agrees with its members.
    pub(super) wrote: bool,
}

impl Attempts {
    /// Before the first attempt: the children lost over the run.
    pub(super) fn new(lost: Vec<bool>) -> Attempts {
        Attempts {
            plan_lost: lost,
            unreadable: Vec::new(),
            rereads: 0,
            tries: 0,
        }
    }

    /// An attempt starts; whether it is a retry (plans read again what they need).
    pub(super) fn start(&mut self) -> bool {
        self.tries += 1;
        self.tries > 1
    }

    /// After a failed attempt: how to try again (with what was learnt), or why not.
    pub(super) fn after(&mut self, failed: Retry) -> Result<Again, Exhausted> {
        let children = self.plan_lost.len();
        let rebuild_failed = matches!(failed, Retry::Rebuild(_));
        let wrote = matches!(failed, Retry::Lost(_));
        match failed {
            // A read for the plan failed: treat that child as lost and plan again.
            Retry::Read(c, e) if self.tries <= children => {
                self.plan_lost[c] = true;
                self.unreadable.push(c);
                Ok(Again::Without(c, e))
            }
            // Read errors left no plan: they often pass, so read those children again before
            // giving the stripe's redundancy up.
            _ if self.rereads < REREADS && (!self.unreadable.is_empty() || rebuild_failed) => {
                self.rereads += 1;
                for c in self.unreadable.drain(..) {
                    self.plan_lost[c] = false;
                }
                self.tries = 0;
                Ok(Again::ReadAgain)
            }
            Retry::Read(_, error)
            | Retry::Rebuild(error)
            | Retry::Fatal(error)
            | Retry::Lost(error) => Err(Exhausted {
                error,
                rebuild_failed,
                wrote,
            }),
        }
    }

    /// Whether read errors (not failed members alone) are why the attempts ended
    /// (`rebuild_failed`: [`Exhausted::rebuild_failed`]).
    pub(super) fn read_errors_found(&self, rebuild_failed: bool) -> bool {
        !self.unreadable.is_empty() || rebuild_failed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io() -> VolumeError {
        VolumeError::Unavailable {
            reason: "test".into(),
        }
    }

    #[test]
    fn a_failed_read_is_planned_around_then_read_again_then_given_up() {
        let mut a = Attempts::new(vec![false; 3]);
        let mut rereads = 0;
        loop {
            a.start();
            // Child 1's reads fail every time; with it lost no plan is left (stands for a
            // degraded stripe).
            let failed = if a.plan_lost[1] {
                Retry::Fatal(io())
            } else {
                Retry::Read(1, io())
            };
            let was_lost = a.plan_lost[1];
            match a.after(failed) {
                Ok(Again::ReadAgain) => {
                    assert!(was_lost);
                    rereads += 1;
                    assert!(!a.plan_lost[1], "read again: planned with it");
                }
                Ok(Again::Without(c, _)) => {
                    assert!(c == 1 && a.plan_lost[1] && a.unreadable == vec![1])
                }
                Err(x) => {
                    assert!(a.read_errors_found(x.rebuild_failed) && !x.wrote && !x.rebuild_failed);
                    break;
                }
            }
        }
        assert_eq!(rereads, REREADS);
    }

    #[test]
    fn lost_members_alone_give_up_at_once_and_say_whether_writes_went_out() {
        let mut a = Attempts::new(vec![true, true, false]);
        a.start();
        let x = a
            .after(Retry::Lost(io()))
            .expect_err("no reread without read errors");
        assert!(x.wrote && !a.read_errors_found(x.rebuild_failed));
        let mut a = Attempts::new(vec![true, true, false]);
        a.start();
        let x = a.after(Retry::Fatal(io())).expect_err("given up");
        assert!(!x.wrote && !a.read_errors_found(x.rebuild_failed));
    }

    #[test]
    fn a_failed_rebuild_is_read_again_before_giving_up() {
        let mut a = Attempts::new(vec![true, false, false]);
        for _ in 0..REREADS {
            a.start();
            assert!(matches!(
                a.after(Retry::Rebuild(io())),
                Ok(Again::ReadAgain)
            ));
        }
        a.start();
        let x = a.after(Retry::Rebuild(io())).expect_err("given up");
        assert!(x.rebuild_failed && a.read_errors_found(x.rebuild_failed));
    }
}
