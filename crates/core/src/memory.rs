//! A member held in memory, for tests and benchmarks. Sparse: 64 KiB chunks are allocated on
//! first write and dropped again when trimmed whole, so large members cost only what is
//! written. Operations complete at once on the calling thread.

use crate::buf::{Buf, SharedBuf};
use crate::member::{check_range, Member, MemberCounters, MemberOp, MemberResult};
use futures::future::{self, BoxFuture};
use futures::FutureExt;
use parking_lot::Mutex;

const CHUNK: u64 = 64 << 10;

pub struct MemoryMember {
    /// Name in messages.
    name: String,
    /// Bytes offered.
    len: u64,
    /// `chunks[i]` holds bytes `[i*CHUNK, (i+1)*CHUNK)`; `None` reads as zeroes.
    chunks: Vec<Mutex<Option<Box<[u8]>>>>,
    counters: MemberCounters,
}

impl MemoryMember {
    pub fn new(name: impl Into<String>, len: u64) -> MemoryMember {
        let n = len.div_ceil(CHUNK) as usize;
        MemoryMember {
            name: name.into(),
            len,
            chunks: (0..n).map(|_| Mutex::new(None)).collect(),
            counters: MemberCounters::default(),
        }
    }

    /// A member of `len` bytes that keeps only its first `kept_bytes`: reads past them are
    /// zeroes, writes past them are refused. Reading a large device's superblocks through
    /// assembly's own reader (which checks them against the member's real size) without
    /// holding the device open or its size in memory.
    pub fn with_prefix(name: impl Into<String>, len: u64, kept_bytes: u64) -> MemoryMember {
        let mut m = MemoryMember::new(name, kept_bytes.min(len));
        m.len = len;
        m
    }

    /// The bytes it can hold: `len`, or fewer for [`MemoryMember::with_prefix`].
    fn kept_bytes(&self) -> u64 {
        (self.chunks.len() as u64 * CHUNK).min(self.len)
    }

    /// Copies bytes out without counting an operation (for test assertions).
    pub fn peek(&self, offset: u64, out: &mut [u8]) {
        self.copy_out(offset, out);
    }

    /// Overwrites bytes without counting an operation (tests use it to corrupt a copy).
    pub fn poke(&self, offset: u64, data: &[u8]) {
        self.copy_in(offset, data);
    }

    fn pieces(offset: u64, len: u64) -> impl Iterator<Item = (usize, usize, usize, usize)> {
        // (chunk, offset in chunk, offset in caller's slice, bytes)
        let end = offset + len;
        let mut at = offset;
        std::iter::from_fn(move || {
            if at >= end {
                return None;
            }
            let chunk = (at / CHUNK) as usize;
            let in_chunk = (at % CHUNK) as usize;
            let n = ((CHUNK - in_chunk as u64).min(end - at)) as usize;
            let item = (chunk, in_chunk, (at - offset) as usize, n);
            at += n as u64;
            Some(item)
        })
    }

    fn copy_out(&self, offset: u64, out: &mut [u8]) {
        for (c, ic, io, n) in Self::pieces(offset, out.len() as u64) {
            let Some(chunk) = self.chunks.get(c) else {
                out[io..io + n].fill(0); // past a prefix member's kept bytes
                continue;
            };
            match &*chunk.lock() {
                Some(data) => out[io..io + n].copy_from_slice(&data[ic..ic + n]),
                None => out[io..io + n].fill(0),
            }
        }
    }

    fn copy_in(&self, offset: u64, data: &[u8]) {
        for (c, ic, io, n) in Self::pieces(offset, data.len() as u64) {
            let mut slot = self.chunks[c].lock();
            let chunk = slot.get_or_insert_with(|| vec![0; CHUNK as usize].into_boxed_slice());
            chunk[ic..ic + n].copy_from_slice(&data[io..io + n]);
        }
    }

    fn zero(&self, offset: u64, len: u64) {
        for (c, ic, _, n) in Self::pieces(offset, len) {
            let Some(slot) = self.chunks.get(c) else {
                continue; // past a prefix member's kept bytes: zeroes already
            };
            let mut slot = slot.lock();
            if n as u64 == CHUNK {
                *slot = None;
            } else if let Some(chunk) = slot.as_mut() {
                chunk[ic..ic + n].fill(0);
            }
        }
    }
}

impl Member for MemoryMember {
    fn name(&self) -> &str {
        &self.name
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn read(&self, offset: u64, mut buf: Buf) -> BoxFuture<'_, MemberResult<Buf>> {
        let g = self.counters.start(MemberOp::Read, buf.len() as u64);
        let r = check_range(
            &self.name,
            MemberOp::Read,
            offset,
            buf.len() as u64,
            self.len,
        )
        .map(|()| {
            self.copy_out(offset, &mut buf);
            buf
        });
        future::ready(g.finish(r)).boxed()
    }

