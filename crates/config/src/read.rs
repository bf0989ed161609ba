//! Reading a config file: once, bounded, and never waiting on what is not a file. The path
//! may come from a control client (`reshape`'s `config`), so `/dev/zero` must not fill memory
//! and a FIFO must not hold the reader until someone writes to it.

use crate::ConfigError;
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// Largest config read (bytes). Thousands of members and volumes at a few hundred bytes each,
/// comments and all, stay far below it; the largest shipped example is under 3 KiB.
pub const CONFIG_BYTES_MAX: u64 = 4 << 20;

/// The text of the config file at `path`: a regular file of at most [`CONFIG_BYTES_MAX`]
/// bytes in UTF-8, read once. Anything else is a [`ConfigError::Read`] saying what it is.
pub fn read_text(path: &Path) -> Result<String, ConfigError> {
    read_bounded(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })
}

fn read_bounded(path: &Path) -> io::Result<String> {
    // O_NONBLOCK: opening a FIFO with no writer returns at once instead of waiting for one
    // (it changes nothing for a regular file).
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let meta = file.metadata()?;
    let ft = meta.file_type();
    if !ft.is_file() {
        let what = if ft.is_dir() {
            "a directory"
        } else if ft.is_fifo() {
            "a FIFO"
        } else if ft.is_char_device() {
            "a character device"
        } else if ft.is_block_device() {
            "a block device"
        } else if ft.is_socket() {
            "a socket"
        } else {
            "not a file"
        };
        return Err(invalid(format!("{what}, not a regular file")));
    }
    let too_large = |len: u64| {
        invalid(format!(
            "{len} bytes, larger than a config may be ({CONFIG_BYTES_MAX} bytes)"
        ))
    };
    if meta.len() > CONFIG_BYTES_MAX {
        return Err(too_large(meta.len()));
    }
    // Bounded again while reading: the file may grow after the fstat.
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(CONFIG_BYTES_MAX + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > CONFIG_BYTES_MAX {
        return Err(too_large(bytes.len() as u64));
    }
    String::from_utf8(bytes).map_err(|e| {
        invalid(format!(
            "not UTF-8 text (byte {} is not)",
            e.utf8_error().valid_up_to()
        ))
    })
}

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    /// `read_text(path)` on a thread: its result, or a failure if it has not returned within
    /// 5 s (a read blocked on a FIFO would otherwise hang the test).
    fn read_within(path: &Path) -> Result<String, ConfigError> {
        let (tx, rx) = mpsc::channel();
        let path = path.to_path_buf();
        std::thread::spawn(move || tx.send(read_text(&path)));
        rx.recv_timeout(Duration::from_secs(5))
            .expect("reading the config returned within 5 s")
    }

    #[test]
    fn a_regular_file_is_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("a.toml");
        std::fs::write(&f, "[daemon]\n").unwrap();
        assert_eq!(read_within(&f).unwrap(), "[daemon]\n");
    }

    #[test]
    fn a_fifo_is_refused_at_once_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("fifo.toml");
        let c = std::ffi::CString::new(f.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mkfifo(3) with a NUL-terminated path we own.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = read_within(&f).unwrap_err().to_string();
        assert!(
            e.contains("fifo.toml") && e.contains("a FIFO, not a regular file"),
            "{e}"
        );
    }

    #[test]
    fn a_device_is_refused_without_reading_it() {
        let e = read_within(Path::new("/dev/zero")).unwrap_err().to_string();
        assert!(
            e.contains("/dev/zero") && e.contains("a character device"),
            "{e}"
        );
    }

    #[test]
    fn a_directory_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let e = read_within(dir.path()).unwrap_err().to_string();
        assert!(e.contains("a directory, not a regular file"), "{e}");
    }

    #[test]
    fn a_file_past_the_cap_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("big.toml");
        let fits = "#".repeat(CONFIG_BYTES_MAX as usize);
        std::fs::write(&f, &fits).unwrap();
        assert_eq!(read_within(&f).unwrap().len() as u64, CONFIG_BYTES_MAX);
        std::fs::write(&f, fits + "\n").unwrap();
        let e = read_within(&f).unwrap_err().to_string();
        assert!(
            e.contains("big.toml")
                && e.contains(&format!("{} bytes, larger", CONFIG_BYTES_MAX + 1)),
            "{e}"
        );
    }
}
