//! A stop whose drain hangs (a remote member's server stopped answering, a client's write
//! waiting on it) is cut short by a second SIGTERM: nbraidd exits at once, non-zero, saying
//! the volumes resync at the next start — the operator is not left with only SIGKILL.

mod common;
use common::returning::*;

use nbraid_daemon::nbd::client::Client;
use std::io::Read;
use std::time::{Duration, Instant};

fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: kill(2) on a child of this test has no memory effects.
    let r = unsafe { libc::kill(pid as libc::pid_t, sig) };
    assert_eq!(r, 0, "kill {pid} {sig}");
}

#[test]
fn a_second_sigterm_during_a_hung_drain_exits_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let (ksock, far) = (dir.path().join("kit.sock"), dir.path().join("far.img"));
    let config = raid1_config(dir.path());
    // A member given a minute to answer: the drain waits on it that long.
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        text.replace("timeout = \"2s\"", "timeout = \"60s\""),
    )
    .unwrap();
    let kit = Kit::start(&ksock, &far, &dir.path().join("kit.log"));
    let mut daemon = start_daemon(&config, true);
    wait_for("a healthy volume", Duration::from_secs(10), || {
        status(&config)["state"] == "healthy"
    });

    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = rt
        .block_on(Client::connect(&volume_uri(dir.path())))
        .unwrap();
    // The member's server stops answering; a write to the mirror waits on it.
    signal(kit.0 .0.id(), libc::SIGSTOP);
    let _hung = rt.spawn(async move { client.write(0, vec![7u8; 1 << 20].into()).await });
    std::thread::sleep(Duration::from_millis(300));

    let pid = daemon.child.id();
    signal(pid, libc::SIGTERM);
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        daemon.child.try_wait().unwrap().is_none(),
        "the drain did not hang: this test shows nothing"
    );
    let second = Instant::now();
    signal(pid, libc::SIGTERM);
    let status = loop {
        if let Some(s) = daemon.child.try_wait().unwrap() {
            break s;
        }
        assert!(
            second.elapsed() < Duration::from_secs(5),
            "nbraidd ignored a second SIGTERM during its drain"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    let _ = daemon
        .child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr);
    assert!(
        !status.success(),
        "a cut-short stop exited {status}: {stderr}"
    );
    assert!(
        stderr.contains("cut the drain short") && stderr.contains("next start resyncs"),
        "{stderr}"
    );
    signal(kit.0 .0.id(), libc::SIGCONT);
}
