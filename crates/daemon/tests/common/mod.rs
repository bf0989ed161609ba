//! Running external tools from tests: found or a loud failure naming the Debian package,
//! bounded in time, output captured.
#![allow(dead_code)] // each test binary uses its own subset

pub mod returning;

use std::ffi::OsStr;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Longest any external command may run before the test fails.
pub const CMD_LIMIT: Duration = Duration::from_secs(300);

/// Finds `tool` in PATH or fails with the Debian package to install.
pub fn require(tool: &str, package: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        let p = dir.join(tool);
        if p.is_file() {
            return p;
        }
    }
    panic!(
        "required tool `{tool}` is not installed: install the Debian package `{package}` \
         (scripts/test installs every package these tests need)"
    );
}

/// Runs a command to completion (bounded), returning its output.
pub fn run_output(cmd: &mut Command) -> Output {
    let desc = format!("{cmd:?}");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {desc}: {e}"));
    let start = Instant::now();
    // Drain pipes on threads so a chatty child cannot block.
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let t_out = std::thread::spawn(move || {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut out, &mut v).ok();
        v
    });
    let t_err = std::thread::spawn(move || {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut err, &mut v).ok();
        v
    });
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > CMD_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{desc} did not finish within {CMD_LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Output {
        status,
        stdout: t_out.join().unwrap(),
        stderr: t_err.join().unwrap(),
    }
}

/// Runs a command that must succeed; returns its stdout.
pub fn run(cmd: &mut Command) -> String {
    let desc = format!("{cmd:?}");
    let o = run_output(cmd);
    assert!(
        o.status.success(),
        "{desc} failed with {}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A running `nbraidd`, with the lines it printed up to the one it was waited for.
pub struct Daemon {
    pub child: std::process::Child,
    pub printed: Vec<String>,
}

impl Daemon {
    /// Starts nbraidd on `config` and reads its standard output until a line satisfies
    /// `ready` (at most 30 s); standard error is captured for [`Daemon::stop`] when
    /// `capture_stderr`, else inherited.
    pub fn start(
        config: &std::path::Path,
        log_level: &str,
        capture_stderr: bool,
        ready: impl Fn(&str) -> bool,
    ) -> Daemon {
        use std::io::BufRead;
        let mut child = Command::new(env!("CARGO_BIN_EXE_nbraidd"))
            .arg("--config")
            .arg(config)
            .args(["--log-level", log_level])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(if capture_stderr {
                Stdio::piped()
            } else {
                Stdio::inherit()
            })
            .spawn()
            .expect("start nbraidd");
        let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let mut printed = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        while !printed.last().is_some_and(|l: &String| ready(l)) {
            assert!(Instant::now() < deadline, "nbraidd not ready: {printed:?}");
            match lines.next() {
                Some(Ok(l)) => printed.push(l),
                _ => panic!(
                    "nbraidd exited early: {:?}, printed {printed:?}",
                    child.wait()
                ),
            }
        }
        // Keep draining stdout so the daemon never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines.by_ref() {});
        Daemon { child, printed }
    }

    /// SIGTERM, checks a clean exit, and returns what it wrote to a captured stderr.
    pub fn stop(mut self) -> String {
        use std::io::Read;
        // SAFETY: kill(2) on our own child's pid has no memory effects.
        let r = unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        assert_eq!(r, 0, "kill failed");
        let mut stderr = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            let _ = e.read_to_string(&mut stderr);
        }
        let status = self.child.wait().unwrap();
        assert!(status.success(), "nbraidd exited with {status}: {stderr}");
        stderr
    }
}

impl Drop for Daemon {
    /// A failed test does not leave its daemon running (holding its sockets and the test
    /// harness's output pipe).
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// nbdkit serving `plugin_args` (a plugin, its filters and parameters) on the Unix socket
/// `sock`; SIGKILLed on drop.
pub struct Nbdkit(pub Child);

impl Nbdkit {
    pub fn start<I, S>(sock: &Path, plugin_args: I) -> Nbdkit
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        require("nbdkit", "nbdkit");
        let _ = std::fs::remove_file(sock);
        let child = Command::new("nbdkit")
            .args(["--foreground", "--exit-with-parent", "--unix"])
            .arg(sock)
            .args(plugin_args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("start nbdkit");
        let deadline = Instant::now() + Duration::from_secs(20);
        // The socket file appears at bind(), before listen(): wait until a connect succeeds.
        while UnixStream::connect(sock).is_err() {
            assert!(Instant::now() < deadline, "nbdkit did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        Nbdkit(child)
    }
}

impl Drop for Nbdkit {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
