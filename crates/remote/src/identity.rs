//! The member's identity on a re-opened connection. A server restarted on a blank file of the
//! same size, on another member's file or on a stale copy answers like the export it was:
//! size and flags ([`crate::change`]) cannot tell. The member's superblock can, and only the
//! engine knows its format: it gives the member an [`IdentityCheck`] (`Member::
//! guard_identity`), which a re-opened connection passes before it serves anything
//! ([`Disk`]: that one connection, read-only, for the check alone).
//!
//! What the member does with the verdict is [`gate`]'s: pure, unit-tested.

use futures::future::BoxFuture;
use futures::FutureExt;
use nbraid_core::{
    Buf, IdentityCheck, IdentityFault, Member, MemberCounters, MemberError, MemberOp, MemberResult,
    SharedBuf,
};
use nbraid_nbd::client::Client;
use std::io;
use std::time::Duration;

/// What a re-opened connection does after the identity check.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Gate {
    /// Serve on it.
    Serve,
    /// Drop it and try again later (its superblock could not be read): why.
    Retry(String),
    /// Drop it, and fail every request naming what the export holds instead, until a
    /// connection finds the member again or the member is readmitted.
    NotTheMember(String),
}

/// The gate for a re-opened connection: `readmitted` (every volume on the member failed it:
/// the re-add judges what it holds) serves it unchecked, as does a member with no check
/// (`verdict` `None`).
pub(crate) fn gate(readmitted: bool, verdict: Option<Result<(), IdentityFault>>) -> Gate {
    match (readmitted, verdict) {
        (true, _) | (false, None) | (false, Some(Ok(()))) => Gate::Serve,
        (false, Some(Err(IdentityFault::Unreadable(why)))) => {
            Gate::Retry(format!("its superblock could not be read: {why}"))
        }
        (false, Some(Err(IdentityFault::NotTheMember(found)))) => Gate::NotTheMember(found),
    }
}

/// Runs `check` over connection `client` alone (not yet serving the member).
pub(crate) async fn verify(
    check: &dyn IdentityCheck,
    name: &str,
    len: u64,
    client: &Client,
    timeout: Duration,
) -> Result<(), IdentityFault> {
    let disk = Disk {
        name,
        len,
        client,
        timeout,
        counters: MemberCounters::default(),
    };
    check.verify(&disk).await
}

/// One connection as a read-only member, for the identity check.
struct Disk<'a> {
    name: &'a str,
    len: u64,
    client: &'a Client,
    timeout: Duration,
    counters: MemberCounters,
}

impl Disk<'_> {
    fn refused<T>(&self, op: MemberOp, offset: u64, len: u64) -> BoxFuture<'_, MemberResult<T>>
    where
        T: Send + 'static,
    {
        let e = io::Error::new(
            io::ErrorKind::PermissionDenied,
            "the identity check only reads",
        );
        let e = MemberError::new(self.name, op, offset, len, e);
        async move { Err(e) }.boxed()
    }
}

impl Member for Disk<'_> {
    fn name(&self) -> &str {
        self.name
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn read(&self, offset: u64, mut buf: Buf) -> BoxFuture<'_, MemberResult<Buf>> {
        let len = buf.len();
        async move {
            let err =
                |e: io::Error| MemberError::new(self.name, MemberOp::Read, offset, len as u64, e);
            let data = tokio::time::timeout(self.timeout, self.client.read(offset, len))
                .await
                .map_err(|_| {
                    err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("no reply within {:?}", self.timeout),
                    ))
                })?
                .map_err(|e| err(e.into()))?;
            buf.copy_from_slice(&data);
            Ok(buf)
        }
        .boxed()
    }

    fn write(&self, offset: u64, data: SharedBuf, _fua: bool) -> BoxFuture<'_, MemberResult<()>> {
        self.refused(MemberOp::Write, offset, data.len() as u64)
    }

    fn flush(&self) -> BoxFuture<'_, MemberResult<()>> {
        self.refused(MemberOp::Flush, 0, 0)
    }

    fn trim(&self, offset: u64, len: u64) -> BoxFuture<'_, MemberResult<()>> {
        self.refused(MemberOp::Trim, offset, len)
    }

    fn write_zeroes(&self, offset: u64, len: u64) -> BoxFuture<'_, MemberResult<()>> {
        self.refused(MemberOp::WriteZeroes, offset, len)
    }

    fn counters(&self) -> &MemberCounters {
        &self.counters
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn not(found: &str) -> Option<Result<(), IdentityFault>> {
        Some(Err(IdentityFault::NotTheMember(found.into())))
    }

    #[test]
    fn a_connection_serves_only_once_the_member_is_found_on_it() {
        assert_eq!(gate(false, Some(Ok(()))), Gate::Serve);
        assert_eq!(
            gate(false, not("a blank disk")),
            Gate::NotTheMember("a blank disk".into())
        );
        let unreadable = Some(Err(IdentityFault::Unreadable("reset".into())));
        assert!(matches!(gate(false, unreadable), Gate::Retry(w) if w.contains("reset")));
    }

    #[test]
    fn a_member_with_no_check_or_readmitted_serves_unchecked() {
        assert_eq!(gate(false, None), Gate::Serve);
        // Every volume failed it: the re-add reads it and judges what it holds.
        assert_eq!(gate(true, not("a blank disk")), Gate::Serve);
        assert_eq!(gate(true, None), Gate::Serve);
    }
}
