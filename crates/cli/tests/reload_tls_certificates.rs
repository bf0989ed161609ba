//! A reload (SIGHUP) tells the truth about the TLS certificates' files. The server reads them
//! at its start and keeps presenting them: replaced since (a rotated certificate), the reload
//! says they wait for a restart; no longer loading as a start loads them (a key that is not
//! the certificate's, a file that is not PEM), the reload is refused, as the next start is —
//! and the daemon serves on with what it read at its start. Before, every one of these
//! reloaded with "nothing changed live", and a restart then refused to start.

mod common;

use common::{exchange, ok, require, start_refused, test_certificates, tls_jbod_config, Daemon};
use serde_json::Value;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

fn copy_files(from: &Path, to: &Path, names: &[&str]) {
    for n in names {
        std::fs::copy(from.join(n), to.join(n)).unwrap();
    }
}

/// The volume's size as `nbdinfo` sees it over TLS, trusting the CA in `client`.
fn size_over_tls(dir: &Path, client: &Path) -> String {
    let uri = format!(
        "nbds+unix:///v?socket={}&tls-certificates={}",
        dir.join("nbd.sock").display(),
        client.display()
    );
    let o = Command::new(require("nbdinfo"))
        .args(["--size", &uri])
        .output()
        .unwrap();
    ok(o, "nbdinfo over TLS").trim().to_string()
}

/// SIGHUP to the daemon; the reload's event (`config-reloaded` or `config-refused`).
fn reload(d: &Daemon) -> Value {
    let events = || {
        let r = exchange(&d.control, &[br#"{"v": 1, "op": "events"}"#]);
        r[0]["events"].as_array().cloned().unwrap_or_default()
    };
    let before = events().len();
    d.hangup();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let found = (events().into_iter().skip(before))
            .find(|e| e["event"] == "config-reloaded" || e["event"] == "config-refused");
        if let Some(e) = found {
            return e;
        }
        assert!(Instant::now() < deadline, "no reload event");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_reload_says_what_became_of_the_tls_certificates() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (ours, rotated) = (
        test_certificates(d, "ours"),
        test_certificates(d, "rotated"),
    );
    let pki = d.join("pki");
    std::fs::create_dir(&pki).unwrap();
    let server_files = ["ca-cert.pem", "server-cert.pem", "server-key.pem"];
    copy_files(&ours, &pki, &server_files);
    let cfg = tls_jbod_config(d);
    let daemon = Daemon::start(&cfg);
    let size = size_over_tls(d, &ours);

    // Rotated: the reload says the files changed and wait for a restart; the server
    // still presents the certificate it read at its start.
    copy_files(&rotated, &pki, &server_files);
    let e = reload(&daemon);
    let detail = e["detail"].as_str().unwrap_or_default();
    assert_eq!(e["event"], "config-reloaded", "{e}");
    assert!(
        detail.contains("server-cert.pem, server-key.pem in")
            && detail.contains("changed since the start")
            && detail.contains("until a restart"),
        "{detail}"
    );
    assert_eq!(size_over_tls(d, &ours), size);

    // The old key beside the new certificate: refused, as a start refuses it.
    copy_files(&ours, &pki, &["server-key.pem"]);
    let e = reload(&daemon);
    let detail = e["detail"].as_str().unwrap_or_default();
    assert_eq!(e["event"], "config-refused", "{e}");
    assert!(detail.contains("a start would refuse them"), "{detail}");
    assert_eq!(size_over_tls(d, &ours), size);

    // A certificate file that is not PEM: refused too.
    std::fs::write(pki.join("server-cert.pem"), "not a certificate\n").unwrap();
    let e = reload(&daemon);
    assert_eq!(e["event"], "config-refused", "{e}");
    assert_eq!(size_over_tls(d, &ours), size);

    // And the next start does refuse: what the reload said was so.
    let mut daemon = daemon;
    daemon.stop();
    let said = start_refused(&cfg);
    assert!(said.contains("loading the TLS certificates"), "{said}");
}
