//! Loop devices over files, for the tests that need block-device members (`losetup`,
//! `blockdev`: util-linux; the tests run as root, as CI does).

use super::{ok, require};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A loop device over a file, made writable again and detached when dropped (a read-only
/// flag outlives the detach).
pub struct Loop {
    pub path: PathBuf,
}

impl Loop {
    pub fn attach(backing: &Path, len_bytes: u64) -> Loop {
        let f = std::fs::File::create(backing).unwrap();
        f.set_len(len_bytes).unwrap();
        let out = ok(
            Command::new(tool("losetup"))
                .args(["--find", "--show"])
                .arg(backing)
                .output()
                .unwrap(),
            "losetup --find --show (this test needs loop devices: run as root)",
        );
        Loop {
            path: PathBuf::from(out.trim()),
        }
    }

    pub fn path(&self) -> &str {
        self.path.to_str().unwrap()
    }

    pub fn set_read_only(&self, on: bool) {
        let flag = if on { "--setro" } else { "--setrw" };
        let out = Command::new(tool("blockdev"))
            .arg(flag)
            .arg(&self.path)
            .output();
        ok(out.unwrap(), "blockdev");
    }

    /// Whether another O_EXCL open of the device succeeds (nobody holds it).
    pub fn is_free(&self) -> bool {
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_EXCL)
            .open(&self.path)
            .is_ok()
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = Command::new(tool("blockdev"))
            .arg("--setrw")
            .arg(&self.path)
            .status();
        let _ = Command::new(tool("losetup"))
            .arg("-d")
            .arg(&self.path)
            .status();
    }
}

/// A util-linux tool (under /sbin, which a non-login PATH may lack).
pub fn tool(name: &str) -> PathBuf {
    ["/usr/sbin", "/sbin"]
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| require(name))
}
