//! Members are opened exclusively: two processes driving one member each through their own
//! stripe cache and parity would corrupt it silently.
//!
//! Files take an advisory exclusive `flock` (non-blocking) on the descriptor the member keeps
//! open, so the lock lives exactly as long as the member. `flock` locks belong to the open file
//! description, so a second open of the same file conflicts even inside one process: a daemon
//! opens each member file once and shares it between the volumes on it. Block devices are also
//! opened with `O_EXCL`, which the kernel refuses while the device is mounted, part of another
//! array, or opened exclusively elsewhere; they take the `flock` too, so a second nbraid finds
//! out who holds them.
//!
//! When the lock is taken, the holder is looked up in `/proc/locks` (pid → `/proc/PID/comm` and
//! `cmdline`) so the message can say which process to stop.

use super::UringError;
use std::fs::{File, Metadata, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::Path;

/// Opens the member at `path` read-write and exclusively: `O_EXCL` when it is a block device,
/// then the advisory lock. With `create`, a missing file is created (empty; a device is only
/// opened). The lock is held until the returned file is closed.
pub fn open_exclusive(path: &Path, create: bool) -> Result<File, UringError> {
    open_exclusive_mode(path, create, false)
}

/// [`open_exclusive`], read-only (`O_RDONLY`): a device with its ro flag set or a file the
/// process may not write opens; nothing is created. The lock is taken as for a writer, so a
/// daemon writing the member and one reading it are never both at it.
pub fn open_exclusive_read_only(path: &Path) -> Result<File, UringError> {
    open_exclusive_mode(path, false, true)
}

fn open_exclusive_mode(path: &Path, create: bool, read_only: bool) -> Result<File, UringError> {
    let open_err = |source| UringError::Open {
        path: path.to_path_buf(),
        source,
    };
    let is_block = std::fs::metadata(path).is_ok_and(|m| m.file_type().is_block_device());
    let mut flags = libc::O_CLOEXEC;
    if is_block {
        // Without O_CREAT, O_EXCL on a block device means "refuse if in use" (Linux).
        flags |= libc::O_EXCL;
    }
    let file = match OpenOptions::new()
        .read(true)
        .write(!read_only)
        // A device exists already; O_CREAT beside the O_EXCL above would ask the kernel to
        // create it and fail with EEXIST (every block-device member of a config failed so).
        .create(create && !is_block)
        .truncate(false)
        .custom_flags(flags)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if is_block && e.raw_os_error() == Some(libc::EBUSY) => {
            return Err(in_use(path, std::fs::metadata(path).ok(), true))
        }
        Err(e) => return Err(open_err(e)),
    };
    let started = std::time::Instant::now();
    loop {
        // SAFETY: flock(2) on a descriptor we own; no memory is passed.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return Ok(file);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EWOULDBLOCK) => {
                let meta = file.metadata().ok();
                let holder = meta.as_ref().and_then(find_holder);
                let live = holder.as_ref().is_some_and(|h| h.is_alive());
                let ours = holder.as_ref().is_some_and(|h| h.pid == std::process::id());
                let waited = started.elapsed();
                if (!live && waited < DEAD_HOLDER_GRACE) || (ours && waited < OWN_CLOSE_GRACE) {
                    // Held by no live process: a killed holder's io_uring requests still
                    // reference the file while the kernel tears its rings down (after its
                    // exit), keeping the lock a moment longer. Held by this process: a
                    // member it just let go of (removed, failed, a test's dropped file) is
                    // released once its ring's last requests are freed.
                    std::thread::sleep(std::time::Duration::from_millis(20));
                    continue;
                }
                return Err(in_use(path, meta, is_block));
            }
            _ => {
                return Err(open_err(io::Error::new(
                    e.kind(),
                    format!("cannot lock it: {e}"),
                )))
            }
        }
    }
}

/// How long a lock held by no live process may take to go away before the member is
/// reported in use.
const DEAD_HOLDER_GRACE: std::time::Duration = std::time::Duration::from_secs(3);

/// How long a lock this process holds may take to go away (a member it just closed) before
/// the member is reported in use — by itself, as when a config names one file twice.
const OWN_CLOSE_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// The error for a member held elsewhere, naming the holder as far as it can be found.
fn in_use(path: &Path, meta: Option<Metadata>, is_block: bool) -> UringError {
    let holder = meta.and_then(|m| find_holder(&m));
    UringError::InUse {
        path: path.to_path_buf(),
        holder_pid: holder.as_ref().map(|h| h.pid),
        holder: match holder {
            Some(h) => h.to_string(),
            None if is_block => {
                "another process (or it is mounted, or part of another array)".to_string()
            }
            None => "another process".to_string(),
        },
    }
}

