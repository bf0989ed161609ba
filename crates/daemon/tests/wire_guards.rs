//! What clients and listeners on the wire cannot do to nbraidd: a listener beyond loopback
//! with TLS required but no client certificates checked refuses to start (anyone who speaks
//! TLS could read and write every volume).

mod common;
use common::run_output;

use std::path::Path;
use std::process::Command;

const NBRAIDD: &str = env!("CARGO_BIN_EXE_nbraidd");

fn config(dir: &Path, daemon: &str) -> std::path::PathBuf {
    let text = format!(
        "[daemon]\n{daemon}\n\n[[member]]\nid = \"d0\"\npath = \"d0.img\"\nsize = \"64MiB\"\n\n\
         [[volume]]\nname = \"v\"\nlevel = \"jbod\"\nmembers = [\"d0\"]\n"
    );
    let file = dir.join("arrays.toml");
    std::fs::write(&file, text).unwrap();
    file
}

/// TLS required on 0.0.0.0 without `tls_verify_clients`: refused before anything is bound or
/// created, with the ways out named. (Only the refusal: this test never listens beyond
/// loopback.)
#[test]
fn tls_without_client_verification_beyond_loopback_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let pki = dir.path().join("pki");
    std::fs::create_dir(&pki).unwrap();
    nbraid_nbd::testing::make_test_certificates(&pki);
    let refused = config(
        dir.path(),
        "listen = [\"tcp:0.0.0.0:0\"]\ntls = \"required\"\ntls_certificates = \"pki\"",
    );
    let o = run_output(Command::new(NBRAIDD).arg("--config").arg(&refused));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success(),
        "nbraidd served 0.0.0.0 to any TLS client"
    );
    for says in [
        "refusing to start",
        "tcp:0.0.0.0:0 is reachable from other machines",
        "does not verify clients",
        "tls_verify_clients = true",
        "insecure_unverified_clients = true",
    ] {
        assert!(err.contains(says), "missing {says:?} in: {err}");
    }
    assert!(!err.contains("panicked"), "{err}");
    assert!(!dir.path().join("d0.img").exists());
}
