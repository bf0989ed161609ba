//! Log windows of a file in memory written through mappings ([`WindowMaps`]).
//!
//! The write-hole log rewrites a small window of its ring (256 KiB on a memory-backed
//! member) with one batch per round before the round's data writes go out. On tmpfs a
//! batch's `pwrite` costs the kernel's page-cache write — the inode's lock, a page lookup
//! for each page, the copy — measured at 2.9 µs of CPU per RAID 5 write-through write and
//! 4.5 µs per RAID 6 one (its P and Q batches) by skipping the batch write altogether
//! (`scripts/bench-wpath`, docs/benchmarks). A shared mapping of the window makes it a copy
//! into pages already mapped: the same page-cache pages a `pread` or a recovery read sees,
//! kept by the file when the process dies, as a `pwrite`'s bytes are.
//!
//! Only whole windows inside the file, page-aligned, are mapped, and each mapping's
//! addresses are guarded ([`super::bus_guard`]): a store the kernel refuses (the file cut
//! short by someone else, tmpfs full) lands in an anonymous page instead and the write is
//! made again with `pwrite`, which says what is wrong. Such a window is not mapped again.

use super::bus_guard::Guarded;
use parking_lot::RwLock;
use std::ops::Range;
use std::os::fd::RawFd;
use std::sync::Arc;

/// No window longer than this is mapped (the log's are 256 KiB).
const MAX_WINDOW_BYTES: u64 = 4 << 20;
/// No more windows than this are mapped per file (one per log ring the file holds).
const MAX_WINDOWS: usize = 16;

/// The windows of one file, mapped (or refused) as they are first written.
#[derive(Default)]
pub(super) struct WindowMaps {
    windows: RwLock<Vec<Arc<Window>>>,
}

/// One window: its file range and its mapping (`None`: refused, or given up after a fault).
struct Window {
    range: Range<u64>,
    mapped: Option<Mapping>,
}

struct Mapping {
    addr: *mut u8,
    len: usize,
    guard: Guarded,
    /// Set once a store faulted: the window is written with `pwrite` from then on.
    given_up: std::sync::atomic::AtomicBool,
}

// SAFETY: the mapping is plain shared memory; writers copy into disjoint ranges (the log
// places its batches without overlap) and the pointer is only dereferenced through `write`.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `addr`/`len` is the mapping made in `Mapping::new`, unused from here on.
        unsafe { libc::munmap(self.addr.cast(), self.len) };
        // `guard` drops after the unmap: a fault cannot come from unmapped addresses.
    }
}

impl Mapping {
    /// Maps `range` of `fd` shared, read-write, guarded.
    fn new(fd: RawFd, range: &Range<u64>) -> Option<Mapping> {
        let len = usize::try_from(range.end - range.start).ok()?;
        let offset = libc::off_t::try_from(range.start).ok()?;
        // SAFETY: a new shared mapping of `len` bytes of an open file, at an address the
        // kernel picks; nothing else refers to it yet.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                offset,
            )
        };
        if addr == libc::MAP_FAILED {
            return None;
        }
        let Some(guard) = Guarded::new(addr as usize, len) else {
            // SAFETY: the mapping just made, unused.
            unsafe { libc::munmap(addr, len) };
            return None;
        };
        Some(Mapping {
            addr: addr.cast(),
            len,
            guard,
            given_up: false.into(),
        })
    }

    /// Copies `data` to byte `at` of the mapping; whether every store landed in the file
    /// (no fault in the mapping meanwhile).
    fn copy_in(&self, at: usize, data: &[u8]) -> bool {
        use std::sync::atomic::{compiler_fence, Ordering::SeqCst};
        assert!(at + data.len() <= self.len, "a copy inside its window");
        let before = self.guard.faults();
        // SAFETY: `[at, at + len)` lies in the live mapping (asserted); the log writes
        // disjoint ranges of a window at once, so no other copy overlaps this one. A page
        // the kernel cannot give faults into the guard, which redirects the store.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.addr.add(at), data.len()) };
        compiler_fence(SeqCst);
        self.guard.faults() == before
    }
}

impl WindowMaps {
    /// Writes `data` at byte `offset` of the file through `window`'s mapping, mapping it
    /// first if need be. `false`: not written (no mapping for this window, or a store
    /// faulted) — the caller writes it with `pwrite`.
    pub(super) fn write(
        &self,
        fd: RawFd,
        file_len: u64,
        window: Range<u64>,
        offset: u64,
        data: &[u8],
    ) -> bool {
        let end = offset + data.len() as u64;
        if offset < window.start || end > window.end {
            return false;
        }
        let Some(w) = self.window(fd, file_len, window) else {
            return false;
        };
        let Some(m) = w.mapped.as_ref() else {
            return false;
        };
        if m.given_up.load(std::sync::atomic::Ordering::Relaxed) {
            return false;
        }
        let landed = m.copy_in((offset - w.range.start) as usize, data);
        if !landed {
            m.given_up.store(true, std::sync::atomic::Ordering::Relaxed);
            tracing::warn!(
                "a log window at bytes {}..{} of a file in memory could not be written through its mapping (file cut short, or its file system full): written with pwrite from now on",
                w.range.start,
                w.range.end
            );
        }
        landed
    }

