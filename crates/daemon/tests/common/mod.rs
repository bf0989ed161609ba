//! Running external tools from tests: found or a loud failure naming the Debian package,
//! bounded in time, output captured.
#![allow(dead_code)] // each test binary uses its own subset

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
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
