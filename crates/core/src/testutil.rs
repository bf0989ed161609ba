//! Test-only members for core's own unit tests, which cannot use `nbraid-sim` (it depends on
//! core, so its `Member` is a distinct trait to them).

use crate::buf::{Buf, SharedBuf};
use crate::member::{Member, MemberCounters, MemberResult};
use crate::memory::MemoryMember;
use crate::timer;
use futures::future::BoxFuture;
use futures::FutureExt;
use std::time::Duration;

/// A memory member whose every operation first waits `latency` (on the timer thread, so the
/// futures work under any executor).
pub(crate) struct SlowMember {
    inner: MemoryMember,
    latency: Duration,
}

impl SlowMember {
    pub(crate) fn new(inner: MemoryMember, latency: Duration) -> SlowMember {
        SlowMember { inner, latency }
    }

    async fn wait(&self) {
        if !self.latency.is_zero() {
            timer::sleep(self.latency).await;
        }
    }
}

impl Member for SlowMember {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn read(&self, offset: u64, buf: Buf) -> BoxFuture<'_, MemberResult<Buf>> {
        async move {
            self.wait().await;
            self.inner.read(offset, buf).await
        }
        .boxed()
    }
    fn write(&self, offset: u64, data: SharedBuf, fua: bool) -> BoxFuture<'_, MemberResult<()>> {
        async move {
            self.wait().await;
            self.inner.write(offset, data, fua).await
        }
        .boxed()
    }
    fn flush(&self) -> BoxFuture<'_, MemberResult<()>> {
        async move {
            self.wait().await;
            self.inner.flush().await
        }
        .boxed()
    }
    fn trim(&self, offset: u64, len: u64) -> BoxFuture<'_, MemberResult<()>> {
        async move {
            self.wait().await;
            self.inner.trim(offset, len).await
        }
        .boxed()
    }
    fn write_zeroes(&self, offset: u64, len: u64) -> BoxFuture<'_, MemberResult<()>> {
        async move {
            self.wait().await;
            self.inner.write_zeroes(offset, len).await
        }
        .boxed()
    }
    fn counters(&self) -> &MemberCounters {
        self.inner.counters()
    }
}
