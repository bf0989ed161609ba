//! A guard against SIGBUS from shared file mappings ([`Guarded`]). A store into a mapping of
//! a tmpfs file raises SIGBUS when the page cannot be had: the file was truncated under it
//! (someone else cut a member file short), or a hole's page cannot be allocated (the file
//! system is full). Unguarded, the process dies. Guarded, the handler puts an anonymous page
//! over the faulting one (the store then lands there, harmlessly) and counts a fault on the
//! mapping; the writer checks the count after its copy and writes again the ordinary way,
//! which fails with the real error (`ENOSPC`, or past the end) or succeeds.
//!
//! Faults outside every guarded range go to the handler that was there before (Rust's own
//! stack-overflow handler, or the default action).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::OnceLock;

/// At most this many ranges are guarded at once (mappings beyond it are not made).
const SLOTS: usize = 128;

/// One guarded range: its address and length (0: free), and the faults taken in it.
struct Slot {
    start: AtomicUsize,
    len: AtomicUsize,
    faults: AtomicU64,
}

#[allow(clippy::declare_interior_mutable_const)]
const FREE: Slot = Slot {
    start: AtomicUsize::new(0),
    len: AtomicUsize::new(0),
    faults: AtomicU64::new(0),
};

static SLOTS_TABLE: [Slot; SLOTS] = [FREE; SLOTS];

/// The handler before ours, and the page size (both set once, before any range is guarded).
static PREVIOUS: OnceLock<Option<(libc::sigaction, usize)>> = OnceLock::new();

/// A guarded range of addresses: its faults counted while it lives.
pub(super) struct Guarded {
    slot: usize,
}

impl Guarded {
    /// Guards `[start, start + len)` (a mapping's addresses); `None` when the handler could
    /// not be installed or every slot is taken (the caller does not map then).
    pub(super) fn new(start: usize, len: usize) -> Option<Guarded> {
        assert!(start != 0 && len > 0, "a guarded range is a mapping");
        PREVIOUS.get_or_init(install).as_ref()?;
        for (i, s) in SLOTS_TABLE.iter().enumerate() {
            if s.len
                .compare_exchange(0, usize::MAX, SeqCst, SeqCst)
                .is_ok()
            {
                // Reserved (len MAX matches no fault until the range is set).
                s.faults.store(0, SeqCst);
                s.start.store(start, SeqCst);
                s.len.store(len, SeqCst);
                return Some(Guarded { slot: i });
            }
        }
        None
    }

    /// Faults taken in the range so far.
    pub(super) fn faults(&self) -> u64 {
        SLOTS_TABLE[self.slot].faults.load(SeqCst)
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        let s = &SLOTS_TABLE[self.slot];
        s.start.store(0, SeqCst);
        s.len.store(0, SeqCst);
    }
}

/// Installs the handler; the handler before it and the page size, or `None` (not installed).
fn install() -> Option<(libc::sigaction, usize)> {
    // SAFETY: sysconf(3) has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    let page = usize::try_from(page).ok().filter(|p| p.is_power_of_two())?;
    // SAFETY: `sigaction` is plain old data; zeroed is a valid value.
    let mut ours: libc::sigaction = unsafe { std::mem::zeroed() };
    ours.sa_sigaction = on_sigbus as *const () as usize;
    ours.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_NODEFER;
    // SAFETY: sigemptyset(3) on a valid set.
    unsafe { libc::sigemptyset(&mut ours.sa_mask) };
    // SAFETY: as above.
    let mut previous: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: sigaction(2) with valid pointers; the handler below is async-signal-safe
    // (atomics and mmap(2) only).
    if unsafe { libc::sigaction(libc::SIGBUS, &ours, &mut previous) } != 0 {
        return None;
    }
    Some((previous, page))
}

/// The SIGBUS handler: a fault in a guarded range gets an anonymous page over it and is
/// counted; any other goes to the handler before.
extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers; si_addr is the
    // faulting address for SIGBUS.
    let addr = unsafe { (*info).si_addr() } as usize;
    let Some(Some((previous, page))) = PREVIOUS.get() else {
        return;
    };
    for s in &SLOTS_TABLE {
        let (start, len) = (s.start.load(SeqCst), s.len.load(SeqCst));
        if start == 0 || len == usize::MAX || addr < start || addr - start >= len {
            continue;
        }
        let at = addr & !(page - 1);
        // SAFETY: the page lies inside a mapping this process made and still holds (the
        // range is unguarded before it is unmapped); replacing it with an anonymous page
        // only redirects the faulting store.
        let r = unsafe {
            libc::mmap(
                at as *mut libc::c_void,
                *page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if r != libc::MAP_FAILED {
            s.faults.fetch_add(1, SeqCst);
            return; // the store runs again, into the anonymous page
        }
        break;
    }
    pass_on(sig, info, ctx, previous);
}

/// A fault that is not ours: to the handler before (or the default action, by restoring it
/// and returning: the fault comes again).
fn pass_on(
    sig: libc::c_int,
    info: *mut libc::siginfo_t,
    ctx: *mut libc::c_void,
    previous: &libc::sigaction,
) {
    let h = previous.sa_sigaction;
    if h == libc::SIG_DFL || h == libc::SIG_IGN {
        // SAFETY: as in `install`.
        let mut dfl: libc::sigaction = unsafe { std::mem::zeroed() };
        dfl.sa_sigaction = libc::SIG_DFL;
        // SAFETY: sigaction(2) is async-signal-safe; valid pointers.
        unsafe { libc::sigaction(sig, &dfl, std::ptr::null_mut()) };
        return;
    }
    if previous.sa_flags & libc::SA_SIGINFO != 0 {
        // SAFETY: the previous handler was installed as an SA_SIGINFO handler of this type.
        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
            unsafe { std::mem::transmute(h) };
        f(sig, info, ctx);
    } else {
        // SAFETY: the previous handler was installed as a plain handler of this type.
        let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(h) };
        f(sig);
    }
}
