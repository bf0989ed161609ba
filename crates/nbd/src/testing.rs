//! Helpers for the tests of this crate and of the crates built on it (daemon, remote
//! members): certificates made at test time with `openssl` (scripts/test installs it).
//! Not for production use.

use std::path::Path;
use std::process::Command;

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("openssl is required (apt-get install openssl; scripts/test installs it)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA, a server certificate for localhost/127.0.0.1 and a client certificate, in the
/// layout GnuTLS tools and qemu read (`ca-cert.pem`, `server-*.pem`, `client-*.pem`), valid
/// for two days. Panics (naming the package) when `openssl` is missing or fails.
pub fn make_test_certificates(dir: &Path) {
    let days = ["-days", "2"];
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca-key.pem",
            "-out",
            "ca-cert.pem",
            "-subj",
            "/CN=nbraid test CA",
            days[0],
            days[1],
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ],
    );
    for (who, ext) in [
        ("server", "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment"),
        ("client", "extendedKeyUsage=clientAuth\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment"),
    ] {
        let (key, csr, cert, extf) = (
            format!("{who}-key.pem"),
            format!("{who}.csr"),
            format!("{who}-cert.pem"),
            format!("{who}.ext"),
        );
        std::fs::write(dir.join(&extf), ext).unwrap();
        openssl(dir, &["req", "-newkey", "rsa:2048", "-nodes", "-keyout", &key, "-out", &csr,
            "-subj", &format!("/CN={}", if who == "server" { "localhost" } else { "nbraid client" })]);
        openssl(dir, &["x509", "-req", "-in", &csr, "-CA", "ca-cert.pem", "-CAkey", "ca-key.pem",
            "-CAcreateserial", "-out", &cert, days[0], days[1], "-extfile", &extf]);
    }
}
