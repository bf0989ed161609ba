//! A TLS certificates folder that lacks a file the server reads (`server-key.pem` deleted,
//! an empty folder) fails `nbraidd --check` naming the folder and the file, and a reload
//! (SIGHUP) on it is refused, the daemon serving on as before — as the next start would
//! fail, not later at that start.

mod common;
use common::returning::{control, wait_for};
use common::{run_output, Daemon};

use std::path::Path;
use std::process::Command;
use std::time::Duration;

const NBRAIDD: &str = env!("CARGO_BIN_EXE_nbraidd");

/// A JBOD on one file member, a Unix listener with TLS required, certificates in `pki`.
fn config(dir: &Path) -> std::path::PathBuf {
    let text = format!(
        "[daemon]\nlisten = [\"unix:{}\"]\ntls = \"required\"\ntls_certificates = \"pki\"\n\n\
         [[member]]\nid = \"d0\"\npath = \"d0.img\"\nsize = \"17MiB\"\n\n\
         [[volume]]\nname = \"v\"\nlevel = \"jbod\"\nmembers = [\"d0\"]\n",
        dir.join("nbd.sock").display()
    );
    let file = dir.join("arrays.toml");
    std::fs::write(&file, text).unwrap();
    file
}

/// `nbraidd --check` on `config`: whether it passed, and what it said.
fn check(config: &Path) -> (bool, String) {
    let o = run_output(
        Command::new(NBRAIDD)
            .arg("--check")
            .arg("--config")
            .arg(config),
    );
    let said = String::from_utf8_lossy(&o.stdout) + String::from_utf8_lossy(&o.stderr);
    (o.status.success(), said.into_owned())
}

#[test]
fn a_certificates_folder_without_the_key_fails_the_check_and_the_reload() {
    let dir = tempfile::tempdir().unwrap();
    let pki = dir.path().join("pki");
    std::fs::create_dir(&pki).unwrap();
    nbraid_nbd::testing::make_test_certificates(&pki);
    let config = config(dir.path());
    let (passed, said) = check(&config);
    assert!(passed, "{said}");
    let daemon = Daemon::start(&config, "warn", false, |l| {
        l.starts_with("nbraidd: control socket")
    });

    std::fs::remove_file(pki.join("server-key.pem")).unwrap();
    let (passed, said) = check(&config);
    assert!(!passed, "a check passed without server-key.pem: {said}");
    assert!(
        said.contains(&format!("{} has no server-key.pem", pki.display()))
            && said.contains("tls_certificates = \"pki\""),
        "{said}"
    );

    let events = || {
        let r = control(&config, r#"{"v": 1, "op": "events"}"#);
        r["events"].as_array().cloned().unwrap_or_default()
    };
    let before = events().len();
    // SAFETY: kill(2) on our own child's pid has no memory effects.
    assert_eq!(
        unsafe { libc::kill(daemon.child.id() as libc::pid_t, libc::SIGHUP) },
        0
    );
    let mut refused = None;
    wait_for("the reload's event", Duration::from_secs(10), || {
        refused = events()
            .into_iter()
            .skip(before)
            .find(|e| e["event"] == "config-refused" || e["event"] == "config-reloaded");
        refused.is_some()
    });
    let e = refused.unwrap();
    assert_eq!(e["event"], "config-refused", "{e}");
    let detail = e["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("has no server-key.pem"), "{detail}");
    // The daemon serves on, on the config it started with.
    let status = control(&config, r#"{"v": 1, "op": "status"}"#);
    assert_eq!(status["ok"], true, "{status}");
    daemon.stop();
}