/// A process holding a member's lock.
struct Holder {
    pid: u32,
    /// `/proc/PID/comm`, empty when unreadable.
    comm: String,
    /// `/proc/PID/cmdline` with spaces for NULs, shortened; empty when unreadable.
    cmdline: String,
}

impl Holder {
    /// Whether the process still exists (its lock may outlive it briefly, see
    /// `open_exclusive`).
    fn is_alive(&self) -> bool {
        Path::new(&format!("/proc/{}", self.pid)).exists()
    }
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "process {}", self.pid)?;
        match (self.comm.is_empty(), self.cmdline.is_empty()) {
            (true, true) => Ok(()),
            (false, true) => write!(f, " ({})", self.comm),
            (_, false) => write!(f, " ({}: {})", self.comm, self.cmdline),
        }
    }
}

/// Longest command line quoted in a message.
const CMDLINE_MAX: usize = 200;

/// Reads of `/proc/locks` when looking for a holder. The file is produced a page at a time
/// from the kernel's live list: locks taken or dropped between two pages shift the rest, so
/// one read can miss a line (seen once in a full test run, other threads locking at once).
const LOCKS_READS: usize = 3;

/// Finds the process holding an exclusive `flock` on the file with metadata `meta`.
fn find_holder(meta: &Metadata) -> Option<Holder> {
    let pid = (0..LOCKS_READS).find_map(|_| {
        let locks = std::fs::read_to_string("/proc/locks").ok()?;
        holder_pid(&locks, meta.dev(), meta.ino())
    })?;
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim_end().to_string())
        .unwrap_or_default();
    let mut cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            let s = String::from_utf8_lossy(&b).replace('\0', " ");
            s.trim_end().to_string()
        })
        .unwrap_or_default();
    if cmdline.len() > CMDLINE_MAX {
        let mut cut = CMDLINE_MAX;
        while !cmdline.is_char_boundary(cut) {
            cut -= 1;
        }
        cmdline.truncate(cut);
        cmdline.push('…');
    }
    Some(Holder { pid, comm, cmdline })
}

/// The pid of the exclusive `FLOCK` on inode `ino` of device `dev` in `/proc/locks` text.
///
/// Lines read `1: FLOCK  ADVISORY  WRITE 1234 fe:00:5595382 0 EOF` (device major:minor in hex,
/// inode in decimal); `->` lines are waiters, not holders. Some file systems (btrfs) report a
/// different device number to `stat` than to `/proc/locks`, so a lock on the same inode number
/// on another device is taken when no exact match exists and the process has the file open.
fn holder_pid(locks: &str, dev: u64, ino: u64) -> Option<u32> {
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let mut same_inode = Vec::new();
    for line in locks.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 6 || f[1] != "FLOCK" || f[3] != "WRITE" {
            continue;
        }
        let Ok(pid) = f[4].parse::<u32>() else {
            continue; // -1 or 0: a holder outside our pid namespace
        };
        let mut id = f[5].split(':');
        let (Some(maj), Some(min), Some(i)) = (id.next(), id.next(), id.next()) else {
            continue;
        };
        if i.parse::<u64>().ok() != Some(ino) || pid == 0 {
            continue;
        }
        let exact = u32::from_str_radix(maj, 16).ok() == Some(major)
            && u32::from_str_radix(min, 16).ok() == Some(minor);
        if exact {
            return Some(pid);
        }
        same_inode.push(pid);
    }
    same_inode.into_iter().find(|&pid| has_open(pid, dev, ino))
}

/// Whether process `pid` has the file `(dev, ino)` open (false when we may not look).
fn has_open(pid: u32, dev: u64, ino: u64) -> bool {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten()
        .any(|fd| std::fs::metadata(fd.path()).is_ok_and(|m| m.dev() == dev && m.ino() == ino))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_locks_lines_name_the_exclusive_holder() {
        let dev = libc::makedev(0xfe, 0x00);
        let text = "\
1: FLOCK  ADVISORY  READ 10635 fe:00:42 0 EOF
2: POSIX  ADVISORY  WRITE 777 fe:00:42 0 EOF
3: FLOCK  ADVISORY  WRITE 99999999 fe:01:42 0 EOF
4: FLOCK  ADVISORY  WRITE 10592 fe:00:42 0 EOF
4: -> FLOCK  ADVISORY  WRITE 1 fe:00:42 0 EOF
5: FLOCK  ADVISORY  WRITE -1 fe:00:43 0 EOF
";
        assert_eq!(holder_pid(text, dev, 42), Some(10592));
        assert_eq!(holder_pid(text, dev, 43), None, "pid outside our namespace");
        assert_eq!(holder_pid(text, dev, 44), None);
        let shown = Holder {
            pid: 7,
            comm: "nbraidd".into(),
            cmdline: "nbraidd --config a.toml".into(),
        };
        assert_eq!(
            shown.to_string(),
            "process 7 (nbraidd: nbraidd --config a.toml)"
        );
    }
}
