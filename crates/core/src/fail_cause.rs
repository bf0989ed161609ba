//! Why a member was marked failed, kept beside its failed flag: whether it may come back by
//! itself depends on it. A remote member that stopped answering (connection lost, no reply
//! in time) is re-added once its server answers again; one that answered with I/O errors,
//! or that the operator failed, stays out until the operator decides.

use crate::error::VolumeError;
use crate::member::MemberError;
use std::error::Error;
use std::fmt;
use std::io;

/// The kind of a member's failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailCause {
    /// It stopped answering: the connection was lost or refused, or no reply came in time.
    Unanswered,
    /// It answered with an error (EIO from a disk or an NBD server), or what it holds
    /// proved bad (checksums, records).
    Errors,
    /// The operator failed it (`nbraid fail`).
    Operator,
    /// It was not there when the volume started (missing, or unreachable) and its records
    /// do not say it failed.
    AbsentAtStart,
    /// Its records say it failed but not why (written by a version that did not keep it).
    NotKept,
}

impl FailCause {
    /// The cause an I/O error of this kind means: the kinds a lost or silent connection
    /// gives are `Unanswered`, every other (a server's or a disk's error reply) `Errors`.
    pub fn of_io_kind(kind: io::ErrorKind) -> FailCause {
        use io::ErrorKind::*;
        match kind {
            TimedOut | NotConnected | ConnectionReset | ConnectionAborted | ConnectionRefused
            | BrokenPipe | UnexpectedEof => FailCause::Unanswered,
            _ => FailCause::Errors,
        }
    }

    /// The cause of an error: the first `io::Error` down its source chain decides; an
    /// error without one (bad contents, a refused record) is `Errors`.
    pub fn of_error(e: &(dyn Error + 'static)) -> FailCause {
        let mut at = Some(e);
        while let Some(e) = at {
            if let Some(io) = e.downcast_ref::<io::Error>() {
                return FailCause::of_io_kind(io.kind());
            }
            at = e.source();
        }
        FailCause::Errors
    }

    /// Whether a member failed for this may come back by itself (a remote one is probed and
    /// re-added once it answers): only one that stopped answering. One that answered with
    /// errors, that the operator failed, or whose cause is not known stays out until the
    /// operator decides.
    pub fn returns_by_itself(self) -> bool {
        match self {
            FailCause::Unanswered | FailCause::AbsentAtStart => true,
            FailCause::Errors | FailCause::Operator | FailCause::NotKept => false,
        }
    }

    /// Words for status and events.
    pub fn describe(self) -> &'static str {
        match self {
            FailCause::Unanswered => "stopped answering",
            FailCause::Errors => "returned I/O errors",
            FailCause::Operator => "failed by the operator",
            FailCause::AbsentAtStart => "absent at start",
            FailCause::NotKept => "recorded failed (why not kept)",
        }
    }
}

impl fmt::Display for FailCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.describe())
    }
}

/// What a member is failed with: the words logged and the cause kept.
pub trait FailWhy: fmt::Display {
    fn fail_cause(&self) -> FailCause;
}

/// Plain words: a failure the engine found (bad contents, a write left unprotected).
impl FailWhy for str {
    fn fail_cause(&self) -> FailCause {
        FailCause::Errors
    }
}

impl FailWhy for String {
    fn fail_cause(&self) -> FailCause {
        FailCause::Errors
    }
}

impl<T: FailWhy + ?Sized> FailWhy for &T {
    fn fail_cause(&self) -> FailCause {
        (**self).fail_cause()
    }
}

impl FailWhy for MemberError {
    fn fail_cause(&self) -> FailCause {
        FailCause::of_io_kind(self.source.kind())
    }
}

impl FailWhy for VolumeError {
    fn fail_cause(&self) -> FailCause {
        FailCause::of_error(self)
    }
}

/// Words with a cause given outright (the operator's fail, a member absent at start).
pub struct Because<'a>(pub FailCause, pub &'a str);

impl fmt::Display for Because<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.1)
    }
}

impl FailWhy for Because<'_> {
    fn fail_cause(&self) -> FailCause {
        self.0
    }
}

/// A failure as kept: its cause and its words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    pub cause: FailCause,
    pub why: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::member::MemberOp;

    fn member_error(kind: io::ErrorKind) -> MemberError {
        MemberError::new(
            "nbd://h/",
            MemberOp::Write,
            0,
            512,
            io::Error::new(kind, "x"),
        )
    }

    #[test]
    fn a_lost_or_silent_connection_is_unanswered() {
        for kind in [
            io::ErrorKind::TimedOut,
            io::ErrorKind::NotConnected,
            io::ErrorKind::ConnectionReset,
            io::ErrorKind::BrokenPipe,
            io::ErrorKind::UnexpectedEof,
        ] {
            assert_eq!(
                member_error(kind).fail_cause(),
                FailCause::Unanswered,
                "{kind:?}"
            );
        }
    }

    #[test]
    fn an_error_reply_is_errors() {
        // An NBD server's EIO reply, a disk's EIO, a changed identity: all `Other`.
        assert_eq!(
            member_error(io::ErrorKind::Other).fail_cause(),
            FailCause::Errors
        );
        let eio = MemberError::new(
            "d0",
            MemberOp::Read,
            0,
            4096,
            io::Error::from_raw_os_error(5),
        );
        assert_eq!(eio.fail_cause(), FailCause::Errors);
        assert_eq!("checksum threshold".fail_cause(), FailCause::Errors);
    }

    #[test]
    fn the_cause_is_found_down_the_source_chain() {
        let e = VolumeError::Member {
            member: 1,
            source: member_error(io::ErrorKind::TimedOut),
        };
        assert_eq!(e.fail_cause(), FailCause::Unanswered);
        assert_eq!(FailCause::of_error(&e), FailCause::Unanswered);
        let other = VolumeError::Assembly("x".into());
        assert_eq!(other.fail_cause(), FailCause::Errors);
    }

    #[test]
    fn only_a_member_that_stopped_answering_returns_by_itself() {
        assert!(FailCause::Unanswered.returns_by_itself());
        assert!(FailCause::AbsentAtStart.returns_by_itself());
        for stays in [FailCause::Errors, FailCause::Operator, FailCause::NotKept] {
            assert!(!stays.returns_by_itself(), "{stays:?}");
        }
    }

    #[test]
    fn a_cause_given_outright_is_kept() {
        let w = Because(FailCause::Operator, "nbraid fail");
        assert_eq!(w.fail_cause(), FailCause::Operator);
        assert_eq!(w.to_string(), "nbraid fail");
    }
}