    /// `window`'s entry, made on first use (mapped when it can be).
    fn window(&self, fd: RawFd, file_len: u64, window: Range<u64>) -> Option<Arc<Window>> {
        if let Some(w) = self.windows.read().iter().find(|w| w.range == window) {
            return Some(w.clone());
        }
        let mut all = self.windows.write();
        if let Some(w) = all.iter().find(|w| w.range == window) {
            return Some(w.clone());
        }
        if all.len() >= MAX_WINDOWS {
            return None;
        }
        let w = Arc::new(Window {
            mapped: mappable(&window, file_len)
                .then(|| Mapping::new(fd, &window))
                .flatten(),
            range: window,
        });
        all.push(w.clone());
        Some(w)
    }
}

/// Whether `window` may be mapped: non-empty, page-aligned, inside the file, not too long.
fn mappable(window: &Range<u64>, file_len: u64) -> bool {
    // SAFETY: sysconf(3) has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64;
    let len = window.end.saturating_sub(window.start);
    page.is_power_of_two()
        && len > 0
        && len <= MAX_WINDOW_BYTES
        && window.start.is_multiple_of(page)
        && window.end <= file_len
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Seek, SeekFrom};
    use std::os::fd::AsRawFd;

    fn shm_file(len: u64) -> (tempfile::NamedTempFile, std::fs::File) {
        let f = tempfile::NamedTempFile::new_in("/dev/shm").expect("a file on /dev/shm");
        f.as_file().set_len(len).unwrap();
        let file = f.reopen().unwrap();
        (f, file)
    }

    fn bytes_at(file: &mut std::fs::File, at: u64, len: usize) -> Vec<u8> {
        let mut b = vec![0; len];
        file.seek(SeekFrom::Start(at)).unwrap();
        file.read_exact(&mut b).unwrap();
        b
    }

    #[test]
    fn a_write_through_the_window_is_read_back_by_pread() {
        let (_keep, mut file) = shm_file(1 << 20);
        let maps = WindowMaps::default();
        let window = 64 << 10..(64 << 10) + (256 << 10);
        let data: Vec<u8> = (0..8192u32).map(|i| (i * 7) as u8).collect();
        assert!(maps.write(file.as_raw_fd(), 1 << 20, window.clone(), 70 << 10, &data));
        assert_eq!(bytes_at(&mut file, 70 << 10, data.len()), data);
        // Outside the window, or a window not aligned or past the end: not mapped.
        assert!(!maps.write(file.as_raw_fd(), 1 << 20, window.clone(), 0, &data));
        assert!(!maps.write(file.as_raw_fd(), 1 << 20, 100..4196, 100, &data[..4096]));
        assert!(!maps.write(file.as_raw_fd(), 1 << 20, 1 << 20..2 << 20, 1 << 20, &data));
    }

    /// The file cut short under its mapping: the store faults into the guard, the write says
    /// it did not land (the caller's `pwrite` then tells the real story), the process lives,
    /// and the window is not written through the mapping again.
    #[test]
    fn a_store_the_kernel_refuses_is_caught_and_reported_not_landed() {
        let (_keep, file) = shm_file(1 << 20);
        let maps = WindowMaps::default();
        let window = 0..256 << 10;
        let data = vec![0xa5u8; 4096];
        assert!(maps.write(file.as_raw_fd(), 1 << 20, window.clone(), 4096, &data));
        file.set_len(64 << 10).unwrap();
        assert!(!maps.write(file.as_raw_fd(), 1 << 20, window.clone(), 128 << 10, &data));
        assert!(!maps.write(file.as_raw_fd(), 1 << 20, window.clone(), 8192, &data));
        assert_eq!(file.metadata().unwrap().len(), 64 << 10);
    }

    /// A fault outside every guarded range still ends the process with SIGBUS (the guard
    /// passes it on): run in a child process, this same test with the variable set.
    #[test]
    fn a_fault_outside_the_guarded_windows_still_kills_with_sigbus() {
        const CHILD: &str = "NBRAID_TEST_UNGUARDED_SIGBUS";
        if std::env::var_os(CHILD).is_some() {
            let (_keep, file) = shm_file(1 << 20);
            let maps = WindowMaps::default();
            // The guard installed (a window mapped), then a mapping of our own, unguarded.
            assert!(maps.write(file.as_raw_fd(), 1 << 20, 0..64 << 10, 0, &[1; 4096]));
            // SAFETY: a fresh shared mapping of the file's first MiB.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    1 << 20,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    file.as_raw_fd(),
                    0,
                )
            };
            assert_ne!(p, libc::MAP_FAILED);
            file.set_len(4096).unwrap();
            // SAFETY: inside the mapping; past the file's end, so the store faults.
            unsafe { std::ptr::write_volatile(p.cast::<u8>().add(512 << 10), 7) };
            std::process::exit(0); // not reached: the fault must kill the process
        }
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "uring::window_maps::tests::a_fault_outside_the_guarded_windows_still_kills_with_sigbus",
                "--nocapture",
            ])
            .env(CHILD, "1")
            .output()
            .unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(
            out.status.signal(),
            Some(libc::SIGBUS),
            "{:?}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
