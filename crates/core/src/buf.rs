//! I/O buffers: 4096-byte aligned heap memory that stays put until the kernel is done with it.
//!
//! Two views of one allocation:
//! - [`Buf`]: unique and mutable, like `BytesMut`. It can be split into disjoint pieces (one per
//!   member extent of a request) and the pieces joined back, so a volume read lands in one
//!   buffer without copying.
//! - [`SharedBuf`]: shared and read-only, cheap to clone and slice. A mirrored write hands the
//!   same bytes to every copy; each member op holds a clone until it completes.
//!
//! Allocations come from a global pool of power-of-two size classes (4 KiB .. 32 MiB), so hot
//! paths do not pay for `mmap`/page faults on every request. Pooled memory holds stale bytes:
//! [`Buf::new`] does not clear it, [`Buf::zeroed`] does.

use parking_lot::Mutex;
use std::alloc::{self, Layout};
use std::fmt;
use std::ops::{Deref, DerefMut, Range};
use std::ptr::NonNull;
use std::sync::Arc;

/// Alignment of every allocation (the largest logical block size O_DIRECT may ask for).
pub const BUF_ALIGN: usize = 4096;

const CLASS_MIN_SHIFT: u32 = 12; // 4 KiB
const CLASS_MAX_SHIFT: u32 = 25; // 32 MiB
const CLASSES: usize = (CLASS_MAX_SHIFT - CLASS_MIN_SHIFT + 1) as usize;
/// Bytes the pool may keep per size class (at least two buffers of every class).
const POOL_BYTES_PER_CLASS: usize = 32 << 20;

/// One raw allocation; the pointer is returned to the pool (or freed) on drop.
struct Alloc {
    /// Start of `cap` bytes aligned to `BUF_ALIGN`, always initialized (zeroed when fresh).
    ptr: NonNull<u8>,
    /// Size of the allocation: a power of two ≥ 4 KiB for pooled classes, else a multiple of
    /// `BUF_ALIGN`.
    cap: usize,
}

// SAFETY: `Alloc` owns its memory exclusively; access to the bytes is governed by `Buf`
// (disjoint mutable ranges) and `SharedBuf` (read-only), which the type system keeps apart.
unsafe impl Send for Alloc {}
// SAFETY: see above; `&Alloc` gives no access to the bytes by itself.
unsafe impl Sync for Alloc {}

struct RawPtr(NonNull<u8>);
// SAFETY: a pooled pointer is owned by the pool alone until handed out again.
unsafe impl Send for RawPtr {}

struct Pool {
    /// Free allocations per size class (`class i` = `1 << (CLASS_MIN_SHIFT + i)` bytes).
    free: [Mutex<Vec<RawPtr>>; CLASSES],
}

static POOL: Pool = Pool {
    free: [const { Mutex::new(Vec::new()) }; CLASSES],
};

fn class_of(cap: usize) -> Option<usize> {
    if !cap.is_power_of_two() {
        return None;
    }
    let shift = cap.trailing_zeros();
    (CLASS_MIN_SHIFT..=CLASS_MAX_SHIFT)
        .contains(&shift)
        .then(|| (shift - CLASS_MIN_SHIFT) as usize)
}

impl Alloc {
    fn new(len: usize) -> Alloc {
        let want = len.max(1);
        let pooled = want.next_power_of_two().max(1 << CLASS_MIN_SHIFT);
        if let Some(class) = class_of(pooled) {
            if let Some(RawPtr(ptr)) = POOL.free[class].lock().pop() {
                return Alloc { ptr, cap: pooled };
            }
            return Alloc::fresh(pooled);
        }
        Alloc::fresh(want.next_multiple_of(BUF_ALIGN))
    }

    fn fresh(cap: usize) -> Alloc {
        let layout = Layout::from_size_align(cap, BUF_ALIGN).expect("buffer size fits a layout");
        // SAFETY: `layout` has a non-zero size (cap ≥ 4096). Zeroed so every byte is
        // initialized before anyone can see it through `&[u8]`.
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).unwrap_or_else(|| alloc::handle_alloc_error(layout));
        Alloc { ptr, cap }
    }
}

impl Drop for Alloc {
    fn drop(&mut self) {
        if let Some(class) = class_of(self.cap) {
            let mut free = POOL.free[class].lock();
            if (free.len() + 1) * self.cap <= POOL_BYTES_PER_CLASS.max(2 * self.cap) {
                free.push(RawPtr(self.ptr));
                return;
            }
        }
        let layout = Layout::from_size_align(self.cap, BUF_ALIGN).expect("layout was valid");
        // SAFETY: `ptr` came from `alloc_zeroed` with this very layout and is freed once.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), layout) };
    }
}

