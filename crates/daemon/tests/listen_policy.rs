//! The nbraidd binary and its listeners' safety rules: a TCP listener on an address other
//! machines can reach refuses to start without TLS unless `insecure_listen = true` (which
//! starts with a warning), and each listener may have its own TLS mode (a table in `listen`).

mod common;
use common::{require, run, run_output, Daemon};

use std::net::Ipv4Addr;
use std::path::Path;
use std::process::Command;

const NBRAIDD: &str = env!("CARGO_BIN_EXE_nbraidd");

/// An IPv4 address of this machine other than loopback (eth0's on the test machines).
fn non_loopback_address() -> Ipv4Addr {
    let mut found = Vec::new();
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `list` with a linked list we free below; we only read it.
    assert_eq!(
        unsafe { libc::getifaddrs(&mut list) },
        0,
        "getifaddrs failed"
    );
    let mut at = list;
    while !at.is_null() {
        // SAFETY: `at` is a node of the list getifaddrs returned, not yet freed.
        let ifa = unsafe { &*at };
        // SAFETY: for AF_INET entries ifa_addr points at a sockaddr_in.
        if !ifa.ifa_addr.is_null() && unsafe { (*ifa.ifa_addr).sa_family } as i32 == libc::AF_INET {
            // SAFETY: as above, an AF_INET address is a sockaddr_in.
            let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
            let ip = Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
            if !ip.is_loopback() && !ip.is_unspecified() {
                found.push(ip);
            }
        }
        at = ifa.ifa_next;
    }
    // SAFETY: `list` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(list) };
    *found.first().unwrap_or_else(|| {
        panic!("this machine has no non-loopback IPv4 address to test a non-local listener on")
    })
}

fn config(dir: &Path, daemon: &str) -> std::path::PathBuf {
    let text = format!(
        // 1 MiB of metadata and 1 MiB of block checksums before the 15 MiB region.
        "[daemon]\n{daemon}\n\n[[member]]\nid = \"d0\"\npath = \"d0.img\"\nsize = \"17MiB\"\n\n\
         [[volume]]\nname = \"v\"\nlevel = \"jbod\"\nmembers = [\"d0\"]\n"
    );
    let file = dir.join("arrays.toml");
    std::fs::write(&file, text).unwrap();
    file
}

fn start(config: &Path) -> Daemon {
    // At warn: a consent to listen unprotected is said as a warning.
    Daemon::start(config, "warn", true, |l| l.starts_with("  v:"))
}

/// Every URI printed for the export.
fn uris(d: &Daemon) -> Vec<String> {
    let line = d.printed.iter().find(|l| l.starts_with("  v:")).unwrap();
    line.split_whitespace()
        .skip(1)
        .map(str::to_string)
        .collect()
}

#[test]
fn a_non_loopback_listener_without_tls_needs_insecure_listen() {
    let nbdinfo = require("nbdinfo", "libnbd-bin");
    let ip = non_loopback_address();
    let dir = tempfile::tempdir().unwrap();

    let refused = config(dir.path(), &format!("listen = [\"tcp:{ip}:0\"]"));
    let o = run_output(Command::new(NBRAIDD).arg("--config").arg(&refused));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "nbraidd served {ip} without TLS");
    for says in [
        "refusing to start",
        &format!("tcp:{ip}:0 is reachable from other machines"),
        "without TLS",
        "insecure_listen = true",
        "tls = \"required\"",
    ] {
        assert!(err.contains(says), "missing {says:?} in: {err}");
    }
    assert!(!err.contains("panicked"), "{err}");
    // Refused before anything was created.
    assert!(!dir.path().join("d0.img").exists());

    let consented = config(
        dir.path(),
        &format!("listen = [\"tcp:{ip}:0\"]\ninsecure_listen = true"),
    );
    let daemon = start(&consented);
    let uri = uris(&daemon).pop().unwrap();
    assert!(uri.starts_with(&format!("nbd://{ip}:")), "{uri}");
    let size = run(Command::new(&nbdinfo).args(["--size", &uri]));
    assert_eq!(size.trim(), (15u64 << 20).to_string());
    let err = daemon.stop();
    assert!(
        err.contains("WARNING") && err.contains(&format!("tcp:{ip}:0")),
        "no warning for the insecure listener: {err}"
    );
}

/// One daemon, a plain Unix listener and a TCP listener of its own with TLS required: the
/// printed URIs say which is which, plain NBD works on the first and is refused on the
/// second, which serves `nbds://` with the certificates.
#[test]
fn each_listener_has_its_own_tls_mode() {
    let nbdinfo = require("nbdinfo", "libnbd-bin");
    let dir = tempfile::tempdir().unwrap();
    let pki = dir.path().join("pki");
    std::fs::create_dir(&pki).unwrap();
    nbraid_nbd::testing::make_test_certificates(&pki);
    let sock = dir.path().join("nbd.sock");
    let config = config(
        dir.path(),
        &format!(
            "listen = [\"unix:{}\", {{ address = \"tcp:127.0.0.1:0\", tls = \"required\" }}]\n\
             tls_certificates = \"pki\"",
            sock.display()
        ),
    );
    let daemon = start(&config);
    let uris = uris(&daemon);
    assert_eq!(uris.len(), 2, "{uris:?}");
    let (unix, tcp) = (&uris[0], &uris[1]);
    assert_eq!(unix, &format!("nbd+unix:///v?socket={}", sock.display()));
    assert!(tcp.starts_with("nbds://127.0.0.1:"), "{tcp}");

    let size = run(Command::new(&nbdinfo).args(["--size", unix]));
    assert_eq!(size.trim(), (15u64 << 20).to_string());
    // Without TLS the TCP listener refuses the export.
    let plain = tcp.replacen("nbds://", "nbd://", 1);
    let o = run_output(Command::new(&nbdinfo).args(["--size", &plain]));
    assert!(
        !o.status.success(),
        "plain NBD served on a TLS-required listener"
    );
    let secure = format!("{tcp}?tls-certificates={}", pki.display());
    let size = run(Command::new(&nbdinfo).args(["--size", &secure]));
    assert_eq!(size.trim(), (15u64 << 20).to_string());
    daemon.stop();
}
