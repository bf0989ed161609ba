//! A stand-in for a member that is not there (its file or device is missing): it has the
//! size the layout expects and fails every operation, so the volume treats it as lost.

use crate::buf::{Buf, SharedBuf};
use crate::member::{Member, MemberCounters, MemberError, MemberOp, MemberResult};
use futures::future::{self, BoxFuture};
use std::io;

pub struct AbsentMember {
    name: String,
    len: u64,
    counters: MemberCounters,
}

impl AbsentMember {
    pub fn new(name: impl Into<String>, len: u64) -> AbsentMember {
        AbsentMember {
            name: name.into(),
            len,
            counters: MemberCounters::default(),
        }
    }

    fn fail<T: Send + 'static>(
        &self,
        op: MemberOp,
        offset: u64,
        len: u64,
    ) -> BoxFuture<'_, MemberResult<T>> {
        let e = io::Error::new(io::ErrorKind::NotFound, "member missing at start");
        Box::pin(future::ready(Err(MemberError::new(
            &self.name, op, offset, len, e,
        ))))
    }
}

impl Member for AbsentMember {
    fn name(&self) -> &str {
        &self.name
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn read(&self, offset: u64, buf: Buf) -> BoxFuture<'_, MemberResult<Buf>> {
        self.fail(MemberOp::Read, offset, buf.len() as u64)
    }

    fn write(&self, offset: u64, data: SharedBuf, _fua: bool) -> BoxFuture<'_, MemberResult<()>> {
        self.fail(MemberOp::Write, offset, data.len() as u64)
    }

    fn flush(&self) -> BoxFuture<'_, MemberResult<()>> {
        self.fail(MemberOp::Flush, 0, 0)
    }

    fn trim(&self, offset: u64, len: u64) -> BoxFuture<'_, MemberResult<()>> {
        self.fail(MemberOp::Trim, offset, len)
    }

    fn write_zeroes(&self, offset: u64, len: u64) -> BoxFuture<'_, MemberResult<()>> {
        self.fail(MemberOp::WriteZeroes, offset, len)
    }

    fn counters(&self) -> &MemberCounters {
        &self.counters
    }
}
