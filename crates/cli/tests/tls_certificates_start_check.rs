//! `nbraidd --check` and the start judge the TLS certificates as the start loads them. A key
//! that is not the certificate's passed the check (only missing files failed it), and the
//! start then refused ("KeyMismatch"; `check_tls_certificates.rs` shows both checks now
//! fail). A server certificate that expired passed both without a word — the server presents
//! it and every client refuses it — and now each warns, naming the file and when it expired.

mod common;

use common::{expire_server_certificate, nbraidd_path, test_certificates, tls_jbod_config};
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `nbraidd --check`: whether it passed, and what it said.
fn check(cfg: &Path) -> (bool, String) {
    let o = Command::new(nbraidd_path())
        .args(["--check", "--config"])
        .arg(cfg)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&o.stdout) + String::from_utf8_lossy(&o.stderr);
    (o.status.success(), said.into_owned())
}

/// What the daemon logs at its start on `cfg`, up to serving (then it is stopped).
fn start_log(cfg: &Path) -> String {
    let mut child = Command::new(nbraidd_path())
        .arg("--config")
        .arg(cfg)
        .args(["--log-level", "warn"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !cfg.with_file_name("nbd.sock").exists() {
        assert!(Instant::now() < deadline, "the daemon did not serve");
        assert!(child.try_wait().unwrap().is_none(), "the daemon exited");
        std::thread::sleep(Duration::from_millis(50));
    }
    // SAFETY: kill(2) on our own child's pid has no memory effects.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let mut log = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut log)
        .unwrap();
    assert!(child.wait().unwrap().success(), "{log}");
    log
}

#[test]
fn an_expired_server_certificate_is_warned_of_by_the_check_and_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let pki = test_certificates(d, "pki");
    let cfg = tls_jbod_config(d);
    let (passed, said) = check(&cfg);
    assert!(passed && !said.contains("expired"), "{said}");
    expire_server_certificate(&pki);
    let (passed, said) = check(&cfg);
    let file = pki.join("server-cert.pem");
    let warning = format!(
        "warning: the server certificate {} expired at ",
        file.display()
    );
    assert!(passed && said.contains(&warning), "{said}");
    let log = start_log(&cfg);
    assert!(
        log.contains("expired at") && log.contains("every client refuses it"),
        "{log}"
    );
}
