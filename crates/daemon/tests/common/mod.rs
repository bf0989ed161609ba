//! Running external tools from tests: found or a loud failure naming the Debian package,
//! bounded in time, output captured.
#![allow(dead_code)] // each test binary uses its own subset

pub mod fio_verify;
pub mod reshape_fio;
pub mod returning;

use std::ffi::OsStr;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
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
            eprintln!("{}", stall_report(&desc));
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

/// What a test's fixture can tell about what it serves (in-process), printed when an external
/// command times out: a hang there is most likely a request the server never answered.
type StateReport = Arc<dyn Fn() -> String + Send + Sync>;

static STATE_REPORTS: Mutex<Vec<(u64, StateReport)>> = Mutex::new(Vec::new());

/// A registered [`StateReport`], withdrawn when dropped.
pub struct OnStall(u64);

/// Registers `report` to be printed (with every thread's stack) if an external command
/// times out while the returned guard lives. Tests run in parallel: every live fixture's
/// report is printed.
pub fn report_on_stall(report: impl Fn() -> String + Send + Sync + 'static) -> OnStall {
    record_panics();
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let id = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut reports = STATE_REPORTS.lock().unwrap_or_else(|p| p.into_inner());
    reports.push((id, Arc::new(report)));
    OnStall(id)
}

impl Drop for OnStall {
    fn drop(&mut self) {
        let mut reports = STATE_REPORTS.lock().unwrap_or_else(|p| p.into_inner());
        reports.retain(|(id, _)| *id != self.0);
    }
}

/// Panics of this process so far (thread, message): a panic in a server task loses its
/// request's reply, and the client waits for it forever.
static PANICS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Records every panic in [`PANICS`] as well as printing it as before.
fn record_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let before = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let thread = std::thread::current().name().unwrap_or("?").to_string();
            if let Ok(mut p) = PANICS.lock() {
                p.push(format!("thread {thread}: {info}"));
            }
            before(info);
        }));
    });
}

/// Longest a state report or the stack dump may take (a report that takes a lock the hang
/// holds never returns: that is worth knowing too).
const REPORT_LIMIT: Duration = Duration::from_secs(60);

/// The state of this process while `desc` hangs: every registered fixture's report, then the
/// stacks of all its threads (the server runs in-process).
fn stall_report(desc: &str) -> String {
    let mut out = format!(
        "==== {desc} did not finish within {CMD_LIMIT:?}; the state of this test process \
         (pid {}) before it is killed:\n",
        std::process::id()
    );
    let reports: Vec<StateReport> = {
        let reports = STATE_REPORTS.lock().unwrap_or_else(|p| p.into_inner());
        reports.iter().map(|(_, r)| r.clone()).collect()
    };
    for report in reports {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(report());
        });
        match rx.recv_timeout(REPORT_LIMIT) {
            Ok(text) => out += &format!("---- fixture state:\n{text}\n"),
            Err(_) => out += &format!("---- a fixture's state report hung for {REPORT_LIMIT:?}\n"),
        }
    }
    let panics = PANICS.lock().map(|p| p.clone()).unwrap_or_default();
    out += &format!("---- panics in this process so far: {}\n", panics.len());
    for p in panics {
        out += &format!("  {p}\n");
    }
    out += &format!(
        "---- thread stacks:\n{}\n==== end of state\n",
        thread_stacks()
    );
    out
}

