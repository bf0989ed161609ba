//! `nbraid check` judges the TLS certificates as the start loads them, as `nbraidd --check`
//! does: a key that is not the certificate's and a file that is not PEM passed it (the start
//! then refused them), and an expired server certificate passed without a word (the server
//! presents it and every client refuses it). Now the first two fail the check with the
//! loader's reason, the third is warned of, naming the file and when it expired.

mod common;

use common::{
    expire_server_certificate, nbraid, nbraidd_path, ok, test_certificates, tls_jbod_config,
};
use std::path::Path;
use std::process::Command;

/// Whether `nbraid check` and `nbraidd --check` passed, and what each said.
fn checks(cfg: &Path) -> [(bool, String); 2] {
    let c = cfg.to_str().unwrap();
    let daemon = Command::new(nbraidd_path())
        .args(["--config", c, "--check"])
        .output()
        .unwrap();
    [nbraid(&["check", c]), daemon].map(|o| {
        let said = String::from_utf8_lossy(&o.stdout) + String::from_utf8_lossy(&o.stderr);
        (o.status.success(), said.into_owned())
    })
}

#[test]
fn a_key_not_the_certificates_or_a_file_not_pem_fails_nbraid_check_as_it_fails_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (ours, other) = (test_certificates(d, "pki"), test_certificates(d, "other"));
    let cfg = tls_jbod_config(d);
    for (passed, said) in checks(&cfg) {
        assert!(passed, "{said}");
    }
    let key = ours.join("server-key.pem");
    let good_key = std::fs::read(&key).unwrap();
    std::fs::copy(other.join("server-key.pem"), &key).unwrap();
    for (passed, said) in checks(&cfg) {
        assert!(
            !passed,
            "a check passed with another certificate's key: {said}"
        );
        assert!(
            said.contains("a start would fail") && said.contains("loading the TLS certificates"),
            "{said}"
        );
    }
    let [(_, cli), _] = checks(&cfg);
    assert!(cli.contains("nbraidd would refuse to start"), "{cli}");

    std::fs::write(&key, good_key).unwrap();
    std::fs::write(ours.join("server-cert.pem"), "not a certificate\n").unwrap();
    for (passed, said) in checks(&cfg) {
        assert!(!passed, "a check passed with a certificate not PEM: {said}");
        assert!(said.contains("loading the TLS certificates"), "{said}");
    }
    let o = nbraid(&["check", cfg.to_str().unwrap(), "--json"]);
    assert!(!o.status.success());
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let refused = v["tls_certificates"]["refused"]
        .as_str()
        .unwrap_or_default();
    assert!(refused.contains("loading the TLS certificates"), "{v:#}");
}

#[test]
fn an_expired_server_certificate_is_warned_of_by_nbraid_check() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let pki = test_certificates(d, "pki");
    let cfg = tls_jbod_config(d);
    let c = cfg.to_str().unwrap();
    let said = ok(nbraid(&["check", c]), "check");
    assert!(!said.contains("expired"), "{said}");
    expire_server_certificate(&pki);
    let warning = format!(
        "warning: the server certificate {} expired at ",
        pki.join("server-cert.pem").display()
    );
    for (passed, said) in checks(&cfg) {
        assert!(passed && said.contains(&warning), "{said}");
    }
    let o = nbraid(&["check", c, "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let warned = v["tls_certificates"]["warnings"][0]
        .as_str()
        .unwrap_or_default();
    assert!(warned.contains("expired at"), "{v:#}");
}
