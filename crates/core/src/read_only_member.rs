//! [`ReadOnlyMember`]: a member whose every write is refused before it reaches the storage,
//! for a read-only start's members that are not opened from a file (a remote export, a
//! memory member). Files and devices are opened `O_RDONLY` instead
//! ([`crate::UringFile::open_read_only`]); either way, a write nothing foresaw (a mirror's
//! read repair) is refused by the member rather than carried out.

use crate::buf::{Buf, SharedBuf};
use crate::member::{
    IdentityCheck, Member, MemberCounters, MemberError, MemberOp, MemberResult, OpenFile,
    ReadOnlyRefusal,
};
use futures::future::BoxFuture;
use futures::FutureExt;
use std::sync::Arc;

/// `inner`, read-only: reads pass, every write, trim and write-zeroes is refused (`EROFS`)
/// without reaching it, and a flush has nothing to sync.
pub struct ReadOnlyMember(pub Arc<dyn Member>);

impl ReadOnlyMember {
    fn refused(&self, op: MemberOp, offset: u64, len: u64) -> BoxFuture<'_, MemberResult<()>> {
        let why = ReadOnlyRefusal::io_error();
        let e = MemberError::new(self.0.name(), op, offset, len, why);
        futures::future::ready(Err(e)).boxed()
    }
}

impl Member for ReadOnlyMember {
    fn name(&self) -> &str {
        self.0.name()
    }
    fn len(&self) -> u64 {
        self.0.len()
    }
    fn memory_backed(&self) -> bool {
        self.0.memory_backed()
    }
    fn guard_identity(&self, check: Arc<dyn IdentityCheck>) {
        self.0.guard_identity(check)
    }
    fn identity_lost(&self) -> Option<String> {
        self.0.identity_lost()
    }
    fn readmit(&self) {
        self.0.readmit()
    }
    fn refused_now(&self) -> Option<String> {
        self.0.refused_now()
    }
    fn open_file(&self) -> Option<std::io::Result<OpenFile>> {
        self.0.open_file()
    }
    fn grow_to(&self, len_bytes: u64) -> Result<u64, String> {
        self.0.grow_to(len_bytes)
    }
    fn read(&self, offset: u64, buf: Buf) -> BoxFuture<'_, MemberResult<Buf>> {
        self.0.read(offset, buf)
    }
    fn read_vectored(&self, offset: u64, bufs: Vec<Buf>) -> BoxFuture<'_, MemberResult<Vec<Buf>>> {
        self.0.read_vectored(offset, bufs)
    }
    fn write(&self, offset: u64, data: SharedBuf, _fua: bool) -> BoxFuture<'_, MemberResult<()>> {
        self.refused(MemberOp::Write, offset, data.len() as u64)
    }
    fn write_in_window(
        &self,
        _window: std::ops::Range<u64>,
        offset: u64,
        data: SharedBuf,
        _fua: bool,
    ) -> BoxFuture<'_, MemberResult<()>> {
        self.refused(MemberOp::Write, offset, data.len() as u64)
    }
    fn write_vectored(
        &self,
        offset: u64,
        data: Vec<SharedBuf>,
        _fua: bool,
    ) -> BoxFuture<'_, MemberResult<()>> {
        let len = data.iter().map(|d| d.len() as u64).sum();
        self.refused(MemberOp::Write, offset, len)
    }
    fn flush(&self) -> BoxFuture<'_, MemberResult<()>> {
        // Nothing was written through it: nothing to sync.
        futures::future::ready(Ok(())).boxed()
    }
    fn trim(&self, offset: u64, len: u64) -> BoxFuture<'_, MemberResult<()>> {
        self.refused(MemberOp::Trim, offset, len)
    }
    fn write_zeroes(&self, offset: u64, len: u64) -> BoxFuture<'_, MemberResult<()>> {
        self.refused(MemberOp::WriteZeroes, offset, len)
    }
    fn counters(&self) -> &MemberCounters {
        self.0.counters()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryMember;
    use futures::executor::block_on;

    #[test]
    fn reads_pass_and_every_write_is_refused_before_the_storage() {
        let inner = Arc::new(MemoryMember::new("m", 1 << 20));
        let seven = Buf::copy_from(&[7u8; 4096]).freeze();
        block_on(inner.write(0, seven.clone(), false)).unwrap();
        let m = ReadOnlyMember(inner.clone());
        let zero = Buf::copy_from(&[0u8; 4096]).freeze();
        let refused = [
            block_on(m.write(0, zero.clone(), true)),
            block_on(m.write_in_window(0..8192, 0, zero.clone(), false)),
            block_on(m.write_vectored(0, vec![zero.clone(), zero], false)),
            block_on(m.trim(0, 4096)),
            block_on(m.write_zeroes(0, 4096)),
        ];
        for r in refused {
            let e = r.expect_err("refused");
            assert!(e.to_string().contains("read_only = true"), "{e}");
        }
        block_on(m.flush()).unwrap();
        let got = block_on(m.read(0, Buf::new(4096))).unwrap();
        assert_eq!(&got[..], &seven[..], "the storage kept its bytes");
    }
}