/// A unique, mutable view of `len` bytes of an aligned allocation.
///
/// Invariant: no other `Buf` views an overlapping range of the same allocation, and no
/// `SharedBuf` views the allocation at all while a `Buf` does.
pub struct Buf {
    alloc: Arc<Alloc>,
    /// Start of the view within the allocation.
    off: usize,
    /// Bytes in the view; `off + len <= alloc.cap`.
    len: usize,
}

impl Buf {
    /// A buffer of `len` bytes with unspecified (but initialized) contents.
    pub fn new(len: usize) -> Buf {
        Buf {
            alloc: Arc::new(Alloc::new(len)),
            off: 0,
            len,
        }
    }

    /// A buffer of `len` zero bytes.
    pub fn zeroed(len: usize) -> Buf {
        let mut b = Buf::new(len);
        b.fill(0);
        b
    }

    /// A buffer holding a copy of `data`.
    pub fn copy_from(data: &[u8]) -> Buf {
        let mut b = Buf::new(data.len());
        b.copy_from_slice(data);
        b
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Pointer to the first byte, for handing to the kernel.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        // SAFETY: `off <= cap`, so the result stays within (or one past) the allocation.
        unsafe { self.alloc.ptr.as_ptr().add(self.off) }
    }

    /// Splits off the bytes from `at` on: `self` keeps `[0, at)`, the result holds the rest.
    pub fn split_off(&mut self, at: usize) -> Buf {
        assert!(at <= self.len, "split_off at {at} past length {}", self.len);
        let tail = Buf {
            alloc: self.alloc.clone(),
            off: self.off + at,
            len: self.len - at,
        };
        self.len = at;
        tail
    }

    /// Splits into consecutive pieces of the given lengths (which must sum to `len()`).
    pub fn split_lengths(self, lens: &[usize]) -> Vec<Buf> {
        let total: usize = lens.iter().sum();
        assert_eq!(total, self.len, "piece lengths must cover the buffer");
        let mut out = Vec::with_capacity(lens.len());
        let mut rest = self;
        for (i, &l) in lens.iter().enumerate() {
            if i + 1 == lens.len() {
                out.push(rest);
                break;
            }
            let tail = rest.split_off(l);
            out.push(rest);
            rest = tail;
        }
        out
    }

    /// Joins `next` onto the end of `self` when it is the adjacent piece of the same
    /// allocation (free); otherwise copies both into a new buffer.
    pub fn unsplit(self, next: Buf) -> Buf {
        if Arc::ptr_eq(&self.alloc, &next.alloc) && self.off + self.len == next.off {
            let len = self.len + next.len;
            let off = self.off;
            let alloc = self.alloc.clone();
            drop(self);
            drop(next);
            return Buf { alloc, off, len };
        }
        let mut joined = Buf::new(self.len + next.len);
        joined[..self.len].copy_from_slice(&self);
        joined[self.len..].copy_from_slice(&next);
        joined
    }

    /// Joins consecutive pieces back into one buffer (free when they came from one split).
    pub fn join(pieces: Vec<Buf>) -> Buf {
        let mut it = pieces.into_iter();
        let Some(mut acc) = it.next() else {
            return Buf::new(0);
        };
        for p in it {
            acc = acc.unsplit(p);
        }
        acc
    }

    /// Shortens the view to `len` bytes.
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// Read-only, shareable view of these bytes.
    pub fn freeze(self) -> SharedBuf {
        SharedBuf {
            alloc: self.alloc,
            off: self.off,
            len: self.len,
        }
    }
}

impl Deref for Buf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `[off, off+len)` lies inside the allocation, whose bytes are initialized;
        // no other live view can write them (the `Buf` invariant).
        unsafe { std::slice::from_raw_parts(self.alloc.ptr.as_ptr().add(self.off), self.len) }
    }
}

impl DerefMut for Buf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, and `&mut self` makes this the only access to the range.
        unsafe { std::slice::from_raw_parts_mut(self.alloc.ptr.as_ptr().add(self.off), self.len) }
    }
}

impl fmt::Debug for Buf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Buf({} bytes)", self.len)
    }
}

/// A shared, read-only view of part of an aligned allocation. Cloning and slicing are cheap.
#[derive(Clone)]
pub struct SharedBuf {
    alloc: Arc<Alloc>,
    off: usize,
    len: usize,
}

impl SharedBuf {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn as_ptr(&self) -> *const u8 {
        // SAFETY: `off <= cap`.
        unsafe { self.alloc.ptr.as_ptr().add(self.off) }
    }