/// Every thread's stack of this process, by eu-stack (elfutils) or gdb; a loud note when
/// neither is installed (scripts/test installs elfutils).
fn thread_stacks() -> String {
    let pid = std::process::id().to_string();
    let tools: [(&str, Vec<&str>); 2] = [
        ("eu-stack", vec!["-p", &pid]),
        (
            "gdb",
            vec![
                "-batch",
                "-nx",
                "-ex",
                "set pagination off",
                "-ex",
                "thread apply all bt",
                "-p",
                &pid,
            ],
        ),
    ];
    let mut tried = Vec::new();
    for (tool, args) in tools {
        let mut cmd = Command::new(tool);
        cmd.args(&args);
        match output_within(&mut cmd, REPORT_LIMIT) {
            // One that ran but failed (ptrace refused) gives way to the next; what it printed
            // is kept. eu-stack also fails when one thread cannot be unwound whole: the
            // stacks it printed are the answer then.
            Ok(o)
                if !o.status.success() && !String::from_utf8_lossy(&o.stdout).contains("TID ") =>
            {
                tried.push(format!(
                    "{tool} {}:\n{}{}",
                    o.status,
                    String::from_utf8_lossy(&o.stdout),
                    String::from_utf8_lossy(&o.stderr)
                ))
            }
            Ok(o) => {
                return format!(
                    "{tool} {}:\n{}{}",
                    o.status,
                    String::from_utf8_lossy(&o.stdout),
                    String::from_utf8_lossy(&o.stderr)
                )
            }
            Err(e) => tried.push(format!("{tool}: {e}")),
        }
    }
    format!(
        "!!!! NO THREAD STACKS: install the Debian package `elfutils` (eu-stack) or `gdb` \
         ({})",
        tried.join("; ")
    )
}

/// `cmd`'s output, or why there is none (it could not start, or ran past `limit`). The
/// output goes to files, not pipes: a stack tool stops every thread of this process while it
/// prints, the one that would drain a pipe too — it filled the pipe and waited for ever.
fn output_within(cmd: &mut Command, limit: Duration) -> Result<Output, String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let file = |name: &str| std::fs::File::create(dir.path().join(name));
    let (out, err) = (
        file("out").map_err(|e| e.to_string())?,
        file("err").map_err(|e| e.to_string())?,
    );
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .map_err(|e| e.to_string())?;
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait());
    });
    let status = match rx.recv_timeout(limit) {
        Ok(r) => r.map_err(|e| e.to_string())?,
        Err(_) => {
            // SAFETY: kill(2) on our own child's pid has no memory effects.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            return Err(format!("no answer within {limit:?}"));
        }
    };
    let read = |name: &str| std::fs::read(dir.path().join(name)).unwrap_or_default();
    Ok(Output {
        status,
        stdout: read("out"),
        stderr: read("err"),
    })
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
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_nbraidd"));
        cmd.arg("--config")
            .arg(config)
            .args(["--log-level", log_level]);
        Daemon::spawn(&mut cmd, capture_stderr, ready)
    }

    /// [`Daemon::start`] of a command of the caller's (nbraidd under `sh -c 'ulimit ...'`).
    pub fn spawn(cmd: &mut Command, capture_stderr: bool, ready: impl Fn(&str) -> bool) -> Daemon {
        use std::io::BufRead;
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(if capture_stderr {
                Stdio::piped()
            } else {
                Stdio::inherit()
            })
            .spawn()
            .expect("start nbraidd");
        // Read on a thread: a daemon that prints nothing more must not block the wait past its
        // limit. The thread keeps draining stdout afterwards, so the daemon never blocks on a
        // full pipe.
        let lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in lines {
                let _ = tx.send(line);
            }
        });
        let mut printed = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        while !printed.last().is_some_and(|l: &String| ready(l)) {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(Ok(l)) => printed.push(l),
                // Not left running once the test gives up on it (found serving, orphaned,
                // half an hour after a start that took longer than this limit).
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!("nbraidd not ready within 30 s (killed): {printed:?}");
                }
                _ => panic!(
                    "nbraidd exited early: {:?}, printed {printed:?}",
                    child.wait()
                ),
            }
        }
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
/// `sock`; stopped on drop.
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
    /// SIGTERM first: the `sh` plugin's temporary directory goes with it (a SIGKILL left it
    /// in /tmp); SIGKILL if it has not exited within 5 s.
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own child's pid, which `wait` below has not reaped yet.
        unsafe { libc::kill(self.0.id() as libc::pid_t, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(5);
        while matches!(self.0.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
