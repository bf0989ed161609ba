//! A seeded member that returns wrong bytes without an error: silent corruption, the fault
//! per-block checksums exist for.
//!
//! Three kinds, all behind the engine's back and drawn from one [`Rng`]:
//!
//! - **Flipped bytes** ([`Corrupting::flip_block`], [`Corrupting::flip_random`]): a block's
//!   bytes on the member change (bit rot, a firmware bug).
//! - **Misdirected writes** ([`Corrupting::set_misdirect_per_mille`]): one whole block of a
//!   write lands at another block's offset; the intended block keeps its old bytes and the
//!   other one is overwritten.
//! - **Wrong reads** ([`Corrupting::set_wrong_read_per_mille`]): one whole block of a read
//!   comes back holding another block's bytes; the member itself is unchanged.
//!
//! Every fault touches only blocks the caller's `may_corrupt` allows (by member block index):
//! a test gives each stripe row to at most as many members as the level tolerates, so the
//! redundancy budget is never exceeded, and leaves the metadata and checksum areas out.

use crate::rng::Rng;
use futures::future::BoxFuture;
use futures::FutureExt;
use nbraid_core::{Buf, Member, MemberCounters, MemberResult, SharedBuf};
use parking_lot::Mutex;

/// The unit a fault corrupts: one checksummed block.
pub const CORRUPT_BLOCK_BYTES: u64 = 4096;

/// Which member blocks (offset / [`CORRUPT_BLOCK_BYTES`]) a fault may touch.
pub type MayCorrupt = Box<dyn Fn(u64) -> bool + Send + Sync>;

/// What a [`Corrupting`] member has done so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CorruptionLog {
    pub flipped_blocks: u64,
    pub misdirected_writes: u64,
    pub wrong_reads: u64,
}

impl CorruptionLog {
    pub fn total(&self) -> u64 {
        self.flipped_blocks + self.misdirected_writes + self.wrong_reads
    }
}

struct State {
    rng: Rng,
    misdirect_per_mille: u64,
    wrong_read_per_mille: u64,
    log: CorruptionLog,
}

pub struct Corrupting<M> {
    inner: M,
    name: String,
    may_corrupt: MayCorrupt,
    /// Blocks `0..blocks` are the candidates of random faults.
    blocks: u64,
    state: Mutex<State>,
}

impl<M: Member> Corrupting<M> {
    /// Wraps `inner`; random faults pick among blocks `0..blocks` that `may_corrupt` allows.
    pub fn new(inner: M, seed: u64, blocks: u64, may_corrupt: MayCorrupt) -> Corrupting<M> {
        let name = format!("corrupting({})", inner.name());
        Corrupting {
            inner,
            name,
            may_corrupt,
            blocks,
            state: Mutex::new(State {
                rng: Rng::new(seed),
                misdirect_per_mille: 0,
                wrong_read_per_mille: 0,
                log: CorruptionLog::default(),
            }),
        }
    }

    pub fn inner(&self) -> &M {
        &self.inner
    }

    pub fn log(&self) -> CorruptionLog {
        self.state.lock().log
    }

    /// Each write misdirects one of its allowed blocks with probability `per_mille / 1000`.
    pub fn set_misdirect_per_mille(&self, per_mille: u64) {
        self.state.lock().misdirect_per_mille = per_mille;
    }

    /// Each read returns another block's bytes for one of its allowed blocks with
    /// probability `per_mille / 1000`.
    pub fn set_wrong_read_per_mille(&self, per_mille: u64) {
        self.state.lock().wrong_read_per_mille = per_mille;
    }

    /// Flips seeded bytes of block `block` on the inner member (at least one byte changes).
    pub async fn flip_block(&self, block: u64) -> MemberResult<()> {
        assert!(
            (self.may_corrupt)(block),
            "block {block} is not to be corrupted"
        );
        let at = block * CORRUPT_BLOCK_BYTES;
        let mut bytes = self
            .inner
            .read(at, Buf::new(CORRUPT_BLOCK_BYTES as usize))
            .await?;
        {
            let mut st = self.state.lock();
            let flips = 1 + st.rng.below(16);
            for _ in 0..flips {
                let i = st.rng.below(CORRUPT_BLOCK_BYTES) as usize;
                // A non-zero mask: the byte always changes.
                bytes[i] ^= 1 + st.rng.below(255) as u8;
            }
            st.log.flipped_blocks += 1;
        }
        self.inner.write(at, bytes.freeze(), true).await
    }