    /// Bytes of the whole allocation this view keeps alive.
    pub fn alloc_len(&self) -> usize {
        self.alloc.cap
    }

    /// Identifies the allocation (equal for views of the same one while any is alive).
    pub fn alloc_id(&self) -> usize {
        Arc::as_ptr(&self.alloc) as usize
    }

    /// The bytes `range` of this view (relative to it).
    pub fn slice(&self, range: Range<usize>) -> SharedBuf {
        assert!(
            range.start <= range.end && range.end <= self.len,
            "slice {range:?} outside a buffer of {} bytes",
            self.len
        );
        SharedBuf {
            alloc: self.alloc.clone(),
            off: self.off + range.start,
            len: range.end - range.start,
        }
    }

    /// The unique buffer back, when this is the last view of the allocation; otherwise a
    /// fresh buffer of the same length with unspecified contents (for handing a request's
    /// buffer back for reuse while a cache still holds views of it, without a copy).
    pub fn into_reusable(mut self) -> Buf {
        // The last view keeps its `Arc` (unwrapping and wrapping anew cost an allocation).
        if Arc::get_mut(&mut self.alloc).is_none() {
            return Buf::new(self.len);
        }
        Buf {
            alloc: self.alloc,
            off: self.off,
            len: self.len,
        }
    }

    /// The whole allocation as a unique buffer of `len` bytes (contents unspecified), when
    /// this is its last view and it holds `len` bytes: for an owner that writes a buffer of
    /// its own again and again, without an allocation. `None` otherwise (the view dropped).
    pub fn reuse_as(mut self, len: usize) -> Option<Buf> {
        if len > self.alloc.cap || Arc::get_mut(&mut self.alloc).is_none() {
            return None;
        }
        Some(Buf {
            alloc: self.alloc,
            off: 0,
            len,
        })
    }

    /// The unique buffer back, when this is the last view of the allocation; a copy otherwise.
    pub fn into_buf(mut self) -> Buf {
        // As in `into_reusable`: the last view keeps its `Arc`.
        if Arc::get_mut(&mut self.alloc).is_none() {
            return Buf::copy_from(&self);
        }
        Buf {
            alloc: self.alloc,
            off: self.off,
            len: self.len,
        }
    }
}

impl Deref for SharedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: inside the allocation, initialized, and no `Buf` can coexist with a
        // `SharedBuf` of the same allocation (freeze consumes the `Buf`).
        unsafe { std::slice::from_raw_parts(self.alloc.ptr.as_ptr().add(self.off), self.len) }
    }
}

impl From<Buf> for SharedBuf {
    fn from(b: Buf) -> SharedBuf {
        b.freeze()
    }
}

impl fmt::Debug for SharedBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SharedBuf({} bytes)", self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_and_split_join_is_free() {
        let mut b = Buf::zeroed(10_000);
        assert_eq!(b.as_mut_ptr() as usize % BUF_ALIGN, 0);
        assert!(b.iter().all(|&x| x == 0));
        for (i, x) in b.iter_mut().enumerate() {
            *x = i as u8;
        }
        let base = b.as_mut_ptr();
        let mut pieces = b.split_lengths(&[512, 4096, 10_000 - 4608]);
        pieces[1].fill(7);
        let mut j = Buf::join(pieces);
        assert_eq!(j.as_mut_ptr(), base, "join of a split must not copy");
        assert_eq!(j.len(), 10_000);
        assert_eq!(j[511], (511 % 256) as u8);
        assert!(j[512..4608].iter().all(|&x| x == 7));
        assert_eq!(j[4608], (4608 % 256) as u8);
    }

    #[test]
    fn join_of_foreign_pieces_copies() {
        let a = Buf::copy_from(&[1; 512]);
        let b = Buf::copy_from(&[2; 512]);
        let j = a.unsplit(b);
        assert_eq!(&j[..512], &[1; 512][..]);
        assert_eq!(&j[512..], &[2; 512][..]);
    }

    #[test]
    fn shared_roundtrip_and_pool_reuse() {
        let b = Buf::copy_from(&[9; 8192]);
        let s = b.freeze();
        let part = s.slice(4096..8192);
        assert_eq!(part.len(), 4096);
        assert!(part.iter().all(|&x| x == 9));
        drop(part);
        let back = s.into_buf();
        assert_eq!(back.len(), 8192);
        drop(back);
        // A dropped allocation of a pooled class comes back from the pool.
        let again = Buf::new(8192);
        assert_eq!(again.len(), 8192);
    }
}