    fn write(&self, offset: u64, data: SharedBuf, _fua: bool) -> BoxFuture<'_, MemberResult<()>> {
        let g = self.counters.start(MemberOp::Write, data.len() as u64);
        let r = check_range(
            &self.name,
            MemberOp::Write,
            offset,
            data.len() as u64,
            self.kept_bytes(),
        )
        .map(|()| self.copy_in(offset, &data));
        future::ready(g.finish(r)).boxed()
    }

    fn flush(&self) -> BoxFuture<'_, MemberResult<()>> {
        let g = self.counters.start(MemberOp::Flush, 0);
        future::ready(g.finish(Ok(()))).boxed()
    }

    fn trim(&self, offset: u64, len: u64) -> BoxFuture<'_, MemberResult<()>> {
        let g = self.counters.start(MemberOp::Trim, len);
        let r = check_range(&self.name, MemberOp::Trim, offset, len, self.len)
            .map(|()| self.zero(offset, len));
        future::ready(g.finish(r)).boxed()
    }

    fn write_zeroes(&self, offset: u64, len: u64) -> BoxFuture<'_, MemberResult<()>> {
        let g = self.counters.start(MemberOp::WriteZeroes, len);
        let r = check_range(&self.name, MemberOp::WriteZeroes, offset, len, self.len)
            .map(|()| self.zero(offset, len));
        future::ready(g.finish(r)).boxed()
    }

    fn counters(&self) -> &MemberCounters {
        &self.counters
    }

    fn read_vectored(
        &self,
        offset: u64,
        mut bufs: Vec<Buf>,
    ) -> BoxFuture<'_, MemberResult<Vec<Buf>>> {
        let len: u64 = bufs.iter().map(|b| b.len() as u64).sum();
        let g = self.counters.start(MemberOp::Read, len);
        let r = check_range(&self.name, MemberOp::Read, offset, len, self.len).map(|()| {
            let mut at = offset;
            for b in bufs.iter_mut() {
                self.copy_out(at, b);
                at += b.len() as u64;
            }
            bufs
        });
        future::ready(g.finish(r)).boxed()
    }

    fn write_vectored(
        &self,
        offset: u64,
        data: Vec<SharedBuf>,
        _fua: bool,
    ) -> BoxFuture<'_, MemberResult<()>> {
        let len: u64 = data.iter().map(|d| d.len() as u64).sum();
        let g = self.counters.start(MemberOp::Write, len);
        let r =
            check_range(&self.name, MemberOp::Write, offset, len, self.kept_bytes()).map(|()| {
                let mut at = offset;
                for d in &data {
                    self.copy_in(at, d);
                    at += d.len() as u64;
                }
            });
        future::ready(g.finish(r)).boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::executor::block_on;

    #[test]
    fn write_read_trim_across_chunks() {
        let m = MemoryMember::new("m", 4 * CHUNK);
        let data: Vec<u8> = (0..3 * CHUNK as usize).map(|i| (i % 251) as u8).collect();
        block_on(m.write(1000, Buf::copy_from(&data).freeze(), false)).unwrap();
        let back = block_on(m.read(1000, Buf::new(data.len()))).unwrap();
        assert_eq!(&back[..], &data[..]);
        block_on(m.trim(512, 2 * CHUNK)).unwrap();
        let back = block_on(m.read(0, Buf::new(4 * CHUNK as usize))).unwrap();
        assert!(back[..512 + 2 * CHUNK as usize].iter().all(|&b| b == 0));
        let tail = 512 + 2 * CHUNK as usize;
        assert_eq!(&back[tail..1000 + data.len()], &data[tail - 1000..]);
        let err = block_on(m.read(4 * CHUNK - 512, Buf::new(1024))).unwrap_err();
        assert!(err.to_string().contains("past the member"), "{err}");
        let c = m.counters().snapshot();
        assert_eq!(
            (c.reads, c.writes, c.trims, c.errors, c.in_flight),
            (2, 1, 1, 1, 0)
        );
    }

    /// A member as long as a large device that keeps only its first bytes: reads past them
    /// are zeroes, writes past them refused, its length the device's.
    #[test]
    fn a_prefix_member_is_long_and_holds_only_its_first_bytes() {
        let len_bytes = 1u64 << 44; // 16 TiB: no chunk table that size is made
        let m = MemoryMember::with_prefix("big", len_bytes, 2 * CHUNK);
        assert_eq!(m.len(), len_bytes);
        m.poke(10, b"superblock");
        let back = block_on(m.read(0, Buf::new(CHUNK as usize))).unwrap();
        assert_eq!(&back[10..20], b"superblock");
        let far = block_on(m.read(len_bytes - 4096, Buf::new(4096))).unwrap();
        assert!(far.iter().all(|&b| b == 0));
        let past = block_on(m.write(3 * CHUNK, Buf::copy_from(&[1; 512]).freeze(), false));
        assert!(past.is_err(), "a write past the kept bytes is refused");
        block_on(m.trim(0, 4 * CHUNK)).unwrap();
    }
}
