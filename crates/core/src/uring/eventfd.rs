//! The eventfds the rings are woken through: made, signalled and cleared in one place.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// A new eventfd (close-on-exec; non-blocking when `nonblocking`), its count at zero.
pub(super) fn new(nonblocking: bool) -> io::Result<OwnedFd> {
    let flags = libc::EFD_CLOEXEC | if nonblocking { libc::EFD_NONBLOCK } else { 0 };
    // SAFETY: eventfd(2) with valid flags; the result is checked before use.
    let raw = unsafe { libc::eventfd(0, flags) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a fresh descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// Makes `fd` readable (adds one to its count).
pub(super) fn signal(fd: &OwnedFd) {
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a live u64 to an eventfd. A failure (counter full) still
    // leaves the eventfd readable, which is all a signal needs.
    unsafe {
        libc::write(
            fd.as_raw_fd(),
            (&one as *const u64).cast(),
            std::mem::size_of::<u64>(),
        );
    }
}

/// Clears a non-blocking `fd`'s count; true when it was signalled.
pub(super) fn take(fd: &OwnedFd) -> bool {
    let mut count: u64 = 0;
    // SAFETY: reads 8 bytes into a live u64 from an eventfd (non-blocking: never waits).
    let n = unsafe {
        libc::read(
            fd.as_raw_fd(),
            (&mut count as *mut u64).cast(),
            std::mem::size_of::<u64>(),
        )
    };
    n == std::mem::size_of::<u64>() as isize
}
