//! `nbraidd` outside systemd (no control group to kill at stop): the `on_event` hook's
//! processes do not outlive the daemon. At exit it waits a little for runs still going,
//! then kills their process groups, and says so in its log.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const NBRAIDD: &str = env!("CARGO_BIN_EXE_nbraidd");

/// A RAID 1 of two 16 MiB files, serving on a Unix socket, its hook `hook.sh`.
fn write_config(dir: &Path) -> std::path::PathBuf {
    let mut text = format!(
        "[daemon]\nlisten = [\"unix:{}\"]\non_event = \"hook.sh\"\n\n",
        dir.join("nbd.sock").display()
    );
    for i in 0..2 {
        text += &format!("[[member]]\nid = \"d{i}\"\npath = \"d{i}.img\"\nsize = \"16MiB\"\n\n");
    }
    text += "[[volume]]\nname = \"r1\"\nlevel = \"raid1\"\nmembers = [\"d0\", \"d1\"]\n";
    let file = dir.join("arrays.toml");
    std::fs::write(&file, text).unwrap();
    file
}

/// A hook that starts a long `sleep`, writes its pid to `pid`, and waits for it.
fn write_hook(dir: &Path, pid: &Path) {
    let script = dir.join("hook.sh");
    let text = format!(
        "#!/bin/sh\nsleep 600 &\necho $! > '{}.new'\nmv '{0}.new' '{0}'\nwait\n",
        pid.display()
    );
    std::fs::write(&script, text).unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Sends `signal` to `child`.
fn signal(child: &Child, signal: libc::c_int) {
    // SAFETY: kill(2) on our own child's pid has no memory effects.
    let r = unsafe { libc::kill(child.id() as libc::pid_t, signal) };
    assert_eq!(r, 0, "kill failed");
}

/// Whether process `pid` is gone (or a zombie nobody reaped yet: it runs no more).
fn gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z')),
    }
}

/// Waits (`limit` at most) until `what` holds.
fn wait_until(limit: Duration, mut what: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if what() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    what()
}

/// Found by a service hunt: a hook still running when the daemon stopped outside systemd
/// outlived it (its `sleep` ran on, reparented).
#[test]
fn a_hook_still_running_at_exit_is_killed_with_its_processes_and_said() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path());
    let pid_file = dir.path().join("hook.pid");
    write_hook(dir.path(), &pid_file);
    let log = dir.path().join("nbraidd.log");
    let mut child = Command::new(NBRAIDD)
        .arg("--config")
        .arg(&config)
        .args(["--log-level", "info"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("start nbraidd");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    // Up to the control socket's line: SIGHUP is handled by then.
    let ready = lines.any(|l| l.is_ok_and(|l| l.starts_with("nbraidd: control socket")));
    assert!(ready, "nbraidd did not start: {:?}", child.wait());
    std::thread::spawn(move || for _ in lines.by_ref() {});
    // A reload publishes `config-reloaded`: the hook runs.
    signal(&child, libc::SIGHUP);
    assert!(
        wait_until(Duration::from_secs(30), || pid_file.exists()),
        "the hook did not run"
    );
    let sleep_pid: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    signal(&child, libc::SIGTERM);
    let exited = wait_until(Duration::from_secs(60), || {
        child.try_wait().unwrap().is_some()
    });
    let said = std::fs::read_to_string(&log).unwrap_or_default();
    if !exited {
        let _ = child.kill();
    }
    let outlived = !wait_until(Duration::from_secs(2), || gone(sleep_pid));
    if outlived {
        // SAFETY: kill(2) has no memory effects; the pid is the test's hook's sleep.
        unsafe { libc::kill(sleep_pid as libc::pid_t, libc::SIGKILL) };
    }
    assert!(exited, "nbraidd did not exit: {said}");
    assert!(!outlived, "the hook's sleep outlived the daemon: {said}");
    assert!(
        said.contains("on_event hook run(s) still going") && said.contains("killed"),
        "{said}"
    );
}
