//! What clients and listeners on the wire cannot do to nbraidd: a listener beyond loopback
//! with TLS required but no client certificates checked refuses to start (anyone who speaks
//! TLS could read and write every volume); and what they may: a client that negotiated no
//! block size is served requests past 32 MiB, as nbdkit serves them.

mod common;
use common::{require, run, run_output, Daemon};

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

/// Issue 30, point 9d: libnbd without block-size negotiation (as the NBD project's
/// `integrityhuge` test) writes 47 MiB in one request and reads it back in one:
/// served in pieces the volume takes (its limit is 32 MiB a request).
#[test]
fn a_47_mib_request_from_a_client_without_block_sizes_is_served() {
    let nbdsh = require("nbdsh", "python3-libnbd");
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("nbd.sock");
    let config = config(
        dir.path(),
        &format!("listen = [\"unix:{}\"]", sock.display()),
    );
    let daemon = Daemon::start(&config, "error", true, |l| l.starts_with("  v:"));
    let uri = format!("nbd+unix:///v?socket={}", sock.display());
    let script = format!(
        "h.set_request_block_size(False)\n\
         h.connect_uri({uri:?})\n\
         buf = bytes((i * 7 + i // 4099) % 251 for i in range(47 * 1024 * 1024))\n\
         h.pwrite(buf, 1048576)\n\
         h.flush()\n\
         back = h.pread(len(buf), 1048576)\n\
         print('same' if back == buf else 'DIFFERENT')\n\
         print(h.get_block_size(nbd.SIZE_MAXIMUM))\n"
    );
    // nbdsh runs the python3 first on PATH; the system's has the nbd module.
    let path = format!("/usr/bin:{}", std::env::var("PATH").unwrap_or_default());
    let out = run(Command::new(&nbdsh).env("PATH", path).args(["-c", &script]));
    assert_eq!(out.lines().next(), Some("same"), "{out}");
    daemon.stop();
}