    /// Flips bytes of a seeded allowed block; returns it (`None` when none was found).
    pub async fn flip_random(&self) -> MemberResult<Option<u64>> {
        let block = {
            let mut st = self.state.lock();
            self.draw_block(&mut st.rng, None)
        };
        if let Some(b) = block {
            self.flip_block(b).await?;
        }
        Ok(block)
    }

    /// A seeded block of `0..blocks` that may be corrupted, other than `not`.
    fn draw_block(&self, rng: &mut Rng, not: Option<u64>) -> Option<u64> {
        if self.blocks == 0 {
            return None;
        }
        // From a seeded start, the next allowed block (a scan: the allowed set may be sparse).
        let start = rng.below(self.blocks);
        (0..self.blocks)
            .map(|i| (start + i) % self.blocks)
            .find(|&b| Some(b) != not && (self.may_corrupt)(b))
    }

    /// The first whole allowed block of `offset..offset+len` from a seeded start, and where
    /// its bytes go instead (another allowed block), when this op is to be corrupted.
    fn victim(&self, offset: u64, len: u64, per_mille: u64) -> Option<(u64, u64)> {
        if per_mille == 0 {
            return None;
        }
        let first = offset.div_ceil(CORRUPT_BLOCK_BYTES);
        let end = (offset + len) / CORRUPT_BLOCK_BYTES;
        if first >= end {
            return None;
        }
        let mut st = self.state.lock();
        if !st.rng.chance(per_mille) {
            return None;
        }
        let n = end - first;
        let start = st.rng.below(n);
        let block = (0..n)
            .map(|i| first + (start + i) % n)
            .find(|&b| (self.may_corrupt)(b))?;
        let other = self.draw_block(&mut st.rng, Some(block))?;
        Some((block, other))
    }

    async fn write_misdirected(
        &self,
        offset: u64,
        data: SharedBuf,
        fua: bool,
        block: u64,
        other: u64,
    ) -> MemberResult<()> {
        let a = (block * CORRUPT_BLOCK_BYTES - offset) as usize;
        let b = a + CORRUPT_BLOCK_BYTES as usize;
        if a > 0 {
            self.inner.write(offset, data.slice(0..a), fua).await?;
        }
        if b < data.len() {
            let rest = data.slice(b..data.len());
            self.inner.write(offset + b as u64, rest, fua).await?;
        }
        let landed = data.slice(a..b);
        self.inner
            .write(other * CORRUPT_BLOCK_BYTES, landed, fua)
            .await?;
        self.state.lock().log.misdirected_writes += 1;
        Ok(())
    }

    async fn read_wrong(&self, offset: u64, buf: Buf, block: u64, other: u64) -> MemberResult<Buf> {
        let mut got = self.inner.read(offset, buf).await?;
        let theirs = self
            .inner
            .read(
                other * CORRUPT_BLOCK_BYTES,
                Buf::new(CORRUPT_BLOCK_BYTES as usize),
            )
            .await?;
        let a = (block * CORRUPT_BLOCK_BYTES - offset) as usize;
        got[a..a + CORRUPT_BLOCK_BYTES as usize].copy_from_slice(&theirs);
        self.state.lock().log.wrong_reads += 1;
        Ok(got)
    }
}

impl<M: Member> Member for Corrupting<M> {
    fn name(&self) -> &str {
        &self.name
    }

    fn len(&self) -> u64 {
        self.inner.len()
    }

