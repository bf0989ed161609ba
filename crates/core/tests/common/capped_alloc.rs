//! The global allocator of the hostile-bytes fuzz tests: the system allocator, refusing (the
//! process aborts, naming the size) any allocation above [`ALLOC_CAP_BYTES`] and remembering
//! the largest one asked for — a length read from a member never sizes one. Included by
//! path (`#[path = "common/capped_alloc.rs"] mod capped_alloc;`), not from `common`: the
//! other tests keep the system allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

/// No single allocation may ask for more.
pub const ALLOC_CAP_BYTES: usize = 64 << 20;

/// The largest allocation asked for so far, in bytes.
pub fn largest_alloc_bytes() -> usize {
    LARGEST_ALLOC.load(SeqCst)
}

struct Capped;

static LARGEST_ALLOC: AtomicUsize = AtomicUsize::new(0);

/// Whether an allocation of `len_bytes` may go ahead (remembered either way).
fn allowed(len_bytes: usize) -> bool {
    LARGEST_ALLOC.fetch_max(len_bytes, SeqCst);
    len_bytes <= ALLOC_CAP_BYTES
}

// SAFETY: every call is passed to the system allocator unchanged, or refused with null (an
// allocation failure, which the standard library reports and aborts on).
unsafe impl GlobalAlloc for Capped {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if !allowed(layout.size()) {
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's layout, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if !allowed(layout.size()) {
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's layout, passed on.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from the system allocator with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if !allowed(new_size) {
            return std::ptr::null_mut();
        }
        // SAFETY: `ptr` came from the system allocator with this layout.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Capped = Capped;