    fn read(&self, offset: u64, buf: Buf) -> BoxFuture<'_, MemberResult<Buf>> {
        let per_mille = self.state.lock().wrong_read_per_mille;
        match self.victim(offset, buf.len() as u64, per_mille) {
            Some((block, other)) => self.read_wrong(offset, buf, block, other).boxed(),
            None => self.inner.read(offset, buf),
        }
    }

    fn write(&self, offset: u64, data: SharedBuf, fua: bool) -> BoxFuture<'_, MemberResult<()>> {
        let per_mille = self.state.lock().misdirect_per_mille;
        match self.victim(offset, data.len() as u64, per_mille) {
            Some((block, other)) => self
                .write_misdirected(offset, data, fua, block, other)
                .boxed(),
            None => self.inner.write(offset, data, fua),
        }
    }

    fn flush(&self) -> BoxFuture<'_, MemberResult<()>> {
        self.inner.flush()
    }

    fn trim(&self, offset: u64, len: u64) -> BoxFuture<'_, MemberResult<()>> {
        self.inner.trim(offset, len)
    }

    fn write_zeroes(&self, offset: u64, len: u64) -> BoxFuture<'_, MemberResult<()>> {
        self.inner.write_zeroes(offset, len)
    }

    fn counters(&self) -> &MemberCounters {
        self.inner.counters()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::executor::block_on;
    use nbraid_core::MemoryMember;

    const B: usize = CORRUPT_BLOCK_BYTES as usize;

    fn member(may: MayCorrupt) -> Corrupting<MemoryMember> {
        Corrupting::new(MemoryMember::new("m", 16 * B as u64), 7, 16, may)
    }

    fn peek(m: &Corrupting<MemoryMember>, block: u64) -> Vec<u8> {
        let mut b = vec![0u8; B];
        m.inner().peek(block * CORRUPT_BLOCK_BYTES, &mut b);
        b
    }

    #[test]
    fn a_flipped_block_changes_and_only_it() {
        let m = member(Box::new(|b| b == 3));
        block_on(m.flip_block(3)).unwrap();
        assert_ne!(peek(&m, 3), vec![0u8; B]);
        for b in (0..16).filter(|&b| b != 3) {
            assert_eq!(peek(&m, b), vec![0u8; B], "block {b}");
        }
        assert_eq!(block_on(m.flip_random()).unwrap(), Some(3));
        assert_eq!(m.log().flipped_blocks, 2);
    }

    #[test]
    fn a_misdirected_write_lands_on_another_allowed_block() {
        let m = member(Box::new(|b| b == 2 || b == 9));
        m.set_misdirect_per_mille(1000);
        let data = Buf::copy_from(&[0xab; 2 * B]).freeze();
        block_on(m.write(2 * B as u64, data, false)).unwrap();
        assert_eq!(
            peek(&m, 2),
            vec![0u8; B],
            "the intended block kept its bytes"
        );
        assert_eq!(peek(&m, 3), vec![0xab; B], "the rest of the write landed");
        assert_eq!(peek(&m, 9), vec![0xab; B], "the block landed elsewhere");
        assert_eq!(m.log().misdirected_writes, 1);
    }

    #[test]
    fn a_wrong_read_returns_another_blocks_bytes_and_leaves_the_member() {
        let m = member(Box::new(|b| b == 1 || b == 5));
        m.inner().poke(5 * CORRUPT_BLOCK_BYTES, &[0x5c; B]);
        m.set_wrong_read_per_mille(1000);
        let got = block_on(m.read(0, Buf::new(3 * B))).unwrap();
        assert_eq!(&got[B..2 * B], &[0x5c; B][..]);
        assert_eq!(&got[..B], &[0u8; B][..]);
        assert_eq!(peek(&m, 1), vec![0u8; B]);
        assert_eq!(m.log().wrong_reads, 1);
    }

    #[test]
    fn nothing_allowed_means_nothing_corrupted() {
        let m = member(Box::new(|_| false));
        m.set_misdirect_per_mille(1000);
        m.set_wrong_read_per_mille(1000);
        block_on(m.write(0, Buf::copy_from(&[1; B]).freeze(), false)).unwrap();
        let got = block_on(m.read(0, Buf::new(B))).unwrap();
        assert_eq!(&got[..], &[1u8; B][..]);
        assert_eq!(block_on(m.flip_random()).unwrap(), None);
        assert_eq!(m.log().total(), 0);
    }
}
